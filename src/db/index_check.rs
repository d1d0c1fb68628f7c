//! Checking an index against its table (`cellar check`).
//!
//! Every row of the table gives the index row `IndexDef::row_of` says it
//! has (or none); the index must hold exactly those, with the same
//! columns and values. The table and the index are read on snapshots at
//! one sequence, so a local index (written in the same WAL record as its
//! row) compares exactly while writes go on; a global index is compared
//! once it has caught up (it follows the stream), and a difference while
//! it is behind is reported as lag, not damage.
//!
//! Invariant: a reported difference is one a reader would see; nothing is
//! written.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Database;
use crate::error::Result;
use crate::model::index::IndexKind;
use crate::model::row::{Mutation, ReadOptions, RowState, visible_cells};
use crate::model::schema::TableOptions;
use crate::model::types::Value;
use crate::read::MergeScan;
use crate::state::TableInner;

/// A row's columns and newest values, by name.
type Cells = Vec<(String, Value)>;

/// Examples of differences a check reports, at most.
const EXAMPLES: usize = 5;

/// How an index compares with its table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IndexCheck {
    /// The index.
    pub index: String,
    /// Its table.
    pub table: String,
    /// Rows of the table read.
    pub table_rows: u64,
    /// Rows of the index read.
    pub index_rows: u64,
    /// Index rows the table calls for that the index lacks.
    pub missing: u64,
    /// Index rows no table row calls for.
    pub extra: u64,
    /// Index rows whose columns differ from what their table row calls for.
    pub different: u64,
    /// Up to 5 of the differences, described.
    pub examples: Vec<String>,
    /// How far a global index was behind its table (ms of commit time).
    pub lag_ms: u64,
}

impl IndexCheck {
    /// No difference.
    pub fn is_exact(&self) -> bool {
        self.missing == 0 && self.extra == 0 && self.different == 0
    }

    fn note(&mut self, what: String) {
        if self.examples.len() < EXAMPLES {
            self.examples.push(what);
        }
    }
}

impl Database {
    /// Compares every index (of `table`, or of every table) with its
    /// table, by name.
    pub async fn check_indexes(&self, table: Option<&str>) -> Result<Vec<IndexCheck>> {
        let tables: Vec<String> = match table {
            Some(t) => vec![t.to_string()],
            None => self.list_tables(),
        };
        let mut out = Vec::new();
        for t in tables {
            for i in self.list_indexes(&t).await? {
                out.push(self.check_index(&i.def.name).await?);
            }
        }
        Ok(out)
    }

    /// Compares index `index` with its table. A global index is first
    /// given a moment to catch up when this process keeps it (its lag is
    /// reported either way).
    pub async fn check_index(&self, index: &str) -> Result<IndexCheck> {
        let t = self.index_table_of(index)?;
        let def = t.index_of.clone().expect("an index table");
        let base = self.table_inner(&def.table)?;
        if def.kind == IndexKind::Global && !self.inner.is_read_only() {
            // Best effort: a follower that cannot catch up shows as lag.
            let _ = self.wait_for_index(index, std::time::Duration::from_secs(10)).await;
        }
        let mut check = IndexCheck::default();
        // A local index compares exactly at one sequence; a flush racing
        // the two snapshots could make a difference appear, so a check
        // with differences is read again before it is believed.
        for _ in 0..3 {
            check = compare(self, &base, &t).await?;
            if check.is_exact() {
                break;
            }
        }
        check.lag_ms = self
            .list_indexes(&def.table)
            .await?
            .into_iter()
            .find(|i| i.def.name == index)
            .map_or(0, |i| i.lag_ms);
        Ok(check)
    }
}

/// One pass of the comparison.
async fn compare(db: &Database, base: &TableInner, index: &TableInner) -> Result<IndexCheck> {
    let def = index.index_of.clone().expect("an index table");
    let mut check = IndexCheck {
        index: def.name.clone(),
        table: def.table.clone(),
        ..Default::default()
    };
    let seq = AtomicU64::new(db.inner.shared.visible_seq.load(Ordering::Acquire));
    let base_snaps = base.snapshots(&seq);
    let index_snaps = index.snapshots(&seq);
    // Both sides as a reader sees them now: an index row's versions make
    // it expire with the first of its key cells (see `IndexDef::row_of`).
    let now = db.inner.now_ms();
    let options = *base.options.read();
    let mut expected: Vec<(Vec<u8>, Cells)> = Vec::new();
    for snap in &base_snaps {
        let mut scan = MergeScan::new(snap, snap.range.clone(), false, None);
        while let Some((key, state)) = scan.next().await? {
            let Some(state) = visible_state(&state, now, &options) else {
                continue;
            };
            check.table_rows += 1;
            if let Some((k, Mutation::Put { cells, .. })) = def.row_of(&key, Some(&state)) {
                let mut cells: Vec<(String, Value)> = cells.into_iter().map(|(n, _, v)| (n, v)).collect();
                cells.sort_by(|a, b| a.0.cmp(&b.0));
                expected.push((k, cells));
            }
        }
    }
    let index_options = *index.options.read();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want = expected.into_iter().peekable();
    let describe = |k: &[u8]| match index.schema.decode_pk(k) {
        Ok(pk) => pk.to_string(),
        Err(_) => crate::segment::hex_encode(k),
    };
    for snap in &index_snaps {
        let mut scan = MergeScan::new(snap, snap.range.clone(), false, None);
        while let Some((key, state)) = scan.next().await? {
            let Some(got) = visible_state(&state, now, &index_options).map(|s| row_values(&s)) else {
                continue;
            };
            check.index_rows += 1;
            while let Some((k, _)) = want.peek()
                && *k < key
            {
                check.missing += 1;
                let k = want.next().expect("peeked").0;
                check.note(format!("missing index row {}", describe(&k)));
            }
            match want.peek() {
                Some((k, cells)) if *k == key => {
                    if *cells != got {
                        check.different += 1;
                        check.note(format!(
                            "index row {} has {got:?}; its table row calls for {cells:?}",
                            describe(&key)
                        ));
                    }
                    want.next();
                }
                _ => {
                    check.extra += 1;
                    check.note(format!("index row {} has no table row", describe(&key)));
                }
            }
        }
    }
    for (k, _) in want {
        check.missing += 1;
        check.note(format!("missing index row {}", describe(&k)));
    }
    Ok(check)
}

/// A row's newest visible cells at `now` (and its row marker, when that
/// is visible) as a state; `None`: no row is visible.
fn visible_state(state: &RowState, now: i64, options: &TableOptions) -> Option<RowState> {
    let cells = visible_cells(state, now, options, &ReadOptions::default())?;
    let cutoff = options.ttl_cutoff_ms(now);
    let mut out = RowState {
        replace: true,
        row_ts: state.row_ts.filter(|ts| *ts >= cutoff),
        ..Default::default()
    };
    for (name, c) in cells {
        for cell in c.into_iter().take(1) {
            out.apply(
                0,
                &Mutation::Update {
                    actions: vec![crate::model::row::Action::Put {
                        column: name.clone(),
                        version: cell.version,
                        value: cell.value,
                    }],
                },
            );
        }
    }
    Some(out)
}

/// A visible row's columns and values, by name.
fn row_values(state: &RowState) -> Vec<(String, Value)> {
    state
        .columns
        .iter()
        .filter_map(|(n, c)| c.versions.first().map(|(_, v)| (n.clone(), v.clone())))
        .collect()
}
