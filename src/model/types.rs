//! The data model's values: primary keys, attribute values, cells and rows.
//!
//! Invariant: values are what the user wrote, bit for bit (a DOUBLE keeps
//! its NaN payload and the sign of zero).

use std::fmt;

/// The type of a primary-key column, fixed when the table is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PkType {
    /// A signed 64-bit integer.
    Integer,
    /// A UTF-8 string.
    String,
    /// Bytes.
    Binary,
}

impl PkType {
    /// The lowercase name (`integer`, `string`, `binary`), as the CLI and the catalog spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            PkType::Integer => "integer",
            PkType::String => "string",
            PkType::Binary => "binary",
        }
    }
}

impl fmt::Display for PkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PkType {
    type Err = crate::error::Error;
    fn from_str(s: &str) -> crate::error::Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "integer" | "int" | "bigint" => Ok(PkType::Integer),
            "string" | "varchar" | "text" => Ok(PkType::String),
            "binary" | "varbinary" | "bytea" => Ok(PkType::Binary),
            _ => Err(crate::error::Error::param(format!(
                "unknown primary-key type '{s}': expected integer, string or binary"
            ))),
        }
    }
}

/// A primary-key column value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PkValue {
    /// An INTEGER value.
    Integer(i64),
    /// A STRING value.
    String(String),
    /// A BINARY value.
    Binary(Vec<u8>),
    /// The placeholder of a table's auto-increment key column in a PutRow
    /// or UpdateRow: the engine assigns the value (see
    /// [`PkColumn::auto_increment`](crate::PkColumn::auto_increment)).
    /// Nowhere else is it accepted.
    AutoIncrement,
}

impl PkValue {
    /// The type of this value (the placeholder stands for an INTEGER).
    pub fn pk_type(&self) -> PkType {
        match self {
            PkValue::Integer(_) | PkValue::AutoIncrement => PkType::Integer,
            PkValue::String(_) => PkType::String,
            PkValue::Binary(_) => PkType::Binary,
        }
    }

    /// Bytes this value counts for in row-size limits.
    pub(crate) fn data_len(&self) -> usize {
        match self {
            PkValue::Integer(_) | PkValue::AutoIncrement => 8,
            PkValue::String(s) => s.len(),
            PkValue::Binary(b) => b.len(),
        }
    }
}

impl From<i64> for PkValue {
    fn from(v: i64) -> Self {
        PkValue::Integer(v)
    }
}
impl From<i32> for PkValue {
    fn from(v: i32) -> Self {
        PkValue::Integer(v.into())
    }
}
impl From<&str> for PkValue {
    fn from(v: &str) -> Self {
        PkValue::String(v.to_string())
    }
}
impl From<String> for PkValue {
    fn from(v: String) -> Self {
        PkValue::String(v)
    }
}
impl From<Vec<u8>> for PkValue {
    fn from(v: Vec<u8>) -> Self {
        PkValue::Binary(v)
    }
}

/// One bound component of a range: a value, or the smallest / largest
/// possible value of its column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PkBoundValue {
    /// A value of the column.
    Value(PkValue),
    /// Below every value of the column (INF_MIN).
    InfMin,
    /// Above every value of the column (INF_MAX).
    InfMax,
}

impl<T: Into<PkValue>> From<T> for PkBoundValue {
    fn from(v: T) -> Self {
        PkBoundValue::Value(v.into())
    }
}

/// A primary key: `(name, value)` pairs in the table's PK column order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PrimaryKey {
    /// `(column name, value)` pairs, in the table's key column order.
    pub columns: Vec<(String, PkValue)>,
}

impl PrimaryKey {
    /// An empty key; add columns with [`PrimaryKey::with`].
    pub fn new() -> Self {
        PrimaryKey::default()
    }

    /// Appends a column; order must follow the table's PK order.
    pub fn with(mut self, name: impl Into<String>, value: impl Into<PkValue>) -> Self {
        self.columns.push((name.into(), value.into()));
        self
    }

