//! Description templates: a tool's (or a server group's) description computed by a small
//! Starlark program, once per session, in a pure environment.
//!
//! Descriptions sit in the cached prefix of every request, so a template must give the same
//! bytes for the whole session. It therefore sees only values fixed before the session starts,
//! and nothing that reads a clock, a random source, the file system, the network, a process or
//! the environment:
//!
//! - `pkg.NAME`: the catalog's values for the tool or group being described, and every
//!   `[template.vars]` entry of the configuration. For a tool: `name` (canonical), `tool` (the
//!   bare name), `server` (the canonical server name, `None` for built-ins), `description` (as the
//!   catalog gives it), `params` (top-level parameter names, sorted), `required` (required
//!   parameter names, sorted), `tags`. For a server group: `name` and `server` (the canonical
//!   server name), `description`, `tools` (the bare names of its visible tools, sorted).
//! - `session.NAME`: `mode` (the active mode, or `None`), `client` (the client's name, or
//!   `None`), `workspace` (`[template] workspace`, else the directory the edge runs in).
//! - `turn.NAME`: `number`, `time`, `messages` exist only to fail: they change from turn to turn.
//!   Reading any attribute of `turn` stops the render with an error naming the value, the tool
//!   and the line.
//!
//! Any other name under `pkg` or `session` is an error that lists the names there are. `time`,
//! `random`, `uuid`, `fs`, `exec`, `http` and `env` are bound to stubs: calling one, or reading an
//! attribute of one (`time.now`), stops the render with an error naming it; a stub never returns
//! a value. Of the core language's functions the template gets the pure ones ([`CORE`]); `print`,
//! `getattr` and `hasattr` are left out (use `has`).
//!
//! The template's value is its last expression, or, when it assigns one, the global
//! `description`; it must be a string or `raw` text. The builtins:
//!
//! - `part(*pieces, sep=" ")` → string: one line of prose. Each piece that is a string, number or
//!   boolean has every run of whitespace and control characters folded to one space and its ends
//!   trimmed; `raw` pieces are kept as they are; `None` and empty pieces are left out; the rest
//!   are joined with `sep`.
//! - `join(items, sep="\n")` → string: the items of a list or tuple, as they are (numbers and
//!   booleans written out), `None` and empty ones left out, joined with `sep`.
//! - `tag(name, body=None, **attrs)` → raw: `<name a="1" b="x">body</name>`, or `<name a="1"/>`
//!   when the body is `None` or empty. Names are a letter or `_` then letters, digits, `_`, `-`
//!   or `.`. Attributes are sorted by name, their values folded like `part` and `&`, `"` and `<`
//!   escaped; `None` attributes are left out. A string body has every `<name` and `</name` (any
//!   case) opened with `‹` instead, so text from the catalog cannot close the tag or forge
//!   another of its name; a `raw` body (a nested `tag`) is kept as it is.
//! - `raw(text)` → raw: text the other builtins keep exactly as it is. `raw + string`,
//!   `string + raw` and `raw + raw` are raw; `str(r)` is its text.
//! - `has(container, name)` → bool: for `pkg` and `session`, whether `name` is set and not
//!   `None`; for `turn`, always `False` (reading it is what fails); for a dict, whether it has the
//!   key; for `None`, `False`.
//! - `render_section(title, body)` → string: `"title:\n- item\n- item"` for a list or tuple body
//!   (items folded like `part`, `raw` items kept, empty ones left out), `"title:\nbody"` for a
//!   text body (trimmed unless `raw`), and `""` when nothing is left, so an empty section
//!   disappears.
//!
//! A render is bounded ([`MAX_TICKS`] function calls and loop iterations, [`MAX_HEAP_BYTES`] of
//! heap, [`MAX_CALL_DEPTH`] nested calls); past any it fails naming the limit. Before Starlark
//! parses a source, a source nesting deeper than 200 levels, or holding an f-string, is refused
//! (`nesting`); and [`check_syntax`], [`defines_function`], [`render`] and [`findings`] parse on
//! a thread of their own whose stack holds the deepest nesting a source of its size can have
//! (`stack_for`), so that what the count misses in a source (a model's `tool_define` script
//! included) is an error, not a stack overflow that aborts the process; [`render`] also sizes
//! that stack for the deepest value the template's heap can hold (`evaluation_stack`), which
//! `repr`, `==`, hashing and the garbage collector walk one level at a time. A source that Starlark
//! cannot parse is an error naming the line and the column (from 1, in characters) where its
//! parser stopped (`line 1, column 12: does not parse: ...`); a refusal by the nesting count
//! names the line.
//!
//! Script tools use the same language: a script file is evaluated in this environment for its
//! definition ([`script_definition`]: `description`, `schema`, `def run(params)`), and run by
//! [`run_script`] in an environment the caller extends ([`environment`]) with what running needs
//! (a clock, randomness, an HTTP client), under the caller's [`Limits`]. Output is a pure function of the source and the
//! values: dicts keep insertion order and nothing reads the process's state.

mod builtins;
mod describe;
mod nesting;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

use serde_json::Value as Json;
use starlark::codemap::Span;
use starlark::environment::{Globals, GlobalsBuilder, Module};
use starlark::eval::Evaluator;
use starlark::syntax::ast::{AstExpr, Expr};
use starlark::syntax::{AstModule, Dialect, DialectTypes};
use starlark::values::{Value, ValueLike};

use builtins::{Fault, Namespace, Raw};
pub use builtins::{STUBS, TURN_VALUES, Tier, fold};
pub use describe::{
    CATALOG_VALUES, Descriptions, Templates, schema_names, script_values, server_values,
    tool_values,
};

/// The core language's functions a template may call.
pub const CORE: [&str; 27] = [
    "None",
    "True",
    "False",
    "abs",
    "all",
    "any",
    "bool",
    "chr",
    "dict",
    "dir",
    "enumerate",
    "fail",
    "float",
    "int",
    "len",
    "list",
    "max",
    "min",
    "ord",
    "range",
    "repr",
    "reversed",
    "sorted",
    "str",
    "tuple",
    "type",
    "zip",
];

/// The builtins a template may call besides the core language.
pub const BUILTINS: [&str; 6] = ["part", "tag", "raw", "join", "has", "render_section"];

/// Most function calls and loop iterations one render may take.
pub const MAX_TICKS: u64 = 1_000_000;

/// Most bytes of Starlark heap one render may use.
pub const MAX_HEAP_BYTES: usize = 16 << 20;

/// The file name Starlark gives a template in its own messages.
const FILE: &str = "description_template";

/// The session values a template may read, fixed when the session is created.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SessionValues {
    /// The active mode.
    pub mode: Option<String>,
    /// The client's name (the MCP client's `clientInfo.name`, for instance).
    pub client: Option<String>,
    /// The workspace.
    pub workspace: Option<String>,
}

