//! Token counts with a real BPE (o200k_base, built into the binary, no download).
//!
//! Characters are exact but say little about cost; tokens are what providers bill and what fills
//! the window. The encoder takes a moment to build, so it is built once, on first use.

/// Number of o200k_base tokens in `text`.
pub fn count(text: &str) -> usize {
    tiktoken_rs::o200k_base_singleton()
        .encode_with_special_tokens(text)
        .len()
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_real_tokens() {
        assert_eq!(super::count(""), 0);
        assert_eq!(super::count("hello world"), 2);
        assert!(super::count("{\"type\":\"object\",\"properties\":{}}") > 5);
    }
}
