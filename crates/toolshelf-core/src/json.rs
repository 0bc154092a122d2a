//! Strict JSON reading: a duplicate object key is an error, not "the last one wins".
//!
//! `serde_json::Value` keeps the last of two equal keys silently, so a catalog item with two
//! `"description"` or two `"inputSchema"` keys would load with whichever came second, and nobody
//! would learn that the file says two things. Catalog and client-configuration files go through
//! [`parse`] instead, which refuses such a file naming the key and where it is
//! (`servers[1].tools[3]`). The path is kept as a chain of borrowed segments and only formatted
//! when there is an error, so strictness costs no allocation per value.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// `text` without a leading UTF-8 byte-order mark, which any input file may start with.
pub fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// Parses `text` as JSON, refusing duplicate keys in any object. The error message names the
/// duplicate key, the object's path and the line and column.
pub fn parse(text: &str) -> Result<Value, serde_json::Error> {
    parse_noting(text, None)
}

/// [`parse`], noting in `failed` (when given) where in the document an error was met: `in
/// PATH` for a value that could not be read, `after PATH` for a missing separator after one.
fn parse_noting(
    text: &str,
    failed: Option<&RefCell<Option<String>>>,
) -> Result<Value, serde_json::Error> {
    let mut d = serde_json::Deserializer::from_str(text);
    let value = Strict {
        at: &Path::Root,
        failed,
    }
    .deserialize(&mut d)?;
    d.end()?;
    Ok(value)
}

/// A [`parse`] error of `text` in plain words, with where it is: ` at line L column C`, or for a
/// text of one line (a line of a JSON-lines file, whose "line 1" is not the file's) ` (column
/// C)`. The parser's terms (`EOF`, `ident`, `trailing characters`) become what is wrong with the
/// text; a duplicate key keeps its own message.
///
/// For a whole file (not `one_line`), where a line and column alone are hard to find (a catalog
/// minified to one line of megabytes), a syntax error also says which value it was met in or
/// after (`in servers[0].tools[3].description`, `after servers[0].tools[2]`; a duplicate key's
/// message names its object already), and every error ends with a few dozen characters of its
/// line, control characters escaped and `<HERE>` before the character the parser stopped at (at
/// the end for a text cut short): `expected `,` or `]` at line 1 column 426, after
/// servers[0].tools[2]: …"required":["q"]}<HERE>{"name":"t3","description":"Does…`.
pub fn in_words(e: &serde_json::Error, text: &str, one_line: bool) -> String {
    let full = e.to_string();
    let place = format!(" at line {} column {}", e.line(), e.column());
    let message = full.strip_suffix(&place).unwrap_or(&full);
    let message = if e.is_data() {
        message.to_owned()
    } else if text.trim().is_empty() {
        return "it is empty (no JSON value)".to_owned();
    } else {
        syntax_in_words(message)
    };
    if one_line {
        return format!("{message} (column {})", e.column());
    }
    let mut out = message + &place;
    if !e.is_data()
        && let Some(found) = located(text)
    {
        out.push_str(", ");
        out.push_str(&found);
    }
    // A syntax error's column is the character the parser stopped at; a data error's (a duplicate
    // key) the last one of what it refuses, the key's closing quote.
    let mark = match e.classify() {
        serde_json::error::Category::Eof => Mark::AtEnd,
        serde_json::error::Category::Data => Mark::After,
        _ => Mark::Before,
    };
    if let Some(excerpt) = excerpt(text, e.line(), e.column(), mark) {
        out.push_str(": ");
        out.push_str(&excerpt);
    }
    out
}

/// Characters of an excerpt's line shown on each side of the place of an error.
const EXCERPT_SIDE: usize = 32;

/// The marker an excerpt puts where an error is.
pub const EXCERPT_MARK: &str = "<HERE>";

/// Where an excerpt's [`EXCERPT_MARK`] goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// Before the character at the column.
    Before,
    /// After it.
    After,
    /// At the end of the line: the text ended there.
    AtEnd,
}

