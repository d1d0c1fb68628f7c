//! The Arrow side of a scan: the Arrow type SQL shows each value type
//! with, exact conversions between value types, column builders, typed
//! views of a batch's key columns, and the reading of one attribute column
//! of the wide layout.
//!
//! Invariant: a value is shown with another type only when the conversion
//! loses nothing (see [`convert`]); otherwise it reads as NULL.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryBuilder, BooleanArray, BooleanBuilder, Float64Builder, Int64Array, Int64Builder,
    RecordBatch, StringViewBuilder, StructArray, new_null_array,
};
use arrow::compute::kernels::cmp;
use arrow::compute::nullif;
use arrow::datatypes::{DataType, Int64Type};

use crate::error::{Error, Result};
use crate::model::types::{PkValue, Value, ValueType};
use crate::segment::format::{self};

/// Rows per output batch.
pub(crate) const BATCH_ROWS: usize = 8192;

/// One output column of a latest-version scan.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OutCol {
    /// The i-th primary-key column.
    Pk(usize),
    /// An attribute column shown with this type (values of another type
    /// read as NULL unless exactly convertible, see [`convert`]).
    Attr { name: String, ty: ValueType },
}

/// The Arrow type SQL shows a value type with.
pub(crate) fn arrow_type(t: ValueType) -> DataType {
    match t {
        ValueType::Integer => DataType::Int64,
        ValueType::Double => DataType::Float64,
        ValueType::String => DataType::Utf8View,
        ValueType::Binary => DataType::Binary,
        ValueType::Boolean => DataType::Boolean,
    }
}

/// The struct child of the wide layout that holds values of type `t`.
fn child_name(t: ValueType) -> &'static str {
    match t {
        ValueType::Integer => "i",
        ValueType::Double => "d",
        ValueType::String => "s",
        ValueType::Binary => "b",
        ValueType::Boolean => "t",
    }
}

/// `v` as a value of type `ty`, when that loses nothing: integers and
/// doubles convert when the number is the same (|i| <= 2^53, whole doubles);
/// numbers and booleans read as strings in their canonical text; strings
/// read as numbers or booleans only when they are that canonical text;
/// strings read as binaries (their UTF-8 bytes) and binaries as strings when
/// they are valid UTF-8. Everything else is `None` (SQL NULL).
pub(crate) fn convert(v: &Value, ty: ValueType) -> Option<Value> {
    const EXACT: i64 = 1 << 53;
    match (v, ty) {
        (v, t) if v.value_type() == t => Some(v.clone()),
        (Value::Integer(i), ValueType::Double) => (-EXACT..=EXACT).contains(i).then_some(Value::Double(*i as f64)),
        (Value::Double(d), ValueType::Integer) => {
            (d.fract() == 0.0 && *d >= -9.223_372_036_854_776e18 && *d < 9.223_372_036_854_776e18)
                .then_some(Value::Integer(*d as i64))
        }
        (Value::Integer(i), ValueType::String) => Some(Value::String(i.to_string())),
        (Value::Double(d), ValueType::String) => d.is_finite().then(|| Value::String(d.to_string())),
        (Value::Boolean(b), ValueType::String) => Some(Value::String(b.to_string())),
        (Value::String(s), ValueType::Integer) => s
            .parse::<i64>()
            .ok()
            .filter(|i| i.to_string() == *s)
            .map(Value::Integer),
        (Value::String(s), ValueType::Double) => s
            .parse::<f64>()
            .ok()
            .filter(|d| d.is_finite() && d.to_string() == *s)
            .map(Value::Double),
        (Value::String(s), ValueType::Boolean) => match s.as_str() {
            "true" => Some(Value::Boolean(true)),
            "false" => Some(Value::Boolean(false)),
            _ => None,
        },
        (Value::String(s), ValueType::Binary) => Some(Value::Binary(s.as_bytes().to_vec())),
        (Value::Binary(b), ValueType::String) => String::from_utf8(b.clone()).ok().map(Value::String),
        _ => None,
    }
}

/// A typed column builder for rows assembled one at a time.
pub(crate) enum ColBuilder {
    I(Int64Builder),
    D(Float64Builder),
    S(StringViewBuilder),
    B(BinaryBuilder),
    T(BooleanBuilder),
}

impl ColBuilder {
    pub fn new(t: ValueType) -> Self {
        match t {
            ValueType::Integer => ColBuilder::I(Int64Builder::new()),
            ValueType::Double => ColBuilder::D(Float64Builder::new()),
            ValueType::String => ColBuilder::S(StringViewBuilder::new()),
            ValueType::Binary => ColBuilder::B(BinaryBuilder::new()),
            ValueType::Boolean => ColBuilder::T(BooleanBuilder::new()),
        }
    }

