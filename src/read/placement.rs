//! Where memtable rows go among one batch of streamed segment rows: which
//! segment rows stay, where whole rows are inserted, and which segment
//! rows get an update's columns laid over them, as runs to copy.
//!
//! Invariant: runs list the output rows in key order, each once.

use arrow::array::{BooleanArray, BooleanBufferBuilder};

use super::arrow::true_bits;

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
