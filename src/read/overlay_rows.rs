//! A piece's memtable rows taken from the memtable's [`Overlay`] of its
//! segment: which overlay is valid for a scan's snapshot (built or
//! extended when worth it), the rows in output form with their
//! visibility, where each goes among the streamed segment rows, and which
//! row groups the query's predicates ruled out must still be read for an
//! update laid over a row in them.
//!
//! Invariant: a key's row goes in once, at its position; a whole row
//! replaces the segment row it was found at, a partial one (an UpdateRow
//! laid over column by column) keeps that row and overrides the columns
//! it wrote; a laid-over row whose segment row was not read cannot match
//! the query (`groups_to_read` decided so).

use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray, Int64Array, RecordBatch};
use arrow::buffer::BooleanBuffer;
use arrow::compute::filter_record_batch;
use arrow::compute::kernels::cmp;
use arrow::datatypes::Int64Type;

use super::arrow::{OutCol, true_bits};
use super::context::ScanCtx;
use super::overlay::{GAP_MIN_KEYS, Overlay, OverlaySlot, RowCursor, Under, gap_holding};
use super::placement::Placement;
use super::plan::RowGroupFilter;
use super::runs::OverlaySpan;
use crate::error::{Error, Result};
use crate::memtable::Memtable;
use crate::model::key::KeyRange;
use crate::segment::format;
use crate::state::Snapshot;
/// A piece's memtable rows from an [`Overlay`].
pub(super) struct OverlayRows {
    /// The piece's keys, every run of the overlay merged.
    pub(super) span: OverlaySpan,
    /// The next key not yet placed.
    pub(super) next: usize,
    /// The piece's overlay rows as output columns (row `i` is the span's
    /// key `i`), and which of them are visible and can match.
    pub(super) out: RecordBatch,
    /// Rows with a live cell (after the TTL).
    pub(super) live: BooleanBuffer,
    /// Rows the scan's row filter does not rule out (on their own values).
    pub(super) passes: Option<BooleanBuffer>,
    /// Live rows the scan's row filter lets through.
    pub(super) visible: BooleanBuffer,
    /// Per output column, the rows that hold a cell of it (for partial
    /// keys: which columns come from the patch); `None` for key columns.
    pub(super) has: Vec<Option<BooleanBuffer>>,
    /// Segment rows of the streamed batches.
    pub(super) cursor: RowCursor,
}

/// Segments at least this many times the rows a piece reads get no overlay
/// built for it (a small range scan would pay for placing every memtable
/// key of the segment); one already built is used by any piece.
pub(super) const OVERLAY_MIN_SHARE: u64 = 4;

/// The overlays of the memtables with keys in a piece (`mems`, oldest
/// first: a frozen one being flushed, then the active one), when each is
/// built (or worth building) for the scan's snapshot; `None` leaves the
/// piece to a key-by-key merge. Each memtable's overlay is built over the
/// older memtables with keys anywhere under it, as it holds all of its
/// keys there, not only the piece's (see [`Overlay::build`]).
pub(super) async fn overlays_for(
    cx: &ScanCtx,
    mems: &[&Arc<Memtable>],
    under: &Under,
    worth_building: bool,
) -> Result<Option<Vec<Arc<Overlay>>>> {
    let span = under.range();
    let mut out = Vec::with_capacity(mems.len());
    for mem in mems {
        let below: Vec<&Arc<Memtable>> = cx
            .snap
            .memtables
            .iter()
            .take_while(|m| !Arc::ptr_eq(m, mem))
            .filter(|m| m.has_key_in(&span))
            .collect();
        let Some(ov) = overlay_for(cx, mem, under, worth_building, &below).await? else {
            return Ok(None);
        };
        out.push(ov);
    }
    Ok((!out.is_empty()).then_some(out))
}

/// The overlay of one memtable with keys in a piece, over the older
/// memtables `below` with keys there, when it is built (or worth
/// building) for the scan's snapshot.
async fn overlay_for(
    cx: &ScanCtx,
    mem: &Arc<Memtable>,
    under: &Under,
    worth_building: bool,
    below: &[&Arc<Memtable>],
) -> Result<Option<Arc<Overlay>>> {
    // The overlay of the memtable's writes this snapshot sees. Writes that
    // came after the snapshot (a writer running beside the scan) are left
    // out: the overlay is built or extended at the snapshot's sequence.
    let at = mem.max_seq().min(cx.snap.seq);
    if at == 0 {
        return Ok(None);
    }
    let name = under.slot_name();
    if let Some(ov) = cx.shared.overlay(mem, &name) {
        return Ok(Some(ov));
    }
    let ov = slot_overlay(cx, mem, under, at, &name, worth_building, below).await?;
    if let Some(ov) = &ov {
        cx.shared.keep_overlay(mem, name, ov);
    }
    Ok(ov)
}