/// Up to [`EXCERPT_SIDE`] characters on each side of line `line`, column `column` of `text` (both
/// 1-based, the column counting bytes as serde_json's does) on that line, [`EXCERPT_MARK`] where
/// `mark` puts it, `…` where the line goes on, and control and invisible format characters
/// escaped (`\t`, `\u{1}`, `\u{202e}`). Column 0 is the line break that ends the line before
/// (where serde_json places an error found on reading it): that line is shown, marked at its
/// end, then `\n`. `None` when `text` has no such line.
fn excerpt(text: &str, line: usize, column: usize, mark: Mark) -> Option<String> {
    let (line, at_break) = match (line, column) {
        (2.., 0) => (line - 1, true),
        _ => (line, false),
    };
    let l = text.split('\n').nth(line.checked_sub(1)?)?;
    let l = l.strip_suffix('\r').unwrap_or(l);
    let mut at = match mark {
        _ if at_break => l.len(),
        Mark::Before => column.saturating_sub(1),
        Mark::After => column,
        Mark::AtEnd => l.len(),
    }
    .min(l.len());
    while !l.is_char_boundary(at) {
        at -= 1;
    }
    let (before, after) = l.split_at(at);
    let start = before
        .char_indices()
        .rev()
        .nth(EXCERPT_SIDE - 1)
        .map_or(0, |(i, _)| i);
    let end = after
        .char_indices()
        .nth(EXCERPT_SIDE)
        .map_or(after.len(), |(i, _)| i);
    // The text's own `<HERE>` is written `\u{3c}HERE>`, so that the one mark is the error's.
    let shown = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_control() || crate::index::is_ignorable(c) {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
            .replace(EXCERPT_MARK, "\\u{3c}HERE>")
    };
    Some(format!(
        "{}{}{EXCERPT_MARK}{}{}{}",
        if start > 0 { "…" } else { "" },
        shown(&before[start..]),
        if at_break { "\\n" } else { "" },
        shown(&after[..end]),
        if end < after.len() { "…" } else { "" },
    ))
}

/// Where reading `text` fails, as [`parse_noting`] notes it: `in PATH` or `after PATH`, a path
/// of more than [`PATH_SHOWN`] steps cut after its first ones (`… (130 levels down)`). `None`
/// when it fails at the top level (or does not fail).
fn located(text: &str) -> Option<String> {
    let failed = RefCell::new(None);
    let _ = parse_noting(text, Some(&failed));
    failed.into_inner()
}

/// Steps of a path shown in an error before the rest is cut.
const PATH_SHOWN: usize = 8;

/// `path` as an error shows it: in full up to [`PATH_SHOWN`] steps, else its first steps, `…`
/// and how many levels down it is.
fn shown_path(path: &Path<'_>) -> String {
    let mut steps = Vec::new();
    let mut p = path;
    loop {
        match p {
            Path::Root => break,
            Path::Key(parent, _) | Path::Index(parent, _) => {
                steps.push(p);
                p = parent;
            }
        }
    }
    let Some(&cut) = steps.iter().rev().nth(PATH_SHOWN - 1) else {
        return path.to_string();
    };
    if steps.len() == PATH_SHOWN {
        return path.to_string();
    }
    format!("{cut}… ({} levels down)", steps.len())
}

/// How deeply arrays and objects may nest: serde_json's recursion limit (it reads 127 levels and
/// refuses the 128th), which it does not let a caller raise without its `unbounded_depth` feature.
pub const MAX_DEPTH: usize = 127;

