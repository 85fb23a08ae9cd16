//! Delivery beside the mail: a receiver that never answers holds no SMTP reply back (they
//! come while the clock stands still, so none waited on a webhook's timer), its queue stops
//! at `max_queue` with the oldest dropped and counted, and what was taken is given up after
//! `max_attempts`; a 5xx is sent again after its pause, a 4xx is not; a host name that
//! resolves to an internal address is refused before any connection; a receiver down for half
//! an hour gets every event, in order, once it is back (`retry_window_ms`).

use std::time::Duration;

use crate::support::clock::{hold, until_held};
use crate::support::dns::TestDns;
use crate::support::http::get;
use crate::support::wait::until;
use crate::support::webhook::Receiver;
use crate::{message, relay, SECRET_ENV};

#[tokio::test(start_paused = true)]
async fn a_receiver_that_never_answers_costs_the_mail_nothing_and_the_bound_holds() {
    let receiver = Receiver::hanging().await;
    let extra = "events = [\"accepted\"]\nmax_queue = 3\nmax_batch = 1\nmax_attempts = 2\n\
                 timeout_ms = 10000";
    let relay = relay(&receiver.config("*", SECRET_ENV, extra)).await;
    let held = hold();
    let started = tokio::time::Instant::now();
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    for i in 0..10 {
        let to = format!("r{i}@example.com");
        assert_eq!(
            c.send_mail("a@acme.example", &[&to], &message("acme"))
                .await
                .0,
            250
        );
    }
    // Every reply came while the clock stood still: none waited for the receiver.
    assert_eq!(started.elapsed(), Duration::ZERO);
    let metric = |name: &str| relay.metric(&format!("mailsluice_webhook_{name}")) as u64;
    // At most one batch (one event) is with the receiver; three wait; the rest went first.
    assert_eq!(metric("queued"), 3);
    let dropped = metric("dropped_total");
    assert!((6..=7).contains(&dropped), "{dropped}");
    let admin = relay.start_admin().await;
    let (_, page) = get(admin, "/").await;
    assert!(
        page.contains("<h2>Webhooks</h2>") && page.contains("webhook1"),
        "{page}"
    );
    drop(held);
    // Each POST times out, is sent once more after 1 s, times out again: given up.
    for _ in 0..200 {
        if metric("failed_total") + dropped == 10 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        (metric("failed_total") + dropped, metric("queued")),
        (10, 0)
    );
    assert_eq!(metric("sent_total"), 0);
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_5xx_is_sent_again_after_a_pause_and_a_4xx_is_not() {
    let receiver = Receiver::start().await;
    receiver.answer(503);
    let relay = relay(&receiver.config("acme", SECRET_ENV, "events = [\"accepted\"]")).await;
    let held = hold();
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    assert_eq!(
        c.send_mail("a@acme.example", &["b@example.com"], &message("acme"))
            .await
            .0,
        250
    );
    until_held("the first POST", || receiver.deliveries().len() == 1).await;
    // Its failure seen (the status page's last error): its pause runs from now.
    let services = relay.services();
    let failed = || services.webhooks.rows()[0].last_error.is_some();
    until_held("the 503 seen", failed).await;
    receiver.answer(200);
    // Its pause is 1 s: not sent again before it.
    tokio::time::advance(Duration::from_millis(900)).await;
    let nap = || std::thread::sleep(Duration::from_millis(200));
    tokio::task::spawn_blocking(nap).await.unwrap();
    assert_eq!(receiver.deliveries().len(), 1);
    tokio::time::advance(Duration::from_millis(200)).await;
    until_held("the second POST", || receiver.deliveries().len() == 2).await;
    let [first, second] = <[_; 2]>::try_from(receiver.deliveries()).unwrap();
    assert_eq!(first.events(), second.events(), "the same batch");
    until_held("counted sent", || {
        relay.metric("mailsluice_webhook_sent_total") == 1.0
    })
    .await;

    receiver.answer(400);
    assert_eq!(
        c.send_mail("a@acme.example", &["b@example.com"], &message("acme"))
            .await
            .0,
        250
    );
    until_held("a third POST", || receiver.deliveries().len() == 3).await;
    until_held("counted failed", || {
        relay.metric("mailsluice_webhook_failed_total") == 1.0
    })
    .await;
    drop(held);
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(receiver.deliveries().len(), 3, "a 4xx sent again");
    relay.stop().await;
}

/// One connection carries POST after POST while the receiver keeps it; one it closes is
/// replaced at once (no pause, no event lost).
#[tokio::test(start_paused = true)]
async fn the_connection_is_kept_between_posts_and_replaced_when_closed() {
    let receiver = Receiver::start().await;
    let relay = relay(&receiver.config("acme", SECRET_ENV, "events = [\"accepted\"]")).await;
    let held = hold();
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    for n in 1..=3 {
        assert_eq!(
            c.send_mail("a@acme.example", &["b@example.com"], &message("acme"))
                .await
                .0,
            250
        );
        until_held("a POST", || receiver.deliveries().len() == n).await;
    }
    assert_eq!(receiver.connections(), 1);
    receiver.close_each(true);
    for n in 4..=6 {
        assert_eq!(
            c.send_mail("a@acme.example", &["b@example.com"], &message("acme"))
                .await
                .0,
            250
        );
        until_held("a POST", || receiver.deliveries().len() == n).await;
    }
    until_held("all sent", || {
        relay.metric("mailsluice_webhook_sent_total") == 6.0
    })
    .await;
    assert_eq!(relay.metric("mailsluice_webhook_failed_total"), 0.0);
    drop(held);
    relay.stop().await;
}

/// A webhook whose host name resolves (by the test's own DNS server) to an internal address
/// `allow_networks` does not list: refused at delivery, before any connection, counted failed
/// and not sent again; the receiver at that address never sees a connection.
#[tokio::test]
async fn a_host_name_resolving_to_an_internal_address_is_refused_at_delivery() {
    let dns = TestDns::start().await;
    dns.a("hook.test", "127.0.0.1".parse().unwrap());
    let receiver = Receiver::start().await;
    let webhook = format!(
        "[[webhook]]\ntenant = \"acme\"\nurl = \"https://hook.test:{}/hook\"\n\
         secret_env = \"{SECRET_ENV}\"\nca_file = \"{}\"\nevents = [\"accepted\"]\n",
        receiver.addr.port(),
        receiver.cert.cert_path.display()
    );
    let relay = relay(&webhook).await;
    relay.services().webhooks.resolve_through(&[dns.addr()]);
    let mut c = relay.client().await;
    let message = message("acme");
    let sent = c.send_mail("a@acme.example", &["b@example.com"], &message);
    assert_eq!(sent.await.0, 250);
    let failed = || relay.metric("mailsluice_webhook_failed_total") == 1.0;
    until("the event given up", async || failed()).await;
    let error = relay.services().webhooks.rows()[0].last_error.clone();
    let error = error.expect("its error on the status page");
    assert!(
        error.contains("hook.test resolves only to addresses it may not reach (127.0.0.1)"),
        "{error}"
    );
    assert!(dns.queries().iter().any(|q| q.starts_with("hook.test")));
    assert_eq!(receiver.connections(), 0, "nothing sent");
    assert_eq!(relay.metric("mailsluice_webhook_sent_total"), 0.0);
    relay.stop().await;
}

/// Moves the held clock `secs` seconds, 10 s at a time, letting the relay's tasks run in
/// between (a pause that ends sends its POST before the next step).
async fn pass(secs: u64) {
    for _ in 0..secs / 10 {
        tokio::time::advance(Duration::from_secs(10)).await;
        let nap = || std::thread::sleep(Duration::from_millis(20));
        tokio::task::spawn_blocking(nap).await.unwrap();
    }
}

/// A receiver down for half an hour (503 to every POST) while mail goes on: the batch with it
/// is sent again within `retry_window_ms` (an hour by default), the events after it wait in
/// the queue within its bounds; once it answers 2xx every event arrives, once, in the order
/// the messages were accepted.
#[tokio::test(start_paused = true)]
async fn a_receiver_down_for_half_an_hour_gets_every_event_in_order() {
    let receiver = Receiver::start().await;
    receiver.answer(503);
    // A POST's own bound well past the clock's steps: each POST is answered, not timed out.
    let extra = "events = [\"accepted\"]\ntimeout_ms = 300000";
    let relay = relay(&receiver.config("acme", SECRET_ENV, extra)).await;
    let held = hold();
    let mut rcpts = Vec::new();
    // A message every five minutes for half an hour (each on a connection of its own: an idle
    // one is closed sooner); the batch of the first is refused again and again meanwhile.
    for step in 0..=6 {
        let mut c = relay.client().await;
        let to = format!("r{step}@example.com");
        assert_eq!(
            c.send_mail("a@acme.example", &[&to], &message("acme"))
                .await
                .0,
            250
        );
        rcpts.push(to);
        if step < 6 {
            pass(300).await;
        }
    }
    let metric = |name: &str| relay.metric(&format!("mailsluice_webhook_{name}")) as u64;
    let refused = receiver.deliveries().len();
    assert!(
        refused > 5,
        "sent again over the half hour: {refused} POSTs"
    );
    assert_eq!((metric("failed_total"), metric("dropped_total")), (0, 0));
    assert_eq!(
        metric("queued"),
        6,
        "the later events wait behind the first"
    );

    receiver.answer(200);
    for _ in 0..100 {
        if metric("sent_total") == 7 {
            break;
        }
        pass(10).await;
    }
    drop(held);
    let mut seen = std::collections::HashSet::new();
    let firsts: Vec<String> = (receiver.events().iter())
        .filter(|e| seen.insert(e["id"].as_str().unwrap().to_string()))
        .map(|e| e["to"][0].as_str().unwrap().to_string())
        .collect();
    assert_eq!(firsts, rcpts, "each event once, in order");
    assert_eq!(
        (
            metric("sent_total"),
            metric("failed_total"),
            metric("dropped_total")
        ),
        (7, 0, 0)
    );
    relay.stop().await;
}
