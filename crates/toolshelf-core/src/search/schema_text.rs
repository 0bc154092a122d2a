//! A JSON Schema rendered as compact text for the model.
//!
//! Full JSON schemas are verbose (`{"type": "string", "description": ...}` per parameter); the
//! model needs the names, types, which are required, enums and what each is for. One line per
//! parameter, nested objects indented, keeps a search response small enough to show several
//! tools at once. The exact call form is rendered beside it, so the model copies a valid shape.

use serde_json::{Map, Value};

use crate::index::cut;

/// How much of each parameter description to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Descriptions cut at this many characters.
    Cut(usize),
    /// No descriptions, names and types only.
    TypesOnly,
}

const MAX_DEPTH: usize = 6;

/// Renders the parameters of `schema` (an object schema), one per line, indented by `indent`
/// spaces. Returns an empty string for a schema without properties.
pub fn render_params(schema: &Map<String, Value>, detail: Detail, indent: usize) -> String {
    let mut out = String::new();
    object_lines(schema, schema, detail, indent, 0, &mut out);
    out
}

fn resolve<'a>(
    root: &'a Map<String, Value>,
    node: &'a Map<String, Value>,
) -> &'a Map<String, Value> {
    let Some(Value::String(r)) = node.get("$ref") else {
        return node;
    };
    let path = r.strip_prefix("#/").unwrap_or("");
    let mut cur = Some(root);
    for part in path.split('/').filter(|p| !p.is_empty()) {
        cur = cur.and_then(|m| m.get(part)).and_then(Value::as_object);
    }
    cur.unwrap_or(node)
}

fn object_lines(
    root: &Map<String, Value>,
    schema: &Map<String, Value>,
    detail: Detail,
    indent: usize,
    depth: usize,
    out: &mut String,
) {
    let schema = resolve(root, schema);
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, prop) in props {
        let Some(prop) = prop.as_object() else {
            continue;
        };
        let prop = resolve(root, prop);
        out.push_str(&" ".repeat(indent));
        out.push_str(name);
        out.push_str(" (");
        out.push_str(&type_label(root, prop, 0));
        if required.contains(&name.as_str()) {
            out.push_str(", required");
        }
        if let Some(e) = prop.get("enum").and_then(Value::as_array) {
            let items: Vec<String> = e.iter().take(20).map(Value::to_string).collect();
            out.push_str(", one of: ");
            out.push_str(&items.join(", "));
            if e.len() > 20 {
                out.push_str(", …");
            }
        }
        if let Some(d) = prop.get("default") {
            out.push_str(", default: ");
            out.push_str(&cut(&d.to_string(), 40));
        }
        out.push(')');
        if let Detail::Cut(n) = detail {
            let description = prop
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !description.trim().is_empty() && n > 0 {
                out.push_str(": ");
                out.push_str(&cut(description, n));
            }
        }
        out.push('\n');
        if depth < MAX_DEPTH
            && let Some(inner) = nested_object(root, prop)
        {
            object_lines(root, inner, detail, indent + 2, depth + 1, out);
        }
    }
}

/// The object schema nested in `prop`: itself, its array items, or its one non-null variant.
fn nested_object<'a>(
    root: &'a Map<String, Value>,
    prop: &'a Map<String, Value>,
) -> Option<&'a Map<String, Value>> {
    if prop.get("properties").is_some() {
        return Some(prop);
    }
    if let Some(items) = prop.get("items").and_then(Value::as_object) {
        let items = resolve(root, items);
        if items.get("properties").is_some() {
            return Some(items);
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(vs) = prop.get(key).and_then(Value::as_array) {
            let objects: Vec<&Map<String, Value>> = vs
                .iter()
                .filter_map(Value::as_object)
                .map(|v| resolve(root, v))
                .filter(|v| v.get("properties").is_some())
                .collect();
            if objects.len() == 1 {
                return Some(objects[0]);
            }
        }
    }
    None
}

fn type_label(root: &Map<String, Value>, prop: &Map<String, Value>, depth: usize) -> String {
    // Schemas may refer to themselves (`$ref: "#"`, recursive `$defs`): stop descending.
    if depth > MAX_DEPTH {
        return "any".into();
    }
    let prop = resolve(root, prop);
    match prop.get("type") {
        Some(Value::String(t)) if t == "array" => {
            match prop.get("items").and_then(Value::as_object) {
                Some(items) => format!("array of {}", type_label(root, items, depth + 1)),
                None => "array".into(),
            }
        }
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => {
            for key in ["anyOf", "oneOf"] {
                if let Some(vs) = prop.get(key).and_then(Value::as_array) {
                    let labels: Vec<String> = vs
                        .iter()
                        .filter_map(Value::as_object)
                        .map(|v| type_label(root, v, depth + 1))
                        .collect();
                    return labels.join(" or ");
                }
            }
            if prop.get("const").is_some() {
                return "const".into();
            }
            "any".into()
        }
    }
}

