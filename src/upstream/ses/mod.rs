//! `ses://REGION`: Amazon SES over its v2 API, one `SendEmail` request with raw content per
//! message through the AWS SDK (credentials from its default chain: environment, profile, web
//! identity, ECS, instance metadata).
//!
//! - `raw`: the message as SES takes it (SES's header conventions become API fields).
//! - `answers`: SES's answers as typed refusals.
//! - `body`: the request body that tells "not sent" from "sent, no answer".
//! - `tenants`: SES tenants paused one by one.
//! - `api`: the SDK's client, and SES's calls about tenants beyond sending, bounded and counted.
//! - `identities`: each SES tenant's email identities, the account's tenants listed and read
//!   in the background from the start (`identities/reading`), checked before DATA.
//! - `standing`: each SES tenant's standing as SES last said it (read and set by the
//!   reputation guard's SES sync); a tenant SES disabled is paused here.
//! - `offered`: what the forwarder offers about SES tenants (their pauses, identities and
//!   standing).
//! - `role`: the IAM role the SDK takes, when it is the shipped placeholder.
//!
//! The SDK's own retries are off: the throttle decides when a message goes again, and a retry
//! after a timeout could send a message twice.
//!
//! Memory: the request holds the message once, as base64 inside its JSON, written straight
//! from the message's pieces (`raw`) and spliced into the SDK's request in place of a
//! placeholder (`body`): the SDK's input never holds it. That room is taken from the process's
//! byte budget (`max_buffered_bytes`) before it is made, beside the message's own bytes, so a
//! few large messages in flight stay within it.

mod answers;
mod api;
mod body;
mod identities;
mod offered;
mod raw;
pub mod role;
mod standing;
mod tenants;

use std::time::Duration;

use std::sync::Arc;

use aws_sdk_sesv2::config::{ProvideCredentials, SharedCredentialsProvider};
use aws_sdk_sesv2::operation::get_account::GetAccountOutput;
use aws_sdk_sesv2::primitives::Blob;
use aws_sdk_sesv2::types::{Destination, EmailContent, MessageTag, RawMessage};
use aws_sdk_sesv2::Client;
use tokio::sync::Semaphore;

use super::reply::rejected;
use super::{
    Accepted, Account, AccountError, CheckFuture, ForwardFuture, Forwarder, IdentityRefusal,
    Offers, Outgoing, QuotaFuture, SendQuota, TenantIdentities, Unready, UpstreamError,
};
use crate::config::{SesUpstream, UpstreamConfig, UpstreamKind};
use crate::message::Envelope;
use answers::Answer;
use api::Api;
use identities::Identities;
use standing::Standing;
use tenants::Tenants;

pub use answers::classify;

/// SES tenants whose identities are held at once; past it the one asked for longest ago is
/// forgotten (a route's `{key}` may come from a trusted client's header), and the account's
/// list is cut there.
pub const MAX_TENANTS: usize = 10_000;

/// The most SES's API takes in one request (its limit for a raw message).
pub const MAX_MESSAGE_BYTES: usize = SesUpstream::MAX_MESSAGE_BYTES;

/// Why an SES upstream could not be set up from the configuration.
#[derive(Debug, thiserror::Error)]
pub enum SesSetupError {
    #[error("upstream.url: `{0}` is not a ses:// URL")]
    NotSes(String),
}

pub struct SesForwarder {
    ses: SesUpstream,
    /// The SDK's client, and the calls about tenants.
    api: Arc<Api>,
    /// Requests in flight at once (`pool_size`).
    in_flight: Semaphore,
    tenants: Tenants,
    /// The email identities of each SES tenant, learned in the background.
    identities: Arc<Identities>,
    /// Each SES tenant's standing as SES last said it.
    standing: Standing,
    /// Why the role the SDK takes cannot send (the placeholder), when it is.
    placeholder_role: Option<String>,
}

impl SesForwarder {
    /// Credentials from the AWS SDK's default chain.
    pub fn new(cfg: &UpstreamConfig) -> Result<SesForwarder, SesSetupError> {
        let UpstreamKind::Ses(ses) = &cfg.kind else {
            return Err(SesSetupError::NotSes(cfg.url()));
        };
        let timeout = Duration::from_millis(cfg.timeout_ms.get());
        Ok(SesForwarder {
            ses: ses.clone(),
            api: Arc::new(Api::new(ses.clone(), timeout)),
            in_flight: Semaphore::new(cfg.pool_size.get()),
            tenants: Tenants::new(Duration::from_millis(cfg.quota_pause_ms.get())),
            identities: Arc::new(Identities::new(
                ses.keys.tenant_refresh(),
                timeout,
                MAX_TENANTS,
            )),
            standing: Standing::new(MAX_TENANTS),
            placeholder_role: role::placeholder_in_env(),
        })
    }

