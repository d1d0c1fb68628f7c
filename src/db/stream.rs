//! Change streams, Tablestore's Stream API: enabling a table's stream,
//! ListStream, DescribeStream, GetShardIterator and GetStreamRecord.
//!
//! A table's stream has one shard per range partition: the first
//! partition's is named by the table's id, the others' `<table id>.<partition
//! id>`. A split closes its partition's shard and opens one per half, both
//! naming it as parent; a merge closes two and opens one naming both
//! (`parent_id`, `parent_sibling_id`). Records live in the shard's log
//! (`crate::stream`), appended by the committer in commit order and
//! readable once synced (a background thread syncs the logs every few
//! milliseconds); a closed shard is kept until its records expire, and
//! once read to its end gives no next iterator.
//!
//! Invariants: a record is read only once its log is synced, so what a
//! reader saw survives a crash in place; an iterator names the stream it
//! was made for (a stream disabled and enabled again is another one) and
//! carries a checksum, so a garbled or foreign iterator is refused, never
//! misread; records older than the expiration are never returned.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Database;
pub use super::stream_record::{SequenceInfo, StreamAction, StreamColumn, StreamRecord};
use super::stream_record::{lineage, shard_name, stream_record};
use crate::error::{Error, ErrorKind, Result};
use crate::state::TableInner;
use crate::stream::{LogPosition, StreamLog, StreamShards};

/// A change of a table's stream settings, as `ALTER TABLE .. SET (stream
/// = .., stream_expiration_hours = .., stream_columns = ..)` and `cellar
/// alter --stream ..` give it: what is not given stays.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamChange {
    /// Enable (true) or disable (false) the stream.
    pub enable: Option<bool>,
    /// Hours records are kept.
    pub expiration_hours: Option<u32>,
    /// Columns whose previous values records carry.
    pub columns: Option<Vec<String>>,
}

impl StreamChange {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == StreamChange::default()
    }
}

/// How long a stream enabled without an expiration keeps records.
pub const DEFAULT_STREAM_EXPIRATION_HOURS: u32 = 24;

/// Longest expiration a stream accepts, in hours (Tablestore's limit).
pub const MAX_STREAM_EXPIRATION_HOURS: u32 = 168;

/// A table's change stream settings (Tablestore's `StreamSpecification`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSpec {
    /// How long records are kept, in hours: 1 to 168.
    pub expiration_hours: u32,
    /// Columns whose values before each change a record carries (its
    /// origin record).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<String>,
}

impl StreamSpec {
    /// A stream keeping records for `expiration_hours`.
    pub fn new(expiration_hours: u32) -> Self {
        StreamSpec {
            expiration_hours,
            columns: Vec::new(),
        }
    }

    fn validate(&self, schema: &crate::model::schema::TableSchema) -> Result<()> {
        if !(1..=MAX_STREAM_EXPIRATION_HOURS).contains(&self.expiration_hours) {
            return Err(Error::param(format!(
                "stream expiration of {} hours is out of range: 1 to {MAX_STREAM_EXPIRATION_HOURS} hours are accepted",
                self.expiration_hours
            )));
        }
        for c in &self.columns {
            if schema.primary_key.iter().any(|k| &k.name == c) || c.is_empty() {
                return Err(Error::param(format!(
                    "stream column '{c}' is not accepted: stream columns name attribute columns, not primary-key \
                     columns of table '{}'",
                    schema.name
                )));
            }
        }
        Ok(())
    }
}

/// A table's stream as the catalog keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct StreamState {
    /// The stream's id: the table's name, when the stream was enabled and
    /// the catalog version that enabled it.
    pub id: String,
    pub spec: StreamSpec,
    pub created_ms: i64,
}

/// One stream, as ListStream returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamInfo {
    /// The stream's id.
    pub stream_id: String,
    /// Its table.
    pub table: String,
    /// When it was enabled, in milliseconds since the epoch.
    pub created_ms: i64,
}

