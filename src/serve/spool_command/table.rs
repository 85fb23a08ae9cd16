//! What `mailsluice spool` prints for people: a table of messages for `list`, one message's
//! fields for `show`, and a sentence for what a change did. Read from the endpoint's JSON
//! (`admin::spool`), so a field it lacks prints as `-`.

use std::fmt::Write as _;

use serde_json::Value;

use super::SpoolCommand;

/// The text for the answer `json` to `command`, ending in a newline.
pub fn render(command: &SpoolCommand, json: &Value) -> String {
    match command {
        SpoolCommand::List { .. } => list(json),
        SpoolCommand::Show { .. } => show(json),
        SpoolCommand::Release(_) => released(json),
        SpoolCommand::Delete(_) => removed(json),
        SpoolCommand::Requeue(_) => {
            format!("{} failed messages put back\n", num(&json["requeued"]))
        }
        SpoolCommand::Hold { key } => format!(
            "{key} stopped: its messages stay held (new ones too) until \
             `mailsluice spool unhold {key}`\n"
        ),
        SpoolCommand::Unhold { key } => format!("{key} let go: its first message goes now\n"),
    }
}

const HEAD: [&str; 7] = ["ID", "KEY", "STATE", "AGE", "BYTES", "TRIES", "LAST ANSWER"];

/// One row a message, columns as wide as their widest value, then the count.
fn list(json: &Value) -> String {
    let messages = json["messages"].as_array().map_or(&[][..], Vec::as_slice);
    let rows: Vec<[String; 7]> = messages
        .iter()
        .map(|m| {
            let mut state = text(&m["state"]);
            if m["stopped"] == true {
                state.push_str(" (key stopped)");
            }
            [
                text(&m["id"]),
                format!("{}/{}", text(&m["layer"]), text(&m["key"])),
                state,
                age(&m["held_ms"]),
                num(&m["bytes"]),
                num(&m["attempts"]),
                text(&m["last_answer"]),
            ]
        })
        .collect();
    let mut widths = HEAD.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[&str]| {
        for (i, cell) in cells.iter().enumerate() {
            match i + 1 == cells.len() {
                true => out.push_str(cell),
                false => {
                    let _ = write!(out, "{cell:<width$}  ", width = widths[i]);
                }
            }
        }
        out.push('\n');
    };
    if !rows.is_empty() {
        line(&mut out, &HEAD);
    }
    for row in &rows {
        line(&mut out, &row.each_ref().map(String::as_str));
    }
    let total = json["total"].as_u64().unwrap_or(rows.len() as u64);
    let _ = match json["truncated"] == true {
        true => writeln!(out, "-- {total} messages, the first {} shown", rows.len()),
        false if total == 0 => writeln!(out, "-- no messages"),
        false => writeln!(out, "-- {total} messages"),
    };
    out
}

/// One message, a field a line.
fn show(m: &Value) -> String {
    let rcpts: Vec<String> = (m["rcpts"].as_array().into_iter().flatten())
        .map(text)
        .collect();
    let mut out = String::new();
    for (name, value) in [
        ("id", text(&m["id"])),
        ("key", format!("{}/{}", text(&m["layer"]), text(&m["key"]))),
        ("state", text(&m["state"])),
        ("key stopped", yes_no(&m["stopped"])),
        ("held for", age(&m["held_ms"])),
        ("bytes", num(&m["bytes"])),
        ("from", format!("<{}>", text(&m["from"]))),
        ("to", rcpts.join(", ")),
        ("attempts", num(&m["attempts"])),
        ("last answer", text(&m["last_answer"])),
        ("a report", yes_no(&m["report"])),
    ] {
        let _ = writeln!(out, "{name:<12} {value}");
    }
    out
}

fn released(json: &Value) -> String {
    match (&json["released"], &json["stopped"]) {
        (Value::String(id), _) if json["requeued"] == true => {
            format!("{id} put back and released\n")
        }
        (Value::String(id), _) => format!("{id} released: it goes once its tokens come\n"),
        (Value::Number(n), _) => format!("{n} messages tried now\n"),
        (_, Value::Bool(false)) => format!(
            "{}/{} let go: its first message goes now\n",
            text(&json["layer"]),
            text(&json["key"])
        ),
        _ => "released\n".into(),
    }
}

fn removed(json: &Value) -> String {
    match &json["removed"] {
        Value::String(id) => format!("{id} removed\n"),
        n => format!(
            "{} messages of {}/{} removed; {} being released, left\n",
            num(n),
            text(&json["layer"]),
            text(&json["key"]),
            num(&json["busy"])
        ),
    }
}

/// A string as it is; anything else as JSON; nothing as `-`.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) if s.is_empty() => "-".into(),
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn num(value: &Value) -> String {
    value.as_u64().map_or("-".into(), |n| n.to_string())
}

fn yes_no(value: &Value) -> String {
    match value.as_bool() {
        Some(true) => "yes".into(),
        Some(false) => "no".into(),
        None => "-".into(),
    }
}

/// Milliseconds as a person reads an age: `45s`, `12m`, `5h`, `3d`.
fn age(value: &Value) -> String {
    let Some(ms) = value.as_u64() else {
        return "-".into();
    };
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_list_is_a_table_with_its_count() {
        let answer = json!({
            "messages": [
                {"id": "0a", "layer": "tenant", "key": "acme", "state": "held", "stopped": true,
                 "held_ms": 125_000, "bytes": 120, "attempts": 2,
                 "last_answer": "451 4.2.0 upstream: later"},
                {"id": "0b", "layer": "tenant", "key": "acme", "state": "failed",
                 "stopped": false, "held_ms": 5_000, "bytes": 90, "attempts": 1,
                 "last_answer": null},
            ],
            "total": 2, "truncated": false,
        });
        let command = SpoolCommand::List {
            key: None,
            failed: false,
        };
        let text = render(&command, &answer);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("ID  KEY          STATE"), "{text}");
        assert!(
            lines[1].starts_with("0a  tenant/acme  held (key stopped)  2m"),
            "{text}"
        );
        assert!(lines[1].ends_with("451 4.2.0 upstream: later"), "{text}");
        assert!(lines[2].ends_with("  -"), "{text}");
        assert_eq!(lines[3], "-- 2 messages");
        let empty = json!({"messages": [], "total": 0, "truncated": false});
        assert_eq!(render(&command, &empty), "-- no messages\n");
    }
}
