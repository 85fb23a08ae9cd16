//! Messages driven through the pipeline with no SMTP session and no socket: a context from a
//! config, a forwarder that keeps what it is given, and a client that is whatever the test
//! says (here to stay, or gone).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::verdict::End;
use super::{Client, Intake, NotAdmitted, Received, Submitter, Unanswered};
use crate::config::Config;
use crate::message::received::Loop;
use crate::message::{Envelope, Outcome};
use crate::observe::activity::Activity;
use crate::state::context::Context;
use crate::state::deps::Deps;
use crate::state::grace_over::Bell;
use crate::upstream::{Accepted, ForwardFuture, Forwarder, Outgoing, Upstreams};

/// One message as a forwarder got it: its envelope, bytes and tenant.
type Kept = (Envelope, Vec<u8>, Option<String>);

/// Keeps every message it is given.
#[derive(Default)]
struct Keeping {
    got: Mutex<Vec<Kept>>,
}

impl Forwarder for Keeping {
    fn send<'a>(&'a self, message: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        Box::pin(async move {
            let mut got = self.got.lock().unwrap();
            let tenant = message.upstream_tenant.map(str::to_string);
            got.push((message.envelope.clone(), message.pieces.concat(), tenant));
            Ok(Accepted::new(format!("2.0.0 Ok kept-{}", got.len())))
        })
    }
}

/// Nobody waits on the verdict, or someone who leaves once `gone` resolves; the activities
/// it was told are kept.
struct Waiting<G> {
    gone: Option<G>,
    doing: Vec<Activity>,
}

impl<G: Future<Output = ()> + Send + Unpin> Client for Waiting<G> {
    async fn gone(&mut self) {
        match self.gone.as_mut() {
            Some(gone) => gone.await,
            None => std::future::pending().await,
        }
    }

    fn doing(&mut self, activity: Activity) {
        self.doing.push(activity);
    }

    fn grace_over(&self) -> Option<Arc<Bell>> {
        None
    }
}

fn nobody() -> Waiting<std::future::Pending<()>> {
    Waiting {
        gone: None,
        doing: Vec::new(),
    }
}

const CONFIG: &str = "[smtp]\nlisten = [\"127.0.0.1:0\"]\nhostname = \"relay.test\"\n\
    trusted_networks = [\"127.0.0.0/8\"]\n\
    [upstream]\nurl = \"file://unused\"\n\
    [[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\nlimit = 1\ninterval_ms = 1000\n\
    max_wait_ms = 5000\n";

fn context(config: &str) -> (Arc<Context>, Arc<Keeping>) {
    let config = Arc::new(Config::parse(config).expect("valid config"));
    let keeping = Arc::new(Keeping::default());
    let upstreams = Upstreams::with_first(&config, keeping.clone()).expect("upstreams");
    let ctx = Context::new(Deps::new(config, upstreams));
    (Arc::new(ctx), keeping)
}

fn envelope() -> Envelope {
    Envelope {
        from: Some("app@example.com".into()),
        rcpts: vec!["someone@example.net".into()],
        ..Envelope::default()
    }
}

/// The journey of `body` from a trusted client, through the intake as a driver that cannot
/// hold hands it over, with `added` as our `Received:` field; its verdict.
async fn journey<C: Client>(
    ctx: &Context,
    body: &[u8],
    added: &[u8],
    client: &mut C,
) -> super::Verdict {
    let envelope = envelope();
    let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let intake = Intake {
        envelope: &envelope,
        body,
        key_fields: 0,
        submitter: Submitter {
            auth_tenant: None,
            header_trusted: true,
            peer,
            binding: None,
        },
        received: Received::Held {
            id: "0123456789abcdef",
            field: added,
        },
        can_hold: false,
    };
    super::intake(ctx, intake, client).await.verdict
}

const BODY: &[u8] = b"X-Tenant: acme\r\nSubject: hi\r\n\r\nHello.\r\n";

/// A message goes upstream as the pipeline's driver gave it (our fields, then the client's
/// bytes without its key header), charged to its tenant's bucket; the verdict carries
/// upstream's answer.
#[tokio::test(start_paused = true)]
async fn a_message_goes_upstream_with_no_session_behind_it() {
    let (ctx, keeping) = context(CONFIG);
    let mut client = nobody();
    let verdict = journey(&ctx, BODY, b"Received: by test\r\n", &mut client).await;
    match &verdict.end {
        End::Upstream(Ok(accepted)) => assert_eq!(accepted.text, "2.0.0 Ok kept-1"),
        _ => panic!("not upstream's acceptance"),
    }
    assert_eq!(verdict.record.outcome, Outcome::Delivered);
    assert_eq!(
        (verdict.record.layer.as_str(), verdict.record.key.as_str()),
        ("tenant", "acme")
    );
    let got = keeping.got.lock().unwrap().clone();
    let want = b"Received: by test\r\nSubject: hi\r\n\r\nHello.\r\n".to_vec();
    assert_eq!(got, [(envelope(), want, None)]);
    let peek = ctx.setup.throttle.peek("tenant", "acme").expect("a layer");
    assert_eq!(peek.remaining, 0, "the message took its token");
    assert_eq!(client.doing, [Activity::Waiting, Activity::Upstream]);
}

