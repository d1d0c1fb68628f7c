//! The handle behind every `Database` and `Table`: writes go from here to
//! the committer, flushes and compactions to the background.
//!
//! Invariant: dropping the last handle closes the committer's channel and
//! joins it, so every acknowledged write is in the WAL (synced as the
//! durability setting says) before the directory lock is released.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use object_store::ObjectStore;
use tokio::sync::oneshot;

use super::background::Shared;
use super::catalog::CatalogFile;
use super::queued::{Accepted, QueuedWrites};
use crate::compaction;
use crate::error::{Error, ErrorKind, Result};
use crate::flush;
use crate::manifest::ManifestLog;
use crate::model::api::{ReturnType, RowWrite, WriteResult};
use crate::model::capacity::CapacityUnit;
use crate::model::row::Mutation;
use crate::model::types::{PkValue, Row};
use crate::state::{MemChain, Snapshot, TableInner};
use crate::write::checked::CheckedWrite;
use crate::write::committer::{CommitAck, CommitMsg, PendingWrite};
use crate::write::{condition, validate};

/// The handle behind every clone of [`Database`]; dropping the last one
/// stops the committer (which syncs the WAL) and releases the lock.
pub(crate) struct DbInner {
    pub shared: Arc<Shared>,
    /// The committer's queue; `None` in a read-only database.
    pub commit_tx: Option<crate::write::committer::CommitSender>,
    pub(super) root: PathBuf,
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) catalog_log: ManifestLog,
    /// The committed catalog and its version; the lock serialises DDL.
    pub(super) catalog: tokio::sync::Mutex<(u64, CatalogFile)>,
    pub(super) committer: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Series by name (as committed in the catalog).
    pub(super) series: parking_lot::RwLock<std::collections::BTreeMap<String, Arc<super::series::SeriesDef>>>,
    /// The id of the next local transaction.
    pub(super) next_txn: std::sync::atomic::AtomicU64,
    /// Read-only: where the WAL was read up to (`None`: load anew); its
    /// lock serialises refreshes.
    pub(super) wal_cursor: tokio::sync::Mutex<Option<crate::wal::WalCursor>>,
}

impl Drop for DbInner {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        // Close the channel; the committer drains it, syncs and exits.
        if let Some(tx) = &mut self.commit_tx {
            tx.close();
        }
        if let Some(h) = self.committer.lock().take() {
            let _ = h.join();
        }
    }
}

impl DbInner {
    /// The committer's queue, or the refusal of `what` when the database
    /// was opened read-only.
    pub(crate) fn sender(&self, what: &str) -> Result<&crate::write::committer::CommitSender> {
        self.commit_tx.as_ref().ok_or_else(|| self.read_only_error(what))
    }

    /// Fsyncs the WAL now and returns the largest durable sequence (all
    /// of them when the database is read-only or its committer is gone).
    pub(crate) async fn sync_wal(&self) -> u64 {
        if let Ok(tx) = self.sender("a WAL sync") {
            let (done, wait) = tokio::sync::oneshot::channel();
            if tx
                .send(crate::write::committer::CommitMsg::Sync { done: Some(done) })
                .await
                .is_ok()
            {
                let _ = wait.await;
            }
        }
        self.shared.durable_seq.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until every write up to `seq` is durable in the WAL (syncs
    /// it under interval or no durability): what is handed out or
    /// recorded as done (a tunnel's rows, an index's checkpoint) must not
    /// be taken back by a power cut.
    pub(crate) async fn durable_through(&self, seq: u64) -> Result<()> {
        if self.shared.durable_seq.load(std::sync::atomic::Ordering::Acquire) >= seq || self.sync_wal().await >= seq {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Io,
            format!("the WAL could not be made durable up to write {seq} (see the error logged before this one)"),
        ))
    }

    /// Refuses `what` (a change) when the database was opened read-only.
    pub(crate) fn writable(&self, what: &str) -> Result<()> {
        self.sender(what).map(|_| ())
    }

    /// Whether the database was opened read-only.
    pub(crate) fn is_read_only(&self) -> bool {
        self.commit_tx.is_none()
    }

    fn read_only_error(&self, what: &str) -> Error {
        Error::new(
            ErrorKind::ReadOnly,
            format!(
                "{what} refused: the database at {} is open read-only (`cellar --read-only`, \
                 `Database::open_read_only`) and never writes; changes go through the process that opened it \
                 for writing, or through an open without --read-only once that process has closed it",
                self.root.display()
            ),
        )
    }

    pub(crate) fn table_inner(&self, name: &str) -> Result<Arc<TableInner>> {
        self.shared
            .tables
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| {
                let message = if self.series.read().contains_key(name) {
                    format!(
                        "'{name}' is a series, not a table; read one of its months ({name}_YYYYMM), or all of them with SQL (SELECT ... FROM {name})"
                    )
                } else {
                    format!("table '{name}' does not exist")
                };
                Error::new(ErrorKind::ObjectNotExist, message)
            })
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.shared.options.clock.now_ms()
    }

