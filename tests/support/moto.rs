//! moto's server (`pip install "moto[server]"`), a stand-in for SES's real API: started by
//! the test on a free port of 127.0.0.1 and killed when dropped. What it stored is read from
//! its `/moto-api/data.json`. Without `moto_server` the test is skipped through `host::skip`
//! (a failure unless skips are allowed).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::host::{free_port, have_program};

/// The credentials a test's AWS clients give moto (it takes any): explicit, so that no SDK
/// client of a test reads the machine's chain; the instance metadata lookup is off too.
pub fn credentials() -> aws_credential_types::provider::SharedCredentialsProvider {
    if std::env::var("AWS_EC2_METADATA_DISABLED").as_deref() != Ok("true") {
        std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    }
    let credentials =
        aws_credential_types::Credentials::new("testing", "testing", None, None, "moto");
    aws_credential_types::provider::SharedCredentialsProvider::new(credentials)
}

pub struct MotoServer {
    pub port: u16,
    child: Child,
}

/// One raw message moto's SES stored. moto adds the raw `To`/`Cc` addresses to
/// `destinations`, so a test checks that the envelope's are in it, and the header's only
/// where the header has them.
#[derive(Debug)]
pub struct Stored {
    pub source: String,
    pub destinations: Vec<String>,
    pub raw: String,
}

impl MotoServer {
    /// `None` (a skip, `host::skip`) when `moto_server` is not installed.
    pub async fn spawn() -> Option<MotoServer> {
        if !have_program("moto_server") {
            return None;
        }
        let port = free_port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let server = MotoServer { port, child };
        for _ in 0..300 {
            if server.data().await.is_some() {
                return Some(server);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("moto_server did not answer on port {port} within 30 s");
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn data(&self) -> Option<serde_json::Value> {
        let addr = format!("127.0.0.1:{}", self.port).parse().unwrap();
        let (status, body) = super::http::try_get(addr, "/moto-api/data.json").await?;
        (status == 200).then(|| serde_json::from_str(&body).expect("moto's JSON"))
    }

    /// The raw messages moto's SES holds, in the order sent.
    pub async fn stored(&self) -> Vec<Stored> {
        let data = self.data().await.expect("moto answers");
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        (data["ses"]["RawMessage"].as_array().into_iter().flatten())
            .map(|m| Stored {
                source: text(&m["source"]),
                destinations: (m["destinations"].as_array().into_iter().flatten())
                    .map(text)
                    .collect(),
                raw: text(&m["raw_data"]),
            })
            .collect()
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
