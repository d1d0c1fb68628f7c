//! Compaction: segments merged into non-overlapping sorted runs, dropping
//! what no read can see any more.
//!
//! A table's segments form **sorted runs**, oldest first: a flushed segment
//! is a run of its own; the outputs of one compaction form one run (they do
//! not overlap each other). Reads merge only where runs overlap, so fewer
//! runs mean cheaper reads; merging costs writes. The automatic policy is
//! size-tiered: once `trigger_runs` runs of similar size (within 2x) have
//! piled up at the newest end, it merges them, together with the next older
//! group of similar runs if the output would complete it. Each byte is then
//! rewritten about log_trigger(table size / flush size) times. Past
//! `max_runs` runs it also merges runs that are not alike.
//!
//! A compaction merges a contiguous span of the list that ends at the
//! newest segment (segments flushed while it runs are newer still and stay
//! after its outputs), so the order between its inputs and every other
//! segment is kept. What it may drop:
//! - versions past the TTL and beyond `max_versions`, always: no older
//!   source can make them visible again (after that, raising
//!   the option does not bring them back);
//! - tombstones, deleted rows and the "replaces older sources" mark of a
//!   key only when no segment older than the inputs covers that key;
//!   otherwise they stay, or deleted data would come back.
//!
//! An automatic compaction rewrites only the segments of its span that
//! overlap another one of the span, group by group; a segment that
//! overlaps none joins the output run as it is, in the manifest alone
//! (RocksDB's "trivial move", per segment). Keys written in ascending
//! order are then flushed, and compacted, almost without rewriting (see
//! `crate::flush`). What a carried segment holds past the TTL or
//! `max_versions` stays on disk until a compaction rewrites it (reads
//! never show it); a full compaction rewrites every segment.
//!
//! Inputs are merged column-wise ([`merge`]): keys one input alone
//! holds are copied without decoding, the rest folded with the rules reads
//! use. Output rows stream into a segment builder whose file streams to the
//! object store as a multipart upload, so memory is a batch per input, the
//! row group being encoded and a few upload parts, whatever the output
//! size (`DbOptions::compaction_segment_bytes`). The merge holds no lock
//! that flushes or writes wait for: only the commit (a manifest version
//! swapping inputs for outputs) takes the table's manifest lock. A failure
//! before the commit deletes the outputs written so far and leaves the
//! table as it was. On a local disk a compaction starts only with room for
//! its inputs' size besides `keep_free_bytes`, so it cannot fill the disk
//! that flushes need.
//!
//! Parts: [`policy`] picks the span, [`merge`] merges it under the rules of
//! [`garbage`], [`output`] writes the results; the commit goes through
//! `state::commit`. See `docs/architecture.md`.

mod align;
mod garbage;
mod merge;
mod output;
mod policy;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use object_store::ObjectStoreExt;

use self::garbage::{GcRules, covered};
use self::merge::ColumnarMerge;
use self::output::OutputWriter;
pub(crate) use self::policy::{Pick, Policy, Rewrite, choose};
use crate::error::{Error, Result};
use crate::model::schema::TableOptions;
use crate::model::types::TypeSet;
use crate::segment::{Segment, SegmentMeta};
use crate::state::{TableInner, runs};
use crate::storage::Storage;
/// How one compaction is run.
pub(crate) struct CompactParams<'a> {
    pub storage: &'a Storage,
    pub now_ms: i64,
    /// Output segments are cut past this size.
    pub output_bytes: usize,
    /// When the automatic policy merges; [`Pick::CatchUp`] merges only
    /// past `policy.max_runs` runs.
    pub policy: Policy,
    /// Set when the database closes: the compaction stops and cleans up.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Disk space a compaction leaves free for flushes and WAL appends: it
    /// starts only if its inputs' size fits besides this (on a local disk).
    pub keep_free_bytes: u64,
}

