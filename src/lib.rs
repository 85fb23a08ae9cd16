//! mailsluice: an SMTP relay proxy with per-tenant throttling.
//!
//! Data flows one way: listener -> session (or the spool's releaser) -> pipeline -> (policy,
//! throttle, upstream). Each module imports only from the ones below it in this table, and
//! `clock` and `config` (plain data) from nothing (`python3 tools/import_graph.py src` checks
//! that no imports go round in a circle):
//!
//! | module | what it holds |
//! |---|---|
//! | `serve/` | wiring: the accept loop and graceful shutdown (`server`: [`run`], which starts the spool's releaser), SIGHUP (`reload`), layers at an SES account's own rate (`account`), SES's events from SQS (`events`), the guard and SES's view of each SES tenant in step (`ses_sync`), what starting reads and checks before the network, shared with `check` (`startup`), the subcommands `check`, `peek`, `hash-password` (`commands`) and `spool`, a running relay's spool worked through its admin endpoint as `postqueue`/`postsuper` work Postfix's (`spool_command`: its requests; `table`: what people read) |
//! | `admin/` | the admin HTTP endpoint (`endpoint`): `/` (the status page, `status_page`), `/healthz`, `/readyz`, `/metrics`, `/buckets/{layer}/{key}`, the spool's endpoints (`spool`), the reputation guard's endpoints and SNS's posts; its bounded accept loop (`listener`), the `Host` it answers (`host`), changes refused from other sites' pages (`browser`) and its password guard (`guard`) |
//! | `fuzzing` | (feature `fuzzing`) a session over an in-memory stream, for `fuzz/` and tests |
//! | `release/` | the spool's driver (with S3 and SQS it starts the spool's receiver, and at shutdown puts back what was not started): held messages taken as they become due, a key's in order and up to its route's `pool_size` at once, through `pipeline` with nobody waiting (`client`), taking their tokens in their key's order (`turns`), what comes of each attempt by its verdict's fate (`attempt`: removed, again after a backoff or when its failing upstream answers, given up), a failing upstream's probe made due once per interval (`probe`), what the report to the sender says (`dsn`; `message/dsn` writes it), the attempt's result counted and a give-up warned of (`report`) |
//! | `smtp/` | one client's session: the state machine, one file per verb; its state grouped by what it is about: who the client is (`client`: the message's `Submitter` and our hop come from it), the open `transaction`, its `counters` against its bounds, its `place` in the running relay; at the final dot (`deliver`) it hands the message to `pipeline::intake`, answers the verdict and has it accounted for once (`pipeline::account`) |
//! | `pipeline/` | a message's journey with no session in it: the one way in for both drivers (`intake`: its facts, identity and our fields; who gave it, `Submitter`), hold mode for a driver that can hold (`hold`), the checks before the wait (`admission/`, one file per step: its check, its refusal's words, its outcome; the list of every outcome, `Outcome::ALL`), the wait for tokens (`wait`), the upstream leg with its retries and fallback (`forward`), the tokens settled and the reputation guard told (`settle`), one typed `verdict`, what the client is told of it (`answer`) and what it means for a held message (`fate`); the account of a verdict for both drivers (`account/`: its log line, metrics, status page row, spans, webhook event); what it needs of whoever waits for it (`client`) |
//! | `reply/` | the `Reply` type and the reply texts shared below the pipeline: the dialogue's (`dialogue`), the throttle's refusals, upstream's answer as the client gets it (`upstream`); an admission step's own refusal is in its step's file |
//! | `state/` | what the running relay's tasks share: `Setup` (what a reload replaces), `Services` (what outlives it), `Context`, `Live` (`context`); `Deps`, what `run` needs from outside (`deps`); what the admission steps keep between messages (`kept`); whether the SMTP listeners accept (`health`); the one shutdown signal (`shutdown`) and the grace's end (`grace_over`) |
//! | `reputation/` | the tenant reputation guard: SES's bounce and complaint events parsed (`events`), counted per tenant over a sliding window (`ledger`), attributed by SES's message id (`attribution`), suppressed addresses (`suppression`), what it notes for the SES sync (`ses_sync`); where all of it lives, behind one trait (`store`): in process (`store::local`) or, with `[redis]`, in Redis shared by every replica (`store::redis`, failing open) |
//! | `upstream/` | the `Forwarder` trait (send one message), one module per kind: `smtp` (our SMTP client and pool, pipelining, a pool per sender's mailbox with XOAUTH2: `smtp/mailboxes`), `mx` (direct delivery, hickory-resolver), `ses` (SES's v2 API through the AWS SDK, SES tenants), `file`; what a kind may offer beyond sending (`offers`); what a refusal says about our sending, typed (`feedback`); the OAuth 2.0 tokens of an XOAUTH2 login, kept and renewed (`oauth`: the grant, the token endpoint, the cache); the pause after a quota reply (`pause`); a failing upstream's breaker (`breaker`: hold-mode messages held at once, one probe per interval); the named upstreams (`upstreams`) |
//! | `policy/` | a message's identity, read in one pass over its header section (`identity`): which upstream it takes (`route`), which buckets it is charged to and how much (`charges`), which key headers it loses, whose message it is (its `tenant`, from `[tenant]`) and whose reputation it counts for, its hops, its `traceparent`, its `From:` addresses (read strictly as RFC 5322 address lists, `senders/address_list`) and the AUTH user's `senders` they are held to (`senders`) |
//! | `observe/` | what the relay records about itself: Prometheus metrics (`metrics`; the spool's and its s3 store's calls, SES tenants', the XOAUTH2 tokens', the upstreams' states and the webhooks' apart: `spool_metrics`, `spool_store_metrics`, `ses_metrics`, `token_metrics`, `upstream_states`, `webhooks`), the last refusals, the messages delivered and held, and upstreams' times (`recent`), an error's short cause (`cause`), the human log format's fields (`log_format`), OTLP traces of the messages (`traces`), what the sessions are doing (`activity`) |
//! | `inbound/` | inbound security: TLS (`tls`), password hashes (`password`), the AUTH lockout (`auth_lockout`), connections per client address (`connection_limit`), the PROXY protocol header a balancer opens its connections with (`proxy`) |
//! | `throttle/` | token buckets (pure math in `bucket`), key tables, stores (local; Redis: its scripts and keys, over `redis/`'s connection), layers with FIFO queues (fair by tenant with `fair_by`), stacked layers taken all or nothing (`stack`) |
//! | `spool/` | where hold-mode layers keep messages (`[spool]`), in one of two stores behind `Spool` (`store = "dir"` or `"s3"`). The directory: one file per message, synced before the `250` (`layout`, `record`, `commit`; the crate's own tests see each sync in `sync_log`), a lock per directory (`lock`), the directory made, locked and tried as the start and `check` open it (`open`), the queues per key in memory and their bounds, a key's share of the spool among them (`index`; what operators read and do there, `index/operator`), read back at start (`recover`), the releaser's side: taken, read back, put back after an attempt (`releasing`), the filesystem's free space (`room`), what operators read and do (`operator`), the keys they stopped, kept across restarts (`stopped`). S3 and SQS, shared by the replicas (`s3/`): the clients, each call bounded and counted (`client`), one object per message (`objects`), one entry per message in an SQS queue grouped by the held key (`entries`), the receiver and the heartbeat that fill the index from the queue and keep its entries invisible to the others (`receive`), what operators read and do there (`operator`), whether a write can be made there (`probe`) |
//! | `webhook/` | tenant event webhooks: an event and a batch (`event`), each webhook's queue, bounded in events and bytes (`queue`), its signed POSTs (`sign`, `post`) and its delivery task with retries over a window (`deliver`); fed by a verdict's account (`pipeline/account`) and the reputation guard |
//! | `message/` | plain data about one message: its `Envelope`, its `Outcome` (the relay's own outcomes' facts in one table; an admission step's own is its step's, `Outcome::Step`, and `pipeline/admission` makes the list of all, `Outcome::ALL`), the delivery status notification (RFC 3464) written when it is given up (`dsn`, for `upstream/mx` and `release/`), its header fields by byte range (`header`), its `Received:` hops and our mark in them (`received`) |
//! | `redis/` | Redis as the throttle's shared layers and the reputation guard reach it, each with its own scripts and keys: its options from `[redis]` (`options`), a connection to one server, a Cluster or the primary that Sentinel names, followed through a failover (`connection`), a call that did not answer (`error`) |
//! | `clock` | monotonic integer time, injected (`Clock`; `TokioClock`, `FakeClock` for tests) |
//! | `config/` | the TOML schema, its defaults and validation; `config/upstream/` the keys every upstream shares and each kind's own (`oauth`: `smtp://`'s XOAUTH2 login) |
//!
//! The journey of one message, file by file:
//! 1. `smtp/data.rs` reads it to its final dot (`smtp/data_reader/`) within its bounds;
//! 2. `smtp/deliver.rs` hands it to `pipeline::intake` (`pipeline/intake.rs`) with who gave
//!    it, its hop (`smtp/received.rs`) and its client (`pipeline/client.rs`); the intake reads
//!    its identity (`policy/identity.rs`: keys and charges, `policy/route.rs`,
//!    `message/received.rs`), writes our fields, and runs its journey (`pipeline/mod.rs`) or
//!    holds it (`pipeline/hold.rs`); the spool's release (`release/attempt.rs`) comes in there
//!    too;
//! 3. `pipeline/admission/`, one file per step: a loop (`hops`), the `From:` against the
//!    user's `senders` (`from`), the tenant's `reputation`; at the route's upstream, its
//!    tenant's name as upstream takes it (`upstream_tenant_name`), the sender against its
//!    tenant's identities (`upstream_identity`), its pause and its tenant's (`upstream_pause`,
//!    `upstream_tenant_pause`; `upstream/pause.rs`, `upstream/offers.rs`);
//! 4. `pipeline/wait.rs`: its tokens (`throttle/stack/`), the client watched;
//! 5. `pipeline/forward.rs`: `Forwarder::send` (`upstream/<kind>/`), a throttle reply absorbed,
//!    a quota reply pausing the upstream, the fallback;
//! 6. `pipeline/settle.rs`: the tokens settled, the reputation guard told;
//! 7. `pipeline/verdict.rs`, typed, back in `smtp/deliver.rs`, which answers it
//!    (`pipeline/answer.rs`) and has it accounted for once (`pipeline/account/`: the line, the
//!    metrics, the spans, the webhook event); the release reads its `pipeline/fate.rs` instead.
//!
//! A new check before the wait (a per-tenant daily cap, say) touches these source files and
//! no others:
//! - `pipeline/admission/<step>.rs` (new): its check, what it keeps between messages (asked of
//!   `Services::kept` by its own type), its outcome (`Outcome::Step` with its row: its name and
//!   the status page's words, `message::OutcomeFacts`) and its refusal (`NotAdmitted::Step`, a
//!   `StepRefusal`: its outcome, its reply, the key it is about, when it may go again, whether
//!   a driver may hold it);
//! - `pipeline/admission/mod.rs`: its `mod` line, its line in the ordered list (`of_message`
//!   or `at_upstream`) and its outcome in `STEP_OUTCOMES` (so `Outcome::ALL` lists it, after
//!   `upstream_paused`);
//! - `config/`: its config row (a tenant's own in `config/tenant.rs`);
//!
//! and in the docs its rows in docs/operating.md (outcome), docs/replies.md (with a case in
//! `tests/session/outcomes.rs`) and docs/configuration.md.
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
//! as `Outgoing::upstream_tenant`; a bound of its own on the message size shows at `MAIL` through
//! `Config::max_message_bytes`.
//!
//! `main.rs` only parses the command line and dispatches: to serve, it loads the config, binds
//! and calls [`run`]; the other subcommands are in `serve::commands`.

pub mod admin;
pub mod clock;
pub mod config;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod inbound;
pub mod message;
pub mod observe;
pub(crate) mod pipeline;
pub mod policy;
pub mod redis;
pub(crate) mod release;
pub(crate) mod reply;
pub mod reputation;
pub mod serve;
pub mod smtp;
pub(crate) mod spool;
pub mod state;
pub mod throttle;
pub mod upstream;
pub(crate) mod webhook;

pub use serve::server::{run, Listeners};
pub use state::context::Context;
pub use state::deps::Deps;
