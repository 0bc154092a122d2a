//! `toolshelf proxy`: the LLM-API proxy.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use toolshelf_core::config::Unserved;
use toolshelf_core::{Compiled, Config};
use toolshelf_proxy::Proxy;
use toolshelf_proxy::redis_store::RedisStore;
use toolshelf_proxy::server::{AppState, router};
use toolshelf_proxy::store::{MemoryStore, SessionStore};
use toolshelf_runtime::scripts;

use super::errln;

/// Arguments of `proxy`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (port 0: any free port; the bound address is printed on stderr).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8849")]
    listen: String,
    /// toolshelf configuration (TOML): [proxy] upstreams and limits, [defer], [permissions],
    /// [hooks], [[reminders]], [modes], [tools.NAME] script tools (run by the proxy itself),
    /// [authoring] (tool_define), [store] (Redis-shared sessions), [ui] (the dashboard at /ui;
    /// the listener also answers /toolshelf/status and /metrics). Without it: every default
    /// (the public Anthropic and OpenAI endpoints, every client tool deferred).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Active mode, as defined by [modes.NAME] in the configuration.
    #[arg(long, value_name = "NAME")]
    mode: Option<String>,
    /// Overrides [proxy] anthropic_upstream.
    #[arg(long, value_name = "URL", value_parser = anthropic_upstream)]
    anthropic_upstream: Option<String>,
    /// Overrides [proxy] openai_upstream.
    #[arg(long, value_name = "URL", value_parser = openai_upstream)]
    openai_upstream: Option<String>,
}

fn anthropic_upstream(text: &str) -> Result<String, String> {
    upstream_url(text, toolshelf_core::compile::ANTHROPIC_PATHS)
}

fn openai_upstream(text: &str) -> Result<String, String> {
    upstream_url(text, toolshelf_core::compile::OPENAI_PATHS)
}

/// An upstream given on the command line, checked here so that the error names the flag, and
/// the client paths appended to it as those of the flag's API (`paths`).
fn upstream_url(text: &str, paths: &str) -> Result<String, String> {
    match toolshelf_core::compile::upstream_url_problem(text, paths) {
        None => Ok(text.to_owned()),
        Some(problem) => Err(problem),
    }
}

