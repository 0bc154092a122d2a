//! What the end-to-end tests of the gateway share: scratch directories, the real `toolshelf`
//! binary as a stdio or HTTP server, an rmcp client, and readers for results, the status resource
//! and the audit log. Waiting for something that happens in the background polls with a generous
//! deadline: the assertions are about what happens, never about how fast.

#![allow(dead_code)]

pub mod harness;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, ReadResourceRequestParams, ResourceContents,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};

pub const TOOLSHELF: &str = env!("CARGO_BIN_EXE_toolshelf");

pub fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// A scratch directory, removed at the end.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("toolshelf-e2e-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Self(std::fs::canonicalize(&dir).expect("canonical"))
    }

    pub fn path(&self, rel: &str) -> String {
        self.0.join(rel).display().to_string()
    }

    pub fn write(&self, rel: &str, content: &str) -> String {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, content).expect("write");
        p.display().to_string()
    }

    /// The audit log at `rel`, one JSON value a line.
    pub fn audit_at(&self, rel: &str) -> Vec<Value> {
        std::fs::read_to_string(self.0.join(rel))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
            .collect()
    }

    /// The audit log of [`files_sections`].
    pub fn audit(&self) -> Vec<Value> {
        self.audit_at("audit.jsonl")
    }

    /// The audit records of calls of `tool`, in order.
    pub fn calls_of(&self, tool: &str) -> Vec<Value> {
        self.audit()
            .into_iter()
            .filter(|r| r["kind"] == "call" && r["tool"] == tool)
            .collect()
    }

    /// The outcome of each call of `tool`, in order.
    pub fn outcomes_of(&self, tool: &str) -> Vec<Value> {
        self.calls_of(tool)
            .into_iter()
            .map(|r| r["outcome"].clone())
            .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `[audit]` and `[cache]` inside the scratch directory.
pub fn files_sections(s: &Scratch) -> String {
    format!(
        "[audit]\npath = {:?}\n[cache]\npath = {:?}\n",
        s.path("audit.jsonl"),
        s.path("cache")
    )
}

/// A `[servers.NAME]` section running `fixtures/named_server.py` with these tools.
pub fn named_server(name: &str, tools: &Value, extra: &str) -> String {
    named_server_failing_while(name, tools, None, extra)
}

/// [`named_server`] that exits at once while the file `marker` exists.
pub fn named_server_failing_while(
    name: &str,
    tools: &Value,
    marker: Option<&str>,
    extra: &str,
) -> String {
    let mut args = vec![
        fixture("named_server.py"),
        name.to_owned(),
        tools.to_string(),
    ];
    args.extend(marker.map(str::to_owned));
    format!(
        "[servers.{name:?}]\ncommand = \"python3\"\nargs = {}\nrestart_delay_secs = 1\n{extra}\n",
        Value::from(args)
    )
}

/// A tool definition for [`named_server`].
pub fn tool(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "description": description, "inputSchema": schema})
}

/// A client that answers elicitations by a fixed rule.
#[derive(Debug, Clone, Default)]
pub struct TestClient {
    /// `Some(accept)`: declare elicitation support and answer so.
    pub elicitation: Option<bool>,
    /// The messages of the elicitations it was sent, in order.
    pub asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl TestClient {
    /// A client that supports elicitation and answers every question with `accept`.
    pub fn answering(accept: bool) -> Self {
        Self {
            elicitation: Some(accept),
            ..Self::default()
        }
    }
}

/// What a test client says of itself: its name, and whether it answers elicitations.
pub fn client_info(elicitation: bool) -> ClientConfig {
    let caps = if elicitation {
        ClientCapabilities::builder().enable_elicitation().build()
    } else {
        ClientCapabilities::default()
    };
    ClientConfig::new(caps, Implementation::new("toolshelf-e2e", "0"))
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        client_info(self.elicitation.is_some())
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.asked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(message.clone());
        }
        Ok(ElicitResult::new(if self.elicitation == Some(true) {
            ElicitationAction::Accept
        } else {
            ElicitationAction::Decline
        }))
    }
}