/// The overlay in the memtable's slot for `under`, when it was built at
/// `at` or can be (built or extended) now.
///
/// An overlay in a slot was built over the older memtables of its build's
/// snapshot, and those only leave (flushed) for a segment that overlaps
/// the keys they held there, which renames or retires the slot: so every
/// overlay a scan finds was built over the older memtables it sees.
async fn slot_overlay(
    cx: &ScanCtx,
    mem: &Arc<Memtable>,
    under: &Under,
    at: u64,
    name: &str,
    worth_building: bool,
    below: &[&Arc<Memtable>],
) -> Result<Option<Arc<Overlay>>> {
    let slot = mem.attachment::<OverlaySlot>(name);
    let held = match slot.clone().try_lock_owned() {
        Ok(held) => held,
        // Another partition is building it. A piece too small to build one
        // for does not wait (it merges the memtable keys itself): it would
        // serialise this partition's other segments behind that build.
        Err(_) if !worth_building => return Ok(None),
        Err(_) => slot.lock_owned().await,
    };
    match held.as_ref() {
        Some(ov) if ov.built_at == at && ov.covers(&cx.overlay_columns) => return Ok(Some(ov.clone())),
        // Built for a newer snapshot: it holds writes this one must not see,
        // and replacing it with an older one would cost the newer scans.
        Some(ov) if ov.built_at > at => return Ok(None),
        _ => {}
    }
    if !worth_building {
        return Ok(None);
    }
    let older = (!below.is_empty()).then(|| Snapshot {
        seq: at,
        part: cx.snap.part,
        range: cx.snap.range.clone(),
        memtables: below.iter().map(|m| (*m).clone()).collect(),
        segments: Arc::new(match under {
            Under::Segment(seg) => vec![seg.clone()],
            Under::Gap(_) => Vec::new(),
        }),
        options: cx.snap.options,
    });
    super::overlay::build_in_slot(&cx.table, mem, under, at, held, &cx.overlay_columns, older).await
}

/// Records that a scan read a large share of a segment or gap: the
/// background keeps the table's overlays built from then on, with the
/// columns this scan reads among theirs.
pub(super) fn note_wide_scan(cx: &ScanCtx) {
    let table = &cx.table;
    table
        .wide_scan_ms
        .store(crate::state::monotonic_ms(), std::sync::atomic::Ordering::Relaxed);
    let mut asked = table.overlay_columns.lock();
    *asked = super::overlay::with_columns(&asked, &cx.overlay_columns);
}

/// The rows of a piece no segment overlaps, from the overlay of its gap
/// over the one memtable with keys in it, when there is one for the
/// scan's snapshot or the piece is worth building it for; `None` leaves
/// the piece to a row-by-row merge.
pub(super) async fn gap_rows(cx: &ScanCtx, range: &KeyRange) -> Result<Option<OverlayRows>> {
    let Some(gap) = gap_holding(&cx.snap.segments, range) else {
        return Ok(None);
    };
    let with_keys: Vec<_> = cx.snap.memtables.iter().filter(|m| m.has_key_in(range)).collect();
    let keys: usize = with_keys.iter().map(|m| m.key_count_in(range, GAP_MIN_KEYS)).sum();
    let worth_building = keys >= GAP_MIN_KEYS;
    if worth_building {
        note_wide_scan(cx);
    }
    let Some(ovs) = overlays_for(cx, &with_keys, &Under::Gap(gap), worth_building).await? else {
        return Ok(None);
    };
    Ok(Some(OverlayRows::new(cx, &ovs, range)?))
}

