//! An HTTP proxy in this process, on 127.0.0.1, in front of moto's server: the relay's
//! `[spool] endpoint_url` points at it, so a test can take S3 or SQS down (or one operation
//! of one), lose an answer after the call was made, and count the calls the relay makes.
//!
//! ```ignore
//! let aws = AwsFault::start(&moto).await;          // forwards everything to moto
//! aws.refuse(Service::S3, None);                   // every S3 call answered 503
//! aws.lose_answer(Service::Sqs, "SendMessage");    // forwarded, then answered 500
//! aws.heal();                                      // everything forwarded again
//! aws.count(Service::Sqs, "SendMessage");          // calls seen, failed ones included
//! aws.answered();                                  // each forwarded call: when, moto's time
//! ```
//!
//! A request is SQS's when it names its operation as SQS's protocols do: the JSON protocol in
//! `x-amz-target: AmazonSQS.<Operation>`, the query protocol in an `Action=` (the URI's
//! query or the form body); any other is S3's, its operation read from the method, the path
//! (path-style: `/<bucket>` or `/<bucket>/<key>`) and the query.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::moto::MotoServer;

/// Which of moto's services a request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Service {
    S3,
    Sqs,
}

/// What the proxy does with a request a rule matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Answered `503` at once, not forwarded: the service is down.
    Refuse,
    /// Forwarded (moto does it), then answered `500`: the call was made, its answer lost.
    LoseAnswer,
}

/// A failure for every request of `service`, or for its `operation` only.
#[derive(Clone, Debug)]
struct Rule {
    service: Service,
    operation: Option<String>,
    failure: Failure,
}

impl Rule {
    fn matches(&self, service: Service, operation: &str) -> bool {
        self.service == service && self.operation.as_deref().is_none_or(|o| o == operation)
    }
}

/// One call forwarded to moto: when it reached the proxy, how long moto took to answer it
/// (from the proxy's connect to the answer read whole), and the answer body's size (a long
/// poll that found nothing is the smallest of SQS's `ReceiveMessage` answers).
#[derive(Clone, Debug)]
pub struct Answered {
    pub service: Service,
    pub operation: String,
    pub at: Instant,
    pub took: Duration,
    pub bytes: usize,
}

#[derive(Default)]
struct Shared {
    rules: Mutex<Vec<Rule>>,
    /// Requests seen, per service and operation (failed ones included).
    seen: Mutex<BTreeMap<(Service, String), u64>>,
    /// Requests a rule failed, per service and operation.
    failed: Mutex<BTreeMap<(Service, String), u64>>,
    /// Every call forwarded to moto, in the order answered.
    answered: Mutex<Vec<Answered>>,
}

