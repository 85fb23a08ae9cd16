//! The status page (`GET /` on the admin endpoint): what the relay is doing, at a glance, on a
//! laptop or a phone. Server-rendered HTML that refreshes itself every few seconds; no script.
//! Every value is escaped: keys and layer names may come from clients.

use std::fmt::{Display, Write as _};
use std::time::SystemTime;

use crate::admin::reputation::SesTenantView;
use crate::observe::recent::Recent;
use crate::redis::RedisUnavailable;
use crate::reputation::Standing;
use crate::state::context::Context;
use crate::state::health::Health;
use crate::throttle::{KeyWaiting, StoreUnreachable};
use crate::upstream::{Checked, Upstream};
use refusals::refusals;
use spool::spool;
use text::{duration_text, escape, millis_text};
use webhooks::webhooks;

/// Keys listed in "most waiting".
const TOP_KEYS: usize = 20;
/// Words break only where they must; keys, names and error texts (which may be long, with no
/// space in them) anywhere, so a table still fits a phone.
const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1rem;max-width:60rem}\
    table{border-collapse:collapse;width:100%;margin-bottom:1.5rem}\
    th,td{text-align:left;padding:.25rem .5rem;border-bottom:1px solid #ddd;\
    overflow-wrap:break-word}th{background:#f4f4f4}.ok{color:#070}.bad{color:#b00}\
    .any{overflow-wrap:anywhere}.num{text-align:right;white-space:nowrap}";

/// What the page says about readiness, gathered by the caller (the checks are async).
pub struct Checks {
    /// Each upstream's reachability, by name, in config order.
    pub upstreams: Vec<(String, Checked)>,
    /// `None` when no layer uses a shared store.
    pub store: Option<Result<(), StoreUnreachable>>,
    /// The reputation guard's addresses suppressed and tenants, `None` when it is off (read
    /// from Redis with `[redis]`: an error when it does not answer).
    pub reputation: Option<Result<(usize, Vec<Standing>), RedisUnavailable>>,
    /// With `[reputation] ses_sync`: each key's SES tenant and SES's word on it.
    pub ses_tenants: Vec<SesTenantView>,
    /// Whether the spool can be written, `None` without one.
    pub spool: Option<Result<(), &'static str>>,
    /// Why the spool's summary could not be read (S3's listing failed), if so.
    pub spool_unlisted: Option<String>,
}

/// What the status page shows of the reputation guard, read by the caller.
pub async fn reputation_view(
    ctx: &Context,
) -> Option<Result<(usize, Vec<Standing>), RedisUnavailable>> {
    let guard = ctx.services.reputation.as_ref()?;
    Some(async { Ok((guard.suppressed_count().await?, guard.standings().await?)) }.await)
}

/// The whole page.
pub fn render(ctx: &Context, health: &Health, recent: &Recent, checks: &Checks) -> String {
    let mut html = String::with_capacity(8 * 1024);
    let _ = write!(
        html,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"5\"><title>mailsluice {host}</title>\
         <style>{STYLE}</style></head><body><h1>mailsluice {host}</h1>\
         <p>version {version}, up {uptime}; drawn {drawn}</p>",
        host = escape(&ctx.setup.config.smtp.hostname),
        version = env!("CARGO_PKG_VERSION"),
        uptime = duration_text(recent.uptime()),
        drawn = httpdate::fmt_http_date(SystemTime::now()),
    );
    readiness(&mut html, ctx, health, checks);
    delivered(&mut html, recent);
    upstreams(&mut html, ctx, recent);
    sessions(&mut html, ctx);
    layers(&mut html, ctx, recent);
    reputation(&mut html, checks.reputation.as_ref());
    ses_tenants(&mut html, &checks.ses_tenants);
    spool(&mut html, ctx, checks.spool_unlisted.as_deref());
    webhooks(&mut html, ctx);
    most_waiting(&mut html, ctx);
    refusals(&mut html, recent);
    html.push_str("</body></html>");
    html
}

fn readiness(html: &mut String, ctx: &Context, health: &Health, checks: &Checks) {
    html.push_str("<h2>Readiness</h2><table><tr><th>part</th><th>state</th></tr>");
    let listening = match health.listening() {
        true => Ok(()),
        false => Err("not accepting"),
    };
    row_state(html, "SMTP listeners", &listening);
    for (upstream, (name, check)) in ctx.setup.upstreams.iter().zip(&checks.upstreams) {
        let part = format!("upstream {name} ({})", upstream.config.url());
        row_state(html, &part, &check.clone().map(|_| ()));
        if let Some(left) = upstream.pause.left() {
            let paused = Err(format!(
                "paused after a quota reply, {} s left",
                left.as_secs()
            ));
            row_state(html, &format!("upstream {name} sending"), &paused);
        }
        let unknown = (upstream.forwarder.offers().identities).map(|i| i.unknown_tenants());
        if let Some(unknown) = unknown.filter(|u| !u.is_empty()) {
            let named = Err(format!("unknown to SES: {}", unknown.join(", ")));
            row_state(html, &format!("upstream {name} SES tenants"), &named);
        }
    }
    if let Some(spool) = &checks.spool {
        row_state(html, "spool", spool);
    }
    if let Some(store) = &checks.store {
        row_state(html, "Redis (shared buckets)", store);
    }
    html.push_str("</table>");
}

/// Messages delivered (upstream's `250`, held ones the spool released included) and held
/// (hold mode's `250`) since start and in the last minute, with their rate.
fn delivered(html: &mut String, recent: &Recent) {
    html.push_str(
        "<h2>Messages</h2><table><tr><th>messages</th><th class=\"num\">since start</th>\
         <th class=\"num\">last minute</th><th class=\"num\">per second</th></tr>",
    );
    for (what, (total, minute)) in [("delivered", recent.delivered()), ("held", recent.held())] {
        let _ = write!(
            html,
            "<tr><td>{what}</td><td class=\"num\">{total}</td><td class=\"num\">{minute}</td>\
             <td class=\"num\">{:.2}</td></tr>",
            minute as f64 / 60.0
        );
    }
    html.push_str("</table>");
}

/// Each upstream: its messages of the last minute and their mean time there, the last
/// one's time, its last error; whether it is up (its breaker closed), failing since when, and
/// the held messages its failure keeps back.
fn upstreams(html: &mut String, ctx: &Context, recent: &Recent) {
    html.push_str(
        "<h2>Upstreams</h2><table><tr><th>upstream</th><th class=\"num\">sent (last minute)</th>\
         <th class=\"num\">mean time</th><th class=\"num\">last time</th><th>last error</th>\
         <th>up</th><th>failing since</th><th class=\"num\">held because of it</th></tr>",
    );
    for upstream in ctx.setup.upstreams.iter() {
        let name = escape(upstream.name());
        let Some(view) = recent.upstream_view(upstream.name()) else {
            let _ = write!(
                html,
                "<tr><td class=\"any\">{name}</td><td class=\"num\">0</td><td class=\"num\">-</td>\
                 <td class=\"num\">-</td><td>none</td>{}</tr>",
                breaker_cells(ctx, upstream)
            );
            continue;
        };
        let mean = view.mean_last_minute.map_or("-".to_string(), millis_text);
        let error = match &view.last_error {
            Some((at, text)) => format!(
                "<span class=\"bad\">{}: {}</span>",
                escape(&httpdate::fmt_http_date(*at)),
                escape(text)
            ),
            None => "none".to_string(),
        };
        let _ = write!(
            html,
            "<tr><td class=\"any\">{name}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{mean}</td><td class=\"num\">{}</td><td class=\"any\">{error}</td>{}</tr>",
            view.sent_last_minute,
            millis_text(view.last),
            breaker_cells(ctx, upstream),
        );
    }
    html.push_str("</table>");
}

/// An upstream's breaker as cells: up or failing, since when, and the held messages waiting
/// for it to answer again.
fn breaker_cells(ctx: &Context, upstream: &Upstream) -> String {
    let held = (ctx.services.spool.as_ref()).map_or(0, |s| s.waiting_for(upstream.name()));
    match upstream.breaker.failing_since() {
        None => format!("<td>yes</td><td>-</td><td class=\"num\">{held}</td>"),
        Some(since) => format!(
            "<td><span class=\"bad\">failing</span></td><td>{}</td><td class=\"num\">{held}</td>",
            escape(&httpdate::fmt_http_date(since))
        ),
    }
}

/// The client sessions by what each is doing now (`mailsluice_sessions{activity}`).
fn sessions(html: &mut String, ctx: &Context) {
    html.push_str("<h2>Sessions</h2><table><tr><th>doing</th><th class=\"num\">sessions</th></tr>");
    for (activity, n) in ctx.services.metrics.activities().counts() {
        let _ = write!(
            html,
            "<tr><td>{}</td><td class=\"num\">{n}</td></tr>",
            activity.as_str()
        );
    }
    html.push_str("</table>");
}

fn row_state(html: &mut String, part: &str, state: &Result<(), impl Display>) {
    let (class, text) = match state {
        Ok(()) => ("ok", "ready".to_string()),
        Err(e) => ("bad", format!("not ready: {e}")),
    };
    let _ = write!(
        html,
        "<tr><td class=\"any\">{}</td><td class=\"{class} any\">{}</td></tr>",
        escape(part),
        escape(&text)
    );
}

fn layers(html: &mut String, ctx: &Context, recent: &Recent) {
    html.push_str(
        "<h2>Layers</h2><table><tr><th>layer</th><th>limit</th><th class=\"num\">keys</th>\
         <th class=\"num\">waiting</th><th class=\"num\">refused (last minute)</th></tr>",
    );
    for (i, spec) in ctx.setup.throttle.specs().iter().enumerate() {
        // An adaptive layer's learned limit, when it runs below the configured one.
        let limit = match ctx.setup.throttle.effective_limit(i) {
            Some(learned) if learned != spec.limit => format!("{learned} (of {})", spec.limit),
            _ => spec.limit.to_string(),
        };
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{limit} per {} ms, burst {}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            escape(&spec.name),
            spec.interval.as_millis(),
            spec.burst,
            ctx.setup.throttle.keys(i),
            ctx.setup.throttle.waiting(i),
            recent.refused_last_minute(&spec.name),
        );
    }
    if ctx.setup.throttle.specs().is_empty() {
        html.push_str("<tr><td colspan=\"5\">no layer: nothing is throttled</td></tr>");
    }
    html.push_str("</table>");
}

