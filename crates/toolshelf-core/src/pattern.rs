//! Name patterns for rules and modes.
//!
//! A pattern matches anywhere in a canonical name unless anchored with `^` (start) and/or `$`
//! (end); `*` matches any run of characters and `?` exactly one. Matching is case-sensitive,
//! like the names themselves. The grammar is small enough that a hand-written matcher is clearer
//! than translating to a glob or regex crate and back (both would need the anchors rewritten).

use std::fmt;

/// Why `source` reads as a regular expression rather than a pattern, when it holds syntax only a
/// regular expression has (a group, an alternation, a class, an escape): no tool name holds those
/// characters, so as a pattern it would match nothing. For a `prefix(a|b)` group, the patterns to
/// write instead.
pub fn regex_syntax(source: &str) -> Option<String> {
    let c = source.chars().find(|c| "()|[]\\".contains(*c))?;
    let alternatives = source.split_once('(').and_then(|(head, rest)| {
        let (inner, tail) = rest.split_once(')')?;
        let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        (inner.contains('|') && inner.chars().all(|c| word(c) || c == '|')).then(|| {
            inner
                .split('|')
                .map(|a| format!("{:?}", format!("{head}{a}{tail}")))
                .collect::<Vec<_>>()
                .join(", ")
        })
    });
    Some(format!(
        "{source:?} has {c:?}, which no tool name holds: patterns are globs, not regular \
expressions (* any run of characters, ? one character, ^ the start, $ the end){}",
        alternatives
            .map(|a| format!("; write one per alternative ({a})"))
            .unwrap_or_default()
    ))
}

/// A compiled name pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    source: String,
    glob: Vec<char>,
    /// `glob` as bytes when it is ASCII: canonical names always are, so matching them needs no
    /// allocation.
    ascii: Option<Vec<u8>>,
}

impl Pattern {
    /// [`Pattern::new`] for a pattern of tool names, which refuses one written as a regular
    /// expression (see [`regex_syntax`]): it could match no tool, so whatever it governs would
    /// silently govern nothing.
    pub fn of_tools(source: &str) -> Result<Self, String> {
        match regex_syntax(source) {
            Some(why) => Err(why),
            None => Self::new(source),
        }
    }

