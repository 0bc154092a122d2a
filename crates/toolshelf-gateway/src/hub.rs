//! The hub: what every client session shares.
//!
//! It owns the downstream servers, the current catalog snapshot, the audit log and the cache and
//! status files. A snapshot (catalog, exposure, surface, the MCP tool list) is immutable and
//! rebuilt whole whenever a server's tools change; sessions hold an `Arc` to the one they started
//! with for their frozen list and read the newest one for search and execution.
//!
//! Servers never call into the hub: they publish [`HubEvent`]s on a channel, and one hub task
//! consumes them. It takes every event that is waiting at once, so a burst (seven servers
//! finishing start-up, a server announcing a thousand list changes) costs one rebuild, not one per
//! event; it rebuilds the catalog and index on the blocking pool, off the async workers; and it is
//! the only writer of the snapshot, the catalog cache and the status file, so those writes are
//! serialised by construction.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;
use tokio::sync::mpsc;
use toolshelf_core::audit::AuditKind;
use toolshelf_core::config::ServerConfig;
use toolshelf_core::invoke::ParamsValidator;
use toolshelf_core::search::SearchIndex;
use toolshelf_core::{
    Catalog, CatalogBuilder, Compiled, Config, Exposure, Format, State, Surface, Tool, ToolSpec,
};

use crate::audit::Audit;
use crate::cache::{CachedServer, CatalogCache, config_key, fingerprint};
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
    /// The toolshelf binary, whose runner processes run the tools the model writes with
    /// `tool_define` (`[authoring] enabled`); without it `tool_define` is not offered.
    pub runner: Option<PathBuf>,
}

pub use toolshelf_runtime::enrich::{EnrichFn, Enricher};

/// One background thread that adds the enricher's rankers to the newest snapshot. Snapshots are
/// rebuilt in bursts (one per server that finishes starting); only the newest matters, since
/// sessions search the newest one, so a snapshot replaced before its turn is skipped. Each new
/// snapshot is searched with BM25F alone until its turn is done, which searches wait for (see
/// [`Hub::ranker_pending`]).
#[derive(Debug)]
struct Enrichment {
    latest: Arc<(Mutex<Option<std::sync::Weak<Snapshot>>>, std::sync::Condvar)>,
    /// The same rankers, for a session's own view (see [`Hub::enrich_view`]).
    enricher: Enricher,
    /// Counts the snapshots the thread is done with (ranked, or the enricher failed).
    done: Arc<tokio::sync::watch::Sender<u64>>,
    /// Whether the enricher failed on the last snapshot it tried: searches do not wait for it.
    failed: Arc<AtomicBool>,
}

impl Enrichment {
    fn start(enricher: Enricher) -> Option<Self> {
        let latest: Arc<(Mutex<Option<std::sync::Weak<Snapshot>>>, std::sync::Condvar)> =
            Arc::default();
        let done = Arc::new(tokio::sync::watch::Sender::new(0u64));
        let failed = Arc::new(AtomicBool::new(false));
        let shared = Arc::clone(&latest);
        let (own, counted, failing) = (enricher.clone(), done.clone(), failed.clone());
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
                    if crate::failpoint_set("semantic_never") {
                        continue;
                    }
                    let started = std::time::Instant::now();
                    let mut index = snap.search.clone_lexical();
                    match enrich(&enricher, &mut index, &snap.catalog) {
                        Ok(()) => {
                            hold_for_a_search(&shared, &done);
                            let _ = snap.enriched.set(index);
                            failed.store(false, Ordering::SeqCst);
                            tracing::info!(
                                tools = snap.search.len(),
                                ms = started.elapsed().as_millis() as u64,
                                "semantic search ready"
                            );
                        }
                        Err(e) => {
                            failed.store(true, Ordering::SeqCst);
                            tracing::warn!("semantic search unavailable, using BM25F alone: {e}")
                        }
                    }
                    done.send_modify(|n| *n += 1);
                }
            });
        match spawned {
            Ok(_) => Some(Self {
                latest,
                enricher: own,
                done: counted,
                failed: failing,
            }),
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

/// Runs `enricher` on `index`; a panic is a failure like any other (the thread lives on, and a
/// session's view is settled all the same).
fn enrich(enricher: &Enricher, index: &mut SearchIndex, catalog: &Catalog) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        (enricher.0)(index, catalog)
    }))
    .unwrap_or_else(|panic| Err(toolshelf_core::echo::panic_text(panic.as_ref(), "a panic")))
}

