//! Request types of the row API, with builders.
//!
//! Invariant: requests are plain data; every check happens when a table
//! receives them (`write::validate`).

use crate::model::capacity::CapacityUnit;
use crate::model::filter::Filter;
use crate::model::row::ReadOptions;
use crate::model::types::{PkBound, PrimaryKey, Row, Value};

/// What a write expects of its row's existence before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowExistence {
    /// No expectation (the default).
    #[default]
    Ignore,
    /// The row must exist.
    ExpectExist,
    /// The row must not exist.
    ExpectNotExist,
}

impl RowExistence {
    /// `ignore`, `expect_exist` or `expect_not_exist`.
    pub fn name(self) -> &'static str {
        match self {
            RowExistence::Ignore => "ignore",
            RowExistence::ExpectExist => "expect_exist",
            RowExistence::ExpectNotExist => "expect_not_exist",
        }
    }
}

/// The condition of a single-row write, checked against the row's current
/// visible state (TTL and `max_versions` applied) atomically with the
/// write: a failed condition changes nothing and fails the write with
/// `ConditionCheckFail`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Condition {
    /// What the row's existence must be.
    pub row: RowExistence,
    /// A column condition the current row must pass (a [`Filter`] without
    /// a column page); a row that does not exist fails it.
    pub column: Option<Filter>,
}

impl Condition {
    /// No condition.
    pub fn ignore() -> Self {
        Self::default()
    }

    /// The row must exist.
    pub fn expect_exist() -> Self {
        Condition {
            row: RowExistence::ExpectExist,
            column: None,
        }
    }

    /// The row must not exist (an insert).
    pub fn expect_not_exist() -> Self {
        Condition {
            row: RowExistence::ExpectNotExist,
            column: None,
        }
    }

    /// Adds a column condition.
    pub fn with_column(mut self, filter: Filter) -> Self {
        self.column = Some(filter);
        self
    }

    /// Whether the condition needs the row's current state.
    pub fn is_ignore(&self) -> bool {
        self.row == RowExistence::Ignore && self.column.is_none()
    }
}

/// What a write returns besides its capacity units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReturnType {
    /// Nothing (the default; an auto-increment key is returned anyway).
    #[default]
    None,
    /// The row's primary key (to learn an auto-increment value).
    PrimaryKey,
    /// The primary key and the columns the write put or incremented, with
    /// their values and versions after the write.
    AfterModify,
}

/// What a committed single-row write returns.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WriteResult {
    /// The capacity units the write consumed.
    pub consumed: CapacityUnit,
    /// The row as asked by the write's [`ReturnType`] (always with the
    /// primary key when the table has an auto-increment key column).
    pub row: Option<Row>,
}

/// One column of a PutRow: a value and an optional explicit version (ms).
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnValue {
    /// The column's name.
    pub name: String,
    /// The value.
    pub value: Value,
    /// `None`: the write time.
    pub version: Option<i64>,
}

/// PutRow: writes a row, replacing every earlier column and version of it.
#[derive(Debug, Clone, PartialEq)]
pub struct PutRow {
    /// The row's full primary key.
    pub primary_key: PrimaryKey,
    /// The row's columns; a PutRow without any writes a row marker.
    pub columns: Vec<ColumnValue>,
    /// Checked against the row before the write.
    pub condition: Condition,
    /// What the write returns.
    pub return_type: ReturnType,
}

impl PutRow {
    /// A PutRow of `primary_key` with no columns yet.
    pub fn new(primary_key: PrimaryKey) -> Self {
        PutRow {
            primary_key,
            columns: Vec::new(),
            condition: Condition::default(),
            return_type: ReturnType::None,
        }
    }

    /// Adds a column versioned at the write time.
    pub fn column(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.columns.push(ColumnValue {
            name: name.into(),
            value: value.into(),
            version: None,
        });
        self
    }

    /// Adds a column with an explicit version (ms since the epoch).
    pub fn column_at(mut self, name: impl Into<String>, value: impl Into<Value>, version: i64) -> Self {
        self.columns.push(ColumnValue {
            name: name.into(),
            value: value.into(),
            version: Some(version),
        });
        self
    }
}

