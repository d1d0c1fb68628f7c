//! Opening a database for writing: the directory lock, loading the WAL,
//! catalog and manifests ([`load`](super::load)), and the clean-up of
//! what a crash left behind.
//!
//! Invariants: the lock is held before anything is read or changed;
//! opening contacts no archive location (archived segments are read on
//! first use); files no manifest names are deleted only after every
//! manifest has been read; the committer starts after replay, numbering
//! writes after the highest sequence seen.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use parking_lot::RwLock;
use tokio::sync::mpsc;

use super::Database;
use super::background::Shared;
use super::inner::DbInner;
use super::lock::DirLock;
use crate::error::{Error, ErrorKind, Result};
use crate::manifest::ManifestLog;
use crate::options::DbOptions;
use crate::state::TableInner;
use crate::wal::{self, WalWriter};
use crate::write::committer::{self, CommitHost, CommitMsg};

impl Database {
    /// Opens (creating if needed) the database in `path` with default options.
    pub async fn open(path: impl AsRef<Path>) -> Result<Database> {
        Self::open_with(path, DbOptions::default()).await
    }

    /// Opens the database in `path`: takes the directory lock, loads the
    /// catalog and manifests, and replays the WAL.
    pub async fn open_with(path: impl AsRef<Path>, options: DbOptions) -> Result<Database> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::new(
                ErrorKind::Closed,
                "Database::open must run inside a Tokio runtime (e.g. #[tokio::main])",
            )
        })?;
        for (name, level) in [
            ("compaction_zstd_level", options.compaction_zstd_level),
            ("compaction_point_zstd_level", options.compaction_point_zstd_level),
        ] {
            if let Some(level) = level
                && !(1..=22).contains(&level)
            {
                return Err(Error::param(format!(
                    "DbOptions::{name} {level} is out of range: ZSTD levels are 1 to 22 (None: LZ4)"
                )));
            }
        }
        let root = path.as_ref().to_path_buf();
        std::fs::create_dir_all(root.join("wal"))
            .map_err(|e| Error::io(format!("create data directory {}", root.display()), e))?;
        let mut lock = DirLock::acquire(&root).await?;
        let closed = Arc::new(AtomicBool::new(false));
        lock.register(&closed);
        let storage = super::load::storage_for(&root, &options)?;
        let store = storage.store.clone();
        let loaded = super::load::load(&root, &storage, false, &[]).await?;
        let tables: Vec<_> = loaded.tables.values().cloned().collect();
        delete_orphans(&*store, &tables).await?;
        if let Some(root) = &storage.local_root {
            delete_staged_uploads(root.join("tables")).await?;
        }
        if loaded.torn_bytes > 0 {
            eprintln!(
                "cellar: dropped a torn {}-byte tail of the WAL (a write cut short by a crash; never acknowledged)",
                loaded.torn_bytes
            );
        }
        let (max_seq, mut last_commit_us) = (loaded.max_seq, loaded.last_commit_us);
        for entry in loaded
            .catalog
            .tables
            .iter()
            .filter(|e| e.stream.is_some() && e.archive.is_none())
        {
            let Some(t) = loaded.tables.get(&entry.schema.name) else {
                continue;
            };
            let Some(stream) = &entry.stream else { continue };
            let now_us = options.clock.now_ms().max(0) as u64 * 1000;
            let shards = super::stream::open_log(&root, t, &stream.spec, &loaded.stream_entries, (max_seq, now_us))?;
            for (_, log) in shards.all() {
                last_commit_us = last_commit_us.max(log.last_commit_us());
            }
            *t.stream.write() = Some(shards);
        }
        drop(loaded.stream_entries);
        let mut wal = WalWriter::create(
            &root.join("wal"),
            loaded.wal_files,
            options.durability,
            options.wal_file_bytes,
            options.wal_opener.clone(),
        )?;
        // WAL files left by earlier runs whose writes are all flushed.
        let min_unflushed = tables
            .iter()
            .filter_map(|t| t.min_unflushed_seq())
            .min()
            .unwrap_or(u64::MAX);
        wal.delete_obsolete(min_unflushed)?;
        let (catalog_version, catalog, tables) = (loaded.catalog_version, loaded.catalog, loaded.tables);

        let durability = options.durability;
        let compaction_slots = tokio::sync::Semaphore::new(options.max_background_compactions.max(1));
        let shared = Arc::new_cyclic(|me| Shared {
            options,
            storage,
            tables: RwLock::new(tables),
            visible_seq: AtomicU64::new(max_seq),
            durable_seq: AtomicU64::new(max_seq),
            stall_micros: AtomicU64::new(0),
            wal_bytes: AtomicU64::new(0),
            runtime,
            commit_tx: OnceLock::new(),
            me: me.clone(),
            closed,
            background_in_flight: AtomicUsize::new(0),
            compaction_slots,
            lock: Some(lock),
            read_only: false,
        });
        super::stream::start_syncing(Arc::downgrade(&shared))?;
        let (tx, rx) = mpsc::channel(4096);
        let host: Arc<dyn CommitHost> = shared.clone();
        let core = committer::Committer::new(host, wal, max_seq + 1, last_commit_us);
        let tx = committer::CommitSender::new(tx, core.clone());
        let _ = shared.commit_tx.set(tx.downgrade());
        let thread_core = core;
        let committer = std::thread::Builder::new()
            .name("cellar-commit".into())
            .spawn(move || committer::run(thread_core, rx))
            .map_err(|e| Error::io("start the committer thread", e))?;
        if shared.options.auto_compaction {
            // Tables with a TTL: data expires without any write, so look
            // for wholly expired segments now and then.
            let weak = Arc::downgrade(&shared);
            let every = shared
                .options
                .compaction_check_interval
                .max(std::time::Duration::from_millis(10));
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let Some(shared) = weak.upgrade() else { break };
                    if shared.closed.load(Ordering::Acquire) {
                        break;
                    }
                    for t in shared.live_tables() {
                        if t.options.read().ttl_secs > 0 {
                            shared.schedule_compaction(t);
                        }
                    }
                }
            });
        }
        if let Some(quiet) = shared.options.background_overlays {
            let weak = Arc::downgrade(&shared);
            let quiet = quiet.max(std::time::Duration::from_millis(1));
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(quiet);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut seen = std::collections::HashMap::new();
                loop {
                    tick.tick().await;
                    let Some(shared) = weak.upgrade() else { break };
                    if shared.closed.load(Ordering::Acquire) {
                        break;
                    }
                    shared.warm_overlays(&mut seen);
                }
            });
        }
        if let wal::Durability::IntervalMs(ms) = durability {
            let weak = tx.downgrade();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_millis(ms.max(1)));
                loop {
                    tick.tick().await;
                    let Some(tx) = weak.upgrade() else { break };
                    if tx.send(CommitMsg::Sync { done: None }).await.is_err() {
                        break;
                    }
                }
            });
        }
        let db = Database {
            inner: Arc::new(DbInner {
                shared,
                commit_tx: Some(tx),
                root,
                store,
                catalog_log: ManifestLog::new("catalog"),
                series: parking_lot::RwLock::new(super::load::series_map(&catalog)),
                catalog: tokio::sync::Mutex::new((catalog_version, catalog)),
                committer: parking_lot::Mutex::new(Some(committer)),
                next_txn: std::sync::atomic::AtomicU64::new(1),
                wal_cursor: tokio::sync::Mutex::new(None),
            }),
        };
        db.resume_indexes();
        Ok(db)
    }
}

