//! Real SMTP clients (swaks, Python's smtplib) through the relay to the test upstream.

use crate::support::host::have_program;
use crate::support::relay::smtp_relay;
use crate::support::upstream::{Fault, Step, TestUpstream};
use tokio::process::Command;

#[tokio::test]
async fn swaks_sends_through_the_relay() {
    if !have_program("swaks") {
        return;
    }
    let up = TestUpstream::start().await;
    let relay = smtp_relay(&up.url(), "", "").await;
    let out = Command::new("swaks")
        .args([
            "--server",
            &relay.addr.to_string(),
            "--from",
            "app@example.com",
        ])
        .args(["--to", "user@example.net", "--header", "Subject: via swaks"])
        .args(["--body", "hello from swaks", "--helo", "swaks.test"])
        .output()
        .await
        .unwrap();
    let transcript = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "swaks failed:\n{transcript}");
    assert!(transcript.contains("<-  250"), "{transcript}");
    let got = up.wait_for(1).await;
    assert_eq!(got[0].from, "app@example.com");
    assert_eq!(got[0].rcpts, ["user@example.net"]);
    let data = String::from_utf8_lossy(&got[0].data);
    assert!(
        data.starts_with("Received: from swaks.test ([127.0.0.1])"),
        "{data}"
    );
    assert!(data.contains("Subject: via swaks\r\n") && data.contains("hello from swaks"));
    relay.stop().await;
}

const SMTPLIB: &str = r#"
import smtplib, sys
port, sender = int(sys.argv[1]), sys.argv[2]
try:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as s:
        s.sendmail(sender, ["a@example.net", "b@example.net"],
                   "Subject: hi\r\n\r\n.starts with a dot\r\n")
    print("sent")
except smtplib.SMTPDataError as e:
    print("refused", e.smtp_code, e.smtp_error.decode())
"#;

async fn smtplib(port: u16, sender: &str) -> String {
    let out = Command::new("python3")
        .args(["-c", SMTPLIB, &port.to_string(), sender])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn python_smtplib_sends_through_the_relay_and_sees_upstream_refusals() {
    if !have_program("python3") {
        return;
    }
    let up = TestUpstream::start().await;
    let relay = smtp_relay(&up.url(), "", "").await;
    assert_eq!(smtplib(relay.addr.port(), "").await, "sent");
    let got = up.wait_for(1).await;
    assert_eq!(got[0].from, "", "null sender stays null");
    assert_eq!(got[0].rcpts.len(), 2);
    assert!(String::from_utf8_lossy(&got[0].data).ends_with("\r\n.starts with a dot\r\n"));
    up.set_fault(Fault::reply(Step::EndOfData, 554, "5.7.1 Message rejected"));
    let refused = smtplib(relay.addr.port(), "x@example.com").await;
    assert_eq!(refused, "refused 554 5.7.1 upstream: Message rejected");
    assert_eq!(up.messages().len(), 1, "nothing more reached upstream");
    relay.stop().await;
}
