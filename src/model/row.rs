//! Row mutations, the resolved state of one key, and visibility.
//!
//! Every source (a memtable or a segment) knows, per key, a [`RowState`]:
//! what its own writes did to the row. A state either **replaces** all older
//! sources (PutRow, DeleteRow) or **merges** onto them (UpdateRow), carrying
//! column tombstones (`delete_all`, deleted versions) that mask older
//! sources. Deletes and replaces act in write order, not version order: a
//! mutation applied later always wins, whatever its version numbers.
//!
//! Invariant: applying mutations one by one onto an older state gives the
//! same result as folding them into a fresh merge state and then calling
//! [`RowState::merge_over`] on the older state. The model test relies on
//! that, and flushes and reads are built on it.

use std::collections::BTreeMap;

use crate::model::filter::Filter;
use crate::model::schema::TableOptions;
use crate::model::types::{Cell, Value, ValueRef};

/// One column action of UpdateRow.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    Put { column: String, version: i64, value: Value },
    DeleteVersion { column: String, version: i64 },
    DeleteAll { column: String },
}

/// A validated single-row write, with versions already assigned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Mutation {
    /// PutRow. `row_ts` is the row marker's version, set when the row is
    /// written with its PK only (such a row exists with no columns).
    Put {
        row_ts: Option<i64>,
        cells: Vec<(String, i64, Value)>,
    },
    Update {
        actions: Vec<Action>,
    },
    Delete,
}

impl Mutation {
    /// The cells the write puts, by column name, newest version first
    /// (what a write returns with `ReturnType::AfterModify`).
    pub(crate) fn written_cells(&self) -> Vec<(String, Vec<Cell>)> {
        let mut out: BTreeMap<String, Vec<Cell>> = BTreeMap::new();
        let mut add = |name: &str, version: i64, value: &Value| {
            let cells = out.entry(name.to_string()).or_default();
            cells.retain(|c| c.version != version);
            cells.push(Cell {
                value: value.clone(),
                version,
            });
        };
        match self {
            Mutation::Put { cells, .. } => cells.iter().for_each(|(n, v, x)| add(n, *v, x)),
            Mutation::Update { actions } => {
                for a in actions {
                    if let Action::Put { column, version, value } = a {
                        add(column, *version, value);
                    }
                }
            }
            Mutation::Delete => {}
        }
        out.into_iter()
            .map(|(n, mut c)| {
                c.sort_by_key(|c| std::cmp::Reverse(c.version));
                (n, c)
            })
            .collect()
    }

    /// In-memory footprint, for memtable budgets: the value itself plus
    /// every heap block it owns, rounded up to the allocator's 16-byte
    /// granules. (Counting payload bytes only undercounted a 5-column row
    /// about 1.7x, so a 512 MiB write buffer held ~870 MB.)
    pub(crate) fn approx_bytes(&self) -> usize {
        use std::mem::size_of;
        let value_heap = |v: &Value| match v {
            Value::String(s) => heap_block(s.len()),
            Value::Binary(b) => heap_block(b.len()),
            _ => 0,
        };
        let cell = |name: &str, v: &Value| size_of::<(String, i64, Value)>() + heap_block(name.len()) + value_heap(v);
        size_of::<Mutation>()
            + match self {
                Mutation::Put { cells, .. } => cells.iter().map(|(n, _, v)| cell(n, v)).sum::<usize>(),
                Mutation::Update { actions } => actions
                    .iter()
                    .map(|a| {
                        size_of::<Action>()
                            + match a {
                                Action::Put { column, value, .. } => heap_block(column.len()) + value_heap(value),
                                Action::DeleteVersion { column, .. } | Action::DeleteAll { column } => {
                                    heap_block(column.len())
                                }
                            }
                    })
                    .sum::<usize>(),
                Mutation::Delete => 0,
            }
    }
}

/// Bytes a heap block of `n` bytes takes (16-byte size classes).
pub(crate) fn heap_block(n: usize) -> usize {
    if n == 0 { 0 } else { (n + 15) & !15 }
}

/// What one source knows about one column.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ColumnState {
    /// Versions, newest (largest version number) first, no duplicates.
    pub versions: Vec<(i64, Value)>,
    /// Masks every version of this column in older sources.
    pub delete_all: bool,
    /// Versions deleted here; they mask the same versions in older sources.
    /// Sorted ascending.
    pub deleted: Vec<i64>,
}

