//! The row keys the committer wrote lately: lets it tell, without
//! searching a memtable, that a row read by a writer has had no write
//! since.
//!
//! A checked write (a condition, an increment, a table with local indexes
//! or origin columns) read its row on a snapshot; the committer must know
//! whether the row changed between that snapshot and the write's place
//! (`write::checked`). Searching the memtables for that costs a B-tree
//! descent per write, and under pipelined writes every memtable has
//! writes newer than any snapshot. This filter answers the common case
//! (no write of the key since) with one hash lookup.
//!
//! Invariants: every write the committer makes with a sequence at or
//! above `covered` has its key's hash in one of the two generations, with
//! a sequence at or above that write's; so "no write after `at`" is
//! answered only for `at + 1 >= covered`, and never wrongly (a hash shared
//! by two keys answers "maybe", and the memtables are searched). Memory
//! is bounded: two generations of at most [`GENERATION`] hashes.

use std::collections::HashMap;
use std::hash::BuildHasher;

/// Hashes per generation: more writes than are in flight between a
/// writer's snapshot and the committer (3,200 under the ingest bench's
/// pipelining: 16 batches of 200), so that a snapshot is almost never
/// older than what the filter covers, and few enough that both
/// generations stay in a core's L2 cache (2 x 256 KiB of buckets): at
/// 64Ki a generation, the lookups missed it and `decide` took 2% of a
/// local-index ingest.
const GENERATION: usize = 1 << 13;

type Seqs = HashMap<u64, u64, foldhash::fast::RandomState>;

pub(crate) struct RecentKeys {
    hasher: foldhash::fast::RandomState,
    /// Every write with a sequence at or above this one is recorded.
    covered: u64,
    /// The first sequence `current` holds (where `previous` ends).
    current_from: u64,
    current: Seqs,
    previous: Seqs,
}

impl RecentKeys {
    /// A filter for a committer whose next write has sequence `next_seq`
    /// (every earlier write is in the memtables already, before any
    /// snapshot a writer can take).
    pub fn new(next_seq: u64) -> Self {
        RecentKeys {
            hasher: Default::default(),
            covered: next_seq,
            current_from: next_seq,
            current: Seqs::default(),
            previous: Seqs::default(),
        }
    }

    fn hash(&self, table: u64, key: &[u8]) -> u64 {
        self.hasher.hash_one((table, key))
    }

    /// Records a write of `key` in `table` with sequence `seq` (sequences
    /// ascend from call to call).
    pub fn note(&mut self, table: u64, key: &[u8], seq: u64) {
        if self.current.len() >= GENERATION {
            // The oldest generation goes: the filter now covers from the
            // first write of the one that stays.
            std::mem::swap(&mut self.current, &mut self.previous);
            self.current.clear();
            self.covered = self.current_from;
            self.current_from = seq;
        }
        let h = self.hash(table, key);
        self.current.insert(h, seq);
    }

    /// False only when `key` of `table` certainly had no write with a
    /// sequence above `at`.
    pub fn maybe_written_after(&self, table: u64, key: &[u8], at: u64) -> bool {
        if at.saturating_add(1) < self.covered {
            return true;
        }
        let h = self.hash(table, key);
        let newer = |m: &Seqs| m.get(&h).is_some_and(|s| *s > at);
        newer(&self.current) || newer(&self.previous)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_no_only_when_certain() {
        let mut r = RecentKeys::new(10);
        // Before anything is recorded: snapshots at 9 and later are covered.
        assert!(!r.maybe_written_after(1, b"a", 9));
        assert!(r.maybe_written_after(1, b"a", 8), "older than the filter");
        r.note(1, b"a", 10);
        assert!(r.maybe_written_after(1, b"a", 9));
        assert!(!r.maybe_written_after(1, b"a", 10));
        assert!(!r.maybe_written_after(2, b"a", 9), "another table's key");
        assert!(!r.maybe_written_after(1, b"b", 9));
    }

    #[test]
    fn generations_roll_and_the_covered_sequence_follows() {
        let mut r = RecentKeys::new(1);
        let n = GENERATION as u64;
        for seq in 1..=2 * n + 5 {
            r.note(7, &seq.to_be_bytes(), seq);
        }
        // Two rolls: the writes from n + 1 on are kept, those before are
        // answered "maybe" by their age.
        assert_eq!(r.covered, n + 1);
        assert!(r.maybe_written_after(7, &3u64.to_be_bytes(), 2));
        assert!(r.maybe_written_after(7, &(n + 2).to_be_bytes(), n + 1));
        assert!(!r.maybe_written_after(7, &(n + 2).to_be_bytes(), n + 2));
        assert!(r.maybe_written_after(7, &(2 * n + 5).to_be_bytes(), 2 * n));
        // A key never written, asked about a covered snapshot: no.
        assert!(!r.maybe_written_after(7, b"never", n + 1));
    }
}
