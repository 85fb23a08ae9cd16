//! moto's server (`pip install "moto[server]"`), a stand-in for SES's real API: started by
//! the test on a free port of 127.0.0.1 and killed when dropped. What it stored is read from
//! its `/moto-api/data.json`. Without `moto_server` the test is skipped through `host::skip`
//! (a failure unless skips are allowed). It serves S3 and SQS as well, for the spool's
//! `store = "s3"`: a bucket and a queue made, objects listed, a queue's counts read, each
//! straight to moto (not through a test's `AwsFault`).

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

/// The region the spool's tests use (moto keeps each region's queues apart).
pub const REGION: &str = "us-east-1";

/// An `Authorization` header naming `service`: moto checks no signature, and picks the
/// service of a request from this header's credential scope.
fn scope(service: &str) -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential=AKIDTEST/20260101/{REGION}/{service}/aws4_request, \
         SignedHeaders=host, Signature=0"
    )
}

impl MotoServer {
    fn addr(&self) -> std::net::SocketAddr {
        format!("127.0.0.1:{}", self.port).parse().unwrap()
    }

    /// Makes the S3 bucket `bucket`.
    pub async fn create_bucket(&self, bucket: &str) {
        let auth = scope("s3");
        let headers = [("authorization", auth.as_str())];
        let path = format!("/{bucket}");
        let (status, body) = super::http::call(self.addr(), "PUT", &path, &headers, vec![]).await;
        assert_eq!(status, 200, "moto's CreateBucket: {body}");
    }

    /// The keys of the objects of `bucket` under `prefix` (up to 1000).
    pub async fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let auth = scope("s3");
        let headers = [("authorization", auth.as_str())];
        let path = format!("/{bucket}?list-type=2&prefix={prefix}");
        let (status, body) = super::http::call(self.addr(), "GET", &path, &headers, vec![]).await;
        assert_eq!(status, 200, "moto's ListObjectsV2: {body}");
        (body.split("<Key>").skip(1))
            .filter_map(|rest| rest.split("</Key>").next())
            .map(str::to_string)
            .collect()
    }

    /// SQS's `operation` (its JSON protocol) with `input`; moto's answer as JSON.
    pub async fn sqs(&self, operation: &str, input: serde_json::Value) -> serde_json::Value {
        let auth = scope("sqs");
        let target = format!("AmazonSQS.{operation}");
        let headers = [
            ("authorization", auth.as_str()),
            ("x-amz-target", target.as_str()),
            ("content-type", "application/x-amz-json-1.0"),
        ];
        let body = input.to_string().into_bytes();
        let (status, body) = super::http::call(self.addr(), "POST", "/", &headers, body).await;
        assert_eq!(status, 200, "moto's {operation}: {body}");
        serde_json::from_str(&body).expect("moto's JSON")
    }

    /// Makes the standard queue `name` with `attributes` (e.g. `VisibilityTimeout`); its URL.
    pub async fn create_queue(&self, name: &str, attributes: serde_json::Value) -> String {
        let input = serde_json::json!({"QueueName": name, "Attributes": attributes});
        let answer = self.sqs("CreateQueue", input).await;
        answer["QueueUrl"].as_str().expect("a QueueUrl").to_string()
    }

    /// The entries of the queue at `url`, visible or not (its approximate counts, which moto
    /// keeps exact).
    pub async fn queued(&self, url: &str) -> u64 {
        let input = serde_json::json!({"QueueUrl": url, "AttributeNames": ["All"]});
        let answer = self.sqs("GetQueueAttributes", input).await;
        let count = |name: &str| {
            (answer["Attributes"][name].as_str())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        };
        count("ApproximateNumberOfMessages")
            + count("ApproximateNumberOfMessagesNotVisible")
            + count("ApproximateNumberOfMessagesDelayed")
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
