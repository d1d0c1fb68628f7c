//! The database: a data directory holding tables.
//!
//! Layout under the root:
//! ```text
//! LOCK                                 OS file lock held while open for writing
//! wal/NNNNNNNNNNNNNNNNNNNN.log         the write-ahead log (all tables)
//! catalog/NNNNNNNNNNNNNNNNNNNN.json    table names, ids, schemas, options
//! tables/<id>/manifest/NNNN....json    per table: segments, flushed_seq
//! tables/<id>/segments/NNNN....parquet per table: segment files
//! ```
//! Everything but the WAL and the lock goes through `object_store` (see
//! `docs/format.md`).
//!
//! Parts: [`open`] (the lock, catalog, manifests, WAL replay, clean-up),
//! `load` (reading the WAL, catalog and manifests, for both opens),
//! `catalog` (DDL versions), `inner` (the handle writes and table handles
//! go through), `background` (flush and compaction scheduling), [`table`]
//! (the row API of one table).
//!
//! Invariants: one process holds a directory for writing (an OS lock,
//! released when the last handle and background task let go; read-only
//! opens, [`read_only`], take none and write nothing); DDL is serialised by the
//! catalog lock; a table's id is never reused, so a dropped table's files
//! can never be mistaken for a new table's.

mod archive;
mod background;
mod catalog;
mod index;
mod index_check;
mod index_follow;
mod inner;
mod load;
pub(crate) mod lock;
mod maintain;
pub(crate) mod open;
mod partitions;
pub(crate) mod queued;
mod read_only;
mod reads;
pub(crate) mod series;
mod stream;
mod stream_record;
pub(crate) mod table;
pub(crate) mod transaction;
mod tunnel;
mod tunnel_types;
mod writer;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

pub use self::archive::ArchiveOnDrop;
use self::catalog::CatalogFile;
pub use self::index::{IndexInfo, IndexPhase};
pub use self::index_check::IndexCheck;
use self::inner::DbInner;
pub use self::maintain::{MaintenanceAction, MaintenanceStep};
pub use self::partitions::{PartitionInfo, SplitRange};
pub use self::series::{Series, SeriesOptions, SeriesUpdate};
pub use self::stream::{
    DEFAULT_STREAM_EXPIRATION_HOURS, MAX_STREAM_EXPIRATION_HOURS, MAX_STREAM_RECORDS, SequenceInfo, ShardInfo,
    StreamAction, StreamChange, StreamColumn, StreamDescription, StreamInfo, StreamRecord, StreamRecords, StreamSpec,
    StreamStart,
};
use self::table::Table;
pub use self::tunnel::TunnelWorker;
pub use self::tunnel_types::{
    ChannelContext, ChannelStatus, ProcessFn, ShutdownFn, TunnelChannel, TunnelDescription, TunnelStage, TunnelType,
};
pub(crate) use self::writer::Writer;
use crate::error::{Error, ErrorKind, Result};
use crate::manifest::TableManifest;
use crate::model::api::{GetRow, GetRowResult, RowWrite, WriteResult};
use crate::model::schema::{
    ColumnDef, MAX_BATCH_GET_ROWS, MAX_BATCH_WRITE_ROWS, OptionsUpdate, TableOptions, TableSchema,
};
use crate::state::TableInner;

/// A table's definition as `describe` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct TableDescription {
    /// The table's name, key columns and declared columns.
    pub schema: TableSchema,
    /// The table's options.
    pub options: TableOptions,
}

/// A table or series as `cellar list --long` and `SHOW TABLES` show it.
#[derive(Debug, Clone, PartialEq)]
pub struct TableListing {
    /// The table's or series' name.
    pub name: String,
    /// True for a series (its months are listed as tables).
    pub is_series: bool,
    /// For a month table: its series.
    pub series: Option<String>,
    /// Where the table is archived; `None`: its data is local.
    pub archive: Option<crate::remote::RemoteLocation>,
}

impl TableListing {
    /// `"table"`, `"month"` (a table of a series) or `"series"`.
    pub fn kind(&self) -> &'static str {
        match (self.is_series, &self.series) {
            (true, _) => "series",
            (false, Some(_)) => "month",
            (false, None) => "table",
        }
    }

    /// `"local"` or `"archived"` for a table; `None` for a series.
    pub fn state(&self) -> Option<&'static str> {
        match (self.is_series, &self.archive) {
            (true, _) => None,
            (false, Some(_)) => Some("archived"),
            (false, None) => Some("local"),
        }
    }
}

