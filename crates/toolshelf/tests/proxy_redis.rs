//! Sessions in Redis, against a real `redis-server` (the Debian package; `.ci/run` installs it)
//! on a free loopback port with its files in a scratch directory: first the store itself (the
//! Lua compare-and-set, TTLs, concurrent writers, a server stalled, stopped and restarted), then
//! `toolshelf proxy` replicas sharing it in front of the scripted model API: one conversation
//! alternating between two replicas, a replica killed in the middle of a request, Redis restarted
//! mid-conversation with and without persistence, and two replicas racing on one session.
//!
//! The tests fail, never skip, when `redis-server` is missing.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{HEADERS, ProxyProc, Scratch, Upstream, post, signal, tools};
use serde_json::{Value, json};
use toolshelf_proxy::redis_store::{PAUSE, RedisStore};
use toolshelf_proxy::store::{Cas, SessionStore};

// --- a real redis-server --------------------------------------------------------------------

/// `redis-server` on 127.0.0.1, killed on drop. Without persistence a restart empties it; with
/// it (an append-only file written through on every command) a restart keeps every key.
struct Redis {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    persistent: bool,
}

impl Redis {
    fn start(s: &Scratch, persistent: bool) -> Self {
        let dir = s.0.join("redis");
        std::fs::create_dir_all(&dir).expect("redis dir");
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let mut r = Self {
                child: None,
                port,
                dir: dir.clone(),
                persistent,
            };
            if r.spawn() {
                return r;
            }
        }
        panic!(
            "redis-server did not start on a free port in five tries; its log: {}",
            dir.join("redis.log").display()
        );
    }

    /// Starts the server on `self.port`; false when it exits at once (the port was taken).
    fn spawn(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--dir", &self.dir.display().to_string()])
            .args(["--logfile", "redis.log", "--daemonize", "no", "--save", ""])
            .args(if self.persistent {
                ["--appendonly", "yes", "--appendfsync", "always"]
            } else {
                ["--appendonly", "no", "--appendfsync", "everysec"]
            })
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run redis-server ({e}): these tests need a real Redis, the Debian \
                     package redis-server (apt-get install redis-server; .ci/run installs it)"
                )
            });
        let pid = child.id();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                eprintln!("redis-server on port {} exited: {status}", self.port);
                self.child = None;
                return false;
            }
            // Answering, and it is ours (not another server that got the port first).
            if self
                .cli(&["INFO", "server"])
                .contains(&format!("process_id:{pid}\r"))
            {
                return true;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} does not answer",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// `redis-cli` against it; its output.
    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli (Debian package redis-tools, a dependency of redis-server)");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The keys matching `pattern`, sorted.
    fn keys(&self, pattern: &str) -> Vec<String> {
        let mut keys: Vec<String> = self
            .cli(&["--scan", "--pattern", pattern])
            .lines()
            .map(str::to_owned)
            .collect();
        keys.sort();
        keys
    }

    /// Killed at once, as a crash would.
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Started again on the same port.
    fn restart(&mut self) {
        self.stop();
        assert!(self.spawn(), "redis-server did not start again");
    }

    /// SIGSTOP: the connection stays open and nothing answers.
    fn pause(&self) {
        signal(self.pid(), "STOP");
    }

    fn resume(&self) {
        signal(self.pid(), "CONT");
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

// --- the store itself ----------------------------------------------------------------------------

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

const TTL: Duration = Duration::from_secs(60);

#[test]
fn the_lua_compare_and_set_keeps_one_version_per_session_on_a_real_server() {
    let s = Scratch::new("redis-cas");
    let redis = Redis::start(&s, false);
    runtime().block_on(async {
        let st = RedisStore::new(&redis.url(), "t1:", Duration::from_secs(5)).expect("store");
        assert_eq!(st.get("k").await, Ok(None), "nothing yet");
        let cas = |expected, value: &str| st.compare_and_set("k", expected, value.into(), TTL);
        assert_eq!(cas(None, "a").await, Ok(Cas::Written(1)));
        assert_eq!(
            cas(None, "b").await,
            Ok(Cas::Conflict),
            "someone wrote first"
        );
        assert_eq!(cas(Some(1), "c").await, Ok(Cas::Written(2)));
        assert_eq!(
            cas(Some(1), "d").await,
            Ok(Cas::Conflict),
            "a stale version"
        );
        assert_eq!(
            cas(Some(7), "e").await,
            Ok(Cas::Conflict),
            "a future version"
        );
        let v = st.get("k").await.expect("ok").expect("there");
        assert_eq!((v.version, v.value), (2, b"c".to_vec()));
        assert_eq!(
            st.put("k", b"f".to_vec(), TTL).await,
            Ok(3),
            "put writes over"
        );
        assert_eq!(st.put("new", b"g".to_vec(), TTL).await, Ok(1));
        // Bytes of every value, newlines and NULs included, come back as they went.
        let bytes: Vec<u8> = (0..=255).chain([b'\n', 0, b'\r']).collect();
        assert_eq!(
            st.compare_and_set("bin", None, bytes.clone(), TTL).await,
            Ok(Cas::Written(1))
        );
        assert_eq!(
            st.get("bin").await.expect("ok").expect("there").value,
            bytes
        );
        // Keys live under the prefix, as hashes of the version and the bytes, with the TTL.
        assert_eq!(redis.keys("*"), ["t1:bin", "t1:k", "t1:new"]);
        assert_eq!(redis.cli(&["HGET", "t1:k", "v"]), "3");
        assert_eq!(redis.cli(&["HGET", "t1:k", "d"]), "f");
        let pttl: u64 = redis.cli(&["PTTL", "t1:k"]).parse().expect("a TTL");
        assert!(pttl > 50_000 && pttl <= 60_000, "PTTL {pttl}");
        // A session that expired is gone: a write expecting its version conflicts, a first
        // write starts again at 1.
        assert_eq!(
            st.put("short", b"x".to_vec(), Duration::from_millis(100))
                .await,
            Ok(1)
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(st.get("short").await, Ok(None), "expired");
        assert_eq!(
            st.compare_and_set("short", Some(1), b"y".to_vec(), TTL)
                .await,
            Ok(Cas::Conflict)
        );
        assert_eq!(
            st.compare_and_set("short", None, b"y".to_vec(), TTL).await,
            Ok(Cas::Written(1))
        );
        // Another prefix does not see these keys.
        let other = RedisStore::new(&redis.url(), "t2:", Duration::from_secs(5)).expect("store");
        assert_eq!(other.get("k").await, Ok(None));
    });
}

#[test]
fn concurrent_writers_on_a_real_server_lose_no_update() {
    let s = Scratch::new("redis-concurrent");
    let redis = Redis::start(&s, false);
    let rt = runtime();
    let st = std::sync::Arc::new(
        rt.block_on(async { RedisStore::new(&redis.url(), "c:", Duration::from_secs(5)) })
            .expect("store"),
    );
    // Each writer appends its marks to one list by read, modify, compare-and-set, retrying on a
    // conflict.
    let (writers, each) = (12, 8);
    let conflicts: u64 = rt.block_on(async {
        let tasks: Vec<_> = (0..writers)
            .map(|w| {
                let st = st.clone();
                tokio::spawn(async move {
                    let mut conflicts = 0;
                    for i in 0..each {
                        loop {
                            let got = st.get("list").await.expect("get");
                            let (version, mut list) = match got {
                                Some(v) => (
                                    Some(v.version),
                                    serde_json::from_slice::<Vec<String>>(&v.value)
                                        .expect("a list"),
                                ),
                                None => (None, Vec::new()),
                            };
                            list.push(format!("{w}.{i}"));
                            let bytes = serde_json::to_vec(&list).expect("json");
                            match st.compare_and_set("list", version, bytes, TTL).await {
                                Ok(Cas::Written(_)) => break,
                                Ok(Cas::Conflict) => conflicts += 1,
                                Err(e) => panic!("{e}"),
                            }
                        }
                    }
                    conflicts
                })
            })
            .collect();
        let mut n = 0;
        for t in tasks {
            n += t.await.expect("writer");
        }
        n
    });
    let v = rt.block_on(st.get("list")).expect("get").expect("the list");
    let mut list: Vec<String> = serde_json::from_slice(&v.value).expect("a list");
    assert_eq!(v.version, writers * each, "one version per write that won");
    list.sort();
    list.dedup();
    assert_eq!(
        list.len() as u64,
        writers * each,
        "every write is in the list"
    );
    assert!(
        conflicts > 0,
        "the writers did meet (else this proves nothing)"
    );
}

#[test]
fn a_redis_that_cannot_be_reached_is_named_in_the_systems_words() {
    // Nothing listens there: the connection manager's retries only time out, so a connection
    // of the store's own says why, from the first failure on (the start-up check's too).
    let port = common::closed_port();
    let rt = runtime();
    rt.block_on(async {
        let st = RedisStore::new(
            &format!("redis://127.0.0.1:{port}"),
            "x:",
            Duration::from_millis(300),
        )
        .expect("store");
        let first = st.ping().await.expect_err("nothing there");
        assert!(
            first.contains("Connection refused") && !first.contains("no answer"),
            "{first}"
        );
        let mut last = String::new();
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            last = st.get("k").await.expect_err("still nothing there");
            if last.contains("refused") {
                break;
            }
        }
        assert!(
            last.contains("not asked") && last.contains("Connection refused"),
            "{last}"
        );
    });
}

#[test]
fn a_stalled_stopped_or_restarted_redis_fails_fast_and_the_store_finds_it_again() {
    let s = Scratch::new("redis-outage");
    let mut redis = Redis::start(&s, false);
    let rt = runtime();
    let timeout = Duration::from_millis(300);
    let st = rt
        .block_on(async { RedisStore::new(&redis.url(), "o:", timeout) })
        .expect("store");
    rt.block_on(async {
        assert_eq!(st.put("k", b"kept".to_vec(), TTL).await, Ok(1));

        // Stalled: the operation gives up after the timeout; the next one, within the pause,
        // does not even wait for that.
        redis.pause();
        let t = Instant::now();
        let e = st.get("k").await.expect_err("a stalled server");
        assert!(e.contains("no answer within 300 ms"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        let t = Instant::now();
        let e = st.get("k").await.expect_err("paused");
        assert!(e.contains("not asked"), "{e}");
        assert!(t.elapsed() < timeout, "{:?}", t.elapsed());
        // Still stalled well past the ping interval: still not asked, so an outage costs one
        // timeout in all, however long the requests in between take.
        tokio::time::sleep(PAUSE * 3).await;
        let e = st.get("k").await.expect_err("still paused");
        assert!(e.contains("not asked"), "{e}");
        redis.resume();
        let v = until_answered(&st, "k").await;
        assert_eq!(v.map(|v| v.value), Some(b"kept".to_vec()));

        // Stopped: errors, each bounded by the timeout.
        redis.stop();
        for _ in 0..3 {
            let t = Instant::now();
            let e = st.get("k").await.expect_err("no server");
            assert!(e.starts_with("Redis at 127.0.0.1:"), "{e}");
            assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
            tokio::time::sleep(PAUSE).await;
        }

        // Restarted (empty, without persistence): the store reconnects by itself, and the
        // scripts, which the new server does not know, are loaded again.
        redis.restart();
        assert_eq!(
            until_answered(&st, "k").await,
            None,
            "lost with the restart"
        );
        assert_eq!(
            st.compare_and_set("k", None, b"again".to_vec(), TTL).await,
            Ok(Cas::Written(1))
        );
        assert_eq!(st.put("k", b"more".to_vec(), TTL).await, Ok(2));
    });
    assert_eq!(redis.cli(&["HGET", "o:k", "d"]), "more");
}

#[test]
fn an_error_about_one_key_fails_that_operation_only_and_leaves_the_server_in_use() {
    let s = Scratch::new("redis-oom");
    let redis = Redis::start(&s, false);
    let rt = runtime();
    let st = rt
        .block_on(async { RedisStore::new(&redis.url(), "e:", Duration::from_secs(5)) })
        .expect("store");
    rt.block_on(async {
        assert_eq!(st.put("kept", b"kept".to_vec(), TTL).await, Ok(1));
        assert_eq!(
            st.compare_and_set("other", None, b"a".to_vec(), TTL).await,
            Ok(Cas::Written(1))
        );
        // Out of memory with nothing to evict: every write is refused, with an error reply.
        redis.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
        redis.cli(&["CONFIG", "SET", "maxmemory", "1"]);
        let e = st
            .compare_and_set("other", Some(1), b"b".to_vec(), TTL)
            .await
            .expect_err("out of memory");
        // The server answered: the next operation, on any key, asks it at once.
        let v = st.get("kept").await.expect("not paused").expect("there");
        assert_eq!(v.value, b"kept");
        assert!(e.contains("OOM") && e.contains("key e:other"), "{e}");
        let e = st
            .put("new", b"c".to_vec(), TTL)
            .await
            .expect_err("out of memory");
        assert!(e.contains("OOM") && e.contains("key e:new"), "{e}");
        let v = st.get("kept").await.expect("not paused").expect("there");
        assert_eq!(v.value, b"kept");
        redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);
        assert_eq!(
            st.compare_and_set("other", Some(1), b"b".to_vec(), TTL)
                .await,
            Ok(Cas::Written(2))
        );
    });
}

#[test]
fn a_key_holding_no_session_reads_as_missing_and_the_next_write_replaces_it() {
    let s = Scratch::new("redis-spoiled");
    let redis = Redis::start(&s, false);
    let rt = runtime();
    let st = rt
        .block_on(async { RedisStore::new(&redis.url(), "b:", Duration::from_secs(5)) })
        .expect("store");
    let spoil: [(&str, &[&str]); 6] = [
        ("string", &["SET", "b:string", "garbage"]),
        ("list", &["RPUSH", "b:list", "x"]),
        ("letters", &["HSET", "b:letters", "v", "abc", "d", "x"]),
        ("zeros", &["HSET", "b:zeros", "v", "007", "d", "x"]),
        ("unversioned", &["HSET", "b:unversioned", "d", "x"]),
        (
            "huge",
            &["HSET", "b:huge", "v", "99999999999999999999", "d", "x"],
        ),
    ];
    rt.block_on(async {
        assert_eq!(st.put("kept", b"kept".to_vec(), TTL).await, Ok(1));
        for (name, how) in spoil {
            redis.cli(how);
            assert_eq!(st.get(name).await, Ok(None), "{name}: no session");
            // Nothing else is held up by it.
            let v = st.get("kept").await.expect("not paused").expect("there");
            assert_eq!(v.value, b"kept");
            assert_eq!(
                st.compare_and_set(name, None, b"new".to_vec(), TTL).await,
                Ok(Cas::Written(1)),
                "{name}: written over"
            );
            let v = st.get(name).await.expect("ok").expect("there");
            assert_eq!((v.version, v.value), (1, b"new".to_vec()), "{name}");
            assert_eq!(
                st.compare_and_set(name, Some(1), b"newer".to_vec(), TTL)
                    .await,
                Ok(Cas::Written(2)),
                "{name}"
            );
            // An unconditional write replaces it too.
            redis.cli(&["DEL", &format!("b:{name}")]);
            redis.cli(how);
            assert_eq!(st.put(name, b"put".to_vec(), TTL).await, Ok(1), "{name}");
            assert_eq!(
                st.get(name).await.expect("ok").map(|v| v.value),
                Some(b"put".to_vec())
            );
        }
    });
    assert_eq!(redis.cli(&["TYPE", "b:string"]), "hash");
}

#[test]
fn a_session_that_lost_its_bytes_is_written_again_and_its_version_goes_on() {
    let s = Scratch::new("redis-no-bytes");
    let redis = Redis::start(&s, false);
    let rt = runtime();
    let st = rt
        .block_on(async { RedisStore::new(&redis.url(), "n:", Duration::from_secs(5)) })
        .expect("store");
    rt.block_on(async {
        assert_eq!(
            st.compare_and_set("k", None, b"a".to_vec(), TTL).await,
            Ok(Cas::Written(1))
        );
        assert_eq!(
            st.compare_and_set("k", Some(1), b"b".to_vec(), TTL).await,
            Ok(Cas::Written(2))
        );
        redis.cli(&["HDEL", "n:k", "d"]);
        redis.cli(&["PERSIST", "n:k"]);
        assert_eq!(st.get("k").await, Ok(None), "no session without its bytes");
        // Read as none, it is written as none, after the version it had.
        assert_eq!(
            st.compare_and_set("k", None, b"c".to_vec(), TTL).await,
            Ok(Cas::Written(3))
        );
        let v = st.get("k").await.expect("ok").expect("there");
        assert_eq!((v.version, v.value), (3, b"c".to_vec()));
        // A writer that read it before it lost its bytes has no session to write over: it
        // conflicts, reads none and writes that.
        redis.cli(&["HDEL", "n:k", "d"]);
        assert_eq!(
            st.compare_and_set("k", Some(3), b"stale".to_vec(), TTL)
                .await,
            Ok(Cas::Conflict)
        );
        assert_eq!(st.get("k").await, Ok(None));
        assert_eq!(
            st.compare_and_set("k", None, b"d".to_vec(), TTL).await,
            Ok(Cas::Written(4))
        );
        redis.cli(&["HDEL", "n:k", "d"]);
        assert_eq!(st.put("k", b"e".to_vec(), TTL).await, Ok(5));
    });
    let pttl: u64 = redis.cli(&["PTTL", "n:k"]).parse().expect("a TTL");
    assert!(pttl > 50_000 && pttl <= 60_000, "PTTL {pttl}");
}

/// A session at the largest version the store reads is written over at version 1, not lost to
/// a version it could not read back.
#[test]
fn a_session_past_the_largest_version_goes_on_at_version_one() {
    let s = Scratch::new("redis-top-version");
    let redis = Redis::start(&s, false);
    let rt = runtime();
    let st = rt
        .block_on(async { RedisStore::new(&redis.url(), "t:", Duration::from_secs(5)) })
        .expect("store");
    rt.block_on(async {
        for (key, write) in [("cas", true), ("put", false)] {
            let full = format!("t:{key}");
            redis.cli(&["HSET", &full, "v", "999999999999999", "d", "a"]);
            let v = st
                .get(key)
                .await
                .expect("ok")
                .expect("read at the largest version");
            assert_eq!(v.version, 999_999_999_999_999);
            let written = if write {
                let cas = st.compare_and_set(key, Some(v.version), b"b".to_vec(), TTL);
                assert_eq!(cas.await, Ok(Cas::Written(1)));
                1
            } else {
                st.put(key, b"b".to_vec(), TTL).await.expect("put")
            };
            assert_eq!(written, 1, "{key}");
            let v = st.get(key).await.expect("ok").expect("still a session");
            assert_eq!((v.version, v.value), (1, b"b".to_vec()), "{key}");
        }
    });
}

/// Reads `key` until the store answers (a reconnection may take a few tries); fails after 30 s.
async fn until_answered(st: &RedisStore, key: &str) -> Option<toolshelf_proxy::store::Versioned> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match st.get(key).await {
            Ok(v) => return v,
            Err(e) => {
                assert!(Instant::now() < deadline, "the store never answered: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

// --- proxy replicas sharing it -------------------------------------------------------------------

const SYSTEM: &str = "You help.";

fn request(messages: &[Value]) -> Value {
    json!({"model": "m", "max_tokens": 256, "system": SYSTEM, "tools": tools(),
           "messages": messages})
}

/// Appends the answer and, for each tool call, a result, as a client would.
fn take(messages: &mut Vec<Value>, answer: &Value) {
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    let results: Vec<Value> = answer["content"]
        .as_array()
        .expect("content")
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| json!({"type": "tool_result", "tool_use_id": b["id"], "content": format!("result of {}", b["name"])}))
        .collect();
    if !results.is_empty() {
        messages.push(json!({"role": "user", "content": results}));
    }
}

/// A client turn through `proxy`: sends the conversation, takes the answer; returns it.
fn turn(proxy: &ProxyProc, messages: &mut Vec<Value>, headers: &[(&str, &str)]) -> Value {
    let (status, answer) = post(
        &format!("{}/v1/messages", proxy.url),
        &request(messages),
        headers,
    );
    assert_eq!(status, 200, "{answer}\nproxy log:\n{}", proxy.log());
    take(messages, &answer);
    answer
}

fn calls(answer: &Value) -> Vec<(String, Value)> {
    answer["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| {
                    (
                        b["name"].as_str().unwrap_or("").to_owned(),
                        b["input"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn read_call(path: &str) -> Vec<(String, Value)> {
    vec![("mcp__fs__read_file".to_owned(), json!({"path": path}))]
}

/// Each request's conversation starts with the previous one's, entry for entry, byte for byte,
/// and the tool list and system prompt never change.
fn assert_prefix_kept(turns: &[Value]) {
    for (n, pair) in turns.windows(2).enumerate() {
        let (a, b) = (&pair[0]["body"], &pair[1]["body"]);
        assert_eq!(
            a["tools"].to_string(),
            b["tools"].to_string(),
            "the tool list changed at request {}",
            n + 1
        );
        assert_eq!(a["system"], b["system"]);
        let (ma, mb) = (
            a["messages"].as_array().expect("messages"),
            b["messages"].as_array().expect("messages"),
        );
        assert!(mb.len() > ma.len(), "the conversation did not grow");
        for (i, (x, y)) in ma.iter().zip(mb).enumerate() {
            assert_eq!(
                x.to_string(),
                y.to_string(),
                "messages[{i}] changed between upstream requests {n} and {}",
                n + 1
            );
        }
    }
}

/// Whether the upstream conversation holds a `tool_search` call (a round the proxy answered).
fn has_search_round(turn: &Value) -> bool {
    turn["body"]["messages"]
        .to_string()
        .contains(r#""name":"tool_search""#)
}

fn store_config(redis: &Redis, prefix: &str) -> String {
    format!(
        "[store]\nurl = \"{}\"\nkey_prefix = \"{prefix}\"\ntimeout_ms = 300\n",
        redis.url()
    )
}

/// A replica with its own scratch directory (its own log), sharing `redis`.
fn replica(tag: &str, upstream: &Upstream, redis: &Redis, prefix: &str) -> (Scratch, ProxyProc) {
    let s = Scratch::new(tag);
    let p = ProxyProc::start(&s, &upstream.url(), &store_config(redis, prefix), &[]);
    assert!(
        p.log().contains(&format!(
            "sessions in Redis at 127.0.0.1:{}, keys under \"{prefix}\"",
            redis.port
        )),
        "{}",
        p.log()
    );
    (s, p)
}

fn totals(p: &ProxyProc) -> Value {
    p.status()["totals"].clone()
}

/// search, read notes.txt (for the client), text; then read other.txt without a new search,
/// which only works if the activation made on the first request is known, and text. Probes
/// (another system prompt) get a side answer and consume no step.
fn search_then_read_script() -> Value {
    json!({"main_system": [SYSTEM], "steps": [
        {"text": "Looking.", "tool_uses": [{"name": "tool_search", "input": {"queries": ["read file"]}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "notes.txt"}}}]},
        {"text": "Read it."},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "other.txt"}}}]},
        {"text": "Read that too."}
    ]})
}

#[test]
fn two_replicas_share_one_conversation_with_requests_alternating_between_them() {
    let s = Scratch::new("redis-share");
    let redis = Redis::start(&s, false);
    let upstream = Upstream::start(&s, &search_then_read_script());
    let (_sa, a) = replica("redis-share-a", &upstream, &redis, "share:");
    let (_sb, b) = replica("redis-share-b", &upstream, &redis, "share:");
    let mut messages = vec![json!({"role": "user", "content": "read notes.txt"})];
    assert_eq!(
        calls(&turn(&a, &mut messages, &HEADERS)),
        read_call("notes.txt")
    );
    assert_eq!(
        turn(&b, &mut messages, &HEADERS)["content"][0]["text"],
        "Read it."
    );
    messages.push(json!({"role": "user", "content": "and other.txt"}));
    assert_eq!(
        calls(&turn(&a, &mut messages, &HEADERS)),
        read_call("other.txt"),
        "the activation made through one replica holds on the other: no new search"
    );
    assert_eq!(
        turn(&b, &mut messages, &HEADERS)["content"][0]["text"],
        "Read that too."
    );
    let turns = upstream.played(5);
    assert_prefix_kept(&turns);
    assert!(
        has_search_round(&turns[2]),
        "replica b put back the search round replica a answered"
    );
    for p in [&a, &b] {
        let t = totals(p);
        assert_eq!(
            (&t["rewritten"], &t["prefix_breaks"], &t["store_errors"]),
            (&json!(2), &json!(0), &json!(0)),
            "{t}"
        );
    }
    // One session (and the alias that finds it when the client's tools change), written once
    // per request, by whichever replica served it.
    let keys = redis.keys("share:*");
    assert_eq!(keys.len(), 2, "{keys:?}");
    let session = keys
        .iter()
        .find(|k| k.starts_with("share:r:"))
        .expect("the session");
    assert!(keys.iter().any(|k| k.starts_with("share:a:")), "{keys:?}");
    assert_eq!(redis.cli(&["HGET", session, "v"]), "4");
}

/// A session whose bytes are not a session (damaged, or of another layout) costs its
/// conversation that one request's session, and the warning names its key.
#[test]
fn a_damaged_session_is_named_in_the_warning_and_written_over() {
    let s = Scratch::new("redis-damaged");
    let redis = Redis::start(&s, false);
    let upstream = Upstream::start(&s, &search_then_read_script());
    let (_sp, p) = replica("redis-damaged-p", &upstream, &redis, "dm:");
    redis.cli(&["HSET", "dm:h:spoilt-session", "v", "3", "d", "not json"]);
    let mut messages = vec![json!({"role": "user", "content": "read notes.txt"})];
    let headers = [("x-toolshelf-session", "spoilt-session")];
    assert_eq!(
        calls(&turn(&p, &mut messages, &headers)),
        read_call("notes.txt")
    );
    let log = p.log();
    assert!(
        log.contains("ignoring the stored session h:spoilt-session: it is damaged ("),
        "{log}"
    );
    assert_eq!(redis.cli(&["HGET", "dm:h:spoilt-session", "v"]), "4");
}

#[test]
fn a_replica_killed_in_the_middle_of_a_request_leaves_the_conversation_to_the_other() {
    let s = Scratch::new("redis-kill");
    let redis = Redis::start(&s, false);
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"queries": ["read file"]}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "notes.txt"}}}]},
        // Replica a dies while the upstream thinks about this one.
        {"text": "never delivered", "hang": 30},
        {"text": "Read it."},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "other.txt"}}}]},
        {"text": "Read that too."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let (_sa, a) = replica("redis-kill-a", &upstream, &redis, "kill:");
    let (_sb, b) = replica("redis-kill-b", &upstream, &redis, "kill:");
    let mut messages = vec![json!({"role": "user", "content": "read notes.txt"})];
    assert_eq!(
        calls(&turn(&a, &mut messages, &HEADERS)),
        read_call("notes.txt")
    );
    let url = format!("{}/v1/messages", a.url);
    let body = request(&messages);
    let lost = std::thread::spawn(move || post(&url, &body, &HEADERS));
    let deadline = Instant::now() + Duration::from_secs(60);
    while upstream.turns().len() < 3 {
        assert!(
            Instant::now() < deadline,
            "the request never reached the upstream"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(a); // SIGKILL
    let (status, _) = lost.join().expect("client thread");
    assert_eq!(status, 0, "the client saw its connection fail");
    // The client sends the same request again, to the replica left.
    assert_eq!(
        turn(&b, &mut messages, &HEADERS)["content"][0]["text"],
        "Read it."
    );
    messages.push(json!({"role": "user", "content": "and other.txt"}));
    assert_eq!(
        calls(&turn(&b, &mut messages, &HEADERS)),
        read_call("other.txt")
    );
    turn(&b, &mut messages, &HEADERS);
    let turns = upstream.played(6);
    assert_eq!(
        turns[2]["raw"], turns[3]["raw"],
        "the retry on the other replica sent the upstream the very same bytes"
    );
    let kept: Vec<Value> = turns
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 2)
        .map(|(_, t)| t.clone())
        .collect();
    assert_prefix_kept(&kept);
    let t = totals(&b);
    assert_eq!(
        (&t["prefix_breaks"], &t["store_errors"]),
        (&json!(0), &json!(0)),
        "{t}"
    );
}

/// A request that the upstream answers without consuming a scripted step (another system
/// prompt), in session `name`: it reaches the store like any other.
fn probe(proxy: &ProxyProc, name: &str) -> u16 {
    let body = json!({"model": "m", "max_tokens": 16, "system": "probe", "tools": tools(),
                      "messages": [{"role": "user", "content": "ping"}]});
    let mut headers = HEADERS.to_vec();
    headers.push(("x-toolshelf-session", name));
    post(&format!("{}/v1/messages", proxy.url), &body, &headers).0
}

/// Probes through `proxy` until the probe's session lands in Redis; fails after 30 s.
fn until_stored(proxy: &ProxyProc, redis: &Redis, prefix: &str, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert_eq!(probe(proxy, name), 200, "{}", proxy.log());
        if redis.cli(&["EXISTS", &format!("{prefix}h:{name}")]) == "1" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the replica never wrote to Redis again; its log:\n{}",
            proxy.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The first messages of the two conversations [`race`] sends.
const RACERS: [&str; 2] = ["conversation x", "conversation y"];

/// The headers of requests in the session `shared`.
fn shared() -> Vec<(&'static str, &'static str)> {
    let mut headers = HEADERS.to_vec();
    headers.push(("x-toolshelf-session", "shared"));
    headers
}

/// Two conversations of the session `shared` ([`RACERS`]) sent at once, one through each
/// replica: the conversations with their answers.
fn race(a: &ProxyProc, b: &ProxyProc) -> Vec<Vec<Value>> {
    let headers = shared();
    let mut convs: Vec<Vec<Value>> = RACERS
        .iter()
        .map(|n| vec![json!({"role": "user", "content": n})])
        .collect();
    let racing: Vec<_> = [a, b]
        .iter()
        .zip(&convs)
        .map(|(p, conv)| {
            let (url, body, h) = (
                format!("{}/v1/messages", p.url),
                request(conv),
                headers.clone(),
            );
            std::thread::spawn(move || post(&url, &body, &h))
        })
        .collect();
    for (t, conv) in racing.into_iter().zip(&mut convs) {
        let (status, answer) = t.join().expect("client thread");
        assert_eq!(status, 200, "{answer}");
        take(conv, &answer);
    }
    convs
}

fn store_warnings(p: &ProxyProc) -> usize {
    p.log()
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("session store:"))
        .count()
}

/// The `prefix=` verdicts of a replica's request log lines, in order: those of the probes'
/// sessions (see [`probe`]) when `probes`, else those of every other request.
fn verdicts(p: &ProxyProc, probes: bool) -> Vec<String> {
    p.log()
        .lines()
        .filter(|l| l.contains("toolshelf::proxy: anthropic session="))
        .filter(|l| l.contains(" session=h:probe-") == probes)
        .filter_map(|l| l.rsplit_once(" prefix=").map(|(_, v)| v.trim().to_owned()))
        .collect()
}

/// The `prefix=` verdicts of a replica's requests but its probes', in order.
fn prefix_verdicts(p: &ProxyProc) -> Vec<String> {
    verdicts(p, false)
}

#[test]
fn redis_stalled_or_restarted_without_persistence_mid_conversation_degrades_and_recovers() {
    let s = Scratch::new("redis-restart");
    let mut redis = Redis::start(&s, false);
    let script = json!({"main_system": [SYSTEM], "steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"queries": ["read file"]}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "notes.txt"}}}]},
        {"text": "Read it."},
        {"text": "Still here."},
        // The session, with its activations, went with the restart: this call is refused
        // (schema attached), and the model calls again.
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "other.txt"}}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "other.txt"}}}]},
        {"text": "Read that too."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let (_sa, a) = replica("redis-restart-a", &upstream, &redis, "rs:");
    let (_sb, b) = replica("redis-restart-b", &upstream, &redis, "rs:");
    let mut messages = vec![json!({"role": "user", "content": "read notes.txt"})];
    assert_eq!(
        calls(&turn(&a, &mut messages, &HEADERS)),
        read_call("notes.txt")
    );

    // Stalled: the request is answered while Redis still does not move.
    redis.pause();
    let answer = turn(&b, &mut messages, &HEADERS);
    assert_eq!(answer["content"][0]["text"], "Read it.");
    redis.resume();
    let stalled = totals(&b)["store_errors"].as_u64().unwrap_or(0);
    assert!(stalled >= 1, "{}", totals(&b));
    // Its session unread, the request's prefix cannot be judged: not a session's first.
    assert_eq!(prefix_verdicts(&b), ["unknown"], "{}", b.log());

    // Stopped: requests go on, as if the session were missing.
    redis.stop();
    messages.push(json!({"role": "user", "content": "still there?"}));
    assert_eq!(
        turn(&a, &mut messages, &HEADERS)["content"][0]["text"],
        "Still here."
    );
    let down = totals(&a)["store_errors"].as_u64().unwrap_or(0);
    assert!(down >= 2, "the read and the write failed: {}", totals(&a));
    assert_eq!(prefix_verdicts(&a), ["first", "unknown"], "{}", a.log());
    assert_eq!(totals(&a)["prefix_breaks"], 0, "{}", totals(&a));
    assert_eq!(
        store_warnings(&a),
        1,
        "{down} failures, one line in the log:\n{}",
        a.log()
    );

    // Restarted, empty: each replica writes to it again by itself.
    redis.restart();
    until_stored(&a, &redis, "rs:", "probe-a");
    until_stored(&b, &redis, "rs:", "probe-b");
    // The recovery is said once a read and a write have both succeeded since the failures: a
    // probe whose read still timed out while Redis came back has written its session all the
    // same, so the next probe may be the one to say it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !a.log().contains("session store: answering again") {
        assert!(Instant::now() < deadline, "{}", a.log());
        assert_eq!(probe(&a, "probe-a"), 200, "{}", a.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    messages.push(json!({"role": "user", "content": "and other.txt"}));
    assert_eq!(
        calls(&turn(&b, &mut messages, &HEADERS)),
        read_call("other.txt")
    );
    turn(&a, &mut messages, &HEADERS);
    // The request after the restart found no session for a conversation with earlier turns:
    // missing, not a session's first (as the probe's, a conversation of its own, is); the one
    // after it continued the new session.
    assert_eq!(prefix_verdicts(&b), ["unknown", "missing"], "{}", b.log());
    // A probe whose read still timed out while Redis came back could not judge its prefix; the
    // one that found Redis answering began its session.
    let probes = verdicts(&b, true);
    assert_eq!(
        probes.last().map(String::as_str),
        Some("first"),
        "{}",
        b.log()
    );
    assert!(
        probes[..probes.len() - 1].iter().all(|v| v == "unknown"),
        "{}",
        b.log()
    );
    assert_eq!(totals(&b)["sessions_missing"], 1, "{}", totals(&b));
    assert_eq!(prefix_verdicts(&a).last().map(String::as_str), Some("kept"));
    let turns = upstream.played(7);
    // What the outage cost, honestly: the requests it touched (Redis stalled, then stopped)
    // were sent without the search round, their session missing, so the prefix broke there; the
    // restart lost the session, so the activation had to be made again (a refusal that carries
    // the schema).
    assert!(has_search_round(&turns[1]));
    assert!(!has_search_round(&turns[2]), "the session was missing");
    assert!(!has_search_round(&turns[3]), "the session was missing");
    assert!(
        turns[5]["tool_results"]
            .as_array()
            .and_then(|r| r.last())
            .is_some_and(|r| r["is_error"] == true),
        "the first call after the restart was refused: {}",
        turns[5]["tool_results"]
    );
    // After the restart, the store carries the conversation again: requests 4 and 5 went
    // through different replicas and the prefix held.
    assert_prefix_kept(&turns[4..]);
    let session = redis.keys("rs:r:*");
    assert_eq!(session.len(), 1, "{session:?}");
    assert_eq!(redis.cli(&["HGET", &session[0], "v"]), "2");
}

#[test]
fn redis_restarted_with_persistence_mid_conversation_loses_nothing() {
    let s = Scratch::new("redis-persist");
    let mut redis = Redis::start(&s, true);
    let upstream = Upstream::start(&s, &search_then_read_script());
    let (_sa, a) = replica("redis-persist-a", &upstream, &redis, "ps:");
    let (_sb, b) = replica("redis-persist-b", &upstream, &redis, "ps:");
    let mut messages = vec![json!({"role": "user", "content": "read notes.txt"})];
    assert_eq!(
        calls(&turn(&a, &mut messages, &HEADERS)),
        read_call("notes.txt")
    );
    turn(&b, &mut messages, &HEADERS);
    redis.restart();
    until_stored(&a, &redis, "ps:", "probe-a");
    messages.push(json!({"role": "user", "content": "and other.txt"}));
    assert_eq!(
        calls(&turn(&a, &mut messages, &HEADERS)),
        read_call("other.txt"),
        "the activation survived the restart"
    );
    turn(&b, &mut messages, &HEADERS);
    let turns = upstream.played(5);
    assert_prefix_kept(&turns);
}

#[test]
fn two_replicas_racing_on_one_session_lose_neither_recorded_rounds_nor_activations() {
    let s = Scratch::new("redis-race");
    let redis = Redis::start(&s, false);
    // Two conversations in one named session, one through each replica at the same moment: the
    // upstream answers neither first round before both requests have reached it, so both have
    // read the session before either writes it. The first request to arrive loads read_file,
    // the other write_file.
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["mcp__fs__read_file"]}}], "await_main": 2},
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["mcp__fs__write_file"]}}], "await_main": 2},
        // Distinct texts: a text-only turn is recorded by a digest of its text.
        {"text": "Found one."},
        {"text": "Found two."},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "r"}}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__write_file", "params": {"path": "w", "content": "c"}}}]}
    ]});
    let upstream = Upstream::start(&s, &script);
    let (_sa, a) = replica("redis-race-a", &upstream, &redis, "race:");
    let (_sb, b) = replica("redis-race-b", &upstream, &redis, "race:");
    let (names, headers) = (RACERS, shared());
    let mut convs = race(&a, &b);
    let conflicts = |p: &ProxyProc| totals(p)["store_conflicts"].as_u64().unwrap_or(0);
    assert_eq!(
        conflicts(&a) + conflicts(&b),
        1,
        "the second write met the first: {} {}",
        totals(&a),
        totals(&b)
    );
    assert_eq!(redis.cli(&["HGET", "race:h:shared", "v"]), "2");
    // Each conversation goes on through the other replica and calls the tool it loaded, with no
    // new search: the first to arrive (read_file) first.
    let first = upstream
        .turns()
        .iter()
        .find(|t| t["step"] == 0)
        .map(|t| t["body"]["messages"][0]["content"].clone())
        .expect("step 0");
    let order: Vec<usize> = if first == names[0] {
        vec![0, 1]
    } else {
        vec![1, 0]
    };
    let expected = [
        read_call("r"),
        vec![(
            "mcp__fs__write_file".to_owned(),
            json!({"path": "w", "content": "c"}),
        )],
    ];
    for (k, &i) in order.iter().enumerate() {
        let other = if i == 0 { &b } else { &a };
        convs[i].push(json!({"role": "user", "content": "next"}));
        assert_eq!(
            calls(&turn(other, &mut convs[i], &headers)),
            expected[k],
            "{}: the tool it loaded is still loaded",
            names[i]
        );
    }
    let turns = upstream.played(6);
    for c in names {
        let mine: Vec<Value> = turns
            .iter()
            .filter(|t| t["body"]["messages"][0]["content"] == c)
            .cloned()
            .collect();
        assert_eq!(mine.len(), 3, "{c}: two rounds, then the next request");
        assert!(
            has_search_round(&mine[2]),
            "{c}: its search round was kept through the race"
        );
        assert_prefix_kept(&mine);
    }
}

