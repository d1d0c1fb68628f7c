//! Checked writes (a condition or an increment) decided at their place in
//! the order.
//!
//! A writer checks its condition and computes its increments on a snapshot
//! (`db/inner.rs`), so that most checked writes cost the committer
//! nothing. When the row has had writes since that snapshot (earlier in
//! the same group, or committed after it), the committer decides the write
//! again here, on the row as it is at the write's place in the sequence:
//! the snapshot's state with every later write of the key applied in
//! order, taken from the memtables the write's [`MemChain`] link reaches
//! and from the group's earlier writes. Nothing is sent back to the writer
//! to check again, so a checked write keeps its place: it sees exactly the
//! writes sequenced before it, and every write submitted after it comes
//! after it.
//!
//! Invariant: a write leaves [`decide`] committed with the mutation the
//! sequential order gives it, or uncommitted with the error it gives.

use std::collections::HashMap;
use std::sync::Arc;

use super::recent::RecentKeys;
use super::{condition, validate};
use crate::error::{Error, Result};
use crate::model::api::{ReturnType, RowWrite};
use crate::model::row::Mutation;
use crate::model::row::RowState;
use crate::model::schema::TableOptions;
use crate::model::types::Cell;
use crate::state::{MemChain, TableInner};

/// One row write ready to be committed.
pub(crate) struct PendingWrite {
    pub table: Arc<TableInner>,
    pub key: Vec<u8>,
    pub mutation: Mutation,
    /// Where the 8 bytes of the auto-increment placeholder are in `key`.
    pub auto_increment: Option<usize>,
    /// A write that read its row: decided again if the row changed since.
    pub check: Option<Box<CheckedWrite>>,
    /// For a table whose stream records origin columns: their newest
    /// values before this write (the write's place decides them, see
    /// [`decide`]).
    pub origin: Option<Vec<(String, i64, crate::model::types::Value)>>,
    /// For a table with local indexes: the row before this write, at its
    /// place in the order (`Some(None)`: no row); the committer derives
    /// the index writes from it (`write::index`). `None`: not read (the
    /// table had no local index when the write was prepared).
    pub before: Option<Option<RowState>>,
}

impl PendingWrite {
    /// A write checked against nothing: committed as it is.
    pub fn plain(table: Arc<TableInner>, key: Vec<u8>, mutation: Mutation) -> Self {
        PendingWrite {
            table,
            key,
            mutation,
            auto_increment: None,
            check: None,
            origin: None,
            before: None,
        }
    }
}

/// What the committer needs to decide a checked write again.
pub(crate) struct CheckedWrite {
    /// The sequence of the snapshot the row was read at.
    pub at: u64,
    /// The row as of `at` (`None`: no source had it).
    pub state: Option<RowState>,
    /// The link of the memtable that was active at `at`: every write of
    /// the row after `at` is in its memtable or a later one.
    pub chain: Arc<MemChain>,
    /// The write as it was given, when its outcome depends on its row (a
    /// condition or an increment).
    pub write: Option<RowWrite>,
    /// The clock and the table options the write was checked with.
    pub now_ms: i64,
    pub options: TableOptions,
    /// The check failed on the snapshot: the pending write's mutation is a
    /// placeholder, and the failure stands unless the row changed since.
    pub failed: bool,
    /// The stream's origin columns, when its record carries them: decided
    /// again with the row.
    pub origin: Option<Arc<Vec<String>>>,
}

/// The newest value of each of `columns` in `state` (the row before a
/// write): a stream record's origin.
pub(crate) fn origin_of(
    state: Option<&RowState>,
    columns: &[String],
) -> Vec<(String, i64, crate::model::types::Value)> {
    let Some(st) = state else { return Vec::new() };
    columns
        .iter()
        .filter_map(|c| {
            let (version, value) = st.columns.get(c)?.versions.first()?;
            Some((c.clone(), *version, value.clone()))
        })
        .collect()
}

/// A checked write the committer decided again, and committed.
#[derive(Debug, Clone)]
pub(crate) struct Decided {
    /// Row data the write carries (capacity units).
    pub data_bytes: usize,
    /// The cells it wrote, when it returns them (`ReturnType::AfterModify`).
    pub written: Option<Vec<(String, Vec<Cell>)>>,
}

/// The outcome of [`decide`] for a group.
#[derive(Default)]
pub(crate) struct Decisions {
    /// Checked writes that are not committed (their check fails at their
    /// place), ascending.
    pub failed: Vec<usize>,
    /// Checked writes decided again (the row changed since their
    /// snapshot): their result, ascending by index.
    pub decided: Vec<(usize, Result<Decided>)>,
}

