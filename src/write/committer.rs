//! The committer: orders, logs and applies every write.
//!
//! Writers send validated mutations over a channel to the committer
//! thread. The committer drains everything pending (a group), gives each
//! write the next sequence number, appends the group to the WAL as one
//! record, syncs once (per the durability setting), applies the group to
//! the memtables, publishes the new visible sequence, and only then
//! acknowledges every writer of the group. One fsync thus serves many
//! writers (group commit).
//!
//! The committer's state sits behind one lock. A writer that will wait
//! for its writes, on a thread of its own (not a runtime task), takes
//! the lock itself when no message is queued or being processed, and runs
//! the round for its writes alone ([`Committer::try_inline`]): the two
//! thread hand-offs were most of an unsynced write's time. Every message
//! sent is counted until its round is over, so an inline round never
//! overtakes anything sent before it.
//!
//! A write that was checked against a snapshot (a condition or an
//! increment) carries that snapshot's sequence number and the row it read;
//! when its row has had a write since (committed after the snapshot, or
//! earlier in the same group), the committer checks it again on the row as
//! it is at the write's place ([`super::checked`]). A write whose check
//! failed on its snapshot comes too, with nothing to write: its failure
//! stands only if the row did not change. So a check sees exactly the
//! writes sequenced before it, the writer's own earlier writes included,
//! and keeps its place in the order. A write with an auto-increment key
//! gets its sequence number as the key column's value, written into the
//! key before it is logged.
//!
//! Local transactions lock a partition here (see [`super::locks`]): a
//! write to a held partition is refused with `RowOperationConflict`, and a
//! transaction's commit is one message, so one WAL record.
//!
//! It also freezes memtables (only the committer inserts into them, so a
//! freeze can never lose a write racing with it), rotates the WAL, deletes
//! WAL files whose writes are all flushed, and stalls when unflushed data
//! passes the write-buffer budget.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

pub(crate) use super::checked::PendingWrite;
use super::checked::{self, Decided};
use super::index;
use super::locks::PartitionLocks;
use super::recent::RecentKeys;
use crate::error::{Error, ErrorKind, Result};
use crate::state::TableInner;
use crate::wal::{self, WalWriter};

/// The committer's answer to one `Write` message.
#[derive(Debug, Clone, Default)]
pub(crate) struct CommitAck {
    /// The sequence number of the message's first committed write; the
    /// others follow, one each, in order.
    pub first_seq: u64,
    /// Every write of the message not committed: checked writes whose
    /// check fails at their place, and the refused (ascending).
    pub uncommitted: Vec<usize>,
    /// Checked writes whose row changed after their snapshot, decided
    /// again at their place: the result (indices ascending).
    pub decided: Vec<(usize, Result<Decided>)>,
    /// Writes refused, with why (a local transaction holds the partition).
    pub refused: Vec<(usize, Error)>,
}

impl CommitAck {
    /// The sequence number write `i` of the message got (a committed one).
    pub fn seq_of(&self, i: usize) -> u64 {
        self.first_seq + (i - self.uncommitted.partition_point(|c| *c < i)) as u64
    }
}

