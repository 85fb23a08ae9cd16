//! One POST to the token endpoint and its answer read (RFC 6749 5.1, 5.2): HTTP/1.1 over
//! hyper, TLS by rustls (the process's aws-lc-rs provider, the system's roots), as the
//! webhooks post. A token is asked for rarely (once an hour or so), so each POST opens its
//! own connection.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::TokenError;
use crate::config::HttpUrl;
use crate::upstream::client::Tls;

/// The most of an answer read: a token endpoint's JSON is a few kilobytes.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Where tokens are asked for.
pub(super) struct Endpoint {
    pub url: HttpUrl,
    /// `None` for `http://` (loopback only).
    tls: Option<Tls>,
}

/// A token as the endpoint gave it.
#[derive(Debug)]
pub(super) struct Issued {
    pub access_token: String,
    /// Seconds it is good for; absent, the provider's usual hour.
    pub expires_in: Option<u64>,
}

#[derive(Deserialize)]
struct Answer {
    access_token: Option<String>,
    expires_in: Option<serde_json::Value>,
    error: Option<String>,
    error_description: Option<String>,
}

impl Endpoint {
    pub fn new(url: HttpUrl) -> Result<Endpoint, crate::upstream::client::ClientTlsError> {
        let tls = match url.https {
            true => Some(Tls::verified(&url.host)?),
            false => None,
        };
        Ok(Endpoint { url, tls })
    }

    /// POSTs `form`; the token, or why none came. Unbounded in time: the caller bounds it.
    pub async fn ask(&self, form: String) -> Result<Issued, TokenError> {
        let unreachable = |e: String| TokenError::Unreachable(e);
        let tcp = TcpStream::connect((self.url.host.as_str(), self.url.port))
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        let (status, body) = match &self.tls {
            Some(tls) => {
                let stream = (tls.connector().connect(tls.name(), tcp).await)
                    .map_err(|e| unreachable(format!("TLS: {e}")))?;
                self.post(stream, form).await?
            }
            None => self.post(tcp, form).await?,
        };
        read_answer(status, &body)
    }

    async fn post<S>(&self, io: S, form: String) -> Result<(u16, Bytes), TokenError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let broke = |e: hyper::Error| TokenError::Unreachable(e.to_string());
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(broke)?;
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        let request = http::Request::post(self.url.path.as_str())
            .header(http::header::HOST, self.authority())
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::USER_AGENT, "mailsluice")
            .body(Full::new(Bytes::from(form)))
            .map_err(|e| TokenError::Unreachable(e.to_string()))?;
        let answered = async {
            let response = sender.send_request(request).await.map_err(broke)?;
            let status = response.status().as_u16();
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| TokenError::Unreadable(e.to_string()))?
                .to_bytes();
            Ok((status, body))
        }
        .await;
        driver.abort();
        answered
    }

    fn authority(&self) -> String {
        let url = &self.url;
        let host = match url.host.contains(':') {
            true => format!("[{}]", url.host),
            false => url.host.clone(),
        };
        let default_port = if url.https { 443 } else { 80 };
        match url.port == default_port {
            true => host,
            false => format!("{host}:{}", url.port),
        }
    }
}

/// The token of a `200`, or the endpoint's refusal in its own words (`error` and
/// `error_description`: never a secret; the rest of the body is not shown).
fn read_answer(status: u16, body: &[u8]) -> Result<Issued, TokenError> {
    let answer: Option<Answer> = serde_json::from_slice(body).ok();
    match (status, answer) {
        (
            200,
            Some(Answer {
                access_token: Some(access_token),
                expires_in,
                ..
            }),
        ) if !access_token.is_empty() => Ok(Issued {
            access_token,
            expires_in: expires_in.as_ref().and_then(seconds),
        }),
        (200, _) => Err(TokenError::Unreadable(
            "a 200 without an access_token".into(),
        )),
        (
            status,
            Some(Answer {
                error: Some(error),
                error_description,
                ..
            }),
        ) => Err(TokenError::Refused {
            status,
            error: shown(&error),
            description: error_description.as_deref().map(shown),
        }),
        (status, _) => Err(TokenError::Refused {
            status,
            error: "no error named".into(),
            description: None,
        }),
    }
}

/// `expires_in` as a number or, as some endpoints write it, a string of digits.
fn seconds(value: &serde_json::Value) -> Option<u64> {
    match value {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// The endpoint's words, one line and bounded, for the log and `/readyz`.
fn shown(text: &str) -> String {
    let line: String = text.chars().filter(|c| !c.is_control()).take(300).collect();
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_a_token_or_the_endpoints_words() {
        let ok = read_answer(200, br#"{"access_token":"t1","expires_in":"3599"}"#).unwrap();
        assert_eq!(
            (ok.access_token.as_str(), ok.expires_in),
            ("t1", Some(3599))
        );
        let refused = read_answer(
            400,
            br#"{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret"}"#,
        )
        .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "the token endpoint answered 400 invalid_client: AADSTS7000215: Invalid client secret"
        );
        assert!(matches!(
            read_answer(200, b"{}"),
            Err(TokenError::Unreadable(_))
        ));
        assert!(matches!(
            read_answer(502, b"<html>"),
            Err(TokenError::Refused { status: 502, .. })
        ));
    }
}
