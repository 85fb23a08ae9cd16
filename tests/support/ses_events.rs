//! SES's events as its event destinations write them (`eventType`), for the reputation
//! guard's `apply_text`, SNS and SQS: a permanent bounce (its diagnostic `smtp; 550 5.1.1 user
//! unknown`) and a complaint (`abuse`) of one recipient.

/// A permanent bounce of `rcpt`, of the message SES named `message_id`.
pub fn bounce(message_id: &str, feedback: &str, rcpt: &str) -> String {
    format!(
        r#"{{"eventType":"Bounce","mail":{{"messageId":"{message_id}"}},"bounce":{{"bounceType":"Permanent","bounceSubType":"General","bouncedRecipients":[{{"emailAddress":"{rcpt}","diagnosticCode":"smtp; 550 5.1.1 user unknown"}}],"timestamp":"2026-12-01T10:00:00Z","feedbackId":"{feedback}"}}}}"#
    )
}

/// A complaint of `rcpt` about the message SES named `message_id`.
pub fn complaint(message_id: &str, feedback: &str, rcpt: &str) -> String {
    format!(
        r#"{{"eventType":"Complaint","mail":{{"messageId":"{message_id}"}},"complaint":{{"complainedRecipients":[{{"emailAddress":"{rcpt}"}}],"complaintFeedbackType":"abuse","timestamp":"2026-12-01T10:00:00Z","feedbackId":"{feedback}"}}}}"#
    )
}

/// A complaint in SES's notification shape (`notificationType`, as an SNS topic of SES's
/// notifications carries it), the other shape the guard reads.
pub fn complaint_notification(message_id: &str, feedback: &str, rcpt: &str) -> String {
    format!(
        r#"{{"notificationType":"Complaint","mail":{{"messageId":"{message_id}"}},"complaint":{{"complainedRecipients":[{{"emailAddress":"{rcpt}"}}],"feedbackId":"{feedback}"}}}}"#
    )
}
