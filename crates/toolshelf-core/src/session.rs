//! Per-session state: what one client has seen and loaded.
//!
//! The tool list is frozen when the session first asks for it, so the prompt prefix stays
//! byte-identical for the whole session even while servers come and go; what changed is told to
//! the model once, as a short notice on the next tool result. Names, not catalog indices, are
//! kept, because the catalog is rebuilt whenever a server's tools change.

use std::collections::BTreeSet;

/// One client session's state.
#[derive(Debug, Clone, Default)]
pub struct SessionState {
    /// Whether the tool list has been frozen (the caller keeps the list itself).
    frozen: bool,
    /// Canonical names of deferred tools whose schema this session has seen.
    activated: BTreeSet<String>,
    /// Visible tool names the model was last told about.
    known: BTreeSet<String>,
}

impl SessionState {
    /// Marks the tool list frozen and remembers which tools were visible then.
    pub fn freeze(&mut self, visible: BTreeSet<String>) {
        self.frozen = true;
        self.known = visible;
    }

    /// Whether the tool list has been frozen.
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// Marks tools as loaded (their schema was shown to the model).
    pub fn activate<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        self.activated.extend(names.into_iter().map(str::to_owned));
    }

    /// Whether the model has seen `name`'s schema in this session.
    pub fn is_activated(&self, name: &str) -> bool {
        self.activated.contains(name)
    }

    /// The notice for tools that appeared or went away since the model was last told, if any;
    /// remembers `visible` as told. Empty before the list is frozen.
    pub fn change_notice(&mut self, visible: &BTreeSet<String>) -> Option<String> {
        if !self.frozen || &self.known == visible {
            return None;
        }
        let known = std::mem::replace(&mut self.known, visible.clone());
        let appeared: Vec<&str> = visible.difference(&known).map(String::as_str).collect();
        let gone: Vec<&str> = known.difference(visible).map(String::as_str).collect();
        let mut parts = Vec::new();
        if !appeared.is_empty() {
            parts.push(format!("new: {}", list(&appeared)));
        }
        if !gone.is_empty() {
            parts.push(format!("gone: {}", list(&gone)));
        }
        Some(format!(
            "[toolshelf: the available tools changed; {}. Use tool_search to load new ones.]",
            parts.join("; ")
        ))
    }
}

/// Up to 20 names, then a count: the notice must stay short.
fn list(names: &[&str]) -> String {
    const SHOWN: usize = 20;
    let mut s = names
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        s.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn notice_names_changes_once() {
        let mut s = SessionState::default();
        assert_eq!(s.change_notice(&set(&["a"])), None, "not frozen yet");
        s.freeze(set(&["a", "b"]));
        assert_eq!(s.change_notice(&set(&["a", "b"])), None);
        let n = s.change_notice(&set(&["a", "c", "d"])).expect("changed");
        assert_eq!(
            n,
            "[toolshelf: the available tools changed; new: c, d; gone: b. Use tool_search to load new ones.]"
        );
        assert_eq!(s.change_notice(&set(&["a", "c", "d"])), None, "told once");
    }

    #[test]
    fn long_lists_are_cut() {
        let names: Vec<String> = (0..25).map(|i| format!("t{i:02}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        assert!(list(&refs).ends_with("t19 and 5 more"));
    }

    #[test]
    fn activation_is_by_name() {
        let mut s = SessionState::default();
        s.activate(["mcp__a__x"]);
        assert!(s.is_activated("mcp__a__x") && !s.is_activated("mcp__a__y"));
    }
}