/// An open database. Cheap to clone; all clones share one writer.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use cellar::{Database, TableSchema, TableOptions, PkType, PrimaryKey, PutRow, GetRow};
/// let dir = tempfile::tempdir().unwrap();
/// let db = Database::open(dir.path()).await.unwrap();
/// db.create_table(
///     TableSchema::new("orders").pk("card", PkType::Integer).pk("order_no", PkType::String),
///     TableOptions::default(),
/// ).await.unwrap();
/// let orders = db.table("orders").unwrap();
/// let pk = PrimaryKey::new().with("card", 1).with("order_no", "a-1");
/// orders.put_row(PutRow::new(pk.clone()).column("amount", 12.5)).await.unwrap();
/// let row = orders.get_row(GetRow::new(pk)).await.unwrap().row.unwrap();
/// assert_eq!(row.latest("amount"), Some(&cellar::Value::Double(12.5)));
/// # });
/// ```
#[derive(Clone)]
pub struct Database {
    inner: Arc<DbInner>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").field("root", &self.inner.root).finish()
    }
}

impl Database {
    /// Closes the database: waits for background flushes, stops the
    /// writer (syncing the WAL) and releases the directory lock. Dropping
    /// every handle does the same, except that a flush already running then
    /// finishes in the background and holds the lock until it is done.
    /// Table handles (and queued writes, open transactions) keep the
    /// database open; drop them first.
    pub async fn close(self) -> Result<()> {
        if !self.inner.is_read_only() {
            // Global indexes catch up first: the next reader finds them so.
            index_follow::drain(&self).await;
        }
        let shared = self.inner.shared.clone();
        shared.closed.store(true, Ordering::Release);
        while shared.background_in_flight.load(Ordering::Acquire) > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let inner = self.inner;
        // Handles still held elsewhere keep the database (and its lock).
        let last_handle = Arc::strong_count(&inner) == 1;
        // Joining the committer blocks; do it off the async threads.
        tokio::task::spawn_blocking(move || drop(inner))
            .await
            .map_err(|e| Error::io("close", e))?;
        // A background task lets go of `Shared` (and with it the directory
        // lock) a moment after it counts itself done: wait for that, so a
        // reopen right after close finds the directory free. With no handle
        // left, nothing but such tasks holds `Shared`, so the wait ends as
        // soon as the runtime polls them; the bound is for a machine so
        // loaded that they wait their turn (1 s was not enough for the
        // test suite on 2 busy cores).
        let wait = if last_handle { 10_000 } else { 0 };
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(wait);
        while Arc::strong_count(&shared) > 1 && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        Ok(())
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        &self.inner.root
    }

    /// Creates a table. Fails with ObjectAlreadyExist if the name is taken.
    pub async fn create_table(&self, schema: TableSchema, options: TableOptions) -> Result<()> {
        self.create_table_in(schema, options, None).await
    }

    /// Creates a table, a month of `series` when given.
    async fn create_table_in(&self, schema: TableSchema, options: TableOptions, series: Option<String>) -> Result<()> {
        self.inner.writable("CREATE TABLE")?;
        schema.validate()?;
        options.validate()?;
        let mut cat = self.inner.catalog.lock().await;
        if self.inner.shared.tables.read().contains_key(&schema.name) {
            return Err(Error::new(
                ErrorKind::ObjectAlreadyExist,
                format!("table '{}' already exists", schema.name),
            ));
        }
        if self.inner.series.read().contains_key(&schema.name) {
            return Err(Error::new(
                ErrorKind::ObjectAlreadyExist,
                format!("'{}' is the name of a series", schema.name),
            ));
        }
        let mut next = cat.1.clone();
        let id = next.add_table(schema.clone(), options, series.clone(), None);
        self.commit_catalog(&mut cat, next).await?;
        let mut manifest = TableManifest::default();
        let storage = &self.inner.shared.storage;
        let parts = crate::state::parts_of(&mut manifest, |m| Ok(storage.open_segment(m.clone())))?;
        let mut t = TableInner::new(id, schema.clone(), options, 0, manifest, parts);
        t.series = series;
        self.inner.shared.tables.write().insert(schema.name, Arc::new(t));
        Ok(())
    }

