//! Words of tool names written as one run of lower-case letters.
//!
//! Many servers name their tools `getrandomimage`, `searchicons` or `getphonesbybrandid`: no
//! separator and no capital says where a word ends, so the name is one term that no request
//! contains, and the strongest field of the tool says nothing. A request that asks for "a random
//! image" should find `getrandomimage` by its name as it finds `get_random_image`.
//!
//! The catalog itself says which words exist: its descriptions, parameters and the names that are
//! split already use `get`, `random` and `image`. A [`Lexicon`] counts those words, and
//! [`Lexicon::split`] cuts a glued name into the most probable sequence of them (a unigram model:
//! each word costs the negative log of its share of the counts; the cheapest cover wins). The
//! name keeps its own term too, and a word the catalog uses (`paragraph`, `weather`) is cheaper
//! whole than in pieces, so it stays whole. A word counts when used twice: once may be a stray
//! word, or a description mentioning its own tool's glued name; and a piece of two letters only
//! when a name gives it as a word (`id`, `by`). Only names written without capitals are
//! cut: in `ContentAuthenticator` the capitals already say where the words are, and
//! `authenticator` is a word even if no description uses it (cut, it would be `authentic at or`).
//! The lexicon is the catalog's own, so nothing is downloaded and no list of English is built
//! in; a catalog whose text never uses the pieces leaves its glued names as they are.

use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::{Map, Value};

use crate::catalog::{Catalog, Tool};
use crate::name::split_words;

/// Shortest glued word that is considered for splitting (shorter ones are words or acronyms).
const MIN_GLUED: usize = 6;
/// Shortest piece a glued word is cut into (`id`, `by`, `to` are words of names).
const MIN_PIECE: usize = 2;
/// Longest piece considered.
const MAX_PIECE: usize = 24;
/// Times a word must occur in the catalog's text to be a piece, or for a glued word to stay
/// whole: once may be a stray word, or a description mentioning its own tool's glued name.
const MIN_COUNT: u32 = 2;

/// Words the catalog's text uses, with how often, for cutting glued names.
#[derive(Debug, Default)]
pub struct Lexicon {
    counts: FxHashMap<String, u32>,
    /// Words that names written with capitals give as words: never cut.
    named: FxHashSet<String>,
    /// Words shorter than [`MIN_GLUED`] that names give as words (`id`, `by`): the only
    /// two-letter pieces, since in prose two letters are as often a fragment (`ca`, `ut`) as a
    /// word, and they would cut any word the catalog happens not to use (`mo di fy`).
    name_words: FxHashSet<String>,
    /// Natural log of the sum of the counts.
    log_total: f64,
}

impl Lexicon {
    /// The words of the text of `catalog`'s tools at `docs`: titles, descriptions, parameter
    /// names and descriptions, the descriptions of their servers, and the words of names. Only
    /// runs of ASCII letters count. A name written with capitals says where each of its words
    /// ends, so they are words; in a name without capitals only the short words count
    /// (`getrandomimage_for_mikuapi` has separators, yet its first word is glued).
    pub fn from_catalog(catalog: &Catalog, docs: &[usize]) -> Self {
        let mut lexicon = Self::default();
        let tools = catalog.tools();
        let mut servers: Vec<&str> = Vec::new();
        for &i in docs {
            let tool = &tools[i];
            lexicon.add_name(&tool.bare);
            if tool.original_name != tool.bare {
                lexicon.add_name(&tool.original_name);
            }
            if let Some(t) = &tool.title {
                lexicon.add_text(t);
            }
            lexicon.add_text(&tool.description);
            lexicon.add_properties(&tool.input_schema, 0);
            if let Some(s) = &tool.server {
                servers.push(s);
            }
        }
        servers.sort_unstable();
        servers.dedup();
        for s in servers {
            if let Some(server) = catalog.server(s) {
                lexicon.add_text(&server.description);
            }
        }
        lexicon.total_counted();
        lexicon
    }

    /// Sets [`Self::log_total`] from the counts, once they are all in.
    fn total_counted(&mut self) {
        let total: u64 = self.counts.values().map(|&c| u64::from(c)).sum();
        self.log_total = (total.max(1) as f64).ln();
    }

    /// Counts one word as [`split_words`] gives it (lower-cased already).
    fn add_word(&mut self, word: &str) {
        if word.len() >= MIN_PIECE && word.bytes().all(|b| b.is_ascii_alphabetic()) {
            match self.counts.get_mut(word) {
                Some(c) => *c += 1,
                None => {
                    self.counts.insert(word.to_owned(), 1);
                }
            }
        }
    }

    fn add_text(&mut self, text: &str) {
        for w in split_words(text) {
            self.add_word(&w);
        }
    }