#[test]
fn sessions_spoiled_in_redis_cost_no_other_conversation_and_are_written_over() {
    let s = Scratch::new("redis-spoiled-proxy");
    let redis = Redis::start(&s, false);
    let upstream = Upstream::start(&s, &search_then_read_script());
    let (_sa, a) = replica("redis-spoiled-a", &upstream, &redis, "sp:");
    let mut messages = vec![json!({"role": "user", "content": "read notes.txt"})];
    assert_eq!(
        calls(&turn(&a, &mut messages, &HEADERS)),
        read_call("notes.txt")
    );
    // Three other sessions on this replica, each spoiled its own way: a key of another type, a
    // version the proxy does not write, a hash that lost its bytes (and its TTL).
    let spoiled = ["other-type", "bad-version", "no-bytes"];
    for name in spoiled {
        assert_eq!(probe(&a, name), 200);
    }
    redis.cli(&["DEL", "sp:h:other-type"]);
    redis.cli(&["SET", "sp:h:other-type", "garbage"]);
    redis.cli(&["HSET", "sp:h:bad-version", "v", "abc"]);
    redis.cli(&["HDEL", "sp:h:no-bytes", "d"]);
    redis.cli(&["PERSIST", "sp:h:no-bytes"]);
    // Their next requests, then at once this conversation's: its session is read as ever.
    for name in spoiled {
        assert_eq!(probe(&a, name), 200);
    }
    assert_eq!(
        turn(&a, &mut messages, &HEADERS)["content"][0]["text"],
        "Read it."
    );
    // Each spoiled session was written over by its next request and is read again.
    for name in spoiled {
        assert_eq!(probe(&a, name), 200);
    }
    messages.push(json!({"role": "user", "content": "and other.txt"}));
    assert_eq!(
        calls(&turn(&a, &mut messages, &HEADERS)),
        read_call("other.txt"),
        "the activation held: no new search"
    );
    turn(&a, &mut messages, &HEADERS);
    assert_prefix_kept(&upstream.played(5));
    let t = totals(&a);
    assert_eq!(
        (
            &t["prefix_breaks"],
            &t["store_errors"],
            &t["store_conflicts"]
        ),
        (&json!(0), &json!(0), &json!(0)),
        "{t}\n{}",
        a.log()
    );
    // Written over once, then once more on top of that; a hash that lost its bytes keeps
    // counting its versions.
    for (name, v) in [("other-type", "2"), ("bad-version", "2"), ("no-bytes", "3")] {
        let key = format!("sp:h:{name}");
        assert_eq!(redis.cli(&["HGET", &key, "v"]), v, "{key}");
        assert_eq!(redis.cli(&["HEXISTS", &key, "d"]), "1", "{key}");
        let ttl: i64 = redis.cli(&["TTL", &key]).parse().expect("a TTL");
        assert!(ttl > 0, "{key}: TTL {ttl}");
        let warned = a
            .log()
            .lines()
            .filter(|l| l.contains("WARN") && l.contains(&key) && l.contains("holds no session"))
            .count();
        assert_eq!(warned, 1, "{key}: one warning\n{}", a.log());
    }
}

