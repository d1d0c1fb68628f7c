//! A table's in-memory state: its memtables, its segments and its options.
//!
//! Readers pin a [`Snapshot`]: the memtables and segment list of the moment
//! plus the sequence number of the last committed write, taken together
//! under the state lock. Memtables keep per-write sequence numbers, so
//! writes committed later are ignored; segments are immutable, and a flush
//! or compaction swaps the list rather than changing it.
//!
//! Invariants: the segment list is ordered oldest first (ascending
//! `max_seq`) and changes only through [`TableInner::commit_manifest`],
//! after the manifest version recording the change is durable; frozen
//! memtables leave the state only once their segment is committed; the
//! active memtable is replaced only by [`TableState::freeze_active`], which
//! links the new one into the [`MemChain`], so the chain from any memtable
//! reaches every write committed after it. See `docs/architecture.md`.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};

use crate::error::{Error, ErrorKind};
use crate::manifest::{ManifestLog, TableManifest};
use crate::memtable::Memtable;
use crate::model::index::IndexDef;
use crate::model::key::KeyRange;
use crate::model::schema::{ColumnDef, TableOptions, TableSchema};
use crate::remote::RemoteLocation;
use crate::segment::Segment;

mod commit;
mod layout;

/// A table's in-memory state: its partitions in key order.
pub(crate) struct TableState {
    /// Never empty; the first starts at the lowest key, each ends where
    /// the next starts.
    pub parts: Vec<PartState>,
}

/// One range partition: its memtables and segments.
///
/// A partition reads only its own keys (`range`) of its sources: after a
/// split, both halves name the parent's segments and frozen memtables
/// until their flushes and compactions have written their own.
pub(crate) struct PartState {
    pub id: u64,
    /// The keys it holds (whole partition-key values).
    pub range: KeyRange,
    /// Where the committer inserts; replaced only by [`PartState::freeze_active`].
    pub active: Arc<Memtable>,
    /// The active memtable's link in the table's [`MemChain`].
    chain: Arc<MemChain>,
    /// Frozen memtables waiting for their flush, oldest first.
    pub immutables: Vec<Arc<Memtable>>,
    /// Segments, oldest first (ascending `max_seq`).
    pub segments: Arc<Vec<Arc<Segment>>>,
}

impl PartState {
    pub fn new(id: u64, range: KeyRange, segments: Vec<Arc<Segment>>) -> Self {
        let active = Arc::new(Memtable::new());
        PartState {
            id,
            range,
            chain: MemChain::link(active.clone()),
            active,
            immutables: Vec::new(),
            segments: Arc::new(segments),
        }
    }

    /// Freezes the active memtable (unless it is empty) and links the new
    /// one into the chain. Only the committer calls it.
    pub fn freeze_active(&mut self) {
        if self.active.is_empty() {
            return;
        }
        let fresh = Arc::new(Memtable::new());
        let link = MemChain::link(fresh.clone());
        // The old link is only ever given successors here, once.
        let _ = self.chain.next.set(vec![link.clone()]);
        self.chain = link;
        let frozen = std::mem::replace(&mut self.active, fresh);
        self.immutables.push(frozen);
    }

    /// Its memtables, oldest first, the active one last.
    pub fn memtables(&self) -> impl Iterator<Item = &Arc<Memtable>> {
        self.immutables.iter().chain(std::iter::once(&self.active))
    }

    /// Smallest sequence not yet in a segment, if any write is unflushed.
    pub fn min_unflushed_seq(&self) -> Option<u64> {
        self.memtables().filter_map(|m| m.min_seq()).min()
    }

    /// Whether every segment it names holds only its own keys (none is
    /// shared with a neighbour since a split). Memtables always do: a
    /// split copies the parent's writes into each half's own.
    pub fn owns_its_sources(&self) -> bool {
        self.segments.iter().all(|s| {
            self.range.lo.as_slice() <= s.min_key.as_slice()
                && self
                    .range
                    .hi
                    .as_ref()
                    .is_none_or(|h| s.max_key.as_slice() < h.as_slice())
        })
    }
}

impl TableState {
    fn new(parts: Vec<PartState>) -> Self {
        debug_assert!(!parts.is_empty() && parts[0].range.lo.is_empty());
        TableState { parts }
    }

    /// The index of the partition holding `key`.
    pub fn part_index(&self, key: &[u8]) -> usize {
        match self.parts.len() {
            1 => 0,
            _ => self.parts.partition_point(|p| p.range.lo.as_slice() <= key).max(1) - 1,
        }
    }

