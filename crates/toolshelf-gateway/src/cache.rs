//! Files the gateway keeps between runs: the catalog cache and the status file.
//!
//! The catalog cache is one JSON file per configuration (the embedded default store: no service
//! to run). It holds each server's last tool list with a fingerprint of the server's launch
//! settings, so an edited command or URL never serves stale tools. With it, a restarted gateway
//! has every cached server's tools searchable at once and starts the server only when a call
//! needs it. Writes go to a temporary file that is renamed over the old one, so a crash mid-write
//! leaves the previous file intact.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolshelf_core::config::ServerConfig;
use toolshelf_core::name::short_hash;

/// Version of the cache layout; another version is ignored, not misread.
const VERSION: u32 = 1;

/// The default cache directory: `$XDG_CACHE_HOME/toolshelf`, else `~/.cache/toolshelf`.
///
/// With neither variable set there is no home to keep files in, and a shared, predictable path
/// such as `/tmp/toolshelf` would let another user of the machine plant or read the cache and the
/// audit log. So the fallback is a directory private to this user, `<temp>/toolshelf-<uid>`,
/// created with mode 0700; one that already exists is used only if it is a real directory owned
/// by this user (never a symbolic link), else this is an error that says what to set.
pub fn default_cache_dir() -> std::io::Result<PathBuf> {
    let from_env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(xdg) = from_env("XDG_CACHE_HOME") {
        return Ok(xdg.join("toolshelf"));
    }
    if let Some(home) = from_env("HOME") {
        return Ok(home.join(".cache").join("toolshelf"));
    }
    private_temp_dir()
}

