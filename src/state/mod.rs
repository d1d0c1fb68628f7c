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
use crate::model::schema::{ColumnDef, TableOptions, TableSchema};
use crate::remote::RemoteLocation;
use crate::segment::Segment;

mod commit;

pub(crate) struct TableState {
    /// Where the committer inserts; replaced only by [`TableState::freeze_active`].
    pub active: Arc<Memtable>,
    /// The active memtable's link in the table's [`MemChain`].
    chain: Arc<MemChain>,
    /// Frozen memtables waiting for their flush, oldest first.
    pub immutables: Vec<Arc<Memtable>>,
    /// Segments, oldest first (ascending `max_seq`).
    pub segments: Arc<Vec<Arc<Segment>>>,
}

impl TableState {
    fn new(segments: Vec<Arc<Segment>>) -> Self {
        let active = Arc::new(Memtable::new());
        TableState {
            chain: Arc::new(MemChain {
                mem: active.clone(),
                next: OnceLock::new(),
            }),
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
        let link = Arc::new(MemChain {
            mem: fresh.clone(),
            next: OnceLock::new(),
        });
        // The old link is only ever given a successor here, once.
        let _ = self.chain.next.set(link.clone());
        self.chain = link;
        let frozen = std::mem::replace(&mut self.active, fresh);
        self.immutables.push(frozen);
    }
}

/// The table's memtables in the order they were active, each linked to
/// the next. A checked write holds the link of the memtable that was
/// active when it read its row: through it the committer reaches every
/// write made to the row since, also in memtables flushed and dropped from
/// the state meanwhile. Only such writes hold links (never a reader's
/// snapshot), so flushed memtables stay in memory only while a checked
/// write that may need them waits for the committer.
pub(crate) struct MemChain {
    pub mem: Arc<Memtable>,
    next: OnceLock<Arc<MemChain>>,
}

impl MemChain {
    /// This link's memtable and every later one, oldest first.
    pub fn iter(self: &Arc<Self>) -> impl Iterator<Item = &Arc<Memtable>> {
        let mut link = Some(&**self);
        std::iter::from_fn(move || {
            let l = link?;
            link = l.next.get().map(|n| &**n);
            Some(&l.mem)
        })
    }
}

impl Drop for MemChain {
    /// Unlinks iteratively: a long chain dropped at once would otherwise
    /// recurse once per link.
    fn drop(&mut self) {
        let mut next = self.next.take();
        while let Some(link) = next {
            match Arc::try_unwrap(link) {
                Ok(mut l) => next = l.next.take(),
                Err(_) => break,
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
    /// The table's change stream log, when its stream is enabled: the
    /// committer appends each group's writes to it.
    pub stream: RwLock<Option<Arc<crate::stream::StreamLog>>>,
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

/// A consistent view of one table for one read.
pub(crate) struct Snapshot {
    pub seq: u64,
    /// Oldest first.
    pub memtables: Vec<Arc<Memtable>>,
    /// Oldest first.
    pub segments: Arc<Vec<Arc<Segment>>>,
    pub options: TableOptions,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Snapshot(seq {})", self.seq)
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
        segments: Vec<Arc<Segment>>,
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
            state: RwLock::new(TableState::new(segments)),
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
        }
    }

    /// The columns whose values before each write the table's stream
    /// records (`None`: no stream, or one without such columns).
    pub fn origin_columns(&self) -> Option<Arc<Vec<String>>> {
        self.stream
            .read()
            .as_ref()
            .map(|l| l.origin_columns())
            .filter(|c| !c.is_empty())
    }

    /// The schema with the current declared columns.
    pub fn full_schema(&self) -> TableSchema {
        let mut s = self.schema.clone();
        s.columns = self.declared.read().clone();
        s
    }

    pub fn snapshot(&self, visible_seq: &AtomicU64) -> Snapshot {
        self.snapshot_locked(&self.state.read(), visible_seq)
    }

    fn snapshot_locked(&self, st: &TableState, visible_seq: &AtomicU64) -> Snapshot {
        let seq = visible_seq.load(Ordering::Acquire);
        let mut memtables = st.immutables.clone();
        memtables.push(st.active.clone());
        Snapshot {
            seq,
            memtables,
            segments: st.segments.clone(),
            options: *self.options.read(),
        }
    }

    /// A snapshot for a write that reads its row, with the chain link of
    /// the memtable active at that moment (taken under one lock, so every
    /// write after the snapshot's sequence is in that memtable or a later
    /// one).
    pub fn checked_snapshot(&self, visible_seq: &AtomicU64) -> (Snapshot, Arc<MemChain>) {
        let st = self.state.read();
        let chain = st.chain.clone();
        (self.snapshot_locked(&st, visible_seq), chain)
    }

    /// Smallest sequence not yet in a segment, if any write is unflushed.
    pub fn min_unflushed_seq(&self) -> Option<u64> {
        let st = self.state.read();
        st.immutables
            .iter()
            .chain(std::iter::once(&st.active))
            .filter_map(|m| m.min_seq())
            .min()
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

    /// How many sorted runs the table's segments form.
    pub fn run_count(&self) -> usize {
        runs(&self.state.read().segments).len()
    }

    pub fn unflushed_bytes(&self) -> usize {
        let st = self.state.read();
        st.immutables.iter().map(|m| m.approx_bytes()).sum::<usize>() + st.active.approx_bytes()
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
        let mut st = TableState::new(Vec::new());
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
        assert_eq!(link.iter().count(), 5);
        // The flushes of every frozen memtable.
        st.immutables.clear();
        let mut row = RowState::default();
        for m in link.iter() {
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
        assert_eq!(first.iter().count(), 200_001);
        drop(first);
    }
}
