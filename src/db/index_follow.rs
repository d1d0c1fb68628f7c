//! Global indexes follow their table's change stream.
//!
//! Each global index has an internal stream tunnel (named `.index.NAME`,
//! a name no user's tunnel can have) and a follower task. Every write to
//! an indexed table reads its row, and the stream record of the write
//! carries the old values of the index's key columns (they are added to
//! the stream's origin columns; readers of the Stream API see only the
//! columns they asked for). For a batch of records the follower computes,
//! per base row: the index keys the row had before each write (from the
//! records' origins: those rows go, whatever happened since), and its
//! index row: as of its last record when that is a PutRow or DeleteRow
//! (the record says the whole row; a later write's record brings that
//! write's index row in turn), else the row as it is now, read on a
//! snapshot (committed only if the row had no write since that snapshot:
//! a later record brings it). Both go to the committer as one
//! `IndexSync`; then the tunnel checkpoints.
//!
//! Invariants: a record is checkpointed only after its index writes are
//! durable, so a crash replays it (its writes are idempotent: deletes of
//! keys the row left, the row's current index row); once the follower has
//! applied every record, the index equals what the table's rows give. A
//! run holds the index's `follower` lock (a drop waits for it) and counts
//! as background work (a close waits for it, and stops it).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::Database;
use super::inner::DbInner;
use super::stream_record::{StreamColumn, StreamRecord};
use crate::error::{Error, Result};
use crate::model::index::PutView;
use crate::model::row::Mutation;
use crate::model::types::Value;
use crate::state::{IndexTarget, TableInner};
use crate::write::committer::CommitMsg;
use crate::write::index::SyncRow;

/// How long a caught-up follower waits before looking for records again.
const IDLE: std::time::Duration = std::time::Duration::from_millis(5);

/// The internal tunnel of global index `index`.
pub(super) fn tunnel_of(index: &str) -> String {
    format!(".index.{index}")
}

/// The newest commit time (µs) in `base`'s stream.
fn stream_head_us(base: &TableInner) -> u64 {
    base.stream
        .read()
        .as_ref()
        .map(|s| s.all().iter().map(|(_, l)| l.last_commit_us()).max().unwrap_or(0))
        .unwrap_or(0)
}

/// How far (ms of commit time) global index `target` is behind its
/// table's writes; 0 for a local index or a caught-up one.
pub(super) async fn lag_ms(db: &Database, base: &TableInner, target: &IndexTarget) -> Result<u64> {
    if target.def.kind != crate::model::index::IndexKind::Global {
        return Ok(0);
    }
    let mut applied = target.applied_us.load(Ordering::Acquire);
    if applied == 0 {
        // Its follower has not run yet in this process: its checkpoint.
        let tunnel = tunnel_of(&target.def.name);
        applied = match db.tunnel_progress_us(&base.schema.name, &tunnel).await {
            Ok(us) => us,
            Err(e) if e.kind() == crate::error::ErrorKind::ObjectNotExist => 0,
            Err(e) => return Err(e),
        };
    }
    Ok(stream_head_us(base).saturating_sub(applied) / 1000)
}

/// At a close: every global index applies what its table's stream holds
/// (synced first), so that the next reader finds it caught up.
pub(super) async fn drain(db: &Database) {
    let tables: Vec<Arc<TableInner>> = db.inner.shared.tables.read().values().cloned().collect();
    for t in tables {
        let targets = t.indexes_of(crate::model::index::IndexKind::Global);
        if targets.is_empty() {
            continue;
        }
        let shards = t.stream.read().clone();
        if let Some(shards) = shards {
            let covered = db.inner.shared.visible_seq.load(Ordering::Acquire);
            // (A WAL sync only where the durability setting left one due.)
            let _ = db.inner.durable_through(covered).await;
            let durable = db.inner.shared.durable_seq.load(Ordering::Acquire);
            for (_, log) in shards.all() {
                let _ = log.sync(covered, durable);
            }
        }
        for target in targets {
            let _running = target.follower.lock().await;
            if target.table.dropped.load(Ordering::Acquire) {
                continue;
            }
            if let Err(e) = one_run(db, &t.schema.name, &target).await {
                eprintln!(
                    "cellar: global index '{}' could not catch up before the close: {e}",
                    target.def.name
                );
            }
        }
    }
}

