//! The envelope of one message: what the session collects at MAIL and RCPT and each
//! forwarder sends upstream.

/// The SMTP envelope as the client gave it. `from` is `None` for the null sender `<>`
/// (bounces), which must stay null upstream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Envelope {
    pub from: Option<String>,
    pub rcpts: Vec<String>,
    /// The client asked for SMTPUTF8 at MAIL.
    pub smtputf8: bool,
    /// The client declared BODY=8BITMIME at MAIL.
    pub body_8bit: bool,
}
