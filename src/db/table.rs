//! The row API of one table.
//!
//! Invariants: a write returns once it is durable (or fails, changing
//! nothing); a read sees one snapshot; a handle of a dropped table
//! refuses reads and writes with `ObjectNotExist`.

use std::sync::Arc;

use super::queued::QueuedWrites;
use crate::model::api::{
    DeleteRow, GetRange, GetRow, GetRowResult, PutRow, RangeResult, RowWrite, UpdateRow, WriteResult,
};

use super::inner::DbInner;
use super::reads::{read_range, read_row};
use super::transaction::Transaction;
use crate::compaction;
use crate::error::{Error, ErrorKind, Result};
use crate::model::schema::{TableOptions, TableSchema};
use crate::state::TableInner;

/// A handle on one table. Cheap to clone.
#[derive(Clone)]
pub struct Table {
    db: Arc<DbInner>,
    inner: Arc<TableInner>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("name", &self.name()).finish()
    }
}

/// Storage counters of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableStats {
    /// Segments the table's data is in.
    pub segments: usize,
    /// Their total size in bytes.
    pub segment_bytes: u64,
    /// Bytes of writes held in memtables, not yet flushed.
    pub memtable_bytes: usize,
    /// Memtables frozen and waiting for their flush.
    pub frozen_memtables: usize,
    /// Flushes since the table was created.
    pub flushes: u64,
    /// Bytes of segments written by flushes.
    pub flush_bytes: u64,
    /// Compactions since the table was created.
    pub compactions: u64,
    /// Bytes written by compactions.
    pub compaction_bytes: u64,
    /// Bytes of segments compactions merged.
    pub compaction_read_bytes: u64,
    /// Bytes of segments compactions carried into their output run as they
    /// were: they overlapped no other segment the compaction took (keys
    /// written in order).
    pub compaction_moved_bytes: u64,
    /// Sorted runs the segments form (reads merge across runs).
    pub runs: usize,
    /// Time writers of the whole database spent stalled (write buffer full
    /// or compaction behind), in microseconds.
    pub write_stall_micros: u64,
    /// Memtable overlays SQL scans built since the table was opened: each
    /// places the memtable's keys in a segment once, for every scan until
    /// the next write (see `docs/decisions.md`, "Memtable overlays").
    pub scan_overlay_builds: u64,
    /// Overlays SQL scans brought up to date after writes by placing and
    /// folding only the keys written since, instead of building them anew.
    pub scan_overlay_extensions: u64,
    /// The memory the memtables' overlays hold now (rows of the columns
    /// scans asked for, keys and their places).
    pub scan_overlay_bytes: u64,
    /// Memtable keys whose UpdateRows overlays laid over their segment
    /// rows column by column, instead of reading those rows to merge them
    /// (see `docs/decisions.md`, "Memtable overlays").
    pub scan_overlay_laid_over: u64,
    /// Pages of the columns read by SQL scans with non-key predicates, in
    /// the key ranges they scanned, since the table was opened.
    pub scan_pages: u64,
    /// Of those, the pages read: the rest were ruled out by row-group and
    /// page statistics (see `docs/decisions.md`, "Page statistics").
    pub scan_pages_read: u64,
    /// The last flush's error, if it failed (it is retried).
    pub last_flush_error: Option<String>,
    /// The last compaction's error, if it failed (it is retried).
    pub last_compaction_error: Option<String>,
}

/// The bytes one column takes in a table's segments (see
/// [`Table::column_sizes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnSize {
    /// A column of the segment layout: a key or attribute column, or one of
    /// Cellar's own (`__pk`, `__cells`, `__seq`, ...; `docs/format.md`).
    pub column: String,
    /// Bytes on disk (compressed), over every segment.
    pub bytes: u64,
    /// Bytes once decompressed.
    pub uncompressed_bytes: u64,
}

impl Table {
    pub(crate) fn new(db: Arc<DbInner>, inner: Arc<TableInner>) -> Self {
        Table { db, inner }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.inner.schema.name
    }

    /// The table's name and key columns (declared columns: [`Table::declared_columns`]).
    pub fn schema(&self) -> &TableSchema {
        &self.inner.schema
    }

    /// The table's current options.
    pub fn options(&self) -> TableOptions {
        *self.inner.options.read()
    }

    /// The declared attribute columns (a SQL type mapping).
    pub fn declared_columns(&self) -> Vec<crate::model::schema::ColumnDef> {
        self.inner.declared.read().clone()
    }

