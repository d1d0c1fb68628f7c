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
//!   source can make them visible again (SPEC section 2: after that, raising
//!   the option does not bring them back);
//! - tombstones, deleted rows and the "replaces older sources" mark of a
//!   key only when no segment older than the inputs covers that key;
//!   otherwise they stay, or deleted data would come back.
//!
//! Inputs are merged column-wise ([`super::merge`]): keys one input alone
//! holds are copied without decoding, the rest folded with the rules reads
//! use. Output rows stream into a segment builder whose file streams to the
//! object store as a multipart upload, so memory is a batch per input, the
//! row group being encoded and a few upload parts, whatever the output
//! size (`DbOptions::compaction_segment_bytes`). The merge holds no lock
//! that flushes or writes wait for: only the commit (a manifest version
//! swapping inputs for outputs) takes the table's manifest lock. A failure
//! before the commit deletes the outputs written so far and leaves the
//! table as it was.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use object_store::ObjectStoreExt;

use super::flush::{FlushEnv, UploadSink};
use super::merge::{ColumnarMerge, GcRules};
use super::table::TableInner;
use crate::error::{Error, Result};
use crate::row::{ColumnState, RowState};
use crate::schema::TableOptions;
use crate::segment::format::TypeSet;
use crate::segment::{Segment, SegmentBuilder, SegmentMeta};

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

/// How one compaction is run.
pub(crate) struct CompactParams<'a> {
    pub env: &'a FlushEnv,
    pub now_ms: i64,
    /// Output segments are cut past this size.
    pub output_bytes: usize,
    /// When the automatic policy merges; [`Pick::CatchUp`] merges only
    /// past `policy.max_runs` runs.
    pub policy: Policy,
    /// Set when the database closes: the compaction stops and cleans up.
    pub cancel: Option<Arc<AtomicBool>>,
}

