//! Local transactions: writes to one (table, partition key value) that
//! commit all together or not at all.
//!
//! Starting one locks the partition in the committer (see
//! `write::locks`): from then on every other write to it is refused with
//! `RowOperationConflict` until the transaction commits, aborts or expires
//! (60 s without use). Its writes are checked and validated as they come
//! (conditions and increments against the transaction's own view) and kept
//! in a private memtable; reads in the transaction see the table with that
//! memtable laid on top. The commit hands every write to the committer as
//! one message, so one WAL record: after a crash all of them are there or
//! none.
//!
//! Invariants: nothing of a transaction is visible outside it before its
//! commit; its reads see the partition as of its start plus its own writes
//! (no one else can change the partition meanwhile); a transaction that
//! has ended (committed, aborted, expired) accepts nothing more.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tokio::sync::oneshot;

use super::inner::DbInner;
use super::reads::{read_range, read_row};
use crate::error::{Error, Result};
use crate::memtable::Memtable;
use crate::model::api::{GetRange, GetRow, GetRowResult, RangeResult, ReturnType, RowWrite, WriteResult};
use crate::model::capacity::CapacityUnit;
use crate::model::key::{KeyRange, partition_prefix};
use crate::model::types::{PkValue, PrimaryKey, Row};
use crate::state::{Snapshot, TableInner};
use crate::write::committer::{CommitMsg, PendingWrite};
use crate::write::locks::{TXN_IDLE_MS, expired_error};
use crate::write::{condition, validate};

/// Sequence numbers of a transaction's private memtable start here: above
/// every committed write, so its writes are the newest in its reads.
const TXN_SEQ_BASE: u64 = 1 << 62;

/// An open local transaction on one partition key value of a table (see
/// [`Table::start_transaction`](super::table::Table::start_transaction)).
pub struct Transaction {
    db: Arc<DbInner>,
    table: Arc<TableInner>,
    id: u64,
    partition: Vec<u8>,
    last_used: Arc<AtomicI64>,
    state: tokio::sync::Mutex<Writes>,
}

struct Writes {
    mem: Arc<Memtable>,
    pending: Vec<PendingWrite>,
    ended: bool,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("id", &self.id)
            .field("table", &self.table.schema.name)
            .finish()
    }
}

impl Transaction {
    /// Locks `partition_key` of `table` for a new transaction.
    pub(super) async fn start(db: Arc<DbInner>, table: Arc<TableInner>, partition_key: PkValue) -> Result<Self> {
        db.writable("a transaction")?;
        if table.read_only.load(Ordering::Acquire) {
            return Err(table.read_only_error());
        }
        let first = &table.schema.primary_key[0];
        let probe = PrimaryKey {
            columns: std::iter::once((first.name.clone(), partition_key))
                .chain(table.schema.primary_key[1..].iter().map(|c| {
                    let v = match c.pk_type {
                        crate::model::types::PkType::Integer => PkValue::Integer(0),
                        crate::model::types::PkType::String => PkValue::String(String::new()),
                        crate::model::types::PkType::Binary => PkValue::Binary(Vec::new()),
                    };
                    (c.name.clone(), v)
                }))
                .collect(),
        };
        // Checks the value's type and size as a key would be.
        let key = table.schema.encode_pk(&probe)?;
        let partition = partition_prefix(&key, first.pk_type).to_vec();
        let id = db.next_txn.fetch_add(1, Ordering::Relaxed);
        let last_used = Arc::new(AtomicI64::new(db.now_ms()));
        let (done, rx) = oneshot::channel();
        db.sender("a transaction")?
            .send(CommitMsg::Lock {
                table: table.clone(),
                partition: partition.clone(),
                txn: id,
                last_used: last_used.clone(),
                done,
            })
            .await
            .map_err(|_| Error::closed())?;
        rx.await.map_err(|_| Error::closed())??;
        Ok(Transaction {
            db,
            table,
            id,
            partition,
            last_used,
            state: tokio::sync::Mutex::new(Writes {
                mem: Arc::new(Memtable::new()),
                pending: Vec::new(),
                ended: false,
            }),
        })
    }

    /// The transaction's id (it names the transaction in errors).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Refuses an ended or expired transaction; else marks it used now.
    fn touch(&self, w: &Writes) -> Result<()> {
        let now = self.db.now_ms();
        if w.ended || now - self.last_used.load(Ordering::Acquire) > TXN_IDLE_MS {
            return Err(expired_error(&self.table.schema.name, self.id));
        }
        self.last_used.store(now, Ordering::Release);
        Ok(())
    }

    /// The table as the transaction sees it: committed data plus its own
    /// writes on top.
    fn view(&self, w: &Writes) -> Snapshot {
        let mut snap = self.table.snapshot_for(&self.partition, &self.db.shared().visible_seq);
        snap.memtables.push(w.mem.clone());
        // No write to the partition but the transaction's can be in
        // flight (the partition is locked), so every memtable write of its
        // keys is committed: nothing is hidden by the wider snapshot.
        snap.seq = u64::MAX - 1;
        snap
    }