#[test]
fn two_conversations_defining_one_name_at_once_keep_one_definition_and_the_other_is_told() {
    let s = Scratch::new("redis-define-race");
    let redis = Redis::start(&s, false);
    let define = |description: &str| {
        json!({"tool_uses": [{"name": "defer_execute", "input": {"tool_name": "tool_define", "params": {
            "name": "shout", "description": description,
            "schema": {"type": "object", "properties": {"text": {"type": "string"}}},
            "script": "def run(params):\n    return 1\n"}}}]})
    };
    // Both conversations load the session before either writes it (see the race above), and
    // each defines `shout` its own way.
    let script = json!({"steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["tool_define"]}}], "await_main": 2},
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["tool_define"]}}], "await_main": 2},
        define("Shout ONE."),
        define("Shout TWO."),
        {"text": "Defined one."},
        {"text": "Defined two."},
        {"text": "Next x."},
        {"text": "Next y."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let config = format!(
        "{}[proxy]\nmax_search_rounds = 8\n[authoring]\nenabled = true\n",
        store_config(&redis, "def:")
    );
    let (sa, sb) = (
        Scratch::new("redis-define-a"),
        Scratch::new("redis-define-b"),
    );
    let a = ProxyProc::start(&sa, &upstream.url(), &config, &[]);
    let b = ProxyProc::start(&sb, &upstream.url(), &config, &[]);
    let headers = shared();
    let mut convs = race(&a, &b);
    for (conv, p) in convs.iter_mut().zip([&b, &a]) {
        conv.push(json!({"role": "user", "content": "next"}));
        turn(p, conv, &headers);
    }
    let turns = upstream.played(8);
    let told: Vec<&Value> = turns[6..]
        .iter()
        .filter(|t| {
            t["body"]["messages"]
                .to_string()
                .contains("replaced by another conversation")
        })
        .collect();
    assert_eq!(
        told.len(),
        1,
        "exactly the losing conversation is told: {turns:#?}"
    );
    let text = told[0]["body"]["messages"].to_string();
    let (mine, theirs) = if text.contains("\"description\":\"Shout ONE.\"") {
        ("ONE", "TWO")
    } else {
        ("TWO", "ONE")
    };
    assert!(
        text.contains(&format!("is now: Shout {theirs}."))
            && !text.contains(&format!("is now: Shout {mine}.")),
        "{text}"
    );
}