impl SessionValues {
    fn values(&self) -> BTreeMap<String, Json> {
        let v = |s: &Option<String>| s.clone().map(Json::String).unwrap_or(Json::Null);
        BTreeMap::from([
            ("client".to_owned(), v(&self.client)),
            ("mode".to_owned(), v(&self.mode)),
            ("workspace".to_owned(), v(&self.workspace)),
        ])
    }
}

/// What went wrong in a template.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TemplateErrorKind {
    /// The source does not parse.
    Syntax(String),
    /// A per-turn value was read.
    Turn(String),
    /// A stub was used.
    Stub(String),
    /// `pkg.NAME` or `session.NAME` names no value.
    Unknown {
        /// `pkg` or `session`.
        tier: &'static str,
        /// The name.
        name: String,
        /// The names there are.
        known: Vec<String>,
    },
    /// A limit was reached.
    Limit(String),
    /// The value is not text.
    NotText(String),
    /// The template has no value.
    NoValue,
    /// Anything else Starlark reported.
    Failed(String),
}

impl fmt::Display for TemplateErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax(m) => write!(f, "does not parse: {m}"),
            Self::Turn(name) => write!(
                f,
                "reads turn.{name}, a per-turn value: a description is rendered once per session and must not change between turns (use pkg.* and session.*)"
            ),
            Self::Stub(name) => write!(
                f,
                "uses {name}, which a description template cannot: a description must be the same bytes for the whole session"
            ),
            Self::Unknown { tier, name, known } => write!(
                f,
                "{tier}.{name} is not a value here ({tier} has: {})",
                if known.is_empty() {
                    "nothing".to_owned()
                } else {
                    known.join(", ")
                }
            ),
            Self::Limit(m) => write!(f, "stopped: {m}"),
            Self::NotText(ty) => write!(
                f,
                "its value is {} {ty}, not text: end with a string expression or assign `description = ...`",
                if ty.starts_with(['a', 'e', 'i', 'o', 'u']) {
                    "an"
                } else {
                    "a"
                }
            ),
            Self::NoValue => write!(
                f,
                "has no value: end it with an expression or assign `description = ...`"
            ),
            Self::Failed(m) => write!(f, "failed: {m}"),
        }
    }
}

/// A template that cannot be rendered: whose it is, where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct TemplateError {
    /// What the template describes: `tool "mcp__git__git_log"`, `server group "git"`, a file.
    pub owner: String,
    /// `description template`, or `script` for a script tool's definition or run.
    pub what: &'static str,
    /// The line (from 1), when known.
    pub line: Option<u32>,
    /// The column (from 1, in characters) within [`TemplateError::line`], when known: where
    /// Starlark's parser stopped, for a source that does not parse.
    pub column: Option<u32>,
    /// What went wrong.
    pub kind: TemplateErrorKind,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.owner, self.what)?;
        if let Some(l) = self.line {
            write!(f, " line {l}")?;
            if let Some(c) = self.column {
                write!(f, ", column {c}")?;
            }
        }
        // A tool's script is no description: what it may not read is said in its terms.
        match (&self.kind, self.what) {
            (TemplateErrorKind::Turn(name), "script") => write!(
                f,
                ": reads turn.{name}, a per-turn value, which a tool's script cannot read: a tool is defined once and called from any turn (take what a call needs as a param; pkg.* and session.* hold the fixed values)"
            ),
            (TemplateErrorKind::Stub(name), "script") => {
                let instead = if SCRIPT_REAL.contains(&name.as_str()) {
                    format!("call {name} inside run, which has it")
                } else {
                    format!("a script has no {name}")
                };
                write!(
                    f,
                    ": uses {name}, which a script's top level cannot: it is read once, when the tool is defined, and is as pure as a description template ({instead})"
                )
            }
            _ => write!(f, ": {}", self.kind),
        }
    }
}

impl TemplateError {
    /// Whether the template made an access `check-template` refuses: it read a per-turn value,
    /// used a stub, or named a `pkg` or `session` value that is not there.
    pub fn is_refused_access(&self) -> bool {
        matches!(
            self.kind,
            TemplateErrorKind::Turn(_)
                | TemplateErrorKind::Stub(_)
                | TemplateErrorKind::Unknown { .. }
        )
    }
}

fn dialect() -> Dialect {
    Dialect {
        enable_def: true,
        enable_lambda: true,
        enable_load: false,
        enable_keyword_only_arguments: true,
        enable_positional_only_arguments: false,
        enable_types: DialectTypes::Disable,
        enable_top_level_stmt: true,
        enable_f_strings: false,
        ..Dialect::Standard
    }
}

/// The template environment: [`CORE`] copied from the standard library, the stubs and the
/// builtins, built once.
fn globals() -> &'static Globals {
    static GLOBALS: OnceLock<Globals> = OnceLock::new();
    GLOBALS.get_or_init(|| environment(|_| {}))
}

/// A line or column (from 1) as [`TemplateError`] holds it. Sources are under 4 GiB, so it
/// fits; `u32`, as Starlark's own positions are, keeps the error small.
fn position(n: usize) -> Option<u32> {
    u32::try_from(n).ok()
}

fn line_of(e: &starlark::Error) -> Option<u32> {
    if let Some(span) = e.span() {
        return position(span.resolve_span().begin.line + 1);
    }
    e.call_stack()
        .clone()
        .into_frames()
        .iter()
        .rev()
        .find_map(|f| f.location.as_ref())
        .and_then(|s| position(s.resolve_span().begin.line + 1))
}

fn parse(source: &str, owner: &str) -> Result<AstModule, TemplateError> {
    // Refused before Starlark sees it: its parser recurses per level, and a stack overflow
    // aborts the process.
    let refused = |line: usize, message: String| TemplateError {
        owner: owner.to_owned(),
        what: "description template",
        line: position(line),
        column: None,
        kind: TemplateErrorKind::Syntax(message),
    };
    match nesting::check(source, nesting::MAX_DEPTH) {
        Ok(()) => {}
        Err(nesting::Refusal::TooDeep(line)) => {
            return Err(refused(
                line,
                format!(
                    "it nests more than {} levels deep (brackets, operators and blocks within one another); split it into smaller expressions or functions",
                    nesting::MAX_DEPTH
                ),
            ));
        }
        Err(nesting::Refusal::FString(line)) => {
            return Err(refused(
                line,
                "f-strings (f\"...\") are not supported; build the text with + or %, as in \"%s: %d\" % (name, count)".to_owned(),
            ));
        }
    }
    AstModule::parse(FILE, source.to_owned(), &dialect()).map_err(|e| {
        let at = e.span().map(|span| span.resolve_span().begin);
        TemplateError {
            owner: owner.to_owned(),
            what: "description template",
            line: at.and_then(|p| position(p.line + 1)),
            column: at.and_then(|p| position(p.column + 1)),
            kind: TemplateErrorKind::Syntax(e.without_diagnostic().to_string()),
        }
    })
}