/// Test hook (`TOOLSHELF_FAILPOINTS=semantic_held`, debug builds): the ranker of the newest
/// snapshot, built, is published only once a search waits for it, so that a test can search while
/// it is provably not ready.
fn hold_for_a_search(
    latest: &(Mutex<Option<std::sync::Weak<Snapshot>>>, std::sync::Condvar),
    done: &tokio::sync::watch::Sender<u64>,
) {
    let newest = || latest.0.lock().unwrap_or_else(|p| p.into_inner()).is_none();
    if !crate::failpoint_set("semantic_held") || !newest() {
        return;
    }
    tracing::warn!("semantic search held until a search waits for it (failpoint semantic_held)");
    while done.receiver_count() == 0 {
        std::thread::sleep(std::time::Duration::from_millis(10));
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
    validators: toolshelf_core::invoke::Validators,
    /// What loading this catalog warned about (skipped tools, renames, policy, schemas), in the
    /// order found. The hub logs only the ones the snapshot before did not have.
    pub warnings: Vec<String>,
}

impl Snapshot {
    fn build(catalog: Catalog, compiled: &Compiled) -> Self {
        let exposure = compiled.expose(&catalog);
        let surface = compiled.surface(&catalog, &exposure);
        let warnings = catalog
            .warnings()
            .iter()
            .chain(&exposure.warnings)
            .cloned()
            .chain(toolshelf_core::invoke::schema_warnings(&catalog))
            .chain(unavailable_scripts(&catalog))
            .chain(toolshelf_core::ledger::oversized_residents(
                &catalog,
                &surface,
                toolshelf_core::wire::Format::Mcp,
                compiled.config().defer.window,
            ))
            .collect();
        let visible = catalog
            .tools()
            .iter()
            .zip(&exposure.decisions)
            .filter(|(_, d)| d.state != State::Hidden)
            .map(|(t, _)| t.name.clone())
            .collect();
        let tools_list = mcp_tools(&catalog, &surface, &compiled.config().gateway);
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
            validators: Default::default(),
            warnings,
        }
    }

    /// This snapshot with the tools one session's model wrote: a session's own view, searched
    /// with BM25F alone until [`Hub::enrich_view`] adds the other rankers.
    pub fn with_authored(
        &self,
        tools: &[toolshelf_core::authoring::Authored],
        compiled: &Compiled,
    ) -> Result<Self> {
        let items: Vec<Value> = tools.iter().map(|t| t.item.clone()).collect();
        let catalog =
            toolshelf_core::catalog::rebuilt_keeping_names(&self.catalog, &items, &[], "session")
                .map_err(|message| GatewayError::Server {
                server: "(model-authored tools)".into(),
                message,
            })?;
        let view = Self::build(catalog, compiled);
        log_new_warnings(&self.warnings, &view.warnings);
        Ok(view)
    }

    /// The best search index available now: enriched when ready, else BM25F alone.
    pub fn search_index(&self) -> &SearchIndex {
        self.enriched.get().unwrap_or(&self.search)
    }

    /// Whether the enricher's rankers are in [`Self::search_index`].
    pub fn is_enriched(&self) -> bool {
        self.enriched.get().is_some()
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
        self.validators.get(i, &self.catalog.tools()[i])
    }
}

/// The keys MCP defines for a tool.
const MCP_TOOL_KEYS: [&str; 9] = [
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "icons",
    "execution",
    "_meta",
];

/// A server's tool as MCP defines it, as the MCP library reads every list it can type: the keys
/// of toolshelf's catalog format (`defer_loading`, `tags`, `category`, `origin`, `strict`,
/// `description_template`, `server`) are left out. They are the operator's to give (in the
/// configuration and catalog files), not a server's: a server does not decide what every
/// session's context holds, nor how toolshelf treats its tools; and a list the library could not
/// type (one bad tool in it), which the gateway reads raw, is read no differently.
fn as_mcp_tool(tool: Value) -> Value {
    match tool {
        Value::Object(mut tool) => {
            tool.retain(|key, _| MCP_TOOL_KEYS.contains(&key.as_str()));
            Value::Object(tool)
        }
        other => other,
    }
}

/// A warning for each script tool that could not be defined (its description says why), so that
/// `toolshelf status` names it and not only the gateway's log.
fn unavailable_scripts(catalog: &Catalog) -> Vec<String> {
    catalog
        .tools()
        .iter()
        .filter_map(|t| {
            let why = t.unavailable_script()?;
            Some(format!("script tool {} is unavailable: {why}", t.name))
        })
        .collect()
}

/// Logs the warnings of `now` that `before` did not have: a server's tool list is read again on
/// every change and restart, and the same broken tool would otherwise be reported each time.
fn log_new_warnings(before: &[String], now: &[String]) {
    let seen: std::collections::HashSet<&str> = before.iter().map(String::as_str).collect();
    for w in now.iter().filter(|w| !seen.contains(w.as_str())) {
        tracing::warn!("{w}");
    }
}

/// What a downstream server tells the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubEvent {
    /// A server's state changed; `tools` when its tool list (or description) changed too.
    Changed {
        /// The server, as configured.
        server: String,
        /// Whether the catalog must be rebuilt.
        tools: bool,
    },
    /// Every server started at start-up is ready or has failed (sent once, after their events).
    Settled,
    /// The audit log's health changed: a record was dropped, or writes failed or resumed.
    AuditHealth,
    /// The HTTP sessions' figures changed (serving began, a session was refused).
    Sessions,
}

/// The sending side of the hub's event channel, as servers hold it. It counts the tool changes
/// it announces, so that a caller can tell whether the snapshot is behind them
/// ([`Hub::caught_up`]).
#[derive(Debug, Clone)]
pub struct Events {
    tx: mpsc::UnboundedSender<HubEvent>,
    announced: Arc<AtomicU64>,
}

impl Events {
    /// Hands `event` to the hub (a no-op once the hub is gone).
    pub fn send(&self, event: HubEvent) {
        if matches!(event, HubEvent::Changed { tools: true, .. }) {
            // Counted before it is sent: the hub never counts more rebuilt than announced.
            self.announced.fetch_add(1, Ordering::SeqCst);
        }
        let _ = self.tx.send(event);
    }
}

