//! Background work: flushes, compactions and overlay warming, scheduled
//! for the committer and the table handles.
//!
//! Invariants: at most one flush runs per table (`TableInner::flushing`);
//! compactions take a slot of `max_background_compactions`; once the
//! database is closed no new task starts, and `close` waits for those
//! running. The tasks hold `Shared` (and with it the directory lock), so a
//! task that outlives the handles keeps other processes out until it ends.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::RwLock;

use crate::compaction;
use crate::error::Result;
use crate::flush;
use crate::options::DbOptions;
use crate::state::TableInner;
use crate::storage::Storage;
use crate::write::committer::{CommitHost, CommitMsg};

/// State shared by the database handle, the committer and flush tasks.
pub(crate) struct Shared {
    pub options: DbOptions,
    pub storage: Storage,
    pub tables: RwLock<BTreeMap<String, Arc<TableInner>>>,
    pub visible_seq: AtomicU64,
    /// The largest sequence whose WAL record is durable (see
    /// `CommitHost::durable_seq`); streams show no write above it.
    pub durable_seq: AtomicU64,
    pub stall_micros: AtomicU64,
    /// Bytes appended to the WAL since open.
    pub wal_bytes: AtomicU64,
    pub runtime: tokio::runtime::Handle,
    /// Lets flush tasks reach the committer without keeping it alive.
    pub(super) commit_tx: OnceLock<crate::write::committer::WeakCommitSender>,
    pub(super) me: Weak<Shared>,
    /// Set when the database handle is closed: no new flush starts.
    pub(super) closed: Arc<AtomicBool>,
    /// Background flushes and compactions started and not finished.
    pub(super) background_in_flight: AtomicUsize,
    /// Permits for background compactions (`max_background_compactions`).
    pub(super) compaction_slots: tokio::sync::Semaphore,
    /// The directory lock; released when the last flush task lets go of
    /// `Shared`, so no other process can open the directory under it.
    pub(super) lock: Option<super::lock::DirLock>,
    /// Opened read-only: no flush, compaction or other background work
    /// ever starts (nothing is written).
    pub(super) read_only: bool,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Released before the rest of `Shared` goes, and taken off the
        // process's list in the same step (see `open::DirLock`).
        drop(self.lock.take());
    }
}

impl CommitHost for Shared {
    fn visible_seq(&self) -> &AtomicU64 {
        &self.visible_seq
    }

    fn durable_seq(&self) -> &AtomicU64 {
        &self.durable_seq
    }

    fn live_tables(&self) -> Vec<Arc<TableInner>> {
        self.tables.read().values().cloned().collect()
    }

    fn schedule_flush(&self, table: Arc<TableInner>) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        self.spawn_background(|shared| async move { shared.flush_now(&table).await });
    }

    fn memtable_bytes(&self) -> usize {
        self.options.memtable_bytes
    }

    fn write_buffer_bytes(&self) -> usize {
        self.options.write_buffer_bytes
    }

    fn stall_micros(&self) -> &AtomicU64 {
        &self.stall_micros
    }

    fn wal_bytes(&self) -> &AtomicU64 {
        &self.wal_bytes
    }

    fn now_ms(&self) -> i64 {
        self.options.clock.now_ms()
    }

    fn closing(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn stall_runs(&self) -> usize {
        if self.options.auto_compaction {
            self.options
                .compaction_stall_runs
                .max(self.options.compaction_trigger_runs)
        } else {
            usize::MAX
        }
    }
}

