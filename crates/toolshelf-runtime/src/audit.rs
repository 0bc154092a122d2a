//! The audit log writer: JSON lines, appended and flushed before the result goes back.
//!
//! Shared by the gateway and the proxy, which record what each decides and runs; the record's
//! shape is the core's ([`toolshelf_core::audit`]). Each edge says where the log's health goes
//! ([`Audit::report_to`]) and what its records count ([`Audit::counted_by`]).
//!
//! Writes go straight to an unbuffered `File` under a mutex: a line is in the operating system's
//! hands before the client sees the result, and lines from concurrent sessions never interleave.
//!
//! A log nobody can read is no log, so the writer checks before each line that its file is still
//! the one at the configured path: if the file was removed, its directory deleted, or the log
//! rotated (renamed away), it reopens the path (creating the directory again) instead of writing
//! on into an unlinked file. A write that fails (a full disk, a read-only mount) is retried once on
//! a fresh handle; a record that still cannot be written is counted as dropped and the failure is
//! logged once, when it starts, not per record.
//!
//! With `[audit] required = true` (the default) no call runs while the log cannot be written:
//! [`Audit::ready`] is a stage of the call pipeline. While writes succeed it opens the path for
//! appending again, so that a log that became unwritable since its last record (its directory
//! removed and a file put in its place, a read-only remount, its permissions taken) refuses the
//! very call whose record would be lost; a full disk, which only a write finds, fails the record
//! of the call that found it and refuses the calls after it. While writes fail, each call's
//! `ready` and each record appended (a search's too, required or not) first tries to write a
//! `recovered` record, so the log resumes by itself as soon as it can be written again, saying
//! how many records were lost, and its health (the status file) clears with it.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use serde::Serialize;
use toolshelf_core::audit::{AuditKind, AuditRecord};
use toolshelf_core::config::Config;

use crate::files::{default_cache_dir, expand_config_path};

/// A function told of a change of the log's health.
type Watcher = Box<dyn Fn() + Send + Sync>;

/// The audit log (or none).
#[derive(Default)]
pub struct Audit {
    writer: Option<Writer>,
    required: bool,
    dropped: AtomicU64,
    /// Told whenever the log's health changes (a record dropped, writes failing or resuming), so
    /// that what reports it (the gateway's status file) follows it.
    watcher: OnceLock<Watcher>,
    /// Told of every record appended, whether or not a log is kept (the edge's metrics).
    counter: Option<fn(&AuditRecord)>,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit")
            .field("writer", &self.writer)
            .field("required", &self.required)
            .field("dropped", &self.dropped)
            .finish_non_exhaustive()
    }
}

/// A path of the audit log that cannot be used: which setting it comes from, the path and why.
#[derive(Debug)]
pub struct OpenError {
    /// Which setting the path comes from: `[audit] path`, `the audit log in [cache] path,`.
    pub what: &'static str,
    /// The path as configured or found.
    pub path: String,
    /// Why it cannot be used.
    pub cause: std::io::Error,
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.what, self.cause)
        } else {
            write!(f, "{} {}: {}", self.what, self.path, self.cause)
        }
    }
}

impl std::error::Error for OpenError {}

/// The directory `config` keeps its files in: `[cache] path` (with `~/` expanded; a relative one
/// is the configuration file's directory's), else the user's cache directory (see
/// [`default_cache_dir`]).
pub fn cache_dir(config: &Config) -> Result<PathBuf, OpenError> {
    match &config.cache.path {
        Some(p) => expand_config_path(p, config.dir.as_deref()).map_err(|message| OpenError {
            what: "[cache] path",
            path: p.clone(),
            cause: std::io::Error::other(message),
        }),
        None => default_cache_dir().map_err(|cause| OpenError {
            what: "the cache directory",
            path: String::new(),
            cause,
        }),
    }
}

#[derive(Debug)]
struct Writer {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    file: Option<File>,
    /// Why the last write failed; `None` while writes succeed.
    failing: Option<String>,
    /// Records dropped since the failure began (reported when writes resume).
    lost: u64,
}

