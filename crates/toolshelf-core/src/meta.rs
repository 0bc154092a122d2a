//! toolshelf's own two tools, `tool_search` and `defer_execute`: their arguments, schemas and
//! descriptions.
//!
//! Each meta-tool's arguments are one Rust type. The JSON Schema the model is sent is derived from
//! that type (`schemars`) and the model's arguments are parsed into it (`serde`), so what the model
//! is told and what toolshelf accepts cannot drift apart. Parsing is a little more forgiving than
//! the schema in two places models commonly slip (a single string where a list is asked, params
//! sent as a JSON string); it never accepts anything the schema forbids and then loses it.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use crate::config::SearchConfig;
use crate::name::{DEFER_EXECUTE, TOOL_SEARCH};
use crate::wire::{Format, definition_from_parts};

/// The arguments of `tool_search`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// Exact tool names from <available_deferred_tools>. Give this or queries, not both.
    #[serde(default, deserialize_with = "tool_names_list")]
    #[schemars(with = "Vec<String>")]
    pub tool_names: Option<Vec<String>>,
    /// Keyword phrases for the task in English and Chinese, one per step. Give this or tool_names, not both.
    #[serde(default, deserialize_with = "queries_list")]
    #[schemars(with = "Vec<String>")]
    pub queries: Option<Vec<String>>,
    /// Maximum number of fuzzy results.
    #[serde(default, deserialize_with = "positive_limit")]
    #[schemars(schema_with = "positive_integer")]
    pub limit: Option<u64>,
}

/// The arguments of `defer_execute`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeferExecuteArgs {
    /// Name of the tool to run, as listed in <available_deferred_tools>.
    #[serde(deserialize_with = "tool_name_string")]
    pub tool_name: String,
    /// Arguments for the tool, matching its schema (omit for a tool without parameters).
    #[serde(default, deserialize_with = "object_or_json_string")]
    pub params: Map<String, Value>,
}

fn positive_integer(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer", "minimum": 1})
}

/// The example shown with every malformed `defer_execute` call. Its names are placeholders: a
/// real tool's name would send the model to a tool its session may not have.
pub const DEFER_EXECUTE_EXAMPLE: &str = "Example: {\"tool_name\": \"mcp__SERVER__TOOL\", \"params\": {\"PARAM\": \"VALUE\"}}, \
with a listed tool's name and the params its schema asks for.";

impl DeferExecuteArgs {
    /// Reads `defer_execute`'s arguments; the error text is for the model and shows a correct
    /// call.
    pub fn parse(args: &Map<String, Value>) -> Result<Self, String> {
        let mut parsed: Self = serde_json::from_value(Value::Object(args.clone()))
            .map_err(|e| format!("Invalid defer_execute call: {e}. {DEFER_EXECUTE_EXAMPLE}"))?;
        parsed.tool_name = parsed.tool_name.trim().to_owned();
        if parsed.tool_name.is_empty() {
            return Err(format!(
                "Invalid defer_execute call: tool_name is empty. {DEFER_EXECUTE_EXAMPLE}"
            ));
        }
        Ok(parsed)
    }
}

// A field's own deserializer says what is wrong with it by name: serde's messages for a value of
// the wrong type ("invalid type: string, expected u64") name no field, and the model must know
// which of its arguments to fix.

/// `tool_names`: see [`string_or_list`].
fn tool_names_list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    string_or_list(d, "tool_names", "[\"mcp__SERVER__TOOL\"]")
}

/// `queries`: see [`string_or_list`].
fn queries_list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    string_or_list(d, "queries", "[\"read file\"]")
}

/// A list of strings, or one string standing for a list of one; the error names `field`.
fn string_or_list<'de, D: Deserializer<'de>>(
    d: D,
    field: &str,
    example: &str,
) -> Result<Option<Vec<String>>, D::Error> {
    let wrong = |found: &str| {
        serde::de::Error::custom(format_args!(
            "{field} must be a list of strings, e.g. {example}, found {found}"
        ))
    };
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(vec![s])),
        Value::Array(items) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                other => Err(wrong(&format!(
                    "{} in the list",
                    crate::catalog::kind_of(&other)
                ))),
            })
            .collect::<Result<_, _>>()
            .map(Some),
        other => Err(wrong(crate::catalog::kind_of(&other))),
    }
}