/// Deletes objects under `tables/` that no manifest references: segments
/// written by a flush or compaction that crashed before its manifest commit,
/// inputs of a compaction whose deletion was cut short, and the files of a
/// table whose drop was interrupted. Only unreferenced files go.
async fn delete_orphans(store: &dyn ObjectStore, tables: &[Arc<TableInner>]) -> Result<()> {
    let objects: Vec<_> = store
        .list(Some(&object_store::path::Path::from("tables")))
        .try_collect()
        .await?;
    for o in objects {
        let parts: Vec<_> = o.location.parts().map(|p| p.as_ref().to_string()).collect();
        let (Some(id), Some(kind)) = (parts.get(1).and_then(|p| p.parse::<u64>().ok()), parts.get(2)) else {
            continue;
        };
        let orphan = match tables.iter().find(|t| t.id == id) {
            None => true,
            // An archived table's local files: what an archive had not
            // freed yet, or a restore had not finished.
            Some(t) if t.is_archived() => true,
            Some(t) if kind == "segments" => {
                let m = t.manifest.lock().await;
                !m.1.segments.iter().any(|s| s.path == o.location.as_ref())
            }
            Some(_) => false,
        };
        if orphan {
            match store.delete(&o.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Deletes the staging files of streamed uploads (compaction outputs) that
/// a crash cut short. The local object store stages an upload as
/// `NAME#N` beside its destination and leaves such files out of listings,
/// so `delete_orphans` never sees them.
async fn delete_staged_uploads(tables: PathBuf) -> Result<()> {
    tokio::task::spawn_blocking(move || -> Result<()> {
        let Ok(dirs) = std::fs::read_dir(&tables) else {
            return Ok(());
        };
        for table in dirs.flatten() {
            let Ok(files) = std::fs::read_dir(table.path().join("segments")) else {
                continue;
            };
            for f in files.flatten() {
                let name = f.file_name();
                let staged = name
                    .to_str()
                    .and_then(|n| n.rsplit_once('#'))
                    .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
                if staged {
                    match std::fs::remove_file(f.path()) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(Error::io(format!("delete {}", f.path().display()), e)),
                    }
                }
            }
        }
        Ok(())
    })
    .await
    .map_err(|e| Error::io("delete staged uploads", e))?
}
