//! A fake SESv2 HTTP endpoint in this process, on 127.0.0.1: `SendEmail` and `GetAccount` as
//! the AWS SDK speaks them (REST-JSON, errors named by `x-amzn-errortype`), with what moto's
//! server cannot do: SES's hidden sending rate (429), its quota text, account and tenant
//! pauses, refused credentials (403), 5xx, a stall after the request was read, and a
//! connection reset before the request was read whole. A small HTTP/1.1 server of its own, so
//! a test decides what happens to each connection at the byte level. SES tenants' own calls
//! are answered by `ses_tenants`.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use mailsluice::clock::{Clock, TokioClock};
use mailsluice::config::Config;
use mailsluice::throttle::bucket::{Bucket, State, Take};
use mailsluice::upstream::SesForwarder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::config::TestConfig;
use super::relay::Relay;
use super::ses_tenants::{operation, SesTenants};

/// The access key id the fake takes; any other is refused with 403.
pub const GOOD_KEY: &str = "AKIDMAILSLUICETEST";

/// One `SendEmail` the fake accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentEmail {
    pub from: Option<String>,
    pub to: Vec<String>,
    pub raw: Vec<u8>,
    pub configuration_set: Option<String>,
    pub tags: Vec<(String, String)>,
    pub tenant: Option<String>,
}

/// What the fake does with the next requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Answer,
    /// Reads the request whole, then never answers.
    StallAfterRead,
    /// Reads the request head only, then resets the connection.
    ResetBeforeBody,
}

#[derive(Default)]
struct Faults {
    mode: Mode,
    /// An error answer for every `SendEmail`: status, type, text.
    error: Option<(u16, String, String)>,
    /// An answer for every `SendEmail` as it is: status and body, no error type.
    raw: Option<(u16, String)>,
    paused_tenants: HashSet<String>,
    /// `SendEmail` with a `TenantName` judged against `tenants` as SES does.
    judge_tenants: bool,
    max_send_rate: f64,
    max_24_hour_send: f64,
    sending_enabled: bool,
}

pub struct FakeSes {
    pub addr: SocketAddr,
    /// SES tenants: their identities, reputation entities and suppression lists.
    pub tenants: SesTenants,
    faults: Mutex<Faults>,
    rate: Mutex<Option<(Bucket, State)>>,
    clock: TokioClock,
    sent: Mutex<Vec<SentEmail>>,
    rate_refusals: AtomicU64,
    requests: AtomicU64,
    /// Requests the fake read whole.
    read_whole: AtomicU64,
}