    /// The partition holding `key`.
    pub fn part(&self, key: &[u8]) -> &PartState {
        &self.parts[self.part_index(key)]
    }

    /// The partition `id`, if the table has it.
    pub fn part_by_id(&self, id: u64) -> Option<&PartState> {
        self.parts.iter().find(|p| p.id == id)
    }

    pub fn part_by_id_mut(&mut self, id: u64) -> Option<&mut PartState> {
        self.parts.iter_mut().find(|p| p.id == id)
    }

    /// Every segment of every partition, each once.
    pub fn all_segments(&self) -> Vec<Arc<Segment>> {
        let mut seen = HashSet::new();
        self.parts
            .iter()
            .flat_map(|p| p.segments.iter())
            .filter(|s| seen.insert(s.meta.id))
            .cloned()
            .collect()
    }

    /// Every memtable of every partition, each once.
    pub fn all_memtables(&self) -> Vec<Arc<Memtable>> {
        let mut out: Vec<Arc<Memtable>> = Vec::new();
        for m in self.parts.iter().flat_map(|p| p.memtables()) {
            if !out.iter().any(|o| Arc::ptr_eq(o, m)) {
                out.push(m.clone());
            }
        }
        out
    }
}

/// The table's memtables in the order they were active, each linked to
/// the ones that took its place: the next one of its partition, or those
/// of the partitions a split or merge made of it. A checked write holds
/// the link of the memtable that was active when it read its row: through
/// it the committer reaches every write made to the row since, also in
/// memtables flushed and dropped from the state meanwhile, and across
/// splits and merges. Only such writes hold links (never a reader's
/// snapshot), so flushed memtables stay in memory only while a checked
/// write that may need them waits for the committer.
pub(crate) struct MemChain {
    pub mem: Arc<Memtable>,
    /// When the link was made: links are visited in this order.
    order: u64,
    next: OnceLock<Vec<Arc<MemChain>>>,
}

impl MemChain {
    fn link(mem: Arc<Memtable>) -> Arc<Self> {
        static ORDER: AtomicU64 = AtomicU64::new(0);
        Arc::new(MemChain {
            mem,
            order: ORDER.fetch_add(1, Ordering::Relaxed),
            next: OnceLock::new(),
        })
    }

    /// Gives the link its successors (once): the memtables a split or a
    /// merge makes active in its partition's place.
    pub fn succeed(&self, next: Vec<Arc<MemChain>>) {
        let _ = self.next.set(next);
    }

    /// This link's memtable and every one active after it that it leads
    /// to, each once, oldest first. A key's writes are in memtables of
    /// its partitions over time, which this order visits oldest first
    /// (the memtables of other partitions hold none of them).
    pub fn memtables(self: &Arc<Self>) -> Vec<Arc<Memtable>> {
        let mut links: Vec<&MemChain> = Vec::new();
        let mut seen = HashSet::new();
        let mut todo: Vec<&MemChain> = vec![&**self];
        while let Some(l) = todo.pop() {
            if !seen.insert(l.order) {
                continue;
            }
            links.push(l);
            if let Some(next) = l.next.get() {
                todo.extend(next.iter().map(|n| &**n));
            }
        }
        links.sort_by_key(|l| l.order);
        links.into_iter().map(|l| l.mem.clone()).collect()
    }
}

impl Drop for MemChain {
    /// Unlinks iteratively: a long chain dropped at once would otherwise
    /// recurse once per link.
    fn drop(&mut self) {
        let mut todo: Vec<Arc<MemChain>> = self.next.take().unwrap_or_default();
        while let Some(link) = todo.pop() {
            if let Ok(mut l) = Arc::try_unwrap(link) {
                todo.extend(l.next.take().unwrap_or_default());
            }
        }
    }
}

