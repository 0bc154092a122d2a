//! Where sessions live between requests.
//!
//! A conversation's next request must rebuild exactly the upstream conversation of the last one
//! (the frozen surface, the searches the proxy answered, the blocks it injected), so that state
//! outlives the request. [`SessionStore`] is the seam: versioned values with a TTL and a
//! compare-and-set, so that several proxies sharing one store cannot lose each other's updates.
//! [`MemoryStore`] is the embedded default, optionally backed by one file per session so that a
//! restart loses nothing.
//!
//! A store that fails is never fatal: a missing session degrades (the model sees its
//! `defer_execute` calls without the searches before them, and can search again).
//! [`Logged`] wraps the proxy's store and logs its failures ([`FailureLog`]): reads and writes
//! apart, at most once per [`LOG_EVERY`] with the count since, and the recovery once both
//! answer again. It also keeps the store's health for the status ([`Health`]: up or failing, since
//! when, the last error), which the log alone would hide from a dashboard or a scraper.
//!
//! The embedded store counts the sessions it evicts to stay within `[proxy] max_sessions`, and
//! says so in the log at most once per [`LOG_EVERY`]: an eviction costs a conversation its
//! session, and a store that is too small evicts all the time.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// A stored value and its version (1 for the first write, +1 for each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The version.
    pub version: u64,
    /// The bytes.
    pub value: Vec<u8>,
}

/// What a compare-and-set did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cas {
    /// Written, now at this version.
    Written(u64),
    /// Someone else wrote first; nothing was written.
    Conflict,
}

/// A boxed future of a store operation.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// A store of sessions.
pub trait SessionStore: Send + Sync + std::fmt::Debug {
    /// The value under `key`, unless missing or expired.
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Versioned>>;
    /// Writes `value` under `key` if its version is `expected` (`None`: no value yet).
    fn compare_and_set<'a>(
        &'a self,
        key: &'a str,
        expected: Option<u64>,
        value: Vec<u8>,
        ttl: Duration,
    ) -> StoreFuture<'a, Cas>;
    /// Writes `value` under `key` whatever is there.
    fn put<'a>(&'a self, key: &'a str, value: Vec<u8>, ttl: Duration) -> StoreFuture<'a, u64>;
    /// Sessions held now (approximate for shared stores).
    fn len(&self) -> usize;
    /// Whether it holds none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// How old the figure [`Self::len`] gives is: `None` when it is counted on the spot, else
    /// the time since the last count that succeeded (or since the store was made, when none
    /// has), which grows while a shared store cannot be counted.
    fn len_age(&self) -> Option<Duration> {
        None
    }
    /// Its health as its operations found it; `None` for a store that keeps no account of it.
    fn health(&self) -> Option<Health> {
        None
    }
    /// Live sessions evicted since start to stay within the store's bound (the embedded
    /// store's `[proxy] max_sessions`; a shared store's evictions are its server's).
    fn evicted(&self) -> u64 {
        0
    }
}

/// A store's health, as the status shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Health {
    /// Whether it answers: no kind of operation has failed since it last succeeded.
    pub up: bool,
    /// Since when, in seconds since the Unix epoch: while failing, the first failure of the
    /// outage; while up, the last recovery, or the start.
    pub since: u64,
    /// The kinds of operation failing now (`read`, `write`), none while up.
    pub failing: Vec<&'static str>,
    /// Failures since the outage began (0 while up).
    pub failures: u64,
    /// The last failure, in the store's words, while up too (absent when none failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How often a failing store is reported in the log.
pub const LOG_EVERY: Duration = Duration::from_secs(30);

/// What a store operation does: read a session (or an alias) or write one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `get`.
    Read,
    /// `compare_and_set` or `put`.
    Write,
}

impl Op {
    fn bit(self) -> u8 {
        1 << self.index()
    }

    fn index(self) -> usize {
        match self {
            Op::Read => 0,
            Op::Write => 1,
        }
    }
}

/// The log of a store's failures: the first failure at once, then at most one line per
/// [`LOG_EVERY`] with the number of failures since the last line (of reads and of writes); and
/// one line when the store answers again (after which the next outage's first failure is said at
/// once too), which is when every kind of operation that failed
/// (reads, writes) has succeeded since. A store that answers reads but refuses every write (an
/// ACL without the scripts' commands, `OOM` under `noeviction`) is not answering again at each
/// read: its writes still fail, and their failures are counted into the next report.
#[derive(Debug)]
pub struct FailureLog {
    /// The kinds of operation ([`Op::bit`]) that failed and have not succeeded since.
    failing: AtomicU8,
    state: Mutex<FailureState>,
    every: Duration,
    /// When the log was made: the store is up since then until it first fails.
    created: SystemTime,
}

