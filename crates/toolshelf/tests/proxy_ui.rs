//! The proxy's dashboard in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`, installed by `.ci/run`) driven through ChromeDriver by
//! `fixtures/ui_driver.py`, against the real proxy after a scripted conversation. The pages are
//! checked for structure (element ids, chart bars, rows), the search playground for hits swapped
//! in by htmx, and a session timeline for a row that appears by itself when another request
//! goes through. Screenshots are taken of each page and checked to be real images.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::{HEADERS, ProxyProc, Scratch, Upstream, fixture};
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
            {"text": "Again."},
            {"text": "Once more."}
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
    let page = session_page(&proxy, &key);

    let out = s.path("shots");
    std::fs::create_dir_all(&out).expect("shots dir");
    let mut driver = Command::new("python3")
        .args([
            fixture("ui_driver.py"),
            proxy.url.clone(),
            page,
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
    let mut stdin = driver.stdin.take().expect("stdin");
    writeln!(stdin, "next").expect("signal the driver");
    // The overview, left open, shows a later request by itself.
    let ready: Value =
        serde_json::from_str(&lines.next().expect("ready line").expect("read")).expect("JSON");
    assert_eq!(
        ready["overview_ready"], "3",
        "three requests so far: {ready}"
    );
    messages.push(json!({"role": "user", "content": "and again"}));
    post(&url, &body(&messages));
    writeln!(stdin, "next").expect("signal the driver");
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
    assert_eq!(
        (
            &result["refresh"]["after"],
            &result["refresh"]["stayed_on_page"]
        ),
        (&json!("4"), &json!(true)),
        "the overview's figures refresh in place: {result}"
    );
    for page in ["overview", "search", "session"] {
        let (w, h) = png_size(&format!("{out}/{page}.png"));
        assert!(w >= 1000 && h >= 700, "{page}.png is {w}×{h}");
    }
    // The browser's visits reached nothing upstream (no /favicon.ico with the client's
    // credentials) and counted as no client request: the three above only.
    let paths = upstream_paths(&upstream);
    assert!(
        paths.iter().all(|p| p.ends_with("/v1/messages")),
        "{paths:?}"
    );
    assert_eq!(proxy.status()["totals"]["requests"], 4);
}

/// The paths of every request the upstream received.
fn upstream_paths(upstream: &Upstream) -> Vec<String> {
    upstream
        .records()
        .iter()
        .filter(|r| r["kind"] == "request")
        .filter_map(|r| r["path"].as_str().map(str::to_owned))
        .collect()
}

/// `GET url`: the status and the body.
fn get(url: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}", url])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').expect("a status line");
    (status.trim().parse().expect("status"), body.to_owned())
}

/// One Messages request in session `key` (any UTF-8: urllib sends a header's characters as
/// Latin-1 bytes, so each byte goes as the character of its value), with `tools` and `text`.
fn send(proxy: &ProxyProc, key: &str, tools: &Value, text: &str) -> Value {
    let latin1: String = key.bytes().map(char::from).collect();
    let mut headers = HEADERS.to_vec();
    headers.push(("x-toolshelf-session", &latin1));
    let body = json!({"model": "m", "max_tokens": 64, "tools": tools,
                      "messages": [{"role": "user", "content": text}]});
    let (status, answer) = common::post(&format!("{}/v1/messages", proxy.url), &body, &headers);
    assert_eq!(status, 200, "{answer}\nproxy log:\n{}", proxy.log());
    answer
}

/// What the overview's link to the session shown as `key` (plain text) names its page by:
/// `/ui/sessions/{this}`.
fn session_page(proxy: &ProxyProc, key: &str) -> String {
    let (status, overview) = get(&format!("{}/ui", proxy.url));
    assert_eq!(status, 200, "{overview}");
    overview
        .split("<a href=\"/ui/sessions/")
        .skip(1)
        .find_map(|r| {
            let (page, text) = r.split_once("\">")?;
            text.starts_with(&format!("{key}</a>"))
                .then(|| page.to_owned())
        })
        .unwrap_or_else(|| panic!("the overview links {key}: {overview}"))
}

/// The rows of the timeline fragment of the session page `page` (as [`session_page`] gives
/// it), each as its cells' text.
fn timeline_rows(proxy: &ProxyProc, page: &str) -> Vec<Vec<String>> {
    let (status, html) = get(&format!("{}/ui/sessions/{page}/timeline", proxy.url));
    assert_eq!(status, 200, "{html}");
    html.split("<tr class=\"turn\">")
        .skip(1)
        .map(|row| {
            row.split("</tr>")
                .next()
                .unwrap_or_default()
                .split("<td")
                .skip(1)
                .map(|cell| {
                    let cell = cell.split_once('>').map_or("", |(_, c)| c);
                    cell.split("</td>").next().unwrap_or_default().to_owned()
                })
                .collect()
        })
        .collect()
}