impl ColumnState {
    fn put(&mut self, version: i64, value: Value) {
        match self.versions.binary_search_by(|(v, _)| version.cmp(v)) {
            Ok(i) => self.versions[i].1 = value,
            Err(i) => self.versions.insert(i, (version, value)),
        }
    }

    fn remove(&mut self, version: i64) {
        if let Ok(i) = self.versions.binary_search_by(|(v, _)| version.cmp(v)) {
            self.versions.remove(i);
        }
    }

    fn add_deleted(&mut self, version: i64) {
        if let Err(i) = self.deleted.binary_search(&version) {
            self.deleted.insert(i, version);
        }
    }

    fn is_void(&self) -> bool {
        self.versions.is_empty() && !self.delete_all && self.deleted.is_empty()
    }
}

/// The resolved state of one key within one source (or several merged).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct RowState {
    /// Newest write sequence folded in.
    pub seq: u64,
    /// True: this state hides every older source (PutRow / DeleteRow).
    pub replace: bool,
    /// Row marker version of a PK-only PutRow.
    pub row_ts: Option<i64>,
    pub columns: BTreeMap<String, ColumnState>,
}

impl RowState {
    /// Applies one mutation made after everything already in this state.
    pub fn apply(&mut self, seq: u64, m: &Mutation) {
        self.seq = self.seq.max(seq);
        match m {
            Mutation::Put { row_ts, cells } => {
                self.replace = true;
                self.row_ts = *row_ts;
                self.columns.clear();
                for (name, version, value) in cells {
                    self.columns
                        .entry(name.clone())
                        .or_default()
                        .put(*version, value.clone());
                }
            }
            Mutation::Delete => {
                self.replace = true;
                self.row_ts = None;
                self.columns.clear();
            }
            Mutation::Update { actions } => {
                for a in actions {
                    match a {
                        Action::Put { column, version, value } => {
                            self.columns
                                .entry(column.clone())
                                .or_default()
                                .put(*version, value.clone());
                        }
                        Action::DeleteVersion { column, version } => {
                            let replace = self.replace;
                            let col = self.columns.entry(column.clone()).or_default();
                            col.remove(*version);
                            if !replace {
                                col.add_deleted(*version);
                            }
                            if col.is_void() {
                                self.columns.remove(column);
                            }
                        }
                        Action::DeleteAll { column } => {
                            if self.replace {
                                self.columns.remove(column);
                            } else {
                                let col = self.columns.entry(column.clone()).or_default();
                                col.versions.clear();
                                col.deleted.clear();
                                col.delete_all = true;
                            }
                        }
                    }
                }
            }
        }
    }

    /// The state of `self` (newer) laid over `older`.
    pub fn merge_over(self, older: RowState) -> RowState {
        if self.replace {
            return self;
        }
        let mut out = older;
        out.seq = out.seq.max(self.seq);
        if self.row_ts.is_some() {
            out.row_ts = self.row_ts;
        }
        let keep_tombs = !out.replace;
        for (name, newer) in self.columns {
            if newer.delete_all {
                let mut col = newer;
                if !keep_tombs {
                    col.delete_all = false;
                    col.deleted.clear();
                }
                if col.is_void() {
                    out.columns.remove(&name);
                } else {
                    out.columns.insert(name, col);
                }
                continue;
            }
            let col = out.columns.entry(name.clone()).or_default();
            for v in &newer.deleted {
                col.remove(*v);
                if keep_tombs {
                    col.add_deleted(*v);
                }
            }
            for (v, value) in newer.versions {
                col.put(v, value);
            }
            if col.is_void() {
                out.columns.remove(&name);
            }
        }
        out
    }
}

/// What a read asks for (see `docs/model.md`, "Reads").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReadOptions {
    /// Column names to return; `None` returns all.
    pub columns_to_get: Option<Vec<String>>,
    /// Newest versions per cell to return. Defaults to 1 unless a
    /// `time_range` is given, in which case every version in range is returned.
    pub max_versions: Option<u32>,
    /// Versions in `[start_ms, end_ms)` only.
    pub time_range: Option<(i64, i64)>,
    /// First column to return (inclusive), for paging through a wide row.
    pub start_column: Option<String>,
    /// Column to stop before (exclusive).
    pub end_column: Option<String>,
    /// Only rows that pass it (see [`Filter`]).
    pub filter: Option<Filter>,
}