/// serde_json's syntax message in plain words.
fn syntax_in_words(message: &str) -> String {
    let cut_short = |inside: &str| format!("the text ends inside {inside} (is it cut short?)");
    match message {
        "EOF while parsing a list" => cut_short("an array"),
        "EOF while parsing an object" => cut_short("an object"),
        "EOF while parsing a string" => cut_short("a string"),
        "EOF while parsing a value" => {
            "the text ends where a value should be (is it cut short?)".to_owned()
        }
        "expected ident" => {
            "a bare word that is not true, false or null (a string needs double quotes)".to_owned()
        }
        "expected value" => "expected a value: a string in double quotes, a number, true, false, \
null, an array or an object"
            .to_owned(),
        "trailing characters" => "more text after the end of the JSON value".to_owned(),
        "trailing comma" => {
            "a comma before a closing bracket, which JSON does not allow".to_owned()
        }
        "key must be a string" => "an object key must be a string in double quotes".to_owned(),
        "control character (\\u0000-\\u001F) found while parsing a string" => {
            "a raw control character (a line break or tab) inside a string: write it as \\n or \\t"
                .to_owned()
        }
        "recursion limit exceeded" => format!(
            "nested more than {MAX_DEPTH} levels deep, the most that is read (arrays and objects \
within one another; each level of a schema's properties takes two, \"properties\" and the \
property's own schema)"
        ),
        other => other.to_owned(),
    }
}

/// Where a value sits in the document.
#[derive(Debug)]
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => f.write_str("the top level"),
            Path::Key(Path::Root, k) => write!(f, "{k}"),
            Path::Key(parent, k) => write!(f, "{parent}.{k}"),
            Path::Index(Path::Root, i) => write!(f, "[{i}]"),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

/// The key under which serde_json hands over a number's text with `arbitrary_precision`.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

struct Strict<'a> {
    at: &'a Path<'a>,
    /// Where an error was met, noted by the innermost value that met it ([`parse_noting`]).
    failed: Option<&'a RefCell<Option<String>>>,
}

impl<'a> Strict<'a> {
    /// Notes `what` as where the error was met, unless a value inside noted it first.
    fn note(&self, what: impl FnOnce() -> String) {
        if let Some(cell) = self.failed {
            let mut cell = cell.borrow_mut();
            if cell.is_none() {
                *cell = Some(what());
            }
        }
    }

