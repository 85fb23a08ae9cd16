//! The status page's spool: what it holds (with S3 and SQS: the shared spool's approximate
//! counts), and the keys holding the most (with S3 and SQS: those this replica received).

use std::fmt::Write as _;

use super::text::escape;
use super::TOP_KEYS;
use crate::state::context::Context;

/// The spool: what it holds, and the keys holding the most. With S3 and SQS: the shared
/// spool's counts (approximate), and the keys of the entries this replica has received.
pub(super) fn spool(html: &mut String, ctx: &Context, unlisted: Option<&str>) {
    let Some(spool) = &ctx.services.spool else {
        return;
    };
    let s = spool.summary();
    let shared = match spool.shared() {
        true => " on S3 and SQS, shared by every replica (approximate)",
        false => "",
    };
    let _ = write!(
        html,
        "<h2>Spool</h2><p>{} messages held{shared} ({} bytes), the oldest {} s; {} failed</p>",
        s.messages,
        s.bytes,
        s.oldest_ms / 1000,
        s.failed,
    );
    if let Some(why) = unlisted {
        let _ = write!(
            html,
            "<p class=\"bad any\">the bucket could not be listed: {}</p>",
            escape(why)
        );
    }
    if spool.shared() {
        html.push_str("<p>Received by this replica:</p>");
    }
    html.push_str(
        "<table><tr><th>layer</th><th>key</th><th class=\"num\">held</th>\
         <th class=\"num\">oldest (s)</th><th>released</th></tr>",
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