impl ReadOptions {
    fn restricts_columns(&self) -> bool {
        self.columns_to_get.is_some()
            || self.time_range.is_some()
            || self.start_column.is_some()
            || self.end_column.is_some()
    }

    fn wants(&self, name: &str) -> bool {
        self.columns_to_get.as_ref().is_none_or(|c| c.iter().any(|n| n == name))
            && self.start_column.as_deref().is_none_or(|s| name >= s)
            && self.end_column.as_deref().is_none_or(|e| name < e)
    }
}

/// The cells a read returns for one key, or `None` when the row is not
/// returned. Applied in this order: TTL and the table's `max_versions` (what
/// exists), then the request's columns, time range and version limit.
///
/// A row that exists but has no cell left after the request's restrictions
/// is returned (with its PK only) only when the request has none.
pub(crate) fn visible_cells(
    state: &RowState,
    now_ms: i64,
    opts: &TableOptions,
    read: &ReadOptions,
) -> Option<Vec<(String, Vec<Cell>)>> {
    visible_cells_counted(state, now_ms, opts, read, &mut 0)
}

/// [`visible_cells`], adding to `scanned` the row data (attribute names
/// and values) of the cells the read looked at before its filter: what a
/// read is charged for, whether the filter passes the row or not.
pub(crate) fn visible_cells_counted(
    state: &RowState,
    now_ms: i64,
    opts: &TableOptions,
    read: &ReadOptions,
    scanned: &mut usize,
) -> Option<Vec<(String, Vec<Cell>)>> {
    let passes = filter_passes(state, now_ms, opts, read);
    let columns = state.columns.iter().map(|(name, col)| {
        let versions = col.versions.iter().map(|(v, value)| (*v, value.clone()));
        (name.clone(), versions)
    });
    restrict(state.row_ts, columns, passes, now_ms, opts, read, scanned)
}

/// [`visible_cells_counted`] of a state the caller no longer needs: its
/// names and values move into the result instead of being copied (a read
/// of 20 rows of 23 columns copied ~1,000 strings and values).
pub(crate) fn visible_cells_owned(
    state: RowState,
    now_ms: i64,
    opts: &TableOptions,
    read: &ReadOptions,
    scanned: &mut usize,
) -> Option<Vec<(String, Vec<Cell>)>> {
    let passes = filter_passes(&state, now_ms, opts, read);
    let columns = state
        .columns
        .into_iter()
        .map(|(name, col)| (name, col.versions.into_iter()));
    restrict(state.row_ts, columns, passes, now_ms, opts, read, scanned)
}

/// Whether the read's filter (if any) passes the row, judged on the
/// versions the read would return of the columns it names.
fn filter_passes(state: &RowState, now_ms: i64, opts: &TableOptions, read: &ReadOptions) -> bool {
    let Some(f) = &read.filter else {
        return true;
    };
    let cutoff = opts.ttl_cutoff_ms(now_ms);
    let limit = version_limit(read);
    let versions = |name: &str| -> Vec<&Value> {
        let Some(col) = state.columns.get(name) else {
            return Vec::new();
        };
        col.versions
            .iter()
            .take(opts.max_versions as usize)
            .take_while(|(v, _)| *v >= cutoff)
            .filter(|(v, _)| read.time_range.is_none_or(|(s, e)| *v >= s && *v < e))
            .take(limit)
            .map(|(_, value)| value)
            .collect()
    };
    f.passes(&versions)
}

/// The most versions of a cell a read returns.
fn version_limit(read: &ReadOptions) -> usize {
    match (read.max_versions, read.time_range) {
        (Some(n), _) => n as usize,
        (None, Some(_)) => usize::MAX,
        (None, None) => 1,
    }
}