    /// Compiles `source`. Fails on an empty pattern, which would match every tool by accident.
    pub fn new(source: &str) -> Result<Self, String> {
        let trimmed = source.trim();
        if trimmed.is_empty() || trimmed == "^" || trimmed == "$" || trimmed == "^$" {
            return Err(format!("empty pattern {source:?}"));
        }
        let (start, rest) = match trimmed.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, trimmed),
        };
        let (end, body) = match rest.strip_suffix('$') {
            Some(body) => (true, body),
            None => (false, rest),
        };
        let mut glob = Vec::with_capacity(body.len() + 2);
        if !start {
            glob.push('*');
        }
        glob.extend(body.chars());
        if !end {
            glob.push('*');
        }
        let ascii = glob
            .iter()
            .all(char::is_ascii)
            .then(|| glob.iter().map(|&c| c as u8).collect());
        Ok(Self {
            source: trimmed.to_owned(),
            glob,
            ascii,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the pattern matches `name`.
    pub fn matches(&self, name: &str) -> bool {
        match &self.ascii {
            Some(glob) if name.is_ascii() => wildcard(glob, name.as_bytes(), b'*', b'?'),
            _ => wildcard(&self.glob, &name.chars().collect::<Vec<_>>(), '*', '?'),
        }
    }

    /// Whether the pattern matches some name that starts with `prefix` and goes on (by at least
    /// one character): `^mcp__db__query$` and `query` do for `mcp__db__`, `^mcp__web__` does not.
    /// Any character may follow, so this says yes for a pattern no real name could meet.
    pub fn matches_some_name_after(&self, prefix: &str) -> bool {
        // A glob position left with anything to match matches some non-empty rest.
        self.positions_after(prefix)
            .iter()
            .enumerate()
            .any(|(g, &live)| live && g < self.glob.len())
    }

    /// Whether the pattern matches every name that starts with `prefix` and goes on (by at least
    /// one character), whatever follows: `^mcp__db__`, `db` and `^mcp__*__` do for `mcp__db__`;
    /// `_tool$` and `^mcp__db__q` do not. The test is a safe one: it says yes only when one way
    /// through the pattern takes every rest (nothing but `*` and at most one `?` left after the
    /// prefix, with a `*` among them).
    pub fn matches_every_name_after(&self, prefix: &str) -> bool {
        self.positions_after(prefix)
            .iter()
            .enumerate()
            .any(|(g, &live)| {
                let rest = &self.glob[g.min(self.glob.len())..];
                live && rest.iter().all(|&c| c == '*' || c == '?')
                    && rest.contains(&'*')
                    && rest.iter().filter(|&&c| c == '?').count() <= 1
            })
    }

    /// The glob positions (0 to its length) that matching `prefix` can end at.
    fn positions_after(&self, prefix: &str) -> Vec<bool> {
        let glob = &self.glob;
        // A `*` may match nothing: a position before one reaches the position after it too.
        let close = |live: &mut Vec<bool>| {
            for g in 0..glob.len() {
                if live[g] && glob[g] == '*' {
                    live[g + 1] = true;
                }
            }
        };
        let mut live = vec![false; glob.len() + 1];
        live[0] = true;
        close(&mut live);
        for c in prefix.chars() {
            let mut next = vec![false; glob.len() + 1];
            for g in 0..glob.len() {
                if !live[g] {
                    continue;
                }
                match glob[g] {
                    '*' => next[g] = true,
                    '?' => next[g + 1] = true,
                    literal if literal == c => next[g + 1] = true,
                    _ => {}
                }
            }
            close(&mut next);
            live = next;
        }
        live
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Whether the whole of `text` matches `glob` (`*` any run, `?` one character, no anchors).
pub fn glob_matches(glob: &str, text: &str) -> bool {
    let g: Vec<char> = glob.chars().collect();
    let t: Vec<char> = text.chars().collect();
    wildcard(&g, &t, '*', '?')
}

/// The local path `raw` names: a `file:` URL (the scheme in any case; `file:///p`, `file:/p`,
/// or `file://localhost/p` with the host in any case) read as its percent-decoded path, anything
/// else as written. `None` when it cannot be read safely as one path: a file URL naming another
/// host or holding a query, a fragment or an escape that is malformed or decodes to no UTF-8 or
/// to a NUL, and any text holding a NUL (where a server's system calls would cut it short).
pub fn local_path(raw: &str) -> Option<std::borrow::Cow<'_, str>> {
    use std::borrow::Cow;
    if raw.contains('\0') {
        return None;
    }
    let Some(rest) = raw
        .get(..5)
        .filter(|scheme| scheme.eq_ignore_ascii_case("file:"))
        .map(|_| &raw[5..])
    else {
        return Some(Cow::Borrowed(raw));
    };
    let path = match rest.strip_prefix("//") {
        Some(authority_and_path) => {
            let slash = authority_and_path
                .find('/')
                .unwrap_or(authority_and_path.len());
            let host = &authority_and_path[..slash];
            if !(host.is_empty() || host.eq_ignore_ascii_case("localhost")) {
                return None;
            }
            &authority_and_path[slash..]
        }
        None => rest,
    };
    if !path.starts_with('/') || path.contains(['?', '#']) {
        return None;
    }
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    let decoded = String::from_utf8(decoded).ok()?;
    (!decoded.contains('\0')).then_some(Cow::Owned(decoded))
}

/// Lexical path normalisation of [`local_path`] (of `raw` as written when that is `None`): folds
/// repeated `/` and `.` segments, applies `..` (never above the root of an absolute path; kept at
/// the head of a relative one).
pub fn normalize_path(raw: &str) -> String {
    normalize_lexically(&local_path(raw).unwrap_or(std::borrow::Cow::Borrowed(raw)))
}

/// Lexical normalisation of a path as written (see [`normalize_path`]).
pub fn normalize_lexically(raw: &str) -> String {
    let absolute = raw.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in raw.split('/') {
        match seg {
            "" | "." => {}
            ".." => match parts.last() {
                Some(&last) if last != ".." => {
                    parts.pop();
                }
                _ if absolute => {}
                _ => parts.push(".."),
            },
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// Whether a normalised path matches a normalised path glob, segment by segment: `*` and `?`
/// stay within one segment, `**` spans any number of them.
pub fn path_matches(glob: &str, path: &str) -> bool {
    let g: Vec<&str> = glob.split('/').collect();
    let p: Vec<&str> = path.split('/').collect();
    segments_match(&g, &p)
}

fn segments_match(glob: &[&str], path: &[&str]) -> bool {
    match glob.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => (0..=path.len()).any(|skip| segments_match(rest, &path[skip..])),
        Some((g, rest)) => match path.split_first() {
            Some((p, tail)) => glob_matches(g, p) && segments_match(rest, tail),
            None => false,
        },
    }
}

/// Classic linear-time wildcard matching with a single backtrack point.
fn wildcard<T: Copy + PartialEq>(glob: &[T], text: &[T], any: T, one: T) -> bool {
    let (mut g, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if g < glob.len() && (glob[g] == one || (glob[g] != any && glob[g] == text[t])) {
            g += 1;
            t += 1;
        } else if g < glob.len() && glob[g] == any {
            star = Some((g, t));
            g += 1;
        } else if let Some((sg, st)) = star {
            g = sg + 1;
            t = st + 1;
            star = Some((sg, st + 1));
        } else {
            return false;
        }
    }
    glob[g..].iter().all(|&c| c == any)
}

#[cfg(test)]
mod tests {
    use super::Pattern;

    fn m(p: &str, name: &str) -> bool {
        Pattern::new(p).expect("valid pattern").matches(name)
    }

    #[test]
    fn unanchored_matches_anywhere() {
        assert!(m("git", "mcp__git__git_log"));
        assert!(m("log", "mcp__git__git_log"));
        assert!(!m("Log", "mcp__git__git_log"));
    }

    #[test]
    fn anchors_pin_the_ends() {
        assert!(m("^mcp__git__", "mcp__git__git_log"));
        assert!(!m("^git", "mcp__git__git_log"));
        assert!(m("_log$", "mcp__git__git_log"));
        assert!(!m("git$", "mcp__git__git_log"));
        assert!(m("^Bash$", "Bash"));
        assert!(!m("^Bash$", "BashOutput"));
    }

    #[test]
    fn wildcards() {
        assert!(m("^mcp__*__read*", "mcp__fs__read_file"));
        assert!(!m("^mcp__*__read*$", "mcp__fs__write_file"));
        assert!(m("^Gre?$", "Grep"));
        assert!(!m("^Gre?$", "Gre"));
        assert!(m("a*b*c", "xxaYYbZZcxx"));
        assert!(!m("^a*b*c$", "aYYbZZcx"));
    }

    #[test]
    fn some_and_every_name_after_a_prefix() {
        let p = |s: &str| Pattern::new(s).expect("valid pattern");
        let db = "mcp__db__";
        for (pattern, some, every) in [
            ("^mcp__db__", true, true),
            ("db", true, true),
            ("^mcp__*__", true, true),
            ("^mcp__db__?*", true, true),
            ("^mcp__db__*?", true, true),
            ("*", true, true),
            ("^mcp__db__??*", true, false),
            ("^mcp__db__?", true, true),
            ("^mcp__db__?$", true, false),
            ("^mcp__db__query$", true, false),
            ("query", true, false),
            ("_tool$", true, false),
            ("^mcp__db__*_admin", true, false),
            ("^mcp__db__$", false, false),
            ("^mcp__web__", false, false),
            ("^Read$", false, false),
            ("^mcp__d$", false, false),
        ] {
            assert_eq!(
                p(pattern).matches_some_name_after(db),
                some,
                "{pattern} some"
            );
            assert_eq!(
                p(pattern).matches_every_name_after(db),
                every,
                "{pattern} every"
            );
        }
    }

    #[test]
    fn empty_patterns_are_rejected() {
        for p in ["", " ", "^", "$", "^$"] {
            assert!(Pattern::new(p).is_err(), "{p:?}");
        }
    }
}