    /// With credentials of the embedder's own instead of the default chain.
    pub fn with_credentials(
        cfg: &UpstreamConfig,
        credentials: impl ProvideCredentials + 'static,
    ) -> Result<SesForwarder, SesSetupError> {
        let mut forwarder = SesForwarder::new(cfg)?;
        let api = Arc::get_mut(&mut forwarder.api).expect("not shared yet");
        api.credentials = Some(SharedCredentialsProvider::new(credentials));
        forwarder.placeholder_role = None;
        Ok(forwarder)
    }

    async fn client(&self) -> &Client {
        self.api.client().await
    }

    /// One `SendEmail`; its answer typed.
    async fn send_email(
        &self,
        envelope: &Envelope,
        raw: raw::Raw,
        tenant: Option<&str>,
    ) -> Result<String, Answer> {
        let client = self.client().await;
        let content = RawMessage::builder()
            .data(Blob::new(body::PLACEHOLDER))
            .build()
            .map_err(|e| Answer::Error(UpstreamError::Unavailable(e.to_string())))?;
        let tags: Vec<MessageTag> = (raw.tags.into_iter())
            .filter_map(|(name, value)| MessageTag::builder().name(name).value(value).build().ok())
            .collect();
        let request = client
            .send_email()
            .destination(
                Destination::builder()
                    .set_to_addresses(Some(envelope.rcpts.clone()))
                    .build(),
            )
            .content(EmailContent::builder().raw(content).build())
            // The null sender `<>` leaves it out: SES then takes the From: field, and it
            // always sends with its own bounce address, never a null one.
            .set_from_email_address(envelope.from.clone())
            .set_configuration_set_name(
                raw.configuration_set
                    .or(self.ses.keys.configuration_set.clone()),
            )
            .set_email_tags((!tags.is_empty()).then_some(tags))
            .set_tenant_name(tenant.map(str::to_string));
        let track = body::Track::default();
        let splice = body::Splice::new(raw.data, raw::FRONT);
        let sent = (request.customize())
            .interceptor(splice)
            .interceptor(track.clone())
            .send()
            .await;
        match sent {
            Ok(output) => Ok(output.message_id().unwrap_or_default().to_string()),
            Err(e) => Err(answers::from_sdk(e, track.body_sent(), tenant)),
        }
    }

    /// Sends one message as `tenant`, unless SES paused that tenant (a pause that began while
    /// the message waited for its tokens); the tenant's pause renewed when SES says so again.
    async fn forward_as(&self, message: &Outgoing<'_>) -> Result<Accepted, UpstreamError> {
        let (envelope, pieces, tenant) =
            (message.envelope, message.pieces, message.upstream_tenant);
        let size: usize = pieces.iter().map(|p| p.len()).sum();
        if size > MAX_MESSAGE_BYTES {
            return Err(too_big(size));
        }
        if let Some((tenant, left)) = tenant.and_then(|t| self.tenants.left(t).map(|l| (t, l))) {
            return Err(tenants::refusal(tenant, "paused by SES", left));
        }
        let _slot = self.in_flight.acquire().await.expect("never closed");
        let after = json_after_data(envelope, tenant);
        let _room = match message.room {
            Some(budget) => Some(room_for_request(budget, pieces, after)?),
            None => None,
        };
        let raw = raw::from_pieces(pieces, after);
        match self.send_email(envelope, raw, tenant).await {
            Ok(id) => {
                if let Some(tenant) = tenant {
                    self.tenants.resumed(tenant);
                }
                Ok(Accepted::new(format!("2.0.0 Ok {id}")))
            }
            Err(Answer::TenantPaused(text)) => {
                let tenant = tenant.expect("a tenant's answer");
                Err(self.tenants.pause(tenant, &text))
            }
            Err(Answer::TenantUnknown) => {
                let tenant = tenant.expect("a tenant's answer").to_string();
                Err(self.identity_refused(IdentityRefusal::UnknownTenant { tenant }))
            }
            Err(Answer::NotIdentity) => {
                let tenant = tenant.expect("a tenant's answer").to_string();
                // SES judges the From: field's address when the envelope sender is null.
                let domain = (envelope.from.as_deref())
                    .map_or_else(|| "the From: address".to_string(), identities::domain_of);
                Err(self.identity_refused(IdentityRefusal::NotIdentity { domain, tenant }))
            }
            Err(Answer::Error(e)) => {
                let region = self.ses.region.as_str();
                match &e {
                    UpstreamError::Credentials(why) => tracing::error!(
                        target: "mailsluice::upstream",
                        region,
                        error = why.as_str(),
                        "SES refused the relay's AWS credentials"
                    ),
                    UpstreamError::NoCredentials(why) => tracing::error!(
                        target: "mailsluice::upstream",
                        region,
                        error = why.as_str(),
                        "no AWS credentials found for SES (environment, profile, role)"
                    ),
                    _ => {}
                }
                Err(e)
            }
        }
    }
}

