//! Script tools outside the runner: reading `[tools.NAME] script` files, defining each tool,
//! and running calls, each in a runner process of its own under the `[scripts]` limits.
//!
//! The gateway serves these tools as an MCP server (`mcp__scripts__NAME`); the proxy runs them
//! itself, as it answers a search. Tools the model writes with `tool_define` run the same way,
//! from source kept in their session.
//!
//! A script is never evaluated in the calling process: each definition (`description`,
//! `schema`, `def run(params)`, read in the template environment), each reading of the top level
//! of a script the model wants to define (read the same way, so that what `tool_define` accepts
//! loads as a script tool too) and each call happens in a runner (`toolshelf __script-run`)
//! started under an address-space limit (`[scripts] max_memory_mb`) and killed past `[scripts]
//! timeout_secs`. Neither an allocation Starlark
//! cannot stop (it folds constants such as `"a" * 2000000000` while compiling) nor a hung host
//! reaches the caller: the call fails with an error naming the limit. At most `[scripts]
//! max_concurrent` runners of one [`Runner`] (and its clones) run at once: a call beyond them
//! waits for one to end, and the wait counts against its `timeout_secs`. A failure's text is cut
//! to `[scripts] max_result_bytes`, as a result is refused past it ([`cut_error`]).
//!
//! A script's `description` is rendered once, when its tools are defined, with `session.mode`
//! and `session.client` unset (the tools serve every session); it is the catalog's description.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;
use toolshelf_core::authoring::Authored;
use toolshelf_core::config::{Config, SCRIPTS_SERVER, ScriptsConfig};
use toolshelf_core::name;
use toolshelf_core::template::SessionValues;

use crate::script::{Job, RunRequest, RunResponse};

/// The subcommand of the toolshelf binary that runs one script call.
pub const RUNNER_SUBCOMMAND: &str = "__script-run";

pub use toolshelf_core::template::schema_names;

/// How many scripts are defined at once when the scripts server starts.
pub const DEFINING_AT_ONCE: usize = 4;

/// The longest the scripts server may take to define `scripts` scripts, each allowed
/// `timeout_secs`: the gateway's start-up timeout for it.
pub fn defining_time(scripts: usize, timeout_secs: u64) -> u64 {
    scripts.div_ceil(DEFINING_AT_ONCE) as u64 * timeout_secs + 10
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

/// One script file: the tool's name, the path as written, the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The `[tools.NAME]` key.
    pub name: String,
    /// The path as the configuration writes it.
    pub path: String,
    /// The script.
    pub text: String,
}

/// Reads every script. An unreadable file is an error naming the tool and the path.
pub fn read_sources(config: &Config, config_dir: &Path) -> Result<Vec<Source>, String> {
    let mut out = Vec::new();
    for (name, path) in script_paths(config, config_dir) {
        let at = format!("[tools.{name:?}] script {}", path.display());
        let bytes = std::fs::read(&path).map_err(|e| {
            let why = match e.kind() {
                std::io::ErrorKind::NotFound => "there is no such file".to_owned(),
                std::io::ErrorKind::IsADirectory => "it is a directory, not a file".to_owned(),
                _ => e.to_string(),
            };
            format!("{at}: cannot read it: {why}")
        })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let offset = e.utf8_error().valid_up_to();
            let line = 1 + e.as_bytes()[..offset].iter().filter(|&&b| b == b'\n').count();
            format!(
                "{at}:{line}: not valid UTF-8 (byte {offset} of the file); a script must be UTF-8 text"
            )
        })?;
        let written = config.tools[&name].script.clone().unwrap_or_default();
        out.push(Source {
            name,
            path: written,
            text,
        });
    }
    Ok(out)
}

/// A digest of the scripts' sources and of the `settings` their definitions depend on (template
/// values, limits), so that a catalog cache keyed by launch settings is not reused for changed
/// scripts or settings.
pub fn sources_digest(sources: &[Source], settings: &str) -> String {
    let mut all = format!("{settings}\0");
    for s in sources {
        all.push_str(&s.name);
        all.push('\0');
        all.push_str(&s.text);
        all.push('\0');
    }
    format!("{:016x}", name::fnv1a64(all.as_bytes()))
}