/// One shard of a stream.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardInfo {
    /// The shard's id.
    pub shard_id: String,
    /// The shard it was split from, or the first of the two it was merged from.
    pub parent_id: Option<String>,
    /// The second shard of a merge.
    pub parent_sibling_id: Option<String>,
}

/// A stream, as DescribeStream returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamDescription {
    /// The stream's id.
    pub stream_id: String,
    /// Its table.
    pub table: String,
    /// `"active"`.
    pub status: &'static str,
    /// How long records are kept, in hours.
    pub expiration_hours: u32,
    /// The columns whose previous values records carry.
    pub columns: Vec<String>,
    /// When it was enabled, in milliseconds since the epoch.
    pub created_ms: i64,
    /// Its shards.
    pub shards: Vec<ShardInfo>,
    /// Bytes of its shards' logs.
    pub bytes: u64,
}

/// Where GetShardIterator starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamStart {
    /// The oldest record kept.
    Oldest,
    /// The first record committed at or after this time (ms since the epoch).
    AtMs(i64),
}

/// What GetStreamRecord returns.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamRecords {
    /// The records, in commit order.
    pub records: Vec<StreamRecord>,
    /// Where to read on; the shard's end moves on as writes come, so
    /// there is always one (a closed shard, after a split, will have none
    /// once read to its end).
    pub next_iterator: Option<String>,
}

/// Most records one GetStreamRecord returns.
pub const MAX_STREAM_RECORDS: usize = 1000;

impl Database {
    /// Enables the table's stream with `spec`, changes the settings of an
    /// enabled one (its records stay), or with `None` disables it (its
    /// records are deleted).
    pub async fn set_stream(&self, table: &str, spec: Option<StreamSpec>) -> Result<()> {
        self.inner.writable("a stream change")?;
        let mut cat = self.inner.catalog.lock().await;
        let t = self.table_inner(table)?;
        if t.is_archived() {
            return Err(t.read_only_error());
        }
        let now = self.inner.now_ms();
        let mut next = cat.1.clone();
        let entry = next
            .tables
            .iter_mut()
            .find(|e| e.id == t.id)
            .ok_or_else(|| Error::new(ErrorKind::ObjectNotExist, format!("table '{table}' does not exist")))?;
        let dir = stream_dir(self.path(), t.id);
        match spec {
            Some(spec) => {
                spec.validate(&t.schema)?;
                let hours = spec.expiration_hours;
                let columns = spec.columns.clone();
                let enabling = entry.stream.is_none();
                entry.stream = Some(StreamState {
                    id: entry
                        .stream
                        .as_ref()
                        // The catalog version makes it unique: a stream
                        // enabled again in the same millisecond is another.
                        .map_or_else(|| format!("{table}_{now}_{}", cat.0 + 1), |s| s.id.clone()),
                    spec,
                    created_ms: entry.stream.as_ref().map_or(now, |s| s.created_ms),
                });
                if enabling {
                    // Logs left by a stream disabled before (its deletion cut short).
                    remove_dir(&dir)?;
                    let parts: Vec<u64> = t.state.read().parts.iter().map(|p| p.id).collect();
                    let shards = StreamShards::open(&dir, parts, false, u64::MAX)?;
                    shards.set_expiration_hours(hours);
                    shards.set_origin_columns(columns);
                    self.commit_catalog(&mut cat, next).await?;
                    *t.stream.write() = Some(shards);
                } else {
                    self.commit_catalog(&mut cat, next).await?;
                    if let Some(shards) = &*t.stream.read() {
                        shards.set_expiration_hours(hours);
                        shards.set_origin_columns(columns);
                    }
                }
            }
            None => {
                if entry.stream.take().is_none() {
                    return Ok(());
                }
                let globals: Vec<String> = t
                    .indexes_of(crate::model::index::IndexKind::Global)
                    .into_iter()
                    .map(|i| i.def.name.clone())
                    .collect();
                if !globals.is_empty() {
                    return Err(Error::param(format!(
                        "global index(es) {} of '{table}' follow its stream; drop them first (DROP INDEX)",
                        globals.join(", ")
                    )));
                }
                let tunnels = super::tunnel::stream_tunnels(self, &t).await?;
                if !tunnels.is_empty() {
                    return Err(Error::param(format!(
                        "the stream of '{table}' is read by tunnel(s) {}; delete them first (`cellar tunnel delete \
                         {table} NAME`)",
                        tunnels.join(", ")
                    )));
                }
                self.commit_catalog(&mut cat, next).await?;
                *t.stream.write() = None;
                remove_dir(&dir)?;
            }
        }
        Ok(())
    }

