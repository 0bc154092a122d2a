//! Gateway overhead and throughput (issue 4, section 4). Run with
//! `cargo bench -p toolshelf --bench gateway` after `bash scripts/install-mcp-servers.sh`.
//!
//! 1. Added latency: the same rmcp client calls the everything server's `echo` directly (its
//!    own child process) and through `toolshelf serve` (stdio) with `defer_execute`; p50 and
//!    p99 of each, and the difference.
//! 2. Throughput: 16 concurrent streamable-HTTP sessions against one `toolshelf serve --http`,
//!    each calling `defer_execute` in a loop; calls per second and per-call p50/p99 under load.
//!
//! `TOOLSHELF_BENCH_CALLS` sets the calls per measurement (default 1000; per HTTP session it is
//! a sixteenth of that times four). A custom harness, not criterion: the figures wanted are
//! percentiles of single round trips, which criterion does not report.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::RunningService;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{Peer, RoleClient, ServiceExt};
use serde_json::json;

const TOOLSHELF: &str = env!("CARGO_BIN_EXE_toolshelf");
const SESSIONS: usize = 16;

fn everything() -> String {
    let prefix = std::env::var_os("TOOLSHELF_MCP_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/toolshelf-mcp")
        });
    let p = prefix.join("npm/node_modules/.bin/mcp-server-everything");
    assert!(
        p.exists(),
        "{} missing: run bash scripts/install-mcp-servers.sh",
        p.display()
    );
    p.display().to_string()
}

fn args(v: serde_json::Value) -> JsonObject {
    match v {
        serde_json::Value::Object(m) => m,
        _ => unreachable!("object literal"),
    }
}

async fn timed(
    peer: &Peer<RoleClient>,
    name: &str,
    arguments: &JsonObject,
    n: usize,
) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments.clone());
        let t = Instant::now();
        let r = peer.call_tool(params).await.expect("call");
        out.push(t.elapsed());
        assert_ne!(r.is_error, Some(true), "call failed: {r:?}");
    }
    out
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn summary(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (pct(&v, 0.5), pct(&v, 0.99))
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

async fn client(cmd: tokio::process::Command) -> RunningService<RoleClient, ()> {
    let (t, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    ().serve(t).await.expect("initialize")
}

fn main() {
    let calls: usize = std::env::var("TOOLSHELF_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let dir = std::env::temp_dir().join(format!("toolshelf-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("bench.toml");
    std::fs::write(
        &config,
        format!(
            "[servers.everything]\ncommand = {:?}\nargs = [\"stdio\"]\n[execute]\nrequire_search = false\n[audit]\npath = {:?}\n[cache]\npath = {:?}\n",
            everything(),
            dir.join("audit.jsonl").display().to_string(),
            dir.join("cache").display().to_string()
        ),
    )
    .expect("config");
    let config = config.display().to_string();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let echo = args(json!({"message": "hello"}));
        let mut direct_cmd = tokio::process::Command::new(everything());
        direct_cmd.arg("stdio");
        let direct = client(direct_cmd).await;
        timed(direct.peer(), "echo", &echo, 50).await;
        let (d50, d99) = summary(timed(direct.peer(), "echo", &echo, calls).await);
        direct.cancel().await.ok();

        let mut gw_cmd = tokio::process::Command::new(TOOLSHELF);
        gw_cmd
            .args(["serve", "--config", &config])
            .env("TOOLSHELF_LOG", "error");
        let gw = client(gw_cmd).await;
        let via =
            args(json!({"tool_name": "mcp__everything__echo", "params": {"message": "hello"}}));
        timed(gw.peer(), "defer_execute", &via, 50).await;
        let (g50, g99) = summary(timed(gw.peer(), "defer_execute", &via, calls).await);
        gw.cancel().await.ok();

        println!("defer_execute latency over stdio, {calls} calls of everything/echo");
        println!(
            "  direct (same client, no gateway)   p50 {:>9}   p99 {:>9}",
            us(d50),
            us(d99)
        );
        println!(
            "  through toolshelf (defer_execute)  p50 {:>9}   p99 {:>9}",
            us(g50),
            us(g99)
        );
        println!(
            "  added by the gateway               p50 {:>9}   p99 {:>9}",
            us(g50.saturating_sub(d50)),
            us(g99.saturating_sub(d99))
        );

        let mut server = std::process::Command::new(TOOLSHELF)
            .args(["serve", "--config", &config, "--http", "127.0.0.1:0"])
            .env("TOOLSHELF_LOG", "error")
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn http gateway");
        let mut lines = BufReader::new(server.stderr.take().expect("stderr")).lines();
        let url = loop {
            let line = lines.next().expect("gateway exited").expect("line");
            if let Some(u) = line.strip_prefix("toolshelf: serving MCP at ") {
                break u.trim().to_owned();
            }
        };
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
        let per_session = (calls * 4 / SESSIONS).max(10);
        let mut sessions = Vec::new();
        for _ in 0..SESSIONS {
            let c =
                ().serve(StreamableHttpClientTransport::from_uri(url.as_str()))
                    .await
                    .expect("http session");
            timed(c.peer(), "defer_execute", &via, 10).await;
            sessions.push(c);
        }
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for c in &sessions {
            let peer = c.peer().clone();
            let via = via.clone();
            tasks.spawn(async move { timed(&peer, "defer_execute", &via, per_session).await });
        }
        let mut all = Vec::new();
        while let Some(r) = tasks.join_next().await {
            all.extend(r.expect("session task"));
        }
        let wall = start.elapsed();
        let total = all.len();
        let (h50, h99) = summary(all);
        println!(
            "throughput over streamable HTTP, {SESSIONS} concurrent sessions x {per_session} calls"
        );
        println!(
            "  {total} calls in {:.2} s = {:.0} calls/s   per call p50 {}   p99 {}",
            wall.as_secs_f64(),
            total as f64 / wall.as_secs_f64(),
            us(h50),
            us(h99)
        );
        for c in sessions {
            c.cancel().await.ok();
        }
        server.kill().ok();
        server.wait().ok();
    });
    let _ = std::fs::remove_dir_all(&dir);
}
