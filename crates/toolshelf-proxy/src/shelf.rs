//! The catalog of one request: the client's `tools` array, read as a toolshelf catalog.
//!
//! Client tools are built-ins; a name of the form `mcp__SERVER__TOOL` (as some harnesses name
//! their MCP tools) joins SERVER's group. A provider's own tools (Anthropic server tools such as
//! `web_search`, OpenAI hosted tools) are not the client's to run, so they are never deferred:
//! they stay in the list as sent. The exposure policy, modes and index of the core apply
//! unchanged, so the proxy defers exactly what `toolshelf render` shows for the same tools.
//!
//! Tools the proxy runs itself join every catalog: the configuration's script tools (the group
//! `scripts`, as in the gateway), `tool_define` when the model may write tools, and the tools
//! the model wrote in the session (built-ins of origin `model`). A client tool of the same name
//! wins; the proxy's own is left out of that catalog, and a model-written tool so hidden is
//! listed in [`Shelf::shadowed`], for the session to tell the model.
//!
//! Building one is the expensive part of a request (parsing every schema, the search index, the
//! token counts), and a client sends the same array on every request: shelves are cached by a
//! hash of the array's bytes, and one not cached is built on the blocking pool (see
//! `Proxy::shelf`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use toolshelf_core::catalog::{CatalogBuilder, ToolSpec};
use toolshelf_core::config::SCRIPTS_SERVER;
use toolshelf_core::invoke::ParamsValidator;
use toolshelf_core::name::{DEFER_EXECUTE, TOOL_SEARCH};
use toolshelf_core::policy::{Exposure, State};
use toolshelf_core::request::Api;
use toolshelf_core::search::SearchIndex;
use toolshelf_core::{Catalog, Compiled, Surface, Tool};

use crate::api::Dialect;

/// One request's catalog and everything derived from it.
#[derive(Debug)]
pub struct Shelf {
    /// The catalog.
    pub catalog: Catalog,
    /// Exposure decisions.
    pub exposure: Exposure,
    /// The surface.
    pub surface: Surface,
    /// Canonical names of visible tools.
    pub visible: BTreeSet<String>,
    /// A digest of the catalog's canonical names: which tools a session's rendered
    /// descriptions cover.
    pub names_digest: String,
    /// The tool list for the upstream: provider tools as sent, resident client tools as sent,
    /// then the meta-tools.
    pub upstream_tools: Vec<Value>,
    /// The client's name of each catalog tool.
    client_names: Vec<String>,
    by_client_name: HashMap<String, usize>,
    /// The search index over visible tools.
    pub search: SearchIndex,
    validators: toolshelf_core::invoke::Validators,
    /// Tokens of the client's tool list as sent (all resident).
    pub all_resident_tokens: usize,
    /// Tokens of the upstream tool list.
    pub upstream_tokens: usize,
    /// Which catalog tools the proxy runs itself.
    own: Vec<Option<Own>>,
    /// The tools passed along as sent, as a catalog of their names (any object as input): their
    /// calls meet the permission rules and `pre_call` hooks too.
    pub passed: Catalog,
    /// What the exposure policy (modes, deny rules) decides for each tool of [`Self::passed`]:
    /// one it hides is not sent upstream, and a call of it is refused like any hidden tool's.
    pub passed_exposure: Exposure,
    /// The name and type of every definition passed along as sent (those left out too), in the
    /// client's order: which tool a call of its own kind (`local_shell_call`) is of.
    passed_types: Vec<(String, String)>,
    passed_validators: toolshelf_core::invoke::Validators,
    /// Who runs each tool passed along and sent upstream, by name.
    passed_kinds: HashMap<String, Passed>,
    /// What building this shelf warned about: renamed tools, the policy's warnings, and deferred
    /// tools whose input schema is not valid JSON Schema (their calls through `defer_execute` are
    /// refused; a resident tool's schema is the provider's to judge). [`Shelves`] logs each once.
    pub warnings: Vec<String>,
    /// Names of the session's model-written tools that a client tool of the same name hides.
    pub shadowed: Vec<String>,
    /// How many model-written tools the catalog holds.
    pub authored: usize,
    /// The parts `upstream_tools` is assembled from, to assemble a session's own list when
    /// description templates apply: provider tools, resident client tools (catalog index,
    /// definition as sent), whether the client marked its tools for the prompt cache.
    parts: (Vec<Value>, Vec<(usize, Value)>, bool),
}

