//! Writes handed to the committer, and their results once durable.
//!
//! A write checked against the row's current state (a condition or an
//! increment) is checked on a snapshot before it is queued; the committer
//! decides it again at its place in the order when the row changed since
//! (see `write::checked`), and its answer replaces the snapshot's: the
//! error, or the capacity units and returned cells of the write it
//! committed.
//!
//! Invariant: `durable` returns one result per write, in the order given;
//! an `Ok` write is durable and visible.

use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::model::api::WriteResult;
use crate::model::capacity::CapacityUnit;
use crate::model::types::PkValue;
use crate::write::committer::CommitAck;

/// A write the committer has.
pub(crate) struct Accepted {
    pub result: WriteResult,
    /// Its index among the writes sent to the committer in one message.
    pub slot: usize,
    /// The auto-increment column's position in `result.row`'s key.
    pub auto_increment: Option<usize>,
    /// The write failed its condition (or increment) on its snapshot: this
    /// is its result unless the committer decided it again.
    pub failed: Option<Box<Error>>,
}

/// Writes queued with the committer (see [`Table::enqueue_batch`](super::table::Table::enqueue_batch)):
/// [`QueuedWrites::durable`] waits until they are durable and returns a
/// result per write, in the order given.
#[must_use = "queued writes are committed either way; durable() tells whether they were"]
pub struct QueuedWrites {
    /// Per write: an error for one refused before queueing.
    results: Vec<Result<Accepted>>,
    /// The committer's answer for the accepted writes; `None` when none was.
    ack: Option<oneshot::Receiver<Result<CommitAck>>>,
}

impl QueuedWrites {
    pub(crate) fn new(results: Vec<Result<Accepted>>, ack: Option<oneshot::Receiver<Result<CommitAck>>>) -> Self {
        QueuedWrites { results, ack }
    }

    /// Adds the refusals of writes that were never queued, each at its
    /// index among all the writes (ascending).
    pub(crate) fn with_refused(mut self, refused: Vec<(usize, Error)>) -> Self {
        for (i, e) in refused {
            self.results.insert(i.min(self.results.len()), Err(e));
        }
        self
    }

    /// Waits until the queued writes are durable; one result per write.
    pub async fn durable(self) -> Result<Vec<Result<WriteResult>>> {
        let QueuedWrites { results, ack } = self;
        let committed = match ack {
            Some(ack) => Some(ack.await.map_err(|_| Error::closed()).and_then(|r| r)),
            None => None,
        };
        let mut out = Vec::with_capacity(results.len());
        for r in results {
            out.push(match (r, &committed) {
                (Err(e), _) => Err(e),
                (Ok(_), None) => Err(Error::closed()),
                (Ok(_), Some(Err(e))) => Err(e.clone()),
                (Ok(a), Some(Ok(ack))) => settle(a, ack),
            });
        }
        Ok(out)
    }
}

/// One accepted write's result, from the committer's answer.
fn settle(mut a: Accepted, ack: &CommitAck) -> Result<WriteResult> {
    if let Some((_, e)) = ack.refused.iter().find(|(s, _)| *s == a.slot) {
        return Err(e.clone());
    }
    if let Ok(i) = ack.decided.binary_search_by_key(&a.slot, |(s, _)| *s) {
        let d = ack.decided[i].1.as_ref().map_err(Error::clone)?;
        a.result.consumed.write = CapacityUnit::units(d.data_bytes);
        if let (Some(row), Some(cells)) = (a.result.row.as_mut(), &d.written) {
            row.columns = cells.clone();
        }
    } else if let Some(e) = a.failed {
        return Err(*e);
    }
    if let (Some(col), Some(row)) = (a.auto_increment, a.result.row.as_mut()) {
        row.primary_key.columns[col].1 = PkValue::Integer(ack.seq_of(a.slot) as i64);
    }
    Ok(a.result)
}
