//! The single-segment reader: one segment's rank-0 rows over a piece, read
//! column by column from Parquet, with the memtable keys of the piece
//! spliced in, from the memtable's overlay of the segment when there is
//! one, else by comparing keys batch by batch.
//!
//! Invariant: a row comes out once, in key order, as the newest visible
//! state of its key: a segment row a memtable write replaced is dropped,
//! one it updated is re-read whole and merged.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow::array::{
    Array, AsArray, BooleanArray, BooleanBufferBuilder, Int64Array, MutableArrayData, RecordBatch, RecordBatchOptions,
    make_array,
};
use arrow::compute::kernels::cmp;
use arrow::compute::{and, filter_record_batch, is_not_null};
use arrow::datatypes::{Int64Type, UInt8Type, UInt16Type};
use futures::StreamExt;

use super::arrow::{BATCH_ROWS, OutCol, RowKeys, true_bits};
use super::context::{RowsBuilder, ScanCtx};
use super::merge_scan::MergeScan;
use super::overlay::{Overlay, OverlaySlot, RowCursor};
use super::plan::{RowGroupFilter, SegmentStats};
use crate::error::{Error, Result};
use crate::memtable::Memtable;
use crate::model::key::KeyRange;
use crate::model::row::RowState;
use crate::segment::format::{self, ROW_DELETED};
use crate::segment::{RowSpan, Segment, SegmentBatchStream};
use crate::state::Snapshot;

/// Memtable keys placed into one batch so far: which segment rows stay,
/// where each merged row goes (before segment row `.0`; `.1` is its row
/// in the patch batch), the segment rows an update is laid over column by
/// column (segment row, patch row; ascending), and the first segment row
/// not yet placed.
pub(super) struct Placement {
    pub(super) keep: BooleanBufferBuilder,
    pub(super) inserts: Vec<(usize, usize)>,
    pub(super) patches: Vec<(usize, usize)>,
    pub(super) next: usize,
}

impl Placement {
    pub(super) fn new(keep: &BooleanArray) -> Self {
        let bits = true_bits(keep);
        let mut b = BooleanBufferBuilder::new(bits.len());
        b.append_buffer(&bits);
        Placement {
            keep: b,
            inserts: Vec::new(),
            patches: Vec::new(),
            next: 0,
        }
    }

    /// Also drops the segment rows `mask` rules out (evaluated on the
    /// segment's values, so not the rows an update is laid over).
    pub(super) fn and_mask(&mut self, mask: &arrow::buffer::BooleanBuffer) {
        let bits = &self.keep.finish() & mask;
        let mut b = BooleanBufferBuilder::new(bits.len());
        b.append_buffer(&bits);
        for &(at, _) in &self.patches {
            b.set_bit(at, true);
        }
        self.keep = b;
    }

    /// `runs` for one output column: where `has` says a patch row holds
    /// the column, the segment row it is laid over is taken from the patch
    /// batch instead.
    pub(super) fn column_runs(
        &self,
        runs: &[(usize, usize, usize)],
        has: &arrow::buffer::BooleanBuffer,
    ) -> Vec<(usize, usize, usize)> {
        let mut out = Vec::with_capacity(runs.len() + 2 * self.patches.len());
        let mut patches = self.patches.iter().filter(|(_, row)| has.value(*row)).peekable();
        for &(src, mut s, e) in runs {
            if src == 0 {
                while let Some(&&(at, row)) = patches.peek() {
                    if at >= e {
                        break;
                    }
                    patches.next();
                    if at < s {
                        continue;
                    }
                    if at > s {
                        out.push((0, s, at));
                    }
                    out.push((1, row, row + 1));
                    s = at + 1;
                }
                if s < e {
                    out.push((0, s, e));
                }
            } else {
                out.push((src, s, e));
            }
        }
        out
    }

    /// The output as `(source, start, end)` runs: source 0 is the segment
    /// batch, 1 the patch batch.
    pub(super) fn runs(&mut self) -> Vec<(usize, usize, usize)> {
        let keep = self.keep.finish();
        let mut out = Vec::with_capacity(2 * self.inserts.len() + 1);
        let mut ins = self.inserts.iter().peekable();
        for (mut s, e) in keep.set_slices() {
            while let Some(&&(pos, row)) = ins.peek() {
                if pos >= e {
                    break;
                }
                if pos > s {
                    out.push((0, s, pos));
                    s = pos;
                }
                out.push((1, row, row + 1));
                ins.next();
            }
            out.push((0, s, e));
        }
        out.extend(ins.map(|&(_, row)| (1, row, row + 1)));
        out
    }
}

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