pub fn run(args: Args) -> Result<()> {
    super::serve::init_logging("warn,toolshelf::proxy=info,toolshelf_proxy=info");
    let (mut config, label) = match &args.config {
        Some(p) => {
            let text = crate::inputs::read_text(p, "config")?;
            let name = p.display().to_string();
            let mut config = Config::from_toml_str(&text, &name)?;
            // A relative [authoring] keep_dir is the file's directory's.
            config.dir = std::path::absolute(p)
                .ok()
                .and_then(|p| p.parent().map(PathBuf::from));
            (config, name)
        }
        None => (Config::default(), "(defaults)".to_owned()),
    };
    if let Some(u) = args.anthropic_upstream {
        config.proxy.anthropic_upstream = u;
    }
    if let Some(u) = args.openai_upstream {
        config.proxy.openai_upstream = u;
    }
    let enrich = super::serve::enricher(&config);
    let rt = super::serve::runtime()?;
    // The Redis connection belongs to the runtime that serves.
    let _entered = rt.enter();
    let compiled = Arc::new(Compiled::new(config, &label, args.mode.as_deref())?);
    for w in toolshelf_runtime::hooks::missing_programs(compiled.hooks()) {
        errln!("toolshelf: warning: {w}");
    }
    let store = session_store(compiled.config(), &rt)?;
    // Every search and call the proxy decides is recorded, as the gateway records its own.
    let audit = toolshelf_runtime::audit::Audit::configured(compiled.config(), None)?;
    let mut proxy = Proxy::new(compiled.clone(), store, enrich)?.with_audit(audit);
    // Script tools ([tools.NAME] script) and the tools the model writes ([authoring]) run in
    // runner processes of this binary.
    let config = compiled.config();
    if config.authoring.enabled || config.tools.values().any(|t| t.script.is_some()) {
        let dir = match &args.config {
            Some(p) => std::fs::canonicalize(p)
                .with_context(|| format!("cannot resolve config {}", p.display()))?
                .parent()
                .map(PathBuf::from)
                .unwrap_or_default(),
            None => std::env::current_dir()?,
        };
        let sources = scripts::read_sources(config, &dir).map_err(anyhow::Error::msg)?;
        let exe = std::env::current_exe().context("cannot find the toolshelf binary")?;
        let tools = rt.block_on(scripts::ScriptTools::define(
            sources,
            scripts::Runner::new(exe, config),
        ));
        for t in &tools.tools {
            if let Some(e) = &t.broken {
                errln!("toolshelf: script tool {:?} is unavailable: {e}", t.name);
            }
        }
        proxy = proxy.with_scripts(tools);
    }
    toolshelf_proxy::metrics::install().map_err(anyhow::Error::msg)?;
    let served = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let bound = listener.local_addr()?;
        let config = proxy.compiled.config();
        let p = &config.proxy;
        // The dashboard is named only where it is served.
        let dashboard = match config.ui.unserved(bound.ip().is_loopback()) {
            Some(Unserved::Off) => "no dashboard ([ui] enabled = false)".to_owned(),
            Some(Unserved::NoToken) => "no dashboard on this address without [ui] token".to_owned(),
            None => format!("dashboard at http://{bound}/ui"),
        };
        errln!(
            "toolshelf: proxy listening on http://{bound} (anthropic → {}, openai → {}); {dashboard}",
            toolshelf_proxy::server::shown_url(&p.anthropic_upstream),
            toolshelf_proxy::server::shown_url(&p.openai_upstream)
        );
        let state = AppState::new(proxy);
        state.set_loopback(bound.ip().is_loopback());
        let app = router(state.clone());
        let dropping = state.clone();
        // Ctrl-C, SIGTERM or SIGHUP stops accepting and lets the requests in flight be answered;
        // a second one stops at once.
        let mut signals = toolshelf_gateway::serve::signals();
        let mut again = signals.clone();
        let served = axum::serve(listener, app).with_graceful_shutdown(async move {
            let _ = signals.changed().await;
            match state.in_flight() {
                0 => errln!("toolshelf: stopping on a signal"),
                n => errln!(
                    "toolshelf: stopping on a signal: answering the {n} request{} in flight first (a second signal stops at once)",
                    if n == 1 { "" } else { "s" }
                ),
            }
        });
        tokio::select! {
            served = served => served.context("serving the proxy"),
            _ = again.wait_for(|n| *n > 1) => match dropping.in_flight() {
                0 => Ok(()),
                n => Err(super::Finding(format!(
                    "stopped by a second signal: {n} request{} in flight dropped",
                    if n == 1 { "" } else { "s" }
                ))
                .into()),
            },
        }
    });
    // Requests dropped by a second signal may still hold tasks (an upstream read, a hook) that a
    // runtime dropped in the usual way would wait for.
    rt.shutdown_background();
    served
}

/// The store of `[store]`: Redis when a URL is given, else the embedded one.
fn session_store(config: &Config, rt: &tokio::runtime::Runtime) -> Result<Arc<dyn SessionStore>> {
    let ttl = std::time::Duration::from_secs(config.proxy.session_ttl_secs);
    let st = &config.store;
    if let Some(url) = &st.url {
        let timeout = std::time::Duration::from_millis(st.timeout_ms);
        let store = RedisStore::new(url, &st.key_prefix, timeout).map_err(anyhow::Error::msg)?;
        errln!(
            "toolshelf: sessions in Redis at {}, keys under {:?}",
            store.addr(),
            st.key_prefix
        );
        if let Err(e) = rt.block_on(store.ping()) {
            errln!("toolshelf: {e}; serving anyway, every session missing until Redis answers");
        }
        return Ok(Arc::new(store));
    }
    let dir = if config.proxy.persist_sessions {
        Some(toolshelf_gateway::hub::cache_dir(config)?.join("proxy-sessions"))
    } else {
        None
    };
    Ok(Arc::new(
        MemoryStore::new(config.proxy.max_sessions, dir).with_file_ttl(ttl),
    ))
}
