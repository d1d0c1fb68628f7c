//! Table schemas and options, and the validation of names, keys and bounds
//! against them.
//!
//! Invariant: a schema or option set that passes `validate` is one a table
//! can have; every limit here is enforced at the edge, before a write
//! reaches the WAL.

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::model::key::{self, KeyRange};
use crate::model::types::{PkBound, PkBoundValue, PkType, PkValue, PrimaryKey, ValueType};

/// Longest STRING / BINARY primary-key value, in bytes.
pub const MAX_PK_VALUE_BYTES: usize = 1024;
/// Longest STRING / BINARY attribute value, in bytes.
pub const MAX_VALUE_BYTES: usize = 2 * 1024 * 1024;
/// Most columns written by one row write.
pub const MAX_COLUMNS_PER_WRITE: usize = 1024;
/// Largest row write, in bytes of row data.
pub const MAX_ROW_WRITE_BYTES: usize = 4 * 1024 * 1024;
/// Most rows in one BatchWriteRow.
pub const MAX_BATCH_WRITE_ROWS: usize = 200;
/// Most rows in one BatchGetRow.
pub const MAX_BATCH_GET_ROWS: usize = 100;
/// Most names in `columns_to_get`.
pub const MAX_COLUMNS_TO_GET: usize = 128;

/// One primary-key column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PkColumn {
    /// The column's name.
    pub name: String,
    /// The column's type.
    #[serde(rename = "type")]
    pub pk_type: PkType,
    /// The engine assigns this column's values (an INTEGER column other
    /// than the partition key; at most one per table): writers pass
    /// [`PkValue::AutoIncrement`], and each new value is unique and larger
    /// than every value assigned before it in the database, so strictly
    /// increasing within a partition key value, across restarts too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auto_increment: bool,
}

/// Table options (see `docs/model.md`); all can be changed later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableOptions {
    /// Time to live in seconds, `-1` = never expire. Defaults to -1.
    pub ttl_secs: i64,
    /// Versions kept per cell, >= 1. Defaults to 1.
    pub max_versions: u32,
    /// How far a written version may be from now, in seconds (> 0).
    /// Defaults to 86400.
    pub max_version_offset_secs: i64,
    /// When false, UpdateRow is refused. Defaults to true.
    pub allow_update: bool,
    /// A range partition whose segments pass this many bytes is split in
    /// two at a partition-key value, and two neighbours that together
    /// hold less than a quarter of it are merged; 0 (the default): the
    /// table is partitioned only by hand.
    #[serde(default)]
    pub partition_split_bytes: u64,
}

/// The smallest `partition_split_bytes` accepted (other than 0).
pub const MIN_PARTITION_SPLIT_BYTES: u64 = 64 * 1024;

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            ttl_secs: -1,
            max_versions: 1,
            max_version_offset_secs: 86400,
            allow_update: true,
            partition_split_bytes: 0,
        }
    }
}

impl TableOptions {
    /// Checks every option is in range; the error names the option and what is accepted.
    pub fn validate(&self) -> Result<()> {
        if self.ttl_secs != -1 && self.ttl_secs <= 0 {
            return Err(Error::param(format!(
                "ttl must be -1 (never expire) or a positive number of seconds, got {}",
                self.ttl_secs
            )));
        }
        if self.max_versions < 1 {
            return Err(Error::param("max_versions must be at least 1, got 0"));
        }
        if self.partition_split_bytes != 0 && self.partition_split_bytes < MIN_PARTITION_SPLIT_BYTES {
            return Err(Error::param(format!(
                "partition_split_bytes must be 0 (split by hand only) or at least {MIN_PARTITION_SPLIT_BYTES}, got {}",
                self.partition_split_bytes
            )));
        }
        if self.max_version_offset_secs <= 0 {
            return Err(Error::param(format!(
                "max_version_offset must be a positive number of seconds, got {}",
                self.max_version_offset_secs
            )));
        }
        Ok(())
    }

    /// The oldest version (ms) still visible at `now_ms`, or `i64::MIN`.
    pub(crate) fn ttl_cutoff_ms(&self, now_ms: i64) -> i64 {
        if self.ttl_secs == -1 {
            i64::MIN
        } else {
            now_ms.saturating_sub(self.ttl_secs.saturating_mul(1000))
        }
    }