/// The stack a thread needs to parse, evaluate and drop a source of `len` bytes however it
/// nests: each byte can open a level, and a level costs Starlark's parser and compiler up to
/// about 2.3 KiB of stack (25 KiB unoptimised), measured. At most 1 GiB (reserved address space;
/// only the pages a parse touches are used), which covers sources up to 256 KiB (32 KiB
/// unoptimised); a larger one relies on the nesting bound alone.
fn stack_for(len: usize) -> usize {
    const BASE: usize = if cfg!(debug_assertions) {
        16 << 20
    } else {
        2 << 20
    };
    const PER_BYTE: usize = if cfg!(debug_assertions) {
        32 << 10
    } else {
        4 << 10
    };
    const MOST: usize = 1 << 30;
    BASE.saturating_add(len.saturating_mul(PER_BYTE)).min(MOST)
}

/// Bytes of Starlark heap one level of a value takes at the least: every heap value has an
/// 8-byte header, and the smallest container that holds another value (a one-element tuple)
/// adds its length and the value; a list adds an array of its own, a dict its map.
const LEVEL_HEAP_BYTES: usize = 24;

/// Stack one level of a value takes at most in the operations that recurse through a value:
/// `repr` and `str` (and `%`, `format`, error messages), hashing a tuple, `==` and `<`, and the
/// garbage collector's copy. Measured worst, a two-element tuple's `repr`: about 430 bytes
/// (release) and 2 KiB (unoptimised); about twice that here.
const LEVEL_STACK_BYTES: usize = if cfg!(debug_assertions) {
    4 << 10
} else {
    1 << 10
};

/// The deepest value an evaluation under `limits` of `source` can build. A value `d` levels
/// deep holds `d` containers one within another, each on the heap, and the heap is checked
/// before every statement and every 1,000 steps: so at a check at most
/// `max_heap_bytes / LEVEL_HEAP_BYTES` levels are held, and until the next one the value can
/// grow only within one statement by at most 1,000 steps and the returns of at most
/// `max_call_depth` calls, each of which builds at most two levels per bracket of the source
/// (a display `[x]`, `(x,)`, `{k: x}`, or a call such as `zip(x)` or `l.append(x)`).
fn value_levels(source: &str, limits: Limits) -> usize {
    let brackets = source
        .bytes()
        .filter(|b| matches!(b, b'[' | b'(' | b'{'))
        .count();
    let between_checks = 1000usize.saturating_add(limits.max_call_depth);
    (limits.max_heap_bytes / LEVEL_HEAP_BYTES)
        .saturating_add(brackets.saturating_mul(2).saturating_mul(between_checks))
}

/// The stack a thread needs to parse `source` ([`stack_for`]) and then evaluate it under
/// `limits`, whatever value it builds ([`value_levels`]). Only the pages a run touches are
/// used; the rest is reserved address space.
fn evaluation_stack(source: &str, limits: Limits) -> usize {
    stack_for(source.len())
        .saturating_add(value_levels(source, limits).saturating_mul(LEVEL_STACK_BYTES))
}

/// Runs `job`, which parses `source` (and may evaluate it), on a thread of its own with a stack
/// of `stack` bytes ([`stack_for`] its size to parse it, [`evaluation_stack`] to run it): the
/// nesting bound refuses deep sources before they are parsed, and this makes a source that gets
/// past it, or a value built deep at run time, an error, not a stack overflow that aborts the
/// process (a gateway's every session, a proxy's every conversation).
fn on_deep_stack<T: Send>(
    source: &str,
    owner: &str,
    job: impl FnOnce() -> Result<T, TemplateError> + Send,
) -> Result<T, TemplateError> {
    on_stack(stack_for(source.len()), owner, job)
}

fn on_stack<T: Send>(
    stack: usize,
    owner: &str,
    job: impl FnOnce() -> Result<T, TemplateError> + Send,
) -> Result<T, TemplateError> {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("starlark-parse".into())
            .stack_size(stack)
            .spawn_scoped(scope, job)
            .map_err(|e| TemplateError {
                owner: owner.to_owned(),
                what: "description template",
                line: None,
                column: None,
                kind: TemplateErrorKind::Failed(format!(
                    "cannot start a thread of {} MiB of stack to read it ({e}); try again",
                    stack >> 20
                )),
            })?;
        thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Whether `v` is, or holds (in lists, tuples and dicts, up to 64 levels deep), a float that is
/// NaN or infinite.
fn non_finite(v: Value, depth: usize) -> bool {
    use starlark::values::dict::DictRef;
    use starlark::values::float::StarlarkFloat;
    use starlark::values::list::ListRef;
    use starlark::values::tuple::TupleRef;
    if depth > 64 {
        return false;
    }
    if let Some(f) = v.downcast_ref::<StarlarkFloat>() {
        return !f.0.is_finite();
    }
    if let Some(l) = ListRef::from_value(v) {
        return l.iter().any(|x| non_finite(x, depth + 1));
    }
    if let Some(t) = TupleRef::from_value(v) {
        return t.iter().any(|x| non_finite(x, depth + 1));
    }
    if let Some(d) = DictRef::from_value(v) {
        return d
            .iter()
            .any(|(k, x)| non_finite(k, depth + 1) || non_finite(x, depth + 1));
    }
    false
}

/// The deepest a script's result (or a script tool's `schema`) may nest: lists, tuples and
/// dicts within one another. Past it the value is refused before it is written as JSON, as
/// writing, reading and checking JSON recurse once per level.
pub const MAX_VALUE_DEPTH: usize = 100;

/// How deep `v` nests (a list, tuple or dict is one level more than the deepest thing it
/// holds; anything else is 0), or `None` when deeper than `max`. Each value is walked once
/// (`seen` keeps the depths found), and the walk never goes more than `max + 1` levels down, so
/// neither a value shared many times over nor a cycle (which is deeper than any `max`) makes it
/// costly.
fn value_depth<'v>(
    v: Value<'v>,
    max: usize,
    seen: &mut std::collections::HashMap<starlark::values::ValueIdentity<'v>, usize>,
) -> Option<usize> {
    use starlark::values::dict::DictRef;
    use starlark::values::list::ListRef;
    use starlark::values::tuple::TupleRef;
    let children: Vec<Value<'v>> = if let Some(l) = ListRef::from_value(v) {
        l.iter().collect()
    } else if let Some(t) = TupleRef::from_value(v) {
        t.iter().collect()
    } else if let Some(d) = DictRef::from_value(v) {
        d.iter().flat_map(|(k, x)| [k, x]).collect()
    } else {
        return Some(0);
    };
    if let Some(&d) = seen.get(&v.identity()) {
        return (d <= max).then_some(d);
    }
    let inner = max.checked_sub(1)?;
    let mut deepest = 0;
    for c in children {
        deepest = deepest.max(value_depth(c, inner, seen)?);
    }
    seen.insert(v.identity(), deepest + 1);
    Some(deepest + 1)
}