/// Who runs a tool passed along as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Passed {
    /// The client, from calls shaped like any client tool's (Anthropic's `bash`,
    /// `text_editor`, `computer`, `memory`).
    Client,
    /// The client, from calls of the tool's own kind (an OpenAI custom tool, `apply_patch`,
    /// `local_shell`): only the model's direct call has that shape. Its type.
    OwnCalls(String),
    /// The provider (`web_search`, `code_execution`, `file_search`). Its type.
    Provider(String),
}

impl Passed {
    fn of(dialect: Dialect, def: &Value) -> Self {
        let ty = def.get("type").and_then(Value::as_str).unwrap_or_default();
        let starts = |prefixes: &[&str]| prefixes.iter().any(|p| ty.starts_with(p));
        match dialect.api() {
            Api::Anthropic if starts(&["bash_", "text_editor_", "computer_", "memory_"]) => {
                Self::Client
            }
            Api::OpenAiChat | Api::OpenAiResponses
                if starts(&["custom", "local_shell", "shell", "apply_patch", "computer"]) =>
            {
                Self::OwnCalls(ty.to_owned())
            }
            _ => Self::Provider(ty.to_owned()),
        }
    }
}

/// A tool the proxy runs itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Own {
    /// A `[tools.NAME] script` tool.
    Script,
    /// `tool_define`.
    Define,
    /// A tool the model wrote in this session.
    Authored,
}

/// The proxy's own tools a catalog gets: script tools (items of the `scripts` group), whether
/// `tool_define` is offered, and the session's model-authored tools (catalog items).
#[derive(Debug, Clone, Copy, Default)]
pub struct OwnTools<'a> {
    /// Script tools, as items of the `scripts` group.
    pub scripts: &'a [Value],
    /// Whether `tool_define` is offered.
    pub define: bool,
    /// The session's model-authored tools.
    pub authored: &'a [toolshelf_core::authoring::Authored],
}

/// Keys a client's tool definition carries that are instructions to the provider, not part of
/// the tool.
const PROVIDER_KEYS: [&str; 2] = ["cache_control", "defer_loading"];

