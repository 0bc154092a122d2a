//! The client side: the pinned SDKs' interpreter, the client's catalog, the scripted model's
//! steps, specs for `fixtures/sdk_client.py`, and readers for its reports, the upstream's log and
//! the proxy's figures.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{ProxyProc, Scratch, fixture};

pub const ANTHROPIC_SDK_VERSION: &str = "2.14.0";
pub const OPENAI_SDK_VERSION: &str = "3.57.0";
/// A client run that has not finished by then is stuck (runs take seconds).
pub const RUN_DEADLINE: Duration = Duration::from_secs(300);
/// The tool the scripted model finds and calls.
pub const TARGET: &str = "mcp__weather__get_forecast";
/// What the client answers every tool call with.
pub const TOOL_RESULT: &str = "RESULT-forecast-sunny-7c1e";
/// The scripted model's answer once it has the result.
pub const FINAL_TEXT: &str = "Sunny in Paris for three days.";

/// The arguments the scripted model calls [`TARGET`] with.
pub fn target_params() -> Value {
    json!({"city": "Paris", "days": 3})
}

/// The interpreter of the virtual environment holding the pinned SDKs; panics with the fix when
/// it is missing.
pub fn venv_python() -> String {
    let prefix = std::env::var_os("TOOLSHELF_CLIENTS_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/toolshelf-clients")
        });
    let p = prefix.join("venv/bin/python");
    assert!(
        p.exists(),
        "{} is not installed: run `bash scripts/install-clients.sh` (or `bash scripts/test`, which runs it) first",
        p.display()
    );
    p.display().to_string()
}

/// An API the proxy rewrites, with the SDK call that speaks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Anthropic,
    Chat,
    Responses,
}

pub const APIS: [Api; 3] = [Api::Anthropic, Api::Chat, Api::Responses];

impl Api {
    /// The name `sdk_client.py` knows it by.
    pub fn name(self) -> &'static str {
        match self {
            Api::Anthropic => "anthropic",
            Api::Chat => "chat",
            Api::Responses => "responses",
        }
    }

    pub fn path(self) -> &'static str {
        match self {
            Api::Anthropic => "/v1/messages",
            Api::Chat => "/v1/chat/completions",
            Api::Responses => "/v1/responses",
        }
    }

    /// The key of the conversation in a request body.
    pub fn conversation_key(self) -> &'static str {
        match self {
            Api::Responses => "input",
            _ => "messages",
        }
    }

    /// The names of the tools in a request body.
    pub fn tool_names(self, body: &Value) -> Vec<String> {
        body["tools"]
            .as_array()
            .expect("a tools array")
            .iter()
            .filter_map(|t| match self {
                Api::Chat => t["function"]["name"].as_str(),
                _ => t["name"].as_str(),
            })
            .map(str::to_owned)
            .collect()
    }

    /// `tool_search`'s description in a request body.
    pub fn search_description(self, body: &Value) -> String {
        let tool = body["tools"]
            .as_array()
            .expect("a tools array")
            .iter()
            .find(|t| match self {
                Api::Chat => t["function"]["name"] == "tool_search",
                _ => t["name"] == "tool_search",
            })
            .unwrap_or_else(|| panic!("no tool_search in {}", body["tools"]));
        let d = match self {
            Api::Chat => &tool["function"]["description"],
            _ => &tool["description"],
        };
        d.as_str().unwrap_or_default().to_owned()
    }

    /// The tool calls in a conversation, as (id, name, input).
    pub fn calls(self, conversation: &[Value]) -> Vec<(String, String, Value)> {
        let mut out = Vec::new();
        for e in conversation {
            match self {
                Api::Anthropic => {
                    for b in e["content"].as_array().into_iter().flatten() {
                        if b["type"] == "tool_use" {
                            out.push((id(&b["id"]), id(&b["name"]), b["input"].clone()));
                        }
                    }
                }
                Api::Chat => {
                    for tc in e["tool_calls"].as_array().into_iter().flatten() {
                        out.push((
                            id(&tc["id"]),
                            id(&tc["function"]["name"]),
                            arguments(&tc["function"]["arguments"]),
                        ));
                    }
                }
                Api::Responses => {
                    if e["type"] == "function_call" {
                        out.push((
                            id(&e["call_id"]),
                            id(&e["name"]),
                            arguments(&e["arguments"]),
                        ));
                    }
                }
            }
        }
        out
    }
}