impl Shared {
    /// Flushes the table's frozen memtables, recording (not returning) a
    /// failure: the memtable stays and the WAL keeps its writes.
    pub(crate) async fn flush_now(&self, table: &Arc<TableInner>) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        match flush::flush_frozen(&self.storage, table, &|| self.flushed_one(table)).await {
            Ok(()) => *table.last_flush_error.lock() = None,
            Err(e) => {
                eprintln!("cellar: flush of table '{}' failed: {e}", table.schema.name);
                *table.last_flush_error.lock() = Some(e.to_string());
            }
        }
        if let Some(tx) = self.commit_tx.get().and_then(|w| w.upgrade()) {
            let _ = tx.send(CommitMsg::FlushDone).await;
        }
        self.schedule_compaction(table.clone());
    }

    /// Starts a background task that compacts the table as long as the
    /// policy asks for it, unless one is already queued for it.
    /// After each flushed memtable: obsolete WAL files can go, and the
    /// table may need a compaction.
    pub(super) fn flushed_one(&self, table: &Arc<TableInner>) {
        if let Some(tx) = self.commit_tx.get().and_then(|w| w.upgrade()) {
            // A full queue only delays the WAL clean-up to the next message.
            let _ = tx.try_send(CommitMsg::FlushDone);
        }
        self.schedule_compaction(table.clone());
    }

    pub(crate) fn schedule_compaction(&self, table: Arc<TableInner>) {
        if !self.options.auto_compaction || self.read_only || self.closed.load(Ordering::Acquire) || table.is_archived()
        {
            return;
        }
        // Most flushes leave nothing to do: spawn nothing then.
        let cutoff = table.options.read().ttl_cutoff_ms(self.options.clock.now_ms());
        let (most_runs, wanted) = {
            let st = table.state.read();
            let most_runs = st
                .parts
                .iter()
                .map(|p| crate::state::runs(&p.segments).len())
                .max()
                .unwrap_or(0);
            let wanted = st.parts.iter().any(|p| {
                (!p.owns_its_sources() && !p.segments.is_empty())
                    || compaction::choose(&p.segments, compaction::Pick::Auto, self.policy(), cutoff).is_some()
            });
            (most_runs, wanted)
        };
        self.schedule_catch_up(&table, most_runs);
        self.schedule_repartition(&table);
        if !wanted || table.compaction_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let queued = table.clone();
        let spawned = self.spawn_background(|shared| async move {
            if let Ok(_slot) = shared.compaction_slots.acquire().await {
                loop {
                    // Cleared before each step: a flush finishing meanwhile
                    // queues another task instead of being missed.
                    table.compaction_queued.store(false, Ordering::Release);
                    if !shared.compact_step(&table, compaction::Pick::Auto).await {
                        break;
                    }
                }
            }
        });
        if !spawned {
            queued.compaction_queued.store(false, Ordering::Release);
        }
    }

    /// Runs above `catch_up_runs` while a compaction of the table is under
    /// way (a long merge of big runs): one more task merges the newest
    /// runs beside it, outside `max_background_compactions`, until the
    /// table is back under that count. Without it, flushes pile up runs
    /// during the long merge until writers stall, and a core sits idle.
    fn schedule_catch_up(&self, table: &Arc<TableInner>, most_runs: usize) {
        if table.compacting.lock().is_empty()
            || most_runs <= self.catch_up_runs()
            || table.catch_up_running.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let t = table.clone();
        let spawned = self.spawn_background(|shared| async move {
            while shared.compact_step(&t, compaction::Pick::CatchUp).await {}
            t.catch_up_running.store(false, Ordering::Release);
        });
        if !spawned {
            table.catch_up_running.store(false, Ordering::Release);
        }
    }

    /// Runs `task` on the runtime, counted in `background_in_flight` (a
    /// close waits for it). False when the database is going away.
    pub(super) fn spawn_background<F, Fut>(&self, task: F) -> bool
    where
        F: FnOnce(Arc<Shared>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        if self.read_only {
            return false;
        }
        let Some(shared) = self.me.upgrade() else {
            return false;
        };
        shared.background_in_flight.fetch_add(1, Ordering::AcqRel);
        self.runtime.spawn(async move {
            task(shared.clone()).await;
            shared.background_in_flight.fetch_sub(1, Ordering::AcqRel);
        });
        true
    }

    /// One tick of the background overlay builder (see
    /// `DbOptions::background_overlays`): a table a SQL scan read whole
    /// lately gets the overlays of its active memtable brought up to the
    /// newest visible write, while writes go on, so that a scan extends
    /// them by one tick's writes at most. One build per table at a time,
    /// and after a build of d ms none for 3d ms, so that keeping up takes
    /// at most about a quarter of a core from the writers; none while a
    /// flush is under way (scans then build the active memtable's
    /// overlays over the frozen one's). `seen` holds
    /// per table id the sequence its last build was started at and the
    /// monotonic ms before which no other starts (`u64::MAX` while one
    /// runs).
    pub(super) fn warm_overlays(&self, seen: &mut std::collections::HashMap<u64, (u64, Arc<AtomicU64>)>) {
        /// Tables no scan has read whole for this long are left alone.
        const SCANNED_WITHIN_MS: u64 = 10 * 60 * 1000;
        let now = crate::state::monotonic_ms();
        let visible = self.visible_seq.load(Ordering::Acquire);
        let tables = self.live_tables();
        seen.retain(|id, _| tables.iter().any(|t| t.id == *id));
        for table in tables {
            let scanned = table.wide_scan_ms.load(Ordering::Relaxed);
            if scanned == 0 || now.saturating_sub(scanned) > SCANNED_WITHIN_MS {
                seen.remove(&table.id);
                continue;
            }
            let (mem, segments) = {
                // Tables of one partition (a scan of several reads its
                // partitions' memtables as they come).
                let st = table.state.read();
                let [p] = &st.parts[..] else {
                    continue;
                };
                if !p.immutables.is_empty() {
                    continue;
                }
                (p.active.clone(), p.segments.clone())
            };
            // Every write up to `visible` is in the memtable; later ones
            // may not all be yet.
            let at = mem.max_seq().min(visible);
            // Nothing to place yet: the memtable's writes are all of a
            // group still being applied (`visible` was read before it was
            // published). An overlay at `at` would hold none of them, and
            // the first scan would extend it at once.
            if at == 0 || segments.is_empty() || mem.min_seq().is_none_or(|first| first > at) {
                continue;
            }
            let (warmed, idle_from) = seen.entry(table.id).or_insert_with(|| (0, Arc::new(AtomicU64::new(0))));
            if *warmed == at || now < idle_from.load(Ordering::Acquire) {
                continue;
            }
            *warmed = at;
            idle_from.store(u64::MAX, Ordering::Release);
            let idle_from = idle_from.clone();
            let spawned = self.spawn_background(move |_| async move {
                let start = crate::state::monotonic_ms();
                crate::read::warm_overlays(table, mem, segments, at).await;
                let end = crate::state::monotonic_ms();
                idle_from.store(end + 3 * end.saturating_sub(start), Ordering::Release);
            });
            if !spawned {
                // Closing: no task will clear it, and none is wanted.
                break;
            }
        }
    }

    /// Disk space compactions leave free: room for two memtables' flushes
    /// and a WAL file, so that writes go on while a compaction runs.
    fn compaction_keep_free_bytes(&self) -> u64 {
        (2 * self.options.memtable_bytes as u64).saturating_add(self.options.wal_file_bytes)
    }

    /// Run count past which a catch-up compaction may start: half the
    /// stall limit, and at least twice the trigger.
    fn catch_up_runs(&self) -> usize {
        (self.options.compaction_stall_runs / 2).max(self.options.compaction_trigger_runs.max(2) * 2)
    }

    /// The automatic compaction policy: tiers of `compaction_trigger_runs`
    /// runs, and past the catch-up count, merges that cut the run count.
    fn policy(&self) -> compaction::Policy {
        compaction::Policy {
            trigger_runs: self.options.compaction_trigger_runs,
            max_runs: self.catch_up_runs(),
        }
    }

    /// One background compaction step; false when the task should stop
    /// (nothing to do, closing, or an error, which is recorded).
    async fn compact_step(&self, table: &Arc<TableInner>, pick: compaction::Pick) -> bool {
        if self.closed.load(Ordering::Acquire) || table.dropped.load(Ordering::Acquire) {
            return false;
        }
        match self.compact(table, pick).await {
            Ok(true) => {
                *table.last_compaction_error.lock() = None;
                true
            }
            Ok(false) => false,
            Err(e) => {
                eprintln!("cellar: compaction of table '{}' failed: {e}", table.schema.name);
                *table.last_compaction_error.lock() = Some(e.to_string());
                false
            }
        }
    }

    pub(crate) async fn compact(&self, table: &Arc<TableInner>, pick: compaction::Pick) -> Result<bool> {
        let p = compaction::CompactParams {
            storage: &self.storage,
            now_ms: self.options.clock.now_ms(),
            output_bytes: self.options.compaction_segment_bytes,
            policy: self.policy(),
            cancel: Some(self.closed.clone()),
            keep_free_bytes: self.compaction_keep_free_bytes(),
        };
        compaction::compact(table, pick, &p).await
    }
}
