//! The audit log writer: JSON lines, appended and flushed before the result goes back.
//!
//! Writes go straight to an unbuffered `File` under a mutex: a line is in the operating system's
//! hands before the client sees the result, and lines from concurrent sessions never interleave.
//! A log that cannot be written is reported once on stderr and does not block calls.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use toolshelf_core::audit::{AuditKind, AuditRecord};

use crate::error::{GatewayError, Result};

/// The audit log (or none).
#[derive(Debug, Default)]
pub struct Audit {
    file: Option<(PathBuf, Mutex<File>)>,
    broken: AtomicBool,
}

impl Audit {
    /// Opens `path` for appending, creating it and its directory.
    pub fn open(path: &Path) -> Result<Self> {
        let io = |source| GatewayError::Io {
            path: path.display().to_string(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        Ok(Self {
            file: Some((path.to_owned(), Mutex::new(file))),
            broken: AtomicBool::new(false),
        })
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

    /// Appends one record.
    pub fn append(&self, record: &AuditRecord) {
        let Some((path, file)) = &self.file else {
            return;
        };
        let mut line = record.to_line();
        line.push('\n');
        let result = match file.lock() {
            Ok(mut f) => f.write_all(line.as_bytes()).and_then(|()| f.flush()),
            Err(_) => Err(std::io::Error::other("audit log lock poisoned")),
        };
        if let Err(e) = result
            && !self.broken.swap(true, Ordering::Relaxed)
        {
            tracing::error!("cannot write the audit log {}: {e}", path.display());
        }
    }
}