/// Tenants the reputation guard holds now, with their rates, and the addresses suppressed.
fn reputation(html: &mut String, view: Option<&Result<(usize, Vec<Standing>), RedisUnavailable>>) {
    let (suppressed, standings) = match view {
        None => return,
        Some(Ok(view)) => view,
        Some(Err(e)) => {
            let _ = write!(
                html,
                "<h2>Tenant reputation</h2><p class=\"bad\">{}</p>",
                escape(&e.to_string())
            );
            return;
        }
    };
    let _ = write!(
        html,
        "<h2>Tenant reputation</h2><p>{} addresses suppressed</p><table><tr><th>paused tenant</th>\
         <th class=\"num\">sent</th><th class=\"num\">bounce rate</th>\
         <th class=\"num\">complaint rate</th></tr>",
        suppressed
    );
    let paused: Vec<_> = standings.iter().filter(|s| s.paused).collect();
    for s in &paused {
        let _ = write!(
            html,
            "<tr><td class=\"any\">{}</td><td class=\"num\">{}</td><td class=\"num\">{:.2} %</td>\
             <td class=\"num\">{:.3} %</td></tr>",
            escape(&s.key),
            s.sent,
            s.bounce_rate * 100.0,
            s.complaint_rate * 100.0
        );
    }
    if paused.is_empty() {
        html.push_str("<tr><td colspan=\"4\">no tenant is paused</td></tr>");
    }
    html.push_str("</table>");
}

