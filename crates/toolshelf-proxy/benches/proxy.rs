//! What the proxy adds, measured end to end over loopback. Run with
//! `cargo bench -p toolshelf-proxy --bench proxy`.
//!
//! An in-process upstream answers canned Anthropic Messages responses; the same client sends the
//! same request (200 client tools, a ten-message conversation) directly to it and through the
//! proxy (in-process too, its real router and session store):
//!
//! 1. non-streaming, one round: p50 and p99 of each, and the difference;
//! 2. streaming, one round of 1,000 text deltas: p50 and p99 of the whole request, and the
//!    difference per event;
//! 3. a conversation of ten requests, each of two rounds (the model searches, then answers): the
//!    stored session's bytes after it, and the resident memory per session over 1,000 of them.
//!
//! `TOOLSHELF_BENCH_REQUESTS` sets the requests per measurement (default 1000). A custom
//! harness, not criterion: the figures wanted are percentiles of single round trips.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::header;
use axum::response::Response;
use serde_json::{Value, json};
use toolshelf_core::{Compiled, Config};
use toolshelf_proxy::Proxy;
use toolshelf_proxy::server::{AppState, router};
use toolshelf_proxy::store::MemoryStore;

/// The binary's allocator, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const EVENTS: usize = 1000;

fn tools(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let server = ["files", "git", "issues", "calendar", "mail"][i % 5];
            json!({
                "name": format!("mcp__{server}__action_{i:03}"),
                "description": format!("Performs action {i} on {server}: reads, writes or lists items, \
                                        with paging and filters as described by its parameters."),
                "input_schema": {"type": "object", "properties": {
                    "path": {"type": "string", "description": "Where to act."},
                    "limit": {"type": "integer", "minimum": 1, "description": "How many items."},
                    "filter": {"type": "string", "description": "Only items matching this."}},
                    "required": ["path"]}
            })
        })
        .collect()
}

fn conversation() -> Vec<Value> {
    let mut m = Vec::new();
    for i in 0..5 {
        m.push(json!({"role": "user", "content": format!("question {i} about the project files")}));
        m.push(json!({"role": "assistant", "content": [{"type": "text", "text": format!("answer {i}")}]}));
    }
    m.push(json!({"role": "user", "content": "and now?"}));
    m
}

fn message(content: Value, stop: &str) -> Value {
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
           "content": content, "stop_reason": stop, "stop_sequence": null,
           "usage": {"input_tokens": 100, "output_tokens": 10}})
}

/// The canned upstream: a search call when the last message is the user's text and the request
/// has `tool_search`, else a text answer; a stream of `EVENTS` deltas when asked.
async fn upstream(body: axum::body::Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let has_search = req["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["name"] == "tool_search"));
    let last_is_text = req["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["content"].is_string());
    let searching = has_search && last_is_text && req["metadata"]["search"] == true;
    if req["stream"] == true {
        let mut out = String::new();
        let ev = |out: &mut String, name: &str, data: Value| {
            out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
        };
        let mut start = message(json!([]), "");
        start["stop_reason"] = Value::Null;
        ev(
            &mut out,
            "message_start",
            json!({"type": "message_start", "message": start}),
        );
        ev(
            &mut out,
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        );
        for i in 0..EVENTS {
            ev(
                &mut out,
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": format!("word{i} ")}}),
            );
        }
        ev(
            &mut out,
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        );
        ev(
            &mut out,
            "message_delta",
            json!({"type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 1000}}),
        );
        ev(&mut out, "message_stop", json!({"type": "message_stop"}));
        return Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(Body::from(out))
            .expect("response");
    }
    let body = if searching {
        message(
            json!([{"type": "tool_use", "id": format!("toolu_{}", req["messages"].as_array().map_or(0, Vec::len)),
                    "name": "tool_search", "input": {"query": "list files"}}]),
            "tool_use",
        )
    } else {
        message(json!([{"type": "text", "text": "Done."}]), "end_turn")
    };
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("response")
}

async fn serve(app: axum::Router) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(l, app).await.expect("serve") });
    format!("http://{addr}")
}

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

async fn timed(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
    session: &str,
    n: usize,
) -> Vec<Duration> {
    let bytes = body.to_string();
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = client
            .post(url)
            .header("content-type", "application/json")
            .header("x-toolshelf-session", session)
            .body(bytes.clone())
            .send()
            .await
            .expect("send");
        assert!(r.status().is_success(), "status {}", r.status());
        let b = r.bytes().await.expect("body");
        assert!(!b.is_empty());
        out.push(t.elapsed());
    }
    out
}

