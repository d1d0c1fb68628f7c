//! The committer: one thread that orders, logs and applies every write.
//!
//! Writers send validated mutations over a channel. The committer drains
//! everything pending (a group), gives each write the next sequence number,
//! appends the group to the WAL as one record, syncs once (per the
//! durability setting), applies the group to the memtables, publishes the
//! new visible sequence, and only then acknowledges every writer of the
//! group. One fsync thus serves many writers (group commit).
//!
//! It also freezes memtables (only the committer inserts into them, so a
//! freeze can never lose a write racing with it), rotates the WAL, deletes
//! WAL files whose writes are all flushed, and stalls when unflushed data
//! passes the write-buffer budget.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, ErrorKind, Result};
use crate::model::row::Mutation;
use crate::state::TableInner;
use crate::wal::{self, WalWriter};

/// One row write ready to be committed.
pub(crate) struct PendingWrite {
    pub table: Arc<TableInner>,
    pub key: Vec<u8>,
    pub mutation: Mutation,
}

pub(crate) enum CommitMsg {
    /// Writes committed together (one WAL record): all or none survive.
    Write {
        writes: Vec<PendingWrite>,
        done: oneshot::Sender<Result<u64>>,
    },
    /// Freeze the table's active memtable (for an explicit flush).
    Freeze {
        table: Arc<TableInner>,
        done: oneshot::Sender<Result<()>>,
    },
    /// Fsync now (interval durability timer), then drop obsolete WAL files.
    Sync,
    /// A flush finished: obsolete WAL files can go.
    FlushDone,
}

/// What the committer needs from the database.
pub(crate) trait CommitHost: Send + Sync + 'static {
    fn visible_seq(&self) -> &AtomicU64;
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
}

/// Most bytes of WAL payload in one group.
const MAX_GROUP_BYTES: usize = 8 << 20;

pub(crate) fn run(host: Arc<dyn CommitHost>, mut wal: WalWriter, mut next_seq: u64, mut rx: mpsc::Receiver<CommitMsg>) {
    let mut payload = Vec::with_capacity(1 << 20);
    let mut failed: Option<Error> = None;
    while let Some(first) = rx.blocking_recv() {
        let mut group = Vec::new();
        let mut acks = Vec::new();
        let mut others = Vec::new();
        let mut bytes = 0usize;
        let mut next = Some(first);
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
                        bytes += writes
                            .iter()
                            .map(|w| w.key.len() + w.mutation.approx_bytes())
                            .sum::<usize>();
                        let n = writes.len();
                        group.extend(writes);
                        acks.push((done, n));
                    }
                }
                other => others.push(other),
            }
            if bytes < MAX_GROUP_BYTES {
                next = rx.try_recv().ok();
            }
        }
        if !group.is_empty() {
            let mut touched: Vec<Arc<TableInner>> = Vec::new();
            for w in &group {
                if !touched.iter().any(|t| Arc::ptr_eq(t, &w.table)) {
                    touched.push(w.table.clone());
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
                None => commit_group(&*host, &mut wal, &mut next_seq, &mut payload, group),
            };
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
            let mut seq_end = match &result {
                Ok(first_seq) => *first_seq,
                Err(_) => 0,
            };
            for (done, n) in acks {
                seq_end += n as u64;
                let _ = done.send(result.clone().map(|_| seq_end - 1));
            }
            maybe_freeze(&*host, &mut wal, &touched);
            stall_if_over_budget(&*host);
        }
        for msg in others {
            match msg {
                CommitMsg::Freeze { table, done } => {
                    // The caller flushes it itself.
                    freeze(&*host, &mut wal, &table, false);
                    let _ = done.send(Ok(()));
                }
                CommitMsg::Sync => {
                    // A failure poisons the WAL: the next group is refused.
                    if let Err(e) = wal.sync() {
                        failed.get_or_insert(e);
                    }
                    gc_wal(&*host, &mut wal);
                }
                CommitMsg::FlushDone => gc_wal(&*host, &mut wal),
                CommitMsg::Write { .. } => {}
            }
        }
    }
    let _ = wal.sync();
}