pub(crate) enum CommitMsg {
    /// Writes committed together (one WAL record): all or none survive.
    Write {
        writes: Vec<PendingWrite>,
        done: oneshot::Sender<Result<CommitAck>>,
    },
    /// Start a local transaction: lock a partition key value.
    Lock {
        table: Arc<TableInner>,
        partition: Vec<u8>,
        txn: u64,
        last_used: Arc<std::sync::atomic::AtomicI64>,
        done: oneshot::Sender<Result<()>>,
    },
    /// Commit a local transaction: its writes (one WAL record), then the
    /// partition is free. Refused whole if the transaction expired.
    Commit {
        table: Arc<TableInner>,
        partition: Vec<u8>,
        txn: u64,
        writes: Vec<PendingWrite>,
        done: oneshot::Sender<Result<CommitAck>>,
    },
    /// Abort a local transaction: free the partition.
    Unlock {
        table: Arc<TableInner>,
        partition: Vec<u8>,
        txn: u64,
    },
    /// Index rows derived from a snapshot of `base` at sequence `at` (an
    /// index's backfill, or a global index catching up): each row's writes
    /// are committed unless its base row was written after `at` (that
    /// write, or a later sync, decides the row's index entry).
    IndexSync {
        base: Arc<TableInner>,
        at: u64,
        /// The links of the memtables active at `at`, one per partition.
        chains: Vec<Arc<crate::state::MemChain>>,
        rows: Vec<index::SyncRow>,
        done: oneshot::Sender<Result<CommitAck>>,
    },
    /// Freeze the table's active memtable (for an explicit flush).
    Freeze {
        table: Arc<TableInner>,
        done: oneshot::Sender<Result<()>>,
    },
    /// Run a change of the tables' in-memory state between two rounds
    /// (no write is being inserted meanwhile): a partition split or merge.
    Apply {
        change: Box<dyn FnOnce() + Send>,
        done: oneshot::Sender<()>,
    },
    /// Fsync now (the interval durability timer, or a stream that waits
    /// for its writes to be durable), then drop obsolete WAL files;
    /// `done` is told once the fsync is over.
    Sync { done: Option<oneshot::Sender<()>> },
    /// A flush finished: obsolete WAL files can go.
    FlushDone,
}

/// What the committer needs from the database.
pub(crate) trait CommitHost: Send + Sync + 'static {
    fn visible_seq(&self) -> &AtomicU64;
    /// The largest sequence whose WAL record is durable (what a stream may
    /// show: a power cut takes back nothing up to it).
    fn durable_seq(&self) -> &AtomicU64;
    /// Tables whose unflushed writes pin the WAL.
    fn live_tables(&self) -> Vec<Arc<TableInner>>;
    /// Starts a background flush of the table's frozen memtables.
    fn schedule_flush(&self, table: Arc<TableInner>);
    fn memtable_bytes(&self) -> usize;
    fn write_buffer_bytes(&self) -> usize;
    /// Counts time writers spent stalled, in microseconds.
    fn stall_micros(&self) -> &AtomicU64;
    /// Writers stall while a table has more sorted runs than this.
    fn stall_runs(&self) -> usize;
    /// Counts bytes appended to the WAL.
    fn wal_bytes(&self) -> &AtomicU64;
    /// The database clock, in milliseconds (transaction expiry).
    fn now_ms(&self) -> i64;
    /// The database is closing: no flush or compaction starts any more.
    fn closing(&self) -> bool;
}

/// Most bytes of WAL payload in one group.
const MAX_GROUP_BYTES: usize = 8 << 20;

/// The committer's state and what shares it: the committer thread, and a
/// writer that commits its own writes when nothing is queued (see
/// [`Committer::try_inline`]).
pub(crate) struct Committer {
    host: Arc<dyn CommitHost>,
    state: parking_lot::Mutex<CommitState>,
    /// Messages sent to the committer thread and not yet processed (every
    /// send counts one first; the thread takes them off once their round
    /// is done, while it still holds `state`).
    queued: AtomicUsize,
}

/// What the committer keeps from round to round.
struct CommitState {
    wal: WalWriter,
    next_seq: u64,
    /// The last group's commit time in microseconds: each group's is
    /// above the one before (a stream's order), whatever the clock does.
    last_commit_us: u64,
    payload: Vec<u8>,
    /// Set once the WAL's end cannot be vouched for: every later write is
    /// refused.
    failed: Option<Error>,
    locks: PartitionLocks,
    /// Reused from group to group: a group of thousands of writes would
    /// otherwise grow a fresh vector (and have the kernel zero its pages)
    /// every time.
    group: Vec<PendingWrite>,
    /// The group's local index writes, reused the same way.
    indexed: Vec<index::IndexWrite>,
    /// The keys written lately, so that a checked write whose row had no
    /// write since its snapshot is decided without a memtable search.
    recent: RecentKeys,
}

impl Committer {
    /// `last_commit_us`: the newest commit time in the log.
    pub fn new(host: Arc<dyn CommitHost>, wal: WalWriter, next_seq: u64, last_commit_us: u64) -> Arc<Self> {
        Arc::new(Committer {
            host,
            state: parking_lot::Mutex::new(CommitState {
                wal,
                next_seq,
                last_commit_us,
                payload: Vec::with_capacity(1 << 20),
                failed: None,
                locks: PartitionLocks::default(),
                group: Vec::new(),
                indexed: Vec::new(),
                recent: RecentKeys::new(next_seq),
            }),
            queued: AtomicUsize::new(0),
        })
    }

