//! The data directory's lock, and the process's list of the directories
//! it holds.
//!
//! Invariant: a directory is listed exactly while a database of this
//! process holds its lock file; the file is closed and the entry removed
//! in one step, under the list's lock.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, ErrorKind, Result};

/// The directory lock of a database open in this process.
///
/// The lock belongs to the database's shared state, which background work
/// (a flush, a compaction) holds until it ends: dropping the last
/// `Database` handle stops new work and the committer, but a task already
/// running finishes first. An open of the same directory in this process
/// meanwhile waits for that release instead of failing with
/// `DatabaseLocked` (the process list below tells it the holder is
/// closing); a directory that is open here is refused once it stayed
/// open for a moment (the last handles of a database may still be held
/// by tasks being cancelled, those of a failed query say). A lock
/// held by no database of this process is retried for a moment before it
/// is taken for another process's: a child process this one is starting
/// (tests and tools spawn many) holds a copy of every open file until it
/// execs, the lock of a database just closed here included.
pub(crate) struct DirLock {
    file: Option<File>,
    key: PathBuf,
    /// The holder's `closed` flag, once registered.
    closed: Option<Arc<AtomicBool>>,
}

/// Data directories locked by this process, each with its database's
/// `closed` flag.
static LOCKED_HERE: parking_lot::Mutex<Vec<(PathBuf, Arc<AtomicBool>)>> = parking_lot::Mutex::new(Vec::new());

/// How long an open waits for a closing database of this process to let
/// go of its directory.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// How long an open retries a lock that no database of this process holds
/// (a starting child process may hold a copy of it until it execs), or
/// one that a database open here holds (its last handles may be going).
const SPAWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

impl DirLock {
    pub async fn acquire(root: &Path) -> Result<DirLock> {
        let key = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        let start = std::time::Instant::now();
        let deadline = start + RELEASE_WAIT;
        loop {
            let err = match lock_dir(root) {
                Ok(file) => {
                    return Ok(DirLock {
                        file: Some(file),
                        key,
                        closed: None,
                    });
                }
                Err(e) if e.kind() == ErrorKind::DatabaseLocked => e,
                Err(e) => return Err(e),
            };
            let holder = LOCKED_HERE
                .lock()
                .iter()
                .find(|(p, _)| *p == key)
                .map(|(_, closed)| closed.load(Ordering::Acquire));
            let closing = match holder {
                // Another process, an open of this one under way, or a
                // child process that has not exec'd yet.
                None if start.elapsed() < SPAWN_GRACE => true,
                None => return Err(err),
                // Open here: its last handles may be on their way out
                // (the tasks of a failed query drop theirs when the
                // runtime cancels them, just after the error returned).
                Some(false) => start.elapsed() < SPAWN_GRACE,
                Some(true) => true,
            };
            if !closing {
                return Err(Error::new(
                    ErrorKind::DatabaseLocked,
                    format!(
                        "the data directory {} is in use: it is already open in this process; share that Database \
                         (clones are cheap) or close it before opening the directory again",
                        root.display()
                    ),
                ));
            }
            if std::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::DatabaseLocked,
                    format!(
                        "the data directory {} is in use: a closed database of this process still holds it after {} s \
                         (its background flush or compaction has not finished); try again later",
                        root.display(),
                        RELEASE_WAIT.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// Lists the lock as held by a database whose `closed` flag this is
    /// (see [`DirLock`]).
    pub fn register(&mut self, closed: &Arc<AtomicBool>) {
        LOCKED_HERE.lock().push((self.key.clone(), closed.clone()));
        self.closed = Some(closed.clone());
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // One step under the list's lock: an open that finds no entry
        // finds the file unlocked too.
        let mut list = LOCKED_HERE.lock();
        drop(self.file.take());
        if let Some(mine) = &self.closed
            && let Some(i) = list.iter().position(|(p, c)| *p == self.key && Arc::ptr_eq(c, mine))
        {
            list.swap_remove(i);
        }
    }
}

fn lock_dir(root: &Path) -> Result<File> {
    let path = root.join("LOCK");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(format!("open lock file {}", path.display()), e))?;
    match f.try_lock() {
        Ok(()) => {
            // The holder's process id, for the message of the next open
            // that finds the directory in use (best effort: the lock is
            // what counts).
            use std::os::unix::fs::FileExt;
            let _ = f
                .set_len(0)
                .and_then(|_| f.write_all_at(format!("{}\n", std::process::id()).as_bytes(), 0));
            Ok(f)
        }
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
                .map(|pid| format!(" (process {pid})"))
                .unwrap_or_default();
            Err(Error::new(
                ErrorKind::DatabaseLocked,
                format!(
                    "the data directory {} is in use by another Cellar process{holder}; read it beside that \
                     process with `cellar --read-only` (`Database::open_read_only`), stop that process to write \
                     here, or use another --data directory",
                    root.display()
                ),
            ))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(format!("lock {}", path.display()), e)),
    }
}