    /// The accepted version window `[lo_s, hi_s)` in seconds at `now_ms`.
    pub(crate) fn version_window_secs(&self, now_ms: i64) -> (i64, i64) {
        let now_s = now_ms.div_euclid(1000);
        let mut lo = now_s.saturating_sub(self.max_version_offset_secs);
        if self.ttl_secs != -1 {
            lo = lo.max(now_s.saturating_sub(self.ttl_secs));
        }
        (lo, now_s.saturating_add(self.max_version_offset_secs))
    }
}

/// A change to some table options; `None` leaves an option as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OptionsUpdate {
    /// New TTL in seconds (-1: never expire).
    pub ttl_secs: Option<i64>,
    /// New number of versions kept per cell.
    pub max_versions: Option<u32>,
    /// New write window for explicit versions, in seconds.
    pub max_version_offset_secs: Option<i64>,
    /// Whether UpdateRow is allowed.
    pub allow_update: Option<bool>,
    /// New partition split size in bytes (0: split by hand only).
    pub partition_split_bytes: Option<u64>,
}

impl OptionsUpdate {
    pub(crate) fn apply(&self, o: &TableOptions) -> TableOptions {
        TableOptions {
            ttl_secs: self.ttl_secs.unwrap_or(o.ttl_secs),
            max_versions: self.max_versions.unwrap_or(o.max_versions),
            max_version_offset_secs: self.max_version_offset_secs.unwrap_or(o.max_version_offset_secs),
            allow_update: self.allow_update.unwrap_or(o.allow_update),
            partition_split_bytes: self.partition_split_bytes.unwrap_or(o.partition_split_bytes),
        }
    }
}

/// Most predefined (declared) attribute columns a table may have.
pub const MAX_DEFINED_COLUMNS: usize = 32;

/// A predefined attribute column (Tablestore's `defined_column`): a write
/// of another type to it is refused, SQL shows it with its type, and
/// secondary indexes may use it. Other attribute columns stay schema-free
/// (any row may write any of them with any type). Declaring a column does
/// not check values written before: reads convert them as SQL always has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnDef {
    /// The column's name.
    pub name: String,
    /// The type SQL shows the column with.
    #[serde(rename = "type")]
    pub value_type: ValueType,
}

/// A table's name, primary key and declared attribute columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSchema {
    /// The table's name.
    pub name: String,
    /// The key columns, 1-4, the first the partition key.
    pub primary_key: Vec<PkColumn>,
    /// Predefined attribute columns, at most [`MAX_DEFINED_COLUMNS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<ColumnDef>,
}

impl TableSchema {
    /// A schema named `name` with no columns yet; add key columns with [`TableSchema::pk`].
    pub fn new(name: impl Into<String>) -> Self {
        TableSchema {
            name: name.into(),
            primary_key: Vec::new(),
            columns: Vec::new(),
        }
    }

    /// Declares a predefined attribute column (see [`ColumnDef`]).
    pub fn column(mut self, name: impl Into<String>, value_type: ValueType) -> Self {
        self.columns.push(ColumnDef {
            name: name.into(),
            value_type,
        });
        self
    }

    /// Checks one more declared column against the key and the columns so far.
    pub(crate) fn check_new_column(&self, c: &ColumnDef) -> Result<()> {
        validate_name("column", &c.name)?;
        if self.is_pk_column(&c.name) {
            return Err(Error::param(format!(
                "column '{}' of table '{}' is a primary-key column; attribute columns need other names",
                c.name, self.name
            )));
        }
        if self.columns.iter().any(|d| d.name == c.name) {
            return Err(Error::new(
                ErrorKind::ObjectAlreadyExist,
                format!("column '{}' is already declared in table '{}'", c.name, self.name),
            ));
        }
        if self.columns.len() >= MAX_DEFINED_COLUMNS {
            return Err(Error::param(format!(
                "The number of defined columns must be in range: [0, {MAX_DEFINED_COLUMNS}]. \
                 (table '{}' already has {MAX_DEFINED_COLUMNS} predefined columns; cannot add '{}')",
                self.name, c.name
            )));
        }
        Ok(())
    }

    /// Appends a primary-key column.
    pub fn pk(mut self, name: impl Into<String>, pk_type: PkType) -> Self {
        self.primary_key.push(PkColumn {
            name: name.into(),
            pk_type,
            auto_increment: false,
        });
        self
    }

