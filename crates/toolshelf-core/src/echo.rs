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

#[cfg(test)]
mod tests {
    use super::*;

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