impl Shelf {
    /// Reads `tools` (the client's array) in `dialect`.
    pub fn build(
        dialect: Dialect,
        tools: &[Value],
        own_tools: OwnTools<'_>,
        compiled: &Compiled,
        enrich: Option<&toolshelf_runtime::enrich::Enricher>,
    ) -> Result<Self, String> {
        let mut b = CatalogBuilder::new("request tools");
        let mut provider_tools = Vec::new();
        let mut raw_by_name: HashMap<String, Value> = HashMap::new();
        let mut cache_marked = false;
        // Definitions the provider would refuse, said at once rather than by a 400 later.
        let mut found = Vec::new();
        for (i, def) in tools.iter().enumerate() {
            let Some(name) = dialect.client_tool_name(def) else {
                if dialect.looks_like_client_tool(def) {
                    found.push(format!(
                        "tools[{i}] has no name; it is passed along as sent, and the provider will likely refuse it"
                    ));
                }
                provider_tools.push(def.clone());
                continue;
            };
            let name = name.to_owned();
            let mut clean = def.clone();
            if let Some(obj) = clean.as_object_mut() {
                cache_marked |= obj.shift_remove("cache_control").is_some();
            }
            let spec = ToolSpec::from_value(clean.clone(), "request tools", &format!("tools[{i}]"))
                .map_err(|e| e.to_string())?;
            // Anthropic requires `input_schema`; an OpenAI function without `parameters` takes
            // none, which is valid.
            if spec.input_schema.is_none() && dialect.api() == Api::Anthropic {
                found.push(format!(
                    "tools[{i}] {name:?} has no input_schema; it is searched and run as taking any object, but the provider would refuse it if it were sent"
                ));
            }
            let spec = spec.as_client_tool();
            if let Some(obj) = clean.as_object_mut() {
                for k in PROVIDER_KEYS {
                    obj.shift_remove(k);
                }
            }
            if raw_by_name.insert(name.clone(), clean).is_some() {
                return Err(format!("tools[{i}]: the tool name {name:?} appears twice"));
            }
            b.add_tool(None, spec, &format!("tools[{i}]"))
                .map_err(|e| e.to_string())?;
        }
        let mut own_by_name: HashMap<String, Own> = HashMap::new();
        let mut shadowed = Vec::new();
        // The script tools' group has the header the gateway gives it.
        if !own_tools.scripts.is_empty()
            && let Err(e) = b.add_server(
                SCRIPTS_SERVER,
                toolshelf_core::config::SCRIPTS_DESCRIPTION,
                "proxy tools",
            )
        {
            tracing::warn!("{e}");
        }
        let define = own_tools
            .define
            .then(toolshelf_core::authoring::tool_define_item);
        let own_items = own_tools
            .scripts
            .iter()
            .map(|t| (Some(SCRIPTS_SERVER), t, Own::Script))
            .chain(define.iter().map(|t| (None, t, Own::Define)))
            .chain(
                own_tools
                    .authored
                    .iter()
                    .map(|t| (None, &t.item, Own::Authored)),
            );
        for (k, (server, item, kind)) in own_items.enumerate() {
            let tool = item.get("name").and_then(Value::as_str).unwrap_or_default();
            let name = match server {
                Some(s) => format!("mcp__{s}__{tool}"),
                None => tool.to_owned(),
            };
            if raw_by_name.contains_key(&name) {
                if kind == Own::Authored {
                    shadowed.push(name);
                } else {
                    tracing::warn!(
                        "the client's tool {name:?} hides the proxy's tool of that name"
                    );
                }
                continue;
            }
            let at = format!("proxy tool {name:?}");
            let added = ToolSpec::from_value(item.clone(), "proxy tools", &at)
                .and_then(|spec| b.add_tool(server, spec, &at));
            match added {
                Ok(()) => {
                    own_by_name.insert(name, kind);
                }
                Err(e) => tracing::warn!("left out of the catalog ({k}): {e}"),
            }
        }
        let catalog = b.build();
        let client_names: Vec<String> = catalog.tools().iter().map(client_name).collect();
        let own: Vec<Option<Own>> = client_names
            .iter()
            .map(|n| own_by_name.get(n).copied())
            .collect();
        for (i, kind) in own.iter().enumerate() {
            // An own tool that the exposure policy keeps resident is listed like a client tool.
            if kind.is_some() {
                raw_by_name.insert(
                    client_names[i].clone(),
                    toolshelf_core::wire::definition(
                        &catalog.tools()[i],
                        dialect.api().tool_format(),
                    ),
                );
            }
        }
        let by_client_name = client_names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        let mut exposure = compiled.expose(&catalog);
        // A client tool named as a meta-tool cannot be sent as it is, and sent renamed its
        // calls would reach the client under the wrong name: it is deferred, where the model
        // finds and runs it by its catalog name and the client gets its own name back.
        for (i, d) in exposure.decisions.iter_mut().enumerate() {
            let name = &client_names[i];
            if d.state == State::Resident && [TOOL_SEARCH, DEFER_EXECUTE].contains(&name.as_str()) {
                d.state = State::Deferred;
                d.reason = format!(
                    "named as the meta-tool {name:?}: deferred, and found and run as {:?}",
                    catalog.tools()[i].name
                );
                found.push(format!(
                    "the client's tool {name:?} has a meta-tool's name: it is deferred (as {:?}) whatever the rules say",
                    catalog.tools()[i].name
                ));
            }
        }
        let surface = compiled.surface(&catalog, &exposure);
        let mut warnings: Vec<String> = found;
        // The client's own tools are the index's built-in names, which are never dropped: a
        // client of many plainly named tools is over the budget with nothing else to cut.
        warnings.extend(surface.index.as_ref().and_then(|idx| {
            idx.budget_warning().map(|w| {
                format!(
                    "{w} (the client's tools not named mcp__SERVER__TOOL are its built-in names)"
                )
            })
        }));
        warnings.extend(catalog.warnings().iter().chain(&exposure.warnings).cloned());
        warnings.extend(toolshelf_core::ledger::oversized_residents(
            &catalog,
            &surface,
            dialect.api().tool_format(),
            compiled.config().defer.window,
        ));
        warnings.extend(
            catalog
                .tools()
                .iter()
                .zip(&exposure.decisions)
                .filter(|(_, d)| d.state == State::Deferred)
                .filter_map(|(t, _)| toolshelf_core::invoke::schema_warning(t)),
        );
        let visible = catalog
            .tools()
            .iter()
            .zip(&exposure.decisions)
            .filter(|(_, d)| d.state != State::Hidden)
            .map(|(t, _)| t.name.clone())
            .collect();
        let resident: Vec<(usize, Value)> = surface
            .resident
            .iter()
            .filter_map(|&i| raw_by_name.remove(&client_names[i]).map(|def| (i, def)))
            .collect();
        let passed_types = provider_tools
            .iter()
            .filter_map(passed_name_and_type)
            .collect();
        let (provider_tools, passed, passed_exposure) =
            governed(provider_tools, compiled, &mut warnings);
        let passed_kinds = provider_tools
            .iter()
            .filter_map(|def| Some((passed_name(def)?, Passed::of(dialect, def))))
            .collect();
        let parts = (provider_tools, resident, cache_marked);
        let upstream_tools = assemble(&parts, &surface, dialect);
        let shown: Vec<usize> = (0..catalog.tools().len())
            .filter(|&i| exposure.decisions[i].state != State::Hidden)
            .collect();
        let mut search = SearchIndex::build(&catalog, &shown);
        if let Some(enrich) = enrich
            && let Err(e) = (enrich.0)(&mut search, &catalog)
        {
            tracing::warn!("search runs on BM25F alone: {e}");
        }
        let all_resident_tokens =
            toolshelf_core::tokens::count(&Value::Array(tools.to_vec()).to_string());
        let upstream_tokens =
            toolshelf_core::tokens::count(&Value::Array(upstream_tools.clone()).to_string());
        let names: Vec<&str> = catalog.tools().iter().map(|t| t.name.as_str()).collect();
        let names_digest = crate::session::digest(&names);
        let authored = own.iter().filter(|k| **k == Some(Own::Authored)).count();
        Ok(Self {
            shadowed,
            authored,
            catalog,
            exposure,
            surface,
            visible,
            upstream_tools,
            client_names,
            by_client_name,
            search,
            validators: Default::default(),
            own,
            all_resident_tokens,
            names_digest,
            upstream_tokens,
            warnings,
            passed,
            passed_exposure,
            passed_types,
            passed_validators: Default::default(),
            passed_kinds,
            parts,
        })
    }

