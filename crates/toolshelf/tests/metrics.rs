//! `GET /metrics` of `toolshelf proxy` and of `toolshelf serve --http`: each scrape is read by the
//! real Prometheus Python client's text parser (pinned in `scripts/install-clients.sh`, in the
//! clients' virtual environment), and the counters are checked against a scripted conversation
//! (the proxy, in front of the scripted model API) and against MCP calls (the gateway, in front
//! of `fixtures/named_server.py`).

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use common::harness::home_cache;
use common::*;
use serde_json::{Value, json};

const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    out[family.name] = {"type": family.type, "help": family.documentation,
                        "samples": [[s.name, s.labels, s.value] for s in family.samples]}
print(json.dumps(out))
"#;

/// A scrape as the Prometheus Python client parses it: family name to type, help and samples.
struct Scrape(BTreeMap<String, Value>);

impl Scrape {
    /// GETs `url` and parses the answer; fails on anything the parser refuses.
    fn of(url: &str) -> Self {
        let out = Command::new("curl")
            .args(["-sS", "-D", "-", url])
            .output()
            .expect("curl");
        let raw = String::from_utf8_lossy(&out.stdout).into_owned();
        let (head, text) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
        assert!(head.starts_with("HTTP/1.1 200"), "{raw}");
        assert!(
            head.to_lowercase()
                .contains("content-type: text/plain; version=0.0.4"),
            "{head}"
        );
        let python = home_cache("TOOLSHELF_CLIENTS_PREFIX", "toolshelf-clients")
            .join("venv/bin/python")
            .display()
            .to_string();
        let mut child = Command::new(&python)
            .args(["-c", PARSE])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {python} ({e}): run `bash scripts/install-clients.sh` (or `bash scripts/test`, which runs it) first"
                )
            });
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write the scrape");
        let parsed = child.wait_with_output().expect("the parser");
        assert!(
            parsed.status.success(),
            "prometheus_client refused the scrape ({}; is prometheus_client installed? \
             `bash scripts/install-clients.sh`):\n{text}",
            String::from_utf8_lossy(&parsed.stderr)
        );
        let v: BTreeMap<String, Value> =
            serde_json::from_slice(&parsed.stdout).expect("the parser's JSON");
        Self(v)
    }

    fn family(&self, name: &str) -> &Value {
        self.0
            .get(name)
            .unwrap_or_else(|| panic!("no family {name} in {:#?}", self.0.keys()))
    }

    /// The value of sample `name` with exactly these labels; `None` when absent.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<&str, &str> = labels.iter().copied().collect();
        self.0.values().find_map(|f| {
            f["samples"].as_array()?.iter().find_map(|s| {
                let got: BTreeMap<&str, &str> = s[1]
                    .as_object()?
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default()))
                    .collect();
                (s[0] == name && got == want).then(|| s[2].as_f64())?
            })
        })
    }

    /// [`Self::get`], 0 when absent (the gateway writes a counter once it moves).
    fn n(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or(0.0)
    }
}

fn post(url: &str, body: &Value) -> (u16, Value) {
    let out = Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}", "-X", "POST", url])
        .args(["-H", "content-type: application/json"])
        .args(["-H", "x-api-key: k", "-H", "anthropic-version: 2023-06-01"])
        .args(["--data-binary", &body.to_string()])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').expect("a status");
    (
        status.trim().parse().expect("status"),
        serde_json::from_str(body).unwrap_or(Value::String(body.to_owned())),
    )
}

fn anthropic_tool(name: &str, props: Value, required: &[&str]) -> Value {
    json!({"name": name, "description": format!("The {name} tool."),
           "input_schema": {"type": "object", "properties": props, "required": required}})
}

/// Three tools the conversation uses, and enough others that deferring saves tokens.
fn client_tools() -> Vec<Value> {
    let filler = (0..20).map(|i| {
        json!({"name": format!("mcp__docs__page_{i}"),
               "description": format!("Fetch page {i} of the documentation and return it as markdown, with its links resolved and its code blocks kept verbatim."),
               "input_schema": {"type": "object", "properties": {
                   "section": {"type": "string", "description": "The section to fetch."},
                   "format": {"type": "string", "enum": ["markdown", "text", "html"]}},
                   "required": ["section"]}})
    });
    let mut tools = vec![
        anthropic_tool(
            "Read",
            json!({"file_path": {"type": "string"}}),
            &["file_path"],
        ),
        anthropic_tool(
            "mcp__fs__write_file",
            json!({"path": {"type": "string"}, "content": {"type": "string"}}),
            &["path", "content"],
        ),
        anthropic_tool(
            "mcp__git__git_status",
            json!({"repo_path": {"type": "string"}}),
            &["repo_path"],
        ),
    ];
    tools.extend(filler);
    tools
}