impl FakeSes {
    pub async fn start() -> Arc<FakeSes> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let fake = Arc::new(FakeSes {
            addr: listener.local_addr().unwrap(),
            tenants: SesTenants::default(),
            faults: Mutex::new(Faults {
                max_send_rate: 14.0,
                max_24_hour_send: 50000.0,
                sending_enabled: true,
                ..Faults::default()
            }),
            rate: Mutex::new(None),
            clock: TokioClock::new(),
            sent: Mutex::default(),
            rate_refusals: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            read_whole: AtomicU64::new(0),
        });
        let serving = fake.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serving.clone().connection(stream));
            }
        });
        fake
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// An `[upstream]` table for this fake, plus `extra` lines.
    pub fn upstream_toml(&self, extra: &str) -> String {
        format!(
            "url = \"ses://eu-west-1\"\nendpoint_url = \"{}\"\n{extra}\n",
            self.url()
        )
    }

    pub fn set_mode(&self, mode: Mode) {
        self.faults.lock().unwrap().mode = mode;
    }

    /// Every `SendEmail` answered `status` with the error type `kind` and `text`.
    pub fn fail_with(&self, answer: Option<(u16, &str, &str)>) {
        self.faults.lock().unwrap().error = answer.map(|(s, k, t)| (s, k.into(), t.into()));
    }

    /// SES's hidden sending rate: `rate` recipients a second, holding as many.
    pub fn set_hidden_rate(&self, rate: Option<u64>) {
        *self.rate.lock().unwrap() =
            rate.map(|r| (Bucket::drip(r, r, 1_000_000_000), State::default()));
    }

    /// Every `SendEmail` answered `status` with `body` as it is (a success SES's SDK cannot
    /// read, a MessageId of the test's): the request still counts as sent.
    pub fn answer_raw(&self, answer: Option<(u16, &str)>) {
        self.faults.lock().unwrap().raw = answer.map(|(s, b)| (s, b.into()));
    }

    /// Every `SendEmail` with a `TenantName` refused as SES does when the tenant is not one
    /// of `tenants` (404 `NotFoundException`) or its sender is not associated with it (400
    /// `BadRequestException`).
    pub fn judge_tenants(&self, judge: bool) {
        self.faults.lock().unwrap().judge_tenants = judge;
    }

    pub fn pause_tenant(&self, tenant: &str, paused: bool) {
        let tenants = &mut self.faults.lock().unwrap().paused_tenants;
        match paused {
            true => tenants.insert(tenant.to_string()),
            false => tenants.remove(tenant),
        };
    }

    /// What `GetAccount` says.
    pub fn set_account(&self, max_send_rate: f64, sending_enabled: bool) {
        let mut faults = self.faults.lock().unwrap();
        (faults.max_send_rate, faults.sending_enabled) = (max_send_rate, sending_enabled);
    }

    /// `GetAccount`'s `Max24HourSend` (its `SentLast24Hours` is what the fake accepted).
    pub fn set_day_quota(&self, max_24_hour_send: f64) {
        self.faults.lock().unwrap().max_24_hour_send = max_24_hour_send;
    }

    pub fn sent(&self) -> Vec<SentEmail> {
        self.sent.lock().unwrap().clone()
    }

    pub fn rate_refusals(&self) -> u64 {
        self.rate_refusals.load(Ordering::SeqCst)
    }

    /// Requests that reached the fake (whole or not), but the tenant calls (`tenants` counts
    /// those).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    pub fn read_whole(&self) -> u64 {
        self.read_whole.load(Ordering::SeqCst)
    }

    async fn connection(self: Arc<FakeSes>, mut stream: TcpStream) {
        let mut buf = Vec::new();
        loop {
            let Some(head_end) = read_head(&mut stream, &mut buf).await else {
                return;
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
            if operation(&head).is_none() {
                self.requests.fetch_add(1, Ordering::SeqCst);
            }
            if self.faults.lock().unwrap().mode == Mode::ResetBeforeBody {
                // Closing with the body unread resets the connection.
                return;
            }
            let length = header(&head, "content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            while buf.len() < head_end + length {
                let mut chunk = vec![0; 64 * 1024];
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let body = buf[head_end..head_end + length].to_vec();
            buf.drain(..head_end + length);
            self.read_whole.fetch_add(1, Ordering::SeqCst);
            if self.faults.lock().unwrap().mode == Mode::StallAfterRead {
                std::future::pending::<()>().await;
            }
            let tenant_call = operation(&head);
            if tenant_call.is_some() {
                self.tenants.enter().await;
            }
            let (status, kind, json) = self.answer(&head, &body);
            if tenant_call.is_some() {
                self.tenants.leave();
            }
            let mut response = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
                json.len()
            );
            if let Some(kind) = kind {
                response.push_str(&format!("x-amzn-errortype: {kind}\r\n"));
            }
            response.push_str("\r\n");
            response.push_str(&json);
            if stream.write_all(response.as_bytes()).await.is_err() {
                return;
            }
        }
    }

    fn answer(&self, head: &str, body: &[u8]) -> (u16, Option<String>, String) {
        let error = |status, kind: &str, text: &str| {
            let json = serde_json::json!({ "message": text }).to_string();
            (status, Some(kind.to_string()), json)
        };
        let key = header(head, "authorization")
            .and_then(|a| a.split("Credential=").nth(1))
            .and_then(|c| c.split('/').next())
            .unwrap_or("");
        if key != GOOD_KEY {
            let text = "The security token included in the request is invalid.";
            return error(403, "UnrecognizedClientException", text);
        }
        if let Some(op) = operation(head) {
            return self.tenants.answer(op, head, body);
        }
        let faults = self.faults.lock().unwrap();
        if head.starts_with("GET /v2/email/account") {
            let account = serde_json::json!({
                "SendingEnabled": faults.sending_enabled,
                "EnforcementStatus": if faults.sending_enabled { "HEALTHY" } else { "SHUTDOWN" },
                "ProductionAccessEnabled": true,
                "DedicatedIpAutoWarmupEnabled": false,
                "SendQuota": {
                    "Max24HourSend": faults.max_24_hour_send,
                    "MaxSendRate": faults.max_send_rate,
                    "SentLast24Hours": self.sent.lock().unwrap().len() as f64,
                },
            });
            return (200, None, account.to_string());
        }
        if !head.starts_with("POST /v2/email/outbound-emails") {
            return error(404, "NotFoundException", "no such operation in the fake");
        }
        let email = parse_send_email(body);
        if let Some((status, kind, text)) = &faults.error {
            return error(*status, kind, text);
        }
        if let Some((status, body)) = faults.raw.clone() {
            drop(faults);
            self.sent.lock().unwrap().push(email);
            return (status, None, body);
        }
        if let (Some(tenant), true) = (&email.tenant, faults.judge_tenants) {
            let from = email.from.as_deref().unwrap_or("");
            match self.tenants.associates(tenant, from) {
                None => {
                    let text = format!("Tenant {tenant} does not exist.");
                    return error(404, "NotFoundException", &text);
                }
                Some(false) => {
                    let text =
                        format!("Email identity {from} is not associated with tenant {tenant}.");
                    return error(400, "BadRequestException", &text);
                }
                Some(true) => {}
            }
        }
        if email
            .tenant
            .as_ref()
            .is_some_and(|t| faults.paused_tenants.contains(t))
        {
            return error(
                400,
                "SendingPausedException",
                "Sending is paused for this tenant.",
            );
        }
        drop(faults);
        if let Some((bucket, state)) = self.rate.lock().unwrap().as_mut() {
            match bucket.take(*state, self.clock.now(), email.to.len() as u64) {
                (Take::Granted, next) => *state = next,
                _ => {
                    self.rate_refusals.fetch_add(1, Ordering::SeqCst);
                    return error(
                        429,
                        "TooManyRequestsException",
                        "Maximum sending rate exceeded.",
                    );
                }
            }
        }
        let mut sent = self.sent.lock().unwrap();
        sent.push(email);
        let id = format!("fake-{:06}", sent.len());
        (
            200,
            None,
            serde_json::json!({ "MessageId": id }).to_string(),
        )
    }
}