    fn value_type(&self) -> ValueType {
        match self {
            ColBuilder::I(_) => ValueType::Integer,
            ColBuilder::D(_) => ValueType::Double,
            ColBuilder::S(_) => ValueType::String,
            ColBuilder::B(_) => ValueType::Binary,
            ColBuilder::T(_) => ValueType::Boolean,
        }
    }

    fn push_null(&mut self) {
        match self {
            ColBuilder::I(b) => b.append_null(),
            ColBuilder::D(b) => b.append_null(),
            ColBuilder::S(b) => b.append_null(),
            ColBuilder::B(b) => b.append_null(),
            ColBuilder::T(b) => b.append_null(),
        }
    }

    /// Appends `v` converted to this column's type (NULL when it does not
    /// convert exactly).
    pub fn push(&mut self, v: Option<&Value>) {
        match (&mut *self, v) {
            (ColBuilder::I(b), Some(Value::Integer(x))) => b.append_value(*x),
            (ColBuilder::D(b), Some(Value::Double(x))) => b.append_value(*x),
            (ColBuilder::S(b), Some(Value::String(x))) => b.append_value(x),
            (ColBuilder::B(b), Some(Value::Binary(x))) => b.append_value(x),
            (ColBuilder::T(b), Some(Value::Boolean(x))) => b.append_value(*x),
            (_, None) => self.push_null(),
            (_, Some(v)) => match convert(v, self.value_type()) {
                Some(c) => self.push(Some(&c)),
                None => self.push_null(),
            },
        }
    }

    pub fn push_pk(&mut self, v: &PkValue) {
        let v = match v {
            PkValue::Integer(i) => Value::Integer(*i),
            PkValue::String(s) => Value::String(s.clone()),
            PkValue::Binary(b) => Value::Binary(b.clone()),
            // Decoded keys never hold the placeholder.
            PkValue::AutoIncrement => {
                self.push(None);
                return;
            }
        };
        self.push(Some(&v));
    }

    pub fn finish(&mut self) -> ArrayRef {
        match self {
            ColBuilder::I(b) => Arc::new(b.finish()),
            ColBuilder::D(b) => Arc::new(b.finish()),
            ColBuilder::S(b) => Arc::new(b.finish()),
            ColBuilder::B(b) => Arc::new(b.finish()),
            ColBuilder::T(b) => Arc::new(b.finish()),
        }
    }
}

pub(crate) fn pk_value_type(t: crate::model::types::PkType) -> ValueType {
    match t {
        crate::model::types::PkType::Integer => ValueType::Integer,
        crate::model::types::PkType::String => ValueType::String,
        crate::model::types::PkType::Binary => ValueType::Binary,
    }
}

/// The rows where `b` is true (null counts as false).
pub(crate) fn true_bits(b: &BooleanArray) -> arrow::buffer::BooleanBuffer {
    match b.nulls() {
        Some(valid) => b.values() & valid.inner(),
        None => b.values().clone(),
    }
}