pub type Client = RunningService<RoleClient, TestClient>;

/// `toolshelf serve --config CONFIG` over stdio, with `env` applied to its command.
pub async fn stdio_client_with(
    config: &str,
    handler: TestClient,
    env: impl FnOnce(&mut tokio::process::Command),
) -> Client {
    stdio_gateway(config, handler, env).await.0
}

/// [`stdio_client_with`], and the gateway's process id (to signal it).
pub async fn stdio_gateway(
    config: &str,
    handler: TestClient,
    env: impl FnOnce(&mut tokio::process::Command),
) -> (Client, u32) {
    let mut cmd = tokio::process::Command::new(TOOLSHELF);
    cmd.args(["serve", "--config", config])
        .env("TOOLSHELF_LOG", "warn");
    env(&mut cmd);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn toolshelf serve");
    let pid = transport.id().expect("the gateway's pid");
    let client = handler
        .serve(transport)
        .await
        .expect("initialize toolshelf");
    (client, pid)
}

/// Sends signal `sig` (`TERM`, `HUP`, `STOP`, ...) to process `pid`.
pub fn signal(pid: u32, sig: &str) {
    let sent = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill -{sig} {pid}");
}

/// Waits for `child` to exit and returns its status; fails after `secs` seconds (a guard
/// against a hang, not a measure of speed) saying it did not exit `on`.
pub async fn exit_of(
    child: &mut std::process::Child,
    secs: u64,
    on: &str,
) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().expect("poll the child") {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the process did not exit {on}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A loopback port nothing listens at (bound, then let go).
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// A client of the gateway `cmd` starts over stdio, its stderr written to the file `log`.
pub async fn stdio_client_logged(cmd: tokio::process::Command, log: &std::path::Path) -> Client {
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::from(std::fs::File::create(log).expect("log file")))
        .spawn()
        .expect("spawn toolshelf serve");
    TestClient::default()
        .serve(transport)
        .await
        .expect("initialize toolshelf")
}

pub async fn stdio_client(config: &str, handler: TestClient) -> Client {
    stdio_client_with(config, handler, |_| {}).await
}

/// A child process killed (and reaped) when dropped, so that a failed assertion leaves no
/// server running that holds the test's output open.
#[derive(Debug)]
pub struct Reaped(pub std::process::Child);

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `toolshelf serve --http 127.0.0.1:0`; returns the child and the URL it serves.
pub fn http_gateway(config: &str) -> (Reaped, String) {
    http_gateway_on(config, "127.0.0.1:0")
}

/// `toolshelf serve --http ADDR`; returns the child and the URL it serves (with the address
/// `addr` names, `0.0.0.0` included).
pub fn http_gateway_on(config: &str, addr: &str) -> (Reaped, String) {
    http_gateway_with(config, addr, &[])
}

/// [`http_gateway_on`] with `env` set for the gateway (`TOKIO_WORKER_THREADS`, say).
pub fn http_gateway_with(config: &str, addr: &str, env: &[(&str, &str)]) -> (Reaped, String) {
    let (child, url, _) = http_gateway_logged(config, addr, env);
    (child, url)
}

/// The lines a gateway has written to stderr so far (they are passed on to the test's stderr
/// too).
pub type Log = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// [`http_gateway_with`], and its log.
pub fn http_gateway_logged(
    config: &str,
    addr: &str,
    env: &[(&str, &str)],
) -> (Reaped, String, Log) {
    let log = Log::default();
    let mut child = std::process::Command::new(TOOLSHELF)
        .args(["serve", "--config", config, "--http", addr])
        .env("TOOLSHELF_LOG", "warn")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn toolshelf serve --http");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("toolshelf exited before serving")
            .expect("stderr line");
        eprintln!("{line}");
        if let Some(rest) = line.strip_prefix("toolshelf: serving MCP at ") {
            break rest.trim().to_owned();
        }
    };
    let kept = log.clone();
    std::thread::spawn(move || {
        lines.map_while(Result::ok).for_each(|l| {
            eprintln!("{l}");
            kept.lock().unwrap_or_else(|p| p.into_inner()).push(l);
        })
    });
    (Reaped(child), url, log)
}

