//! `cellar stream TABLE`: a table's change stream records as NDJSON.
//!
//! One line per record, in commit order:
//! `{"action":"PUT_ROW"|"UPDATE_ROW"|"DELETE_ROW","pk":{..},"columns":[..],
//! "sequence":{"epoch":0,"timestamp":US,"row_index":N},"shard":"ID"}`, each
//! column `{"name":C,"type":"put","value":V,"version":MS}`,
//! `{"name":C,"type":"delete_one_version","version":MS}` or
//! `{"name":C,"type":"delete_all_versions"}`; with origin columns,
//! `"origin":[{"name":C,"value":V,"version":MS}]` (values before the write).
//!
//! Invariant: each record is printed once, in its shard's order, and a
//! shard's records only after those of the shards it was split or merged
//! from (so each key's records come in commit order); without `--follow`
//! the command ends at the last record synced when it read.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;

use super::json::{pk_json, value_json};
use super::stdout;
use crate::error::{Error, Result};
use crate::{Database, StreamAction, StreamColumn, StreamRecord, StreamStart};

/// Records read per GetStreamRecord.
const PAGE: usize = 1000;

/// How long `--follow` waits when the shard has nothing new.
const FOLLOW_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

pub(super) async fn run(db: &Database, table: &str, since: Option<i64>, follow: bool) -> Result<()> {
    let Some(info) = db.list_streams(Some(table)).await?.into_iter().next() else {
        return Err(Error::param(format!(
            "table '{table}' has no change stream; enable it with `cellar alter {table} --stream true` (or \
             ALTER TABLE {table} SET (stream = true))"
        )));
    };
    let start = since.map_or(StreamStart::Oldest, StreamStart::AtMs);
    // Buffered, flushed page by page: a line write each was a system call each.
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout::stdout());
    // Shards are read once their parents are finished (read to the end of
    // a closed shard), so that each key's records come in commit order.
    let mut reading: BTreeMap<String, String> = BTreeMap::new();
    let mut finished: HashSet<String> = HashSet::new();
    loop {
        let shards = db.describe_stream(&info.stream_id).await?.shards;
        let present: HashSet<&str> = shards.iter().map(|s| s.shard_id.as_str()).collect();
        for s in &shards {
            let parents = [&s.parent_id, &s.parent_sibling_id];
            let ready = parents
                .iter()
                .filter_map(|p| p.as_deref())
                .all(|p| finished.contains(p) || !present.contains(p));
            if ready && !finished.contains(&s.shard_id) && !reading.contains_key(&s.shard_id) {
                let it = db.shard_iterator(&info.stream_id, &s.shard_id, start).await?;
                reading.insert(s.shard_id.clone(), it);
            }
        }
        let mut progressed = false;
        for (shard, it) in reading.clone() {
            let page = db.get_stream_records(&it, PAGE).await?;
            for r in &page.records {
                write_record(&mut out, r, &shard, None).map_err(|e| Error::io("write to stdout", e))?;
            }
            out.flush().map_err(|e| Error::io("write to stdout", e))?;
            progressed |= !page.records.is_empty();
            match page.next_iterator {
                Some(next) => {
                    reading.insert(shard, next);
                }
                None => {
                    // A closed shard, read to its end: its children next.
                    reading.remove(&shard);
                    finished.insert(shard);
                    progressed = true;
                }
            }
        }
        if !progressed {
            if !follow {
                return Ok(());
            }
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_WAIT) => {}
                _ = tokio::signal::ctrl_c() => return Ok(()),
            }
        }
    }
}

/// Writes one record as a JSON line (see the module docs), with
/// `"channel"` when it comes from a tunnel. Written field by field rather
/// than through a `serde_json::Value` (whose map inserts and allocations
/// were most of a million-record `cellar stream`).
pub(crate) fn write_record(
    out: &mut impl Write,
    r: &StreamRecord,
    shard: &str,
    channel: Option<&str>,
) -> std::io::Result<()> {
    let action = match r.action {
        StreamAction::PutRow => "PUT_ROW",
        StreamAction::UpdateRow => "UPDATE_ROW",
        StreamAction::DeleteRow => "DELETE_ROW",
    };
    write!(out, "{{\"action\":\"{action}\",\"pk\":")?;
    write_pk(out, &r.primary_key)?;
    out.write_all(b",\"columns\":[")?;
    for (i, c) in r.columns.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        match c {
            StreamColumn::Put { name, value, version } => {
                out.write_all(b"{\"name\":")?;
                write_str(out, name)?;
                out.write_all(b",\"type\":\"put\",\"value\":")?;
                write_value(out, value)?;
                write!(out, ",\"version\":{version}}}")?;
            }
            StreamColumn::DeleteOneVersion { name, version } => {
                out.write_all(b"{\"name\":")?;
                write_str(out, name)?;
                write!(out, ",\"type\":\"delete_one_version\",\"version\":{version}}}")?;
            }
            StreamColumn::DeleteAllVersions { name } => {
                out.write_all(b"{\"name\":")?;
                write_str(out, name)?;
                out.write_all(b",\"type\":\"delete_all_versions\"}")?;
            }
        }
    }
    let q = &r.sequence;
    write!(
        out,
        "],\"sequence\":{{\"epoch\":{},\"timestamp\":{},\"row_index\":{}}},\"shard\":",
        q.epoch, q.timestamp_us, q.row_index
    )?;
    write_str(out, shard)?;
    let origin: Vec<_> = r
        .origin
        .iter()
        .filter_map(|c| match c {
            StreamColumn::Put { name, value, version } => Some((name, value, version)),
            _ => None,
        })
        .collect();
    if !r.origin.is_empty() {
        out.write_all(b",\"origin\":[")?;
        for (i, (name, value, version)) in origin.into_iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            out.write_all(b"{\"name\":")?;
            write_str(out, name)?;
            out.write_all(b",\"value\":")?;
            write_value(out, value)?;
            write!(out, ",\"version\":{version}}}")?;
        }
        out.write_all(b"]")?;
    }
    if let Some(ch) = channel {
        out.write_all(b",\"channel\":")?;
        write_str(out, ch)?;
    }
    out.write_all(b"}\n")
}

/// A JSON string, escaped as serde_json escapes it.
fn write_str(out: &mut impl Write, s: &str) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, s).map_err(std::io::Error::other)
}

/// A value as `value_json` prints it.
fn write_value(out: &mut impl Write, v: &crate::Value) -> std::io::Result<()> {
    match v {
        crate::Value::Integer(i) => write!(out, "{i}"),
        crate::Value::Double(_) | crate::Value::Binary(_) => {
            serde_json::to_writer(&mut *out, &value_json(v)).map_err(std::io::Error::other)
        }
        crate::Value::String(s) => write_str(out, s),
        crate::Value::Boolean(b) => write!(out, "{b}"),
    }
}

/// A primary key as `pk_json` prints it.
fn write_pk(out: &mut impl Write, pk: &crate::PrimaryKey) -> std::io::Result<()> {
    out.write_all(b"{")?;
    for (i, (name, v)) in pk.columns.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        write_str(out, name)?;
        out.write_all(b":")?;
        match v {
            crate::PkValue::Integer(n) => write!(out, "{n}")?,
            crate::PkValue::String(s) => write_str(out, s)?,
            _ => serde_json::to_writer(
                &mut *out,
                &pk_json(&crate::PrimaryKey::new().with(name.clone(), v.clone()))[name],
            )
            .map_err(std::io::Error::other)?,
        }
    }
    out.write_all(b"}")
}
