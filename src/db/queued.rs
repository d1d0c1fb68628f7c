//! Writes handed to the committer, and their results once durable.
//!
//! A write checked against the row's current state (a condition or an
//! increment) may come back from the committer as a conflict: its row
//! changed between the check and the commit. It is then checked and queued
//! again, on a fresh snapshot, until it commits or fails its condition (or
//! gives up after [`MAX_ATTEMPTS`] with `RowOperationConflict`).
//!
//! Invariant: `durable` returns one result per write, in the order given;
//! an `Ok` write is durable and visible.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use crate::error::{Error, ErrorKind, Result};
use crate::model::api::{RowWrite, WriteResult};
use crate::model::types::PkValue;
use crate::write::committer::CommitAck;

/// How often a checked write is tried before `RowOperationConflict`.
pub(crate) const MAX_ATTEMPTS: usize = 1000;

/// Who queues writes again: the database (`DbInner::enqueue_many`).
pub(crate) trait Requeue: Send + Sync {
    /// Checks and queues `writes` (table name, write) as one group.
    fn requeue(self: Arc<Self>, writes: Vec<(String, RowWrite)>) -> BoxFuture<'static, Result<QueuedWrites>>;
}

/// A write the committer has.
pub(crate) struct Accepted {
    pub result: WriteResult,
    /// Its index among the writes sent to the committer in one message.
    pub slot: usize,
    /// The auto-increment column's position in `result.row`'s key.
    pub auto_increment: Option<usize>,
    /// The table and the write again, for a write checked against a
    /// snapshot: queued anew when it conflicts.
    pub retry: Option<Box<(String, RowWrite)>>,
    /// The write failed its condition (or increment) on its snapshot and
    /// went to the committer as a probe: this is its result unless the
    /// row changed since.
    pub failed: Option<Box<Error>>,
}

/// Writes queued with the committer (see [`Table::enqueue_batch`](super::table::Table::enqueue_batch)):
/// [`QueuedWrites::durable`] waits until they are durable and returns a
/// result per write, in the order given.
#[must_use = "queued writes are committed either way; durable() tells whether they were"]
pub struct QueuedWrites {
    db: Arc<dyn Requeue>,
    /// Per write: an error for one refused before queueing.
    results: Vec<Result<Accepted>>,
    /// The committer's answer for the accepted writes; `None` when none was.
    ack: Option<oneshot::Receiver<Result<CommitAck>>>,
}

impl QueuedWrites {
    pub(crate) fn new(
        db: Arc<dyn Requeue>,
        results: Vec<Result<Accepted>>,
        ack: Option<oneshot::Receiver<Result<CommitAck>>>,
    ) -> Self {
        QueuedWrites { db, results, ack }
    }

    /// Adds the refusals of writes that were never queued, each at its
    /// index among all the writes (ascending).
    pub(crate) fn with_refused(mut self, refused: Vec<(usize, Error)>) -> Self {
        for (i, e) in refused {
            self.results.insert(i.min(self.results.len()), Err(e));
        }
        self
    }

    /// Waits for the committer; conflicts come back as their writes.
    async fn settle(self) -> (Vec<Result<WriteResult>>, Vec<(usize, String, RowWrite)>) {
        let QueuedWrites { results, ack, .. } = self;
        let committed = match ack {
            Some(ack) => Some(ack.await.map_err(|_| Error::closed()).and_then(|r| r)),
            None => None,
        };
        let mut out = Vec::with_capacity(results.len());
        let mut again = Vec::new();
        for (i, r) in results.into_iter().enumerate() {
            out.push(match (r, &committed) {
                (Err(e), _) => Err(e),
                (Ok(_), None) => Err(Error::closed()),
                (Ok(_), Some(Err(e))) => Err(e.clone()),
                (Ok(mut a), Some(Ok(ack))) => {
                    if let Some((_, e)) = ack.refused.iter().find(|(s, _)| *s == a.slot) {
                        Err(e.clone())
                    } else if ack.conflicts.binary_search(&a.slot).is_ok() {
                        let (table, w) = *a.retry.take().expect("only checked writes conflict");
                        again.push((i, table, w));
                        Err(Error::closed())
                    } else if let Some(e) = a.failed {
                        Err(*e)
                    } else {
                        if let (Some(col), Some(row)) = (a.auto_increment, a.result.row.as_mut()) {
                            row.primary_key.columns[col].1 = PkValue::Integer(ack.seq_of(a.slot) as i64);
                        }
                        Ok(a.result)
                    }
                }
            });
        }
        (out, again)
    }

    /// Waits until the queued writes are durable; one result per write.
    pub async fn durable(self) -> Result<Vec<Result<WriteResult>>> {
        let db = self.db.clone();
        let (mut out, mut again) = self.settle().await;
        let mut attempts = 1;
        while !again.is_empty() {
            if attempts >= MAX_ATTEMPTS {
                for (i, table, w) in again {
                    out[i] = Err(Error::new(
                        ErrorKind::RowOperationConflict,
                        format!(
                            "{} of table '{table}' at key {}: the row kept changing while its condition was checked \
                             ({MAX_ATTEMPTS} attempts); retry later",
                            w.op_name(),
                            w.primary_key()
                        ),
                    ));
                }
                break;
            }
            attempts += 1;
            let index: Vec<usize> = again.iter().map(|(i, _, _)| *i).collect();
            let queued = db
                .clone()
                .requeue(again.into_iter().map(|(_, t, w)| (t, w)).collect())
                .await?;
            let (results, next) = queued.settle().await;
            for (k, r) in results.into_iter().enumerate() {
                out[index[k]] = r;
            }
            again = next.into_iter().map(|(k, t, w)| (index[k], t, w)).collect();
        }
        Ok(out)
    }
}