/// `v` as JSON, for a value no deeper than [`MAX_VALUE_DEPTH`] ([`too_deep`]): lists, tuples
/// and dicts are walked here, a frame per level, and only what they hold is handed to Starlark's
/// own conversion, which takes tens of KiB of stack per level.
fn json_of(v: Value) -> anyhow::Result<Json> {
    use starlark::values::dict::DictRef;
    use starlark::values::list::ListRef;
    use starlark::values::tuple::TupleRef;
    if let Some(l) = ListRef::from_value(v) {
        return l
            .iter()
            .map(json_of)
            .collect::<anyhow::Result<_>>()
            .map(Json::Array);
    }
    if let Some(t) = TupleRef::from_value(v) {
        return t
            .iter()
            .map(json_of)
            .collect::<anyhow::Result<_>>()
            .map(Json::Array);
    }
    if let Some(d) = DictRef::from_value(v) {
        let mut out = serde_json::Map::new();
        for (k, x) in d.iter() {
            let Some(key) = k.unpack_str() else {
                anyhow::bail!("key must be a string");
            };
            out.insert(key.to_owned(), json_of(x)?);
        }
        return Ok(Json::Object(out));
    }
    v.to_json_value()
}

/// Whether `v` nests deeper than [`MAX_VALUE_DEPTH`].
fn too_deep(v: Value) -> bool {
    value_depth(v, MAX_VALUE_DEPTH, &mut std::collections::HashMap::new()).is_none()
}

/// Every name `ast` binds: function names and parameters, assignment, `for` and comprehension
/// variables, lambda parameters.
fn bound_names(ast: &AstModule) -> std::collections::BTreeSet<String> {
    use starlark::syntax::ast::{AstStmt, ClauseP, Stmt};
    fn stmt(s: &AstStmt, out: &mut std::collections::BTreeSet<String>) {
        match &s.node {
            Stmt::Def(d) => {
                out.insert(d.name.node.ident.clone());
                for p in &d.params {
                    if let Some(id) = p.node.ident() {
                        out.insert(id.node.ident.clone());
                    }
                }
            }
            Stmt::Assign(a) => a.lhs.visit_lvalue(|id| {
                out.insert(id.node.ident.clone());
            }),
            Stmt::AssignModify(lhs, _, _) => lhs.visit_lvalue(|id| {
                out.insert(id.node.ident.clone());
            }),
            Stmt::For(f) => f.var.visit_lvalue(|id| {
                out.insert(id.node.ident.clone());
            }),
            _ => {}
        }
        s.visit_stmt(|c| stmt(c, out));
    }
    fn expr(e: &AstExpr, out: &mut std::collections::BTreeSet<String>) {
        let clauses = match &e.node {
            Expr::Lambda(l) => {
                for p in &l.params {
                    if let Some(id) = p.node.ident() {
                        out.insert(id.node.ident.clone());
                    }
                }
                None
            }
            Expr::ListComprehension(_, first, rest) => Some((first, rest)),
            Expr::DictComprehension(_, first, rest) => Some((first, rest)),
            _ => None,
        };
        if let Some((first, rest)) = clauses {
            first.var.visit_lvalue(|id| {
                out.insert(id.node.ident.clone());
            });
            for c in rest {
                if let ClauseP::For(f) = c {
                    f.var.visit_lvalue(|id| {
                        out.insert(id.node.ident.clone());
                    });
                }
            }
        }
        e.visit_expr(|c| expr(c, out));
    }
    let mut out = std::collections::BTreeSet::new();
    stmt(ast.statement(), &mut out);
    ast.statement().visit_expr(|e| expr(e, &mut out));
    out
}

/// Checks that `source` parses; `owner` names it in the error. The source is read on a thread
/// of its own, so a source of any nesting is an error at worst.
pub fn check_syntax(source: &str, owner: &str) -> Result<(), TemplateError> {
    on_deep_stack(source, owner, || parse(source, owner).map(drop))
}

/// Whether `source` parses and defines a function `name` at its top level (not in a comment, a
/// string or another function) that takes `arguments` positional arguments (a `*args`
/// parameter takes any number).
pub fn defines_function(source: &str, name: &str, arguments: usize) -> bool {
    on_deep_stack(source, "", || Ok(defines(source, name, arguments))).unwrap_or(false)
}

fn defines(source: &str, name: &str, arguments: usize) -> bool {
    parse(source, "").is_ok_and(|ast| defines_in(&ast, name, arguments))
}

fn defines_in(ast: &AstModule, name: &str, arguments: usize) -> bool {
    use starlark::syntax::ast::Stmt;
    top_level(ast).any(
        |s| matches!(&s.node, Stmt::Def(d) if d.name.node.ident == name && takes(d, arguments)),
    )
}

/// The module's top-level statements, in order.
fn top_level(ast: &AstModule) -> impl DoubleEndedIterator<Item = &starlark::syntax::ast::AstStmt> {
    use starlark::syntax::ast::Stmt;
    let top = ast.statement();
    let all = match &top.node {
        Stmt::Statements(all) => all.as_slice(),
        _ => std::slice::from_ref(top),
    };
    all.iter()
}

/// Whether the function `d` can be called with `n` positional arguments.
fn takes(d: &starlark::syntax::ast::DefP<starlark::syntax::ast::AstNoPayload>, n: usize) -> bool {
    let s = signature(d);
    s.keyword.is_none() && s.required <= n && (s.star || n <= s.positional)
}

/// What the parameters of `d` ask of a call. After `*` or `*args` a parameter is keyword-only.
fn signature(d: &starlark::syntax::ast::DefP<starlark::syntax::ast::AstNoPayload>) -> Signature {
    use starlark::syntax::ast::ParameterP;
    let mut s = Signature {
        positional: 0,
        required: 0,
        star: false,
        keyword: None,
    };
    let mut keyword_only = false;
    for p in &d.params {
        match &p.node {
            ParameterP::Normal(id, _, default) if keyword_only => {
                if default.is_none() && s.keyword.is_none() {
                    s.keyword = Some(id.node.ident.clone());
                }
            }
            ParameterP::Normal(_, _, default) => {
                s.positional += 1;
                s.required += usize::from(default.is_none());
            }
            ParameterP::Args(_, _) => {
                s.star = true;
                keyword_only = true;
            }
            ParameterP::NoArgs => keyword_only = true,
            ParameterP::Slash | ParameterP::KwArgs(_, _) => {}
        }
    }
    s
}