/// [`client_list`] as rmcp tools; a definition MCP cannot express is logged and left out.
pub fn mcp_tools(
    catalog: &Catalog,
    surface: &Surface,
    gateway: &toolshelf_core::config::GatewayConfig,
) -> Vec<rmcp::model::Tool> {
    client_list(catalog, surface, gateway)
        .into_iter()
        .filter_map(|v| match serde_json::from_value(v) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::error!("cannot express a tool definition in MCP: {e}");
                None
            }
        })
        .collect()
}

/// The MCP `tools/list` items a client is sent: the surface's resident tools and meta-tools, with
/// pinned server tools named `SERVER__TOOL` (`[gateway] pinned_names`) and every listed tool
/// marked `_meta["anthropic/alwaysLoad"] = true` (`[gateway] always_load`), keeping whatever
/// `_meta` the downstream tool had. Clients that defer MCP tools themselves (Claude Code) then
/// keep toolshelf's few tools resident instead of hiding the index behind a second search.
pub fn client_list(
    catalog: &Catalog,
    surface: &Surface,
    gateway: &toolshelf_core::config::GatewayConfig,
) -> Vec<Value> {
    let mark = |mut v: Value| {
        if gateway.always_load
            && let Some(obj) = v.as_object_mut()
        {
            let meta = obj
                .entry("_meta")
                .or_insert_with(|| Value::Object(serde_json::Map::new()));
            if let Some(meta) = meta.as_object_mut() {
                meta.insert("anthropic/alwaysLoad".into(), Value::Bool(true));
            }
        }
        v
    };
    let mut out: Vec<Value> = surface
        .resident
        .iter()
        .map(|&i| {
            let tool = &catalog.tools()[i];
            let mut v = surface.definition(catalog, i, Format::Mcp);
            if gateway.pinned_names == toolshelf_core::config::PinnedNames::Short
                && let Some(short) = tool.client_name()
            {
                v["name"] = Value::String(short.to_owned());
            }
            mark(v)
        })
        .collect();
    out.extend(surface.meta_tools(Format::Mcp).into_iter().map(mark));
    out
}

