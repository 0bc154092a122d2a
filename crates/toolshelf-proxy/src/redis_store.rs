//! Sessions in Redis, shared by several proxy replicas (`[store] url = "redis://…"`).
//!
//! A conversation's next request may land on any replica, so its session lives in one Redis
//! that they all use. Each session is a hash under `[store] key_prefix` with two fields: `v`, its
//! version, and `d`, its bytes; the key expires with the session's TTL, renewed by every write.
//! Writes run as Lua scripts, so a compare-and-set is atomic on the server: of two replicas
//! writing the same version, exactly one wins and the other sees [`Cas::Conflict`]. A key that
//! holds anything else (another type, a hash without the bytes or with a version the scripts do
//! not write) is no session: `get` logs it and reads it as missing, and the next write replaces
//! it, so that it costs its conversation one request's session, not every request's.
//!
//! Redis down or slow is never fatal. Every operation is bounded by `[store] timeout_ms` and a
//! failure comes back as an error, which the proxy counts and treats as a missing session; after
//! a failure to connect or to answer in time, operations fail at once until a `PING`, sent in the
//! background every [`PAUSE`], is answered again, so that an outage costs one timeout in all, not
//! one per operation or per request (a model's answer takes longer than any fixed pause). An
//! error about one key or one command (an error reply such as `OOM`, a reply that does not fit)
//! fails that operation only, its message naming the key. The connection is a
//! [`ConnectionManager`]: it is opened lazily (the proxy starts while Redis is down), a command
//! that finds the connection dropped starts a reconnection in the background (with a few
//! retries, backing off) and is sent once more on the new connection, and a later command that
//! finds the last reconnection failed starts another. Scripts are sent by hash and loaded again
//! when a restarted server has forgotten them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Script, Value as RedisValue};

use crate::store::{Cas, SessionStore, StoreFuture, Versioned};

/// What both scripts first read of KEYS[1]: `have`, the version of the session stored there
/// ('' when there is none), `after`, the version the next write follows (0: it writes 1), and
/// `clear`, whether the key holds something other than a session, deleted before the write. A
/// session is a hash with a version as these scripts write it (see [`version`], which `get`
/// applies to what it reads) and the bytes; anything else under the key (another type, a hash
/// with another `v` or without `d`) counts as no session and is written over. A hash that lost
/// its bytes keeps its version for the next one, so that versions never go back, except past
/// the largest one [`version`] reads: the write after that is version 1 again, so that the session
/// is not lost (a writer that read the old version conflicts, as with any other).
const STATE: &str = r"
local function state(key)
  local kind = redis.call('TYPE', key).ok
  if kind == 'none' then return '', 0, false end
  if kind ~= 'hash' then return '', 0, true end
  local v = redis.call('HGET', key, 'v')
  if not v or #v > 15 or not string.match(v, '^[1-9]%d*$') then return '', 0, true end
  if redis.call('HEXISTS', key, 'd') == 0 then return '', tonumber(v), true end
  return v, tonumber(v), false
end
";

