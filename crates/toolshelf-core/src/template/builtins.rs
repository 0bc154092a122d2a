//! The values and functions a description template sees.
//!
//! Three namespaces (`pkg`, `session`, `turn`), seven error stubs (`time`, `random`, `uuid`, `fs`,
//! `exec`, `http`, `env`), the `raw` text type and the six pure builtins. A namespace or a stub
//! that refuses an attribute read records why before returning the error, and a stub's call fails
//! with an error of its own ([`Unavailable`]), so the renderer can say what was read and by whom
//! ([`refusal`]) while Starlark supplies where (the span of the expression).

// The starlark derives (`ProvidesStaticType`, the value macros) expand to `unsafe impl`s; nothing
// in this file writes `unsafe` by hand.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;

use allocative::Allocative;
use serde_json::Value as Json;
use starlark::any::ProvidesStaticType;
use starlark::environment::GlobalsBuilder;
use starlark::eval::{Arguments, Evaluator};
use starlark::starlark_module;
use starlark::starlark_simple_value;
use starlark::values::dict::DictRef;
use starlark::values::list::ListRef;
use starlark::values::none::NoneType;
use starlark::values::tuple::{TupleRef, UnpackTuple};
use starlark::values::{
    Heap, NoSerialize, StarlarkPagablePanic, StarlarkValue, Value, ValueLike, starlark_value,
};

/// The per-turn values a template may name only to fail: they change within a session, and a
/// description must not.
pub const TURN_VALUES: [&str; 3] = ["number", "time", "messages"];

/// Names bound to error stubs: effects and sources of values that differ between renders.
pub const STUBS: [&str; 7] = ["time", "random", "uuid", "fs", "exec", "http", "env"];

/// The three namespaces values come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Allocative)]
pub enum Tier {
    /// `pkg`: the catalog and `[template.vars]`.
    Pkg,
    /// `session`: fixed when the session is created.
    Session,
    /// `turn`: per-turn values, every one forbidden.
    Turn,
}

impl Tier {
    /// The namespace's name in templates.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Pkg => "pkg",
            Tier::Session => "session",
            Tier::Turn => "turn",
        }
    }
}

/// Why an evaluation was stopped by toolshelf rather than by Starlark itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// `turn.NAME` was read.
    Turn(String),
    /// `pkg.NAME` or `session.NAME` names no value.
    Unknown {
        /// `pkg` or `session`.
        tier: Tier,
        /// The name read.
        name: String,
        /// The names it has, sorted.
        known: Vec<String>,
    },
    /// A stub was called or one of its attributes read.
    Stub(&'static str),
}

thread_local! {
    /// The attribute read a namespace or a stub refused last on this thread, and why.
    /// Evaluation is synchronous, so the renderer forgets it before evaluating
    /// ([`forget_refusals`]) and reads it when evaluation fails ([`refusal`]).
    static REFUSED: RefCell<Option<(Fault, String)>> = const { RefCell::new(None) };
}

fn refuse(f: Fault, attribute: &str) {
    REFUSED.with(|cell| *cell.borrow_mut() = Some((f, attribute.to_owned())));
}

/// Forgets the refused reads recorded on this thread.
pub fn forget_refusals() {
    REFUSED.with(|cell| cell.borrow_mut().take());
}