/// A placeholder value for a parameter of `prop`'s type, for the example call.
fn placeholder(root: &Map<String, Value>, prop: &Map<String, Value>, depth: usize) -> Value {
    if depth > MAX_DEPTH {
        return Value::String("…".into());
    }
    let prop = resolve(root, prop);
    // A value the schema fixes is the value to show: a placeholder of its type would be refused.
    if let Some(fixed) = prop.get("const") {
        return fixed.clone();
    }
    if let Some(first) = prop
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    let t = match prop.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ => "",
    };
    match t {
        "string" => Value::String("…".into()),
        "integer" | "number" => number_within(prop, t == "integer"),
        "boolean" => Value::Bool(false),
        "array" => {
            // As many items as it needs, of the items' own placeholder.
            let need = prop.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = prop
                .get("items")
                .and_then(Value::as_object)
                .map_or(Value::String("…".into()), |i| {
                    placeholder(root, i, depth + 1)
                });
            match usize::try_from(need) {
                Ok(n) if n <= MAX_PLACEHOLDER_ITEMS => Value::Array(vec![item; n]),
                _ => Value::Array(Vec::new()),
            }
        }
        "object" => {
            let mut m = Map::new();
            fill_required(root, prop, &mut m, depth + 1);
            Value::Object(m)
        }
        // No type of its own: the first branch of a choice that is not null.
        _ => ["anyOf", "oneOf"]
            .iter()
            .filter_map(|k| prop.get(*k).and_then(Value::as_array))
            .flatten()
            .filter_map(Value::as_object)
            .find(|b| resolve(root, b).get("type").and_then(Value::as_str) != Some("null"))
            .map_or(Value::String("…".into()), |b| {
                placeholder(root, b, depth + 1)
            }),
    }
}

/// The most items a placeholder array is given to meet a `minItems`; past it, `[]`.
const MAX_PLACEHOLDER_ITEMS: usize = 3;

/// A number a schema's bounds admit: 0 when they do, else the nearest bound (an integer one
/// past an exclusive bound).
fn number_within(prop: &Map<String, Value>, integer: bool) -> Value {
    let bound = |k: &str| prop.get(k).and_then(Value::as_f64);
    let (min, max) = (bound("minimum"), bound("maximum"));
    // Draft 4 writes an exclusive bound as a flag beside the bound.
    let flag = |k: &str| prop.get(k).and_then(Value::as_bool) == Some(true);
    let (xmin, xmax) = (
        bound("exclusiveMinimum").or(min.filter(|_| flag("exclusiveMinimum"))),
        bound("exclusiveMaximum").or(max.filter(|_| flag("exclusiveMaximum"))),
    );
    let (min, max) = (
        min.filter(|_| !flag("exclusiveMinimum")),
        max.filter(|_| !flag("exclusiveMaximum")),
    );
    let mut v = 0.0f64;
    if let Some(m) = min.filter(|&m| v < m) {
        v = if integer { m.ceil() } else { m };
    }
    if let Some(m) = xmin.filter(|&m| v <= m) {
        v = if integer { m.floor() + 1.0 } else { m + 1.0 };
    }
    if let Some(m) = max.filter(|&m| v > m) {
        v = if integer { m.floor() } else { m };
    }
    if let Some(m) = xmax.filter(|&m| v >= m) {
        v = if integer { m.ceil() - 1.0 } else { m - 1.0 };
    }
    if integer || v.fract() == 0.0 {
        Value::from(v as i64)
    } else {
        serde_json::Number::from_f64(v).map_or(Value::from(0), Value::Number)
    }
}

fn fill_required(
    root: &Map<String, Value>,
    schema: &Map<String, Value>,
    out: &mut Map<String, Value>,
    depth: usize,
) {
    let (Some(props), Some(required)) = (
        schema.get("properties").and_then(Value::as_object),
        schema.get("required").and_then(Value::as_array),
    ) else {
        return;
    };
    for (name, prop) in props {
        if required.iter().any(|r| r.as_str() == Some(name))
            && let Some(p) = prop.as_object()
        {
            out.insert(name.clone(), placeholder(root, p, depth));
        }
    }
}