/// Compare-and-set, after [`STATE`]. KEYS[1]: the session; ARGV: the expected version (empty:
/// none yet), the bytes, the TTL in milliseconds. Returns the new version, or -1 when the
/// stored version is not the expected one (nothing written).
const CAS: &str = r"
local have, after, clear = state(KEYS[1])
if have ~= ARGV[1] then return -1 end
if clear then redis.call('DEL', KEYS[1]) end
local v = after + 1
if v > 999999999999999 then v = 1 end
redis.call('HSET', KEYS[1], 'v', string.format('%d', v), 'd', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return v
";

/// Unconditional write, after [`STATE`]. KEYS[1]: the session; ARGV: the bytes, the TTL in
/// milliseconds. Returns the new version (1 for a new key).
const PUT: &str = r"
local _, after, clear = state(KEYS[1])
if clear then redis.call('DEL', KEYS[1]) end
local v = after + 1
if v > 999999999999999 then v = 1 end
redis.call('HSET', KEYS[1], 'v', string.format('%d', v), 'd', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return v
";

/// A stored version as the scripts write it: decimal digits without a leading zero, at most 15
/// of them (exact in Lua's numbers). Anything else is not a session's version.
fn version(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 15 || v[0] == b'0' || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// Whether `e` says that the server cannot be reached or the connection failed (refused, reset,
/// dropped, timed out, not set up), rather than that the server refused or answered one command
/// in a way that does not fit (an error reply, a value of another type): only the first kind
/// leaves the server alone for a while.
fn unreachable(e: &redis::RedisError) -> bool {
    use redis::ErrorKind as K;
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(
            e.kind(),
            K::AuthenticationFailed
                | K::InvalidClientConfig
                | K::ClusterConnectionNotFound
                | K::RESP3NotSupported
        )
}

/// How old the count of stored keys may be before `len` asks for a new one.
const CENSUS_EVERY: Duration = Duration::from_secs(5);

/// The session store in Redis.
pub struct RedisStore {
    conn: ConnectionManager,
    /// For a connection of its own when the manager's fails: the manager retries and only
    /// times out, this one says why (refused, a wrong password, no such database).
    client: redis::Client,
    prefix: String,
    timeout: Duration,
    /// Where it connects, for messages (no credentials).
    addr: String,
    cas: Script,
    put: Script,
    census: Arc<Census>,
    /// Why operations fail without asking the server, while it is left alone.
    paused: Arc<std::sync::Mutex<Option<String>>>,
    /// Whether the background ping that ends the pause is running.
    probing: Arc<AtomicBool>,
    /// When the store was made: the age of a count never made.
    created: Instant,
}

/// How often a server that failed to connect or to answer in time is pinged, in the
/// background, until it answers.
pub const PAUSE: Duration = Duration::from_secs(1);

/// The number of keys under the prefix, counted in the background now and then.
#[derive(Debug, Default)]
struct Census {
    count: AtomicUsize,
    running: AtomicBool,
    /// When the last count ended, whether or not it succeeded.
    last: std::sync::Mutex<Option<Instant>>,
    /// When the last count that succeeded ended: `count` is as of then.
    counted: std::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for RedisStore {
    // The connection's own Debug shows its settings, password included.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("addr", &self.addr)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store at `url` with keys under `prefix`, each operation bounded by `timeout`. Nothing is
    /// connected yet (the first operation connects), so this fails only for a URL that cannot be
    /// read. Must be called inside a Tokio runtime.
    pub fn new(url: &str, prefix: &str, timeout: Duration) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| {
            // The URL may hold a password: the message never repeats it.
            format!("[store] url cannot be read as a Redis URL ({:?})", e.kind())
        })?;
        let addr = client.get_connection_info().addr().to_string();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            // Later than the bound on each operation, which is what callers see; this one clears
            // the connection of commands a stalled server never answered.
            .set_response_timeout(Some(timeout * 2))
            .set_max_delay(Duration::from_secs(2))
            .set_number_of_retries(4);
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| format!("Redis at {addr}: {e}"))?;
        Ok(Self {
            conn,
            client,
            prefix: prefix.to_owned(),
            timeout,
            addr,
            cas: Script::new(&format!("{STATE}{CAS}")),
            put: Script::new(&format!("{STATE}{PUT}")),
            census: Arc::new(Census::default()),
            paused: Arc::new(std::sync::Mutex::new(None)),
            probing: Arc::new(AtomicBool::new(false)),
            created: Instant::now(),
        })
    }

    /// Where it connects (host and port, or the socket's path).
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the server answers (connecting if need be).
    pub async fn ping(&self) -> Result<(), String> {
        self.bounded(None, |mut c| async move {
            redis::cmd("PING").query_async::<String>(&mut c).await
        })
        .await
        .map(drop)
    }

    /// The Redis key of a session key.
    pub fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// The Redis key of a session key as messages show it: the session key as the proxy shows
    /// it everywhere (a long one cut, with a digest), after the prefix.
    fn shown(&self, key: &str) -> String {
        format!(
            "{}{}",
            toolshelf_core::echo::for_log(&self.prefix, 200),
            crate::shown_key(key)
        )
    }

    /// Runs `op` on the connection within the timeout; errors become messages naming the
    /// server, and the Redis key of `key` (the session the operation is about) when the server
    /// answered. A
    /// command sent on a connection that had died (a restarted server, an idle connection
    /// dropped on the way) is sent once more: the manager is reconnecting, and the second try
    /// waits for it. After a failure to connect or to answer in time the server is left alone
    /// until it answers a background ping ([`PAUSE`] apart): operations meanwhile fail at once
    /// instead of each waiting out the timeout. An error about one key or one command (an error
    /// reply such as `WRONGTYPE` or `OOM`, a reply of another type) fails that operation only.
    async fn bounded<T, F, Fut>(&self, key: Option<&str>, op: F) -> Result<T, String>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        {
            let paused = self.paused.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(why) = paused.as_ref() {
                return Err(format!(
                    "Redis at {} not asked: it has not answered since it failed ({why})",
                    self.addr
                ));
            }
        }
        let attempt = async {
            match op(self.conn.clone()).await {
                Err(e) if e.is_connection_dropped() => op(self.conn.clone()).await,
                done => done,
            }
        };
        let why = match tokio::time::timeout(self.timeout, attempt).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) if unreachable(&e) => e.to_string(),
            // The server is there: only this operation failed.
            Ok(Err(e)) => {
                return Err(match key {
                    Some(k) => format!("Redis at {}, key {}: {e}", self.addr, self.shown(k)),
                    None => format!("Redis at {}: {e}", self.addr),
                });
            }
            Err(_) => self.why_no_answer().await,
        };
        *self.paused.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
        self.probe();
        Err(format!("Redis at {}: {why}", self.addr))
    }

    /// Why the connection got no answer in time: the manager only retries and times out, so a
    /// connection of its own asks, and its error (a refused connection, a wrong password, no such
    /// database) is the reason; a server that does not answer that one either did not answer.
    async fn why_no_answer(&self) -> String {
        let own = tokio::time::timeout(self.timeout, async {
            let mut c = self.client.get_multiplexed_async_connection().await?;
            redis::cmd("PING").query_async::<String>(&mut c).await
        })
        .await;
        match own {
            Ok(Err(e)) => e.to_string(),
            _ => format!("no answer within {} ms", self.timeout.as_millis()),
        }
    }

    /// Pings the server every [`PAUSE`] in the background until it answers, then ends the
    /// pause. One probe runs at a time.
    fn probe(&self) {
        if self.probing.swap(true, Ordering::SeqCst) {
            return;
        }
        let (conn, client, paused, probing, timeout, addr) = (
            self.conn.clone(),
            self.client.clone(),
            self.paused.clone(),
            self.probing.clone(),
            self.timeout,
            self.addr.clone(),
        );
        let ping = async move {
            let mut told: Option<String> = None;
            loop {
                tokio::time::sleep(PAUSE).await;
                let mut c = conn.clone();
                let answer =
                    tokio::time::timeout(timeout, redis::cmd("PING").query_async::<String>(&mut c))
                        .await;
                if matches!(answer, Ok(Ok(_))) {
                    *paused.lock().unwrap_or_else(|p| p.into_inner()) = None;
                    probing.store(false, Ordering::SeqCst);
                    return;
                }
                // Why, in the server's or the system's words, from a connection of its own.
                let own = tokio::time::timeout(timeout, async {
                    let mut c = client.get_multiplexed_async_connection().await?;
                    redis::cmd("PING").query_async::<String>(&mut c).await
                })
                .await;
                if let Ok(Err(e)) = own {
                    let why = e.to_string();
                    if told.as_deref() != Some(why.as_str()) {
                        tracing::warn!("Redis at {addr}: {why}");
                        *paused.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
                        told = Some(why);
                    }
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(ping);
            }
            // No runtime to ping from: the next operation asks the server itself.
            Err(_) => {
                *self.paused.lock().unwrap_or_else(|p| p.into_inner()) = None;
                self.probing.store(false, Ordering::SeqCst);
            }
        }
    }

    /// Recounts the keys under the prefix in the background, unless a count is recent or
    /// running (or there is no runtime to run it on).
    fn recount(&self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let last = self.census.last.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| t.elapsed() < CENSUS_EVERY) {
                return;
            }
        }
        if self.census.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let census = self.census.clone();
        let mut conn = self.conn.clone();
        let pattern = format!("{}*", glob_escape(&self.prefix));
        let limit = self.timeout * 10;
        rt.spawn(async move {
            let count = async {
                let mut cursor: u64 = 0;
                let mut n = 0;
                loop {
                    let (next, keys): (u64, Vec<RedisValue>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut conn)
                        .await?;
                    n += keys.len();
                    cursor = next;
                    if cursor == 0 {
                        return redis::RedisResult::Ok(n);
                    }
                }
            };
            if let Ok(Ok(n)) = tokio::time::timeout(limit, count).await {
                census.count.store(n, Ordering::Relaxed);
                *census.counted.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            }
            *census.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            census.running.store(false, Ordering::Release);
        });
    }
}