pub async fn http_client(url: &str, handler: TestClient) -> Client {
    handler
        .serve(StreamableHttpClientTransport::from_uri(url))
        .await
        .expect("initialize over HTTP")
}

pub async fn call(client: &Client, name: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    client
        .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("tools/call {name} failed at the protocol level: {e}"))
}

pub async fn exec(client: &Client, tool: &str, params: Value) -> CallToolResult {
    call(
        client,
        "defer_execute",
        json!({"tool_name": tool, "params": params}),
    )
    .await
}

pub async fn search(client: &Client, args: Value) -> CallToolResult {
    call(client, "tool_search", args).await
}

pub fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn ok(r: &CallToolResult) -> String {
    assert_ne!(r.is_error, Some(true), "expected success, got: {}", text(r));
    text(r)
}

pub fn err(r: &CallToolResult) -> String {
    assert_eq!(
        r.is_error,
        Some(true),
        "expected an error, got: {}",
        text(r)
    );
    text(r)
}

pub async fn list_names(client: &Client) -> Vec<String> {
    client
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect()
}

/// The `toolshelf://status` resource.
pub async fn status(client: &Client) -> Value {
    let r = client
        .read_resource(ReadResourceRequestParams::new("toolshelf://status"))
        .await
        .expect("read toolshelf://status");
    let ResourceContents::TextResourceContents { text, .. } = &r.contents[0] else {
        panic!("status is text")
    };
    serde_json::from_str(text).expect("status JSON")
}

/// Polls `check` every 100 ms until it holds; fails after 60 s with `what`.
pub async fn wait_for<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A response to [`raw_http`].
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }
}

/// One HTTP/1.1 request on its own connection to the gateway serving `url`, written byte by byte
/// so tests can send what a well-behaved client library would not (two Host headers, broken
/// JSON). `headers` replace the default `Host`, `Accept` and `Content-Type` when they name them.
pub async fn raw_http(
    url: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> RawResponse {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url
        .strip_prefix("http://")
        .and_then(|u| u.strip_suffix("/mcp"))
        .expect("http://ADDR/mcp");
    let mut head = format!("{method} /mcp HTTP/1.1\r\n");
    let named = |n: &str| headers.iter().any(|(h, _)| h.eq_ignore_ascii_case(n));
    for (name, value) in [
        ("Host", addr),
        ("Accept", "application/json, text/event-stream"),
        ("Content-Type", "application/json"),
    ] {
        if !named(name) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    for (name, value) in headers.iter().filter(|(_, v)| !v.is_empty()) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the gateway");
    stream.write_all(head.as_bytes()).await.expect("send head");
    // The server may answer before reading a body it refuses; the answer is what counts.
    let _ = stream.write_all(body).await;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut raw))
        .await
        .expect("the gateway ends its answer")
        .expect("read the answer");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        let mut out = String::new();
        let mut rest = rest;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if size == 0 {
                break;
            }
            out.push_str(&after[..size.min(after.len())]);
            rest = after.get(size + 2..).unwrap_or("");
        }
        out
    } else {
        rest.to_owned()
    };
    RawResponse {
        status,
        headers,
        body,
    }
}

pub const RAW_INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":41,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