/// The shared state of a running gateway.
#[derive(Debug)]
pub struct Hub {
    compiled: Compiled,
    label: String,
    /// Downstream servers by configured name.
    pub servers: BTreeMap<String, Arc<Downstream>>,
    snapshot: RwLock<Arc<Snapshot>>,
    /// The audit log.
    pub audit: Audit,
    cache: Option<CatalogCache>,
    status_path: Option<PathBuf>,
    settled: tokio::sync::watch::Sender<bool>,
    sessions: AtomicU64,
    /// When this hub started, in seconds since the Unix epoch: part of every session id, so that
    /// ids never repeat across restarts, even of a process that always gets the same pid (a
    /// container's first process).
    started_secs: u64,
    /// The configuration's warnings against the catalog once every server settled.
    settle_warnings: Mutex<Vec<String>>,
    /// Each server's state (and reason) as last audited: a change of its tools alone is
    /// audited `tools_changed`, not as the state again.
    audited_states: Mutex<BTreeMap<String, (String, Option<String>)>>,
    /// What the configuration alone warns about at start-up (hooks whose program is missing).
    load_warnings: Vec<String>,
    /// Whether servers are restarted in the background.
    pub restarts: bool,
    enrichment: Option<Enrichment>,
    /// Runs the tools the model writes; set when `[authoring] enabled` and a runner was given.
    runner: Option<toolshelf_runtime::scripts::Runner>,
    /// Recent `tool_search` latencies, for the dashboard.
    pub search_latencies: toolshelf_dashboard::Latencies,
    /// Tool changes servers have announced ([`Events`]).
    announced: Arc<AtomicU64>,
    /// Tool changes the snapshot holds: the announced ones the hub has rebuilt after.
    rebuilt: tokio::sync::watch::Sender<u64>,
    /// Its own way into the event channel, for the HTTP sessions' figures.
    events: Events,
    /// `[http] max_sessions` once it serves HTTP.
    http_limit: std::sync::OnceLock<usize>,
    /// HTTP sessions refused at that limit, since start.
    sessions_refused: AtomicU64,
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
            runner,
        } = settings;
        let compiled = Compiled::new(config, &label, mode.as_deref())?;
        let faults = compiled.templates().faults();
        if !faults.is_empty() {
            return Err(GatewayError::Templates { faults });
        }
        let config = compiled.config();
        // The cache directory is resolved only where something is kept there: a gateway with no
        // cache and an explicit (or no) audit path needs no home at all.
        let key = config_key(&label);
        // A server that runs this gateway again (the toolshelf entry of an mcp.json the gateway
        // reads) would start gateways without end.
        let outer = std::env::var(crate::downstream::FRONTED_BY).unwrap_or_default();
        if outer.split(',').any(|k| k == key) {
            return Err(GatewayError::FrontsItself { label });
        }
        let chain = if outer.is_empty() {
            key.clone()
        } else {
            format!("{outer},{key}")
        };
        let cache_dir = if config.cache.enabled {
            Some(cache_dir(config)?)
        } else {
            None
        };
        let cache = cache_dir.as_ref().map(|dir| CatalogCache::new(dir, &key));
        let cached = match (&cache, lazy) {
            (Some(c), true) => c.load(),
            _ => BTreeMap::new(),
        };
        let audit = Audit::configured(config, cache_dir.as_deref())
            .map_err(GatewayError::from)?
            .counted_by(crate::metrics::audited);
        // The status file belongs to the cache: a gateway told to keep nothing on disk keeps no
        // status either.
        let status_path = cache_dir
            .as_ref()
            .filter(|_| status_file)
            .map(|dir| status_path(dir, &label, std::process::id()));
        let (settled, _) = tokio::sync::watch::channel(false);
        let (tx, mut inbox) = mpsc::unbounded_channel();
        let announced = Arc::new(AtomicU64::new(0));
        let events = Events {
            tx,
            announced: announced.clone(),
        };
        let health = events.clone();
        audit.report_to(move || health.send(HubEvent::AuditHealth));
        let own_events = events.clone();
        let servers = config
            .servers
            .iter()
            .map(|(name, sc)| {
                let from_cache = cached
                    .get(name)
                    .filter(|c| c.fingerprint == fingerprint(sc))
                    .map(|c| (c.description.clone(), c.tools.clone()));
                let ds = Downstream::new(
                    name.clone(),
                    sc.clone(),
                    from_cache,
                    events.clone(),
                    restarts,
                )
                .fronted_by(chain.clone());
                (name.clone(), Arc::new(ds))
            })
            .collect();
        let runner = runner
            .filter(|_| config.authoring.enabled)
            .map(|path| toolshelf_runtime::scripts::Runner::new(path, config));
        let empty = Snapshot::build(Catalog::default(), &compiled);
        log_new_warnings(&[], &empty.warnings);
        let load_warnings = toolshelf_runtime::hooks::missing_programs(compiled.hooks());
        log_new_warnings(&[], &load_warnings);
        let hub = Arc::new(Self {
            compiled,
            label,
            servers,
            snapshot: RwLock::new(Arc::new(empty)),
            audit,
            cache,
            status_path,
            settled,
            sessions: AtomicU64::new(0),
            started_secs: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            settle_warnings: Mutex::new(Vec::new()),
            audited_states: Mutex::new(BTreeMap::new()),
            load_warnings,
            restarts,
            enrichment: enrich.and_then(Enrichment::start),
            runner,
            search_latencies: toolshelf_dashboard::Latencies::default(),
            announced,
            rebuilt: tokio::sync::watch::channel(0).0,
            events: own_events,
            http_limit: std::sync::OnceLock::new(),
            sessions_refused: AtomicU64::new(0),
        });
        hub.rebuild();
        hub.write_status();
        // The hub task: the one consumer of server events. It holds the hub weakly, so dropping
        // the last handle ends it.
        let weak = Arc::downgrade(&hub);
        tokio::spawn(async move {
            while let Some(first) = inbox.recv().await {
                let mut batch = vec![first];
                while let Ok(more) = inbox.try_recv() {
                    batch.push(more);
                }
                let Some(hub) = weak.upgrade() else { return };
                hub.handle(batch).await;
            }
        });
        let starting: Vec<Arc<Downstream>> = hub
            .servers
            .values()
            .filter(|s| s.state() == ServerState::Starting)
            .cloned()
            .collect();
        tokio::spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            for s in starting {
                tasks.spawn(async move {
                    let _ = s.ensure_started().await;
                });
            }
            while tasks.join_next().await.is_some() {}
            events.send(HubEvent::Settled);
        });
        Ok(hub)
    }

    /// Handles a batch of events: one rebuild and one cache write for all tool changes in it,
    /// an audit record per state change, one status write.
    async fn handle(self: &Arc<Self>, batch: Vec<HubEvent>) {
        // Each server that changed, and whether its tools did.
        let mut changed: Vec<(String, bool)> = Vec::new();
        let mut tools = false;
        let mut tool_changes = 0;
        let mut settled = false;
        let mut audit = false;
        for e in batch {
            match e {
                HubEvent::Changed { server, tools: t } => {
                    tools |= t;
                    tool_changes += u64::from(t);
                    match changed.iter_mut().find(|(s, _)| *s == server) {
                        Some((_, listed)) => *listed |= t,
                        None => changed.push((server, t)),
                    }
                }
                HubEvent::Settled => settled = true,
                HubEvent::AuditHealth | HubEvent::Sessions => audit = true,
            }
        }
        if tools {
            let hub = self.clone();
            let _ = tokio::task::spawn_blocking(move || {
                hub.rebuild();
                hub.save_cache();
            })
            .await;
            self.rebuilt.send_modify(|n| *n += tool_changes);
        }
        // Once every server has listed its tools (or failed), a rule that names none of them is
        // most likely a typo. Checked again whenever the catalog changes after that, so that a
        // warning lasts only while it holds.
        let was_settled = *self.settled.borrow();
        if (settled && !was_settled) || (tools && was_settled) {
            let snap = self.snapshot();
            let index = snap.search_index();
            let hits = |q: &str| {
                index
                    .rank(&[q.to_owned()], 5)
                    .into_iter()
                    .map(|h| h.index)
                    .collect()
            };
            // Servers whose tools are not known, neither listed nor cached (failed, disabled,
            // still starting).
            let down: Vec<String> = self
                .servers
                .iter()
                .filter(|(_, s)| !s.has_tools())
                .map(|(name, _)| name.clone())
                .collect();
            let mut found = self.compiled.unmatched_while_down(&snap.catalog, &down);
            found.extend(self.compiled.reminders().check_against(&snap.catalog, hits));
            let mut held = self
                .settle_warnings
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            log_new_warnings(&held, &found);
            *held = found;
        }
        for (name, listed) in &changed {
            if let Some(s) = self.servers.get(name) {
                let status = s.status();
                let now = (status.state.clone(), status.reason.clone());
                let same = self
                    .audited_states
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.clone(), now.clone())
                    .is_some_and(|before| before == now);
                let outcome = match (same, listed) {
                    (false, _) => now.0,
                    (true, true) => "tools_changed".to_owned(),
                    (true, false) => continue,
                };
                let mut r = Audit::record(AuditKind::Server);
                r.server = Some(name.clone());
                r.outcome = Some(outcome);
                r.detail = now.1;
                let _ = self.audit.append(&r);
            }
        }
        if !changed.is_empty() || settled || audit {
            let hub = self.clone();
            let _ = tokio::task::spawn_blocking(move || hub.write_status()).await;
        }
        if settled {
            self.settled.send_replace(true);
        }
    }

    /// Everything the gateway has warned about that still holds: the configuration's own, the
    /// current catalog's load warnings, then those of the configuration checked against the
    /// catalog once every server settled.
    pub fn warnings(&self) -> Vec<String> {
        let mut all = self.load_warnings.clone();
        all.extend(self.snapshot().warnings.iter().cloned());
        all.extend(
            self.settle_warnings
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned(),
        );
        all
    }

    /// A note for the model on each server whose tools are not known because it is not running
    /// (failed, or still starting, with nothing cached): what a search looks for, or a name that
    /// resolves to no tool, may be one of its tools. `only` narrows it to the server of one
    /// canonical or original name (`mcp__SERVER__tool`). A server the active mode or a deny rule
    /// would hide that name of (without a name, any tool of) is not named: the model must not
    /// learn of what it cannot see. Nor is a server's stderr passed on: it is the operator's
    /// to read (status, the log), and may hold what the model should not.
    pub fn unknown_tools_note(&self, catalog: &Catalog, only: Option<&str>) -> Option<String> {
        let notes = self.unknown_tools_notes(catalog, only);
        (!notes.is_empty()).then(|| notes.join("\n"))
    }

    /// The lines of [`Self::unknown_tools_note`], one per server, by server name.
    fn unknown_tools_notes(&self, catalog: &Catalog, only: Option<&str>) -> Vec<String> {
        let wanted = match only {
            Some(requested) => {
                // Canonical (`mcp__mail__send`), or as a list of short names shows it
                // (`mail__send`).
                let Some((segment, tool)) = toolshelf_core::name::split_mcp(requested)
                    .or_else(|| requested.split_once("__"))
                else {
                    return Vec::new();
                };
                let Some(server) = catalog
                    .servers()
                    .iter()
                    .find(|s| s.name == segment || s.original_name == segment)
                else {
                    return Vec::new();
                };
                Some((server.original_name.clone(), tool.to_owned()))
            }
            None => None,
        };
        self.servers
            .iter()
            .filter(|(name, _)| wanted.as_ref().is_none_or(|(w, _)| w == *name))
            .filter_map(|(name, s)| Some((name, unknown_note(name, s)?)))
            // Judged last: it builds a catalog of one tool and runs the policy on it.
            .filter(|(name, _)| {
                let tool = wanted
                    .as_ref()
                    .map_or(toolshelf_core::policy::PROBE_TOOL, |(_, t)| t.as_str());
                self.would_show(name, tool)
            })
            .map(|(_, note)| note)
            .collect()
    }

    /// The note a `tool_search` answer carries on servers that are down, one line per server,
    /// sorted: each server whose tools are not known (as [`Self::unknown_tools_note`] without a
    /// name; given `names`, those of an exact lookup that found something, only the servers of
    /// the names that are no tool), and each failed server with known tools of which the answer
    /// names one (`shown`, catalog indices: with a schema, on one line or after "Also matching"),
    /// since a call of it fails until the server is back.
    pub fn search_note(
        &self,
        catalog: &Catalog,
        names: Option<&[String]>,
        shown: &[usize],
    ) -> Option<String> {
        let mut lines: BTreeSet<String> = match names {
            None => self
                .unknown_tools_notes(catalog, None)
                .into_iter()
                .collect(),
            Some(names) => names
                .iter()
                .filter(|n| catalog.position(n).is_none())
                .flat_map(|n| self.unknown_tools_notes(catalog, Some(n)))
                .collect(),
        };
        let tools = catalog.tools();
        for (name, s) in &self.servers {
            if let ServerState::Failed(reason) = s.state()
                && s.has_tools()
                && shown
                    .iter()
                    .any(|&i| tools[i].original_server.as_deref() == Some(name.as_str()))
            {
                lines.insert(format!(
                    "Server {name:?} is not running ({}); it is restarted in the background, and calls of its tools fail until then.",
                    crate::stdio::without_last_words(&reason)
                ));
            }
        }
        (!lines.is_empty()).then(|| lines.into_iter().collect::<Vec<_>>().join("\n"))
    }

    /// Whether a tool `tool` of server `server` (original names), with nothing else known of
    /// it, would be visible under the active mode and the permission rules. Unknown facts
    /// (annotations) are absent, so a read-only mode hides it.
    fn would_show(&self, server: &str, tool: &str) -> bool {
        !self
            .compiled
            .policy()
            .would_hide(server, tool, self.compiled.permissions())
    }

    /// The compiled configuration: policy, permissions, hooks.
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    /// The configuration's label (its path, or the bundled example's name).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The configuration as written.
    pub fn config(&self) -> &Config {
        self.compiled.config()
    }

    /// Waits until every server that was started at start-up is ready or has failed, and the
    /// catalog holds their tools.
    pub async fn settled(&self) {
        let mut rx = self.settled.subscribe();
        let _ = rx.wait_for(|done| *done).await;
    }

    /// Waits, up to `limit`, until the snapshot holds every tool change servers had announced
    /// when it was called. Returns whether one was pending, so that a name that resolved to no
    /// tool is worth looking up again.
    pub async fn caught_up(&self, limit: std::time::Duration) -> bool {
        let announced = self.announced.load(Ordering::SeqCst);
        let mut rebuilt = self.rebuilt.subscribe();
        if *rebuilt.borrow() >= announced {
            return false;
        }
        let _ = tokio::time::timeout(limit, rebuilt.wait_for(|n| *n >= announced)).await;
        true
    }

    /// The newest snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether a search of `snap` would lack the embedding ranker, which is still being
    /// prepared for it (the model loading, the tools being embedded): `false` once it is there,
    /// when this gateway has none, and while the enricher fails.
    pub fn ranker_pending(&self, snap: &Snapshot) -> bool {
        self.enrichment
            .as_ref()
            .is_some_and(|e| !e.failed.load(Ordering::SeqCst))
            && !snap.is_enriched()
    }

    /// What changes each time the embedding ranker of a snapshot is ready or has failed, for a
    /// search that waits for it (see [`Self::ranker_pending`]); `None` without a ranker.
    pub fn ranker_progress(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.enrichment.as_ref().map(|e| e.done.subscribe())
    }

    /// Adds the enricher's rankers to `view`, a session's own view of `base` (see
    /// [`Snapshot::with_authored`]), once `base` has them: the session's search then ranks as
    /// every other session's does. Blocking (it embeds the tools the session wrote, and reuses
    /// the cached vectors of the rest); a no-op when `view` has them already, when `base` does
    /// not yet (the model is still loading, or failed to) or when there is no enricher. A view
    /// the enricher fails on keeps BM25F alone and is not tried again.
    pub fn enrich_view(&self, base: &Snapshot, view: &Snapshot) {
        let Some(enrichment) = &self.enrichment else {
            return;
        };
        if view.is_enriched() || !base.is_enriched() {
            return;
        }
        let mut index = view.search.clone_lexical();
        if let Err(e) = enrich(&enrichment.enricher, &mut index, &view.catalog) {
            tracing::warn!(
                "semantic search unavailable for a session's own tools, using BM25F alone: {e}"
            );
            // Settled either way: the session's later calls do not retry it.
            index = view.search.clone_lexical();
        }
        let _ = view.enriched.set(index);
    }

    /// What runs the tools the model writes, when `tool_define` is offered.
    pub fn runner(&self) -> Option<&toolshelf_runtime::scripts::Runner> {
        self.runner.as_ref()
    }

    /// The downstream server of an MCP tool.
    pub fn server_of(&self, tool: &Tool) -> Option<&Arc<Downstream>> {
        self.servers.get(tool.original_server.as_deref()?)
    }

    /// Every server's status, sorted by name. `tools` counts the tools a session can see (not
    /// those the mode or a deny rule hides).
    pub fn statuses(&self) -> Vec<ServerStatus> {
        let snap = self.snapshot();
        let mut visible: BTreeMap<&str, usize> = BTreeMap::new();
        for (t, d) in snap.catalog.tools().iter().zip(&snap.exposure.decisions) {
            if let (Some(s), true) = (t.original_server.as_deref(), d.state != State::Hidden) {
                *visible.entry(s).or_default() += 1;
            }
        }
        self.servers
            .values()
            .map(|s| {
                let mut status = s.status();
                if status.tools.is_some() {
                    status.tools = Some(visible.get(s.name()).copied().unwrap_or(0));
                }
                status
            })
            .collect()
    }

    /// What a client may read of [`Hub::statuses`] and [`Hub::warnings`] (the
    /// `toolshelf://status` resource, which a model can read as well): a server is listed only
    /// while a tool of it is visible or, with none in the catalog, while the rules would show
    /// one; a
    /// failure's reason leaves out the server's stderr; and a warning that names a hidden server
    /// or tool is left out. The operator's view (`toolshelf status`, the status file, the log)
    /// keeps everything.
    pub fn client_status(&self) -> (Vec<ServerStatus>, Vec<String>) {
        let snap = self.snapshot();
        let mut hidden_names: BTreeSet<String> = BTreeSet::new();
        let mut hidden_servers: BTreeSet<&str> = BTreeSet::new();
        // A server with tools in the snapshot is shown by them; one with none there (not
        // started, failed, or listed since), by the rules' judgement of a tool of it.
        let mut in_snapshot: BTreeMap<&str, bool> = BTreeMap::new();
        for (t, d) in snap.catalog.tools().iter().zip(&snap.exposure.decisions) {
            if let Some(server) = t.original_server.as_deref() {
                *in_snapshot.entry(server).or_default() |= d.state != State::Hidden;
            }
        }
        let statuses: Vec<ServerStatus> = self
            .statuses()
            .into_iter()
            .filter_map(|mut s| {
                let shown = match in_snapshot.get(s.name.as_str()) {
                    Some(&any_visible) => any_visible,
                    None => self.would_show(&s.name, toolshelf_core::policy::PROBE_TOOL),
                };
                if !shown {
                    hidden_names.insert(s.name.clone());
                    return None;
                }
                s.reason = s.reason.as_deref().map(crate::stdio::without_last_words);
                Some(s)
            })
            .collect();
        for server in snap.catalog.servers() {
            if hidden_names.contains(&server.original_name) {
                hidden_servers.insert(&server.name);
            }
        }
        let mut quoted: Vec<String> = hidden_names.iter().map(|n| format!("{n:?}")).collect();
        quoted.extend(hidden_names.iter().map(|s| format!("mcp__{s}__")));
        quoted.extend(hidden_servers.iter().map(|s| format!("mcp__{s}__")));
        for (t, d) in snap.catalog.tools().iter().zip(&snap.exposure.decisions) {
            if d.state == State::Hidden {
                quoted.push(format!("{:?}", t.name));
                quoted.push(format!("{:?}", t.original_name));
            }
        }
        let warnings = self
            .warnings()
            .into_iter()
            .filter(|w| !quoted.iter().any(|q| w.contains(q.as_str())))
            .collect();
        (statuses, warnings)
    }

    /// A new session id: `PID-STARTED-N`, the process id, the hub's start in seconds since the
    /// Unix epoch, and the session's number in this process.
    pub fn new_session_id(&self) -> String {
        format!(
            "{}-{}-{}",
            std::process::id(),
            self.started_secs,
            self.sessions.fetch_add(1, Ordering::Relaxed) + 1
        )
    }

    /// Rebuilds the snapshot from every server's known tools.
    fn rebuild(&self) {
        // The tools come from the servers' lists: errors name those, not the configuration file.
        let mut b = CatalogBuilder::new("tools/list");
        // A name sessions may hold stays with its tool: a newcomer never takes it.
        let before = self.snapshot();
        b.keep_names(&before.catalog);
        let mut skipped = Vec::new();
        for (name, server) in &self.servers {
            if server.state() == ServerState::Disabled {
                continue;
            }
            let (description, tools) = server.tools();
            skipped.extend(server.skipped());
            let at = format!("servers.{name}");
            if let Err(e) = b.add_server(name, &description, &at) {
                tracing::error!("{e}");
                continue;
            }
            for (i, tool) in tools.into_iter().flatten().enumerate() {
                let loc = format!("tools[{i}]");
                let added = ToolSpec::from_value(as_mcp_tool(tool), "tools/list", &loc)
                    .and_then(|spec| b.add_tool(Some(name), spec, &loc));
                if let Err(e) = added {
                    skipped.push(format!("skipping a tool of server {name:?}: {e}"));
                }
            }
        }
        if self.runner.is_some() {
            // `tool_define` is a deferred built-in, so the frozen index lists it from the start.
            let added = ToolSpec::from_value(
                toolshelf_core::authoring::tool_define_item(),
                &self.label,
                "[authoring]",
            )
            .and_then(|spec| b.add_tool(None, spec, "[authoring]"));
            if let Err(e) = added {
                tracing::error!("tool_define is not offered: {e}");
            }
        }
        let mut snap = Snapshot::build(b.build(), &self.compiled);
        snap.warnings.splice(0..0, skipped);
        log_new_warnings(&before.warnings, &snap.warnings);
        drop(before);
        let snap = Arc::new(snap);
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
            started: process_start(std::process::id()),
            config: self.label.clone(),
            servers: self.statuses(),
            audit: self.audit.status(),
            warnings: self.warnings(),
            mode: self.compiled.mode().map(str::to_owned),
            http: self.http_status(),
        };
        let text = serde_json::to_string_pretty(&status).unwrap_or_default();
        if let Err(e) = crate::cache::write_atomic(path, text.as_bytes()) {
            tracing::warn!("cannot write the status file {}: {e}", path.display());
        }
    }

    /// Records that this gateway serves HTTP sessions, at most `max_sessions` at once: the
    /// status file says so from now on.
    pub fn serving_http(&self, max_sessions: usize) {
        let _ = self.http_limit.set(max_sessions);
        self.events.send(HubEvent::Sessions);
    }

    /// Counts an HTTP session refused at `[http] max_sessions` (the status file follows);
    /// returns how many have been, since start.
    pub fn session_refused(&self) -> u64 {
        let total = self.sessions_refused.fetch_add(1, Ordering::Relaxed) + 1;
        self.events.send(HubEvent::Sessions);
        total
    }

    /// The HTTP sessions' figures, once it serves HTTP.
    pub fn http_status(&self) -> Option<HttpStatus> {
        self.http_limit.get().map(|&max_sessions| HttpStatus {
            max_sessions,
            sessions_refused: self.sessions_refused.load(Ordering::Relaxed),
        })
    }

    /// The merged catalog in toolshelf's grouped form (what `toolshelf catalog` prints).
    /// Tools the active mode or a deny rule hides are left out unless `hidden_too`: without it the
    /// catalog is what this gateway's sessions can reach; with it, every tool the catalog holds,
    /// which read back with the same configuration are hidden again (so its rules still match).
    pub fn grouped_catalog(&self, hidden_too: bool) -> Value {
        let snap = self.snapshot();
        // The tools the catalog holds and the session may see, by server and original name: a
        // tool the catalog skipped (a duplicate, no schema) or the mode hides is left out, so
        // that the output reads back as a catalog.
        let kept: BTreeSet<(&str, &str)> = snap
            .catalog
            .tools()
            .iter()
            .enumerate()
            .filter(|&(i, _)| hidden_too || snap.is_visible(i))
            .filter_map(|(_, t)| Some((t.original_server.as_deref()?, t.original_name.as_str())))
            .collect();
        let servers: Vec<Value> = self
            .servers
            .iter()
            .filter_map(|(name, s)| {
                let (description, tools) = s.tools();
                tools.map(|tools| {
                    let mut seen = BTreeSet::new();
                    let tools: Vec<Value> = tools
                        .into_iter()
                        .filter(|t| {
                            let tool = t.get("name").and_then(Value::as_str).unwrap_or_default();
                            kept.contains(&(name.as_str(), tool)) && seen.insert(tool.to_owned())
                        })
                        .collect();
                    serde_json::json!({"name": name, "description": description, "tools": tools})
                })
            })
            .collect();
        serde_json::json!({"builtin": [], "servers": servers})
    }

    /// Stops every server, and kills the process group of every stdio server of this process
    /// still starting or closing: the gateway is about to exit.
    pub fn shutdown(&self) {
        for s in self.servers.values() {
            s.stop();
        }
        crate::stdio::kill_all_groups();
        if let Some(path) = &self.status_path {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// What the status file holds.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StatusFile {
    /// The gateway's process id.
    pub pid: u32,
    /// When that process started ([`process_start`]): a file whose pid now names another
    /// process (the gateway was killed and its pid reused) is no running gateway. Absent where
    /// it cannot be read, and in files of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<u64>,
    /// The configuration it runs.
    pub config: String,
    /// Its servers.
    pub servers: Vec<ServerStatus>,
    /// Its audit log's health (absent without a log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<crate::audit::AuditStatus>,
    /// What loading its catalog warned about, as logged (absent when nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The mode it runs (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Its HTTP sessions' figures (absent over stdio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpStatus>,
}

/// A gateway's HTTP sessions, as its status file gives them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HttpStatus {
    /// `[http] max_sessions`: sessions served at once.
    pub max_sessions: usize,
    /// `initialize` requests refused because that many were open, since start.
    pub sessions_refused: u64,
}

