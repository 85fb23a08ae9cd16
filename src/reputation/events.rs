//! SES's event records, in both shapes they arrive in: the SNS envelope (`"Type":
//! "Notification"`, the event as a JSON string in `Message`), or the bare event (SES -> SQS,
//! or an SNS subscription with raw delivery). Both `eventType` (configuration-set event
//! publishing) and `notificationType` (identity notifications) are read. Only a permanent
//! bounce and a complaint count; anything else well-formed is ignored; anything else is an
//! error value for the caller to log, count and drop. Pure: no clock, no state.

use std::collections::HashMap;

use serde::Deserialize;

/// Largest event read: SQS's largest message (256 KiB).
pub const MAX_EVENT_BYTES: usize = 256 * 1024;
/// Most recipients one event may name (SES sends to at most 50 per message).
pub const MAX_RECIPIENTS: usize = 100;
/// Longest message id, feedback id or tenant tag kept: the bound on an upstream's message id.
pub const MAX_ID_BYTES: usize = crate::message::MAX_ID_BYTES;
/// Longest address (RFC 5321's path is 256 octets with its brackets).
pub const MAX_ADDRESS_BYTES: usize = 320;
/// Longest diagnostic kept (a remote server's reply may be long).
pub const MAX_DIAGNOSTIC_BYTES: usize = 1000;
/// The message tag that names the tenant, ahead of the relay's own record.
pub const TENANT_TAG: &str = "mailsluice-tenant";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A permanent (hard) bounce.
    Bounce,
    Complaint,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Bounce => "bounce",
            Kind::Complaint => "complaint",
        }
    }
}

/// An event that counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: Kind,
    /// SES's id of the message, as in its `250 Ok <id>`.
    pub message_id: String,
    /// SES's id of this feedback, the same in every delivery of the event.
    pub feedback_id: Option<String>,
    /// The addresses that bounced or complained (at least one counted).
    pub recipients: Vec<String>,
    /// The `mailsluice-tenant` tag of the message, when it had one.
    pub tenant: Option<String>,
    /// The day of the event, `YYYY-MM-DD`, from its timestamp.
    pub date: Option<String>,
    /// SES's word on it, for the tenant's webhooks: a bounce's first `diagnosticCode` (else
    /// its `bounceSubType`), a complaint's `complaintFeedbackType`; cut at
    /// [`MAX_DIAGNOSTIC_BYTES`].
    pub diagnostic: Option<String>,
}