    /// Creates a table and applies `stream` to it; when the stream
    /// settings are refused the table goes again, so nothing is left half
    /// made.
    pub async fn create_table_with_stream(
        &self,
        schema: crate::model::schema::TableSchema,
        options: crate::model::schema::TableOptions,
        stream: StreamChange,
    ) -> Result<()> {
        let name = schema.name.clone();
        self.create_table(schema, options).await?;
        if let Err(e) = self.change_stream(&name, stream).await {
            self.drop_table(&name).await?;
            return Err(e);
        }
        Ok(())
    }

    /// The table's stream settings, `None` when it has no stream.
    pub async fn stream_spec(&self, table: &str) -> Result<Option<StreamSpec>> {
        let t = self.table_inner(table)?;
        let cat = self.inner.catalog.lock().await;
        Ok(cat
            .1
            .tables
            .iter()
            .find(|e| e.id == t.id)
            .and_then(|e| e.stream.as_ref().map(|s| s.spec.clone())))
    }

    /// Applies a [`StreamChange`]: enables, disables or changes the
    /// table's stream; settings without `enable` change an enabled stream
    /// and are refused for a table without one.
    pub async fn change_stream(&self, table: &str, change: StreamChange) -> Result<()> {
        if change.is_empty() {
            return Ok(());
        }
        let current = self.stream_spec(table).await?;
        let settings = change.expiration_hours.is_some() || change.columns.is_some();
        match (change.enable, current) {
            (Some(false), _) if settings => Err(Error::param(format!(
                "stream settings were given with the stream of '{table}' disabled; give them with stream = true, \
                 or leave them out to disable it"
            ))),
            (Some(false), _) => self.set_stream(table, None).await,
            (None, None) => Err(Error::param(format!(
                "table '{table}' has no stream to change; enable it with stream = true (`--stream true`)"
            ))),
            (_, current) => {
                let spec = StreamSpec {
                    expiration_hours: change
                        .expiration_hours
                        .or(current.as_ref().map(|c| c.expiration_hours))
                        .unwrap_or(DEFAULT_STREAM_EXPIRATION_HOURS),
                    columns: change.columns.or(current.map(|c| c.columns)).unwrap_or_default(),
                };
                self.set_stream(table, Some(spec)).await
            }
        }
    }

    /// ListStream: the enabled streams, of one table or of all.
    pub async fn list_streams(&self, table: Option<&str>) -> Result<Vec<StreamInfo>> {
        if let Some(t) = table {
            self.table_inner(t)?;
        }
        let cat = self.inner.catalog.lock().await;
        Ok(cat
            .1
            .tables
            .iter()
            .filter(|e| table.is_none_or(|t| t == e.schema.name))
            .filter_map(|e| {
                e.stream.as_ref().map(|s| StreamInfo {
                    stream_id: s.id.clone(),
                    table: e.schema.name.clone(),
                    created_ms: s.created_ms,
                })
            })
            .collect())
    }

