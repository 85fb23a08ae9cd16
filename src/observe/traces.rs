//! OpenTelemetry traces of the messages (`[telemetry]`): one span per message from its final
//! dot to its reply, with a child for the wait for tokens and one for the upstream leg. A
//! `traceparent` header in the message makes the span a child of the app's trace (the header
//! goes upstream unchanged: the relay does not touch it).
//!
//! The spans are built when the message's verdict is known, from the times it records, and
//! handed to the SDK's batch processor: a bounded queue (a full one drops the span) emptied
//! by a thread of its own, so an export that fails or hangs never delays a message. Export is
//! OTLP over HTTP (protobuf), posted with ureq.

use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Span, SpanBuilder, SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId,
    TraceState, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;

use crate::config::TelemetryConfig;

/// Spans waiting for export, at most; past it new spans are dropped.
const MAX_QUEUE: usize = 2048;
/// How long one export may take (connect included).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a batch goes out.
const EXPORT_EVERY: Duration = Duration::from_secs(1);

/// The relay's tracer; dropping the last handle flushes what is queued.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    record_keys: bool,
}

/// What one message's spans say, from its verdict.
pub struct MessageSpans<'a> {
    /// When the final dot came, and how long until the reply.
    pub started: SystemTime,
    pub duration: Duration,
    /// The wait for tokens, from the final dot.
    pub waited: Duration,
    /// The message went to an upstream (the leg after the wait).
    pub forwarded: bool,
    pub outcome: &'a str,
    pub reply_code: Option<u16>,
    pub cost: u64,
    pub layer: &'a str,
    pub key: &'a str,
    pub upstream: &'a str,
    /// The message's `traceparent` header, if any.
    pub traceparent: Option<&'a str>,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot set up the OTLP exporter: {0}")]
pub struct TracesError(String);

impl Traces {
    pub fn new(config: &TelemetryConfig) -> Result<Traces, TracesError> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(EXPORT_TIMEOUT))
            .build()
            .into();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(Ureq(agent))
            .with_endpoint(format!("{}/v1/traces", config.otlp_endpoint))
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TracesError(e.to_string()))?;
        let batches = BatchConfigBuilder::default()
            .with_max_queue_size(MAX_QUEUE)
            .with_scheduled_delay(EXPORT_EVERY)
            .build();
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batches)
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(
                Resource::builder()
                    .with_service_name(config.service_name.clone())
                    .build(),
            )
            .build();
        Ok(Traces {
            tracer: provider.tracer("mailsluice"),
            provider,
            record_keys: config.record_keys,
        })
    }

    /// Queues the spans of one message; never waits.
    pub fn message(&self, m: &MessageSpans<'_>) {
        let parent = match m.traceparent.and_then(parse_traceparent) {
            Some(remote) => Context::new().with_remote_span_context(remote),
            None => Context::new(),
        };
        let mut attributes = vec![
            KeyValue::new("mailsluice.outcome", m.outcome.to_string()),
            KeyValue::new("mailsluice.cost", m.cost as i64),
            KeyValue::new("mailsluice.waited_ms", m.waited.as_millis() as i64),
            KeyValue::new("mailsluice.upstream", m.upstream.to_string()),
        ];
        if let Some(code) = m.reply_code {
            attributes.push(KeyValue::new("smtp.reply_code", i64::from(code)));
        }
        if self.record_keys {
            attributes.push(KeyValue::new("mailsluice.key", m.key.to_string()));
        }
        let end = m.started + m.duration;
        let message = SpanBuilder::from_name("message")
            .with_kind(SpanKind::Server)
            .with_start_time(m.started)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        let inside = Context::new().with_remote_span_context(message.span_context().clone());
        let waited_until = m.started + m.waited.min(m.duration);
        let mut wait = SpanBuilder::from_name("throttle.wait")
            .with_start_time(m.started)
            .with_attributes([KeyValue::new("mailsluice.layer", m.layer.to_string())])
            .start_with_context(&self.tracer, &inside);
        wait.end_with_timestamp(waited_until);
        if m.forwarded {
            let mut leg = SpanBuilder::from_name("upstream")
                .with_kind(SpanKind::Client)
                .with_start_time(waited_until)
                .with_attributes([KeyValue::new("mailsluice.upstream", m.upstream.to_string())])
                .start_with_context(&self.tracer, &inside);
            leg.end_with_timestamp(end);
        }
        let mut message = message;
        message.end_with_timestamp(end);
    }
}

impl Drop for Traces {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::debug!(error = %e, "traces: flush at exit");
        }
    }
}

/// A W3C `traceparent` value (`00-<trace id>-<span id>-<flags>`); anything else is ignored
/// and the message starts a trace of its own.
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    if version != "00"
        || parts.next().is_some()
        || !hex(trace, 32)
        || !hex(span, 16)
        || !hex(flags, 2)
    {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
    Some(SpanContext::new(
        trace_id,
        span_id,
        flags,
        true,
        TraceState::default(),
    ))
}

/// ureq as the exporter's HTTP client: the batch processor's thread runs the export, so a
/// blocking call there holds no async worker.
#[derive(Debug)]
struct Ureq(ureq::Agent);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Ureq {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let response = self.0.run(request.map(|body| body.to_vec()))?;
        let (parts, body) = response.into_parts();
        let body = body.into_with_config().limit(1 << 20).read_to_vec()?;
        Ok(http::Response::from_parts(parts, body.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_and_a_bad_one_ignored() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = parse_traceparent(good).expect("valid");
        assert_eq!(
            context.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert!(context.is_sampled());
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?}");
        }
    }
}
