//! What the relay records of one release attempt beyond its verdict's account: its result
//! counted, a give-up warned of and counted by reason. The verdict's own account (the
//! `release` line, the spans, the `released` webhook event) is `crate::pipeline::account`'s, as a
//! session's is.

use std::time::{Duration, SystemTime};

use super::dsn::Failure;
use crate::message::Envelope;
use crate::pipeline::account::{self, Account, Driver, Journey};
use crate::pipeline::Judged;
use crate::reply::Reply;
use crate::spool::Ticket;
use crate::state::context::Context;

/// One attempt: its message, and its journey's verdict and reply when it had one.
pub struct Attempted<'a> {
    pub ticket: &'a Ticket,
    pub held_ms: u64,
    pub rcpts: usize,
    /// Its journey's verdict, with its envelope, when its file was read and it was not held
    /// past its time.
    pub journey: Option<(&'a Judged, &'a Envelope)>,
    pub reply: Option<&'a Reply>,
}

impl<'a> Attempted<'a> {
    pub fn new(ticket: &'a Ticket, held_ms: u64) -> Attempted<'a> {
        Attempted {
            ticket,
            held_ms,
            rcpts: 0,
            journey: None,
            reply: None,
        }
    }
}

/// What comes of an attempt.
pub enum Next {
    /// Upstream took it: removed from the spool.
    Delivered,
    /// Held still; tried again after this wait.
    Retry(Duration),
    /// Given up, and what became of its report.
    GaveUp(Failure, Reported),
}

/// What became of a given-up message's report.
pub enum Reported {
    /// Held in the spool with this id, to be sent like any message of its key.
    Report(String),
    /// No `report_from`: the message is kept in `failed/`.
    KeptFailed,
    /// A report or a message of the null sender: never reported on; removed.
    Never,
    /// The report could not be held (why): the message is kept in `failed/`, counted and
    /// logged as an error, and never sent again.
    NotHeld(String),
    /// Its file could not be read back: set aside in `damaged/`.
    Damaged,
}

impl Next {
    fn result(&self) -> &'static str {
        match self {
            Next::Delivered => "delivered",
            Next::Retry(_) => "retry",
            Next::GaveUp(..) => "given_up",
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Next::Delivered => "removed",
            Next::Retry(_) => "retry",
            Next::GaveUp(_, Reported::Report(_)) => "reported",
            Next::GaveUp(_, Reported::KeptFailed) => "kept_failed",
            Next::GaveUp(_, Reported::Never) => "removed_unreported",
            Next::GaveUp(_, Reported::NotHeld(_)) => "report_not_held",
            Next::GaveUp(_, Reported::Damaged) => "set_aside",
        }
    }

    fn retry_in(&self) -> Option<Duration> {
        match self {
            Next::Retry(wait) => Some(*wait),
            _ => None,
        }
    }
}

/// The attempt's result counted, a give-up warned of and counted by reason, and its
/// verdict's account.
pub fn attempt(ctx: &Context, a: &Attempted<'_>, next: &Next, took: Duration) {
    let metrics = ctx.services.metrics.spool();
    metrics.released(next.result());
    let ticket = a.ticket;
    if let Next::GaveUp(failure, reported) = next {
        let reason = match reported {
            Reported::Damaged => "damaged",
            _ => failure.as_str(),
        };
        metrics.given_up(reason);
        if let Reported::NotHeld(why) = reported {
            metrics.report_not_held();
            tracing::error!(
                target: "mailsluice::release",
                id = &*ticket.id,
                error = why.as_str(),
                "spool.report_not_held: a given-up message's report could not be held; the message is kept in failed/"
            );
        }
        tracing::warn!(
            target: "mailsluice::release",
            id = &*ticket.id,
            layer = ticket.key.layer.as_str(),
            key = ticket.key.key.as_str(),
            reason,
            error = %failure,
            next = next.name(),
            report = match reported { Reported::Report(id) => id.as_str(), _ => "" },
            "spool.given_up"
        );
    }
    let attempt = account::Attempt {
        ticket,
        held_ms: a.held_ms,
        rcpts: a.rcpts,
        next: next.name(),
        retry_in: next.retry_in(),
        outcome_without_journey: match next {
            Next::GaveUp(_, Reported::Damaged) => "damaged",
            _ => "expired",
        },
        released: matches!(next, Next::Delivered),
    };
    let account = match a.journey {
        Some((judged, envelope)) => {
            let journey = Journey {
                judged,
                envelope,
                started: SystemTime::now() - took,
            };
            Account::of(journey, a.reply, took)
        }
        None => Account {
            record: None,
            reply: None,
            upstreams_word: false,
            journey: None,
            took,
        },
    };
    account::record(ctx, &account, &Driver::Release(&attempt));
}
