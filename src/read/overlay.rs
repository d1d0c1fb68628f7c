//! Memtable keys resolved against one segment, kept columnar for scans.
//!
//! A SQL scan of a segment that a memtable overlaps must drop the segment
//! rows the memtable replaces and put the memtable's rows in their place.
//! Finding those rows means comparing keys, and decoding every key column
//! of the segment for that cost more than the query itself (10M rows with
//! 1% of them rewritten: 4.4x a plain Parquet scan). An [`Overlay`] does
//! that work once per memtable state and segment:
//! - each memtable key's position in the segment: the row it replaces, or
//!   the row it goes before ([`super::locate`]);
//! - each key's merged state, reduced to what a latest-version scan shows
//!   (the newest version of every column, the newest timestamp of the row),
//!   as one Arrow row per key in the segment layout.
//!
//! A scan that finds a valid overlay reads no key column and folds no
//! memtable write: it clears the replaced rows in its visibility mask and
//! splices the overlay's rows in by position. The overlay belongs to the
//! memtable (dropped with it) and holds its writes up to the sequence it
//! was built at: a scan uses it when that is the newest memtable write its
//! snapshot sees. A scan with a newer snapshot extends it to its snapshot
//! (writes after the snapshot, from writers running beside the scan, stay
//! out): only the keys written since are placed (reading only the row
//! groups that could hold them) and folded, the others keep their position
//! and row. A scan older than the overlay merges the memtable itself.
//!
//! An extension adds the keys written since as a new [`Run`] instead of
//! copying the whole overlay: runs are kept oldest first, a key's row in a
//! newer run replaces its rows in older ones, and the two newest runs are
//! merged only while there are more than [`MAX_RUNS`]. A scan reads a key
//! span of all runs merged ([`OverlaySpan`]). (Merging runs of similar
//! size in the background, as a binary counter, copied less but held
//! both copies while merging: 1.0 GB peak RSS at 1M rows against 0.7.)
//!
//! An overlay's rows hold only the attribute columns scans asked for
//! (their output columns and those their filters name): a GROUP BY over
//! two columns of a 23-column table encodes two. A scan that asks for a
//! column the overlay lacks builds it whole with the union (keys keep
//! their positions, only rows are encoded again), and the table remembers
//! what scans asked for, which the background's builds encode.
//!
//! While a frozen memtable waits for its flush, a scan sees it under the
//! active one. Each memtable has its overlays, the newer one's built over
//! the older ones with keys under it (an UpdateRow of a key they hold is
//! merged over their state and the segment row by a point read, never
//! laid over the segment row), and a scan merges the runs of all of them,
//! oldest memtable first, so a key's row is the newest memtable's. An
//! older memtable only leaves (flushed) for a segment that overlaps the
//! keys it held, which renames or retires the slots over those keys: an
//! overlay a scan finds was built over the older memtables it sees.
//!
//! Memtable keys no segment's key span holds (before the first, between
//! two, after the last segment, or all of them when there is none) get an
//! overlay of their gap ([`Under::Gap`]): positions need no placing, and a
//! scan reads the gap's rows from it instead of merging memtable writes
//! row by row.
//!
//! Invariants: every run's keys are ascending and unique, with positions
//! ascending with them; all runs of an overlay have the same columns
//! (an extension that brings a new column or type, or a scan that wants
//! one more, builds the overlay whole); an overlay has at least one run
//! (possibly empty); a scan reads an overlay only when its rows hold
//! every column the scan reads from them.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::concat_batches;
use arrow::datatypes::{Field, Schema};

use super::locate::locate;
use super::runs::{self, OverlaySpan, Run, settle};
use crate::error::{Error, Result};
use crate::memtable::Memtable;
use crate::model::key::{KeyRange, key_successor};
use crate::model::row::KeyWrites;
use crate::model::row::RowState;
use crate::model::types::TypeSet;
use crate::segment::format;
use crate::segment::{RowEncoder, RowSpan, Segment};
use crate::state::{Snapshot, TableInner};