#[cfg(unix)]
fn private_temp_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let uid = current_uid()?;
    let dir = std::env::temp_dir().join(format!("toolshelf-{uid}"));
    let refuse = |why: String| {
        std::io::Error::other(format!(
            "neither XDG_CACHE_HOME nor HOME is set, and the fallback cache directory {} {why}; \
set HOME or XDG_CACHE_HOME, or [cache] path and [audit] path",
            dir.display()
        ))
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(refuse(format!("cannot be created ({e})"))),
    }
    let meta =
        std::fs::symlink_metadata(&dir).map_err(|e| refuse(format!("cannot be read ({e})")))?;
    if meta.file_type().is_symlink() {
        return Err(refuse("is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(refuse("is not a directory".into()));
    }
    if meta.uid() != uid {
        return Err(refuse(format!(
            "belongs to another user (uid {})",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| refuse(format!("cannot be made private ({e})")))?;
    }
    Ok(dir)
}

/// This process's user id: the owner of `/proc/self` on Linux, else of a file it creates.
#[cfg(unix)]
fn current_uid() -> std::io::Result<u32> {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = std::fs::metadata("/proc/self") {
        return Ok(m.uid());
    }
    let probe = std::env::temp_dir().join(format!(".toolshelf-uid-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    let uid = file.metadata()?.uid();
    drop(file);
    let _ = std::fs::remove_file(&probe);
    Ok(uid)
}

#[cfg(not(unix))]
fn private_temp_dir() -> std::io::Result<PathBuf> {
    Err(std::io::Error::other(
        "neither XDG_CACHE_HOME nor HOME is set; set one, or [cache] path and [audit] path",
    ))
}

/// A configured path: a leading `~/` is the home directory (an error naming `HOME` when it is
/// not set), `${VAR}` is expanded as in server sections.
pub fn expand_path(raw: &str) -> Result<PathBuf, String> {
    toolshelf_core::config::expand(raw, &|k| std::env::var(k).ok()).map(PathBuf::from)
}

/// A short key naming one configuration (its absolute path, or the server set for mcp.json
/// alone), used in file names.
pub fn config_key(label: &str) -> String {
    short_hash(label)
}

/// A fingerprint of what launches a server; tools cached under another fingerprint are ignored.
pub fn fingerprint(server: &ServerConfig) -> String {
    short_hash(&format!(
        "{:?}\u{0}{:?}\u{0}{:?}\u{0}{:?}\u{0}{:?}",
        server.command, server.args, server.env, server.cwd, server.url
    ))
}

/// One server's cached tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedServer {
    /// [`fingerprint`] of the settings the tools were listed under.
    pub fingerprint: String,
    /// The server's description as shown in the index.
    pub description: String,
    /// Its tools, as MCP `tools/list` items.
    pub tools: Vec<Value>,
}

#[derive(Debug, Serialize, Deserialize)]
struct CacheFile {
    version: u32,
    servers: BTreeMap<String, CachedServer>,
}

/// The catalog cache of one configuration.
#[derive(Debug, Clone)]
pub struct CatalogCache {
    path: PathBuf,
}

impl CatalogCache {
    /// The cache file for configuration `key` in `dir`.
    pub fn new(dir: &Path, key: &str) -> Self {
        Self {
            path: dir.join(format!("catalog-{key}.json")),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the cache; a missing file is empty, an unreadable one is empty with a warning.
    pub fn load(&self) -> BTreeMap<String, CachedServer> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return BTreeMap::new(),
            Err(e) => {
                tracing::warn!("ignoring the catalog cache {}: {e}", self.path.display());
                return BTreeMap::new();
            }
        };
        match serde_json::from_str::<CacheFile>(&text) {
            Ok(f) if f.version == VERSION => f.servers,
            Ok(f) => {
                tracing::warn!(
                    "ignoring the catalog cache {}: layout version {} (this build reads {VERSION})",
                    self.path.display(),
                    f.version
                );
                BTreeMap::new()
            }
            Err(e) => {
                tracing::warn!("ignoring the catalog cache {}: {e}", self.path.display());
                BTreeMap::new()
            }
        }
    }

    /// Replaces the cache with `servers`, atomically.
    pub fn save(&self, servers: BTreeMap<String, CachedServer>) -> std::io::Result<()> {
        let file = CacheFile {
            version: VERSION,
            servers,
        };
        let text = serde_json::to_string_pretty(&file).map_err(std::io::Error::other)?;
        write_atomic(&self.path, text.as_bytes())
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename.
///
/// The temporary name is unique per write (process id, a counter and the clock), and the file is
/// created exclusively, so two gateways on one configuration, or two writes in one process, never
/// write into the same temporary file; the rename makes the last complete write win.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::sync::atomic::{AtomicU64, Ordering};
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = dir.join(format!(
        ".{name}.{}.{}.{nanos:08x}.tmp",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()));
    written
        .and_then(|()| std::fs::rename(&tmp, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_round_trips_and_ignores_garbage() {
        let dir = std::env::temp_dir().join(format!("toolshelf-cache-test-{}", std::process::id()));
        let cache = CatalogCache::new(&dir, "k");
        assert!(cache.load().is_empty(), "missing file");
        let mut servers = BTreeMap::new();
        servers.insert(
            "s".to_owned(),
            CachedServer {
                fingerprint: "f".into(),
                description: "d".into(),
                tools: vec![serde_json::json!({"name": "t"})],
            },
        );
        cache.save(servers.clone()).expect("save");
        assert_eq!(cache.load(), servers);
        std::fs::write(cache.path(), "{not json").expect("write");
        assert!(cache.load().is_empty(), "corrupt file");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn concurrent_writers_never_share_a_temporary_file() {
        let dir =
            std::env::temp_dir().join(format!("toolshelf-atomic-test-{}", std::process::id()));
        let path = dir.join("f.json");
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let body = format!(
                            "{{\"writer\": {t}, \"i\": {i}, \"pad\": \"{}\"}}",
                            "x".repeat(4096)
                        );
                        write_atomic(&path, body.as_bytes()).expect("write");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        let text = std::fs::read_to_string(&path).expect("read");
        let v: serde_json::Value =
            serde_json::from_str(&text).expect("whole JSON, never interleaved");
        assert_eq!(v["i"], 49);
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .expect("dir")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn paths_expand_home() {
        let home = std::env::var("HOME").expect("HOME in tests");
        assert_eq!(
            expand_path("~/x/a.jsonl").expect("expands"),
            PathBuf::from(format!("{home}/x/a.jsonl"))
        );
        assert_eq!(
            expand_path("/abs/~/x").expect("as is"),
            PathBuf::from("/abs/~/x")
        );
    }

    #[test]
    fn fingerprints_follow_launch_settings() {
        let text = "command = \"a\"\nargs = [\"x\"]";
        let a: ServerConfig = toml::from_str(text).expect("a");
        let mut b = a.clone();
        b.description = Some("other words".into());
        assert_eq!(
            fingerprint(&a),
            fingerprint(&b),
            "description does not launch"
        );
        b.args.push("y".into());
        assert_ne!(fingerprint(&a), fingerprint(&b));
    }
}
