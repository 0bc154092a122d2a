//! Which tools and groups have a template, and what each template renders to for one session.
//!
//! A template comes from the catalog file (`"description_template"` on a tool or a server group)
//! or from the configuration (`[tools.NAME]`, `[servers.NAME]`), which takes precedence. Rendering
//! produces [`Descriptions`], the session's derived view: the catalog's tools keep their own
//! descriptions, so search, validation and every other session read the catalog unchanged.

use std::collections::BTreeMap;

use serde_json::{Value as Json, json};

use super::{SessionValues, TemplateError, check_syntax, render};
use crate::catalog::{Catalog, Resolution, Server, Tool};
use crate::config::Config;
use crate::policy::{Exposure, State};

/// The `pkg` names the catalog fills in; `[template.vars]` may not use them.
pub const CATALOG_VALUES: [&str; 8] = [
    "description",
    "name",
    "params",
    "required",
    "server",
    "tags",
    "tool",
    "tools",
];

/// Descriptions rendered for one session from templates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Descriptions {
    /// By catalog index, for tools that have a template.
    pub tools: BTreeMap<usize, String>,
    /// By canonical server name, for groups that have a template.
    pub servers: BTreeMap<String, String>,
}

impl Descriptions {
    /// The rendered tool descriptions by canonical name, which outlives catalog indices (a
    /// session keeps them while its catalog is rebuilt) and is how search results look them up.
    pub fn tools_by_name(&self, catalog: &Catalog) -> BTreeMap<String, String> {
        self.tools
            .iter()
            .map(|(&i, d)| (catalog.tools()[i].name.clone(), d.clone()))
            .collect()
    }
}