impl Database {
    /// Waits until global index `index` has applied every write its table
    /// had when called (a local index always has), or `timeout` passes.
    pub async fn wait_for_index(&self, index: &str, timeout: std::time::Duration) -> Result<()> {
        let t = self.index_table_of(index)?;
        let def = t.index_of.clone().expect("an index table");
        let base = self.table_inner(&def.table)?;
        let Some(target) = base.indexes.read().iter().find(|i| i.table.id == t.id).cloned() else {
            return Ok(());
        };
        if def.kind != crate::model::index::IndexKind::Global {
            return Ok(());
        }
        let head = stream_head_us(&base);
        let deadline = std::time::Instant::now() + timeout;
        while target.applied_us.load(Ordering::Acquire) < head {
            if std::time::Instant::now() > deadline {
                return Err(Error::new(
                    crate::error::ErrorKind::Closed,
                    format!(
                        "global index '{index}' did not catch up with table '{}' in {timeout:?}",
                        def.table
                    ),
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        Ok(())
    }
}

/// Starts the follower of global index `target` of `base` (in the
/// background, for the life of the database). `fresh`: the index's
/// tunnel is to be made first (a new index, or one whose tunnel a crash
/// lost), and its table's rows indexed anew.
pub(super) fn follow(db: &Database, base: &str, target: IndexTarget) {
    let weak: Weak<DbInner> = Arc::downgrade(&db.inner);
    let base = base.to_string();
    tokio::spawn(async move {
        loop {
            let Some(inner) = weak.upgrade() else { return };
            let shared = inner.shared.clone();
            shared.background_in_flight.fetch_add(1, Ordering::SeqCst);
            let stop = shared.closed.load(Ordering::SeqCst) || target.table.dropped.load(Ordering::Acquire);
            let result = if stop {
                Ok(false)
            } else {
                let _running = target.follower.lock().await;
                if target.table.dropped.load(Ordering::Acquire) {
                    Ok(false)
                } else {
                    one_run(&Database { inner }, &base, &target).await.map(|()| true)
                }
            };
            shared.background_in_flight.fetch_sub(1, Ordering::SeqCst);
            match result {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => {
                    if !shared.closed.load(Ordering::Acquire) && !target.table.dropped.load(Ordering::Acquire) {
                        eprintln!(
                            "cellar: global index '{}' could not apply its records: {e}",
                            target.def.name
                        );
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
            }
            drop(shared);
            tokio::time::sleep(IDLE).await;
        }
    });
}

/// Applies every record the index's tunnel has now.
async fn one_run(db: &Database, base: &str, target: &IndexTarget) -> Result<()> {
    let t = db.table_inner(base)?;
    let weak = Arc::downgrade(&db.inner);
    let tgt = target.clone();
    let base_t = t.clone();
    let process: Arc<super::tunnel_types::AsyncProcessFn> = Arc::new(move |_ctx, records| {
        let weak = weak.clone();
        let tgt = tgt.clone();
        let base_t = base_t.clone();
        Box::pin(async move {
            let inner = weak.upgrade().ok_or_else(Error::closed)?;
            if inner.shared.closed.load(Ordering::Acquire) || tgt.table.dropped.load(Ordering::Acquire) {
                return Err(Error::closed());
            }
            let newest = records.last().map(|r| r.sequence.timestamp_us);
            apply(&inner, &base_t, &tgt, records).await?;
            if let Some(us) = newest {
                tgt.applied_us.fetch_max(us, Ordering::AcqRel);
            }
            Ok(())
        })
    });
    let tunnel = tunnel_of(&target.def.name);
    if target.applied_us.load(Ordering::Acquire) == 0 {
        // What the last checkpoint covers (a fresh start, or an open).
        let done = db.tunnel_progress_us(base, &tunnel).await?;
        target.applied_us.fetch_max(done, Ordering::AcqRel);
    }
    let worker = db.internal_tunnel_worker(base, &tunnel, process);
    worker.run(false).await
}

/// The index writes of a batch of records of one shard (in order).
async fn apply(
    inner: &Arc<DbInner>,
    base: &Arc<TableInner>,
    target: &IndexTarget,
    records: Vec<StreamRecord>,
) -> Result<()> {
    // Per base row, in first-seen order: the index keys it had before
    // each of its writes, and its last record.
    let mut order: Vec<Vec<u8>> = Vec::new();
    let mut rows_of: HashMap<Vec<u8>, (Vec<Vec<u8>>, usize)> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        let key = match &r.raw {
            Some(raw) => raw.key.clone(),
            None => base.schema.encode_pk(&r.primary_key)?,
        };
        let origin = |c: &str| -> Option<(i64, &Value)> {
            r.origin.iter().find_map(|o| match o {
                StreamColumn::Put { name, value, version } if name == c => Some((*version, value)),
                _ => None,
            })
        };
        let old = target.def.key_with(&key, origin).map(|(k, _)| k);
        let (stale, last) = rows_of.entry(key.clone()).or_insert_with(|| {
            order.push(key);
            (Vec::new(), i)
        });
        *last = i;
        if let Some(k) = old
            && !stale.contains(&k)
        {
            stale.push(k);
        }
    }
    // A row whose last record here is a PutRow or a DeleteRow is, as of
    // that record, what the record says: its index row comes from it,
    // committed whatever happened since (a later write has a later
    // record, which puts that write's index row in turn). A row last
    // updated is read on a snapshot.
    let last_write = |i: usize| records[i].raw.as_ref().map(|r| &r.mutation);
    let needs_read = order.iter().any(|k| {
        let (_, last) = &rows_of[k];
        !matches!(last_write(*last), Some(Mutation::Put { .. } | Mutation::Delete))
    });
    let mut snaps = Vec::new();
    if needs_read {
        // A record is in its shard's log a moment before its write is
        // visible: the snapshot must hold every write of the batch. The
        // wait is bounded: past it the batch fails (it is not
        // checkpointed, and comes again).
        let newest = records.iter().map(|r| r.seq).max().unwrap_or(0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(100);
        while inner.shared.visible_seq.load(Ordering::Acquire) < newest {
            if std::time::Instant::now() > deadline {
                return Err(Error::new(
                    crate::error::ErrorKind::Closed,
                    format!(
                        "a stream record of sequence {newest} is not visible in table '{}' yet; the index tries again",
                        base.schema.name
                    ),
                ));
            }
            tokio::time::sleep(std::time::Duration::from_micros(200)).await;
        }
        snaps = base.checked_snapshots(&inner.shared.visible_seq);
    }
    let at = snaps.first().map_or(0, |(s, _)| s.seq);
    let chains: Vec<_> = snaps.iter().map(|(_, c)| c.clone()).collect();
    let mut rows = Vec::with_capacity(order.len());
    for key in order {
        let (stale, last) = rows_of.remove(&key).unwrap_or_default();
        let (now, as_of_record) = match last_write(last) {
            Some(Mutation::Put { row_ts, cells }) => {
                let view = PutView { row_ts: *row_ts, cells };
                (target.def.row_of(&key, Some(&view)), true)
            }
            Some(Mutation::Delete) => (None, true),
            _ => {
                let Some((snap, _)) = snaps.iter().find(|(s, _)| s.range.contains(&key)) else {
                    continue;
                };
                let state = snap.get_state(&key, None).await?;
                (target.def.row_of(&key, state.as_ref()), false)
            }
        };
        let now_key = now.as_ref().map(|(k, _)| k.clone());
        let mut always: Vec<_> = stale
            .into_iter()
            .filter(|k| Some(k) != now_key.as_ref())
            .map(|k| (target.table.clone(), k, Mutation::Delete))
            .collect();
        let now = now.map(|(k, m)| (target.table.clone(), k, m));
        let (put, writes) = if as_of_record { (now, None) } else { (None, now) };
        always.extend(put);
        let writes = writes.into_iter().collect();
        rows.push(SyncRow {
            base_key: key,
            always,
            writes,
        });
    }
    sync(inner, base, at, &chains, rows).await
}

/// Sends one index sync to the committer and waits until it is durable.
pub(super) async fn sync(
    inner: &DbInner,
    base: &Arc<TableInner>,
    at: u64,
    chains: &[Arc<crate::state::MemChain>],
    rows: Vec<SyncRow>,
) -> Result<()> {
    let (done, rx) = tokio::sync::oneshot::channel();
    let msg = CommitMsg::IndexSync {
        base: base.clone(),
        at,
        chains: chains.to_vec(),
        rows,
        done,
    };
    inner
        .sender("an index backfill")?
        .send(msg)
        .await
        .map_err(|_| Error::closed())?;
    rx.await.map_err(|_| Error::closed())??;
    // Durable before the caller records it done (a tunnel checkpoint, a
    // backfill's phase): under interval or no durability the WAL is
    // synced now, or a power cut could take the index writes back while
    // the checkpoint that skips them stays.
    inner
        .durable_through(inner.shared.visible_seq.load(Ordering::Acquire))
        .await
}