/// What a record is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Counts(Event),
    /// A delivery, a transient bounce, a send, an open...: read, not counted.
    Ignored,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    #[error("event of {0} bytes, over {MAX_EVENT_BYTES}")]
    TooLarge(usize),
    #[error("not an SES event: {0}")]
    Json(String),
    #[error("SES event without {0}")]
    Missing(&'static str),
    #[error("SES event with {0} over its bound")]
    TooBig(&'static str),
    /// Not the event's fault: the shared store (Redis) did not answer. Not applied; it may be
    /// sent again (SQS: left in the queue; SNS: answered 503).
    #[error("event not applied, the shared store did not answer: {0}")]
    Unavailable(String),
}

impl EventError {
    /// Whether the event itself is at fault (logged, counted and dropped) rather than the
    /// relay (left for its sender to send again).
    pub fn is_malformed(&self) -> bool {
        !matches!(self, EventError::Unavailable(_))
    }
}

/// The fields read of either shape (the envelope's and the event's are disjoint).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEvent {
    #[serde(rename = "Type")]
    sns_type: Option<String>,
    #[serde(rename = "Message")]
    sns_message: Option<String>,
    event_type: Option<String>,
    notification_type: Option<String>,
    mail: Option<Mail>,
    bounce: Option<Bounce>,
    complaint: Option<Complaint>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Mail {
    message_id: String,
    #[serde(default)]
    tags: HashMap<String, Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bounce {
    bounce_type: String,
    bounce_sub_type: Option<String>,
    #[serde(default)]
    bounced_recipients: Vec<Recipient>,
    feedback_id: Option<String>,
    timestamp: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Complaint {
    complaint_feedback_type: Option<String>,
    #[serde(default)]
    complained_recipients: Vec<Recipient>,
    feedback_id: Option<String>,
    timestamp: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Recipient {
    email_address: String,
    diagnostic_code: Option<String>,
}

/// Reads one record (SNS envelope or bare event).
pub fn parse(text: &str) -> Result<Parsed, EventError> {
    let record = read(text)?;
    if let Some(kind) = &record.sns_type {
        if kind != "Notification" {
            return Ok(Parsed::Ignored);
        }
        let inner = record.sns_message.ok_or(EventError::Missing("Message"))?;
        let event = read(&inner)?;
        if event.sns_type.is_some() {
            return Err(EventError::Json(
                "an SNS envelope inside an SNS envelope".into(),
            ));
        }
        return event_of(event);
    }
    event_of(record)
}

fn read(text: &str) -> Result<RawEvent, EventError> {
    if text.len() > MAX_EVENT_BYTES {
        return Err(EventError::TooLarge(text.len()));
    }
    // serde_json refuses nesting past 128 levels itself.
    serde_json::from_str(text).map_err(|e| EventError::Json(e.to_string()))
}

fn event_of(record: RawEvent) -> Result<Parsed, EventError> {
    let kind = (record.event_type.as_deref())
        .or(record.notification_type.as_deref())
        .ok_or(EventError::Missing("eventType or notificationType"))?;
    let (kind, recipients, feedback_id, timestamp, diagnostic) = match kind {
        "Bounce" => {
            let bounce = record.bounce.ok_or(EventError::Missing("bounce"))?;
            if bounce.bounce_type != "Permanent" {
                return Ok(Parsed::Ignored);
            }
            let b = bounce;
            let code = (b.bounced_recipients.iter()).find_map(|r| r.diagnostic_code.clone());
            let diagnostic = code.or(b.bounce_sub_type);
            let r = b.bounced_recipients;
            (Kind::Bounce, r, b.feedback_id, b.timestamp, diagnostic)
        }
        "Complaint" => {
            let c = record.complaint.ok_or(EventError::Missing("complaint"))?;
            let r = c.complained_recipients;
            let diagnostic = c.complaint_feedback_type;
            (Kind::Complaint, r, c.feedback_id, c.timestamp, diagnostic)
        }
        _ => return Ok(Parsed::Ignored),
    };
    let mail = record.mail.ok_or(EventError::Missing("mail"))?;
    if recipients.len() > MAX_RECIPIENTS {
        return Err(EventError::TooBig("recipients"));
    }
    let recipients: Vec<String> = recipients.into_iter().map(|r| r.email_address).collect();
    if recipients.iter().any(|r| r.len() > MAX_ADDRESS_BYTES) {
        return Err(EventError::TooBig("an address"));
    }
    let tenant = (mail.tags.get(TENANT_TAG))
        .and_then(|values| values.first())
        .filter(|t| !t.is_empty())
        .cloned();
    let ids = [
        Some(&mail.message_id),
        feedback_id.as_ref(),
        tenant.as_ref(),
    ];
    if ids.iter().flatten().any(|id| id.len() > MAX_ID_BYTES) {
        return Err(EventError::TooBig("an id"));
    }
    if mail.message_id.is_empty() {
        return Err(EventError::Missing("mail.messageId"));
    }
    Ok(Parsed::Counts(Event {
        kind,
        message_id: mail.message_id,
        feedback_id,
        recipients,
        tenant,
        date: timestamp.as_deref().and_then(day_of),
        diagnostic: diagnostic.map(cut),
    }))
}

/// `text` cut to at most [`MAX_DIAGNOSTIC_BYTES`], on a character's boundary.
fn cut(mut text: String) -> String {
    if text.len() > MAX_DIAGNOSTIC_BYTES {
        let mut end = MAX_DIAGNOSTIC_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// `YYYY-MM-DD` of an ISO 8601 timestamp.
fn day_of(timestamp: &str) -> Option<String> {
    let day = timestamp.get(..10)?;
    let b = day.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    (digits(0..4) && b[4] == b'-' && digits(5..7) && b[7] == b'-' && digits(8..10))
        .then(|| day.to_string())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A bare configuration-set event of `kind` (`Bounce` or `Complaint`).
    pub fn bare(kind: &str, bounce_type: &str, message_id: &str, feedback: &str) -> String {
        let body = match kind {
            "Bounce" => format!(
                r#""bounce":{{"bounceType":"{bounce_type}","bounceSubType":"General","bouncedRecipients":[{{"emailAddress":"gone@example.com"}}],"timestamp":"2026-12-01T10:00:00.000Z","feedbackId":"{feedback}"}}"#
            ),
            _ => format!(
                r#""complaint":{{"complainedRecipients":[{{"emailAddress":"angry@example.com"}}],"timestamp":"2026-12-02T10:00:00.000Z","feedbackId":"{feedback}"}}"#
            ),
        };
        format!(
            r#"{{"eventType":"{kind}","mail":{{"timestamp":"2026-12-01T09:59:00.000Z","messageId":"{message_id}","source":"a@b.example","destination":["x@example.com"],"tags":{{"ses:configuration-set":["c"]}}}},{body}}}"#
        )
    }

    fn envelope(inner: &str) -> String {
        serde_json::json!({"Type": "Notification", "MessageId": "m", "TopicArn": "arn:aws:sns:eu-west-1:1:t", "Message": inner}).to_string()
    }

    #[test]
    fn both_shapes_and_both_type_fields_are_read() {
        let bare = bare("Bounce", "Permanent", "id-1", "fb-1");
        let want = Parsed::Counts(Event {
            kind: Kind::Bounce,
            message_id: "id-1".into(),
            feedback_id: Some("fb-1".into()),
            recipients: vec!["gone@example.com".into()],
            tenant: None,
            date: Some("2026-12-01".into()),
            diagnostic: Some("General".into()),
        });
        assert_eq!(parse(&bare).unwrap(), want);
        assert_eq!(parse(&envelope(&bare)).unwrap(), want);
        let identity = bare.replace("\"eventType\"", "\"notificationType\"");
        assert_eq!(parse(&identity).unwrap(), want);
        let complaint = parse(&envelope(&self::bare("Complaint", "", "id-2", "fb-2"))).unwrap();
        let Parsed::Counts(c) = complaint else {
            panic!("{complaint:?}")
        };
        assert_eq!(
            (c.kind, c.date.as_deref()),
            (Kind::Complaint, Some("2026-12-02"))
        );
    }

    #[test]
    fn soft_bounces_deliveries_and_confirmations_are_ignored() {
        assert_eq!(
            parse(&bare("Bounce", "Transient", "i", "f")).unwrap(),
            Parsed::Ignored
        );
        let delivery = r#"{"eventType":"Delivery","mail":{"messageId":"i"},"delivery":{}}"#;
        assert_eq!(parse(delivery).unwrap(), Parsed::Ignored);
        let confirm = r#"{"Type":"SubscriptionConfirmation","Message":"x"}"#;
        assert_eq!(parse(confirm).unwrap(), Parsed::Ignored);
    }

    #[test]
    fn the_tenant_tag_is_read() {
        let text = bare("Bounce", "Permanent", "i", "f").replace(
            r#""ses:configuration-set":["c"]"#,
            r#""mailsluice-tenant":["acme"]"#,
        );
        let Parsed::Counts(e) = parse(&text).unwrap() else {
            panic!()
        };
        assert_eq!(e.tenant.as_deref(), Some("acme"));
    }

    #[test]
    fn hostile_json_is_an_error_value() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(parse(&deep), Err(EventError::Json(_))));
        let huge = format!(
            r#"{{"eventType":"Bounce","x":"{}"}}"#,
            "a".repeat(MAX_EVENT_BYTES)
        );
        assert!(matches!(parse(&huge), Err(EventError::TooLarge(_))));
        let wrong =
            r#"{"eventType":"Bounce","mail":{"messageId":7},"bounce":{"bounceType":"Permanent"}}"#;
        assert!(matches!(parse(wrong), Err(EventError::Json(_))));
        assert!(matches!(parse("{}"), Err(EventError::Missing(_))));
        assert!(matches!(parse("not json"), Err(EventError::Json(_))));
        let no_mail = r#"{"eventType":"Complaint","complaint":{}}"#;
        assert_eq!(parse(no_mail), Err(EventError::Missing("mail")));
        let nested = envelope(&envelope("{}"));
        assert!(matches!(parse(&nested), Err(EventError::Json(_))));
        let envelope_without_message = r#"{"Type":"Notification"}"#;
        assert_eq!(
            parse(envelope_without_message),
            Err(EventError::Missing("Message"))
        );
    }

    #[test]
    fn recipients_and_ids_at_their_bounds() {
        let many = |n: usize| {
            let list: Vec<String> = (0..n)
                .map(|i| format!(r#"{{"emailAddress":"r{i}@example.com"}}"#))
                .collect();
            bare("Bounce", "Permanent", "i", "f").replace(
                r#"[{"emailAddress":"gone@example.com"}]"#,
                &format!("[{}]", list.join(",")),
            )
        };
        let Parsed::Counts(e) = parse(&many(MAX_RECIPIENTS)).unwrap() else {
            panic!()
        };
        assert_eq!(e.recipients.len(), MAX_RECIPIENTS);
        assert_eq!(
            parse(&many(MAX_RECIPIENTS + 1)),
            Err(EventError::TooBig("recipients"))
        );
        let long_id = bare("Bounce", "Permanent", &"i".repeat(MAX_ID_BYTES + 1), "f");
        assert_eq!(parse(&long_id), Err(EventError::TooBig("an id")));
        assert!(parse(&bare("Bounce", "Permanent", &"i".repeat(MAX_ID_BYTES), "f")).is_ok());
        let address = |n: usize| {
            let long = format!("{}@example.com", "a".repeat(n - "@example.com".len()));
            bare("Bounce", "Permanent", "i", "f").replace("gone@example.com", &long)
        };
        assert!(parse(&address(MAX_ADDRESS_BYTES)).is_ok());
        assert_eq!(
            parse(&address(MAX_ADDRESS_BYTES + 1)),
            Err(EventError::TooBig("an address"))
        );
    }
}