pub(crate) struct TableInner {
    pub id: u64,
    /// Name and primary key (its `columns` are kept in `declared`).
    pub schema: TableSchema,
    /// Declared attribute columns (ALTER TABLE ADD COLUMN changes them).
    pub declared: RwLock<Vec<ColumnDef>>,
    pub options: RwLock<TableOptions>,
    pub state: RwLock<TableState>,
    pub manifest_log: ManifestLog,
    /// The committed manifest and its version number.
    pub manifest: tokio::sync::Mutex<(u64, TableManifest)>,
    pub dropped: AtomicBool,
    pub stats: TableCounters,
    pub last_flush_error: Mutex<Option<String>>,
    pub last_compaction_error: Mutex<Option<String>>,
    /// Automatic compactions hold it shared, manual ones (`Full`,
    /// `Newest`) exclusively: a manual compaction waits for the running
    /// ones and sees every segment.
    pub compaction: tokio::sync::RwLock<()>,
    /// Ids of the segments running automatic compactions merge (their
    /// inputs are always the newest runs when picked, so what is free is
    /// the runs after the last busy segment).
    pub compacting: Mutex<HashSet<u64>>,
    /// Held while frozen memtables are flushed (one flusher at a time; the
    /// manifest lock is taken only to reserve an id and to commit).
    pub flushing: tokio::sync::Mutex<()>,
    /// A background compaction task is queued or running for this table.
    pub compaction_queued: AtomicBool,
    /// A catch-up compaction task (see `DbOptions::compaction_stall_runs`)
    /// is running for this table.
    pub catch_up_running: AtomicBool,
    /// When a SQL scan last read a large share of one of the table's
    /// segments (a scan that uses memtable overlays), in milliseconds of
    /// [`monotonic_ms`]; 0: never. The background keeps the overlays of
    /// such tables built (see `overlay::warm`).
    pub wide_scan_ms: AtomicU64,
    /// The attribute columns scans that use memtable overlays have asked
    /// for (output and filter columns), by name: what the background's
    /// overlays encode (see `overlay::warm`). Only grows.
    pub overlay_columns: Mutex<Arc<std::collections::BTreeSet<String>>>,
    /// Set while the table is archived or being archived: every write is
    /// refused, in validation and again by the committer (so none that was
    /// validated before it was set slips in after an archive's flush).
    pub read_only: AtomicBool,
    /// Where the table is archived, or being archived.
    pub archive: RwLock<Option<ArchiveState>>,
    /// Held by an archive or a restore of the table from start to end.
    pub transfer: tokio::sync::Mutex<()>,
    /// The series the table is a month of.
    pub series: Option<String>,
    /// The table's change stream shards, when its stream is enabled: the
    /// committer appends each write to its partition's shard.
    pub stream: RwLock<Option<Arc<crate::stream::StreamShards>>>,
    /// Held by a partition split or merge from start to end.
    pub layout: tokio::sync::Mutex<()>,
    /// A background split or merge is queued or running.
    pub repartition_queued: AtomicBool,
    /// The table's secondary indexes, each a table of its own (local ones
    /// are written by the committer with the row, see `write/index.rs`).
    pub indexes: RwLock<Arc<Vec<IndexTarget>>>,
    /// For an index table: what it indexes (its writes come only from its
    /// table's).
    pub index_of: Option<Arc<IndexDef>>,
}

/// One secondary index of a table: its definition and its table.
#[derive(Clone)]
pub(crate) struct IndexTarget {
    pub def: Arc<IndexDef>,
    pub table: Arc<TableInner>,
    /// A global index's follower: held while it applies records (a drop
    /// waits for it), and the commit time (µs) of the newest record
    /// applied, for its lag.
    pub follower: Arc<tokio::sync::Mutex<()>>,
    pub applied_us: Arc<AtomicU64>,
    /// Set while the table's existing rows are being indexed (phase
    /// FULL): the index is not complete, and SQL does not choose it.
    pub building: Arc<AtomicBool>,
}

impl IndexTarget {
    pub fn new(def: Arc<IndexDef>, table: Arc<TableInner>, building: bool) -> Self {
        IndexTarget {
            def,
            table,
            follower: Arc::default(),
            applied_us: Arc::default(),
            building: Arc::new(AtomicBool::new(building)),
        }
    }
}

/// A table's place in an object store.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ArchiveState {
    pub location: RemoteLocation,
    /// False while the archive is being written (the local copy is still
    /// the table), true once the catalog records it.
    pub complete: bool,
}

/// Milliseconds since the first call in this process (1 at least), for
/// coarse "how long ago" marks kept in atomics.
pub(crate) fn monotonic_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64 + 1
}

#[derive(Default)]
pub(crate) struct TableCounters {
    pub flushes: AtomicU64,
    pub flush_bytes: AtomicU64,
    pub compactions: AtomicU64,
    /// Bytes of segments written by compactions.
    pub compaction_bytes: AtomicU64,
    /// Bytes of segments compactions merged (their inputs).
    pub compaction_read_bytes: AtomicU64,
    /// Bytes of segments compactions carried into their output run
    /// without rewriting them.
    pub compaction_moved_bytes: AtomicU64,
    /// Memtable overlays built by scans (not persisted).
    pub overlay_builds: AtomicU64,
    /// Overlays extended by the keys written since they were built.
    pub overlay_extensions: AtomicU64,
    /// Memtable keys whose updates overlays laid over their segment rows
    /// column by column (no read of the row).
    pub overlay_laid_over: AtomicU64,
    /// Pages of the columns SQL scans with non-key predicates read, in the
    /// key ranges they scanned (not persisted).
    pub scan_pages: AtomicU64,
    /// Of those, the pages statistics pruning left to read.
    pub scan_pages_read: AtomicU64,
}