    /// The tool list one session freezes: `upstream_tools`, or, when description templates apply
    /// to these tools, the same list with the templates rendered for `session`; with it, every
    /// rendered description by canonical name (deferred tools' too, for search results). A
    /// template that fails is an error naming the tool and the line.
    pub fn session_tools(
        &self,
        dialect: Dialect,
        compiled: &Compiled,
        session: &toolshelf_core::template::SessionValues,
    ) -> Result<(Vec<Value>, BTreeMap<String, String>), String> {
        Ok(match self.session_surface(compiled, session)? {
            None => (self.upstream_tools.clone(), BTreeMap::new()),
            Some(surface) => (
                assemble(&self.parts, &surface, dialect),
                surface.descriptions().tools_by_name(&self.catalog),
            ),
        })
    }

    /// Every description the templates render for `session`, by canonical name.
    pub fn session_descriptions(
        &self,
        compiled: &Compiled,
        session: &toolshelf_core::template::SessionValues,
    ) -> Result<BTreeMap<String, String>, String> {
        Ok(self
            .session_surface(compiled, session)?
            .map(|s| s.descriptions().tools_by_name(&self.catalog))
            .unwrap_or_default())
    }

    /// The surface with the templates rendered for `session`; `None` when no template applies
    /// to these tools.
    fn session_surface(
        &self,
        compiled: &Compiled,
        session: &toolshelf_core::template::SessionValues,
    ) -> Result<Option<Surface>, String> {
        if !compiled.templates().any(&self.catalog) {
            return Ok(None);
        }
        compiled
            .session_surface(&self.catalog, &self.exposure, session)
            .map(Some)
            .map_err(|e| e.to_string())
    }

    /// The client's name of catalog tool `i`.
    pub fn client_name(&self, i: usize) -> &str {
        &self.client_names[i]
    }

