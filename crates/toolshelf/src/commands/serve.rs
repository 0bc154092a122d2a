//! `toolshelf serve`: the MCP gateway, over stdio or streamable HTTP.
//!
//! Also home of the inputs `serve`, `status` and `catalog` share (`--config`, `--mcp-config`,
//! `--mode`), so the three always agree on which servers a configuration means and which cache
//! and status files belong to it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use toolshelf_core::Config;
use toolshelf_gateway::{Hub, Settings};

use super::errln;

/// The bundled example gateway configuration: the pinned servers that
/// `scripts/install-mcp-servers.sh` installs.
pub const EXAMPLE_GATEWAY_CONFIG: &str = include_str!("../../../../examples/gateway.toml");

/// Label of the bundled example configuration (also keys its cache and status files).
const EXAMPLE_GATEWAY_LABEL: &str = "examples/gateway.toml (bundled)";

/// `--config`, `--mcp-config`, `--mode` of the gateway commands.
#[derive(Debug, Clone, clap::Args)]
pub struct GatewaySource {
    /// toolshelf configuration (TOML) with [servers.NAME] sections and the gateway settings.
    /// With neither this nor --mcp-config: the bundled example, fronting the servers that
    /// scripts/install-mcp-servers.sh installs.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// An MCP client configuration ({"mcpServers": {...}}, the common mcp.json shape) whose
    /// servers toolshelf fronts, alone or added to --config's.
    #[arg(long, value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,
    /// Active mode, as defined by [modes.NAME] in the configuration.
    #[arg(long, value_name = "NAME")]
    pub mode: Option<String>,
}

fn absolute(path: &Path) -> String {
    std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_owned())
        .display()
        .to_string()
}

impl GatewaySource {
    /// The configuration with every server merged in, and its label.
    pub fn load(&self) -> Result<(Config, String)> {
        let mut labels = Vec::new();
        let mut config = match &self.config {
            Some(p) => {
                let text = crate::inputs::read_text(p, "config")?;
                // A copy of the bundled example is the bundled example: `status --config
                // examples/gateway.toml` finds the gateway `serve` started without one.
                labels.push(if text == EXAMPLE_GATEWAY_CONFIG {
                    EXAMPLE_GATEWAY_LABEL.to_owned()
                } else {
                    absolute(p)
                });
                let mut config = Config::from_toml_str(&text, &p.display().to_string())?;
                // Relative paths in it ([cache] path, [audit] path) are the file's directory's.
                config.dir = std::path::absolute(p)
                    .ok()
                    .and_then(|p| p.parent().map(Path::to_path_buf));
                config
            }
            None if self.mcp_config.is_none() => {
                labels.push(EXAMPLE_GATEWAY_LABEL.to_owned());
                Config::from_toml_str(EXAMPLE_GATEWAY_CONFIG, EXAMPLE_GATEWAY_LABEL)?
            }
            None => Config::default(),
        };
        // The --mcp-config file, when it defines a server by the name script tools take.
        let mut scripts_in_mcp = None;
        if let Some(p) = &self.mcp_config {
            let text = crate::inputs::read_text(p, "MCP config")?;
            let name = p.display().to_string();
            let (servers, warnings) = Config::servers_from_mcp_json(&text, &name)?;
            for w in warnings {
                errln!("toolshelf: warning: {w}");
            }
            if servers.contains_key(toolshelf_core::config::SCRIPTS_SERVER) {
                scripts_in_mcp = Some(name.clone());
            }
            let config_name = self
                .config
                .as_ref()
                .map(|c| c.display().to_string())
                .unwrap_or_default();
            toolshelf_gateway::hub::merge_servers(&mut config, servers, &config_name, &name)?;
            labels.push(absolute(p));
        }
        if let Some(p) = &self.config {
            add_script_server(&mut config, p, scripts_in_mcp.as_deref())?;
        }
        // Tools the model writes are a gateway's tools too: one may offer nothing else.
        if config.servers.is_empty() && !config.authoring.enabled {
            bail!(
                "{}: no MCP servers configured ([servers.NAME]), no script tools ([tools.NAME] script) and no [authoring]: the gateway would have no tool to offer",
                labels.join(" + ")
            );
        }
        Ok((config, labels.join(" + ")))
    }