pub fn id(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

pub fn arguments(v: &Value) -> Value {
    serde_json::from_str(v.as_str().unwrap_or("{}"))
        .unwrap_or_else(|e| panic!("arguments {v} are not JSON: {e}"))
}

pub fn tool(name: &str, description: &str, props: Value, required: &[&str]) -> Value {
    json!({"name": name, "description": description,
           "input_schema": {"type": "object", "properties": props, "required": required}})
}

/// The client's catalog: built-ins and tools of five MCP servers, `mcp__SERVER__TOOL` named.
pub fn catalog() -> Value {
    let s = json!({"type": "string"});
    json!([
        tool(
            "Read",
            "Read a file from the local filesystem",
            json!({"path": s}),
            &["path"]
        ),
        tool(
            "Write",
            "Write a file to the local filesystem",
            json!({"path": s, "content": s}),
            &["path", "content"]
        ),
        tool(
            "Bash",
            "Run a shell command",
            json!({"command": s}),
            &["command"]
        ),
        tool(
            "WebFetch",
            "Fetch a web page and return its text",
            json!({"url": s}),
            &["url"]
        ),
        tool(
            TARGET,
            "Weather forecast for a city, day by day",
            json!({"city": s, "days": {"type": "integer", "minimum": 1}}),
            &["city"]
        ),
        tool(
            "mcp__weather__get_alerts",
            "Severe weather alerts for a region",
            json!({"region": s}),
            &["region"]
        ),
        tool(
            "mcp__github__create_issue",
            "Open an issue in a GitHub repository",
            json!({"repo": s, "title": s, "body": s}),
            &["repo", "title"]
        ),
        tool(
            "mcp__github__list_pull_requests",
            "List the pull requests of a GitHub repository",
            json!({"repo": s, "state": s}),
            &["repo"]
        ),
        tool(
            "mcp__slack__post_message",
            "Post a message to a Slack channel",
            json!({"channel": s, "text": s}),
            &["channel", "text"]
        ),
        tool(
            "mcp__slack__list_channels",
            "List the Slack channels of the workspace",
            json!({}),
            &[]
        ),
        tool(
            "mcp__postgres__query",
            "Run a read-only SQL query on the database",
            json!({"sql": s}),
            &["sql"]
        ),
        tool(
            "mcp__calendar__create_event",
            "Create a calendar event",
            json!({"title": s, "start": s, "end": s}),
            &["title", "start"]
        ),
    ])
}

pub fn search_step() -> Value {
    json!({"text": "Let me find a forecast tool.",
           "tool_uses": [{"name": "tool_search", "input": {"queries": ["weather forecast"]}}]})
}

pub fn execute_step() -> Value {
    json!({"tool_uses": [{"name": "defer_execute",
                          "input": {"tool_name": TARGET, "params": target_params()}}]})
}

pub fn answer_step() -> Value {
    json!({"text": FINAL_TEXT})
}

/// A spec for `sdk_client.py`: `api`, streamed or not, against `proxy`, with `prompt` (the
/// first user message, which also tells the proxy's sessions apart) and `extra` fields.
pub fn spec(api: Api, stream: bool, proxy: &ProxyProc, prompt: &str, extra: Value) -> Value {
    let mut s = json!({"api": api.name(), "stream": stream, "base_url": proxy.url,
                       "tools": catalog(), "prompt": prompt, "tool_result": TOOL_RESULT,
                       "timeout": 60});
    if let (Value::Object(s), Value::Object(extra)) = (&mut s, extra) {
        s.extend(extra);
    }
    s
}

/// Runs `sdk_client.py` on `spec` (an object or a list of them) and returns its report; fails
/// when it cannot report or does not finish by [`RUN_DEADLINE`].
pub fn run_client(s: &Scratch, tag: &str, spec: &Value) -> Value {
    let python = venv_python();
    let spec_path = s.write(&format!("{tag}.spec.json"), &spec.to_string());
    let out_path = s.path(&format!("{tag}.out.json"));
    let err_path = s.path(&format!("{tag}.err"));
    let mut child = Command::new(&python)
        .arg(fixture("sdk_client.py"))
        .arg(format!("@{spec_path}"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    let deadline = Instant::now() + RUN_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for sdk_client.py") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "sdk_client.py did not finish within {RUN_DEADLINE:?}; stderr:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = std::fs::read_to_string(&out_path).unwrap_or_default();
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(
        status.success(),
        "sdk_client.py failed ({status}); stderr:\n{err}"
    );
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("sdk_client.py printed no JSON report ({e}); stderr:\n{err}"))
}

/// The proxy's totals once `rounds` upstream rounds are booked (a streamed request is booked just
/// after its last bytes are sent, so the client may have read them first).
pub fn totals_after(proxy: &ProxyProc, rounds: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let totals = proxy.status()["totals"].clone();
        if totals["rounds"].as_u64() >= Some(rounds) {
            return totals;
        }
        assert!(
            Instant::now() < deadline,
            "the proxy never booked {rounds} rounds: {totals}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The requests of a report.
pub fn requests(report: &Value) -> &Vec<Value> {
    report["requests"].as_array().expect("a requests array")
}

/// The only request of a report that sent one.
pub fn only_request(report: &Value) -> &Value {
    let r = requests(report);
    assert_eq!(r.len(), 1, "one request: {report:#}");
    &r[0]
}

/// The bodies of the upstream's main requests, checked to be the compact serialization that
/// re-serializing yields: comparing re-serialized sections is then comparing raw bytes.
pub fn raw_bodies(turns: &[Value]) -> Vec<Value> {
    turns
        .iter()
        .map(|t| {
            let raw = t["raw"].as_str().expect("the upstream logs the raw body");
            let v: Value = serde_json::from_str(raw).expect("the upstream received JSON");
            assert_eq!(
                v.to_string(),
                raw,
                "the proxy sends compact JSON, so sections re-serialize to their raw bytes"
            );
            v
        })
        .collect()
}
