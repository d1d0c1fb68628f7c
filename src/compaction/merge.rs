//! The columnar merge behind compaction.
//!
//! Inputs are read as Arrow batches of whole keys (every rank of a key in
//! one batch) and merged by `__pk` with a binary heap. A key that one input
//! alone holds and that has nothing to drop is **copied**: its rows go to
//! the output as they are, through `MutableArrayData`, never decoded. That
//! is nearly every key when runs hold different keys (unique or
//! time-ordered keys). A key that several inputs hold, or one with
//! something to drop (expired or surplus versions, tombstones no older
//! source needs), is **folded**: decoded to a `RowState` per input,
//! layered newest over oldest with the rules reads use, cleaned by
//! [`collect_garbage`], and re-encoded. Both kinds land in one output batch
//! in key order.
//!
//! Invariant: output keys ascend and each appears once, with exactly the
//! state folding every input's writes for it would give, minus garbage.
//! Why copying beats folding, with figures: `docs/decisions.md`,
//! "Compaction".

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, Int64Array, MutableArrayData, RecordBatch, UInt8Array, UInt16Array,
    make_array,
};
use arrow::compute::concat_batches;
use arrow::datatypes::{Int64Type, SchemaRef, UInt8Type, UInt16Type};
use futures::StreamExt;
use tokio::runtime::Handle;

use super::align::align;
use super::garbage::{GcRules, collect_garbage, is_covered};
use crate::error::{Error, Result};
use crate::model::key::KeyRange;
use crate::model::row::RowState;
use crate::model::schema::TableSchema;
use crate::model::types::TypeSet;
use crate::segment::format::{self, ROW_MERGE, ROW_REPLACE};
use crate::segment::{Segment, SegmentBatchStream, decode_batch, encode_states, newest};

/// Rows read from an input at a time, at most: with many inputs, fewer
/// (see [`read_rows`]).
const READ_ROWS: usize = 8192;
/// Rows of input batches a merge keeps decoded across all its inputs, as
/// far as [`MIN_READ_ROWS`] allows. Each input holds a batch as read and
/// one aligned to the output schema, and a sparse table's batch keeps
/// full-width buffers for every attribute it has: at 8192 rows an input,
/// the wide merges (up to ~15 inputs) of a 10M-row load of the compare
/// table held ~120 MB.
const INPUT_ROWS_BUDGET: usize = 32 * 1024;
/// The fewest rows read from an input at a time.
const MIN_READ_ROWS: usize = 1024;

/// Rows read from each of `inputs` inputs at a time.
fn read_rows(inputs: usize) -> usize {
    (INPUT_ROWS_BUDGET / inputs.max(1)).clamp(MIN_READ_ROWS, READ_ROWS)
}

/// Output rows gathered before a batch is built: also how finely output
/// segments are cut at their target size.
const OUTPUT_ROWS: usize = 2048;

/// Output batches whose pieces (runs of rows from one source) average
/// fewer rows than this are assembled by gathering row by row (Arrow's
/// `interleave`), others by copying ranges (`MutableArrayData`, whose
/// per-range set-up costs more than a gather of a few rows).
const GATHER_MIN_PIECE: usize = 8;

/// One input segment with keys left: where it is, and what comes next.
struct Input {
    reader: InputReader,
    cur: Cursor,
}

/// Whole-key batches of one segment, as stored.
struct InputReader {
    seg: Arc<Segment>,
    stream: SegmentBatchStream,
    /// A batch read ahead (to see whether the current one's last key goes
    /// on).
    ahead: Option<RecordBatch>,
    /// For a segment of newest rows (`segment::newest`): the table and the
    /// segment's columns, to bring its keys' older versions back from
    /// `__cells` into rows.
    expand: Option<(TableSchema, Vec<(String, TypeSet)>)>,
    /// The keys the merge takes (a partition's, of a segment a split left
    /// shared): rows outside are skipped.
    clip: Option<KeyRange>,
    /// The segment has no more rows inside `clip`.
    done: bool,
}

/// What happens to a key one input alone holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Handling {
    /// Its rows are copied as they are.
    Copy,
    /// Copied, with `__row` set to plain: a PutRow's "replaces older
    /// sources" mark with nothing older left to replace.
    CopyUnmarked,
    /// Decoded, cleaned and re-encoded.
    Fold,
}