/// The runs of a segment list (oldest first) as index spans.
pub(crate) fn runs(segs: &[Arc<Segment>]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        match out.last_mut() {
            Some(r) if segs[r.start].meta.run_id() == s.meta.run_id() => r.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
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

/// The span of `segs` to merge, if any.
pub(crate) fn choose(segs: &[Arc<Segment>], pick: Pick, policy: Policy, cutoff: i64) -> Option<Range<usize>> {
    if segs.is_empty() {
        return None;
    }
    let runs = runs(segs);
    let from_run = |k: usize| runs[runs.len() - k].start..segs.len();
    match pick {
        Pick::Full => Some(0..segs.len()),
        Pick::Newest(n) => (n >= 1).then(|| from_run(n.min(runs.len()))),
        Pick::Auto | Pick::CatchUp => {
            // A segment whose every value has expired: a full merge drops
            // it (older sources may hold what its tombstones mask).
            if cutoff > i64::MIN
                && segs
                    .iter()
                    .any(|s| s.meta.max_ts.is_some_and(|t| t > i64::MIN && t < cutoff))
            {
                return Some(0..segs.len());
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
            Some(from_run(k))
        }
    }
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

/// Sorted, disjoint key intervals (inclusive) covered by `segs`.
fn covered(segs: &[Arc<Segment>]) -> Vec<(Vec<u8>, Vec<u8>)> {
    merge_intervals(segs.iter().map(|s| (s.min_key.clone(), s.max_key.clone())).collect())
}

fn merge_intervals(mut v: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    v.sort();
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for (lo, hi) in v {
        match out.last_mut() {
            Some(last) if lo <= last.1 => {
                if hi > last.1 {
                    last.1 = hi;
                }
            }
            _ => out.push((lo, hi)),
        }
    }
    out
}

pub(crate) fn is_covered(intervals: &[(Vec<u8>, Vec<u8>)], key: &[u8]) -> bool {
    let i = intervals.partition_point(|(lo, _)| lo.as_slice() <= key);
    i > 0 && key <= intervals[i - 1].1.as_slice()
}

/// Runs one compaction of `table`. Returns false when there was nothing to
/// do, or the compaction was given up (cancelled, table dropped, options
/// changed meanwhile) and left no trace.
pub(crate) async fn compact(table: &Arc<TableInner>, pick: Pick, p: &CompactParams<'_>) -> Result<bool> {
    // Manual picks wait for running compactions and exclude new ones;
    // automatic ones may run two at a time, on different runs.
    let manual = matches!(pick, Pick::Full | Pick::Newest(_));
    let (_exclusive, _shared) = if manual {
        (Some(table.compaction.write().await), None)
    } else {
        (None, Some(table.compaction.read().await))
    };
    let options = *table.options.read();
    let cutoff = options.ttl_cutoff_ms(p.now_ms);
    let (segs, span, _busy) = {
        let mut busy = table.compacting.lock();
        let segs = table.state.read().segments.clone();
        // Runs a running compaction merges are not free, nor older ones
        // (outputs replace inputs in place, so spans must stay apart).
        let free = segs
            .iter()
            .rposition(|s| busy.contains(&s.meta.id))
            .map_or(0, |i| i + 1);
        let span = match pick {
            Pick::Full | Pick::Newest(_) => choose(&segs, pick, p.policy, cutoff),
            Pick::CatchUp if runs(&segs).len() <= p.policy.max_runs => None,
            Pick::Auto | Pick::CatchUp => {
                choose(&segs[free..], pick, p.policy, cutoff).map(|r| r.start + free..r.end + free)
            }
        };
        let Some(span) = span else {
            return Ok(false);
        };
        let ids: Vec<u64> = segs[span.clone()].iter().map(|s| s.meta.id).collect();
        busy.extend(ids.iter().copied());
        (
            segs,
            span,
            BusyIds {
                table: table.clone(),
                ids,
            },
        )
    };
    let inputs: Vec<Arc<Segment>> = segs[span.clone()].to_vec();
    let older = covered(&segs[..span.start]);
    let mut outputs: Vec<SegmentMeta> = Vec::new();
    let merged = merge(table, &inputs, older, &options, cutoff, p, &mut outputs).await;
    let committed = match merged {
        Ok(true) => commit(table, &inputs, &options, &mut outputs, p.env).await,
        Ok(false) => Ok(false),
        Err(e) => Err(e),
    };
    if !matches!(committed, Ok(true)) {
        // Nothing references the outputs: remove them (an open also deletes
        // files no manifest names, should this fail).
        for m in &outputs {
            let _ = p
                .env
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
async fn merge(
    table: &Arc<TableInner>,
    inputs: &[Arc<Segment>],
    older: Vec<(Vec<u8>, Vec<u8>)>,
    options: &TableOptions,
    cutoff: i64,
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
    let merger = ColumnarMerge::open(&table.schema, inputs, columns.clone(), gc).await?;
    let writer = OutputWriter {
        table: table.clone(),
        env: p.env.clone(),
        columns,
        expected_keys: inputs.iter().map(|s| s.meta.num_keys as usize).sum(),
        output_bytes: p.output_bytes,
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

/// The output being written, with its reserved id, path and run.
type OpenOutput = (SegmentBuilder<UploadSink>, (u64, String, u64));

/// Cuts merged rows into output segments and stores them.
struct OutputWriter {
    table: Arc<TableInner>,
    env: FlushEnv,
    columns: Vec<(String, TypeSet)>,
    expected_keys: usize,
    output_bytes: usize,
    seq_range: (u64, u64),
    cancel: Option<Arc<AtomicBool>>,
}

impl OutputWriter {
    /// Writes every output segment; each is listed in `written` before its
    /// file is stored, so a failure can delete it. False: cancelled.
    fn run(&self, merger: ColumnarMerge, rt: &tokio::runtime::Handle, written: &mut Vec<SegmentMeta>) -> Result<bool> {
        let mut builder = None;
        let result = self.write_outputs(merger, rt, written, &mut builder);
        if !matches!(result, Ok(true))
            && let Some((b, _)) = builder.as_mut()
        {
            // Failed or cancelled with an output half written.
            if let Some(sink) = b.sink_mut() {
                sink.abort();
            }
        }
        result
    }

    fn write_outputs(
        &self,
        mut merger: ColumnarMerge,
        rt: &tokio::runtime::Handle,
        written: &mut Vec<SegmentMeta>,
        builder: &mut Option<OpenOutput>,
    ) -> Result<bool> {
        let mut run: Option<u64> = None;
        loop {
            if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Acquire))
                || self.table.dropped.load(Ordering::Acquire)
            {
                return Ok(false);
            }
            let batch = merger.next_batch(rt)?;
            let done = batch.is_none();
            if let Some(batch) = batch {
                let (b, _) = match builder {
                    Some(b) => b,
                    None => {
                        // Reserve an id: the next manifest version records
                        // the counter; a crash before that leaves an orphan
                        // that the next open deletes.
                        let id = rt.block_on(async {
                            let mut m = self.table.manifest.lock().await;
                            m.1.next_segment_id += 1;
                            m.1.next_segment_id - 1
                        });
                        let path = format!("tables/{}/segments/{:020}.parquet", self.table.id, id);
                        // The file streams to the store as it is encoded:
                        // an output is never held whole in memory.
                        let sink = UploadSink::start(&self.env, &path, rt)?;
                        let b = SegmentBuilder::with_sink(
                            sink,
                            &self.table.schema,
                            self.columns.clone(),
                            self.env.segment_options,
                            self.expected_keys,
                        )?;
                        builder.insert((b, (id, path, *run.get_or_insert(id))))
                    }
                };
                b.push_batch(&batch)?;
            }
            if builder
                .as_ref()
                .is_some_and(|(b, _)| done || b.approx_bytes() >= self.output_bytes)
            {
                let (b, (id, path, run)) = builder.take().expect("checked above");
                let (sink, meta) = b.finish_into(self.seq_range)?;
                // Listed before the upload completes, so that a failure
                // from here on deletes the file.
                written.push(SegmentMeta {
                    id,
                    path,
                    run: Some(run),
                    ..meta
                });
                let size = sink.finish(&self.env)?;
                written.last_mut().expect("pushed above").size_bytes = size;
                self.table.stats.compaction_bytes.fetch_add(size, Ordering::Relaxed);
            }
            if done {
                return Ok(true);
            }
        }
    }
}

/// Swaps `inputs` for `outputs` in a new manifest version, then in memory.
/// False (nothing changed) when the table was dropped or its options were
/// changed since the merge started (it may have dropped versions the new
/// options show; the next compaction redoes it).
async fn commit(
    table: &Arc<TableInner>,
    inputs: &[Arc<Segment>],
    options: &TableOptions,
    outputs: &mut [SegmentMeta],
    env: &FlushEnv,
) -> Result<bool> {
    crate::crash_point::hit("compaction.outputs_written");
    let mut manifest = table.manifest.lock().await;
    if table.dropped.load(Ordering::Acquire) || *table.options.read() != *options {
        return Ok(false);
    }
    let input_ids: HashSet<u64> = inputs.iter().map(|s| s.meta.id).collect();
    let mut next = manifest.1.clone();
    let pos = next
        .segments
        .iter()
        .position(|s| input_ids.contains(&s.id))
        .ok_or_else(|| Error::corruption("compaction inputs are missing from the manifest"))?;
    next.segments.retain(|s| !input_ids.contains(&s.id));
    next.segments.splice(pos..pos, outputs.iter().cloned());
    let read: u64 = inputs.iter().map(|s| s.meta.size_bytes).sum();
    table.stats.compaction_read_bytes.fetch_add(read, Ordering::Relaxed);
    table.stats.compactions.fetch_add(1, Ordering::Relaxed);
    next.counters = table.stats.counters();
    let version = manifest.0 + 1;
    table
        .manifest_log
        .commit(&*env.store, env.local_root.as_deref(), version, &next)
        .await?;
    crate::crash_point::hit("compaction.committed");
    *manifest = (version, next);
    {
        let mut st = table.state.write();
        let mut segs: Vec<Arc<Segment>> = Vec::with_capacity(st.segments.len());
        let mut placed = false;
        for s in st.segments.iter() {
            if input_ids.contains(&s.meta.id) {
                if !placed {
                    segs.extend(outputs.iter().map(|m| {
                        Arc::new(Segment::new(
                            m.clone(),
                            env.store.clone(),
                            env.local_root.as_deref(),
                            env.verify_checksums,
                        ))
                    }));
                    placed = true;
                }
            } else {
                segs.push(s.clone());
            }
        }
        st.segments = Arc::new(segs);
    }
    // Inputs are deleted once the last reader holding them lets go.
    for seg in inputs {
        seg.mark_obsolete();
    }
    Ok(true)
}

/// The state with everything no read can see removed, or `None` when
/// nothing is left to record. `keep_tombstones`: an older segment outside
/// the merge may hold this key, so deletions and the "replaces older
/// sources" mark stay.
pub(crate) fn collect_garbage(st: RowState, cutoff: i64, max_versions: u32, keep_tombstones: bool) -> Option<RowState> {
    let row_ts = st.row_ts.filter(|ts| *ts >= cutoff);
    let mut columns = std::collections::BTreeMap::new();
    for (name, col) in st.columns {
        let versions: Vec<_> = col
            .versions
            .into_iter()
            .take(max_versions as usize)
            .take_while(|(v, _)| *v >= cutoff)
            .collect();
        let col = if keep_tombstones {
            ColumnState {
                versions,
                delete_all: col.delete_all,
                deleted: col.deleted,
            }
        } else {
            ColumnState {
                versions,
                delete_all: false,
                deleted: Vec::new(),
            }
        };
        if !col.versions.is_empty() || col.delete_all || !col.deleted.is_empty() {
            columns.insert(name, col);
        }
    }
    let replace = keep_tombstones && st.replace;
    if columns.is_empty() && row_ts.is_none() && !replace {
        return None;
    }
    Some(RowState {
        seq: st.seq,
        replace,
        row_ts,
        columns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Value;

    fn state(replace: bool, versions: &[i64], deleted: &[i64]) -> RowState {
        let mut st = RowState {
            seq: 1,
            replace,
            row_ts: None,
            columns: Default::default(),
        };
        st.columns.insert(
            "c".into(),
            ColumnState {
                versions: versions.iter().map(|v| (*v, Value::Integer(*v))).collect(),
                delete_all: false,
                deleted: deleted.to_vec(),
            },
        );
        st
    }

    #[test]
    fn garbage_rules_depend_on_older_sources() {
        // Beyond max_versions and expired versions go either way.
        let st = collect_garbage(state(false, &[30, 20, 10], &[]), 15, 3, true).unwrap();
        assert_eq!(st.columns["c"].versions.len(), 2);
        let st = collect_garbage(state(false, &[30, 20, 10], &[]), i64::MIN, 1, false).unwrap();
        assert_eq!(st.columns["c"].versions.len(), 1);
        // A version tombstone stays while an older source may hold the key.
        let st = collect_garbage(state(false, &[], &[5]), i64::MIN, 1, true).unwrap();
        assert_eq!(st.columns["c"].deleted, vec![5]);
        assert!(collect_garbage(state(false, &[], &[5]), i64::MIN, 1, false).is_none());
        // A deleted row (replace, nothing left) stays as a delete marker.
        let mut del = state(true, &[], &[]);
        del.columns.clear();
        assert!(collect_garbage(del.clone(), i64::MIN, 1, true).unwrap().replace);
        assert!(collect_garbage(del, i64::MIN, 1, false).is_none());
        // A replacing row whose values all expired still hides older ones.
        let st = collect_garbage(state(true, &[10], &[]), 20, 1, true).unwrap();
        assert!(st.replace && st.columns.is_empty());
    }

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

    #[test]
    fn covered_merges_intervals() {
        let iv = vec![
            (b"a".to_vec(), b"c".to_vec()),
            (b"b".to_vec(), b"d".to_vec()),
            (b"x".to_vec(), b"y".to_vec()),
        ];
        let out = merge_intervals(iv);
        assert_eq!(out.len(), 2);
        assert!(is_covered(&out, b"bb"));
        assert!(is_covered(&out, b"d"));
        assert!(!is_covered(&out, b"e"));
        assert!(!is_covered(&out, b"0"));
        assert!(is_covered(&out, b"x"));
    }
}
