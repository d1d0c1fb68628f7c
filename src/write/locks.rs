//! Partition locks of local transactions, kept by the committer.
//!
//! A local transaction holds one (table, partition key value) from its
//! start to its commit or abort. The committer alone reads and changes the
//! locks, in the order messages reach it, so a write is checked against
//! exactly the transactions started before it and not yet ended.
//!
//! Invariants: while a lock is held and not expired, no write to its
//! partition commits except the holder's commit; a lock idle for more than
//! [`TXN_IDLE_MS`] (by the database clock) is dropped the moment anything
//! meets it, and its transaction can no longer commit.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::error::{Error, ErrorKind, Result};
use crate::model::key::partition_prefix;
use crate::state::TableInner;

/// A transaction expires after this long without use, in milliseconds.
pub(crate) const TXN_IDLE_MS: i64 = 60_000;

struct Lock {
    txn: u64,
    /// When the transaction was last used (database clock, ms).
    last_used: Arc<AtomicI64>,
}

impl Lock {
    fn expired(&self, now_ms: i64) -> bool {
        now_ms - self.last_used.load(Ordering::Acquire) > TXN_IDLE_MS
    }
}

/// The locks held, by (table id, encoded partition key value).
#[derive(Default)]
pub(crate) struct PartitionLocks {
    held: HashMap<(u64, Vec<u8>), Lock>,
}

impl PartitionLocks {
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The refusal of a write (not a transaction's commit) to `key`, when
    /// a live transaction holds its partition.
    pub fn check(&mut self, table: &TableInner, key: &[u8], now_ms: i64) -> Option<Error> {
        let part = partition_prefix(key, table.schema.primary_key[0].pk_type);
        let id = (table.id, part.to_vec());
        let lock = self.held.get(&id)?;
        if lock.expired(now_ms) {
            self.held.remove(&id);
            return None;
        }
        Some(Error::new(
            ErrorKind::RowOperationConflict,
            format!(
                "the partition of this row in table '{}' is held by local transaction {}; \
                 write again once it commits or aborts (it expires after {} s without use)",
                table.schema.name,
                lock.txn,
                TXN_IDLE_MS / 1000
            ),
        ))
    }

    /// Takes the lock of a partition for transaction `txn`.
    pub fn lock(
        &mut self,
        table: &TableInner,
        partition: Vec<u8>,
        txn: u64,
        last_used: Arc<AtomicI64>,
        now_ms: i64,
    ) -> Result<()> {
        let id = (table.id, partition);
        if let Some(l) = self.held.get(&id)
            && !l.expired(now_ms)
        {
            return Err(Error::new(
                ErrorKind::RowOperationConflict,
                format!(
                    "this partition key value of table '{}' is held by local transaction {}; \
                     start again once it commits or aborts (it expires after {} s without use)",
                    table.schema.name,
                    l.txn,
                    TXN_IDLE_MS / 1000
                ),
            ));
        }
        self.held.insert(id, Lock { txn, last_used });
        Ok(())
    }

    /// Releases the lock of `txn`; an error when the transaction does not
    /// hold it (any more): it expired, or it was never started.
    pub fn release(&mut self, table: &TableInner, partition: &[u8], txn: u64, now_ms: i64) -> Result<()> {
        let id = (table.id, partition.to_vec());
        match self.held.get(&id) {
            Some(l) if l.txn == txn => {
                let expired = l.expired(now_ms);
                self.held.remove(&id);
                if expired {
                    return Err(expired_error(&table.schema.name, txn));
                }
                Ok(())
            }
            _ => Err(expired_error(&table.schema.name, txn)),
        }
    }
}

/// The refusal of a transaction that no longer holds its partition.
pub(crate) fn expired_error(table: &str, txn: u64) -> Error {
    Error::new(
        ErrorKind::ObjectNotExist,
        format!(
            "local transaction {txn} on table '{table}' has ended: it was idle for more than {} s (or committed or \
             aborted); its writes were dropped; start a new transaction",
            TXN_IDLE_MS / 1000
        ),
    )
}
