//! The status page (`GET /` on the admin endpoint) after real traffic: a delivery, waiters, a
//! layer's refusal and upstream's, a key that is HTML. Read as HTTP text, and as a browser
//! shows it (headless Chromium), which also retakes docs/status-page.png on demand.

use crate::support::host::{have_program, scratch_path};
use crate::support::http::get;
use crate::support::relay::{smtp_relay, Client};
use crate::support::upstream::{Fault, TestUpstream};
use crate::support::wait::until;

/// One token per 100 s, waits of up to 200 s.
const LAYER: &str = "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\n\
                     limit = 1\ninterval_ms = 100000\nmax_wait_ms = 200000\n";
const KEY: &str = "<script>alert(1)</script>";

fn message() -> Vec<u8> {
    format!("X-Tenant: {KEY}\r\nSubject: s\r\n\r\nx\r\n").into_bytes()
}

#[tokio::test]
async fn the_page_shows_waiters_and_refusals_and_escapes_keys() {
    let up = TestUpstream::start().await;
    let relay = smtp_relay(&up.url(), "", LAYER).await;
    let admin = relay.start_admin().await;
    let mut first = relay.client().await;
    assert_eq!(
        first
            .send_mail("a@example.com", &["b@example.net"], &message())
            .await
            .0,
        250
    );
    // The second and third wait for the next tokens (about 100 s and 200 s ahead); they are
    // answered 421 when the relay stops.
    let mut waiters = Vec::new();
    for n in 1..=2 {
        let addr = relay.addr;
        waiters.push(tokio::spawn(async move {
            let mut c = Client::connect(addr).await;
            c.send_mail("a@example.com", &["b@example.net"], &message())
                .await
                .0
        }));
        until("the message waits", async || relay.throttle.waiting(0) == n).await;
    }
    // A fourth would wait 300 s, past max_wait_ms: refused at once.
    let refused = first
        .send_mail("a@example.com", &["b@example.net"], &message())
        .await;
    assert_eq!(refused.0, 451, "{refused:?}");
    // Another tenant's message while upstream drops the connection mid-DATA: upstream's last
    // error, and a refusal that is no layer's.
    up.set_fault(Fault::DropMidData);
    let other = b"X-Tenant: beta\r\nSubject: s\r\n\r\nx\r\n";
    let dropped = first
        .send_mail("a@example.com", &["b@example.net"], other)
        .await;
    assert_eq!(dropped.0, 451, "{dropped:?}");
    up.set_fault(Fault::None);

    let (status, page) = get(admin, "/").await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("<h2>Layers</h2>") && page.contains(">tenant<"),
        "{page}"
    );
    let escaped = "&lt;script&gt;alert(1)&lt;/script&gt;";
    assert!(page.contains(escaped), "the key is shown as text: {page}");
    assert!(!page.contains(KEY), "never as markup: {page}");
    assert!(
        page.contains("<td class=\"num\">451</td>"),
        "the refusal is listed: {page}"
    );
    let waiting_row =
        format!("<td class=\"any\">{escaped}</td><td class=\"num\">2</td><td class=\"num\">");
    assert!(page.contains(&waiting_row), "the waiting key: {page}");
    // What is wrong, at a glance: the version, how long it has run and when the page was
    // drawn; what was delivered, and at what rate; upstream's time and last error; how long
    // each key's oldest waiter has waited; why each refusal happened.
    for (what, shown) in [
        ("version", format!("version {}, up ", env!("CARGO_PKG_VERSION"))),
        ("the time drawn", "; drawn ".to_string()),
        ("delivered", "<tr><td>delivered</td><td class=\"num\">1</td><td class=\"num\">1</td>".into()),
        ("the rate", "<th class=\"num\">per second</th>".into()),
        ("upstream's time", "<td class=\"any\">default</td><td class=\"num\">2</td><td class=\"num\">".into()),
        ("upstream's last error", "<span class=\"bad\">".into()),
        ("the oldest waiter's wait", "<th class=\"num\">oldest has waited</th>".into()),
        ("why: max wait", "<td>throttled</td><td>its wait would pass max_wait_ms</td><td>tenant</td>".into()),
        ("why: upstream", "<td>upstream_uncertain</td><td>no answer from upstream after sending</td><td></td><td class=\"any\">beta</td>".into()),
    ] {
        assert!(page.contains(&shown), "{what} ({shown}): {page}");
    }
    // The sessions: the first client between commands, the other two waiting for tokens.
    for (doing, n) in [("command", 1), ("data", 0), ("waiting", 2), ("upstream", 0)] {
        let row = format!("<tr><td>{doing}</td><td class=\"num\">{n}</td></tr>");
        assert!(page.contains(&row), "{row}: {page}");
    }

    if have_program("chromium") {
        let dom = browser_dom(&format!("http://{admin}/")).await;
        assert!(
            dom.contains("Most waiting") && dom.contains("Last refusals"),
            "{dom}"
        );
        assert!(
            dom.contains(escaped),
            "a browser shows the key as text: {dom}"
        );
        assert_eq!(
            dom.matches("<script").count(),
            0,
            "no script element: {dom}"
        );
        for shown in [
            "version",
            "drawn",
            "Messages",
            "per second",
            "Upstreams",
            "last error",
            "oldest has waited",
            "its wait would pass max_wait_ms",
            "no answer from upstream after sending",
        ] {
            assert!(dom.contains(shown), "a browser shows {shown:?}: {dom}");
        }
        // `MAILSLUICE_SCREENSHOT=$PWD/docs/status-page.png` retakes the docs' screenshot.
        if let Ok(path) = std::env::var("MAILSLUICE_SCREENSHOT") {
            screenshot(&format!("http://{admin}/"), &path).await;
        }
    }
    relay.stop().await;
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), 421);
    }
}

/// The page as headless Chromium renders it (its DOM after load), with no network beyond
/// the page itself (the flags turn off Chromium's own background traffic).
async fn browser_dom(url: &str) -> String {
    String::from_utf8(chromium(url, &["--dump-dom"]).await).expect("the DOM is UTF-8")
}

/// The page as a PNG at `path`, as a laptop's window shows it.
async fn screenshot(url: &str, path: &str) {
    let shot = format!("--screenshot={path}");
    chromium(url, &[&shot, "--window-size=900,1250", "--hide-scrollbars"]).await;
    assert!(std::fs::metadata(path).is_ok_and(|m| m.len() > 0), "{path}");
}

/// Headless Chromium on `url` with `what` to do (dump the DOM, take a screenshot): its
/// standard output.
async fn chromium(url: &str, what: &[&str]) -> Vec<u8> {
    let profile = scratch_path("chromium");
    // Async: the relay answering the browser runs on this test's runtime.
    let out = tokio::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
            "--no-first-run",
            // Act once the page has loaded: its refresh would otherwise load it again and again.
            "--virtual-time-budget=1000",
        ])
        .args(what)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .await
        .expect("chromium runs");
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
