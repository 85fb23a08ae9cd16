//! The test upstream's accept loop (its connection bound) and one connection: a strict,
//! minimal ESMTP server. Strict where it
//! matters to the tests: only `<CRLF>.<CRLF>` ends the data, and a dot is unstuffed only at
//! the start of a line that follows a CRLF, so any bytes a client gets wrong show up.

use std::io;

use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::upstream::{Fault, Received, Shared, Step};

struct Transaction {
    from: String,
    mail_params: Vec<String>,
    rcpts: Vec<String>,
}

/// `drawn`: this connection's fault from a mix (`None`: the fault set applies, read live).
pub(super) async fn serve_connection(
    stream: TcpStream,
    id: usize,
    shared: &Shared,
    drawn: Option<Fault>,
) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut io = BufReader::new(stream);
    let mut kick = shared.kick_tx.subscribe();
    // The fault of the current transaction, drawn at its MAIL when a mix is set.
    let mut tx_drawn: Option<Fault> = None;
    let fault_of = |drawn: &Option<Fault>| drawn.clone().unwrap_or_else(|| shared.fault());
    if before_reply(fault_of(&drawn), Step::Greeting, &mut io).await? {
        return Ok(()); // the fault's reply was sent; an SMTP server then closes
    }
    reply(&mut io, "220 test.upstream ESMTP ready").await?;

    let mut tx: Option<Transaction> = None;
    let mut auth: Option<String> = None;
    let mut line = Vec::new();
    loop {
        line.clear();
        let fresh = io.buffer().is_empty();
        tokio::select! {
            read = io.read_until(b'\n', &mut line) => {
                if read? == 0 {
                    return Ok(());
                }
            }
            _ = kick.changed() => {
                let notice = kick.borrow_and_update().1.clone();
                if let Some(notice) = notice {
                    reply(&mut io, &notice).await?;
                }
                return Ok(());
            }
        }
        let text = String::from_utf8_lossy(&line)
            .trim_end_matches(['\r', '\n'])
            .to_string();
        shared.commands.lock().unwrap().push(text.clone());
        shared.extra.lock().unwrap().arrived(id, fresh, &text);
        let upper = text.to_ascii_uppercase();
        let verb = upper.split(' ').next().unwrap_or("").to_string();
        match verb.as_str() {
            "EHLO" => {
                if before_reply(fault_of(&drawn), Step::Ehlo, &mut io).await? {
                    continue;
                }
                tx = None;
                let mut lines = vec!["250-test.upstream greets you".to_string()];
                lines.extend(
                    shared
                        .extensions
                        .lock()
                        .unwrap()
                        .iter()
                        .map(|e| format!("250-{e}")),
                );
                if shared.xoauth2.lock().unwrap().is_some() {
                    lines.push("250-AUTH XOAUTH2".into());
                } else if shared.credentials.lock().unwrap().is_some() {
                    lines.push("250-AUTH PLAIN".into());
                }
                let last = lines.pop().unwrap().replacen("250-", "250 ", 1);
                lines.push(last);
                reply(&mut io, &lines.join("\r\n")).await?;
            }
            "HELO" => {
                tx = None;
                reply(&mut io, "250 test.upstream").await?;
            }
            "AUTH" if shared.xoauth2.lock().unwrap().is_some() => {
                match xoauth2(shared, &text, &mut io).await? {
                    Some(user) => {
                        auth = Some(user);
                        reply(&mut io, "235 2.7.0 Accepted").await?;
                    }
                    None => {
                        *shared.auth_refusals.lock().unwrap() += 1;
                        reply(&mut io, "535 5.7.8 Username and Password not accepted").await?;
                    }
                }
            }
            "AUTH" => {
                let user = authenticate(shared, &text, &mut io).await?;
                match user {
                    Some(user) => {
                        auth = Some(user);
                        reply(&mut io, "235 2.7.0 Authentication successful").await?;
                    }
                    None => reply(&mut io, "535 5.7.8 Authentication credentials invalid").await?,
                }
            }
            "MAIL" => {
                tx_drawn = shared.draw(false);
                if before_reply(fault_of(&tx_drawn), Step::Mail, &mut io).await? {
                    continue;
                }
                let must_log_in = shared.credentials.lock().unwrap().is_some()
                    || shared.xoauth2.lock().unwrap().is_some();
                if must_log_in && auth.is_none() {
                    reply(&mut io, "530 5.7.0 Authentication required").await?;
                    continue;
                }
                let Some((from, mail_params)) = path_and_params(&text, "MAIL FROM:") else {
                    reply(&mut io, "501 5.5.4 Syntax: MAIL FROM:<address>").await?;
                    continue;
                };
                tx = Some(Transaction {
                    from,
                    mail_params,
                    rcpts: Vec::new(),
                });
                reply(&mut io, "250 2.1.0 Ok").await?;
            }
            "RCPT" => {
                if before_reply(fault_of(&tx_drawn), Step::Rcpt, &mut io).await? {
                    continue;
                }
                let (Some(t), Some((rcpt, _))) = (tx.as_mut(), path_and_params(&text, "RCPT TO:"))
                else {
                    reply(&mut io, "503 5.5.1 Error: need MAIL command").await?;
                    continue;
                };
                let refused = shared.extra.lock().unwrap().refused_rcpts.clone();
                if let Some((_, refusal)) = refused.iter().find(|(a, _)| *a == rcpt) {
                    reply(&mut io, refusal).await?;
                    continue;
                }
                t.rcpts.push(rcpt);
                reply(&mut io, "250 2.1.5 Ok").await?;
            }
            "DATA" => {
                if before_reply(fault_of(&tx_drawn), Step::Data, &mut io).await? {
                    continue;
                }
                let lenient = shared.extra.lock().unwrap().data_without_rcpts;
                if lenient && tx.as_ref().is_some_and(|t| t.rcpts.is_empty()) {
                    tx = None;
                    reply(&mut io, "354 End data with <CR><LF>.<CR><LF>").await?;
                    let fresh = io.buffer().is_empty();
                    shared.extra.lock().unwrap().arrived(id, fresh, "<data>");
                    let Some((data, _)) = read_data(&mut io).await? else {
                        return Ok(());
                    };
                    shared.extra.lock().unwrap().unaddressed.push(data);
                    reply(&mut io, "554 5.5.1 Error: no valid recipients").await?;
                    continue;
                }
                let Some(t) = tx.take().filter(|t| !t.rcpts.is_empty()) else {
                    reply(&mut io, "503 5.5.1 Error: need RCPT command").await?;
                    continue;
                };
                reply(&mut io, "354 End data with <CR><LF>.<CR><LF>").await?;
                if fault_of(&tx_drawn) == Fault::DropMidData {
                    let mut some = Vec::new();
                    io.read_until(b'\n', &mut some).await?;
                    return Ok(());
                }
                let fresh = io.buffer().is_empty();
                shared.extra.lock().unwrap().arrived(id, fresh, "<data>");
                let Some((data, dot_fresh)) = read_data(&mut io).await? else {
                    return Ok(());
                };
                shared.extra.lock().unwrap().arrived(id, dot_fresh, ".");
                if fault_of(&tx_drawn) == Fault::DropAfterDot {
                    return Ok(());
                }
                let at = Instant::now();
                if before_reply(fault_of(&tx_drawn), Step::EndOfData, &mut io).await? {
                    continue;
                }
                if !shared.hidden_allows(t.rcpts.len() as u64) {
                    let text = "454 Throttling failure: Maximum sending rate exceeded.";
                    reply(&mut io, text).await?;
                    continue;
                }
                shared.record(Received {
                    from: t.from,
                    mail_params: t.mail_params,
                    rcpts: t.rcpts,
                    data,
                    at,
                    conn: id,
                    auth: auth.clone(),
                });
                let n = shared.messages.lock().unwrap().len();
                reply(&mut io, &format!("250 2.0.0 Ok: queued as TEST{n}")).await?;
            }
            "RSET" => {
                tx = None;
                reply(&mut io, "250 2.0.0 Ok").await?;
            }
            "NOOP" => reply(&mut io, "250 2.0.0 Ok").await?,
            "QUIT" => {
                reply(&mut io, "221 2.0.0 Bye").await?;
                return Ok(());
            }
            _ => reply(&mut io, "502 5.5.2 Error: command not recognized").await?,
        }
    }
}