/// The audit log's health, as `toolshelf status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct AuditStatus {
    /// The file.
    pub path: String,
    /// Whether calls are refused while it cannot be written.
    pub required: bool,
    /// Records that could not be written, since start.
    pub dropped: u64,
    /// Why writes are failing now; absent while they succeed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl AuditStatus {
    /// The log's health in words, as a dashboard says it, and whether it takes every record.
    pub fn in_words(&self) -> (String, bool) {
        let kind = if self.required {
            "required: calls are refused while it cannot be written"
        } else {
            "optional"
        };
        match &self.error {
            Some(e) => (
                format!(
                    "{} is failing ({kind}): {e}; {} records dropped since start.",
                    self.path, self.dropped
                ),
                false,
            ),
            None => (
                format!(
                    "{} is written ({kind}); {} records dropped since start.",
                    self.path, self.dropped
                ),
                true,
            ),
        }
    }
}

fn open_append(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent() {
        crate::files::create_private_dir_all(dir).map_err(|e| {
            // Say which part is in the way: `/etc/passwd/audit.jsonl` fails with "File exists".
            let blocked = dir.ancestors().find(|a| a.is_file());
            let why = match blocked {
                Some(file) => format!("{} is a file, not a directory", file.display()),
                None => format!("cannot create the directory {}: {e}", dir.display()),
            };
            std::io::Error::new(e.kind(), why)
        })?;
    }
    // The log holds every call's params: a new one is its user's alone.
    crate::files::private_file()
        .create(true)
        .append(true)
        .open(path)
}

