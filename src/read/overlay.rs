//! Memtable keys resolved against one segment, kept columnar for scans.
//!
//! A SQL scan of a segment that a memtable overlaps must drop the segment
//! rows the memtable replaces and put the memtable's rows in their place.
//! Finding those rows means comparing keys, and decoding every key column
//! of the segment for that cost more than the query itself (10M rows with
//! 1% of them rewritten: 4.4x a plain Parquet scan). An [`Overlay`] does
//! that work once per memtable state and segment:
//! - each memtable key's position in the segment: the row it replaces, or
//!   the row it goes before (found from the row groups' key bounds, then a
//!   `__pk` page read per key in groups holding few of them, one pass over
//!   the typed key columns of groups holding many);
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

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::concat_batches;
use arrow::datatypes::{Field, Schema};
use futures::StreamExt;

use super::arrow::{BATCH_ROWS, TypedKey};
use crate::error::{Error, Result};
use crate::memtable::Memtable;
use crate::model::key::{KeyRange, key_successor};
use crate::model::row::KeyWrites;
use crate::model::row::RowState;
use crate::model::types::TypeSet;
use crate::segment::format;
use crate::segment::{RowEncoder, RowSpan, Segment, partition};
use crate::state::TableInner;

/// Keys folded and encoded per step while building (bounds the memory a
/// build holds besides the overlay itself).
const BUILD_CHUNK: usize = 4096;

/// One memtable's keys within one segment's key span, resolved against it.
pub(crate) struct Overlay {
    /// The memtable's newest sequence when this was built.
    pub built_at: u64,
    /// The attribute columns of `rows`: the segment's and the memtable's.
    columns: Vec<(String, TypeSet)>,
    /// The keys, ascending (shared with the overlays extended from this
    /// one).
    pub keys: Vec<Arc<[u8]>>,
    /// Per key: the segment row it replaces (`found`), else the segment row
    /// it goes before (the segment's row count: after the last row).
    pub pos: Vec<u64>,
    pub found: Vec<bool>,
    /// Per key: its row holds only the columns its UpdateRows wrote, to be
    /// laid over the segment row it was found at, column by column (see
    /// [`lays_over`]); otherwise the row is the key's whole state.
    pub partial: Vec<bool>,
    /// Per key, its merged state's newest values in the segment layout
    /// (typed key columns, `__max_ts`, one struct per attribute column),
    /// strings as views; for a partial key, its own writes' newest values.
    pub rows: RecordBatch,
}

