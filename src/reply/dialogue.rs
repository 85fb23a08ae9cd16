//! The dialogue's own replies: what the session says at each step (greeting, verbs, their
//! bounds, TLS and AUTH, DATA's refusals, a held message) as docs/replies.md lists them.

use super::Reply;

pub fn greeting(hostname: &str) -> Reply {
    Reply::raw(220, format!("{hostname} ESMTP mailsluice"))
}
pub fn ok() -> Reply {
    Reply::new(250, "2.0.0", "Ok")
}
pub fn bye() -> Reply {
    Reply::new(221, "2.0.0", "Bye")
}
pub fn start_data() -> Reply {
    Reply::raw(354, "End data with <CR><LF>.<CR><LF>")
}
pub fn too_many_connections() -> Reply {
    Reply::new(421, "4.3.2", "Too many connections, try again later")
}
pub fn shutting_down() -> Reply {
    Reply::new(421, "4.3.2", "Service shutting down, try again later")
}
/// The shutdown's grace ended before upstream answered: the message may have arrived.
pub fn grace_over() -> Reply {
    Reply::new(
        421,
        "4.3.2",
        "Service shutting down before upstream answered; the message may have been delivered",
    )
}
pub fn idle_timeout() -> Reply {
    Reply::new(421, "4.4.2", "Idle for too long, closing connection")
}
pub fn auth_required() -> Reply {
    Reply::new(530, "5.7.0", "Authentication required")
}
pub fn too_many_recipients(max: usize) -> Reply {
    Reply::new(
        452,
        "4.5.3",
        format!("Too many recipients (at most {max} per message)"),
    )
}
pub fn message_too_big(max: usize) -> Reply {
    Reply::new(
        552,
        "5.3.4",
        format!("Message size exceeds fixed limit of {max} bytes"),
    )
}
pub fn line_too_long(max: usize) -> Reply {
    Reply::new(500, "5.5.2", format!("Line too long (at most {max} bytes)"))
}
pub fn unknown_command() -> Reply {
    Reply::new(500, "5.5.2", "Command not recognized")
}
pub fn syntax_error(detail: &str) -> Reply {
    Reply::new(501, "5.5.4", format!("Syntax error: {detail}"))
}
pub fn bad_sender_syntax() -> Reply {
    Reply::new(501, "5.1.7", "Bad sender address syntax")
}
pub fn bad_recipient_syntax() -> Reply {
    Reply::new(501, "5.1.3", "Bad recipient address syntax")
}
/// A valid address we do not pass on: one a lax next hop could read as something else.
pub fn address_not_relayed(esc: &'static str) -> Reply {
    Reply::new(553, esc, "Address with < or > inside quotes is not relayed")
}
pub fn invalid_parameter(param: &str) -> Reply {
    Reply::new(501, "5.5.4", format!("Invalid value for parameter {param}"))
}
/// RFC 5321 4.1.1.11: a parameter we do not offer is refused, never taken and dropped.
pub fn unsupported_parameter(param: &str) -> Reply {
    Reply::new(555, "5.5.4", format!("Unsupported parameter {param}"))
}
pub fn bad_sequence(detail: &str) -> Reply {
    Reply::new(503, "5.5.1", detail.to_string())
}
pub fn not_implemented(verb: &str) -> Reply {
    Reply::new(502, "5.5.1", format!("{verb} not implemented"))
}
pub fn bare_newline() -> Reply {
    Reply::new(
        550,
        "5.6.0",
        "Message contains a bare CR or LF (RFC 5321 2.3.8); not relayed",
    )
}
pub fn nul_in_data() -> Reply {
    Reply::new(
        550,
        "5.6.0",
        "Message contains a NUL byte (RFC 5322 forbids it); not relayed",
    )
}
/// The first line of the header section continues a field that is not there: it would
/// continue the last field the relay writes in front of the message.
pub fn leading_continuation() -> Reply {
    Reply::new(
        550,
        "5.6.0",
        "Message starts with a continuation line (space or tab); not relayed",
    )
}
pub fn bare_newline_in_command() -> Reply {
    syntax_error("a command ends with CRLF and holds no other CR or LF")
}
pub fn invalid_utf8() -> Reply {
    syntax_error("command is not valid UTF-8")
}
pub fn too_many_connections_from_address() -> Reply {
    Reply::new(
        421,
        "4.7.0",
        "Too many connections from your address, try again later",
    )
}
pub fn too_many_errors() -> Reply {
    Reply::new(421, "4.7.0", "Too many errors, closing connection")
}
pub fn data_timeout() -> Reply {
    Reply::new(421, "4.4.2", "DATA took too long, closing connection")
}
pub fn ready_for_tls() -> Reply {
    Reply::new(220, "2.0.0", "Ready to start TLS")
}
pub fn encryption_required() -> Reply {
    Reply::new(
        538,
        "5.7.11",
        "Encryption required for requested authentication mechanism",
    )
}
pub fn auth_succeeded() -> Reply {
    Reply::new(235, "2.7.0", "Authentication successful")
}
pub fn auth_failed() -> Reply {
    Reply::new(535, "5.7.8", "Authentication credentials invalid")
}
pub fn auth_locked_out() -> Reply {
    Reply::new(
        421,
        "4.7.0",
        "Too many failed authentication attempts, try again later",
    )
}
pub fn bdat_closing() -> Reply {
    Reply::new(
        421,
        "4.7.0",
        "BDAT chunk not read, closing connection (use DATA)",
    )
}
pub fn too_many_junk_commands() -> Reply {
    Reply::new(
        421,
        "4.7.0",
        "Too many commands without a message, closing connection",
    )
}
/// A message held in the spool (hold mode): the relay owns it now.
pub fn held(id: &str) -> Reply {
    Reply::new(
        250,
        "2.0.0",
        format!("Ok: queued as {id} (held for later delivery)"),
    )
}
pub fn insufficient_storage() -> Reply {
    Reply::new(452, "4.3.1", "Insufficient system storage, try again later")
}
pub fn sender_ok() -> Reply {
    Reply::new(250, "2.1.0", "Sender ok")
}
pub fn recipient_ok() -> Reply {
    Reply::new(250, "2.1.5", "Recipient ok")
}
pub fn empty_recipient() -> Reply {
    Reply::new(501, "5.1.3", "Empty recipient address")
}
/// DATA after every RCPT was refused.
pub fn no_valid_recipients() -> Reply {
    Reply::new(554, "5.5.1", "No valid recipients")
}
pub fn tls_already_active() -> Reply {
    bad_sequence("TLS already active")
}
pub fn unrecognized_auth_type() -> Reply {
    Reply::new(504, "5.5.4", "Unrecognized authentication type")
}
pub fn auth_cancelled() -> Reply {
    Reply::new(501, "5.0.0", "Authentication cancelled")
}
pub fn help() -> Reply {
    Reply::new(
        214,
        "2.0.0",
        "mailsluice relays mail: EHLO HELO MAIL RCPT DATA RSET NOOP QUIT VRFY HELP",
    )
}
/// VRFY: a relay cannot verify mailboxes it does not own; 252 is RFC 5321 3.5.3's answer for
/// "will accept and try".
pub fn cannot_vrfy() -> Reply {
    Reply::new(
        252,
        "2.5.0",
        "Cannot VRFY user, but will accept message and attempt delivery",
    )
}
