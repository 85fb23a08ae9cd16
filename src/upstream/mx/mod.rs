//! `mx://`: straight to each recipient domain's mail servers, found in DNS, as an MTA does.
//!
//! Pass-through stays honest with several domains: one upstream transaction per domain (only
//! its recipients), all brought to the point where only the final dot is missing; a refusal
//! before that ends them all and is the client's answer, as with one upstream. Only then do
//! the final dots go. Should some domains refuse after that, the client still gets `250` (a
//! retry would duplicate what was accepted) and the sender a delivery status notification.
//!
//! - `resolve`: MX lookup (preference, implicit MX, null MX) and DNS failures as replies.
//! - `connections`: a pool per MX host address and the bound per recipient domain.
//! - `guard`: the addresses never connected to (internal ones, the relay's own).
//! - `leg`: one domain's transaction, from connecting to its final dot.
//! - `dsn`: the RFC 3464 report for recipients refused after the client's `250`.

mod connections;
mod dsn;
mod guard;
mod leg;
mod resolve;

use std::sync::Arc;
use std::time::SystemTime;

use futures_util::future::join_all;

use self::connections::Connections;
use self::dsn::Refused;
use self::resolve::MxResolver;
pub use self::resolve::ResolverSetupError;
use super::reply::rejected;
use super::smtp::Transaction;
use super::{Accepted, ForwardFuture, Forwarder, Outgoing, OwnAddresses, UpstreamError};
use crate::config::{UpstreamConfig, UpstreamKind};
use crate::message::Envelope;

/// Why an MX upstream could not be set up from the configuration.
#[derive(Debug, thiserror::Error)]
pub enum MxSetupError {
    #[error("upstream.url: `{0}` is not mx://")]
    NotMx(String),
    #[error(transparent)]
    Resolver(#[from] ResolverSetupError),
}

/// Delivers each message to the MX hosts of its recipients' domains.
pub struct MxForwarder {
    inner: Arc<Inner>,
}

struct Inner {
    resolver: MxResolver,
    conns: Connections,
    /// Our name in the reports we send (`Reporting-MTA`, `MAILER-DAEMON@`).
    reporting_mta: String,
}

impl MxForwarder {
    /// `own`: where the relay listens, never delivered to (the mail would loop).
    pub fn new(cfg: &UpstreamConfig, own: OwnAddresses) -> Result<MxForwarder, MxSetupError> {
        let UpstreamKind::Mx(mx) = &cfg.kind else {
            return Err(MxSetupError::NotMx(cfg.url()));
        };
        let conns = Connections::new(cfg, mx, own);
        let resolver = MxResolver::new(mx.nameservers(), conns.timeout)?;
        let inner = Inner {
            resolver,
            conns,
            reporting_mta: mx.client.helo_name().to_string(),
        };
        Ok(MxForwarder {
            inner: Arc::new(inner),
        })
    }

    /// `message` is the message in pieces, sent one after the other; each domain's
    /// transaction sends the same pieces.
    async fn to_each_domain(
        &self,
        envelope: &Envelope,
        message: &[&[u8]],
    ) -> Result<Accepted, UpstreamError> {
        let parts = split(envelope)?;
        let conns = &self.inner.conns;
        let txs = parts
            .iter()
            .map(|(_, part)| Transaction::new(part, message, conns.timeout, &conns.classifier))
            .collect::<Result<Vec<_>, _>>()?;
        let legs = self.open_all(&parts, &txs).await?;
        let hosts: Vec<String> = legs.iter().map(|l| l.host.clone()).collect();
        let outcomes = join_all(legs.into_iter().zip(&txs).map(|(leg, tx)| leg.finish(tx))).await;
        let mut accepted = Vec::new();
        let mut refused = Vec::new();
        let mut first = None;
        for (((_, part), host), outcome) in parts.iter().zip(hosts).zip(outcomes) {
            match outcome {
                Ok(a) => accepted.push(a.text),
                Err(e) => {
                    refused.extend(part.rcpts.iter().map(|rcpt| Refused {
                        rcpt: rcpt.clone(),
                        remote: Some(host.clone()),
                        error: e.clone(),
                    }));
                    first.get_or_insert(e);
                }
            }
        }
        match first {
            None => Ok(Accepted::new(accepted.join("; "))),
            Some(e) if accepted.is_empty() => Err(e),
            Some(_) => Ok(self.partly(envelope, message, accepted, refused)),
        }
    }

