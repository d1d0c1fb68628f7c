//! Secondary index definitions, their rules, and the index row a base row
//! gives.
//!
//! An index is a table of its own whose primary key is the index columns
//! followed by every base key column not among them, in base order; its
//! attributes are the included (predefined) columns. [`IndexDef::row_of`]
//! is the one definition of which index row a base row has, used by the
//! committer (local indexes), the global index worker, the backfill and
//! `cellar check` alike.
//!
//! Invariants: a definition that passes [`IndexDef::new`] satisfies every
//! rule of Tablestore's CreateIndex (1-4 index columns that are key or
//! predefined columns of a key type, 0-32 included predefined columns, at
//! most 8 key columns, a local index starts with the partition key); and
//! `row_of` depends only on the row's newest values, so any two paths that
//! see the same row derive the same index row.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::key;
use crate::model::row::{Mutation, RowState};
use crate::model::schema::{MAX_PK_VALUE_BYTES, PkColumn, TableOptions, TableSchema, validate_name};
use crate::model::types::{PkType, Value, ValueType};

/// Most indexes on one table.
pub const MAX_INDEXES_PER_TABLE: usize = 5;
/// Most index columns (the columns an index is keyed by, before the base
/// key columns it adds).
pub const MAX_INDEX_COLUMNS: usize = 4;
/// Most included (attribute) columns of an index.
pub const MAX_INCLUDED_COLUMNS: usize = 32;
/// Most primary-key columns of an index, the base key columns included.
pub const MAX_INDEX_KEY_COLUMNS: usize = 8;

/// How an index is kept up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexKind {
    /// Updated in the same WAL record as its row: readers never see one
    /// without the other. Its first column is the base partition key.
    Local,
    /// Follows the table's change stream, a little behind; any first
    /// column.
    Global,
}

impl IndexKind {
    /// `local` or `global`.
    pub fn as_str(self) -> &'static str {
        match self {
            IndexKind::Local => "local",
            IndexKind::Global => "global",
        }
    }
}

/// A CreateIndex request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSpec {
    /// The index's name (unique among the database's tables and indexes).
    pub name: String,
    /// The index columns, 1-4: key or predefined columns of the table.
    pub columns: Vec<String>,
    /// Predefined columns copied into the index, 0-32.
    pub include: Vec<String>,
    /// Local (synchronous) or global (follows the stream).
    pub kind: IndexKind,
    /// Index the rows the table already holds (else only later writes).
    pub include_base_data: bool,
}

impl IndexSpec {
    /// A local index of `columns` that indexes existing rows too.
    pub fn new(name: impl Into<String>, columns: &[&str]) -> Self {
        IndexSpec {
            name: name.into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            include: Vec::new(),
            kind: IndexKind::Local,
            include_base_data: true,
        }
    }
}

/// Where one index key column's value comes from in a base row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeySource {
    /// The base key's column at this position.
    Pk(usize),
    /// A predefined attribute column.
    Column(String),
}

/// A validated index: what the catalog keeps, with how to build its rows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexDef {
    /// The index's name.
    pub name: String,
    /// The table it indexes.
    pub table: String,
    /// Local or global.
    pub kind: IndexKind,
    /// The index columns, as given.
    pub columns: Vec<String>,
    /// The included columns.
    pub include: Vec<String>,
    /// Each index key column's source (index key order).
    #[serde(skip)]
    sources: Vec<KeySource>,
    /// The base key's column types (to cut a base key into its columns).
    #[serde(skip)]
    base_types: Vec<PkType>,
}

