//! The committer's appends to change streams: each group's writes go to
//! the log of the stream shard (the partition) holding their key.
//!
//! Invariant: a write is in its shard's log before it is visible (the
//! committer appends after the WAL and before it publishes the group),
//! in the group's order; the WAL keeps what a failed append lost.

use std::sync::Arc;

use super::checked::PendingWrite;
use crate::wal;

/// Appends the group's writes to the stream shards they belong to (the
/// log of the partition holding each key, of tables with streams), after
/// the WAL and before they are visible: so every visible write is in its
/// shard's log, see `StreamLog::sync`; each shard's in the group's order.
/// A failed append stops the log (`StreamLog::fail`): the write is in the
/// WAL, which then keeps it for the next open to put into the log.
///
/// `only_group`: the payload holds the group's writes alone (no index
/// writes), so a group of one shard can be its record as it is.
pub(super) fn append_streams(
    group: &[PendingWrite],
    first: u64,
    commit_us: u64,
    payload: &mut Vec<u8>,
    only_group: bool,
) {
    type Shard = (u64, u64, Arc<crate::stream::StreamLog>);
    // Each write's shard (index into `logs`), if its table has a stream.
    let mut logs: Vec<Shard> = Vec::new();
    let mut shard_of: Vec<Option<usize>> = Vec::with_capacity(group.len());
    // Groups are mostly one table's: look a table up once per run of it.
    // The table of the run, its shards, and its partition when it has one.
    let mut table: Option<(u64, Option<Arc<crate::stream::StreamShards>>, Option<u64>)> = None;
    for w in group {
        if table.as_ref().is_none_or(|(id, _, _)| *id != w.table.id) {
            let shards = w.table.stream.read().clone();
            let st = w.table.state.read();
            let single = (st.parts.len() == 1).then(|| st.parts[0].id);
            table = Some((w.table.id, shards, single));
        }
        let Some((id, Some(shards), single)) = &table else {
            shard_of.push(None);
            continue;
        };
        let part = match single {
            Some(p) => *p,
            None => w.table.state.read().part(&w.key).id,
        };
        let at = match logs.iter().position(|(t, p, _)| t == id && *p == part) {
            Some(at) => Some(at),
            None => shards.log(part).map(|log| {
                logs.push((*id, part, log));
                logs.len() - 1
            }),
        };
        shard_of.push(at);
    }
    if let [(_, _, log)] = &logs[..]
        && only_group
        && shard_of.iter().all(|s| *s == Some(0))
    {
        // The whole group is one shard's: its stream record is the WAL's.
        log.append_or_fail(payload, first, first + group.len() as u64 - 1, commit_us);
        return;
    }
    for (at, (id, _, log)) in logs.iter().enumerate() {
        payload.clear();
        let mine = || group.iter().enumerate().filter(|(i, _)| shard_of[*i] == Some(at));
        let origins = mine().any(|(_, w)| w.origin.is_some());
        wal::encode_group_header(payload, commit_us, origins);
        let (mut lo, mut hi) = (u64::MAX, 0);
        for (i, w) in mine() {
            let seq = first + i as u64;
            (lo, hi) = (lo.min(seq), hi.max(seq));
            wal::encode_entry(payload, seq, *id, &w.key, &w.mutation);
            if origins {
                wal::encode_origin(payload, w.origin.as_deref().unwrap_or_default());
            }
        }
        log.append_or_fail(payload, lo, hi, commit_us);
    }
}
