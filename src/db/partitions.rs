//! Range partitions: splits, merges, the automatic policy, and what
//! `describe --partitions` and ComputeSplitPointsBySize report.
//!
//! A split or a merge is one manifest version: the partitions it replaces
//! leave it and the new ones enter, naming the same segments (a split's
//! halves both name the parent's, each reading its own keys of them). Once
//! that version is durable, the committer installs the same change in
//! memory between two rounds (`CommitMsg::Apply`), so no write is being
//! inserted while memtables change hands; until then reads and writes go
//! on against the old partitions, whose unflushed writes the change
//! carries over. A flush or compaction of a partition that left the
//! manifest meanwhile gives up (its partition is gone from the version
//! it would edit). A crash leaves the old version or the new one, whole;
//! the WAL's writes are put back into whichever partition holds their key.
//!
//! Invariants: a bound is always a whole partition-key value (one key's
//! rows, and its local transaction, stay in one partition); one split or
//! merge of a table at a time (`TableInner::layout`); a merge only joins
//! partitions that own their segments (a split's shared segments are
//! rewritten by compaction first), so no source holds keys of a
//! partition that would then read them.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use super::background::Shared;
use crate::error::{Error, ErrorKind, Result};
use crate::manifest::PartitionMeta;
use crate::model::key::{KeyRange, partition_prefix};
use crate::segment::hex_encode;
use crate::state::TableInner;
use crate::write::committer::{CommitHost, CommitMsg};

impl Shared {
    /// Splits partition `part` of `t` at `at` (a partition-key value's
    /// encoding): its keys below go to one new partition, the rest to
    /// another. False when there is nothing to split there (the partition
    /// is gone, or `at` is its lower bound or outside it).
    pub(crate) async fn split_partition(&self, t: &Arc<TableInner>, part: u64, at: Vec<u8>) -> Result<bool> {
        let _layout = t.layout.lock().await;
        self.check_layout_change(t)?;
        {
            let st = t.state.read();
            match st.part_by_id(part) {
                Some(p) if p.range.contains(&at) && at.as_slice() > p.range.lo.as_slice() => {}
                _ => return Ok(false),
            }
        }
        // What the halves take over as memtable copies is only what was
        // written since this flush.
        self.freeze_and_flush(t).await?;
        let keep = kept_shards(t);
        let lower = hex_encode(&at);
        let edit = |next: &mut crate::manifest::TableManifest| {
            let Some(i) = next.partitions.iter().position(|p| p.id == part) else {
                return Ok(None);
            };
            let parent = next.partitions[i].clone();
            close(next, i, &keep);
            let ids = (next.next_partition_id, next.next_partition_id + 1);
            next.next_partition_id += 2;
            let half = |id, lower: String| PartitionMeta {
                id,
                lower,
                flushed_seq: parent.flushed_seq,
                segments: parent.segments.clone(),
                parents: vec![parent.id],
            };
            next.partitions
                .splice(i..=i, [half(ids.0, parent.lower.clone()), half(ids.1, lower)]);
            Ok(Some(ids))
        };
        let install = move |t: &TableInner, (l, r): (u64, u64)| {
            // The halves' stream shards open as the parent's closes.
            open_shards(t, &[l, r]);
            t.state.write().split_part(part, &at, l, r);
        };
        if !self
            .change_layout(t, "partition.split_committed", edit, install)
            .await?
        {
            return Ok(false);
        }
        // The halves' shared segments are rewritten, each its own keys.
        self.schedule_compaction(t.clone());
        Ok(true)
    }