/// A piece's memtable rows from an [`Overlay`].
pub(super) struct OverlayRows {
    pub(super) ov: Arc<Overlay>,
    /// The piece's keys (overlay indices).
    pub(super) span: std::ops::Range<usize>,
    /// The next key not yet placed.
    pub(super) next: usize,
    /// The piece's overlay rows as output columns (row `i` is key
    /// `span.start + i`), and which of them are visible and can match.
    pub(super) out: RecordBatch,
    /// Rows with a live cell (after the TTL).
    pub(super) live: arrow::buffer::BooleanBuffer,
    /// Live rows the scan's row filter lets through.
    pub(super) visible: arrow::buffer::BooleanBuffer,
    /// Per output column, the rows that hold a cell of it (for partial
    /// keys: which columns come from the patch); `None` for key columns.
    pub(super) has: Vec<Option<arrow::buffer::BooleanBuffer>>,
    /// Segment rows of the streamed batches.
    pub(super) cursor: RowCursor,
}

/// Segments at least this many times the rows a piece reads get no overlay
/// built for it (a small range scan would pay for placing every memtable
/// key of the segment); one already built is used by any piece.
pub(super) const OVERLAY_MIN_SHARE: u64 = 4;

/// The overlay of the one memtable with keys in a piece, when it is built
/// (or worth building) for the scan's snapshot.
pub(super) async fn overlay_for(
    cx: &ScanCtx,
    mem: &Arc<Memtable>,
    seg: &Arc<Segment>,
    piece_rows: u64,
) -> Result<Option<Arc<Overlay>>> {
    // The overlay of the memtable's writes this snapshot sees. Writes that
    // came after the snapshot (a writer running beside the scan) are left
    // out: the overlay is built or extended at the snapshot's sequence.
    let at = mem.max_seq().min(cx.snap.seq);
    if at == 0 {
        return Ok(None);
    }
    let slot = mem.attachment::<OverlaySlot>(&seg.meta.path);
    let worth_building = piece_rows.saturating_mul(OVERLAY_MIN_SHARE) >= seg.meta.num_rows;
    let held = match slot.clone().try_lock_owned() {
        Ok(held) => held,
        // Another partition is building it. A piece too small to build one
        // for does not wait (it merges the memtable keys itself): it would
        // serialise this partition's other segments behind that build.
        Err(_) if !worth_building => return Ok(None),
        Err(_) => slot.lock_owned().await,
    };
    match held.as_ref() {
        Some(ov) if ov.built_at == at => return Ok(Some(ov.clone())),
        // Built for a newer snapshot: it holds writes this one must not see,
        // and replacing it with an older one would cost the newer scans.
        Some(ov) if ov.built_at > at => return Ok(None),
        _ => {}
    }
    if !worth_building {
        return Ok(None);
    }
    super::overlay::build_in_slot(&cx.table, mem, seg, at, held).await
}

impl OverlayRows {
    pub(super) fn new(cx: &ScanCtx, ov: Arc<Overlay>, range: &KeyRange, cursor: RowCursor) -> Result<Self> {
        let span = ov.key_span(range);
        let rows = ov.rows.slice(span.start, span.len());
        let corrupt = |what: &str| Error::corruption(format!("memtable overlay: {what}"));
        let out = cx.output(&rows, "memtable", "overlay")?;
        let max_ts = rows
            .column_by_name(format::MAX_TS)
            .and_then(|a| a.as_primitive_opt::<Int64Type>())
            .ok_or_else(|| corrupt("no __max_ts"))?;
        let live = true_bits(&cmp::gt_eq(max_ts, &Int64Array::new_scalar(cx.cutoff))?);
        let mut visible = live.clone();
        if let Some(f) = &cx.row_filter {
            visible = &visible & &f.matches(&out)?;
        }
        let has = cx
            .cols
            .iter()
            .map(|c| match c {
                OutCol::Pk(_) => None,
                OutCol::Attr { name, .. } => Some(
                    rows.column_by_name(name)
                        .and_then(|a| a.as_struct_opt())
                        .and_then(|st| st.column_by_name(format::TS))
                        .and_then(|ts| ts.logical_nulls())
                        .map_or_else(
                            || {
                                let valid = rows.column_by_name(name).is_some();
                                arrow::buffer::BooleanBuffer::collect_bool(rows.num_rows(), |_| valid)
                            },
                            |nulls| nulls.into_inner(),
                        ),
                ),
            })
            .collect();
        Ok(OverlayRows {
            next: span.start,
            ov,
            span,
            out,
            live,
            visible,
            has,
            cursor,
        })
    }