fn rss_bytes() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn main() {
    let n: usize = std::env::var("TOOLSHELF_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let up = serve(axum::Router::new().fallback(axum::routing::post(upstream))).await;
        let mut config = Config::default();
        config.proxy.anthropic_upstream = up.clone();
        let compiled = Arc::new(Compiled::new(config, "bench", None).expect("config"));
        let store = Arc::new(MemoryStore::new(100_000, None));
        let proxy = Proxy::new(compiled, store, None).expect("proxy");
        let app = AppState::new(proxy);
        let via = serve(router(app.clone())).await;
        let client = reqwest::Client::new();
        let direct_url = format!("{up}/v1/messages");
        let proxy_url = format!("{via}/v1/messages");
        let tools = tools(200);
        let body = json!({"model": "m", "max_tokens": 100, "system": "You are a bench.",
                          "tools": tools, "messages": conversation()});

        // Warm up both paths (the proxy builds the request's catalog once).
        timed(&client, &direct_url, &body, "warm", 50).await;
        timed(&client, &proxy_url, &body, "warm", 50).await;
        let direct = timed(&client, &direct_url, &body, "a", n).await;
        let proxied = timed(&client, &proxy_url, &body, "a", n).await;
        let (d50, d99, p50, p99) = (
            pct(direct.clone(), 0.5),
            pct(direct, 0.99),
            pct(proxied.clone(), 0.5),
            pct(proxied, 0.99),
        );
        println!("non-streaming, 200 tools, {n} requests each:");
        println!("  direct  p50 {:>8.1} µs  p99 {:>8.1} µs", us(d50), us(d99));
        println!("  proxy   p50 {:>8.1} µs  p99 {:>8.1} µs", us(p50), us(p99));
        println!(
            "  added   p50 {:>8.1} µs  p99 {:>8.1} µs",
            us(p50) - us(d50),
            us(p99) - us(d99)
        );

        let mut stream_body = body.clone();
        stream_body["stream"] = true.into();
        let m = (n / 10).max(20);
        timed(&client, &direct_url, &stream_body, "warm", 5).await;
        timed(&client, &proxy_url, &stream_body, "warm", 5).await;
        let direct = timed(&client, &direct_url, &stream_body, "b", m).await;
        let proxied = timed(&client, &proxy_url, &stream_body, "b", m).await;
        let (d50, d99, p50, p99) = (
            pct(direct.clone(), 0.5),
            pct(direct, 0.99),
            pct(proxied.clone(), 0.5),
            pct(proxied, 0.99),
        );
        println!("streaming, {EVENTS} text deltas a request, {m} requests each:");
        println!("  direct  p50 {:>8.1} µs  p99 {:>8.1} µs", us(d50), us(d99));
        println!("  proxy   p50 {:>8.1} µs  p99 {:>8.1} µs", us(p50), us(p99));
        println!(
            "  added per event  p50 {:>6.2} µs  p99 {:>6.2} µs",
            (us(p50) - us(d50)) / EVENTS as f64,
            (us(p99) - us(d99)) / EVENTS as f64
        );

        // Sessions: ten requests of two rounds each, per conversation.
        let before = rss_bytes();
        let sessions = 1000;
        let mut conv = conversation();
        conv.truncate(1);
        for s in 0..sessions {
            let mut msgs = conv.clone();
            for t in 0..10 {
                let mut b = body.clone();
                b["messages"] = Value::Array(msgs.clone());
                b["metadata"] = json!({"search": true});
                let reply = client
                    .post(&proxy_url)
                    .header("x-toolshelf-session", format!("s{s}"))
                    .header("content-type", "application/json")
                    .body(b.to_string())
                    .send()
                    .await
                    .expect("send")
                    .bytes()
                    .await
                    .expect("reply");
                let r: Value = serde_json::from_slice(&reply).expect("json");
                msgs.push(json!({"role": "assistant", "content": r["content"]}));
                msgs.push(json!({"role": "user", "content": format!("next {t}")}));
            }
        }
        let after = rss_bytes();
        let status = app.status();
        println!("sessions: {sessions} conversations of 10 requests (2 rounds each):");
        println!(
            "  stored session bytes: mean {} max {}",
            status["session_bytes"]["mean"], status["session_bytes"]["max"]
        );
        println!(
            "  resident memory per session: {:.1} KiB",
            (after.saturating_sub(before)) as f64 / sessions as f64 / 1024.0
        );
        println!("  searches answered: {}", status["totals"]["searches"]);
    });
}