/// The current batch of an input and the position of its next key.
struct Cursor {
    batch: RecordBatch,
    pk: BinaryArray,
    rank: UInt16Array,
    row: UInt8Array,
    tomb: BinaryArray,
    max_ts: Int64Array,
    /// Rows holding a version or row marker past the TTL (TTL tables only).
    expired: Option<Vec<bool>>,
    pos: usize,
    /// Where this batch sits in the output's source list, once referenced.
    slot: Option<usize>,
}

impl Cursor {
    fn new(batch: RecordBatch, npk: usize, cutoff: i64) -> Result<Self> {
        let rank = batch.column(npk + 2).as_primitive::<UInt16Type>().clone();
        let row = batch.column(npk + 3).as_primitive::<UInt8Type>().clone();
        let row_ts = batch.column(npk + 4).as_primitive::<Int64Type>();
        let expired = (cutoff > i64::MIN).then(|| {
            let mut e: Vec<bool> = (0..batch.num_rows())
                .map(|r| row_ts.is_valid(r) && row_ts.value(r) < cutoff)
                .collect();
            for col in &batch.columns()[npk + 7..] {
                let st = col.as_struct();
                let ts = st.column(0).as_primitive::<Int64Type>();
                let present = format::cell_present(st);
                for (r, flag) in e.iter_mut().enumerate() {
                    *flag |= present.as_ref().is_none_or(|p| p.is_valid(r)) && ts.value(r) < cutoff;
                }
            }
            e
        });
        if !rank.is_empty() && rank.value(0) != 0 {
            return Err(Error::corruption("segment rows start inside a key"));
        }
        Ok(Cursor {
            pk: batch.column(0).as_binary::<i32>().clone(),
            tomb: batch.column(npk + 5).as_binary::<i32>().clone(),
            max_ts: batch.column(npk + 6).as_primitive::<Int64Type>().clone(),
            rank,
            row,
            expired,
            batch,
            pos: 0,
            slot: None,
        })
    }

    fn key(&self) -> &[u8] {
        self.pk.value(self.pos)
    }

    /// The row after the current key's last rank.
    fn key_end(&self) -> usize {
        let mut end = self.pos + 1;
        while end < self.rank.len() && self.rank.value(end) != 0 {
            end += 1;
        }
        end
    }

    /// How the key in `rows`, held by this input alone, goes to the output.
    fn handling(&self, rows: std::ops::Range<usize>, gc: &GcRules) -> Handling {
        if rows.len() > gc.max_versions as usize {
            return Handling::Fold;
        }
        if let Some(e) = &self.expired
            && e[rows.clone()].iter().any(|x| *x)
        {
            return Handling::Fold;
        }
        let r = rows.start;
        // A key with no value and no marker left is dropped.
        let live = self.max_ts.is_valid(r);
        let kind = self.row.value(r);
        if kind == ROW_MERGE && self.tomb.is_null(r) {
            return if live { Handling::Copy } else { Handling::Fold };
        }
        // Deletions and the "replaces older sources" mark stay while an
        // older segment may hold the key.
        if is_covered(&gc.older, self.pk.value(r)) {
            Handling::Copy
        } else if kind == ROW_REPLACE && self.tomb.is_null(r) && live {
            // Nothing older to replace: a plain row (what folding gives).
            Handling::CopyUnmarked
        } else {
            Handling::Fold
        }
    }

    /// The key state held in `rows`.
    fn decode(&self, rows: std::ops::Range<usize>) -> Result<RowState> {
        let mut out = Vec::with_capacity(1);
        decode_batch(&self.batch.slice(rows.start, rows.len()), &KeyRange::all(), &mut out)?;
        out.pop()
            .map(|(_, st)| st)
            .ok_or_else(|| Error::corruption("segment key without rows"))
    }

    /// This batch's index in `slots`, added on first use.
    fn slot(&mut self, slots: &mut Vec<RecordBatch>) -> usize {
        *self.slot.get_or_insert_with(|| {
            slots.push(self.batch.clone());
            slots.len() - 1
        })
    }
}