    /// Settings for a long-running gateway (`serve`): cached servers start lazily, crashed ones
    /// restart, the status file is kept.
    pub fn serving(&self) -> Result<Settings> {
        let (config, label) = self.load()?;
        let enrich = enricher(&config);
        Ok(Settings {
            config,
            label,
            mode: self.mode.clone(),
            lazy: true,
            status_file: true,
            restarts: true,
            enrich,
            runner: std::env::current_exe().ok(),
        })
    }

    /// Settings for a one-shot look at the servers (`catalog`, `status`): every server is
    /// started now and reported as it was, nothing is restarted or audited.
    pub fn one_shot(&self) -> Result<Settings> {
        let mut s = self.serving()?;
        s.lazy = false;
        s.status_file = false;
        s.restarts = false;
        s.enrich = None;
        s.config.audit.enabled = false;
        Ok(s)
    }
}

/// Serves `[tools.NAME] script` tools as the server `scripts`: reads every script (relative to
/// the configuration's directory) and adds a server section that runs this binary's scripts
/// server on the same configuration. `scripts_in_mcp` is the `--mcp-config` file when a server
/// of that name came from it.
fn add_script_server(config: &mut Config, path: &Path, scripts_in_mcp: Option<&str>) -> Result<()> {
    use toolshelf_core::config::{SCRIPTS_SERVER, ServerConfig};
    use toolshelf_gateway::scripts;
    if !config.tools.values().any(|t| t.script.is_some()) {
        return Ok(());
    }
    if let Some(mcp) = scripts_in_mcp {
        bail!(
            "{mcp}: mcpServers.{SCRIPTS_SERVER} is taken by script tools ([tools.NAME] script in {}); name that server otherwise",
            path.display()
        );
    }
    if config.servers.contains_key(SCRIPTS_SERVER) {
        bail!(
            "{}: [servers.{SCRIPTS_SERVER}] is taken by script tools ([tools.NAME] script); name that server otherwise",
            path.display()
        );
    }
    let path = std::fs::canonicalize(path)
        .with_context(|| format!("cannot resolve config {}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("/")).to_owned();
    let sources = scripts::sources(config, &dir)?;
    // The cached tool list holds the rendered descriptions, which read the template values
    // (the workspace defaulting to the directory the gateway runs in) and run under the script
    // limits: a change to any of them is a new list.
    let workspace = config.template.workspace.clone().or_else(|| {
        std::env::current_dir()
            .ok()
            .map(|d| d.display().to_string())
    });
    let settings = format!(
        "{:?}\0{workspace:?}\0{:?}",
        config.template.vars, config.scripts
    );
    let digest = scripts::sources_digest(&sources, &settings);
    let exe = std::env::current_exe().context("cannot find the toolshelf binary")?;
    let timeout = config.scripts.timeout_secs;
    config.servers.insert(
        SCRIPTS_SERVER.to_owned(),
        ServerConfig {
            command: Some(exe.display().to_string()),
            args: vec![
                scripts::SERVER_SUBCOMMAND.to_owned(),
                "--config".to_owned(),
                path.display().to_string(),
            ],
            env: [("TOOLSHELF_SCRIPTS_DIGEST".to_owned(), digest)].into(),
            cwd: None,
            url: None,
            headers: Default::default(),
            description: Some(toolshelf_core::config::SCRIPTS_DESCRIPTION.into()),
            // Defining the scripts takes at most this long; past it something hangs.
            startup_timeout_secs: toolshelf_runtime::scripts::defining_time(sources.len(), timeout),
            // The runner's own time limit decides; this only catches a runner that hangs.
            call_timeout_secs: Some(timeout + 10),
            restart_delay_secs: 1,
            enabled: true,
            description_template: None,
        },
    );
    Ok(())
}

/// Arguments of `__scripts-server` (started by the gateway, not by people).
#[derive(Debug, clap::Args)]
pub struct ScriptsServerArgs {
    /// The configuration whose [tools.NAME] script tools to serve.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

/// Serves a configuration's script tools over stdio.
pub fn run_scripts_server(args: ScriptsServerArgs) -> Result<()> {
    init_logging("warn");
    let text = crate::inputs::read_text(&args.config, "config")?;
    let config = Config::from_toml_str(&text, &args.config.display().to_string())?;
    let dir = args.config.parent().unwrap_or(Path::new("/")).to_owned();
    let sources = toolshelf_gateway::scripts::sources(&config, &dir)?;
    let exe = std::env::current_exe().context("cannot find the toolshelf binary")?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let server =
                toolshelf_gateway::scripts::ScriptServer::new(&config, sources, exe).await?;
            server.serve_stdio().await
        })?;
    Ok(())
}

/// Runs one script call: a `RunRequest` on stdin, a `RunResponse` on stdout.
pub fn run_script() -> Result<()> {
    use std::io::Read;
    let mut input = Vec::new();
    std::io::stdin().read_to_end(&mut input)?;
    let request: toolshelf_runtime::script::RunRequest =
        serde_json::from_slice(&input).context("the script runner's input is not a run request")?;
    // The scripts server kills a run past its time, but it may itself be killed first (its
    // gateway stopped): then nothing would. So the runner ends itself when its parent is gone or
    // its time is up.
    let parent = std::os::unix::process::parent_id();
    let deadline = (request.timeout_secs > 0).then(|| {
        std::time::Instant::now() + std::time::Duration::from_secs(request.timeout_secs + 1)
    });
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(std::time::Duration::from_millis(100));
            if std::os::unix::process::parent_id() != parent
                || deadline.is_some_and(|d| std::time::Instant::now() > d)
            {
                std::process::exit(124);
            }
        }
    });
    let response = toolshelf_runtime::script::run(&request);
    println!("{}", serde_json::to_string(&response)?);
    Ok(())
}

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    source: GatewaySource,
    /// Serve streamable HTTP at http://ADDR/mcp (e.g. 127.0.0.1:8848) instead of stdio; the same
    /// listener serves the dashboard at /ui and Prometheus metrics at /metrics.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
}

