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

/// `$XDG_CACHE_HOME/toolshelf`, else `~/.cache/toolshelf`, else a directory under the temp dir.
pub fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("toolshelf")
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
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
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