/// A consistent view of one partition of a table for one read; a read
/// of several partitions takes theirs together (one `seq`).
///
/// Its sources may hold keys outside `range` (shared since a split):
/// every read through it keeps to `range`.
pub(crate) struct Snapshot {
    pub seq: u64,
    /// The partition's id and keys.
    pub part: u64,
    pub range: KeyRange,
    /// Oldest first.
    pub memtables: Vec<Arc<Memtable>>,
    /// Oldest first.
    pub segments: Arc<Vec<Arc<Segment>>>,
    pub options: TableOptions,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Snapshot(seq {}, partition {})", self.seq, self.part)
    }
}

impl TableCounters {
    pub fn from_counters(c: &crate::manifest::Counters) -> Self {
        TableCounters {
            flushes: AtomicU64::new(c.flushes),
            flush_bytes: AtomicU64::new(c.flush_bytes),
            compactions: AtomicU64::new(c.compactions),
            compaction_bytes: AtomicU64::new(c.compaction_bytes),
            compaction_read_bytes: AtomicU64::new(c.compaction_read_bytes),
            compaction_moved_bytes: AtomicU64::new(c.compaction_moved_bytes),
            overlay_builds: AtomicU64::new(0),
            overlay_extensions: AtomicU64::new(0),
            overlay_laid_over: AtomicU64::new(0),
            scan_pages: AtomicU64::new(0),
            scan_pages_read: AtomicU64::new(0),
        }
    }

    pub fn counters(&self) -> crate::manifest::Counters {
        crate::manifest::Counters {
            flushes: self.flushes.load(Ordering::Relaxed),
            flush_bytes: self.flush_bytes.load(Ordering::Relaxed),
            compactions: self.compactions.load(Ordering::Relaxed),
            compaction_bytes: self.compaction_bytes.load(Ordering::Relaxed),
            compaction_read_bytes: self.compaction_read_bytes.load(Ordering::Relaxed),
            compaction_moved_bytes: self.compaction_moved_bytes.load(Ordering::Relaxed),
        }
    }
}

impl TableInner {
    pub fn new(
        id: u64,
        schema: TableSchema,
        options: TableOptions,
        manifest_version: u64,
        manifest: TableManifest,
        parts: Vec<PartState>,
    ) -> Self {
        let mut schema = schema;
        let declared = RwLock::new(std::mem::take(&mut schema.columns));
        let stats = TableCounters::from_counters(&manifest.counters);
        TableInner {
            id,
            declared,
            manifest_log: ManifestLog::new(&format!("tables/{id}/manifest")),
            schema,
            options: RwLock::new(options),
            state: RwLock::new(TableState::new(parts)),
            manifest: tokio::sync::Mutex::new((manifest_version, manifest)),
            dropped: AtomicBool::new(false),
            stats,
            last_flush_error: Mutex::new(None),
            last_compaction_error: Mutex::new(None),
            compaction: tokio::sync::RwLock::new(()),
            compacting: Mutex::new(HashSet::new()),
            flushing: tokio::sync::Mutex::new(()),
            compaction_queued: AtomicBool::new(false),
            catch_up_running: AtomicBool::new(false),
            wide_scan_ms: AtomicU64::new(0),
            overlay_columns: Mutex::new(Arc::default()),
            read_only: AtomicBool::new(false),
            archive: RwLock::new(None),
            transfer: tokio::sync::Mutex::new(()),
            series: None,
            stream: RwLock::new(None),
            layout: tokio::sync::Mutex::new(()),
            repartition_queued: AtomicBool::new(false),
            indexes: RwLock::new(Arc::default()),
            index_of: None,
        }
    }

    /// The table's indexes of one kind.
    pub fn indexes_of(&self, kind: crate::model::index::IndexKind) -> Vec<IndexTarget> {
        self.indexes
            .read()
            .iter()
            .filter(|i| i.def.kind == kind)
            .cloned()
            .collect()
    }

