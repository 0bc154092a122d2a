//! Script tools as an MCP server of their own.
//!
//! `[tools.NAME] script = "FILE.star"` defines a tool in Starlark. The gateway serves every such
//! tool as one downstream server, `scripts` (so `mcp__scripts__NAME`), which it starts like any
//! other: its tools are searched, validated, authorised, hooked, audited, cached and timed out by
//! the same path as every MCP tool, and a crash is a server crash, restarted in the background.
//!
//! This module is that server. A script file is never evaluated in it, nor in the gateway: each
//! definition (at start: `description`, `schema`, `def run(params)`, read in the template
//! environment, see `toolshelf_core::template`) and each call happens in a process of its own
//! (the runner: `toolshelf __script-run`), started under an address-space limit (`[scripts]
//! max_memory_mb`) and killed past `[scripts] timeout_secs`. Neither an allocation Starlark
//! cannot stop (Starlark folds constants such as `"a" * 2000000000` while compiling) nor a hung
//! host reaches this server or the gateway: the call fails with an error naming the limit.
//!
//! A script's `description` is rendered once, when this server starts, with `session.mode` and
//! `session.client` unset (the server serves every session); it is the catalog's description of
//! the tool.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use toolshelf_core::config::{Config, SCRIPTS_SERVER, ScriptsConfig};
use toolshelf_core::name;
use toolshelf_core::template::SessionValues;
use toolshelf_runtime::script::{Job, RunRequest, RunResponse};

use crate::error::{GatewayError, Result};

/// The subcommand of the toolshelf binary that runs one script call.
pub const RUNNER_SUBCOMMAND: &str = "__script-run";

/// The subcommand of the toolshelf binary that serves the script tools.
pub const SERVER_SUBCOMMAND: &str = "__scripts-server";

/// One script tool, read and defined.
#[derive(Debug, Clone)]
struct ScriptTool {
    /// Its name in the group (the `[tools.NAME]` key).
    name: String,
    /// `script tool "mcp__scripts__NAME" (FILE)`, for errors.
    owner: String,
    source: String,
    pkg: BTreeMap<String, Value>,
    description: String,
    schema: serde_json::Map<String, Value>,
    /// Why the script could not be defined; every call of it fails with this.
    broken: Option<String>,
}

/// The script tools of a configuration, served over MCP.
#[derive(Debug, Clone)]
pub struct ScriptServer {
    tools: Vec<ScriptTool>,
    runner: PathBuf,
    limits: ScriptsConfig,
    session: SessionValues,
}

/// `[tools.NAME] script` paths resolved against the configuration's directory, in name order.
pub fn script_paths(config: &Config, config_dir: &Path) -> Vec<(String, PathBuf)> {
    config
        .tools
        .iter()
        .filter_map(|(name, t)| {
            t.script
                .as_ref()
                .map(|p| (name.clone(), config_dir.join(expand_home(p))))
        })
        .collect()
}

fn expand_home(p: &str) -> PathBuf {
    match (p.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(p),
    }
}

/// Reads every script: (name, path as written, source). An unreadable file is an error naming
/// the tool and the path.
pub fn read_sources(config: &Config, config_dir: &Path) -> Result<Vec<(String, String, String)>> {
    let mut out = Vec::new();
    for (name, path) in script_paths(config, config_dir) {
        let source = std::fs::read_to_string(&path).map_err(|e| GatewayError::Server {
            server: SCRIPTS_SERVER.into(),
            message: format!(
                "[tools.{name:?}] script {}: cannot read it: {e}",
                path.display()
            ),
        })?;
        let written = config.tools[&name].script.clone().unwrap_or_default();
        out.push((name, written, source));
    }
    Ok(out)
}

/// A digest of the scripts' sources, so that the catalog cache, keyed by the server's launch
/// settings, is not reused for changed scripts.
pub fn sources_digest(sources: &[(String, String, String)]) -> String {
    let mut all = String::new();
    for (name, _, src) in sources {
        all.push_str(name);
        all.push('\0');
        all.push_str(src);
        all.push('\0');
    }
    format!("{:016x}", name::fnv1a64(all.as_bytes()))
}

/// The session values scripts are defined and run with: no mode or client (a call does not say
/// whose it is), the workspace as templates have it.
fn session_values(config: &Config) -> SessionValues {
    SessionValues {
        mode: None,
        client: None,
        workspace: config.template.workspace.clone().or_else(|| {
            std::env::current_dir()
                .ok()
                .map(|d| d.display().to_string())
        }),
    }
}

fn pkg_values(
    config: &Config,
    name: &str,
    description: &str,
    schema: Option<&serde_json::Map<String, Value>>,
) -> BTreeMap<String, Value> {
    let mut params: Vec<&String> = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|p| p.keys().collect())
        .unwrap_or_default();
    params.sort();
    let mut required: Vec<&str> = schema
        .and_then(|s| s.get("required"))
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    required.sort();
    let mut pkg = BTreeMap::from([
        ("description".to_owned(), json!(description)),
        (
            "name".to_owned(),
            json!(name::mcp_name(SCRIPTS_SERVER, &name::tool_segment(name))),
        ),
        ("params".to_owned(), json!(params)),
        ("required".to_owned(), json!(required)),
        ("server".to_owned(), json!(SCRIPTS_SERVER)),
        ("tags".to_owned(), json!([])),
        ("tool".to_owned(), json!(name)),
    ]);
    pkg.extend(config.template.vars.clone());
    pkg
}