/// The refusal that stopped an evaluation failing with `e`, if one did: a stub's call (its own
/// error), or the refused read recorded last when `e` is Starlark's "no attribute" error for that
/// kind of value and that attribute. A recorded read alone proves nothing: Starlark also reads
/// attributes of built-in values while compiling, to fold constants (a function's body when its
/// `def` runs, long before, or without, a call), and a read refused then stops nothing. A read
/// refused at run time fails at once, so it is the last one recorded. Forgets what was recorded.
pub fn refusal(e: &starlark::Error) -> Option<Fault> {
    use starlark::ErrorKind;
    use starlark::values::ValueError;
    let recorded = REFUSED.with(|cell| cell.borrow_mut().take());
    match e.kind() {
        ErrorKind::Other(e) => e.downcast_ref::<Unavailable>().map(|u| Fault::Stub(u.0)),
        ErrorKind::Value(e) => {
            let (ty, attribute) = match e.downcast_ref::<ValueError>()? {
                ValueError::NoAttr(ty, attribute)
                | ValueError::NoAttrDidYouMean(ty, attribute, _) => (ty, attribute),
                _ => return None,
            };
            let (fault, read) = recorded?;
            let owner = match fault {
                Fault::Stub(_) => <Stub as StarlarkValue>::TYPE,
                Fault::Turn(_) | Fault::Unknown { .. } => <Namespace as StarlarkValue>::TYPE,
            };
            (read == *attribute && ty == owner).then_some(fault)
        }
        _ => None,
    }
}

/// The error of a call of a stub.
#[derive(Debug, thiserror::Error)]
#[error("{0} is not available here")]
pub struct Unavailable(&'static str);

/// `pkg`, `session` or `turn`: a read-only namespace whose attributes are its values.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative, StarlarkPagablePanic)]
pub struct Namespace {
    tier: Tier,
    #[allocative(skip)]
    values: BTreeMap<String, Json>,
}

impl Namespace {
    /// A namespace of `tier` holding `values`.
    pub fn new(tier: Tier, values: BTreeMap<String, Json>) -> Self {
        Self { tier, values }
    }

    /// Whether `name` is set to something other than null.
    fn has(&self, name: &str) -> bool {
        self.tier != Tier::Turn && self.values.get(name).is_some_and(|v| !v.is_null())
    }
}

starlark_simple_value!(Namespace);

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.tier.name())
    }
}

#[starlark_value(type = "namespace")]
impl<'v> StarlarkValue<'v> for Namespace {
    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        if self.tier == Tier::Turn {
            refuse(Fault::Turn(attribute.to_owned()), attribute);
            return None;
        }
        match self.values.get(attribute) {
            Some(v) => Some(heap.alloc(v.clone())),
            None => {
                refuse(
                    Fault::Unknown {
                        tier: self.tier,
                        name: attribute.to_owned(),
                        known: self.values.keys().cloned().collect(),
                    },
                    attribute,
                );
                None
            }
        }
    }

    fn has_attr(&self, attribute: &str, _heap: Heap<'v>) -> bool {
        self.has(attribute)
    }

    fn dir_attr(&self) -> Vec<String> {
        match self.tier {
            Tier::Turn => Vec::new(),
            _ => self.values.keys().cloned().collect(),
        }
    }
}

/// One of [`STUBS`]: calling it, or reading any attribute of it, stops the evaluation.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative, StarlarkPagablePanic)]
pub struct Stub {
    name: &'static str,
}

starlark_simple_value!(Stub);

impl fmt::Display for Stub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<unavailable {}>", self.name)
    }
}

#[starlark_value(type = "unavailable")]
impl<'v> StarlarkValue<'v> for Stub {
    fn invoke(
        &self,
        _me: Value<'v>,
        _args: &Arguments<'v, '_>,
        _eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        Err(starlark::Error::new_other(Unavailable(self.name)))
    }

    fn get_attr(&self, attribute: &str, _heap: Heap<'v>) -> Option<Value<'v>> {
        refuse(Fault::Stub(self.name), attribute);
        None
    }
}

/// Binds every stub of [`STUBS`] in `builder`.
pub fn stubs(builder: &mut GlobalsBuilder) {
    for name in STUBS {
        builder.set(name, Stub { name });
    }
}

/// Text that `part`, `join`, `tag` and `render_section` insert exactly as it is: the result of
/// `raw(...)` and of `tag(...)`.
#[derive(Debug, Clone, ProvidesStaticType, NoSerialize, Allocative, StarlarkPagablePanic)]
pub struct Raw(pub String);

starlark_simple_value!(Raw);

impl fmt::Display for Raw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn raw_text(v: Value) -> Option<String> {
    v.unpack_str()
        .map(str::to_owned)
        .or_else(|| v.downcast_ref::<Raw>().map(|r| r.0.clone()))
}

#[starlark_value(type = "raw")]
impl<'v> StarlarkValue<'v> for Raw {
    fn to_bool(&self) -> bool {
        !self.0.is_empty()
    }