#[test]
fn the_proxy_metrics_parse_and_count_a_scripted_conversation() {
    let s = Scratch::new("metrics-proxy");
    let script = json!({"steps": [
        // Not loaded: refused (with the schema, which loads it).
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__write_file", "params": {"path": "a", "content": "x"}}}],
         "cache_read": 100},
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["mcp__git__git_status"]}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__write_file", "params": {"path": "a", "content": "x"}}}]},
        {"text": "Written.", "cache_read": 50}
    ]});
    let upstream = Upstream::start(&s, &script);
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let metrics = format!("{}/metrics", proxy.url);
    let before = Scrape::of(&metrics);
    // Every counter is written from the start, at 0.
    assert_eq!(before.get("toolshelf_proxy_requests_total", &[]), Some(0.0));

    let url = format!("{}/v1/messages", proxy.url);
    let mut messages = vec![json!({"role": "user", "content": "write a"})];
    let body = |m: &Vec<Value>| {
        json!({"model": "m", "max_tokens": 64, "system": "You help.", "tools": client_tools(),
               "messages": m})
    };
    let (status, answer) = post(&url, &body(&messages));
    assert_eq!(status, 200, "{answer}");
    let call = &answer["content"][0];
    assert_eq!(call["name"], "mcp__fs__write_file", "{answer}");
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call["id"], "content": "ok"}]}));
    let (status, answer) = post(&url, &body(&messages));
    assert_eq!(
        (status, &answer["content"][0]["text"]),
        (200, &json!("Written."))
    );
    let (status, _) = post(&format!("{}/v1/unknown", proxy.url), &json!({}));
    assert_eq!(status, 200, "passed through");
    upstream.played(4);

    let m = Scrape::of(&metrics);
    let totals = proxy.status()["totals"].clone();
    let total = |k: &str| totals[k].as_f64().unwrap_or(-1.0);
    for (name, want) in [
        ("toolshelf_proxy_requests_total", 3.0),
        ("toolshelf_proxy_requests_rewritten_total", 2.0),
        ("toolshelf_proxy_requests_passed_total", 1.0),
        ("toolshelf_proxy_request_errors_total", 0.0),
        ("toolshelf_proxy_upstream_rounds_total", 4.0),
        ("toolshelf_proxy_prefix_breaks_total", 0.0),
        ("toolshelf_proxy_store_errors_total", 0.0),
    ] {
        assert_eq!(m.n(name, &[]), want, "{name}");
    }
    // The counters mirror the status figures.
    assert_eq!(
        m.n("toolshelf_proxy_requests_total", &[]),
        total("requests")
    );
    assert_eq!(
        m.n("toolshelf_proxy_upstream_rounds_total", &[]),
        total("rounds")
    );
    let saved = m.n("toolshelf_proxy_tool_tokens_saved_total", &[]);
    assert!(
        saved > 0.0 && saved == total("tokens_saved"),
        "{saved} {totals}"
    );
    assert_eq!(
        m.n(
            "toolshelf_proxy_upstream_tokens_total",
            &[("kind", "cache_read")]
        ),
        150.0,
        "cache reads the upstream reported"
    );
    assert_eq!(
        m.n(
            "toolshelf_proxy_upstream_tokens_total",
            &[("kind", "input")]
        ),
        totals["tokens"]["input"].as_f64().unwrap_or(-1.0)
    );
    assert_eq!(
        m.n("toolshelf_proxy_calls_total", &[("outcome", "refused")]),
        1.0
    );
    assert_eq!(
        m.n("toolshelf_proxy_calls_total", &[("outcome", "forwarded")]),
        1.0
    );
    assert_eq!(
        m.n(
            "toolshelf_proxy_refused_calls_total",
            &[("reason", "not_loaded")]
        ),
        1.0
    );
    assert_eq!(
        m.n("toolshelf_proxy_searches_total", &[("outcome", "ok")]),
        1.0
    );
    // Histograms: one search timed; per request, the rounds the proxy answered itself (2, 0).
    assert_eq!(
        m.family("toolshelf_proxy_search_duration_seconds")["type"],
        "histogram"
    );
    assert_eq!(
        m.n("toolshelf_proxy_search_duration_seconds_count", &[]),
        1.0
    );
    assert_eq!(
        m.n(
            "toolshelf_proxy_search_duration_seconds_bucket",
            &[("le", "+Inf")]
        ),
        1.0
    );
    assert_eq!(
        m.family("toolshelf_proxy_search_rounds")["type"],
        "histogram"
    );
    assert_eq!(m.n("toolshelf_proxy_search_rounds_count", &[]), 2.0);
    assert_eq!(m.n("toolshelf_proxy_search_rounds_sum", &[]), 2.0);
    assert_eq!(
        m.n("toolshelf_proxy_search_rounds_bucket", &[("le", "0")]),
        1.0
    );
    assert_eq!(
        m.n("toolshelf_proxy_search_rounds_bucket", &[("le", "2")]),
        2.0
    );
    assert_eq!(m.family("toolshelf_proxy_requests")["type"], "counter");
    assert!(
        m.family("toolshelf_proxy_requests")["help"]
            .as_str()
            .is_some_and(|h| h.starts_with("Client requests")),
        "described"
    );
}

