//! The stdio transport to a downstream server: its child process, one JSON-RPC message a line.
//!
//! rmcp's own child-process transport drops a line over its 16 MiB limit, ignores a line that is
//! not valid JSON (or nested deeper than serde_json reads), and answers valid JSON that is not
//! JSON-RPC with an id-less error to the child; in every case the request that line answered
//! stays pending until the call timeout. This transport reads the lines itself and turns a bad
//! line into an answer at once: an error response carrying the id of the request it was meant
//! for, which rmcp routes to the waiting caller. The id is the one a parsable line names, else
//! the top-level `"id"` read from the line's first or last bytes. A line whose id names no
//! pending request (most often the late answer of a call already abandoned at its timeout) fails
//! nobody: it is logged and dropped, and the stream stays in step, since every message is one
//! line. A line without a readable id goes to the only request pending, unless an abandoned one
//! may still be answered (then it is dropped too); with several pending it ends the stream, so
//! every pending call fails now instead of at its timeout, and the reason is kept in the
//! connection's [`Fault`] for the server's failed state.
//!
//! An abandoned request may still be answered for one call timeout after it was abandoned (the
//! server's, as its owner sets it in [`CallTimeout`]), or as long again as it had been waiting
//! when that is longer (a `tools/list` abandoned at the start-up timeout): a call the client
//! cancels after a moment leaves the server working on it as long as a call may take. Then it is
//! forgotten: a server need not answer a cancelled request (the MCP specification says it should
//! not), and one remembered for good would keep a line without an id from failing anybody for
//! the rest of the connection.
//!
//! A line that does not even start like a JSON object is stray output (a banner, a log line) and
//! is skipped with a warning, as before: it answers nothing, and treating it as a broken reply
//! would fail an `initialize` that a chatty server otherwise completes.
//!
//! `receive` is cancel-safe (rmcp polls it inside a `select!`): the partial line and the state of
//! an oversized line live in the struct, and bytes are consumed only once copied.

use std::collections::{HashMap, VecDeque};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::RoleClient;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ErrorData, JsonRpcMessage, RequestId,
    ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// The longest line read, newline included: rmcp's `DEFAULT_MAX_LINE_LENGTH`, so a reply that
/// other rmcp clients read is read here too.
pub const MAX_LINE: usize = 16 * 1024 * 1024;
/// How much of a line's start and end is searched for its `"id"` when it cannot be parsed.
const ID_WINDOW: usize = 256;
/// How many abandoned requests are remembered as possibly still answered.
const ABANDONED_KEPT: usize = 64;
/// How long a server may take to exit once its stdin is closed.
const EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(3);
/// The `data` of the error responses this transport makes up, so they are told apart from
/// errors the server sent.
const MARK: &str = "toolshelf-transport";

/// How many of a server's last stderr lines are kept, and how much of each.
const STDERR_LINES: usize = 3;
const STDERR_LINE_CHARS: usize = 300;
/// Lines older than this when a connection fails are not quoted: a start-up banner says nothing
/// about a crash an hour later.
const STDERR_RECENT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long a failure waits for the rest of a dead server's stderr and its exit status.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(500);

/// The call timeout of a server's calls, shared by its owner (which knows it when it calls) with
/// its transports: how long an abandoned request may still be answered. Zero until set.
#[derive(Debug, Clone, Default)]
pub struct CallTimeout(Arc<AtomicU64>);

impl CallTimeout {
    /// Sets the timeout the server's calls are made with.
    pub fn set(&self, timeout: Duration) {
        let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.0.store(millis, Ordering::Relaxed);
    }

    /// The timeout last set.
    pub fn get(&self) -> Duration {
        Duration::from_millis(self.0.load(Ordering::Relaxed))
    }
}

/// What is known about why a connection ended: the transport's own reason, the process's exit
/// status and the last lines it wrote on stderr. Shared with the connection's owner, which
/// outlives the transport, so a failed state can say what the server said before it died.
#[derive(Debug, Clone, Default)]
pub struct Fault(Arc<Mutex<FaultState>>);

#[derive(Debug, Default)]
struct FaultState {
    reason: Option<String>,
    exit: Option<std::process::ExitStatus>,
    stderr: std::collections::VecDeque<(std::time::Instant, String)>,
    /// Whether stderr is still being read.
    stderr_open: bool,
}

