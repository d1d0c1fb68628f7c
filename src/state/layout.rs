//! Splitting a partition in two and merging two neighbours, in memory.
//!
//! These run on the committer thread (see `db::partitions`), after the
//! manifest version recording the change is durable, so no write is being
//! inserted while a partition's memtables change hands.
//!
//! Invariants: the partitions stay in key order, each ending where the
//! next starts; every write a partition held is in the partitions that
//! take its place (a split copies the parent's unflushed writes into the
//! halves' memtables, each its own keys; a merge takes both sides'
//! memtables over, frozen); the chain links of the old partitions' active
//! memtables lead to the new ones, so a checked write reaches every write
//! made to its row after its snapshot.

use super::{PartState, TableState};
use crate::model::key::KeyRange;

impl TableState {
    /// Replaces partition `id` with `left` (ids and bounds: its keys below
    /// `at`) and `right` (from `at`). Both name the parent's segments,
    /// each reading its own keys of them, until compaction rewrites them.
    /// False when the partition is gone or `at` is not inside it.
    pub fn split_part(&mut self, id: u64, at: &[u8], left: u64, right: u64) -> bool {
        let Some(i) = self.parts.iter().position(|p| p.id == id) else {
            return false;
        };
        let p = &self.parts[i];
        if at <= p.range.lo.as_slice() || !p.range.contains(at) {
            return false;
        }
        let l_range = KeyRange {
            lo: p.range.lo.clone(),
            hi: Some(at.to_vec()),
        };
        let r_range = KeyRange {
            lo: at.to_vec(),
            hi: p.range.hi.clone(),
        };
        let l = PartState::new(left, l_range, p.segments.to_vec());
        let r = PartState::new(right, r_range, p.segments.to_vec());
        for m in p.memtables() {
            l.active.copy_from(m, &l.range);
            r.active.copy_from(m, &r.range);
        }
        p.chain.succeed(vec![l.chain.clone(), r.chain.clone()]);
        self.parts.splice(i..=i, [l, r]);
        true
    }

    /// Replaces partitions `left` and `right` (its neighbour above) with
    /// one, `id`: the segments of both (left's first: they hold different
    /// keys), and both sides' memtables frozen under a new active one.
    /// False when they are gone or not neighbours.
    pub fn merge_parts(&mut self, left: u64, right: u64, id: u64) -> bool {
        let Some(i) = self.parts.iter().position(|p| p.id == left) else {
            return false;
        };
        if self.parts.get(i + 1).is_none_or(|p| p.id != right) {
            return false;
        }
        let (l, r) = (&self.parts[i], &self.parts[i + 1]);
        let range = KeyRange {
            lo: l.range.lo.clone(),
            hi: r.range.hi.clone(),
        };
        let segments = l.segments.iter().chain(r.segments.iter()).cloned().collect();
        let mut m = PartState::new(id, range, segments);
        for side in [l, r] {
            m.immutables.extend(side.immutables.iter().cloned());
            if !side.active.is_empty() {
                m.immutables.push(side.active.clone());
            }
            side.chain.succeed(vec![m.chain.clone()]);
        }
        self.parts.splice(i..=i + 1, [m]);
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::memtable::Memtable;
    use crate::model::row::{Mutation, RowState};
    use crate::model::types::Value;

    fn put(n: i64) -> Mutation {
        Mutation::Put {
            row_ts: None,
            cells: vec![("n".into(), 1, Value::Integer(n))],
        }
    }

    fn value(mems: &[Arc<Memtable>], key: &[u8]) -> Option<i64> {
        let mut st = RowState::default();
        for m in mems {
            m.apply_to(key, u64::MAX, &mut st);
        }
        match st.columns.get("n")?.versions.first()?.1 {
            Value::Integer(n) => Some(n),
            _ => None,
        }
    }

    /// A split hands each half its keys' unflushed writes (frozen ones
    /// too); a merge takes both sides' memtables; a chain link taken
    /// before either reaches every later write of its key, once.
    #[test]
    fn splits_and_merges_keep_every_write_and_the_chain() {
        let mut st = TableState::new(vec![PartState::new(0, KeyRange::all(), Vec::new())]);
        st.parts[0].active.insert(b"a".to_vec(), 1, put(1));
        st.parts[0].active.insert(b"m".to_vec(), 2, put(2));
        st.parts[0].freeze_active();
        st.parts[0].active.insert(b"a".to_vec(), 3, put(3));
        let link = st.parts[0].chain.clone();
        assert!(!st.split_part(0, b"", 1, 2), "a split at the lowest key");
        assert!(st.split_part(0, b"k", 1, 2));
        assert_eq!(st.parts.len(), 2);
        assert_eq!(st.part_index(b"a"), 0);
        assert_eq!(st.part_index(b"k"), 1);
        let l: Vec<_> = st.parts[0].memtables().cloned().collect();
        let r: Vec<_> = st.parts[1].memtables().cloned().collect();
        assert_eq!((value(&l, b"a"), value(&l, b"m")), (Some(3), None));
        assert_eq!((value(&r, b"a"), value(&r, b"m")), (None, Some(2)));
        assert_eq!(st.parts[0].active.min_seq(), Some(1));
        st.part(b"a").active.insert(b"a".to_vec(), 4, put(4));
        assert!(!st.merge_parts(2, 1, 3), "not neighbours in that order");
        assert!(st.merge_parts(1, 2, 3));
        assert_eq!(st.parts.len(), 1);
        st.parts[0].active.insert(b"a".to_vec(), 5, put(5));
        let all: Vec<_> = st.parts[0].memtables().cloned().collect();
        assert_eq!((value(&all, b"a"), value(&all, b"m")), (Some(5), Some(2)));
        // The old link reaches the parent, the left half and the merged
        // partition, each memtable once, oldest first.
        let mut row = RowState::default();
        for m in link.memtables() {
            m.apply_after(b"a", 3, &mut row);
        }
        assert_eq!(row.seq, 5);
    }
}