    /// The value of the key column `name`, if the key has it.
    pub fn get(&self, name: &str) -> Option<&PkValue> {
        self.columns.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

/// A range bound: a prefix of the PK columns, each a value or INF_MIN /
/// INF_MAX. Omitted trailing columns are INF_MIN in a forward range and
/// INF_MAX in a backward one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PkBound {
    /// `(column name, bound value)` pairs: a prefix of the table's key columns.
    pub columns: Vec<(String, PkBoundValue)>,
}

/// `(id=1, name="a")`, for messages.
impl fmt::Display for PrimaryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (i, (n, v)) in self.columns.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match v {
                PkValue::Integer(x) => write!(f, "{n}={x}")?,
                PkValue::String(s) => write!(f, "{n}={s:?}")?,
                PkValue::Binary(b) => write!(f, "{n}=0x{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>())?,
                PkValue::AutoIncrement => write!(f, "{n}=AUTO_INCREMENT")?,
            }
        }
        f.write_str(")")
    }
}

impl PkBound {
    /// An empty bound (every column omitted).
    pub fn new() -> Self {
        PkBound::default()
    }

    /// Appends a column; order must follow the table's key order.
    pub fn with(mut self, name: impl Into<String>, value: impl Into<PkBoundValue>) -> Self {
        self.columns.push((name.into(), value.into()));
        self
    }
}

impl From<PrimaryKey> for PkBound {
    fn from(pk: PrimaryKey) -> Self {
        PkBound {
            columns: pk
                .columns
                .into_iter()
                .map(|(n, v)| (n, PkBoundValue::Value(v)))
                .collect(),
        }
    }
}

/// The type of an attribute value (the five types of the model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueType {
    /// A signed 64-bit integer.
    Integer,
    /// A 64-bit IEEE 754 float, stored bit for bit.
    Double,
    /// A UTF-8 string.
    String,
    /// Bytes.
    Binary,
    /// `true` or `false`.
    Boolean,
}

impl ValueType {
    /// All types, in the order of [`ValueType::index`].
    pub const ALL: [ValueType; 5] = [
        ValueType::Integer,
        ValueType::Double,
        ValueType::String,
        ValueType::Binary,
        ValueType::Boolean,
    ];

    /// The lowercase name (`integer`, `double`, `string`, `binary`, `boolean`).
    pub fn as_str(self) -> &'static str {
        match self {
            ValueType::Integer => "integer",
            ValueType::Double => "double",
            ValueType::String => "string",
            ValueType::Binary => "binary",
            ValueType::Boolean => "boolean",
        }
    }

    /// Position in [`ValueType::ALL`] (and in per-type counters).
    pub fn index(self) -> usize {
        match self {
            ValueType::Integer => 0,
            ValueType::Double => 1,
            ValueType::String => 2,
            ValueType::Binary => 3,
            ValueType::Boolean => 4,
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ValueType {
    type Err = crate::error::Error;
    fn from_str(s: &str) -> crate::error::Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "integer" | "int" | "bigint" => Ok(ValueType::Integer),
            "double" | "float" | "float8" | "real" => Ok(ValueType::Double),
            "string" | "varchar" | "text" => Ok(ValueType::String),
            "binary" | "varbinary" | "bytea" | "blob" => Ok(ValueType::Binary),
            "boolean" | "bool" => Ok(ValueType::Boolean),
            _ => Err(crate::error::Error::param(format!(
                "unknown column type '{s}': expected bigint, double, varchar, boolean or varbinary"
            ))),
        }
    }
}

/// An attribute value: one of the five types of the model.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// An INTEGER value.
    Integer(i64),
    /// A DOUBLE value.
    Double(f64),
    /// A STRING value.
    String(String),
    /// A BOOLEAN value.
    Boolean(bool),
    /// A BINARY value.
    Binary(Vec<u8>),
}