/// Keys folded and encoded per step while building (bounds the memory a
/// build holds besides the overlay itself).
const BUILD_CHUNK: usize = 4096;

/// Memtable keys a gap's piece must hold for a scan, or the background,
/// to build the gap's overlay (fewer are merged row by row at once).
pub(super) const GAP_MIN_KEYS: usize = 1024;

/// One memtable's keys within one segment's key span, resolved against it.
pub(crate) struct Overlay {
    /// The memtable's newest sequence when this was built.
    pub built_at: u64,
    /// Every attribute column of the segment and the memtable (what
    /// decides whether an update is laid over its segment row).
    columns: Vec<(String, TypeSet)>,
    /// The columns, by name, whose values the runs' rows hold: those of
    /// `columns` that scans asked for. A scan reads only what it asked
    /// for, so the rest are not encoded.
    wanted: Arc<BTreeSet<String>>,
    /// Oldest first; never empty.
    runs: Vec<Arc<Run>>,
}

impl Overlay {
    /// Builds the overlay of `mem`'s writes up to sequence `at` over
    /// `under` (writes after `at` are left out: a scan builds it at its
    /// snapshot while writers go on).
    ///
    /// The rows hold the values of the columns named in `wanted` (and in
    /// `base`'s, so that what scans asked for before stays served).
    ///
    /// With `base`, an overlay of the same memtable and segment built at an
    /// earlier sequence, only the keys written since then are placed and
    /// folded, into a new run; every other key keeps its position and row
    /// from `base` (keys never leave a memtable and segment rows never
    /// move). That holds while the attribute columns and the wanted ones
    /// are the same; when a write brought a new column or value type, or a
    /// scan wants a column `base` lacks, it is built whole (keys `base`
    /// holds keep their positions, only their rows are encoded again).
    /// Returns whether `base` was extended; `None` when the segment has no
    /// key statistics to place keys with.
    ///
    /// `older`: the older memtables with keys under it (a frozen one being
    /// flushed) with the segment, at `at`. An UpdateRow of a key they hold
    /// is merged over them (not laid over the segment row), so this
    /// overlay's row of every key is its whole state; a scan takes each
    /// key's row from the newest memtable's overlay holding it.
    pub async fn build(
        table: &TableInner,
        mem: &Memtable,
        under: &Under,
        at: u64,
        base: Option<&Overlay>,
        wanted: &Arc<BTreeSet<String>>,
        older: Option<&Snapshot>,
    ) -> Result<Option<(Overlay, bool)>> {
        let in_older = |key: &[u8]| older.is_some_and(|o| o.memtables.iter().any(|m| m.has_key_between(key, key)));
        let range = under.range();
        let seg = match under {
            Under::Segment(seg) => Some(seg),
            Under::Gap(_) => None,
        };
        // Columns: the memtable's, plus the segment's (an UpdateRow merged
        // over a segment row brings that row's other columns along).
        let mut columns: std::collections::BTreeMap<String, TypeSet> = seg
            .map(|s| s.meta.columns.iter().cloned().collect())
            .unwrap_or_default();
        for (name, t) in mem.columns() {
            columns.entry(name).or_default().0 |= t.0;
        }
        let columns: Vec<(String, TypeSet)> = columns.into_iter().collect();
        let wanted = match base {
            Some(b) => with_columns(&b.wanted, wanted),
            None => wanted.clone(),
        };
        let placed_by = base;
        let base = base.filter(|b| b.columns == columns && b.wanted == wanted && b.built_at < at);
        let after = base.map_or(0, |b| b.built_at);
        // The keys written since `after`; those no earlier overlay placed
        // are located.
        let keys = mem.keys_changed(&range, after, at);
        let known = match placed_by {
            Some(b) => b.placed(&keys),
            None => vec![None; keys.len()],
        };
        let fresh: Vec<Vec<u8>> = keys
            .iter()
            .zip(&known)
            .filter(|(_, p)| p.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        let (fresh_pos, fresh_found) = match seg {
            Some(seg) => match locate(table, seg, &fresh).await? {
                Some(placed) => placed,
                None => return Ok(None),
            },
            // No segment: every key is new, before nothing.
            None => (vec![0; fresh.len()], vec![false; fresh.len()]),
        };
        let (mut pos, mut found) = (Vec::with_capacity(keys.len()), Vec::with_capacity(keys.len()));
        let mut partial = vec![false; keys.len()];
        let mut fresh_at = fresh_pos.into_iter().zip(fresh_found);
        for p in &known {
            let (p, f) = match p {
                Some(placed) => *placed,
                None => fresh_at
                    .next()
                    .ok_or_else(|| Error::corruption("overlay: a key was not placed"))?,
            };
            pos.push(p);
            found.push(f);
        }
        // The encoder skips the cells of columns no scan asked for (and
        // still counts them in the row's newest version).
        let shown: Vec<(String, TypeSet)> = columns.iter().filter(|(n, _)| wanted.contains(n)).cloned().collect();
        let schema = format::arrow_schema(&table.schema, &shown);
        let mut enc = RowEncoder::new(&table.schema, &shown);
        // What the segment's row groups can hold of each column, for
        // updates laid over their rows (a key is found only in a segment).
        let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
        let (bounds, starts) = match seg {
            Some(seg) => {
                let md = seg.reader_metadata().await?.metadata().clone();
                (Segment::newest_versions(&md, &names), group_starts(&md))
            }
            None => (Vec::new(), Vec::new()),
        };
        let group_of = |row: u64| starts.partition_point(|s| *s <= row).saturating_sub(1);
        let mut batches = Vec::new();
        let mut resume: Option<Vec<u8>> = None;
        let mut i = 0;
        let changed = || Error::corruption("memtable keys changed while an overlay was built for a scan");
        loop {
            // A pass encodes up to BUILD_CHUNK keys under the memtable's
            // read lock. A PutRow is encoded from its cells (it alone
            // decides the row); an UpdateRow over a stored row ends the
            // pass, as that row is read (async) to merge it under; so does
            // one of a key an older memtable holds (`true`: merged over
            // those).
            let mut merge: Option<(RowState, bool)> = None;
            let mut in_pass = 0;
            let stopped = mem.for_each_changed(&range, resume.as_deref(), after, at, |key, writes| {
                if keys.get(i).map(Vec::as_slice) != Some(key) {
                    return Err(changed());
                }
                let put = match writes {
                    KeyWrites::Put { seq, row_ts, cells } => enc.push_put(key, seq, row_ts, cells)?,
                    KeyWrites::Folded(_) => false,
                };
                if !put {
                    let mut st = writes.to_state();
                    if !st.replace && in_older(key) {
                        merge = Some((st, true));
                        return Ok(false);
                    }
                    if !st.replace && found[i] {
                        let group = bounds.get(group_of(pos[i])).map(Vec::as_slice);
                        if !group.is_some_and(|b| lays_over(&st, &names, b)) {
                            merge = Some((st, false));
                            return Ok(false);
                        }
                        partial[i] = true;
                    }
                    newest_only(&mut st);
                    enc.push_state(key, &st)?;
                }
                i += 1;
                in_pass += 1;
                Ok(in_pass < BUILD_CHUNK)
            })?;
            if let Some((st, over_older)) = merge {
                let key = &keys[i];
                let below = match older {
                    Some(o) if over_older => o.get_state(key, None).await?,
                    _ => {
                        let seg = seg.ok_or_else(|| Error::corruption("overlay: a key found in no segment"))?;
                        seg.get(key, None).await?
                    }
                };
                let mut st = match below {
                    Some(below) => st.merge_over(below),
                    None => st,
                };
                newest_only(&mut st);
                enc.push_state(key, &st)?;
                i += 1;
            }
            if enc.rows() >= BUILD_CHUNK || stopped.is_none() {
                batches.push(scan_rows(&enc.finish(&schema)?)?);
            }
            match stopped {
                Some(key) => resume = Some(key),
                None => break,
            }
        }
        if i != keys.len() {
            return Err(changed());
        }
        let laid_over = partial.iter().filter(|p| **p).count() as u64;
        table
            .stats
            .overlay_laid_over
            .fetch_add(laid_over, std::sync::atomic::Ordering::Relaxed);
        // The last pass always leaves a batch, possibly empty.
        let rows = match batches.as_slice() {
            [one] => one.clone(),
            all => concat_batches(&all[0].schema(), all)?,
        };
        let run = Run {
            keys: keys.into_iter().map(Arc::from).collect(),
            pos,
            found,
            partial,
            rows,
        };
        let Some(base) = base else {
            let ov = Overlay {
                built_at: at,
                columns,
                wanted,
                runs: vec![Arc::new(run)],
            };
            return Ok(Some((ov, false)));
        };
        let mut runs = base.runs.clone();
        if !run.keys.is_empty() {
            runs.push(Arc::new(run));
            settle(&mut runs)?;
        }
        Ok(Some((
            Overlay {
                built_at: at,
                columns,
                wanted,
                runs,
            },
            true,
        )))
    }

    /// Where each of `keys` (ascending) that the overlay holds was placed
    /// (see [`runs::placed`]).
    fn placed(&self, keys: &[Vec<u8>]) -> Vec<Option<(u64, bool)>> {
        runs::placed(&self.runs, keys)
    }

    /// The memory its runs hold: rows, keys and placements.
    pub fn bytes(&self) -> usize {
        self.runs.iter().map(|r| r.bytes()).sum()
    }

    /// Whether its rows hold every column of `wanted`.
    pub fn covers(&self, wanted: &BTreeSet<String>) -> bool {
        self.wanted.is_superset(wanted)
    }

    /// The keys of `overlays` (of one segment or gap, over memtables
    /// oldest first) in `range`, every run merged: a key's row is the
    /// newest overlay's holding it.
    pub fn span(overlays: &[Arc<Overlay>], range: &KeyRange) -> OverlaySpan {
        let runs: Vec<Arc<Run>> = overlays.iter().flat_map(|o| o.runs.iter().cloned()).collect();
        runs::span(&runs, range)
    }
}

/// What an overlay places a memtable's keys in.
#[derive(Clone)]
pub(crate) enum Under {
    /// A segment no other segment overlaps: the keys of its key span.
    Segment(Arc<Segment>),
    /// A key range no segment overlaps (before the first, between two,
    /// after the last): every key in it is new, and the overlay is the
    /// memtable's rows there, columnar.
    Gap(KeyRange),
}

impl Under {
    /// The keys the overlay holds.
    pub(super) fn range(&self) -> KeyRange {
        match self {
            Under::Segment(seg) => KeyRange {
                lo: seg.min_key.clone(),
                hi: Some(key_successor(&seg.max_key)),
            },
            Under::Gap(r) => r.clone(),
        }
    }