    /// Places the keys that fall into a batch of `n` streamed rows: clears
    /// the rows they replace in `keep`, and returns (batch row, overlay
    /// row) for each visible one, in order. A partial key's row is laid
    /// over the segment row instead (recorded in the placement's patches),
    /// which stays when either has a live cell.
    pub(super) fn place(
        &mut self,
        n: usize,
        keep: &mut Option<Placement>,
        keep_src: &BooleanArray,
    ) -> Result<Vec<(usize, usize)>> {
        let mut inserts = Vec::new();
        for (b0, g0, len) in self.cursor.advance(n) {
            let end = g0 + len as u64;
            while self.next < self.span.end && self.ov.pos[self.next] < end {
                let j = self.next;
                let p = self.ov.pos[j];
                let at = b0 + p.saturating_sub(g0) as usize;
                let row = j - self.span.start;
                self.next += 1;
                if self.ov.partial[j] {
                    if !self.ov.found[j] || p < g0 {
                        return Err(Error::corruption(
                            "memtable overlay: an update's segment row was not read",
                        ));
                    }
                    let shown = (keep_src.is_valid(at) && keep_src.value(at)) || self.live.value(row);
                    let placed = keep.get_or_insert_with(|| Placement::new(keep_src));
                    placed.keep.set_bit(at, shown);
                    if shown {
                        placed.patches.push((at, row));
                    }
                    continue;
                }
                if self.ov.found[j] && p >= g0 {
                    keep.get_or_insert_with(|| Placement::new(keep_src))
                        .keep
                        .set_bit(at, false);
                }
                if self.visible.value(row) {
                    inserts.push((at, row));
                }
            }
        }
        Ok(inserts)
    }

    /// The visible rows of the keys not placed yet (they sort after every
    /// streamed row), and marks them placed.
    pub(super) fn rest(&mut self) -> Result<Option<RecordBatch>> {
        if self.next >= self.span.end {
            return Ok(None);
        }
        let from = self.next - self.span.start;
        let len = self.span.end - self.next;
        self.next = self.span.end;
        let mask = BooleanArray::new(self.visible.slice(from, len), None);
        Ok(Some(filter_record_batch(&self.out.slice(from, len), &mask)?))
    }
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
            memtables: snap.memtables.clone(),
            segments: Arc::new(Vec::new()),
            options: snap.options,
        };
        let with_keys: Vec<_> = snap.memtables.iter().filter(|m| m.has_key_in(&range)).collect();
        let mut spans: Vec<RowSpan> = seg.row_spans(&range).await?;
        let piece_rows: u64 = spans.iter().map(|s| s.rows.len() as u64).sum();
        if piece_rows.saturating_mul(OVERLAY_MIN_SHARE) >= seg.meta.num_rows {
            table
                .wide_scan_ms
                .store(crate::state::monotonic_ms(), Ordering::Relaxed);
        }
        let overlay = match with_keys.as_slice() {
            [one] => overlay_for(cx, one, &seg, piece_rows).await?,
            _ => None,
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
            let keep = f.keep(&SegmentStats::new(&seg, &md), &groups);
            let laid_over = overlay
                .as_ref()
                .map(|ov| ov.partial_groups(&md, &range))
                .unwrap_or_default();
            let mut i = 0;
            spans.retain(|s| {
                let k = keep.get(i).copied().unwrap_or(true);
                i += 1;
                k || laid_over.binary_search(&s.row_group).is_ok()
                    || (overlay.is_none()
                        && seg
                            .row_group_key_range(&md, s.row_group)
                            .is_none_or(|(lo, hi)| snap.memtables.iter().any(|m| m.has_key_between(lo, hi))))
            });
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
        let stream = if spans.is_empty() {
            None
        } else {
            Some(seg.stream_rows(&spans, leaves, BATCH_ROWS).await?)
        };
        let overlay = match overlay {
            Some(ov) => {
                let md = seg.reader_metadata().await?.metadata().clone();
                Some(OverlayRows::new(cx, ov, &range, RowCursor::new(&md, &spans))?)
            }
            None => None,
        };
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
                        return ov.rest();
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
