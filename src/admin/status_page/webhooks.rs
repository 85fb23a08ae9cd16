//! The status page's webhooks: one row each, with its queue, what it sent, failed and
//! dropped, and its last error. Only the URL's host is shown: a path may carry a token.

use std::fmt::Write as _;

use super::text::escape;
use crate::state::context::Context;

pub(super) fn webhooks(html: &mut String, ctx: &Context) {
    let rows = ctx.services.webhooks.rows();
    if rows.is_empty() {
        return;
    }
    html.push_str(
        "<h2>Webhooks</h2><table><tr><th>webhook</th><th>tenant</th><th>host</th>\
         <th class=\"num\">queued</th><th class=\"num\">sent</th><th class=\"num\">failed</th>\
         <th class=\"num\">dropped</th><th>last error</th></tr>",
    );
    for row in rows {
        let error = match &row.last_error {
            Some(e) => format!("<span class=\"bad\">{}</span>", escape(e)),
            None => "none".to_string(),
        };
        let _ = write!(
            html,
            "<tr><td class=\"any\">{}</td><td class=\"any\">{}</td><td class=\"any\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"any\">{error}</td></tr>",
            escape(&row.name),
            escape(&row.tenant),
            escape(&row.host),
            row.queued,
            row.sent,
            row.failed,
            row.dropped,
        );
    }
    html.push_str("</table>");
}