/// One column action of UpdateRow.
#[derive(Debug, Clone, PartialEq)]
pub enum UpdateAction {
    /// Adds or replaces a version (`None`: the write time).
    Put {
        /// The column's name.
        name: String,
        /// The value.
        value: Value,
        /// The version in ms since the epoch (`None`: the write time).
        version: Option<i64>,
    },
    /// Removes one version of a column.
    /// Removes the version `version` (ms) of column `name`.
    DeleteVersion {
        /// The column's name.
        name: String,
        /// The version to delete, ms since the epoch.
        version: i64,
    },
    /// Removes every version of a column.
    /// Removes every version of column `name`.
    DeleteAll {
        /// The column's name.
        name: String,
    },
    /// Adds `delta` to an INTEGER column (a missing column counts as 0),
    /// writing the sum as a new version at the write time. The current
    /// value must be an INTEGER and the sum must fit in an i64; no other
    /// action of the same request may name the column.
    Increment {
        /// The column's name.
        name: String,
        /// What to add (may be negative).
        delta: i64,
    },
}

impl UpdateAction {
    /// The column the action changes.
    pub fn column(&self) -> &str {
        match self {
            UpdateAction::Put { name, .. }
            | UpdateAction::DeleteVersion { name, .. }
            | UpdateAction::DeleteAll { name }
            | UpdateAction::Increment { name, .. } => name,
        }
    }
}

/// UpdateRow: changes some columns of a row, creating it if needed.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateRow {
    /// The row's full primary key.
    pub primary_key: PrimaryKey,
    /// The column actions, applied in order.
    pub actions: Vec<UpdateAction>,
    /// Checked against the row before the write.
    pub condition: Condition,
    /// What the write returns.
    pub return_type: ReturnType,
}

impl UpdateRow {
    /// An UpdateRow of `primary_key` with no actions yet.
    pub fn new(primary_key: PrimaryKey) -> Self {
        UpdateRow {
            primary_key,
            actions: Vec::new(),
            condition: Condition::default(),
            return_type: ReturnType::None,
        }
    }

    /// Adds `delta` to an INTEGER column (an atomic counter).
    pub fn increment(mut self, name: impl Into<String>, delta: i64) -> Self {
        self.actions.push(UpdateAction::Increment {
            name: name.into(),
            delta,
        });
        self
    }

    /// Adds a version of a column, versioned at the write time.
    pub fn put(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.actions.push(UpdateAction::Put {
            name: name.into(),
            value: value.into(),
            version: None,
        });
        self
    }

    /// Adds a version of a column with an explicit version (ms since the epoch).
    pub fn put_at(mut self, name: impl Into<String>, value: impl Into<Value>, version: i64) -> Self {
        self.actions.push(UpdateAction::Put {
            name: name.into(),
            value: value.into(),
            version: Some(version),
        });
        self
    }

    /// Deletes one version (ms) of a column.
    pub fn delete_version(mut self, name: impl Into<String>, version: i64) -> Self {
        self.actions.push(UpdateAction::DeleteVersion {
            name: name.into(),
            version,
        });
        self
    }

    /// Deletes every version of a column.
    pub fn delete_all(mut self, name: impl Into<String>) -> Self {
        self.actions.push(UpdateAction::DeleteAll { name: name.into() });
        self
    }
}

/// DeleteRow: removes a row with all its columns and versions.
#[derive(Debug, Clone, PartialEq)]
pub struct DeleteRow {
    /// The row's full primary key.
    pub primary_key: PrimaryKey,
    /// Checked against the row before the write.
    pub condition: Condition,
    /// What the write returns.
    pub return_type: ReturnType,
}

impl DeleteRow {
    /// A DeleteRow of `primary_key`.
    pub fn new(primary_key: PrimaryKey) -> Self {
        DeleteRow {
            primary_key,
            condition: Condition::default(),
            return_type: ReturnType::None,
        }
    }
}

/// The condition and return-content builders every single-row write has.
macro_rules! write_options {
    ($($t:ty),*) => {$(
        impl $t {
            /// Sets the write's condition.
            pub fn condition(mut self, condition: Condition) -> Self {
                self.condition = condition;
                self
            }

            /// Sets what the write returns.
            pub fn returning(mut self, r: ReturnType) -> Self {
                self.return_type = r;
                self
            }
        }
    )*};
}

write_options!(PutRow, UpdateRow, DeleteRow);

/// Any single-row write.
#[derive(Debug, Clone, PartialEq)]
pub enum RowWrite {
    /// A PutRow.
    Put(PutRow),
    /// An UpdateRow.
    Update(UpdateRow),
    /// A DeleteRow.
    Delete(DeleteRow),
}

impl RowWrite {
    /// The primary key the write is for.
    pub fn primary_key(&self) -> &PrimaryKey {
        match self {
            RowWrite::Put(p) => &p.primary_key,
            RowWrite::Update(u) => &u.primary_key,
            RowWrite::Delete(d) => &d.primary_key,
        }
    }

    /// The write's condition.
    pub fn condition(&self) -> &Condition {
        match self {
            RowWrite::Put(p) => &p.condition,
            RowWrite::Update(u) => &u.condition,
            RowWrite::Delete(d) => &d.condition,
        }
    }