impl SesForwarder {
    /// SES refused a message of a tenant for what the identities' check refuses (the tenant
    /// gone, or the identity no longer associated, since the tenant was last read): the
    /// check's words, and the tenant read again early.
    fn identity_refused(&self, refusal: IdentityRefusal) -> UpstreamError {
        let tenant = match &refusal {
            IdentityRefusal::NotIdentity { tenant, .. }
            | IdentityRefusal::UnknownTenant { tenant } => tenant,
        };
        self.identities.stale(tenant);
        let (code, enhanced) = refusal.code();
        rejected(code, enhanced, refusal.to_string())
    }
}

/// A bound on the JSON the request holds after the message's data: its other fields (the
/// envelope's addresses, the tags, the tenant and configuration set), escaped at worst.
fn json_after_data(envelope: &Envelope, tenant: Option<&str>) -> usize {
    let rcpts: usize = envelope.rcpts.iter().map(|r| r.len() + 3).sum();
    let from = envelope.from.as_deref().map_or(0, str::len);
    4096 + 6 * (rcpts + from + tenant.map_or(0, str::len))
}

/// The bytes a request for a message of `size` bytes (with a header section of `header`
/// bytes and `after` bytes of JSON after its data) holds at most: the message in base64 (4
/// bytes for 3) with the JSON around it, and the header section read apart.
pub fn request_bytes(size: usize, header: usize, after: usize) -> usize {
    raw::FRONT + size.div_ceil(3) * 4 + after + header
}

/// Room in the byte budget for a request, taken at once or not at all: a message never
/// waits for room while holding its own (see `smtp::data_reader`). None left: the message is
/// not sent (unavailable: the route's fallback may take it).
fn room_for_request(
    budget: &std::sync::Arc<Semaphore>,
    pieces: &[&[u8]],
    after: usize,
) -> Result<tokio::sync::OwnedSemaphorePermit, UpstreamError> {
    let size = pieces.iter().map(|p| p.len()).sum();
    let bytes = request_bytes(size, raw::header_len(pieces), after);
    let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
    budget.clone().try_acquire_many_owned(permits).map_err(|_| {
        UpstreamError::Unavailable(format!(
            "no room in max_buffered_bytes for the SES request's {bytes} bytes"
        ))
    })
}

/// Larger than SES's API takes: permanent, as over SMTP's `SIZE`.
pub fn too_big(size: usize) -> UpstreamError {
    rejected(
        552,
        "5.3.4",
        format!("Message too big for SES ({size} bytes, at most {MAX_MESSAGE_BYTES})"),
    )
}

impl Forwarder for SesForwarder {
    fn send<'a>(&'a self, message: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        Box::pin(self.forward_as(message))
    }

    /// `GetAccount`: signed, sends nothing; proves the credentials and the endpoint, and that
    /// SES lets the account send; its sending status is the check's detail either way. The
    /// placeholder role is said without asking.
    fn check(&self) -> CheckFuture<'_> {
        Box::pin(async move {
            if let Some(why) = &self.placeholder_role {
                return Err(Unready(format!("SES: {why}")));
            }
            let account = self.account().await.map_err(|e| Unready(e.to_string()))?;
            let enforcement = account.enforcement_status().unwrap_or("unknown");
            let status = format!(
                "SendingEnabled {}, EnforcementStatus {enforcement}",
                account.sending_enabled()
            );
            match account.sending_enabled() {
                true => Ok(Some(status)),
                false => Err(Unready(format!("SES: {status}"))),
            }
        })
    }

    fn offers(&self) -> Offers<'_> {
        Offers {
            tenants: Some(self),
            account: Some(self),
            standing: Some(self),
            identities: (self.ses.keys.check_identities).then_some(self as &dyn TenantIdentities),
            failed_calls: Some(self.api.failed()),
            ..Offers::default()
        }
    }
}

impl Account for SesForwarder {
    fn send_quota(&self) -> QuotaFuture<'_> {
        Box::pin(self.read_send_quota())
    }
}

impl SesForwarder {
    /// `GetAccount` (signed, sends nothing).
    async fn account(&self) -> Result<GetAccountOutput, AccountError> {
        let sent = self.client().await.get_account().send().await;
        sent.map_err(|e| {
            AccountError::Call(format!(
                "SES GetAccount: {}",
                crate::observe::cause::short(&e)
            ))
        })
    }

    /// The account's sending rate and 24-hour quota, from `GetAccount`.
    async fn read_send_quota(&self) -> Result<SendQuota, AccountError> {
        let account = self.account().await?;
        let quota = (account.send_quota()).ok_or(AccountError::NoQuota("SES GetAccount"))?;
        Ok(SendQuota {
            max_send_rate: quota.max_send_rate(),
            max_24_hour_send: quota.max24_hour_send(),
            sent_last_24_hours: quota.sent_last24_hours(),
        })
    }
}

#[cfg(test)]
mod tests;
