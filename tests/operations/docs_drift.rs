//! The reference pages say what the code does: every config key the parser accepts has a row
//! in docs/configuration.md and every row names such a key; every metric `/metrics` exposes
//! has a row in docs/operating.md's metrics table and every row names such a metric.
//!
//! The accepted keys are asked of the parser itself, not listed by hand: a table given an
//! unknown key is refused with the list of the keys it expects (serde's `deny_unknown_fields`,
//! and the `[upstream]` reader's own error, which lists each kind's keys). A key whose value
//! refuses such a probe is a leaf; one that answers with a list is a table, probed in turn.

use std::collections::BTreeSet;

use mailsluice::config::Config;
use toml::{Table, Value};

use super::dashboards::{families, metrics_with_samples};
use crate::support::config::TestConfig;

const BOGUS: &str = "zz_not_a_key";
const CONFIG_PAGE: &str = "docs/configuration.md";
const METRICS_PAGE: &str = "docs/operating.md";

/// A config whose every table exists once, so that a probe reaches the table it means. Its
/// values are well-typed; whether they pass `validate` does not matter (the probe's error
/// comes first, while the file is read).
fn base() -> String {
    TestConfig::new()
        .smtp("[smtp.auth]\nusers = [{ user = \"u\", password_hash = \"x\" }]")
        // An smtp:// upstream: the probe then reaches the tables of its own keys
        // (`[upstream.oauth]`); another kind's keys are found as leaves all the same.
        .then("[[upstream]]\nurl = \"smtp://127.0.0.1:25\"")
        .then("[[route]]\nupstream = \"default\"")
        .then("[[throttle]]\nname = \"t\"\nkey = \"none\"\nlimit = 1")
        .then("[redis]\nurl = \"redis://127.0.0.1:6379\"")
        .then("[admin]")
        .text()
}

/// The keys the table at `path` accepts, or `None` when `path` is not a table (a leaf).
fn accepted_at(path: &[String]) -> Option<BTreeSet<String>> {
    let bogus = Table::from_iter([(BOGUS.to_string(), Value::Integer(1))]);
    let probes = [
        Value::Table(bogus.clone()),
        Value::Array(vec![Value::Table(bogus)]),
    ];
    probes.into_iter().find_map(|probe| {
        let mut root: Table = toml::from_str(&base()).expect("the base config is TOML");
        set(&mut root, path, probe);
        let text = toml::to_string(&root).expect("a table is TOML");
        let error = Config::parse(&text).err()?.to_string();
        expected_keys(&error)
    })
}

/// Puts `value` at `path`, making the tables on the way; an array stands for its first table.
fn set(root: &mut Table, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        if let Value::Table(t) = value {
            root.extend(t);
        }
        return;
    };
    let mut table = root;
    for key in parents {
        let entry = (table.entry(key.clone())).or_insert_with(|| Value::Table(Table::new()));
        table = match entry {
            Value::Array(items) => items.first_mut().and_then(Value::as_table_mut),
            other => other.as_table_mut(),
        }
        .expect("a table on the way");
    }
    table.insert(last.clone(), value);
}

/// The keys listed by an "unknown field `zz_not_a_key`, expected ..." error.
fn expected_keys(error: &str) -> Option<BTreeSet<String>> {
    let refusal = format!("unknown field `{BOGUS}`");
    let line = error.lines().find(|l| l.contains(&refusal))?;
    let rest = &line[line.find(&refusal)? + refusal.len()..];
    let rest = rest.split_once("expected").map_or("", |(_, keys)| keys);
    let words = rest.split(['`', '"']).skip(1).step_by(2);
    let key = |w: &&str| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '_');
    Some(words.filter(key).map(str::to_string).collect())
}

/// Every key the parser accepts, dotted (`smtp.tls.cert`): leaves, and tables apart.
fn accepted_keys() -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut leaves, mut tables) = (BTreeSet::new(), BTreeSet::new());
    let mut todo = vec![Vec::<String>::new()];
    while let Some(path) = todo.pop() {
        match accepted_at(&path) {
            Some(keys) => {
                assert!(
                    !keys.is_empty() || path.is_empty(),
                    "{path:?} lists no keys"
                );
                tables.insert(path.join("."));
                for key in keys {
                    todo.push([path.clone(), vec![key]].concat());
                }
            }
            None => {
                leaves.insert(path.join("."));
            }
        }
    }
    (leaves, tables)
}

