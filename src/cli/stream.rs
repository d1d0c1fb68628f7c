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

use serde_json::{Value as Json, json};

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
                writeln!(out, "{}", record_json(r, &shard)).map_err(|e| Error::io("write to stdout", e))?;
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

/// One record as a JSON line (see the module docs).
pub(crate) fn record_json(r: &StreamRecord, shard: &str) -> Json {
    let mut j = record_fields(r, shard);
    if !r.origin.is_empty() {
        j["origin"] = r
            .origin
            .iter()
            .filter_map(|c| match c {
                StreamColumn::Put { name, value, version } => {
                    Some(json!({"name": name, "value": value_json(value), "version": version}))
                }
                _ => None,
            })
            .collect();
    }
    j
}

fn record_fields(r: &StreamRecord, shard: &str) -> Json {
    let columns: Vec<Json> = r
        .columns
        .iter()
        .map(|c| match c {
            StreamColumn::Put { name, value, version } => {
                json!({"name": name, "type": "put", "value": value_json(value), "version": version})
            }
            StreamColumn::DeleteOneVersion { name, version } => {
                json!({"name": name, "type": "delete_one_version", "version": version})
            }
            StreamColumn::DeleteAllVersions { name } => json!({"name": name, "type": "delete_all_versions"}),
        })
        .collect();
    json!({
        "action": match r.action {
            StreamAction::PutRow => "PUT_ROW",
            StreamAction::UpdateRow => "UPDATE_ROW",
            StreamAction::DeleteRow => "DELETE_ROW",
        },
        "pk": pk_json(&r.primary_key),
        "columns": columns,
        "sequence": {
            "epoch": r.sequence.epoch,
            "timestamp": r.sequence.timestamp_us,
            "row_index": r.sequence.row_index,
        },
        "shard": shard,
    })
}