/// The exact call form: `defer_execute {"tool_name": ..., "params": {...}}`, with the required
/// parameters filled with placeholders of their type.
pub fn call_form(tool_name: &str, schema: &Map<String, Value>) -> String {
    let mut params = Map::new();
    fill_required(schema, schema, &mut params, 0);
    let mut call = Map::new();
    call.insert("tool_name".into(), Value::String(tool_name.to_owned()));
    call.insert("params".into(), Value::Object(params));
    format!("defer_execute {}", Value::Object(call))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn renders_types_required_enums_and_nesting() {
        let s = obj(json!({
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "description": "What to draw"},
                "size": {"type": "string", "enum": ["small", "large"], "default": "small"},
                "opts": {"type": "object", "properties": {"seed": {"type": "integer"}}, "required": ["seed"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": null}
            },
            "required": ["prompt"]
        }));
        assert_eq!(
            render_params(&s, Detail::Cut(100), 2),
            "  prompt (string, required): What to draw\n  size (string, one of: \"small\", \"large\", default: \"small\")\n  opts (object)\n    seed (integer, required)\n  tags (array of string)\n  limit (integer or null, default: null)\n"
        );
        assert_eq!(
            call_form("t", &s),
            "defer_execute {\"tool_name\":\"t\",\"params\":{\"prompt\":\"…\"}}"
        );
    }

    /// The call form's placeholders are values the schema admits: a fixed value as it is, a
    /// number within its bounds, as many items as an array needs, a choice's first branch.
    #[test]
    fn placeholders_meet_the_schema() {
        let s = obj(json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 1},
                "x": {"type": "number", "exclusiveMinimum": 0},
                "old": {"type": "integer", "minimum": 5, "exclusiveMinimum": true},
                "neg": {"type": "integer", "maximum": -2},
                "mode": {"const": "driving"},
                "ok": {"type": "boolean", "const": true},
                "ids": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "many": {"type": "array", "items": {"type": "integer"}, "minItems": 50},
                "maybe": {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 3}]},
                "shape": {"oneOf": [{"type": "object", "properties": {"r": {"type": "number"}}, "required": ["r"]}, {"type": "object"}]}
            },
            "required": ["n", "x", "old", "neg", "mode", "ok", "ids", "many", "maybe", "shape"]
        }));
        let form = call_form("t", &s);
        let params: Value =
            serde_json::from_str(form.strip_prefix("defer_execute ").expect("form")).expect("json");
        assert_eq!(
            params["params"],
            json!({"n": 1, "x": 1, "old": 6, "neg": -2, "mode": "driving", "ok": true,
                   "ids": ["…"], "many": [], "maybe": 3, "shape": {"r": 0}})
        );
    }

    #[test]
    fn types_only_drops_descriptions_and_refs_resolve() {
        let s = obj(json!({
            "type": "object",
            "$defs": {"Loc": {"type": "object", "properties": {"city": {"type": "string", "description": "City"}}, "required": ["city"]}},
            "properties": {"where": {"$ref": "#/$defs/Loc", "description": "Place"}},
            "required": ["where"]
        }));
        assert_eq!(
            render_params(&s, Detail::TypesOnly, 0),
            "where (object, required)\n  city (string, required)\n"
        );
        assert_eq!(
            call_form("w", &s),
            "defer_execute {\"tool_name\":\"w\",\"params\":{\"where\":{\"city\":\"…\"}}}"
        );
    }

    #[test]
    fn self_referencing_schemas_stop_at_a_depth() {
        let s = obj(json!({
            "type": "object",
            "$defs": {"J": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/$defs/J"}}]}},
            "properties": {
                "node": {"$ref": "#", "description": "A subtree"},
                "value": {"$ref": "#/$defs/J"}
            },
            "required": ["node", "value"]
        }));
        let text = render_params(&s, Detail::Cut(40), 0);
        assert!(text.starts_with("node (object, required)"), "{text}");
        assert!(
            text.contains("value (string or array of string or array of"),
            "{text}"
        );
        assert!(call_form("t", &s).starts_with("defer_execute {\"tool_name\":\"t\""));
    }

    #[test]
    fn empty_schema_renders_nothing() {
        assert_eq!(
            render_params(&obj(json!({"type": "object"})), Detail::Cut(10), 2),
            ""
        );
    }
}