    /// Makes key column `name` the auto-increment column (see
    /// [`PkColumn::auto_increment`]); checked by [`TableSchema::validate`].
    pub fn auto_increment(mut self, name: &str) -> Result<Self> {
        let Some(c) = self.primary_key.iter_mut().find(|c| c.name == name) else {
            return Err(Error::param(format!(
                "auto-increment column '{name}' is not a primary-key column of table '{}'; the primary key is ({})",
                self.name,
                self.pk_list()
            )));
        };
        c.auto_increment = true;
        Ok(self)
    }

    /// The auto-increment key column's position, if the table has one.
    pub fn auto_increment_column(&self) -> Option<usize> {
        self.primary_key.iter().position(|c| c.auto_increment)
    }

    /// Checks the schema is one a table can have: the name, 1-4 key columns, distinct valid column names.
    pub fn validate(&self) -> Result<()> {
        validate_name("table", &self.name)?;
        if self.primary_key.is_empty() || self.primary_key.len() > 4 {
            return Err(Error::param(format!(
                "table '{}' has {} primary-key columns; 1 to 4 are accepted",
                self.name,
                self.primary_key.len()
            )));
        }
        for (i, c) in self.primary_key.iter().enumerate() {
            validate_name("primary-key column", &c.name)?;
            if self.primary_key[..i].iter().any(|p| p.name == c.name) {
                return Err(Error::param(format!(
                    "primary-key column '{}' is listed twice in table '{}'",
                    c.name, self.name
                )));
            }
        }
        let auto: Vec<&PkColumn> = self.primary_key.iter().filter(|c| c.auto_increment).collect();
        if auto.len() > 1 {
            return Err(Error::param(format!(
                "table '{}' has {} auto-increment columns; at most one is accepted",
                self.name,
                auto.len()
            )));
        }
        if let Some(c) = auto.first() {
            if c.name == self.primary_key[0].name {
                return Err(Error::param(format!(
                    "auto-increment column '{}' is the partition key of table '{}'; choose another primary-key column (2nd to 4th)",
                    c.name, self.name
                )));
            }
            if c.pk_type != PkType::Integer {
                return Err(Error::param(format!(
                    "auto-increment column '{}' of table '{}' is {}; it must be INTEGER",
                    c.name, self.name, c.pk_type
                )));
            }
        }
        let mut seen = TableSchema::new(self.name.clone());
        seen.primary_key = self.primary_key.clone();
        for c in &self.columns {
            seen.check_new_column(c)?;
            seen.columns.push(c.clone());
        }
        Ok(())
    }

    pub(crate) fn pk_types(&self) -> Vec<PkType> {
        self.primary_key.iter().map(|c| c.pk_type).collect()
    }

    pub(crate) fn is_pk_column(&self, name: &str) -> bool {
        self.primary_key.iter().any(|c| c.name == name)
    }

    /// Checks a full primary key and returns its encoding.
    pub(crate) fn encode_pk(&self, pk: &PrimaryKey) -> Result<Vec<u8>> {
        let (key, placeholder) = self.encode_write_pk(pk)?;
        if placeholder.is_some() {
            return Err(Error::invalid_pk(format!(
                "the auto-increment placeholder is accepted only in a PutRow or UpdateRow of a new row; \
                 to read, delete or condition on a row of table '{}', give its assigned value",
                self.name
            )));
        }
        Ok(key)
    }