/// The log lines about the session store, warnings and the rest, in order.
fn store_lines(p: &ProxyProc) -> Vec<String> {
    p.log()
        .lines()
        .filter(|l| l.contains("session store:"))
        .map(str::to_owned)
        .collect()
}

/// A Redis that answers reads but refuses every write (an ACL user without the scripts'
/// `EVALSHA`; `OOM` under `noeviction` fails the same way) is not "answering again" at each
/// read: the log says that writes fail, once per 30 s with the failures since (none lost to the
/// reads in between), and that Redis answers again only once a write succeeds.
#[test]
fn a_redis_refusing_every_write_is_reported_as_failing_writes_with_the_count_kept() {
    let s = Scratch::new("redis-acl");
    let redis = Redis::start(&s, false);
    let acl = [
        "ACL", "SETUSER", "limited", "on", ">pw", "~*", "+@all", "-evalsha", "-eval",
    ];
    assert_eq!(redis.cli(&acl), "OK");
    let upstream = Upstream::start(&s, &search_then_read_script());
    let sp = Scratch::new("redis-acl-p");
    let config = format!(
        "[store]\nurl = \"redis://limited:pw@127.0.0.1:{}\"\nkey_prefix = \"acl:\"\ntimeout_ms = 300\n",
        redis.port
    );
    let p = ProxyProc::start(&sp, &upstream.url(), &config, &[]);
    assert_eq!(probe(&p, "acl"), 200, "{}", p.log());
    let deadline = Instant::now() + Duration::from_secs(10);
    while store_warnings(&p) == 0 {
        assert!(Instant::now() < deadline, "no warning: {}", p.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let said = Instant::now();
    for _ in 0..3 {
        assert_eq!(probe(&p, "acl"), 200, "{}", p.log());
    }
    assert_eq!(totals(&p)["store_errors"], 4, "{}", totals(&p));
    let lines = store_lines(&p);
    assert_eq!(
        lines.len(),
        1,
        "four failed writes between answered reads: one line, no recovery: {lines:#?}"
    );
    assert!(
        lines[0].contains("WARN")
            && lines[0].contains("writing a session failed: Redis at 127.0.0.1:")
            && lines[0].contains("key acl:h:acl: NoPerm: this user has no permissions")
            && !lines[0].contains("as if"),
        "{lines:#?}"
    );
    // The next report, 30 s after the first, counts the writes that failed since.
    std::thread::sleep(
        (said + Duration::from_millis(30_300)).saturating_duration_since(Instant::now()),
    );
    assert_eq!(probe(&p, "acl"), 200, "{}", p.log());
    let lines = store_lines(&p);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[1].contains("WARN")
            && lines[1].contains("(3 more failures since the last report: 3 writes)"),
        "{lines:#?}"
    );
    // Writes allowed again: the first that succeeds ends the run.
    assert_eq!(
        redis.cli(&["ACL", "SETUSER", "limited", "+evalsha", "+eval"]),
        "OK"
    );
    assert_eq!(probe(&p, "acl"), 200, "{}", p.log());
    let lines = store_lines(&p);
    assert_eq!(
        lines
            .get(2)
            .map(|l| l.contains("answering again (reads and writes) after 5 failures")),
        Some(true),
        "{lines:#?}"
    );
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert_eq!(redis.cli(&["HGET", "acl:h:acl", "v"]), "1");
}

/// A request whose session read failed (Redis stalled) went on with a new session, at turn 1.
/// Its write, once Redis answers again, meets the stored session: the request's work is added to
/// it as the session's next turn. The tool it searched for stays loaded, and so does the one the
/// stored session had loaded; the next request is the turn after it.
#[test]
fn a_request_whose_session_read_failed_adds_its_work_to_the_stored_session() {
    let s = Scratch::new("redis-unread");
    let redis = Redis::start(&s, false);
    let script = json!({"main_system": [SYSTEM], "steps": [
        {"tool_uses": [{"name": "tool_search", "input": {"queries": ["read file"]}}]},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "notes.txt"}}}]},
        {"text": "Read it."},
        // Redis stalls as this request reads its session, and answers again (the background
        // ping finds it) before the upstream does.
        {"tool_uses": [{"name": "tool_search", "input": {"tool_names": ["mcp__fs__write_file"]}}],
         "hang": 3},
        {"text": "Found it."},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__write_file",
                                  "params": {"path": "out.txt", "content": "x"}}}]},
        {"text": "Written."},
        {"tool_uses": [{"name": "defer_execute",
                        "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "other.txt"}}}]},
        {"text": "Read that too."}
    ]});
    let upstream = Upstream::start(&s, &script);
    let (_sp, p) = replica("redis-unread-p", &upstream, &redis, "ur:");
    let mut messages = vec![json!({"role": "user", "content": "read notes.txt"})];
    let headers = [HEADERS[0], HEADERS[1], ("x-toolshelf-session", "unread")];
    assert_eq!(
        calls(&turn(&p, &mut messages, &headers)),
        read_call("notes.txt")
    );
    turn(&p, &mut messages, &headers);
    let stored = |field| redis.cli(&["HGET", "ur:h:unread", field]);
    assert_eq!(stored("v"), "2");

    messages.push(json!({"role": "user", "content": "find the write tool"}));
    redis.pause();
    let (url, body) = (format!("{}/v1/messages", p.url), request(&messages));
    let stalled = std::thread::spawn(move || post(&url, &body, &headers));
    let deadline = Instant::now() + Duration::from_secs(10);
    while totals(&p)["store_errors"] == 0 {
        assert!(
            Instant::now() < deadline,
            "the read never failed: {}",
            p.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    redis.resume();
    let (status, answer) = stalled.join().expect("client thread");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["content"][0]["text"], "Found it.");
    take(&mut messages, &answer);
    assert_eq!(stored("v"), "3", "written once more; the log:\n{}", p.log());
    // Adding to the session it could not read is no conflict with another writer.
    assert_eq!(totals(&p)["store_conflicts"], 0, "{}", totals(&p));
    // The tool that request searched for is loaded: its call goes to the client at once.
    messages.push(json!({"role": "user", "content": "write out.txt"}));
    assert_eq!(
        calls(&turn(&p, &mut messages, &headers)),
        vec![(
            "mcp__fs__write_file".to_owned(),
            json!({"path": "out.txt", "content": "x"})
        )]
    );
    turn(&p, &mut messages, &headers);
    // And the activation the stored session had made still holds (no new search).
    messages.push(json!({"role": "user", "content": "and other.txt"}));
    assert_eq!(
        calls(&turn(&p, &mut messages, &headers)),
        read_call("other.txt")
    );
    let log = p.log();
    let turns: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("session=h:unread "))
        .filter_map(|l| l.split(" turn=").nth(1)?.split(' ').next())
        .collect();
    // The stalled request counted from 1 on its own; the session it was added to reads it as
    // its turn 3, so the next requests are turns 4, 5 and 6.
    assert_eq!(turns, ["1", "2", "1", "4", "5", "6"], "{log}");
}