    /// The columns whose values before each write the table's stream
    /// records (`None`: no stream, or one without such columns).
    pub fn origin_columns(&self) -> Option<Arc<Vec<String>>> {
        let stream = self.stream.read().as_ref().map(|s| s.origin_columns())?;
        // A global index needs the old values of its key columns.
        let indexes = self.indexes.read();
        let global = indexes
            .iter()
            .filter(|i| i.def.kind == crate::model::index::IndexKind::Global)
            .flat_map(|i| i.def.key_attribute_columns())
            .filter(|c| !stream.iter().any(|s| s == c));
        let mut extra: Vec<String> = Vec::new();
        for c in global {
            if !extra.iter().any(|e| e == c) {
                extra.push(c.to_string());
            }
        }
        if extra.is_empty() {
            return Some(stream).filter(|c| !c.is_empty());
        }
        let mut all = (*stream).clone();
        all.extend(extra);
        Some(Arc::new(all))
    }

    /// Whether the table has an index (every write then reads its row).
    pub fn has_indexes(&self) -> bool {
        !self.indexes.read().is_empty()
    }

    /// The schema with the current declared columns.
    pub fn full_schema(&self) -> TableSchema {
        let mut s = self.schema.clone();
        s.columns = self.declared.read().clone();
        s
    }

    /// Snapshots of every partition, taken together, in key order.
    pub fn snapshots(&self, visible_seq: &AtomicU64) -> Vec<Snapshot> {
        let st = self.state.read();
        let seq = visible_seq.load(Ordering::Acquire);
        let options = *self.options.read();
        st.parts.iter().map(|p| part_snapshot(p, seq, options)).collect()
    }

    /// A snapshot of the partition holding `key`.
    pub fn snapshot_for(&self, key: &[u8], visible_seq: &AtomicU64) -> Snapshot {
        let st = self.state.read();
        let seq = visible_seq.load(Ordering::Acquire);
        part_snapshot(st.part(key), seq, *self.options.read())
    }

    /// A snapshot for a write that reads the row at `key`, with the chain
    /// link of its partition's active memtable at that moment (taken
    /// under one lock, so every write after the snapshot's sequence is in
    /// that memtable or one the link leads to).
    /// Every partition's snapshot at one sequence, each with the link of
    /// its active memtable (see [`TableInner::checked_snapshot`]).
    pub fn checked_snapshots(&self, visible_seq: &AtomicU64) -> Vec<(Snapshot, Arc<MemChain>)> {
        let st = self.state.read();
        let seq = visible_seq.load(Ordering::Acquire);
        let opts = *self.options.read();
        st.parts
            .iter()
            .map(|p| (part_snapshot(p, seq, opts), p.chain.clone()))
            .collect()
    }

    pub fn checked_snapshot(&self, key: &[u8], visible_seq: &AtomicU64) -> (Snapshot, Arc<MemChain>) {
        let st = self.state.read();
        let seq = visible_seq.load(Ordering::Acquire);
        let p = st.part(key);
        (part_snapshot(p, seq, *self.options.read()), p.chain.clone())
    }

    /// Smallest sequence not yet in a segment, if any write is unflushed.
    pub fn min_unflushed_seq(&self) -> Option<u64> {
        let st = self.state.read();
        st.parts.iter().filter_map(|p| p.min_unflushed_seq()).min()
    }

    /// The refusal of a write to a read-only table: names the table and
    /// its archive location, and the way back to writable.
    pub fn read_only_error(&self) -> Error {
        let name = &self.schema.name;
        let message = match &*self.archive.read() {
            Some(a) if a.complete => format!(
                "table '{name}' is archived at {} and is read-only; `cellar restore {name}` brings it back local and writable",
                a.location.describe()
            ),
            Some(a) => format!(
                "table '{name}' is being archived to {} and refuses writes until the archive ends (it is writable again if the archive fails)",
                a.location.describe()
            ),
            None => format!("table '{name}' is read-only"),
        };
        Error::new(ErrorKind::ReadOnly, message)
    }

    /// A read's error, with where an archived table's data is and what
    /// would help when its store failed (credentials, the server).
    pub fn read_error(&self, e: Error) -> Error {
        match self.archive.read().as_ref() {
            Some(a) if a.complete && e.kind() == ErrorKind::Io => a
                .location
                .error(&format!("read table '{}', archived at", self.schema.name), e.message()),
            _ => e,
        }
    }

    /// Whether the table's segments live in an object store.
    pub fn is_archived(&self) -> bool {
        self.archive.read().as_ref().is_some_and(|a| a.complete)
    }