    /// DescribeStream.
    pub async fn describe_stream(&self, stream_id: &str) -> Result<StreamDescription> {
        let (table, state, shards) = self.stream(stream_id).await?;
        let lineage = lineage(&table.manifest.lock().await.1);
        let name = |p: u64| shard_name(table.id, p);
        Ok(StreamDescription {
            stream_id: state.id.clone(),
            table: table.schema.name.clone(),
            status: "active",
            expiration_hours: state.spec.expiration_hours,
            columns: state.spec.columns.clone(),
            created_ms: state.created_ms,
            shards: shards
                .all()
                .into_iter()
                .map(|(p, _)| {
                    let parents = lineage.get(&p).map(|(_, ps)| ps.clone()).unwrap_or_default();
                    ShardInfo {
                        shard_id: name(p),
                        parent_id: parents.first().map(|&q| name(q)),
                        parent_sibling_id: parents.get(1).map(|&q| name(q)),
                    }
                })
                .collect(),
            bytes: shards.bytes(),
        })
    }

    /// GetShardIterator: where a reader of `shard_id` starts.
    pub async fn shard_iterator(&self, stream_id: &str, shard_id: &str, start: StreamStart) -> Result<String> {
        let (table, state, shards) = self.stream(stream_id).await?;
        let (part, log) = shard_log(&table, &shards, stream_id, shard_id)?;
        let mut at = log.start()?;
        if let StreamStart::AtMs(ms) = start {
            // The first record committed at or after `ms`, or the end.
            let want = (ms.max(0) as u64).saturating_mul(1000);
            loop {
                let (batch, next) = log.read(at, MAX_STREAM_RECORDS)?.ok_or_else(|| trimmed(stream_id))?;
                match batch.iter().position(|(e, _)| e.commit_us >= want) {
                    Some(0) => break,
                    Some(i) => {
                        at = log.read(at, i)?.ok_or_else(|| trimmed(stream_id))?.1;
                        break;
                    }
                    None if batch.len() < MAX_STREAM_RECORDS => {
                        at = next;
                        break;
                    }
                    None => at = next,
                }
            }
        }
        Ok(encode_iterator(&state.id, part, at))
    }

    /// GetStreamRecord: up to `limit` records (at most
    /// [`MAX_STREAM_RECORDS`]) from `iterator` on, and the next iterator.
    pub async fn get_stream_records(&self, iterator: &str, limit: usize) -> Result<StreamRecords> {
        if limit == 0 || limit > MAX_STREAM_RECORDS {
            return Err(Error::param(format!(
                "a GetStreamRecord limit of {limit} is out of range: 1 to {MAX_STREAM_RECORDS} records are accepted"
            )));
        }
        let (stream_id, shard, at) = decode_iterator(iterator)?;
        let (table, state, shards) = self.stream(&stream_id).await?;
        let Some(log) = shards.log(shard) else {
            return Err(Error::new(
                ErrorKind::ObjectNotExist,
                format!(
                    "the iterator names shard '{}', which stream '{stream_id}' no longer has (a closed shard goes \
                     once its records expire; DescribeStream lists the shards)",
                    shard_name(table.id, shard)
                ),
            ));
        };
        let cutoff = (self.inner.now_ms().max(0) as u64 * 1000)
            .saturating_sub(state.spec.expiration_hours as u64 * 3_600_000_000);
        let Some((entries, next)) = log.read(at, limit)? else {
            return Err(trimmed(&stream_id));
        };
        if entries.first().is_some_and(|(e, _)| e.commit_us < cutoff) && at != log.start()? {
            return Err(trimmed(&stream_id));
        }
        let schema = table.full_schema();
        let keep = state.spec.columns.clone();
        let records = entries
            .into_iter()
            .filter(|(e, _)| e.commit_us >= cutoff)
            .map(|(e, row_index)| stream_record(&schema, e, row_index, Some(&keep)))
            .collect::<Result<Vec<_>>>()?;
        // A shard split or merged away takes no more records: once read
        // to its end it has no next iterator (read its children next).
        let closed = table.state.read().part_by_id(shard).is_none();
        // (Synced first: records appended before it closed may not be.)
        let finished = closed && log.fully_synced() && log.read(next, 1)?.is_some_and(|(rest, _)| rest.is_empty());
        Ok(StreamRecords {
            records,
            next_iterator: (!finished).then(|| encode_iterator(&stream_id, shard, next)),
        })
    }

