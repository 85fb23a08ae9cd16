//! OTLP traces (`[telemetry]`), as a collector receives them: an in-process OTLP/HTTP receiver
//! on 127.0.0.1 decodes the protobuf the relay posts and the test reads the spans.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::support::relay::smtp_relay;
use crate::support::upstream::TestUpstream;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const APP_SPAN: &str = "00f067aa0ba902b7";

/// An OTLP/HTTP receiver: each request to `/v1/traces` decoded, its spans sent on.
async fn receiver() -> (String, mpsc::UnboundedReceiver<(String, Span)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            post(
                |State(tx): State<mpsc::UnboundedSender<(String, Span)>>, body: Bytes| async move {
                    let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                    for resource in request.resource_spans {
                        let service = (resource.resource.iter())
                            .flat_map(|r| &r.attributes)
                            .find(|a| a.key == "service.name")
                            .map(|a| text(a.value.as_ref().and_then(|v| v.value.as_ref())))
                            .unwrap_or_default();
                        for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                            let _ = tx.send((service.clone(), span));
                        }
                    }
                    ""
                },
            ),
        )
        .with_state(tx);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, rx)
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(span: &Span) -> HashMap<String, String> {
    (span.attributes.iter())
        .map(|a| {
            (
                a.key.clone(),
                text(a.value.as_ref().and_then(|v| v.value.as_ref())),
            )
        })
        .collect()
}

/// The spans of one message: `message` and its children, as received.
async fn spans_of_one_message(
    rx: &mut mpsc::UnboundedReceiver<(String, Span)>,
) -> Vec<(String, Span)> {
    let mut spans = Vec::new();
    while spans.len() < 3 {
        let next = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await;
        spans.push(next.expect("spans arrive").expect("receiver open"));
    }
    spans
}

async fn relay_with_traces(
    record_keys: bool,
) -> (
    TestUpstream,
    crate::support::relay::Relay,
    mpsc::UnboundedReceiver<(String, Span)>,
) {
    let (url, rx) = receiver().await;
    let up = TestUpstream::start().await;
    let rest = format!(
        "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\nlimit = 5\n\n\
         [telemetry]\notlp_endpoint = \"{url}\"\nservice_name = \"relay-under-test\"\n\
         record_keys = {record_keys}\n"
    );
    let relay = smtp_relay(&up.url(), "", &rest).await;
    (up, relay, rx)
}

#[tokio::test]
async fn a_message_is_one_span_under_the_apps_trace_with_its_wait_and_upstream_leg() {
    let (up, relay, mut rx) = relay_with_traces(false).await;
    let traceparent = format!("00-{TRACE}-{APP_SPAN}-01");
    let message =
        format!("X-Tenant: acme\r\ntraceparent: {traceparent}\r\nSubject: s\r\n\r\nhi\r\n");
    let mut c = relay.client().await;
    let (code, _) = c
        .send_mail(
            "app@example.com",
            &["someone@example.net"],
            message.as_bytes(),
        )
        .await;
    assert_eq!(code, 250);
    let spans = spans_of_one_message(&mut rx).await;
    for (service, span) in &spans {
        println!(
            "decoded: service={service} name={} trace={} span={} parent={} attributes={:?}",
            span.name,
            hex(&span.trace_id),
            hex(&span.span_id),
            hex(&span.parent_span_id),
            attributes(span)
        );
    }
    let find = |name: &str| {
        &spans
            .iter()
            .find(|(_, s)| s.name == name)
            .unwrap_or_else(|| panic!("{name} span"))
            .1
    };
    let (message, wait, leg) = (find("message"), find("throttle.wait"), find("upstream"));
    assert!(spans
        .iter()
        .all(|(service, s)| service == "relay-under-test" && hex(&s.trace_id) == TRACE));
    assert_eq!(
        hex(&message.parent_span_id),
        APP_SPAN,
        "the app's span is the parent"
    );
    assert_eq!(wait.parent_span_id, message.span_id);
    assert_eq!(leg.parent_span_id, message.span_id);
    assert!(
        message.start_time_unix_nano <= wait.start_time_unix_nano
            && leg.end_time_unix_nano <= message.end_time_unix_nano
    );
    let a = attributes(message);
    assert_eq!(a["mailsluice.outcome"], "delivered");
    assert_eq!(a["smtp.reply_code"], "250");
    assert_eq!(a["mailsluice.cost"], "1");
    assert_eq!(a["mailsluice.upstream"], "default");
    assert!(
        !a.contains_key("mailsluice.key"),
        "keys only with record_keys: {a:?}"
    );
    assert_eq!(attributes(wait)["mailsluice.layer"], "tenant");
    let all: Vec<String> = spans
        .iter()
        .flat_map(|(_, s)| attributes(s).into_values())
        .collect();
    assert!(
        all.iter().all(|v| !v.contains('@') && !v.contains("acme")),
        "no addresses, no key: {all:?}"
    );
    // The header goes upstream unchanged.
    let got = String::from_utf8(up.messages()[0].data.clone()).unwrap();
    assert!(
        got.contains(&format!("traceparent: {traceparent}\r\n")),
        "{got}"
    );
    relay.stop().await;
}

#[tokio::test]
async fn record_keys_puts_the_tenant_on_the_span_and_no_traceparent_starts_a_trace() {
    let (_up, relay, mut rx) = relay_with_traces(true).await;
    let mut c = relay.client().await;
    let message = b"X-Tenant: acme\r\nSubject: s\r\n\r\nhi\r\n";
    let (code, _) = c
        .send_mail("app@example.com", &["someone@example.net"], message)
        .await;
    assert_eq!(code, 250);
    let spans = spans_of_one_message(&mut rx).await;
    let message = &spans
        .iter()
        .find(|(_, s)| s.name == "message")
        .expect("message span")
        .1;
    assert!(message.parent_span_id.is_empty(), "a root span");
    assert_eq!(attributes(message)["mailsluice.key"], "acme");
    relay.stop().await;
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn a_collector_that_never_answers_delays_no_message() {
    // Accepts connections and never reads or answers: every export hangs until its timeout.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            open.push(conn);
        }
    });
    let up = TestUpstream::start().await;
    let rest = format!("[telemetry]\notlp_endpoint = \"{url}\"\n");
    let relay = smtp_relay(&up.url(), "", &rest).await;
    let mut c = relay.client().await;
    for i in 0..20 {
        let message = format!("Subject: {i}\r\n\r\nhi\r\n");
        let (code, _) = c
            .send_mail("a@example.com", &["b@example.net"], message.as_bytes())
            .await;
        assert_eq!(code, 250, "message {i}");
    }
    assert_eq!(up.messages().len(), 20);
    held.abort();
    relay.stop().await;
}