/// How the description of a script tool that could not be defined begins; the reason follows.
pub const UNAVAILABLE: &str = toolshelf_core::config::SCRIPT_UNAVAILABLE;

/// Runs jobs in runner processes under one configuration's limits.
#[derive(Debug, Clone)]
pub struct Runner {
    path: PathBuf,
    limits: ScriptsConfig,
    /// `[authoring] allow_hosts`: what tools the model wrote may reach.
    authored_hosts: Vec<String>,
    session: SessionValues,
    vars: BTreeMap<String, Value>,
    /// One permit per runner process that may run at once (`[scripts] max_concurrent`),
    /// shared by the clones.
    slots: Arc<tokio::sync::Semaphore>,
}

impl Runner {
    /// A runner of `config`'s scripts; `path` is the toolshelf binary. Scripts are defined and
    /// run with no mode or client (a call does not say whose it is) and the workspace as
    /// templates have it.
    pub fn new(path: PathBuf, config: &Config) -> Self {
        Self {
            path,
            limits: config.scripts.clone(),
            authored_hosts: config.authoring.allow_hosts.clone(),
            session: SessionValues {
                mode: None,
                client: None,
                workspace: crate::files::workspace(config.template.workspace.as_deref()),
            },
            vars: config.template.vars.clone(),
            slots: Arc::new(tokio::sync::Semaphore::new(
                config
                    .scripts
                    .max_concurrent
                    .clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
            )),
        }
    }

    /// `pkg` values of a tool named `tool` in `server` (none: a built-in).
    pub fn pkg(
        &self,
        server: Option<&str>,
        tool: &str,
        description: &str,
        schema: Option<&Map<String, Value>>,
    ) -> BTreeMap<String, Value> {
        let mut pkg = toolshelf_core::template::script_values(server, tool, description, schema);
        pkg.extend(self.vars.clone());
        pkg
    }

    /// Hands one job to a runner process under the limits and reads its answer; `owner` names
    /// the tool in errors.
    pub async fn exec(
        &self,
        job: Job,
        owner: &str,
        source: &str,
        pkg: BTreeMap<String, Value>,
        params: Value,
    ) -> Result<Value, String> {
        self.exec_with(
            job,
            owner,
            source,
            pkg,
            params,
            (&self.limits.allow_hosts, "[scripts] allow_hosts"),
        )
        .await
    }

    /// [`Self::exec`] with the hosts the run may reach, and the setting they come from: waits
    /// for a free slot, then runs; the wait and the run share `timeout_secs`.
    async fn exec_with(
        &self,
        job: Job,
        owner: &str,
        source: &str,
        pkg: BTreeMap<String, Value>,
        params: Value,
        hosts: (&[String], &str),
    ) -> Result<Value, String> {
        let l = &self.limits;
        let limit = Duration::from_secs(l.timeout_secs);
        let started = tokio::time::Instant::now();
        let Ok(Ok(_slot)) = tokio::time::timeout(limit, self.slots.acquire()).await else {
            return Err(format!(
                "{owner}: not run: every runner slot ([scripts] max_concurrent = {}) stayed busy with other calls for the whole time limit of {} s ([scripts] timeout_secs); try again when fewer calls are running",
                l.max_concurrent, l.timeout_secs
            ));
        };
        let waited = started.elapsed();
        self.run_one(job, owner, source, pkg, params, hosts, waited)
            .await
            .map_err(|e| cut_error(e, l.max_result_bytes))
    }