    /// Validates each write, commits the valid ones as one group, and
    /// returns a result per write in order.
    pub(crate) async fn write_many<T: AsRef<str>>(
        self: &Arc<Self>,
        writes: impl IntoIterator<Item = (T, RowWrite)>,
    ) -> Result<Vec<Result<WriteResult>>> {
        self.queue_many(writes, true).await?.durable().await
    }

    /// Validates each write and hands the valid ones to the committer as
    /// one group. Returns once the group is queued: groups queued one after
    /// another by one caller get ascending sequence numbers, so a caller
    /// that pipelines (queues the next group before the previous one is
    /// durable) keeps its writes in order, checked writes included.
    ///
    /// A write with a condition or an increment reads its row first, on a
    /// snapshot taken once per table for the whole call, and carries that
    /// snapshot's sequence and the row to the committer, which decides it
    /// again if the row changed since (see `write::checked`).
    pub(crate) async fn enqueue_many<T: AsRef<str>>(
        self: &Arc<Self>,
        writes: impl IntoIterator<Item = (T, RowWrite)>,
    ) -> Result<QueuedWrites> {
        self.queue_many(writes, false).await
    }

    /// [`Self::enqueue_many`]; `waits`: the caller waits for these writes
    /// before it queues more, so they may be committed on its own thread
    /// (see [`enqueue`](Self::enqueue)).
    async fn queue_many<T: AsRef<str>>(
        self: &Arc<Self>,
        writes: impl IntoIterator<Item = (T, RowWrite)>,
        waits: bool,
    ) -> Result<QueuedWrites> {
        self.writable("a write")?;
        let now = self.now_ms();
        let writes = writes.into_iter();
        let mut results = Vec::with_capacity(writes.size_hint().0);
        let mut pending = Vec::with_capacity(writes.size_hint().0);
        let mut snapshots: Vec<(u64, Snapshot, Arc<MemChain>)> = Vec::new();
        for (table, w) in writes {
            let r = self
                .prepare(table.as_ref(), w, now, &mut snapshots)
                .await
                .map(|(p, mut a)| {
                    a.slot = pending.len();
                    pending.push(p);
                    a
                });
            results.push(r);
        }
        let mut ack = None;
        if !pending.is_empty() {
            match self.enqueue(pending, waits).await {
                Ok(rx) => ack = Some(rx),
                Err(e) => results
                    .iter_mut()
                    .filter(|r| r.is_ok())
                    .for_each(|r| *r = Err(e.clone())),
            }
        }
        Ok(QueuedWrites::new(results, ack))
    }

