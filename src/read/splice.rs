//! The single-segment reader: one segment's rank-0 rows over a piece, read
//! column by column from Parquet, with the memtable keys of the piece
//! spliced in, from the memtable's overlay of the segment when there is
//! one, else by comparing keys batch by batch.
//!
//! Invariant: a row comes out once, in key order, as the newest visible
//! state of its key: a segment row a memtable write replaced is dropped,
//! one it updated is re-read whole and merged, or gets the update's
//! columns laid over it (from the overlay, see [`super::overlay_rows`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow::array::{
    Array, AsArray, BooleanArray, Int64Array, MutableArrayData, RecordBatch, RecordBatchOptions, make_array,
};
use arrow::compute::kernels::cmp;
use arrow::compute::{and, filter_record_batch, is_not_null};
use arrow::datatypes::{Int64Type, UInt8Type, UInt16Type};
use futures::StreamExt;

use super::arrow::{BATCH_ROWS, OutCol, RowKeys};
use super::context::{RowsBuilder, ScanCtx};
use super::merge_scan::MergeScan;
use super::overlay::{RowCursor, Under};
use super::overlay_rows::{OVERLAY_MIN_SHARE, OverlayRows, note_wide_scan, overlays_for};
use super::placement::Placement;
use super::plan::{RowGroupFilter, SegmentStats, intersect_ranges};
use crate::error::{Error, Result};
use crate::model::key::KeyRange;
use crate::model::row::RowState;
use crate::segment::format::{self, ROW_DELETED};
use crate::segment::{RowSpan, Segment, SegmentBatchStream};
use crate::state::Snapshot;

/// Reads one segment's rank-0 rows over a piece, merging memtable keys in.
pub(super) struct SingleReader {
    pub(super) seg: Arc<Segment>,
    pub(super) range: KeyRange,
    pub(super) stream: Option<SegmentBatchStream>,
    /// Some rows may lie outside the range: check `__pk` per row.
    pub(super) check_keys: bool,
    /// Place memtable keys with the typed key columns (no `__pk` read).
    pub(super) typed_keys: bool,
    pub(super) has_max_ts: bool,
    pub(super) has_ranks: bool,
    /// Every rank-0 row is a live row (no TTL, no dead keys): no
    /// visibility columns to read.
    pub(super) all_live: bool,
    /// Memtable states of keys in the piece, in key order.
    pub(super) mem: MemFeed,
    /// The memtable's rows by position instead, when an overlay is used
    /// (then `mem` is empty and no key column is read).
    pub(super) overlay: Option<OverlayRows>,
}

/// The merged memtable states of a piece, read in key order a chunk at a
/// time (a scan never copies a whole memtable).
pub(super) struct MemFeed {
    pub(super) scan: Option<MemSource>,
    pub(super) buf: VecDeque<(Vec<u8>, RowState)>,
}

pub(super) enum MemSource {
    /// Several memtables hold keys here: merge them.
    Merge(MergeScan),
    /// One memtable: its folded states directly.
    One {
        mem: Arc<crate::memtable::Memtable>,
        range: KeyRange,
        resume: Option<Vec<u8>>,
        seq: u64,
    },
}

pub(super) const MEM_FEED_KEYS: usize = 1024;

impl MemFeed {
    /// Makes `buf` non-empty unless the memtables have no more keys.
    pub(super) async fn fill(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            return Ok(());
        }
        match self.scan.as_mut() {
            None => {}
            Some(MemSource::Merge(scan)) => {
                while self.buf.len() < MEM_FEED_KEYS {
                    match scan.next().await? {
                        Some(kv) => self.buf.push_back(kv),
                        None => {
                            self.scan = None;
                            break;
                        }
                    }
                }
            }
            Some(MemSource::One {
                mem,
                range,
                resume,
                seq,
            }) => {
                let chunk = mem.scan_chunk(range, resume.as_deref(), false, *seq, MEM_FEED_KEYS);
                if chunk.len() < MEM_FEED_KEYS {
                    self.scan = None;
                } else if let Some((k, _)) = chunk.last() {
                    *resume = Some(k.clone());
                }
                self.buf.extend(chunk);
            }
        }
        Ok(())
    }
}