/// `limit`: a positive integer; anything else is named with the value found. As `queries` takes
/// a bare string and `params` a JSON string, the forms models write for an integer are read as
/// one: `"3"` and `3.0`.
fn positive_limit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let value = Value::deserialize(d)?;
    let read = match &value {
        Value::Null => return Ok(None),
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 1.0 && *f <= u32::MAX as f64)
                .map(|f| f as u64)
        }),
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse::<u64>().ok()
        }
        _ => None,
    };
    match read {
        Some(n) if n > 0 => Ok(Some(n)),
        _ => Err(serde::de::Error::custom(format_args!(
            "limit must be a positive integer, found {}",
            crate::echo::echo(&value.to_string())
        ))),
    }
}

/// `tool_name`: a string.
fn tool_name_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match Value::deserialize(d)? {
        Value::String(s) => Ok(s),
        other => Err(serde::de::Error::custom(format_args!(
            "tool_name must be a string, found {}",
            crate::catalog::kind_of(&other)
        ))),
    }
}

/// A JSON object; also a string that holds one (some models send params that way); null or
/// absent is `{}`.
fn object_or_json_string<'de, D: Deserializer<'de>>(d: D) -> Result<Map<String, Value>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(Map::new()),
        Value::Object(m) => Ok(m),
        Value::String(s) => match serde_json::from_str::<Value>(&s) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(serde::de::Error::custom(
                "params must be a JSON object, found a string",
            )),
        },
        other => Err(serde::de::Error::custom(format_args!(
            "params must be a JSON object, found {}",
            crate::catalog::kind_of(&other)
        ))),
    }
}

/// The input schema of `T`, as sent to the model: the object and its properties, without what
/// only adds bytes (`$schema`, `title`, the type's own doc comment, serde's `default`s, and
/// `additionalProperties: true`, which is JSON Schema's default anyway).
pub(crate) fn schema_of<T: JsonSchema>() -> Map<String, Value> {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.meta_schema = None)
        .into_generator();
    let schema = generator.into_root_schema_for::<T>();
    let mut map = match schema.to_value() {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    map.remove("title");
    map.remove("description");
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        for prop in props.values_mut().filter_map(Value::as_object_mut) {
            prop.remove("default");
            if prop.get("additionalProperties") == Some(&Value::Bool(true)) {
                prop.remove("additionalProperties");
            }
        }
    }
    map
}

/// `tool_search`'s input schema, with `limit` bounded by the configuration.
pub fn tool_search_schema(config: &SearchConfig) -> Map<String, Value> {
    let mut schema = schema_of::<SearchArgs>();
    if let Some(Value::Object(limit)) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut("limit"))
    {
        limit.insert("maximum".into(), config.max_limit.into());
        limit.insert(
            "description".into(),
            format!(
                "Maximum number of fuzzy results (default {}).",
                config.default_limit
            )
            .into(),
        );
    }
    schema
}

/// `defer_execute`'s input schema.
pub fn defer_execute_schema() -> Map<String, Value> {
    schema_of::<DeferExecuteArgs>()
}

/// Fixed part of `tool_search`'s description; the index follows it. It is part of the cached
/// prompt prefix, so it depends on the configuration only, never on the catalog: its example
/// name is a placeholder. What it says a query returns follows `config.full_schemas` (none, the
/// top one, the top ones with schemas); `config.default_limit` is the limit it names.
pub fn tool_search_preamble(config: &SearchConfig) -> String {
    let default_limit = config.default_limit;
    let returns = match config.full_schemas {
        0 => {
            "the best matching tools, without schemas: look one up by tool_names for its schema and call"
        }
        1 => "the best matching tools, the top one with its full schema",
        _ => "the best matching tools, the top ones with full schemas",
    };
    format!(
        "Load tools that are not loaded yet. Their names are listed in <available_deferred_tools> below; \
their schemas are not, so look a tool up here before running it with defer_execute.\n\
Give exactly one of tool_names or queries:\n\
- tool_names: exact names from the list, e.g. [\"mcp__SERVER__TOOL\"], returns their full schemas;\n\
- queries: short keyword phrases for the task, in both English and Chinese, e.g. [\"read file\", \"读取文件\"]; \
returns {returns}. A task of several steps gets one phrase per step, e.g. [\"search flights\", \"convert currency\"], and each step gets results of its own. Prefix a word with + to require it in the \
tool name (\"+commit\"); use server:NAME to search one server.\n\
limit caps fuzzy results (default {default_limit}). Each schema comes with the exact defer_execute call to use."
    )
}