/// A second message of the tenant waits in its queue for the bucket to refill (on tokio's
/// paused clock), then goes; the time waited is in its record.
#[tokio::test(start_paused = true)]
async fn a_message_waits_for_its_tokens() {
    let (ctx, keeping) = context(CONFIG);
    let first = journey(&ctx, BODY, b"", &mut nobody()).await;
    assert_eq!(first.record.outcome, Outcome::Delivered);
    let second = journey(&ctx, BODY, b"", &mut nobody()).await;
    assert_eq!(second.record.outcome, Outcome::Delivered);
    assert_eq!(second.record.waited, Duration::from_secs(1));
    assert_eq!(keeping.got.lock().unwrap().len(), 2);
}

/// A message whose client goes while it waits is abandoned: no reply, nothing forwarded, and
/// its place given up (the next message takes the token that comes).
#[tokio::test(start_paused = true)]
async fn a_message_whose_client_goes_while_it_waits_is_abandoned() {
    let (ctx, keeping) = context(CONFIG);
    journey(&ctx, BODY, b"", &mut nobody()).await;
    let mut leaving = Waiting {
        gone: Some(Box::pin(tokio::time::sleep(Duration::from_millis(300)))),
        doing: Vec::new(),
    };
    let verdict = journey(&ctx, BODY, b"", &mut leaving).await;
    assert_eq!(verdict.record.outcome, Outcome::Abandoned);
    assert!(matches!(verdict.end, End::Unanswered(Unanswered::Abandoned)) && verdict.closes());
    assert_eq!(verdict.record.waited, Duration::from_millis(300));
    assert_eq!(
        keeping.got.lock().unwrap().len(),
        1,
        "nothing more forwarded"
    );
    let third = journey(&ctx, BODY, b"", &mut nobody()).await;
    assert_eq!(third.record.waited, Duration::from_millis(700));
}

/// Admission: a message that carries this process's mark in a `Received:` field came back
/// (a loop) and is refused for good before it takes a token; nothing goes upstream.
#[tokio::test(start_paused = true)]
async fn a_looping_message_is_refused_before_its_tokens() {
    let (ctx, keeping) = context(CONFIG);
    let ours = format!(
        "Received: from x\r\n\tby relay.test (mailsluice {})\r\n{}",
        ctx.services.instance,
        std::str::from_utf8(BODY).unwrap()
    );
    let verdict = journey(&ctx, ours.as_bytes(), b"", &mut nobody()).await;
    assert!(matches!(
        verdict.end,
        End::Refused(NotAdmitted::Loop(Loop::CameBack))
    ));
    assert_eq!(verdict.record.outcome, Outcome::Loop);
    assert!(keeping.got.lock().unwrap().is_empty());
    let peek = ctx.setup.throttle.peek("tenant", "acme").expect("a layer");
    assert_eq!(peek.remaining, 1, "no token taken");
}

/// With routes and none for the message: `451 4.3.5`, nothing forwarded.
#[tokio::test(start_paused = true)]
async fn a_message_with_no_route_is_refused() {
    let config = format!(
        "{CONFIG}[[route]]\nkey = \"header:X-Tenant\"\nvalues = [\"globex\"]\nupstream = \"default\"\n"
    );
    let (ctx, keeping) = context(&config);
    let verdict = journey(&ctx, BODY, b"", &mut nobody()).await;
    assert!(matches!(verdict.end, End::NoRoute));
    assert_eq!(verdict.record.outcome, Outcome::NoRoute);
    assert!(keeping.got.lock().unwrap().is_empty());
}

/// A step's refusal as data: the verdict counts its outcome and names its key, the client
/// gets its words, the release reads when it may go again, and a driver holds it only when
/// the step says so.
#[test]
fn a_steps_refusal_is_answered_counted_and_kept_as_it_says() {
    use super::admission::StepRefusal;
    use super::fate::{Fate, Later, Refuser};
    use super::verdict::{Record, Verdict};
    use crate::message::OutcomeFacts;
    use crate::reply::Reply;

    const CAPPED: OutcomeFacts = OutcomeFacts::refusal("capped", "the tenant is capped");
    let (ctx, _) = context(CONFIG);
    let refusal = |again, holdable| StepRefusal {
        outcome: Outcome::Step(&CAPPED),
        reply: Reply::new(451, "4.7.1", "Tenant acme capped"),
        key: Some("acme".into()),
        again,
        holdable,
    };
    let refused = |step| {
        Verdict::refused(
            NotAdmitted::Step(Box::new(step)),
            Record::refused(Outcome::Delivered),
        )
    };
    let later = refused(refusal(Some(Duration::from_secs(60)), false));
    assert_eq!(later.record.outcome.as_str(), "capped");
    assert_eq!(later.record.key, "acme");
    assert_eq!(
        super::answer(&later.end).map(|r| r.text()).as_deref(),
        Some("451 4.7.1 Tenant acme capped")
    );
    assert_eq!(
        Fate::of(&later),
        Fate::NotNow(Later::NotBefore(Duration::from_secs(60)))
    );
    assert!(!super::hold::holdable(&ctx, &later.end));
    let for_good = refused(refusal(None, true));
    assert_eq!(Fate::of(&for_good), Fate::RefusedForGood(Refuser::Relay));
    assert!(super::hold::holdable(&ctx, &for_good.end));
}