static VERBOSITY: std::sync::OnceLock<u8> = std::sync::OnceLock::new();

/// Records `-v` (how many times it was given) for [`init_logging`].
pub fn set_verbosity(v: u8) {
    let _ = VERBOSITY.set(v);
}

/// How many times `-v` was given.
pub fn verbosity() -> u8 {
    VERBOSITY.get().copied().unwrap_or(0)
}

/// Logs to stderr (stdout is the MCP channel over stdio). `default` is the filter without `-v`;
/// `-v` raises everything to info (the MCP library's per-message lines included), `-vv` debug,
/// `-vvv` trace; `RUST_LOG` or `TOOLSHELF_LOG` replace the filter entirely.
pub fn init_logging(default: &str) {
    // rmcp logs transport failures at error level, quoting the server's URL; toolshelf reports
    // them itself (with the URL redacted), so the library's own lines wait for -v.
    let quiet = format!("{default},rmcp=off");
    let level = match verbosity() {
        0 => quiet.as_str(),
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = ["TOOLSHELF_LOG", "RUST_LOG"]
        .iter()
        .find_map(|k| {
            std::env::var(k)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .and_then(|v| tracing_subscriber::EnvFilter::try_new(v).ok())
        })
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// The log filter of the one-shot gateway commands (`status`, `catalog`) without `-v`: warnings,
/// except a server's state changes (failed to start, connection closed), which their table or
/// error already gives with the reason; a second, raw line for each would only repeat it.
pub const ONE_SHOT_LOG: &str = "warn,toolshelf_gateway::downstream=error";

/// A Tokio runtime for the gateway commands.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

pub fn run(args: Args) -> Result<()> {
    // Warnings, and toolshelf's own state changes (servers starting, ready, failing, their
    // tools changing); the MCP library's line per message only with -v.
    init_logging("warn,toolshelf_gateway=info");
    let settings = args.source.serving()?;
    let runtime = runtime()?;
    let served = runtime.block_on(async move {
        // Listened for before any server starts: from here on Ctrl-C, SIGTERM and SIGHUP stop the
        // gateway through `hub.shutdown()`, which takes the servers' process groups with it,
        // whenever they come (before the client's handshake too).
        let signals = toolshelf_gateway::serve::signals();
        // The address is taken before any server starts: a gateway that cannot have it exits
        // without starting servers or writing to an audit log it may share with the one that has.
        let listener = match &args.http {
            Some(addr) => Some(toolshelf_gateway::serve::bind_http(addr).await?),
            None => None,
        };
        let hub: Arc<Hub> = Hub::start(settings)?;
        let served = match listener {
            Some(listener) => {
                toolshelf_gateway::metrics::install().map_err(anyhow::Error::msg)?;
                toolshelf_gateway::serve::serve_http(hub.clone(), listener, signals, |bound| {
                    errln!("toolshelf: serving MCP at http://{bound}/mcp");
                })
                .await
            }
            None => toolshelf_gateway::serve::serve_stdio(hub.clone(), signals).await,
        };
        hub.shutdown();
        served.map_err(anyhow::Error::from)
    });
    // A stdio session ended by a signal leaves its read of stdin blocked (the client may still
    // hold it open), which a runtime dropped in the usual way would wait for.
    runtime.shutdown_background();
    served
}

/// The embedding ranker, when this binary has it. Tool vectors are kept in `vectors.bin` in the
/// gateway's cache directory, so a restart or a catalog change embeds only new tool text.
pub(crate) fn enricher(config: &Config) -> Option<toolshelf_gateway::Enricher> {
    #[cfg(feature = "embed")]
    {
        let path = toolshelf_gateway::hub::cache_dir(config)
            .map(|d| d.join("vectors.bin"))
            .unwrap_or_default();
        let cache = std::sync::Mutex::new(None::<toolshelf_embed::VectorCache>);
        let persist = config.cache.enabled && !path.as_os_str().is_empty();
        Some(toolshelf_gateway::Enricher(Arc::new(
            move |index, catalog| {
                let dim = toolshelf_embed::Embedder::bundled()
                    .map_err(|e| e.to_string())?
                    .dim();
                let mut guard = cache.lock().unwrap_or_else(|p| p.into_inner());
                let vectors = guard.get_or_insert_with(|| {
                    if persist {
                        toolshelf_embed::VectorCache::load(&path, dim)
                    } else {
                        Default::default()
                    }
                });
                toolshelf_embed::attach_bundled_cached(index, catalog, vectors)
                    .map_err(|e| e.to_string())?;
                if persist && let Err(e) = vectors.save(&path) {
                    errln!(
                        "toolshelf: warning: cannot write the vector cache {}: {e}",
                        path.display()
                    );
                }
                Ok(())
            },
        )))
    }
    #[cfg(not(feature = "embed"))]
    {
        let _ = config;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label_of(config: Option<PathBuf>) -> String {
        GatewaySource {
            config,
            mcp_config: None,
            mode: None,
        }
        .load()
        .expect("loads")
        .1
    }

    #[test]
    fn the_bundled_example_and_a_copy_of_it_are_one_configuration() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/gateway.toml");
        assert_eq!(label_of(None), EXAMPLE_GATEWAY_LABEL);
        assert_eq!(label_of(Some(file.clone())), EXAMPLE_GATEWAY_LABEL);
        let edited =
            std::env::temp_dir().join(format!("toolshelf-label-{}.toml", std::process::id()));
        std::fs::write(&edited, format!("{EXAMPLE_GATEWAY_CONFIG}\n# edited\n")).expect("write");
        assert_eq!(label_of(Some(edited.clone())), absolute(&edited));
        let _ = std::fs::remove_file(edited);
    }
}