impl Overlay {
    /// Builds the overlay of `mem`'s writes up to sequence `at` over `seg`
    /// (writes after `at` are left out: a scan builds it at its snapshot
    /// while writers go on).
    ///
    /// With `base`, an overlay of the same memtable and segment built at an
    /// earlier sequence, only the keys written since then are placed and
    /// folded; every other key keeps its position and row from `base`
    /// (keys never leave a memtable and segment rows never move). That
    /// holds while the attribute columns are the same; when a write
    /// brought a new column or value type, it is built whole. Returns
    /// whether `base` was extended; `None` when the segment has no key
    /// statistics to place keys with.
    pub async fn build(
        table: &TableInner,
        mem: &Memtable,
        seg: &Arc<Segment>,
        at: u64,
        base: Option<&Overlay>,
    ) -> Result<Option<(Overlay, bool)>> {
        let range = KeyRange {
            lo: seg.min_key.clone(),
            hi: Some(key_successor(&seg.max_key)),
        };
        // Columns: the memtable's, plus the segment's (an UpdateRow merged
        // over a segment row brings that row's other columns along).
        let mut columns: std::collections::BTreeMap<String, TypeSet> = seg.meta.columns.iter().cloned().collect();
        for (name, t) in mem.columns() {
            columns.entry(name).or_default().0 |= t.0;
        }
        let columns: Vec<(String, TypeSet)> = columns.into_iter().collect();
        let base = base.filter(|b| b.columns == columns && b.built_at < at);
        let after = base.map_or(0, |b| b.built_at);
        // The keys written since `after`; those `base` lacks are located.
        let keys = mem.keys_changed(&range, after, at);
        let in_base: Vec<Option<usize>> = keys
            .iter()
            .map(|k| base.and_then(|b| b.keys.binary_search_by(|x| (**x).cmp(k.as_slice())).ok()))
            .collect();
        let fresh: Vec<Vec<u8>> = keys
            .iter()
            .zip(&in_base)
            .filter(|(_, i)| i.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        let Some((fresh_pos, fresh_found)) = locate(table, seg, &fresh).await? else {
            return Ok(None);
        };
        let (mut pos, mut found) = (Vec::with_capacity(keys.len()), Vec::with_capacity(keys.len()));
        let mut partial = vec![false; keys.len()];
        let mut f = 0;
        for i in &in_base {
            match (i, base) {
                (Some(i), Some(b)) => {
                    pos.push(b.pos[*i]);
                    found.push(b.found[*i]);
                }
                _ => {
                    pos.push(fresh_pos[f]);
                    found.push(fresh_found[f]);
                    f += 1;
                }
            }
        }
        let schema = format::arrow_schema(&table.schema, &columns);
        let mut enc = RowEncoder::new(&table.schema, &columns);
        // What the segment's row groups can hold of each column, for
        // updates laid over their rows.
        let md = seg.reader_metadata().await?.metadata().clone();
        let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
        let bounds = Segment::newest_versions(&md, &names);
        let starts = group_starts(&md);
        let group_of = |row: u64| starts.partition_point(|s| *s <= row).saturating_sub(1);
        let mut batches = Vec::new();
        let mut resume: Option<Vec<u8>> = None;
        let mut i = 0;
        let changed = || Error::corruption("memtable keys changed while an overlay was built for a scan");
        loop {
            // A pass encodes up to BUILD_CHUNK keys under the memtable's
            // read lock. A PutRow is encoded from its cells (it alone
            // decides the row); an UpdateRow over a stored row ends the
            // pass, as that row is read (async) to merge it under.
            let mut merge: Option<RowState> = None;
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
                    if !st.replace && found[i] {
                        let group = bounds.get(group_of(pos[i])).map(Vec::as_slice);
                        if !group.is_some_and(|b| lays_over(&st, &names, b)) {
                            merge = Some(st);
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
            if let Some(st) = merge {
                let key = &keys[i];
                let mut st = match seg.get(key, None).await? {
                    Some(older) => st.merge_over(older),
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
        let Some(base) = base else {
            let ov = Overlay {
                built_at: at,
                columns,
                keys: keys.into_iter().map(Arc::from).collect(),
                pos,
                found,
                partial,
                rows,
            };
            return Ok(Some((ov, false)));
        };
        // Every key of either, ascending; a key written since takes its new
        // position and row.
        let n = base.keys.len() + fresh.len();
        let mut merged = Overlay {
            built_at: at,
            columns,
            keys: Vec::with_capacity(n),
            pos: Vec::with_capacity(n),
            found: Vec::with_capacity(n),
            partial: Vec::with_capacity(n),
            rows: RecordBatch::new_empty(rows.schema()),
        };
        // Runs of consecutive rows from either: (0 = base / 1 = new, start, end).
        let mut runs: Vec<(usize, usize, usize)> = Vec::new();
        let mut push = |src: usize, i: usize| match runs.last_mut() {
            Some((s, _, e)) if *s == src && *e == i => *e += 1,
            _ => runs.push((src, i, i + 1)),
        };
        let (mut b, mut c) = (0, 0);
        while b < base.keys.len() || c < keys.len() {
            let from_new = match (base.keys.get(b), keys.get(c)) {
                (Some(old), Some(new)) => match (**old).cmp(new.as_slice()) {
                    std::cmp::Ordering::Less => false,
                    std::cmp::Ordering::Equal => {
                        b += 1;
                        true
                    }
                    std::cmp::Ordering::Greater => true,
                },
                (Some(_), None) => false,
                (None, _) => true,
            };
            if from_new {
                push(1, c);
                c += 1;
            } else {
                push(0, b);
                b += 1;
            }
        }
        let mut keys: Vec<Option<Vec<u8>>> = keys.into_iter().map(Some).collect();
        for &(src, s, e) in &runs {
            if src == 0 {
                merged.keys.extend_from_slice(&base.keys[s..e]);
                merged.pos.extend_from_slice(&base.pos[s..e]);
                merged.found.extend_from_slice(&base.found[s..e]);
                merged.partial.extend_from_slice(&base.partial[s..e]);
            } else {
                merged
                    .keys
                    .extend(keys[s..e].iter_mut().filter_map(|k| k.take().map(Arc::from)));
                merged.pos.extend_from_slice(&pos[s..e]);
                merged.found.extend_from_slice(&found[s..e]);
                merged.partial.extend_from_slice(&partial[s..e]);
            }
        }
        // Copied run by run: few runs when few keys were written since.
        let mut columns = Vec::with_capacity(rows.num_columns());
        for (old, new) in base.rows.columns().iter().zip(rows.columns()) {
            let (old, new) = (old.to_data(), new.to_data());
            let mut m = arrow::array::MutableArrayData::new(vec![&old, &new], false, n);
            for &(src, s, e) in &runs {
                m.try_extend(src, s, e)?;
            }
            columns.push(arrow::array::make_array(m.freeze()));
        }
        merged.rows = RecordBatch::try_new(rows.schema(), columns)?;
        Ok(Some((merged, true)))
    }

    /// The index range of the keys in `range`.
    pub fn key_span(&self, range: &KeyRange) -> std::ops::Range<usize> {
        let lo = self.keys.partition_point(|k| **k < *range.lo.as_slice());
        let hi = match &range.hi {
            Some(h) => self.keys.partition_point(|k| **k < *h.as_slice()),
            None => self.keys.len(),
        };
        lo..hi.max(lo)
    }
}

/// One segment's overlay over a memtable, kept as the memtable's
/// attachment (by segment path): built by one scan while the others wait
/// for it, dropped with the memtable.
pub(crate) type OverlaySlot = tokio::sync::Mutex<Option<Arc<Overlay>>>;

/// The slot of one segment's overlay, held while it is built.
pub(crate) type HeldSlot = tokio::sync::OwnedMutexGuard<Option<Arc<Overlay>>>;

/// Builds (or extends, from what `held` holds) the overlay of `mem`'s
/// writes up to `at` over `seg` into its slot; `None` when the segment has
/// no key statistics to place keys with.
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
    seg: &Arc<Segment>,
    at: u64,
    mut held: HeldSlot,
) -> Result<Option<Arc<Overlay>>> {
    let (table, mem, seg) = (table.clone(), mem.clone(), seg.clone());
    let build = tokio::spawn(async move {
        let Some((ov, extended)) = Overlay::build(&table, &mem, &seg, at, held.as_deref()).await? else {
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

/// Brings the overlays of `mem` over every segment it has keys in up to
/// sequence `at` (every write up to it applied), the segments in
/// parallel, so that the next scan finds them built or nearly. Run in the
/// background while a table that SQL scans is written. A slot a scan is
/// building is left to it, and a failure is left for the scan that needs
/// the overlay to meet and report. Only segments whose key span no other
/// segment overlaps get one: scans merge overlapping segments row by row,
/// with no overlay.
pub(crate) async fn warm(table: Arc<TableInner>, mem: Arc<Memtable>, segments: Arc<Vec<Arc<Segment>>>, at: u64) {
    let mut builds = Vec::new();
    for seg in alone(&segments) {
        if !mem.has_key_between(&seg.min_key, &seg.max_key) {
            continue;
        }
        let Ok(held) = mem.attachment::<OverlaySlot>(&seg.meta.path).try_lock_owned() else {
            continue;
        };
        if held.as_ref().is_some_and(|ov| ov.built_at >= at) {
            continue;
        }
        builds.push(build_in_slot(&table, &mem, seg, at, held));
    }
    // Each build runs on its own task from its first poll on.
    futures::future::join_all(builds).await;
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

/// Each key's position in the segment (see [`Overlay::pos`]); `None` when
/// the segment's row groups have no key statistics (then a scan compares
/// keys row by row instead).
///
/// A key is placed by the key bounds of the row groups when it lies
/// between two of them. In a group's bounds, it is placed by narrowing:
/// each key starts with the rows of the `__pk` page that holds
/// the first row at or past it (from the page index, unread; a key below
/// that page's smallest key is placed before it right away), and one
/// primary-key column after another is read for the rows some key still
/// could be, each key keeping the rows whose value equals its own (sorted
/// within the rows that agree on the columns before). A key with no such
/// row goes before the first greater one. So only the pages near memtable
/// keys are read, a column at a time, instead of every key column of
/// every row of their groups.
async fn locate(table: &TableInner, seg: &Arc<Segment>, keys: &[Vec<u8>]) -> Result<Option<(Vec<u64>, Vec<bool>)>> {
    let n = keys.len();
    let mut pos = vec![0u64; n];
    let mut found = vec![false; n];
    if n == 0 {
        return Ok(Some((pos, found)));
    }
    let md = seg.reader_metadata().await?.metadata().clone();
    // The keys each row group's bounds hold; keys between groups go before
    // the next group's first row, keys past the last group after the last
    // row.
    let mut in_group: Vec<(usize, u64, std::ops::Range<usize>)> = Vec::new();
    let mut start = 0u64;
    let mut j = 0;
    for rg in 0..md.num_row_groups() {
        let Some((lo, hi)) = seg.row_group_key_range(&md, rg) else {
            return Ok(None);
        };
        while j < n && keys[j].as_slice() < lo {
            pos[j] = start;
            j += 1;
        }
        let first = j;
        while j < n && keys[j].as_slice() <= hi {
            j += 1;
        }
        if j > first {
            in_group.push((rg, start, first..j));
        }
        start += md.row_group(rg).num_rows() as u64;
    }
    for p in &mut pos[j..] {
        *p = start;
    }
    // Each key starts with the rows of its `__pk` page.
    let mut open: Vec<Candidates> = Vec::new();
    for (rg, first_row, ks) in in_group {
        for key in ks {
            let rows = seg.key_page_rows(&md, rg, &keys[key]);
            let rows = first_row + rows.start as u64..first_row + rows.end as u64;
            if rows.is_empty() {
                pos[key] = rows.start;
            } else {
                open.push(Candidates {
                    key,
                    values: Vec::new(),
                    rows,
                    row_group: (rg, first_row),
                });
            }
        }
    }
    if open.is_empty() {
        return Ok(Some((pos, found)));
    }
    let pk = &table.schema.primary_key;
    let pk_types = table.schema.pk_types();
    for cand in &mut open {
        cand.values = crate::model::key::decode_key(&keys[cand.key], &pk_types)?;
    }
    let paths = seg.leaf_paths().await?;
    let path = &seg.meta.path;
    for (c, col) in pk.iter().enumerate() {
        if open.is_empty() {
            break;
        }
        let last = c + 1 == pk.len();
        let leaf = paths
            .iter()
            .position(|p| p.len() == 1 && p[0] == col.name)
            .ok_or_else(|| Error::corruption(format!("segment {path}: no primary-key column '{}'", col.name)))?;
        // The rows some key could still be: each key's rows, merged.
        let mut runs: Vec<(std::ops::Range<u64>, (usize, u64))> = Vec::new();
        for o in &open {
            match runs.last_mut() {
                Some((r, g)) if *g == o.row_group && o.rows.start <= r.end => r.end = r.end.max(o.rows.end),
                _ => runs.push((o.rows.clone(), o.row_group)),
            }
        }
        let spans: Vec<RowSpan> = runs
            .iter()
            .map(|(r, (rg, first_row))| RowSpan {
                row_group: *rg,
                rows: (r.start - first_row) as usize..(r.end - first_row) as usize,
                inside: true,
            })
            .collect();
        let mut values = RunReader {
            stream: seg.stream_rows(&spans, vec![leaf], BATCH_ROWS).await?,
            held: Vec::new(),
            path,
        };
        let mut pending = std::mem::take(&mut open).into_iter().peekable();
        for (run, _) in &runs {
            let array = values.take((run.end - run.start) as usize).await?;
            let column = TypedKey::new(&array, col.pk_type, path)?;
            while let Some(cand) = pending.next_if(|o| o.rows.start < run.end) {
                let v = &cand.values[c];
                let (a, b) = (
                    (cand.rows.start - run.start) as usize,
                    (cand.rows.end - run.start) as usize,
                );
                let lo = a + partition(b - a, |r| column.row_vs(a + r, v).is_lt());
                let hi = lo + partition(b - lo, |r| column.row_vs(lo + r, v).is_le());
                if lo == hi || last {
                    pos[cand.key] = run.start + lo as u64;
                    found[cand.key] = lo < hi;
                } else {
                    let rows = run.start + lo as u64..run.start + hi as u64;
                    open.push(Candidates { rows, ..cand });
                }
            }
        }
        if pending.next().is_some() {
            return Err(Error::corruption(format!("segment {path}: key rows ended early")));
        }
    }
    Ok(Some((pos, found)))
}

/// A key being placed, with the segment rows it still could be.
struct Candidates {
    /// Index into the keys being placed.
    key: usize,
    /// The key's primary-key values.
    values: Vec<crate::model::types::PkValue>,
    /// Segment rows (within one row group) that agree with the key on the
    /// columns compared so far.
    rows: std::ops::Range<u64>,
    /// That row group and its first segment row.
    row_group: (usize, u64),
}

/// A one-column stream of segment rows handed out in runs of given
/// lengths, each as one array (sliced from a batch, or concatenated when
/// a run spans batches).
struct RunReader<'p> {
    stream: crate::segment::SegmentBatchStream,
    /// Rows read but not handed out yet.
    held: Vec<ArrayRef>,
    path: &'p str,
}

impl RunReader<'_> {
    async fn take(&mut self, n: usize) -> Result<ArrayRef> {
        while self.held.iter().map(|a| a.len()).sum::<usize>() < n {
            let Some(batch) = self.stream.next().await else {
                return Err(Error::corruption(format!(
                    "segment {}: fewer rows than its row groups list",
                    self.path
                )));
            };
            let batch = batch.map_err(|e| crate::segment::read_error(self.path, e))?;
            self.held.push(batch.column(0).clone());
        }
        let all = match self.held.as_slice() {
            [one] => one.clone(),
            many => arrow::compute::concat(&many.iter().map(|a| a.as_ref()).collect::<Vec<_>>())?,
        };
        let rest = all.len() - n;
        self.held.clear();
        if rest > 0 {
            self.held.push(all.slice(n, rest));
        }
        Ok(all.slice(0, n))
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
