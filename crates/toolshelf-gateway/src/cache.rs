//! Files the gateway keeps between runs: the catalog cache and the status file.
//!
//! The catalog cache is one JSON file per configuration (the embedded default store: no service
//! to run). It holds each server's last tool list with a fingerprint of the server's launch
//! settings as expanded, so an edited command or URL, or a changed `${VAR}` in one, never serves
//! stale tools. With it, a restarted gateway has every cached server's tools searchable at once
//! and starts the server only when a call needs it. Writes go to a temporary file that is renamed
//! over the old one, so a crash mid-write leaves the previous file intact.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolshelf_core::config::ServerConfig;
use toolshelf_core::name::short_hash;
pub use toolshelf_runtime::files::{default_cache_dir, expand_path, write_atomic};

/// Version of the cache layout; another version is ignored, not misread.
const VERSION: u32 = 1;

/// A short key naming one configuration (its absolute path, or the server set for mcp.json
/// alone), used in file names.
pub fn config_key(label: &str) -> String {
    short_hash(label)
}

/// A fingerprint of what launches a server; tools cached under another fingerprint are ignored.
/// It covers the settings as the server is started with them, after `${VAR}` and `~/`
/// expansion, so a changed variable is a changed server; only their hash is kept, never an
/// expanded value (a secret). A server whose settings do not expand cannot start and has no
/// fingerprint: `""`, which [`CatalogCache`] neither keeps nor returns.
pub fn fingerprint(server: &ServerConfig) -> String {
    let here = std::env::current_dir().unwrap_or_default();
    fingerprint_with(server, &|k| std::env::var(k).ok(), &here)
}

/// [`fingerprint`] with variables looked up by `lookup`, for a gateway running in `here`.
fn fingerprint_with(
    server: &ServerConfig,
    lookup: &dyn Fn(&str) -> Option<String>,
    here: &Path,
) -> String {
    launch_settings(server, lookup, here)
        .map(|settings| short_hash(&settings))
        .unwrap_or_default()
}

/// The launch settings of `server`, expanded ([`ServerConfig::expanded`]), in one string. A
/// program started without a `cwd`, or with a relative one, runs in the gateway's directory
/// `here`, which its arguments may name (`args = ["."]`): that directory is a launch setting too,
/// so tools listed in one repository are not served from the cache in another.
fn launch_settings(
    server: &ServerConfig,
    lookup: &dyn Fn(&str) -> Option<String>,
    here: &Path,
) -> Result<String, String> {
    let x = server.expanded("", lookup)?;
    let mut settings = format!(
        "{:?}\u{0}{:?}\u{0}{:?}\u{0}{:?}\u{0}{:?}",
        x.command, x.args, x.env, x.cwd, x.url
    );
    if x.command.is_some() && x.cwd.as_deref().is_none_or(|c| Path::new(c).is_relative()) {
        settings.push_str(&format!("\u{0}in {}", here.display()));
    }
    // Headers (a token can decide which tools a server lists) only when set, so that the
    // fingerprints of servers without them stay as they were.
    if !x.headers.is_empty() {
        settings.push_str(&format!("\u{0}{:?}", x.headers));
    }
    Ok(settings)
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
            Ok(f) if f.version == VERSION => fingerprinted(f.servers),
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
            servers: fingerprinted(servers),
        };
        let text = serde_json::to_string_pretty(&file).map_err(std::io::Error::other)?;
        write_atomic(&self.path, text.as_bytes())
    }
}