/// A typed key column of a batch.
pub(crate) enum TypedKey<'a> {
    I(&'a Int64Array),
    S(&'a arrow::array::StringViewArray),
    B(&'a arrow::array::BinaryArray),
}

impl<'a> TypedKey<'a> {
    /// The column `a` of a segment batch as key column type `t`.
    pub fn new(a: &'a ArrayRef, t: crate::model::types::PkType, path: &str) -> Result<Self> {
        let corrupt = |what: &str| Error::corruption(format!("segment {path}: {what}"));
        Ok(match t {
            crate::model::types::PkType::Integer => TypedKey::I(
                a.as_primitive_opt::<Int64Type>()
                    .ok_or_else(|| corrupt("an integer key column is not Int64"))?,
            ),
            crate::model::types::PkType::String => TypedKey::S(
                a.as_string_view_opt()
                    .ok_or_else(|| corrupt("a string key column is not a string"))?,
            ),
            crate::model::types::PkType::Binary => TypedKey::B(
                a.as_binary_opt::<i32>()
                    .ok_or_else(|| corrupt("a binary key column is not binary"))?,
            ),
        })
    }

    /// Row `r`'s value compared with `v` (a value of another type compares
    /// equal: the schema fixes each column's type).
    pub fn row_vs(&self, r: usize, v: &PkValue) -> std::cmp::Ordering {
        match (self, v) {
            (TypedKey::I(a), PkValue::Integer(x)) => a.value(r).cmp(x),
            (TypedKey::S(a), PkValue::String(s)) => a.value(r).as_bytes().cmp(s.as_bytes()),
            (TypedKey::B(a), PkValue::Binary(b)) => a.value(r).cmp(b.as_slice()),
            _ => std::cmp::Ordering::Equal,
        }
    }
}

/// How a batch's rows compare with a memtable key: by `__pk` when it is
/// read, else column by column on the typed key columns (the same order).
pub(crate) enum RowKeys<'a> {
    Encoded(&'a arrow::array::BinaryArray),
    Typed(Vec<TypedKey<'a>>),
}

impl<'a> RowKeys<'a> {
    /// The typed key columns of a segment batch.
    pub fn typed(batch: &'a RecordBatch, schema: &crate::model::schema::TableSchema, path: &str) -> Result<Self> {
        let mut typed = Vec::new();
        for c in &schema.primary_key {
            let a = batch
                .column_by_name(&c.name)
                .ok_or_else(|| Error::corruption(format!("segment {path}: missing a primary-key column")))?;
            typed.push(TypedKey::new(a, c.pk_type, path)?);
        }
        Ok(RowKeys::Typed(typed))
    }

    /// The key's typed values when comparing typed columns.
    pub(super) fn decode(&self, types: &[crate::model::types::PkType], key: &[u8]) -> Result<Vec<PkValue>> {
        Ok(match self {
            RowKeys::Encoded(_) => Vec::new(),
            RowKeys::Typed(_) => crate::model::key::decode_key(key, types)?,
        })
    }

    /// Row `r` compared with the key (`dec`: its decoded values).
    pub fn row_vs(&self, r: usize, key: &[u8], dec: &[PkValue]) -> std::cmp::Ordering {
        match self {
            RowKeys::Encoded(pk) => pk.value(r).cmp(key),
            RowKeys::Typed(cols) => cols
                .iter()
                .zip(dec)
                .map(|(c, v)| c.row_vs(r, v))
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal),
        }
    }
}

/// One attribute column (a wide-layout struct) as an array of type `ty`,
/// NULL where the cell is absent, expired, or not exactly convertible.
pub(super) fn attr_array(st: &StructArray, ty: ValueType, cutoff: i64) -> Result<ArrayRef> {
    let n = st.len();
    let own = st.column_by_name(child_name(ty));
    let others: Vec<(ValueType, &ArrayRef)> = ValueType::ALL
        .iter()
        .filter(|t| **t != ty)
        .filter_map(|t| st.column_by_name(child_name(*t)).map(|a| (*t, a)))
        .collect();
    let mut out: ArrayRef = if others.is_empty() {
        match own {
            Some(a) => a.clone(),
            None => new_null_array(&arrow_type(ty), n),
        }
    } else {
        // Mixed types in this segment: convert row by row.
        let mut b = ColBuilder::new(ty);
        for r in 0..n {
            let v = own
                .and_then(|a| value_at(ty, a, r))
                .or_else(|| others.iter().find_map(|(t, a)| value_at(*t, a, r)));
            b.push(v.as_ref());
        }
        b.finish()
    };
    if cutoff > i64::MIN
        && let Some(ts) = st
            .column_by_name(format::TS)
            .and_then(|t| t.as_primitive_opt::<Int64Type>())
    {
        let expired = cmp::lt(ts, &Int64Array::new_scalar(cutoff))?;
        out = nullif(&out, &expired)?;
    }
    Ok(out)
}

pub(super) fn value_at(t: ValueType, a: &ArrayRef, r: usize) -> Option<Value> {
    if a.is_null(r) {
        return None;
    }
    Some(match t {
        ValueType::Integer => Value::Integer(a.as_primitive_opt::<Int64Type>()?.value(r)),
        ValueType::Double => Value::Double(a.as_primitive_opt::<arrow::datatypes::Float64Type>()?.value(r)),
        ValueType::String => match a.as_string_view_opt() {
            Some(v) => Value::String(v.value(r).to_string()),
            None => Value::String(a.as_string_opt::<i32>()?.value(r).to_string()),
        },
        ValueType::Binary => Value::Binary(a.as_binary_opt::<i32>()?.value(r).to_vec()),
        ValueType::Boolean => Value::Boolean(a.as_boolean_opt()?.value(r)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_are_exact_or_null() {
        use ValueType::*;
        assert_eq!(convert(&Value::Integer(3), Double), Some(Value::Double(3.0)));
        assert_eq!(convert(&Value::Integer(i64::MAX), Double), None);
        assert_eq!(convert(&Value::Double(2.0), Integer), Some(Value::Integer(2)));
        assert_eq!(convert(&Value::Double(2.5), Integer), None);
        assert_eq!(convert(&Value::Double(1e19), Integer), None);
        assert_eq!(convert(&Value::String("42".into()), Integer), Some(Value::Integer(42)));
        assert_eq!(convert(&Value::String("042".into()), Integer), None);
        assert_eq!(convert(&Value::String("x".into()), Double), None);
        assert_eq!(convert(&Value::Integer(7), String), Some(Value::String("7".into())));
        assert_eq!(
            convert(&Value::Boolean(true), String),
            Some(Value::String("true".into()))
        );
        assert_eq!(convert(&Value::Binary(vec![0xff]), String), None);
        assert_eq!(
            convert(&Value::Binary(b"ok".to_vec()), String),
            Some(Value::String("ok".into()))
        );
        assert_eq!(convert(&Value::Integer(1), Boolean), None);
    }
}