/// Applies the fault for `step`: waits when it is a stall; when it is a reply, sends it and
/// returns true (the caller skips its positive reply).
async fn before_reply(fault: Fault, step: Step, io: &mut BufReader<TcpStream>) -> io::Result<bool> {
    match fault {
        Fault::Stall { step: s, delay } if s == step => {
            tokio::time::sleep(delay).await;
            Ok(false)
        }
        Fault::Reply {
            step: s,
            code,
            text,
        } if s == step => {
            reply(io, &format!("{code} {text}")).await?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Reads the message up to `<CRLF>.<CRLF>`; `None` when the client went away first. With
/// it, whether the final dot needed a read of its own (it came in a flight of its own).
async fn read_data(io: &mut BufReader<TcpStream>) -> io::Result<Option<(Vec<u8>, bool)>> {
    let mut data = Vec::new();
    let mut line = Vec::new();
    // The DATA command line ended with CRLF, so the first data line starts after one.
    let mut after_crlf = true;
    loop {
        line.clear();
        let fresh = io.buffer().is_empty();
        if io.read_until(b'\n', &mut line).await? == 0 {
            return Ok(None);
        }
        if after_crlf && line == b".\r\n" {
            return Ok(Some((data, fresh)));
        }
        let unstuffed = if after_crlf && line.first() == Some(&b'.') {
            &line[1..]
        } else {
            &line[..]
        };
        data.extend_from_slice(unstuffed);
        after_crlf = line.ends_with(b"\r\n");
    }
}

/// `MAIL FROM:<a@b> BODY=8BITMIME` → (`a@b`, [`BODY=8BITMIME`]).
fn path_and_params(text: &str, prefix: &str) -> Option<(String, Vec<String>)> {
    if !text.to_ascii_uppercase().starts_with(prefix) {
        return None;
    }
    let rest = text[prefix.len()..].trim_start();
    let rest = rest.strip_prefix('<')?;
    let (path, params) = rest.split_once('>')?;
    Some((
        path.to_string(),
        params.split_whitespace().map(str::to_string).collect(),
    ))
}

/// AUTH PLAIN, with the initial response or after a `334`. Returns the user on success.
async fn authenticate(
    shared: &Shared,
    text: &str,
    io: &mut BufReader<TcpStream>,
) -> io::Result<Option<String>> {
    let mut words = text.split_whitespace().skip(1);
    if !words
        .next()
        .is_some_and(|m| m.eq_ignore_ascii_case("PLAIN"))
    {
        return Ok(None);
    }
    let response = match words.next() {
        Some(r) => r.to_string(),
        None => {
            reply(io, "334 ").await?;
            let mut line = Vec::new();
            io.read_until(b'\n', &mut line).await?;
            String::from_utf8_lossy(&line).trim().to_string()
        }
    };
    let Some(decoded) = base64_decode(&response) else {
        return Ok(None);
    };
    let parts: Vec<&[u8]> = decoded.split(|&b| b == 0).collect();
    let expected = shared.credentials.lock().unwrap().clone();
    match (parts.as_slice(), expected) {
        ([_, user, pass], Some((u, p))) if *user == u.as_bytes() && *pass == p.as_bytes() => {
            Ok(Some(u))
        }
        _ => Ok(None),
    }
}

/// AUTH XOAUTH2 with its initial response: `user=<user>^Aauth=Bearer <token>^A^A`. A token
/// the check refuses gets Gmail's `334` with the error in JSON, and the client's empty line is
/// read before the refusal. Returns the user on success.
async fn xoauth2(
    shared: &Shared,
    text: &str,
    io: &mut BufReader<TcpStream>,
) -> io::Result<Option<String>> {
    let mut words = text.split_whitespace().skip(1);
    let mechanism = words.next().unwrap_or_default();
    let decoded = words.next().and_then(base64_decode).unwrap_or_default();
    let decoded = String::from_utf8_lossy(&decoded).into_owned();
    let sasl = (decoded.strip_suffix("\x01\x01"))
        .and_then(|rest| rest.split_once("\x01auth=Bearer "))
        .and_then(|(user, token)| Some((user.strip_prefix("user=")?, token)));
    let check = shared.xoauth2.lock().unwrap().clone().expect("xoauth2 set");
    if let Some((user, token)) = sasl.filter(|_| mechanism.eq_ignore_ascii_case("XOAUTH2")) {
        if check(user, token) {
            return Ok(Some(user.to_string()));
        }
    }
    // {"status":"401","schemes":"bearer","scope":"https://mail.google.com/"}
    let error = "eyJzdGF0dXMiOiI0MDEiLCJzY2hlbWVzIjoiYmVhcmVyIiwic2NvcGUiOiJodHRwczovL21haWwuZ29vZ2xlLmNvbS8ifQ==";
    reply(io, &format!("334 {error}")).await?;
    let mut line = Vec::new();
    io.read_until(b'\n', &mut line).await?;
    Ok(None)
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|&c| c != b'=') {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// One write per reply: two would let Nagle hold the CRLF for the client's delayed ACK
/// (~40 ms a command).
async fn reply(io: &mut BufReader<TcpStream>, text: &str) -> io::Result<()> {
    let stream = io.get_mut();
    let mut line = Vec::with_capacity(text.len() + 2);
    line.extend_from_slice(text.as_bytes());
    line.extend_from_slice(b"\r\n");
    stream.write_all(&line).await?;
    stream.flush().await
}

pub(super) async fn accept_loop(listener: TcpListener, task_shared: Arc<Shared>) {
    while let Ok((stream, _)) = listener.accept().await {
        let id = {
            let mut n = task_shared.accepted.lock().unwrap();
            *n += 1;
            *n
        };
        let mut drawn = task_shared.draw(true);
        let max = *task_shared.max_open.lock().unwrap();
        if max.is_some_and(|max| *task_shared.open_tx.borrow() >= max) {
            *task_shared.crowded.lock().unwrap() += 1;
            let text = "4.4.5 Too many concurrent SMTP connections";
            drawn = Some(Fault::reply(Step::Greeting, 421, text));
        }
        if drawn.clone().unwrap_or_else(|| task_shared.fault()) == Fault::CloseOnConnect {
            drop(stream);
            continue;
        }
        let shared = Arc::clone(&task_shared);
        shared.open_tx.send_modify(|n| *n += 1);
        tokio::spawn(async move {
            let _ = serve_connection(stream, id, &shared, drawn).await;
            shared.open_tx.send_modify(|n| *n -= 1);
        });
    }
}