/// Decides every checked write of `group` at its place in the group: a
/// write whose row is unchanged since its snapshot keeps its snapshot's
/// outcome; any other is checked (and its increments computed) again on
/// the row as the earlier writes leave it. `refused[i]` says write `i` is
/// not committed for another reason. `next_seq` is the sequence the group
/// starts at.
pub(crate) fn decide(
    group: &mut [PendingWrite],
    refused: &[(usize, Error)],
    next_seq: u64,
    recent: &RecentKeys,
) -> Decisions {
    let mut out = Decisions::default();
    if group.iter().all(|w| w.check.is_none()) {
        return out;
    }
    let prev = earlier_writes(group);
    let mut chains: Vec<(Arc<MemChain>, Vec<Arc<crate::memtable::Memtable>>)> = Vec::new();
    let is_refused = |i: usize| refused.binary_search_by_key(&i, |(c, _)| *c).is_ok();
    let mut committed: Vec<bool> = (0..group.len()).map(|i| !is_refused(i)).collect();
    for i in 0..group.len() {
        if !committed[i] {
            continue;
        }
        let Some(check) = group[i].check.take() else {
            continue;
        };
        // The group's earlier committed writes of the key, oldest first.
        let mut earlier = Vec::new();
        let mut j = prev[i];
        while j != NONE {
            if committed[j] {
                earlier.push(j);
            }
            j = prev[j];
        }
        earlier.reverse();
        let key = &group[i].key;
        let CheckedWrite {
            at,
            state,
            chain,
            write,
            now_ms,
            options,
            failed,
            origin,
        } = *check;
        // The row at the write's place: the snapshot's state, then every
        // later write of the key in sequence order. Nothing later (the
        // common case): the writer's outcome stands.
        let mut found = state.is_some();
        let mut st = state.unwrap_or_default();
        let mut moved = false;
        // The memtables are searched only when the committer may have
        // written the key since the snapshot. Writes of one batch share
        // their chain link: its memtables are listed once per group.
        if recent.maybe_written_after(group[i].table.id, key, at) {
            let at_chain = match chains.iter().position(|(c, _)| Arc::ptr_eq(c, &chain)) {
                Some(i) => i,
                None => {
                    let mems = chain.memtables();
                    chains.push((chain.clone(), mems));
                    chains.len() - 1
                }
            };
            for m in &chains[at_chain].1 {
                moved |= m.apply_after(key, at, &mut st);
            }
        }
        if earlier.is_empty() && !moved {
            if failed {
                committed[i] = false;
                out.failed.push(i);
            }
            continue;
        }
        found |= moved;
        for &j in &earlier {
            st.apply(next_seq + j as u64, &group[j].mutation);
            found = true;
        }
        let state = found.then_some(st);
        if let Some(cols) = &origin {
            group[i].origin = Some(origin_of(state.as_ref(), cols));
        }
        if group[i].before.is_some() {
            group[i].before = Some(state.clone());
        }
        // A write whose outcome does not depend on its row (read only for
        // its origin or its indexes): its mutation stands.
        let Some(write) = write else { continue };
        let table = &group[i].table;
        let return_type = write.return_type();
        let outcome = condition::check(&table.schema, &options, now_ms, &write, state.as_ref())
            .and_then(|()| validate::to_mutation(&table.schema, &options, now_ms, write, state.as_ref()));
        match outcome {
            Ok(v) => {
                let written = (return_type == ReturnType::AfterModify).then(|| v.mutation.written_cells());
                group[i].mutation = v.mutation;
                out.decided.push((
                    i,
                    Ok(Decided {
                        data_bytes: v.data_bytes,
                        written,
                    }),
                ));
            }
            Err(e) => {
                committed[i] = false;
                out.failed.push(i);
                out.decided.push((i, Err(e)));
            }
        }
    }
    out
}

const NONE: usize = usize::MAX;

/// For each write of the group, the index of the group's previous write of
/// the same row (`NONE`: none): one foldhash of each key (seeded per
/// process; SipHash cost 4% of a pipelined ingest here).
fn earlier_writes(group: &[PendingWrite]) -> Vec<usize> {
    let mut last: HashMap<(u64, &[u8]), usize, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(group.len(), Default::default());
    group
        .iter()
        .enumerate()
        .map(|(i, w)| {
            // An auto-increment key is new (its placeholder is not its key).
            if w.auto_increment.is_some() {
                return NONE;
            }
            last.insert((w.table.id, &w.key[..]), i).unwrap_or(NONE)
        })
        .collect()
}