    /// Runs one job in a runner process, `waited` having passed already of its time limit.
    #[allow(clippy::too_many_arguments)]
    async fn run_one(
        &self,
        job: Job,
        owner: &str,
        source: &str,
        pkg: BTreeMap<String, Value>,
        params: Value,
        (allow_hosts, allow_hosts_setting): (&[String], &str),
        waited: Duration,
    ) -> Result<Value, String> {
        let l = &self.limits;
        let left = Duration::from_secs(l.timeout_secs).saturating_sub(waited);
        let left_secs = left.as_secs_f64().ceil().max(1.0) as u64;
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
            allow_hosts: allow_hosts.to_vec(),
            allow_hosts_setting: allow_hosts_setting.to_owned(),
            http_timeout_secs: left_secs,
            timeout_secs: left_secs,
        };
        let input = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
        // The address-space limit is set by the shell the runner is started from, so the
        // runner (and only it) is bounded.
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(r#"ulimit -v "$1" || exit 97; shift; exec "$@""#)
            .arg("sh")
            .arg((l.max_memory_mb * 1024).to_string())
            .arg(&self.path)
            .arg(RUNNER_SUBCOMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                format!(
                    "{owner}: cannot start the script runner {}: {e}",
                    self.path.display()
                )
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(&input)
                .await
                .map_err(|e| format!("{owner}: cannot hand the call to the runner: {e}"))?;
        }
        let out = match tokio::time::timeout(left, child.wait_with_output()).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Err(format!("{owner}: the runner failed: {e}")),
            // Dropping the child kills it.
            Err(_) => {
                let queued = if waited.as_secs() > 0 {
                    format!(
                        ", {} s of it waiting for a free runner ([scripts] max_concurrent is {})",
                        waited.as_secs(),
                        l.max_concurrent
                    )
                } else {
                    String::new()
                };
                return Err(format!(
                    "{owner}: stopped: the time limit of {} s ([scripts] timeout_secs) was reached{queued}",
                    l.timeout_secs
                ));
            }
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            return match serde_json::from_slice::<RunResponse>(&out.stdout) {
                // A definition's answer is the script's own description and schema; a run's is
                // what the model reads, and in the proxy reads again on every later request.
                Ok(RunResponse::Ok(_))
                    if job == Job::Run && out.stdout.len() > l.max_result_bytes =>
                {
                    Err(format!(
                        "{owner}: its result is about {} bytes, more than [scripts] max_result_bytes ({}) allows; return less (a summary, a page, the part asked for)",
                        out.stdout.len(),
                        l.max_result_bytes
                    ))
                }
                Ok(RunResponse::Ok(v)) => Ok(v),
                Ok(RunResponse::Error(e)) => Err(e),
                Err(e) => Err(format!("{owner}: the runner's answer cannot be read ({e})")),
            };
        }
        // Rust's allocation failure (`memory allocation of N bytes failed`) and an arena's
        // (`out of memory`) both mean the address-space limit was reached.
        if stderr.contains("memory allocation of") || stderr.contains("out of memory") {
            return Err(format!(
                "{owner}: stopped: the memory limit of {} MiB ([scripts] max_memory_mb) was reached",
                l.max_memory_mb
            ));
        }
        // The runner evaluates on its main thread: a value nested tens of thousands of levels
        // deep (`x = [x]` in a loop), which `str`, `==`, hashing and the garbage collector walk
        // one level at a time, outgrows its stack.
        if stderr.contains("has overflowed its stack") {
            return Err(format!(
                "{owner}: stopped: the runner's stack ran out, most likely on a value nested thousands of levels deep (a list built as `x = [x]` in a loop); keep values flatter"
            ));
        }
        let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Err(format!(
            "{owner}: the script's process ended abnormally ({}){}",
            out.status,
            if tail.is_empty() {
                String::new()
            } else {
                format!(": {}", tail.join(" | "))
            }
        ))
    }

    /// Reads the top level of a script the model wants to define (`tool_define`) in a runner, as
    /// a script tool's file is read when it is defined: the refusal the model reads when it reads
    /// `turn`, uses a stub (`time.now()`), fails or reaches a limit, so that no tool whose every
    /// call would fail is defined (and no kept file fails as a script tool).
    pub async fn check_authored(&self, tool: &Authored) -> Result<(), String> {
        self.exec_with(
            Job::TopLevel,
            &tool.definer(),
            &tool.script,
            tool.pkg(&self.vars),
            Value::Null,
            (&self.authored_hosts, "[authoring] allow_hosts"),
        )
        .await
        .map(drop)
        .map_err(toolshelf_core::authoring::top_level_refusal)
    }

    /// Runs a tool the model wrote (`tool_define`).
    pub async fn run_authored(&self, tool: &Authored, params: Value) -> Result<Value, String> {
        let owner = format!("model-authored tool {name:?}", name = tool.name());
        let pkg = tool.pkg(&self.vars);
        self.exec_with(
            Job::Run,
            &owner,
            &tool.script,
            pkg,
            params,
            (&self.authored_hosts, "[authoring] allow_hosts"),
        )
        .await
    }
}