impl InputReader {
    async fn read(&mut self) -> Result<Option<RecordBatch>> {
        while !self.done
            && let Some(b) = self.stream.next().await
        {
            let mut b = b.map_err(|e| crate::segment::read_error(&self.seg.meta.path, e))?;
            if let Some(r) = &self.clip {
                // Keys ascend, and a bound never falls inside a key.
                let pk = b.column(0).as_binary::<i32>();
                let n = pk.len();
                let below = |bound: &[u8]| {
                    let (mut lo, mut hi) = (0, n);
                    while lo < hi {
                        let mid = (lo + hi) / 2;
                        if pk.value(mid) < bound { lo = mid + 1 } else { hi = mid }
                    }
                    lo
                };
                let start = below(&r.lo);
                let end = r.hi.as_deref().map_or(n, below);
                self.done = end < n;
                b = b.slice(start, end.max(start) - start);
            }
            if let Some((table, columns)) = &self.expand {
                b = newest::with_older_versions(&b, table, columns)
                    .map_err(|e| Error::corruption(format!("segment {}: {}", self.seg.meta.path, e.message())))?;
            }
            if b.num_rows() > 0 {
                return Ok(Some(b));
            }
        }
        Ok(None)
    }

    /// The next batch of whole keys, as stored.
    async fn next_whole(&mut self) -> Result<Option<RecordBatch>> {
        let mut cur = match self.ahead.take() {
            Some(b) => b,
            None => match self.read().await? {
                Some(b) => b,
                None => return Ok(None),
            },
        };
        loop {
            let Some(next) = self.read().await? else {
                return Ok(Some(cur));
            };
            let rank = next
                .column_by_name(format::RANK)
                .and_then(|a| a.as_primitive_opt::<UInt16Type>())
                .ok_or_else(|| {
                    Error::corruption(format!("segment {}: no {} column", self.seg.meta.path, format::RANK))
                })?;
            // Rows of the last key that went on into the next batch.
            let more = rank.values().iter().take_while(|r| **r != 0).count();
            if more == 0 {
                self.ahead = Some(next);
                return Ok(Some(cur));
            }
            cur = concat_batches(&cur.schema(), [&cur, &next.slice(0, more)])?;
            if more < next.num_rows() {
                self.ahead = Some(next.slice(more, next.num_rows() - more));
                return Ok(Some(cur));
            }
        }
    }
}

/// The merge of a list of input segments (oldest first) into output rows.
pub(crate) struct ColumnarMerge {
    table: TableSchema,
    columns: Vec<(String, TypeSet)>,
    schema: SchemaRef,
    gc: GcRules,
    inputs: Vec<Input>,
    /// Inputs with keys left, as a min-heap on (key, input index).
    heap: Vec<usize>,
    /// The output being gathered: source batches, pieces, folded keys.
    slots: Vec<RecordBatch>,
    pieces: Vec<OutputPiece>,
    folded: Vec<(Vec<u8>, RowState)>,
    rows: usize,
    /// Keys copied and folded so far.
    pub copied_keys: u64,
    pub folded_keys: u64,
}

enum OutputPiece {
    /// Rows `start..end` of `slots[slot]`; `unmark`: written as plain rows.
    Rows {
        slot: usize,
        start: usize,
        end: usize,
        unmark: bool,
    },
    /// `folded[i]`, once encoded.
    Folded(usize),
}

