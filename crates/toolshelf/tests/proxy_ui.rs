//! The proxy's dashboard in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`, installed by `.ci/run`) driven through ChromeDriver by
//! `fixtures/ui_driver.py`, against the real proxy after a scripted conversation. The pages are
//! checked for structure (element ids, chart bars, rows), the search playground for hits swapped
//! in by htmx, and a session timeline for a row that appears by itself when another request
//! goes through. Screenshots are taken of each page and checked to be real images.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::{ProxyProc, Scratch, Upstream, fixture};
use serde_json::{Value, json};

fn post(url: &str, body: &Value) -> Value {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys,urllib.request; r=urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), \
             headers={'content-type':'application/json','x-api-key':'k','anthropic-version':'2023-06-01'}); \
             print(urllib.request.urlopen(r, timeout=60).read().decode())",
            url,
            &body.to_string(),
        ])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON answer")
}

fn tools() -> Value {
    json!([
        {"name": "Read", "description": "Read a file from the local filesystem.",
         "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}},
        {"name": "mcp__fs__read_file", "description": "Read the complete contents of a file as text.",
         "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
        {"name": "mcp__git__git_status", "description": "Show the working tree status.",
         "input_schema": {"type": "object", "properties": {"repo_path": {"type": "string"}}, "required": ["repo_path"]}}
    ])
}

/// Whether `path` is a PNG of the browser's window size.
fn png_size(path: &str) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{path} is a PNG");
    let be = |i: usize| u32::from_be_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    (be(16), be(20))
}

#[test]
fn the_dashboard_shows_the_catalog_search_and_a_live_session_timeline_in_chromium() {
    for bin in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        assert!(
            std::path::Path::new(bin).exists(),
            "{bin} is missing: install Debian's chromium and chromium-driver (.ci/run does)"
        );
    }
    let s = Scratch::new("proxy-ui");
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [
            {"text": "Looking.", "tool_uses": [{"name": "tool_search", "input": {"queries": ["read file"]}}]},
            {"tool_uses": [{"name": "defer_execute",
                            "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "x"}}}]},
            {"text": "Read."},
            {"text": "Again."}
        ]}),
    );
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let url = format!("{}/v1/messages", proxy.url);
    let mut messages = vec![json!({"role": "user", "content": "read x"})];
    let body = |m: &Vec<Value>| json!({"model": "m", "max_tokens": 64, "system": "s", "tools": tools(), "messages": m});
    let a = post(&url, &body(&messages));
    let call = a["content"]
        .as_array()
        .and_then(|c| c.iter().find(|b| b["type"] == "tool_use"))
        .cloned()
        .expect("a call");
    messages.push(json!({"role": "assistant", "content": a["content"]}));
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call["id"], "content": "data"}]}));
    let b = post(&url, &body(&messages));
    messages.push(json!({"role": "assistant", "content": b["content"]}));
    let key = proxy.status()["recent_sessions"][0]["key"]
        .as_str()
        .expect("a session")
        .to_owned();

    let out = s.path("shots");
    std::fs::create_dir_all(&out).expect("shots dir");
    let mut driver = Command::new("python3")
        .args([
            fixture("ui_driver.py"),
            proxy.url.clone(),
            key.clone(),
            out.clone(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("ui_driver.py");
    let mut lines = BufReader::new(driver.stdout.take().expect("stdout")).lines();
    let ready: Value =
        serde_json::from_str(&lines.next().expect("ready line").expect("read")).expect("JSON");
    assert_eq!(ready["ready"], 2, "two requests in the timeline: {ready}");
    messages.push(json!({"role": "user", "content": "once more"}));
    post(&url, &body(&messages));
    writeln!(driver.stdin.take().expect("stdin"), "next").expect("signal the driver");
    let result: Value =
        serde_json::from_str(&lines.next().expect("result line").expect("read")).expect("JSON");
    assert!(driver.wait().expect("driver").success());

    let ov = &result["overview"];
    let ids: Vec<&str> = ov["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for id in ["sessions", "tokens-chart", "totals"] {
        assert!(ids.contains(&id), "overview has #{id}: {ids:?}");
    }
    assert_eq!(ov["actual_bars"], 2, "{ov}");
    assert_eq!(ov["resident_bars"], 2, "{ov}");
    assert_eq!(ov["session_links"], json!([key]));
    let hits = result["search"]["hits"]
        .as_array()
        .expect("hits swapped in");
    assert_eq!(hits[0], "mcp__fs__read_file", "{hits:?}");
    assert_eq!(
        result["search"]["stayed_on_page"], true,
        "htmx swapped the hits in place"
    );
    assert_eq!(
        result["session"]["rows_after"], 3,
        "the timeline grew by itself: {result}"
    );
    assert_eq!(
        result["session"]["prefix_cells"],
        json!(["first", "kept", "kept"])
    );
    for page in ["overview", "search", "session"] {
        let (w, h) = png_size(&format!("{out}/{page}.png"));
        assert!(w >= 1000 && h >= 700, "{page}.png is {w}×{h}");
    }
}