    fn check_partition(&self, key: &[u8], what: &str) -> Result<()> {
        if partition_prefix(key, self.table.schema.primary_key[0].pk_type) != self.partition.as_slice() {
            return Err(Error::param(format!(
                "{what} is outside local transaction {}: it holds one partition key value ('{}') of table '{}'; \
                 write other partition key values outside it or in their own transaction",
                self.id, self.table.schema.primary_key[0].name, self.table.schema.name
            )));
        }
        Ok(())
    }

    /// A write in the transaction: checked now (its condition against the
    /// transaction's view), applied at the commit.
    pub async fn write(&self, w: RowWrite) -> Result<WriteResult> {
        let mut st = self.state.lock().await;
        self.touch(&st)?;
        crate::write::index::refuse_index_write(&self.table)?;
        let (key, placeholder) = validate::precheck(&self.table.schema, &w)?;
        validate::check_defined_types(&self.table.schema.name, &self.table.declared.read(), &w)?;
        if placeholder.is_some() {
            return Err(Error::param(
                "an auto-increment placeholder is not accepted in a local transaction: its value is assigned at the \
                 commit; write the row outside the transaction, or give the key",
            ));
        }
        self.check_partition(&key, &format!("{} at key {}", w.op_name(), w.primary_key()))?;
        let now = self.db.now_ms();
        let snap = self.view(&st);
        let reads = w.reads_row();
        // The partition is locked: the row as the transaction sees it is
        // the row at the commit, origin columns included.
        let origin = self.table.origin_columns();
        let indexed = crate::write::index::check_values(&self.table, &w)?;
        let state = if reads || origin.is_some() || indexed {
            let state = snap.get_state(&key, None).await?;
            condition::check(&self.table.schema, &snap.options, now, &w, state.as_ref())?;
            state
        } else {
            None
        };
        let origin = origin.map(|c| crate::write::checked::origin_of(state.as_ref(), &c));
        let return_type = w.return_type();
        let pk = (return_type != ReturnType::None).then(|| w.primary_key().clone());
        let v = validate::to_mutation(&self.table.schema, &snap.options, now, w, state.as_ref())?;
        let consumed = CapacityUnit {
            read: reads as u64,
            write: CapacityUnit::units(v.data_bytes),
        };
        let row = pk.map(|primary_key| Row {
            primary_key,
            columns: match return_type {
                ReturnType::AfterModify => v.mutation.written_cells(),
                _ => Vec::new(),
            },
        });
        let seq = TXN_SEQ_BASE + st.pending.len() as u64;
        st.mem.insert(v.key.clone(), seq, v.mutation.clone());
        let mut pending = PendingWrite::plain(self.table.clone(), v.key, v.mutation);
        pending.origin = origin;
        pending.before = indexed.then_some(state);
        st.pending.push(pending);
        Ok(WriteResult { consumed, row })
    }

    /// GetRow in the transaction (the key must be in its partition).
    pub async fn get_row(&self, get: GetRow) -> Result<GetRowResult> {
        let st = self.state.lock().await;
        self.touch(&st)?;
        let key = self.table.schema.encode_pk(&get.primary_key)?;
        self.check_partition(&key, &format!("GetRow at key {}", get.primary_key))?;
        read_row(&self.table, &self.view(&st), self.db.now_ms(), get).await
    }

    /// GetRange in the transaction, over its partition only (the range is
    /// narrowed to it).
    pub async fn get_range(&self, req: GetRange) -> Result<RangeResult> {
        let st = self.state.lock().await;
        self.touch(&st)?;
        let within = KeyRange::prefixed(&self.partition);
        read_range(
            &self.table,
            std::slice::from_ref(&self.view(&st)),
            self.db.now_ms(),
            req,
            Some(&within),
        )
        .await
    }

    /// Commits every write of the transaction at once (one WAL record);
    /// returns once they are durable. Fails, changing nothing, when the
    /// transaction has expired.
    pub async fn commit(self) -> Result<()> {
        let mut st = self.state.lock().await;
        self.touch(&st)?;
        st.ended = true;
        let writes = std::mem::take(&mut st.pending);
        let (done, rx) = oneshot::channel();
        self.db
            .sender("a transaction")?
            .send(CommitMsg::Commit {
                table: self.table.clone(),
                partition: self.partition.clone(),
                txn: self.id,
                writes,
                done,
            })
            .await
            .map_err(|_| Error::closed())?;
        rx.await.map_err(|_| Error::closed())??;
        Ok(())
    }

    /// Drops every write of the transaction and frees its partition.
    pub async fn abort(self) -> Result<()> {
        let mut st = self.state.lock().await;
        if st.ended {
            return Ok(());
        }
        st.ended = true;
        self.db
            .sender("a transaction")?
            .send(CommitMsg::Unlock {
                table: self.table.clone(),
                partition: self.partition.clone(),
                txn: self.id,
            })
            .await
            .map_err(|_| Error::closed())
    }
}

impl Drop for Transaction {
    /// A transaction dropped without commit or abort is aborted (or, if
    /// the committer's queue is full, expires after 60 s).
    fn drop(&mut self) {
        if !self.state.get_mut().ended
            && let Some(tx) = &self.db.commit_tx
        {
            let _ = tx.try_send(CommitMsg::Unlock {
                table: self.table.clone(),
                partition: self.partition.clone(),
                txn: self.id,
            });
        }
    }
}
