//! Crash points: named places where a crash test can make the process die
//! at once, as a SIGKILL or a power cut would, to aim at the moments where
//! a crash is most likely to lose data: a flush or compaction commit, a
//! manifest write, a WAL file switch, a partition split or merge.
//!
//! `CELLAR_CRASH_POINT=NAME[:N]` in the environment makes the process abort
//! (no destructors, no buffered output, no flush) the Nth time (default the
//! first) it passes the point `NAME`. Without the variable every point costs
//! one read of an initialised `OnceLock`. The points:
//!
//! | name | where |
//! |---|---|
//! | `wal.switched` | a new WAL file was created, the old one sealed |
//! | `flush.segment_written` | a flushed segment is durable, its manifest not yet written |
//! | `flush.committed` | the manifest naming it is durable, the memtable not yet dropped |
//! | `compaction.outputs_written` | a compaction's outputs are durable, not yet committed |
//! | `compaction.committed` | the manifest swapping inputs for outputs is durable |
//! | `manifest.written` | any manifest or catalog version was written, older ones not yet pruned |
//! | `partition.split_committed` | the manifest splitting a partition is durable, the memory not yet changed |
//! | `partition.merge_committed` | the manifest merging two partitions is durable, the memory not yet changed |
//! | `archive.uploaded` | an archive's segments and complete marker are stored, the catalog not yet changed |
//! | `archive.committed` | the catalog records the archive, the local copy not yet freed |
//! | `restore.manifest` | a restore's local manifest is durable, the catalog not yet changed |
//!
//! `CELLAR_SYNC_LOG=FILE` makes the process append a line to FILE after
//! every fsync it completes: `<unix ns> file <bytes> <path>` (the file is
//! durable up to that length) or `<unix ns> dir <path>` (the directory's
//! entries are), and `<unix ns> create <path>` when it creates a WAL file
//! (before that directory's fsync). A power-cut test kills the process,
//! then drops from the data directory every byte and file the log does not
//! show as durable.
//!
//! Invariant: with neither variable set, a crash point does nothing but
//! look at a setting read once per process.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Passes the crash point `name` (see the module docs).
pub(crate) fn hit(name: &str) {
    static TARGET: OnceLock<Option<(String, AtomicU64)>> = OnceLock::new();
    let target = TARGET.get_or_init(|| {
        let spec = std::env::var("CELLAR_CRASH_POINT").ok()?;
        let (point, n) = match spec.split_once(':') {
            Some((p, n)) => (p.to_string(), n.parse().unwrap_or(1)),
            None => (spec, 1),
        };
        Some((point, AtomicU64::new(n)))
    });
    if let Some((point, left)) = target
        && point == name
        && left.fetch_sub(1, Ordering::Relaxed) == 1
    {
        std::process::abort();
    }
}

/// Logs a completed fsync of a file durable up to `len` bytes, or of a
/// directory (`len = None`); see the module docs.
pub(crate) fn synced(path: &Path, len: Option<u64>) {
    if !sync_log_on() {
        return;
    }
    log_line(
        path,
        match len {
            Some(n) => format!("file {n}"),
            None => "dir".into(),
        },
    );
}

/// Logs the creation of a file whose directory is fsynced afterwards.
pub(crate) fn created(path: &Path) {
    log_line(path, "create".into());
}

/// Whether `CELLAR_SYNC_LOG` is set: callers on a hot path (the WAL's
/// fsync per group commit) build the path to log only then.
pub(crate) fn sync_log_on() -> bool {
    sync_log().is_some()
}

fn sync_log() -> Option<&'static Mutex<std::fs::File>> {
    static LOG: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let path = std::env::var_os("CELLAR_SYNC_LOG")?;
        let f = std::fs::OpenOptions::new().create(true).append(true).open(path).ok()?;
        Some(Mutex::new(f))
    })
    .as_ref()
}

fn log_line(path: &Path, what: String) {
    let Some(log) = sync_log() else { return };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let line = format!("{now} {what} {}\n", path.display());
    if let Ok(mut f) = log.lock() {
        let _ = f.write_all(line.as_bytes());
    }
}