/// With `ses_sync`: SES's own word on each key's SES tenant.
fn ses_tenants(html: &mut String, tenants: &[SesTenantView]) {
    if tenants.is_empty() {
        return;
    }
    html.push_str(
        "<h2>SES tenants</h2><table><tr><th>key</th><th>SES tenant</th><th>sending</th>\
         <th>set by the relay</th><th>set by SES</th><th>reputation impact</th></tr>",
    );
    for t in tenants {
        let text = |v: &Option<String>| escape(v.as_deref().unwrap_or("not read yet"));
        let class = match t.sending_status_aggregate.as_deref() {
            Some("DISABLED") => "bad",
            _ => "ok",
        };
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{} ({})</td><td class=\"{class}\">{}</td><td>{}</td><td>{}</td>\
             <td>{}</td></tr>",
            escape(&t.key),
            escape(&t.ses_tenant),
            escape(&t.upstream),
            text(&t.sending_status_aggregate),
            text(&t.customer_managed_status),
            text(&t.aws_ses_managed_status),
            escape(t.reputation_impact.as_deref().unwrap_or("none")),
        );
    }
    html.push_str("</table>");
}

fn most_waiting(html: &mut String, ctx: &Context) {
    let throttle = &ctx.setup.throttle;
    let mut keys: Vec<(usize, KeyWaiting)> = (0..throttle.specs().len())
        .flat_map(|i| (throttle.most_waiting(i, TOP_KEYS).into_iter()).map(move |k| (i, k)))
        .collect();
    keys.sort_by(|a, b| (b.1.waiting.cmp(&a.1.waiting)).then_with(|| a.1.key.cmp(&b.1.key)));
    keys.truncate(TOP_KEYS);
    html.push_str(
        "<h2>Most waiting</h2><table><tr><th>layer</th><th>key</th>\
         <th class=\"num\">waiting</th><th class=\"num\">oldest has waited</th></tr>",
    );
    for (layer, key) in &keys {
        let _ = write!(
            html,
            "<tr><td class=\"any\">{}</td><td class=\"any\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td></tr>",
            escape(&throttle.specs()[*layer].name),
            escape(&key.key),
            key.waiting,
            duration_text(key.oldest_waited),
        );
    }
    if keys.is_empty() {
        html.push_str("<tr><td colspan=\"4\">nobody waits</td></tr>");
    }
    html.push_str("</table>");
}

mod refusals;
mod spool;
mod text;
mod webhooks;
