//! Resolving and checking a call before it goes out: `defer_execute` and direct calls alike.
//!
//! Everything the model reads when a call cannot run is written here, so the texts are the same
//! over stdio and HTTP and can be unit-tested. Each refusal says what to do next: an unknown name
//! lists the closest *visible* tools (a hidden tool gets exactly the same answer as an unknown
//! one, so the model learns nothing about what the mode hides), and a schema violation lists every
//! problem with its JSON pointer and attaches the expected schema, so one round trip fixes it.

use serde_json::{Map, Value};

use crate::catalog::{Catalog, Resolution, Tool};
use crate::name;
use crate::surface::{DEFER_EXECUTE, META_TOOLS};

/// How many closest names an unknown-tool error suggests.
pub const SUGGESTIONS: usize = 5;

/// Why a name did not resolve to a runnable tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved {
    /// The text the model reads.
    pub text: String,
    /// Whether the name named a tool that exists but is hidden (for the audit log only).
    pub hidden: Option<String>,
}

/// Resolves `wanted` (canonical, or bare/original when unambiguous among visible tools) to a
/// catalog index. `visible(i)` says whether tool `i` may be shown and run in this session.
pub fn resolve(
    catalog: &Catalog,
    visible: impl Fn(usize) -> bool,
    wanted: &str,
) -> Result<usize, Unresolved> {
    let tools = catalog.tools();
    if META_TOOLS.contains(&wanted) {
        return Err(Unresolved {
            text: format!(
                "{wanted} is one of toolshelf's own tools: call it directly, not through {DEFER_EXECUTE}."
            ),
            hidden: None,
        });
    }
    let candidates: Vec<usize> = match catalog.resolve(wanted) {
        Resolution::Exact(i) | Resolution::Bare(i) => vec![i],
        Resolution::Ambiguous(v) => v,
        Resolution::NotFound => Vec::new(),
    };
    let shown: Vec<usize> = candidates.iter().copied().filter(|&i| visible(i)).collect();
    match shown.as_slice() {
        [i] => Ok(*i),
        [] => {
            let hidden = candidates.first().map(|&i| tools[i].name.clone());
            let names = tools
                .iter()
                .enumerate()
                .filter(|(i, _)| visible(*i))
                .map(|(_, t)| t.name.as_str());
            let closest = name::closest(wanted, names, SUGGESTIONS);
            let hint = if closest.is_empty() {
                "No similar tool name either.".to_owned()
            } else {
                format!("Closest names: {}.", closest.join(", "))
            };
            Err(Unresolved {
                text: format!(
                    "No tool named {wanted:?} is available. {hint} Use tool_search to find tools by keyword; names are case-sensitive."
                ),
                hidden,
            })
        }
        many => Err(Unresolved {
            text: format!(
                "{wanted:?} is ambiguous: {} tools have that name ({}). Give the full name.",
                many.len(),
                many.iter()
                    .map(|&i| tools[i].name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            hidden: None,
        }),
    }
}

/// One schema violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer into the params (`""` is the params object itself, shown as `/`).
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

/// The outcome of checking params against a tool's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// The params fit.
    Valid,
    /// Every violation, sorted by pointer then message.
    Invalid(Vec<Violation>),
    /// The tool's own schema cannot be compiled (e.g. a remote `$ref`); the call goes out
    /// unchecked and the server judges it. The string says why, for the log.
    Unchecked(String),
}

/// A compiled input schema; compile once per tool and reuse.
#[derive(Debug)]
pub struct ParamsValidator {
    inner: Result<jsonschema::Validator, String>,
}

impl ParamsValidator {
    /// Compiles `schema`. The draft is the schema's own `$schema` (servers in the wild say
    /// draft-07), else 2020-12; remote `$ref`s are not fetched.
    pub fn new(schema: &Map<String, Value>) -> Self {
        let value = Value::Object(schema.clone());
        Self {
            inner: jsonschema::validator_for(&value).map_err(|e| e.to_string()),
        }
    }

    /// Checks `params`.
    pub fn check(&self, params: &Value) -> Checked {
        let validator = match &self.inner {
            Ok(v) => v,
            Err(e) => return Checked::Unchecked(e.clone()),
        };
        let mut violations: Vec<Violation> = validator
            .iter_errors(params)
            .map(|e| Violation {
                pointer: e.instance_path().to_string(),
                message: e.to_string(),
            })
            .collect();
        if violations.is_empty() {
            return Checked::Valid;
        }
        violations.sort_by(|a, b| (&a.pointer, &a.message).cmp(&(&b.pointer, &b.message)));
        violations.dedup();
        Checked::Invalid(violations)
    }
}

/// The tool's definition as attached to refusals: name, description and input schema, compact.
pub fn schema_block(tool: &Tool) -> String {
    let mut m = Map::new();
    m.insert("name".into(), tool.name.clone().into());
    m.insert("description".into(), tool.description.clone().into());
    m.insert(
        "inputSchema".into(),
        Value::Object(tool.input_schema.clone()),
    );
    Value::Object(m).to_string()
}

/// The exact call form for a tool, with its required params as placeholders: the same text
/// `tool_search` shows, so the model sees one shape for one tool.
pub fn call_form(tool: &Tool) -> String {
    crate::search::schema_text::call_form(&tool.name, &tool.input_schema)
}

/// The refusal of a deferred tool not loaded in this session (`[execute] require_search`).
/// The refusal itself loads the tool.
pub fn not_loaded_text(tool: &Tool) -> String {
    format!(
        "{} was not run: its schema had not been loaded in this session, so the params could not be \
checked. It is loaded now; here is its schema. Call it again with params that match:\n{}\n{}",
        tool.name,
        schema_block(tool),
        call_form(tool)
    )
}

/// The refusal of params that violate the schema.
pub fn invalid_params_text(tool: &Tool, violations: &[Violation]) -> String {
    let mut out = format!(
        "{} was not run: its params do not match its schema ({} problem{}):\n",
        tool.name,
        violations.len(),
        if violations.len() == 1 { "" } else { "s" }
    );
    for v in violations {
        let at = if v.pointer.is_empty() {
            "/"
        } else {
            &v.pointer
        };
        out.push_str(&format!("- at {at}: {}\n", v.message));
    }
    out.push_str("Expected schema:\n");
    out.push_str(&schema_block(tool));
    out
}

/// Reads `defer_execute`'s own arguments: `tool_name` and `params` (an object; absent or null
/// means `{}`).
pub fn parse_defer_execute(
    args: &Map<String, Value>,
) -> Result<(String, Map<String, Value>), String> {
    let example =
        "Example: {\"tool_name\": \"mcp__git__git_status\", \"params\": {\"repo_path\": \".\"}}";
    let name = match args.get("tool_name") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_owned(),
        Some(other) if !other.is_string() => {
            return Err(format!(
                "defer_execute: tool_name must be a string, found {other}. {example}"
            ));
        }
        _ => return Err(format!("defer_execute needs tool_name. {example}")),
    };
    let params = match args.get("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        // Some models send params as a JSON string; accept it when it holds an object.
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => m,
            _ => {
                return Err(format!(
                    "defer_execute: params must be a JSON object, found a string. {example}"
                ));
            }
        },
        Some(other) => {
            return Err(format!(
                "defer_execute: params must be a JSON object, found {other}. {example}"
            ));
        }
    };
    if let Some(extra) = args.keys().find(|k| *k != "tool_name" && *k != "params") {
        return Err(format!(
            "defer_execute takes only tool_name and params, not {extra:?}; put the tool's arguments inside params. {example}"
        ));
    }
    Ok((name, params))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn catalog() -> Catalog {
        Catalog::from_value(
            &json!({"builtin": [{"name": "Read"}], "servers": [
                {"name": "fs", "tools": [
                    {"name": "read_text_file", "description": "read", "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
                    {"name": "write_file"}
                ]},
                {"name": "git", "tools": [{"name": "git_log"}, {"name": "write_file"}]}
            ]}),
            "c",
        )
        .expect("catalog")
    }

    #[test]
    fn resolves_canonical_and_unambiguous_bare_names() {
        let c = catalog();
        let all = |_| true;
        let i = resolve(&c, all, "mcp__fs__read_text_file").expect("canonical");
        assert_eq!(c.tools()[i].name, "mcp__fs__read_text_file");
        assert_eq!(
            resolve(&c, all, "git_log").expect("bare"),
            c.position("mcp__git__git_log").expect("x")
        );
        let e = resolve(&c, all, "write_file").expect_err("ambiguous");
        assert!(
            e.text.contains("mcp__fs__write_file, mcp__git__write_file"),
            "{}",
            e.text
        );
        // Hiding one of two candidates makes the bare name unambiguous.
        let fs_write = c.position("mcp__fs__write_file").expect("x");
        assert_eq!(
            resolve(&c, |i| i != fs_write, "write_file").expect("one left"),
            c.position("mcp__git__write_file").expect("x")
        );
        let e = resolve(&c, all, "defer_execute").expect_err("meta");
        assert!(e.text.contains("call it directly"), "{}", e.text);
    }

    #[test]
    fn hidden_and_unknown_names_get_the_same_answer() {
        let c = catalog();
        let log = c.position("mcp__git__git_log").expect("x");
        let hidden = resolve(&c, |i| i != log, "mcp__git__git_log").expect_err("hidden");
        assert_eq!(hidden.hidden.as_deref(), Some("mcp__git__git_log"));
        assert!(
            !hidden.text.contains("Closest names: mcp__git__git_log"),
            "{}",
            hidden.text
        );
        let unknown = resolve(&c, |i| i != log, "mcp__git__git_lag").expect_err("unknown");
        assert_eq!(unknown.hidden, None);
        // Same wording; the suggestions never include the hidden tool.
        assert!(
            hidden.text.starts_with("No tool named") && unknown.text.starts_with("No tool named")
        );
        assert!(
            !unknown.text.contains("Closest names: mcp__git__git_log"),
            "{}",
            unknown.text
        );
        let e = resolve(&c, |_| true, "read_txt_file").expect_err("typo");
        assert!(
            e.text.contains("Closest names: ") && e.text.contains("mcp__fs__read_text_file"),
            "{}",
            e.text
        );
    }

    #[test]
    fn violations_carry_pointers_and_the_schema() {
        let c = catalog();
        let tool = c.get("mcp__fs__read_text_file").expect("tool");
        let v = ParamsValidator::new(&tool.input_schema);
        assert_eq!(v.check(&json!({"path": "/x"})), Checked::Valid);
        let Checked::Invalid(problems) = v.check(&json!({"path": 3})) else {
            panic!("invalid")
        };
        assert_eq!(problems[0].pointer, "/path");
        let Checked::Invalid(problems) = v.check(&json!({})) else {
            panic!("invalid")
        };
        assert_eq!(problems[0].pointer, "");
        let text = invalid_params_text(tool, &problems);
        assert!(
            text.contains("- at /: ") && text.contains("\"path\" is a required property"),
            "{text}"
        );
        assert!(
            text.contains("Expected schema:\n{\"name\":\"mcp__fs__read_text_file\""),
            "{text}"
        );
    }

    #[test]
    fn real_world_schemas_validate() {
        // draft-07 with definitions (zod-to-json-schema) and pydantic's $defs / anyOf.
        let draft7 = json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
            "properties": {"e": {"$ref": "#/definitions/E"}}, "required": ["e"],
            "definitions": {"E": {"type": "object", "properties": {"n": {"type": "string"}}, "required": ["n"]}},
            "additionalProperties": false});
        let v = ParamsValidator::new(draft7.as_object().expect("object"));
        assert_eq!(v.check(&json!({"e": {"n": "a"}})), Checked::Valid);
        let Checked::Invalid(p) = v.check(&json!({"e": {}, "x": 1})) else {
            panic!("invalid")
        };
        let pointers: Vec<&str> = p.iter().map(|v| v.pointer.as_str()).collect();
        assert_eq!(pointers, ["", "/e"]);
        let pydantic = json!({"type": "object", "$defs": {"M": {"enum": ["a", "b"], "type": "string"}},
            "properties": {"m": {"anyOf": [{"$ref": "#/$defs/M"}, {"type": "null"}], "default": null}}});
        let v = ParamsValidator::new(pydantic.as_object().expect("object"));
        assert_eq!(v.check(&json!({"m": null})), Checked::Valid);
        assert!(matches!(v.check(&json!({"m": "c"})), Checked::Invalid(p) if p[0].pointer == "/m"));
        let remote = json!({"type": "object", "properties": {"a": {"$ref": "https://example.invalid/s.json"}}});
        assert!(matches!(
            ParamsValidator::new(remote.as_object().expect("o")).check(&json!({})),
            Checked::Unchecked(_)
        ));
    }

    #[test]
    fn refusals_say_what_to_do() {
        let c = catalog();
        let tool = c.get("mcp__fs__read_text_file").expect("tool");
        let t = not_loaded_text(tool);
        assert!(t.contains("It is loaded now"), "{t}");
        assert!(t.ends_with("defer_execute {\"tool_name\":\"mcp__fs__read_text_file\",\"params\":{\"path\":\"…\"}}"), "{t}");
    }

    #[test]
    fn defer_execute_arguments_are_checked() {
        let ok = |v: Value| parse_defer_execute(v.as_object().expect("o"));
        assert_eq!(
            ok(json!({"tool_name": "a", "params": {"x": 1}}))
                .expect("ok")
                .1["x"],
            1
        );
        assert!(
            ok(json!({"tool_name": "a"}))
                .expect("no params")
                .1
                .is_empty()
        );
        assert_eq!(
            ok(json!({"tool_name": "a", "params": "{\"x\": 2}"}))
                .expect("string")
                .1["x"],
            2
        );
        for (v, expected) in [
            (json!({}), "needs tool_name"),
            (json!({"tool_name": 3}), "must be a string"),
            (
                json!({"tool_name": "a", "params": [1]}),
                "must be a JSON object",
            ),
            (json!({"tool_name": "a", "path": "/"}), "not \"path\""),
        ] {
            let e = ok(v).expect_err(expected);
            assert!(e.contains(expected) && e.contains("Example"), "{e}");
        }
    }
}