impl OverlayRows {
    /// The overlay's rows of `range`; the cursor over the streamed rows is
    /// set once the rows to stream are known.
    pub(super) fn new(cx: &ScanCtx, overlays: &[Arc<Overlay>], range: &KeyRange) -> Result<Self> {
        let span = Overlay::span(overlays, range);
        let out = span.gather(|rows| cx.output(rows, "memtable", "overlay"))?;
        let corrupt = |what: &str| Error::corruption(format!("memtable overlay: {what}"));
        let max_ts = span.gather_array(|rows| {
            rows.column_by_name(format::MAX_TS)
                .cloned()
                .ok_or_else(|| corrupt("no __max_ts"))
        })?;
        let max_ts = max_ts
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| corrupt("__max_ts is not a timestamp"))?;
        let live = true_bits(&cmp::gt_eq(max_ts, &Int64Array::new_scalar(cx.cutoff))?);
        let passes = match &cx.row_filter {
            Some(f) => Some(f.matches(&out)?),
            None => None,
        };
        let visible = match &passes {
            Some(p) => &live & p,
            None => live.clone(),
        };
        let has = cx
            .cols
            .iter()
            .map(|c| match c {
                OutCol::Pk(_) => None,
                OutCol::Attr { name, .. } => Some(span.gather_bits(|rows| cells_of(rows, name))),
            })
            .collect();
        Ok(OverlayRows {
            next: 0,
            span,
            out,
            live,
            passes,
            visible,
            has,
            cursor: RowCursor::default(),
        })
    }

    /// The row groups (ascending) a scan whose predicates ruled some out
    /// must still read for the partial keys in them: a partial key's row
    /// is its segment row with the key's columns laid over, so it can
    /// match where the segment row could not only when the key wrote a
    /// column the predicates read; and not then either when it wrote every
    /// column they read and the row filter rules its own row out.
    pub(super) fn groups_to_read(
        &self,
        cx: &ScanCtx,
        md: &parquet::file::metadata::ParquetMetaData,
        filter: &dyn RowGroupFilter,
    ) -> Vec<usize> {
        let group_cols = filter.columns();
        let row_cols = cx.row_filter.as_ref().and_then(|f| f.columns());
        let cells: std::collections::HashMap<&str, BooleanBuffer> = group_cols
            .iter()
            .chain(row_cols.iter())
            .flatten()
            .map(|c| (c.as_str(), self.span.gather_bits(|rows| cells_of(rows, c))))
            .collect();
        // Whether row `r` holds a cell of column `name`.
        let cell = |name: &str, r: usize| cells.get(name).is_some_and(|b| b.value(r));
        let starts = super::overlay::group_starts(md);
        let mut out: Vec<usize> = Vec::new();
        for r in 0..self.span.len() {
            if !self.span.partial[r] {
                continue;
            }
            let touches = match &group_cols {
                Some(cols) => cols.iter().any(|c| cell(c, r)),
                None => true,
            };
            let ruled_out = || {
                let (Some(passes), Some(row_cols), Some(group_cols)) = (&self.passes, &row_cols, &group_cols) else {
                    return false;
                };
                let covered = |c: &String| cx.table.schema.is_pk_column(c) || cell(c, r);
                !passes.value(r) && row_cols.iter().all(covered) && group_cols.iter().all(covered)
            };
            if touches && !ruled_out() {
                let g = starts.partition_point(|s| *s <= self.span.pos[r]).saturating_sub(1);
                if out.last() != Some(&g) {
                    out.push(g);
                }
            }
        }
        out
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
            while self.next < self.span.len() && self.span.pos[self.next] < end {
                let row = self.next;
                let p = self.span.pos[row];
                let at = b0 + p.saturating_sub(g0) as usize;
                self.next += 1;
                if self.span.partial[row] {
                    if !self.span.found[row] {
                        return Err(Error::corruption(
                            "memtable overlay: an update laid over no segment row",
                        ));
                    }
                    if p < g0 {
                        // Its row group was ruled out and not read: the
                        // row cannot match either (`groups_to_read`).
                        continue;
                    }
                    let shown = (keep_src.is_valid(at) && keep_src.value(at)) || self.live.value(row);
                    let placed = keep.get_or_insert_with(|| Placement::new(keep_src));
                    placed.keep.set_bit(at, shown);
                    if shown {
                        placed.patches.push((at, row));
                    }
                    continue;
                }
                if self.span.found[row] && p >= g0 {
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

    /// The visible rows of up to `max` keys not placed yet (they sort
    /// after every streamed row), and marks them placed.
    pub(super) fn rest(&mut self, max: usize) -> Result<Option<RecordBatch>> {
        if self.next >= self.span.len() {
            return Ok(None);
        }
        let from = self.next;
        let len = (self.span.len() - self.next).min(max);
        self.next += len;
        let mask = BooleanArray::new(self.visible.slice(from, len), None);
        Ok(Some(filter_record_batch(&self.out.slice(from, len), &mask)?))
    }
}

/// The overlay rows (segment layout) that hold a cell of column `name`:
/// none when they lack the column (a key column, or one no key wrote).
fn cells_of(rows: &RecordBatch, name: &str) -> BooleanBuffer {
    let ts = rows
        .column_by_name(name)
        .and_then(|a| a.as_struct_opt())
        .and_then(|st| st.column_by_name(format::TS));
    match ts {
        Some(ts) => ts
            .logical_nulls()
            .map_or_else(|| BooleanBuffer::new_set(ts.len()), |n| n.into_inner()),
        None => BooleanBuffer::new_unset(rows.num_rows()),
    }
}