/// A script tool's file whose top-level `def run` cannot be called with the params alone: the
/// error a definition of it gives, at the line of that `def`. `None` for a source that parses
/// no such `def` (a description template, or a script whose `run` takes one argument); a
/// `run` bound otherwise (`run = lambda p: ...`) is judged when the script is defined.
pub fn run_refusal(source: &str, owner: &str) -> Option<TemplateError> {
    on_deep_stack(source, owner, || {
        use starlark::syntax::ast::Stmt;
        let Ok(ast) = parse(source, owner) else {
            return Ok(None);
        };
        let last = top_level(&ast).rev().find_map(|s| match &s.node {
            Stmt::Def(d) if d.name.node.ident == "run" => Some((s, d)),
            _ => None,
        });
        Ok(last.and_then(|(s, d)| {
            signature(d).one_argument().err().map(|m| TemplateError {
                owner: owner.to_owned(),
                what: "script",
                line: position(ast.file_span(s.span).resolve_span().begin.line + 1),
                column: None,
                kind: TemplateErrorKind::Failed(m),
            })
        }))
    })
    .ok()
    .flatten()
}

/// Renders `source` for `owner` with the package values `pkg` and the session's values, on a
/// thread of its own (see [`check_syntax`]).
pub fn render(
    source: &str,
    owner: &str,
    pkg: &BTreeMap<String, Json>,
    session: &SessionValues,
) -> Result<String, TemplateError> {
    let stack = evaluation_stack(source, Limits::TEMPLATE);
    on_stack(stack, owner, || {
        match evaluate(
            source,
            owner,
            globals(),
            pkg,
            session,
            Limits::TEMPLATE,
            Job::Describe,
        )? {
            Output::Text(t) => Ok(t),
            _ => unreachable!("a description job gives text"),
        }
    })
}

/// Bounds on one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Function calls and loop iterations (Starlark's ticks).
    pub max_steps: u64,
    /// Bytes of Starlark heap.
    pub max_heap_bytes: usize,
    /// Nested function calls.
    pub max_call_depth: usize,
}

impl Limits {
    /// The limits of a description template.
    pub const TEMPLATE: Limits = Limits {
        max_steps: MAX_TICKS,
        max_heap_bytes: MAX_HEAP_BYTES,
        max_call_depth: MAX_CALL_DEPTH,
    };

    fn message(&self, e: &starlark::Error) -> Option<String> {
        if matches!(e.kind(), starlark::ErrorKind::StackOverflow(_)) {
            return Some(format!(
                "the call-depth limit of {} nested calls was reached",
                self.max_call_depth
            ));
        }
        let m = e.without_diagnostic().to_string().to_ascii_lowercase();
        if m.contains("ticks has been exceeded") {
            Some(format!(
                "the CPU-step limit of {} function calls and loop iterations was reached",
                self.max_steps
            ))
        } else if m.contains("heap memory limit") {
            Some(format!(
                "the memory limit of {} bytes of Starlark heap was reached",
                self.max_heap_bytes
            ))
        } else {
            None
        }
    }
}

/// Most nested calls of one evaluation.
pub const MAX_CALL_DEPTH: usize = 200;

/// What a script tool's file defines, read in the template environment.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptDefinition {
    /// Its `description`, rendered with the values given.
    pub description: String,
    /// Its `schema`: a JSON Schema object.
    pub schema: serde_json::Map<String, Json>,
}

/// Reads a script tool's definition: the file is evaluated in the template environment (so its
/// top level is as pure as a description template) and must set `description` (text), `schema`
/// (a dict, a JSON Schema of an object) and `run` (a function of one argument, called only when
/// the tool runs, in the environment [`run_script`] is given). It runs on the calling thread,
/// as [`run_script`] does: a runner process of its own is the caller.
pub fn script_definition(
    source: &str,
    owner: &str,
    pkg: &BTreeMap<String, Json>,
    session: &SessionValues,
) -> Result<ScriptDefinition, TemplateError> {
    match evaluate(
        source,
        owner,
        globals(),
        pkg,
        session,
        Limits::TEMPLATE,
        Job::Define,
    )? {
        Output::Definition(d) => Ok(d),
        _ => unreachable!("a definition job gives a definition"),
    }
}

/// Reads a script tool's file as a runner reads it when the scripts server defines the tool:
/// [`script_definition`] once to find the schema, then again with `pkg.params` and
/// `pkg.required` taken from it (the description may read them); on a thread of its own whose
/// stack holds the deepest value the file can build (`evaluation_stack`), for a caller with no
/// runner process around the read (`toolshelf check-template`).
pub fn script_file_definition(
    source: &str,
    owner: &str,
    pkg: &BTreeMap<String, Json>,
    session: &SessionValues,
) -> Result<ScriptDefinition, TemplateError> {
    let stack = evaluation_stack(source, Limits::TEMPLATE);
    on_stack(stack, owner, || {
        let first = script_definition(source, owner, pkg, session)?;
        let mut pkg = pkg.clone();
        for (key, field) in [("params", "properties"), ("required", "required")] {
            pkg.insert(
                key.to_owned(),
                Json::from(schema_names(&first.schema, field)),
            );
        }
        script_definition(source, owner, &pkg, session)
    })
    .map_err(|e| TemplateError {
        what: "script",
        ..e
    })
}

/// Reads the top level of a script whose description and schema come from elsewhere (a tool the
/// model defines with `tool_define`): it is evaluated as [`script_definition`] evaluates a script
/// tool's file, in the template environment, so a top level that reads `turn`, uses a stub
/// (`time.now()`), fails or reaches a limit is refused as a script tool's would be; and it must
/// bind `run` to a function of one argument. Nothing else is required of it. It runs on the
/// calling thread, as [`script_definition`] does.
pub fn script_top_level(
    source: &str,
    owner: &str,
    pkg: &BTreeMap<String, Json>,
    session: &SessionValues,
) -> Result<(), TemplateError> {
    match evaluate(
        source,
        owner,
        globals(),
        pkg,
        session,
        Limits::TEMPLATE,
        Job::TopLevel,
    )? {
        Output::TopLevel => Ok(()),
        _ => unreachable!("a top-level job gives no value"),
    }
}

/// [`script_top_level`] on a thread of its own whose stack holds the deepest value the top level
/// can build (`evaluation_stack`), for a caller with no process of its own around the read
/// (`toolshelf replay`): a value nested deep is an error or is read, never a stack overflow.
pub fn script_top_level_on_own_stack(
    source: &str,
    owner: &str,
    pkg: &BTreeMap<String, Json>,
    session: &SessionValues,
) -> Result<(), TemplateError> {
    let stack = evaluation_stack(source, Limits::TEMPLATE);
    on_stack(stack, owner, || {
        script_top_level(source, owner, pkg, session)
    })
    .map_err(|e| TemplateError {
        what: "script",
        ..e
    })
}