/// The cache directory of `config`: `[cache] path` (with `~/` expanded; a relative one is the
/// configuration file's directory's), else the user's cache directory (see [`crate::cache::default_cache_dir`]).
pub fn cache_dir(config: &Config) -> Result<PathBuf> {
    Ok(crate::audit::cache_dir(config)?)
}

/// Where the gateway process `pid` of configuration `label` writes its status. Each gateway has
/// its own file, so two gateways on one configuration never overwrite each other's.
pub fn status_path(cache_dir: &std::path::Path, label: &str, pid: u32) -> PathBuf {
    cache_dir.join(format!("status-{}-{pid}.json", config_key(label)))
}

/// The status files of every gateway of configuration `label` in `cache_dir`, sorted by pid.
/// Files of processes that are gone are removed.
pub fn running_gateways(cache_dir: &std::path::Path, label: &str) -> Vec<StatusFile> {
    let prefix = format!("status-{}-", config_key(label));
    let Ok(entries) = std::fs::read_dir(cache_dir) else {
        return Vec::new();
    };
    let mut out: Vec<StatusFile> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid: u32 = name
                .strip_prefix(&prefix)?
                .strip_suffix(".json")?
                .parse()
                .ok()?;
            let status = std::fs::read_to_string(e.path())
                .ok()
                .and_then(|t| serde_json::from_str::<StatusFile>(&t).ok())
                .filter(|s| s.pid == pid);
            // A live pid is the gateway's only if it started when the gateway did.
            let reused = status
                .as_ref()
                .and_then(|s| s.started)
                .is_some_and(|then| process_start(pid).is_some_and(|now| now != then));
            if !process_alive(pid) || reused {
                let _ = std::fs::remove_file(e.path());
                return None;
            }
            status
        })
        .collect();
    out.sort_by_key(|s| s.pid);
    out
}

/// When process `pid` started, in clock ticks since boot (field 22 of `/proc/PID/stat`), which
/// tells it from a later process given the same pid; `None` where there is no `/proc`.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command (field 2) is in parentheses and may hold spaces: count from after it.
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Whether process `pid` still exists. Where there is no `/proc` to ask, every process counts as
/// alive: a stale status file is shown rather than a live one deleted.
pub fn process_alive(pid: u32) -> bool {
    !std::path::Path::new("/proc/self").exists()
        || std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The note on server `name` when its tools are not known because it is not running.
fn unknown_note(name: &str, s: &Downstream) -> Option<String> {
    if s.has_tools() {
        return None;
    }
    match s.state() {
        ServerState::Failed(reason) => Some(format!(
            "Server {name:?} is not running ({}), so its tools are not known; it is restarted in the background.",
            crate::stdio::without_last_words(&reason)
        )),
        ServerState::Starting => Some(format!(
            "Server {name:?} is still starting, so its tools are not known yet; try again in a moment."
        )),
        _ => None,
    }
}