    pub(crate) fn inner(&self) -> &Arc<TableInner> {
        &self.inner
    }

    /// A consistent view of every partition for one read, in key order.
    pub(crate) fn snapshots(&self) -> Vec<crate::state::Snapshot> {
        self.inner.snapshots(&self.db.shared().visible_seq)
    }

    /// The table's indexes as tables, each with its definition and
    /// whether it is complete (not being built).
    pub(crate) fn index_tables(&self) -> Vec<(Arc<crate::model::index::IndexDef>, Table, bool)> {
        self.inner
            .indexes
            .read()
            .iter()
            .map(|i| {
                let building = i.building.load(std::sync::atomic::Ordering::Acquire);
                (i.def.clone(), Table::new(self.db.clone(), i.table.clone()), !building)
            })
            .collect()
    }

    /// Snapshots of this table and of `other` at one sequence (an index
    /// and its table read together).
    pub(crate) fn snapshots_with(&self, other: &Table) -> (Vec<crate::state::Snapshot>, Vec<crate::state::Snapshot>) {
        let seq =
            std::sync::atomic::AtomicU64::new(self.db.shared().visible_seq.load(std::sync::atomic::Ordering::Acquire));
        (self.inner.snapshots(&seq), other.inner.snapshots(&seq))
    }

    /// The database clock, in milliseconds.
    pub(crate) fn now_ms(&self) -> i64 {
        self.db.now_ms()
    }

    /// Attribute columns found in the data, with how many values of each
    /// type were written (`ValueType::index` order). Segment metadata and
    /// memtable counters only: no file is read.
    pub(crate) fn discovered_columns(&self) -> std::collections::BTreeMap<String, [u64; 5]> {
        let st = self.inner.state.read();
        let mut out: std::collections::BTreeMap<String, [u64; 5]> = Default::default();
        for seg in st.all_segments().iter() {
            for (i, (name, types)) in seg.meta.columns.iter().enumerate() {
                let e = out.entry(name.clone()).or_default();
                match seg.meta.value_counts.get(i) {
                    Some(c) => e.iter_mut().zip(c).for_each(|(a, b)| *a += b),
                    None => {
                        for (k, (bit, _, _)) in crate::segment::format::VALUE_CHILDREN.iter().enumerate() {
                            if types.has(*bit) {
                                e[k] += 1;
                            }
                        }
                    }
                }
            }
        }
        for m in st.all_memtables() {
            for (name, c) in m.value_counts() {
                let e = out.entry(name).or_default();
                e.iter_mut().zip(&c).for_each(|(a, b)| *a += b);
            }
        }
        out
    }