impl ColumnarMerge {
    /// Opens every input. `columns` is the union of the inputs' attribute
    /// columns (the output layout).
    pub async fn open(
        table: &TableSchema,
        segs: &[Arc<Segment>],
        columns: Vec<(String, TypeSet)>,
        gc: GcRules,
        clip: &KeyRange,
    ) -> Result<Self> {
        let schema = format::arrow_schema(table, &columns);
        let mut m = ColumnarMerge {
            table: table.clone(),
            columns,
            schema,
            gc,
            inputs: Vec::with_capacity(segs.len()),
            heap: Vec::with_capacity(segs.len()),
            slots: Vec::new(),
            pieces: Vec::new(),
            folded: Vec::new(),
            rows: 0,
            copied_keys: 0,
            folded_keys: 0,
        };
        // Inputs stay oldest first (an empty one is left out).
        let read_rows = read_rows(segs.len());
        for seg in segs {
            let newest_rows = format::newest_rows(seg.reader_metadata().await?.metadata());
            let mut reader = InputReader {
                seg: seg.clone(),
                stream: seg.stream_all(read_rows).await?,
                ahead: None,
                expand: newest_rows.then(|| (table.clone(), seg.meta.columns.clone())),
                // Only a segment holding keys outside the range is clipped.
                clip: (!(clip.lo.as_slice() <= seg.min_key.as_slice()
                    && clip.hi.as_ref().is_none_or(|h| seg.max_key.as_slice() < h.as_slice())))
                .then(|| clip.clone()),
                done: false,
            };
            if let Some(b) = reader.next_whole().await? {
                let cur = m.cursor(&reader.seg, b)?;
                m.inputs.push(Input { reader, cur });
                m.heap_push(m.inputs.len() - 1);
            }
        }
        Ok(m)
    }

    fn cursor(&self, seg: &Segment, batch: RecordBatch) -> Result<Cursor> {
        let npk = self.table.primary_key.len();
        let aligned = align(&batch, &self.schema, npk)
            .map_err(|e| Error::corruption(format!("segment {}: {}", seg.meta.path, e.message())))?;
        Cursor::new(aligned, npk, self.gc.cutoff)
    }

    /// The next output batch (whole keys, ascending), `None` at the end.
    /// Blocking: reads go through `rt`.
    pub fn next_batch(&mut self, rt: &Handle) -> Result<Option<RecordBatch>> {
        while self.rows < OUTPUT_ROWS {
            let Some(first) = self.heap_pop() else {
                break;
            };
            let shared = self
                .heap
                .first()
                .is_some_and(|&t| self.inputs[t].cur.key() == self.inputs[first].cur.key());
            if shared {
                self.fold_shared(first, rt)?;
            } else {
                self.copy_run(first, rt)?;
            }
        }
        if self.rows == 0 {
            return Ok(None);
        }
        self.build().map(Some)
    }

    /// Takes keys of input `i` while they sort before every other input's
    /// next key; then puts `i` back on the heap.
    fn copy_run(&mut self, i: usize, rt: &Handle) -> Result<()> {
        loop {
            let input = &mut self.inputs[i];
            let start = input.cur.pos;
            let end = input.cur.key_end();
            let handling = input.cur.handling(start..end, &self.gc);
            if handling != Handling::Fold {
                let slot = input.cur.slot(&mut self.slots);
                let unmark = handling == Handling::CopyUnmarked;
                match self.pieces.last_mut() {
                    Some(OutputPiece::Rows {
                        slot: s,
                        end: e,
                        unmark: u,
                        ..
                    }) if *s == slot && *e == start && *u == unmark => *e = end,
                    _ => self.pieces.push(OutputPiece::Rows {
                        slot,
                        start,
                        end,
                        unmark,
                    }),
                }
                self.rows += end - start;
                self.copied_keys += 1;
            } else {
                let key = input.cur.pk.value(start).to_vec();
                let st = input.cur.decode(start..end)?;
                self.add_folded(key, st);
            }
            if !self.advance(i, end, rt)? {
                return Ok(());
            }
            let next = &self.inputs[i].cur;
            let before_others = self.heap.first().is_none_or(|&t| next.key() < self.inputs[t].cur.key());
            if !before_others || self.rows >= OUTPUT_ROWS {
                self.heap_push(i);
                return Ok(());
            }
        }
    }

    /// Folds the key `first` shares with the inputs at the top of the heap.
    fn fold_shared(&mut self, first: usize, rt: &Handle) -> Result<()> {
        let key = self.inputs[first].cur.key().to_vec();
        let mut group = vec![first];
        while let Some(&t) = self.heap.first() {
            if self.inputs[t].cur.key() != key.as_slice() {
                break;
            }
            group.push(self.heap_pop().expect("peeked"));
        }
        // Inputs are ordered oldest first: layer newer states over older.
        group.sort_unstable();
        let mut state: Option<RowState> = None;
        for &g in &group {
            let cur = &self.inputs[g].cur;
            let end = cur.key_end();
            let st = cur.decode(cur.pos..end)?;
            state = Some(match state {
                Some(older) => st.merge_over(older),
                None => st,
            });
            if self.advance(g, end, rt)? {
                self.heap_push(g);
            }
        }
        if let Some(st) = state {
            self.add_folded(key, st);
        }
        Ok(())
    }