impl ScriptServer {
    /// Defines every script tool of `config` from `sources` ([`read_sources`]), each in a
    /// runner; `runner` is the toolshelf binary. A script that does not define itself (an error,
    /// a limit reached) is still listed, so the others are unaffected: its description says why
    /// it is unavailable, and every call of it fails with that error.
    pub async fn new(
        config: &Config,
        sources: Vec<(String, String, String)>,
        runner: PathBuf,
    ) -> Result<Self> {
        let mut server = Self {
            tools: Vec::new(),
            runner,
            limits: config.scripts.clone(),
            session: session_values(config),
        };
        for (name, path, source) in sources {
            let canonical = name::mcp_name(SCRIPTS_SERVER, &name::tool_segment(&name));
            let owner = format!("script tool {canonical:?} ({path})");
            let defined = server
                .exec(
                    Job::Define,
                    &owner,
                    &source,
                    pkg_values(config, &name, "", None),
                    Value::Null,
                )
                .await
                .and_then(|def| {
                    let description = def["description"].as_str().unwrap_or_default().to_owned();
                    match def["schema"].as_object() {
                        Some(schema) => Ok((description, schema.clone())),
                        None => Err(format!("{owner}: the runner gave no schema")),
                    }
                });
            let (description, schema, broken) = match defined {
                Ok((d, schema)) => (d, schema, None),
                Err(e) => {
                    tracing::warn!("{e}");
                    (
                        format!("This script tool is unavailable: {e}"),
                        toolshelf_core::catalog::empty_object_schema(),
                        Some(e),
                    )
                }
            };
            server.tools.push(ScriptTool {
                pkg: pkg_values(config, &name, &description, Some(&schema)),
                name,
                owner,
                source,
                description,
                schema,
                broken,
            });
        }
        Ok(server)
    }

    /// The tools, as `tools/list` gives them.
    pub fn list(&self) -> Vec<Tool> {
        self.tools
            .iter()
            .map(|t| {
                Tool::new(
                    t.name.clone(),
                    t.description.clone(),
                    std::sync::Arc::new(t.schema.clone()),
                )
            })
            .collect()
    }

    /// Serves the tools over stdin and stdout until the client (the gateway) closes them.
    pub async fn serve_stdio(self) -> Result<()> {
        let running =
            self.serve(rmcp::transport::stdio())
                .await
                .map_err(|e| GatewayError::Serve {
                    transport: "stdio",
                    message: e.to_string(),
                })?;
        let _ = running.waiting().await;
        Ok(())
    }

    /// Runs `name` with `params` in a runner process; its value, or the error.
    pub async fn call(&self, name: &str, params: Value) -> std::result::Result<Value, String> {
        let Some(tool) = self.tools.iter().find(|t| t.name == name) else {
            return Err(format!("no script tool is named {name:?}"));
        };
        if let Some(e) = &tool.broken {
            return Err(e.clone());
        }
        self.exec(
            Job::Run,
            &tool.owner,
            &tool.source,
            tool.pkg.clone(),
            params,
        )
        .await
    }

    /// Hands one job to a runner process under the limits and reads its answer.
    async fn exec(
        &self,
        job: Job,
        owner: &str,
        source: &str,
        pkg: BTreeMap<String, Value>,
        params: Value,
    ) -> std::result::Result<Value, String> {
        let l = &self.limits;
        let request = RunRequest {
            job,
            owner: owner.to_owned(),
            source: source.to_owned(),
            params,
            pkg,
            session: self.session.clone(),
            max_steps: l.max_steps,
            max_heap_bytes: (l.max_heap_mb as usize) << 20,
            max_call_depth: l.max_call_depth,
            allow_hosts: l.allow_hosts.clone(),
            http_timeout_secs: l.timeout_secs,
        };
        let input = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
        // The address-space limit is set by the shell the runner is started from, so the
        // runner (and only it) is bounded.
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(r#"ulimit -v "$1" || exit 97; shift; exec "$@""#)
            .arg("sh")
            .arg((l.max_memory_mb * 1024).to_string())
            .arg(&self.runner)
            .arg(RUNNER_SUBCOMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                format!(
                    "{}: cannot start the script runner {}: {e}",
                    owner,
                    self.runner.display()
                )
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(&input)
                .await
                .map_err(|e| format!("{}: cannot hand the call to the runner: {e}", owner))?;
        }
        let limit = Duration::from_secs(l.timeout_secs);
        let out = match tokio::time::timeout(limit, child.wait_with_output()).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Err(format!("{}: the runner failed: {e}", owner)),
            // Dropping the child kills it.
            Err(_) => {
                return Err(format!(
                    "{}: stopped: the time limit of {} s ([scripts] timeout_secs) was reached",
                    owner, l.timeout_secs
                ));
            }
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            return match serde_json::from_slice::<RunResponse>(&out.stdout) {
                Ok(RunResponse::Ok(v)) => Ok(v),
                Ok(RunResponse::Error(e)) => Err(e),
                Err(e) => Err(format!(
                    "{}: the runner's answer cannot be read ({e})",
                    owner
                )),
            };
        }
        if stderr.contains("memory allocation of") {
            return Err(format!(
                "{}: stopped: the memory limit of {} MiB ([scripts] max_memory_mb) was reached",
                owner, l.max_memory_mb
            ));
        }
        let tail: String = stderr
            .lines()
            .rev()
            .take(3)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join(" | ");
        Err(format!(
            "{}: the script's process ended abnormally ({}){}",
            owner,
            out.status,
            if tail.is_empty() {
                String::new()
            } else {
                format!(": {tail}")
            }
        ))
    }
}

impl ServerHandler for ScriptServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "toolshelf-scripts",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions("Tools defined by Starlark scripts of the toolshelf configuration.")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.list()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        let params = Value::Object(request.arguments.unwrap_or_default());
        let result = match self.call(request.name.as_ref(), params).await {
            Ok(Value::String(text)) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Ok(other) => CallToolResult::success(vec![ContentBlock::text(other.to_string())]),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(e)]),
        };
        Ok(result.into())
    }
}