    /// Merges partition `left` of `t` with the one after it. False when
    /// they are gone; an error when one of them still shares segments
    /// with its neighbour (compaction has not rewritten them yet).
    pub(crate) async fn merge_partitions(&self, t: &Arc<TableInner>, left: u64) -> Result<bool> {
        let _layout = t.layout.lock().await;
        self.check_layout_change(t)?;
        let right = {
            let st = t.state.read();
            let Some(i) = st.parts.iter().position(|p| p.id == left) else {
                return Ok(false);
            };
            let Some(r) = st.parts.get(i + 1) else {
                return Ok(false);
            };
            if !st.parts[i].owns_its_sources() || !r.owns_its_sources() {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "partitions {left} and {} of table '{}' still share segments since a split; they can merge \
                         once compaction has rewritten them (`cellar compact {}`)",
                        r.id, t.schema.name, t.schema.name
                    ),
                ));
            }
            r.id
        };
        let keep = kept_shards(t);
        let edit = |next: &mut crate::manifest::TableManifest| {
            let Some(i) = next.partitions.iter().position(|p| p.id == left) else {
                return Ok(None);
            };
            if next.partitions.get(i + 1).is_none_or(|p| p.id != right) {
                return Ok(None);
            }
            close(next, i, &keep);
            close(next, i + 1, &keep);
            let id = next.next_partition_id;
            next.next_partition_id += 1;
            let (l, r) = (&next.partitions[i], &next.partitions[i + 1]);
            let merged = PartitionMeta {
                id,
                lower: l.lower.clone(),
                // Conservative: the WAL puts back what either side had
                // not flushed (writes are idempotent when replayed over
                // themselves).
                flushed_seq: l.flushed_seq.min(r.flushed_seq),
                segments: l.segments.iter().chain(&r.segments).copied().collect(),
                parents: vec![l.id, r.id],
            };
            next.partitions.splice(i..=i + 1, [merged]);
            Ok(Some(id))
        };
        let install = move |t: &TableInner, id: u64| {
            open_shards(t, &[id]);
            t.state.write().merge_parts(left, right, id);
        };
        if !self
            .change_layout(t, "partition.merge_committed", edit, install)
            .await?
        {
            return Ok(false);
        }
        self.schedule_flush(t.clone());
        Ok(true)
    }

    /// Commits a change of `t`'s partitions (one manifest version; `edit`
    /// gives up with `None`), then has the committer install it in memory
    /// with what `edit` returned. False when `edit` gave up.
    async fn change_layout<X: Send + 'static>(
        &self,
        t: &Arc<TableInner>,
        crash_point: &'static str,
        edit: impl FnOnce(&mut crate::manifest::TableManifest) -> Result<Option<X>>,
        install: impl FnOnce(&TableInner, X) + Send + 'static,
    ) -> Result<bool> {
        let mut made = None;
        let committed = t
            .commit_layout(
                crash_point,
                |next| {
                    made = edit(next)?;
                    Ok(made.is_some())
                },
                &self.storage,
            )
            .await?;
        let Some(made) = made.filter(|_| committed) else {
            return Ok(false);
        };
        let table = t.clone();
        self.apply_in_committer(Box::new(move || install(&table, made))).await?;
        Ok(true)
    }

    fn check_layout_change(&self, t: &TableInner) -> Result<()> {
        if t.dropped.load(Ordering::Acquire) {
            return Err(Error::new(
                ErrorKind::ObjectNotExist,
                format!("table '{}' was dropped", t.schema.name),
            ));
        }
        if t.read_only.load(Ordering::Acquire) {
            return Err(t.read_only_error());
        }
        Ok(())
    }

    async fn committer(&self) -> Result<crate::write::committer::CommitSender> {
        self.commit_tx.get().and_then(|w| w.upgrade()).ok_or_else(Error::closed)
    }

    async fn freeze_and_flush(&self, t: &Arc<TableInner>) -> Result<()> {
        let (done, rx) = oneshot::channel();
        self.committer()
            .await?
            .send(CommitMsg::Freeze { table: t.clone(), done })
            .await
            .map_err(|_| Error::closed())?;
        rx.await.map_err(|_| Error::closed())??;
        crate::flush::flush_frozen(&self.storage, t, &|| self.flushed_one(t)).await
    }

    /// Runs `change` on the committer thread between two rounds.
    async fn apply_in_committer(&self, change: Box<dyn FnOnce() + Send>) -> Result<()> {
        let (done, rx) = oneshot::channel();
        self.committer()
            .await?
            .send(CommitMsg::Apply { change, done })
            .await
            .map_err(|_| Error::closed())?;
        rx.await.map_err(|_| Error::closed())
    }

    /// Starts a background split or merge of `t`'s partitions when its
    /// `partition_split_bytes` asks for one.
    pub(crate) fn schedule_repartition(&self, t: &Arc<TableInner>) {
        let limit = t.options.read().partition_split_bytes;
        if limit == 0 || t.is_archived() || t.repartition_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let table = t.clone();
        let spawned = self.spawn_background(move |shared| async move {
            if let Err(e) = shared.repartition(&table).await {
                eprintln!("cellar: repartitioning table '{}': {e}", table.schema.name);
            }
            table.repartition_queued.store(false, Ordering::Release);
        });
        if !spawned {
            t.repartition_queued.store(false, Ordering::Release);
        }
    }

    /// One pass of the policy: splits each partition past the limit (at
    /// its median partition-key value), then merges neighbours that
    /// together hold under a quarter of it.
    async fn repartition(&self, t: &Arc<TableInner>) -> Result<()> {
        let limit = t.options.read().partition_split_bytes;
        for info in partition_infos(t).await? {
            if info.bytes > limit
                && let Some(at) = median_bound(t, info.id).await?
            {
                self.split_partition(t, info.id, at).await?;
            }
        }
        let infos = partition_infos(t).await?;
        for pair in infos.windows(2) {
            if pair[0].bytes + pair[1].bytes < limit / 4 && !pair[0].shared && !pair[1].shared {
                self.merge_partitions(t, pair[0].id).await?;
                // Ids changed: the next pass looks again.
                break;
            }
        }
        Ok(())
    }
}

