//! What an upstream refusal says about our sending, beyond the one message: the forwarder
//! says it, typed, so that the session, the adaptive layers and the quota pause never read
//! reply text. SMTP upstreams say it in words, which [`Classifier`] reads with the configured
//! patterns (`throttle_replies`, `quota_replies`).

use super::UpstreamError;
use crate::config::{ReplyPatterns, UpstreamConfig};

/// What upstream meant by a refusal that is about how we send, not about the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feedback {
    /// Sending too fast (SES `454 ... Maximum sending rate exceeded`).
    Rate,
    /// Too many connections open to it (a `421` that `throttle_replies` matches).
    Connections,
    /// The sending quota is used up (SES `454 ... Daily message quota exceeded`).
    Quota,
    /// Upstream has stopped taking mail from this account for now (an API says so in its
    /// own type; SMTP has no such reply).
    Paused,
}

impl Feedback {
    /// The `reason` label of `mailsluice_upstream_throttled_total` and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Feedback::Rate => "rate",
            Feedback::Connections => "connections",
            Feedback::Quota => "quota",
            Feedback::Paused => "paused",
        }
    }

    /// Whether sending to that upstream stops for a while (every message refused until then),
    /// rather than slowing down.
    pub fn pauses(self) -> bool {
        matches!(self, Feedback::Quota | Feedback::Paused)
    }
}

/// An SMTP upstream's reply patterns, read once per refusal.
#[derive(Debug, Clone)]
pub struct Classifier {
    throttle: ReplyPatterns,
    quota: ReplyPatterns,
}

impl Classifier {
    pub fn new(cfg: &UpstreamConfig) -> Classifier {
        Classifier {
            throttle: cfg.throttle_replies.clone(),
            quota: cfg.quota_replies.clone(),
        }
    }

    /// What a reply `code [enhanced] text` signals, if anything. Quota is checked first: its
    /// SES text is a "throttling failure" too. A quota reply may be a `5xx` and still be about
    /// our sending, not the message (Exchange Online's `554 5.2.0 ...
    /// SubmissionQuotaExceededException`, Gmail's `550 5.4.5 Daily user sending limit
    /// exceeded`), so the quota patterns read those too; "too fast" is a `4xx` only.
    pub fn feedback(&self, code: u16, enhanced: Option<&str>, text: &str) -> Option<Feedback> {
        if !(400..600).contains(&code) {
            return None;
        }
        let reply = match enhanced {
            Some(enhanced) => format!("{code} {enhanced} {text}"),
            None => format!("{code} {text}"),
        };
        if self.quota.matches(&reply) {
            Some(Feedback::Quota)
        } else if code < 500 && self.throttle.matches(&reply) {
            Some(match code {
                421 => Feedback::Connections,
                _ => Feedback::Rate,
            })
        } else {
            None
        }
    }

    /// A refusal as the forwarder returns it: `Pushback` when the patterns say it is about
    /// our sending, unchanged otherwise.
    pub fn classify(&self, error: UpstreamError) -> UpstreamError {
        let UpstreamError::Rejected {
            code,
            enhanced,
            text,
        } = error
        else {
            return error;
        };
        match self.feedback(code, enhanced.as_deref(), &text) {
            Some(feedback) => UpstreamError::Pushback {
                feedback,
                code,
                enhanced,
                text,
            },
            None => UpstreamError::Rejected {
                code,
                enhanced,
                text,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    const MINIMAL: &str = "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"file://out\"\n";

    fn classifier(text: &str) -> Classifier {
        Classifier::new(&Config::parse(text).unwrap().upstreams[0])
    }

    #[test]
    fn reply_patterns_classify_and_can_be_replaced() {
        let c = classifier(MINIMAL);
        let ses = "Throttling failure: Maximum sending rate exceeded.";
        assert_eq!(c.feedback(454, None, ses), Some(Feedback::Rate));
        let quota = "Throttling failure: Daily message quota exceeded.";
        assert_eq!(c.feedback(454, None, quota), Some(Feedback::Quota));
        let conns = "Too many concurrent SMTP connections";
        assert_eq!(
            c.feedback(421, Some("4.4.5"), conns),
            Some(Feedback::Connections)
        );
        assert_eq!(c.feedback(550, None, ses), None);
        let c = classifier(&format!("{MINIMAL}throttle_replies = [\"^450 slow\"]\n"));
        assert_eq!(c.feedback(454, None, ses), None);
        assert_eq!(c.feedback(450, None, "slow down"), Some(Feedback::Rate));
        let c = classifier(&format!(
            "{MINIMAL}quota_replies = ['^550 5\\.4\\.5 Daily']\nthrottle_replies = ['^55']\n"
        ));
        let daily = "Daily user sending limit exceeded.";
        assert_eq!(c.feedback(550, Some("5.4.5"), daily), Some(Feedback::Quota));
        assert_eq!(
            c.feedback(550, None, "slow"),
            None,
            "too fast is a 4xx only"
        );
    }

    #[test]
    fn a_matched_refusal_becomes_pushback_with_upstreams_words() {
        let c = classifier(MINIMAL);
        let typed = c.classify(crate::upstream::reply::from_reply(
            454,
            "Throttling failure: Daily message quota exceeded.",
        ));
        assert_eq!(typed.feedback(), Some(Feedback::Quota));
        assert!(typed.to_string().contains("Daily message quota exceeded"));
        let busy = crate::upstream::reply::from_reply(450, "4.2.0 busy");
        assert_eq!(c.classify(busy.clone()), busy);
    }
}
