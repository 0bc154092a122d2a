//! Real agent harnesses (Claude Code, Qwen Code) run non-interactively against a model API on
//! loopback, and readers for what the scripted upstream recorded of them.
//!
//! The harnesses are installed by `scripts/install-clients.sh` (pinned, from npm, into
//! `~/.cache/toolshelf-clients` or `$TOOLSHELF_CLIENTS_PREFIX`); when one is missing the test
//! fails and says how to install it, it never skips. A run has a generous deadline and leaves no
//! process behind.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Scratch;

pub const CLAUDE_CODE_VERSION: &str = "2.1.328";
pub const QWEN_CODE_VERSION: &str = "0.24.4";
/// A run that has not finished by then is stuck (they take seconds).
pub const RUN_DEADLINE: Duration = Duration::from_secs(300);

/// `$VAR`, else `~/.cache/DEFAULT`.
pub fn home_cache(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME"))
            .join(".cache")
            .join(default)
    })
}

/// Path of an installed client; panics with the fix when it is missing.
pub fn client_bin(name: &str) -> String {
    let p = home_cache("TOOLSHELF_CLIENTS_PREFIX", "toolshelf-clients")
        .join("npm/node_modules/.bin")
        .join(name);
    assert!(
        p.exists(),
        "{} is not installed: run `bash scripts/install-clients.sh` (or `bash scripts/test`, which runs it) first",
        p.display()
    );
    p.display().to_string()
}

/// What a client run left behind.
pub struct Run {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `program args` in the scratch directory with only `env` (plus PATH and LANG) set, in a
/// process group of its own, stdout and stderr to files. Waits for it with a generous deadline
/// (then kills the group and fails). Then waits until nothing it started is left: no process in
/// its group and none whose command line names the scratch directory, but the processes of
/// `keep` (the upstream, a proxy: they were started before the client and outlive it).
pub fn run_client(
    s: &Scratch,
    keep: &[u32],
    program: &str,
    args: &[&str],
    env: &[(&str, String)],
) -> Run {
    let stdout_path = s.path("client.stdout");
    let stderr_path = s.path("client.stderr");
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(&s.0)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").expect("PATH"))
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    let group = child.id();
    let deadline = Instant::now() + RUN_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the client") {
            break status;
        }
        if Instant::now() > deadline {
            kill_group(group);
            let _ = child.wait();
            panic!(
                "{program} did not finish within {RUN_DEADLINE:?}; stderr:\n{}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let run = Run {
        status,
        stdout: read(&stdout_path),
        stderr: read(&stderr_path),
    };
    let scratch = s.0.display().to_string();
    let leftovers = || {
        live_processes()
            .into_iter()
            .filter(|p| !keep.contains(&p.pid))
            .filter(|p| p.group == group || p.cmdline.contains(&scratch))
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = leftovers();
        if left.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            kill_group(group);
            for p in &left {
                let _ = Command::new("kill")
                    .args(["-9", &p.pid.to_string()])
                    .status();
            }
            panic!("processes outlived {program} (killed now): {left:#?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    run
}

fn kill_group(group: u32) {
    let _ = Command::new("kill")
        .args(["-9", "--", &format!("-{group}")])
        .status();
}

#[derive(Debug)]
pub struct Process {
    pub pid: u32,
    pub group: u32,
    pub cmdline: String,
}

/// Every live process but this one (zombies excluded: they are gone for every purpose but their
/// parent's wait).
pub fn live_processes() -> Vec<Process> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            if fields.first() == Some(&"Z") {
                return None;
            }
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            Some(Process {
                pid,
                group: fields.get(2)?.parse().ok()?,
                cmdline: String::from_utf8_lossy(&cmdline).replace('\0', " "),
            })
        })
        .collect()
}

// --- Claude Code --------------------------------------------------------------------------------

/// `claude -p PROMPT ARGS... --output-format json` in the scratch directory, with `HOME` and
/// `CLAUDE_CONFIG_DIR` inside it, telemetry, error reporting and updates off, and `env` (which
/// names the API: `ANTHROPIC_BASE_URL`); fails unless it exits with success.
pub fn claude_code(
    s: &Scratch,
    keep: &[u32],
    prompt: &str,
    args: &[&str],
    env: &[(&str, String)],
) -> Run {
    let claude = client_bin("claude");
    let version = Command::new(&claude)
        .arg("--version")
        .output()
        .expect("claude --version");
    assert!(
        String::from_utf8_lossy(&version.stdout).starts_with(CLAUDE_CODE_VERSION),
        "claude --version: {}",
        String::from_utf8_lossy(&version.stdout)
    );
    std::fs::create_dir_all(s.path("home")).expect("home dir");
    let mut all_args = vec!["-p", prompt];
    all_args.extend_from_slice(args);
    all_args.extend_from_slice(&["--output-format", "json"]);
    let mut all_env = vec![
        ("HOME", s.path("home")),
        ("CLAUDE_CONFIG_DIR", s.path("claude-config")),
        ("ANTHROPIC_API_KEY", "x".to_owned()),
        ("DISABLE_TELEMETRY", "1".to_owned()),
        ("DISABLE_ERROR_REPORTING", "1".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
    ];
    all_env.extend(env.iter().cloned());
    let run = run_client(s, keep, &claude, &all_args, &all_env);
    assert!(
        run.status.success(),
        "claude exited with {}; stderr:\n{}\nstdout:\n{}",
        run.status,
        run.stderr,
        run.stdout
    );
    run
}

/// `claude -p ... --output-format json`: its one result object.
pub fn claude_result(run: &Run) -> Value {
    serde_json::from_str(run.stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "claude's output is not one JSON object ({e}): {}",
            run.stdout
        )
    })
}

