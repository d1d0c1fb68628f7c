//! Local secondary indexes, kept by the committer.
//!
//! A write to a table with local indexes reads its row first (as a checked
//! write does), and the committer knows the row as it is at the write's
//! place in the order (`PendingWrite::before`, decided again in
//! [`super::checked`] when the row changed since the read). From the row
//! before and the row after, each index gives its writes
//! ([`IndexDef::writes_for`]): the old index row goes, the new one comes.
//! They are logged in the same WAL record as the row, with the row's
//! sequence number, and inserted with it before the group becomes
//! visible.
//!
//! Invariants: an index write is derived only from the row's state at the
//! write's place, so the index equals what `IndexDef::row_of` gives for
//! every row of the table after every group; a write that did not read
//! its row (prepared before a local index existed) is refused by the
//! committer rather than committed without its index writes.
//!
//! [`IndexDef::writes_for`]: crate::model::index::IndexDef::writes_for

use std::sync::Arc;

use super::checked::PendingWrite;
use crate::error::{Error, ErrorKind, Result};
use crate::model::api::{RowWrite, UpdateAction};
use crate::model::index::PutView;
use crate::model::row::{Mutation, RowState};
use crate::state::TableInner;

/// One index write of a group: the position of the table write it comes
/// from, and what it writes to which index table.
pub(crate) struct IndexWrite {
    pub at: usize,
    pub table: Arc<TableInner>,
    pub key: Vec<u8>,
    pub mutation: Mutation,
}

/// Refuses a write to an index table: its rows come from its table's.
pub(crate) fn refuse_index_write(t: &TableInner) -> Result<()> {
    match &t.index_of {
        Some(def) => Err(Error::param(format!(
            "'{}' is an index of table '{}'; indexes refuse writes (write to the table: its indexes follow)",
            def.name, def.table
        ))),
        None => Ok(()),
    }
}

/// Refuses a value no index key can hold in a column an index of `t` is
/// keyed by; returns whether the write must read its row (`t` has a local
/// index: a local one's writes and a global one's stream origin come from
/// it).
pub(crate) fn check_values(t: &TableInner, w: &RowWrite) -> Result<bool> {
    // Read under the lock, not cloned: every writer thread passes here,
    // and a reference count taken and dropped per write is a cache line
    // they pass back and forth.
    let indexes = t.indexes.read();
    if indexes.is_empty() {
        return Ok(false);
    }
    for i in indexes.iter() {
        match w {
            RowWrite::Put(p) => {
                for c in &p.columns {
                    i.def.check_value(&c.name, &c.value)?;
                }
            }
            RowWrite::Update(u) => {
                for a in &u.actions {
                    if let UpdateAction::Put { name, value, .. } = a {
                        i.def.check_value(name, value)?;
                    }
                }
            }
            RowWrite::Delete(_) => {}
        }
    }
    Ok(true)
}

/// The error for a write that reached the committer without its row read
/// while its table has an index (one was created meanwhile).
pub(crate) fn unread_error(t: &TableInner) -> Error {
    Error::new(
        ErrorKind::RowOperationConflict,
        format!(
            "an index of table '{}' was created while this write was in flight; retry the write",
            t.schema.name
        ),
    )
}

/// Appends to `out` the local index writes of a group whose write `i` has
/// sequence `first + i`, in group order.
pub(crate) fn index_writes(group: &[PendingWrite], first: u64, out: &mut Vec<IndexWrite>) {
    let mut cached: Option<(u64, Option<Vec<crate::state::IndexTarget>>)> = None;
    for (i, w) in group.iter().enumerate() {
        let Some(before) = &w.before else { continue };
        if cached.as_ref().is_none_or(|(id, _)| *id != w.table.id) {
            let local = w.table.indexes_of(crate::model::index::IndexKind::Local);
            cached = Some((w.table.id, (!local.is_empty()).then_some(local)));
        }
        let Some((_, Some(indexes))) = &cached else { continue };
        let mut push = |target: &crate::state::IndexTarget, writes: Vec<(Vec<u8>, Mutation)>| {
            out.extend(writes.into_iter().map(|(key, mutation)| IndexWrite {
                at: i,
                table: target.table.clone(),
                key,
                mutation,
            }))
        };
        // The row after the write: a PutRow's is the PutRow itself (read
        // in place, nothing copied), an UpdateRow's is applied to a copy.
        match &w.mutation {
            Mutation::Put { row_ts, cells } => {
                let after = PutView { row_ts: *row_ts, cells };
                for target in indexes {
                    push(target, target.def.writes_for(&w.key, before.as_ref(), Some(&after)));
                }
            }
            Mutation::Delete => {
                for target in indexes {
                    push(
                        target,
                        target.def.writes_for(&w.key, before.as_ref(), None::<&RowState>),
                    );
                }
            }
            Mutation::Update { .. } => {
                let mut after: RowState = before.clone().unwrap_or_default();
                after.apply(first + i as u64, &w.mutation);
                for target in indexes {
                    push(target, target.def.writes_for(&w.key, before.as_ref(), Some(&after)));
                }
            }
        }
    }
}

/// One base row's index writes in a [`CommitMsg::IndexSync`].
///
/// [`CommitMsg::IndexSync`]: super::committer::CommitMsg::IndexSync
pub(crate) struct SyncRow {
    pub base_key: Vec<u8>,
    /// Committed whatever happened to the base row since the snapshot
    /// (deletes of index rows the row can no longer have).
    pub always: Vec<(Arc<TableInner>, Vec<u8>, Mutation)>,
    /// Committed only if the base row had no write since the snapshot.
    pub writes: Vec<(Arc<TableInner>, Vec<u8>, Mutation)>,
}

/// The writes of an index sync whose base rows had no write after `at`:
/// none in the memtables the partitions' `chains` reach, and none earlier
/// in the `group` being formed.
pub(crate) fn sync_writes(
    base: &TableInner,
    at: u64,
    chains: &[Arc<crate::state::MemChain>],
    rows: Vec<SyncRow>,
    group: &[PendingWrite],
) -> Vec<PendingWrite> {
    let mut mems: Vec<Arc<crate::memtable::Memtable>> = Vec::new();
    for c in chains {
        for m in c.memtables() {
            if m.max_seq() > at && !mems.iter().any(|x| Arc::ptr_eq(x, &m)) {
                mems.push(m);
            }
        }
    }
    let in_group: std::collections::HashSet<&[u8]> = group
        .iter()
        .filter(|w| w.table.id == base.id)
        .map(|w| &w.key[..])
        .collect();
    let mut out = Vec::new();
    for row in rows {
        let key = &row.base_key[..];
        let changed = in_group.contains(key) || mems.iter().any(|m| m.written_after(key, at));
        let writes = row
            .always
            .into_iter()
            .chain((!changed).then_some(row.writes).into_iter().flatten());
        out.extend(writes.map(|(table, key, mutation)| PendingWrite::plain(table, key, mutation)));
    }
    out
}