pub struct AwsFault {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl AwsFault {
    /// A proxy forwarding every request to `moto` until told otherwise.
    pub async fn start(moto: &MotoServer) -> AwsFault {
        let target: SocketAddr = format!("127.0.0.1:{}", moto.port).parse().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let serving = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let shared = Arc::clone(&serving);
                let service = service_fn(move |request| {
                    let shared = Arc::clone(&shared);
                    async move { Ok::<_, hyper::Error>(handle(&shared, target, request).await) }
                });
                tokio::spawn(async move {
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        AwsFault { addr, shared, task }
    }

    /// `http://127.0.0.1:<port>`, for `endpoint_url`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// From now on, every request of `service` (or of its `operation` only) is refused (`503`).
    pub fn refuse(&self, service: Service, operation: Option<&str>) {
        self.add(service, operation, Failure::Refuse);
    }

    /// From now on, `operation` of `service` is forwarded, then answered `500`.
    pub fn lose_answer(&self, service: Service, operation: &str) {
        self.add(service, Some(operation), Failure::LoseAnswer);
    }

    fn add(&self, service: Service, operation: Option<&str>, failure: Failure) {
        self.shared.rules.lock().unwrap().push(Rule {
            service,
            operation: operation.map(str::to_string),
            failure,
        });
    }

    /// From now on, every request is forwarded and answered as moto answers it.
    pub fn heal(&self) {
        self.shared.rules.lock().unwrap().clear();
    }

    /// Requests of `operation` of `service` seen so far, failed ones included.
    pub fn count(&self, service: Service, operation: &str) -> u64 {
        let seen = self.shared.seen.lock().unwrap();
        seen.get(&(service, operation.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// Requests of `operation` of `service` a rule failed so far.
    pub fn failed(&self, service: Service, operation: &str) -> u64 {
        let failed = self.shared.failed.lock().unwrap();
        (failed.get(&(service, operation.to_string())).copied()).unwrap_or(0)
    }

    /// Every request seen so far, per service and operation.
    pub fn counts(&self) -> BTreeMap<(Service, String), u64> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// Every call forwarded to moto so far and answered, with moto's time: what a bench
    /// tells apart from the relay's own.
    pub fn answered(&self) -> Vec<Answered> {
        self.shared.answered.lock().unwrap().clone()
    }
}

impl Drop for AwsFault {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Answer = hyper::Response<Full<Bytes>>;

/// One request: read whole, counted, then failed or forwarded as the rules say.
async fn handle(
    shared: &Shared,
    target: SocketAddr,
    request: hyper::Request<hyper::body::Incoming>,
) -> Answer {
    let (head, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return error(Service::S3, 400, "BadRequest", &e.to_string()),
    };
    let at = Instant::now();
    let (service, operation) = operation_of(&head, &body);
    let key = (service, operation.clone());
    *shared.seen.lock().unwrap().entry(key.clone()).or_default() += 1;
    let rule = (shared.rules.lock().unwrap().iter())
        .find(|r| r.matches(service, &operation))
        .cloned();
    if rule.is_some() {
        *shared.failed.lock().unwrap().entry(key).or_default() += 1;
    }
    match rule.map(|r| r.failure) {
        Some(Failure::Refuse) => error(service, 503, "ServiceUnavailable", "refused by the test"),
        Some(Failure::LoseAnswer) => {
            let _ = forward(target, head, body).await;
            error(service, 500, "InternalError", "answer lost by the test")
        }
        None => {
            let sent = Instant::now();
            let answer = forward(target, head, body).await;
            let answer = answer.unwrap_or_else(|e| error(service, 502, "BadGateway", &e));
            let bytes = hyper::body::Body::size_hint(answer.body())
                .exact()
                .unwrap_or(0) as usize;
            let took = sent.elapsed();
            shared.answered.lock().unwrap().push(Answered {
                service,
                operation,
                at,
                took,
                bytes,
            });
            answer
        }
    }
}

/// The service and operation a request is for (see the module doc).
fn operation_of(head: &hyper::http::request::Parts, body: &[u8]) -> (Service, String) {
    let target = (head.headers.get("x-amz-target")).and_then(|v| v.to_str().ok());
    if let Some(op) = target.and_then(|t| t.strip_prefix("AmazonSQS.")) {
        return (Service::Sqs, op.to_string());
    }
    let query = head.uri.query().unwrap_or("");
    let form = std::str::from_utf8(body).unwrap_or("");
    let action = [query, form]
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("Action="));
    if let Some(action) = action {
        return (Service::Sqs, action.to_string());
    }
    (Service::S3, s3_operation(head, query).to_string())
}

/// An S3 request's operation, path-style.
fn s3_operation(head: &hyper::http::request::Parts, query: &str) -> &'static str {
    let path = head.uri.path().trim_start_matches('/');
    let on_object = path.split_once('/').is_some_and(|(_, key)| !key.is_empty());
    let has = |name: &str| query.split('&').any(|p| p.split('=').next() == Some(name));
    let method = head.method.as_str();
    match (on_object, method) {
        (true, "PUT") if head.headers.contains_key("x-amz-copy-source") => "CopyObject",
        (true, "PUT") => "PutObject",
        (true, "GET") => "GetObject",
        (true, "HEAD") => "HeadObject",
        (true, "DELETE") => "DeleteObject",
        (false, "GET") if has("list-type") => "ListObjectsV2",
        (false, "GET") => "ListObjects",
        (false, "PUT") => "CreateBucket",
        (false, "HEAD") => "HeadBucket",
        (false, "POST") if has("delete") => "DeleteObjects",
        _ => "Other",
    }
}

/// The request as it came (method, path, query, headers, body) to moto, on a connection of
/// its own; moto's answer as it is.
async fn forward(
    target: SocketAddr,
    head: hyper::http::request::Parts,
    body: Bytes,
) -> Result<Answer, String> {
    let tcp = TcpStream::connect(target)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let mut request = hyper::Request::new(Full::new(body));
    *request.method_mut() = head.method;
    *request.uri_mut() = head.uri.path_and_query().unwrap().as_str().parse().unwrap();
    *request.headers_mut() = head.headers;
    request.headers_mut().remove("connection");
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let (mut head, body) = response.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    head.headers.remove("transfer-encoding");
    head.headers.remove("connection");
    Ok(hyper::Response::from_parts(head, Full::new(body)))
}

/// An error answer as `service` words one: S3's XML, SQS's JSON.
fn error(service: Service, status: u16, code: &str, text: &str) -> Answer {
    let (content_type, body) = match service {
        Service::S3 => (
            "application/xml",
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
                 <Error><Code>{code}</Code><Message>{text}</Message></Error>"
            ),
        ),
        Service::Sqs => (
            "application/x-amz-json-1.0",
            serde_json::json!({"__type": format!("com.amazonaws.sqs#{code}"), "message": text})
                .to_string(),
        ),
    };
    let mut builder = hyper::Response::builder()
        .status(status)
        .header("content-type", content_type);
    if service == Service::Sqs {
        builder = builder.header("x-amzn-query-error", format!("{code};Receiver"));
    }
    builder.body(Full::new(Bytes::from(body))).unwrap()
}
