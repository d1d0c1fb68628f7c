//! The read-only open: a database read beside the process that writes it
//! (as RocksDB's secondary instances and DuckDB's read-only attach).
//!
//! A read-only database loads the directory as it is (the manifests plus
//! the WAL's whole records, see [`load`](super::load)) and shows that
//! state until [`Database::refresh`] loads it again; the CLI refreshes
//! before each statement. A refresh reads only the WAL records past where
//! the last one stopped when no catalog or manifest version changed (the
//! writer only wrote), and loads everything again otherwise. Table handles taken before a refresh keep
//! reading the state they were taken from.
//!
//! Invariants: it takes no lock and creates, changes or deletes no file:
//! there is no WAL writer, no committer and no background work, archived
//! segments' tails are not cached, and leftovers of interrupted commits
//! are left to the writer. Every change (a write, DDL, a flush, a
//! compaction, an archive) is refused with `ReadOnly` before anything
//! happens. The loaded state holds every local segment it names open
//! (`Segment::pin`), so it stays readable, whole, after the writer's
//! compactions delete those files: a statement never sees part of one
//! state and part of another.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::RwLock;

use super::Database;
use super::background::Shared;
use super::inner::DbInner;
use crate::error::{Error, ErrorKind, Result};
use crate::manifest::ManifestLog;
use crate::options::DbOptions;

impl Database {
    /// Opens the database in `path` for reading only, beside the process
    /// that may hold it for writing; see [`open_read_only_with`](Self::open_read_only_with).
    pub async fn open_read_only(path: impl AsRef<Path>) -> Result<Database> {
        Self::open_read_only_with(path, DbOptions::default()).await
    }

    /// Opens the database in `path` for reading only. It takes no lock (a
    /// writer may hold the directory, or open it later), writes nothing,
    /// and shows every write that was in the directory when it was opened
    /// (the manifests, and the WAL's whole records, durable or about to
    /// be) until [`refresh`](Self::refresh). Every change is refused with
    /// [`ErrorKind::ReadOnly`]. Options that shape writes are ignored.
    pub async fn open_read_only_with(path: impl AsRef<Path>, options: DbOptions) -> Result<Database> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::new(
                ErrorKind::Closed,
                "Database::open_read_only must run inside a Tokio runtime (e.g. #[tokio::main])",
            )
        })?;
        let root = path.as_ref().to_path_buf();
        if !root.is_dir() {
            return Err(Error::param(format!(
                "the data directory {} does not exist, so there is nothing to read (a read-only open creates nothing)",
                root.display()
            )));
        }
        let storage = super::load::storage_for(&root, &options)?;
        let store = storage.store.clone();
        let loaded = super::load::load(&root, &storage, true, &[]).await?;
        attach_streams(&root, &loaded)?;
        let compaction_slots = tokio::sync::Semaphore::new(1);
        let shared = Arc::new_cyclic(|me| Shared {
            options,
            storage,
            tables: RwLock::new(loaded.tables),
            visible_seq: AtomicU64::new(loaded.max_seq),
            durable_seq: AtomicU64::new(loaded.max_seq),
            stall_micros: AtomicU64::new(0),
            wal_bytes: AtomicU64::new(0),
            runtime,
            commit_tx: Default::default(),
            me: me.clone(),
            closed: Arc::new(AtomicBool::new(false)),
            background_in_flight: AtomicUsize::new(0),
            compaction_slots,
            lock: None,
            read_only: true,
        });
        let series = super::load::series_map(&loaded.catalog);
        let catalog = (loaded.catalog_version, loaded.catalog);
        Ok(Database {
            inner: Arc::new(DbInner {
                shared,
                commit_tx: None,
                root,
                store,
                catalog_log: ManifestLog::new("catalog"),
                series: parking_lot::RwLock::new(series),
                catalog: tokio::sync::Mutex::new(catalog),
                committer: parking_lot::Mutex::new(None),
                next_txn: std::sync::atomic::AtomicU64::new(1),
                wal_cursor: tokio::sync::Mutex::new(loaded.wal_cursor),
            }),
        })
    }

    /// Whether the database was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.inner.is_read_only()
    }

    /// Loads a read-only database's directory again, so that what its
    /// writer committed since is seen: tables, series, segments and the
    /// WAL's new records. Statements and table handles already under way
    /// keep the state they started with. A database open for writing
    /// sees its own writes already: this does nothing there.
    pub async fn refresh(&self) -> Result<()> {
        if !self.is_read_only() {
            return Ok(());
        }
        let mut cursor = self.inner.wal_cursor.lock().await;
        let shared = &self.inner.shared;
        // Only new WAL records since the last load (the common case: the
        // writer wrote, and neither flushed, compacted nor ran DDL): they
        // go into the loaded memtables, as the writer's committer puts
        // them into its own. The WAL is read before the versions are
        // checked (see `load::read_tail`).
        if let Some(at) = *cursor
            && let Some((tail, next)) = super::load::read_tail(&self.inner.root, at).await?
            && !self.is_stale().await?
        {
            let tables: Vec<_> = shared.tables.read().values().cloned().collect();
            let max_seq = super::load::apply_tail(&tables, tail.entries).await;
            shared.visible_seq.fetch_max(max_seq, Ordering::AcqRel);
            *cursor = next.or(*cursor);
            return Ok(());
        }
        let mut catalog = self.inner.catalog.lock().await;
        let previous: Vec<_> = shared.tables.read().values().cloned().collect();
        let loaded = super::load::load(&self.inner.root, &shared.storage, true, &previous).await?;
        attach_streams(&self.inner.root, &loaded)?;
        // The new memtables hold nothing above `max_seq`; what was visible
        // stays visible.
        shared.visible_seq.fetch_max(loaded.max_seq, Ordering::AcqRel);
        *shared.tables.write() = loaded.tables;
        *self.inner.series.write() = super::load::series_map(&loaded.catalog);
        *catalog = (loaded.catalog_version, loaded.catalog);
        *cursor = loaded.wal_cursor;
        Ok(())
    }

    /// Whether the directory changed since this read-only database loaded
    /// it in ways a [`refresh`](Self::refresh) would pick up beyond new
    /// WAL records: a newer catalog (DDL), or a newer manifest of a table
    /// (a flush or a compaction committed). Always false for a database
    /// open for writing.
    pub async fn is_stale(&self) -> Result<bool> {
        if !self.is_read_only() {
            return Ok(false);
        }
        let store = &*self.inner.store;
        let loaded_catalog = self.inner.catalog.lock().await.0;
        if self.inner.catalog_log.newest_version(store).await? != loaded_catalog {
            return Ok(true);
        }
        let tables: Vec<_> = self.inner.shared.tables.read().values().cloned().collect();
        for t in tables.iter().filter(|t| !t.is_archived()) {
            let loaded = t.manifest.lock().await.0;
            let log = ManifestLog::new(&format!("tables/{}/manifest", t.id));
            if log.newest_version(store).await? != loaded {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// Gives each loaded table with a change stream its log, read beside the
/// writer (`StreamLog::open_live`).
fn attach_streams(root: &Path, loaded: &super::load::Loaded) -> crate::error::Result<()> {
    for entry in loaded
        .catalog
        .tables
        .iter()
        .filter(|e| e.stream.is_some() && e.archive.is_none())
    {
        if let Some(t) = loaded.tables.get(&entry.schema.name) {
            *t.stream.write() = Some(super::stream::open_live(root, t)?);
        }
    }
    Ok(())
}