/// Runs compactions of `table`'s partitions: a manual pick compacts each
/// partition as it says; an automatic one compacts the first partition
/// (most sorted runs first) that needs it. Returns false when there was
/// nothing to do, or every compaction was given up (cancelled, table
/// dropped, options or partitions changed meanwhile) and left no trace.
pub(crate) async fn compact(table: &Arc<TableInner>, pick: Pick, p: &CompactParams<'_>) -> Result<bool> {
    let mut parts: Vec<(u64, usize)> = {
        let st = table.state.read();
        st.parts.iter().map(|x| (x.id, runs(&x.segments).len())).collect()
    };
    let manual = matches!(pick, Pick::Full | Pick::Newest(_));
    if !manual {
        parts.sort_by_key(|(_, runs)| std::cmp::Reverse(*runs));
    }
    let mut any = false;
    for (part, _) in parts {
        if compact_part(table, part, pick, p).await? {
            any = true;
            if !manual {
                break;
            }
        }
    }
    Ok(any)
}

/// Runs one compaction of partition `part` of `table`.
async fn compact_part(table: &Arc<TableInner>, part: u64, pick: Pick, p: &CompactParams<'_>) -> Result<bool> {
    // Manual picks wait for running compactions and exclude new ones;
    // automatic ones may run two at a time, on different runs.
    let manual = matches!(pick, Pick::Full | Pick::Newest(_));
    let (_exclusive, _shared) = if manual {
        (Some(table.compaction.write().await), None)
    } else {
        (None, Some(table.compaction.read().await))
    };
    if table.is_archived() {
        // Its segments are the archive's objects: never rewritten.
        return Ok(false);
    }
    let options = *table.options.read();
    let cutoff = options.ttl_cutoff_ms(p.now_ms);
    let (segs, range, (span, rewrite), _busy) = {
        let mut busy = table.compacting.lock();
        let (segs, range, shared) = {
            let st = table.state.read();
            let Some(x) = st.part_by_id(part) else {
                return Ok(false);
            };
            (x.segments.clone(), x.range.clone(), !x.owns_its_sources())
        };
        // Runs a running compaction merges are not free, nor older ones
        // (outputs replace inputs in place, so spans must stay apart).
        let free = segs
            .iter()
            .rposition(|s| busy.contains(&s.meta.id))
            .map_or(0, |i| i + 1);
        let span = match pick {
            // Segments a split left shared are rewritten whole first, so
            // that the partition owns its files (and may merge again).
            _ if shared && busy.is_empty() && !segs.is_empty() => Some((0..segs.len(), Rewrite::All)),
            _ if shared => None,
            Pick::Full | Pick::Newest(_) => choose(&segs, pick, p.policy, cutoff),
            Pick::CatchUp if runs(&segs).len() <= p.policy.max_runs => None,
            Pick::Auto | Pick::CatchUp => choose(&segs[free..], pick, p.policy, cutoff)
                .map(|(r, rewrite)| (r.start + free..r.end + free, rewrite)),
        };
        let Some(span) = span else {
            return Ok(false);
        };
        let ids: Vec<u64> = segs[span.0.clone()].iter().map(|s| s.meta.id).collect();
        busy.extend(ids.iter().copied());
        (
            segs,
            range,
            span,
            BusyIds {
                table: table.clone(),
                ids,
            },
        )
    };
    let inputs: Vec<Arc<Segment>> = segs[span.clone()].to_vec();
    let groups = match rewrite {
        Rewrite::All => vec![(0..inputs.len()).collect()],
        Rewrite::Overlapping => {
            let spans: Vec<(&[u8], &[u8])> = inputs
                .iter()
                .map(|s| (s.min_key.as_slice(), s.max_key.as_slice()))
                .collect();
            policy::overlap_groups(&spans)
        }
    };
    let (merged, carried): (Vec<Vec<usize>>, Vec<Vec<usize>>) =
        groups.into_iter().partition(|g| g.len() > 1 || rewrite == Rewrite::All);
    let carried: Vec<Arc<Segment>> = carried.iter().map(|g| inputs[g[0]].clone()).collect();
    // The outputs are at most the merged inputs' size; they must not take
    // the space acknowledged writes need to reach a segment.
    let input_bytes = merged.iter().flatten().map(|&i| inputs[i].meta.size_bytes).sum();
    let _room = p.storage.reserve_for_compaction(input_bytes, p.keep_free_bytes)?;
    // One run for the outputs and the segments carried into it; any id no
    // other run has will do.
    let run = table.reserve_segment_id().await;
    let older = covered(&segs[..span.start]);
    let mut outputs: Vec<SegmentMeta> = Vec::new();
    let mut result = Ok(true);
    for group in &merged {
        let group: Vec<Arc<Segment>> = group.iter().map(|&i| inputs[i].clone()).collect();
        result = merge(
            table,
            &group,
            run,
            older.clone(),
            &options,
            cutoff,
            &range,
            p,
            &mut outputs,
        )
        .await;
        if !matches!(result, Ok(true)) {
            break;
        }
    }
    let committed = match result {
        Ok(true) => commit(table, part, &inputs, &carried, run, &options, &mut outputs, p.storage).await,
        other => other,
    };
    if !matches!(committed, Ok(true)) {
        // Nothing references the outputs: remove them (an open also deletes
        // files no manifest names, should this fail). Carried segments are
        // not outputs: they stay where the manifest has them.
        for m in &outputs {
            let _ = p
                .storage
                .store
                .delete(&object_store::path::Path::from(m.path.as_str()))
                .await;
        }
    }
    committed
}

