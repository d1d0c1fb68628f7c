//! The compaction policy: which segments to merge, and when.
//!
//! A table's segments form sorted runs, oldest first (see the parent
//! module). The automatic policy is size-tiered: once `trigger_runs` runs
//! of similar size (within 2x) have piled up at the newest end, it merges
//! them, together with the next older group of similar runs if the output
//! would complete it. Past `max_runs` runs it also merges runs that are not
//! alike.
//!
//! An automatic compaction rewrites only the segments of its span that
//! overlap another one of the span ([`overlap_groups`]); the others join
//! the output run as they are. Rows written in key order (time series,
//! auto-increment keys, bulk loads of sorted files) then cost almost no
//! rewriting: each flush's segments overlap the previous flush's only
//! where writes in flight crossed the flush (see `crate::flush`). A full
//! or manual compaction, and one that drops expired segments, rewrites
//! every segment.
//!
//! Invariant: a chosen span is contiguous and ends at the newest segment
//! given, so merging it keeps the order between its inputs and every other
//! segment; the groups of a span do not overlap one another.

use std::ops::Range;
use std::sync::Arc;

use crate::segment::Segment;
use crate::state::runs;

/// Which segments a compaction merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pick {
    /// Every segment (`cellar compact`, `Table::compact`).
    Full,
    /// What the size-tiered policy asks for, if anything.
    Auto,
    /// The newest `n` runs (tests and tools).
    Newest(usize),
    /// Runs after those a running automatic compaction merges, as `Auto`
    /// would pick them, but only while the table has more than
    /// `catch_up_runs` runs: a long merge then no longer lets the newest
    /// runs pile up until writers stall.
    CatchUp,
}

/// When the automatic policy merges.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    /// Runs of similar size at the newest end that are merged together
    /// (`DbOptions::compaction_trigger_runs`).
    pub trigger_runs: usize,
    /// Past this many runs, runs are merged even when no `trigger_runs` of
    /// them are alike (see [`balanced`]).
    pub max_runs: usize,
}

/// A run joins a group of similar runs while it is at most this many
/// times the size of the group's largest run.
const SIMILAR: u64 = 2;

/// Which segments of a chosen span a compaction rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rewrite {
    /// Every one: what is past the TTL and `max_versions`, and tombstones
    /// nothing older needs, leave the disk.
    All,
    /// Only those that overlap another segment of the span; the rest join
    /// the output run unchanged.
    Overlapping,
}

/// The span of `segs` to compact, if any, and how.
pub(crate) fn choose(
    segs: &[Arc<Segment>],
    pick: Pick,
    policy: Policy,
    cutoff: i64,
) -> Option<(Range<usize>, Rewrite)> {
    if segs.is_empty() {
        return None;
    }
    let runs = runs(segs);
    let from_run = |k: usize| runs[runs.len() - k].start..segs.len();
    match pick {
        Pick::Full => Some((0..segs.len(), Rewrite::All)),
        Pick::Newest(n) => (n >= 1).then(|| (from_run(n.min(runs.len())), Rewrite::All)),
        Pick::Auto | Pick::CatchUp => {
            // A segment whose every value has expired: a full merge drops
            // it (older sources may hold what its tombstones mask).
            if cutoff > i64::MIN
                && segs
                    .iter()
                    .any(|s| s.meta.max_ts.is_some_and(|t| t > i64::MIN && t < cutoff))
            {
                return Some((0..segs.len(), Rewrite::All));
            }
            let sizes: Vec<u64> = runs
                .iter()
                .map(|r| segs[r.clone()].iter().map(|s| s.meta.size_bytes).sum())
                .collect();
            let width = policy.trigger_runs.max(2);
            let k = tiered(&sizes, width).or_else(|| {
                // A catch-up compaction runs because the table has too many
                // runs; it merges among the runs it may take.
                let too_many = pick == Pick::CatchUp || runs.len() > policy.max_runs;
                (too_many && runs.len() >= width).then(|| balanced(&sizes, width))
            })?;
            Some((from_run(k), Rewrite::Overlapping))
        }
    }
}

/// The key spans `spans` (closed, of a compaction's inputs, oldest first)
/// in groups that overlap transitively, each group's members in list
/// order, the groups in key order. A group of one overlaps no other span.
pub(crate) fn overlap_groups(spans: &[(&[u8], &[u8])]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by(|&a, &b| spans[a].0.cmp(spans[b].0));
    let mut groups: Vec<(&[u8], Vec<usize>)> = Vec::new();
    for i in order {
        let (min, max) = spans[i];
        match groups.last_mut() {
            Some((end, members)) if min <= *end => {
                *end = (*end).max(max);
                members.push(i);
            }
            _ => groups.push((max, vec![i])),
        }
    }
    groups
        .into_iter()
        .map(|(_, mut members)| {
            members.sort_unstable();
            members
        })
        .collect()
}