    /// Checks one write (its condition against the row, when it has one)
    /// and turns it into what the committer logs.
    async fn prepare(
        &self,
        table: &str,
        w: RowWrite,
        now: i64,
        snapshots: &mut Vec<(u64, Snapshot, Arc<MemChain>)>,
    ) -> Result<(PendingWrite, Accepted)> {
        let t = self.table_inner(table)?;
        if t.read_only.load(Ordering::Acquire) {
            return Err(t.read_only_error());
        }
        crate::write::index::refuse_index_write(&t)?;
        validate::check_defined_types(&t.schema.name, &t.declared.read(), &w)?;
        let indexed = crate::write::index::check_values(&t, &w)?;
        let return_type = w.return_type();
        let auto_increment = t.schema.auto_increment_column();
        let pk = (return_type != ReturnType::None || auto_increment.is_some()).then(|| w.primary_key().clone());
        let new_row = w
            .primary_key()
            .columns
            .iter()
            .any(|(_, v)| *v == PkValue::AutoIncrement);
        // A write with an auto-increment placeholder makes a new row (its
        // condition is `ignore`): its increments start from nothing.
        let row = |columns| pk.map(|primary_key| Row { primary_key, columns });
        // A stream that records origin columns needs the row before the
        // write: such a write reads it, as a checked one does.
        let origin = t.origin_columns();
        if (w.reads_row() || origin.is_some() || indexed) && !new_row {
            let (key, _) = validate::precheck(&t.schema, &w)?;
            // One snapshot per partition for a batch's writes.
            let taken = |(id, snap, _): &&(u64, Snapshot, Arc<MemChain>)| *id == t.id && snap.range.contains(&key);
            if !snapshots.iter().any(|x| taken(&x)) {
                let (snap, chain) = t.checked_snapshot(&key, &self.shared.visible_seq);
                snapshots.push((t.id, snap, chain));
            }
            let (_, snap, chain) = snapshots.iter().find(taken).expect("just added");
            let state = snap.get_state(&key, None).await?;
            // Only a write whose outcome depends on its row is decided
            // again; another one (read for its stream origin or its
            // indexes) keeps its mutation.
            let write = w.reads_row().then(|| w.clone());
            let checked = condition::check(&t.schema, &snap.options, now, &w, state.as_ref())
                .and_then(|_| validate::to_mutation(&t.schema, &snap.options, now, w, state.as_ref()));
            let (mutation, data_bytes, failed) = match checked {
                Ok(v) => (v.mutation, v.data_bytes, None),
                // The failure stands only if the row did not change after
                // the snapshot; the committer decides (`write::checked`).
                Err(e) => (Mutation::Delete, 0, Some(Box::new(e))),
            };
            let accepted = Accepted {
                result: WriteResult {
                    // A checked write also read its row: 1 read CU.
                    consumed: CapacityUnit {
                        read: 1,
                        write: CapacityUnit::units(data_bytes),
                    },
                    row: row(match return_type {
                        ReturnType::AfterModify => mutation.written_cells(),
                        _ => Vec::new(),
                    }),
                },
                slot: 0,
                auto_increment: None,
                failed,
            };
            let origin_now = origin
                .as_ref()
                .map(|c| crate::write::checked::origin_of(state.as_ref(), c));
            let before = indexed.then(|| state.clone());
            let check = CheckedWrite {
                at: snap.seq,
                state,
                chain: chain.clone(),
                write,
                now_ms: now,
                options: snap.options,
                failed: accepted.failed.is_some(),
                origin,
            };
            let pending = PendingWrite {
                table: t,
                key,
                mutation,
                auto_increment: None,
                check: Some(Box::new(check)),
                origin: origin_now,
                before,
            };
            return Ok((pending, accepted));
        }
        let opts = *t.options.read();
        let v = validate::to_mutation(&t.schema, &opts, now, w, None)?;
        let accepted = Accepted {
            result: WriteResult {
                consumed: CapacityUnit {
                    read: 0,
                    write: CapacityUnit::units(v.data_bytes),
                },
                row: row(match return_type {
                    ReturnType::AfterModify => v.mutation.written_cells(),
                    _ => Vec::new(),
                }),
            },
            slot: 0,
            auto_increment: v.auto_increment.and(auto_increment),
            failed: None,
        };
        let pending = PendingWrite {
            table: t,
            key: v.key,
            mutation: v.mutation,
            auto_increment: v.auto_increment,
            check: None,
            // A new row (auto-increment): nothing before it.
            origin: origin.map(|_| Vec::new()),
            before: indexed.then_some(None),
        };
        Ok((pending, accepted))
    }

    /// Hands one group to the committer; the receiver resolves once the
    /// group is durable (its first sequence number) or has failed. A
    /// caller that `waits` for the writes and runs outside any task of the
    /// runtime (its own thread in `block_on`, as an embedding program's)
    /// commits them on its thread when nothing is queued
    /// ([`CommitSender::try_inline`]): the fsync then blocks that thread,
    /// which waits anyway, and never a runtime worker. Pipelined writers
    /// keep queueing, so that one fsync serves the writes of many batches.
    ///
    /// [`CommitSender::try_inline`]: crate::write::committer::CommitSender::try_inline
    async fn enqueue(&self, writes: Vec<PendingWrite>, waits: bool) -> Result<oneshot::Receiver<Result<CommitAck>>> {
        let writes = if waits && tokio::task::try_id().is_none() {
            match self.sender("a write")?.try_inline(writes) {
                Ok(rx) => return Ok(rx),
                Err(writes) => writes,
            }
        } else {
            writes
        };
        let (done, rx) = oneshot::channel();
        self.sender("a write")?
            .send(CommitMsg::Write { writes, done })
            .await
            .map_err(|_| Error::closed())?;
        Ok(rx)
    }

    /// Freezes the active memtable and waits until every frozen one is a
    /// segment.
    pub(crate) async fn flush_table(&self, t: &Arc<TableInner>) -> Result<()> {
        let (done, rx) = oneshot::channel();
        self.sender("a flush")?
            .send(CommitMsg::Freeze { table: t.clone(), done })
            .await
            .map_err(|_| Error::closed())?;
        rx.await.map_err(|_| Error::closed())??;
        flush::flush_frozen(&self.shared.storage, t, &|| self.shared.flushed_one(t)).await?;
        if let Some(tx) = self.shared.commit_tx.get().and_then(|w| w.upgrade()) {
            let _ = tx.send(CommitMsg::FlushDone).await;
        }
        self.shared.schedule_compaction(t.clone());
        Ok(())
    }

    /// Runs one compaction of the table now (see [`compaction::Pick`]).
    pub(crate) async fn compact_table(&self, t: &Arc<TableInner>, pick: compaction::Pick) -> Result<bool> {
        self.writable("a compaction")?;
        self.shared.compact(t, pick).await
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }
}