/// Marks segments as being merged until dropped (after the commit, or on
/// failure).
struct BusyIds {
    table: Arc<TableInner>,
    ids: Vec<u64>,
}

impl Drop for BusyIds {
    fn drop(&mut self) {
        let mut busy = self.table.compacting.lock();
        for id in &self.ids {
            busy.remove(id);
        }
    }
}

/// Merges `inputs` into new segment files (listed in `outputs` as they are
/// written). False: cancelled.
#[allow(clippy::too_many_arguments)]
async fn merge(
    table: &Arc<TableInner>,
    inputs: &[Arc<Segment>],
    run: u64,
    older: Vec<(Vec<u8>, Vec<u8>)>,
    options: &TableOptions,
    cutoff: i64,
    range: &crate::model::key::KeyRange,
    p: &CompactParams<'_>,
    outputs: &mut Vec<SegmentMeta>,
) -> Result<bool> {
    let mut columns: Vec<(String, TypeSet)> = Vec::new();
    for s in inputs {
        for (name, types) in &s.meta.columns {
            match columns.binary_search_by(|(n, _)| n.cmp(name)) {
                Ok(i) => columns[i].1 = TypeSet(columns[i].1.0 | types.0),
                Err(i) => columns.insert(i, (name.clone(), *types)),
            }
        }
    }
    let gc = GcRules {
        cutoff,
        max_versions: options.max_versions,
        older,
    };
    let merger = ColumnarMerge::open(&table.schema, inputs, columns.clone(), gc, range).await?;
    let writer = OutputWriter {
        table: table.clone(),
        storage: p.storage.clone(),
        columns,
        expected_keys: inputs.iter().map(|s| s.meta.num_keys as usize).sum(),
        output_bytes: p.output_bytes,
        run,
        seq_range: (
            inputs.iter().map(|s| s.meta.min_seq).min().unwrap_or(0),
            inputs.iter().map(|s| s.meta.max_seq).max().unwrap_or(0),
        ),
        cancel: p.cancel.clone(),
    };
    // The merge is CPU work: a thread of its own runs it, reading and
    // writing through the runtime's handle. It is named, so that `top -H`
    // and profiles tell compaction from the writers and flushes.
    let rt = tokio::runtime::Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("cellar-compact".into())
        .spawn(move || {
            let mut written = Vec::new();
            let result = writer.run(merger, &rt, &mut written);
            let _ = tx.send((result, written));
        })
        .map_err(|e| Error::io("starting a compaction thread", e))?;
    let (result, written) = rx
        .await
        .map_err(|_| Error::io("compaction thread", "it stopped without a result (a panic)"))?;
    outputs.extend(written);
    result
}

/// What takes the inputs' place in a compaction's commit.
enum Placed {
    /// An output file (its index among the outputs).
    Written(usize),
    /// An input carried into the output run as it is.
    Carried(Arc<Segment>),
}

