//! A table's stream shards: one log per range partition, the live
//! partitions' taking new records and the closed ones (split or merged
//! away) kept for reading until their records expire.
//!
//! Layout: partition 0's log is `streams/<table id>/` itself (where the
//! one shard of a table from before partitions lives), partition N's is
//! `streams/<table id>/p<N>/`.
//!
//! Invariants: a shard's log holds only writes committed while its
//! partition was live (the committer routes each write to the log of the
//! partition holding its key, and partitions change only between its
//! rounds), so a reader that finishes a shard before its children reads
//! every write once, in commit order per key; a closed shard is deleted
//! only once its newest record has expired.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::RwLock;

use super::StreamLog;
use crate::error::{Error, Result};

/// Every shard log of one table's stream (see the module docs).
pub(crate) struct StreamShards {
    /// `streams/<table id>`.
    dir: PathBuf,
    /// Read beside the writing process (see [`StreamLog::open_live`]).
    live: bool,
    logs: RwLock<BTreeMap<u64, Arc<StreamLog>>>,
    expiration_hours: AtomicU32,
    origin_columns: RwLock<Arc<Vec<String>>>,
    /// The newest durable write at the database's open: records above it
    /// are cut from the logs opened (see [`StreamLog::open`]).
    keep: u64,
}

impl StreamShards {
    /// The shards `parts` of the stream in `dir`, opened (created when
    /// missing); `live`: beside the process that writes them, changing
    /// nothing; `keep`: the newest durable write (records above it are
    /// cut, see [`StreamLog::open`]).
    pub fn open(dir: &Path, parts: impl IntoIterator<Item = u64>, live: bool, keep: u64) -> Result<Arc<Self>> {
        let shards = Arc::new(StreamShards {
            dir: dir.to_path_buf(),
            live,
            logs: RwLock::new(BTreeMap::new()),
            expiration_hours: AtomicU32::new(u32::MAX),
            origin_columns: RwLock::default(),
            keep,
        });
        for part in parts {
            shards.add(part)?;
        }
        Ok(shards)
    }

    /// The directory of partition `part`'s log.
    pub fn shard_dir(&self, part: u64) -> PathBuf {
        match part {
            0 => self.dir.clone(),
            n => self.dir.join(format!("p{n}")),
        }
    }

    /// Opens (creating) the log of partition `part`, with the stream's
    /// settings.
    pub fn add(&self, part: u64) -> Result<Arc<StreamLog>> {
        if let Some(log) = self.log(part) {
            return Ok(log);
        }
        let dir = self.shard_dir(part);
        let log = match self.live {
            true => StreamLog::open_live(&dir),
            false => StreamLog::open(&dir, self.keep)?,
        };
        let hours = self.expiration_hours.load(Ordering::Acquire);
        if hours != u32::MAX {
            log.set_expiration_hours(hours);
        }
        self.logs.write().insert(part, log.clone());
        Ok(log)
    }

    /// Whether partition `part` left a log here (a closed shard not yet
    /// deleted).
    pub fn exists(&self, part: u64) -> bool {
        match part {
            0 => std::fs::read_dir(&self.dir)
                .map(|rd| rd.flatten().any(|e| e.file_name().to_string_lossy().ends_with(".log")))
                .unwrap_or(false),
            n => self.shard_dir(n).is_dir(),
        }
    }

    /// Deletes shard directories of partitions not in `keep` (left by a
    /// split or merge that a crash stopped before its commit: they hold no
    /// record).
    pub fn remove_others(&self, keep: &[u64]) -> Result<()> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return Ok(());
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(n) = name.strip_prefix('p').and_then(|n| n.parse::<u64>().ok())
                && !keep.contains(&n)
            {
                std::fs::remove_dir_all(e.path())
                    .map_err(|err| Error::io(format!("delete stream shard {}", e.path().display()), err))?;
            }
        }
        Ok(())
    }

    /// The log of partition `part`.
    pub fn log(&self, part: u64) -> Option<Arc<StreamLog>> {
        self.logs.read().get(&part).cloned()
    }

    /// Every shard's log, by partition id.
    pub fn all(&self) -> Vec<(u64, Arc<StreamLog>)> {
        self.logs.read().iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    /// Sets how long records are kept, on every shard.
    pub fn set_expiration_hours(&self, hours: u32) {
        self.expiration_hours.store(hours, Ordering::Release);
        for (_, log) in self.all() {
            log.set_expiration_hours(hours);
        }
    }

    /// How long records are kept, in microseconds (`u64::MAX`: not set).
    pub fn expiration_us(&self) -> u64 {
        match self.expiration_hours.load(Ordering::Acquire) {
            u32::MAX => u64::MAX,
            h => h as u64 * 3_600_000_000,
        }
    }

    /// Sets the origin columns.
    pub fn set_origin_columns(&self, columns: Vec<String>) {
        *self.origin_columns.write() = Arc::new(columns);
    }

    /// The columns whose values before each write its record carries.
    pub fn origin_columns(&self) -> Arc<Vec<String>> {
        self.origin_columns.read().clone()
    }

    /// Bytes of every shard's log.
    pub fn bytes(&self) -> u64 {
        self.all().iter().map(|(_, l)| l.bytes()).sum()
    }

    /// The lowest sequence some shard may still need from the WAL.
    pub fn min_unsynced_seq(&self) -> u64 {
        self.all()
            .iter()
            .map(|(_, l)| l.synced_seq() + 1)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Deletes the log of closed partition `part` once its newest record
    /// committed before `cutoff_us` (or it holds none). Returns whether
    /// it went.
    pub fn retire_expired(&self, part: u64, cutoff_us: u64) -> Result<bool> {
        let Some(log) = self.log(part) else {
            return Ok(false);
        };
        if self.live || log.last_commit_us() >= cutoff_us {
            return Ok(false);
        }
        self.logs.write().remove(&part);
        let dir = self.shard_dir(part);
        let result = match part {
            // Partition 0's files, not its children's directories.
            0 => std::fs::read_dir(&dir).and_then(|rd| {
                for e in rd.flatten() {
                    if e.file_name().to_string_lossy().ends_with(".log") {
                        std::fs::remove_file(e.path())?;
                    }
                }
                Ok(())
            }),
            _ => std::fs::remove_dir_all(&dir),
        };
        match result {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
            Err(e) => Err(Error::io(format!("delete expired stream shard {}", dir.display()), e)),
        }
    }
}