/// Runs a script tool: evaluates `source` in `globals` (see [`environment`]) and calls its
/// `run(params)`, within `limits`. The result is `run`'s value as JSON (a string stays a
/// string). Core does no I/O itself: whatever `globals` binds (a clock, an HTTP client) is the
/// caller's.
pub fn run_script(
    source: &str,
    owner: &str,
    globals: &Globals,
    pkg: &BTreeMap<String, Json>,
    session: &SessionValues,
    params: &Json,
    limits: Limits,
) -> Result<Json, TemplateError> {
    match evaluate(
        source,
        owner,
        globals,
        pkg,
        session,
        limits,
        Job::Run(params),
    )? {
        Output::Result(v) => Ok(v),
        _ => unreachable!("a run job gives a result"),
    }
}

/// The template environment with `extend` applied last, so it can rebind stub names (`time`,
/// `random`, `http`) to real functions for running scripts.
pub fn environment(extend: impl FnOnce(&mut GlobalsBuilder)) -> Globals {
    let standard = Globals::standard();
    let mut b = GlobalsBuilder::new();
    b.frozen_heap().add_reference(standard.heap());
    for (name, value) in standard.iter() {
        if CORE.contains(&name) {
            b.set(name, value);
        }
    }
    builtins::stubs(&mut b);
    builtins::pure(&mut b);
    extend(&mut b);
    b.build()
}

enum Job<'a> {
    Describe,
    Define,
    TopLevel,
    Run(&'a Json),
}

enum Output {
    Text(String),
    Definition(ScriptDefinition),
    TopLevel,
    Result(Json),
}

fn text_value(value: Value) -> Result<String, TemplateErrorKind> {
    if let Some(s) = value.unpack_str() {
        Ok(s.to_owned())
    } else if let Some(r) = value.downcast_ref::<Raw>() {
        Ok(r.0.clone())
    } else if value.is_none() {
        Err(TemplateErrorKind::NoValue)
    } else {
        Err(TemplateErrorKind::NotText(value.get_type().to_owned()))
    }
}

fn definition<'v>(
    module: &Module<'v>,
    last: Value<'v>,
) -> Result<ScriptDefinition, TemplateErrorKind> {
    let description = text_value(module.get("description").unwrap_or(last))?;
    let bad = |m: String| TemplateErrorKind::Failed(m);
    let schema = match module.get("schema") {
        None => {
            return Err(bad(
                "a script must set `schema = {...}` (a JSON Schema of its params)".into(),
            ));
        }
        // JSON has no NaN or infinity; serde would write null, silently.
        Some(v) if too_deep(v) => {
            return Err(bad(format!(
                "`schema` nests more than {MAX_VALUE_DEPTH} levels deep (lists and dicts within one another), the most a schema may"
            )));
        }
        Some(v) if non_finite(v, 0) => {
            return Err(bad(
                "`schema` holds a float that is NaN or infinite, which JSON cannot hold".into(),
            ));
        }
        Some(v) => json_of(v).map_err(|e| bad(format!("`schema` is not JSON: {e}")))?,
    };
    let Json::Object(mut schema) = schema else {
        return Err(bad("`schema` must be a dict (a JSON Schema object)".into()));
    };
    match schema.get("type") {
        None => {
            schema.insert("type".into(), Json::String("object".into()));
        }
        Some(Json::String(t)) if t == "object" => {}
        Some(other) => {
            return Err(bad(format!(
                "`schema` must describe an object (\"type\": \"object\"), found \"type\": {other}"
            )));
        }
    }
    Ok(ScriptDefinition {
        description,
        schema,
    })
}

/// Whether `run`, what a script's top level bound to the name (at the line `run_at`), is a
/// function that can take the params alone; if not, the refusal.
fn callable_run(
    run: Option<Value>,
    run_at: Option<u32>,
) -> Result<(), (Option<u32>, TemplateErrorKind)> {
    let failed = |line, m: String| Err((line, TemplateErrorKind::Failed(m)));
    match run {
        Some(f) if f.get_type() == "function" => one_argument(f).or_else(|m| failed(run_at, m)),
        Some(other) => {
            let ty = other.get_type();
            let a = if ty.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            };
            failed(
                run_at,
                format!(
                    "`run` is {a} {ty}, not a function: a script must define `def run(params): ...` and not bind `run` to anything else"
                ),
            )
        }
        None => failed(None, "a script must define `def run(params): ...`".into()),
    }
}

/// Whether the function `run` can be called as a script's `run` is, with the params as its one
/// positional argument; if not, the refusal saying what it takes instead. Read from the
/// function's parameters, so a `lambda` or a builtin bound to `run` is judged as a `def` is.
fn one_argument(run: Value) -> Result<(), String> {
    use starlark::docs::{DocItem, DocMember};
    let DocItem::Member(DocMember::Function(f)) = run.documentation() else {
        return Ok(());
    };
    let p = &f.params;
    let signature = Signature {
        positional: p.pos_only.len() + p.pos_or_named.len(),
        required: p
            .pos_only
            .iter()
            .chain(&p.pos_or_named)
            .filter(|d| d.default_value.is_none())
            .count(),
        star: p.args.is_some(),
        keyword: p
            .named_only
            .iter()
            .find(|d| d.default_value.is_none())
            .map(|d| d.name.clone()),
    };
    signature.one_argument()
}

/// What a function's parameters ask of a call.
struct Signature {
    /// Parameters that may be given by position.
    positional: usize,
    /// Those of them without a default.
    required: usize,
    /// Whether it has `*args`.
    star: bool,
    /// A keyword-only parameter without a default, which a call by position never gives.
    keyword: Option<String>,
}

impl Signature {
    /// Whether one positional argument is a call; if not, the refusal saying what it takes.
    fn one_argument(&self) -> Result<(), String> {
        let takes = match &self.keyword {
            Some(k) => format!("needs the keyword-only argument `{k}`"),
            None if self.required > 1 => format!("needs {} arguments", self.required),
            None if self.positional == 0 && !self.star => "takes no argument".to_owned(),
            None => return Ok(()),
        };
        Err(format!(
            "a script must define `def run(params): ...`, a function of one argument; its `run` {takes}"
        ))
    }
}