/// The stream shards of `t` that exist now (closed ones a manifest keeps
/// stay listed while their logs do).
fn kept_shards(t: &TableInner) -> Vec<u64> {
    t.stream
        .read()
        .as_ref()
        .map(|s| s.all().iter().map(|(p, _)| *p).collect())
        .unwrap_or_default()
}

/// Records partition `i` of `next` as closed when the table's stream
/// keeps its shard (`keep`), and forgets closed partitions whose shards
/// are gone.
fn close(next: &mut crate::manifest::TableManifest, i: usize, keep: &[u64]) {
    next.closed_partitions.retain(|c| keep.contains(&c.id));
    let p = &next.partitions[i];
    if keep.contains(&p.id) {
        let closed = crate::manifest::ClosedPartition {
            id: p.id,
            lower: p.lower.clone(),
            upper: next.partitions.get(i + 1).map(|n| n.lower.clone()),
            parents: p.parents.clone(),
        };
        next.closed_partitions.push(closed);
    }
}

/// Opens the stream shards of new partitions `parts` (on the committer
/// thread, before any write is routed to them). A failure stops the
/// stream's appends to nothing: the writes stay in the WAL, whose next
/// open puts them into the logs.
fn open_shards(t: &TableInner, parts: &[u64]) {
    if let Some(shards) = t.stream.read().clone() {
        for &p in parts {
            if let Err(e) = shards.add(p) {
                eprintln!("cellar: opening stream shard {p} of table '{}': {e}", t.schema.name);
            }
        }
    }
}

/// What `describe --partitions` shows of one partition.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionInfo {
    /// Its id (also its change stream shard's, once streams follow partitions).
    pub id: u64,
    /// The lowest partition-key value it holds (`None`: the table's lowest).
    pub lower: Option<crate::model::types::PkValue>,
    /// The lowest value of the next partition (`None`: the table's highest).
    pub upper: Option<crate::model::types::PkValue>,
    /// Segment bytes holding its keys (estimated by row group for segments
    /// it still shares since a split).
    pub bytes: u64,
    /// Keys in its segments and memtables (a key rewritten since its last
    /// compaction counts once per copy).
    pub rows: u64,
    /// Its segments.
    pub segments: usize,
    /// The partitions it was split or merged from.
    pub parents: Vec<u64>,
    /// It still reads segments a split left shared with a neighbour.
    pub shared: bool,
}

/// Every partition of `t`, in key order.
pub(crate) async fn partition_infos(t: &TableInner) -> Result<Vec<PartitionInfo>> {
    let parts: Vec<_> = {
        let st = t.state.read();
        st.parts
            .iter()
            .map(|p| {
                let mem_rows: usize = p.memtables().map(|m| m.key_count_in(&p.range, usize::MAX)).sum();
                (
                    p.id,
                    p.range.clone(),
                    p.segments.clone(),
                    mem_rows as u64,
                    !p.owns_its_sources(),
                )
            })
            .collect()
    };
    let lineage = t.manifest.lock().await.1.partitions.clone();
    let ty = t.schema.primary_key[0].pk_type;
    let decode = |k: &[u8]| -> Result<Option<crate::model::types::PkValue>> {
        if k.is_empty() {
            return Ok(None);
        }
        Ok(crate::model::key::decode_key(k, &[ty])?.into_iter().next())
    };
    let mut out = Vec::with_capacity(parts.len());
    for (id, range, segments, mem_rows, shared) in parts {
        let (mut bytes, mut rows) = (0u64, mem_rows);
        for seg in segments.iter() {
            let inside = range.lo.as_slice() <= seg.min_key.as_slice()
                && range.hi.as_ref().is_none_or(|h| seg.max_key.as_slice() < h.as_slice());
            if inside {
                bytes += seg.meta.size_bytes;
                rows += seg.meta.num_keys;
            } else {
                let groups = seg.row_group_starts().await?;
                let total: u64 = groups.iter().map(|(_, r)| r).sum::<u64>().max(1);
                let mine: u64 = groups.iter().filter(|(k, _)| range.contains(k)).map(|(_, r)| r).sum();
                bytes += seg.meta.size_bytes * mine / total;
                rows += seg.meta.num_keys * mine / total;
            }
        }
        out.push(PartitionInfo {
            id,
            lower: decode(&range.lo)?,
            upper: range.hi.as_deref().map(decode).transpose()?.flatten(),
            bytes,
            rows,
            segments: segments.len(),
            parents: lineage
                .iter()
                .find(|p| p.id == id)
                .map(|p| p.parents.clone())
                .unwrap_or_default(),
            shared,
        });
    }
    Ok(out)
}