    /// `raw + text`: raw, the text appended as it is.
    fn add(&self, rhs: Value<'v>, heap: Heap<'v>) -> Option<starlark::Result<Value<'v>>> {
        let rhs = raw_text(rhs)?;
        Some(Ok(heap.alloc(Raw(format!("{}{rhs}", self.0)))))
    }

    /// `text + raw`: raw, the text prepended as it is.
    fn radd(&self, lhs: Value<'v>, heap: Heap<'v>) -> Option<starlark::Result<Value<'v>>> {
        let lhs = raw_text(lhs)?;
        Some(Ok(heap.alloc(Raw(format!("{lhs}{}", self.0)))))
    }
}

/// A value as text: `None` for `None` and empty text (left out), `(text, raw)` otherwise. Plain
/// strings, `raw` values, booleans and numbers are text; anything else is an error naming `what`.
fn text_of(v: Value, what: &str) -> anyhow::Result<Option<(String, bool)>> {
    if v.is_none() {
        return Ok(None);
    }
    let (text, raw) = if let Some(s) = v.unpack_str() {
        (s.to_owned(), false)
    } else if let Some(r) = v.downcast_ref::<Raw>() {
        (r.0.clone(), true)
    } else if matches!(v.get_type(), "bool" | "int" | "float") {
        (v.to_str(), false)
    } else {
        return Err(anyhow::anyhow!(
            "{what}: a {} is not text (give a string, raw(...), a number, a boolean or None)",
            v.get_type()
        ));
    };
    Ok((!text.is_empty()).then_some((text, raw)))
}

/// Prose: every run of whitespace and control characters becomes one space, and the ends are
/// trimmed.
pub fn fold(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_tag_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// `text` with every `<NAME` and `</NAME` (ASCII case-insensitive) opened with `‹` instead, so
/// it can neither close the tag it sits in nor open another of that name.
fn defuse_tag(text: &str, name: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let name = name.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (i, _) in lower.match_indices('<') {
        let rest = &lower[i + 1..];
        let rest = rest.strip_prefix('/').unwrap_or(rest);
        if rest.starts_with(&name) {
            out.push_str(&text[last..i]);
            out.push('‹');
            last = i + 1;
        }
    }
    out.push_str(&text[last..]);
    out
}

fn escape_attr(text: &str) -> String {
    fold(text)
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
}

/// The items of a list or tuple.
fn sequence<'v>(v: Value<'v>) -> Option<Vec<Value<'v>>> {
    if let Some(l) = ListRef::from_value(v) {
        return Some(l.content().to_vec());
    }
    TupleRef::from_value(v).map(|t| t.content().to_vec())
}