/// The first cells of a page's table rows that start with a backquoted name: `| `name` | ...`.
fn rows(page: &str) -> Vec<String> {
    let text = std::fs::read_to_string(page).expect("the page exists");
    (text.lines())
        .filter_map(|l| l.strip_prefix("| `"))
        .map(|l| l.split('`').next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn every_config_key_has_a_row_and_every_row_a_key() {
    let (leaves, tables) = accepted_keys();
    for known in [
        "smtp.listen",
        "smtp.tls.cert",
        "upstream.mx_port",
        "throttle.match.value",
    ] {
        assert!(
            leaves.contains(known),
            "the probe finds {known}: {leaves:?}"
        );
    }
    let documented: BTreeSet<String> = rows(CONFIG_PAGE).into_iter().collect();
    let missing: Vec<&String> = leaves.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "keys the parser accepts with no row in {CONFIG_PAGE}: {missing:?}"
    );
    let unknown: Vec<&String> = (documented.iter())
        .filter(|row| !leaves.contains(*row) && !tables.contains(*row))
        .collect();
    assert!(
        unknown.is_empty(),
        "rows of {CONFIG_PAGE} naming no key the parser accepts: {unknown:?}"
    );
}

#[tokio::test]
async fn every_metric_has_a_row_and_every_row_a_metric() {
    let text = metrics_with_samples().await;
    // A counter's samples are `<family>_total`, which is the name the page gives.
    let exposed: BTreeSet<String> = (text.lines())
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| match kind.trim() {
            "counter" => format!("{name}_total"),
            _ => name.to_string(),
        })
        .collect();
    assert!(families(&text).len() >= 5, "{text}");
    let documented: BTreeSet<String> = (rows(METRICS_PAGE).into_iter())
        .filter(|r| r.starts_with("mailsluice_"))
        .map(|r| r.split('{').next().unwrap_or_default().to_string())
        .collect();
    let missing: Vec<&String> = exposed.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "metrics /metrics exposes with no row in {METRICS_PAGE}: {missing:?}"
    );
    let unknown: Vec<&String> = documented.difference(&exposed).collect();
    assert!(
        unknown.is_empty(),
        "rows of {METRICS_PAGE} naming no metric /metrics exposes: {unknown:?}"
    );
}

/// The first cells of the rows of `page`'s section `heading` (up to the next `## `).
fn section_rows(page: &str, heading: &str) -> Vec<String> {
    let text = std::fs::read_to_string(page).expect("the page exists");
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("{heading} in {page}"));
    (text[start + heading.len()..].lines())
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| l.strip_prefix("| `"))
        .map(|l| l.split('`').next().unwrap_or_default().to_string())
        .collect()
}

/// docs/operating.md's outcomes are the code's, each once, in the code's order: the values
/// of `mailsluice_messages_total{outcome}` and of the log line's `outcome`.
#[test]
fn every_outcome_has_a_row_and_every_row_an_outcome() {
    let documented = section_rows(METRICS_PAGE, "## Outcomes");
    let code: Vec<String> = (mailsluice::message::Outcome::ALL.iter())
        .map(|o| o.as_str().to_string())
        .collect();
    assert_eq!(
        documented, code,
        "{METRICS_PAGE}'s outcomes (left) and the code's (right)"
    );
}

/// The sample SES event docs/reputation.md shows is one the guard counts: a hard bounce of
/// the recipient and message it names.
#[test]
fn the_sample_ses_event_in_the_docs_is_counted() {
    let page = std::fs::read_to_string("docs/reputation.md").unwrap();
    let after = &page[page
        .find("A hard bounce as SES publishes it")
        .expect("the sample")..];
    let start = after.find("```json").expect("its JSON block") + "```json".len();
    let sample = &after[start..start + after[start..].find("```").unwrap()];
    match mailsluice::reputation::events::parse(sample) {
        Ok(mailsluice::reputation::events::Parsed::Counts(event)) => {
            assert_eq!(event.recipients, ["gone@example.com"], "{event:?}");
            assert_eq!(event.tenant.as_deref(), Some("acme"), "{event:?}");
            assert!(event.feedback_id.is_some(), "{event:?}");
        }
        other => panic!("the docs' sample is not counted: {other:?}\n{sample}"),
    }
}