/// Opens an HTTP session by hand (initialize, then initialized) and returns its id.
pub async fn open_raw_session(url: &str) -> String {
    let init = raw_http(url, "POST", &[], RAW_INITIALIZE.as_bytes()).await;
    assert_eq!(init.status, 200, "{init:?}");
    let id = init
        .header("mcp-session-id")
        .expect("a session id")
        .to_owned();
    let done = raw_http(
        url,
        "POST",
        &[
            ("Mcp-Session-Id", &id),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!(done.status, 202, "{done:?}");
    id
}

/// The JSON-RPC messages of an event stream's `data:` lines (the empty priming one left out).
pub fn sse_messages(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("not JSON ({e}): {d}")))
        .collect()
}

/// `toolshelf serve --config CONFIG` over stdio, spoken to line by line: for what a client
/// library would not send. Its handshake is done; it is killed when dropped.
pub struct RawStdio {
    gateway: Reaped,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
}

impl RawStdio {
    pub fn start(config: &str) -> Self {
        let mut child = std::process::Command::new(TOOLSHELF)
            .args(["serve", "--config", config])
            .env("TOOLSHELF_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn toolshelf serve");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut raw = Self {
            gateway: Reaped(child),
            stdin,
            lines,
        };
        let init: Value = serde_json::from_str(RAW_INITIALIZE).expect("JSON");
        raw.send(&init);
        raw.answer(&init["id"]);
        raw.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        raw
    }

    /// Writes `message` as one line.
    pub fn send(&mut self, message: &Value) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{message}").expect("write a message");
        stdin.flush().expect("flush");
    }

    /// The answer to request `id`, read past whatever comes before it; fails after 60 s.
    pub fn answer(&mut self, id: &Value) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no answer to request {id}: {e}"));
            let message: Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            if &message["id"] == id {
                return message;
            }
        }
    }
}