    /// Commits `writes` on the calling thread, as the committer thread
    /// would have in a round of their own, when nothing is queued for it:
    /// a lone writer is then spared the two thread hand-offs (to the
    /// committer and back), most of an unsynced write's time on this VM.
    /// Refused (the writes handed back) while any message is queued or
    /// being processed, so nothing is overtaken, and while writers must
    /// stall for the write buffer (the thread does the stalling).
    pub fn try_inline(
        &self,
        writes: Vec<PendingWrite>,
    ) -> std::result::Result<oneshot::Receiver<Result<CommitAck>>, Vec<PendingWrite>> {
        if self.queued.load(Ordering::SeqCst) != 0 {
            return Err(writes);
        }
        let Some(mut st) = self.state.try_lock() else {
            return Err(writes);
        };
        // Under the lock: the thread holds it from taking a message until
        // that message is off the count, so none is half-processed now.
        if self.queued.load(Ordering::SeqCst) != 0 || over_budget(&*self.host) {
            return Err(writes);
        }
        let (done, rx) = oneshot::channel();
        st.round_guarded(&*self.host, CommitMsg::Write { writes, done }, &mut || None, false);
        Ok(rx)
    }

    /// Counts a message about to be sent to the committer thread.
    pub fn will_send(&self) {
        self.queued.fetch_add(1, Ordering::SeqCst);
    }