/// Keys the dashboard once showed alike, so that it listed them as one session and merged their
/// timelines: a key holding U+202E and one holding the text of its escape; a 5000-character key
/// and a 61-character one spelling its cut form. Four sessions, each with its row and its page.
#[test]
fn keys_shown_alike_are_still_four_sessions_in_the_status_and_the_dashboard() {
    let s = Scratch::new("proxy-ui-alike");
    let upstream = Upstream::start(&s, &json!({"steps": []}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let long = "Q".repeat(5000);
    send(&proxy, "\u{202e}RTL-override-key\u{2066}", &tools(), "one");
    send(&proxy, r"\u{202e}RTL-override-key\u{2066}", &tools(), "two");
    send(&proxy, &long, &tools(), "three");
    let status = proxy.status();
    let shown = status["recent_sessions"]
        .as_array()
        .and_then(|s| {
            s.iter()
                .find_map(|s| s["key"].as_str().filter(|k| k.starts_with("h:QQ")))
        })
        .unwrap_or_else(|| panic!("the long key is listed: {status}"))
        .to_owned();
    send(&proxy, &shown["h:".len()..], &tools(), "four");

    let status = proxy.status();
    assert_eq!(status["store_entries"], 4, "{status}");
    let sessions = status["recent_sessions"].as_array().expect("sessions");
    let keys: std::collections::BTreeSet<&str> =
        sessions.iter().filter_map(|s| s["key"].as_str()).collect();
    assert_eq!(keys.len(), 4, "four sessions shown apart: {keys:?}");
    assert!(
        sessions.iter().all(|s| s["figures"]["requests"] == 1),
        "{sessions:?}"
    );
    let ids: std::collections::BTreeSet<&str> =
        sessions.iter().filter_map(|s| s["id"].as_str()).collect();
    assert_eq!(ids.len(), 4, "{ids:?}");

    let (code, overview) = get(&format!("{}/ui", proxy.url));
    assert_eq!(code, 200, "{overview}");
    let links: std::collections::BTreeSet<&str> = overview
        .split("href=\"/ui/sessions/")
        .skip(1)
        .filter_map(|r| r.split('"').next())
        .collect();
    assert_eq!(links, ids, "each row links its own page");
    for id in ids {
        let rows = timeline_rows(&proxy, id);
        assert_eq!(
            rows.len(),
            1,
            "{id}: one request each, not merged: {rows:?}"
        );
        let (code, page) = get(&format!("{}/ui/sessions/{id}", proxy.url));
        assert_eq!(code, 200, "{page}");
        assert!(
            page.contains(&format!("/ui/sessions/{id}/timeline")),
            "{page}"
        );
    }
    // No raw bidirectional control reaches a page.
    assert!(!overview.contains('\u{202e}') && !overview.contains('\u{2066}'));
}

/// A browser showing the dashboard asks for `/favicon.ico`: the proxy answers it itself, never
/// forwarding it upstream (with the upstream's credentials) nor counting it as a client request;
/// and the pages name no icon, so that a browser need not ask.
#[test]
fn the_favicon_is_answered_by_the_proxy_and_never_forwarded() {
    let s = Scratch::new("proxy-ui-favicon");
    let upstream = Upstream::start(&s, &json!({"steps": []}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    for path in ["/favicon.ico", "/favicon.ico/"] {
        let (code, body) = get(&format!("{}{path}", proxy.url));
        assert_eq!(code, 204, "{path}: {body}");
    }
    let (code, page) = get(&format!("{}/ui", proxy.url));
    assert_eq!(code, 200);
    assert!(
        page.contains("<link rel=\"icon\" href=\"data:,\">"),
        "{page}"
    );
    let totals = &proxy.status()["totals"];
    assert_eq!(
        (&totals["requests"], &totals["passed"]),
        (&json!(0), &json!(0))
    );
    assert_eq!(upstream_paths(&upstream), Vec::<String>::new());
}

/// With two tiny tools the deferred list (tool_search with its index, defer_execute) costs
/// more than the client's own: the saving is negative in the log, the status and the timeline's
/// "all resident", and the Prometheus counter of savings does not move.
#[test]
fn a_deferral_that_costs_more_than_it_saves_is_shown_as_a_negative_saving() {
    let s = Scratch::new("proxy-ui-saved");
    let upstream = Upstream::start(&s, &json!({"steps": []}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let tiny = json!([
        {"name": "a_tool", "description": "a", "input_schema": {"type": "object"}},
        {"name": "b_tool", "description": "b", "input_schema": {"type": "object"}}
    ]);
    send(&proxy, "small", &tiny, "hi");
    let status = proxy.status();
    let saved = status["totals"]["tokens_saved"].as_i64().expect("a number");
    assert!(saved < 0, "{status}");
    // The session's own figure is the same signed sum.
    assert_eq!(
        status["recent_sessions"][0]["figures"]["tokens_saved"].as_i64(),
        Some(saved),
        "{status}"
    );
    assert!(
        proxy.log().contains(&format!("tool_tokens_saved={saved} ")),
        "{}",
        proxy.log()
    );
    let rows = timeline_rows(&proxy, &session_page(&proxy, "h:small"));
    let (input, resident): (i64, i64) = (
        rows[0][8].parse().expect("input tokens"),
        rows[0][9].parse().expect("all resident"),
    );
    assert_eq!(resident - input, saved, "{rows:?}");
    let (_, overview) = get(&format!("{}/ui", proxy.url));
    assert!(
        overview.contains(&format!("<b>{saved}</b>tool tokens saved")),
        "{overview}"
    );
    let (_, metrics) = get(&format!("{}/metrics", proxy.url));
    assert!(
        metrics.contains("toolshelf_proxy_tool_tokens_saved_total 0\n"),
        "a counter counts savings only: {metrics}"
    );
}

/// With `[ui] show_arguments = true` the timeline shows a model's queries escaped (a U+202E
/// cannot reorder the row), and a tool two searches of one request load is listed once.
#[test]
fn the_timeline_escapes_queries_and_lists_each_activated_tool_once() {
    let s = Scratch::new("proxy-ui-args");
    let upstream = Upstream::start(
        &s,
        &json!({"steps": [
            {"tool_uses": [{"name": "tool_search", "input": {"queries": ["read file", "\u{202e}evil first"]}}]},
            {"tool_uses": [{"name": "tool_search", "input": {"queries": ["read file"]}}]},
            {"text": "Done."}
        ]}),
    );
    let proxy = ProxyProc::start(&s, &upstream.url(), "[ui]\nshow_arguments = true\n", &[]);
    send(&proxy, "args", &tools(), "read x");
    let rows = timeline_rows(&proxy, &session_page(&proxy, "h:args"));
    assert_eq!(rows.len(), 1, "{rows:?}");
    let searched = rows[0][2].as_str();
    let activated: Vec<&str> = rows[0][3].split(", ").collect();
    let once: std::collections::BTreeSet<&str> = activated.iter().copied().collect();
    assert!(activated.contains(&"mcp__fs__read_file"), "{activated:?}");
    assert_eq!(
        (searched, activated.len()),
        (r"read file · \u{202e}evil first · read file", once.len()),
        "the queries escaped, and each tool activated once: {rows:?}"
    );
}

/// A busy session does not push a quiet one's requests out of the dashboard: after 2001
/// requests of another session, the quiet one's page still shows its request.
#[test]
fn a_busy_session_leaves_a_quiet_sessions_timeline() {
    let s = Scratch::new("proxy-ui-ring");
    let upstream = Upstream::start(&s, &json!({"steps": []}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    send(&proxy, "quiet", &tools(), "hello");
    let script = r#"
import json, sys, urllib.request, concurrent.futures
url, n = sys.argv[1], int(sys.argv[2])
body = json.dumps({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
                   "tools": [{"name": "a_tool", "description": "a", "input_schema": {"type": "object"}}]}).encode()
def one(i):
    req = urllib.request.Request(url, data=body, headers={"content-type": "application/json",
        "anthropic-version": "2023-06-01", "x-api-key": "k", "x-toolshelf-session": "busy"})
    return urllib.request.urlopen(req, timeout=120).status
with concurrent.futures.ThreadPoolExecutor(4) as ex:
    print(sum(s == 200 for s in ex.map(one, range(n))))
"#;
    let out = Command::new("python3")
        .args(["-c", script, &format!("{}/v1/messages", proxy.url), "2001"])
        .output()
        .expect("python3");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "2001",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = timeline_rows(&proxy, &session_page(&proxy, "h:quiet"));
    assert_eq!(rows.len(), 1, "the quiet session's request is kept");
    assert!(!timeline_rows(&proxy, &session_page(&proxy, "h:busy")).is_empty());
}