/// Logs and applies one group; returns the first sequence it used.
fn commit_group(
    host: &dyn CommitHost,
    wal: &mut WalWriter,
    next_seq: &mut u64,
    payload: &mut Vec<u8>,
    group: Vec<PendingWrite>,
) -> Result<u64> {
    let first = *next_seq;
    payload.clear();
    for (i, w) in group.iter().enumerate() {
        wal::encode_entry(payload, first + i as u64, w.table.id, &w.key, &w.mutation);
    }
    let last = first + group.len() as u64 - 1;
    wal.append(payload, last)?;
    host.wal_bytes().fetch_add(payload.len() as u64, Ordering::Relaxed);
    *next_seq = last + 1;
    let mut current: Option<(u64, Arc<crate::memtable::Memtable>)> = None;
    for (i, w) in group.into_iter().enumerate() {
        let active = match &current {
            Some((id, m)) if *id == w.table.id => m.clone(),
            _ => {
                let m = w.table.state.read().active.clone();
                current = Some((w.table.id, m.clone()));
                m
            }
        };
        active.insert(w.key, first + i as u64, w.mutation);
    }
    host.visible_seq().store(last, Ordering::Release);
    Ok(first)
}

fn maybe_freeze(host: &dyn CommitHost, wal: &mut WalWriter, touched: &[Arc<TableInner>]) {
    let limit = host.memtable_bytes();
    for t in touched {
        let full = t.state.read().active.approx_bytes() >= limit;
        if full {
            freeze(host, wal, t, true);
        }
    }
}

fn freeze(host: &dyn CommitHost, wal: &mut WalWriter, table: &Arc<TableInner>, schedule: bool) {
    {
        let mut st = table.state.write();
        if !st.active.is_empty() {
            let frozen = std::mem::replace(&mut st.active, Arc::new(crate::memtable::Memtable::new()));
            st.immutables.push(frozen);
        }
    }
    // Start a new WAL file so that this memtable's file can go once flushed.
    if wal.current_size() > 0 {
        let _ = wal.rotate();
    }
    if schedule {
        host.schedule_flush(table.clone());
    }
}

fn gc_wal(host: &dyn CommitHost, wal: &mut WalWriter) {
    let min = host
        .live_tables()
        .iter()
        .filter_map(|t| t.min_unflushed_seq())
        .min()
        .unwrap_or(u64::MAX);
    if let Err(e) = wal.delete_obsolete(min) {
        eprintln!("cellar: {e}");
    }
}

/// Holds the committer back while unflushed data exceeds the write buffer
/// budget (so memory stays bounded) or a table has more sorted runs than
/// the stall limit (background compaction has fallen behind, and reads
/// would slow down); gives up waiting after a while so that a stuck flush
/// or compaction slows writers down instead of stopping them for good.
fn stall_if_over_budget(host: &dyn CommitHost) {
    let budget = host.write_buffer_bytes();
    let max_runs = host.stall_runs();
    let start = Instant::now();
    let over = || {
        let tables = host.live_tables();
        tables.iter().map(|t| t.unflushed_bytes()).sum::<usize>() > budget
            || (max_runs < usize::MAX && tables.iter().any(|t| t.run_count() > max_runs))
    };
    while over() {
        if start.elapsed() > Duration::from_secs(30) {
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

/// Writes queued with the committer (see [`Table::enqueue_batch`](crate::Table::enqueue_batch)):
/// [`QueuedWrites::durable`] waits until they are durable and returns a
/// result per write, in the order given.
#[must_use = "queued writes are committed either way; durable() tells whether they were"]
pub struct QueuedWrites {
    /// Per write: an error for one refused before queueing, else `Ok`.
    results: Vec<Result<()>>,
    /// The committer's answer for the valid writes; `None` when none was.
    ack: Option<oneshot::Receiver<Result<u64>>>,
}

impl QueuedWrites {
    pub(crate) fn new(results: Vec<Result<()>>, ack: Option<oneshot::Receiver<Result<u64>>>) -> Self {
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
    pub async fn durable(self) -> Result<Vec<Result<()>>> {
        let QueuedWrites { mut results, ack } = self;
        if let Some(ack) = ack {
            let committed = ack.await.map_err(|_| Error::closed()).and_then(|r| r);
            if let Err(e) = committed {
                for r in results.iter_mut().filter(|r| r.is_ok()) {
                    *r = Err(e.clone());
                }
            }
        }
        Ok(results)
    }
}