    /// The table, stream state and log of `stream_id`.
    async fn stream(&self, stream_id: &str) -> Result<(Arc<TableInner>, StreamState, Arc<StreamShards>)> {
        let state = {
            let cat = self.inner.catalog.lock().await;
            cat.1.tables.iter().find_map(|e| {
                e.stream
                    .as_ref()
                    .filter(|s| s.id == stream_id)
                    .map(|s| (e.schema.name.clone(), s.clone()))
            })
        };
        let Some((name, state)) = state else {
            return Err(Error::new(
                ErrorKind::ObjectNotExist,
                format!("stream '{stream_id}' does not exist (ListStream lists the streams there are)"),
            ));
        };
        let table = self.table_inner(&name)?;
        let shards = table.stream.read().clone().ok_or_else(|| {
            Error::new(
                ErrorKind::ObjectNotExist,
                format!("stream '{stream_id}' has no log here (its table is archived)"),
            )
        })?;
        Ok((table, state, shards))
    }
}

/// The partition and log of shard `shard_id`.
fn shard_log(
    table: &TableInner,
    shards: &StreamShards,
    stream_id: &str,
    shard_id: &str,
) -> Result<(u64, Arc<StreamLog>)> {
    let part = match shard_id.split_once('.') {
        None if shard_id == table.id.to_string() => Some(0),
        Some((t, p)) if t == table.id.to_string() => p.parse::<u64>().ok().filter(|p| *p != 0),
        _ => None,
    };
    part.and_then(|p| shards.log(p).map(|l| (p, l))).ok_or_else(|| {
        let names: Vec<String> = shards.all().iter().map(|(p, _)| shard_name(table.id, *p)).collect();
        Error::new(
            ErrorKind::ObjectNotExist,
            format!(
                "shard '{shard_id}' does not exist in stream '{stream_id}' (its shards: {}; DescribeStream lists them)",
                names.join(", ")
            ),
        )
    })
}

fn trimmed(stream_id: &str) -> Error {
    Error::new(
        ErrorKind::TrimmedDataAccess,
        format!(
            "the records this iterator of stream '{stream_id}' points to have expired; GetShardIterator gives one \
             at the oldest record kept"
        ),
    )
}

/// The manifest of a table being opened (nothing else holds it yet).
fn opening_manifest(t: &TableInner) -> Result<crate::manifest::TableManifest> {
    t.manifest
        .try_lock()
        .map(|m| m.1.clone())
        .map_err(|_| Error::io("open a stream", "the table's manifest is busy while it is opened"))
}