#[test]
fn the_proxy_counts_store_errors_when_redis_is_not_there() {
    let s = Scratch::new("metrics-store");
    let upstream = Upstream::start(&s, &json!({"steps": [{"text": "fine"}]}));
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port")
        .port();
    let config = format!("[store]\nurl = \"redis://127.0.0.1:{port}\"\ntimeout_ms = 200\n");
    let proxy = ProxyProc::start(&s, &upstream.url(), &config, &[]);
    let body = json!({"model": "m", "max_tokens": 64, "tools": client_tools(),
                      "messages": [{"role": "user", "content": "hi"}]});
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body);
    assert_eq!(status, 200, "the request works without its store: {answer}");
    let m = Scrape::of(&format!("{}/metrics", proxy.url));
    let errors = m.n("toolshelf_proxy_store_errors_total", &[]);
    assert!(errors >= 1.0, "{errors}");
    assert_eq!(
        errors,
        proxy.status()["totals"]["store_errors"]
            .as_f64()
            .unwrap_or(-1.0)
    );
    assert!(
        proxy.log().contains("serving anyway"),
        "the start says Redis does not answer: {}",
        proxy.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_metrics_parse_and_count_calls_refusals_searches_and_server_states() {
    let s = Scratch::new("metrics-gateway");
    let echo = tool(
        "echo",
        "Echo a text.",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    );
    let config = format!(
        "{}{}{}",
        named_server("good", &json!([echo]), ""),
        // Fails at once, and is not tried again while the test runs.
        "[servers.bad]\ncommand = \"false\"\nrestart_delay_secs = 3600\n",
        files_sections(&s)
    );
    let cfg = s.write("toolshelf.toml", &config);
    let (mut gateway, url) = http_gateway(&cfg);
    let metrics = url.replace("/mcp", "/metrics");
    let client = http_client(&url, TestClient::default()).await;
    wait_for("good ready and bad failed", || async {
        let st = status(&client).await;
        let state = |name: &str| {
            st["servers"]
                .as_array()
                .and_then(|a| a.iter().find(|x| x["name"] == name))
                .map(|x| x["state"].clone())
        };
        state("good") == Some(json!("ready")) && state("bad") == Some(json!("failed"))
    })
    .await;
    ok(&search(&client, json!({"tool_names": ["mcp__good__echo"]})).await);
    ok(&exec(&client, "mcp__good__echo", json!({"text": "hi"})).await);
    err(&exec(&client, "mcp__good__echo", json!({})).await);
    err(&exec(&client, "mcp__good__nope", json!({})).await);
    let m = tokio::task::spawn_blocking(move || Scrape::of(&metrics))
        .await
        .expect("scrape");
    assert_eq!(
        m.n("toolshelf_gateway_calls_total", &[("outcome", "ok")]),
        1.0
    );
    assert_eq!(
        m.n("toolshelf_gateway_calls_total", &[("outcome", "refused")]),
        2.0
    );
    assert_eq!(
        m.n(
            "toolshelf_gateway_refused_calls_total",
            &[("reason", "invalid")]
        ),
        1.0
    );
    assert_eq!(
        m.n(
            "toolshelf_gateway_refused_calls_total",
            &[("reason", "unknown")]
        ),
        1.0
    );
    assert_eq!(
        m.n("toolshelf_gateway_searches_total", &[("outcome", "ok")]),
        1.0
    );
    assert_eq!(
        m.family("toolshelf_gateway_search_duration_seconds")["type"],
        "histogram"
    );
    assert_eq!(
        m.n("toolshelf_gateway_search_duration_seconds_count", &[]),
        1.0
    );
    assert_eq!(m.family("toolshelf_gateway_server_state")["type"], "gauge");
    for (server, state, want) in [
        ("good", "ready", 1.0),
        ("good", "failed", 0.0),
        ("bad", "failed", 1.0),
        ("bad", "ready", 0.0),
    ] {
        assert_eq!(
            m.get(
                "toolshelf_gateway_server_state",
                &[("server", server), ("state", state)]
            ),
            Some(want),
            "{server} {state}"
        );
    }
    assert!(
        m.n(
            "toolshelf_gateway_server_failures_total",
            &[("server", "bad")]
        ) >= 1.0,
        "the failed start is counted"
    );
    client.cancel().await.expect("close");
    let _ = gateway.kill();
    let _ = gateway.wait();
}
