//! `[upstream] throttle_replies` and `quota_replies`: regular expressions over upstream's
//! replies, compiled once when the file is read so a bad pattern is a startup error with its
//! key and line, never a surprise at the first refusal.

use regex::Regex;
use serde::Deserialize;

/// A list of patterns, matched against `"<code> <text>"` of an upstream reply.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "Vec<String>")]
pub struct ReplyPatterns(Vec<Regex>);

/// Two lists are equal when their patterns are, so a reload can tell an unchanged upstream.
impl PartialEq for ReplyPatterns {
    fn eq(&self, other: &ReplyPatterns) -> bool {
        let patterns = |p: &ReplyPatterns| {
            p.0.iter()
                .map(|r| r.as_str().to_owned())
                .collect::<Vec<_>>()
        };
        patterns(self) == patterns(other)
    }
}

impl ReplyPatterns {
    /// Whether any pattern matches `reply` (e.g. `"454 Throttling failure: ..."`).
    pub fn matches(&self, reply: &str) -> bool {
        self.0.iter().any(|r| r.is_match(reply))
    }

    fn of(patterns: &[&str]) -> ReplyPatterns {
        let list: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
        ReplyPatterns::try_from(list).expect("built-in patterns compile")
    }

    /// SES's sending rate and connection bound, and the usual wording of other providers.
    pub fn default_throttle() -> ReplyPatterns {
        ReplyPatterns::of(&[
            r"^454 .*Maximum sending rate exceeded",
            r"^421 .*Too many concurrent SMTP connections",
            r"(?i)^4\d\d .*(rate limit|throttl|too many messages)",
        ])
    }

    /// SES's daily quota.
    pub fn default_quota() -> ReplyPatterns {
        ReplyPatterns::of(&[r"^454 .*Daily message quota exceeded"])
    }
}

/// A pattern that does not compile, with the regex crate's reason.
#[derive(Debug, Clone, thiserror::Error)]
#[error("bad regular expression `{pattern}`: {error}")]
pub struct BadReplyPattern {
    pub pattern: String,
    pub error: regex::Error,
}

impl TryFrom<Vec<String>> for ReplyPatterns {
    type Error = BadReplyPattern;

    fn try_from(list: Vec<String>) -> Result<ReplyPatterns, BadReplyPattern> {
        let compile = |p: &String| {
            Regex::new(p).map_err(|error| BadReplyPattern {
                pattern: p.clone(),
                error,
            })
        };
        Ok(ReplyPatterns(
            list.iter().map(compile).collect::<Result<_, _>>()?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_tell_rate_from_quota() {
        let (rate, quota) = (
            ReplyPatterns::default_throttle(),
            ReplyPatterns::default_quota(),
        );
        let ses = "454 Throttling failure: Maximum sending rate exceeded.";
        assert!(rate.matches(ses) && !quota.matches(ses));
        let daily = "454 Throttling failure: Daily message quota exceeded.";
        assert!(quota.matches(daily));
        assert!(rate.matches("421 4.4.5 Too many concurrent SMTP connections"));
        assert!(rate.matches("450 4.7.0 Rate limit exceeded, slow down"));
        assert!(!rate.matches("550 5.1.1 User unknown"));
        assert!(!rate.matches("451 4.3.0 Temporary failure"));
    }

    #[test]
    fn a_bad_pattern_is_refused() {
        let err = ReplyPatterns::try_from(vec!["(".to_string()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("bad regular expression `(`"), "{err}");
    }
}
