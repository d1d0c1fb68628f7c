//! The runs of a memtable overlay ([`super::overlay`]): sorted keys
//! placed in one segment (or a gap) with their rows, oldest run first.
//! An extension adds a run of the keys written since instead of copying
//! the overlay; a scan reads a key range of all runs merged.
//!
//! Invariants: a run's keys are ascending and unique, its positions
//! ascending with them; all runs of an overlay share one schema; a key in
//! a newer run replaces its row in every older one; a key's position and
//! whether it was found are the same in every run holding it (segment
//! rows never move).

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::buffer::BooleanBuffer;

use crate::error::Result;
use crate::model::key::KeyRange;

/// Runs past which the two newest are merged whatever their lengths (a
/// scan merges the runs of its span key by key).
pub(super) const MAX_RUNS: usize = 8;

/// Keys of an overlay placed in its segment, with their rows.
pub(crate) struct Run {
    /// Ascending.
    pub(super) keys: Vec<Arc<[u8]>>,
    /// Per key: the segment row it replaces (`found`), else the segment row
    /// it goes before (the segment's row count: after the last row).
    pub(super) pos: Vec<u64>,
    pub(super) found: Vec<bool>,
    /// Per key: its row holds only the columns its UpdateRows wrote, to be
    /// laid over the segment row it was found at, column by column (see
    /// `lays_over` in [`super::overlay`]); otherwise the row is the key's whole state.
    pub(super) partial: Vec<bool>,
    /// Per key, its merged state's newest values in the segment layout
    /// (typed key columns, `__max_ts`, one struct per attribute column),
    /// strings as views; for a partial key, its own writes' newest values.
    pub(super) rows: RecordBatch,
}

impl Run {
    /// The memory it holds.
    pub(super) fn bytes(&self) -> usize {
        let keys: usize = self
            .keys
            .iter()
            .map(|k| k.len() + std::mem::size_of::<Arc<[u8]>>())
            .sum();
        keys + self.pos.len() * (std::mem::size_of::<u64>() + 2) + self.rows.get_array_memory_size()
    }

    /// The index range of the keys in `range`.
    fn key_span(&self, range: &KeyRange) -> std::ops::Range<usize> {
        let lo = self.keys.partition_point(|k| **k < *range.lo.as_slice());
        let hi = match &range.hi {
            Some(h) => self.keys.partition_point(|k| **k < *h.as_slice()),
            None => self.keys.len(),
        };
        lo..hi.max(lo)
    }

