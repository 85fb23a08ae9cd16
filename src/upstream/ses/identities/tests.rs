use super::*;

/// Identities whose reading task is never started: the test plays its part.
fn identities(max: usize) -> (Arc<Identities>, Arc<Api>) {
    let ses = crate::config::SesUpstream {
        region: "eu-west-1".into(),
        keys: Default::default(),
    };
    let identities = Identities::new(Duration::from_secs(300), Duration::from_secs(1), max);
    identities.started.store(true, Ordering::SeqCst);
    (
        Arc::new(identities),
        Arc::new(Api::new(ses, Duration::from_secs(1))),
    )
}

/// The tenants due now, taken as the reading task takes them (with room for background reads).
fn due(ids: &Identities) -> Vec<String> {
    let room = Arc::new(tokio::sync::Semaphore::new(100));
    let due = ids.take_due(Instant::now(), &room);
    due.into_iter().map(|(name, _)| name).collect()
}

fn names(list: &[&str]) -> Result<Option<Vec<String>>, CallFailed> {
    Ok(Some(list.iter().map(|n| n.to_string()).collect()))
}

fn refused_domain(check: IdentityCheck) -> Option<String> {
    match check {
        IdentityCheck::Refused(IdentityRefusal::NotIdentity { domain, .. }) => Some(domain),
        _ => None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_tenant_is_unchecked_until_read_then_its_identities_decide() {
    let (ids, api) = identities(10);
    let check = |sender| ids.check("acme", sender, &api);
    assert_eq!(check("a@acme.example"), IdentityCheck::Unchecked);
    assert_eq!(due(&ids), ["acme"]);
    assert_eq!(
        check("a@acme.example"),
        IdentityCheck::Unchecked,
        "being read"
    );
    ids.learned("acme", names(&["acme.example", "billing@shared.example"]));
    assert_eq!(check("A@ACME.example"), IdentityCheck::Allowed);
    assert_eq!(
        check("x@mail.acme.example"),
        IdentityCheck::Allowed,
        "a subdomain"
    );
    assert_eq!(check("billing@Shared.example"), IdentityCheck::Allowed);
    assert_eq!(
        refused_domain(check("other@shared.example")).as_deref(),
        Some("shared.example")
    );
    assert_eq!(
        refused_domain(check("ceo@Globex.example")).as_deref(),
        Some("globex.example")
    );
    ids.learned("acme", Ok(None));
    assert_eq!(
        check("a@acme.example"),
        IdentityCheck::Refused(IdentityRefusal::UnknownTenant {
            tenant: "acme".into()
        })
    );
    assert_eq!(ids.unknown(), ["acme"]);
    ids.learned("acme", Err(CallFailed("down".into())));
    assert_eq!(
        ids.unknown(),
        ["acme"],
        "a failed read keeps what was known"
    );
}

/// A miss asks for one early read of its tenant, at most one a minute; a refresh comes
/// `tenant_refresh_ms` after each read whatever it found.
#[tokio::test(start_paused = true)]
async fn a_miss_asks_for_at_most_one_early_read_a_minute() {
    let (ids, api) = identities(10);
    ids.check("acme", "a@acme.example", &api);
    due(&ids);
    ids.learned("acme", names(&["acme.example"]));
    assert_eq!(
        ids.next_due(true),
        Some(Instant::now() + Duration::from_secs(300))
    );
    assert!(refused_domain(ids.check("acme", "x@new.example", &api)).is_some());
    assert_eq!(due(&ids), ["acme"], "read early");
    ids.learned("acme", names(&["acme.example"]));
    tokio::time::advance(EARLY_EVERY - Duration::from_millis(1)).await;
    assert!(refused_domain(ids.check("acme", "x@new.example", &api)).is_some());
    assert!(due(&ids).is_empty(), "not twice a minute");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(refused_domain(ids.check("acme", "x@new.example", &api)).is_some());
    assert_eq!(due(&ids), ["acme"]);
}

/// At `max` tenants, a new one makes the tenant asked about longest ago forgotten.
#[tokio::test(start_paused = true)]
async fn past_its_bound_the_tenant_asked_about_longest_ago_is_forgotten() {
    let (ids, api) = identities(2);
    for tenant in ["a", "b"] {
        ids.check(tenant, "x@x.example", &api);
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    due(&ids);
    ids.learned("a", Ok(None));
    ids.learned("b", Ok(None));
    ids.check("a", "x@x.example", &api);
    tokio::time::advance(Duration::from_secs(1)).await;
    ids.check("c", "x@x.example", &api);
    assert_eq!(ids.unknown(), ["a"], "b went, a was asked about since");
    assert_eq!(ids.tenants.lock().unwrap().len(), 2);
}

/// A message of a tenant never read waits for its read: every message meanwhile shares the
/// one read, which goes ahead of the background reads (no background room needed).
#[tokio::test(start_paused = true)]
async fn a_tenant_never_read_is_wanted_once_and_read_ahead_of_the_background() {
    let (ids, _api) = identities(10);
    ids.listed(Ok(vec!["listed".into()]));
    let Look::Reading(mut first) = ids.look("acme", "a@acme.example") else {
        panic!("never read: its read is waited for");
    };
    let Look::Reading(_) = ids.look("acme", "b@acme.example") else {
        panic!("still not read");
    };
    let none = Arc::new(tokio::sync::Semaphore::new(0));
    let taken = ids.take_due(Instant::now(), &none);
    let taken: Vec<&str> = taken.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(taken, ["acme"], "the listed tenant waits for room");
    assert!(ids.take_due(Instant::now(), &none).is_empty(), "one read");
    ids.learned("acme", names(&["acme.example"]));
    first.changed().await.unwrap();
    assert!(matches!(
        ids.look("acme", "a@acme.example"),
        Look::Judged(IdentityCheck::Allowed)
    ));
    assert_eq!(due(&ids), ["listed"], "read once there is room");
}

/// A first read that fails lets the tenant's senders go at once, without waiting again.
#[tokio::test(start_paused = true)]
async fn after_a_failed_first_read_senders_go_unchecked_without_waiting() {
    let (ids, _api) = identities(10);
    assert!(matches!(
        ids.look("acme", "a@acme.example"),
        Look::Reading(_)
    ));
    due(&ids);
    ids.learned("acme", Err(CallFailed("down".into())));
    assert!(matches!(
        ids.look("acme", "a@acme.example"),
        Look::Judged(IdentityCheck::Unchecked)
    ));
}

/// The list adds the tenants not held, up to `max`; a tenant held already is left as it is.
#[tokio::test(start_paused = true)]
async fn the_list_is_cut_at_max() {
    let (ids, _api) = identities(3);
    ids.look("acme", "a@acme.example");
    let listed = ["acme", "b", "c", "d", "e"].map(String::from).to_vec();
    ids.listed(Ok(listed));
    let mut held: Vec<String> = ids.tenants.lock().unwrap().keys().cloned().collect();
    held.sort();
    assert_eq!(held, ["acme", "b", "c"]);
    assert!(ids.tenants.lock().unwrap()["acme"].wanted, "still wanted");
}