    /// Takes back the count of a message whose send failed.
    pub fn not_sent(&self) {
        self.queued.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The committer thread's queue. Every message sent through it is counted
/// until processed, which is how [`Committer::try_inline`] knows nothing
/// would be overtaken.
#[derive(Clone)]
pub(crate) struct CommitSender {
    tx: mpsc::Sender<CommitMsg>,
    core: Arc<Committer>,
}

impl CommitSender {
    pub fn new(tx: mpsc::Sender<CommitMsg>, core: Arc<Committer>) -> Self {
        CommitSender { tx, core }
    }

    /// Queues `msg` for the committer thread (waits for room); `Err` once
    /// the thread is gone.
    pub async fn send(&self, msg: CommitMsg) -> std::result::Result<(), ()> {
        self.core.will_send();
        self.tx.send(msg).await.map_err(|_| self.core.not_sent())
    }

    /// [`Self::send`] without waiting: `Err` when the queue is full too.
    pub fn try_send(&self, msg: CommitMsg) -> std::result::Result<(), ()> {
        self.core.will_send();
        self.tx.try_send(msg).map_err(|_| self.core.not_sent())
    }

    /// See [`Committer::try_inline`].
    pub fn try_inline(
        &self,
        writes: Vec<PendingWrite>,
    ) -> std::result::Result<oneshot::Receiver<Result<CommitAck>>, Vec<PendingWrite>> {
        self.core.try_inline(writes)
    }

    pub fn downgrade(&self) -> WeakCommitSender {
        WeakCommitSender {
            tx: self.tx.downgrade(),
            core: Arc::downgrade(&self.core),
        }
    }

    /// Lets go of this handle's end of the queue: once every handle has,
    /// the thread drains what is queued, syncs the WAL and exits.
    pub fn close(&mut self) {
        let (tx, _) = mpsc::channel(1);
        self.tx = tx;
    }
}

/// A [`CommitSender`] that does not keep the committer thread running,
/// nor its state alive (the database's shared state holds one, and the
/// committer holds the shared state: a strong handle would be a cycle).
#[derive(Clone)]
pub(crate) struct WeakCommitSender {
    tx: mpsc::WeakSender<CommitMsg>,
    core: std::sync::Weak<Committer>,
}

impl WeakCommitSender {
    pub fn upgrade(&self) -> Option<CommitSender> {
        Some(CommitSender {
            tx: self.tx.upgrade()?,
            core: self.core.upgrade()?,
        })
    }
}

/// The committer thread: takes messages off the queue, a round at a time.
pub(crate) fn run(c: Arc<Committer>, mut rx: mpsc::Receiver<CommitMsg>) {
    while let Some(first) = rx.blocking_recv() {
        let mut st = c.state.lock();
        let mut taken = 1;
        let mut next = || {
            let m = rx.try_recv().ok();
            taken += usize::from(m.is_some());
            m
        };
        st.round_guarded(&*c.host, first, &mut next, true);
        c.queued.fetch_sub(taken, Ordering::SeqCst);
    }
    let _ = c.state.lock().wal.finish();
}

impl CommitState {
    /// [`Self::round`], and if it panics (a bug), every later write is
    /// refused rather than committed on state the panic left half-updated;
    /// the writers of the round get `Closed` (their acknowledgements were
    /// dropped).
    fn round_guarded(
        &mut self,
        host: &dyn CommitHost,
        first: CommitMsg,
        next_msg: &mut dyn FnMut() -> Option<CommitMsg>,
        may_stall: bool,
    ) {
        let run = std::panic::AssertUnwindSafe(|| self.round(host, first, next_msg, may_stall));
        if std::panic::catch_unwind(run).is_err() {
            self.group.clear();
            self.failed
                .get_or_insert_with(|| Error::new(ErrorKind::Closed, "an internal error in a commit"));
        }
    }

    /// One round: `first` and the messages `next` yields (up to a group's
    /// byte budget) are grouped, logged, applied and acknowledged; then
    /// the other messages of the round are handled. `may_stall`: hold the
    /// caller back afterwards while the write buffer is over budget.
    fn round(
        &mut self,
        host: &dyn CommitHost,
        first: CommitMsg,
        next_msg: &mut dyn FnMut() -> Option<CommitMsg>,
        may_stall: bool,
    ) {
        let CommitState {
            wal,
            next_seq,
            last_commit_us,
            payload,
            failed,
            locks,
            group,
            indexed,
            recent,
        } = self;
        // Writes refused by a transaction's lock: (index in the group, why).
        let mut refused: Vec<(usize, Error)> = Vec::new();
        let mut acks = Vec::new();
        // Transactions started in this round: answered once the writes
        // queued before them are visible.
        let mut started = Vec::new();
        let mut others = Vec::new();
        let mut bytes = 0usize;
        let mut next = Some(first);
        let now = host.now_ms();
        while let Some(msg) = next.take() {
            match msg {
                CommitMsg::Write { writes, done } => {
                    // An archive sets the flag before it freezes the
                    // memtable, so a write committed after the freeze
                    // cannot be lost with the local copy.
                    let read_only = writes.iter().find(|w| w.table.read_only.load(Ordering::Acquire));
                    if let Some(w) = read_only {
                        let _ = done.send(Err(w.table.read_only_error()));
                    } else {
                        for (i, w) in writes.iter().enumerate() {
                            let locked = if locks.is_empty() {
                                None
                            } else {
                                locks.check(&w.table, &w.key, now)
                            };
                            // A write prepared before its table had a local
                            // index did not read its row: it cannot keep
                            // the index, so it is refused (the writer retries).
                            let unread =
                                || (w.before.is_none() && w.table.has_indexes()).then(|| index::unread_error(&w.table));
                            if let Some(e) = locked.or_else(unread) {
                                refused.push((group.len() + i, e));
                            }
                        }
                        bytes += payload_bytes(&writes);
                        let n = writes.len();
                        group.extend(writes);
                        acks.push((done, n));
                    }
                }
                CommitMsg::Lock {
                    table,
                    partition,
                    txn,
                    last_used,
                    done,
                } => match locks.lock(&table, partition, txn, last_used, now) {
                    Ok(()) => started.push(done),
                    Err(e) => {
                        let _ = done.send(Err(e));
                    }
                },
                CommitMsg::Commit {
                    table,
                    partition,
                    txn,
                    writes,
                    done,
                } => match locks.release(&table, &partition, txn, now) {
                    Ok(()) if table.read_only.load(Ordering::Acquire) => {
                        let _ = done.send(Err(table.read_only_error()));
                    }
                    Ok(()) if writes.iter().any(|w| w.before.is_none()) && table.has_indexes() => {
                        let _ = done.send(Err(index::unread_error(&table)));
                    }
                    Ok(()) => {
                        bytes += payload_bytes(&writes);
                        let n = writes.len();
                        group.extend(writes);
                        acks.push((done, n));
                    }
                    Err(e) => {
                        let _ = done.send(Err(e));
                    }
                },
                CommitMsg::Unlock { table, partition, txn } => {
                    let _ = locks.release(&table, &partition, txn, now);
                }
                CommitMsg::IndexSync {
                    base,
                    at,
                    chains,
                    rows,
                    done,
                } => {
                    let writes = index::sync_writes(&base, at, &chains, rows, group);
                    if writes.is_empty() {
                        let _ = done.send(Ok(CommitAck::default()));
                    } else {
                        bytes += payload_bytes(&writes);
                        let n = writes.len();
                        group.extend(writes);
                        acks.push((done, n));
                    }
                }
                other => others.push(other),
            }
            if bytes < MAX_GROUP_BYTES {
                next = next_msg();
            }
        }
        if !group.is_empty() {
            let decisions = checked::decide(group, &refused, *next_seq, recent);
            let uncommitted: Vec<usize> = if decisions.failed.is_empty() && refused.is_empty() {
                Vec::new()
            } else {
                let is_refused = |i: usize| refused.binary_search_by_key(&i, |(c, _)| *c).is_ok();
                let out: Vec<usize> = (0..group.len())
                    .filter(|i| is_refused(*i) || decisions.failed.binary_search(i).is_ok())
                    .collect();
                let mut i = 0;
                group.retain(|_| {
                    i += 1;
                    out.binary_search(&(i - 1)).is_err()
                });
                out
            };
            let mut touched: Vec<Arc<TableInner>> = Vec::new();
            for w in group.iter() {
                if !touched.iter().any(|t| Arc::ptr_eq(t, &w.table)) {
                    touched.push(w.table.clone());
                    if w.before.is_some() {
                        // Its local indexes take writes too.
                        touched.extend(w.table.indexes.read().iter().map(|i| i.table.clone()));
                    }
                }
            }
            let result = match &failed {
                Some(e) => Err(Error::new(
                    ErrorKind::Closed,
                    format!(
                        "writes are refused since an earlier WAL write failed ({}); reopen the database",
                        e.message()
                    ),
                )),
                // Nothing to log: failed checks and refusals only.
                None if group.is_empty() => Ok(*next_seq),
                None => commit_group(host, wal, (next_seq, last_commit_us), payload, (group, indexed), recent),
            };
            group.clear();
            if let Err(e) = &result
                && wal.is_poisoned()
            {
                // The WAL's end cannot be vouched for (a failed fsync, or a
                // partial record that could not be cut off): refuse further
                // writes rather than risk acknowledging something a restart
                // would drop. Reopening recovers. A failed append that was
                // rolled back fails only its own group.
                failed.get_or_insert_with(|| e.clone());
            }
            // Hand each message its first sequence and its decisions.
            let mut next = *result.as_ref().unwrap_or(&0);
            let mut start = 0;
            let mine = |all: &[usize], start: usize, n: usize| -> Vec<usize> {
                let from = all.partition_point(|c| *c < start);
                let to = all.partition_point(|c| *c < start + n);
                all[from..to].iter().map(|c| c - start).collect()
            };
            let mut decided = decisions.decided.into_iter().peekable();
            for (done, n) in acks {
                let from = refused.partition_point(|(c, _)| *c < start);
                let to = refused.partition_point(|(c, _)| *c < start + n);
                let ack = CommitAck {
                    first_seq: next,
                    uncommitted: mine(&uncommitted, start, n),
                    decided: std::iter::from_fn(|| decided.next_if(|(c, _)| *c < start + n))
                        .map(|(c, d)| (c - start, d))
                        .collect(),
                    refused: refused[from..to].iter().map(|(c, e)| (c - start, e.clone())).collect(),
                };
                next += (n - ack.uncommitted.len()) as u64;
                start += n;
                let _ = done.send(result.clone().map(|_| ack));
            }
            maybe_freeze(host, wal, &touched);
            if may_stall {
                stall_if_over_budget(host);
            }
        }
        for done in started {
            let _ = done.send(Ok(()));
        }
        for msg in others {
            match msg {
                CommitMsg::Freeze { table, done } => {
                    // The caller flushes it itself.
                    freeze(host, wal, &table, false, 0);
                    let _ = done.send(Ok(()));
                }
                CommitMsg::Apply { change, done } => {
                    change();
                    let _ = done.send(());
                }
                CommitMsg::Sync { done } => {
                    // A failure poisons the WAL: the next group is refused.
                    if let Err(e) = wal.sync() {
                        failed.get_or_insert(e);
                    }
                    publish_durable(host, wal);
                    gc_wal(host, wal);
                    if let Some(done) = done {
                        let _ = done.send(());
                    }
                }
                CommitMsg::FlushDone => gc_wal(host, wal),
                CommitMsg::Write { .. }
                | CommitMsg::IndexSync { .. }
                | CommitMsg::Lock { .. }
                | CommitMsg::Commit { .. }
                | CommitMsg::Unlock { .. } => {}
            }
        }
    }
}

/// The in-memory size of some writes, for the group's byte budget.
fn payload_bytes(writes: &[PendingWrite]) -> usize {
    writes.iter().map(|w| w.key.len() + w.mutation.approx_bytes()).sum()
}

/// Logs and applies one group; returns the first sequence it used.
fn commit_group(
    host: &dyn CommitHost,
    wal: &mut WalWriter,
    (next_seq, last_commit_us): (&mut u64, &mut u64),
    payload: &mut Vec<u8>,
    (group, indexed): (&mut Vec<PendingWrite>, &mut Vec<index::IndexWrite>),
    recent: &mut RecentKeys,
) -> Result<u64> {
    let first = *next_seq;
    let commit_us = (host.now_ms().max(0) as u64 * 1000).max(*last_commit_us + 1);
    payload.clear();
    let origins = group.iter().any(|w| w.origin.is_some());
    wal::encode_group_header(payload, commit_us, origins);
    for (i, w) in group.iter_mut().enumerate() {
        if let Some(at) = w.auto_increment {
            // The value is the write's sequence number: unique, and above
            // every value assigned before, across restarts too (the next
            // sequence after an open is above every sequence a live table
            // holds).
            let seq = first + i as u64;
            w.key[at..at + 8].copy_from_slice(&crate::model::key::encode_integer(seq as i64));
        }
    }
    // Local index writes go with their row: same record, same sequence.
    indexed.clear();
    if group.iter().any(|w| w.before.is_some()) {
        index::index_writes(group, first, indexed);
    }
    let mut next_index = 0;
    for (i, w) in group.iter().enumerate() {
        wal::encode_entry(payload, first + i as u64, w.table.id, &w.key, &w.mutation);
        if origins {
            wal::encode_origin(payload, w.origin.as_deref().unwrap_or_default());
        }
        while let Some(x) = indexed.get(next_index).filter(|x| x.at == i) {
            wal::encode_entry(payload, first + i as u64, x.table.id, &x.key, &x.mutation);
            if origins {
                wal::encode_origin(payload, &[]);
            }
            next_index += 1;
        }
    }
    let last = first + group.len() as u64 - 1;
    if let Err(e) = wal.append(payload, last) {
        indexed.clear();
        return Err(e);
    }
    publish_durable(host, wal);
    host.wal_bytes().fetch_add(payload.len() as u64, Ordering::Relaxed);
    *next_seq = last + 1;
    *last_commit_us = commit_us;
    super::stream_append::append_streams(group, first, commit_us, payload, indexed.is_empty());
    let mut current = ActiveMemtable::default();
    for (i, w) in group.drain(..).enumerate() {
        recent.note(w.table.id, &w.key, first + i as u64);
        current.insert(&w.table, w.key, first + i as u64, w.mutation);
    }
    for x in indexed.drain(..) {
        current.insert(&x.table, x.key, first + x.at as u64, x.mutation);
    }
    host.visible_seq().store(last, Ordering::Release);
    Ok(first)
}

/// Inserts writes into their partitions' active memtables. A table of one
/// partition is looked up once per run of its writes (one lock and one
/// reference count, not one per write).
#[derive(Default)]
struct ActiveMemtable(Option<(u64, Arc<crate::memtable::Memtable>)>);

impl ActiveMemtable {
    fn insert(&mut self, table: &TableInner, key: Vec<u8>, seq: u64, mutation: crate::model::row::Mutation) {
        if let Some((id, m)) = &self.0
            && *id == table.id
        {
            m.insert(key, seq, mutation);
            return;
        }
        let (m, single) = {
            let st = table.state.read();
            (st.part(&key).active.clone(), st.parts.len() == 1)
        };
        m.insert(key, seq, mutation);
        self.0 = single.then_some((table.id, m));
    }
}

fn maybe_freeze(host: &dyn CommitHost, wal: &mut WalWriter, touched: &[Arc<TableInner>]) {
    let limit = host.memtable_bytes();
    for t in touched {
        let full = t.state.read().parts.iter().any(|p| p.active.approx_bytes() >= limit);
        if full {
            freeze(host, wal, t, true, limit);
        }
    }
}

/// Freezes the active memtables of `table`'s partitions that hold at
/// least `at_least` bytes (0: every one with writes).
fn freeze(host: &dyn CommitHost, wal: &mut WalWriter, table: &Arc<TableInner>, schedule: bool, at_least: usize) {
    for p in table.state.write().parts.iter_mut() {
        if p.active.approx_bytes() >= at_least {
            p.freeze_active();
        }
    }
    // Start a new WAL file so that this memtable's file can go once flushed.
    if wal.current_size() > 0 {
        let _ = wal.rotate();
        publish_durable(host, wal);
    }
    if schedule {
        host.schedule_flush(table.clone());
    }
}

/// Tells the database how far the WAL is durable (after every append,
/// sync or rotation: before the writes become visible, so that a stream
/// under `Durability::Sync` never waits for a write already durable).
fn publish_durable(host: &dyn CommitHost, wal: &WalWriter) {
    host.durable_seq().fetch_max(wal.durable_seq(), Ordering::AcqRel);
}

fn gc_wal(host: &dyn CommitHost, wal: &mut WalWriter) {
    let tables = host.live_tables();
    // A stream log not yet synced past a write needs its WAL file (an
    // open puts what the log lacks back from the WAL).
    let streams = tables
        .iter()
        .filter_map(|t| t.stream.read().as_ref().map(|s| s.min_unsynced_seq()));
    let min = tables
        .iter()
        .filter_map(|t| t.min_unflushed_seq())
        .chain(streams)
        .min()
        .unwrap_or(u64::MAX);
    if let Err(e) = wal.delete_obsolete(min) {
        eprintln!("cellar: {e}");
    }
}

/// Whether writers must stall (see [`stall_if_over_budget`]).
fn over_budget(host: &dyn CommitHost) -> bool {
    let budget = host.write_buffer_bytes();
    let max_runs = host.stall_runs();
    let tables = host.live_tables();
    tables.iter().map(|t| t.unflushed_bytes()).sum::<usize>() > budget
        || (max_runs < usize::MAX
            && tables
                .iter()
                .any(|t| t.run_count() > max_runs && t.last_compaction_error.lock().is_none()))
}

/// Holds the committer back while unflushed data exceeds the write buffer
/// budget (so memory stays bounded) or a table has more sorted runs than
/// the stall limit (background compaction has fallen behind, and reads
/// would slow down); gives up waiting after a while so that a stuck flush
/// or compaction slows writers down instead of stopping them for good.
/// A closing database does not wait: nothing would bring it under budget;
/// nor does a table whose last compaction failed (a full disk, say): the
/// wait would not let compaction catch up, and every write group would
/// sit out the whole wait before failing on the same full disk.
fn stall_if_over_budget(host: &dyn CommitHost) {
    let start = Instant::now();
    while over_budget(host) {
        if host.closing() || start.elapsed() > Duration::from_secs(30) {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let waited = start.elapsed();
    if waited > Duration::from_micros(100) {
        host.stall_micros()
            .fetch_add(waited.as_micros() as u64, Ordering::Relaxed);
    }
}