impl SingleReader {
    pub(super) async fn open(
        cx: &ScanCtx,
        seg: Arc<Segment>,
        range: KeyRange,
        filter: Option<&dyn RowGroupFilter>,
    ) -> Result<Self> {
        let (table, snap, cols) = (&cx.table, &cx.snap, &cx.cols);
        let mem_snap = Snapshot {
            seq: snap.seq,
            part: snap.part,
            range: snap.range.clone(),
            memtables: snap.memtables.clone(),
            segments: Arc::new(Vec::new()),
            options: snap.options,
        };
        let with_keys: Vec<_> = snap.memtables.iter().filter(|m| m.has_key_in(&range)).collect();
        let mut spans: Vec<RowSpan> = seg.row_spans(&range).await?;
        let piece_rows: u64 = spans.iter().map(|s| s.rows.len() as u64).sum();
        // A chunk of a scan read in chunks counts as the whole scan.
        let piece_rows = match cx.shared.whole_rows(&seg).await? {
            Some(whole) => whole.max(piece_rows),
            None => piece_rows,
        };
        if piece_rows.saturating_mul(OVERLAY_MIN_SHARE) >= seg.meta.num_rows {
            note_wide_scan(cx);
        }
        let overlay = match with_keys.as_slice() {
            [] => None,
            mems => {
                let worth_building = piece_rows.saturating_mul(OVERLAY_MIN_SHARE) >= seg.meta.num_rows;
                overlays_for(cx, mems, &Under::Segment(seg.clone()), worth_building).await?
            }
        };
        let has_mem = !with_keys.is_empty() && overlay.is_none();
        let source = match with_keys.as_slice() {
            _ if overlay.is_some() => None,
            [] => None,
            [one] => Some(MemSource::One {
                mem: (*one).clone(),
                range: range.clone(),
                resume: None,
                seq: snap.seq,
            }),
            _ => Some(MemSource::Merge(MergeScan::new(&mem_snap, range.clone(), false, None))),
        };
        let mem = MemFeed {
            scan: source,
            buf: VecDeque::new(),
        };
        let mut overlay = match overlay {
            Some(ovs) => Some(OverlayRows::new(cx, &ovs, &range)?),
            None => None,
        };
        // The spans before statistics pruning, to count the pages it saved.
        let mut unpruned: Option<Vec<RowSpan>> = None;
        if let Some(f) = filter
            && !spans.is_empty()
        {
            // Row groups the predicates rule out. Without an overlay, not
            // one a memtable key falls into: its merged row is produced
            // while the group's rows stream by. An overlay's whole rows
            // need no segment row (the rows they replace cannot match
            // either), so they go in by position among the rows that are
            // read; a partial one (an update laid over its segment row)
            // needs that row's group.
            let md = seg.reader_metadata().await?.metadata().clone();
            let groups: Vec<usize> = spans.iter().map(|s| s.row_group).collect();
            let stats = SegmentStats::new(&seg, &md);
            let keep = f.keep(&stats, &groups);
            let laid_over = overlay
                .as_ref()
                .map(|ov| ov.groups_to_read(cx, &md, f))
                .unwrap_or_default();
            // Groups read whatever their statistics say: their rows merge
            // with memtable keys.
            let forced: Vec<bool> = spans
                .iter()
                .map(|s| {
                    laid_over.binary_search(&s.row_group).is_ok()
                        || (overlay.is_none()
                            && seg
                                .row_group_key_range(&md, s.row_group)
                                .is_none_or(|(lo, hi)| snap.memtables.iter().any(|m| m.has_key_between(lo, hi))))
                })
                .collect();
            let stats_keep = |i: usize| keep.get(i).copied().unwrap_or(true);
            let before = spans.len();
            // Groups kept by their statistics and read for no other reason:
            // within them, the pages statistics rule out are skipped too.
            let by_pages: Vec<usize> = spans
                .iter()
                .enumerate()
                .filter(|(i, _)| stats_keep(*i) && !forced[*i])
                .map(|(_, s)| s.row_group)
                .collect();
            let mut page_rows = f.keep_rows(&stats, &by_pages).into_iter();
            let mut refined = Vec::with_capacity(spans.len());
            for (i, s) in spans.iter().enumerate() {
                if forced[i] {
                    refined.push(s.clone());
                    continue;
                }
                if !stats_keep(i) {
                    continue;
                }
                match page_rows.next().flatten() {
                    None => refined.push(s.clone()),
                    Some(rows) => refined.extend(
                        intersect_ranges(std::slice::from_ref(&s.rows), &rows)
                            .into_iter()
                            .map(|rows| RowSpan {
                                row_group: s.row_group,
                                rows,
                                inside: s.inside,
                            }),
                    ),
                }
            }
            // Refined spans stay in row-group order.
            let groups_left = refined.chunk_by(|a, b| a.row_group == b.row_group).count();
            cx.counters.row_groups.fetch_add(before as u64, Ordering::Relaxed);
            cx.counters
                .row_groups_pruned
                .fetch_add(before.saturating_sub(groups_left) as u64, Ordering::Relaxed);
            unpruned = Some(std::mem::replace(&mut spans, refined));
        }
        let check_keys = spans.iter().any(|s| !s.inside);
        let paths = seg.leaf_paths().await?;
        let has_max_ts = paths.iter().any(|p| p.len() == 1 && p[0] == format::MAX_TS);
        let has_ranks = seg.meta.num_rows > seg.meta.num_keys;
        let ttl = cx.cutoff > i64::MIN;
        let all_live = !ttl && has_max_ts && seg.meta.dead_keys == Some(0);
        // Memtable keys are placed by comparing the typed key columns (much
        // cheaper to decode than `__pk`), unless `__pk` is read anyway.
        let need_pk = check_keys;
        let typed_keys = has_mem && !check_keys;
        let mut leaves = Vec::new();
        for (i, p) in paths.iter().enumerate() {
            let top = p[0].as_str();
            let want = match top {
                format::PK => need_pk,
                format::RANK => has_ranks,
                format::ROW | format::MAX_TS => !all_live,
                format::ROW_TS => !has_max_ts,
                format::SEQ | format::TOMB => false,
                _ if p.len() == 1 => {
                    (typed_keys && table.schema.is_pk_column(top))
                        || cols
                            .iter()
                            .any(|c| matches!(c, OutCol::Pk(k) if table.schema.primary_key[*k].name == top))
                }
                _ => {
                    let child = p[1].as_str();
                    let projected = cols
                        .iter()
                        .any(|c| matches!(c, OutCol::Attr { name, .. } if name == top));
                    if child == format::TS {
                        // Without `__max_ts`, every column's version decides
                        // whether the row exists.
                        (projected && ttl) || !has_max_ts
                    } else {
                        projected
                    }
                }
            };
            if want {
                leaves.push(i);
            }
        }
        if let Some(unpruned) = &unpruned {
            let md = seg.reader_metadata().await?;
            let (total, read) = (
                crate::segment::pages_overlapping(md.metadata(), &leaves, unpruned),
                crate::segment::pages_overlapping(md.metadata(), &leaves, &spans),
            );
            cx.counters.pages.fetch_add(total, Ordering::Relaxed);
            cx.counters.pages_read.fetch_add(read, Ordering::Relaxed);
            table.stats.scan_pages.fetch_add(total, Ordering::Relaxed);
            table.stats.scan_pages_read.fetch_add(read, Ordering::Relaxed);
        }
        let stream = if spans.is_empty() {
            None
        } else {
            Some(seg.stream_rows(&spans, leaves, BATCH_ROWS).await?)
        };
        if let Some(ov) = overlay.as_mut() {
            let md = seg.reader_metadata().await?.metadata().clone();
            ov.cursor = RowCursor::new(&md, &spans);
        }
        Ok(SingleReader {
            seg,
            range,
            stream,
            check_keys,
            typed_keys,
            has_max_ts,
            has_ranks,
            all_live,
            mem,
            overlay,
        })
    }