impl Drop for RawStdio {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && matches!(self.gateway.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Sends `tools/call` of `name` with `args` and returns its handle, without waiting for the
/// answer: to cancel it, or await it later.
pub async fn start_call(
    client: &Client,
    name: &str,
    args: Value,
) -> rmcp::service::RequestHandle<RoleClient> {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    let call = rmcp::model::CallToolRequest::new(
        CallToolRequestParams::new(name.to_owned()).with_arguments(args),
    );
    client
        .peer()
        .send_cancellable_request(
            rmcp::model::ClientRequest::CallToolRequest(call),
            rmcp::service::PeerRequestOptions::no_options(),
        )
        .await
        .expect("send the call")
}

/// `fixtures/scripted_upstream.py` on 127.0.0.1, killed (and reaped) on drop.
pub struct Upstream {
    pub child: std::process::Child,
    pub port: u16,
    pub log: String,
}

impl Upstream {
    pub fn start(s: &Scratch, script: &Value) -> Self {
        Self::start_fixture(s, "scripted_upstream.py", script)
    }

    /// The upstream fixture `name` (one that takes a script and a log path and prints its port)
    /// playing `script`.
    pub fn start_fixture(s: &Scratch, name: &str, script: &Value) -> Self {
        use std::io::{BufRead, BufReader};
        let script_path = s.write("script.json", &script.to_string());
        let log = s.path("upstream.jsonl");
        let mut child = std::process::Command::new("python3")
            .args([fixture(name), script_path, log.clone()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the upstream's port");
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the upstream printed {line:?}, not its port"));
        Self { child, port, log }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The upstream's log records written whole: a last line without its newline is still
    /// being written (a long record reaches the file in pieces).
    pub fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .map(|l| serde_json::from_str(l).expect("upstream log line is JSON"))
            .collect()
    }

    /// The result the proxy sent for the last call of scripted turn `i` (in the request after
    /// it): its text and whether it reports an error.
    pub fn last_result(&self, i: usize) -> (String, bool) {
        let t = &self.turns()[i];
        let r = t["tool_results"]
            .as_array()
            .and_then(|r| r.last())
            .unwrap_or_else(|| panic!("turn {i} carries no tool result: {t}"));
        (
            r["content"].as_str().unwrap_or_default().to_owned(),
            r["is_error"] == true,
        )
    }

    /// The requests that played the script, in order (one per step).
    pub fn turns(&self) -> Vec<Value> {
        self.records()
            .into_iter()
            .filter(|r| r["kind"] == "request" && r["main"] == true)
            .collect()
    }

    /// The request that carried the first model turn: the first one to a model API with tools
    /// (a client's side requests, for titles and the like, carry none), scripted or not.
    pub fn first_turn(&self) -> Value {
        self.records()
            .into_iter()
            .find(|r| {
                r["kind"] == "request" && r["tool_names"].as_array().is_some_and(|t| !t.is_empty())
            })
            .unwrap_or_else(|| panic!("no model request with tools: {:#?}", self.records()))
    }

    /// The scripted turns, asserting that there were `steps` of them.
    pub fn played(&self, steps: usize) -> Vec<Value> {
        let turns = self.turns();
        assert_eq!(
            turns.len(),
            steps,
            "one request per scripted step; the requests' tools were: {:?}",
            self.records()
                .iter()
                .filter(|r| r["kind"] == "request")
                .map(|r| &r["tool_names"])
                .collect::<Vec<_>>()
        );
        turns
    }

    /// Every answer the upstream gave to a scripted turn.
    pub fn answers(&self) -> Vec<Value> {
        self.records()
            .into_iter()
            .filter(|r| r["kind"] == "response" && r["step"].is_u64())
            .collect()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `toolshelf proxy` on a free loopback port in front of `upstream` (both APIs), killed on drop.
pub struct ProxyProc {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Where its stderr goes.
    pub stderr: String,
}

impl ProxyProc {
    /// Starts the proxy with `config` (TOML text, may be empty) and `extra` arguments.
    pub fn start(s: &Scratch, upstream: &str, config: &str, extra: &[&str]) -> Self {
        let config_path = s.write("proxy.toml", config);
        let stderr = s.path("proxy.stderr");
        let err_file = std::fs::File::create(&stderr).expect("stderr file");
        let child = std::process::Command::new(TOOLSHELF)
            .arg("proxy")
            // A loopback listener on any free port, unless the caller names one.
            .args(if extra.contains(&"--listen") {
                &[][..]
            } else {
                &["--listen", "127.0.0.1:0"][..]
            })
            .args(["--config", &config_path])
            .args([
                "--anthropic-upstream",
                upstream,
                "--openai-upstream",
                upstream,
            ])
            .args(extra)
            .env("XDG_CACHE_HOME", s.path("cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err_file)
            .spawn()
            .expect("spawn toolshelf proxy");
        // Owned from here on, so that a failed start still kills (and reaps) the child.
        let mut proc = Self {
            child,
            url: String::new(),
            stderr,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = proc.log();
            // Only a whole line: stderr is unbuffered, so the address can arrive in a later
            // write than the words before it.
            if let Some((line, _)) = text
                .split("proxy listening on ")
                .nth(1)
                .and_then(|rest| rest.split_once('\n'))
            {
                proc.url = line
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                return proc;
            }
            let exited = proc.child.try_wait().expect("poll the proxy");
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "the proxy did not start ({exited:?}); stderr:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends it signal `sig` (`TERM`, `INT`, ...).
    pub fn signal(&self, sig: &str) {
        signal(self.pid(), sig);
    }

    /// Waits (at most a minute) for it to exit; its exit status.
    pub fn exited(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the proxy") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the proxy did not exit; stderr:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// `GET /toolshelf/status`.
    pub fn status(&self) -> Value {
        let out = std::process::Command::new("curl")
            .args(["-sS", &format!("{}/toolshelf/status", self.url)])
            .output()
            .expect("curl");
        serde_json::from_slice(&out.stdout).expect("status is JSON")
    }
}

impl Drop for ProxyProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// --- requests to the proxy, shared by its end-to-end tests ---

/// POSTs `body` to `url` with Python's standard library; returns (status, body as JSON or text),
/// status 0 when the connection failed.
pub fn post(url: &str, body: &Value, headers: &[(&str, &str)]) -> (u16, Value) {
    let script = r#"
import json, sys, urllib.request, urllib.error
url, body, headers = sys.argv[1], sys.argv[2].encode(), json.loads(sys.argv[3])
req = urllib.request.Request(url, data=body, headers=dict(headers, **{"content-type": "application/json"}))
try:
    r = urllib.request.urlopen(req, timeout=60)
    status, data = r.status, r.read()
except urllib.error.HTTPError as e:
    status, data = e.code, e.read()
except Exception as e:
    status, data = 0, repr(e).encode()
print(status)
print(data.decode())
"#;
    let hs: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
        .collect();
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            script,
            url,
            &body.to_string(),
            &Value::Object(hs).to_string(),
        ])
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (status, rest) = text
        .split_once('\n')
        .unwrap_or_else(|| panic!("no answer: {text} {}", String::from_utf8_lossy(&out.stderr)));
    let status = status.trim().parse().expect("status");
    let body = serde_json::from_str(rest.trim()).unwrap_or_else(|_| Value::String(rest.to_owned()));
    (status, body)
}

/// An Anthropic tool definition with an object schema.
/// Sends the conversation with `tools` to the proxy's Anthropic endpoint and appends the
/// answer as the assistant's message.
pub fn messages_turn(proxy: &ProxyProc, tools: &[Value], messages: &mut Vec<Value>) -> Value {
    let body = json!({"model": "m", "max_tokens": 256, "system": "You help.", "tools": tools,
                      "messages": messages});
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &HEADERS);
    assert_eq!(status, 200, "{answer}\nproxy log:\n{}", proxy.log());
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    answer
}

pub fn anthropic_tool(name: &str, description: &str, props: Value, required: &[&str]) -> Value {
    json!({"name": name, "description": description,
           "input_schema": {"type": "object", "properties": props, "required": required}})
}

/// [`tools`] in the Chat Completions shape.
pub fn chat_tools() -> Vec<Value> {
    tools()
        .into_iter()
        .map(|t| {
            json!({"type": "function", "function": {"name": t["name"],
                   "description": t["description"], "parameters": t["input_schema"]}})
        })
        .collect()
}

/// [`tools`] in the Responses API's shape.
pub fn responses_tools() -> Vec<Value> {
    tools()
        .into_iter()
        .map(|t| {
            json!({"type": "function", "name": t["name"], "description": t["description"],
                   "parameters": t["input_schema"]})
        })
        .collect()
}

pub fn tools() -> Vec<Value> {
    vec![
        anthropic_tool(
            "Read",
            "Read a file from the local filesystem.",
            json!({"file_path": {"type": "string"}}),
            &["file_path"],
        ),
        anthropic_tool(
            "mcp__fs__read_file",
            "Read the complete contents of a file as text.",
            json!({"path": {"type": "string"}}),
            &["path"],
        ),
        anthropic_tool(
            "mcp__fs__write_file",
            "Create or overwrite a file with new content.",
            json!({"path": {"type": "string"}, "content": {"type": "string"}}),
            &["path", "content"],
        ),
        anthropic_tool(
            "mcp__git__git_status",
            "Show the working tree status of a repository.",
            json!({"repo_path": {"type": "string"}}),
            &["repo_path"],
        ),
    ]
}

pub const HEADERS: [(&str, &str); 2] = [
    ("x-api-key", "test-key"),
    ("anthropic-version", "2023-06-01"),
];

/// curl POSTing `body` to `proxy`'s Anthropic endpoint with [`HEADERS`]; `args` (curl's own
/// options) come first.
pub fn curl_messages(proxy: &ProxyProc, body: &Value, args: &[&str]) -> std::process::Command {
    let mut curl = std::process::Command::new("curl");
    curl.args(args)
        .args(["-X", "POST"])
        .arg(format!("{}/v1/messages", proxy.url))
        .args([
            "-H",
            "content-type: application/json",
            "-d",
            &body.to_string(),
        ]);
    for (k, v) in HEADERS {
        curl.args(["-H", &format!("{k}: {v}")]);
    }
    curl
}

/// A request (streamed or not) whose client gives up after `secs` (curl's own timeout); the
/// proxy's status totals once `abandoned` reaches `n` (or after 20 s).
pub fn abandon(proxy: &ProxyProc, stream: bool, prompt: &str, secs: &str, n: u64) -> Value {
    let body = json!({"model": "m", "max_tokens": 8, "stream": stream, "tools": tools(),
                      "messages": [{"role": "user", "content": prompt}]});
    let out = curl_messages(proxy, &body, &["-sS", "-N", "--max-time", secs])
        .output()
        .expect("curl");
    // 28: curl's own timeout, the client giving up.
    assert_eq!(out.status.code(), Some(28), "stream {stream}: {out:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let t = proxy.status()["totals"].clone();
        if t["abandoned"] == n || std::time::Instant::now() > deadline {
            return t;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The CPU time process `pid` has used so far, in clock ticks (user and system).
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // The fields after the command (in parentheses, which may hold spaces): utime and stime are
    // the 12th and 13th of them.
    let after = stat.rsplit_once(')').expect("a stat line").1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// A `tool_define` definition (`slow`) whose schema costs minutes of CPU to check a call
/// against (a backtracking pattern on each of thousands of properties), and params for one
/// such call.
pub fn slow_definition() -> (Value, Value) {
    const PROPERTIES: usize = 3000;
    let properties: serde_json::Map<String, Value> = (0..PROPERTIES)
        .map(|i| {
            let pattern = json!({"type": "string", "pattern": "^(?:(a|a)*(?=b)c|a*)$"});
            (format!("p{i}"), pattern)
        })
        .collect();
    let params: serde_json::Map<String, Value> = (0..PROPERTIES)
        .map(|i| (format!("p{i}"), Value::from("a".repeat(17))))
        .collect();
    let definition = json!({"name": "slow", "description": "Takes many strings of a.",
                            "schema": {"type": "object", "properties": properties},
                            "script": "def run(params):\n    return 'ran'\n"});
    (definition, Value::Object(params))
}

/// The `tool_use` blocks of an Anthropic answer.
pub fn tool_uses(answer: &Value) -> Vec<Value> {
    answer["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter(|b| b["type"] == "tool_use")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// `fixtures/loop_upstream.py` playing `steps`, killed (and reaped) on drop.
pub struct LoopUpstream(Upstream);

impl LoopUpstream {
    pub fn start(s: &Scratch, steps: &Value) -> Self {
        Self(Upstream::start_fixture(s, "loop_upstream.py", steps))
    }

    pub fn url(&self) -> String {
        self.0.url()
    }

    pub fn records(&self, kind: &str) -> Vec<Value> {
        self.0
            .records()
            .into_iter()
            .filter(|r| r["kind"] == kind)
            .collect()
    }

    /// The requests the upstream answered from its script, in order.
    pub fn played(&self) -> Vec<Value> {
        self.records("request")
            .into_iter()
            .filter(|r| r["step"].is_u64())
            .collect()
    }

    /// Why the upstream refused requests, as a provider would have.
    pub fn refused(&self) -> Vec<Value> {
        self.records("refused")
    }

    /// The ids of the calls scripted step `step` made.
    pub fn call_ids(&self, step: u64) -> Vec<String> {
        self.records("response")
            .iter()
            .find(|r| r["step"] == step)
            .and_then(|r| r["ids"].as_array())
            .map(|ids| {
                ids.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The JSON events of an SSE body (`[DONE]` left out).
pub fn events(body: &Value) -> Vec<Value> {
    let text = body
        .as_str()
        .unwrap_or_else(|| panic!("not an event stream: {body}"));
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .filter(|d| !d.is_empty() && *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("not JSON ({e}): {d}")))
        .collect()
}
