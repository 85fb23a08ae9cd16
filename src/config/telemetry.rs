//! `[telemetry]`: OpenTelemetry traces of the messages, exported over OTLP/HTTP; off when the
//! section is absent.

use serde::{Deserialize, Deserializer};

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`); spans go to
    /// `<otlp_endpoint>/v1/traces`.
    #[serde(deserialize_with = "http_url")]
    pub otlp_endpoint: String,
    /// The `service.name` of the spans.
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// Put the tenant key on the spans (`mailsluice.key`); off by default, since a key may
    /// name a customer.
    #[serde(default)]
    pub record_keys: bool,
}

fn default_service_name() -> String {
    "mailsluice".into()
}

/// A plain `http://` URL: the exporter speaks OTLP over HTTP without TLS (a collector on the
/// same host or pod, which forwards over TLS itself).
fn http_url<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let url = String::deserialize(deserializer)?;
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        serde::de::Error::custom(format!(
            "key `telemetry.otlp_endpoint`: `{url}` is not an http:// URL (https is not \
             supported: export to a collector beside the relay)"
        ))
    })?;
    if rest.trim_end_matches('/').is_empty() {
        return Err(serde::de::Error::custom(
            "key `telemetry.otlp_endpoint`: the URL names no host",
        ));
    }
    Ok(url.trim_end_matches('/').to_string())
}
