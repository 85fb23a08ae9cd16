//! The account of one verdict, the same whichever driver ran the message's journey (a
//! session's final dot, the spool's release): its one log line (`line`: `message` or
//! `release`), the metrics and the status page's row of a session's message and of a held
//! message upstream took (counted as delivered), its spans, and its tenant's webhook event
//! (`accepted`, `held` or `refused` for a session's, `released` for a release that upstream
//! took). Above the pipeline and the replies, as its drivers are: it reads the verdict and
//! the reply it became.

mod line;

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use crate::message::{Envelope, Outcome};
use crate::observe::traces::MessageSpans;
use crate::pipeline::{End, Judged, Record};
use crate::reply::Reply;
use crate::spool::Ticket;
use crate::state::context::Context;
use crate::webhook::event::EventType;

/// One verdict to account for.
pub struct Account<'a> {
    /// What the message came to: its journey's record, or the session's own when it refused
    /// the message before (at MAIL, at DATA, for its size or content). None: a release
    /// attempt with no journey (its file damaged, or held past `max_hold_ms`).
    pub record: Option<&'a Record>,
    /// The reply the verdict became (none when the client left, or with no journey).
    pub reply: Option<&'a Reply>,
    /// The reply is upstream's (or the routes') word on the message, not the relay's own.
    pub upstreams_word: bool,
    /// The message, when its journey ran: for its spans and its tenant's webhooks.
    pub journey: Option<Journey<'a>>,
    /// From the final dot (or the attempt's start) to the answer.
    pub took: Duration,
}

/// A message whose journey ran.
pub struct Journey<'a> {
    pub judged: &'a Judged,
    pub envelope: &'a Envelope,
    /// When it began (the final dot, the attempt's start), on the wall clock.
    pub started: SystemTime,
}

impl<'a> Account<'a> {
    /// The account of `judged`, answered with `reply`.
    pub fn of(journey: Journey<'a>, reply: Option<&'a Reply>, took: Duration) -> Account<'a> {
        let verdict = &journey.judged.verdict;
        Account {
            record: Some(&verdict.record),
            reply,
            upstreams_word: verdict.upstreams_word(),
            journey: Some(journey),
            took,
        }
    }

    /// The reply when it is upstream's (or the routes') word on the message.
    fn upstream_reply(&self) -> Option<&Reply> {
        self.reply.filter(|_| self.upstreams_word)
    }
}

/// Who answered the verdict, with what its line says besides.
pub enum Driver<'a> {
    /// A session: the client's address, the envelope's RCPTs (those refused as suppressed
    /// apart: the others went on).
    Session {
        peer: SocketAddr,
        rcpts: usize,
        suppressed: usize,
    },
    /// The spool's release of a held message.
    Release(&'a Attempt<'a>),
}

/// One release attempt, as its line tells it.
pub struct Attempt<'a> {
    pub ticket: &'a Ticket,
    pub held_ms: u64,
    pub rcpts: usize,
    /// What comes next (`removed`, `retry`, `reported`, ...), and the wait before the next
    /// attempt when there is one.
    pub next: &'static str,
    pub retry_in: Option<Duration>,
    /// The line's `outcome` when the attempt had no journey: `damaged` or `expired`.
    pub outcome_without_journey: &'static str,
    /// Upstream took it: its tenant's webhooks are told (`released`).
    pub released: bool,
}

/// Accounts for one verdict: its line; a session's outcome counted and its status page row;
/// when its journey ran, its spans and its tenant's webhook event.
pub fn record(ctx: &Context, account: &Account<'_>, driver: &Driver<'_>) {
    match driver {
        Driver::Session {
            peer,
            rcpts,
            suppressed,
        } => line::message(ctx, account, *peer, (*rcpts, *suppressed)),
        Driver::Release(attempt) => {
            line::release(account, attempt);
            if attempt.released {
                released(ctx, account);
            }
        }
    }
    let Some(journey) = &account.journey else {
        return;
    };
    spans(ctx, account, journey);
    let kind = match driver {
        Driver::Session { .. } => account.reply.map(|_| session_event(account)),
        Driver::Release(attempt) => attempt.released.then_some(EventType::Released),
    };
    if let Some(kind) = kind {
        notify(ctx, account, journey, kind);
    }
}