/// `tool_search`'s whole description: the preamble, then the rendered index.
pub fn tool_search_description(index: &str, config: &SearchConfig) -> String {
    format!("{}\n\n{index}", tool_search_preamble(config))
}

/// `defer_execute`'s description.
pub const DEFER_EXECUTE_DESCRIPTION: &str = "Run a deferred tool by name. Look it up with tool_search first \
to get its schema; params are validated against that schema and every violation is reported. \
Permissions and hooks apply to the target tool exactly as if it were called directly.";

/// Both meta-tools' definitions in `format`: `tool_search` carrying `index` (the rendered
/// `<available_deferred_tools>` block) in its description, then `defer_execute`.
pub fn definitions(index: &str, config: &SearchConfig, format: Format) -> [Value; 2] {
    let description = tool_search_description(index, config);
    [
        definition_from_parts(
            TOOL_SEARCH,
            &description,
            &tool_search_schema(config),
            format,
        ),
        definition_from_parts(
            DEFER_EXECUTE,
            DEFER_EXECUTE_DESCRIPTION,
            &defer_execute_schema(),
            format,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schemas_are_derived_from_the_argument_types() {
        let s = Value::Object(tool_search_schema(&SearchConfig::default()));
        assert_eq!(s["type"], "object");
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["properties"]["tool_names"]["type"], "array");
        assert_eq!(s["properties"]["queries"]["items"]["type"], "string");
        assert_eq!(s["properties"]["limit"]["type"], "integer");
        assert_eq!(s["properties"]["limit"]["minimum"], 1);
        assert_eq!(s["properties"]["limit"]["maximum"], 10);
        assert!(s.get("required").is_none(), "{s}");
        assert!(s.get("$schema").is_none() && s.get("title").is_none());
        let d = Value::Object(defer_execute_schema());
        assert_eq!(d["required"], json!(["tool_name"]));
        assert_eq!(d["properties"]["params"]["type"], "object");
        assert_eq!(d["additionalProperties"], false);
    }

    #[test]
    fn every_property_the_schema_names_is_parsed_and_nothing_else() {
        // The schema's properties are exactly the fields the parser reads: a field added to one
        // and not the other would show here.
        let props = |m: Map<String, Value>| -> Vec<String> {
            m["properties"]
                .as_object()
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default()
        };
        assert_eq!(
            props(tool_search_schema(&SearchConfig::default())),
            ["tool_names", "queries", "limit"]
        );
        let args: SearchArgs =
            serde_json::from_value(json!({"tool_names": ["a"], "queries": ["b"], "limit": 3}))
                .expect("every schema property parses");
        assert_eq!(args.limit, Some(3));
        assert!(serde_json::from_value::<SearchArgs>(json!({"other": 1})).is_err());
        assert_eq!(props(defer_execute_schema()), ["tool_name", "params"]);
        assert!(DeferExecuteArgs::parse(&Map::from_iter([("x".into(), json!(1))])).is_err());
    }

    /// What the description says a query returns is what `[search] full_schemas` makes it
    /// return: no schema at all when it is 0 (the model then looks a hit up by name), one for
    /// 1; the default's text is unchanged.
    #[test]
    fn the_description_says_how_many_hits_carry_schemas() {
        let with = |full_schemas| {
            tool_search_description(
                "INDEX",
                &SearchConfig {
                    full_schemas,
                    ..SearchConfig::default()
                },
            )
        };
        let default = with(3);
        assert!(
            default.contains("the top ones with full schemas."),
            "{default}"
        );
        assert_eq!(with(7), default);
        let none = with(0);
        assert!(!none.contains("with full schemas"), "{none}");
        assert!(
            none.contains("returns the best matching tools, without schemas: look one up by tool_names for its schema and call."),
            "{none}"
        );
        let one = with(1);
        assert!(one.contains("the top one with its full schema."), "{one}");
    }

    #[test]
    fn examples_name_no_tool_a_session_may_lack() {
        let e = DeferExecuteArgs::parse(&Map::new()).expect_err("no tool_name");
        for text in [tool_search_preamble(&SearchConfig::default()), e] {
            assert!(
                text.contains("\"mcp__SERVER__TOOL\"") && !text.contains("mcp__git"),
                "{text}"
            );
        }
    }

    #[test]
    fn tool_search_argument_errors_name_the_argument() {
        use crate::search::SearchRequest;
        for (args, says) in [
            (
                json!({"queries": ["x"], "limit": -1}),
                "limit must be a positive integer, found -1",
            ),
            (
                json!({"queries": ["x"], "limit": 2.5}),
                "limit must be a positive integer, found 2.5",
            ),
            (
                json!({"queries": ["x"], "limit": "3 "}),
                "limit must be a positive integer, found \"3 \"",
            ),
            (
                json!({"queries": ["x"], "limit": "0"}),
                "limit must be a positive integer, found \"0\"",
            ),
            (
                json!({"queries": ["x"], "limit": "-2"}),
                "limit must be a positive integer, found \"-2\"",
            ),
            (
                json!({"queries": ["x"], "limit": 0.0}),
                "limit must be a positive integer, found 0.0",
            ),
            (
                json!({"queries": ["x"], "limit": 0}),
                "limit must be a positive integer, found 0",
            ),
            (
                json!({"tool_names": 5}),
                "tool_names must be a list of strings, e.g. [\"mcp__SERVER__TOOL\"], found a number",
            ),
            (
                json!({"queries": ["a", 1]}),
                "queries must be a list of strings, e.g. [\"read file\"], found a number in the list",
            ),
            (
                json!({"queries": {"a": 1}}),
                "queries must be a list of strings",
            ),
        ] {
            let e = SearchRequest::from_json(&args).expect_err("refused");
            assert!(
                e.starts_with(&format!("Invalid tool_search call: {says}")),
                "{args}: {e}"
            );
        }
        // The forms models write for an integer.
        for limit in [json!("3"), json!(3.0), json!("03")] {
            assert_eq!(
                SearchRequest::from_json(&json!({"queries": ["x"], "limit": limit})),
                Ok(SearchRequest::Queries {
                    queries: vec!["x".into()],
                    limit: Some(3)
                }),
                "{limit}"
            );
        }
        assert_eq!(
            SearchRequest::from_json(
                &json!({"queries": "read file", "limit": 3, "tool_names": null})
            ),
            Ok(SearchRequest::Queries {
                queries: vec!["read file".into()],
                limit: Some(3)
            })
        );
    }

    #[test]
    fn defer_execute_arguments_parse_with_readable_errors() {
        let parse = |v: Value| DeferExecuteArgs::parse(v.as_object().expect("object"));
        let ok = parse(json!({"tool_name": " git_log ", "params": {"a": 1}})).expect("ok");
        assert_eq!(ok.tool_name, "git_log");
        assert_eq!(ok.params["a"], 1);
        assert!(
            parse(json!({"tool_name": "x"}))
                .expect("no params")
                .params
                .is_empty()
        );
        assert!(
            parse(json!({"tool_name": "x", "params": null}))
                .expect("null")
                .params
                .is_empty()
        );
        assert_eq!(
            parse(json!({"tool_name": "x", "params": "{\"a\": 2}"}))
                .expect("string")
                .params["a"],
            2
        );
        for (bad, says) in [
            (json!({}), "missing field `tool_name`"),
            (json!({"tool_name": ""}), "tool_name is empty"),
            (
                json!({"tool_name": 3}),
                "tool_name must be a string, found a number",
            ),
            (
                json!({"tool_name": ["x"]}),
                "tool_name must be a string, found an array",
            ),
            (json!({"tool_name": "x", "params": [1]}), "found an array"),
            (
                json!({"tool_name": "x", "params": "nope"}),
                "found a string",
            ),
            (
                json!({"tool_name": "x", "path": "/"}),
                "unknown field `path`",
            ),
        ] {
            let e = parse(bad.clone()).expect_err(&bad.to_string());
            assert!(e.contains(says) && e.contains("Example:"), "{bad}: {e}");
        }
    }
}
