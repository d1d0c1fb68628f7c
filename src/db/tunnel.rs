//! Tunnels (Tablestore's Tunnel Service): a table's rows as of one
//! snapshot (the full phase), then its change stream from that snapshot on
//! (the stream phase), delivered to a worker's callback channel by
//! channel with checkpoints kept in the database.
//!
//! A tunnel's state is a numbered JSON version under
//! `tunnels/<table id>/<name>/` (a `ManifestLog`: each checkpoint is one
//! durable version). Channels: `full` for the full phase, then one per
//! stream shard. A shard's channel starts where the shard stood when the
//! tunnel was made (or at its first record, for a shard a later split or
//! merge opened), is read only once the channels of the shards it came
//! from are finished, and is finished when its shard is closed and read to
//! its end.
//!
//! Invariants: a checkpoint is written only after the callback returned
//! for every record before it (at most every 100 ms while batches keep
//! coming, and whenever a channel finishes or the worker stops), so a
//! restarted worker resumes after its last checkpoint and skips nothing
//! (what came after it comes again: at least once); the full phase reads one snapshot (a restart reads on from its
//! checkpoint key in a new one), and the stream phase delivers exactly
//! the records whose sequence is above that of the first snapshot, so
//! applying the full rows and then the records in order gives the
//! table; a position whose records expired is an error, never a silent
//! skip.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

use super::Database;
use super::reads::read_range;
use super::stream_record::{SequenceInfo, StreamAction, StreamColumn, StreamRecord};
use super::stream_record::{lineage, shard_name, stream_record};
use super::tunnel_types::*;
use crate::error::{Error, ErrorKind, Result};
use crate::manifest::ManifestLog;
use crate::model::api::GetRange;
use crate::model::row::ReadOptions;
use crate::state::TableInner;
use crate::stream::{LogPosition, StreamShards};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ChannelState {
    /// `full`, or the shard's id.
    id: String,
    /// The shard's partition (none for `full`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    part: Option<u64>,
    status: ChannelStatus,
    /// Where the next read starts: `[file, offset, skip]` in the shard's
    /// log; `None`: at its oldest record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    position: Option<[u64; 3]>,
    /// The full phase: the encoded key after the last row delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next_key: Option<String>,
    /// Records (or rows) delivered and checkpointed.
    delivered: u64,
    /// Commit time of the newest record delivered (µs; 0: none).
    last_commit_us: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct TunnelState {
    name: String,
    #[serde(rename = "type")]
    kind: TunnelType,
    created_ms: i64,
    stage: TunnelStage,
    /// The full phase's first snapshot: the stream phase delivers the
    /// records above it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot_seq: Option<u64>,
    channels: Vec<ChannelState>,
}

/// Records per batch (and per checkpoint).
const BATCH: usize = 1000;

/// Records per batch of an internal tunnel (a global index's follower):
/// each batch is one commit of index writes, so fewer, larger ones.
const INTERNAL_BATCH: usize = 8192;

/// How long a following worker waits when every channel is idle.
const IDLE_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

fn log_of(t: &TableInner, name: &str) -> ManifestLog {
    ManifestLog::new(&format!("{}/{name}", tunnel_prefix(t.id)))
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 128 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(Error::param(format!(
            "tunnel name '{name}' is not accepted: 1 to 128 letters, digits, '_' or '-'"
        )));
    }
    Ok(())
}

fn not_found(table: &str, name: &str) -> Error {
    Error::new(
        ErrorKind::ObjectNotExist,
        format!("tunnel '{name}' of table '{table}' does not exist (`cellar tunnel list {table}` lists them)"),
    )
}

impl Database {
    /// Makes tunnel `name` on `table`. Stream tunnels need the table's
    /// change stream.
    pub async fn create_tunnel(&self, table: &str, name: &str, kind: TunnelType) -> Result<()> {
        self.inner.writable("a tunnel")?;
        check_name(name)?;
        self.create_tunnel_named(table, name, kind).await
    }