    /// The catalog tool a client name stands for.
    pub fn by_client_name(&self, name: &str) -> Option<usize> {
        self.by_client_name.get(name).copied()
    }

    /// Whether the proxy runs tool `i` itself, and as what.
    pub fn own(&self, i: usize) -> Option<Own> {
        self.own.get(i).copied().flatten()
    }

    /// Tool `i`'s state.
    pub fn state(&self, i: usize) -> State {
        self.exposure.decisions[i].state
    }

    /// Tool `i`'s compiled validator.
    pub fn validator(&self, i: usize) -> Arc<ParamsValidator> {
        self.validators.get(i, &self.catalog.tools()[i])
    }

    /// Who runs the tool `name` passed along as sent; `None` when no such tool goes upstream.
    pub fn passed_kind(&self, name: &str) -> Option<&Passed> {
        self.passed_kinds.get(name)
    }

    /// The names of the tools passed along as sent (those left out too) whose calls are of the
    /// kind `base` (`local_shell` for a `local_shell_call`, `computer` for a `computer_call`):
    /// the definitions of that type, or of a type that starts with it and `_`
    /// (`computer_use_preview`), in the client's order; empty when the client sent none.
    pub fn own_call_tools(&self, base: &str) -> Vec<&str> {
        self.passed_types
            .iter()
            .filter(|(_, ty)| type_is(ty, base))
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// The type of the tool passed along as sent named `name` (those left out too); `None` when
    /// the client sent none of that name.
    pub fn passed_type(&self, name: &str) -> Option<&str> {
        self.passed_types
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, ty)| ty.as_str())
    }

    /// Whether the tool passed along as sent named `name` is one the exposure policy hides.
    pub fn passed_hidden(&self, name: &str) -> bool {
        self.passed
            .position(name)
            .is_some_and(|i| self.passed_exposure.decisions[i].state == State::Hidden)
    }

    /// The validator of tool `i` of [`Self::passed`].
    pub fn passed_validator(&self, i: usize) -> Arc<ParamsValidator> {
        self.passed_validators.get(i, &self.passed.tools()[i])
    }
}

/// Provider tools, resident client tools as sent (with a rendered description in place of
/// theirs), then the meta-tools; a client's prompt-cache mark moves to the list's end.
/// The definitions the proxy passes along as sent (a provider's server tools such as
/// `web_search`, tools of a type the client runs itself such as Anthropic's `bash`), less those
/// the active mode leaves out or a deny rule names: they are never deferred, but they are
/// governed like every other tool. Each one left out is a warning.
fn governed(
    defs: Vec<Value>,
    compiled: &Compiled,
    warnings: &mut Vec<String>,
) -> (Vec<Value>, Catalog, Exposure) {
    let name_of = passed_name;
    let mut b = CatalogBuilder::new("passed-along tools");
    let mut names = BTreeSet::new();
    for def in &defs {
        if let Some(name) = name_of(def)
            && names.insert(name.clone())
        {
            let item = serde_json::json!({"name": name, "input_schema": {"type": "object"}});
            let at = format!("tool {name:?}");
            if let Ok(spec) = ToolSpec::from_value(item, "passed-along tools", &at) {
                let _ = b.add_tool(None, spec, &at);
            }
        }
    }
    let probe = b.build();
    let exposure = compiled.expose(&probe);
    let hidden: BTreeMap<&str, &str> = probe
        .tools()
        .iter()
        .zip(&exposure.decisions)
        .filter(|(_, d)| d.state == State::Hidden)
        .map(|(t, d)| (t.original_name.as_str(), d.reason.as_str()))
        .collect();
    let kept = defs
        .into_iter()
        .filter(|def| {
            let Some(name) = name_of(def) else {
                return true;
            };
            let Some(reason) = hidden.get(name.as_str()) else {
                return true;
            };
            warnings.push(format!(
                "the client's tool {name:?} is not sent upstream: {reason}"
            ));
            false
        })
        .collect();
    (kept, probe, exposure)
}

/// Whether a tool of type `ty` is the one calls of the kind `base` are of: the type itself, or
/// a type that starts with it and `_` (`computer_use_preview` for `computer`).
pub fn type_is(ty: &str, base: &str) -> bool {
    ty == base
        || ty
            .strip_prefix(base)
            .is_some_and(|rest| rest.starts_with('_'))
}

