//! Flush: a frozen memtable becomes a segment, then a manifest version.
//!
//! Order matters for crash safety: (1) the segment file is written and
//! made durable, (2) a manifest version naming it with the new
//! `flushed_seq` is committed, (3) the memtable is swapped for the segment
//! in memory, (4) the committer is told so WAL files can be deleted. A crash
//! before (2) leaves an unreferenced file (ignored) and the WAL replays the
//! writes; after (2), replay skips them.
//!
//! A memtable whose keys lie mostly above every key on disk (keys written
//! in ascending order: time series, auto-increment keys, sorted loads),
//! but not all of them (writes in flight when the previous memtable froze),
//! is written as three segments of one run ([`pieces`]): the few keys at or
//! below the table's highest, the bulk, and a short tail. The next such
//! flush then overlaps only this one's tail, so compaction merges the small
//! pieces and carries the bulk into its run without rewriting it.
//!
//! Invariant: a memtable leaves the table's state only after the manifest
//! naming its segments is durable, so every write is always in a memtable,
//! a committed segment, or both. The segments of one flush do not overlap
//! each other. See `docs/architecture.md`.

use std::sync::Arc;

use object_store::ObjectStoreExt;
use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::memtable::Memtable;
use crate::model::key::{KeyRange, key_successor};
use crate::segment::{SegmentBuilder, SegmentMeta};
use crate::state::TableInner;
use crate::storage::{SpillSink, Storage};

