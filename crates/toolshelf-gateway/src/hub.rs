//! The hub: what every client session shares.
//!
//! It owns the downstream servers, the current catalog snapshot, the audit log and the cache and
//! status files. A snapshot (catalog, exposure, surface, the MCP tool list) is immutable and
//! rebuilt whole whenever a server's tools change; sessions hold an `Arc` to the one they started
//! with for their frozen list and read the newest one for search and execution. Rebuilds are
//! serialised, so two servers finishing start-up together cannot overwrite each other's tools.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;
use toolshelf_core::audit::AuditKind;
use toolshelf_core::config::ServerConfig;
use toolshelf_core::invoke::ParamsValidator;
use toolshelf_core::permission::Permissions;
use toolshelf_core::search::SearchIndex;
use toolshelf_core::{
    Catalog, CatalogBuilder, Config, Exposure, Format, Policy, State, Surface, Tool, ToolSpec,
};

use crate::audit::Audit;
use crate::cache::{CachedServer, CatalogCache, config_key, default_cache_dir, fingerprint};
use crate::downstream::{Downstream, ServerState, ServerStatus};
use crate::error::{GatewayError, Result};

/// How to build a gateway.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The configuration (its `[servers]` already merged with any `--mcp-config`).
    pub config: Config,
    /// Names the configuration in errors and keys the cache (an absolute path, ideally).
    pub label: String,
    /// Active mode.
    pub mode: Option<String>,
    /// Serve cached tools and start cached servers lazily (`serve`); `false` starts every server
    /// now (`catalog`, `status` probes).
    pub lazy: bool,
    /// Write the status file for `toolshelf status`.
    pub status_file: bool,
    /// Restart crashed and failed servers in the background (`serve`); one-shot commands that
    /// report what they saw (`catalog`, `status`) turn this off.
    pub restarts: bool,
    /// Adds rankers to each snapshot's search index (the embedding ranker), off the request
    /// path: until it is done, search uses BM25F alone.
    pub enrich: Option<Enricher>,
}

/// Something that adds retrievers to a search index, such as the embedding ranker. It runs on a
/// background thread for every new snapshot, so model loading never delays `tools/list`.
#[derive(Clone)]
pub struct Enricher(pub Arc<EnrichFn>);

/// The function inside an [`Enricher`]: adds retrievers, or says why it could not.
pub type EnrichFn =
    dyn Fn(&mut SearchIndex, &Catalog) -> std::result::Result<(), String> + Send + Sync;

impl std::fmt::Debug for Enricher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Enricher")
    }
}

/// One background thread that adds the enricher's rankers to the newest snapshot. Snapshots are
/// rebuilt in bursts (one per server that finishes starting); only the newest matters, since
/// sessions search the newest one, so a snapshot replaced before its turn is skipped.
#[derive(Debug)]
struct Enrichment {
    latest: Arc<(Mutex<Option<std::sync::Weak<Snapshot>>>, std::sync::Condvar)>,
}

impl Enrichment {
    fn start(enricher: Enricher) -> Option<Self> {
        let latest: Arc<(Mutex<Option<std::sync::Weak<Snapshot>>>, std::sync::Condvar)> =
            Arc::default();
        let shared = Arc::clone(&latest);
        let spawned = std::thread::Builder::new()
            .name("toolshelf-enrich".into())
            .spawn(move || {
                loop {
                    let next = {
                        let (slot, wake) = &*shared;
                        let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
                        loop {
                            if let Some(weak) = guard.take() {
                                break weak;
                            }
                            guard = wake.wait(guard).unwrap_or_else(|p| p.into_inner());
                        }
                    };
                    // Gone already: replaced and no longer searched by anyone.
                    let Some(snap) = next.upgrade() else { continue };
                    let started = std::time::Instant::now();
                    let mut index = snap.search.clone_lexical();
                    match (enricher.0)(&mut index, &snap.catalog) {
                        Ok(()) => {
                            let _ = snap.enriched.set(index);
                            tracing::info!(
                                tools = snap.search.len(),
                                ms = started.elapsed().as_millis() as u64,
                                "semantic search ready"
                            );
                        }
                        Err(e) => {
                            tracing::warn!("semantic search unavailable, using BM25F alone: {e}")
                        }
                    }
                }
            });
        match spawned {
            Ok(_) => Some(Self { latest }),
            Err(e) => {
                tracing::warn!("cannot start the semantic indexer, using BM25F alone: {e}");
                None
            }
        }
    }