    /// Checks the primary key of a PutRow / UpdateRow and returns its
    /// encoding, with the byte offset of the auto-increment placeholder
    /// when it has one (8 bytes there, to be replaced by the value).
    pub(crate) fn encode_write_pk(&self, pk: &PrimaryKey) -> Result<(Vec<u8>, Option<usize>)> {
        if pk.columns.len() != self.primary_key.len() {
            return Err(Error::invalid_pk(format!(
                "table '{}' has primary key ({}); got {} column(s): ({})",
                self.name,
                self.pk_list(),
                pk.columns.len(),
                pk.columns
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let mut out = Vec::with_capacity(32);
        let mut placeholder = None;
        for ((name, value), col) in pk.columns.iter().zip(&self.primary_key) {
            self.check_pk_value(name, value, col)?;
            if *value == PkValue::AutoIncrement {
                if !col.auto_increment {
                    return Err(Error::invalid_pk(format!(
                        "primary-key column '{}' of table '{}' is not auto-increment; give it a {} value{}",
                        col.name,
                        self.name,
                        col.pk_type,
                        match self.auto_increment_column() {
                            Some(i) => format!(" (the auto-increment column is '{}')", self.primary_key[i].name),
                            None => String::new(),
                        }
                    )));
                }
                placeholder = Some(out.len());
            }
            key::encode_value(&mut out, value);
        }
        Ok((out, placeholder))
    }

    fn check_pk_value(&self, name: &str, value: &PkValue, col: &PkColumn) -> Result<()> {
        if name != col.name {
            return Err(Error::invalid_pk(format!(
                "table '{}' expects primary-key column '{}' at this position, got '{}'; the primary key is ({})",
                self.name,
                col.name,
                name,
                self.pk_list()
            )));
        }
        if value.pk_type() != col.pk_type {
            return Err(Error::invalid_pk(format!(
                "primary-key column '{}' of table '{}' is {}, got a {} value",
                col.name,
                self.name,
                col.pk_type,
                value.pk_type()
            )));
        }
        if value.data_len() > MAX_PK_VALUE_BYTES && col.pk_type != PkType::Integer {
            return Err(Error::invalid_pk(format!(
                "primary-key column '{}' value is {} bytes; at most {MAX_PK_VALUE_BYTES} are accepted",
                col.name,
                value.data_len()
            )));
        }
        Ok(())
    }

    pub(crate) fn decode_pk(&self, encoded: &[u8]) -> Result<PrimaryKey> {
        let values = key::decode_key(encoded, &self.pk_types())?;
        Ok(PrimaryKey {
            columns: self.primary_key.iter().map(|c| c.name.clone()).zip(values).collect(),
        })
    }

    fn pk_list(&self) -> String {
        self.primary_key
            .iter()
            .map(|c| format!("{} {}", c.name, c.pk_type))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The byte position of a range bound: keys `< pos` lie before it;
    /// `None` is past every key. A bound that gives every column sits just
    /// before that key, or just after it when `after_full_key`.
    fn bound_position(&self, bound: &PkBound, fill: &PkBoundValue, after_full_key: bool) -> Result<Option<Vec<u8>>> {
        if bound.columns.len() > self.primary_key.len() {
            return Err(Error::invalid_pk(format!(
                "range bound has {} columns but table '{}' has a {}-column primary key ({})",
                bound.columns.len(),
                self.name,
                self.primary_key.len(),
                self.pk_list()
            )));
        }
        let mut out = Vec::new();
        for (i, col) in self.primary_key.iter().enumerate() {
            let component = match bound.columns.get(i) {
                Some((name, v)) => {
                    if *name != col.name {
                        return Err(Error::invalid_pk(format!(
                            "range bound expects primary-key column '{}' at position {}, got '{}'",
                            col.name,
                            i + 1,
                            name
                        )));
                    }
                    v
                }
                None => fill,
            };
            match component {
                PkBoundValue::Value(v) => {
                    self.check_pk_value(&col.name, v, col)?;
                    key::encode_value(&mut out, v);
                }
                PkBoundValue::InfMin => return Ok(Some(out)),
                PkBoundValue::InfMax => return Ok(key::prefix_successor(&out)),
            }
        }
        Ok(Some(if after_full_key { key::key_successor(&out) } else { out }))
    }

    /// Turns GetRange bounds into a half-open byte range.
    ///
    /// Forward: `start <= pk < end`; backward: `start >= pk > end`. Omitted
    /// trailing columns are INF_MIN forward and INF_MAX backward.
    pub(crate) fn key_range(&self, start: Option<&PkBound>, end: Option<&PkBound>, backward: bool) -> Result<KeyRange> {
        let fill = if backward {
            PkBoundValue::InfMax
        } else {
            PkBoundValue::InfMin
        };
        let pos = |b: Option<&PkBound>, default_unbounded_low: bool, after: bool| -> Result<Option<Vec<u8>>> {
            match b {
                Some(b) => self.bound_position(b, &fill, after),
                None if default_unbounded_low => Ok(Some(Vec::new())),
                None => Ok(None),
            }
        };
        let (lo, hi) = if backward {
            // start is the inclusive high end, end the exclusive low end.
            (pos(end, true, true)?, pos(start, false, true)?)
        } else {
            (pos(start, true, false)?, pos(end, false, false)?)
        };
        // A low end past every key ("INF_MAX" with no prefix) leaves nothing.
        let Some(lo) = lo else {
            return Ok(KeyRange::empty());
        };
        if let Some(h) = &hi
            && start.is_some()
            && end.is_some()
            && *h < lo
        {
            let dir = if backward { "backward" } else { "forward" };
            let want = if backward {
                "greater than or equal to"
            } else {
                "less than or equal to"
            };
            return Err(Error::param(format!(
                "in a {dir} range the start bound must be {want} the end bound"
            )));
        }
        Ok(KeyRange { lo, hi })
    }
}

/// Checks a table or column name: 1-255 characters of `[A-Za-z0-9_]`, first
/// a letter or `_`; names starting with `__` are reserved for the engine.
pub fn validate_name(what: &str, name: &str) -> Result<()> {
    let ok_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let first_ok = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    if name.is_empty() || name.len() > 255 || !ok_chars || !first_ok {
        return Err(Error::new(
            ErrorKind::ParameterInvalid,
            format!(
                "invalid {what} name '{name}': use 1-255 characters of A-Z, a-z, 0-9 and _, starting with a letter or _"
            ),
        ));
    }
    if name.starts_with("__") {
        return Err(Error::param(format!(
            "invalid {what} name '{name}': names starting with '__' are reserved for Cellar's own columns"
        )));
    }
    Ok(())
}

/// BatchWriteRow's limit, for every batch entry point.
pub(crate) fn check_batch_len(n: usize) -> Result<()> {
    if n > MAX_BATCH_WRITE_ROWS {
        return Err(Error::param(format!(
            "a batch of {n} row writes; at most {} are accepted in one batch",
            MAX_BATCH_WRITE_ROWS
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> TableSchema {
        TableSchema::new("t").pk("a", PkType::Integer).pk("b", PkType::String)
    }

    #[test]
    fn names() {
        assert!(validate_name("table", "orders_202611").is_ok());
        assert!(validate_name("table", "_x").is_ok());
        assert!(validate_name("table", "1x").is_err());
        assert!(validate_name("table", "a-b").is_err());
        assert!(validate_name("table", "").is_err());
        assert!(validate_name("table", &"a".repeat(256)).is_err());
        assert!(validate_name("column", "__pk").is_err());
    }

    #[test]
    fn version_window_matches_spec_example() {
        // 2016-07-21 00:00:00 UTC, offset 86400.
        let now_ms = 1_469_059_200_000;
        let o = TableOptions::default();
        let (lo, hi) = o.version_window_secs(now_ms);
        assert_eq!(lo * 1000, 1_468_972_800_000);
        assert_eq!(hi * 1000, 1_469_145_600_000);
        let ttl = TableOptions { ttl_secs: 86400, ..o };
        assert_eq!(ttl.ttl_cutoff_ms(now_ms), 1_468_972_800_000);
    }

    #[test]
    fn prefix_bounds_follow_direction() {
        let s = schema();
        let k = |a: i64, b: &str| s.encode_pk(&PrimaryKey::new().with("a", a).with("b", b)).unwrap();
        let r = s
            .key_range(
                Some(&PkBound::new().with("a", 1)),
                Some(&PkBound::new().with("a", 3)),
                false,
            )
            .unwrap();
        assert!(r.contains(&k(1, "")) && r.contains(&k(2, "zz")) && !r.contains(&k(3, "")));
        let r = s
            .key_range(
                Some(&PkBound::new().with("a", 3)),
                Some(&PkBound::new().with("a", 1)),
                true,
            )
            .unwrap();
        assert!(r.contains(&k(3, "zz")) && r.contains(&k(2, "")) && !r.contains(&k(1, "zz")));
        let full = PkBound::from(PrimaryKey::new().with("a", 2).with("b", "x"));
        let r = s.key_range(Some(&full), None, true).unwrap();
        assert!(r.contains(&k(2, "x")) && !r.contains(&k(2, "y")) && r.contains(&k(-9, "")));
        let err = s.key_range(
            Some(&PkBound::new().with("a", 3)),
            Some(&PkBound::new().with("a", 1)),
            false,
        );
        assert_eq!(err.unwrap_err().kind(), ErrorKind::ParameterInvalid);
    }

    #[test]
    fn pk_checks_name_type_and_size() {
        let s = schema();
        assert!(s.encode_pk(&PrimaryKey::new().with("a", 1)).is_err());
        assert!(s.encode_pk(&PrimaryKey::new().with("b", "x").with("a", 1)).is_err());
        assert!(s.encode_pk(&PrimaryKey::new().with("a", "x").with("b", "x")).is_err());
        let big = "x".repeat(1025);
        assert!(s.encode_pk(&PrimaryKey::new().with("a", 1).with("b", big)).is_err());
    }
}