/// Swaps `inputs` for `outputs` and the `carried` inputs, all in run
/// `run` and in key order, in a new manifest version, then in memory.
/// False (nothing changed) when the table was dropped or its options were
/// changed since the merge started (it may have dropped versions the new
/// options show; the next compaction redoes it).
#[allow(clippy::too_many_arguments)]
async fn commit(
    table: &Arc<TableInner>,
    part: u64,
    inputs: &[Arc<Segment>],
    carried: &[Arc<Segment>],
    run: u64,
    options: &TableOptions,
    outputs: &mut [SegmentMeta],
    storage: &Storage,
) -> Result<bool> {
    crate::crash_point::hit("compaction.outputs_written");
    let input_ids: HashSet<u64> = inputs.iter().map(|s| s.meta.id).collect();
    let carried_ids: HashSet<u64> = carried.iter().map(|s| s.meta.id).collect();
    // What takes the inputs' place, in key order (the groups do not
    // overlap, nor do the outputs of one group): new files, or segments
    // carried over as they are.
    let mut placed: Vec<(Vec<u8>, Placed)> = outputs
        .iter()
        .enumerate()
        .map(|(i, m)| (m.key_bounds().0, Placed::Written(i)))
        .chain(carried.iter().map(|s| (s.min_key.clone(), Placed::Carried(s.clone()))))
        .collect();
    placed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut dropped: Vec<u64> = Vec::new();
    let kept = &mut dropped;
    let committed = table
        .commit_manifest(
            storage,
            "compaction.committed",
            |next| {
                if table.dropped.load(Ordering::Acquire) || *table.options.read() != *options {
                    return Ok(false);
                }
                // Split or merged meanwhile: the new partitions compact.
                let Some(x) = next.partition_mut(part) else {
                    return Ok(false);
                };
                let pos = x
                    .segments
                    .iter()
                    .position(|s| input_ids.contains(s))
                    .ok_or_else(|| Error::corruption("compaction inputs are missing from the manifest"))?;
                x.segments.retain(|s| !input_ids.contains(s));
                let metas: Vec<SegmentMeta> = placed
                    .iter()
                    .map(|(_, p)| match p {
                        Placed::Written(i) => outputs[*i].clone(),
                        Placed::Carried(s) => SegmentMeta {
                            run: Some(run),
                            ..s.meta.clone()
                        },
                    })
                    .collect();
                x.segments.splice(pos..pos, metas.iter().map(|m| m.id));
                // Carried segments change their run; inputs another
                // partition still names stay.
                let metas: std::collections::HashMap<u64, SegmentMeta> = metas.into_iter().map(|m| (m.id, m)).collect();
                for s in next.segments.iter_mut() {
                    if let Some(m) = metas.get(&s.id) {
                        *s = m.clone();
                    }
                }
                next.segments
                    .extend(outputs.iter().filter(|o| !carried_ids.contains(&o.id)).cloned());
                kept.extend(next.drop_unnamed_segments());
                let read: u64 = inputs
                    .iter()
                    .filter(|s| !carried_ids.contains(&s.meta.id))
                    .map(|s| s.meta.size_bytes)
                    .sum();
                let moved: u64 = carried.iter().map(|s| s.meta.size_bytes).sum();
                table.stats.compaction_read_bytes.fetch_add(read, Ordering::Relaxed);
                table.stats.compaction_moved_bytes.fetch_add(moved, Ordering::Relaxed);
                table.stats.compactions.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            },
            |st| {
                let Some(st) = st.part_by_id_mut(part) else {
                    return;
                };
                // The outputs take the place of the first input.
                let mut segs: Vec<Arc<Segment>> = Vec::with_capacity(st.segments.len());
                let mut done = false;
                for s in st.segments.iter() {
                    if !input_ids.contains(&s.meta.id) {
                        segs.push(s.clone());
                    } else if !done {
                        segs.extend(placed.iter().map(|(_, p)| match p {
                            Placed::Written(i) => storage.open_segment(outputs[*i].clone()),
                            Placed::Carried(s) => {
                                s.join_run(run);
                                s.clone()
                            }
                        }));
                        done = true;
                    }
                }
                st.segments = Arc::new(segs);
            },
        )
        .await?;
    if committed {
        // Inputs no partition names any more are deleted once the last
        // reader holding them lets go.
        for seg in inputs.iter().filter(|s| dropped.contains(&s.meta.id)) {
            seg.mark_obsolete();
        }
    }
    Ok(committed)
}