#[starlark_module]
pub fn pure(builder: &mut GlobalsBuilder) {
    /// `part(*pieces, sep=" ")`: one line of prose.
    fn part<'v>(
        #[starlark(args)] pieces: UnpackTuple<Value<'v>>,
        #[starlark(require = named, default = " ")] sep: &str,
    ) -> anyhow::Result<String> {
        let mut out = Vec::new();
        for p in pieces.items {
            match text_of(p, "part")? {
                Some((t, true)) => out.push(t),
                Some((t, false)) => {
                    let t = fold(&t);
                    if !t.is_empty() {
                        out.push(t);
                    }
                }
                None => {}
            }
        }
        Ok(out.join(sep))
    }

    /// `join(items, sep="\n")`: items as they are, empty ones left out.
    fn join<'v>(items: Value<'v>, #[starlark(default = "\n")] sep: &str) -> anyhow::Result<String> {
        let Some(list) = sequence(items) else {
            return Err(anyhow::anyhow!(
                "join: expects a list or tuple of text, got a {}",
                items.get_type()
            ));
        };
        let mut out = Vec::new();
        for v in list {
            if let Some((t, _)) = text_of(v, "join")? {
                out.push(t);
            }
        }
        Ok(out.join(sep))
    }

    /// `tag(name, body=None, **attrs)`: `<name a="v">body</name>`, or `<name a="v"/>`.
    fn tag<'v>(
        name: &str,
        #[starlark(default = NoneType)] body: Value<'v>,
        #[starlark(kwargs)] attrs: DictRef<'v>,
    ) -> anyhow::Result<Raw> {
        if !is_tag_name(name) {
            anyhow::bail!(
                "tag: {name:?} is not a tag name (a letter or _, then letters, digits, _, - or .)"
            );
        }
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (k, v) in attrs.iter() {
            let k = k.unpack_str().unwrap_or_default().to_owned();
            if !is_tag_name(&k) {
                anyhow::bail!("tag: {k:?} is not an attribute name");
            }
            if let Some((t, _)) = text_of(v, "tag attribute")? {
                pairs.push((k, escape_attr(&t)));
            }
        }
        pairs.sort();
        let mut open = format!("<{name}");
        for (k, v) in &pairs {
            open.push_str(&format!(" {k}=\"{v}\""));
        }
        Ok(Raw(match text_of(body, "tag body")? {
            None => format!("{open}/>"),
            Some((t, raw)) => {
                let t = if raw { t } else { defuse_tag(&t, name) };
                format!("{open}>{t}</{name}>")
            }
        }))
    }

    /// `raw(text)`: text that the other builtins insert exactly as it is.
    fn raw(text: &str) -> anyhow::Result<Raw> {
        Ok(Raw(text.to_owned()))
    }

    /// `has(container, name)`: whether a value is there.
    fn has<'v>(container: Value<'v>, name: &str) -> anyhow::Result<bool> {
        if container.is_none() {
            return Ok(false);
        }
        if let Some(ns) = container.downcast_ref::<Namespace>() {
            return Ok(ns.has(name));
        }
        if let Some(d) = DictRef::from_value(container) {
            return Ok(d.iter().any(|(k, _)| k.unpack_str() == Some(name)));
        }
        anyhow::bail!(
            "has: expects pkg, session, turn, a dict or None, got a {}",
            container.get_type()
        )
    }

    /// `render_section(title, body)`: a titled block, or nothing when the body is empty.
    fn render_section<'v>(title: &str, body: Value<'v>) -> anyhow::Result<String> {
        let title = fold(title);
        if title.is_empty() {
            anyhow::bail!("render_section: the title is empty");
        }
        let body = match sequence(body) {
            Some(list) => {
                let mut lines = Vec::new();
                for v in list {
                    match text_of(v, "render_section item")? {
                        Some((t, true)) => lines.push(format!("- {t}")),
                        Some((t, false)) => {
                            let t = fold(&t);
                            if !t.is_empty() {
                                lines.push(format!("- {t}"));
                            }
                        }
                        None => {}
                    }
                }
                lines.join("\n")
            }
            None => match text_of(body, "render_section body")? {
                Some((t, true)) => t,
                Some((t, false)) => t.trim().to_owned(),
                None => String::new(),
            },
        };
        Ok(if body.is_empty() {
            String::new()
        } else {
            format!("{title}:\n{body}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defusing_reaches_only_the_tags_own_name() {
        assert_eq!(
            defuse_tag("a </Note> <note x> <notes> <b>", "note"),
            "a ‹/Note> ‹note x> ‹notes> <b>"
        );
        assert_eq!(defuse_tag("no tags", "x"), "no tags");
    }

    #[test]
    fn folding_collapses_whitespace_and_controls() {
        assert_eq!(fold("  a\n\tb \u{7} c  "), "a b c");
        assert_eq!(fold(" \n "), "");
    }
}