    /// Every domain's transaction up to its 354, side by side; if one refuses, the others are
    /// dropped and its refusal is the answer. Every domain is looked up before any connection,
    /// so a domain that cannot be reached at all stops the message before anything is sent.
    async fn open_all(
        &self,
        parts: &[(String, Envelope)],
        txs: &[Transaction<'_>],
    ) -> Result<Vec<leg::Leg>, UpstreamError> {
        let (resolver, conns) = (&self.inner.resolver, &self.inner.conns);
        let routes = join_all(parts.iter().map(|(domain, _)| resolver.route(domain)));
        let routes = routes.await.into_iter().collect::<Result<Vec<_>, _>>()?;
        let opening = parts.iter().zip(&routes).zip(txs);
        let opened = opening.map(|(((domain, _), route), tx)| {
            leg::open(resolver, conns, (domain.as_str(), route), tx)
        });
        let mut legs = Vec::with_capacity(parts.len());
        let mut refusal = None;
        for result in join_all(opened).await {
            match result {
                Ok(leg) => legs.push(leg),
                Err(e) => {
                    refusal.get_or_insert(e);
                }
            }
        }
        match refusal {
            None => Ok(legs),
            Some(refusal) => {
                legs.into_iter().for_each(leg::Leg::abandon);
                Err(refusal)
            }
        }
    }

    /// Some domains accepted, others refused after their final dot: `250` for the client,
    /// a report for the sender (none for the null sender: a bounce never bounces).
    fn partly(
        &self,
        envelope: &Envelope,
        message: &[&[u8]],
        accepted: Vec<String>,
        refused: Vec<Refused>,
    ) -> Accepted {
        tracing::warn!(
            target: "mailsluice::upstream",
            outcome = "partial",
            accepted = accepted.len(),
            refused = refused.len(),
            report = envelope.from.is_some(),
            "upstream.partial"
        );
        if let Some(sender) = &envelope.from {
            let report = dsn::report(
                &self.inner.reporting_mta,
                sender,
                &refused,
                &crate::message::dsn::head(message),
                SystemTime::now(),
            );
            self.send_report(sender, report);
        }
        let text = format!(
            "{} (refused for {} of {} recipients; the sender is sent a report)",
            accepted.join("; "),
            refused.len(),
            envelope.rcpts.len()
        );
        let bounced = (refused.iter())
            .filter(|r| r.error.is_hard_bounce())
            .map(|r| r.rcpt.clone())
            .collect();
        Accepted {
            partial: true,
            bounced,
            ..Accepted::new(text)
        }
    }

    /// Sends the report off the client's path, from `<>`, the way every message goes.
    fn send_report(&self, sender: &str, report: Vec<u8>) {
        let forwarder = MxForwarder {
            inner: Arc::clone(&self.inner),
        };
        let envelope = Envelope {
            from: None,
            rcpts: vec![sender.to_string()],
            smtputf8: !sender.is_ascii(),
            // The original's header section is copied as it came.
            body_8bit: !report.is_ascii(),
        };
        tokio::spawn(async move {
            match forwarder.forward(&envelope, &report).await {
                Ok(_) => tracing::info!(target: "mailsluice::upstream", "upstream.report_sent"),
                Err(e) => {
                    tracing::warn!(target: "mailsluice::upstream", error = %e, "upstream.report_failed")
                }
            }
        });
    }
}

impl Forwarder for MxForwarder {
    /// The pieces go to every domain as they are, never joined into one more copy.
    fn send<'a>(&'a self, message: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        Box::pin(self.to_each_domain(message.envelope, message.pieces))
    }
}

/// The envelope cut per recipient domain (lower case, IDNA's ASCII form), in the order the
/// domains first appear.
fn split(envelope: &Envelope) -> Result<Vec<(String, Envelope)>, UpstreamError> {
    let mut parts: Vec<(String, Envelope)> = Vec::new();
    for rcpt in &envelope.rcpts {
        let domain = rcpt
            .rsplit_once('@')
            .map(|(_, d)| d)
            .filter(|d| !d.is_empty())
            .ok_or_else(|| rejected(550, "5.1.3", format!("recipient <{rcpt}> has no domain")))?;
        let domain = match domain.starts_with('[') {
            true => domain.to_string(),
            false => idna::domain_to_ascii(domain)
                .map_err(|_| rejected(553, "5.1.3", format!("bad domain in <{rcpt}>")))?,
        };
        match parts.iter_mut().find(|(d, _)| *d == domain) {
            Some((_, part)) => part.rcpts.push(rcpt.clone()),
            None => {
                let part = Envelope {
                    rcpts: vec![rcpt.clone()],
                    ..envelope.clone()
                };
                parts.push((domain, part));
            }
        }
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_outside_a_runtime_and_only_for_mx() {
        let cfg: UpstreamConfig =
            toml::from_str("url = \"mx://\"\nnameservers = [\"127.0.0.1:5353\"]").unwrap();
        MxForwarder::new(&cfg, OwnAddresses::default()).expect("builds");
        let smtp: UpstreamConfig = toml::from_str("url = \"smtp://h:25\"").unwrap();
        assert!(matches!(
            MxForwarder::new(&smtp, OwnAddresses::default()),
            Err(MxSetupError::NotMx(_))
        ));
    }

    #[test]
    fn envelope_is_split_per_domain_in_order() {
        let envelope = Envelope {
            from: Some("s@a.test".into()),
            rcpts: vec!["x@B.test".into(), "y@c.test".into(), "z@b.TEST".into()],
            smtputf8: false,
            body_8bit: true,
        };
        let parts = split(&envelope).unwrap();
        let domains: Vec<&str> = parts.iter().map(|(d, _)| d.as_str()).collect();
        assert_eq!(domains, ["b.test", "c.test"]);
        assert_eq!(parts[0].1.rcpts, ["x@B.test", "z@b.TEST"]);
        assert_eq!(parts[1].1.rcpts, ["y@c.test"]);
        assert_eq!(parts[1].1.from.as_deref(), Some("s@a.test"));
        assert!(parts[1].1.body_8bit);
        let bad = Envelope {
            rcpts: vec!["postmaster".into()],
            ..envelope
        };
        assert!(matches!(
            split(&bad),
            Err(UpstreamError::Rejected { code: 550, .. })
        ));
    }
}
