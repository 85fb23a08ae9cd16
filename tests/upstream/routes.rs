//! Routes over TCP: three test upstreams behind one relay; messages routed by tenant, the
//! fields a route adds, layers scoped to one upstream, the fallback (only when nothing reached
//! the chosen upstream), the reconnect bound, and routes changed by a reload.

use std::time::Duration;

use crate::support::auth::{auth_config, plain};
use crate::support::config::TestConfig;
use crate::support::relay::{upstream_relay, Client, Relay};
use crate::support::throttle::Events;
use crate::support::upstream::{refusing_addr, Fault, Received, Step, TestUpstream};
use crate::support::wait::until;
use mailsluice::config::Config;

/// `[[upstream]]` tables named by `(name, url, extra keys)`.
fn upstreams(list: &[(&str, &str, &str)]) -> String {
    list.iter()
        .map(|(name, url, extra)| {
            let timeout = match extra.contains("timeout_ms") {
                true => "",
                false => "timeout_ms = 2000\n",
            };
            format!(
                "[[upstream]]\nname = \"{name}\"\nurl = \"{url}\"\ntls = \"none\"\n\
                 {timeout}{extra}\n"
            )
        })
        .collect()
}

fn config(smtp_extra: &str, upstreams: &str, rest: &str) -> String {
    TestConfig::new()
        .smtp(smtp_extra)
        .then(upstreams)
        .then(rest)
        .text()
}

