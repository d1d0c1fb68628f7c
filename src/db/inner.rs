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
use tokio::sync::{mpsc, oneshot};

use super::background::Shared;
use super::catalog::CatalogFile;
use crate::compaction;
use crate::error::{Error, ErrorKind, Result};
use crate::flush;
use crate::manifest::ManifestLog;
use crate::model::api::RowWrite;
use crate::state::TableInner;
use crate::write::committer::QueuedWrites;
use crate::write::committer::{CommitMsg, PendingWrite};
use crate::write::validate;

/// The handle behind every clone of [`Database`]; dropping the last one
/// stops the committer (which syncs the WAL) and releases the lock.
pub(crate) struct DbInner {
    pub shared: Arc<Shared>,
    pub commit_tx: mpsc::Sender<CommitMsg>,
    pub(super) root: PathBuf,
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) catalog_log: ManifestLog,
    /// The committed catalog and its version; the lock serialises DDL.
    pub(super) catalog: tokio::sync::Mutex<(u64, CatalogFile)>,
    pub(super) committer: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Series by name (as committed in the catalog).
    pub(super) series: parking_lot::RwLock<std::collections::BTreeMap<String, Arc<super::series::SeriesDef>>>,
}

impl Drop for DbInner {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        // Close the channel; the committer drains it, syncs and exits.
        let (tx, _) = mpsc::channel(1);
        drop(std::mem::replace(&mut self.commit_tx, tx));
        if let Some(h) = self.committer.lock().take() {
            let _ = h.join();
        }
    }
}

impl DbInner {
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
        &self,
        writes: impl IntoIterator<Item = (T, RowWrite)>,
    ) -> Result<Vec<Result<()>>> {
        self.enqueue_many(writes).await?.durable().await
    }

    /// Validates each write and hands the valid ones to the committer as
    /// one group. Returns once the group is queued: groups queued one after
    /// another by one caller get ascending sequence numbers, so a caller
    /// that pipelines (queues the next group before the previous one is
    /// durable) keeps its writes in order.
    pub(crate) async fn enqueue_many<T: AsRef<str>>(
        &self,
        writes: impl IntoIterator<Item = (T, RowWrite)>,
    ) -> Result<QueuedWrites> {
        let now = self.now_ms();
        let mut results = Vec::new();
        let mut pending = Vec::new();
        for (table, w) in writes {
            let r = self.table_inner(table.as_ref()).and_then(|t| {
                if t.read_only.load(Ordering::Acquire) {
                    return Err(t.read_only_error());
                }
                let opts = *t.options.read();
                let (key, mutation) = validate::to_mutation(&t.schema, &opts, now, w)?;
                pending.push(PendingWrite {
                    table: t,
                    key,
                    mutation,
                });
                Ok(())
            });
            results.push(r);
        }
        let mut ack = None;
        if !pending.is_empty() {
            match self.enqueue(pending).await {
                Ok(rx) => ack = Some(rx),
                Err(e) => results
                    .iter_mut()
                    .filter(|r| r.is_ok())
                    .for_each(|r| *r = Err(e.clone())),
            }
        }
        Ok(QueuedWrites::new(results, ack))
    }

    /// Queues one group with the committer; the receiver resolves once the
    /// group is durable (its first sequence number) or has failed.
    async fn enqueue(&self, writes: Vec<PendingWrite>) -> Result<oneshot::Receiver<Result<u64>>> {
        let (done, rx) = oneshot::channel();
        self.commit_tx
            .send(CommitMsg::Write { writes, done })
            .await
            .map_err(|_| Error::closed())?;
        Ok(rx)
    }

    /// Freezes the active memtable and waits until every frozen one is a
    /// segment.
    pub(crate) async fn flush_table(&self, t: &Arc<TableInner>) -> Result<()> {
        let (done, rx) = oneshot::channel();
        self.commit_tx
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
        self.shared.compact(t, pick).await
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }
}