/// `GET PATH` of `proxy`: the body.
fn fetch(proxy: &ProxyProc, path: &str) -> String {
    let out = Command::new("curl")
        .args(["-sS", &format!("{}{path}", proxy.url)])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of the metric line that starts with `series ` in a scrape of `proxy`.
fn metric(proxy: &ProxyProc, series: &str) -> Option<String> {
    fetch(proxy, "/metrics").lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .map(str::to_owned)
    })
}

/// Redis stopped is visible where an operator looks, not only in the log: the status's `store`
/// says it fails (since when, which operations, the error in words), and so do the dashboard and
/// `toolshelf_proxy_store_up`; once Redis answers again, they all say so, and the last error
/// stays in the status.
#[test]
fn a_failing_redis_shows_in_the_status_the_dashboard_and_the_metrics() {
    let s = Scratch::new("redis-health");
    let mut redis = Redis::start(&s, false);
    let upstream = Upstream::start(&s, &json!({"main_system": [SYSTEM], "steps": []}));
    let (_sa, a) = replica("redis-health-a", &upstream, &redis, "rh:");
    until_stored(&a, &redis, "rh:", "probe-1");
    let store = a.status()["store"].clone();
    assert_eq!(
        (&store["kind"], &store["up"], &store["failing"]),
        (&json!("redis"), &json!(true), &json!([])),
        "{store}"
    );
    assert_eq!(metric(&a, "toolshelf_proxy_store_up").as_deref(), Some("1"));
    let started = store["since"].as_u64().expect("since");

    redis.stop();
    assert_eq!(probe(&a, "probe-2"), 200, "{}", a.log());
    let store = a.status()["store"].clone();
    assert_eq!(store["up"], false, "{store}");
    assert!(
        store["failing"]
            .as_array()
            .is_some_and(|f| f.contains(&json!("read"))),
        "{store}"
    );
    let error = store["last_error"].as_str().unwrap_or_default().to_owned();
    assert!(
        error.contains(&format!("Redis at 127.0.0.1:{}", redis.port)),
        "the error in words: {store}"
    );
    assert!(store["failures"].as_u64().unwrap_or(0) >= 1, "{store}");
    assert!(store["since"].as_u64().unwrap_or(0) >= started, "{store}");
    assert!(store["entries_age_secs"].is_u64(), "{store}");
    assert_eq!(metric(&a, "toolshelf_proxy_store_up").as_deref(), Some("0"));
    let help = fetch(&a, "/metrics");
    assert!(
        help.contains("# HELP toolshelf_proxy_store_up ")
            && help.contains("# TYPE toolshelf_proxy_store_up gauge"),
        "{help}"
    );
    let page = fetch(&a, "/ui");
    let shown = page
        .split("id=\"store\"")
        .nth(1)
        .and_then(|rest| rest.split("</p>").next())
        .unwrap_or_else(|| panic!("the store's line: {page}"));
    assert!(
        shown.contains("class=\"broken\"") || shown.starts_with(" class=\"broken\""),
        "{shown}"
    );
    assert!(
        shown.contains("failing") && shown.contains(&format!("127.0.0.1:{}", redis.port)),
        "{shown}"
    );

    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.status()["store"]["up"] != true {
        assert!(Instant::now() < deadline, "{}", a.log());
        assert_eq!(probe(&a, "probe-3"), 200, "{}", a.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let store = a.status()["store"].clone();
    assert_eq!(store["failing"], json!([]), "{store}");
    assert_eq!(store["last_error"], json!(error), "kept: {store}");
    assert_eq!(metric(&a, "toolshelf_proxy_store_up").as_deref(), Some("1"));
    let page = fetch(&a, "/ui");
    assert!(!page.contains("class=\"broken\""), "{page}");
}