    /// How many sorted runs the segments of its most layered partition
    /// form (what a read there merges).
    pub fn run_count(&self) -> usize {
        let st = self.state.read();
        st.parts.iter().map(|p| runs(&p.segments).len()).max().unwrap_or(0)
    }

    pub fn unflushed_bytes(&self) -> usize {
        self.state.read().all_memtables().iter().map(|m| m.approx_bytes()).sum()
    }
}

/// The partitions a manifest names, with their segments (`open` gives
/// each segment once, so a segment two partitions name is one object).
/// Gives a manifest from before partitions its one partition first.
pub(crate) fn parts_of(
    manifest: &mut TableManifest,
    mut open: impl FnMut(&crate::segment::SegmentMeta) -> crate::error::Result<Arc<Segment>>,
) -> crate::error::Result<Vec<PartState>> {
    manifest.normalize();
    let mut opened: std::collections::HashMap<u64, Arc<Segment>> = std::collections::HashMap::new();
    for m in &manifest.segments {
        opened.insert(m.id, open(m)?);
    }
    let lowers: Vec<Vec<u8>> = manifest.partitions.iter().map(|p| p.lower_key()).collect();
    let mut parts = Vec::with_capacity(lowers.len());
    for (i, p) in manifest.partitions.iter().enumerate() {
        let segments = p
            .segments
            .iter()
            .map(|id| {
                opened.get(id).cloned().ok_or_else(|| {
                    Error::corruption(format!(
                        "partition {} names segment {id}, which the manifest lacks",
                        p.id
                    ))
                })
            })
            .collect::<crate::error::Result<Vec<_>>>()?;
        let range = KeyRange {
            lo: lowers[i].clone(),
            hi: lowers.get(i + 1).cloned(),
        };
        if (i == 0) != range.lo.is_empty() || range.is_empty() {
            return Err(Error::corruption(format!(
                "partition {} has bounds out of order in the manifest",
                p.id
            )));
        }
        parts.push(PartState::new(p.id, range, segments));
    }
    Ok(parts)
}

fn part_snapshot(p: &PartState, seq: u64, options: TableOptions) -> Snapshot {
    Snapshot {
        seq,
        part: p.id,
        range: p.range.clone(),
        memtables: p.memtables().cloned().collect(),
        segments: p.segments.clone(),
        options,
    }
}

/// The sorted runs of a segment list (oldest first) as index spans: the
/// segments of one flush form a run, and the outputs of one compaction
/// with the segments it carried over unchanged (none of them overlap each
/// other).
pub(crate) fn runs(segs: &[Arc<Segment>]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        match out.last_mut() {
            Some(r) if segs[r.start].run_id() == s.run_id() => r.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::row::{Mutation, RowState};

    fn put(n: i64) -> Mutation {
        Mutation::Put {
            row_ts: None,
            cells: vec![("n".into(), 1, crate::model::types::Value::Integer(n))],
        }
    }

    /// A link taken before freezes reaches every later memtable, also once
    /// the state has let go of them (flushed); a long chain drops without
    /// deep recursion.
    #[test]
    fn a_chain_link_reaches_every_later_memtable() {
        let mut st = PartState::new(0, KeyRange::all(), Vec::new());
        st.active.insert(b"k".to_vec(), 1, put(1));
        let link = st.chain.clone();
        for seq in 2..5u64 {
            st.freeze_active();
            st.active.insert(b"k".to_vec(), seq, put(seq as i64));
        }
        st.freeze_active();
        // An empty active memtable is not frozen.
        let before = Arc::as_ptr(&st.chain);
        st.freeze_active();
        assert_eq!(before, Arc::as_ptr(&st.chain));
        assert_eq!(st.immutables.len(), 4);
        st.active.insert(b"k".to_vec(), 5, put(5));
        assert_eq!(link.memtables().len(), 5);
        // The flushes of every frozen memtable.
        st.immutables.clear();
        let mut row = RowState::default();
        for m in link.memtables() {
            m.apply_after(b"k", 2, &mut row);
        }
        assert_eq!(row.seq, 5);
        assert_eq!(row.columns["n"].versions[0].1, crate::model::types::Value::Integer(5));
        drop(link);
        let first = st.chain.clone();
        for seq in 6..200_006u64 {
            st.active.insert(b"k".to_vec(), seq, put(0));
            st.freeze_active();
            st.immutables.clear();
        }
        assert_eq!(first.memtables().len(), 200_001);
        drop(first);
    }
}
