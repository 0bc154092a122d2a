//! Files toolshelf keeps: where they live and how they are written.
//!
//! Shared by the gateway (catalog cache, status files, audit log) and the proxy (session files).

use std::path::{Path, PathBuf};

/// `session.workspace` as description templates and scripts read it: `configured` (`[template]
/// workspace`), else the directory toolshelf runs in.
pub fn workspace(configured: Option<&str>) -> Option<String> {
    configured.map(str::to_owned).or_else(|| {
        std::env::current_dir()
            .ok()
            .map(|d| d.display().to_string())
    })
}

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

/// A path of the configuration ([`expand_path`]), such as `[cache] path` or `[audit] path`: a
/// relative one is relative to `config_dir`, the configuration file's directory, as `[tools.NAME]
/// script` is, so every process reading the file finds the same path wherever it runs; without a
/// file (`None`), to the current directory.
pub fn expand_config_path(raw: &str, config_dir: Option<&Path>) -> Result<PathBuf, String> {
    let path = expand_path(raw)?;
    Ok(match config_dir {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path,
    })
}

/// Creates `dir` and its missing parents as [`std::fs::create_dir_all`] does, each directory it
/// creates private to this user (mode 0700 on Unix, whatever the umask): what toolshelf keeps
/// there (the audit log's params, a server's stderr in a status file, sessions) is nobody
/// else's. A directory that exists already keeps its mode: one the user made is theirs to set.
pub fn create_private_dir_all(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)
    }
}

/// Options that create a file private to this user (mode 0600 on Unix, whatever the umask); a
/// file that exists already keeps its mode.
pub fn private_file() -> std::fs::OpenOptions {
    #[allow(unused_mut)]
    let mut options = std::fs::OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename. The
/// file is private to this user (0600), and so are the directories this creates
/// ([`create_private_dir_all`]).
///
/// The temporary name is unique per write (process id, a counter and the clock), and the file is
/// created exclusively, so two gateways on one configuration, or two writes in one process, never
/// write into the same temporary file; the rename makes the last complete write win.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::sync::atomic::{AtomicU64, Ordering};
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    create_private_dir_all(dir)?;
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
    let written = private_file()
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
    fn a_relative_config_path_is_relative_to_the_configuration() {
        let dir = Path::new("/etc/toolshelf");
        for (raw, dir, expected) in [
            ("rel-cache", Some(dir), "/etc/toolshelf/rel-cache"),
            (
                "./a/../audit.jsonl",
                Some(dir),
                "/etc/toolshelf/./a/../audit.jsonl",
            ),
            ("/var/cache/ts", Some(dir), "/var/cache/ts"),
            (
                "${TOOLSHELF_NO_SUCH_VAR:-rel}/x",
                Some(dir),
                "/etc/toolshelf/rel/x",
            ),
            ("${TOOLSHELF_NO_SUCH_VAR:-/abs}/x", Some(dir), "/abs/x"),
            ("rel-cache", None, "rel-cache"),
        ] {
            assert_eq!(
                expand_config_path(raw, dir).expect(raw),
                PathBuf::from(expected),
                "{raw}"
            );
        }
        let e = expand_config_path("${TOOLSHELF_NO_SUCH_VAR}/x", Some(dir)).expect_err("unset");
        assert!(e.contains("TOOLSHELF_NO_SUCH_VAR is not set"), "{e}");
    }

    /// What toolshelf writes (status files, caches, session files) is its user's alone: the
    /// directories it creates are 0700 and the files 0600, whatever the umask; a directory that
    /// already exists keeps its mode.
    #[test]
    #[cfg(unix)]
    fn written_files_and_created_directories_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("toolshelf-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("root");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let path = root.join("a/b/status.json");
        write_atomic(&path, b"{}").expect("write");
        let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&root.join("a")), 0o700);
        assert_eq!(mode(&root.join("a/b")), 0o700);
        assert_eq!(mode(&root), 0o755, "an existing directory keeps its mode");
        let _ = std::fs::remove_dir_all(&root);
    }
}