    pub(super) async fn next_batch(&mut self, cx: &ScanCtx) -> Result<Option<RecordBatch>> {
        loop {
            let next = match self.stream.as_mut() {
                Some(s) => s.next().await,
                None => None,
            };
            match next {
                Some(batch) => {
                    let batch = batch.map_err(|e| crate::segment::read_error(&self.seg.meta.path, e))?;
                    let out = self.process(&batch, cx).await?;
                    if out.num_rows() > 0 {
                        return Ok(Some(out));
                    }
                }
                None => {
                    self.stream = None;
                    if let Some(ov) = self.overlay.as_mut() {
                        return ov.rest(usize::MAX);
                    }
                    // Memtable keys past the segment's last row.
                    let mut rows = cx.rows();
                    while rows.rows < BATCH_ROWS {
                        self.mem.fill().await?;
                        let Some((key, st)) = self.mem.buf.pop_front() else {
                            break;
                        };
                        cx.push_visible(&mut rows, &key, &st, None)?;
                    }
                    if rows.rows == 0 {
                        return Ok(None);
                    }
                    return Ok(Some(cx.finish(&mut rows)?));
                }
            }
        }
    }

    pub(super) async fn process(&mut self, batch: &RecordBatch, cx: &ScanCtx) -> Result<RecordBatch> {
        let (table, cols, schema) = (&cx.table, &cx.cols, &cx.schema);
        let path = self.seg.meta.path.clone();
        let corrupt = |what: &str| Error::corruption(format!("segment {path}: {what}"));
        let n = batch.num_rows();
        let cutoff = cx.cutoff;
        // Which rows are visible rows of this segment.
        let mut keep = if self.all_live {
            BooleanArray::new(arrow::buffer::BooleanBuffer::new_set(n), None)
        } else {
            let row = batch
                .column_by_name(format::ROW)
                .and_then(|a| a.as_primitive_opt::<UInt8Type>())
                .ok_or_else(|| corrupt("no __row column"))?;
            let live = cmp::neq(row, &arrow::array::UInt8Array::new_scalar(ROW_DELETED))?;
            and(&live, &self.exists(batch, cutoff)?)?
        };
        if self.has_ranks {
            let rank = batch
                .column_by_name(format::RANK)
                .and_then(|a| a.as_primitive_opt::<UInt16Type>())
                .ok_or_else(|| corrupt("no __rank column"))?;
            keep = and(&keep, &cmp::eq(rank, &arrow::array::UInt16Array::new_scalar(0))?)?;
        }
        let pk = batch.column_by_name(format::PK).map(|a| a.as_binary::<i32>());
        if self.check_keys {
            let pk = pk.ok_or_else(|| corrupt("no __pk column"))?;
            let inside: BooleanArray = pk
                .iter()
                .map(|k| Some(k.is_some_and(|k| self.range.contains(k))))
                .collect();
            keep = and(&keep, &inside)?;
        }
        // Memtable keys within this batch's keys (or before them).
        let mut placed: Option<Placement> = None;
        let mut patch_rows = cx.rows();
        let mut patch: Option<RecordBatch> = None;
        if let Some(ov) = self.overlay.as_mut() {
            // By position: no key is compared.
            let inserts = ov.place(n, &mut placed, &keep)?;
            if !inserts.is_empty() {
                placed.get_or_insert_with(|| Placement::new(&keep)).inserts = inserts;
            }
            patch = Some(ov.out.clone());
        } else {
            // Each key is found by binary search (rows are in key order; a
            // key's rank-0 row comes first), so sparse memtable keys cost
            // O(log n) each, and nothing is allocated until one falls into
            // this batch.
            let keys = match pk {
                Some(pk) => Some(RowKeys::Encoded(pk)),
                None if self.typed_keys => Some(RowKeys::typed(batch, &table.schema, &path)?),
                None => None,
            };
            if let Some(keys) = &keys
                && n > 0
            {
                self.place_mem(keys, n, &keep, &mut placed, &mut patch_rows, cx).await?;
            }
        }
        // The visible rows, column by column.
        let full = cx.output(batch, "segment", &path)?;
        let Some(mut placed) = placed else {
            if keep.true_count() == n && keep.null_count() == 0 {
                return Ok(full);
            }
            // Copying anyway: copy only the rows that can match.
            let keep = match &cx.row_filter {
                Some(f) => and(&keep, &BooleanArray::new(f.matches(&full)?, None))?,
                None => keep,
            };
            return Ok(filter_record_batch(&full, &keep)?);
        };
        if let Some(f) = &cx.row_filter {
            placed.and_mask(&f.matches(&full)?);
        }
        // One copy: runs of kept segment rows with the merged rows between
        // them, in key order.
        let patch = match patch {
            Some(p) => p,
            None => cx.finish(&mut patch_rows)?,
        };
        let runs = placed.runs();
        let total: usize = runs.iter().map(|r| r.2 - r.1).sum();
        let mut arrays = Vec::with_capacity(cols.len());
        for i in 0..cols.len() {
            let has = self.overlay.as_ref().and_then(|o| o.has[i].as_ref());
            let column_runs = match has {
                Some(has) if !placed.patches.is_empty() => std::borrow::Cow::Owned(placed.column_runs(&runs, has)),
                _ => std::borrow::Cow::Borrowed(runs.as_slice()),
            };
            let (a, b) = (full.column(i).to_data(), patch.column(i).to_data());
            let mut m = MutableArrayData::new(vec![&a, &b], false, total);
            for &(src, start, end) in column_runs.iter() {
                m.try_extend(src, start, end)?;
            }
            arrays.push(make_array(m.freeze()));
        }
        Ok(RecordBatch::try_new_with_options(
            schema.clone(),
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(total)),
        )?)
    }

    /// Places the memtable keys that sort at or before the batch's last
    /// row, comparing them with its key columns: clears the segment rows
    /// they replace and appends their merged rows to `patch`.
    pub(super) async fn place_mem(
        &mut self,
        keys: &RowKeys<'_>,
        n: usize,
        keep: &BooleanArray,
        placed: &mut Option<Placement>,
        patch: &mut RowsBuilder,
        cx: &ScanCtx,
    ) -> Result<()> {
        loop {
            self.mem.fill().await?;
            let Some((k, _)) = self.mem.buf.front() else { break };
            let dec = keys.decode(&cx.pk_types, k)?;
            if keys.row_vs(n - 1, k, &dec) == std::cmp::Ordering::Less {
                break;
            }
            let Some((k, st)) = self.mem.buf.pop_front() else { break };
            let p = placed.get_or_insert_with(|| Placement::new(keep));
            let (mut lo, mut hi) = (p.next, n);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if keys.row_vs(mid, &k, &dec) == std::cmp::Ordering::Less {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            p.next = lo;
            let merged = if lo < n && keys.row_vs(lo, &k, &dec) == std::cmp::Ordering::Equal {
                p.keep.set_bit(lo, false);
                if st.replace {
                    st
                } else {
                    match self.seg.get(&k, None).await? {
                        Some(older) => st.merge_over(older),
                        None => st,
                    }
                }
            } else {
                // Not in the segment (no older source has it).
                st
            };
            let row = patch.rows;
            if cx.push_visible(patch, &k, &merged, Some(&dec))? {
                p.inserts.push((lo, row));
            }
        }
        Ok(())
    }

    /// Rows holding a live value or row marker (after the TTL).
    pub(super) fn exists(&self, batch: &RecordBatch, cutoff: i64) -> Result<BooleanArray> {
        let live = |ts: &Int64Array| -> Result<BooleanArray> {
            let valid = is_not_null(ts)?;
            if cutoff == i64::MIN {
                return Ok(valid);
            }
            Ok(and(&valid, &cmp::gt_eq(ts, &Int64Array::new_scalar(cutoff))?)?)
        };
        if self.has_max_ts {
            let ts = batch
                .column_by_name(format::MAX_TS)
                .and_then(|a| a.as_primitive_opt::<Int64Type>())
                .ok_or_else(|| Error::corruption(format!("segment {}: no __max_ts", self.seg.meta.path)))?;
            return live(ts);
        }
        // Segments written before `__max_ts`: the row marker or any column.
        let mut any = match batch
            .column_by_name(format::ROW_TS)
            .and_then(|a| a.as_primitive_opt::<Int64Type>())
        {
            Some(ts) => live(ts)?,
            None => BooleanArray::from(vec![false; batch.num_rows()]),
        };
        for a in batch.columns() {
            if let Some(st) = a.as_struct_opt()
                && let Some(ts) = st
                    .column_by_name(format::TS)
                    .and_then(|t| t.as_primitive_opt::<Int64Type>())
            {
                let valid = BooleanArray::new(
                    format::cell_present(st)
                        .map_or_else(|| arrow::buffer::BooleanBuffer::new_set(st.len()), |p| p.into_inner()),
                    None,
                );
                any = arrow::compute::or(&any, &and(&valid, &live(ts)?)?)?;
            }
        }
        Ok(any)
    }
}
