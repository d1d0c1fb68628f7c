//! Flush: a frozen memtable becomes a segment, then a manifest version.
//!
//! Order matters for crash safety: (1) the segment file is written and
//! made durable, (2) a manifest version naming it with the new
//! `flushed_seq` is committed, (3) the memtable is swapped for the segment
//! in memory, (4) the committer is told so WAL files can be deleted. A crash
//! before (2) leaves an unreferenced file (ignored) and the WAL replays the
//! writes; after (2), replay skips them.
//!
//! Invariant: a memtable leaves the table's state only after the manifest
//! naming its segment is durable, so every write is always in a memtable,
//! a committed segment, or both. See `docs/architecture.md`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::segment::SegmentBuilder;
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
        let Some(mem) = table.state.read().immutables.first().cloned() else {
            return Ok(());
        };
        if table.dropped.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut new_segment = None;
        if !mem.is_empty() {
            let schema = table.schema.clone();
            let seq_range = (mem.min_seq().unwrap_or(0), mem.max_seq());
            let opts = storage.segment_options;
            let mem2 = mem.clone();
            // Reserve an id: the next manifest version records the counter;
            // a crash before that leaves an orphan that the next open deletes.
            let id = table.reserve_segment_id().await;
            let path = format!("tables/{}/segments/{:020}.parquet", table.id, id);
            let (store, rt, path2) = (storage.clone(), tokio::runtime::Handle::current(), path.clone());
            let (size, mut meta) = tokio::task::spawn_blocking(move || {
                // A large file streams to the store as it is encoded, as
                // compaction outputs do, rather than being held whole
                // beside the memtable it encodes (33 MB of a 2M-row load's
                // heap peak).
                let sink = SpillSink::new(&store, &path2, &rt);
                // Frozen: no more writes come, so fold straight from it.
                let mut b = SegmentBuilder::with_sink(sink, &schema, mem2.columns(), opts, mem2.key_count())?;
                mem2.for_each_key(|k, w| b.push_writes(k, w))?;
                let (sink, meta) = b.finish_into(seq_range)?;
                Ok::<_, Error>((sink.finish()?, meta))
            })
            .await
            .map_err(|e| Error::io("flush task", e))??;
            meta.id = id;
            meta.path = path;
            meta.size_bytes = size;
            crate::crash_point::hit("flush.segment_written");
            table.stats.flush_bytes.fetch_add(size, Ordering::Relaxed);
            new_segment = Some(meta);
        }
        table
            .commit_manifest(
                storage,
                "flush.committed",
                |next| {
                    next.flushed_seq = next.flushed_seq.max(mem.max_seq());
                    if let Some(meta) = &new_segment {
                        next.segments.push(meta.clone());
                    }
                    table.stats.flushes.fetch_add(1, Ordering::Relaxed);
                    Ok(true)
                },
                |st| {
                    st.immutables.retain(|m| !Arc::ptr_eq(m, &mem));
                    if let Some(meta) = new_segment.clone() {
                        let mut segs = (*st.segments).clone();
                        segs.push(storage.open_segment(meta));
                        st.segments = Arc::new(segs);
                    }
                },
            )
            .await?;
        flushed();
    }
}