impl Default for FailureLog {
    fn default() -> Self {
        Self::every(LOG_EVERY)
    }
}

#[derive(Debug, Default)]
struct FailureState {
    /// When the last failure line was written.
    said: Option<Instant>,
    /// Failures since then not reported, of reads and of writes ([`Op::index`]).
    unsaid: [u64; 2],
    /// Failures since the store last answered every kind of operation.
    run: u64,
    /// Whether a failure line was written in this run: only then is the recovery said.
    reported: bool,
    /// When the store last went down or came back (`None`: neither since the log was made).
    changed: Option<SystemTime>,
    /// The last failure's message.
    last_error: Option<String>,
}

impl FailureLog {
    /// A log that writes a failure line at most once per `every`.
    pub fn every(every: Duration) -> Self {
        Self {
            failing: AtomicU8::new(0),
            state: Mutex::new(FailureState::default()),
            every,
            created: SystemTime::now(),
        }
    }

    /// The store's health as the operations recorded here found it.
    pub fn health(&self) -> Health {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let failing = self.failing.load(Ordering::Relaxed);
        let kinds: Vec<&'static str> = [(Op::Read, "read"), (Op::Write, "write")]
            .into_iter()
            .filter(|(op, _)| failing & op.bit() != 0)
            .map(|(_, name)| name)
            .collect();
        let up = kinds.is_empty();
        Health {
            up,
            since: unix_secs(s.changed.unwrap_or(self.created)),
            failing: kinds,
            failures: if up { 0 } else { s.run },
            last_error: s.last_error.clone(),
        }
    }

    /// Records a failure of `op`; logs it unless a line was written less than the interval ago.
    pub fn failed(&self, op: Op, error: &str) {
        if let Some(line) = self.failure(op, error) {
            tracing::warn!("{line}");
        }
    }

    /// Records a success of `op`; logs the recovery when nothing fails any longer.
    pub fn answered(&self, op: Op) {
        if let Some(line) = self.answer(op) {
            tracing::info!("{line}");
        }
    }

    /// Records the outcome of `op`.
    pub fn saw<T>(&self, op: Op, outcome: &Result<T, String>) {
        match outcome {
            Ok(_) => self.answered(op),
            Err(e) => self.failed(op, e),
        }
    }

    /// What [`Self::failed`] logs, if anything.
    fn failure(&self, op: Op, error: &str) -> Option<String> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if self.failing.fetch_or(op.bit(), Ordering::Relaxed) == 0 {
            s.changed = Some(SystemTime::now());
        }
        s.last_error = Some(error.to_owned());
        s.run += 1;
        if s.said.is_some_and(|t| t.elapsed() < self.every) {
            s.unsaid[op.index()] += 1;
            return None;
        }
        let more = match std::mem::take(&mut s.unsaid) {
            [0, 0] => String::new(),
            [reads, writes] => {
                let kinds: Vec<String> = [(reads, "read"), (writes, "write")]
                    .into_iter()
                    .filter(|(n, _)| *n > 0)
                    .map(|(n, kind)| format!("{n} {kind}{}", if n == 1 { "" } else { "s" }))
                    .collect();
                format!(
                    " ({} more failures since the last report: {})",
                    reads + writes,
                    kinds.join(", ")
                )
            }
        };
        s.said = Some(Instant::now());
        s.reported = true;
        let (what, meaning) = match op {
            Op::Read => (
                "reading a session failed",
                "its request goes on as if its session were missing",
            ),
            Op::Write => (
                "writing a session failed",
                "its request's update of the session is not stored",
            ),
        };
        Some(format!(
            "session store: {what}: {error}; {meaning}{more} (reported at most every {} s)",
            self.every.as_secs()
        ))
    }

    /// What [`Self::answered`] logs, if anything.
    fn answer(&self, op: Op) -> Option<String> {
        if self.failing.load(Ordering::Relaxed) & op.bit() == 0 {
            return None;
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let before = self.failing.fetch_and(!op.bit(), Ordering::Relaxed);
        if before & op.bit() == 0 || before & !op.bit() != 0 {
            // Another answer got here first, or another kind of operation still fails.
            return None;
        }
        s.changed = Some(SystemTime::now());
        let run = std::mem::take(&mut s.run);
        if !std::mem::take(&mut s.reported) {
            // Failures not reported yet stay counted for the next report.
            return None;
        }
        // The outage is over, and said to be: the next one is said at once, as this one was,
        // so that the log's last word never says the store answers while it does not.
        s.said = None;
        s.unsaid = [0, 0];
        Some(format!(
            "session store: answering again (reads and writes) after {run} failures"
        ))
    }
}