impl IndexDef {
    /// Checks `spec` against the table (`base`: its schema with its
    /// predefined columns) and the indexes it has; the error names the
    /// rule broken and what is accepted.
    pub(crate) fn new(
        spec: &IndexSpec,
        base: &TableSchema,
        options: &TableOptions,
        existing: &[IndexDef],
    ) -> Result<IndexDef> {
        validate_name("index", &spec.name)?;
        let t = &base.name;
        if existing.len() >= MAX_INDEXES_PER_TABLE {
            return Err(Error::param(format!(
                "Number of index per table exceeds the quota:{MAX_INDEXES_PER_TABLE}. \
                 (table '{t}' already has {MAX_INDEXES_PER_TABLE} indexes; drop one first)"
            )));
        }
        check_index_options(t, options)?;
        if spec.columns.is_empty() || spec.columns.len() > MAX_INDEX_COLUMNS {
            return Err(Error::param(format!(
                "The number of primary key columns must be in range: [1, {MAX_INDEX_COLUMNS}] in index. \
                 (index '{}' has {} index columns)",
                spec.name,
                spec.columns.len()
            )));
        }
        if spec.include.len() > MAX_INCLUDED_COLUMNS {
            return Err(Error::param(format!(
                "The number of attribute columns must be in range: [0, {MAX_INCLUDED_COLUMNS}] in index. \
                 (index '{}' includes {} columns)",
                spec.name,
                spec.include.len()
            )));
        }
        let defined = |c: &str| base.columns.iter().find(|d| d.name == c);
        let known = || {
            let mut all: Vec<&str> = base.primary_key.iter().map(|c| c.name.as_str()).collect();
            all.extend(base.columns.iter().map(|c| c.name.as_str()));
            all.join(", ")
        };
        for (i, c) in spec.columns.iter().enumerate() {
            if spec.columns[..i].contains(c) {
                return Err(Error::param(format!("index column '{c}' is listed twice")));
            }
            if base.is_pk_column(c) {
                continue;
            }
            match defined(c) {
                None => {
                    return Err(Error::param(format!(
                        "column '{c}' is neither a primary-key nor a predefined column of table '{t}'; \
                         only those can be indexed (they are: {}); declare it first (ALTER TABLE {t} ADD COLUMN {c} TYPE)",
                        known()
                    )));
                }
                Some(d) if pk_type_of(d.value_type).is_none() => {
                    return Err(Error::param(format!(
                        "column '{c}' is {}; index columns must be INTEGER, STRING or BINARY",
                        d.value_type.as_str().to_uppercase()
                    )));
                }
                Some(_) => {}
            }
        }
        for (i, c) in spec.include.iter().enumerate() {
            if spec.include[..i].contains(c) {
                return Err(Error::param(format!("included column '{c}' is listed twice")));
            }
            if spec.columns.contains(c) || base.is_pk_column(c) {
                return Err(Error::param(format!(
                    "included column '{c}' is already in the index's primary key; include only other predefined columns"
                )));
            }
            if defined(c).is_none() {
                return Err(Error::param(format!(
                    "included column '{c}' is not a predefined column of table '{t}'; its predefined columns: {}",
                    if base.columns.is_empty() {
                        "none".to_string()
                    } else {
                        base.columns
                            .iter()
                            .map(|c| c.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                )));
            }
        }
        if spec.kind == IndexKind::Local && spec.columns[0] != base.primary_key[0].name {
            return Err(Error::param(format!(
                "the first column of local index '{}' must be the partition key '{}' of table '{t}', got '{}'; \
                 a global index may start with any column",
                spec.name, base.primary_key[0].name, spec.columns[0]
            )));
        }
        let mut def = IndexDef {
            name: spec.name.clone(),
            table: base.name.clone(),
            kind: spec.kind,
            columns: spec.columns.clone(),
            include: spec.include.clone(),
            sources: Vec::new(),
            base_types: Vec::new(),
        };
        def.bind(base)?;
        if def.sources.len() > MAX_INDEX_KEY_COLUMNS {
            return Err(Error::param(format!(
                "index '{}' would have {} primary-key columns (its columns, then the table's key columns not among them); \
                 at most {MAX_INDEX_KEY_COLUMNS} are accepted",
                spec.name,
                def.sources.len()
            )));
        }
        Ok(def)
    }

    /// Resolves the columns against the base schema (after a load: the
    /// catalog keeps names only).
    pub(crate) fn bind(&mut self, base: &TableSchema) -> Result<()> {
        let mut sources = Vec::new();
        for c in &self.columns {
            match base.primary_key.iter().position(|p| &p.name == c) {
                Some(i) => sources.push(KeySource::Pk(i)),
                None => sources.push(KeySource::Column(c.clone())),
            }
        }
        for i in 0..base.primary_key.len() {
            if !sources.contains(&KeySource::Pk(i)) {
                sources.push(KeySource::Pk(i));
            }
        }
        self.sources = sources;
        self.base_types = base.pk_types();
        Ok(())
    }

    /// The index table's schema: its key columns with their types, its
    /// included columns as predefined ones.
    pub(crate) fn schema(&self, base: &TableSchema) -> Result<TableSchema> {
        let mut s = TableSchema::new(self.name.clone());
        for src in &self.sources {
            let (name, ty) = match src {
                KeySource::Pk(i) => (base.primary_key[*i].name.clone(), base.primary_key[*i].pk_type),
                KeySource::Column(c) => {
                    let d = base.columns.iter().find(|d| &d.name == c);
                    let ty = d.and_then(|d| pk_type_of(d.value_type));
                    (
                        c.clone(),
                        ty.ok_or_else(|| Error::param(format!("column '{c}' cannot be an index key")))?,
                    )
                }
            };
            s.primary_key.push(PkColumn {
                name,
                pk_type: ty,
                auto_increment: false,
            });
        }
        for c in &self.include {
            if let Some(d) = base.columns.iter().find(|d| &d.name == c) {
                s.columns.push(d.clone());
            }
        }
        Ok(s)
    }

    /// Whether the index reads attribute column `c` (as a key or included).
    pub fn uses_column(&self, c: &str) -> bool {
        self.columns.iter().any(|x| x == c) || self.include.iter().any(|x| x == c)
    }

    /// The index row of a base row (`None`: the row is not indexed, being
    /// absent or missing an index column): its key and its PutRow. Its
    /// row marker is the oldest version among the index's attribute key
    /// columns (the whole row's newest version when it has none), and no
    /// included cell is newer than it, so that under a TTL an index row
    /// expires with the first of its key cells, as its base row stops
    /// being indexable then.
    pub(crate) fn row_of(&self, base_key: &[u8], state: Option<&impl RowView>) -> Option<(Vec<u8>, Mutation)> {
        let state = state?;
        if !state.exists() {
            return None;
        }
        let (key, marker) = self.key_with(base_key, |c| state.newest(c))?;
        let marker = marker.unwrap_or_else(|| state.newest_version().unwrap_or(0));
        let included = self
            .include
            .iter()
            .filter_map(|c| {
                state
                    .newest(c)
                    .map(|(v, value)| (c.clone(), v.min(marker), value.clone()))
            })
            .collect();
        Some((
            key,
            Mutation::Put {
                row_ts: Some(marker),
                cells: included,
            },
        ))
    }

    /// The index key of a base row whose index columns have the values
    /// (and versions) `value` gives, and the oldest of those versions
    /// (`None`: the key has no attribute column). `None`: a value is
    /// missing or no key can hold it.
    pub(crate) fn key_with<'a>(
        &self,
        base_key: &[u8],
        value: impl Fn(&str) -> Option<(i64, &'a Value)>,
    ) -> Option<(Vec<u8>, Option<i64>)> {
        let parts = key_parts(base_key, &self.base_types)?;
        let mut key = Vec::with_capacity(base_key.len() + 16);
        let mut marker: Option<i64> = None;
        for src in &self.sources {
            match src {
                KeySource::Pk(i) => key.extend_from_slice(parts.get(*i)?),
                KeySource::Column(c) => {
                    let (version, value) = value(c)?;
                    // Encoded as `key::encode_value` encodes a key value,
                    // from the borrowed value.
                    match value {
                        Value::Integer(i) => key.extend_from_slice(&key::encode_integer(*i)),
                        Value::String(s) if s.len() <= MAX_PK_VALUE_BYTES => key::encode_bytes(&mut key, s.as_bytes()),
                        Value::Binary(b) if b.len() <= MAX_PK_VALUE_BYTES => key::encode_bytes(&mut key, b),
                        // A value written before the column was declared,
                        // of a type no key can hold: not indexable.
                        _ => return None,
                    }
                    marker = Some(marker.map_or(version, |m| m.min(version)));
                }
            }
        }
        Some((key, marker))
    }

    /// The attribute columns the index is keyed by (what a global index
    /// needs each write's stream record to carry the old values of).
    pub(crate) fn key_attribute_columns(&self) -> impl Iterator<Item = &str> {
        self.sources.iter().filter_map(|s| match s {
            KeySource::Column(c) => Some(c.as_str()),
            KeySource::Pk(_) => None,
        })
    }

    /// The index writes a base write makes: the old index row goes (when
    /// the row had one under another key), the new one comes (unless it is
    /// the old one unchanged).
    pub(crate) fn writes_for(
        &self,
        base_key: &[u8],
        before: Option<&impl RowView>,
        after: Option<&impl RowView>,
    ) -> Vec<(Vec<u8>, Mutation)> {
        let old = self.row_of(base_key, before);
        let new = self.row_of(base_key, after);
        let mut out = Vec::with_capacity(2);
        match (old, new) {
            (Some(o), Some(n)) if o == n => {}
            (Some((ok, _)), Some((nk, nm))) => {
                if ok != nk {
                    out.push((ok, Mutation::Delete));
                }
                out.push((nk, nm));
            }
            (Some((ok, _)), None) => out.push((ok, Mutation::Delete)),
            (None, Some(n)) => out.push(n),
            (None, None) => {}
        }
        out
    }

    /// Refuses a value an index key cannot hold (a STRING or BINARY longer
    /// than a key value may be) for one of this index's attribute columns.
    pub(crate) fn check_value(&self, column: &str, value: &Value) -> Result<()> {
        // The length first: it is a field read, the column a string
        // comparison per index column, and almost every value is short.
        let len = match value {
            Value::String(s) => s.len(),
            Value::Binary(b) => b.len(),
            _ => 0,
        };
        if len > MAX_PK_VALUE_BYTES && self.columns.iter().any(|c| c == column) {
            return Err(Error::param(format!(
                "column '{column}' is {len} bytes; as a key column of index '{}' it may be at most {MAX_PK_VALUE_BYTES} bytes",
                self.name
            )));
        }
        Ok(())
    }
}

/// What an index row is derived from: a row as a table with indexes
/// keeps it (one version per cell, no TTL to apply: an index row expires
/// with its own TTL). Read straight from the row, nothing copied: the
/// committer derives each write's index rows, old and new, in its loop.
pub(crate) trait RowView {
    /// Whether the row exists (a cell, or a row marker).
    fn exists(&self) -> bool;
    /// The newest version of column `c` and its value.
    fn newest(&self, c: &str) -> Option<(i64, &Value)>;
    /// The newest version among the cells and the row marker.
    fn newest_version(&self) -> Option<i64>;
}

impl RowView for RowState {
    fn exists(&self) -> bool {
        self.row_ts.is_some() || self.columns.values().any(|c| !c.versions.is_empty())
    }

    fn newest(&self, c: &str) -> Option<(i64, &Value)> {
        self.columns.get(c)?.versions.first().map(|(v, value)| (*v, value))
    }

    fn newest_version(&self) -> Option<i64> {
        let cells = self
            .columns
            .values()
            .filter_map(|c| c.versions.first().map(|(v, _)| *v));
        cells.max().max(self.row_ts)
    }
}

/// The row a PutRow leaves (it replaces the whole row): its marker and
/// cells, as the mutation holds them (a column may come with several
/// versions; at one version the later cell wins, as in `RowState::apply`).
pub(crate) struct PutView<'a> {
    pub row_ts: Option<i64>,
    pub cells: &'a [(String, i64, Value)],
}

impl RowView for PutView<'_> {
    fn exists(&self) -> bool {
        self.row_ts.is_some() || !self.cells.is_empty()
    }

