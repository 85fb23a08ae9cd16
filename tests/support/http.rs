//! Real HTTP requests against the admin endpoint (ureq, blocking, run off the async workers).

use std::net::SocketAddr;

type Answer = Result<ureq::http::Response<ureq::Body>, ureq::Error>;

/// Runs `send` on a blocking thread with an agent that takes a 4xx or 5xx as an answer, not
/// an error; its status and body, `None` when nothing answered.
async fn exchange<F>(send: F) -> Option<(u16, String)>
where
    F: FnOnce(&ureq::Agent) -> Answer + Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent();
        let mut response = send(&agent).ok()?;
        let status = response.status().as_u16();
        Some((status, response.body_mut().read_to_string().ok()?))
    })
    .await
    .unwrap()
}

/// Status and body of `GET http://{addr}{path}`; a 4xx or 5xx is an answer, not an error.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    try_get(addr, path).await.expect("an HTTP answer")
}

/// As [`get`], `None` when nothing answers (a server still starting).
pub async fn try_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let url = format!("http://{addr}{path}");
    exchange(move |agent| agent.get(&url).call()).await
}

/// Status and body of `METHOD http://{addr}{path}`, with HTTP Basic `password` (user
/// `admin`) when given.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    password: Option<&str>,
) -> (u16, String) {
    use base64::Engine;
    let url = format!("http://{addr}{path}");
    let method = method.to_string();
    let auth = password.map(|p| {
        let pair = format!("admin:{p}");
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        )
    });
    let answer = exchange(move |agent| {
        let request = ureq::http::Request::builder()
            .method(method.as_str())
            .uri(&url);
        let request = match &auth {
            Some(value) => request.header("Authorization", value),
            None => request,
        };
        agent.run(request.body(()).unwrap())
    });
    answer.await.expect("an HTTP answer")
}

/// Status and body of `METHOD http://{addr}{path}` with `headers` and `body`, as an API's
/// client sends it (moto's S3 and SQS, say).
pub async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, String) {
    let url = format!("http://{addr}{path}");
    let method = method.to_string();
    let headers: Vec<(String, String)> = (headers.iter())
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    let answer = exchange(move |agent| {
        let mut request = ureq::http::Request::builder()
            .method(method.as_str())
            .uri(&url);
        for (name, value) in &headers {
            request = request.header(name, value);
        }
        agent.run(request.body(body).unwrap())
    });
    answer.await.expect("an HTTP answer")
}

/// Status and body of `POST http://{addr}{path}` with `body` (JSON, as SNS posts it).
pub async fn post(addr: SocketAddr, path: &str, body: Vec<u8>) -> (u16, String) {
    let url = format!("http://{addr}{path}");
    let answer = exchange(move |agent| {
        (agent.post(&url))
            .header("Content-Type", "text/plain; charset=UTF-8")
            .send(&body[..])
    });
    answer.await.expect("an HTTP answer")
}

/// Status and body of `METHOD {path}` sent as written over a plain connection to `addr`, with
/// `headers` (a browser's `Origin`, `Sec-Fetch-Site`, a `Host` other than `addr`: what an
/// HTTP client would set itself), `Host: {addr}` unless they name one, HTTP Basic `password`
/// (user `admin`) when given, and an empty body.
pub async fn raw_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    password: Option<&str>,
    headers: &[(&str, &str)],
) -> (u16, String) {
    use base64::Engine;
    use std::fmt::Write;
    use std::io::{Read, Write as _};
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nconnection: close\r\ncontent-length: 0\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        write!(head, "host: {addr}\r\n").unwrap();
    }
    for (name, value) in headers {
        write!(head, "{name}: {value}\r\n").unwrap();
    }
    if let Some(p) = password {
        let pair = base64::engine::general_purpose::STANDARD.encode(format!("admin:{p}"));
        write!(head, "authorization: Basic {pair}\r\n").unwrap();
    }
    head.push_str("\r\n");
    let answer = tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.write_all(head.as_bytes()).unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    })
    .await
    .unwrap();
    let status = (answer.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP answer: {answer:?}"));
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}