/// Flushes every frozen memtable of `table`, oldest first, calling
/// `flushed` after each (under sustained writes the loop may not end for a
/// long time: compaction is scheduled per flush, not when it ends).
///
/// The manifest lock is held only to reserve a segment id and to commit,
/// never while a segment is encoded or written: under sustained writes
/// flushes follow each other without pause, and a compaction waiting to
/// commit would otherwise wait for all of them.
pub(crate) async fn flush_frozen(
    storage: &Storage,
    table: &Arc<TableInner>,
    flushed: &(dyn Fn() + Sync),
) -> Result<()> {
    let _flushing = table.flushing.lock().await;
    loop {
        // The oldest frozen memtable of any partition: a memtable a split
        // left in both halves is flushed by each, its own keys.
        let next = {
            let st = table.state.read();
            st.parts
                .iter()
                .filter_map(|p| {
                    let top = p
                        .segments
                        .iter()
                        .map(|s| s.max_key.as_slice())
                        .max()
                        .map(<[u8]>::to_vec);
                    p.immutables.first().map(|m| (p.id, p.range.clone(), m.clone(), top))
                })
                .min_by_key(|(_, _, m, _)| m.max_seq())
        };
        let Some((part, part_range, mem, top)) = next else {
            return Ok(());
        };
        if table.dropped.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut new_segments: Vec<SegmentMeta> = Vec::new();
        if mem.has_key_in(&part_range) {
            let schema = table.schema.clone();
            let seq_range = (mem.min_seq().unwrap_or(0), mem.max_seq());
            let opts = storage.segment_options;
            let cuts = pieces(top.as_deref(), &mem, &part_range);
            // A file is about a fifth of its keys' memtable memory (15 MB
            // of 67 MB in the index bench: compressed columns against
            // keys, slots and slack): a quarter set aside rarely grows.
            let total_keys: usize = cuts.iter().map(|(_, n)| n).sum();
            let bytes_per_key = mem.approx_bytes() / 4 / total_keys.max(1);
            // Reserve the ids: the next manifest version records the
            // counter; a crash before that leaves orphans that the next open
            // deletes.
            let mut ids = Vec::with_capacity(cuts.len());
            for _ in &cuts {
                ids.push(table.reserve_segment_id().await);
            }
            let path = |id: u64| format!("tables/{}/segments/{:020}.parquet", table.id, id);
            let paths: Vec<String> = ids.iter().map(|&id| path(id)).collect();
            let (store, rt, mem2) = (storage.clone(), tokio::runtime::Handle::current(), mem.clone());
            let written = tokio::task::spawn_blocking(move || {
                let mut written = Vec::with_capacity(cuts.len());
                for ((range, keys), path) in cuts.iter().zip(&paths) {
                    // A large file streams to the store as it is encoded,
                    // as compaction outputs do, rather than being held whole
                    // beside the memtable it encodes (33 MB of a 2M-row
                    // load's heap peak).
                    let sink = SpillSink::new(&store, path, &rt, bytes_per_key * keys);
                    let mut b = SegmentBuilder::with_sink(sink, &schema, mem2.columns(), opts, *keys)?;
                    // Frozen: no more writes come, so fold straight from it.
                    mem2.for_each_changed(range, None, 0, u64::MAX, |k, w| b.push_writes(k, w).map(|()| true))?;
                    let (sink, meta) = b.finish_into(seq_range)?;
                    written.push((sink.finish()?, meta));
                }
                Ok::<_, Error>(written)
            })
            .await
            .map_err(|e| Error::io("flush task", e))??;
            // The pieces of one memtable form one run (a single segment is
            // a run of its own, as flushes always wrote them).
            let run = (ids.len() > 1).then_some(ids[0]);
            for ((size, meta), id) in written.into_iter().zip(ids) {
                table.stats.flush_bytes.fetch_add(size, Ordering::Relaxed);
                new_segments.push(SegmentMeta {
                    id,
                    path: path(id),
                    size_bytes: size,
                    run,
                    ..meta
                });
            }
            crate::crash_point::hit("flush.segment_written");
        }
        let committed = table
            .commit_manifest(
                storage,
                "flush.committed",
                |next| {
                    // The partition was split or merged meanwhile: the
                    // memtable is the new partitions' to flush.
                    let Some(p) = next.partition_mut(part) else {
                        return Ok(false);
                    };
                    // Every write of the partition below its oldest
                    // memtable left is now in a segment.
                    let floor = table
                        .state
                        .read()
                        .part_by_id(part)
                        .into_iter()
                        .flat_map(|p| p.memtables())
                        .filter(|m| !Arc::ptr_eq(m, &mem))
                        .filter_map(|m| m.min_seq())
                        .min()
                        .map_or(u64::MAX, |s| s - 1);
                    p.flushed_seq = p.flushed_seq.max(mem.max_seq().min(floor));
                    p.segments.extend(new_segments.iter().map(|m| m.id));
                    next.segments.extend(new_segments.iter().cloned());
                    table.stats.flushes.fetch_add(1, Ordering::Relaxed);
                    Ok(true)
                },
                |st| {
                    let Some(p) = st.part_by_id_mut(part) else {
                        return;
                    };
                    p.immutables.retain(|m| !Arc::ptr_eq(m, &mem));
                    if !new_segments.is_empty() {
                        let mut segs = (*p.segments).clone();
                        segs.extend(new_segments.iter().map(|m| storage.open_segment(m.clone())));
                        p.segments = Arc::new(segs);
                    }
                },
            )
            .await?;
        if !committed {
            for m in &new_segments {
                let _ = storage
                    .store
                    .delete(&object_store::path::Path::from(m.path.as_str()))
                    .await;
            }
            // The partition's new layout is not installed yet: the
            // split or merge schedules the flushes its partitions need.
            return Ok(());
        }
        flushed();
    }
}

/// A memtable of fewer keys is flushed whole.
const SPLIT_KEYS: usize = 16;