/// A store whose every operation's outcome goes to a [`FailureLog`]: the proxy's store, so
/// that each failure and each recovery is logged as what it was (a read or a write), whichever
/// part of the proxy asked. Counting the failures is the caller's.
#[derive(Debug)]
pub struct Logged {
    inner: std::sync::Arc<dyn SessionStore>,
    log: FailureLog,
}

impl Logged {
    /// `inner`, its failures logged.
    pub fn new(inner: std::sync::Arc<dyn SessionStore>) -> Self {
        Self {
            inner,
            log: FailureLog::default(),
        }
    }
}

impl SessionStore for Logged {
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Versioned>> {
        Box::pin(async move {
            let got = self.inner.get(key).await;
            self.log.saw(Op::Read, &got);
            got
        })
    }

    fn compare_and_set<'a>(
        &'a self,
        key: &'a str,
        expected: Option<u64>,
        value: Vec<u8>,
        ttl: Duration,
    ) -> StoreFuture<'a, Cas> {
        Box::pin(async move {
            let done = self.inner.compare_and_set(key, expected, value, ttl).await;
            self.log.saw(Op::Write, &done);
            done
        })
    }

    fn put<'a>(&'a self, key: &'a str, value: Vec<u8>, ttl: Duration) -> StoreFuture<'a, u64> {
        Box::pin(async move {
            let done = self.inner.put(key, value, ttl).await;
            self.log.saw(Op::Write, &done);
            done
        })
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn len_age(&self) -> Option<Duration> {
        self.inner.len_age()
    }

    fn health(&self) -> Option<Health> {
        Some(self.log.health())
    }

    fn evicted(&self) -> u64 {
        self.inner.evicted()
    }
}

#[derive(Debug)]
struct Entry {
    version: u64,
    value: Vec<u8>,
    expires: Instant,
    used: u64,
}

/// The embedded store: in memory, least recently used evicted past `max`, optionally mirrored
/// to files.
#[derive(Debug)]
pub struct MemoryStore {
    entries: Mutex<HashMap<String, Entry>>,
    max: usize,
    dir: Option<PathBuf>,
    file_ttl: Duration,
    clock: std::sync::atomic::AtomicU64,
    /// Live sessions evicted to stay within `max`, since start.
    evicted: AtomicU64,
    /// Evictions, said in the log at most once per [`LOG_EVERY`].
    evictions_said: toolshelf_runtime::throttle::Throttle,
}

/// The file layout: the version, a newline, the value.
fn encode(version: u64, value: &[u8]) -> Vec<u8> {
    let mut out = format!("{version}\n").into_bytes();
    out.extend_from_slice(value);
    out
}

fn decode(bytes: &[u8]) -> Option<Versioned> {
    let nl = bytes.iter().position(|&b| b == b'\n')?;
    let version = std::str::from_utf8(&bytes[..nl]).ok()?.parse().ok()?;
    Some(Versioned {
        version,
        value: bytes[nl + 1..].to_vec(),
    })
}

/// Keys become file names: only `[A-Za-z0-9_-]` is kept, the rest hex-escaped (`.2f`). A name
/// that would be longer than [`MAX_FILE_NAME`] bytes (file systems allow 255) is cut, at an
/// escape's start, and given `~` and a digest of the whole key: `~` is in no escaped name, so a
/// cut name never equals another key's whole one, and the digest keeps two keys that start
/// alike apart.
fn file_name(key: &str) -> String {
    let mut s = String::with_capacity(key.len() + 5);
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            s.push(b as char);
        } else {
            s.push_str(&format!(".{b:02x}"));
        }
    }
    if s.len() + ".json".len() > MAX_FILE_NAME {
        let mut cut = CUT_FILE_NAME;
        // Not inside an escape: `.` and its two hex digits stay together.
        if let Some(dot) = s[cut.saturating_sub(2)..cut].find('.') {
            cut = cut - 2 + dot;
        }
        s.truncate(cut);
        s.push('~');
        s.push_str(&crate::session::digest(&[key]));
    }
    s.push_str(".json");
    s
}

