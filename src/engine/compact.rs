//! Full compaction: every segment of a table merged into new, non-
//! overlapping segments, dropping what no read can see any more.
//!
//! Because the merge covers every segment (nothing older exists outside
//! it), it may drop tombstones, replaced and deleted rows, versions past
//! the TTL and versions beyond `max_versions`. After that, raising the TTL
//! or `max_versions` does not bring those versions back (SPEC section 2).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::flush::{FlushEnv, put_durable, sync_object};
use super::scan::MergeScan;
use super::table::{Snapshot, TableInner};
use crate::error::Result;
use crate::key::KeyRange;
use crate::row::{ColumnState, RowState};
use crate::schema::TableOptions;
use crate::segment::{Segment, SegmentMeta, write_segment};

/// Merges all segments of `table` (call after a flush). Holds the table's
/// manifest lock, so flushes of this table wait; writes go on.
pub(crate) async fn compact_all(
    env: &FlushEnv,
    table: &Arc<TableInner>,
    now_ms: i64,
    output_bytes: usize,
) -> Result<()> {
    let mut manifest = table.manifest.lock().await;
    let inputs = table.state.read().segments.clone();
    if inputs.is_empty() {
        return Ok(());
    }
    let options = *table.options.read();
    let snap = Snapshot {
        seq: u64::MAX,
        memtables: Vec::new(),
        segments: inputs.clone(),
        options,
    };
    let mut scan = MergeScan::new(&snap, KeyRange::all(), false, None);
    let mut next = manifest.1.clone();
    let min_seq = inputs.iter().map(|s| s.meta.min_seq).min().unwrap_or(0);
    let max_seq = inputs.iter().map(|s| s.meta.max_seq).max().unwrap_or(0);
    let mut outputs: Vec<SegmentMeta> = Vec::new();
    let mut pending: Vec<(Vec<u8>, RowState)> = Vec::new();
    let mut pending_bytes = 0usize;
    loop {
        let item = scan.next().await?;
        let done = item.is_none();
        if let Some((key, st)) = item
            && let Some(st) = collect_garbage(st, now_ms, &options)
        {
            pending_bytes += approx_state_bytes(&key, &st);
            pending.push((key, st));
        }
        if (done && !pending.is_empty()) || pending_bytes >= output_bytes {
            let states = std::mem::take(&mut pending);
            pending_bytes = 0;
            let schema = table.schema.clone();
            let opts = env.segment_options;
            let (bytes, mut meta) =
                tokio::task::spawn_blocking(move || write_segment(&schema, &states, (min_seq, max_seq), opts))
                    .await
                    .map_err(|e| crate::Error::io("compaction task", e))??;
            meta.id = next.next_segment_id;
            meta.path = format!("tables/{}/segments/{:020}.parquet", table.id, meta.id);
            next.next_segment_id += 1;
            table
                .stats
                .compaction_bytes
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            put_durable(env, &meta.path, bytes).await?;
            outputs.push(meta);
        }
        if done {
            break;
        }
    }
    // Segments flushed meanwhile are newer than every input: keep them after.
    let input_ids: Vec<u64> = inputs.iter().map(|s| s.meta.id).collect();
    next.segments.retain(|s| !input_ids.contains(&s.id));
    let newer = std::mem::take(&mut next.segments);
    next.segments = outputs.clone();
    next.segments.extend(newer);
    let version = manifest.0 + 1;
    table.manifest_log.commit(&*env.store, version, &next).await?;
    sync_object(env, table.manifest_log.path(version).as_ref()).await?;
    *manifest = (version, next);
    {
        let mut st = table.state.write();
        let mut segs: Vec<Arc<Segment>> = outputs
            .into_iter()
            .map(|m| Arc::new(Segment::new(m, env.store.clone(), env.local_root.as_deref())))
            .collect();
        segs.extend(st.segments.iter().filter(|s| !input_ids.contains(&s.meta.id)).cloned());
        st.segments = Arc::new(segs);
    }
    // Inputs are deleted once the last reader holding them lets go.
    for seg in inputs.iter() {
        seg.mark_obsolete();
    }
    table.stats.compactions.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// The state with everything invisible removed, or `None` when nothing
/// visible is left. Only valid when no older source exists.
fn collect_garbage(st: RowState, now_ms: i64, opts: &TableOptions) -> Option<RowState> {
    let cutoff = opts.ttl_cutoff_ms(now_ms);
    let row_ts = st.row_ts.filter(|ts| *ts >= cutoff);
    let mut columns = std::collections::BTreeMap::new();
    for (name, col) in st.columns {
        let versions: Vec<_> = col
            .versions
            .into_iter()
            .take(opts.max_versions as usize)
            .take_while(|(v, _)| *v >= cutoff)
            .collect();
        if !versions.is_empty() {
            columns.insert(
                name,
                ColumnState {
                    versions,
                    delete_all: false,
                    deleted: Vec::new(),
                },
            );
        }
    }
    if columns.is_empty() && row_ts.is_none() {
        return None;
    }
    Some(RowState {
        seq: st.seq,
        replace: false,
        row_ts,
        columns,
    })
}

fn approx_state_bytes(key: &[u8], st: &RowState) -> usize {
    key.len()
        + 64
        + st.columns
            .iter()
            .map(|(n, c)| n.len() + c.versions.iter().map(|(_, v)| 24 + v.data_len()).sum::<usize>())
            .sum::<usize>()
}