    /// Makes `snap` the next to enrich, replacing any snapshot still waiting.
    fn submit(&self, snap: &Arc<Snapshot>) {
        let (slot, wake) = &*self.latest;
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::downgrade(snap));
        wake.notify_one();
    }
}

/// One immutable view of the catalog and what sessions may see of it.
#[derive(Debug)]
pub struct Snapshot {
    /// The merged catalog of every server's known tools.
    pub catalog: Catalog,
    /// Policy decisions, with unconditionally denied tools hidden.
    pub exposure: Exposure,
    /// The model-visible surface.
    pub surface: Surface,
    /// Canonical names of every visible (not hidden) tool.
    pub visible: BTreeSet<String>,
    /// The MCP `tools/list` items of the surface.
    pub tools_list: Vec<rmcp::model::Tool>,
    /// The search index over the visible tools (BM25F).
    pub search: SearchIndex,
    /// The same index with the enricher's rankers, once built in the background.
    enriched: std::sync::OnceLock<SearchIndex>,
    validators: Mutex<HashMap<usize, Arc<ParamsValidator>>>,
}

impl Snapshot {
    fn build(
        catalog: Catalog,
        policy: &Policy,
        permissions: &Permissions,
        config: &Config,
    ) -> Self {
        let mut exposure = policy.apply(&catalog);
        permissions.hide_denied(&catalog, &mut exposure);
        let surface = Surface::new(&catalog, &exposure, config);
        for w in catalog.warnings().iter().chain(&exposure.warnings) {
            tracing::warn!("{w}");
        }
        let visible = catalog
            .tools()
            .iter()
            .zip(&exposure.decisions)
            .filter(|(_, d)| d.state != State::Hidden)
            .map(|(t, _)| t.name.clone())
            .collect();
        let tools_list = surface
            .tools(&catalog, Format::Mcp)
            .into_iter()
            .filter_map(|v| match serde_json::from_value(v) {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::error!("cannot express a tool definition in MCP: {e}");
                    None
                }
            })
            .collect();
        let shown: Vec<usize> = (0..catalog.tools().len())
            .filter(|&i| exposure.decisions[i].state != State::Hidden)
            .collect();
        let search = SearchIndex::build(&catalog, &shown);
        Self {
            catalog,
            exposure,
            surface,
            visible,
            tools_list,
            search,
            enriched: std::sync::OnceLock::new(),
            validators: Mutex::new(HashMap::new()),
        }
    }

    /// The best search index available now: enriched when ready, else BM25F alone.
    pub fn search_index(&self) -> &SearchIndex {
        self.enriched.get().unwrap_or(&self.search)
    }

    /// Whether tool `i` may be shown and run.
    pub fn is_visible(&self, i: usize) -> bool {
        self.exposure.decisions[i].state != State::Hidden
    }

    /// Tool `i`'s state.
    pub fn state(&self, i: usize) -> State {
        self.exposure.decisions[i].state
    }

    /// The compiled validator of tool `i`'s input schema (compiled on first use).
    pub fn validator(&self, i: usize) -> Arc<ParamsValidator> {
        let mut map = self.validators.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(i)
            .or_insert_with(|| {
                Arc::new(ParamsValidator::new(&self.catalog.tools()[i].input_schema))
            })
            .clone()
    }
}

/// The shared state of a running gateway.
#[derive(Debug)]
pub struct Hub {
    /// The configuration.
    pub config: Config,
    label: String,
    policy: Policy,
    /// Permission rules.
    pub permissions: Permissions,
    /// Downstream servers by configured name.
    pub servers: BTreeMap<String, Arc<Downstream>>,
    snapshot: RwLock<Arc<Snapshot>>,
    rebuild_lock: Mutex<()>,
    /// The audit log.
    pub audit: Audit,
    cache: Option<CatalogCache>,
    status_path: Option<PathBuf>,
    settled: tokio::sync::watch::Sender<bool>,
    sessions: AtomicU64,
    /// Whether servers are restarted in the background.
    pub restarts: bool,
    enrichment: Option<Enrichment>,
}