    /// Changes some options of a table.
    pub async fn alter_table(&self, name: &str, update: OptionsUpdate) -> Result<TableOptions> {
        self.inner.writable("ALTER TABLE")?;
        let mut cat = self.inner.catalog.lock().await;
        let t = self.table_inner(name)?;
        let new = update.apply(&t.options.read());
        new.validate()?;
        if t.index_of.is_some() {
            return Err(Error::param(format!(
                "'{name}' is an index; its options follow its table's (alter the table)"
            )));
        }
        index::options_changed(&t, &new)?;
        let mut next = cat.1.clone();
        for e in &mut next.tables {
            if e.id == t.id {
                e.options = new;
            }
        }
        self.commit_catalog(&mut cat, next).await?;
        *t.options.write() = new;
        Ok(new)
    }

    /// Declares one more attribute column (a SQL type mapping; existing
    /// data is unchanged).
    pub async fn add_column(&self, table: &str, column: ColumnDef) -> Result<()> {
        self.inner.writable("ALTER TABLE .. ADD COLUMN")?;
        let mut cat = self.inner.catalog.lock().await;
        let t = self.table_inner(table)?;
        let mut schema = t.full_schema();
        schema.check_new_column(&column)?;
        schema.columns.push(column);
        self.set_columns(&mut cat, &t, schema).await
    }

    /// Commits `t`'s new predefined columns (in `schema`), then uses them.
    async fn set_columns(&self, cat: &mut (u64, CatalogFile), t: &TableInner, schema: TableSchema) -> Result<()> {
        let mut next = cat.1.clone();
        for e in &mut next.tables {
            if e.id == t.id {
                e.schema = schema.clone();
            }
        }
        self.commit_catalog(cat, next).await?;
        *t.declared.write() = schema.columns;
        Ok(())
    }

