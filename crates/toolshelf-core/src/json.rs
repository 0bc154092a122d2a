//! Strict JSON reading: a duplicate object key is an error, not "the last one wins".
//!
//! `serde_json::Value` keeps the last of two equal keys silently, so a catalog item with two
//! `"description"` or two `"inputSchema"` keys would load with whichever came second, and nobody
//! would learn that the file says two things. Catalog and client-configuration files go through
//! [`parse`] instead, which refuses such a file naming the key and where it is
//! (`servers[1].tools[3]`). The path is kept as a chain of borrowed segments and only formatted
//! when there is an error, so strictness costs no allocation per value.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses `text` as JSON, refusing duplicate keys in any object. The error message names the
/// duplicate key, the object's path and the line and column.
pub fn parse(text: &str) -> Result<Value, serde_json::Error> {
    let mut d = serde_json::Deserializer::from_str(text);
    let value = Strict { at: &Path::Root }.deserialize(&mut d)?;
    d.end()?;
    Ok(value)
}

/// A [`parse`] error of `text` in plain words, with where it is: ` at line L column C`, or for a
/// text of one line (a line of a JSON-lines file, whose "line 1" is not the file's) ` (column
/// C)`. The parser's terms (`EOF`, `ident`, `trailing characters`) become what is wrong with the
/// text; a duplicate key keeps its own message.
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
        format!("{message} (column {})", e.column())
    } else {
        format!("{message}{place}")
    }
}

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
        "recursion limit exceeded" => "nested more than 128 levels deep".to_owned(),
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
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
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
            match seq.next_element_seed(Strict { at: &at })? {
                Some(v) => items.push(v),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
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
            let value = map.next_value_seed(Strict { at: &at })?;
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
            "the text ends inside an array (is it cut short?) at line 2 column 2"
        );
        assert_eq!(
            words("{} x", false),
            "more text after the end of the JSON value at line 1 column 4"
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

    #[test]
    fn trailing_garbage_and_bad_json_fail() {
        assert!(parse("[] x").is_err());
        assert!(parse("{\"a\": }").is_err());
    }
}
