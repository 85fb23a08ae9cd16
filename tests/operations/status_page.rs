//! The status page (`GET /` on the admin endpoint) after real traffic: a waiter, a refusal, a
//! key that is HTML. Read as HTTP text, and as a browser shows it (headless Chromium).

use crate::support::host::{have_program, scratch_path};
use crate::support::http::get;
use crate::support::relay::{smtp_relay, Client};
use crate::support::upstream::TestUpstream;
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
    let waiting_row = format!("<td>{escaped}</td><td class=\"num\">2</td>");
    assert!(page.contains(&waiting_row), "the waiting key: {page}");
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
    }
    relay.stop().await;
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), 421);
    }
}

/// The page as headless Chromium renders it (its DOM after load), with no network beyond
/// the page itself (the flags turn off Chromium's own background traffic).
async fn browser_dom(url: &str) -> String {
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
            // Dump once the page has loaded: its refresh would otherwise load it again and again.
            "--virtual-time-budget=1000",
            "--dump-dom",
        ])
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
    String::from_utf8(out.stdout).expect("the DOM is UTF-8")
}