    fn newest(&self, c: &str) -> Option<(i64, &Value)> {
        let mut best: Option<(i64, &Value)> = None;
        for (name, v, value) in self.cells {
            if name == c && best.is_none_or(|(b, _)| *v >= b) {
                best = Some((*v, value));
            }
        }
        best
    }

    fn newest_version(&self) -> Option<i64> {
        self.cells.iter().map(|(_, v, _)| *v).max().max(self.row_ts)
    }
}

/// The rules a table with indexes keeps: one version, and no TTL unless
/// rows are never updated (an UpdateRow could leave an index row behind
/// a cell that expired).
pub(crate) fn check_index_options(table: &str, o: &TableOptions) -> Result<()> {
    if o.max_versions != 1 {
        return Err(Error::param(format!(
            "table '{table}' keeps {} versions; a table with indexes must keep 1 (max_versions = 1)",
            o.max_versions
        )));
    }
    if o.ttl_secs != -1 && o.allow_update {
        return Err(Error::param(format!(
            "table '{table}' has a TTL of {} s and allows UpdateRow; a table with indexes needs ttl = -1, \
             or allow_update = false",
            o.ttl_secs
        )));
    }
    Ok(())
}

/// The key type a predefined column of `t` gives an index key.
fn pk_type_of(t: ValueType) -> Option<PkType> {
    match t {
        ValueType::Integer => Some(PkType::Integer),
        ValueType::String => Some(PkType::String),
        ValueType::Binary => Some(PkType::Binary),
        ValueType::Double | ValueType::Boolean => None,
    }
}