    /// [`Database::create_tunnel`] for any name (an index's tunnel has a
    /// name no user's can have).
    pub(super) async fn create_tunnel_named(&self, table: &str, name: &str, kind: TunnelType) -> Result<()> {
        let t = self.table_inner(table)?;
        let log = log_of(&t, name);
        let store = &*self.inner.shared.storage.store;
        if exists(self, &t, name).await? {
            return Err(Error::new(
                ErrorKind::ObjectAlreadyExist,
                format!("tunnel '{name}' of table '{table}' exists already"),
            ));
        }
        let mut channels = Vec::new();
        if kind != TunnelType::Full {
            let shards = t.stream.read().clone().ok_or_else(|| {
                Error::param(format!(
                    "table '{table}' has no change stream, which a {} tunnel reads; enable it with `cellar alter \
                     {table} --stream true` (ALTER TABLE {table} SET (stream = true)), or make a full tunnel",
                    kind.as_str()
                ))
            })?;
            // Each shard's channel starts where the shard stands now.
            for (part, l) in shards.all() {
                let at = l.end();
                channels.push(ChannelState {
                    id: shard_name(t.id, part),
                    part: Some(part),
                    status: ChannelStatus::Waiting,
                    position: Some([at.file, at.offset as u64, at.skip as u64]),
                    next_key: None,
                    delivered: 0,
                    last_commit_us: 0,
                });
            }
        }
        if kind != TunnelType::Stream {
            channels.insert(0, full_channel());
        }
        let state = TunnelState {
            name: name.to_string(),
            kind,
            created_ms: self.inner.now_ms(),
            stage: if kind == TunnelType::Stream {
                TunnelStage::Stream
            } else {
                TunnelStage::Full
            },
            snapshot_seq: None,
            channels,
        };
        let storage = &self.inner.shared.storage;
        // A deleted tunnel of the same name may have left version numbers.
        let version = log.newest_version(store).await? + 1;
        log.commit(store, storage.local_root.as_deref(), version, &state).await
    }

    /// The tunnels of `table`, or of every table.
    pub async fn list_tunnels(&self, table: Option<&str>) -> Result<Vec<TunnelDescription>> {
        let names: Vec<String> = match table {
            Some(t) => vec![self.table_inner(t)?.schema.name.clone()],
            None => self.inner.shared.tables.read().keys().cloned().collect(),
        };
        let mut out = Vec::new();
        for name in names {
            let t = self.table_inner(&name)?;
            // An index's tunnel (a name no user's can have) is its own.
            for tunnel in tunnel_names(self, &t)
                .await?
                .into_iter()
                .filter(|n| check_name(n).is_ok())
            {
                out.push(self.describe_tunnel(&name, &tunnel).await?);
            }
        }
        Ok(out)
    }

    /// A tunnel's stage, channels with their status and checkpoint, and lag.
    pub async fn describe_tunnel(&self, table: &str, name: &str) -> Result<TunnelDescription> {
        check_name(name)?;
        let t = self.table_inner(table)?;
        let (_, state) = load(self, &t, name).await?;
        let newest = state.channels.iter().map(|c| c.last_commit_us).max().unwrap_or(0);
        Ok(TunnelDescription {
            table: table.to_string(),
            name: state.name.clone(),
            kind: state.kind,
            stage: state.stage,
            created_ms: state.created_ms,
            lag_ms: (state.stage == TunnelStage::Stream).then(|| {
                self.inner.now_ms()
                    - if newest == 0 {
                        state.created_ms
                    } else {
                        (newest / 1000) as i64
                    }
            }),
            channels: state
                .channels
                .iter()
                .map(|c| TunnelChannel {
                    id: c.id.clone(),
                    status: c.status,
                    checkpoint: match (&c.next_key, &c.position) {
                        (Some(k), _) => format!("key {k}"),
                        (None, Some([f, o, s])) => format!("file {f} offset {o} skip {s}"),
                        (None, None) => "start".to_string(),
                    },
                    delivered: c.delivered,
                    last_commit_ms: (c.last_commit_us / 1000) as i64,
                })
                .collect(),
        })
    }

    /// Deletes a tunnel and its checkpoints.
    pub async fn delete_tunnel(&self, table: &str, name: &str) -> Result<()> {
        self.inner.writable("a tunnel deletion")?;
        check_name(name)?;
        self.delete_tunnel_named(table, name).await
    }