/// acme to `a` (with its SES configuration set), globex to `b` (falling back to `c`), the
/// rest to `c`.
const TENANT_ROUTES: &str = "
[[route]]
key = \"header:X-Tenant\"
values = [\"acme\"]
upstream = \"a\"
add_headers = { \"X-SES-CONFIGURATION-SET\" = \"tenant-{key}\" }

[[route]]
key = \"header:X-Tenant\"
values = [\"globex\"]
upstream = \"b\"
fallback = \"c\"

[[route]]
upstream = \"c\"
";

struct Three {
    a: TestUpstream,
    b: TestUpstream,
    c: TestUpstream,
}

impl Three {
    async fn start() -> Three {
        Three {
            a: TestUpstream::start().await,
            b: TestUpstream::start().await,
            c: TestUpstream::start().await,
        }
    }

    fn upstreams(&self, b_url: &str) -> String {
        upstreams(&[
            ("a", &self.a.url(), ""),
            ("b", b_url, ""),
            ("c", &self.c.url(), ""),
        ])
    }

    async fn relay(&self, rest: &str) -> Relay {
        upstream_relay(&config("", &self.upstreams(&self.b.url()), rest)).await
    }
}

fn tenant_message(tenant: &str, subject: &str, extra: &str) -> Vec<u8> {
    format!("X-Tenant: {tenant}\r\n{extra}Subject: {subject}\r\n\r\nbody\r\n").into_bytes()
}

async fn send_as(relay: &Relay, tenant: &str, subject: &str, extra: &str) -> (u16, String) {
    let mut client = relay.client().await;
    let message = tenant_message(tenant, subject, extra);
    client
        .send_mail("app@example.com", &["user@example.net"], &message)
        .await
}

fn header_lines(message: &Received) -> Vec<String> {
    let text = String::from_utf8_lossy(&message.data).to_string();
    let head = text.split("\r\n\r\n").next().unwrap_or("").to_string();
    head.split("\r\n").map(str::to_string).collect()
}

fn subject(message: &Received) -> String {
    let lines = header_lines(message);
    let line = lines.iter().find(|l| l.starts_with("Subject: "));
    line.map_or_else(String::new, |l| l["Subject: ".len()..].to_string())
}

#[tokio::test]
async fn each_tenant_reaches_its_upstream_with_its_route_headers() {
    let three = Three::start().await;
    let relay = three.relay(TENANT_ROUTES).await;
    let forged = "X-SES-CONFIGURATION-SET: someone-else\r\n";
    assert_eq!(send_as(&relay, "acme", "to-a", forged).await.0, 250);
    assert_eq!(send_as(&relay, "globex", "to-b", "").await.0, 250);
    assert_eq!(send_as(&relay, "initech", "to-c", "").await.0, 250);

    let a = three.a.wait_for(1).await;
    let lines = header_lines(&a[0]);
    assert!(lines[0].starts_with("Received: "), "{lines:?}");
    let set: Vec<&String> = (lines.iter())
        .filter(|l| {
            l.to_ascii_lowercase()
                .starts_with("x-ses-configuration-set")
        })
        .collect();
    assert_eq!(set, ["X-SES-CONFIGURATION-SET: tenant-acme"], "{lines:?}");
    let after_trace = lines.iter().skip(1).find(|l| !l.starts_with([' ', '\t']));
    assert_eq!(
        after_trace.map(String::as_str),
        Some("X-SES-CONFIGURATION-SET: tenant-acme"),
        "added right after our Received: {lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.starts_with("X-Tenant")),
        "the route key header is a hint for the relay: {lines:?}"
    );
    assert_eq!(subject(&a[0]), "to-a");
    let b = three.b.wait_for(1).await;
    assert_eq!(subject(&b[0]), "to-b");
    assert!(!header_lines(&b[0]).iter().any(|l| l.starts_with("X-SES")));
    let c = three.c.wait_for(1).await;
    assert_eq!(subject(&c[0]), "to-c");
    assert_eq!((three.a.messages().len(), three.b.messages().len()), (1, 1));
    assert_eq!(three.c.messages().len(), 1);
    for name in ["a", "b", "c"] {
        let metric = format!("mailsluice_upstream_seconds_count{{upstream=\"{name}\"}}");
        assert_eq!(relay.metric(&metric), 1.0, "{metric}");
    }
}

#[tokio::test]
async fn without_a_catch_all_an_unrouted_message_gets_451_4_3_5() {
    let three = Three::start().await;
    let routes = "[[route]]\nkey = \"header:X-Tenant\"\nvalues = [\"acme\"]\nupstream = \"a\"\n";
    let relay = three.relay(routes).await;
    let (code, text) = send_as(&relay, "initech", "lost?", "").await;
    assert_eq!(
        (code, text.as_str()),
        (451, "4.3.5 No route for this message")
    );
    assert_eq!(send_as(&relay, "acme", "routed", "").await.0, 250);
    three.a.wait_for(1).await;
    let counts = [&three.a, &three.b, &three.c].map(|u| u.messages().len());
    assert_eq!(counts, [1, 0, 0], "the unrouted message went nowhere");
    assert_eq!(
        relay.metric("mailsluice_messages_total{outcome=\"no_route\"}"),
        1.0
    );
    let config = Config::parse(&config("", &three.upstreams(&three.b.url()), routes)).unwrap();
    assert!(config.warnings()[0].contains("catch-all"));
}

#[tokio::test]
async fn a_layer_scoped_to_an_upstream_throttles_only_its_messages() {
    let three = Three::start().await;
    let layer = "[[throttle]]\nname = \"b-account\"\nupstream = \"b\"\nkey = \"none\"\n\
                 limit = 1\ninterval_ms = 3600000\nmode = \"reject\"\n";
    let relay = three.relay(&format!("{TENANT_ROUTES}\n{layer}")).await;
    assert_eq!(send_as(&relay, "globex", "b1", "").await.0, 250);
    let (code, text) = send_as(&relay, "globex", "b2", "").await;
    assert_eq!(code, 451, "{text}");
    assert!(text.starts_with("4.7.1"), "{text}");
    for n in 0..3 {
        let (code, text) = send_as(&relay, "acme", &format!("a{n}"), "").await;
        assert_eq!(code, 250, "{text}");
    }
    assert_eq!(three.a.wait_for(3).await.len(), 3);
    assert_eq!(three.b.messages().len(), 1);
}

#[tokio::test]
async fn an_unreachable_upstream_hands_its_messages_to_the_fallback() {
    let three = Three::start().await;
    let refusing = refusing_addr();
    let down = format!("smtp://{}", refusing.addr());
    let layers = "[[throttle]]\nname = \"c-account\"\nupstream = \"c\"\nkey = \"none\"\n\
                  limit = 1\ninterval_ms = 3600000\nmode = \"reject\"\n\
                  [[throttle]]\nname = \"b-account\"\nupstream = \"b\"\nkey = \"none\"\n\
                  limit = 5\ninterval_ms = 3600000\nmode = \"reject\"\n";
    let text = config(
        "",
        &three.upstreams(&down),
        &format!("{TENANT_ROUTES}\n{layers}"),
    );
    let relay = upstream_relay(&text).await;
    let (events, _capture) = Events::capture();
    let (code, reply) = send_as(&relay, "globex", "via-c", "").await;
    assert_eq!(code, 250, "{reply}");
    let logged = events.named("message");
    assert!(
        logged[0].1.contains("via=c "),
        "the log names who carried it: {logged:?}"
    );
    let b_account = relay.throttle.peek("b-account", "").unwrap();
    assert_eq!(
        b_account.remaining, 5,
        "b never saw it: its tokens went back"
    );
    let c = three.c.wait_for(1).await;
    assert_eq!(subject(&c[0]), "via-c");
    let (code, reply) = send_as(&relay, "globex", "over-c's-rate", "").await;
    assert_eq!(
        code, 451,
        "the fallback's own layer is charged too: {reply}"
    );
    assert_eq!(three.c.messages().len(), 1);
}

#[tokio::test]
async fn no_fallback_once_the_upstream_answered_or_may_have_taken_it() {
    let three = Three::start().await;
    let relay = upstream_relay(&config(
        "",
        &upstreams(&[
            ("a", &three.a.url(), ""),
            ("b", &three.b.url(), "timeout_ms = 300\n"),
            ("c", &three.c.url(), ""),
        ]),
        TENANT_ROUTES,
    ))
    .await;
    three
        .b
        .set_fault(Fault::reply(Step::Rcpt, 451, "4.3.0 try later"));
    let (code, text) = send_as(&relay, "globex", "refused", "").await;
    assert_eq!(code, 451, "{text}");
    assert!(
        text.starts_with("4.3.0") && text.ends_with("try later"),
        "{text}"
    );

    three
        .b
        .set_fault(Fault::stall(Step::EndOfData, Duration::from_millis(900)));
    let (code, text) = send_as(&relay, "globex", "uncertain", "").await;
    assert_eq!(code, 451, "{text}");
    assert!(text.contains("may"), "the uncertain 451: {text}");
    assert_eq!(three.b.wait_for(1).await.len(), 1, "b took it after all");
    assert_eq!(three.c.messages().len(), 0, "never to the fallback");
}

#[tokio::test]
async fn an_authenticated_tenant_cannot_route_itself_onto_another_account() {
    let three = Three::start().await;
    let users = [("app", "s3cret", "tenant = \"acme\"")];
    let smtp = format!(
        "trusted_networks = [\"192.0.2.0/24\"]\nallow_plaintext_auth = true\n{}",
        auth_config(&users, "")
    );
    let relay = upstream_relay(&config(
        &smtp,
        &three.upstreams(&three.b.url()),
        TENANT_ROUTES,
    ))
    .await;
    let mut client = Client::connect(relay.addr).await;
    assert_eq!(client.cmd("EHLO client.test").await.0, 250);
    let (code, text) = client
        .cmd(&format!("AUTH PLAIN {}", plain("app", "s3cret")))
        .await;
    assert_eq!(code, 235, "{text}");
    let message = tenant_message("globex", "escape", "");
    let (code, text) = client
        .send_mail("app@example.com", &["user@example.net"], &message)
        .await;
    assert_eq!(code, 250, "{text}");
    let a = three.a.wait_for(1).await;
    assert_eq!(subject(&a[0]), "escape");
    assert_eq!(three.b.messages().len(), 0);
}

#[tokio::test]
async fn max_messages_per_connection_reconnects_between_messages() {
    let a = TestUpstream::start().await;
    let extra = "pool_size = 1\nmax_messages_per_connection = 3\n";
    let relay = upstream_relay(&config("", &upstreams(&[("a", &a.url(), extra)]), "")).await;
    for n in 0..7 {
        let (code, text) = send_as(&relay, "acme", &format!("m{n}"), "").await;
        assert_eq!(code, 250, "{text}");
    }
    let got = a.wait_for(7).await;
    let subjects: Vec<String> = got.iter().map(subject).collect();
    let expected: Vec<String> = (0..7).map(|n| format!("m{n}")).collect();
    assert_eq!(subjects, expected, "each message once, in order");
    let conns: Vec<usize> = got.iter().map(|m| m.conn).collect();
    assert_eq!(conns, [1, 1, 1, 2, 2, 2, 3]);
    until("the retired connections said QUIT", async || {
        a.commands()
            .iter()
            .filter(|c| c.starts_with("QUIT"))
            .count()
            == 2
    })
    .await;
}

#[tokio::test]
async fn a_reload_routes_the_next_message_anew_and_keeps_unchanged_pools() {
    let three = Three::start().await;
    let routes = |acme: &str| {
        format!(
            "[[route]]\nkey = \"header:X-Tenant\"\nvalues = [\"acme\"]\nupstream = \"{acme}\"\n\
             [[route]]\nupstream = \"a\"\n"
        )
    };
    let before = config("", &three.upstreams(&three.b.url()), &routes("a"));
    let relay = upstream_relay(&before).await;
    assert_eq!(send_as(&relay, "acme", "before", "").await.0, 250);
    assert_eq!(three.a.wait_for(1).await[0].conn, 1);

    let after = config("", &three.upstreams(&three.b.url()), &routes("b"));
    let after = Config::parse(&after).unwrap();
    mailsluice::serve::reload::reload(&relay.live, after).expect("reloaded");
    assert_eq!(send_as(&relay, "acme", "after", "").await.0, 250);
    assert_eq!(subject(&three.b.wait_for(1).await[0]), "after");
    assert_eq!(send_as(&relay, "initech", "still-a", "").await.0, 250);
    let a = three.a.wait_for(2).await;
    assert_eq!(subject(&a[1]), "still-a");
    assert_eq!(
        a[1].conn, 1,
        "upstream a kept its connection across the reload"
    );
    assert_eq!(three.a.connections(), 1);
}

/// The quota pause of an SMTP upstream hands its messages to the route's fallback as SES's
/// account pause does: the one that met the quota reply and the next ones while it lasts.
/// (Without a fallback it is `451 4.7.1`: `feedback`'s quota tests.)
#[tokio::test]
async fn a_quota_paused_smtp_upstream_hands_its_messages_to_the_fallback() {
    let three = Three::start().await;
    let relay = upstream_relay(&config(
        "",
        &upstreams(&[
            ("a", &three.a.url(), ""),
            ("b", &three.b.url(), "quota_pause_ms = 600000\n"),
            ("c", &three.c.url(), ""),
        ]),
        TENANT_ROUTES,
    ))
    .await;
    three.b.set_fault(Fault::reply(
        Step::EndOfData,
        454,
        "Throttling failure: Daily message quota exceeded.",
    ));
    let (code, reply) = send_as(&relay, "globex", "met-the-quota", "").await;
    assert_eq!(code, 250, "{reply}");
    three.b.set_fault(Fault::None);
    let (code, reply) = send_as(&relay, "globex", "while-paused", "").await;
    assert_eq!(code, 250, "{reply}");
    let c = three.c.wait_for(2).await;
    let subjects: Vec<String> = c.iter().map(subject).collect();
    assert_eq!(subjects, ["met-the-quota", "while-paused"]);
    assert!(three.b.messages().is_empty(), "b took nothing");
}