/// The line of the last top-level statement that binds `run` (`def run` or `run = ...`): where
/// a `run` that cannot be called is reported.
fn run_line(ast: &AstModule) -> Option<u32> {
    use starlark::syntax::ast::{AssignTargetP, Stmt};
    top_level(ast)
        .rfind(|s| match &s.node {
            Stmt::Def(d) => d.name.node.ident == "run",
            Stmt::Assign(a) => {
                matches!(&a.lhs.node, AssignTargetP::Identifier(id) if id.node.ident == "run")
            }
            _ => false,
        })
        .and_then(|s| position(ast.file_span(s.span).resolve_span().begin.line + 1))
}

fn evaluate(
    source: &str,
    owner: &str,
    globals: &Globals,
    pkg: &BTreeMap<String, Json>,
    session: &SessionValues,
    limits: Limits,
    job: Job,
) -> Result<Output, TemplateError> {
    let what = match job {
        Job::Describe => "description template",
        Job::Define | Job::TopLevel | Job::Run(_) => "script",
    };
    let ast = parse(source, owner).map_err(|e| TemplateError { what, ..e })?;
    // Where a `run` that cannot take the params is reported.
    let run_at = run_line(&ast);
    let err = |line: Option<u32>, kind: TemplateErrorKind| TemplateError {
        owner: owner.to_owned(),
        what,
        line,
        column: None,
        kind,
    };
    builtins::forget_refusals();
    // Starlark panics on some runaway operations between its limit checks (a string doubled
    // past `usize`: "len overflow"); caught here, the error names the template and the rest of
    // the render (the other tools, the session) goes on.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Module::with_temp_heap(|module| {
            let heap = module.heap();
            module.set("pkg", heap.alloc(Namespace::new(Tier::Pkg, pkg.clone())));
            module.set(
                "session",
                heap.alloc(Namespace::new(Tier::Session, session.values())),
            );
            module.set(
                "turn",
                heap.alloc(Namespace::new(Tier::Turn, BTreeMap::new())),
            );
            let mut eval = Evaluator::new(&module);
            eval.set_max_tick_count(limits.max_steps)
                .map_err(starlark::Error::new_other)?;
            eval.set_max_heap_size(limits.max_heap_bytes)
                .map_err(starlark::Error::new_other)?;
            eval.set_max_callstack_size(limits.max_call_depth)
                .map_err(starlark::Error::new_other)?;
            eval.before_stmt_for_dap(starlark::eval::BeforeStmtFunc::from_dyn(Box::new(
                HeapGuard(limits.max_heap_bytes),
            )));
            let last = eval.eval_module(ast, globals)?;
            Ok(match job {
                Job::Describe => text_value(module.get("description").unwrap_or(last))
                    .map(Output::Text)
                    .map_err(|k| (None, k)),
                Job::Define => definition(&module, last)
                    .map_err(|k| (None, k))
                    .and_then(|d| {
                        callable_run(module.get("run"), run_at).map(|()| Output::Definition(d))
                    }),
                // `tool_define` gives the description and schema; the file it keeps puts them
                // above the script, where a top-level binding of either would replace them.
                Job::TopLevel => match ["description", "schema"]
                    .into_iter()
                    .find(|name| module.get(name).is_some())
                {
                    Some(name) => Err((
                        None,
                        TemplateErrorKind::Failed(format!(
                            "the script binds `{name}` at its top level, which tool_define's own `{name}` argument gives; rename that variable"
                        )),
                    )),
                    None => callable_run(module.get("run"), run_at).map(|()| Output::TopLevel),
                },
                Job::Run(params) => match module.get("run") {
                    Some(run) => {
                        if let Err(m) = one_argument(run) {
                            return Ok(Err((run_at, TemplateErrorKind::Failed(m))));
                        }
                        let arg = heap.alloc(params.clone());
                        let value = eval.eval_function(run, &[arg], &[])?;
                        Ok(Output::Result(if let Ok(t) = text_value(value) {
                            Json::String(t)
                        } else if too_deep(value) {
                            return Ok(Err((
                                None,
                                TemplateErrorKind::Limit(format!(
                                    "run returned a value that nests more than {MAX_VALUE_DEPTH} levels deep (lists and dicts within one another), the most a result may; return a flatter value"
                                )),
                            )));
                        } else if non_finite(value, 0) {
                            // JSON has no NaN or infinity; serde would write null, silently.
                            return Ok(Err((
                                None,
                                TemplateErrorKind::Failed(
                                    "run returned a float that is NaN or infinite, which JSON cannot hold".into(),
                                ),
                            )));
                        } else {
                            json_of(value).map_err(|e| {
                                starlark::Error::new_other(anyhow::anyhow!(
                                    "run returned a {} that is not JSON: {e}",
                                    value.get_type()
                                ))
                            })?
                        }))
                    }
                    None => Err((
                        None,
                        TemplateErrorKind::Failed(
                            "a script must define `def run(params): ...`".into(),
                        ),
                    )),
                },
            })
        })
    }));
    type Outcome = Result<Result<Output, (Option<u32>, TemplateErrorKind)>, starlark::Error>;
    let outcome: Outcome = match caught {
        Ok(outcome) => outcome,
        Err(panic) => {
            let why = crate::echo::panic_text(panic.as_ref(), "no message");
            Ok(Err((
                None,
                TemplateErrorKind::Limit(format!(
                    "Starlark gave up inside one operation ({}); the limits are checked between operations, so keep strings and lists from growing without bound",
                    crate::echo::echo(&why)
                )),
            )))
        }
    };
    match outcome {
        Ok(Ok(out)) => Ok(out),
        Ok(Err((line, kind))) => Err(err(line, kind)),
        Err(e) => {
            let line = line_of(&e);
            let kind = match builtins::refusal(&e) {
                Some(Fault::Turn(name)) => TemplateErrorKind::Turn(name),
                Some(Fault::Stub(name)) => TemplateErrorKind::Stub(name.to_owned()),
                Some(Fault::Unknown { tier, name, known }) => TemplateErrorKind::Unknown {
                    tier: tier.name(),
                    name,
                    known,
                },
                None => match limits.message(&e) {
                    Some(m) => TemplateErrorKind::Limit(m),
                    None => TemplateErrorKind::Failed(e.without_diagnostic().to_string()),
                },
            };
            Err(err(line, kind))
        }
    }
}

/// Checks the heap before every statement. Starlark checks its own heap limit only every 1,000
/// steps, and a short loop doubling a string reaches gigabytes in fewer.
struct HeapGuard(usize);

impl<'e> starlark::eval::BeforeStmtFuncDyn<'e> for HeapGuard {
    fn call<'v>(
        &mut self,
        _span: starlark::codemap::FileSpanRef,
        _continued: bool,
        eval: &mut Evaluator<'v, '_, 'e>,
    ) -> starlark::Result<()> {
        if eval.heap().allocated_bytes() > self.0 {
            return Err(starlark::Error::new_other(anyhow::anyhow!(
                "the heap memory limit was exceeded"
            )));
        }
        Ok(())
    }
}