    /// The name of its overlay's slot among the memtable's attachments.
    pub fn slot_name(&self) -> String {
        let hex = |k: &[u8]| k.iter().map(|b| format!("{b:02x}")).collect::<String>();
        match self {
            Under::Segment(seg) => seg.meta.path.clone(),
            // Not a path: no segment's slot can take it.
            Under::Gap(r) => format!("\0gap {} {}", hex(&r.lo), r.hi.as_deref().map_or("end".into(), hex)),
        }
    }
}

/// The key ranges no segment of `segments` overlaps, ascending (the
/// gaps' bounds depend only on the segments, so every scan and the
/// background name a gap alike).
pub(super) fn gaps(segments: &[Arc<Segment>]) -> Vec<KeyRange> {
    let mut spans: Vec<(&[u8], &[u8])> = segments
        .iter()
        .map(|s| (s.min_key.as_slice(), s.max_key.as_slice()))
        .collect();
    spans.sort_unstable();
    let mut out = Vec::new();
    let mut lo: Vec<u8> = Vec::new();
    for (min, max) in spans {
        if lo.as_slice() < min {
            out.push(KeyRange {
                lo: std::mem::take(&mut lo),
                hi: Some(min.to_vec()),
            });
        }
        let after = key_successor(max);
        if after > lo {
            lo = after;
        }
    }
    out.push(KeyRange { lo, hi: None });
    out
}

/// The gap of `segments` holding `range`, when no segment overlaps it.
pub(super) fn gap_holding(segments: &[Arc<Segment>], range: &KeyRange) -> Option<KeyRange> {
    if segments.iter().any(|s| range.overlaps(&s.min_key, &s.max_key)) {
        return None;
    }
    gaps(segments).into_iter().find(|g| {
        g.lo <= range.lo
            && g.hi
                .as_ref()
                .is_none_or(|h| range.hi.as_ref().is_some_and(|rh| rh <= h))
    })
}

/// One segment's overlay over a memtable, kept as the memtable's
/// attachment (by segment path): built by one scan while the others wait
/// for it, dropped with the memtable.
pub(crate) type OverlaySlot = tokio::sync::Mutex<Option<Arc<Overlay>>>;

/// The slot of one segment's overlay, held while it is built.
pub(crate) type HeldSlot = tokio::sync::OwnedMutexGuard<Option<Arc<Overlay>>>;

/// Builds (or extends, from what `held` holds) the overlay of `mem`'s
/// writes up to `at` over `under` into its slot; `None` when the segment
/// has no key statistics to place keys with.
///
/// Built on a task of its own, which also releases the slot. Scans waiting
/// for the overlay are then woken from that task, so an idle worker thread
/// can pick one up; woken from a scan's task, a waiter would go to that
/// thread's LIFO slot (which other workers do not steal from) and wait
/// there until the scan next yields, running the partitions one after
/// another.
pub(crate) async fn build_in_slot(
    table: &Arc<TableInner>,
    mem: &Arc<Memtable>,
    under: &Under,
    at: u64,
    mut held: HeldSlot,
    wanted: &Arc<BTreeSet<String>>,
    older: Option<Snapshot>,
) -> Result<Option<Arc<Overlay>>> {
    let (table, mem, under, wanted) = (table.clone(), mem.clone(), under.clone(), wanted.clone());
    let build = tokio::spawn(async move {
        let base = held.as_deref();
        let Some((ov, extended)) = Overlay::build(&table, &mem, &under, at, base, &wanted, older.as_ref()).await?
        else {
            return Ok(None);
        };
        let counter = if extended {
            &table.stats.overlay_extensions
        } else {
            &table.stats.overlay_builds
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ov = Arc::new(ov);
        *held = Some(ov.clone());
        Ok(Some(ov))
    });
    build.await.map_err(|e| {
        Error::new(
            crate::error::ErrorKind::Closed,
            format!("the task building a memtable overlay stopped: {e}"),
        )
    })?
}

/// Brings the overlays of `mem` over every segment and every gap between
/// segments it has keys in up to sequence `at` (every write up to it
/// applied), in parallel, so that the next scan finds them built or
/// nearly. Run in the background while a table that SQL scans is written.
/// A slot a scan is building is left to it, and a failure is left for the
/// scan that needs the overlay to meet and report. Only segments whose key
/// span no other segment overlaps get one: scans merge overlapping
/// segments row by row, with no overlay.
pub(crate) async fn warm(table: Arc<TableInner>, mem: Arc<Memtable>, segments: Arc<Vec<Arc<Segment>>>, at: u64) {
    let wanted = table.overlay_columns.lock().clone();
    let mut builds = Vec::new();
    let unders = alone(&segments)
        .into_iter()
        .map(|s| Under::Segment(s.clone()))
        .chain(gaps(&segments).into_iter().map(Under::Gap));
    for under in unders {
        let range = under.range();
        if !mem.has_key_in(&range) {
            continue;
        }
        let Ok(held) = mem.attachment::<OverlaySlot>(&under.slot_name()).try_lock_owned() else {
            continue;
        };
        if held.as_ref().is_some_and(|ov| ov.built_at >= at) {
            continue;
        }
        let few = || mem.key_count_in(&range, GAP_MIN_KEYS) < GAP_MIN_KEYS;
        if matches!(under, Under::Gap(_)) && held.is_none() && few() {
            continue;
        }
        let (table, mem, wanted) = (table.clone(), mem.clone(), wanted.clone());
        builds.push(async move { build_in_slot(&table, &mem, &under, at, held, &wanted, None).await });
    }
    // Each build runs on its own task from its first poll on.
    futures::future::join_all(builds).await;
}

/// `have` with the columns of `more` added (`have` itself when it holds
/// them all).
pub(super) fn with_columns(have: &Arc<BTreeSet<String>>, more: &BTreeSet<String>) -> Arc<BTreeSet<String>> {
    if have.is_superset(more) {
        return have.clone();
    }
    Arc::new(have.union(more).cloned().collect())
}

/// The memory the overlays of `mem` hold (those being built are not
/// counted until they are).
pub(crate) fn overlay_bytes(mem: &Memtable) -> u64 {
    mem.attachments::<OverlaySlot>()
        .iter()
        .filter_map(|slot| Some(slot.try_lock().ok()?.as_ref()?.bytes() as u64))
        .sum()
}

/// The segments whose key span overlaps no other's.
fn alone(segments: &[Arc<Segment>]) -> Vec<&Arc<Segment>> {
    let spans: Vec<(&[u8], &[u8])> = segments
        .iter()
        .map(|s| (s.min_key.as_slice(), s.max_key.as_slice()))
        .collect();
    alone_spans(&spans).into_iter().map(|i| &segments[i]).collect()
}

/// The indices of the closed key spans `(min, max)` that overlap no other.
fn alone_spans(spans: &[(&[u8], &[u8])]) -> Vec<usize> {
    let mut by_min: Vec<usize> = (0..spans.len()).collect();
    by_min.sort_by_key(|&i| spans[i].0);
    let mut out = Vec::new();
    // The largest max key of the spans before the current one.
    let mut reach: Option<&[u8]> = None;
    for (n, &i) in by_min.iter().enumerate() {
        let (min, max) = spans[i];
        let after_earlier = reach.is_none_or(|r| r < min);
        let before_next = by_min.get(n + 1).is_none_or(|&j| max < spans[j].0);
        if after_earlier && before_next {
            out.push(i);
        }
        if reach.is_none_or(|r| r < max) {
            reach = Some(max);
        }
    }
    out.sort_unstable();
    out
}

/// The columns of encoded states a scan shows: typed keys, `__max_ts` and
/// the attributes, strings as views.
fn scan_rows(all: &RecordBatch) -> Result<RecordBatch> {
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    for (f, a) in all.schema().fields().iter().zip(all.columns()) {
        let name = f.name().as_str();
        if name.starts_with("__") && name != format::MAX_TS {
            continue;
        }
        let t = crate::segment::view_type(f.data_type());
        arrays.push(arrow::compute::cast(a, &t)?);
        fields.push(Field::new(name, t, f.is_nullable()));
    }
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

/// The first segment row of each row group.
pub(super) fn group_starts(md: &parquet::file::metadata::ParquetMetaData) -> Vec<u64> {
    (0..md.num_row_groups())
        .scan(0u64, |acc, rg| {
            let start = *acc;
            *acc += md.row_group(rg).num_rows() as u64;
            Some(start)
        })
        .collect()
}

/// Whether an UpdateRow state `st` can be laid over its segment row column
/// by column without reading that row: every column it writes gets a
/// newest version at or above any version of the column in the row's
/// group (`bounds`, per column of `names`, from
/// [`Segment::newest_versions`]), so it is that column's newest (a newer
/// write at an equal version replaces the value), and it deletes no
/// version (a deleted newest version would bring an older one of the
/// segment row back, and a column deleted whole could leave the row with
/// none). The other columns are the segment row's, and the row exists
/// when either has a live cell.
fn lays_over(st: &RowState, names: &[&str], bounds: &[Option<Option<i64>>]) -> bool {
    !st.replace
        && st.row_ts.is_none()
        && st.columns.iter().all(|(name, c)| {
            if c.delete_all || !c.deleted.is_empty() {
                return false;
            }
            let (Some((v, _)), Ok(k)) = (c.versions.first(), names.binary_search(&name.as_str())) else {
                return false;
            };
            match bounds.get(k) {
                Some(Some(None)) => true,
                Some(Some(Some(max))) => v >= max,
                _ => false,
            }
        })
}

/// What a latest-version scan needs of a state: each column's newest
/// version (column tombstones only matter against older sources, which the
/// state has already been merged over).
fn newest_only(st: &mut RowState) {
    st.columns.retain(|_, c| !c.versions.is_empty());
    for c in st.columns.values_mut() {
        c.versions.truncate(1);
        c.deleted.clear();
        c.delete_all = false;
    }
}

/// Maps the rows a stream over some [`RowSpan`]s returns to segment rows
/// (row numbers across all row groups).
#[derive(Default)]
pub(crate) struct RowCursor {
    /// (first segment row, rows) per span, in stream order.
    spans: Vec<(u64, usize)>,
    i: usize,
    off: usize,
}

impl RowCursor {
    pub fn new(md: &parquet::file::metadata::ParquetMetaData, spans: &[RowSpan]) -> Self {
        let starts = group_starts(md);
        let end: u64 = md.row_groups().iter().map(|g| g.num_rows() as u64).sum();
        RowCursor {
            spans: spans
                .iter()
                .map(|s| {
                    (
                        starts.get(s.row_group).copied().unwrap_or(end) + s.rows.start as u64,
                        s.rows.end - s.rows.start,
                    )
                })
                .collect(),
            i: 0,
            off: 0,
        }
    }

    /// The next `n` rows streamed as runs of consecutive segment rows:
    /// (first row in the batch, first segment row, rows).
    pub fn advance(&mut self, n: usize) -> Vec<(usize, u64, usize)> {
        let mut out = Vec::new();
        let mut b = 0;
        while b < n && self.i < self.spans.len() {
            let (start, len) = self.spans[self.i];
            let take = (len - self.off).min(n - b);
            if take > 0 {
                out.push((b, start + self.off as u64, take));
            }
            b += take;
            self.off += take;
            if self.off == len {
                self.i += 1;
                self.off = 0;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alone_spans_are_those_no_other_span_overlaps() {
        let k = |s: &'static str| s.as_bytes();
        let spans = [
            (k("m"), k("p")), // overlaps the next (shared end key)
            (k("a"), k("c")),
            (k("p"), k("q")),
            (k("d"), k("e")),
            (k("f"), k("z")), // reaches over all that follow
            (k("r"), k("s")),
        ];
        assert_eq!(alone_spans(&spans), vec![1, 3]);
        assert_eq!(alone_spans(&spans[..2]), vec![0, 1]);
        assert_eq!(alone_spans(&[(k("a"), k("b"))]), vec![0]);
        assert!(alone_spans(&[]).is_empty());
    }

    #[test]
    fn row_cursor_maps_batches_across_spans() {
        let spans = vec![(10u64, 3usize), (20, 4)];
        let mut c = RowCursor { spans, i: 0, off: 0 };
        assert_eq!(c.advance(2), vec![(0, 10, 2)]);
        assert_eq!(c.advance(3), vec![(0, 12, 1), (1, 20, 2)]);
        assert_eq!(c.advance(5), vec![(0, 22, 2)]);
        assert_eq!(c.advance(1), vec![]);
    }
}