/// One script tool, read and defined.
#[derive(Debug, Clone)]
pub struct ScriptTool {
    /// Its name in the group (the `[tools.NAME]` key).
    pub name: String,
    /// `script tool "mcp__scripts__NAME" (FILE)`, for errors.
    owner: String,
    source: String,
    pkg: BTreeMap<String, Value>,
    /// The rendered description.
    pub description: String,
    /// The input schema.
    pub schema: Map<String, Value>,
    /// Why the script could not be defined; every call of it fails with this.
    pub broken: Option<String>,
}

/// The script tools of a configuration, defined.
#[derive(Debug, Clone)]
pub struct ScriptTools {
    /// The tools, in name order.
    pub tools: Vec<ScriptTool>,
    /// What runs them.
    pub runner: Runner,
}

impl ScriptTools {
    /// Defines every script of `sources` ([`read_sources`]), each in a runner, up to
    /// [`DEFINING_AT_ONCE`] at a time, so that a slow script holds up its own slot only. A script
    /// that does not define itself (an error, a limit reached) is still listed, so the others
    /// are unaffected: its description says why it is unavailable, and every call fails with
    /// that. The tools keep the sources' order.
    pub async fn define(sources: Vec<Source>, runner: Runner) -> Self {
        use futures_util::StreamExt as _;
        let runner_ref = &runner;
        let tools = futures_util::stream::iter(sources)
            .map(|s| Self::define_one(s, runner_ref))
            .buffered(DEFINING_AT_ONCE)
            .collect::<Vec<_>>()
            .await;
        Self { tools, runner }
    }