/// One forbidden or unknown access found in a template's source, without running it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// The line, from 1.
    pub line: usize,
    /// `turn`, `stub` or `unknown`.
    pub kind: &'static str,
    /// What is accessed: `turn.number`, `time`, `pkg.team`.
    pub access: String,
    /// The message, as a render would give it.
    pub message: String,
}

/// Every access in `source` that a render would refuse, in source order: each `turn.NAME`, each
/// use of a stub, and each `pkg.NAME` or `session.NAME` that `pkg` and `session` do not hold. A
/// render stops at the first; this finds them all, including those on paths the sample values do
/// not take.
pub fn findings(
    source: &str,
    owner: &str,
    pkg: &BTreeMap<String, Json>,
    session: &SessionValues,
) -> Result<Vec<Finding>, TemplateError> {
    on_deep_stack(source, owner, || findings_in(source, owner, pkg, session))
}

fn findings_in(
    source: &str,
    owner: &str,
    pkg: &BTreeMap<String, Json>,
    session: &SessionValues,
) -> Result<Vec<Finding>, TemplateError> {
    let ast = parse(source, owner)?;
    let session = session.values();
    // A stub's name that the template binds itself (a parameter, an assignment, a loop or
    // comprehension variable) is its own value, not the stub, wherever it is read: the check is
    // by name, not by scope.
    let bound = bound_names(&ast);
    // A script tool's file: its functions run with `time`, `random` and `http` made real when
    // `run` calls them, so reading those in the body of a function the top level never calls is
    // no refused access.
    let script = defines_in(&ast, "run", 1);
    let run_time = if script {
        run_time_bodies(&ast)
    } else {
        Vec::new()
    };
    let mut out = Vec::new();
    let mut visit = |e: &AstExpr| {
        let line = ast.file_span(e.span).resolve_span().begin.line + 1;
        let found = match &e.node {
            Expr::Dot(inner, attr) => match &inner.node {
                Expr::Identifier(id) => match id.node.ident.as_str() {
                    "turn" => Some(("turn", TemplateErrorKind::Turn(attr.node.clone()))),
                    ns @ ("pkg" | "session") => {
                        let held = if ns == "pkg" { pkg } else { &session };
                        (!held.contains_key(&attr.node)).then(|| {
                            (
                                "unknown",
                                TemplateErrorKind::Unknown {
                                    tier: if ns == "pkg" { "pkg" } else { "session" },
                                    name: attr.node.clone(),
                                    known: held.keys().cloned().collect(),
                                },
                            )
                        })
                    }
                    _ => None,
                },
                _ => None,
            },
            Expr::Identifier(id)
                if STUBS.contains(&id.node.ident.as_str())
                    && !bound.contains(id.node.ident.as_str())
                    && !(SCRIPT_REAL.contains(&id.node.ident.as_str())
                        && run_time.iter().any(|body| within(e.span, *body))) =>
            {
                Some(("stub", TemplateErrorKind::Stub(id.node.ident.clone())))
            }
            _ => None,
        };
        if let Some((kind, k)) = found {
            let access = match &k {
                TemplateErrorKind::Turn(n) => format!("turn.{n}"),
                TemplateErrorKind::Stub(n) => n.clone(),
                TemplateErrorKind::Unknown { tier, name, .. } => format!("{tier}.{name}"),
                _ => String::new(),
            };
            // A script tool's file is said in a script's terms; a stub its `run` uses as the
            // runner refuses it when the tool is called.
            let message = match &k {
                TemplateErrorKind::Stub(n) if run_time.iter().any(|body| within(e.span, *body)) => {
                    format!(
                        "{owner}: script line {line}: uses {n}, which a script's run cannot: of the outside world it has time, random and http only"
                    )
                }
                _ => TemplateError {
                    owner: owner.to_owned(),
                    what: if script {
                        "script"
                    } else {
                        "description template"
                    },
                    line: position(line),
                    column: None,
                    kind: k,
                }
                .to_string(),
            };
            out.push(Finding {
                line,
                kind,
                access,
                message,
            });
        }
    };
    fn walk<'a>(e: &'a AstExpr, f: &mut impl FnMut(&'a AstExpr)) {
        f(e);
        e.visit_expr(|c| walk(c, f));
    }
    ast.statement().visit_expr(|e| walk(e, &mut visit));
    out.sort_by_key(|f| f.line);
    Ok(out)
}

/// The stubs a script's `run` gets as real functions.
const SCRIPT_REAL: [&str; 3] = ["time", "random", "http"];

/// The bodies of the functions in `ast` that the top level does not run: every function defined
/// outside another one (one nested in it is part of its body) whose name is neither called by the
/// top level (code outside function bodies, a parameter's default included) nor by a function the
/// top level runs. Calls are followed by name: a function the top level reaches otherwise (through
/// an alias, as an argument) is not, and the render still fails on the path it takes.
fn run_time_bodies(ast: &AstModule) -> Vec<Span> {
    use starlark::syntax::ast::{AstStmt, DefP, Stmt};
    type Def = DefP<starlark::syntax::ast::AstNoPayload>;
    fn defs<'a>(s: &'a AstStmt, out: &mut Vec<&'a Def>) {
        match &s.node {
            Stmt::Def(d) => out.push(d),
            _ => s.visit_stmt(|c| defs(c, out)),
        }
    }
    fn calls<'a>(e: &'a AstExpr, out: &mut Vec<(&'a str, Span)>) {
        if let Expr::Call(callee, _) = &e.node
            && let Expr::Identifier(id) = &callee.node
        {
            out.push((id.node.ident.as_str(), e.span));
        }
        e.visit_expr(|c| calls(c, out));
    }
    let mut all = Vec::new();
    defs(ast.statement(), &mut all);
    let mut called = Vec::new();
    ast.statement().visit_expr(|e| calls(e, &mut called));
    let mut pending: Vec<&str> = called
        .iter()
        .filter(|(_, at)| !all.iter().any(|d| within(*at, d.body.span)))
        .map(|(name, _)| *name)
        .collect();
    let mut run = std::collections::BTreeSet::new();
    while let Some(name) = pending.pop() {
        if run.insert(name) {
            for d in all.iter().filter(|d| d.name.node.ident == name) {
                pending.extend(
                    called
                        .iter()
                        .filter(|(_, at)| within(*at, d.body.span))
                        .map(|(name, _)| *name),
                );
            }
        }
    }
    all.into_iter()
        .filter(|d| !run.contains(d.name.node.ident.as_str()))
        .map(|d| d.body.span)
        .collect()
}

/// Whether `inner` lies within `outer`.
fn within(inner: Span, outer: Span) -> bool {
    outer.begin() <= inner.begin() && inner.end() <= outer.end()
}

#[cfg(test)]
mod tests;