// --- Qwen Code ----------------------------------------------------------------------------------

/// `qwen PROMPT --output-format json` in the scratch directory with `HOME` inside it and
/// `~/.qwen/settings.json` holding `extra_settings` over the OpenAI-compatible API settings,
/// with `env` (which names the API: `OPENAI_BASE_URL`); fails unless it exits with success and
/// reports its version. Returns the run and its init event.
pub fn qwen_code(
    s: &Scratch,
    keep: &[u32],
    prompt: &str,
    extra_settings: Value,
    env: &[(&str, String)],
) -> (Run, Value) {
    let qwen = client_bin("qwen");
    let mut settings = json!({
        "security": {"auth": {"selectedType": "openai"}},
        "model": {"name": "scripted-model"},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true}
    });
    if let (Value::Object(base), Value::Object(extra)) = (&mut settings, extra_settings) {
        base.extend(extra);
    }
    s.write("home/.qwen/settings.json", &settings.to_string());
    let mut all_env = vec![
        ("HOME", s.path("home")),
        ("OPENAI_API_KEY", "x".to_owned()),
        ("OPENAI_MODEL", "scripted-model".to_owned()),
    ];
    all_env.extend(env.iter().cloned());
    let run = run_client(
        s,
        keep,
        &qwen,
        &[prompt, "--output-format", "json"],
        &all_env,
    );
    assert!(
        run.status.success(),
        "qwen exited with {}; stderr:\n{}\nstdout:\n{}",
        run.status,
        run.stderr,
        run.stdout
    );
    let events: Value = serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("qwen's output is not JSON ({e}): {}", run.stdout));
    let init = events
        .as_array()
        .and_then(|e| e.iter().find(|e| e["subtype"] == "init"))
        .cloned()
        .unwrap_or_else(|| panic!("no init event: {events}"));
    assert_eq!(init["qwen_code_version"], QWEN_CODE_VERSION, "{init}");
    (run, init)
}

/// Qwen Code's final `result` event.
pub fn qwen_result(run: &Run) -> Value {
    let events: Value = serde_json::from_str(run.stdout.trim()).expect("qwen's JSON output");
    events
        .as_array()
        .and_then(|e| e.iter().rev().find(|e| e["type"] == "result"))
        .cloned()
        .unwrap_or_else(|| panic!("no result event: {events}"))
}

// --- Reading the upstream's record --------------------------------------------------------------

/// The tool named `name` in an Anthropic or OpenAI `tools` array, flattened to
/// `{"name", "description", "defer_loading"?...}`.
pub fn find_tool(request: &Value, name: &str) -> Option<Value> {
    request["body"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| match t.get("function") {
            Some(f) => f.clone(),
            None => t.clone(),
        })
        .find(|t| t["name"] == name)
}

pub fn tool_names(request: &Value) -> Vec<String> {
    request["tool_names"]
        .as_array()
        .expect("tool_names")
        .iter()
        .map(|n| n.as_str().expect("name").to_owned())
        .collect()
}

/// The tool result the client sent back for the call with this id, as text.
pub fn result_of(turns: &[Value], id: &str) -> String {
    turns
        .iter()
        .flat_map(|t| t["tool_results"].as_array().expect("tool_results").clone())
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no tool result for {id} in {turns:#?}"))["content"]
        .as_str()
        .expect("content")
        .to_owned()
}

/// The id the upstream gave the call of `name` in the answer to step `step`.
pub fn call_id(answers: &[Value], step: u64, name: &str) -> String {
    let answer = answers
        .iter()
        .find(|a| a["step"] == step)
        .unwrap_or_else(|| panic!("step {step} was never played: {answers:#?}"));
    answer["tool_uses"]
        .as_array()
        .expect("tool_uses")
        .iter()
        .find(|u| u["name"] == name)
        .unwrap_or_else(|| panic!("step {step} did not call {name}: {answer}"))["id"]
        .as_str()
        .expect("id")
        .to_owned()
}