    /// Removes a predefined column (DeleteDefinedColumn): writes of any
    /// type to it are accepted again; its data stays. Refused while an
    /// index uses it.
    pub async fn drop_column(&self, table: &str, column: &str) -> Result<()> {
        self.inner.writable("ALTER TABLE .. DROP COLUMN")?;
        let mut cat = self.inner.catalog.lock().await;
        let t = self.table_inner(table)?;
        let mut schema = t.full_schema();
        if !schema.columns.iter().any(|c| c.name == column) {
            let known: Vec<&str> = schema.columns.iter().map(|c| c.name.as_str()).collect();
            return Err(Error::new(
                ErrorKind::ObjectNotExist,
                format!(
                    "table '{table}' has no predefined column '{column}'; its predefined columns: {}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        }
        index::check_column_unused(&cat.1, table, column)?;
        schema.columns.retain(|c| c.name != column);
        self.set_columns(&mut cat, &t, schema).await
    }

    /// Drops a table and deletes its files. Refuses an archived table:
    /// see [`Database::drop_table_with`].
    pub async fn drop_table(&self, name: &str) -> Result<()> {
        self.drop_table_with(name, ArchiveOnDrop::Refuse).await
    }

    /// Drops a table from the catalog and deletes its local files.
    async fn drop_local_table(&self, name: &str) -> Result<()> {
        let mut cat = self.inner.catalog.lock().await;
        let t = self.table_inner(name)?;
        let mut next = cat.1.clone();
        next.tables.retain(|e| e.id != t.id);
        self.commit_catalog(&mut cat, next).await?;
        t.dropped.store(true, Ordering::Release);
        self.inner.shared.tables.write().remove(name);
        if t.stream.write().take().is_some() {
            stream::remove_dir(&stream::stream_dir(self.path(), t.id))?;
        }
        // Wait for a running flush of the table, then delete its objects.
        let _f = t.flushing.lock().await;
        let _m = t.manifest.lock().await;
        tunnel::delete_prefix(self, &tunnel::tunnel_prefix(t.id)).await?;
        archive::delete_local(&self.inner.shared.storage, &format!("tables/{}", t.id)).await
    }

    /// Table names, sorted (indexes not among them: see
    /// [`Database::list_indexes`]).
    pub fn list_tables(&self) -> Vec<String> {
        let tables = self.inner.shared.tables.read();
        tables
            .iter()
            .filter(|(_, t)| t.index_of.is_none())
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Every table and series with where its data is, sorted by name.
    pub fn table_listing(&self) -> Vec<TableListing> {
        let mut out: Vec<TableListing> = self
            .inner
            .shared
            .tables
            .read()
            .iter()
            .filter(|(_, t)| t.index_of.is_none())
            .map(|(name, t)| TableListing {
                name: name.clone(),
                is_series: false,
                series: t.series.clone(),
                archive: t
                    .archive
                    .read()
                    .as_ref()
                    .filter(|a| a.complete)
                    .map(|a| a.location.clone()),
            })
            .collect();
        out.extend(self.list_series().into_iter().map(|name| TableListing {
            name,
            is_series: true,
            series: None,
            archive: None,
        }));
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// A table's schema and options.
    pub fn describe_table(&self, name: &str) -> Result<TableDescription> {
        let t = self.table_inner(name)?;
        Ok(TableDescription {
            schema: t.full_schema(),
            options: *t.options.read(),
        })
    }

    /// A handle for the row API of one table.
    pub fn table(&self, name: &str) -> Result<Table> {
        Ok(Table::new(self.inner.clone(), self.table_inner(name)?))
    }

    fn table_inner(&self, name: &str) -> Result<Arc<TableInner>> {
        self.inner.table_inner(name)
    }

    async fn commit_catalog(&self, cat: &mut (u64, CatalogFile), next: CatalogFile) -> Result<()> {
        self.inner.writable("a catalog change")?;
        let version = cat.0 + 1;
        self.inner
            .catalog_log
            .commit(
                &*self.inner.store,
                self.inner.shared.storage.local_root.as_deref(),
                version,
                &next,
            )
            .await?;
        *cat = (version, next);
        Ok(())
    }

    /// BatchWriteRow: up to 200 row writes across tables (and series: each
    /// write goes to its month), committed together when valid. Each row
    /// gets its own result.
    pub async fn batch_write(&self, writes: Vec<(String, RowWrite)>) -> Result<Vec<Result<WriteResult>>> {
        if writes.len() > MAX_BATCH_WRITE_ROWS {
            return Err(Error::param(format!(
                "BatchWriteRow got {} rows; at most {MAX_BATCH_WRITE_ROWS} are accepted",
                writes.len()
            )));
        }
        self.enqueue_routed(writes).await?.durable().await
    }

    /// BatchGetRow: up to 100 rows across tables, each with its own result.
    pub async fn batch_get(&self, gets: Vec<(String, GetRow)>) -> Result<Vec<Result<GetRowResult>>> {
        if gets.len() > MAX_BATCH_GET_ROWS {
            return Err(Error::param(format!(
                "BatchGetRow got {} rows; at most {MAX_BATCH_GET_ROWS} are accepted",
                gets.len()
            )));
        }
        let mut out = Vec::with_capacity(gets.len());
        for (table, get) in gets {
            out.push(match self.table(&table) {
                Ok(t) => t.get_row(get).await,
                Err(e) => Err(e),
            });
        }
        Ok(out)
    }

    /// Writer stall time so far, in microseconds.
    pub fn stall_micros(&self) -> u64 {
        self.inner.shared.stall_micros.load(Ordering::Relaxed)
    }

    /// How many times this process let go of the mapped segment pages
    /// (each time scans had read `DbOptions::mapped_segment_bytes` more).
    pub fn mapped_page_releases(&self) -> u64 {
        self.inner.shared.storage.residency.releases()
    }

    /// What the cache of decoded pages behind point and range reads holds
    /// and has done (`DbOptions::page_cache_bytes`).
    pub fn page_cache_stats(&self) -> crate::segment::pages::PageCacheStats {
        self.inner.shared.storage.page_cache.stats()
    }

    /// Bytes appended to the write-ahead log since the database was opened
    /// (with flush and compaction bytes: the write amplification).
    pub fn wal_bytes(&self) -> u64 {
        self.inner.shared.wal_bytes.load(Ordering::Relaxed)
    }
}