/// A full key cut into its columns' encodings.
fn key_parts<'a>(key: &'a [u8], types: &[PkType]) -> Option<[&'a [u8]; MAX_KEY_COLUMNS]> {
    // A table has at most four key columns (`TableSchema::validate`).
    let mut out: [&[u8]; MAX_KEY_COLUMNS] = [&[]; MAX_KEY_COLUMNS];
    let mut rest = key;
    for (slot, ty) in out.iter_mut().zip(types) {
        let n = key::encoded_len(rest, *ty)?;
        *slot = &rest[..n];
        rest = &rest[n..];
    }
    (rest.is_empty() && types.len() <= MAX_KEY_COLUMNS).then_some(out)
}

/// The most key columns a table has.
const MAX_KEY_COLUMNS: usize = 4;

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::row::{ReadOptions, visible_cells};

    /// `row_of` as it was first written: through the cells a read returns.
    fn reference_row_of(def: &IndexDef, base_key: &[u8], state: &RowState) -> Option<(Vec<u8>, Mutation)> {
        let cells = visible_cells(state, i64::MAX, &TableOptions::default(), &ReadOptions::default())?;
        let newest = |c: &str| -> Option<(i64, &Value)> {
            let i = cells.binary_search_by(|(n, _)| n.as_str().cmp(c)).ok()?;
            cells[i].1.first().map(|cell| (cell.version, &cell.value))
        };
        let (key, marker) = def.key_with(base_key, newest)?;
        let marker = marker.unwrap_or_else(|| {
            let newest_cell = cells.iter().filter_map(|(_, c)| c.first().map(|c| c.version)).max();
            newest_cell.max(state.row_ts).unwrap_or(0)
        });
        let included = def
            .include
            .iter()
            .filter_map(|c| newest(c).map(|(v, value)| (c.clone(), v.min(marker), value.clone())))
            .collect();
        Some((
            key,
            Mutation::Put {
                row_ts: Some(marker),
                cells: included,
            },
        ))
    }

    fn defs() -> Vec<IndexDef> {
        let schema = TableSchema::new("t")
            .pk("k", PkType::Integer)
            .column("a", ValueType::Integer)
            .column("b", ValueType::String)
            .column("c", ValueType::Integer);
        let spec = |name: &str, columns: &[&str], include: &[&str]| IndexSpec {
            name: name.into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            include: include.iter().map(|c| c.to_string()).collect(),
            kind: IndexKind::Global,
            include_base_data: false,
        };
        let opts = TableOptions::default();
        vec![
            IndexDef::new(&spec("i1", &["a"], &["b", "c"]), &schema, &opts, &[]).unwrap(),
            IndexDef::new(&spec("i2", &["b", "a"], &[]), &schema, &opts, &[]).unwrap(),
            // Keyed by the table key alone: its marker is the row's newest version.
            IndexDef::new(&spec("i3", &["k"], &["c"]), &schema, &opts, &[]).unwrap(),
        ]
    }

    fn cell() -> impl Strategy<Value = (String, i64, Value)> {
        let value = prop_oneof![
            (-3i64..3).prop_map(Value::Integer),
            "[xy]{0,2}".prop_map(Value::String),
            Just(Value::Boolean(true)),
        ];
        (prop_oneof![Just("a"), Just("b"), Just("c"), Just("d")], 1i64..4, value)
            .prop_map(|(n, v, value)| (n.to_string(), v, value))
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        use crate::model::row::Action;
        let put = (proptest::option::of(1i64..5), proptest::collection::vec(cell(), 0..6))
            .prop_map(|(row_ts, cells)| Mutation::Put { row_ts, cells });
        let action = prop_oneof![
            cell().prop_map(|(column, version, value)| Action::Put { column, version, value }),
            (prop_oneof![Just("a"), Just("b")], 1i64..4).prop_map(|(c, version)| Action::DeleteVersion {
                column: c.to_string(),
                version
            }),
            prop_oneof![Just("a"), Just("c")].prop_map(|c| Action::DeleteAll { column: c.to_string() }),
        ];
        let update = proptest::collection::vec(action, 1..4).prop_map(|actions| Mutation::Update { actions });
        prop_oneof![put, update, Just(Mutation::Delete)]
    }

    proptest! {
        /// The index row read from a row in place equals the one derived
        /// through a read's cells, and a PutRow read as it stands equals
        /// the row it leaves: after any history of writes.
        #[test]
        fn index_rows_read_in_place_equal_the_reads(history in proptest::collection::vec(mutation(), 1..6)) {
            let key = key::encode_integer(7).to_vec();
            let mut state: Option<RowState> = None;
            for (seq, m) in history.iter().enumerate() {
                for def in defs() {
                    if let Mutation::Put { row_ts, cells } = m {
                        let mut after = state.clone().unwrap_or_default();
                        after.apply(seq as u64 + 1, m);
                        let view = PutView { row_ts: *row_ts, cells };
                        prop_assert_eq!(def.row_of(&key, Some(&view)), def.row_of(&key, Some(&after)));
                    }
                }
                state.get_or_insert_with(RowState::default).apply(seq as u64 + 1, m);
                let st = state.as_ref().unwrap();
                for def in defs() {
                    prop_assert_eq!(def.row_of(&key, Some(st)), reference_row_of(&def, &key, st));
                }
            }
        }
    }
}
