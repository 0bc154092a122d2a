//! Model-authored tools: `tool_define`, with which the model registers a script tool of its own
//! during a session.
//!
//! `tool_define` is a deferred tool like any other (found with `tool_search`, run through
//! `defer_execute`), present only when `[authoring] enabled = true`. What it defines has origin
//! `model`: always deferred (the exposure policy never makes it resident), so the frozen tool list
//! and the conversation before it keep every byte; it is added to the session's catalog, so it is
//! searchable at once; the session tells the model of it in its next change notice. A definition
//! is checked here: the name, the `[authoring]` limits (how many tools, how large a description
//! and a script), the schema (an object schema, read like any catalog tool's) and the script's
//! syntax. Each failure is a refusal whose text names the rule it broke.
//!
//! A defined tool can also be written out as a script-tool file ([`script_file`]): the same
//! format as `[tools.NAME] script`, so an operator promotes a session's tool to every session by
//! pointing a `[tools.NAME]` section at the file.
//!
//! Arguments and schema come from one Rust type, as for the other meta-tools.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::catalog::{Catalog, Resolution, ToolSpec};
use crate::invoke::{Checked, ParamsValidator, Refusal, Violation};

/// The tool's name.
pub const TOOL_DEFINE: &str = "tool_define";

/// The arguments of `tool_define`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DefineArgs {
    /// The new tool's name: a letter, then letters, digits, _ or -; at most 64 characters.
    pub name: String,
    /// What the tool does and when to use it.
    pub description: String,
    /// JSON Schema of the tool's params (an object schema).
    pub schema: Map<String, Value>,
    /// Starlark source defining `def run(params)`.
    pub script: String,
}

/// `tool_define`'s catalog item: a deferred built-in.
pub fn tool_define_item() -> Value {
    json!({
        "name": TOOL_DEFINE,
        "description": "Define a new tool for this session from a Starlark script with `def run(params)`. \
    The tool is deferred: run it with defer_execute once defined.",
        "input_schema": crate::meta::schema_of::<DefineArgs>(),
        "defer_loading": true,
    })
}

/// Why a definition may not say `defer_loading`.
const ALWAYS_DEFERRED: &str = "a tool you define always goes on the shelf (deferred: tool_search finds it, defer_execute runs it), so there is nothing for it to set";

/// Why `defer_loading` beside a definition is refused.
fn defer_loading_beside() -> String {
    format!(
        "\"defer_loading\" is not an argument of tool_define: {ALWAYS_DEFERRED}; define the tool again without it"
    )
}

/// Stage 3 of a `tool_define` call, in place of [`crate::invoke::validate`]: the params against
/// `tool_define`'s schema (`tool` being its catalog index). Its schema allows no other property,
/// so a `defer_loading` beside the definition would be refused as one more unknown property;
/// here its violation says why a defined tool has none instead, and the other params are checked
/// as they are, so one refusal names every fault.
pub fn validate(
    tool: usize,
    validator: &ParamsValidator,
    params: &Map<String, Value>,
) -> Result<(), Refusal> {
    if !params.contains_key("defer_loading") {
        return crate::invoke::validate(tool, validator, params);
    }
    let mut rest = params.clone();
    rest.shift_remove("defer_loading");
    let mut violations = match validator.check(&rest) {
        Checked::Valid => Vec::new(),
        Checked::Invalid(violations) => violations,
        Checked::Broken(error) => return Err(Refusal::SchemaBroken { tool, error }),
    };
    violations.push(Violation {
        pointer: "/defer_loading".into(),
        message: defer_loading_beside(),
    });
    violations.sort_by(|a, b| (&a.pointer, &a.message).cmp(&(&b.pointer, &b.message)));
    Err(Refusal::Invalid { tool, violations })
}

/// What the model reads once `name` is defined.
pub fn defined_text(name: &str) -> String {
    format!(
        "Defined {name} for this session (origin model, deferred). Run it with defer_execute {{\"tool_name\": {name:?}, \"params\": {{...}}}}; tool_search finds it too."
    )
}