impl Fault {
    fn state(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The transport's own reason for ending the connection (an unreadable reply, a read error).
    pub fn reason(&self) -> Option<String> {
        self.state().reason.clone()
    }

    /// Keeps `reason` as why the connection ended.
    pub fn record(&self, reason: String) {
        self.state().reason = Some(reason);
    }

    fn exited(&self, status: std::process::ExitStatus) {
        self.state().exit = Some(status);
    }

    fn stderr_line(&self, line: &str) {
        let line = line.trim_end();
        if line.trim().is_empty() {
            return;
        }
        let mut s = self.state();
        if s.stderr.len() == STDERR_LINES {
            s.stderr.pop_front();
        }
        let line = match line.char_indices().nth(STDERR_LINE_CHARS) {
            Some((at, _)) => format!("{}...", &line[..at]),
            None => line.to_owned(),
        };
        s.stderr.push_back((std::time::Instant::now(), line));
    }

    /// Waits a moment for a dead server's last stderr lines (read by another task) to arrive.
    pub async fn settle(&self) {
        let deadline = tokio::time::Instant::now() + SETTLE;
        while self.state().stderr_open && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// How the process ended, when it did: `exited with status 3`, `was killed by signal 9`.
    pub fn exit(&self) -> Option<String> {
        let status = self.state().exit?;
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            if let Some(sig) = status.signal() {
                return Some(format!("was killed by signal {sig}"));
            }
        }
        Some(match status.code() {
            Some(code) => format!("exited with status {code}"),
            None => format!("exited ({status})"),
        })
    }

    /// The last lines the process wrote on stderr in the moments before now: `its stderr ended
    /// with: "a" / "b"`.
    pub fn last_words(&self) -> Option<String> {
        let s = self.state();
        let lines: Vec<String> = s
            .stderr
            .iter()
            .filter(|(at, _)| at.elapsed() <= STDERR_RECENT)
            .map(|(_, l)| format!("{l:?}"))
            .collect();
        (!lines.is_empty()).then(|| format!("{LAST_WORDS}{}", lines.join(" / ")))
    }

    /// Why the connection failed, for a server's failed state: the transport's reason, else how
    /// the process ended, else `error` (what the MCP library saw); then its last stderr lines.
    /// Waits a moment first for the rest of a dead server's stderr.
    pub async fn explain(&self, error: impl std::fmt::Display) -> String {
        self.settle().await;
        let cause = self
            .reason()
            .or_else(|| self.exit().map(|e| format!("the server {e}")))
            .unwrap_or_else(|| error.to_string());
        match self.last_words() {
            Some(words) => format!("{cause}; {words}"),
            None => cause,
        }
    }
}

/// What introduces a server's last stderr lines in a reason.
const LAST_WORDS: &str = "its stderr ended with: ";

/// `reason` without the server's stderr lines that [`Fault::explain`] adds to it (each quoted,
/// joined by ` / `), whatever follows them: the text a model may read. A server's stderr is its
/// operator's, and may hold secrets.
pub fn without_last_words(reason: &str) -> String {
    let mark = format!("; {LAST_WORDS}");
    let Some(at) = reason.find(&mark) else {
        return reason.to_owned();
    };
    let mut rest = &reason[at + mark.len()..];
    // Each line is written as Rust's `{:?}` writes a string: quoted, with `\"` and `\\` escaped.
    while let Some(quoted) = rest.strip_prefix('"') {
        let mut escaped = false;
        let Some(close) = quoted.char_indices().find_map(|(i, c)| {
            let closes = c == '"' && !escaped;
            escaped = c == '\\' && !escaped;
            closes.then_some(i)
        }) else {
            rest = "";
            break;
        };
        rest = &quoted[close + 1..];
        match rest.strip_prefix(" / ") {
            Some(next) if next.starts_with('"') => rest = next,
            _ => break,
        }
    }
    format!("{}{rest}", &reason[..at])
}

/// Whether `error` was made up by this transport for a reply it could not read; its message
/// then says what happened, naming the server.
pub fn is_unreadable_reply(error: &ErrorData) -> bool {
    error
        .data
        .as_ref()
        .and_then(|d| d.get("source"))
        .and_then(Value::as_str)
        == Some(MARK)
}

/// A child process speaking MCP over its stdin and stdout; its stderr is copied to ours.
#[derive(Debug)]
pub struct ChildTransport {
    server: String,
    child: Child,
    pid: Option<u32>,
    stdin: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    stdout: BufReader<ChildStdout>,
    max_line: usize,
    line: Vec<u8>,
    oversized: Option<Oversized>,
    /// Requests waiting for their answer, and when each was sent.
    pending: HashMap<RequestId, Instant>,
    /// Requests abandoned (cancelled) before their answer came, newest last, each with when it
    /// is forgotten: until then a late answer to it answers nobody.
    abandoned: VecDeque<(RequestId, Instant)>,
    call_timeout: CallTimeout,
    fault: Fault,
}

/// What is kept of a line over the limit while the rest of it is skipped.
#[derive(Debug, Default)]
struct Oversized {
    len: usize,
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl Oversized {
    fn push(&mut self, chunk: &[u8]) {
        self.len += chunk.len();
        let room = ID_WINDOW.saturating_sub(self.head.len());
        self.head.extend_from_slice(&chunk[..room.min(chunk.len())]);
        if chunk.len() >= ID_WINDOW {
            self.tail.clear();
            self.tail
                .extend_from_slice(&chunk[chunk.len() - ID_WINDOW..]);
        } else {
            self.tail.extend_from_slice(chunk);
            let excess = self.tail.len().saturating_sub(ID_WINDOW);
            self.tail.drain(..excess);
        }
    }
}

enum LineRead {
    Line,
    Oversized(Oversized),
    Eof,
    Io(std::io::Error),
}

/// Whom a bad reply is for.
enum Owner {
    /// The pending request it answers.
    Call(RequestId),
    /// No request waits for it (why).
    Nobody(String),
    /// One of several pending requests, which one unknown (why).
    Unknown(&'static str),
}

/// A line that answers a request but cannot be delivered as that answer.
struct BadReply {
    reason: String,
    /// The id the line names for certain (it parsed as JSON).
    id: Option<RequestId>,
    /// Where to look for an id when it did not parse.
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl ChildTransport {
    /// Starts `command` for server `server`, with its stdio piped; stderr is copied to ours.
    /// The child is killed when the transport is dropped.
    pub fn spawn(
        server: &str,
        mut command: tokio::process::Command,
        fault: Fault,
        call_timeout: CallTimeout,
    ) -> std::io::Result<Self> {
        Self::spawn_with_limit(
            server,
            command_ready(&mut command),
            fault,
            call_timeout,
            MAX_LINE,
        )
    }

    fn spawn_with_limit(
        server: &str,
        command: &mut tokio::process::Command,
        fault: Fault,
        call_timeout: CallTimeout,
        max_line: usize,
    ) -> std::io::Result<Self> {
        // Started and registered under the lock, so that `kill_all_groups` finds every group
        // that was started before it, and none starts after it.
        let mut child = {
            let mut groups = groups();
            if groups.closed {
                return Err(std::io::Error::other(
                    "the gateway is stopping: no server is started",
                ));
            }
            let child = command.spawn()?;
            groups.live.extend(child.id());
            child
        };
        let missing = || std::io::Error::other("the child's stdio was not piped");
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stderr = child.stderr.take().ok_or_else(missing)?;
        forward_stderr(server, stderr, fault.clone());
        Ok(Self {
            server: server.to_owned(),
            pid: child.id(),
            child,
            stdin: Arc::new(tokio::sync::Mutex::new(Some(stdin))),
            stdout: BufReader::new(stdout),
            max_line,
            line: Vec::new(),
            oversized: None,
            pending: HashMap::new(),
            abandoned: VecDeque::new(),
            call_timeout,
            fault,
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Reads one line into `self.line`, or past it when it is over the limit.
    async fn read_line(&mut self) -> LineRead {
        loop {
            let (consumed, ended) = {
                let available = match self.stdout.fill_buf().await {
                    Ok(a) => a,
                    Err(e) => return LineRead::Io(e),
                };
                if available.is_empty() {
                    return LineRead::Eof;
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |i| i + 1);
                let chunk = &available[..take];
                if let Some(o) = &mut self.oversized {
                    o.push(chunk);
                } else if self.line.len() + take > self.max_line {
                    let mut o = Oversized::default();
                    o.push(&self.line);
                    o.push(chunk);
                    self.line = Vec::new();
                    self.oversized = Some(o);
                } else {
                    self.line.extend_from_slice(chunk);
                }
                (take, newline.is_some())
            };
            self.stdout.consume(consumed);
            if ended {
                return match self.oversized.take() {
                    Some(o) => LineRead::Oversized(o),
                    None => LineRead::Line,
                };
            }
        }
    }

    /// Parses the line in `self.line`: a message, nothing to deliver, or a bad reply.
    fn parse_line(&mut self) -> Result<Option<ServerJsonRpcMessage>, BadReply> {
        let line = std::mem::take(&mut self.line);
        let parsed = self.parse(&line);
        // A huge reply leaves a huge buffer behind; keep small ones for the next line.
        if line.capacity() <= 1 << 20 {
            self.line = line;
            self.line.clear();
        }
        parsed
    }

    fn parse(&self, line: &[u8]) -> Result<Option<ServerJsonRpcMessage>, BadReply> {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        let start = line.iter().position(|b| !b.is_ascii_whitespace());
        let Some(start) = start else { return Ok(None) };
        if line[start] != b'{' {
            let preview = String::from_utf8_lossy(&line[..line.len().min(200)]);
            tracing::warn!(
                server = %self.server,
                "ignoring a line on stdout that is not a JSON-RPC message: {preview}"
            );
            return Ok(None);
        }
        let error = match serde_json::from_slice::<ServerJsonRpcMessage>(line) {
            Ok(message) => return Ok(Some(message)),
            Err(e) => e,
        };
        let server = &self.server;
        match serde_json::from_slice::<Value>(line) {
            Ok(value) => {
                let id = value.get("id").and_then(request_id);
                if value.get("method").and_then(Value::as_str).is_some() {
                    // A request or notification from the server that rmcp cannot read: nobody
                    // here waits for it. A request gets an error, so the server does not wait.
                    match id {
                        Some(id) => {
                            tracing::warn!(server = %server, "refusing a request it cannot read: {error}");
                            self.answer_invalid(id);
                        }
                        None => {
                            tracing::debug!(server = %server, "ignoring a notification it cannot read: {error}");
                        }
                    }
                    return Ok(None);
                }
                let why = match value.as_object() {
                    Some(o) if !o.contains_key("result") && !o.contains_key("error") => {
                        "it has neither \"result\" nor \"error\"".to_owned()
                    }
                    _ => error.to_string(),
                };
                Err(BadReply {
                    reason: format!(
                        "server {server:?} sent a reply that is not a JSON-RPC response ({why})"
                    ),
                    id,
                    head: Vec::new(),
                    tail: Vec::new(),
                })
            }
            Err(e) => {
                let reason = if e.to_string().starts_with("recursion limit exceeded") {
                    format!(
                        "server {server:?} sent a reply nested deeper than the 127 levels toolshelf reads"
                    )
                } else {
                    // The line starts with `{` (checked above), so it is never empty; the text
                    // only decides that.
                    format!(
                        "server {server:?} sent a reply that is not valid JSON: {}",
                        toolshelf_core::json::in_words(&e, "{", true)
                    )
                };
                Err(BadReply {
                    reason,
                    id: None,
                    head: line[..line.len().min(ID_WINDOW)].to_vec(),
                    tail: line[line.len().saturating_sub(ID_WINDOW)..].to_vec(),
                })
            }
        }
    }

    /// Answers a request of the server's that cannot be read, off the receive path.
    fn answer_invalid(&self, id: RequestId) {
        let message = ClientJsonRpcMessage::error(
            ErrorData::invalid_request("toolshelf cannot read this request", None),
            Some(id),
        );
        let send = write_message(self.stdin.clone(), &message);
        tokio::spawn(async move {
            let _ = send.await;
        });
    }

    /// Whom a bad reply is for: the request its id names, when that one is pending; without a
    /// readable id, the only request that may be waiting for it.
    fn owner(&mut self, bad: &BadReply) -> Owner {
        if let Some(id) = bad.id.clone().or_else(|| message_id(&bad.head, &bad.tail)) {
            if self.pending.contains_key(&id) {
                return Owner::Call(id);
            }
            let was = if self.forget_abandoned(&id) {
                "was abandoned"
            } else {
                "is not pending"
            };
            return Owner::Nobody(format!("it answers request {id}, which {was}"));
        }
        let now = Instant::now();
        self.abandoned.retain(|(_, until)| *until > now);
        if !self.abandoned.is_empty() {
            return Owner::Nobody(
                "its id cannot be read, and it may answer a request already abandoned".into(),
            );
        }
        match self.pending.len() {
            0 => Owner::Nobody("no request is pending".into()),
            1 => Owner::Call(self.pending.keys().next().cloned().expect("one pending")),
            _ => Owner::Unknown("several requests are pending"),
        }
    }

    /// Notes that `id` was abandoned while pending: its answer may still come, for one call
    /// timeout, or as long again as it had been waiting when that is longer.
    fn abandon(&mut self, id: &RequestId) {
        if let Some(sent) = self.pending.remove(id) {
            if self.abandoned.len() == ABANDONED_KEPT {
                self.abandoned.pop_front();
            }
            let now = Instant::now();
            let expected = (now - sent).max(self.call_timeout.get());
            self.abandoned.push_back((id.clone(), now + expected));
        }
    }

    /// Forgets the abandoned request `id` once its answer came; whether it was one.
    fn forget_abandoned(&mut self, id: &RequestId) -> bool {
        let at = self.abandoned.iter().position(|(a, _)| a == id);
        at.and_then(|at| self.abandoned.remove(at)).is_some()
    }

    fn record_fault(&self, reason: String) {
        self.fault.record(reason);
    }

    /// Notes the exit status once the server's output has ended, waiting a moment for it.
    async fn note_exit(&mut self) {
        if let Ok(Ok(status)) = tokio::time::timeout(SETTLE, self.child.wait()).await {
            self.fault.exited(status);
        }
    }
}

/// Pipes the child's stdio and kills the child with its transport. On unix the child leads a
/// process group of its own, so that what it starts (the server behind an `npx`, `uvx` or
/// `sh -c` wrapper) is stopped with it: see [`kill_all_groups`].
fn command_ready(command: &mut tokio::process::Command) -> &mut tokio::process::Command {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    command
}

/// The process groups of the servers whose transport is not dropped yet (`live`): starting,
/// connected, or closing (waiting up to [`EXIT_WAIT`] for the server to exit); and whether the
/// gateway is stopping (`closed`), after which no server is started.
struct Groups {
    live: Vec<u32>,
    closed: bool,
}

static GROUPS: Mutex<Groups> = Mutex::new(Groups {
    live: Vec::new(),
    closed: false,
});

fn groups() -> std::sync::MutexGuard<'static, Groups> {
    GROUPS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Kills the process group of every server of this process whose transport is not dropped yet,
/// wherever it is (starting, connected, closing), and refuses every later start: for a gateway
/// about to exit, which will not wait for their transports to close, and whose servers may still
/// be starting (a signal that comes during start-up).
pub fn kill_all_groups() {
    let live = {
        let mut groups = groups();
        groups.closed = true;
        std::mem::take(&mut groups.live)
    };
    for pgid in live {
        toolshelf_runtime::kill_process_group(pgid);
    }
}

/// Copies a server's stderr to ours line by line, each line marked with the server's name (many
/// servers print a banner there, and a client's log shows all of them together), and keeps the
/// last lines in `fault` for a failure to quote.
/// The most of one stderr line the gateway reads; the rest of the line is skipped.
const STDERR_READ_BYTES: u64 = 64 * 1024;

/// The most of one stderr line passed on to the gateway's own stderr, in characters.
const STDERR_SHOWN_CHARS: usize = 4096;

fn forward_stderr(server: &str, stderr: tokio::process::ChildStderr, fault: Fault) {
    fault.state().stderr_open = true;
    let server = server.to_owned();
    tokio::spawn(async move {
        let mut reader = BufReader::new(stderr);
        // Written through tokio: a client that does not drain our stderr then stalls this task
        // (and the server's own writes, as an inherited stderr would), not a runtime worker.
        let mut out = tokio::io::stderr();
        let mut line = Vec::new();
        // Past its first STDERR_READ_BYTES a line is skipped to its end: a server writing one
        // endless line must not grow the gateway's memory with it.
        let mut skipping = false;
        loop {
            line.clear();
            match (&mut reader)
                .take(STDERR_READ_BYTES)
                .read_until(b'\n', &mut line)
                .await
            {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let ended = line.ends_with(b"\n");
                    if std::mem::replace(&mut skipping, !ended) {
                        continue;
                    }
                    let text = String::from_utf8_lossy(&line);
                    let text = text.trim_end_matches(['\n', '\r']);
                    fault.stderr_line(text);
                    // Control characters and bidirectional marks are escaped: a server's output
                    // must not move the terminal's cursor or forge another server's line.
                    let shown = toolshelf_core::echo::for_log(text, STDERR_SHOWN_CHARS);
                    let _ = out
                        .write_all(format!("[{server}] {shown}\n").as_bytes())
                        .await;
                }
            }
        }
        fault.state().stderr_open = false;
    });
}

/// A JSON-RPC id as a message names it.
fn request_id(v: &Value) -> Option<RequestId> {
    match v {
        Value::Number(n) => n.as_i64().map(RequestId::Number),
        Value::String(s) => Some(RequestId::String(s.as_str().into())),
        _ => None,
    }
}

/// The `"id"` member of the JSON object a line holds, read from its first bytes `head` (scanning
/// forward from its start) or else its last bytes `tail` (scanning back from its end), where the
/// object's own members are told apart from those nested in it. `None` when neither window
/// reaches it whole, or it is no request id.
fn message_id(head: &[u8], tail: &[u8]) -> Option<RequestId> {
    id_from_start(head).or_else(|| id_from_end(tail))
}

fn id_from_start(bytes: &[u8]) -> Option<RequestId> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut i = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    if bytes[i] != b'{' {
        return None;
    }
    let mut depth = 0usize;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let close = string_close(bytes, i)?;
                if depth == 1
                    && &bytes[i + 1..close] == b"id"
                    && let Some(value) = bytes[close + 1..].trim_ascii_start().strip_prefix(b":")
                {
                    return id_value(value);
                }
                i = close;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return None;
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn id_from_end(bytes: &[u8]) -> Option<RequestId> {
    let bytes = bytes.trim_ascii_end();
    if bytes.last() != Some(&b'}') {
        return None;
    }
    let mut depth = 0usize;
    let mut i = bytes.len();
    while i > 0 {
        i -= 1;
        match bytes[i] {
            b'"' => {
                let open = string_open(bytes, i)?;
                if depth == 1
                    && &bytes[open + 1..i] == b"id"
                    && let Some(value) = bytes[i + 1..].trim_ascii_start().strip_prefix(b":")
                {
                    return id_value(value);
                }
                i = open;
            }
            b'}' | b']' => depth += 1,
            b'{' | b'[' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return None;
                }
            }
            _ => {}
        }
    }
    None
}

/// The closing quote of the string opening at `open`.
fn string_close(bytes: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// The opening quote of the string closing at `close`; `None` when the window starts before it
/// can be told (a quote at its first byte, or a run of backslashes reaching it).
fn string_open(bytes: &[u8], close: usize) -> Option<usize> {
    let mut i = close;
    while i > 0 {
        i -= 1;
        if bytes[i] != b'"' {
            continue;
        }
        let backslashes = bytes[..i].iter().rev().take_while(|b| **b == b'\\').count();
        if backslashes == i {
            return None;
        }
        if backslashes % 2 == 0 {
            return Some(i);
        }
    }
    None
}

/// A request id at the start of `bytes` (after a member's `:`), when it is whole there: a string,
/// or an integer followed by what may follow a member.
fn id_value(bytes: &[u8]) -> Option<RequestId> {
    let bytes = bytes.trim_ascii_start();
    if bytes.first() == Some(&b'"') {
        let close = string_close(bytes, 0)?;
        let s: String = serde_json::from_slice(&bytes[..=close]).ok()?;
        return Some(RequestId::String(s.into()));
    }
    let end = bytes
        .iter()
        .position(|b| !(b.is_ascii_digit() || *b == b'-'))?;
    if !matches!(bytes[end], b',' | b'}' | b' ' | b'\t' | b'\r' | b'\n') {
        return None;
    }
    std::str::from_utf8(&bytes[..end])
        .ok()?
        .parse()
        .ok()
        .map(RequestId::Number)
}

/// `n` bytes for a reader, in the unit of the limits: `16.2 MiB`, or `2050 bytes` below a
/// mebibyte.
fn size(n: usize) -> String {
    if n < 1 << 20 {
        format!("{n} bytes")
    } else {
        format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20))
    }
}

/// The line limit for a reader: `16 MiB`, or `1000-byte` when not whole mebibytes.
fn limit(n: usize) -> String {
    if n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n}-byte")
    }
}

/// Serialises `message` now and writes it as one line when awaited.
fn write_message(
    stdin: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    message: &ClientJsonRpcMessage,
) -> impl Future<Output = std::io::Result<()>> + Send + 'static + use<> {
    let bytes = serde_json::to_vec(message).map(|mut b| {
        b.push(b'\n');
        b
    });
    async move {
        let bytes = bytes.map_err(std::io::Error::other)?;
        let mut stdin = stdin.lock().await;
        let Some(stdin) = stdin.as_mut() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the transport is closed",
            ));
        };
        stdin.write_all(&bytes).await?;
        stdin.flush().await
    }
}