/// Reads until the end of a request head; its length, or `None` when the client left.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(at + 4);
        }
        let mut chunk = vec![0; 16 * 1024];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn header<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn parse_send_email(body: &[u8]) -> SentEmail {
    let json: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    let data = json["Content"]["Raw"]["Data"].as_str().unwrap_or("");
    SentEmail {
        from: text(&json["FromEmailAddress"]),
        to: (json["Destination"]["ToAddresses"]
            .as_array()
            .into_iter()
            .flatten())
        .filter_map(text)
        .collect(),
        raw: base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap_or_default(),
        configuration_set: text(&json["ConfigurationSetName"]),
        tags: (json["EmailTags"].as_array().into_iter().flatten())
            .map(|t| {
                (
                    text(&t["Name"]).unwrap_or_default(),
                    text(&t["Value"]).unwrap_or_default(),
                )
            })
            .collect(),
        tenant: text(&json["TenantName"]),
    }
}

/// A relay whose only upstream is `ses://` at `fake` (`upstream_extra` in its `[upstream]`
/// table), with explicit credentials, and `tables` after it (routes, `[reputation]`).
pub async fn relay(fake: &FakeSes, upstream_extra: &str, tables: &str) -> Relay {
    let text = TestConfig::new()
        .then(&format!(
            "[upstream]\n{}",
            fake.upstream_toml(upstream_extra)
        ))
        .then(tables)
        .text();
    Relay::start(&text, forwarder(&text, GOOD_KEY)).await
}

/// A `ses://` forwarder for a config's first upstream, with explicit credentials (`key`).
pub fn forwarder(config_text: &str, key: &str) -> Arc<SesForwarder> {
    // Never asked with explicit credentials; set before any SDK client reads the environment
    // (CI exports it, so a running test does not write the environment then).
    if std::env::var("AWS_EC2_METADATA_DISABLED").as_deref() != Ok("true") {
        std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    }
    let config = Config::parse(config_text).expect("test config");
    let credentials = aws_sdk_sesv2::config::Credentials::new(key, "secret", None, None, "test");
    Arc::new(SesForwarder::with_credentials(&config.upstreams[0], credentials).expect("forwarder"))
}
