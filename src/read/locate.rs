//! Where memtable keys go in one segment: the row each replaces, or the
//! row it goes before, read from the row groups' key bounds and the
//! `__pk` page index, then the typed key columns of only the pages near
//! the keys.
//!
//! Invariant: positions are exact (a key is `found` only at a row with an
//! equal key) and ascending with the keys; a segment without key
//! statistics gets no positions at all (`None`), never guessed ones.

use std::sync::Arc;

use arrow::array::ArrayRef;
use futures::StreamExt;

use super::arrow::{BATCH_ROWS, TypedKey};
use crate::error::{Error, Result};
use crate::segment::{RowSpan, Segment, partition};
use crate::state::TableInner;

/// Each key's position in the segment (see `Run::pos` in [`super::overlay`]); `None` when
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
pub(super) async fn locate(
    table: &TableInner,
    seg: &Arc<Segment>,
    keys: &[Vec<u8>],
) -> Result<Option<(Vec<u64>, Vec<bool>)>> {
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