/// Opens the stream shards of table `t` at an open of the database: the
/// live partitions' and the closed ones still kept. Puts into them the
/// WAL's writes they lack (those after their last synced record that a
/// crash cut off, or that were not synced): `entries` are the WAL's
/// writes to tables with streams, in log order; a write is in place when
/// the log of its partition, or of an ancestor that held its key, has
/// it; otherwise it goes to its partition's (records already expired
/// are left out). Every write up to `max_seq` is then in the logs, and
/// none above it (records of writes a power cut took out of the WAL are
/// cut first: new writes take their sequences).
pub(super) fn open_log(
    root: &std::path::Path,
    t: &TableInner,
    spec: &StreamSpec,
    entries: &[crate::wal::WalEntry],
    (max_seq, now_us): (u64, u64),
) -> Result<Arc<StreamShards>> {
    let manifest = opening_manifest(t)?;
    let shards = StreamShards::open(&stream_dir(root, t.id), [], false, max_seq)?;
    shards.set_expiration_hours(spec.expiration_hours);
    shards.set_origin_columns(spec.columns.clone());
    let live: Vec<u64> = manifest.partitions.iter().map(|p| p.id).collect();
    let closed: Vec<u64> = manifest.closed_partitions.iter().map(|p| p.id).collect();
    let known: Vec<u64> = live.iter().chain(&closed).copied().collect();
    shards.remove_others(&known)?;
    for &id in &live {
        shards.add(id)?;
    }
    for &id in closed.iter().filter(|id| shards.exists(**id)) {
        shards.add(id)?;
    }
    let lineage = lineage(&manifest);
    let cutoff_us = now_us.saturating_sub(spec.expiration_hours as u64 * 3_600_000_000);
    let mut missing: std::collections::BTreeMap<u64, Vec<&crate::wal::WalEntry>> = Default::default();
    for e in entries
        .iter()
        .filter(|e| e.table_id == t.id && e.commit_us >= cutoff_us)
    {
        let part = t.state.read().part(&e.key).id;
        let mut todo = vec![part];
        let mut present = false;
        while let Some(p) = todo.pop() {
            if shards.log(p).is_some_and(|log| e.seq <= log.last_seq()) {
                present = true;
                break;
            }
            if let Some((_, parents)) = lineage.get(&p) {
                todo.extend(
                    parents
                        .iter()
                        .filter(|q| lineage.get(q).is_some_and(|(r, _)| r.contains(&e.key))),
                );
            }
        }
        if !present {
            missing.entry(part).or_default().push(e);
        }
    }
    for (part, missing) in missing {
        let log = shards.add(part)?;
        // One record per group (a group's writes share their commit time).
        for group in missing.chunk_by(|a, b| a.commit_us == b.commit_us) {
            let mut payload = Vec::new();
            let with_origin = group.iter().any(|e| e.origin.is_some());
            crate::wal::encode_group_header(&mut payload, group[0].commit_us, with_origin);
            for e in group {
                crate::wal::encode_entry(&mut payload, e.seq, t.id, &e.key, &e.mutation);
                if with_origin {
                    crate::wal::encode_origin(&mut payload, e.origin.as_deref().unwrap_or_default());
                }
            }
            let (first, last) = (group[0].seq, group[group.len() - 1].seq);
            log.append(&payload, first, last, group[0].commit_us)?;
        }
    }
    for (_, log) in shards.all() {
        log.sync(max_seq, max_seq)?;
    }
    Ok(shards)
}

/// The stream shards of table `t` read beside their writer (a read-only
/// open): the live partitions' and the closed ones kept.
pub(super) fn open_live(root: &std::path::Path, t: &TableInner) -> Result<Arc<StreamShards>> {
    let manifest = opening_manifest(t)?;
    let shards = StreamShards::open(&stream_dir(root, t.id), [], true, u64::MAX)?;
    for p in &manifest.partitions {
        shards.add(p.id)?;
    }
    for c in manifest.closed_partitions.iter().filter(|c| shards.exists(c.id)) {
        shards.add(c.id)?;
    }
    Ok(shards)
}