/// The name and type of a definition passed along as sent (its name is its type when it has
/// none).
pub fn passed_name_and_type(def: &Value) -> Option<(String, String)> {
    let ty = def.get("type").and_then(Value::as_str).unwrap_or_default();
    Some((passed_name(def)?, ty.to_owned()))
}

/// The name a tool passed along as sent is called by (its type when it has none).
fn passed_name(def: &Value) -> Option<String> {
    def.get("name")
        .or_else(|| def.pointer("/function/name"))
        .or_else(|| def.pointer("/custom/name"))
        .or_else(|| def.get("type"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn assemble(
    (provider, resident, cache_marked): &(Vec<Value>, Vec<(usize, Value)>, bool),
    surface: &Surface,
    dialect: Dialect,
) -> Vec<Value> {
    let mut out = provider.clone();
    for (i, def) in resident {
        let mut def = def.clone();
        if let Some(text) = surface.descriptions().tools.get(i) {
            let slot = match def.get_mut("function") {
                Some(Value::Object(f)) => f,
                _ => match def.as_object_mut() {
                    Some(o) => o,
                    None => continue,
                },
            };
            slot.insert("description".into(), Value::String(text.clone()));
        }
        out.push(def);
    }
    out.extend(surface.meta_tools(dialect.api().tool_format()));
    if *cache_marked && let Some(Value::Object(last)) = out.last_mut() {
        // The client marked its tools for the prompt cache: the mark moves to the list's end.
        last.insert(
            "cache_control".into(),
            serde_json::json!({"type": "ephemeral"}),
        );
    }
    out
}

fn client_name(t: &Tool) -> String {
    match &t.original_server {
        Some(s) => format!("mcp__{s}__{}", t.original_name),
        None => t.original_name.clone(),
    }
}

/// Shelves by a hash of their tool array, a few kept.
#[derive(Debug, Default)]
pub struct Shelves {
    cache: Mutex<Vec<(u64, Dialect, Arc<Shelf>)>>,
    /// Warnings logged already: clients send arrays that differ in a tool or two (another mode,
    /// a session's own tools), and each would repeat the rest's warnings.
    warned: Mutex<BTreeSet<String>>,
}

/// How many distinct warnings are remembered; past it the memory starts again.
const WARNED_KEPT: usize = 4096;

/// How many shelves are kept: one per distinct tool array in use (per harness and mode).
const KEPT: usize = 16;

impl Shelves {
    /// The most recently used shelf.
    pub fn latest(&self) -> Option<Arc<Shelf>> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.last().map(|(_, _, s)| s.clone())
    }

    /// The most recently used shelf without model-written tools, else the most recent one.
    pub fn latest_without_authored(&self) -> Option<Arc<Shelf>> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .iter()
            .rev()
            .find(|(_, _, s)| s.authored == 0)
            .or(cache.last())
            .map(|(_, _, s)| s.clone())
    }

    /// The key of the shelf of `tools` with the model's `authored` tools (script tools and
    /// `tool_define` are the same for every request; the model's tools are the session's).
    pub fn key(tools: &[Value], authored: &[toolshelf_core::authoring::Authored]) -> u64 {
        hash_tools(tools.iter().chain(authored.iter().map(|t| &t.item)))
    }

    /// The shelf of `key` (see [`Self::key`]) in `dialect`, if it was built.
    pub fn cached(&self, key: u64, dialect: Dialect) -> Option<Arc<Shelf>> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let pos = cache
            .iter()
            .position(|(k, d, _)| *k == key && *d == dialect)?;
        let hit = cache.remove(pos);
        let shelf = hit.2.clone();
        cache.push(hit);
        Some(shelf)
    }

    /// Keeps `shelf`, just built, as the shelf of `key` in `dialect`, logging the warnings not
    /// logged before. Returns the shelf kept: one another request built meanwhile, if any.
    pub fn keep(&self, key: u64, dialect: Dialect, shelf: Shelf) -> Arc<Shelf> {
        if let Some(built) = self.cached(key, dialect) {
            return built;
        }
        let shelf = Arc::new(shelf);
        {
            let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
            for w in &shelf.warnings {
                if !warned.contains(w) {
                    if warned.len() >= WARNED_KEPT {
                        warned.clear();
                    }
                    tracing::warn!("{w}");
                    warned.insert(w.clone());
                }
            }
        }
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= KEPT {
            cache.remove(0);
        }
        cache.push((key, dialect, shelf.clone()));
        shelf
    }
}