    /// What the write returns.
    pub fn return_type(&self) -> ReturnType {
        match self {
            RowWrite::Put(p) => p.return_type,
            RowWrite::Update(u) => u.return_type,
            RowWrite::Delete(d) => d.return_type,
        }
    }

    /// Whether the write depends on the row's current state (a condition
    /// or an increment): it is checked and committed atomically.
    pub(crate) fn reads_row(&self) -> bool {
        !self.condition().is_ignore()
            || matches!(self, RowWrite::Update(u) if u.actions.iter().any(|a| matches!(a, UpdateAction::Increment { .. })))
    }

    /// The operation's name, for messages.
    pub(crate) fn op_name(&self) -> &'static str {
        match self {
            RowWrite::Put(_) => "PutRow",
            RowWrite::Update(_) => "UpdateRow",
            RowWrite::Delete(_) => "DeleteRow",
        }
    }
}

impl From<PutRow> for RowWrite {
    fn from(p: PutRow) -> Self {
        RowWrite::Put(p)
    }
}
impl From<UpdateRow> for RowWrite {
    fn from(u: UpdateRow) -> Self {
        RowWrite::Update(u)
    }
}
impl From<DeleteRow> for RowWrite {
    fn from(d: DeleteRow) -> Self {
        RowWrite::Delete(d)
    }
}

/// GetRow: one row by its full primary key.
#[derive(Debug, Clone, PartialEq)]
pub struct GetRow {
    /// The row's full primary key.
    pub primary_key: PrimaryKey,
    /// Which columns and versions to return.
    pub options: ReadOptions,
}

impl GetRow {
    /// A GetRow of `primary_key` with the default read options (every column, newest version).
    pub fn new(primary_key: PrimaryKey) -> Self {
        GetRow {
            primary_key,
            options: ReadOptions::default(),
        }
    }

    /// Sets the read options.
    pub fn options(mut self, options: ReadOptions) -> Self {
        self.options = options;
        self
    }
}

/// Scan direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// Ascending keys.
    #[default]
    Forward,
    /// Descending keys.
    Backward,
}

/// GetRange: rows between two bounds.
///
/// Forward: `start <= pk < end`; backward: `start >= pk > end`. A missing
/// bound is the start / end of the table in the scan's direction.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GetRange {
    /// Where the range starts (inclusive); `None`: the first key in the scan's direction.
    pub start: Option<PkBound>,
    /// Where the range ends (exclusive); `None`: the last key in the scan's direction.
    pub end: Option<PkBound>,
    /// Ascending or descending keys.
    pub direction: Direction,
    /// Rows per response at most (also capped at 5000 rows and 4 MiB).
    pub limit: Option<usize>,
    /// Which columns and versions to return.
    pub options: ReadOptions,
}

impl GetRange {
    /// A forward scan of the whole table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the start bound (inclusive).
    pub fn start(mut self, b: impl Into<PkBound>) -> Self {
        self.start = Some(b.into());
        self
    }

    /// Sets the end bound (exclusive).
    pub fn end(mut self, b: impl Into<PkBound>) -> Self {
        self.end = Some(b.into());
        self
    }

    /// Scans from high keys to low.
    pub fn backward(mut self) -> Self {
        self.direction = Direction::Backward;
        self
    }

    /// Returns at most `n` rows per response.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Sets the read options.
    pub fn options(mut self, options: ReadOptions) -> Self {
        self.options = options;
        self
    }
}

/// One response of GetRange.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RangeResult {
    /// The rows, in scan order.
    pub rows: Vec<Row>,
    /// Where to continue (pass as the next `start`), when rows may remain.
    pub next_start: Option<PrimaryKey>,
    /// The capacity units the response consumed (the rows it looked at,
    /// filtered out or not).
    pub consumed: CapacityUnit,
}

/// The answer of GetRow.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GetRowResult {
    /// The row, or `None` when it does not exist (or its filter rejected it).
    pub row: Option<Row>,
    /// The capacity units the read consumed (1 read CU for a missing row).
    pub consumed: CapacityUnit,
}

/// Most rows in one GetRange response.
pub const MAX_RANGE_ROWS: usize = 5000;
/// Most row bytes in one GetRange response.
pub const MAX_RANGE_BYTES: usize = 4 * 1024 * 1024;
/// Most rows one GetRange response looks at: with a filter that passes few
/// of them, a response may hold fewer rows than its limit (even none) and
/// continue at `next_start`.
pub const MAX_RANGE_SCANNED_ROWS: usize = 50_000;