/// Size-tiered merging: how many of the newest runs (sizes oldest first)
/// to merge, if `width` runs of similar size have piled up at the newest
/// end. Each merge then multiplies a run's size by about `width`, so each
/// byte is rewritten about log_width(table size / flush size) times (a
/// policy that merged any two similar runs rewrote it log2 times).
///
/// When the merged output will be similar to the next older group and
/// that group already holds `width - 1` runs, the group is taken into the
/// same merge (as a carry ripples in a counter), rather than merged again
/// right after.
fn tiered(sizes: &[u64], width: usize) -> Option<usize> {
    let n = sizes.len();
    // The group of similar runs that starts `from` runs back from the
    // newest: (runs, total bytes, largest run).
    let group = |from: usize| {
        let (mut count, mut total, mut largest) = (0usize, 0u64, 0u64);
        while from + count < n {
            let s = sizes[n - 1 - from - count];
            if count > 0 && s > SIMILAR.saturating_mul(largest.max(1)) {
                break;
            }
            largest = largest.max(s);
            total = total.saturating_add(s);
            count += 1;
        }
        (count, total, largest)
    };
    let (mut k, mut total, _) = group(0);
    if k < width {
        return None;
    }
    loop {
        let (count, bytes, largest) = group(k);
        let alike = total <= SIMILAR.saturating_mul(largest.max(1)) && largest <= SIMILAR.saturating_mul(total.max(1));
        if count == 0 || count + 1 < width || !alike {
            return Some(k);
        }
        k += count;
        total = total.saturating_add(bytes);
    }
}

/// The fallback when a table has too many runs: the newest runs, taking in
/// each next older run while it is not larger than everything taken so
/// far, and at least enough of them to get back under `width` runs.
fn balanced(sizes: &[u64], width: usize) -> usize {
    let n = sizes.len();
    let mut taken = sizes[n - 1];
    let mut k = 1;
    while k < n && sizes[n - 1 - k] <= taken {
        taken += sizes[n - 1 - k];
        k += 1;
    }
    if k < 2 { (n + 2 - width).clamp(2, n) } else { k }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiered_merges_similar_runs_at_the_newest_end() {
        // Fewer than `width` alike: nothing.
        assert_eq!(tiered(&[100, 10, 10, 10], 4), None);
        // Four flushes are merged; their output (40) is alike with the
        // older run (80), but the two make fewer than four: no carry.
        assert_eq!(tiered(&[80, 10, 10, 10, 10], 4), Some(4));
        // Not alike (100 is more than twice 40): no carry either.
        assert_eq!(tiered(&[100, 100, 100, 10, 10, 10, 10], 4), Some(4));
        // The output (40) completes the next older group of three: a carry,
        // and then another.
        assert_eq!(tiered(&[160, 160, 160, 40, 40, 40, 10, 10, 10, 10], 4), Some(10));
        assert_eq!(tiered(&[640, 160, 40, 40, 40, 10, 10, 10, 10], 4), Some(7));
        // A small run (a flush of a nearly empty memtable) joins its
        // neighbours' group instead of blocking it.
        assert_eq!(tiered(&[100, 100, 100, 1], 4), None);
        assert_eq!(tiered(&[400, 100, 100, 100, 1, 100], 4), Some(5));
        assert_eq!(tiered(&[0, 0, 0, 0], 4), Some(4));
        // The fallback merges the balanced newest span, at least two runs.
        assert_eq!(balanced(&[800, 400, 100, 60, 40], 4), 3);
        assert_eq!(balanced(&[800, 400, 100, 10], 4), 2);
    }

    #[test]
    fn overlap_groups_join_spans_that_overlap_transitively() {
        let spans: Vec<(&[u8], &[u8])> = vec![
            (b"m", b"p"), // 0: shares its end key with 3
            (b"a", b"c"), // 1: alone
            (b"q", b"t"), // 2: overlaps 4
            (b"d", b"m"), // 3
            (b"s", b"z"), // 4
            (b"n", b"n"), // 5: inside 0
        ];
        assert_eq!(overlap_groups(&spans), vec![vec![1], vec![0, 3, 5], vec![2, 4]]);
        // Flushes of keys written in order: each overlaps the one before
        // only where writes in flight crossed the flush.
        let spans: Vec<(&[u8], &[u8])> = vec![(b"a", b"f"), (b"g", b"h"), (b"gz", b"gz"), (b"i", b"p")];
        assert_eq!(overlap_groups(&spans), vec![vec![0], vec![1, 2], vec![3]]);
        assert!(overlap_groups(&[]).is_empty());
    }

    /// Flushes of one size, each followed by the merges the policy asks
    /// for: each byte is rewritten about log_4 times, and the run count
    /// stays small.
    #[test]
    fn tiered_rewrites_each_byte_about_log_width_times() {
        let flushes = 1024u64;
        let (mut runs, mut rewritten, mut most) = (Vec::<u64>::new(), 0u64, 0usize);
        for _ in 0..flushes {
            runs.push(100);
            while let Some(k) = tiered(&runs, 4) {
                let merged: u64 = runs.drain(runs.len() - k..).sum();
                rewritten += merged;
                runs.push(merged);
            }
            most = most.max(runs.len());
        }
        // At most log_4(1024) = 5 merges per byte (4 with the carries);
        // merging any two similar runs (a binary counter) would rewrite
        // it 10 times.
        assert_eq!(rewritten, 4 * flushes * 100);
        assert!(most <= 4 * 5, "{most} runs at once");
        assert_eq!(runs, vec![flushes * 100]);
    }
}
