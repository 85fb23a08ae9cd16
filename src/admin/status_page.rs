//! The status page (`GET /` on the admin endpoint): what the relay is doing, at a glance, on a
//! laptop or a phone. Server-rendered HTML that refreshes itself every few seconds; no script.
//! Every value is escaped: keys and layer names may come from clients.

use std::fmt::{Display, Write as _};

use crate::observe::recent::Recent;
use crate::redis::RedisUnavailable;
use crate::reputation::Standing;
use crate::state::context::{Context, Health};
use crate::throttle::StoreUnreachable;
use crate::upstream::Checked;

/// Keys listed in "most waiting".
const TOP_KEYS: usize = 20;
const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1rem;max-width:60rem}\
    table{border-collapse:collapse;width:100%;margin-bottom:1.5rem}\
    th,td{text-align:left;padding:.25rem .5rem;border-bottom:1px solid #ddd;\
    overflow-wrap:anywhere}th{background:#f4f4f4}.ok{color:#070}.bad{color:#b00}\
    .num{text-align:right}";

/// What the page says about readiness, gathered by the caller (the checks are async).
pub struct Checks {
    /// Each upstream's reachability, by name, in config order.
    pub upstreams: Vec<(String, Checked)>,
    /// `None` when no layer uses a shared store.
    pub store: Option<Result<(), StoreUnreachable>>,
    /// The reputation guard's addresses suppressed and tenants, `None` when it is off (read
    /// from Redis with `[redis]`: an error when it does not answer).
    pub reputation: Option<Result<(usize, Vec<Standing>), RedisUnavailable>>,
    /// Whether the spool can be written, `None` without one.
    pub spool: Option<Result<(), &'static str>>,
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
         <style>{STYLE}</style></head><body><h1>mailsluice {host}</h1>",
        host = escape(&ctx.setup.config.smtp.hostname),
    );
    readiness(&mut html, ctx, health, checks);
    sessions(&mut html, ctx);
    layers(&mut html, ctx, recent);
    reputation(&mut html, checks.reputation.as_ref());
    spool(&mut html, ctx);
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
    }
    if let Some(spool) = &checks.spool {
        row_state(html, "spool", spool);
    }
    if let Some(store) = &checks.store {
        row_state(html, "Redis (shared buckets)", store);
    }
    html.push_str("</table>");
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
        "<tr><td>{}</td><td class=\"{class}\">{}</td></tr>",
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
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{:.2} %</td>\
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

/// The spool: what it holds, and the keys holding the most.
fn spool(html: &mut String, ctx: &Context) {
    let Some(spool) = &ctx.services.spool else {
        return;
    };
    let s = spool.summary();
    let _ = write!(
        html,
        "<h2>Spool</h2><p>{} messages held ({} bytes), the oldest {} s; {} failed</p>\
         <table><tr><th>layer</th><th>key</th><th class=\"num\">held</th>\
         <th class=\"num\">oldest (s)</th><th>released</th></tr>",
        s.messages,
        s.bytes,
        s.oldest_ms / 1000,
        s.failed,
    );
    let mut keys = spool.keys();
    keys.sort_by(|a, b| b.messages.cmp(&a.messages).then_with(|| a.key.cmp(&b.key)));
    let now = spool.wall_ms();
    for k in keys.iter().take(TOP_KEYS) {
        let released = match spool.is_stopped(&k.key) {
            true => "<td class=\"bad\">stopped by an operator</td>",
            false => "<td>in turn</td>",
        };
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             {released}</tr>",
            escape(&k.key.layer),
            escape(&k.key.key),
            k.messages,
            now.saturating_sub(k.oldest_ms) / 1000,
        );
    }
    if keys.is_empty() {
        html.push_str("<tr><td colspan=\"5\">nothing held</td></tr>");
    }
    html.push_str("</table>");
}

fn most_waiting(html: &mut String, ctx: &Context) {
    let mut keys: Vec<(usize, String, usize)> = (0..ctx.setup.throttle.specs().len())
        .flat_map(|i| {
            (ctx.setup.throttle.most_waiting(i, TOP_KEYS).into_iter()).map(move |(k, n)| (i, k, n))
        })
        .collect();
    keys.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.1.cmp(&b.1)));
    keys.truncate(TOP_KEYS);
    html.push_str(
        "<h2>Most waiting</h2><table><tr><th>layer</th><th>key</th>\
         <th class=\"num\">waiting</th></tr>",
    );
    for (layer, key, waiting) in &keys {
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{waiting}</td></tr>",
            escape(&ctx.setup.throttle.specs()[*layer].name),
            escape(key),
        );
    }
    if keys.is_empty() {
        html.push_str("<tr><td colspan=\"3\">nobody waits</td></tr>");
    }
    html.push_str("</table>");
}

fn refusals(html: &mut String, recent: &Recent) {
    html.push_str(
        "<h2>Last refusals</h2><table><tr><th>time (UTC)</th><th>layer</th><th>key</th>\
         <th class=\"num\">reply</th></tr>",
    );
    let refusals = recent.refusals();
    for r in &refusals {
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
            escape(&httpdate::fmt_http_date(r.at)),
            escape(&r.layer),
            escape(&r.key),
            r.code,
        );
    }
    if refusals.is_empty() {
        html.push_str("<tr><td colspan=\"4\">none since start</td></tr>");
    }
    html.push_str("</table>");
}

/// Text as HTML text or attribute value.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() || invisible_format(c) => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// Characters that change how the text around them is shown without being seen themselves:
/// bidirectional embeddings, overrides and isolates (U+202A-202E, U+2066-2069), marks
/// (U+200E/200F, U+061C), zero-width characters and line or paragraph separators. A key
/// holding U+202E would otherwise show another key's name on the page.
fn invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
    )
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn bidirectional_controls_are_never_shown_raw() {
        for c in [
            '\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{85}',
        ] {
            assert_eq!(escape(&format!("a{c}b")), "a\u{fffd}b", "{:?}", c);
        }
        assert_eq!(escape("tenant-é"), "tenant-é");
    }

    #[test]
    fn markup_and_controls_are_text() {
        assert_eq!(
            escape("<script>alert('x')</script>&\"\x1b"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;\u{fffd}"
        );
    }
}