/// A tool the model defined: its catalog item (origin `model`) and the script that runs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Authored {
    /// `{name, description, input_schema, origin}`, read like any catalog item.
    pub item: Value,
    /// Starlark source defining `def run(params)`.
    pub script: String,
}

impl Authored {
    /// The tool's name.
    pub fn name(&self) -> &str {
        self.item["name"].as_str().unwrap_or_default()
    }

    /// The `pkg` values its script reads, `vars` (`[template] vars`) last: its name, description
    /// and schema's names.
    pub fn pkg(&self, vars: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
        let mut pkg = crate::template::script_values(
            None,
            self.name(),
            self.item["description"].as_str().unwrap_or_default(),
            self.item["input_schema"].as_object(),
        );
        pkg.extend(vars.iter().map(|(k, v)| (k.clone(), v.clone())));
        pkg
    }

    /// The name its script's top level is read under, in errors.
    pub fn definer(&self) -> String {
        format!("tool_define {:?}", self.name())
    }
}

/// Why `tool`, checked against a session's tools while other definitions of the session were
/// being checked too, cannot be kept now that the session has `authored` (no redefinition): one
/// of them took its name (compared as names resolve, case and separators folded), or the last
/// place `max_tools` allows. `None`: it can be kept.
pub fn defined_meanwhile(
    tool: &Authored,
    authored: &[Authored],
    max_tools: usize,
) -> Option<String> {
    let name = tool.name();
    let folded = crate::name::fold(name);
    if authored
        .iter()
        .any(|t| crate::name::fold(t.name()) == folded)
    {
        return Some(format!(
            "tool_define: a tool named {name:?} was defined by another call of this session while this one was checked; that definition stands (choose another name for this one)"
        ));
    }
    at_max_tools(authored.len(), max_tools).map(|at_limit| format!("tool_define: {at_limit}"))
}

/// Why a session that has defined `defined` tools may define no more, when `max_tools` is reached.
fn at_max_tools(defined: usize, max_tools: usize) -> Option<String> {
    (defined >= max_tools).then(|| {
        let s = if defined == 1 { "" } else { "s" };
        format!("this session has defined {defined} tool{s}, the most [authoring] max_tools allows")
    })
}

/// What the model reads when the top level of the script it gave `tool_define` cannot be read
/// (`error`, which names the tool and line).
pub fn top_level_refusal(error: impl std::fmt::Display) -> String {
    format!("{error}; fix the script and define the tool again")
}