/// The longest session file name, in bytes.
const MAX_FILE_NAME: usize = 200;

/// How much of a key's escaped form a cut file name keeps (then `~`, 32 digest digits, `.json`).
const CUT_FILE_NAME: usize = 120;

impl MemoryStore {
    /// A store of at most `max` sessions; with `dir`, each is also written to a file there.
    pub fn new(max: usize, dir: Option<PathBuf>) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            max: max.max(1),
            dir,
            file_ttl: FILE_TTL,
            clock: std::sync::atomic::AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            evictions_said: toolshelf_runtime::throttle::Throttle::every(LOG_EVERY),
        }
    }

    /// How long a session file may sit unused before it is ignored (the session TTL).
    pub fn with_file_ttl(mut self, ttl: Duration) -> Self {
        self.file_ttl = ttl;
        self
    }

    fn tick(&self) -> u64 {
        self.clock
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads a session's file, if it is there and not older than its TTL allows. Files carry no
    /// TTL of their own: one untouched for longer than `ttl` is expired.
    fn load(&self, key: &str, ttl: Duration) -> Option<Versioned> {
        let path = self.dir.as_ref()?.join(file_name(key));
        let meta = std::fs::metadata(&path).ok()?;
        let age = SystemTime::now()
            .duration_since(meta.modified().ok()?)
            .unwrap_or_default();
        if age > ttl {
            let _ = std::fs::remove_file(&path);
            return None;
        }
        decode(&std::fs::read(&path).ok()?)
    }

    fn save(&self, key: &str, version: u64, value: &[u8]) {
        if let Some(dir) = &self.dir {
            let path = dir.join(file_name(key));
            if let Err(e) = toolshelf_runtime::files::create_private_dir_all(dir).and_then(|()| {
                toolshelf_runtime::files::write_atomic(&path, &encode(version, value))
            }) {
                tracing::warn!("cannot write session file {}: {e}", path.display());
            }
        }
    }

    /// Makes room in `map` for `key` when it is new and the store is full: expired sessions
    /// go first, then the least recently used. Every insertion goes through here, so the store
    /// never holds more than `max`.
    fn make_room(&self, map: &mut HashMap<String, Entry>, key: &str, now: Instant) {
        if map.len() < self.max || map.contains_key(key) {
            return;
        }
        map.retain(|_, e| e.expires > now);
        if map.len() >= self.max
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
            self.count_eviction();
        }
    }

    /// Counts a live session evicted, in the figures and the metrics, and says so in the log:
    /// the first at once, then at most once per [`LOG_EVERY`] with the number since.
    fn count_eviction(&self) {
        let total = self.evicted.fetch_add(1, Ordering::Relaxed) + 1;
        metrics::counter!(crate::metrics::SESSIONS_EVICTED).increment(1);
        let Some(since) = self.evictions_said.event() else {
            return;
        };
        tracing::warn!(
            "session store: {since} live session{} evicted to stay within [proxy] max_sessions = {} \
             ({total} since start); an evicted conversation's next request goes on without its \
             session (reported at most every {} s)",
            if since == 1 { "" } else { "s" },
            self.max,
            LOG_EVERY.as_secs()
        );
    }

    fn write(&self, key: &str, version: u64, value: Vec<u8>, ttl: Duration) {
        self.save(key, version, &value);
        let used = self.tick();
        let mut map = self.lock();
        self.make_room(&mut map, key, Instant::now());
        map.insert(
            key.to_owned(),
            Entry {
                version,
                value,
                expires: Instant::now() + ttl,
                used,
            },
        );
    }

    fn current(&self, key: &str) -> Option<Versioned> {
        let used = self.tick();
        let mut map = self.lock();
        let now = Instant::now();
        match map.get_mut(key) {
            Some(e) if e.expires > now => {
                e.used = used;
                Some(Versioned {
                    version: e.version,
                    value: e.value.clone(),
                })
            }
            Some(_) => {
                map.remove(key);
                None
            }
            None => None,
        }
    }

    /// The bytes held in memory for all sessions, for the status figures.
    pub fn bytes(&self) -> usize {
        self.lock().values().map(|e| e.value.len()).sum()
    }
}