    /// The value at `at`, read with this one's notes.
    fn inner<'b>(&self, at: &'b Path<'b>) -> Strict<'b>
    where
        'a: 'b,
    {
        Strict {
            at,
            failed: self.failed,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        let (at, failed) = (self.at, self.failed);
        let read = d.deserialize_any(self);
        if read.is_err() && !matches!(at, Path::Root) {
            Strict { at, failed }.note(|| format!("in {}", shown_path(at)));
        }
        read
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        loop {
            let at = Path::Index(self.at, items.len());
            match seq.next_element_seed(self.inner(&at)) {
                Ok(Some(v)) => items.push(v),
                Ok(None) => return Ok(Value::Array(items)),
                Err(e) => {
                    // Not noted inside an item: the separator after the last one is wrong.
                    self.note(|| match items.len().checked_sub(1) {
                        Some(last) => format!("after {}", shown_path(&Path::Index(self.at, last))),
                        None => format!("in {}", shown_path(self.at)),
                    });
                    return Err(e);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        loop {
            let key = match map.next_key::<String>() {
                Ok(Some(key)) => key,
                Ok(None) => break,
                Err(e) => {
                    self.note(|| match out.keys().next_back() {
                        Some(last) => format!("after {}", shown_path(&Path::Key(self.at, last))),
                        None => format!("in {}", shown_path(self.at)),
                    });
                    return Err(e);
                }
            };
            if out.is_empty() && key == NUMBER_TOKEN {
                // With serde_json's `arbitrary_precision` (the Starlark crate turns it on for the
                // whole build), a number arrives as a one-entry map holding its text.
                let digits: String = map.next_value()?;
                return serde_json::from_str::<Value>(&digits).map_err(de::Error::custom);
            }
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate key {key:?} in {}: a key may appear once per object",
                    self.at
                )));
            }
            let at = Path::Key(self.at, &key);
            let value = match map.next_value_seed(self.inner(&at)) {
                Ok(value) => value,
                Err(e) => {
                    // Not noted by the value: the `:` after the key is wrong.
                    self.note(|| format!("after the key {}", shown_path(&at)));
                    return Err(e);
                }
            };
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_serde_json_reads() {
        let text = r#"{"a": [1, -2, 3.5, true, null, "x", {"b": {}}], "c": "\u00e9"}"#;
        let strict = parse(text).expect("valid");
        let loose: Value = serde_json::from_str(text).expect("valid");
        assert_eq!(strict, loose);
        assert_eq!(
            serde_json::to_string(&strict).expect("json"),
            serde_json::to_string(&loose).expect("json"),
            "key order is kept"
        );
    }

    #[test]
    fn duplicate_keys_are_named_with_their_path() {
        let e = parse(r#"{"servers": [{"name": "s", "tools": [{"name": "a"}, {"name": "b", "description": "x", "description": "y"}]}]}"#)
            .expect_err("duplicate")
            .to_string();
        assert!(
            e.contains(r#"duplicate key "description" in servers[0].tools[1]"#),
            "{e}"
        );
        assert!(e.contains("line 1"), "{e}");
        let e = parse(r#"[{"name": "a", "name": "b"}]"#)
            .expect_err("dup")
            .to_string();
        assert!(e.contains(r#"duplicate key "name" in [0]"#), "{e}");
        let e = parse(r#"{"a": 1, "a": 1}"#).expect_err("dup").to_string();
        assert!(e.contains("in the top level"), "{e}");
    }

    #[test]
    fn syntax_errors_are_said_in_plain_words() {
        let words =
            |text: &str, one_line: bool| in_words(&parse(text).expect_err(text), text, one_line);
        assert_eq!(words("", false), "it is empty (no JSON value)");
        assert_eq!(words(" \n ", false), "it is empty (no JSON value)");
        assert_eq!(
            words("not json", true),
            "a bare word that is not true, false or null (a string needs double quotes) (column 2)"
        );
        assert_eq!(
            words("[1,\n 2", false),
            "the text ends inside an array (is it cut short?) at line 2 column 2, after [1]:  2<HERE>"
        );
        assert_eq!(
            words("{} x", false),
            "more text after the end of the JSON value at line 1 column 4: {} <HERE>x"
        );
        assert_eq!(
            words(r#"{"a": 1, "a": 2}"#, true),
            r#"duplicate key "a" in the top level: a key may appear once per object (column 12)"#
        );
        for text in [
            "", "nul", "[1,", "{\"a\"", "{} x", "[1,]", "{1: 2}", "\"a\nb\"",
        ] {
            let w = words(text, false);
            for jargon in ["EOF", "ident", "trailing characters"] {
                assert!(!w.contains(jargon), "{text:?}: {w}");
            }
        }
    }

    /// A file's syntax error says which value it was met in or after, and shows the text around
    /// it: a line and column alone are no help in a catalog minified to one long line.
    #[test]
    fn a_files_errors_say_where_and_show_the_text_there() {
        let words = |text: &str| in_words(&parse(text).expect_err(text), text, false);
        let tool = |i: usize| {
            format!(
                r#"{{"name":"t{i}","description":"Does thing {i}","input_schema":{{"type":"object","properties":{{"q":{{"type":"string"}}}}}}}}"#
            )
        };
        let tools: Vec<String> = (0..6).map(tool).collect();
        // A comma left out between tools[2] and tools[3] of a one-line catalog.
        let text = format!(
            r#"{{"servers":[{{"name":"docs","tools":[{},{}{}{}]}}]}}"#,
            tools[..2].join(","),
            tools[2],
            tools[3],
            format_args!(",{}", tools[4..].join(","))
        );
        let column = text.find(r#"{"name":"t3""#).expect("t3") + 1;
        assert_eq!(
            words(&text),
            format!(
                r#"expected `,` or `]` at line 1 column {column}, after servers[0].tools[2]: …rties":{{"q":{{"type":"string"}}}}}}}}<HERE>{{"name":"t3","description":"Does…"#
            )
        );
        // In a value, after a key, cut short, a raw control character (escaped), and a bare word.
        for (text, says) in [
            (
                r#"[{"name" "a"}]"#,
                r#"expected `:` at line 1 column 10, after the key [0].name: [{"name" <HERE>"a"}]"#,
            ),
            (
                "[{\"name\": \"a\", \"description\": \"cut",
                r#"the text ends inside a string (is it cut short?) at line 1 column 34, in [0].description: …"name": "a", "description": "cut<HERE>"#,
            ),
            (
                "{\"tools\": [{\"name\": \"a\u{1}\"}]}",
                r#"a raw control character (a line break or tab) inside a string: write it as \n or \t at line 1 column 23, in tools[0].name: {"tools": [{"name": "a<HERE>\u{1}"}]}"#,
            ),
            (
                "{\n  \"tools\": [\n    {\"name\": tru}\n  ]\n}",
                r#"a bare word that is not true, false or null (a string needs double quotes) at line 3 column 17, in tools[0].name:     {"name": tru<HERE>}"#,
            ),
            // At column 0, the line break ending the line before: that line, marked at its end.
            (
                "{\n  \"tools\": [{\"name\": \"a\"},\n",
                r#"the text ends where a value should be (is it cut short?) at line 3 column 0, after tools[0]:   "tools": [{"name": "a"},<HERE>\n"#,
            ),
            (
                "[{\"description\": \"one\ntwo\"}]",
                r#"a raw control character (a line break or tab) inside a string: write it as \n or \t at line 2 column 0, in [0].description: [{"description": "one<HERE>\n"#,
            ),
            // The text's own mark is not taken for the error's.
            (
                "[{\"name\": \"<HERE>\" x}]",
                r#"expected `,` or `}` at line 1 column 20, after [0].name: [{"name": "\u{3c}HERE>" <HERE>x}]"#,
            ),
            // Invisible format characters are shown as escapes.
            (
                "[{\"name\": \"a\u{202e}b\" x}]",
                r#"expected `,` or `}` at line 1 column 19, after [0].name: [{"name": "a\u{202e}b" <HERE>x}]"#,
            ),
        ] {
            assert_eq!(words(text), says, "{text:?}");
        }
        // A duplicate key names its object itself; the mark follows the key.
        assert_eq!(
            words(r#"{"a": 1, "a": 2}"#),
            r#"duplicate key "a" in the top level: a key may appear once per object at line 1 column 12: {"a": 1, "a"<HERE>: 2}"#
        );
        // An excerpt keeps to a few dozen characters of its line, cut at characters.
        let long = format!("[\"{}\" \"{}\"]", "é".repeat(100), "x".repeat(100));
        let w = words(&long);
        let shown = w.split_once(": ").expect("excerpt").1;
        assert_eq!(
            shown,
            format!("…{}\" <HERE>\"{}…", "é".repeat(30), "x".repeat(31)),
            "{w}"
        );
        // One line of a JSON-lines file is said as before: its column only.
        assert_eq!(
            in_words(&parse("[1 2]").expect_err("comma"), "[1 2]", true),
            "expected `,` or `]` (column 4)"
        );
    }

    /// A value nested past the limit names the limit, the path into it (cut) and the text there.
    #[test]
    fn nesting_past_the_limit_is_said_with_the_limit_and_where() {
        let mut schema = String::from(r#"{"type": "string"}"#);
        for _ in 0..120 {
            schema = format!(r#"{{"type": "object", "properties": {{"p": {schema}}}}}"#);
        }
        let text = format!(r#"[{{"name": "deep", "input_schema": {schema}}}]"#);
        let w = in_words(&parse(&text).expect_err("too deep"), &text, false);
        assert!(
            w.starts_with(&format!(
                "nested more than {MAX_DEPTH} levels deep, the most that is read"
            )),
            "{w}"
        );
        assert!(
            w.contains(
                ", in [0].input_schema.properties.p.properties.p.properties.p… (127 levels down): …"
            ),
            "{w}"
        );
        assert!(
            w.ends_with(r#""properties": <HERE>{"p": {"type": "object", "proper…"#),
            "{w}"
        );
        let fits = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        parse(&fits).expect("as deep as the limit");
        let over = format!("[{fits}]");
        let w = in_words(&parse(&over).expect_err("one past"), &over, false);
        assert!(w.starts_with("nested more than 127 levels deep"), "{w}");
    }

    #[test]
    fn trailing_garbage_and_bad_json_fail() {
        assert!(parse("[] x").is_err());
        assert!(parse("{\"a\": }").is_err());
    }
}