/// A held message upstream took, counted as a session's message is: delivered (or partial)
/// in `mailsluice_messages_total{outcome}` and on the status page. Its client's `250` was
/// counted as `held`; `mailsluice_spool_released_total{result="delivered"}` counts these alone.
fn released(ctx: &Context, account: &Account<'_>) {
    let Some(record) = account.record else {
        return;
    };
    ctx.services.metrics.message(record.outcome);
    let code = account.reply.map(|r| r.code);
    (ctx.services.recent).message(record.outcome, "", &record.key, code, None);
}

/// What a session's client was told, as its tenant's webhooks name it: `accepted`
/// (upstream's `250`), `held` (hold mode's `250`: `released` follows when it goes) or
/// `refused` (any other reply).
fn session_event(account: &Account<'_>) -> EventType {
    match account.record.map(|r| r.outcome) {
        Some(Outcome::Delivered | Outcome::Partial) => EventType::Accepted,
        Some(Outcome::Held) => EventType::Held,
        _ => EventType::Refused,
    }
}

/// The tenant's webhooks told what became of its message: the reply and upstream's id.
fn notify(ctx: &Context, account: &Account<'_>, journey: &Journey<'_>, kind: EventType) {
    let tenant = &journey.judged.tenant;
    let webhooks = &ctx.services.webhooks;
    if !webhooks.wants(tenant, kind) {
        return;
    }
    let verdict = &journey.judged.verdict;
    let record = &verdict.record;
    let mut event = webhooks.event(kind, tenant);
    let upstream_id = match &verdict.end {
        End::Upstream(Ok(accepted)) => accepted.named_id().map(str::to_string),
        _ => None,
    };
    // The id the client's `250` named: upstream's for `accepted`, the spool's for `held` and
    // `released` (what the client was told when it was held); the relay's own otherwise.
    let relay_id = &journey.judged.id;
    event.message_id = Some(match (kind, &verdict.end, &upstream_id) {
        (EventType::Accepted, _, Some(upstream)) => upstream.clone(),
        (_, End::Held(held), _) => held.clone(),
        _ => relay_id.clone(),
    });
    event.relay_message_id = Some(relay_id.clone());
    event.upstream_message_id = upstream_id.or_else(|| record.upstream_id.clone());
    event.from = Some(journey.envelope.from.clone().unwrap_or_default());
    event.to = journey.envelope.rcpts.clone();
    if let Some(reply) = account.reply {
        event.code = Some(reply.code);
        event.reply = Some(reply.text());
    }
    if kind == EventType::Refused {
        event.outcome = Some(record.outcome.as_str());
    }
    webhooks.emit(event);
}

/// The message's spans: times, outcome, reply code, cost and upstream; the key only with
/// `record_keys`; never addresses or content.
fn spans(ctx: &Context, account: &Account<'_>, journey: &Journey<'_>) {
    let Some(traces) = &ctx.services.traces else {
        return;
    };
    let record = &journey.judged.verdict.record;
    traces.message(&MessageSpans {
        started: journey.started,
        duration: account.took,
        waited: record.waited,
        forwarded: account.upstream_reply().is_some() && !record.via.is_empty(),
        outcome: record.outcome.as_str(),
        reply_code: account.reply.map(|r| r.code),
        cost: record.cost,
        layer: &record.layer,
        key: &record.key,
        upstream: &record.via,
        traceparent: journey.judged.traceparent.as_deref(),
    });
}

/// The account of a message a session refused on its own before the pipeline could answer
/// its final dot: at MAIL (its tenant paused), at DATA (no recipient left), or after its data
/// (its size or content). Its line and its count; `key`: the tenant's, when it was known.
pub fn refused(
    ctx: &Context,
    outcome: Outcome,
    reply: &Reply,
    key: &str,
    peer: SocketAddr,
    (rcpts, suppressed): (usize, usize),
    took: Duration,
) {
    let mut record = Record::refused(outcome);
    record.key = key.to_string();
    let account = Account {
        record: Some(&record),
        reply: Some(reply),
        upstreams_word: false,
        journey: None,
        took,
    };
    let driver = Driver::Session {
        peer,
        rcpts,
        suppressed,
    };
    self::record(ctx, &account, &driver);
}