/// Reads the top level of `tool`'s script in this process, as a runner reads it for the proxy
/// and the gateway ([`crate::template::script_top_level`], with the template environment's step
/// and heap bounds, on a thread whose stack holds the deepest value they allow, but with no
/// address-space limit around it): `Err` is what the model reads.
pub fn check_top_level(
    tool: &Authored,
    vars: &BTreeMap<String, Value>,
    session: &crate::template::SessionValues,
) -> Result<(), String> {
    crate::template::script_top_level_on_own_stack(
        &tool.script,
        &tool.definer(),
        &tool.pkg(vars),
        session,
    )
    .map_err(top_level_refusal)
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Checks a definition against `catalog` (the session's, with its `exposure`) and the limits,
/// `defined` being how many tools the model has defined in this session so far. Returns the new
/// tool (its catalog item has `origin: "model"`), or the refusal the model reads.
///
/// A name with `__` is refused: that is the form of MCP servers' tools (`mcp__server__tool`),
/// and a model's tool in a server's namespace would meet the rules written for that server and
/// take the name its real tool comes back with. A name is taken when it is a tool's canonical
/// name (with `__` refused, only a built-in's, which are no secret) or the bare name of a tool
/// the session can see; a hidden tool's bare name is not reported taken, so that `tool_define`
/// cannot tell hidden tools from absent ones.
///
/// A tool the model defined in the session is its own: its name reads as taken here (see
/// [`check_redefinition`] to replace it), and the refusal says so.
pub fn check(
    params: &Map<String, Value>,
    catalog: &Catalog,
    exposure: &crate::policy::Exposure,
    compiled: &crate::compile::Compiled,
    defined: usize,
) -> Result<Authored, String> {
    checked(params, catalog, exposure, compiled, defined, false)
}

/// [`check`], where a definition of a name the model already gave a tool in this session
/// (`authored`) replaces that tool: it is checked like any definition but for the name, and
/// does not count against `max_tools` again. Returns the tool and the position in `authored`
/// of the one it replaces.
pub fn check_redefinition(
    params: &Map<String, Value>,
    catalog: &Catalog,
    exposure: &crate::policy::Exposure,
    compiled: &crate::compile::Compiled,
    authored: &[Authored],
) -> Result<(Authored, Option<usize>), String> {
    let tool = checked(params, catalog, exposure, compiled, authored.len(), true)?;
    let replaces = authored.iter().position(|t| t.name() == tool.name());
    Ok((tool, replaces))
}

fn checked(
    params: &Map<String, Value>,
    catalog: &Catalog,
    exposure: &crate::policy::Exposure,
    compiled: &crate::compile::Compiled,
    defined: usize,
    redefinable: bool,
) -> Result<Authored, String> {
    let limits = &compiled.config().authoring;
    // Refused by name, with why, rather than as one more unknown field.
    if params.contains_key("defer_loading") {
        return Err(format!("tool_define: {}", defer_loading_beside()));
    }
    let args: DefineArgs = serde_json::from_value(Value::Object(params.clone()))
        .map_err(|e| format!("Invalid tool_define call: {e}."))?;
    let name = args.name.trim();
    if !valid_name(name) {
        return Err(format!(
            "tool_define: {name:?} is not a tool name (a letter, then letters, digits, _ or -; at most 64 characters)"
        ));
    }
    if name.contains("__") {
        return Err(format!(
            "tool_define: {name:?}: names with \"__\" are kept for MCP servers' tools (mcp__server__tool); choose a name without it"
        ));
    }
    let visible = |i: usize| exposure.decisions[i].state != crate::policy::State::Hidden;
    let resolved = catalog.resolve(name);
    // The tool of that name the model defined in this session.
    let own = match resolved {
        Resolution::Exact(i) => catalog.tools()[i].origin == crate::catalog::Origin::Model,
        _ => false,
    };
    let taken = match resolved {
        Resolution::Exact(_) => true,
        Resolution::Bare(i) => visible(i),
        Resolution::Ambiguous(all) => all.into_iter().any(visible),
        Resolution::NotFound => false,
    };
    let at_limit = at_max_tools(defined, limits.max_tools);
    if own && !redefinable {
        // Here a defined tool stays for the session, so at the limit no new name helps either.
        if let Some(at_limit) = at_limit {
            return Err(format!(
                "tool_define: {name:?} is the tool you defined in this session, and it cannot be redefined here; nor can another tool be defined: {at_limit}, and a defined tool cannot be removed. Use {name:?} as it is (defer_execute runs it) or the tools you have"
            ));
        }
        return Err(format!(
            "tool_define: {name:?} is the tool you defined in this session, and it cannot be redefined here; define the new version under a new name (such as \"{name}_v2\")"
        ));
    }
    // Compared as names resolve (case and separators folded), so that no defined tool answers
    // to a spelling of a meta-tool.
    if (taken && !own) || crate::name::meta_tool(name).is_some() {
        return Err(format!(
            "tool_define: a tool named {name:?} exists already; choose another name"
        ));
    }
    if let Some(at_limit) = at_limit.filter(|_| !own) {
        return Err(format!("tool_define: {at_limit}"));
    }
    let chars = args.description.chars().count();
    if chars > limits.max_description_chars {
        return Err(format!(
            "tool_define: the description has {chars} characters; [authoring] max_description_chars is {}",
            limits.max_description_chars
        ));
    }
    if args.script.len() > limits.max_script_bytes {
        return Err(format!(
            "tool_define: the script has {} bytes; [authoring] max_script_bytes is {}",
            args.script.len(),
            limits.max_script_bytes
        ));
    }
    crate::template::check_syntax(&args.script, &format!("tool_define {name:?}")).map_err(|e| {
        crate::template::TemplateError {
            what: "script",
            ..e
        }
        .to_string()
    })?;
    if !crate::template::defines_function(&args.script, "run", 1) {
        return Err(format!(
            "tool_define: the script of {name:?} must define `def run(params): ...`, a function of one argument"
        ));
    }
    // A schema may hold any keyword, so this one would otherwise be kept and mean nothing.
    if args.schema.contains_key("defer_loading") {
        return Err(format!(
            "tool_define: the schema of {name:?} has \"defer_loading\", which is no schema keyword: {ALWAYS_DEFERRED}; define the tool again without it"
        ));
    }
    let item = json!({
        "name": name,
        "description": args.description,
        "input_schema": args.schema,
        "origin": "model",
    });
    if let Some(t) = args.schema.get("type").filter(|t| *t != "object") {
        return Err(format!(
            "tool_define: the schema of {name:?} must describe an object (\"type\": \"object\", the params as its \"properties\"), not \"type\": {t}"
        ));
    }
    // Read like any catalog item, so a schema the catalog would refuse is refused here (in
    // the model's words: it wrote `schema`).
    ToolSpec::from_value(item.clone(), "tool_define", "params")
        .map_err(|e| e.to_string().replace("\"input_schema\"", "\"schema\""))?;
    if let Some(r) = remote_ref(&item["input_schema"]) {
        return Err(format!(
            "tool_define: the schema of {name:?} refers to {r:?}: remote $refs are not allowed; a $ref may only point inside the schema (\"#/$defs/...\")"
        ));
    }
    if let Some(p) = crate::invoke::schema_problem(&args.schema) {
        return Err(format!(
            "tool_define: the schema of {name:?} is not a valid JSON Schema ({p}); fix it and define the tool again"
        ));
    }
    // A name the rules or the mode would hide could never be called.
    let probe =
        Catalog::from_value(&json!({"tools": [item]}), "tool_define").map_err(|e| e.to_string())?;
    let hidden = compiled
        .expose(&probe)
        .decisions
        .first()
        .is_none_or(|d| d.state == crate::policy::State::Hidden);
    if hidden {
        return Err(format!(
            "tool_define: a tool named {name:?} could not be called in this session (the configuration's rules do not allow that name); choose another name"
        ));
    }
    Ok(Authored {
        item,
        script: args.script,
    })
}

/// The first `$ref` in `schema` that points outside it.
fn remote_ref(schema: &Value) -> Option<&str> {
    match schema {
        Value::Object(m) => m.iter().find_map(|(k, v)| match (k.as_str(), v) {
            ("$ref", Value::String(r)) if !r.starts_with('#') => Some(r.as_str()),
            _ => remote_ref(v),
        }),
        Value::Array(a) => a.iter().find_map(remote_ref),
        _ => None,
    }
}

/// A defined tool as a script-tool file: a header saying where it came from and how to promote
/// it, `description` and `schema` as Starlark literals, then the model's script as written.
pub fn script_file(tool: &Authored, origin: &str) -> String {
    let (item, name) = (&tool.item, tool.name());
    let mut out = format!(
        "# Written by the model ({origin}) with tool_define.\n\
         # To offer it to every session, review it and add to the configuration:\n\
         #   [tools.{name}]\n\
         #   script = \"PATH OF THIS FILE\"\n"
    );
    out.push_str("description = ");
    out.push_str(&starlark_literal(&item["description"]));
    out.push_str("\nschema = ");
    out.push_str(&starlark_literal(&item["input_schema"]));
    out.push_str("\n\n");
    out.push_str(&tool.script);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// A JSON value as a Starlark literal (`None`, `True`, lists, dicts in their order).
fn starlark_literal(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let mut out = String::with_capacity(s.len() + 2);
            out.push('"');
            for c in s.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '"' => out.push_str("\\\""),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push('"');
            out
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter()
                .map(starlark_literal)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!(
                    "{}: {}",
                    starlark_literal(&Value::String(k.clone())),
                    starlark_literal(v)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The configuration `config` (TOML) with the authoring limits the tests check.
    fn compiled(config: &str) -> crate::compile::Compiled {
        compiled_with(40, config)
    }

    fn compiled_with(description_chars: usize, config: &str) -> crate::compile::Compiled {
        let text = format!(
            "[authoring]\nenabled = true\nmax_tools = 2\nmax_description_chars = {description_chars}\nmax_script_bytes = 200\n{config}"
        );
        crate::compile::Compiled::new(
            crate::config::Config::from_toml_str(&text, "t.toml").expect("config"),
            "t.toml",
            None,
        )
        .expect("compiles")
    }

    fn params(name: &str, description: &str, script: &str) -> Map<String, Value> {
        match json!({"name": name, "description": description,
                     "schema": {"type": "object", "properties": {"text": {"type": "string"}}},
                     "script": script})
        {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_tool_the_model_defined_is_redefined_in_place_or_refused_as_its_own() {
        let compiled = compiled("");
        let ok = "def run(params):\n    return 1\n";
        let empty = Catalog::from_value(&json!([]), "c").expect("catalog");
        let first = check(
            &params("echo", "x", ok),
            &empty,
            &compiled.expose(&empty),
            &compiled,
            0,
        )
        .expect("defines");
        let catalog =
            Catalog::from_value(&json!({"builtin": [first.item.clone()]}), "c").expect("catalog");
        let exposure = compiled.expose(&catalog);
        let e = check(&params("echo", "y", ok), &catalog, &exposure, &compiled, 1)
            .expect_err("not redefinable");
        assert!(
            e.contains("is the tool you defined in this session") && e.contains("echo_v2"),
            "{e}"
        );
        // At max_tools (2 here) a new name would be refused too, so none is suggested.
        let e = check(&params("echo", "y", ok), &catalog, &exposure, &compiled, 2)
            .expect_err("at the limit");
        insta::assert_snapshot!("redefinition_at_max_tools", e);
        // Replaced in place, even at max_tools (2 here, both used).
        let two = [first.clone(), first];
        let (tool, replaces) = check_redefinition(
            &params("echo", "y", ok),
            &catalog,
            &exposure,
            &compiled,
            &two,
        )
        .expect("redefines");
        assert_eq!(
            (tool.item["description"].as_str(), replaces),
            (Some("y"), Some(0))
        );
        // A new name still counts.
        let e = check_redefinition(
            &params("other", "y", ok),
            &catalog,
            &exposure,
            &compiled,
            &two,
        )
        .expect_err("max_tools");
        assert!(e.contains("max_tools"), "{e}");
    }

    #[test]
    fn meta_tool_names_are_taken_in_any_case_and_with_any_separators() {
        let catalog =
            Catalog::from_value(&json!({"builtin": [{"name": "Read"}]}), "c").expect("catalog");
        let compiled = compiled("");
        let exposure = compiled.expose(&catalog);
        let ok = "def run(params):\n    return 1\n";
        for name in [
            "READ",
            "tool_search",
            "Tool_Search",
            "TOOL-SEARCH",
            "toolsearch",
            "defer_execute",
            "DEFER-EXECUTE",
            "Defer_Execute",
        ] {
            let e =
                check(&params(name, "x", ok), &catalog, &exposure, &compiled, 0).expect_err(name);
            assert_eq!(
                e,
                format!("tool_define: a tool named {name:?} exists already; choose another name")
            );
        }
        check(
            &params("tool_search_v2", "x", ok),
            &catalog,
            &exposure,
            &compiled,
            0,
        )
        .expect("another name");
    }

    /// Checked against `tool_define`'s schema, which allows no other property, `defer_loading`
    /// beside a definition is the violation that says why, and the call's other faults are named
    /// with it.
    #[test]
    fn a_call_with_defer_loading_beside_the_definition_is_invalid_saying_why() {
        let schema = tool_define_item()["input_schema"]
            .as_object()
            .cloned()
            .expect("an object schema");
        let validator = ParamsValidator::new(&schema);
        let mut call = params("echo", "x", "def run(params):\n    return 1\n");
        assert_eq!(validate(3, &validator, &call), Ok(()));
        call.insert("defer_loading".into(), json!(false));
        let explained = Violation {
            pointer: "/defer_loading".into(),
            message: "\"defer_loading\" is not an argument of tool_define: a tool you define always goes on the shelf (deferred: tool_search finds it, defer_execute runs it), so there is nothing for it to set; define the tool again without it".into(),
        };
        assert_eq!(
            validate(3, &validator, &call),
            Err(Refusal::Invalid {
                tool: 3,
                violations: vec![explained.clone()],
            })
        );
        call.shift_remove("script");
        let Err(Refusal::Invalid { violations, .. }) = validate(3, &validator, &call) else {
            panic!("invalid");
        };
        assert_eq!(violations.len(), 2, "{violations:?}");
        assert!(
            violations[0].pointer.is_empty() && violations[0].message.contains("\"script\""),
            "{violations:?}"
        );
        assert_eq!(violations[1], explained);
    }

    #[test]
    fn defer_loading_is_refused_saying_defined_tools_are_always_deferred() {
        let catalog = Catalog::from_value(&json!([]), "c").expect("catalog");
        let compiled = compiled("");
        let exposure = compiled.expose(&catalog);
        let ok = "def run(params):\n    return 1\n";
        let mut beside = params("echo", "x", ok);
        beside.insert("defer_loading".into(), json!(false));
        let e = check(&beside, &catalog, &exposure, &compiled, 0).expect_err("beside");
        insta::assert_snapshot!("defer_loading_beside_the_definition", e);
        let mut within = params("echo", "x", ok);
        within.insert(
            "schema".into(),
            json!({"type": "object", "properties": {}, "defer_loading": false}),
        );
        let e = check(&within, &catalog, &exposure, &compiled, 0).expect_err("in the schema");
        insta::assert_snapshot!("defer_loading_in_the_schema", e);
        // Without it, the same definition is taken.
        within.insert("schema".into(), json!({"type": "object", "properties": {}}));
        check(&within, &catalog, &exposure, &compiled, 0).expect("defines");
    }

    #[test]
    fn a_defined_tool_written_out_reads_back_as_the_same_script_tool() {
        let catalog = Catalog::from_value(&json!([]), "c").expect("catalog");
        let description = "Says \"hi\" \\ back,\n\ttabbed\u{7} and 中文.";
        let mut p = params("greet", description, "def run(params):\n    return 'hi'\n");
        p.insert(
            "schema".into(),
            json!({"type": "object", "properties": {"n": {"type": "integer", "default": null,
                   "minimum": 1.5}, "loud": {"type": "boolean", "default": false}},
                   "required": ["n"]}),
        );
        let compiled = compiled_with(100, "");
        let tool = check(&p, &catalog, &compiled.expose(&catalog), &compiled, 0).expect("defines");
        let file = script_file(&tool, "session s-1");
        assert!(file.contains("[tools.greet]"), "{file}");
        let def = crate::template::script_definition(
            &file,
            "greet.star",
            &Default::default(),
            &Default::default(),
        )
        .expect("the file defines a script tool");
        assert_eq!(def.description, description);
        assert_eq!(Value::Object(def.schema), tool.item["input_schema"]);
    }

    #[test]
    fn a_definition_is_checked_against_the_names_and_the_limits() {
        let catalog = Catalog::from_value(
            &json!({"builtin": [{"name": "Read"}], "servers": [
                {"name": "srv", "tools": [{"name": "send", "inputSchema": {"type": "object"}},
                                          {"name": "secret", "inputSchema": {"type": "object"}}]}]}),
            "c",
        )
        .expect("catalog");
        let compiled =
            compiled("[permissions]\ndeny = [\"^mcp__srv__secret$\", \"^forbidden_\"]\n");
        let exposure = compiled.expose(&catalog);
        let ok = "def run(params):\n    return len(params['text'].split())\n";
        let tool = check(
            &params("word_count", "Counts words.", ok),
            &catalog,
            &exposure,
            &compiled,
            0,
        )
        .expect("defines");
        assert_eq!(tool.item["origin"], "model");
        assert_eq!(tool.script, ok);
        for (p, defined, says) in [
            (params("Read", "x", ok), 0, "exists already"),
            (params("tool_search", "x", ok), 0, "exists already"),
            (params("send", "x", ok), 0, "exists already"),
            (
                params("mcp__srv__send", "x", ok),
                0,
                "kept for MCP servers' tools",
            ),
            (
                params("mcp__other__x", "x", ok),
                0,
                "kept for MCP servers' tools",
            ),
            (params("9lives", "x", ok), 0, "is not a tool name"),
            (params("a", "x", ok), 2, "[authoring] max_tools"),
            (
                params("a", &"d".repeat(41), ok),
                0,
                "[authoring] max_description_chars is 40",
            ),
            (
                params("a", "x", &format!("{ok}#{}", "x".repeat(200))),
                0,
                "[authoring] max_script_bytes is 200",
            ),
            (params("a", "x", "def run(params:\n"), 0, "does not parse"),
            (
                params("a", "x", &format!("x={}1\n", "lambda:".repeat(26))),
                0,
                "script line 1: does not parse: it nests more than 200 levels deep",
            ),
            (
                params("a", "x", "def run():\n    return 1\n"),
                0,
                "a function of one argument",
            ),
            (
                params("a", "x", "def run(a, b):\n    return 1\n"),
                0,
                "a function of one argument",
            ),
            (
                params("a", "x", "def run(*, x):\n    return 1\n"),
                0,
                "a function of one argument",
            ),
            (
                params("forbidden_x", "x", ok),
                0,
                "the configuration's rules do not allow that name",
            ),
            (
                params("a", "x", "x = 1\n"),
                0,
                "must define `def run(params)",
            ),
            (
                params("a", "x", "# def run(params)\nx = 1\n"),
                0,
                "must define `def run(params)",
            ),
            (
                params(
                    "a",
                    "x",
                    "def helper():\n    def run(params):\n        return 1\n    return run\n",
                ),
                0,
                "must define `def run(params)",
            ),
        ] {
            let e = check(&p, &catalog, &exposure, &compiled, defined).expect_err(says);
            assert!(e.contains(says), "{says}: {e}");
        }
        let mut bad = params("a", "x", ok);
        bad.insert("schema".into(), json!({"type": "string"}));
        let e = check(&bad, &catalog, &exposure, &compiled, 0).expect_err("schema");
        assert!(e.contains("must describe an object"), "{e}");
        // Refusals name what the model wrote: `schema`, and a remote $ref as such.
        bad.insert("schema".into(), json!({"type": "array"}));
        let e = check(&bad, &catalog, &exposure, &compiled, 0).expect_err("array");
        assert!(
            e.contains("the schema of \"a\" must describe an object")
                && !e.contains("input_schema"),
            "{e}"
        );
        bad.insert(
            "schema".into(),
            json!({"type": "object", "properties": {"n": {"$ref": "https://example.com/s.json"}}}),
        );
        let e = check(&bad, &catalog, &exposure, &compiled, 0).expect_err("remote ref");
        assert!(
            e.contains("remote $refs are not allowed") && !e.contains("resolve-http"),
            "{e}"
        );
        bad.insert(
            "schema".into(),
            json!({"type": "object", "properties": {"n": {"type": "strin"}}}),
        );
        let e = check(&bad, &catalog, &exposure, &compiled, 0).expect_err("invalid schema");
        assert!(
            e.contains("the schema of \"a\" is not a valid JSON Schema") && e.contains("strin"),
            "{e}"
        );
        // A hidden tool's bare name reads as free, as an absent one does; `def run (params)`
        // with a space is a definition of `run`.
        for (name, script) in [
            ("secret", "def run (params):\n    return 1\n"),
            (
                "nothing_here",
                "def run(params, extra = 1):\n    return 1\n",
            ),
            ("spread", "def run(*args):\n    return 1\n"),
        ] {
            check(
                &params(name, "x", script),
                &catalog,
                &exposure,
                &compiled,
                0,
            )
            .expect(name);
        }
    }
}
