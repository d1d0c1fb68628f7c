//! Change stream records as readers get them (GetStreamRecord, tunnels),
//! shard names, and a table's partition lineage.
//!
//! Invariant: a record is decoded from its log entry alone (key, mutation,
//! commit time, origin), so every reader of an entry gets the same record.

use crate::error::Result;
use crate::model::key::KeyRange;
use crate::model::row::{Action, Mutation};
use crate::model::types::{PrimaryKey, Value};

/// What a record's write was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamAction {
    /// PutRow: the row was replaced by its columns.
    PutRow,
    /// UpdateRow: its column actions applied to the row.
    UpdateRow,
    /// DeleteRow.
    DeleteRow,
}

/// One column of a record.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamColumn {
    /// A version was written.
    Put {
        /// The column.
        name: String,
        /// The value.
        value: Value,
        /// Its version (timestamp, ms).
        version: i64,
    },
    /// One version was deleted.
    DeleteOneVersion {
        /// The column.
        name: String,
        /// The version.
        version: i64,
    },
    /// Every version was deleted.
    DeleteAllVersions {
        /// The column.
        name: String,
    },
}

/// A record's place in its shard: records compare in commit order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SequenceInfo {
    /// Always 0 (commit times rise strictly within a database).
    pub epoch: u32,
    /// The commit time in microseconds since the epoch.
    pub timestamp_us: u64,
    /// The record's index among the writes committed together.
    pub row_index: u32,
}

/// One committed row write.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamRecord {
    /// What the write was.
    pub action: StreamAction,
    /// The row's primary key.
    pub primary_key: PrimaryKey,
    /// The columns it wrote or deleted (none for DeleteRow).
    pub columns: Vec<StreamColumn>,
    /// Its place in the shard.
    pub sequence: SequenceInfo,
    /// The origin record: the newest value of each of the stream's
    /// columns (`StreamSpec::columns`) before the write, as
    /// [`StreamColumn::Put`]s; a column the row did not have is left out.
    pub origin: Vec<StreamColumn>,
    /// The write's sequence number (0 for a tunnel's full-phase row).
    pub(crate) seq: u64,
    /// The write as the log holds it, for the database's own readers (a
    /// global index's follower), whose records are not decoded: their
    /// `primary_key` and `columns` are left empty.
    pub(crate) raw: Option<Box<RawWrite>>,
}

/// A log entry's key and mutation (see [`StreamRecord::raw`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RawWrite {
    pub key: Vec<u8>,
    pub mutation: Mutation,
}

/// A log entry as the record readers get; `keep`: the origin columns
/// they asked for (the log also carries global indexes' key columns).
pub(crate) fn stream_record(
    schema: &crate::model::schema::TableSchema,
    e: crate::wal::WalEntry,
    row_index: u32,
    keep: Option<&[String]>,
) -> Result<StreamRecord> {
    let (mut record, key, mutation) = record_of(e, row_index, keep);
    record.primary_key = schema.decode_pk(&key)?;
    record.columns = columns(mutation);
    Ok(record)
}

/// A log entry as the database's own readers take it (see
/// [`StreamRecord::raw`]): its key and mutation as they are, every origin
/// column.
pub(crate) fn raw_record(e: crate::wal::WalEntry, row_index: u32) -> StreamRecord {
    let (mut record, key, mutation) = record_of(e, row_index, None);
    record.raw = Some(Box::new(RawWrite { key, mutation }));
    record
}

/// A log entry's record without its key and columns (what the two kinds
/// of readers share), and the entry's key and mutation.
fn record_of(e: crate::wal::WalEntry, row_index: u32, keep: Option<&[String]>) -> (StreamRecord, Vec<u8>, Mutation) {
    let record = StreamRecord {
        seq: e.seq,
        raw: None,
        primary_key: PrimaryKey::default(),
        sequence: SequenceInfo {
            epoch: 0,
            timestamp_us: e.commit_us,
            row_index,
        },
        action: match &e.mutation {
            Mutation::Put { .. } => StreamAction::PutRow,
            Mutation::Update { .. } => StreamAction::UpdateRow,
            Mutation::Delete => StreamAction::DeleteRow,
        },
        columns: Vec::new(),
        origin: e
            .origin
            .unwrap_or_default()
            .into_iter()
            .filter(|(name, _, _)| keep.is_none_or(|k| k.contains(name)))
            .map(|(name, version, value)| StreamColumn::Put { name, value, version })
            .collect(),
    };
    (record, e.key, e.mutation)
}

/// A shard's id: the table's id for its first partition (the one shard
/// of a table from before partitions), `<table id>.<partition id>` for
/// the others.
pub(crate) fn shard_name(table: u64, part: u64) -> String {
    match part {
        0 => table.to_string(),
        p => format!("{table}.{p}"),
    }
}

/// Each partition's keys and the partitions it was split or merged from,
/// for the live partitions and the closed ones a manifest keeps.
pub(crate) fn lineage(m: &crate::manifest::TableManifest) -> std::collections::HashMap<u64, (KeyRange, Vec<u64>)> {
    let mut out = std::collections::HashMap::new();
    for (i, p) in m.partitions.iter().enumerate() {
        let range = KeyRange {
            lo: p.lower_key(),
            hi: m.partitions.get(i + 1).map(|n| n.lower_key()),
        };
        out.insert(p.id, (range, p.parents.clone()));
    }
    for c in &m.closed_partitions {
        let range = KeyRange {
            lo: crate::segment::hex_decode(&c.lower),
            hi: c.upper.as_deref().map(crate::segment::hex_decode),
        };
        out.insert(c.id, (range, c.parents.clone()));
    }
    out
}

fn columns(m: Mutation) -> Vec<StreamColumn> {
    match m {
        Mutation::Put { cells, .. } => cells
            .into_iter()
            .map(|(name, version, value)| StreamColumn::Put { name, value, version })
            .collect(),
        Mutation::Update { actions } => actions
            .into_iter()
            .map(|a| match a {
                Action::Put { column, version, value } => StreamColumn::Put {
                    name: column,
                    value,
                    version,
                },
                Action::DeleteVersion { column, version } => StreamColumn::DeleteOneVersion { name: column, version },
                Action::DeleteAll { column } => StreamColumn::DeleteAllVersions { name: column },
            })
            .collect(),
        Mutation::Delete => Vec::new(),
    }
}