/// How long a file-backed session may sit unused before a restarted proxy ignores it, when the
/// caller does not say (the proxy passes its configured TTL).
const FILE_TTL: Duration = Duration::from_secs(6 * 3600);

impl SessionStore for MemoryStore {
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Versioned>> {
        Box::pin(async move {
            if let Some(v) = self.current(key) {
                return Ok(Some(v));
            }
            let loaded = self.load(key, self.file_ttl);
            if let Some(v) = &loaded {
                self.write(key, v.version, v.value.clone(), self.file_ttl);
            }
            Ok(loaded)
        })
    }

    fn compare_and_set<'a>(
        &'a self,
        key: &'a str,
        expected: Option<u64>,
        value: Vec<u8>,
        ttl: Duration,
    ) -> StoreFuture<'a, Cas> {
        Box::pin(async move {
            // Check and write under one lock, so two writers cannot both see `expected`.
            let used = self.tick();
            let version = {
                let mut map = self.lock();
                let now = Instant::now();
                let have = map.get(key).filter(|e| e.expires > now).map(|e| e.version);
                if have != expected {
                    return Ok(Cas::Conflict);
                }
                let version = expected.unwrap_or(0) + 1;
                self.make_room(&mut map, key, now);
                map.insert(
                    key.to_owned(),
                    Entry {
                        version,
                        value: value.clone(),
                        expires: now + ttl,
                        used,
                    },
                );
                version
            };
            self.save(key, version, &value);
            Ok(Cas::Written(version))
        })
    }

    fn put<'a>(&'a self, key: &'a str, value: Vec<u8>, ttl: Duration) -> StoreFuture<'a, u64> {
        Box::pin(async move {
            let version = self.current(key).map_or(1, |v| v.version + 1);
            self.write(key, version, value, ttl);
            Ok(version)
        })
    }

    /// Sessions held and not expired (an expired one is dropped when its key is read, or to
    /// make room).
    fn len(&self) -> usize {
        let now = Instant::now();
        self.lock().values().filter(|e| e.expires > now).count()
    }

    fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T>(f: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    const TTL: Duration = Duration::from_secs(60);

    /// A store that answers reads but refuses every write (an ACL without the scripts'
    /// commands, `OOM` under `noeviction`): its reads are no recovery, the writes' failures are
    /// counted into the next report, which names them, and the recovery is said once every kind
    /// of operation that failed has succeeded again.
    #[test]
    fn failing_writes_between_answered_reads_are_counted_and_not_a_recovery() {
        let every = Duration::from_millis(300);
        let log = FailureLog::every(every);
        let first = log
            .failure(Op::Write, "NOPERM")
            .expect("the first failure is said");
        assert!(
            first.contains("writing a session failed: NOPERM")
                && !first.contains("more failures")
                && !first.contains("as if its session were missing"),
            "{first}"
        );
        for _ in 0..3 {
            assert_eq!(log.answer(Op::Read), None, "reads never failed");
            assert_eq!(log.failure(Op::Write, "NOPERM"), None, "said already");
        }
        std::thread::sleep(every);
        assert_eq!(log.answer(Op::Read), None);
        let again = log.failure(Op::Write, "NOPERM").expect("said again");
        assert!(
            again.contains("(3 more failures since the last report: 3 writes)"),
            "{again}"
        );
        assert_eq!(
            log.answer(Op::Write).as_deref(),
            Some("session store: answering again (reads and writes) after 5 failures")
        );
        assert_eq!(log.answer(Op::Write), None, "said once");

        // A second outage soon after the recovery: said at once, as the first was, so that
        // the log's last word is never that the store answers while it does not.
        let second = log
            .failure(Op::Read, "refused")
            .expect("a new outage is said at once");
        assert!(
            second.contains("reading a session failed: refused")
                && !second.contains("more failures"),
            "{second}"
        );
        assert_eq!(log.failure(Op::Write, "refused"), None, "said already");
        assert_eq!(log.answer(Op::Read), None, "writes still fail");
        assert_eq!(
            log.answer(Op::Write).as_deref(),
            Some("session store: answering again (reads and writes) after 2 failures")
        );
        // And a third, within the interval of the second's line.
        let third = log.failure(Op::Write, "timeout").expect("said at once");
        assert!(
            third.contains("writing a session failed: timeout") && !third.contains("more failures"),
            "{third}"
        );
        std::thread::sleep(every);
        let later = log.failure(Op::Read, "timeout").expect("said");
        assert!(
            later.contains("reading a session failed: timeout")
                && later.contains("as if its session were missing")
                && !later.contains("more failures"),
            "{later}"
        );
        assert!(log.answer(Op::Read).is_none(), "writes still fail");
        assert!(log.answer(Op::Write).is_some());
    }

    /// The health the status shows: down from the first failure, with the kinds of operation
    /// failing and the last error; up again once every kind that failed has succeeded, the last
    /// error kept.
    #[test]
    fn the_health_follows_failures_and_recoveries() {
        let log = FailureLog::every(Duration::from_secs(30));
        let h = log.health();
        assert!(
            h.up && h.failing.is_empty() && h.failures == 0 && h.last_error.is_none(),
            "{h:?}"
        );
        let start = h.since;
        log.failed(Op::Read, "Redis at x: refused");
        log.failed(Op::Write, "Redis at x: not asked");
        let h = log.health();
        assert_eq!(
            (h.up, h.failing.as_slice(), h.failures),
            (false, &["read", "write"][..], 2),
            "{h:?}"
        );
        assert_eq!(h.last_error.as_deref(), Some("Redis at x: not asked"));
        assert!(h.since >= start, "{h:?}");
        let down = h.since;
        log.answered(Op::Read);
        let h = log.health();
        assert_eq!(
            (h.up, h.failing.as_slice()),
            (false, &["write"][..]),
            "{h:?}"
        );
        assert_eq!(h.since, down, "the same outage");
        log.answered(Op::Write);
        let h = log.health();
        assert!(h.up && h.failing.is_empty() && h.failures == 0, "{h:?}");
        assert!(h.since >= down, "{h:?}");
        assert_eq!(h.last_error.as_deref(), Some("Redis at x: not asked"));
        // The proxy's store reports it; the embedded store alone keeps no account.
        let logged = Logged::new(std::sync::Arc::new(MemoryStore::new(2, None)));
        assert!(logged.health().is_some_and(|h| h.up));
        assert!(MemoryStore::new(2, None).health().is_none());
    }

    /// Live sessions evicted to stay within `max` are counted; expired ones making room are not.
    #[test]
    fn live_sessions_evicted_are_counted_and_expired_ones_are_not() {
        run(async {
            let s = MemoryStore::new(2, None);
            s.put("old", b"1".to_vec(), Duration::ZERO)
                .await
                .expect("put");
            s.put("a", b"1".to_vec(), TTL).await.expect("put");
            s.put("b", b"1".to_vec(), TTL).await.expect("put");
            assert_eq!(s.evicted(), 0, "the expired session made room");
            s.put("c", b"1".to_vec(), TTL).await.expect("put");
            assert_eq!(s.evicted(), 1);
            let cas = s.compare_and_set("d", None, b"1".to_vec(), TTL).await;
            assert_eq!(cas, Ok(Cas::Written(1)));
            assert_eq!(s.evicted(), 2);
            s.put("d", b"2".to_vec(), TTL).await.expect("put");
            assert_eq!(s.evicted(), 2, "a session written again takes no room");
            let logged = Logged::new(std::sync::Arc::new(s));
            assert_eq!(logged.evicted(), 2);
        });
    }

    #[test]
    fn compare_and_set_refuses_a_stale_version() {
        run(async {
            let s = MemoryStore::new(10, None);
            assert_eq!(
                s.compare_and_set("k", None, b"a".to_vec(), TTL).await,
                Ok(Cas::Written(1))
            );
            assert_eq!(
                s.compare_and_set("k", None, b"b".to_vec(), TTL).await,
                Ok(Cas::Conflict)
            );
            assert_eq!(
                s.compare_and_set("k", Some(1), b"c".to_vec(), TTL).await,
                Ok(Cas::Written(2))
            );
            assert_eq!(
                s.compare_and_set("k", Some(1), b"d".to_vec(), TTL).await,
                Ok(Cas::Conflict)
            );
            let v = s.get("k").await.expect("ok").expect("there");
            assert_eq!((v.version, v.value), (2, b"c".to_vec()));
        });
    }

    #[test]
    fn expired_and_evicted_sessions_are_gone() {
        run(async {
            let s = MemoryStore::new(2, None);
            s.put("a", b"1".to_vec(), Duration::ZERO)
                .await
                .expect("put");
            assert_eq!(s.get("a").await, Ok(None), "expired at once");
            s.put("b", b"2".to_vec(), TTL).await.expect("put");
            s.put("c", b"3".to_vec(), TTL).await.expect("put");
            let _ = s.get("b").await; // b is now more recent than c
            s.put("d", b"4".to_vec(), TTL).await.expect("put");
            assert!(
                s.get("c").await.expect("ok").is_none(),
                "least recently used goes"
            );
            assert!(s.get("b").await.expect("ok").is_some());
            assert_eq!(s.len(), 2);
        });
    }

    /// Sessions are written by compare-and-set: past `max` the least recently used goes, an
    /// expired one first, and one that expired is not counted.
    #[test]
    fn compare_and_set_keeps_the_store_within_max() {
        run(async {
            let s = MemoryStore::new(2, None);
            for key in ["a", "b", "c", "d", "e"] {
                let cas = s.compare_and_set(key, None, b"1".to_vec(), TTL).await;
                assert_eq!(cas, Ok(Cas::Written(1)), "{key}");
                assert!(s.lock().len() <= 2, "{key}: {} held", s.lock().len());
            }
            assert_eq!(s.len(), 2);
            assert!(
                s.get("c").await.expect("ok").is_none(),
                "least recently used goes"
            );
            assert!(s.get("e").await.expect("ok").is_some());
            // An expired session makes room before a live one goes, and is not counted.
            let s = MemoryStore::new(2, None);
            let cas = s.compare_and_set("old", None, b"1".to_vec(), Duration::ZERO);
            assert_eq!(cas.await, Ok(Cas::Written(1)));
            assert_eq!(s.len(), 0);
            let cas = s.compare_and_set("live", None, b"1".to_vec(), TTL).await;
            assert_eq!(cas, Ok(Cas::Written(1)));
            let cas = s.compare_and_set("new", None, b"1".to_vec(), TTL).await;
            assert_eq!(cas, Ok(Cas::Written(1)));
            assert!(s.get("live").await.expect("ok").is_some());
            assert!(s.get("new").await.expect("ok").is_some());
            assert_eq!((s.len(), s.lock().len()), (2, 2));
        });
    }

    /// A session header may be thousands of characters, each escaped one three: its file name
    /// stays within what a file system takes, and is still one per key.
    #[test]
    fn a_long_key_gets_a_bounded_file_name_of_its_own() {
        let long = format!("h:{}", "a/".repeat(3000));
        let other = format!("{long}b");
        for key in [&long, &other] {
            let name = file_name(key);
            assert!(
                name.len() <= MAX_FILE_NAME,
                "{} bytes: {}…",
                name.len(),
                &name[..80]
            );
            assert_eq!(name, file_name(key), "the same key, the same file");
            assert!(name.ends_with(".json") && name.contains('~'), "{name}");
            // Cut between escapes, never inside one.
            let head = name.split('~').next().unwrap_or_default();
            assert!(
                head.split('.').skip(1).all(|e| e.len() >= 2),
                "an escape was cut: {head}"
            );
        }
        assert_ne!(file_name(&long), file_name(&other));
        assert_eq!(
            file_name("h:sess/1"),
            "h.3asess.2f1.json",
            "short keys as before"
        );
        let dir = std::env::temp_dir().join(format!("toolshelf-long-{}", std::process::id()));
        run(async {
            let s = MemoryStore::new(10, Some(dir.clone()));
            s.put(&long, b"state".to_vec(), TTL).await.expect("put");
            let again = MemoryStore::new(10, Some(dir.clone()));
            let v = again.get(&long).await.expect("ok").expect("from the file");
            assert_eq!(v.value, b"state".to_vec());
            assert_eq!(again.get(&other).await, Ok(None));
        });
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_file_backed_store_survives_a_restart() {
        let dir = std::env::temp_dir().join(format!("toolshelf-store-{}", std::process::id()));
        run(async {
            let s = MemoryStore::new(10, Some(dir.clone()));
            s.put("sess/1", b"state".to_vec(), TTL).await.expect("put");
            let again = MemoryStore::new(10, Some(dir.clone()));
            let v = again
                .get("sess/1")
                .await
                .expect("ok")
                .expect("from the file");
            assert_eq!((v.version, v.value), (1, b"state".to_vec()));
        });
        let _ = std::fs::remove_dir_all(dir);
    }
}
