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

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Mutex;
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
}

/// How often a failing store is reported in the log.
pub const LOG_EVERY: Duration = Duration::from_secs(30);

/// The log of a store's failures: the first failure at once, then at most one line per
/// [`LOG_EVERY`] with the number of failures since the last line; and one line when the store
/// answers again.
#[derive(Debug, Default)]
pub struct FailureLog {
    failing: std::sync::atomic::AtomicBool,
    state: Mutex<FailureState>,
}

#[derive(Debug, Default)]
struct FailureState {
    /// When the last failure line was written.
    said: Option<Instant>,
    /// Failures since then.
    unsaid: u64,
    /// Failures since the store last answered.
    run: u64,
}

impl FailureLog {
    /// Records a failure; logs it unless a line was written less than [`LOG_EVERY`] ago.
    pub fn failed(&self, error: &str) {
        self.failing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.run += 1;
        if s.said.is_some_and(|t| t.elapsed() < LOG_EVERY) {
            s.unsaid += 1;
            return;
        }
        let more = match std::mem::take(&mut s.unsaid) {
            0 => String::new(),
            n => format!(" ({n} more failures since the last report)"),
        };
        s.said = Some(Instant::now());
        tracing::warn!(
            "session store: {error}{more}; requests go on as if their session were missing \
             (reported at most every {} s)",
            LOG_EVERY.as_secs()
        );
    }

    /// Records an answer; logs the recovery after failures.
    pub fn answered(&self) {
        if !self
            .failing
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let run = std::mem::take(&mut s.run);
        s.unsaid = 0;
        if run > 0 {
            tracing::info!("session store: answering again after {run} failures");
        }
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
            if let Err(e) = std::fs::create_dir_all(dir).and_then(|()| {
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
        }
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