impl Value {
    /// The type of this value.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::Integer(_) => ValueType::Integer,
            Value::Double(_) => ValueType::Double,
            Value::String(_) => ValueType::String,
            Value::Boolean(_) => ValueType::Boolean,
            Value::Binary(_) => ValueType::Binary,
        }
    }

    /// The type's name in capitals (`INTEGER`, ...), as error messages spell it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Integer(_) => "INTEGER",
            Value::Double(_) => "DOUBLE",
            Value::String(_) => "STRING",
            Value::Boolean(_) => "BOOLEAN",
            Value::Binary(_) => "BINARY",
        }
    }

    /// Bytes this value counts for in row-size limits (see `docs/model.md`, "Limits").
    pub(crate) fn data_len(&self) -> usize {
        match self {
            Value::Integer(_) | Value::Double(_) => 8,
            Value::Boolean(_) => 1,
            Value::String(s) => s.len(),
            Value::Binary(b) => b.len(),
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Integer(v)
    }
}
impl From<i32> for Value {
    fn from(v: i32) -> Self {
        Value::Integer(v.into())
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Double(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Boolean(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::String(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::String(v)
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Binary(v)
    }
}

/// One version of a cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// The value.
    pub value: Value,
    /// Milliseconds since the Unix epoch.
    pub version: i64,
}

/// A row as reads return it: the PK and, per column (sorted by name), its
/// versions newest first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Row {
    /// The row's primary key.
    pub primary_key: PrimaryKey,
    /// Per column, sorted by name, the versions the read selected, newest first.
    pub columns: Vec<(String, Vec<Cell>)>,
}

impl Row {
    /// The versions of one column, newest first.
    pub fn column(&self, name: &str) -> Option<&[Cell]> {
        self.columns
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| self.columns[i].1.as_slice())
    }

    /// The newest visible value of one column.
    pub fn latest(&self, name: &str) -> Option<&Value> {
        self.column(name).and_then(|c| c.first()).map(|c| &c.value)
    }
}

/// A borrowed [`Value`]: what a flush reads from a memtable's packed rows
/// without allocating.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ValueRef<'a> {
    Integer(i64),
    Double(f64),
    String(&'a str),
    Boolean(bool),
    Binary(&'a [u8]),
}

impl ValueRef<'_> {
    pub fn value_type(&self) -> ValueType {
        match self {
            ValueRef::Integer(_) => ValueType::Integer,
            ValueRef::Double(_) => ValueType::Double,
            ValueRef::String(_) => ValueType::String,
            ValueRef::Boolean(_) => ValueType::Boolean,
            ValueRef::Binary(_) => ValueType::Binary,
        }
    }

    pub fn to_value(self) -> Value {
        match self {
            ValueRef::Integer(x) => Value::Integer(x),
            ValueRef::Double(x) => Value::Double(x),
            ValueRef::String(x) => Value::String(x.to_string()),
            ValueRef::Boolean(x) => Value::Boolean(x),
            ValueRef::Binary(x) => Value::Binary(x.to_vec()),
        }
    }
}

impl<'a> From<&'a Value> for ValueRef<'a> {
    fn from(v: &'a Value) -> Self {
        match v {
            Value::Integer(x) => ValueRef::Integer(*x),
            Value::Double(x) => ValueRef::Double(*x),
            Value::String(x) => ValueRef::String(x),
            Value::Boolean(x) => ValueRef::Boolean(*x),
            Value::Binary(x) => ValueRef::Binary(x),
        }
    }
}

/// The value types of an attribute column, as a bit set: 1 INTEGER,
/// 2 DOUBLE, 4 STRING, 8 BINARY, 16 BOOLEAN (the order of a segment's value
/// children, see `docs/format.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct TypeSet(pub u8);

impl TypeSet {
    /// Whether the set holds the type of bit `bit`.
    pub fn has(&self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    /// The types with a non-zero count, counts in [`ValueType::index`]
    /// order (the bit of a type is `1 << index`).
    pub fn from_counts(counts: &[u64; 5]) -> Self {
        let mut t = TypeSet::default();
        for (i, n) in counts.iter().enumerate() {
            if *n > 0 {
                t.0 |= 1 << i;
            }
        }
        t
    }
}