/// `s` with Redis glob characters escaped, to match it literally.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A session hash's `v` and `d` as `HMGET` reads them, each missing or bytes (`get` reads no
/// fields at all from a key that is not a hash).
type Fields = (Option<Vec<u8>>, Option<Vec<u8>>);

fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl SessionStore for RedisStore {
    /// The session under `key`. A key that holds no usable session (another type, a hash
    /// without the bytes or with a version the scripts do not write) is logged and read as
    /// missing: the conversation's next write replaces it.
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Versioned>> {
        Box::pin(async move {
            let k = self.key(key);
            let k = k.as_str();
            let read: Option<Fields> = self
                .bounded(Some(key), |mut c| async move {
                    let fields = redis::cmd("HMGET")
                        .arg(k)
                        .arg("v")
                        .arg("d")
                        .query_async(&mut c)
                        .await;
                    match fields {
                        Err(e) if e.code() == Some("WRONGTYPE") => Ok(None),
                        fields => fields.map(Some),
                    }
                })
                .await?;
            let unusable = match read {
                Some((None, None)) => return Ok(None),
                Some((Some(v), Some(value))) => match version(&v) {
                    Some(version) => return Ok(Some(Versioned { version, value })),
                    None => format!(
                        "its version is {}",
                        crate::short(&String::from_utf8_lossy(&v))
                    ),
                },
                Some((Some(_), None)) => "it has a version but no bytes".to_owned(),
                Some((None, Some(_))) => "it has bytes but no version".to_owned(),
                None => "it is not a hash".to_owned(),
            };
            tracing::warn!(
                "session store: Redis key {} holds no session ({unusable}); read as missing, \
                 the next write replaces it",
                self.shown(key)
            );
            Ok(None)
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
            let k = self.key(key);
            let expected = expected.map(|v| v.to_string()).unwrap_or_default();
            let (k, expected, value) = (k.as_str(), expected.as_str(), value.as_slice());
            let written: i64 = self
                .bounded(Some(key), |mut c| async move {
                    self.cas
                        .key(k)
                        .arg(expected)
                        .arg(value)
                        .arg(millis(ttl))
                        .invoke_async(&mut c)
                        .await
                })
                .await?;
            Ok(match u64::try_from(written) {
                Ok(v) => Cas::Written(v),
                Err(_) => Cas::Conflict,
            })
        })
    }

    fn put<'a>(&'a self, key: &'a str, value: Vec<u8>, ttl: Duration) -> StoreFuture<'a, u64> {
        Box::pin(async move {
            let k = self.key(key);
            let (k, value) = (k.as_str(), value.as_slice());
            self.bounded(Some(key), |mut c| async move {
                self.put
                    .key(k)
                    .arg(value)
                    .arg(millis(ttl))
                    .invoke_async(&mut c)
                    .await
            })
            .await
        })
    }

    /// The keys under the prefix (sessions and the aliases that lead to them) as last counted:
    /// a `SCAN` in the background at most every few seconds, so the figure may lag.
    fn len(&self) -> usize {
        self.recount();
        self.census.count.load(Ordering::Relaxed)
    }

    /// The age of the last count that succeeded: a few seconds while Redis answers, growing
    /// while it does not.
    fn len_age(&self) -> Option<Duration> {
        let counted = *self
            .census
            .counted
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        Some(counted.unwrap_or(self.created).elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_matched_literally() {
        assert_eq!(glob_escape("ts:*[x]?\\"), "ts:\\*\\[x\\]\\?\\\\");
    }

    #[test]
    fn versions_are_read_as_the_scripts_write_them() {
        assert_eq!(version(b"1"), Some(1));
        assert_eq!(version(b"999999999999999"), Some(999_999_999_999_999));
        for bad in [
            &b""[..],
            b"0",
            b"007",
            b"abc",
            b"-1",
            b"1.5",
            b" 1",
            b"1000000000000000",
        ] {
            assert_eq!(version(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn only_a_failed_connection_leaves_the_server_alone() {
        use std::io::{Error, ErrorKind as Io};
        for kind in [
            Io::ConnectionRefused,
            Io::ConnectionReset,
            Io::BrokenPipe,
            Io::UnexpectedEof,
            Io::TimedOut,
            Io::Other,
        ] {
            let e = redis::RedisError::from(Error::from(kind));
            assert!(unreachable(&e), "{e}");
        }
        let e = redis::RedisError::from((redis::ErrorKind::AuthenticationFailed, "denied"));
        assert!(unreachable(&e), "{e}");
        // Errors about one key or one command: the server answered.
        for (code, detail) in [
            (
                "WRONGTYPE",
                "Operation against a key holding the wrong kind of value",
            ),
            ("OOM", "command not allowed when used memory > 'maxmemory'."),
            ("ERR", "hash value is not an integer"),
            ("NOPERM", "this user has no permissions"),
        ] {
            let e = redis::make_extension_error(code.into(), Some(detail.into()));
            assert!(!unreachable(&e), "{e}");
        }
        for kind in [
            redis::ErrorKind::UnexpectedReturnType,
            redis::ErrorKind::Parse,
            redis::ErrorKind::Extension,
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
        ] {
            let e = redis::RedisError::from((kind, "one reply"));
            assert!(!unreachable(&e), "{e}");
        }
    }

    #[test]
    fn a_bad_url_is_refused_without_repeating_it() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let _enter = rt.enter();
        let e = RedisStore::new("redis://:hunter2@[::1", "t:", Duration::from_secs(1))
            .expect_err("a broken URL");
        assert!(
            e.starts_with("[store] url") && !e.contains("hunter2"),
            "{e}"
        );
    }
}