/// The cells of `columns` (name, versions newest first) a read returns;
/// `passes`: the filter's verdict on the row.
fn restrict<V: Iterator<Item = (i64, Value)>>(
    row_ts: Option<i64>,
    columns: impl Iterator<Item = (String, V)>,
    passes: bool,
    now_ms: i64,
    opts: &TableOptions,
    read: &ReadOptions,
    scanned: &mut usize,
) -> Option<Vec<(String, Vec<Cell>)>> {
    let cutoff = opts.ttl_cutoff_ms(now_ms);
    let mut exists = row_ts.is_some_and(|ts| ts >= cutoff);
    let limit = version_limit(read);
    let mut out = Vec::new();
    for (name, versions) in columns {
        let live = versions
            .take(opts.max_versions as usize)
            .take_while(|(v, _)| *v >= cutoff);
        let mut cells = Vec::new();
        let wanted = read.wants(&name);
        for (v, value) in live {
            exists = true;
            if !wanted {
                break;
            }
            if read.time_range.is_some_and(|(s, e)| v < s || v >= e) {
                continue;
            }
            if cells.len() >= limit {
                break;
            }
            cells.push(Cell { value, version: v });
        }
        if !cells.is_empty() {
            out.push((name, cells));
        }
    }
    if !exists {
        return None;
    }
    *scanned += crate::model::capacity::cells_bytes(&out);
    if let Some(f) = &read.filter {
        if !passes {
            return None;
        }
        if let Some((offset, page)) = f.page() {
            out = out.into_iter().skip(offset).take(page).collect();
        }
    }
    if out.is_empty() && read.restricts_columns() {
        return None;
    }
    Some(out)
}

/// The cells of one PutRow as a flush or an overlay build reads them,
/// whatever form their source keeps them in.
pub(crate) trait PutCells<'a>: Copy {
    /// Whether the cells name each column once, in ascending order.
    fn sorted(self) -> bool;
    /// (column, version, value) in the order written (by column name).
    fn iter(self) -> impl Iterator<Item = (&'a str, i64, ValueRef<'a>)>;
}

/// A PutRow's own cells.
impl<'a> PutCells<'a> for &'a [(String, i64, Value)] {
    fn sorted(self) -> bool {
        self.windows(2).all(|w| w[0].0 < w[1].0)
    }

    fn iter(self) -> impl Iterator<Item = (&'a str, i64, ValueRef<'a>)> {
        <[_]>::iter(self).map(|(n, v, x)| (n.as_str(), *v, ValueRef::from(x)))
    }
}

/// What a segment receives for one key of a memtable.
pub(crate) enum KeyWrites<'a, C> {
    /// The key's newest write, a PutRow (cells as written).
    Put { seq: u64, row_ts: Option<i64>, cells: C },
    /// Every write of the key, folded.
    Folded(&'a RowState),
}