/// Syncs every stream log now and then (what readers see, and what lets
/// the WAL go) and drops expired files, until the database closes.
pub(super) fn start_syncing(shared: std::sync::Weak<super::background::Shared>) -> Result<()> {
    std::thread::Builder::new()
        .name("cellar-streams".into())
        .spawn(move || {
            let mut last_expiry = std::time::Instant::now();
            loop {
                std::thread::sleep(SYNC_EVERY);
                let Some(shared) = shared.upgrade() else { break };
                if shared.closed.load(std::sync::atomic::Ordering::Acquire) {
                    break;
                }
                let covered = shared.visible_seq.load(std::sync::atomic::Ordering::Acquire);
                let durable = shared.durable_seq.load(std::sync::atomic::Ordering::Acquire);
                if durable < covered {
                    // Interval or no durability: the records of writes not
                    // yet durable wait for the WAL's next fsync, asked for
                    // now (readers see them within two rounds).
                    if let Some(tx) = shared.commit_tx.get().and_then(|tx| tx.upgrade()) {
                        let _ = tx.try_send(crate::write::committer::CommitMsg::Sync { done: None });
                    }
                }
                let expire = last_expiry.elapsed() >= EXPIRE_EVERY;
                let now_us = shared.options.clock.now_ms().max(0) as u64 * 1000;
                // Each table's shards, with its live partitions.
                let tables: Vec<_> = shared
                    .tables
                    .read()
                    .values()
                    .filter_map(|t| {
                        let live: Vec<u64> = t.state.read().parts.iter().map(|p| p.id).collect();
                        t.stream.read().clone().map(|s| (s, live))
                    })
                    .collect();
                drop(shared);
                for (shards, live) in tables {
                    for (part, log) in shards.all() {
                        // A failure stops the log (`StreamLog::check` reports it).
                        let _ = log.sync(covered, durable);
                        if expire {
                            let cutoff = now_us.saturating_sub(log.expiration_us());
                            let _ = match live.contains(&part) {
                                true => log.expire(cutoff),
                                // A closed shard goes whole once expired.
                                false => shards.retire_expired(part, cutoff).map(|_| ()),
                            };
                        }
                    }
                }
                if expire {
                    last_expiry = std::time::Instant::now();
                }
            }
        })
        .map(|_| ())
        .map_err(|e| Error::io("start the stream thread", e))
}

/// How often stream logs are synced: the most a reader waits for a write
/// under `Durability::Sync` (under the others, a write waits for the
/// WAL's fsync too, asked for by the round that finds it: two rounds).
const SYNC_EVERY: std::time::Duration = std::time::Duration::from_millis(20);

/// How often expired stream files are looked for.
const EXPIRE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A shard's log directory.
pub(super) fn stream_dir(root: &std::path::Path, table_id: u64) -> std::path::PathBuf {
    root.join("streams").join(table_id.to_string())
}

/// Deletes a stream log directory (gone already: nothing to do).
pub(super) fn remove_dir(dir: &std::path::Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("delete stream log {}", dir.display()), e)),
    }
}

/// An iterator: `2.stream.partition.file.offset.skip.crc` (hex), the
/// CRC-32C of the rest, so that a garbled one is refused (and one of the
/// format before partitions, without the leading `2`).
fn encode_iterator(stream_id: &str, shard: u64, at: LogPosition) -> String {
    let body = format!(
        "2.{}.{shard:x}.{:x}.{:x}.{:x}",
        hex(stream_id.as_bytes()),
        at.file,
        at.offset,
        at.skip
    );
    format!("{body}.{:08x}", crc32c::crc32c(body.as_bytes()))
}

fn decode_iterator(it: &str) -> Result<(String, u64, LogPosition)> {
    let bad = || {
        Error::param(format!(
            "'{it}' is not a shard iterator (GetShardIterator and GetStreamRecord give them; they are used as given)"
        ))
    };
    let (body, crc) = it.rsplit_once('.').ok_or_else(bad)?;
    if u32::from_str_radix(crc, 16).ok() != Some(crc32c::crc32c(body.as_bytes())) {
        return Err(bad());
    }
    let parts: Vec<&str> = body.split('.').collect();
    let ["2", stream, shard, file, offset, skip] = parts[..] else {
        return Err(bad());
    };
    let num = |s: &str| u64::from_str_radix(s, 16).map_err(|_| bad());
    let stream = unhex(stream).ok_or_else(bad)?;
    Ok((
        stream,
        num(shard)?,
        LogPosition {
            file: num(file)?,
            offset: num(offset)? as usize,
            skip: num(skip)? as usize,
        },
    ))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}
