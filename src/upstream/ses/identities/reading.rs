//! The task that keeps the identities: the account's tenants listed at its start and every
//! refresh, each tenant read when due. A read a message waits for starts at once; the
//! background reads (listed tenants, refreshes, early reads) take at most
//! [`BACKGROUND_CALLS`] of the API's calls at once, so one call is always left for the reads
//! messages wait for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use super::Identities;
use crate::upstream::ses::api::{Api, CALLS_AT_ONCE};

/// The API's calls at once that background reads may take.
pub const BACKGROUND_CALLS: usize = CALLS_AT_ONCE - 1;

/// Lists the tenants when due, starts a read of each tenant due (each its own task, so that
/// a slow read holds back no other tenant's; the API bounds how many are out at once), then
/// sleeps until the next is due or a check or a finished read wakes it; ends when the
/// identities' forwarder is gone.
pub(super) async fn read_on(identities: Weak<Identities>, api: Arc<Api>, wake: Arc<Notify>) {
    let background = Arc::new(Semaphore::new(BACKGROUND_CALLS));
    let listing = Arc::new(AtomicBool::new(false));
    let mut list_due = Instant::now();
    loop {
        let next = {
            let Some(strong) = identities.upgrade() else {
                return;
            };
            let now = Instant::now();
            if list_due <= now && !listing.swap(true, Ordering::SeqCst) {
                list_due = now + strong.refresh;
                let (identities, api, wake) = (identities.clone(), api.clone(), wake.clone());
                let (background, listing) = (background.clone(), listing.clone());
                tokio::spawn(async move {
                    let permit = background.acquire_owned().await.expect("never closed");
                    let max = identities.upgrade().map_or(0, |i| i.max);
                    let names = api.tenants(max).await;
                    drop(permit);
                    listing.store(false, Ordering::SeqCst);
                    if let Some(identities) = identities.upgrade() {
                        identities.listed(names);
                    }
                    wake.notify_one();
                });
            }
            for (tenant, permit) in strong.take_due(now, &background) {
                let (identities, api, wake) = (identities.clone(), api.clone(), wake.clone());
                tokio::spawn(async move {
                    let read = api.identities(&tenant).await;
                    drop(permit);
                    if let Some(identities) = identities.upgrade() {
                        identities.learned(&tenant, read);
                        wake.notify_one();
                    }
                });
            }
            let room = background.available_permits() > 0;
            strong
                .next_due(room)
                .map_or(list_due, |due| due.min(list_due))
        };
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = wake.notified() => {}
        }
    }
}