/// The key ranges a flush writes `mem` into, each a segment, with their key
/// counts, in key order.
///
/// Keys written in ascending order by several writers reach the memtable
/// slightly out of order: a write in flight when the previous memtable
/// froze lands in this one, at or below `top`, the highest key of the
/// table's segments (`None`: it has none). When some keys do, and they are
/// at most an eighth of the memtable's, the memtable is cut at `top`, and
/// the last keys above it, four times as many as lay below (at least a
/// sixty-fourth of them, at most a quarter), make a tail piece: the next
/// flush's crossing writes then overlap only that tail. Otherwise (no key
/// below `top`, or keys written anywhere) the memtable is one segment.
fn pieces(top: Option<&[u8]>, mem: &Memtable, within: &KeyRange) -> Vec<(KeyRange, usize)> {
    let n = mem.key_count_in(within, usize::MAX);
    let whole = vec![(within.clone(), n)];
    let Some(top) = top.filter(|_| n >= SPLIT_KEYS) else {
        return whole;
    };
    let above = key_successor(top);
    let low = KeyRange {
        lo: Vec::new(),
        hi: Some(above.clone()),
    }
    .intersect(within);
    // Counted only as far as it matters: past an eighth, one piece.
    let below = mem.key_count_in(&low, n / 8 + 1);
    if below == 0 || below * 8 > n {
        return whole;
    }
    let high = n - below;
    let tail = (4 * below).max(high / 64).min(high / 4);
    match (tail > 0).then(|| mem.nth_key_in(within, n - tail)).flatten() {
        Some(tail_start) => vec![
            (low, below),
            (
                KeyRange {
                    lo: above,
                    hi: Some(tail_start.clone()),
                },
                high - tail,
            ),
            (
                KeyRange {
                    lo: tail_start,
                    hi: within.hi.clone(),
                },
                tail,
            ),
        ],
        None => vec![
            (low, below),
            (
                KeyRange {
                    lo: above,
                    hi: within.hi.clone(),
                },
                high,
            ),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::row::Mutation;

    fn mem_of(keys: impl Iterator<Item = u32>) -> Memtable {
        let mem = Memtable::new();
        for (seq, k) in keys.enumerate() {
            let m = Mutation::Put {
                row_ts: None,
                cells: vec![("n".into(), 1, crate::model::types::Value::Integer(k.into()))],
            };
            mem.insert(k.to_be_bytes().to_vec(), seq as u64 + 1, m);
        }
        mem
    }

    fn cuts(top: Option<u32>, mem: &Memtable) -> Vec<(Option<u32>, Option<u32>, usize)> {
        let top = top.map(|t| t.to_be_bytes().to_vec());
        let key = |k: &[u8]| (k.len() == 4).then(|| u32::from_be_bytes(k.try_into().unwrap()));
        pieces(top.as_deref(), mem, &KeyRange::all())
            .into_iter()
            .map(|(r, n)| {
                // Each range holds exactly the keys it says.
                assert_eq!(mem.key_count_in(&r, usize::MAX), n);
                (key(&r.lo), r.hi.as_deref().and_then(key), n)
            })
            .collect()
    }

    #[test]
    fn keys_below_the_top_are_cut_off_with_a_tail() {
        // Writes in flight at the last freeze: the keys at or below the top
        // make a piece of their own (the top's successor is 5 bytes, shown
        // as `None`), and the last 4 x 5 keys a tail.
        let mem = mem_of((95..100).chain(200..360));
        assert_eq!(
            cuts(Some(99), &mem),
            vec![(None, None, 5), (None, Some(340), 140), (Some(340), None, 20)]
        );
        // One key below: the tail is a sixty-fourth of the keys above.
        let mem = mem_of((99..100).chain(200..456));
        assert_eq!(
            cuts(Some(99), &mem),
            vec![(None, None, 1), (None, Some(452), 252), (Some(452), None, 4)]
        );
        // Nothing below the top, an empty table, keys written anywhere, or
        // too few keys: one segment.
        for (top, mem) in [
            (Some(99), mem_of(200..360)),
            (None, mem_of(0..200)),
            (Some(99), mem_of((0..40).chain(200..360))),
            (Some(99), mem_of((95..100).chain(200..205))),
        ] {
            let n = mem.key_count();
            assert_eq!(cuts(top, &mem), vec![(None, None, n)]);
        }
    }
}
