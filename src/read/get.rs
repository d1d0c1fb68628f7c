//! Point reads: the merged state of one key in a snapshot (GetRow, a
//! memtable UpdateRow over a segment row, the SQL point path).
//!
//! Invariant: sources are applied oldest first, so the newest write wins;
//! reading stops at the newest source that replaces everything older (a
//! PutRow or DeleteRow), so no older segment is read for that key.

use crate::error::Result;
use crate::memtable::Probe;
use crate::model::row::RowState;
use crate::state::Snapshot;

impl Snapshot {
    /// The merged state of one key, or `None` when no source has it.
    pub async fn get_state(&self, key: &[u8], columns: Option<&[String]>) -> Result<Option<RowState>> {
        // Newest memtable first: a PutRow / DeleteRow there hides all older
        // sources, and then no segment needs to be read. Each memtable is
        // searched once: those that do not hold the key (bit i of
        // `absent`; past 64 memtables, searched again) are skipped below.
        let mut absent = 0u64;
        let mut start_mem = 0;
        let mut need_segments = true;
        for (i, m) in self.memtables.iter().enumerate().rev() {
            match m.probe(key, self.seq) {
                Probe::Absent if i < 64 => absent |= 1 << i,
                Probe::Absent | Probe::Present => {}
                Probe::Hides => {
                    start_mem = i;
                    need_segments = false;
                    break;
                }
            }
        }
        let mut state: Option<RowState> = None;
        if need_segments {
            let mut layers = Vec::new();
            for seg in self.segments.iter().rev() {
                if let Some(st) = seg.get(key, columns).await? {
                    let stop = st.replace;
                    layers.push(st);
                    if stop {
                        break;
                    }
                }
            }
            for st in layers.into_iter().rev() {
                state = Some(match state {
                    Some(older) => st.merge_over(older),
                    None => st,
                });
            }
        }
        let mut found = state.is_some();
        let mut st = state.unwrap_or_default();
        for (i, m) in self.memtables.iter().enumerate().skip(start_mem) {
            if i >= 64 || absent & (1 << i) == 0 {
                found |= m.apply_to(key, self.seq, &mut st);
            }
        }
        Ok(found.then_some(st))
    }
}