/// Merges `[servers]` of the configuration with the servers of an `mcp.json`; a name in both is
/// an error naming both files.
pub fn merge_servers(
    config: &mut Config,
    mcp: BTreeMap<String, ServerConfig>,
    config_label: &str,
    mcp_label: &str,
) -> Result<()> {
    for (name, server) in mcp {
        if config.servers.contains_key(&name) {
            return Err(GatewayError::Server {
                server: name,
                message: format!("is defined in both {config_label} and {mcp_label}; keep one"),
            });
        }
        config.servers.insert(name, server);
    }
    Ok(())
}

impl Hub {
    /// Builds the gateway and starts every server that needs starting. Call inside a Tokio
    /// runtime.
    pub fn start(settings: Settings) -> Result<Arc<Self>> {
        let Settings {
            config,
            label,
            mode,
            lazy,
            status_file,
            restarts,
            enrich,
        } = settings;
        let policy = Policy::new(&config, &label, mode.as_deref())?;
        let permissions = Permissions::new(&config.permissions, &label)?;
        let cache_dir = cache_dir(&config);
        let key = config_key(&label);
        let cache = config
            .cache
            .enabled
            .then(|| CatalogCache::new(&cache_dir, &key));
        let cached = match (&cache, lazy) {
            (Some(c), true) => c.load(),
            _ => BTreeMap::new(),
        };
        let audit = if config.audit.enabled {
            let path = config
                .audit
                .path
                .as_ref()
                .map(PathBuf::from)
                .unwrap_or_else(|| cache_dir.join("audit.jsonl"));
            Audit::open(&path)?
        } else {
            Audit::disabled()
        };
        let status_path = status_file.then(|| status_path(&cache_dir, &label));
        let (settled, _) = tokio::sync::watch::channel(false);
        let hub = Arc::new_cyclic(|weak| {
            let servers = config
                .servers
                .iter()
                .map(|(name, sc)| {
                    let from_cache = cached
                        .get(name)
                        .filter(|c| c.fingerprint == fingerprint(sc))
                        .map(|c| (c.description.clone(), c.tools.clone()));
                    let ds = Downstream::new(name.clone(), sc.clone(), from_cache, weak.clone());
                    (name.clone(), Arc::new(ds))
                })
                .collect();
            let empty = Snapshot::build(Catalog::default(), &policy, &permissions, &config);
            Self {
                config,
                label,
                policy,
                permissions,
                servers,
                snapshot: RwLock::new(Arc::new(empty)),
                rebuild_lock: Mutex::new(()),
                audit,
                cache,
                status_path,
                settled,
                sessions: AtomicU64::new(0),
                restarts,
                enrichment: enrich.and_then(Enrichment::start),
            }
        });
        hub.rebuild();
        hub.write_status();
        let starting: Vec<Arc<Downstream>> = hub
            .servers
            .values()
            .filter(|s| s.state() == ServerState::Starting)
            .cloned()
            .collect();
        let weak = Arc::downgrade(&hub);
        tokio::spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            for s in starting {
                tasks.spawn(async move {
                    let _ = s.ensure_started().await;
                });
            }
            while tasks.join_next().await.is_some() {}
            if let Some(hub) = weak.upgrade() {
                hub.settled.send_replace(true);
            }
        });
        Ok(hub)
    }

    /// Waits until every server that was started at start-up is ready or has failed.
    pub async fn settled(&self) {
        let mut rx = self.settled.subscribe();
        let _ = rx.wait_for(|done| *done).await;
    }

    /// The newest snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The downstream server of an MCP tool.
    pub fn server_of(&self, catalog: &Catalog, tool: &Tool) -> Option<&Arc<Downstream>> {
        let server = catalog.server(tool.server.as_deref()?)?;
        self.servers.get(&server.original_name)
    }

    /// Every server's status, sorted by name.
    pub fn statuses(&self) -> Vec<ServerStatus> {
        self.servers.values().map(|s| s.status()).collect()
    }

    /// A new session id.
    pub fn new_session_id(&self) -> String {
        format!(
            "{}-{}",
            std::process::id(),
            self.sessions.fetch_add(1, Ordering::Relaxed) + 1
        )
    }

    /// Called by a server whose state or tools changed.
    pub fn server_changed(&self, name: &str, tools: bool) {
        if tools {
            self.rebuild();
            self.save_cache();
        }
        if let Some(s) = self.servers.get(name) {
            let status = s.status();
            let mut r = Audit::record(AuditKind::Server);
            r.server = Some(name.to_owned());
            r.outcome = Some(status.state.clone());
            r.detail = status.reason.clone();
            self.audit.append(&r);
        }
        self.write_status();
    }

    /// Rebuilds the snapshot from every server's known tools.
    fn rebuild(&self) {
        let _one = self.rebuild_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut b = CatalogBuilder::new(self.label.clone());
        for (name, server) in &self.servers {
            if server.state() == ServerState::Disabled {
                continue;
            }
            let (description, tools) = server.tools();
            let at = format!("servers.{name}");
            if let Err(e) = b.add_server(name, &description, &at) {
                tracing::error!("{e}");
                continue;
            }
            for (i, tool) in tools.iter().flatten().enumerate() {
                let loc = format!("{at} tools[{i}]");
                let added = ToolSpec::from_value(tool, &self.label, &loc)
                    .and_then(|spec| b.add_tool(Some(name), spec, &loc));
                if let Err(e) = added {
                    tracing::warn!("skipping a tool of server {name:?}: {e}");
                }
            }
        }
        let snap = Arc::new(Snapshot::build(
            b.build(),
            &self.policy,
            &self.permissions,
            &self.config,
        ));
        if let Some(enrichment) = &self.enrichment {
            enrichment.submit(&snap);
        }
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = snap;
    }

    fn save_cache(&self) {
        let Some(cache) = &self.cache else { return };
        // Keep entries of servers not listed this run (still cached) as they were.
        let mut entries = cache.load();
        entries.retain(|name, _| self.servers.contains_key(name));
        for (name, server) in &self.servers {
            if let (description, Some(tools)) = server.tools() {
                entries.insert(
                    name.clone(),
                    CachedServer {
                        fingerprint: fingerprint(server.config()),
                        description,
                        tools,
                    },
                );
            }
        }
        if let Err(e) = cache.save(entries) {
            tracing::warn!(
                "cannot write the catalog cache {}: {e}",
                cache.path().display()
            );
        }
    }

    fn write_status(&self) {
        let Some(path) = &self.status_path else {
            return;
        };
        let status = StatusFile {
            pid: std::process::id(),
            config: self.label.clone(),
            servers: self.statuses(),
        };
        let text = serde_json::to_string_pretty(&status).unwrap_or_default();
        if let Err(e) = crate::cache::write_atomic(path, text.as_bytes()) {
            tracing::warn!("cannot write the status file {}: {e}", path.display());
        }
    }

    /// The merged catalog in toolshelf's grouped form (what `toolshelf catalog` prints).
    pub fn grouped_catalog(&self) -> Value {
        let servers: Vec<Value> = self
            .servers
            .iter()
            .filter_map(|(name, s)| {
                let (description, tools) = s.tools();
                tools.map(|tools| {
                    serde_json::json!({"name": name, "description": description, "tools": tools})
                })
            })
            .collect();
        serde_json::json!({"builtin": [], "servers": servers})
    }

    /// Stops every server.
    pub fn shutdown(&self) {
        for s in self.servers.values() {
            s.stop();
        }
    }
}

/// What the status file holds.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StatusFile {
    /// The gateway's process id.
    pub pid: u32,
    /// The configuration it runs.
    pub config: String,
    /// Its servers.
    pub servers: Vec<ServerStatus>,
}

/// The cache directory of `config`: `[cache] path`, else the user's cache directory.
pub fn cache_dir(config: &Config) -> PathBuf {
    config
        .cache
        .path
        .as_ref()
        .map(PathBuf::from)
        .unwrap_or_else(default_cache_dir)
}

/// Where the gateway of configuration `label` writes its status.
pub fn status_path(cache_dir: &std::path::Path, label: &str) -> PathBuf {
    cache_dir.join(format!("status-{}.json", config_key(label)))
}