    fn add_name(&mut self, name: &str) {
        let words = split_words(name);
        let (several, capitals) = (words.len() > 1, has_capitals(name));
        for w in words {
            let short = several && w.len() < MIN_GLUED;
            if capitals || short {
                self.add_word(&w);
            }
            if short {
                self.name_words.insert(w.clone());
            }
            if capitals {
                self.named.insert(w);
            }
        }
    }

    fn add_schema(&mut self, schema: &Value, depth: usize) {
        if let Some(obj) = schema.as_object() {
            self.add_properties(obj, depth);
        }
    }

    /// The property names and descriptions of one schema object, and of those nested in it.
    fn add_properties(&mut self, obj: &Map<String, Value>, depth: usize) {
        if depth > 6 {
            return;
        }
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (name, prop) in props {
                self.add_name(name);
                if let Some(d) = prop.get("description").and_then(Value::as_str) {
                    self.add_text(d);
                }
                self.add_schema(prop, depth + 1);
            }
        }
        if let Some(items) = obj.get("items") {
            self.add_schema(items, depth + 1);
        }
    }

    /// The cost of `word` as one piece, if the catalog uses it (at least `min` times).
    fn cost(&self, word: &str, min: u32) -> Option<f64> {
        self.counts
            .get(word)
            .filter(|&&c| c >= min)
            .map(|&c| self.log_total - f64::from(c).ln())
    }

    /// The words `word` (lower-case ASCII letters only) is glued from, when its cheapest cover by
    /// the lexicon's words has more than one piece; `None` when it is short, not glued letters,
    /// a word of a name written with capitals, cheaper whole, or not covered. Ties go to the
    /// cover found first (longer first pieces).
    pub fn split<'w>(&self, word: &'w str) -> Option<Vec<&'w str>> {
        let n = word.len();
        if n < MIN_GLUED
            || !word.bytes().all(|b| b.is_ascii_lowercase())
            || self.named.contains(word)
        {
            return None;
        }
        // best[i]: the cheapest cover of word[..i] and where its last piece starts.
        let mut best: Vec<Option<(f64, usize)>> = vec![None; n + 1];
        best[0] = Some((0.0, 0));
        for end in 1..=n {
            for start in end.saturating_sub(MAX_PIECE)..end {
                if end - start < MIN_PIECE {
                    continue;
                }
                let piece = &word[start..end];
                if piece.len() == MIN_PIECE && !self.name_words.contains(piece) {
                    continue;
                }
                let (Some((before, _)), Some(c)) = (best[start], self.cost(piece, MIN_COUNT))
                else {
                    continue;
                };
                let total = before + c;
                if best[end].is_none_or(|(b, _)| total < b) {
                    best[end] = Some((total, start));
                }
            }
        }
        best[n]?;
        let mut pieces = Vec::new();
        let mut end = n;
        while end > 0 {
            let (_, start) = best[end]?;
            pieces.push(&word[start..end]);
            end = start;
        }
        pieces.reverse();
        (pieces.len() > 1).then_some(pieces)
    }

    /// Appends to `out`, space-separated, the pieces of each glued word of `name` that `take`
    /// accepts; a name written with capitals has none.
    fn push_pieces(&self, name: &str, out: &mut String, mut take: impl FnMut(&str) -> bool) {
        if has_capitals(name) {
            return;
        }
        for w in split_words(name) {
            if !take(&w) {
                continue;
            }
            for p in self.split(&w).into_iter().flatten() {
                if !out.is_empty() {
                    out.push(' ');
                }
                out.push_str(p);
            }
        }
    }

    /// The pieces of the glued words of one name written without capitals (a server's), joined
    /// by spaces; empty when none splits.
    pub fn pieces_of(&self, name: &str) -> String {
        let mut out = String::new();
        self.push_pieces(name, &mut out, |_| true);
        out
    }

    /// The pieces of every glued word of `tool`'s names (bare and original) that are written
    /// without capitals, each word once, joined by spaces for analysis; empty when none splits.
    pub fn name_pieces(&self, tool: &Tool) -> String {
        let mut out = String::new();
        let mut seen: Vec<String> = Vec::new();
        let mut once = |w: &str| {
            let new = !seen.iter().any(|s| s == w);
            if new {
                seen.push(w.to_owned());
            }
            new
        };
        self.push_pieces(&tool.bare, &mut out, &mut once);
        if tool.original_name != tool.bare {
            self.push_pieces(&tool.original_name, &mut out, &mut once);
        }
        out
    }
}