fn hash_tools<'a>(tools: impl Iterator<Item = &'a Value>) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for t in tools {
        hash_value(t, &mut h);
    }
    h.finish()
}

/// Hashes a value's structure and contents in order, without writing it out.
fn hash_value(v: &Value, h: &mut impl std::hash::Hasher) {
    use std::hash::Hash;
    match v {
        Value::Null => h.write_u8(0),
        Value::Bool(b) => {
            h.write_u8(1);
            b.hash(h);
        }
        Value::Number(n) => {
            h.write_u8(2);
            n.to_string().hash(h);
        }
        Value::String(s) => {
            h.write_u8(3);
            s.hash(h);
        }
        Value::Array(a) => {
            h.write_u8(4);
            h.write_usize(a.len());
            for x in a {
                hash_value(x, h);
            }
        }
        Value::Object(m) => {
            h.write_u8(5);
            h.write_usize(m.len());
            for (k, x) in m {
                k.hash(h);
                hash_value(x, h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use toolshelf_core::Config;
    use toolshelf_core::template::SessionValues;

    use super::*;

    fn compiled(toml: &str) -> Compiled {
        Compiled::new(
            Config::from_toml_str(toml, "t.toml").expect("config"),
            "t.toml",
            None,
        )
        .expect("compiles")
    }

    fn session(client: &str) -> SessionValues {
        SessionValues {
            client: Some(client.into()),
            ..SessionValues::default()
        }
    }

    #[test]
    fn a_client_tool_named_as_a_meta_tool_is_deferred_whatever_the_rules_say() {
        let c = compiled("[defer]\nrules = [\"NoDefer(^tool_search)\", \"NoDefer(^Read$)\"]");
        let tools = vec![
            json!({"name": "tool_search", "description": "The client's own search.",
                   "input_schema": {"type": "object"}}),
            json!({"name": "Read", "description": "Read a file.", "input_schema": {"type": "object"}}),
            json!({"name": "Grep", "description": "Search files.", "input_schema": {"type": "object"}}),
        ];
        let d = Dialect(Api::Anthropic);
        let shelf = Shelf::build(d, &tools, Default::default(), &c, None).expect("builds");
        let names: Vec<&str> = shelf
            .upstream_tools
            .iter()
            .filter_map(|t| d.client_tool_name(t))
            .collect();
        assert_eq!(
            names,
            ["Read", "tool_search", "defer_execute"],
            "each name once"
        );
        assert!(
            shelf.upstream_tools[1]["description"]
                .as_str()
                .is_some_and(|s| s.contains("<available_deferred_tools>")),
            "the one tool_search sent is the meta-tool"
        );
        let i = shelf
            .by_client_name("tool_search")
            .expect("the client's tool");
        assert_eq!(shelf.state(i), State::Deferred);
        assert_ne!(shelf.catalog.tools()[i].name, "tool_search");
        assert!(
            shelf
                .warnings
                .iter()
                .any(|w| w.contains("has a meta-tool's name")),
            "{:?}",
            shelf.warnings
        );
    }

    #[test]
    fn a_resident_tool_that_fills_the_window_is_warned_about() {
        let c = compiled("[defer]\nrules = [\"NoDefer(^Huge$)\"]");
        let tools = vec![
            json!({"name": "Huge", "description": "word ".repeat(11_000),
                   "input_schema": {"type": "object"}}),
            json!({"name": "Small", "description": "x", "input_schema": {"type": "object"}}),
        ];
        let shelf = Shelf::build(
            Dialect(Api::Anthropic),
            &tools,
            Default::default(),
            &c,
            None,
        )
        .expect("builds");
        let warned: Vec<&String> = shelf
            .warnings
            .iter()
            .filter(|w| w.contains("alone takes"))
            .collect();
        assert_eq!(warned.len(), 1, "{:?}", shelf.warnings);
        assert!(
            warned[0].starts_with("resident tool \"Huge\""),
            "{warned:?}"
        );
    }

    #[test]
    fn a_session_list_renders_templates_in_the_definitions_as_sent() {
        let c = compiled(
            "[defer]\nrules = [\"NoDefer(^Read$)\"]\n\
             [tools.Read]\ndescription_template = \"part(pkg.description, 'for', session.client)\"",
        );
        let anthropic = vec![
            json!({"name": "Read", "description": "Read a file.", "cache_control": {"type": "ephemeral"},
                   "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}),
            json!({"name": "Grep", "description": "Search.", "input_schema": {"type": "object"}}),
        ];
        let shelf = Shelf::build(
            Dialect(Api::Anthropic),
            &anthropic,
            Default::default(),
            &c,
            None,
        )
        .expect("builds");
        let (tools, described) = shelf
            .session_tools(Dialect(Api::Anthropic), &c, &session("cli/1.0"))
            .expect("renders");
        assert_eq!(tools[0]["description"], "Read a file. for cli/1.0");
        assert_eq!(
            described.get("Read").map(String::as_str),
            Some("Read a file. for cli/1.0")
        );
        // The rest of the definition is as the client sent it; the cache mark moved to the end.
        assert_eq!(tools[0]["input_schema"], anthropic[0]["input_schema"]);
        assert_eq!(
            tools.last().expect("meta")["cache_control"]["type"],
            "ephemeral"
        );
        // The shelf's own list, shared by every session, is unchanged.
        assert_eq!(shelf.upstream_tools[0]["description"], "Read a file.");
        // Equal inputs, equal bytes.
        let (again, _) = shelf
            .session_tools(Dialect(Api::Anthropic), &c, &session("cli/1.0"))
            .expect("renders");
        assert_eq!(
            Value::Array(tools).to_string(),
            Value::Array(again).to_string()
        );

        let chat = vec![
            json!({"type": "function", "function": {"name": "Read", "description": "Read a file.",
                   "parameters": {"type": "object"}}}),
            json!({"type": "function", "function": {"name": "Grep", "description": "Search.",
                   "parameters": {"type": "object"}}}),
        ];
        let shelf = Shelf::build(
            Dialect(Api::OpenAiChat),
            &chat,
            Default::default(),
            &c,
            None,
        )
        .expect("builds");
        let (tools, _) = shelf
            .session_tools(Dialect(Api::OpenAiChat), &c, &session("sdk"))
            .expect("renders");
        assert_eq!(tools[0]["function"]["description"], "Read a file. for sdk");
        assert!(tools[0].get("description").is_none());
    }

    #[test]
    fn a_failing_template_fails_the_session_list_naming_the_tool() {
        let c = compiled("[tools.Read]\ndescription_template = \"x = 1\\nstr(turn.messages)\"");
        let tools =
            vec![json!({"name": "Read", "description": "r", "input_schema": {"type": "object"}})];
        let shelf = Shelf::build(
            Dialect(Api::Anthropic),
            &tools,
            Default::default(),
            &c,
            None,
        )
        .expect("builds");
        let e = shelf
            .session_tools(Dialect(Api::Anthropic), &c, &session("x"))
            .expect_err("fails");
        assert!(
            e.starts_with("tool \"Read\": description template line 2: reads turn.messages"),
            "{e}"
        );
    }

    /// Anthropic requires `input_schema`, so a tool without one is warned about there; an OpenAI
    /// function without `parameters` takes none, which is valid.
    #[test]
    fn a_missing_schema_is_a_warning_where_the_provider_requires_one() {
        let c = compiled("");
        let warned = |dialect: Dialect, tool: Value| {
            Shelf::build(dialect, &[tool], Default::default(), &c, None)
                .expect("builds")
                .warnings
                .iter()
                .any(|w| w.contains("has no input_schema"))
        };
        assert!(warned(
            Dialect(Api::Anthropic),
            json!({"name": "bare", "description": "x"})
        ));
        assert!(!warned(
            Dialect(Api::OpenAiChat),
            json!({"type": "function", "function": {"name": "bare", "description": "x"}})
        ));
        assert!(!warned(
            Dialect(Api::OpenAiResponses),
            json!({"type": "function", "name": "bare", "description": "x"})
        ));
    }
}