/// Whether `file` is still the file at `path` (not removed, not replaced by rotation).
#[cfg(unix)]
fn still_at(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn still_at(_file: &File, path: &Path) -> bool {
    path.exists()
}

impl State {
    /// Writes `line`, reopening the path when the handle no longer leads to it or a write fails.
    fn write(&mut self, path: &Path, line: &[u8]) -> std::io::Result<()> {
        if self.file.as_ref().is_none_or(|f| !still_at(f, path)) {
            self.file = Some(open_append(path)?);
        }
        let first = self
            .file
            .as_mut()
            .map_or(Err(std::io::Error::other("no file")), |f| {
                f.write_all(line).and_then(|()| f.flush())
            });
        if first.is_ok() {
            return Ok(());
        }
        // One retry on a fresh handle: the failure may have been the handle's.
        let mut fresh = open_append(path)?;
        fresh.write_all(line).and_then(|()| fresh.flush())?;
        self.file = Some(fresh);
        Ok(())
    }
}

impl Audit {
    /// The audit log `config`'s `[audit]` table asks for: none when it is not enabled, else
    /// `[audit] path`, or `audit.jsonl` in `cache_dir` (when the caller has found it already)
    /// or in [`cache_dir`] of `config`.
    pub fn configured(config: &Config, cache_dir: Option<&Path>) -> Result<Self, OpenError> {
        let audit = &config.audit;
        if !audit.enabled {
            return Ok(Self::disabled());
        }
        if let Some(p) = &audit.path {
            let path =
                expand_config_path(p, config.dir.as_deref()).map_err(|message| OpenError {
                    what: "[audit] path",
                    path: p.clone(),
                    cause: std::io::Error::other(message),
                })?;
            return Self::open(&path, audit.required, "[audit] path");
        }
        let dir = match cache_dir {
            Some(dir) => dir.to_owned(),
            None => self::cache_dir(config)?,
        };
        let what = if config.cache.path.is_some() {
            "the audit log in [cache] path,"
        } else {
            "the audit log in the cache directory,"
        };
        Self::open(&dir.join("audit.jsonl"), audit.required, what)
    }

    /// Opens `path` for appending, creating it and its directory. `required`: refuse calls
    /// while the log cannot be written. `what` says where the path comes from, for the error.
    pub fn open(path: &Path, required: bool, what: &'static str) -> Result<Self, OpenError> {
        let file = open_append(path).map_err(|cause| OpenError {
            what,
            path: path.display().to_string(),
            cause,
        })?;
        Ok(Self {
            writer: Some(Writer {
                path: path.to_owned(),
                state: Mutex::new(State {
                    file: Some(file),
                    failing: None,
                    lost: 0,
                }),
            }),
            required,
            dropped: AtomicU64::new(0),
            watcher: OnceLock::new(),
            counter: None,
        })
    }

    /// Calls `watch` on every change of the log's health from now on (once; later calls are
    /// ignored).
    pub fn report_to(&self, watch: impl Fn() + Send + Sync + 'static) {
        let _ = self.watcher.set(Box::new(watch));
    }

    /// The log, telling `count` of every record appended (whether or not a log is kept).
    #[must_use]
    pub fn counted_by(mut self, count: fn(&AuditRecord)) -> Self {
        self.counter = Some(count);
        self
    }

    /// Whether a log is kept and no call may run unrecorded (`[audit] required`).
    pub fn is_required(&self) -> bool {
        self.writer.is_some() && self.required
    }

    fn health_changed(&self) {
        if let Some(watch) = self.watcher.get() {
            watch();
        }
    }

    /// No audit log.
    pub fn disabled() -> Self {
        Self::default()
    }

    /// A fresh record stamped with the current time.
    pub fn record(kind: AuditKind) -> AuditRecord {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        AuditRecord::new(ms, kind)
    }

    /// Appends one record. `Err` says why it was dropped (it is counted either way). Every record
    /// is also told to the [`Audit::counted_by`] function, whether or not a log is kept.
    pub fn append(&self, record: &AuditRecord) -> Result<(), String> {
        if let Some(count) = self.counter {
            count(record);
        }
        let Some(w) = &self.writer else {
            return Ok(());
        };
        let mut line = record.to_line();
        line.push('\n');
        let mut state = w.state.lock().unwrap_or_else(|p| p.into_inner());
        // A failing log that can be written again says so (and how many records it lost) before
        // this record, whatever the record is: a search's resumes the log as a call's does.
        let recovered = state.failing.is_some() && self.resume(w, &mut state).is_ok();
        match state.write(&w.path, line.as_bytes()) {
            Ok(()) => {
                drop(state);
                if recovered {
                    self.health_changed();
                }
                Ok(())
            }
            Err(e) => {
                let why = e.to_string();
                self.dropped.fetch_add(1, Ordering::Relaxed);
                state.lost += 1;
                if state.failing.is_none() {
                    tracing::error!(
                        "cannot write the audit log {}: {why}; records are being dropped{}",
                        w.path.display(),
                        if self.required {
                            " and calls are refused until it can be written ([audit] required = true)"
                        } else {
                            ""
                        }
                    );
                }
                state.failing = Some(why.clone());
                drop(state);
                self.health_changed();
                Err(why)
            }
        }
    }

    /// Whether a call may run as far as the audit log is concerned: always when the log is not
    /// required; otherwise only when it can be written. A log whose writes succeed is opened for
    /// appending again (the fresh handle is the one the call's record is written with), so that
    /// one that became unwritable since its last record refuses this call rather than losing its
    /// record. A failing log is retried here, by writing a `recovered` record that says how many
    /// records were lost.
    pub fn ready(&self) -> Result<(), String> {
        let Some(w) = &self.writer else {
            return Ok(());
        };
        let mut state = w.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.failing.is_some() {
            let resumed = self.resume(w, &mut state);
            drop(state);
            if resumed.is_ok() {
                self.health_changed();
            }
            // A log that is not required lets calls go on whatever its state.
            return match resumed {
                Err(why) if self.required => Err(format!("{}: {why}", w.path.display())),
                _ => Ok(()),
            };
        }
        if !self.required {
            return Ok(());
        }
        match open_append(&w.path) {
            Ok(file) => {
                state.file = Some(file);
                Ok(())
            }
            Err(e) => {
                let why = e.to_string();
                tracing::error!(
                    "cannot open the audit log {} for writing: {why}; calls are refused until it can be written ([audit] required = true)",
                    w.path.display()
                );
                state.failing = Some(why.clone());
                drop(state);
                self.health_changed();
                Err(format!("{}: {why}", w.path.display()))
            }
        }
    }

    /// Tries to write the `recovered` record of a failing log, saying how many records were
    /// lost; on success the log is healthy again (the caller tells the watcher, once it has let
    /// go of `state`). On failure the reason is kept as the log's error and returned.
    fn resume(&self, w: &Writer, state: &mut State) -> Result<(), String> {
        let lost = state.lost;
        let mut r = Self::record(AuditKind::Audit);
        r.outcome = Some("recovered".into());
        r.detail = Some(format!(
            "{lost} records were lost while the log could not be written"
        ));
        let mut line = r.to_line();
        line.push('\n');
        match state.write(&w.path, line.as_bytes()) {
            Ok(()) => {
                tracing::warn!(
                    "the audit log {} can be written again ({lost} records lost)",
                    w.path.display()
                );
                state.failing = None;
                state.lost = 0;
                Ok(())
            }
            Err(e) => {
                let why = e.to_string();
                state.failing = Some(why.clone());
                Err(why)
            }
        }
    }

    /// The log's health; `None` when there is no log.
    pub fn status(&self) -> Option<AuditStatus> {
        let w = self.writer.as_ref()?;
        let state = w.state.lock().unwrap_or_else(|p| p.into_inner());
        Some(AuditStatus {
            path: w.path.display().to_string(),
            required: self.required,
            dropped: self.dropped.load(Ordering::Relaxed),
            error: state.failing.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("toolshelf-audit-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON line"))
            .collect()
    }

    #[test]
    fn a_removed_directory_is_recreated_and_nothing_is_lost() {
        let dir = scratch("removed");
        let path = dir.join("logs/audit.jsonl");
        let audit = Audit::open(&path, true, "test").expect("open");
        audit
            .append(&Audit::record(AuditKind::Search))
            .expect("first");
        std::fs::remove_dir_all(&dir).expect("remove");
        audit
            .append(&Audit::record(AuditKind::Call))
            .expect("reopened");
        let got = lines(&path);
        assert_eq!(got.len(), 1, "the record after removal is in the new file");
        assert_eq!(got[0]["kind"], "call");
        assert_eq!(audit.status().expect("status").dropped, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_rotated_log_is_followed_to_the_new_file() {
        let dir = scratch("rotated");
        let path = dir.join("audit.jsonl");
        let audit = Audit::open(&path, true, "test").expect("open");
        audit
            .append(&Audit::record(AuditKind::Search))
            .expect("first");
        std::fs::rename(&path, dir.join("audit.jsonl.1")).expect("rotate");
        audit
            .append(&Audit::record(AuditKind::Call))
            .expect("second");
        assert_eq!(lines(&path).len(), 1);
        assert_eq!(lines(&dir.join("audit.jsonl.1")).len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_full_disk_drops_counts_and_refuses_when_required() {
        // /dev/full accepts opens and fails every write with ENOSPC.
        let full = Path::new("/dev/full");
        let required = Audit::open(full, true, "test").expect("open");
        let e = required
            .append(&Audit::record(AuditKind::Call))
            .expect_err("full");
        assert!(e.contains("No space left"), "{e}");
        required
            .append(&Audit::record(AuditKind::Call))
            .expect_err("still full");
        let s = required.status().expect("status");
        assert_eq!(s.dropped, 2);
        assert!(s.error.is_some());
        let refused = required.ready().expect_err("required: refuse");
        assert!(refused.contains("/dev/full"), "{refused}");
        let optional = Audit::open(full, false, "test").expect("open");
        optional
            .append(&Audit::record(AuditKind::Call))
            .expect_err("full");
        optional.ready().expect("not required: calls go on");
        assert_eq!(optional.status().expect("status").dropped, 1);
    }

    #[test]
    fn a_log_that_became_unwritable_refuses_the_next_call_before_it_runs() {
        let dir = scratch("unwritable");
        let path = dir.join("logs/audit.jsonl");
        let audit = Audit::open(&path, true, "test").expect("open");
        audit.ready().expect("writable");
        audit
            .append(&Audit::record(AuditKind::Search))
            .expect("first");
        // A file where the log's directory was: the path cannot be opened any more, though no
        // write has failed yet.
        std::fs::remove_dir_all(dir.join("logs")).expect("rm");
        std::fs::write(dir.join("logs"), "").expect("a file in the way");
        let refused = audit.ready().expect_err("refused before the call runs");
        assert!(
            refused.contains("logs/audit.jsonl") && refused.contains("is a file"),
            "{refused}"
        );
        let s = audit.status().expect("status");
        assert_eq!(s.dropped, 0, "no record was lost");
        assert!(s.error.is_some());
        // Once the path can be written again, calls go on, after a record saying none was lost.
        std::fs::remove_file(dir.join("logs")).expect("clear the way");
        audit.ready().expect("recovered");
        let got = lines(&path);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0]["outcome"], "recovered");
        assert!(
            got[0]["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("0 records were lost")),
            "{got:?}"
        );
        // Not required: calls go on whatever the log's state.
        let optional = Audit::open(&dir.join("other/audit.jsonl"), false, "test").expect("open");
        std::fs::remove_dir_all(dir.join("other")).expect("rm");
        std::fs::write(dir.join("other"), "").expect("a file in the way");
        optional.ready().expect("not required");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn writes_resume_with_a_record_of_what_was_lost() {
        let dir = scratch("resume");
        let path = dir.join("audit.jsonl");
        let audit = Audit::open(&path, true, "test").expect("open");
        // Make the path unwritable: a directory where the file should be.
        std::fs::remove_file(&path).expect("rm");
        std::fs::create_dir_all(&path).expect("dir in the way");
        audit
            .append(&Audit::record(AuditKind::Call))
            .expect_err("cannot write");
        audit.ready().expect_err("still cannot");
        std::fs::remove_dir(&path).expect("clear the way");
        audit.ready().expect("recovered");
        let got = lines(&path);
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0]["kind"].as_str(), got[0]["outcome"].as_str()),
            (Some("audit"), Some("recovered"))
        );
        assert!(
            got[0]["detail"]
                .as_str()
                .expect("detail")
                .starts_with("1 records were lost")
        );
        assert!(audit.status().expect("status").error.is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_record_written_after_a_failure_clears_it_required_or_not() {
        for required in [true, false] {
            let dir = scratch(&format!("append-clears-{required}"));
            let path = dir.join("logs/audit.jsonl");
            let audit = Audit::open(&path, required, "test").expect("open");
            std::fs::remove_dir_all(dir.join("logs")).expect("rm");
            std::fs::write(dir.join("logs"), "").expect("a file in the way");
            audit
                .append(&Audit::record(AuditKind::Search))
                .expect_err("cannot write");
            assert!(audit.status().expect("status").error.is_some());
            std::fs::remove_file(dir.join("logs")).expect("clear the way");
            // Only ordinary records from here on (searches reach no `ready` stage).
            audit
                .append(&Audit::record(AuditKind::Search))
                .expect("written");
            let s = audit.status().expect("status");
            assert_eq!(s.error, None, "required = {required}");
            assert_eq!(s.dropped, 1);
            let got = lines(&path);
            let kinds: Vec<_> = got
                .iter()
                .map(|r| (r["kind"].as_str(), r["outcome"].as_str()))
                .collect();
            assert_eq!(kinds.len(), 2, "{got:?}");
            assert_eq!(kinds[0], (Some("audit"), Some("recovered")));
            assert_eq!(kinds[1].0, Some("search"));
            assert!(
                got[0]["detail"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("1 records were lost")),
                "{got:?}"
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn a_log_that_is_not_required_recovers_at_the_ready_stage_too() {
        let dir = scratch("optional-ready");
        let path = dir.join("audit.jsonl");
        let audit = Audit::open(&path, false, "test").expect("open");
        std::fs::remove_file(&path).expect("rm");
        std::fs::create_dir_all(&path).expect("dir in the way");
        audit
            .append(&Audit::record(AuditKind::Call))
            .expect_err("cannot write");
        std::fs::remove_dir(&path).expect("clear the way");
        audit.ready().expect("not required");
        assert_eq!(audit.status().expect("status").error, None);
        assert_eq!(lines(&path)[0]["outcome"], "recovered");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The log holds every call's params: a log file and the directories it creates are its
    /// user's alone, whatever the umask.
    #[test]
    #[cfg(unix)]
    fn a_new_log_and_its_directories_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("private");
        let path = dir.join("logs/audit.jsonl");
        let audit = Audit::open(&path, true, "test").expect("open");
        audit
            .append(&Audit::record(AuditKind::Search))
            .expect("written");
        let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir.join("logs")), 0o700);
        // Recreated after removal: private again.
        std::fs::remove_dir_all(&dir).expect("rm");
        audit
            .append(&Audit::record(AuditKind::Search))
            .expect("written");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir), 0o700);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