/// The partition-key value at the middle of partition `part`'s rows (by
/// its segments' row groups), as a bound strictly inside it; `None` when
/// its rows are all of one partition-key value.
async fn median_bound(t: &TableInner, part: u64) -> Result<Option<Vec<u8>>> {
    let Some((range, segments)) = t
        .state
        .read()
        .part_by_id(part)
        .map(|p| (p.range.clone(), p.segments.clone()))
    else {
        return Ok(None);
    };
    let starts = group_starts(&segments, &range).await?;
    let total: u64 = starts.iter().map(|(_, r)| r).sum();
    let ty = t.schema.primary_key[0].pk_type;
    let mut acc = 0;
    let mut candidates = Vec::new();
    for (k, rows) in &starts {
        let bound = partition_prefix(k, ty).to_vec();
        if bound.as_slice() > range.lo.as_slice() {
            candidates.push((acc, bound));
        }
        acc += rows;
    }
    // The candidate nearest the middle.
    Ok(candidates
        .into_iter()
        .min_by_key(|(before, _)| before.abs_diff(total / 2))
        .map(|(_, b)| b))
}

/// The first key and row count of every row group of `segments` that
/// starts inside `range`, in key order.
async fn group_starts(segments: &[Arc<crate::segment::Segment>], range: &KeyRange) -> Result<Vec<(Vec<u8>, u64)>> {
    let mut starts = Vec::new();
    for seg in segments {
        if range.overlaps(&seg.min_key, &seg.max_key) {
            starts.extend(
                seg.row_group_starts()
                    .await?
                    .into_iter()
                    .filter(|(k, _)| range.contains(k)),
            );
        }
    }
    starts.sort();
    Ok(starts)
}

/// One range of ComputeSplitPointsBySize: from `lower` (inclusive) to
/// `upper` (exclusive), partition-key values (`None`: unbounded), and
/// where it is served.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitRange {
    /// Its lowest partition-key value (`None`: the table's lowest).
    pub lower: Option<crate::model::types::PkValue>,
    /// The next range's lowest value (`None`: the table's highest).
    pub upper: Option<crate::model::types::PkValue>,
    /// The partition holding its start: `partition-<id>` (one process
    /// serves every partition, as one Tablestore location would).
    pub location: String,
}

/// Cuts `t` into ranges of about `size` segment bytes at partition-key
/// values (Tablestore's ComputeSplitPointsBySize): the split points are
/// the ranges' bounds, and a range never cuts a partition-key value.
pub(crate) async fn split_points(t: &TableInner, size: u64) -> Result<Vec<SplitRange>> {
    if size == 0 {
        return Err(Error::param("split size must be a positive number of bytes"));
    }
    let parts: Vec<_> = {
        let st = t.state.read();
        st.parts
            .iter()
            .map(|p| (p.id, p.range.clone(), p.segments.clone()))
            .collect()
    };
    let ty = t.schema.primary_key[0].pk_type;
    let mut bounds: Vec<Vec<u8>> = Vec::new();
    let mut acc = 0u64;
    for (_, range, segments) in &parts {
        let starts = group_starts(segments, range).await?;
        // Bytes per row of each segment, to weigh its row groups.
        for (k, rows) in starts {
            let seg = segments
                .iter()
                .find(|s| s.min_key.as_slice() <= k.as_slice() && k.as_slice() <= s.max_key.as_slice());
            let per_row = seg.map_or(0, |s| s.meta.size_bytes / s.meta.num_rows.max(1));
            if acc >= size {
                let bound = partition_prefix(&k, ty).to_vec();
                if bounds.last().is_none_or(|b| *b < bound) && bound.as_slice() > range.lo.as_slice() {
                    bounds.push(bound);
                    acc = 0;
                }
            }
            acc += rows * per_row;
        }
    }
    let decode = |k: &[u8]| -> Result<crate::model::types::PkValue> {
        crate::model::key::decode_key(k, &[ty])?
            .into_iter()
            .next()
            .ok_or_else(|| Error::corruption("an empty split point"))
    };
    let location = |k: &[u8]| {
        let i = parts.partition_point(|(_, r, _)| r.lo.as_slice() <= k).max(1) - 1;
        format!("partition-{}", parts[i].0)
    };
    // Range i runs from bound i - 1 (none: the start) to bound i (none: the end).
    let lowers = std::iter::once(None).chain(bounds.iter().map(Some));
    let uppers = bounds.iter().map(Some).chain(std::iter::once(None));
    lowers
        .zip(uppers)
        .map(|(lower, upper)| {
            Ok(SplitRange {
                lower: lower.map(|k| decode(k)).transpose()?,
                upper: upper.map(|k| decode(k)).transpose()?,
                location: location(lower.map_or(&[][..], |k| k.as_slice())),
            })
        })
        .collect()
}