impl<'a, C: PutCells<'a>> KeyWrites<'a, C> {
    /// The writes folded into an owned state.
    pub fn to_state(&self) -> RowState {
        match self {
            KeyWrites::Put { seq, row_ts, cells } => {
                let mut st = RowState::default();
                st.apply(
                    *seq,
                    &Mutation::Put {
                        row_ts: *row_ts,
                        cells: cells.iter().map(|(n, v, x)| (n.to_string(), v, x.to_value())).collect(),
                    },
                );
                st
            }
            KeyWrites::Folded(st) => (*st).clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(col: &str, v: i64, x: i64) -> Action {
        Action::Put {
            column: col.into(),
            version: v,
            value: Value::Integer(x),
        }
    }

    fn upd(actions: Vec<Action>) -> Mutation {
        Mutation::Update { actions }
    }

    fn fold(ms: &[Mutation]) -> RowState {
        let mut s = RowState::default();
        for (i, m) in ms.iter().enumerate() {
            s.apply(i as u64 + 1, m);
        }
        s
    }

    #[test]
    fn write_order_beats_version_order() {
        // delete all, then write an older version: the older write is visible.
        let s = fold(&[
            upd(vec![put("a", 100, 1)]),
            upd(vec![Action::DeleteAll { column: "a".into() }]),
            upd(vec![put("a", 50, 2)]),
        ]);
        let cells = visible_cells(&s, 0, &TableOptions::default(), &ReadOptions::default()).unwrap();
        assert_eq!(cells[0].1[0].version, 50);
        // delete row then update with an old version
        let s = fold(&[upd(vec![put("a", 100, 1)]), Mutation::Delete, upd(vec![put("b", 1, 3)])]);
        let cells = visible_cells(&s, 0, &TableOptions::default(), &ReadOptions::default()).unwrap();
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].0, "b");
    }

    #[test]
    fn split_fold_equals_sequential_fold() {
        let ms = vec![
            upd(vec![put("a", 1, 1), put("a", 2, 2), put("b", 5, 5)]),
            upd(vec![Action::DeleteVersion {
                column: "a".into(),
                version: 2,
            }]),
            upd(vec![Action::DeleteAll { column: "b".into() }, put("c", 7, 7)]),
            upd(vec![put("b", 3, 3)]),
            Mutation::Put {
                row_ts: None,
                cells: vec![("z".into(), 9, Value::Boolean(true))],
            },
            upd(vec![
                put("a", 4, 4),
                Action::DeleteVersion {
                    column: "z".into(),
                    version: 9,
                },
            ]),
        ];
        for split in 0..=ms.len() {
            let mut older = RowState::default();
            for (i, m) in ms[..split].iter().enumerate() {
                older.apply(i as u64 + 1, m);
            }
            let mut newer = RowState::default();
            for (i, m) in ms[split..].iter().enumerate() {
                newer.apply((split + i) as u64 + 1, m);
            }
            let merged = newer.merge_over(older);
            let direct = fold(&ms);
            let o = TableOptions {
                max_versions: 10,
                ..Default::default()
            };
            let r = ReadOptions {
                max_versions: Some(10),
                ..Default::default()
            };
            assert_eq!(
                visible_cells(&merged, 0, &o, &r),
                visible_cells(&direct, 0, &o, &r),
                "split {split}"
            );
        }
    }

    #[test]
    fn ttl_and_max_versions_hide_without_removing() {
        let s = fold(&[upd(vec![put("a", 1000, 1), put("a", 2000, 2), put("a", 3000, 3)])]);
        let one = TableOptions::default();
        let all = ReadOptions {
            max_versions: Some(10),
            ..Default::default()
        };
        assert_eq!(visible_cells(&s, 0, &one, &all).unwrap()[0].1.len(), 1);
        let three = TableOptions { max_versions: 3, ..one };
        assert_eq!(visible_cells(&s, 0, &three, &all).unwrap()[0].1.len(), 3);
        // ttl 1 s at now = 3500 ms: versions < 2500 are expired
        let ttl = TableOptions { ttl_secs: 1, ..three };
        assert_eq!(visible_cells(&s, 3500, &ttl, &all).unwrap()[0].1.len(), 1);
        assert!(visible_cells(&s, 10_000, &ttl, &all).is_none());
        // the newest version beyond max_versions=1 is 3000: expired at 4500
        let ttl1 = TableOptions { ttl_secs: 1, ..one };
        assert!(visible_cells(&s, 4500, &ttl1, &all).is_none());
    }

    #[test]
    fn pk_only_row_and_column_restrictions() {
        let s = fold(&[Mutation::Put {
            row_ts: Some(5000),
            cells: vec![],
        }]);
        let o = TableOptions::default();
        assert_eq!(visible_cells(&s, 0, &o, &ReadOptions::default()), Some(vec![]));
        let cols = ReadOptions {
            columns_to_get: Some(vec!["x".into()]),
            ..Default::default()
        };
        assert_eq!(visible_cells(&s, 0, &o, &cols), None);
        let ttl = TableOptions { ttl_secs: 1, ..o };
        assert_eq!(visible_cells(&s, 7000, &ttl, &ReadOptions::default()), None);
    }

    #[test]
    fn time_range_and_column_paging() {
        let s = fold(&[upd(vec![
            put("a", 10, 1),
            put("a", 20, 2),
            put("b", 15, 3),
            put("c", 30, 4),
        ])]);
        let o = TableOptions {
            max_versions: 5,
            ..Default::default()
        };
        let r = ReadOptions {
            time_range: Some((10, 20)),
            ..Default::default()
        };
        let cells = visible_cells(&s, 0, &o, &r).unwrap();
        assert_eq!(
            cells.iter().map(|(n, c)| (n.as_str(), c.len())).collect::<Vec<_>>(),
            vec![("a", 1), ("b", 1)]
        );
        let r = ReadOptions {
            start_column: Some("b".into()),
            end_column: Some("c".into()),
            ..Default::default()
        };
        let cells = visible_cells(&s, 0, &o, &r).unwrap();
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].0, "b");
    }
}