    /// One run of the keys of both, ascending; a key in both takes
    /// `newer`'s place and row.
    fn merge(older: &Run, newer: &Run) -> Result<Run> {
        let n = older.keys.len() + newer.keys.len();
        // Runs of consecutive rows from either: (0 = older / 1 = newer,
        // start, end).
        let mut runs: Vec<(usize, usize, usize)> = Vec::new();
        let mut push = |src: usize, i: usize| match runs.last_mut() {
            Some((s, _, e)) if *s == src && *e == i => *e += 1,
            _ => runs.push((src, i, i + 1)),
        };
        let (mut b, mut c) = (0, 0);
        while b < older.keys.len() || c < newer.keys.len() {
            let from_new = match (older.keys.get(b), newer.keys.get(c)) {
                (Some(old), Some(new)) => match old.cmp(new) {
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
        let mut merged = Run {
            keys: Vec::with_capacity(n),
            pos: Vec::with_capacity(n),
            found: Vec::with_capacity(n),
            partial: Vec::with_capacity(n),
            rows: RecordBatch::new_empty(newer.rows.schema()),
        };
        for &(src, s, e) in &runs {
            let from = if src == 0 { older } else { newer };
            merged.keys.extend_from_slice(&from.keys[s..e]);
            merged.pos.extend_from_slice(&from.pos[s..e]);
            merged.found.extend_from_slice(&from.found[s..e]);
            merged.partial.extend_from_slice(&from.partial[s..e]);
        }
        // Copied run by run.
        let rows = merged.keys.len();
        let mut columns = Vec::with_capacity(newer.rows.num_columns());
        for (old, new) in older.rows.columns().iter().zip(newer.rows.columns()) {
            let (old, new) = (old.to_data(), new.to_data());
            let mut m = arrow::array::MutableArrayData::new(vec![&old, &new], false, rows);
            for &(src, s, e) in &runs {
                m.try_extend(src, s, e)?;
            }
            columns.push(arrow::array::make_array(m.freeze()));
        }
        merged.rows = RecordBatch::try_new_with_options(
            newer.rows.schema(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?;
        Ok(merged)
    }
}

/// Merges the two newest runs while there are more than [`MAX_RUNS`].
pub(super) fn settle(runs: &mut Vec<Arc<Run>>) -> Result<()> {
    while let [.., older, newer] = runs.as_slice() {
        if runs.len() <= MAX_RUNS {
            break;
        }
        let merged = Run::merge(older, newer)?;
        runs.truncate(runs.len() - 2);
        runs.push(Arc::new(merged));
    }
    Ok(())
}

/// The overlay's keys in one key range, its runs merged: per key its
/// position, whether it was found there and whether it is laid over, and
/// its row, gathered from the runs on demand (a scan gathers only the
/// columns it outputs).
pub(crate) struct OverlaySpan {
    pub pos: Vec<u64>,
    pub found: Vec<bool>,
    pub partial: Vec<bool>,
    /// Each run's rows of the range (segment layout, the same schema).
    parts: Vec<RecordBatch>,
    /// Per key, (part, row); `None` when there is one part, in key order.
    order: Option<Vec<(usize, usize)>>,
}

impl OverlaySpan {
    pub fn len(&self) -> usize {
        self.pos.len()
    }

    /// `f` of each part's rows, gathered into key order (`f` must give
    /// every part the same schema).
    pub fn gather(&self, f: impl Fn(&RecordBatch) -> Result<RecordBatch>) -> Result<RecordBatch> {
        let Some(order) = &self.order else {
            return f(&self.parts[0]);
        };
        let outs = self.parts.iter().map(f).collect::<Result<Vec<_>>>()?;
        let schema = outs[0].schema();
        let columns = (0..schema.fields().len())
            .map(|c| {
                let values: Vec<&dyn arrow::array::Array> = outs.iter().map(|b| b.column(c).as_ref()).collect();
                arrow::compute::interleave(&values, order)
            })
            .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
        Ok(RecordBatch::try_new_with_options(
            schema,
            columns,
            &RecordBatchOptions::new().with_row_count(Some(order.len())),
        )?)
    }

    /// The array `f` takes from each part's rows, gathered into key order
    /// (`f` must give every part the same type).
    pub fn gather_array(&self, f: impl Fn(&RecordBatch) -> Result<ArrayRef>) -> Result<ArrayRef> {
        let Some(order) = &self.order else {
            return f(&self.parts[0]);
        };
        let outs = self.parts.iter().map(f).collect::<Result<Vec<_>>>()?;
        let values: Vec<&dyn arrow::array::Array> = outs.iter().map(|a| a.as_ref()).collect();
        Ok(arrow::compute::interleave(&values, order)?)
    }

    /// Per-row bits `f` gives each part, gathered into key order.
    pub fn gather_bits(&self, f: impl Fn(&RecordBatch) -> BooleanBuffer) -> BooleanBuffer {
        let Some(order) = &self.order else {
            return f(&self.parts[0]);
        };
        let bits: Vec<BooleanBuffer> = self.parts.iter().map(f).collect();
        BooleanBuffer::collect_bool(order.len(), |i| {
            let (p, r) = order[i];
            bits[p].value(r)
        })
    }
}

/// Where each of `keys` (ascending) that `runs` hold was placed:
/// its position and whether it was found there (the same in every run
/// holding it). One pass over each run, galloping from the last key's
/// place, so a few keys among many cost about a binary search each and
/// many cost a merge.
pub(super) fn placed(runs: &[Arc<Run>], keys: &[Vec<u8>]) -> Vec<Option<(u64, bool)>> {
    let mut out = vec![None; keys.len()];
    for r in runs {
        let n = r.keys.len();
        let mut lo = 0;
        for (i, k) in keys.iter().enumerate() {
            let k = k.as_slice();
            // Every run key before `lo` is below `k`.
            let (mut bound, mut step) = (lo, 1);
            while bound < n && *r.keys[bound] < *k {
                lo = bound + 1;
                bound += step;
                step *= 2;
            }
            let end = bound.min(n);
            lo += r.keys[lo..end].partition_point(|x| **x < *k);
            if lo < n && *r.keys[lo] == *k {
                out[i] = Some((r.pos[lo], r.found[lo]));
            }
        }
    }
    out
}

/// The keys of `runs` in `range`, merged (`runs` oldest first, never
/// empty).
pub(super) fn span(runs: &[Arc<Run>], range: &KeyRange) -> OverlaySpan {
    let spans: Vec<(&Arc<Run>, std::ops::Range<usize>)> = runs
        .iter()
        .map(|r| (r, r.key_span(range)))
        .filter(|(_, s)| !s.is_empty())
        .collect();
    if spans.len() <= 1 {
        let (run, s) = match spans.into_iter().next() {
            Some(one) => one,
            None => (&runs[0], 0..0),
        };
        return OverlaySpan {
            pos: run.pos[s.clone()].to_vec(),
            found: run.found[s.clone()].to_vec(),
            partial: run.partial[s.clone()].to_vec(),
            parts: vec![run.rows.slice(s.start, s.len())],
            order: None,
        };
    }
    // A merge of the runs by position, then key (keys at one position
    // are those between the same two segment rows, or one found there);
    // a key in several runs is taken from the newest.
    let mut at: Vec<usize> = spans.iter().map(|(_, s)| s.start).collect();
    let total: usize = spans.iter().map(|(_, s)| s.len()).sum();
    let mut out = OverlaySpan {
        pos: Vec::with_capacity(total),
        found: Vec::with_capacity(total),
        partial: Vec::with_capacity(total),
        parts: spans.iter().map(|(r, s)| r.rows.slice(s.start, s.len())).collect(),
        order: Some(Vec::with_capacity(total)),
    };
    loop {
        // The run holding the smallest (position, key); on equal keys
        // the newest run, the others skip it.
        let mut best: Option<usize> = None;
        for (k, (run, s)) in spans.iter().enumerate() {
            if at[k] >= s.end {
                continue;
            }
            let Some(b) = best else {
                best = Some(k);
                continue;
            };
            let (br, bi) = (&spans[b].0, at[b]);
            let ord = run.pos[at[k]]
                .cmp(&br.pos[bi])
                .then_with(|| run.keys[at[k]].cmp(&br.keys[bi]));
            match ord {
                std::cmp::Ordering::Less => best = Some(k),
                std::cmp::Ordering::Equal => {
                    // `k` is newer than `b`: `b`'s copy is replaced.
                    at[b] += 1;
                    best = Some(k);
                }
                std::cmp::Ordering::Greater => {}
            }
        }
        let Some(b) = best else { break };
        let (run, s) = &spans[b];
        let i = at[b];
        at[b] += 1;
        out.pos.push(run.pos[i]);
        out.found.push(run.found[i]);
        out.partial.push(run.partial[i]);
        if let Some(order) = out.order.as_mut() {
            order.push((b, i - s.start));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::Int64Type;

    /// A run of keys `k{n:03}` placed at `n` (found when even), each row
    /// holding `v`.
    fn run(keys: &[(u64, i64)]) -> Run {
        let rows = RecordBatch::try_from_iter([(
            "v",
            Arc::new(Int64Array::from_iter_values(keys.iter().map(|k| k.1))) as ArrayRef,
        )])
        .unwrap();
        Run {
            keys: keys
                .iter()
                .map(|k| Arc::from(format!("k{:03}", k.0).into_bytes()))
                .collect(),
            pos: keys.iter().map(|k| k.0).collect(),
            found: keys.iter().map(|k| k.0 % 2 == 0).collect(),
            partial: keys.iter().map(|k| k.0 % 3 == 0).collect(),
            rows,
        }
    }

    fn values(span: &OverlaySpan) -> Vec<i64> {
        let b = span.gather(|r| Ok(r.clone())).unwrap();
        b.column(0).as_primitive::<Int64Type>().values().to_vec()
    }

    /// Random extensions (keys written again among them), settled as
    /// builds settle them: the merged span of every range equals the
    /// newest row of each key, whatever the runs, and the run count stays
    /// bounded.
    #[test]
    fn runs_merge_to_the_newest_row_of_each_key() {
        use rand::{Rng, SeedableRng};
        for seed in 0..200u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut model = std::collections::BTreeMap::new();
            let mut runs = vec![Arc::new(run(&[]))];
            for step in 0..rng.random_range(1..40) {
                let most = if rng.random_bool(0.2) { 60 } else { 8 };
                let n = rng.random_range(0..most);
                let mut keys: Vec<u64> = (0..n).map(|_| rng.random_range(0..100)).collect();
                keys.sort_unstable();
                keys.dedup();
                let entries: Vec<(u64, i64)> = keys.iter().map(|&k| (k, step * 1000 + k as i64)).collect();
                for &(k, v) in &entries {
                    model.insert(k, v);
                }
                if !entries.is_empty() {
                    runs.push(Arc::new(run(&entries)));
                    settle(&mut runs).unwrap();
                }
                assert!(runs.len() <= MAX_RUNS, "seed {seed}");
                let lo = rng.random_range(0..100u64);
                let hi = rng.random_range(lo..=100u64);
                let range = KeyRange {
                    lo: format!("k{lo:03}").into_bytes(),
                    hi: (hi < 100).then(|| format!("k{hi:03}").into_bytes()),
                };
                let span = span(&runs, &range);
                let want: Vec<(u64, i64)> = model
                    .range(lo..if hi < 100 { hi } else { u64::MAX })
                    .map(|(k, v)| (*k, *v))
                    .collect();
                assert_eq!(
                    values(&span),
                    want.iter().map(|w| w.1).collect::<Vec<_>>(),
                    "seed {seed}"
                );
                assert_eq!(span.pos, want.iter().map(|w| w.0).collect::<Vec<_>>(), "seed {seed}");
                assert_eq!(span.found, want.iter().map(|w| w.0 % 2 == 0).collect::<Vec<_>>());
                assert_eq!(span.partial, want.iter().map(|w| w.0 % 3 == 0).collect::<Vec<_>>());
                // Every key of a sample, held or not, ascending.
                let probe: Vec<u64> = (0..100).filter(|_| rng.random_bool(0.3)).collect();
                let names: Vec<Vec<u8>> = probe.iter().map(|k| format!("k{k:03}").into_bytes()).collect();
                let placed = placed(&runs, &names);
                for (k, got) in probe.iter().zip(placed) {
                    let want = model.contains_key(k).then_some((*k, k % 2 == 0));
                    assert_eq!(got, want, "seed {seed}: key {k}");
                }
            }
        }
    }

    /// Extensions add runs without copying until there are more than
    /// [`MAX_RUNS`]; then the two newest are merged.
    #[test]
    fn extensions_merge_runs_only_past_the_bound() {
        let mut runs = vec![Arc::new(run(&[]))];
        for i in 0..12u64 {
            runs.push(Arc::new(run(&[(i, i as i64)])));
            settle(&mut runs).unwrap();
            assert!(runs.len() <= MAX_RUNS);
        }
        let lens: Vec<usize> = runs.iter().map(|r| r.keys.len()).collect();
        assert_eq!(lens, vec![0, 1, 1, 1, 1, 1, 1, 6]);
    }
}
