//! Bounded echoes of untrusted input.
//!
//! Messages to the model and log lines often repeat what the caller sent (a tool name, a query,
//! an error that quotes a value). Repeating it whole lets one request of a megabyte become a
//! megabyte of response and of audit log per call, so every echo goes through here and is cut,
//! saying how long the original was.

/// Longest echo of caller input in a message or log line, in characters.
pub const ECHO_CHARS: usize = 120;

/// `text` cut to [`ECHO_CHARS`], saying how long it was when cut.
pub fn echo(text: &str) -> String {
    echo_within(text, ECHO_CHARS)
}

/// `text` cut to `max` characters, saying how long it was when cut.
pub fn echo_within(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_owned();
    }
    let head: String = text.chars().take(max).collect();
    format!("{head}… ({n} characters)")
}

/// `text` for a log line or a terminal: control characters (but tab) and invisible format
/// characters written as `\u{..}` escapes, so that a newline cannot forge a line, an escape
/// sequence cannot reach the terminal and a bidirectional mark cannot reorder what is shown; then
/// cut to `max` characters, saying how long it was.
pub fn for_log(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max * 4));
    for c in text.chars() {
        if (c.is_control() && c != '\t') || crate::index::is_ignorable(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    echo_within(&out, max)
}

/// The message a caught panic carried (`panic!("...")` gives a `&str` or a `String`), or
/// `otherwise`.
pub fn panic_text(payload: &(dyn std::any::Any + Send), otherwise: &str) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| otherwise.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_for_a_log_cannot_forge_lines_or_reach_the_terminal() {
        assert_eq!(for_log("plain\ttext", 100), "plain\ttext");
        assert_eq!(
            for_log("a\n2026 WARN forged\r\u{1b}[31mred\u{202e}x", 100),
            "a\\u{a}2026 WARN forged\\u{d}\\u{1b}[31mred\\u{202e}x"
        );
        // Every invisible character the index drops is shown by its code in a log line too.
        assert_eq!(
            for_log("a\u{180b}b\u{1d173}c\u{0600}d", 100),
            "a\\u{180b}b\\u{1d173}c\\u{600}d"
        );
        let long = for_log(&"x".repeat(100_000), 50);
        assert!(long.starts_with(&"x".repeat(50)) && long.ends_with("(100000 characters)"));
    }

    #[test]
    fn short_text_is_kept_and_long_text_says_its_length() {
        assert_eq!(echo("git_log"), "git_log");
        let e = echo(&"名".repeat(500));
        assert_eq!(
            e.chars().count(),
            ECHO_CHARS + " (500 characters)".chars().count() + 1
        );
        assert!(e.ends_with("… (500 characters)"));
    }
}