/// The entries of `servers` that have a fingerprint: an empty one matches no server.
fn fingerprinted(mut servers: BTreeMap<String, CachedServer>) -> BTreeMap<String, CachedServer> {
    servers.retain(|_, s| !s.fingerprint.is_empty());
    servers
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
        let http: ServerConfig = toml::from_str("url = \"http://h/mcp\"").expect("http");
        let mut token = http.clone();
        token
            .headers
            .insert("Authorization".into(), "Bearer t".into());
        assert_ne!(
            fingerprint(&http),
            fingerprint(&token),
            "a header can change the tools"
        );
        // Without headers a fingerprint is what it was before headers existed.
        assert_eq!(
            fingerprint(&http),
            short_hash("None\u{0}[]\u{0}{}\u{0}None\u{0}Some(\"http://h/mcp\")")
        );
    }

    /// A program started in the gateway's directory (no `cwd`, or a relative one) has a
    /// fingerprint per directory: `args = ["."]` names another repository in each. One with an
    /// absolute `cwd`, and a server reached by URL, do not depend on it.
    #[test]
    fn the_gateways_directory_is_a_launch_setting_of_a_program_started_in_it() {
        let none = |_: &str| None;
        let at = |server: &ServerConfig, dir: &str| fingerprint_with(server, &none, Path::new(dir));
        for text in [
            "command = \"mcp-server-git\"\nargs = [\".\"]",
            "command = \"mcp-server-git\"\ncwd = \"sub\"",
        ] {
            let server: ServerConfig = toml::from_str(text).expect("server");
            assert_ne!(at(&server, "/repo/a"), at(&server, "/tmp/b"), "{text}");
            assert_eq!(at(&server, "/repo/a"), at(&server, "/repo/a"), "{text}");
        }
        for text in [
            "command = \"mcp-server-git\"\ncwd = \"/repo/a\"",
            "url = \"http://h/mcp\"",
        ] {
            let server: ServerConfig = toml::from_str(text).expect("server");
            assert_eq!(at(&server, "/repo/a"), at(&server, "/tmp/b"), "{text}");
        }
    }

    /// A lookup of the variables `vars`.
    fn vars(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| vars.get(k).cloned()
    }

    #[test]
    fn fingerprints_follow_the_settings_as_expanded() {
        let stdio: ServerConfig = toml::from_str(
            "command = \"${SRV}\"\nargs = [\"--root\", \"${ROOT:-/srv}\"]\n\
             env = { TOKEN = \"${TOKEN}\" }\ncwd = \"~/work\"",
        )
        .expect("stdio");
        let base = [
            ("SRV", "/bin/time"),
            ("TOKEN", "s3cret"),
            ("HOME", "/home/a"),
        ];
        let fp = |pairs: &[(&str, &str)]| fingerprint_with(&stdio, &vars(pairs), Path::new("/"));
        let first = fp(&base);
        assert!(
            first.len() == 8 && first.bytes().all(|b| b.is_ascii_hexdigit()),
            "a hash, no expanded value: {first:?}"
        );
        assert_eq!(first, fp(&base), "the same variables, the same fingerprint");
        let with = |k: &'static str, v: &'static str| -> Vec<(&str, &str)> {
            let mut pairs: Vec<_> = base.iter().copied().filter(|(n, _)| *n != k).collect();
            pairs.push((k, v));
            pairs
        };
        for (changed, what) in [
            (with("SRV", "/bin/fetch"), "command"),
            (with("ROOT", "/data"), "args"),
            (with("TOKEN", "other"), "env"),
            (with("HOME", "/home/b"), "cwd"),
        ] {
            assert_ne!(first, fp(&changed), "a variable in {what}");
        }
        assert_eq!(
            fp(&[("SRV", "/bin/time"), ("HOME", "/home/a")]),
            "",
            "TOKEN unset: the server cannot start and has no fingerprint"
        );

        let http: ServerConfig = toml::from_str(
            "url = \"${BASE}/mcp\"\nheaders = { Authorization = \"Bearer ${TOKEN}\" }",
        )
        .expect("http");
        let fp = |pairs: &[(&str, &str)]| fingerprint_with(&http, &vars(pairs), Path::new("/"));
        let first = fp(&[("BASE", "http://h"), ("TOKEN", "a")]);
        assert_ne!(first, fp(&[("BASE", "http://g"), ("TOKEN", "a")]), "url");
        assert_ne!(
            first,
            fp(&[("BASE", "http://h"), ("TOKEN", "b")]),
            "headers"
        );
    }

    #[test]
    fn entries_without_a_fingerprint_are_neither_kept_nor_read() {
        let dir =
            std::env::temp_dir().join(format!("toolshelf-cache-nofp-test-{}", std::process::id()));
        let cache = CatalogCache::new(&dir, "k");
        let entry = |fingerprint: &str| CachedServer {
            fingerprint: fingerprint.into(),
            description: "d".into(),
            tools: vec![serde_json::json!({"name": "t"})],
        };
        let servers = BTreeMap::from([("a".to_owned(), entry("f")), ("b".to_owned(), entry(""))]);
        cache.save(servers).expect("save");
        let text = std::fs::read_to_string(cache.path()).expect("read");
        assert!(!text.contains("\"b\""), "{text}");
        let file = serde_json::json!({"version": VERSION, "servers": {"b": entry("")}});
        std::fs::write(cache.path(), file.to_string()).expect("write");
        assert!(cache.load().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