/// Whether `name` has a capital letter, which marks where its words start.
fn has_capitals(name: &str) -> bool {
    name.chars().any(char::is_uppercase)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lexicon(text: &str) -> Lexicon {
        let mut l = Lexicon::default();
        l.add_text(text);
        l.total_counted();
        l
    }

    #[test]
    fn a_glued_name_is_cut_into_the_catalog_s_words() {
        let mut l = lexicon(
            "get get get random random image image an image of a phone phones phones by by \
             brand brand id id get the icons icons search search",
        );
        assert_eq!(
            l.split("getrandomimage"),
            Some(vec!["get", "random", "image"])
        );
        assert_eq!(l.split("getphonesbybrandid"), None);
        l.add_name("phone_by_id");
        assert_eq!(
            l.split("getphonesbybrandid"),
            Some(vec!["get", "phones", "by", "brand", "id"])
        );
        assert_eq!(l.split("searchicons"), Some(vec!["search", "icons"]));
    }

    #[test]
    fn words_the_catalog_uses_stay_whole_and_unknown_ones_are_not_cut() {
        let l = lexicon(
            "paragraph paragraph paragraph para para graph graph weather weather we we ather ather",
        );
        // Cheaper whole than as pieces.
        assert_eq!(l.split("paragraph"), None);
        assert_eq!(l.split("weather"), None);
        // Not covered: `zzz` is no word of the catalog.
        assert_eq!(l.split("parazzzgraph"), None);
        // Not glued lower-case letters, or too short.
        assert_eq!(l.split("para_graph"), None);
        assert_eq!(l.split("ParaGraph"), None);
        assert_eq!(l.split("graph"), None);
    }

    #[test]
    fn a_word_used_once_is_no_piece_and_a_glued_one_used_twice_stays_whole() {
        assert_eq!(lexicon("get image").split("getimage"), None);
        assert_eq!(lexicon("get get image").split("getimage"), None);
        // Once may be its own description naming it.
        let l = lexicon("get get image image getimage");
        assert_eq!(l.split("getimage"), Some(vec!["get", "image"]));
        let l = lexicon("get get image image getimage getimage");
        assert_eq!(l.split("getimage"), None);
    }

    #[test]
    fn two_letter_pieces_are_words_of_names() {
        let mut l = lexicon("mo mo di di fy fy user user by by id id");
        assert_eq!(l.split("modify"), None);
        assert_eq!(l.split("userbyid"), None);
        l.add_name("get_user_by_id");
        assert_eq!(l.split("userbyid"), Some(vec!["user", "by", "id"]));
        assert_eq!(l.split("modify"), None);
    }

    #[test]
    fn names_with_capitals_vouch_for_their_words_and_others_for_short_ones() {
        let mut l = Lexicon::default();
        for _ in 0..2 {
            l.add_name("randomImage");
            l.add_name("get_icons_by");
            l.add_name("getrandomimage_for_mikuapi");
        }
        l.log_total = 10.0;
        // Short words of a name without capitals count; its long, maybe glued, word does not.
        assert_eq!(l.cost("getrandomimage", 1), None);
        assert!(l.cost("get", 1).is_some() && l.cost("for", 1).is_some());
        assert_eq!(l.cost("mikuapi", 1), None);
        assert_eq!(
            l.split("getrandomimage"),
            Some(vec!["get", "random", "image"])
        );
    }

    #[test]
    fn only_names_without_capitals_are_cut() {
        let catalog = crate::catalog::Catalog::from_json_str(
            r#"[
              {"name": "getrandomimage", "description": "Get a random image, get it at random."},
              {"name": "ContentAuthenticator", "description": "Authentic content? The ator and authentic ator."},
              {"name": "imageinfo", "description": "Info about an image: its info."}
            ]"#,
            "test",
        )
        .expect("the test catalog parses");
        let docs: Vec<usize> = (0..catalog.tools().len()).collect();
        let l = Lexicon::from_catalog(&catalog, &docs);
        let pieces: Vec<String> = catalog.tools().iter().map(|t| l.name_pieces(t)).collect();
        let by_name = |n: &str| {
            let i = catalog
                .tools()
                .iter()
                .position(|t| t.bare == n)
                .expect("a tool of the test catalog");
            pieces[i].clone()
        };
        assert_eq!(by_name("getrandomimage"), "get random image");
        assert_eq!(by_name("imageinfo"), "image info");
        // `authentic ator` would cover it, but the capitals say it is one word.
        assert_eq!(by_name("ContentAuthenticator"), "");
        assert_eq!(l.split("authenticator"), None);
    }

    #[test]
    fn a_server_name_is_cut_like_a_tool_name() {
        let mut l = lexicon("cricket cricket scores api api");
        l.add_name("match_api");
        assert_eq!(l.pieces_of("cricketapi2"), "cricket api");
        assert_eq!(l.pieces_of("cricket_api"), "");
        assert_eq!(l.pieces_of("CricketApi"), "");
    }
}