    /// Whether `table` has a tunnel named `name` (any name).
    pub(super) async fn tunnel_exists(&self, table: &str, name: &str) -> Result<bool> {
        let t = self.table_inner(table)?;
        exists(self, &t, name).await
    }

    /// The commit time (µs) a tunnel has delivered every record up to, as
    /// of its last checkpoint: its newest delivered record's, or its
    /// creation time.
    pub(super) async fn tunnel_progress_us(&self, table: &str, name: &str) -> Result<u64> {
        let t = self.table_inner(table)?;
        let (_, state) = load(self, &t, name).await?;
        let delivered = state.channels.iter().map(|c| c.last_commit_us).max().unwrap_or(0);
        Ok(delivered.max(state.created_ms.max(0) as u64 * 1000))
    }

    /// [`Database::delete_tunnel`] for any name (an index's tunnel).
    pub(super) async fn delete_tunnel_named(&self, table: &str, name: &str) -> Result<()> {
        let t = self.table_inner(table)?;
        load(self, &t, name).await?;
        delete_prefix(self, &format!("{}/{name}", tunnel_prefix(t.id))).await
    }

    /// A worker for tunnel `name` of `table`: `process` gets each batch of
    /// records, channel by channel; `shutdown` is told when a channel is
    /// finished. See [`TunnelWorker::run`].
    pub fn tunnel_worker(
        &self,
        table: &str,
        name: &str,
        process: Arc<ProcessFn>,
        shutdown: Arc<ShutdownFn>,
    ) -> Result<TunnelWorker> {
        self.inner.writable("a tunnel worker (it writes checkpoints)")?;
        check_name(name)?;
        Ok(TunnelWorker {
            db: self.clone(),
            table: table.to_string(),
            name: name.to_string(),
            process: Processor::Sync(process),
            internal: false,
            shutdown,
            stop: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The worker of an internal tunnel (a global index's).
    pub(super) fn internal_tunnel_worker(&self, table: &str, name: &str, process: Arc<AsyncProcessFn>) -> TunnelWorker {
        TunnelWorker {
            db: self.clone(),
            table: table.to_string(),
            name: name.to_string(),
            process: Processor::Async(process),
            internal: true,
            shutdown: Arc::new(|_| {}),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }
}

fn full_channel() -> ChannelState {
    ChannelState {
        id: "full".into(),
        part: None,
        status: ChannelStatus::Open,
        position: None,
        next_key: None,
        delivered: 0,
        last_commit_us: 0,
    }
}

/// The names of `t`'s tunnels, sorted.
async fn tunnel_names(db: &Database, t: &TableInner) -> Result<Vec<String>> {
    let prefix = object_store::path::Path::from(tunnel_prefix(t.id));
    let store = &*db.inner.shared.storage.store;
    let mut names: Vec<String> = match store.list_with_delimiter(Some(&prefix)).await {
        Ok(l) => l
            .common_prefixes
            .into_iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect(),
        Err(object_store::Error::NotFound { .. }) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        if exists(db, t, &name).await? {
            out.push(name);
        }
    }
    Ok(out)
}

/// Whether a tunnel's state is there (a local store keeps the empty
/// directory of a deleted one).
async fn exists(db: &Database, t: &TableInner, name: &str) -> Result<bool> {
    Ok(log_of(t, name).newest_version(&*db.inner.shared.storage.store).await? > 0)
}

/// Whether `t` has tunnels that read its stream.
pub(super) async fn stream_tunnels(db: &Database, t: &TableInner) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for name in tunnel_names(db, t).await? {
        if load(db, t, &name).await?.1.kind != TunnelType::Full {
            out.push(name);
        }
    }
    Ok(out)
}

async fn load(db: &Database, t: &TableInner, name: &str) -> Result<(u64, TunnelState)> {
    log_of(t, name)
        .load::<TunnelState>(&*db.inner.shared.storage.store)
        .await?
        .ok_or_else(|| not_found(&t.schema.name, name))
}

/// Deletes every object under `prefix`.
pub(super) async fn delete_prefix(db: &Database, prefix: &str) -> Result<()> {
    use futures::TryStreamExt;
    use object_store::ObjectStoreExt;
    let store = &db.inner.shared.storage.store;
    let p = object_store::path::Path::from(prefix);
    let metas: Vec<_> = store.list(Some(&p)).try_collect().await?;
    for m in metas {
        match store.delete(&m.location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Consumes one tunnel (see [`Database::tunnel_worker`]).
pub struct TunnelWorker {
    db: Database,
    table: String,
    name: String,
    process: Processor,
    /// An index's tunnel (its records keep every origin column).
    internal: bool,
    shutdown: Arc<ShutdownFn>,
    stop: Arc<AtomicBool>,
}

impl TunnelWorker {
    /// A handle that stops [`run`](Self::run) after its current batch.
    pub fn stopper(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Delivers the tunnel's records from its checkpoints on: the full
    /// phase, then each stream channel once the channels it follows are
    /// finished. Checkpoints what the callback took at most every 100 ms,
    /// and when a channel finishes, it is idle or it stops. With
    /// `follow`, waits for new records until stopped; otherwise returns
    /// once every channel is finished or has nothing new.
    pub async fn run(&self, follow: bool) -> Result<()> {
        let t = self.db.table_inner(&self.table)?;
        let (version, mut state) = load(&self.db, &t, &self.name).await?;
        let mut saver = Checkpoints {
            log: log_of(&t, &self.name),
            storage: self.db.inner.shared.storage.clone(),
            version,
            saved: std::time::Instant::now(),
            dirty: false,
        };
        let result = self.deliver(&t, &mut state, &mut saver, follow).await;
        // What was delivered before a stop or an error is kept; a failed
        // batch was not marked delivered, so it comes again.
        let saved = saver.save(&state, true).await;
        result.and(saved)
    }

    async fn deliver(
        &self,
        t: &Arc<TableInner>,
        state: &mut TunnelState,
        saver: &mut Checkpoints,
        follow: bool,
    ) -> Result<()> {
        if state.stage == TunnelStage::Full {
            self.full_phase(t, state, saver).await?;
        }
        if state.stage != TunnelStage::Stream {
            return Ok(());
        }
        let shards = t.stream.read().clone().ok_or_else(|| {
            Error::param(format!(
                "table '{}' has no change stream any more; tunnel '{}' cannot go on (delete it)",
                self.table, self.name
            ))
        })?;
        loop {
            self.add_channels(t, &shards, state).await?;
            let mut progressed = false;
            for i in 0..state.channels.len() {
                if self.stop.load(Ordering::Acquire) {
                    return Ok(());
                }
                if state.channels[i].status != ChannelStatus::Open {
                    continue;
                }
                if self.stream_batch(t, &shards, state, i).await? {
                    progressed = true;
                    let finished = state.channels[i].status == ChannelStatus::Finished;
                    saver.mark();
                    saver.save(state, finished).await?;
                }
            }
            if !progressed {
                saver.save(state, true).await?;
                if !follow || self.stop.load(Ordering::Acquire) {
                    return Ok(());
                }
                tokio::time::sleep(IDLE_WAIT).await;
            }
        }
    }

    fn context(&self, channel: &str) -> ChannelContext {
        ChannelContext {
            tunnel: self.name.clone(),
            channel: channel.to_string(),
        }
    }

    /// The full phase: rows as of one snapshot, from the checkpoint key on.
    async fn full_phase(&self, t: &Arc<TableInner>, state: &mut TunnelState, saver: &mut Checkpoints) -> Result<()> {
        let snaps = t.snapshots(&self.db.inner.shared.visible_seq);
        let seq = snaps.first().map_or(0, |s| s.seq);
        // No row goes out that a power cut could take back (interval or
        // no durability).
        self.db.inner.durable_through(seq).await?;
        // The stream phase takes over from the first snapshot read: it is
        // durable before any row goes out.
        if state.snapshot_seq.is_none() {
            state.snapshot_seq = Some(seq);
            saver.mark();
            saver.save(state, true).await?;
        }
        let ctx = self.context("full");
        let max_versions = t.options.read().max_versions;
        let commit_us = self.db.inner.now_ms().max(0) as u64 * 1000;
        loop {
            if self.stop.load(Ordering::Acquire) {
                return Ok(());
            }
            let channel = &state.channels[0];
            let start = match &channel.next_key {
                Some(k) => Some(t.schema.decode_pk(&crate::segment::hex_decode(k))?.into()),
                None => None,
            };
            let req = GetRange {
                start,
                limit: Some(BATCH),
                options: ReadOptions {
                    max_versions: Some(max_versions),
                    ..Default::default()
                },
                ..Default::default()
            };
            let page = read_range(t, &snaps, self.db.inner.now_ms(), req, None).await?;
            let records: Vec<StreamRecord> = page
                .rows
                .into_iter()
                .enumerate()
                .map(|(i, row)| StreamRecord {
                    seq: 0,
                    raw: None,
                    action: StreamAction::PutRow,
                    primary_key: row.primary_key,
                    columns: row
                        .columns
                        .into_iter()
                        .flat_map(|(name, cells)| {
                            cells.into_iter().map(move |c| StreamColumn::Put {
                                name: name.clone(),
                                value: c.value,
                                version: c.version,
                            })
                        })
                        .collect(),
                    sequence: SequenceInfo {
                        epoch: 0,
                        timestamp_us: commit_us,
                        row_index: i as u32,
                    },
                    origin: Vec::new(),
                })
                .collect();
            let delivered = records.len() as u64;
            if !records.is_empty() {
                self.process.call(ctx.clone(), records).await?;
            }
            let channel = &mut state.channels[0];
            channel.delivered += delivered;
            match page.next_start {
                Some(next) => channel.next_key = Some(crate::segment::hex_encode(&t.schema.encode_pk(&next)?)),
                None => {
                    channel.status = ChannelStatus::Finished;
                    channel.next_key = None;
                    state.stage = match state.kind {
                        TunnelType::Full => TunnelStage::Finished,
                        _ => TunnelStage::Stream,
                    };
                    saver.mark();
                    saver.save(state, true).await?;
                    (self.shutdown)(&ctx);
                    return Ok(());
                }
            }
            saver.mark();
            saver.save(state, false).await?;
        }
    }

    /// Opens the channels whose shards' parents are finished, and adds
    /// channels for shards opened since (splits and merges).
    async fn add_channels(&self, t: &TableInner, shards: &StreamShards, state: &mut TunnelState) -> Result<()> {
        let lineage = lineage(&t.manifest.lock().await.1);
        for (part, _) in shards.all() {
            let id = shard_name(t.id, part);
            if !state.channels.iter().any(|c| c.id == id) {
                state.channels.push(ChannelState {
                    id,
                    part: Some(part),
                    status: ChannelStatus::Waiting,
                    position: None,
                    next_key: None,
                    delivered: 0,
                    last_commit_us: 0,
                });
            }
        }
        let finished: Vec<u64> = state
            .channels
            .iter()
            .filter(|c| c.status == ChannelStatus::Finished)
            .filter_map(|c| c.part)
            .collect();
        let present: Vec<u64> = state.channels.iter().filter_map(|c| c.part).collect();
        for c in state.channels.iter_mut().filter(|c| c.status == ChannelStatus::Waiting) {
            let parents = c
                .part
                .and_then(|p| lineage.get(&p))
                .map(|(_, ps)| ps.clone())
                .unwrap_or_default();
            if parents.iter().all(|p| finished.contains(p) || !present.contains(p)) {
                c.status = ChannelStatus::Open;
            }
        }
        Ok(())
    }

    /// Reads and delivers one batch of channel `i`; true when it delivered
    /// records or finished.
    async fn stream_batch(
        &self,
        t: &TableInner,
        shards: &StreamShards,
        state: &mut TunnelState,
        i: usize,
    ) -> Result<bool> {
        let above = state.snapshot_seq.unwrap_or(0);
        let c = &state.channels[i];
        let part = c.part.expect("a stream channel has a shard");
        let ctx = self.context(&c.id);
        let Some(log) = shards.log(part) else {
            // The shard's records all expired (or it was never kept).
            return Err(behind(&self.table, &self.name, &c.id));
        };
        let from = match c.position {
            Some([file, offset, skip]) => LogPosition {
                file,
                offset: offset as usize,
                skip: skip as usize,
            },
            None => log.start()?,
        };
        let now_us = self.db.inner.now_ms().max(0) as u64 * 1000;
        let cutoff = now_us.saturating_sub(shards.expiration_us());
        // The database's own reader (a global index's follower) takes
        // whole records: none is decoded twice.
        let read = |at| match self.internal {
            true => log.read_whole(at, INTERNAL_BATCH),
            false => log.read(at, BATCH),
        };
        let (entries, next) = match read(from)? {
            Some(read) => read,
            None => {
                // The position's file is gone: expired, or a file that
                // held no record (dropped as empty). Records after the
                // position are no older than the channel's newest one (or
                // than the tunnel), so when that is inside the expiration
                // none of them expired: go on at the oldest file left.
                let reference = c
                    .last_commit_us
                    .max((state.created_ms.max(0) as u64 * 1000).saturating_sub(1_000_000));
                if reference < cutoff {
                    return Err(behind(&self.table, &self.name, &c.id));
                }
                read(log.start()?)?.ok_or_else(|| behind(&self.table, &self.name, &c.id))?
            }
        };
        // Records past the expiration are gone for readers, deleted or not.
        if entries.first().is_some_and(|(e, _)| e.commit_us < cutoff) {
            return Err(behind(&self.table, &self.name, &c.id));
        }
        let schema = t.full_schema();
        // A user's tunnel sees the origin columns its stream names; an
        // index's sees its key columns too.
        let keep = (!self.internal).then(|| shards.origin_columns());
        let mut last_commit_us = c.last_commit_us;
        let mut records = Vec::with_capacity(entries.len());
        for (e, row_index) in entries {
            last_commit_us = last_commit_us.max(e.commit_us);
            // What the full phase's snapshot holds already.
            if e.seq > above {
                records.push(match self.internal {
                    // The database's own reader takes the write as it is.
                    true => super::stream_record::raw_record(e, row_index),
                    false => stream_record(&schema, e, row_index, keep.as_ref().map(|k| k.as_slice()))?,
                });
            }
        }
        let moved = next != from;
        let delivered = records.len() as u64;
        if !records.is_empty() {
            self.process.call(ctx.clone(), records).await?;
        }
        let closed = t.state.read().part_by_id(part).is_none();
        // (Synced first: records appended before it closed may not be.)
        let finished = closed && log.fully_synced() && log.read(next, 1)?.is_some_and(|(rest, _)| rest.is_empty());
        let c = &mut state.channels[i];
        c.position = Some([next.file, next.offset as u64, next.skip as u64]);
        c.delivered += delivered;
        c.last_commit_us = last_commit_us;
        if finished {
            c.status = ChannelStatus::Finished;
            (self.shutdown)(&ctx);
        }
        Ok(moved || finished)
    }
}

/// How often a worker checkpoints while batches keep coming (also when a
/// channel or the full phase finishes, and when it stops or is idle).
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Writes a worker's checkpoints: a new version of the tunnel's state.
struct Checkpoints {
    log: ManifestLog,
    storage: crate::storage::Storage,
    version: u64,
    saved: std::time::Instant,
    /// Delivered since the last checkpoint.
    dirty: bool,
}

impl Checkpoints {
    /// Notes that batches were delivered (their callback returned).
    fn mark(&mut self) {
        self.dirty = true;
    }

    /// Checkpoints what was delivered, at most every `CHECKPOINT_EVERY`
    /// unless `now`.
    async fn save(&mut self, state: &TunnelState, now: bool) -> Result<()> {
        if !self.dirty || (!now && self.saved.elapsed() < CHECKPOINT_EVERY) {
            return Ok(());
        }
        let store = &*self.storage.store;
        self.log
            .commit(store, self.storage.local_root.as_deref(), self.version + 1, state)
            .await?;
        self.version += 1;
        self.saved = std::time::Instant::now();
        self.dirty = false;
        Ok(())
    }
}

fn behind(table: &str, tunnel: &str, channel: &str) -> Error {
    Error::new(
        ErrorKind::TrimmedDataAccess,
        format!(
            "tunnel '{tunnel}' of table '{table}' fell behind the stream's expiration: channel '{channel}' needs \
             records that are gone; delete the tunnel and make a new one (a full-and-stream tunnel starts over from \
             the table's rows)"
        ),
    )
}

/// Where a table's tunnels live.
pub(super) fn tunnel_prefix(table_id: u64) -> String {
    format!("tunnels/{table_id}")
}