    fn check_live(&self) -> Result<()> {
        if self.inner.dropped.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::new(
                ErrorKind::ObjectNotExist,
                format!("table '{}' was dropped", self.name()),
            ));
        }
        Ok(())
    }

    /// Any single-row write; returns once it is durable, with the capacity
    /// units it consumed and what its [`ReturnType`](crate::model::api::ReturnType) asks.
    pub async fn write(&self, w: RowWrite) -> Result<WriteResult> {
        self.check_live()?;
        let mut r = self.db.write_many([(self.name(), w)]).await?;
        r.pop().unwrap_or_else(|| Err(Error::closed()))
    }

    /// Several writes to this table (at most 200, like BatchWriteRow)
    /// committed together (one WAL record); each gets its own result
    /// (invalid ones fail alone).
    pub async fn write_batch(&self, writes: Vec<RowWrite>) -> Result<Vec<Result<WriteResult>>> {
        self.check_live()?;
        crate::model::schema::check_batch_len(writes.len())?;
        self.db.write_many(writes.into_iter().map(|w| (self.name(), w))).await
    }

    /// Queues several writes to this table as one group, like
    /// [`Table::write_batch`], but returns as soon as the committer has them
    /// instead of once they are durable. Groups queued one after another
    /// are committed in that order (ascending sequence numbers), so a
    /// loader can keep many groups in flight without reordering its writes:
    /// queue in input order, then await [`QueuedWrites::durable`] of each.
    /// Waits (backpressure) while the committer's queue is full.
    pub async fn enqueue_batch(&self, writes: Vec<RowWrite>) -> Result<QueuedWrites> {
        self.check_live()?;
        crate::model::schema::check_batch_len(writes.len())?;
        self.db.enqueue_many(writes.into_iter().map(|w| (self.name(), w))).await
    }

    /// PutRow: writes a row, replacing every earlier column and version of it; returns once durable.
    pub async fn put_row(&self, p: PutRow) -> Result<WriteResult> {
        self.write(RowWrite::Put(p)).await
    }

    /// UpdateRow: changes some columns of a row, creating it if needed; returns once durable.
    pub async fn update_row(&self, u: UpdateRow) -> Result<WriteResult> {
        self.write(RowWrite::Update(u)).await
    }

    /// DeleteRow: removes a row; returns once durable.
    pub async fn delete_row(&self, d: DeleteRow) -> Result<WriteResult> {
        self.write(RowWrite::Delete(d)).await
    }

    /// GetRow: the row (`None` when it does not exist) and the capacity
    /// units read.
    pub async fn get_row(&self, get: GetRow) -> Result<GetRowResult> {
        self.check_live()?;
        // A key that does not encode is refused by the read itself.
        let key = self.inner.schema.encode_pk(&get.primary_key).unwrap_or_default();
        let snap = self.inner.snapshot_for(&key, &self.db.shared().visible_seq);
        read_row(&self.inner, &snap, self.db.now_ms(), get).await
    }

    /// GetRange: one response of at most `limit`, 5000 rows or 4 MiB, with
    /// `next_start` set when more rows may remain.
    pub async fn get_range(&self, req: GetRange) -> Result<RangeResult> {
        self.check_live()?;
        let snaps = self.snapshots();
        read_range(&self.inner, &snaps, self.db.now_ms(), req, None).await
    }

    /// Starts a local transaction on one partition key value (a value of
    /// the first primary-key column): until it commits or aborts, or
    /// expires after 60 s without use, every other write to that value is
    /// refused with `RowOperationConflict`; its own writes commit all
    /// together (see [`Transaction`]).
    pub async fn start_transaction(
        &self,
        partition_key: impl Into<crate::model::types::PkValue>,
    ) -> Result<Transaction> {
        self.check_live()?;
        Transaction::start(self.db.clone(), self.inner.clone(), partition_key.into()).await
    }

    /// Freezes the memtable and waits until it is a segment.
    pub async fn flush(&self) -> Result<()> {
        self.check_live()?;
        self.db.writable("a flush")?;
        if self.inner.is_archived() {
            return Ok(());
        }
        self.db.flush_table(&self.inner).await
    }

    /// Full compaction: flushes, then merges every segment into new ones,
    /// dropping deleted rows, tombstones, expired versions and versions
    /// beyond `max_versions`. Waits until done.
    pub async fn compact(&self) -> Result<()> {
        self.flush().await?;
        if self.inner.is_archived() {
            // An archive is compacted once, when it is made.
            return Ok(());
        }
        // A compaction gives up when the table's options change while it
        // runs (it may have dropped versions the new options show).
        for _ in 0..3 {
            if self.db.compact_table(&self.inner, compaction::Pick::Full).await? {
                return Ok(());
            }
            self.check_live()?;
            if self.inner.state.read().parts.iter().all(|p| p.segments.is_empty()) {
                return Ok(());
            }
        }
        Err(Error::new(
            ErrorKind::Io,
            format!(
                "compaction of table '{}' was given up three times because its options kept changing; retry",
                self.inner.schema.name
            ),
        ))
    }

    /// Merges the newest `runs` sorted runs only (what the background
    /// policy does a step at a time); for tests and tools.
    #[doc(hidden)]
    pub async fn compact_newest(&self, runs: usize) -> Result<bool> {
        self.check_live()?;
        self.db.compact_table(&self.inner, compaction::Pick::Newest(runs)).await
    }

    /// Where the table's segment bytes go: each column's bytes over every
    /// segment, read from their Parquet footers, largest first (memtables
    /// are not counted). An archived table's footers are fetched once.
    pub async fn column_sizes(&self) -> Result<Vec<ColumnSize>> {
        self.check_live()?;
        let segments = self.inner.state.read().all_segments();
        let mut out: Vec<ColumnSize> = Vec::new();
        for seg in segments.iter() {
            for (column, bytes, uncompressed_bytes) in seg.column_bytes().await? {
                match out.iter_mut().find(|c| c.column == column) {
                    Some(c) => {
                        c.bytes += bytes;
                        c.uncompressed_bytes += uncompressed_bytes;
                    }
                    None => out.push(ColumnSize {
                        column,
                        bytes,
                        uncompressed_bytes,
                    }),
                }
            }
        }
        out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.column.cmp(&b.column)));
        Ok(out)
    }

    /// Storage counters.
    pub fn stats(&self) -> TableStats {
        use std::sync::atomic::Ordering::Relaxed;
        let st = self.inner.state.read();
        let segments = st.all_segments();
        TableStats {
            segments: segments.len(),
            segment_bytes: segments.iter().map(|s| s.meta.size_bytes).sum(),
            memtable_bytes: st.parts.iter().map(|p| p.active.approx_bytes()).sum(),
            frozen_memtables: st.parts.iter().map(|p| p.immutables.len()).sum(),
            flushes: self.inner.stats.flushes.load(Relaxed),
            flush_bytes: self.inner.stats.flush_bytes.load(Relaxed),
            compactions: self.inner.stats.compactions.load(Relaxed),
            compaction_bytes: self.inner.stats.compaction_bytes.load(Relaxed),
            compaction_read_bytes: self.inner.stats.compaction_read_bytes.load(Relaxed),
            compaction_moved_bytes: self.inner.stats.compaction_moved_bytes.load(Relaxed),
            runs: st
                .parts
                .iter()
                .map(|p| crate::state::runs(&p.segments).len())
                .max()
                .unwrap_or(0),
            write_stall_micros: self.db.shared().stall_micros.load(Relaxed),
            scan_overlay_builds: self.inner.stats.overlay_builds.load(Relaxed),
            scan_overlay_extensions: self.inner.stats.overlay_extensions.load(Relaxed),
            scan_overlay_laid_over: self.inner.stats.overlay_laid_over.load(Relaxed),
            scan_overlay_bytes: st.all_memtables().iter().map(|m| crate::read::overlay_bytes(m)).sum(),
            scan_pages: self.inner.stats.scan_pages.load(Relaxed),
            scan_pages_read: self.inner.stats.scan_pages_read.load(Relaxed),
            last_flush_error: self.inner.last_flush_error.lock().clone(),
            last_compaction_error: self.inner.last_compaction_error.lock().clone(),
        }
    }

    /// The table's range partitions in key order: bounds, bytes and rows
    /// (`cellar describe TABLE --partitions`).
    pub async fn partitions(&self) -> Result<Vec<super::partitions::PartitionInfo>> {
        self.check_live()?;
        super::partitions::partition_infos(&self.inner).await
    }

    /// Splits the partition holding partition-key value `at` in two: the
    /// values below `at` and those from it. False when `at` is already a
    /// partition's lower bound. (The background splits partitions past
    /// `partition_split_bytes` by itself.)
    pub async fn split_partition(&self, at: impl Into<crate::model::types::PkValue>) -> Result<bool> {
        self.check_live()?;
        self.db.writable("a partition split")?;
        let at = at.into();
        let first = &self.inner.schema.primary_key[0];
        if matches!(at, crate::model::types::PkValue::AutoIncrement) || at.pk_type() != first.pk_type {
            return Err(Error::param(format!(
                "a split point is a value of the partition key '{}' ({:?}), got {at:?}",
                first.name, first.pk_type
            )));
        }
        let mut key = Vec::new();
        crate::model::key::encode_value(&mut key, &at);
        let part = self.inner.state.read().part(&key).id;
        self.db.shared().split_partition(&self.inner, part, key).await
    }

    /// Merges the partition `id` with the one after it (`partitions()`
    /// lists them). False when there is none after it.
    pub async fn merge_partitions(&self, id: u64) -> Result<bool> {
        self.check_live()?;
        self.db.writable("a partition merge")?;
        if self.inner.state.read().part_by_id(id).is_none() {
            return Err(Error::new(
                ErrorKind::ObjectNotExist,
                format!(
                    "table '{}' has no partition {id}; `cellar describe {} --partitions` lists them",
                    self.name(),
                    self.name()
                ),
            ));
        }
        self.db.shared().merge_partitions(&self.inner, id).await
    }

    /// ComputeSplitPointsBySize: the table cut into ranges of about
    /// `size` bytes at partition-key values, with where each is served.
    pub async fn compute_split_points(&self, size: u64) -> Result<Vec<super::partitions::SplitRange>> {
        self.check_live()?;
        super::partitions::split_points(&self.inner, size).await
    }
}