    async fn define_one(s: Source, runner: &Runner) -> ScriptTool {
        let canonical = name::mcp_name(SCRIPTS_SERVER, &name::tool_segment(&s.name));
        let owner = format!("script tool {canonical:?} ({})", s.path);
        let defined = runner
            .exec(
                Job::Define,
                &owner,
                &s.text,
                runner.pkg(Some(SCRIPTS_SERVER), &s.name, "", None),
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
        // A schema no call could be checked against makes the tool unavailable, as any other
        // fault of its file: the fix is in the file, not in a server.
        let defined = match defined {
            Ok((description, schema)) => {
                let given = schema.clone();
                match crate::off_workers(move || toolshelf_core::invoke::schema_problem(&given))
                    .await
                {
                    Some(p) => Err(format!(
                        "{owner}: script: `schema` is not a valid JSON Schema ({p}); fix `schema` in the file"
                    )),
                    None => Ok((description, schema)),
                }
            }
            Err(e) => Err(e),
        };
        let (description, schema, broken) = match defined {
            Ok((d, schema)) => (d, schema, None),
            Err(e) => {
                tracing::warn!("{e}");
                (
                    format!("{UNAVAILABLE}{e}"),
                    toolshelf_core::catalog::empty_object_schema(),
                    Some(e),
                )
            }
        };
        ScriptTool {
            pkg: runner.pkg(Some(SCRIPTS_SERVER), &s.name, &description, Some(&schema)),
            name: s.name,
            owner,
            source: s.text,
            description,
            schema,
            broken,
        }
    }

    /// The tools as catalog items of the `scripts` group: `{name, description, input_schema}`.
    pub fn items(&self) -> Vec<Value> {
        self.tools
            .iter()
            .map(|t| {
                json!({"name": t.name, "description": t.description,
                       "input_schema": Value::Object(t.schema.clone())})
            })
            .collect()
    }

    /// Runs `name` (its name in the group) with `params`: its value, or the error.
    pub async fn call(&self, name: &str, params: Value) -> Result<Value, String> {
        let Some(tool) = self.tools.iter().find(|t| t.name == name) else {
            return Err(format!("no script tool is named {name:?}"));
        };
        if let Some(e) = &tool.broken {
            return Err(e.clone());
        }
        self.runner
            .exec(
                Job::Run,
                &tool.owner,
                &tool.source,
                tool.pkg.clone(),
                params,
            )
            .await
    }
}

/// `text`, a failure's, cut to at most `limit` bytes (`[scripts] max_result_bytes`) at a
/// character boundary, ending with a note that says it was cut and how long it was: a failure
/// can quote a whole value (`fail("E" * 5000000)`, a `KeyError` quoting its key), and the model
/// reads it as it reads a result. The note is kept whole when `limit` is shorter than it.
pub fn cut_error(text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let note = format!(
        " [cut: the error is {} bytes, more than [scripts] max_result_bytes ({limit}) allows]",
        text.len()
    );
    let mut keep = limit.saturating_sub(note.len());
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    let mut out = text;
    out.truncate(keep);
    out.push_str(&note);
    out
}

/// A tool's value as the text of its result: a string as it is, anything else as JSON.
pub fn result_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Writes a tool the model defined to `[authoring] keep_dir` (default `CACHE/authored`; a relative
/// one is relative to `config_dir`, the configuration file's directory) as `SESSION/NAME.star`, a
/// script-tool file the operator can review and promote, and logs where (or why not). Keeping
/// serves the operator: a failure to write does not fail the definition.
pub fn keep_authored(
    config: &toolshelf_core::config::AuthoringConfig,
    config_dir: Option<&Path>,
    session: &str,
    tool: &Authored,
) {
    let name = tool.name();
    match write_authored(config, config_dir, session, tool) {
        Ok(Some(path)) => tracing::info!(
            session = %session, tool = %name,
            "model-authored tool kept in {} (promote it with [tools.{name}] script)",
            path.display()
        ),
        Ok(None) => {}
        Err(e) => tracing::warn!(session = %session, tool = %name, "{e}"),
    }
}

/// [`keep_authored`]'s write: the path written, `None` when `keep_dir` is `""`.
fn write_authored(
    config: &toolshelf_core::config::AuthoringConfig,
    config_dir: Option<&Path>,
    session: &str,
    tool: &Authored,
) -> Result<Option<PathBuf>, String> {
    let dir = match config.keep_dir.as_deref() {
        Some("") => return Ok(None),
        Some(d) => crate::files::expand_config_path(d, config_dir)?,
        None => crate::files::default_cache_dir()
            .map_err(|e| format!("no cache directory for [authoring] keep_dir: {e}"))?
            .join("authored"),
    };
    // Session keys hold any character; the directory name is readable and unique.
    let safe = |s: &str| -> String {
        let cleaned: String = name::sanitize(s).chars().take(80).collect();
        format!("{cleaned}-{:08x}", name::fnv1a64(s.as_bytes()) as u32)
    };
    let path = dir
        .join(safe(session))
        .join(format!("{}.star", tool.name()));
    let text = toolshelf_core::authoring::script_file(tool, &format!("session {session}"));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    crate::files::write_atomic(&path, text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt as _;

    /// A stand-in for the runner in a directory of its own: it reads the request, then waits
    /// until the file `release` there exists and answers `{"ok": "done"}`.
    fn fake_runner(test: &str) -> (PathBuf, PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("toolshelf-runner-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let release = dir.join("release");
        let runner = dir.join("runner.sh");
        std::fs::write(
            &runner,
            format!(
                "#!/bin/sh\ncat >/dev/null\nwhile [ ! -e '{}' ]; do sleep 0.02; done\necho '{{\"ok\": \"done\"}}'\n",
                release.display()
            ),
        )
        .expect("write the runner");
        std::fs::set_permissions(&runner, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        (runner, release)
    }

    /// The processes running `runner` now. A child the runner's shell forks (`cat`, `sleep`)
    /// shows the shell's command line until it execs, so a process whose parent runs `runner`
    /// too is not counted.
    fn live(runner: &Path) -> usize {
        let needle = runner.display().to_string();
        let running: BTreeMap<String, String> = std::fs::read_dir("/proc")
            .expect("/proc")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
            .filter(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                String::from_utf8_lossy(&cmdline).contains(&needle)
            })
            .map(|pid| {
                // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let ppid = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .unwrap_or_default()
                    .to_owned();
                (pid, ppid)
            })
            .collect();
        running
            .values()
            .filter(|ppid| !running.contains_key(*ppid))
            .count()
    }

    fn runner_of(path: &Path, scripts: &str) -> Runner {
        let config =
            Config::from_toml_str(&format!("[scripts]\n{scripts}"), "t.toml").expect("config");
        Runner::new(path.to_owned(), &config)
    }

    async fn call(runner: Runner) -> Result<Value, String> {
        runner
            .exec(
                Job::Run,
                "script tool \"t\"",
                "",
                BTreeMap::new(),
                Value::Null,
            )
            .await
    }

    async fn until(what: &str, done: impl Fn() -> bool) {
        for _ in 0..1000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{what}: not reached");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_beyond_max_concurrent_waits_for_a_runner_to_end() {
        let (path, release) = fake_runner("queue");
        let runner = runner_of(&path, "max_concurrent = 2\ntimeout_secs = 120");
        let first = tokio::spawn(call(runner.clone()));
        let second = tokio::spawn(call(runner.clone()));
        until("two runners", || live(&path) == 2).await;
        // The third call, polled once, is waiting for a slot, with no process of its own.
        let mut third = Box::pin(call(runner.clone()));
        assert!(
            (&mut third).now_or_never().is_none(),
            "the third call waits"
        );
        assert_eq!(live(&path), 2, "no third runner was started");
        std::fs::write(&release, "").expect("release");
        for answer in [
            first.await.expect("first"),
            second.await.expect("second"),
            third.await,
        ] {
            assert_eq!(answer, Ok(json!("done")));
        }
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_that_finds_no_free_runner_in_its_time_says_so() {
        let (path, _) = fake_runner("busy");
        let runner = runner_of(&path, "max_concurrent = 1\ntimeout_secs = 1");
        // The one slot is taken for longer than the call may wait.
        let _busy = runner.slots.acquire().await.expect("slot");
        let e = call(runner.clone()).await.expect_err("no runner came free");
        assert_eq!(
            e,
            "script tool \"t\": not run: every runner slot ([scripts] max_concurrent = 1) stayed busy with other calls for the whole time limit of 1 s ([scripts] timeout_secs); try again when fewer calls are running"
        );
        assert_eq!(live(&path), 0, "nothing ran");
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_time_limit_counts_the_wait_for_a_runner_and_says_so() {
        let (path, release) = fake_runner("wait-then-run");
        let runner = runner_of(&path, "max_concurrent = 1\ntimeout_secs = 4");
        let busy = runner.slots.clone().acquire_owned().await.expect("slot");
        let waiting = tokio::spawn(call(runner.clone()));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        drop(busy);
        // The run never ends: it is stopped when the call's time, wait included, is up.
        let e = waiting.await.expect("call").expect_err("stopped");
        assert!(
            e.starts_with("script tool \"t\": stopped: the time limit of 4 s ([scripts] timeout_secs) was reached, ")
                && e.ends_with(" s of it waiting for a free runner ([scripts] max_concurrent is 1)"),
            "{e}"
        );
        std::fs::write(&release, "").expect("release");
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    #[test]
    fn a_long_error_is_cut_saying_how_long_it_was() {
        assert_eq!(cut_error("short".into(), 100), "short");
        let cut = cut_error(format!("tool: failed: {}", "é".repeat(5000)), 200);
        assert!(cut.len() <= 200, "{}", cut.len());
        assert!(
            cut.starts_with("tool: failed: éé")
                && cut.ends_with(
                    " [cut: the error is 10014 bytes, more than [scripts] max_result_bytes (200) allows]"
                ),
            "{cut}"
        );
        // Shorter than the note: the note alone.
        assert!(cut_error("x".repeat(50), 10).starts_with(" [cut: the error is 50 bytes"));
    }
}