    fn add_folded(&mut self, key: Vec<u8>, st: RowState) {
        self.folded_keys += 1;
        let keep_tombstones = is_covered(&self.gc.older, &key);
        if let Some(st) = collect_garbage(st, self.gc.cutoff, self.gc.max_versions, keep_tombstones) {
            self.rows += st.columns.values().map(|c| c.versions.len()).max().unwrap_or(0).max(1);
            self.pieces.push(OutputPiece::Folded(self.folded.len()));
            self.folded.push((key, st));
        }
    }

    /// Moves input `i` to row `pos`, reading its next batch when this one
    /// is used up. False: the input has no keys left.
    fn advance(&mut self, i: usize, pos: usize, rt: &Handle) -> Result<bool> {
        if pos < self.inputs[i].cur.rank.len() {
            self.inputs[i].cur.pos = pos;
            return Ok(true);
        }
        let next = rt.block_on(self.inputs[i].reader.next_whole())?;
        let Some(batch) = next else {
            return Ok(false);
        };
        let cur = self.cursor(&self.inputs[i].reader.seg, batch)?;
        self.inputs[i].cur = cur;
        Ok(true)
    }

    /// Builds the gathered output batch and starts a new one.
    fn build(&mut self) -> Result<RecordBatch> {
        let folded = encode_states(&self.table, &self.columns, &self.schema, &self.folded)?;
        let folded_slot = self.slots.len();
        let mut starts: Vec<usize> = (0..folded.num_rows())
            .filter(|&r| self.folded_rank(&folded, r) == 0)
            .collect();
        starts.push(folded.num_rows());
        let mut sources = std::mem::take(&mut self.slots);
        sources.push(folded);
        let rows = self
            .pieces
            .iter()
            .map(|p| match p {
                OutputPiece::Rows { start, end, .. } => end - start,
                OutputPiece::Folded(k) => starts[k + 1] - starts[*k],
            })
            .sum();
        let span = |p: &OutputPiece| match p {
            OutputPiece::Rows { slot, start, end, .. } => (*slot, *start, *end),
            OutputPiece::Folded(k) => (folded_slot, starts[*k], starts[k + 1]),
        };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        if rows >= GATHER_MIN_PIECE * self.pieces.len() {
            // Long runs (inputs that interleave little): copied a range at
            // a time.
            for c in 0..self.schema.fields().len() {
                let data: Vec<_> = sources.iter().map(|b| b.column(c).to_data()).collect();
                let mut out = MutableArrayData::new(data.iter().collect(), false, rows);
                for p in &self.pieces {
                    let (slot, start, end) = span(p);
                    out.try_extend(slot, start, end)?;
                }
                columns.push(make_array(out.freeze()));
            }
        } else {
            // Inputs interleaved key by key: one gather per column.
            let mut take = Vec::with_capacity(rows);
            for p in &self.pieces {
                let (slot, start, end) = span(p);
                take.extend((start..end).map(|r| (slot, r)));
            }
            for c in 0..self.schema.fields().len() {
                let arrays: Vec<&dyn Array> = sources.iter().map(|b| b.column(c).as_ref()).collect();
                columns.push(arrow::compute::interleave(&arrays, &take)?);
            }
        }
        self.unmark(&mut columns[self.table.primary_key.len() + 3], &starts);
        self.pieces.clear();
        self.folded.clear();
        self.rows = 0;
        for input in &mut self.inputs {
            input.cur.slot = None;
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// Sets `__row` to plain on the output rows of unmarked pieces.
    fn unmark(&self, row: &mut ArrayRef, folded_starts: &[usize]) {
        if !self
            .pieces
            .iter()
            .any(|p| matches!(p, OutputPiece::Rows { unmark: true, .. }))
        {
            return;
        }
        let mut kinds = row.as_primitive::<UInt8Type>().values().to_vec();
        let mut at = 0;
        for p in &self.pieces {
            let len = match p {
                OutputPiece::Rows { start, end, unmark, .. } => {
                    if *unmark {
                        kinds[at..at + end - start].fill(ROW_MERGE);
                    }
                    end - start
                }
                OutputPiece::Folded(k) => folded_starts[k + 1] - folded_starts[*k],
            };
            at += len;
        }
        *row = Arc::new(UInt8Array::from(kinds));
    }

    fn folded_rank(&self, batch: &RecordBatch, row: usize) -> u16 {
        batch
            .column(self.table.primary_key.len() + 2)
            .as_primitive::<UInt16Type>()
            .value(row)
    }

    fn less(&self, a: usize, b: usize) -> bool {
        (self.inputs[a].cur.key(), a) < (self.inputs[b].cur.key(), b)
    }

    fn heap_push(&mut self, i: usize) {
        self.heap.push(i);
        let mut c = self.heap.len() - 1;
        while c > 0 {
            let p = (c - 1) / 2;
            if !self.less(self.heap[c], self.heap[p]) {
                break;
            }
            self.heap.swap(c, p);
            c = p;
        }
    }

    fn heap_pop(&mut self) -> Option<usize> {
        if self.heap.is_empty() {
            return None;
        }
        let top = self.heap.swap_remove(0);
        let n = self.heap.len();
        let mut p = 0;
        loop {
            let (l, r) = (2 * p + 1, 2 * p + 2);
            let mut m = p;
            if l < n && self.less(self.heap[l], self.heap[m]) {
                m = l;
            }
            if r < n && self.less(self.heap[r], self.heap[m]) {
                m = r;
            }
            if m == p {
                break;
            }
            self.heap.swap(p, m);
            p = m;
        }
        Some(top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::row::ColumnState;
    use crate::model::types::{PkType, Value};
    use arrow::array::StructArray;
    use arrow::datatypes::{DataType, Fields};

    #[test]
    fn inputs_share_a_row_budget_within_bounds() {
        assert_eq!(read_rows(0), READ_ROWS);
        assert_eq!(read_rows(2), READ_ROWS);
        assert_eq!(read_rows(8), 4096);
        assert_eq!(read_rows(16), 2048);
        assert_eq!(read_rows(1000), MIN_READ_ROWS);
    }

    #[test]
    fn align_fills_missing_columns_and_derives_max_ts() {
        let table = TableSchema::new("t").pk("k", PkType::Integer);
        let key = |i: i64| {
            table
                .encode_pk(&crate::model::types::PrimaryKey::new().with("k", i))
                .unwrap()
        };
        let state = |versions: &[i64], row_ts: Option<i64>| {
            let mut st = RowState {
                seq: 1,
                replace: false,
                row_ts,
                columns: Default::default(),
            };
            if !versions.is_empty() {
                st.columns.insert(
                    "a".into(),
                    ColumnState {
                        versions: versions.iter().map(|v| (*v, Value::Integer(*v))).collect(),
                        delete_all: false,
                        deleted: Vec::new(),
                    },
                );
            }
            st
        };
        let cols = vec![("a".to_string(), TypeSet(1))];
        let schema = format::arrow_schema(&table, &cols);
        let states = vec![
            (key(1), state(&[30, 20], None)),
            (key(2), state(&[], Some(7))),
            (key(3), state(&[5], Some(9))),
        ];
        let written = encode_states(&table, &cols, &schema, &states).unwrap();
        // As an older segment stored it: no `__max_ts`.
        let old = written.project(&[0, 1, 2, 3, 4, 5, 6, 8]).unwrap();
        let wide = vec![("a".to_string(), TypeSet(1 | 4)), ("b".to_string(), TypeSet(2))];
        let out_schema = format::arrow_schema(&table, &wide);
        let aligned = align(&old, &out_schema, 1).unwrap();
        let max_ts = aligned.column(7).as_primitive::<Int64Type>();
        let got: Vec<Option<i64>> = (0..max_ts.len())
            .map(|r| max_ts.is_valid(r).then(|| max_ts.value(r)))
            .collect();
        assert_eq!(
            got,
            written.column(7).as_primitive::<Int64Type>().iter().collect::<Vec<_>>()
        );
        assert_eq!(got, vec![Some(30), None, Some(7), Some(9)]);
        // The new string child and the absent column read as no value.
        let a = aligned.column(8).as_struct();
        assert_eq!(a.column(2).null_count(), 4);
        let absent = aligned.column(9).as_struct();
        assert_eq!(format::cell_present(absent).map(|p| p.null_count()), Some(4));
        assert!(absent.columns().iter().all(|c| c.null_count() == 4));
        let mut decoded = Vec::new();
        decode_batch(&aligned, &KeyRange::all(), &mut decoded).unwrap();
        assert_eq!(decoded, states);
    }

    /// Segments written before the struct became required mark an absent
    /// cell on the struct, with a required `ts` (0 there). Reading and
    /// compacting them must see the same cells as the current layout.
    #[test]
    fn older_nullable_struct_layout_reads_and_aligns_the_same() {
        let table = TableSchema::new("t").pk("k", PkType::Integer);
        let key = |i: i64| {
            table
                .encode_pk(&crate::model::types::PrimaryKey::new().with("k", i))
                .unwrap()
        };
        let cell = |ts: i64, v: Value| ColumnState {
            versions: vec![(ts, v)],
            delete_all: false,
            deleted: Vec::new(),
        };
        let state = |cols: Vec<(&str, ColumnState)>| RowState {
            seq: 1,
            replace: false,
            row_ts: None,
            columns: cols.into_iter().map(|(n, c)| (n.to_string(), c)).collect(),
        };
        let cols = vec![("a".to_string(), TypeSet(1)), ("b".to_string(), TypeSet(2 | 4))];
        let schema = format::arrow_schema(&table, &cols);
        let states = vec![
            (key(1), state(vec![("a", cell(30, Value::Integer(3)))])),
            (key(2), state(vec![("b", cell(7, Value::String("x".into())))])),
            (
                key(3),
                state(vec![
                    ("a", cell(5, Value::Integer(-1))),
                    ("b", cell(9, Value::Double(0.5))),
                ]),
            ),
        ];
        let written = encode_states(&table, &cols, &schema, &states).unwrap();
        // The older layout: nullable struct, `ts` required and 0 where absent.
        let mut fields = Vec::new();
        let mut columns = Vec::new();
        for (f, a) in written.schema().fields().iter().zip(written.columns()) {
            let Some(st) = a.as_struct_opt() else {
                fields.push(f.clone());
                columns.push(a.clone());
                continue;
            };
            let ts = st.column(0).as_primitive::<Int64Type>();
            let absent = ts.nulls().cloned().expect("some cell is absent");
            let old_ts: ArrayRef = Arc::new(Int64Array::from_iter_values(ts.iter().map(|t| t.unwrap_or(0))));
            let DataType::Struct(children) = f.data_type() else {
                unreachable!()
            };
            let mut old_children: Vec<_> = children.iter().map(|c| c.as_ref().clone()).collect();
            old_children[0] = old_children[0].clone().with_nullable(false);
            let old_children = Fields::from(old_children);
            let mut arrays = st.columns().to_vec();
            arrays[0] = old_ts;
            fields.push(Arc::new(
                f.as_ref()
                    .clone()
                    .with_data_type(DataType::Struct(old_children.clone()))
                    .with_nullable(true),
            ));
            columns.push(Arc::new(StructArray::new(old_children, arrays, Some(absent))));
        }
        let old = RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), columns).unwrap();
        let mut decoded = Vec::new();
        decode_batch(&old, &KeyRange::all(), &mut decoded).unwrap();
        assert_eq!(decoded, states);
        let aligned = align(&old, &schema, 1).unwrap();
        assert_eq!(aligned, written);
        // TTL bookkeeping: an absent cell (null `ts`, or 0 in the old
        // layout) never counts as an expired version (it would send the
        // key to be folded instead of copied).
        for batch in [old, written] {
            let cursor = Cursor::new(batch, 1, 6).unwrap();
            assert_eq!(cursor.expired, Some(vec![false, false, true]));
        }
    }
}