impl Drop for ChildTransport {
    fn drop(&mut self) {
        // A server that died before reading its first request fails the send, not the read: its
        // exit status is taken here, if it is there to take.
        if let Ok(Some(status)) = self.child.try_wait() {
            self.fault.exited(status);
        }
        // What the server started goes with it (the server itself is killed as the child drops,
        // unless it has exited already).
        if let Some(pid) = self.pid {
            groups().live.retain(|g| *g != pid);
            toolshelf_runtime::kill_process_group(pid);
        }
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        match &item {
            JsonRpcMessage::Request(r) => {
                self.pending.insert(r.id.clone(), Instant::now());
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    self.abandon(id);
                }
            }
            _ => {}
        }
        write_message(self.stdin.clone(), &item)
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            let bad = match self.read_line().await {
                LineRead::Eof => {
                    self.note_exit().await;
                    return None;
                }
                LineRead::Io(e) => {
                    self.record_fault(format!(
                        "reading the output of server {:?} failed: {e}",
                        self.server
                    ));
                    return None;
                }
                LineRead::Oversized(o) => BadReply {
                    reason: format!(
                        "server {:?} sent a reply of {}, over the {} limit",
                        self.server,
                        size(o.len),
                        limit(self.max_line)
                    ),
                    id: None,
                    head: o.head,
                    tail: o.tail,
                },
                LineRead::Line => match self.parse_line() {
                    Ok(None) => continue,
                    Ok(Some(message)) => {
                        let answered = match &message {
                            JsonRpcMessage::Response(r) => Some(&r.id),
                            JsonRpcMessage::Error(e) => e.id.as_ref(),
                            _ => None,
                        };
                        if let Some(id) = answered.cloned()
                            && self.pending.remove(&id).is_none()
                        {
                            self.forget_abandoned(&id);
                        }
                        return Some(message);
                    }
                    Err(bad) => bad,
                },
            };
            match self.owner(&bad) {
                Owner::Call(id) => {
                    tracing::warn!(server = %self.server, "{}; the call was abandoned", bad.reason);
                    self.pending.remove(&id);
                    let error = ErrorData::internal_error(
                        format!("{}; the call was abandoned", bad.reason),
                        Some(json!({ "source": MARK })),
                    );
                    return Some(ServerJsonRpcMessage::error(error, Some(id)));
                }
                // The next line is the next message: the stream stays in step.
                Owner::Nobody(why) => {
                    tracing::warn!(server = %self.server, "{} ({why}); ignored", bad.reason);
                }
                Owner::Unknown(why) => {
                    let reason = format!(
                        "{}, and it could not be matched to one of the {} pending requests ({why}); the connection was closed",
                        bad.reason,
                        self.pending.len()
                    );
                    tracing::warn!(server = %self.server, "{reason}");
                    self.record_fault(reason);
                    // One of the calls would wait for its timeout, and which one is unknown: all
                    // fail now, told why. No graceful exit to wait for in `close`, and the
                    // pending calls fail only once it returns.
                    let _ = self.child.start_kill();
                    return None;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // The stdio shutdown of the MCP specification: close stdin, let the server exit, and
        // kill it when it does not. (Dropping the transport kills it in any case.)
        drop(self.stdin.lock().await.take());
        match tokio::time::timeout(EXIT_WAIT, self.child.wait()).await {
            Ok(_) => Ok(()),
            Err(_) => self.child.kill().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lines_own_id_is_read_near_either_end() {
        let n = |n| Some(RequestId::Number(n));
        assert_eq!(
            message_id(br#"{"jsonrpc":"2.0","id": 12,"result":{"x":"#, b""),
            n(12)
        );
        assert_eq!(
            message_id(b"", br#"aaa"}]}, "id" : "req-7"}"#),
            Some(RequestId::String("req-7".into()))
        );
        // Ids nested in the result, or in a string, are not the message's.
        assert_eq!(
            message_id(br#"{"result":{"id":5,"content":[{"text":"x"#, b""),
            None
        );
        assert_eq!(
            message_id(b"", br#"x\", \"id\": 4, \"y\":{\"id\":3}}"}]}}"#),
            None
        );
        assert_eq!(
            message_id(br#"{"result":{"id":5},"id":6,"jsonrpc":"2.0"}"#, b""),
            n(6)
        );
        assert_eq!(
            message_id(
                b"",
                br#"xx"}]},"structuredContent":{"id":9}},"id":7,"jsonrpc":"2.0"}"#
            ),
            n(7)
        );
        // An id cut by the window's edge, or no request id, is not read.
        assert_eq!(message_id(br#"{"jsonrpc":"2.0","id": 12"#, b""), None);
        assert_eq!(message_id(br#"{"idx": 3, "id": true}"#, b""), None);
        assert_eq!(message_id(br#"{"id": null, "error": {}}"#, b""), None);
        assert_eq!(message_id(b"", b""), None);
        // A quote at the window's start may be escaped by what precedes it: undecided.
        assert_eq!(message_id(b"", br#","id":1,"x":"a\"b"}"#), n(1));
        assert_eq!(message_id(b"", br#""id":1,"x":"a\"b"}"#), None);
    }

    #[test]
    fn an_oversized_line_keeps_its_head_and_tail() {
        let mut o = Oversized::default();
        o.push(&[b'a'; 100]);
        o.push(&[b'b'; 1000]);
        o.push(&[b'c'; 10]);
        assert_eq!(o.len, 1110);
        assert_eq!(o.head.len(), ID_WINDOW);
        assert_eq!(&o.head[..100], &[b'a'; 100][..]);
        assert_eq!(o.tail.len(), ID_WINDOW);
        assert_eq!(&o.tail[ID_WINDOW - 10..], b"cccccccccc");
    }

    fn request(id: i64) -> ClientJsonRpcMessage {
        ClientJsonRpcMessage::request(
            rmcp::model::ClientRequest::PingRequest(Default::default()),
            RequestId::Number(id),
        )
    }

    /// A child that prints `lines` (after reading one line of input each, so the requests are
    /// sent first) with a line limit of 1,000 bytes, then reads one more line before it exits:
    /// a test's request beyond its lines must not meet a closed pipe.
    fn child(lines: &[&str], fault: Fault) -> ChildTransport {
        child_with_timeout(lines, fault, CallTimeout::default())
    }

    /// [`child`], its calls made with `call_timeout`.
    fn child_with_timeout(
        lines: &[&str],
        fault: Fault,
        call_timeout: CallTimeout,
    ) -> ChildTransport {
        let mut script = lines
            .iter()
            .map(|l| format!("read _\nprintf '%s\\n' '{l}'\n"))
            .collect::<String>();
        script.push_str("read _\n");
        let mut cmd = tokio::process::Command::new("sh");
        cmd.args(["-c", &script]);
        ChildTransport::spawn_with_limit("t", command_ready(&mut cmd), fault, call_timeout, 1000)
            .expect("spawn sh")
    }

    async fn error_of(t: &mut ChildTransport) -> (RequestId, String) {
        match t.receive().await {
            Some(JsonRpcMessage::Error(e)) => {
                assert!(is_unreadable_reply(&e.error), "{e:?}");
                (e.id.expect("id"), e.error.message.into_owned())
            }
            other => panic!("expected a made-up error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn bad_replies_answer_their_request_at_once() {
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":2,"result":{{"x":"{}"}}}}"#,
            "y".repeat(2000)
        );
        let fault = Fault::default();
        let mut t = child(
            &[
                "Server starting...",
                r#"{"jsonrpc":"2.0","id":1,"result":{"#,
                &big,
                r#"{"jsonrpc":"2.0","id":3}"#,
                r#"{"jsonrpc":"2.0","id":4,"result":{}}"#,
            ],
            fault.clone(),
        );
        for id in 1..=4 {
            t.send(request(id)).await.expect("send");
        }
        t.send(request(5)).await.expect("send");
        let (id, message) = error_of(&mut t).await;
        assert_eq!(id, RequestId::Number(1));
        assert!(
            message.starts_with("server \"t\" sent a reply that is not valid JSON: ")
                && message.ends_with("; the call was abandoned"),
            "{message}"
        );
        let (id, message) = error_of(&mut t).await;
        assert_eq!(id, RequestId::Number(2));
        assert!(
            message.contains("sent a reply of 2043 bytes, over the 1000-byte limit"),
            "{message}"
        );
        let (id, message) = error_of(&mut t).await;
        assert_eq!(id, RequestId::Number(3));
        assert!(
            message.contains("not a JSON-RPC response (it has neither \"result\" nor \"error\")"),
            "{message}"
        );
        match t.receive().await {
            Some(JsonRpcMessage::Response(r)) => assert_eq!(r.id, RequestId::Number(4)),
            other => panic!("expected the good reply, got {other:?}"),
        }
        assert_eq!(t.pending.len(), 1, "only request 5 is still pending");
        assert!(fault.reason().is_none());
    }

    fn cancel(id: i64) -> ClientJsonRpcMessage {
        ClientJsonRpcMessage::notification(
            rmcp::model::CancelledNotification::new(rmcp::model::CancelledNotificationParam::new(
                Some(RequestId::Number(id)),
                None,
            ))
            .into(),
        )
    }

    #[tokio::test]
    async fn a_late_bad_reply_fails_no_other_call() {
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"x":"{}"}}}}"#,
            "y".repeat(2000)
        );
        let fault = Fault::default();
        let mut t = child(
            &[
                &big,
                r#"{"broken"#,
                r#"{"jsonrpc":"2.0","id":2,"result":{"#,
                r#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
            ],
            fault.clone(),
        );
        // 1 and 2 are abandoned after waiting a minute, 3 waits: 1's oversized answer, a broken
        // line without an id (while 2 may still be answered) and 2's broken answer fail nobody,
        // 3 least of all.
        for id in [1, 2] {
            t.send(request(id)).await.expect("send");
            t.pending.insert(RequestId::Number(id), a_minute_ago());
            t.send(cancel(id)).await.expect("send");
        }
        t.send(request(3)).await.expect("send");
        match t.receive().await {
            Some(JsonRpcMessage::Response(r)) => assert_eq!(r.id, RequestId::Number(3)),
            other => panic!("expected 3's own answer, got {other:?}"),
        }
        assert!(t.abandoned.is_empty(), "both late answers came");
        assert!(t.pending.is_empty());
        assert!(fault.reason().is_none());
    }

    fn a_minute_ago() -> Instant {
        Instant::now()
            .checked_sub(std::time::Duration::from_secs(60))
            .expect("a minute ago")
    }

    #[tokio::test]
    async fn an_abandoned_request_is_forgotten_after_as_long_again_as_it_waited() {
        let fault = Fault::default();
        let mut t = child(&[r#"{"broken"#], fault.clone());
        // 1 is abandoned as soon as it is sent, so it is forgotten at once: the broken line
        // without an id goes to 2, the only request waiting.
        t.send(request(1)).await.expect("send");
        t.send(cancel(1)).await.expect("send");
        assert_eq!(t.abandoned.len(), 1);
        t.send(request(2)).await.expect("send");
        let (id, message) = error_of(&mut t).await;
        assert_eq!(id, RequestId::Number(2));
        assert!(message.contains("not valid JSON"), "{message}");
        assert!(t.abandoned.is_empty() && t.pending.is_empty());
        assert!(fault.reason().is_none());
    }

    #[tokio::test]
    async fn an_abandoned_request_is_expected_for_one_call_timeout() {
        let fault = Fault::default();
        let timeout = CallTimeout::default();
        timeout.set(Duration::from_secs(60));
        let mut t = child_with_timeout(
            &[r#"{"broken"#, r#"{"jsonrpc":"2.0","id":2,"result":{}}"#],
            fault.clone(),
            timeout,
        );
        // 1 is cancelled as soon as it is sent, yet its answer may come for a minute: the broken
        // line without an id may be it, and fails nobody; 2 gets its own answer.
        t.send(request(1)).await.expect("send");
        t.send(cancel(1)).await.expect("send");
        t.send(request(2)).await.expect("send");
        match t.receive().await {
            Some(JsonRpcMessage::Response(r)) => assert_eq!(r.id, RequestId::Number(2)),
            other => panic!("expected 2's own answer, got {other:?}"),
        }
        assert_eq!(t.abandoned.len(), 1, "1 is still expected");
        assert!(fault.reason().is_none());
    }

    #[tokio::test]
    async fn an_unattributable_bad_reply_ends_the_stream_with_the_reason() {
        let fault = Fault::default();
        let mut t = child(&[r#"{"broken"#], fault.clone());
        t.send(request(1)).await.expect("send");
        t.send(request(2)).await.expect("send");
        assert!(t.receive().await.is_none(), "the stream ends");
        let reason = fault.reason().expect("a fault");
        assert!(
            reason.contains("not valid JSON")
                && reason.contains("could not be matched to one of the 2 pending requests"),
            "{reason}"
        );
    }

    #[tokio::test]
    async fn a_deep_reply_is_named_as_such() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let mut t = child(&[&deep], Fault::default());
        t.send(request(1)).await.expect("send");
        t.send(request(2)).await.expect("send");
        let (id, message) = error_of(&mut t).await;
        assert_eq!(id, RequestId::Number(1), "found by the id near the start");
        assert!(
            message.contains("nested deeper than the 127 levels"),
            "{message}"
        );
    }

    #[test]
    fn a_reason_loses_the_servers_stderr_and_keeps_what_follows() {
        assert_eq!(
            without_last_words(
                "the server exited with status 3; its stderr ended with: \"a \\\" / b\" / \"KEY=1\"; next restart attempt in 2.0s"
            ),
            "the server exited with status 3; next restart attempt in 2.0s"
        );
        assert_eq!(
            without_last_words("initialize failed: x; its stderr ended with: \"fatal\""),
            "initialize failed: x"
        );
        assert_eq!(without_last_words("plain"), "plain");
    }
}