/// The templates of a configuration and the package values they share.
#[derive(Debug, Clone, Default)]
pub struct Templates {
    vars: BTreeMap<String, Json>,
    tools: BTreeMap<String, String>,
    servers: BTreeMap<String, String>,
    workspace: Option<String>,
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Templates {
    /// The templates of `config`, each checked for syntax; errors name the key.
    pub fn new(config: &Config) -> Result<Self, String> {
        for name in config.template.vars.keys() {
            if !is_identifier(name) {
                return Err(format!(
                    "[template.vars] {name:?} is not a name a template can read as pkg.NAME (letters, digits and _, not starting with a digit)"
                ));
            }
            if CATALOG_VALUES.contains(&name.as_str()) {
                return Err(format!(
                    "[template.vars] {name:?} is a value the catalog fills in ({}); choose another name",
                    CATALOG_VALUES.join(", ")
                ));
            }
        }
        let mut tools = BTreeMap::new();
        for (name, t) in &config.tools {
            if t.script.is_some() && t.description_template.is_some() {
                return Err(format!(
                    "[tools.{name:?}] script and description_template are both set: a script tool's description is the script's `description`"
                ));
            }
            if let Some(src) = &t.description_template {
                check_syntax(src, &format!("[tools.{name:?}]")).map_err(|e| e.to_string())?;
                tools.insert(name.clone(), src.clone());
            }
        }
        let mut servers = BTreeMap::new();
        for (name, s) in &config.servers {
            if let Some(src) = &s.description_template {
                check_syntax(src, &format!("[servers.{name}]")).map_err(|e| e.to_string())?;
                servers.insert(name.clone(), src.clone());
            }
        }
        Ok(Self {
            vars: config.template.vars.clone(),
            tools,
            servers,
            workspace: config.template.workspace.clone(),
        })
    }

    /// What would make every render of the configuration's templates fail, whatever the session
    /// and the catalog: each `turn.NAME`, each stub used, and each `pkg.NAME` or `session.NAME`
    /// that no session or catalog ever fills in (see [`super::findings`]), one message each,
    /// tools first, in name order. A server that runs on such a configuration would start no
    /// session at all, so it refuses to start instead.
    pub fn faults(&self) -> Vec<String> {
        // Every name the catalog fills in for some template counts as held: a fault here is one
        // no render could avoid.
        let mut pkg: BTreeMap<String, Json> = CATALOG_VALUES
            .iter()
            .map(|k| ((*k).to_owned(), Json::Null))
            .collect();
        pkg.extend(self.vars.iter().map(|(k, v)| (k.clone(), v.clone())));
        let session = SessionValues::default();
        let tools = self
            .tools
            .iter()
            .map(|(name, src)| (format!("[tools.{name:?}]"), src));
        let servers = self
            .servers
            .iter()
            .map(|(name, src)| (format!("[servers.{name}]"), src));
        tools
            .chain(servers)
            .flat_map(
                |(owner, src)| match super::findings(src, &owner, &pkg, &session) {
                    Ok(found) => found.into_iter().map(|f| f.message).collect(),
                    Err(e) => vec![e.to_string()],
                },
            )
            .collect()
    }

    /// `[template] workspace`.
    pub fn workspace(&self) -> Option<&str> {
        self.workspace.as_deref()
    }

    /// `[template.vars]`.
    pub fn vars(&self) -> &BTreeMap<String, Json> {
        &self.vars
    }

    /// Catalog index → the configuration's template, for each `[tools.NAME]` that resolves to
    /// one tool. When several sections name one tool (`[tools.git_log]` and
    /// `[tools."mcp__git__git_log"]`), the one naming it exactly applies, else the first by name;
    /// [`Self::unmatched`] warns of the others.
    fn overlays(&self, catalog: &Catalog) -> BTreeMap<usize, &str> {
        self.claims(catalog)
            .into_iter()
            .map(|(i, keys)| (i, self.tools[keys[0]].as_str()))
            .collect()
    }

    /// Catalog index → the `[tools.NAME]` keys that resolve to that tool alone, the one that
    /// applies first: exact names before bare ones, each kind in name order.
    fn claims(&self, catalog: &Catalog) -> BTreeMap<usize, Vec<&str>> {
        let mut exact: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
        let mut bare: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
        for name in self.tools.keys() {
            match catalog.resolve(name) {
                Resolution::Exact(i) => exact.entry(i).or_default().push(name),
                Resolution::Bare(i) => bare.entry(i).or_default().push(name),
                Resolution::Ambiguous(_) | Resolution::NotFound => {}
            }
        }
        for (i, names) in bare {
            exact.entry(i).or_default().extend(names);
        }
        exact
    }

    fn server_source<'a>(&'a self, server: &'a Server) -> Option<&'a str> {
        self.servers
            .get(&server.original_name)
            .map(String::as_str)
            .or(server.description_template.as_deref())
    }

    /// Whether any tool or group of `catalog` has a template.
    pub fn any(&self, catalog: &Catalog) -> bool {
        !self.overlays(catalog).is_empty()
            || catalog
                .tools()
                .iter()
                .any(|t| t.description_template.is_some())
            || catalog
                .servers()
                .iter()
                .any(|s| self.server_source(s).is_some())
    }

    /// `[tools.NAME]` sections with a template that name no single tool of `catalog`.
    pub fn unmatched(&self, catalog: &Catalog, note: &dyn Fn(&str) -> String) -> Vec<String> {
        let mut out: Vec<String> = self
            .tools
            .keys()
            .filter_map(|name| match catalog.resolve(name) {
                Resolution::Exact(_) | Resolution::Bare(_) => None,
                Resolution::Ambiguous(_) => Some(format!(
                    "[tools.{name:?}] names several tools; its description_template applies to none (use the canonical name)"
                )),
                Resolution::NotFound => Some(format!(
                    "[tools.{name:?}] matches no tool{}; its description_template is not used",
                    note(name)
                )),
            })
            .collect();
        for (i, keys) in self.claims(catalog) {
            if let [applied, ignored @ ..] = keys.as_slice()
                && !ignored.is_empty()
            {
                let ignored: Vec<String> =
                    ignored.iter().map(|k| format!("[tools.{k:?}]")).collect();
                out.push(format!(
                    "{} {} {:?} as [tools.{applied:?}] does; the description_template of [tools.{applied:?}] applies",
                    ignored.join(", "),
                    if ignored.len() == 1 { "also names" } else { "also name" },
                    catalog.tools()[i].name,
                ));
            }
        }
        out
    }

    /// Renders the template of every visible tool and of every group that is not wholly hidden,
    /// for one session. The first template that fails fails the whole render: a session never
    /// starts with a description its template did not produce.
    pub fn render(
        &self,
        catalog: &Catalog,
        exposure: &Exposure,
        session: &SessionValues,
    ) -> Result<Descriptions, TemplateError> {
        let mut out = Descriptions::default();
        let visible = |i: usize| exposure.decisions[i].state != State::Hidden;
        let overlays = self.overlays(catalog);
        for (i, tool) in catalog.tools().iter().enumerate() {
            if !visible(i) {
                continue;
            }
            let Some(src) = overlays
                .get(&i)
                .copied()
                .or(tool.description_template.as_deref())
            else {
                continue;
            };
            let pkg = self.with_vars(tool_values(tool));
            let text = render(src, &format!("tool {:?}", tool.name), &pkg, session)?;
            out.tools.insert(i, text);
        }
        let mut shown: BTreeMap<&str, (bool, Vec<String>)> = BTreeMap::new();
        for (i, t) in catalog.tools().iter().enumerate() {
            if let Some(s) = &t.server {
                let e = shown.entry(s.as_str()).or_default();
                e.0 = true;
                if visible(i) {
                    e.1.push(t.bare.clone());
                }
            }
        }
        for server in catalog.servers() {
            let Some(src) = self.server_source(server) else {
                continue;
            };
            let (has_tools, mut names) = shown.remove(server.name.as_str()).unwrap_or_default();
            if has_tools && names.is_empty() {
                continue;
            }
            names.sort();
            let pkg = self.with_vars(server_values(server, names));
            let text = render(
                src,
                &format!("server group {:?}", server.prefix()),
                &pkg,
                session,
            )?;
            out.servers.insert(server.name.clone(), text);
        }
        Ok(out)
    }

    fn with_vars(&self, mut pkg: BTreeMap<String, Json>) -> BTreeMap<String, Json> {
        pkg.extend(self.vars.iter().map(|(k, v)| (k.clone(), v.clone())));
        pkg
    }
}

/// The catalog's `pkg` values for a tool.
pub fn tool_values(tool: &Tool) -> BTreeMap<String, Json> {
    let mut params: Vec<&String> = tool
        .input_schema
        .get("properties")
        .and_then(Json::as_object)
        .map(|p| p.keys().collect())
        .unwrap_or_default();
    params.sort();
    let mut required: Vec<&str> = tool
        .input_schema
        .get("required")
        .and_then(Json::as_array)
        .map(|r| r.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default();
    required.sort();
    BTreeMap::from([
        ("description".to_owned(), json!(tool.description)),
        ("name".to_owned(), json!(tool.name)),
        ("params".to_owned(), json!(params)),
        ("required".to_owned(), json!(required)),
        ("server".to_owned(), json!(tool.server)),
        ("tags".to_owned(), json!(tool.tags)),
        ("tool".to_owned(), json!(tool.bare)),
    ])
}

/// The names under `key` of a schema, sorted: its `properties`' keys, or the strings of its
/// `required` list (`pkg.params` and `pkg.required`).
pub fn schema_names(schema: &serde_json::Map<String, Json>, key: &str) -> Vec<String> {
    let mut v: Vec<String> = match schema.get(key) {
        Some(Json::Object(p)) => p.keys().cloned().collect(),
        Some(Json::Array(r)) => r
            .iter()
            .filter_map(Json::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    };
    v.sort();
    v
}

/// The `pkg` values of a script tool named `tool` in `server` (none: a tool the model wrote),
/// before `[template] vars`: what its script reads, when it is defined and when it runs.
pub fn script_values(
    server: Option<&str>,
    tool: &str,
    description: &str,
    schema: Option<&serde_json::Map<String, Json>>,
) -> BTreeMap<String, Json> {
    let sorted = |key: &str| schema.map_or_else(Vec::new, |s| schema_names(s, key));
    let canonical = match server {
        Some(s) => crate::name::mcp_name(s, &crate::name::tool_segment(tool)),
        None => tool.to_owned(),
    };
    BTreeMap::from([
        ("description".to_owned(), json!(description)),
        ("name".to_owned(), json!(canonical)),
        ("params".to_owned(), json!(sorted("properties"))),
        ("required".to_owned(), json!(sorted("required"))),
        ("server".to_owned(), json!(server)),
        ("tags".to_owned(), json!([])),
        ("tool".to_owned(), json!(tool)),
    ])
}

/// The catalog's `pkg` values for a server group whose visible tools are `tools` (bare names).
pub fn server_values(server: &Server, tools: Vec<String>) -> BTreeMap<String, Json> {
    BTreeMap::from([
        ("description".to_owned(), json!(server.description)),
        ("name".to_owned(), json!(server.name)),
        ("server".to_owned(), json!(server.name)),
        ("tools".to_owned(), json!(tools)),
    ])
}
