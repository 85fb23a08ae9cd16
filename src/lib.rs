//! mailsluice: an SMTP relay proxy with per-tenant throttling.
//!
//! Data flows one way: listener -> session (or the spool's releaser) -> pipeline -> (policy,
//! throttle, upstream). Each module imports only from the ones below it in this table, and
//! `clock` and `config` (plain data) from nothing (`python3 tools/import_graph.py src` checks
//! that no imports go round in a circle):
//!
//! | module | what it holds |
//! |---|---|
//! | `serve/` | wiring: the accept loop and graceful shutdown (`server`: [`run`], which starts the spool's releaser), SIGHUP (`reload`), layers at an SES account's own rate (`account`), SES's events from SQS (`events`), the guard and SES's view of each SES tenant in step (`ses_sync`), what starting reads and checks before the network, shared with `check` (`startup`), the subcommands `check`, `peek`, `hash-password` (`commands`) |
//! | `admin/` | the admin HTTP endpoint (`endpoint`): `/` (the status page, `status_page`), `/healthz`, `/readyz`, `/metrics`, `/buckets/{layer}/{key}`, the reputation guard's endpoints and SNS's posts; its bounded accept loop (`listener`) and its password guard (`guard`) |
//! | `fuzzing` | (feature `fuzzing`) a session over an in-memory stream, for `fuzz/` and tests |
//! | `release/` | the spool's driver: held messages taken as they become due, one per key at a time, through `pipeline` with nobody waiting (`client`), what comes of each attempt by its verdict's fate (`attempt`: removed, again after a backoff, given up), the report to the sender (`dsn`, RFC 3464), the attempt's result counted and a give-up warned of (`report`) |
//! | `smtp/` | one client's session: the state machine, one file per verb; at the final dot (`deliver`) it hands the message to `pipeline::intake`, answers the verdict and has it accounted for once (`account`) |
//! | `account/` | the account of one verdict, for both drivers: its log line (`line`: `message` or `release`), the metrics and the status page's row of a session's message, its spans, its tenant's webhook event |
//! | `reply/` | every reply text the relay sends, and how the pipeline's verdicts become replies (`verdicts`): for the session, and for the spool's release (its log line, its report) |
//! | `pipeline/` | a message's journey with no session in it: the one way in for both drivers (`intake`: its facts, identity and our fields; who gave it, `Submitter`), hold mode for a driver that can hold (`hold`), the checks before the wait (`admission`), the wait for tokens (`wait`), the upstream leg with its retries and fallback (`forward`), the tokens settled and the reputation guard told (`settle`), one typed `verdict` and what it means for a held message (`fate`); what it needs of whoever waits for it (`client`) |
//! | `state/` | what the running relay's tasks share: `Setup` (what a reload replaces), `Services` (what outlives it), `Context`, `Deps`, `Live` (`context`); whether the SMTP listeners accept (`health`); the one shutdown signal (`shutdown`) and the grace's end (`grace_over`) |
//! | `reputation/` | the tenant reputation guard: SES's bounce and complaint events parsed (`events`), counted per tenant over a sliding window (`ledger`), attributed by SES's message id (`attribution`), suppressed addresses (`suppression`), what it notes for the SES sync (`ses_sync`); where all of it lives, behind one trait (`store`): in process (`store::local`) or, with `[redis]`, in Redis shared by every replica (`store::redis`, failing open) |
//! | `upstream/` | the `Forwarder` trait (send one message), one module per kind: `smtp` (our SMTP client and pool, pipelining), `mx` (direct delivery, hickory-resolver), `ses` (SES's v2 API through the AWS SDK, SES tenants), `file`; what a kind may offer beyond sending (`offers`); what a refusal says about our sending, typed (`feedback`); the pause after a quota reply (`pause`); the named upstreams (`upstreams`) |
//! | `policy/` | a message's identity, read in one pass over its header section (`identity`): which upstream it takes (`route`), which buckets it is charged to and how much (`charges`), which key headers it loses, whose reputation it counts for, its hops, its `traceparent`, its `From:` addresses and the AUTH user's `senders` they are held to (`senders`) |
//! | `observe/` | what the relay records about itself: Prometheus metrics (`metrics`; the spool's, SES tenants' and the webhooks' apart: `spool_metrics`, `ses_metrics`, `webhooks`), the last refusals, deliveries and upstreams' times (`recent`), an error's short cause (`cause`), the human log format's fields (`log_format`), OTLP traces of the messages (`traces`), what the sessions are doing (`activity`) |
//! | `inbound/` | inbound security: TLS (`tls`), password hashes (`password`), the AUTH lockout (`auth_lockout`), connections per client address (`connection_limit`), the PROXY protocol header a balancer opens its connections with (`proxy`) |
//! | `throttle/` | token buckets (pure math in `bucket`), key tables, stores (local; Redis: its scripts and keys, over `redis/`'s connection), layers with FIFO queues (fair by tenant with `fair_by`), stacked layers taken all or nothing (`stack`) |
//! | `spool/` | where hold-mode layers keep messages (`[spool]`): one file per message, synced before the `250` (`layout`, `record`, `commit`), a lock per directory (`lock`), the queues per key in memory (`index`), read back at start (`recover`), its bounds (`room`) |
//! | `webhook/` | tenant event webhooks: an event and a batch (`event`), each webhook's bounded queue (`queue`), its signed POSTs (`sign`, `post`) and its delivery task with retries (`deliver`); fed by a verdict's account (`account`) and the reputation guard |
//! | `message/` | plain data about one message: its `Envelope`, its `Outcome`, its header fields by byte range (`header`), its `Received:` hops and our mark in them (`received`) |
//! | `redis/` | Redis as the throttle's shared layers and the reputation guard reach it, each with its own scripts and keys: its options from `[redis]` (`options`), a connection to one server, a Cluster or the primary that Sentinel names, followed through a failover (`connection`), a call that did not answer (`error`) |
//! | `clock` | monotonic integer time, injected (`Clock`; `TokioClock`, `FakeClock` for tests) |
//! | `config/` | the TOML schema, its defaults and validation; `config/upstream/` the keys every upstream shares and each kind's own |
//!
//! The journey of one message, file by file:
//! 1. `smtp/data.rs` reads it to its final dot (`smtp/data_reader/`) within its bounds;
//! 2. `smtp/deliver.rs` hands it to `pipeline::intake` (`pipeline/intake.rs`) with who gave
//!    it, its hop (`smtp/received.rs`) and its client (`pipeline/client.rs`); the intake reads
//!    its identity (`policy/identity.rs`: keys and charges, `policy/route.rs`,
//!    `message/received.rs`), writes our fields, and runs its journey (`pipeline/mod.rs`) or
//!    holds it (`pipeline/hold.rs`); the spool's release (`release/attempt.rs`) comes in there
//!    too;
//! 3. `pipeline/admission.rs`: a loop, the `From:` against the user's `senders`, the tenant's
//!    reputation; at the route's upstream, the sender against its tenant's identities, its
//!    pause and its tenant's (`upstream/pause.rs`, `upstream/offers.rs`);
//! 4. `pipeline/wait.rs`: its tokens (`throttle/stack/`), the client watched;
//! 5. `pipeline/forward.rs`: `Forwarder::send` (`upstream/<kind>/`), a throttle reply absorbed,
//!    a quota reply pausing the upstream, the fallback;
//! 6. `pipeline/settle.rs`: the tokens settled, the reputation guard told;
//! 7. `pipeline/verdict.rs`, typed, back in `smtp/deliver.rs`, which answers it
//!    (`reply/`) and has it accounted for once (`account/`: the line, the metrics, the
//!    spans, the webhook event); the release reads its `pipeline/fate.rs` instead.
//!
//! A new check before the wait (a per-tenant daily cap, say) touches `pipeline/admission.rs`
//! (its `Step`, its arm, its `Scope`), `reply/mod.rs` (its words), and where its state is
//! kept when it has some (`state/context.rs`, a `Services` field), its outcome
//! (`message/outcome.rs`, docs/operating.md), plus its config rows (`config/`,
//! docs/configuration.md) and docs/replies.md.
//!
//! A new kind of upstream touches these files and no others:
//! - `config/upstream/<kind>.rs` (new): its URL, its keys and their checks;
//! - `config/upstream/kind.rs`: its variant of `UpstreamKind`, with its arms there (scheme,
//!   keys, URL text, SMTP client settings if it speaks SMTP);
//! - `upstream/<kind>/` (new): its `Forwarder`, which returns its refusals typed (an
//!   `UpstreamError::Pushback` with a `Feedback` when upstream pushed back on our sending),
//!   and what it offers beyond sending (`Offers`);
//! - `upstream/mod.rs`: its `mod` line and its arm in `build_forwarder`;
//! - docs/configuration.md: the rows of its keys (a test fails without them).
//!
//! A kind with a route key of its own (`ses_tenant`, SES's tenant) also has it in
//! `config/route.rs` and `policy/route.rs` (`Route::upstream_tenant`), handed to its forwarder
//! as `Outgoing::tenant`; a bound of its own on the message size shows at `MAIL` through
//! `Config::max_message_bytes`.
//!
//! `main.rs` only parses the command line and dispatches: to serve, it loads the config, binds
//! and calls [`run`]; the other subcommands are in `serve::commands`.

pub(crate) mod account;
pub mod admin;
pub mod clock;
pub mod config;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod inbound;
pub mod message;
pub mod observe;
pub mod pipeline;
pub mod policy;
pub mod redis;
pub mod release;
pub mod reply;
pub mod reputation;
pub mod serve;
pub mod smtp;
pub mod spool;
pub mod state;
pub mod throttle;
pub mod upstream;
pub mod webhook;

pub use serve::server::{run, Listeners};
pub use state::context::{Context, Deps};
