//! An error's cause in a few words, for `/readyz`, the status page and warnings: the texts of
//! the error and its sources, joined. Never its `Debug` form: the AWS SDK's errors print
//! kilobytes of it (`DisplayErrorContext` appends it), which tell an operator nothing more.

use std::error::Error;

/// The longest cause kept, in bytes: a line on the status page.
pub const MAX_CAUSE: usize = 300;

/// `error`'s text and its sources' (`a: b: c`), a text already said by the one before left
/// out, cut at [`MAX_CAUSE`] bytes.
pub fn short(error: &(dyn Error + 'static)) -> String {
    let mut texts: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let text = e.to_string();
        let text = text.trim();
        if !text.is_empty() && !texts.iter().any(|t| t.contains(text)) {
            texts.push(text.to_string());
        }
        next = e.source();
    }
    cut(texts.join(": "))
}

/// `text` cut at [`MAX_CAUSE`] bytes (on a character boundary), with `...` when cut.
pub fn cut(mut text: String) -> String {
    if text.len() <= MAX_CAUSE {
        return text;
    }
    let mut end = MAX_CAUSE;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str("...");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Chain {
        text: String,
        #[source]
        source: Option<Box<Chain>>,
        /// What `Debug` would print besides: never in the cause.
        #[allow(dead_code)]
        dump: String,
    }

    fn chain(texts: &[&str]) -> Chain {
        let mut error = None;
        for text in texts.iter().rev() {
            error = Some(Chain {
                text: text.to_string(),
                source: error.map(Box::new),
                dump: "x".repeat(2000),
            });
        }
        error.unwrap()
    }

    #[test]
    fn the_cause_is_the_texts_of_the_chain_without_debug_or_repeats() {
        let e = chain(&[
            "dispatch failure",
            "io error",
            "connection refused (os error 111)",
        ]);
        assert_eq!(
            short(&e),
            "dispatch failure: io error: connection refused (os error 111)"
        );
        let e = chain(&["SES GetAccount: bad token", "bad token"]);
        assert_eq!(short(&e), "SES GetAccount: bad token");
    }

    #[test]
    fn a_long_cause_is_cut() {
        let e = chain(&[&"é".repeat(400)]);
        let cause = short(&e);
        assert!(
            cause.len() <= MAX_CAUSE + 3 && cause.ends_with("..."),
            "{cause}"
        );
    }
}
