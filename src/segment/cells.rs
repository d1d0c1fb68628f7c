//! `__cells`: a key's whole state in one value, the row-oriented copy that
//! point reads and short range reads decode instead of the columns.
//!
//! The wide layout spreads a key over one leaf per attribute column and
//! value type (~50 leaves for 23 attributes), and a point read had to open
//! and position a reader on each. `__cells` holds, on the key's rank-0 row
//! (null on its other ranks), everything the other columns say about the
//! key: sequence, row flags, row marker, tombstones and every version of
//! every column, so that a read touches the `__pk` page that finds the key
//! and one `__cells` page. Scans never read it.
//!
//! ```text
//! cells  = u8(2) u8(flags) varint(seq) [zigzag(row_ts)] [bytes(tombstones)] varint(n) n x column
//! flags  = 1: replaces older sources, 2: row_ts follows, 4: tombstones follow
//! column = varint(index) varint(m) m x (zigzag(version - previous version) value)
//! ```
//!
//! `index` is the column's place among the file's attribute columns (the
//! struct columns, in schema order: [`attribute_names`]); the value is
//! computed when the file is written, so a copied row gets the indexes of
//! the file it is copied into. Versions are stored newest first per column, each as the difference
//! (wrapping) from the version written before it in the same value (0
//! before the first), so cells written together cost a byte each.
//! `tombstones` and `value` are the encodings of `__tomb` and of the WAL,
//! except that doubles are decimal-coded where that is exact (encoding 2,
//! since 2026-11-27; encoding 1 has 8-byte doubles only, and both read).
//!
//! Invariant: decoding a key's `__cells` gives exactly the state decoding
//! its rows' columns gives ([`encode_cells`] is computed from those rows
//! when a segment is written, whatever wrote them).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder, RecordBatch};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{Float64Type, Int64Type, UInt8Type, UInt16Type, UInt64Type};

use super::encode::decode_tombstones;
use super::format::{self, ROW_MERGE};
use crate::error::{Error, Result};
use crate::model::codec::{self, Decoder};
use crate::model::row::RowState;

/// What this build writes; it reads 1 and 2.
const VERSION: u8 = 2;
const REPLACE: u8 = 1;
const HAS_ROW_TS: u8 = 2;
const HAS_TOMB: u8 = 4;

/// One attribute column of a wide batch.
struct Attr<'a> {
    name: &'a str,
    present: Option<NullBuffer>,
    ts: &'a arrow::array::Int64Array,
    /// The value children, resolved once per batch.
    values: Vec<Child<'a>>,
}

/// One value child of an attribute column, typed.
enum Child<'a> {
    Int(&'a arrow::array::Int64Array),
    Double(&'a arrow::array::Float64Array),
    Str(&'a arrow::array::StringArray),
    StrView(&'a arrow::array::StringViewArray),
    Bin(&'a arrow::array::BinaryArray),
    Bool(&'a arrow::array::BooleanArray),
}

impl<'a> Child<'a> {
    fn of(name: &str, bit: u8, c: &'a ArrayRef) -> Result<Self> {
        let wrong = || Error::corruption(format!("column {name} has a value child of another type"));
        Ok(match bit {
            1 => Child::Int(c.as_primitive_opt::<Int64Type>().ok_or_else(wrong)?),
            2 => Child::Double(c.as_primitive_opt::<Float64Type>().ok_or_else(wrong)?),
            4 => match c.as_string_opt::<i32>() {
                Some(s) => Child::Str(s),
                None => Child::StrView(c.as_string_view_opt().ok_or_else(wrong)?),
            },
            8 => Child::Bin(c.as_binary_opt::<i32>().ok_or_else(wrong)?),
            _ => Child::Bool(c.as_boolean_opt().ok_or_else(wrong)?),
        })
    }

    /// Writes row `i`'s value in the WAL's encoding; false when it is null.
    fn put(&self, out: &mut Vec<u8>, i: usize) -> bool {
        let valid = match self {
            Child::Int(a) => a.is_valid(i),
            Child::Double(a) => a.is_valid(i),
            Child::Str(a) => a.is_valid(i),
            Child::StrView(a) => a.is_valid(i),
            Child::Bin(a) => a.is_valid(i),
            Child::Bool(a) => a.is_valid(i),
        };
        if !valid {
            return false;
        }
        match self {
            Child::Int(a) => {
                out.push(0);
                codec::put_i64(out, a.value(i));
            }
            Child::Double(a) => codec::put_double(out, a.value(i)),
            Child::Str(a) => {
                out.push(2);
                codec::put_bytes(out, a.value(i).as_bytes());
            }
            Child::StrView(a) => {
                out.push(2);
                codec::put_bytes(out, a.value(i).as_bytes());
            }
            Child::Bin(a) => {
                out.push(4);
                codec::put_bytes(out, a.value(i));
            }
            Child::Bool(a) => {
                out.push(3);
                out.push(a.value(i) as u8);
            }
        }
        true
    }
}

/// The `__cells` column of a batch in the wide layout holding whole keys
/// (every rank of each key): the state of each key on its rank-0 row, null
/// on the others.
pub(crate) fn encode_cells(batch: &RecordBatch) -> Result<ArrayRef> {
    let col = |name: &str| format::column(batch, name);
    let seq = col(format::SEQ)?.as_primitive::<UInt64Type>();
    let rank = col(format::RANK)?.as_primitive::<UInt16Type>();
    let row = col(format::ROW)?.as_primitive::<UInt8Type>();
    let row_ts = col(format::ROW_TS)?.as_primitive::<Int64Type>();
    let tomb = col(format::TOMB)?.as_binary::<i32>();
    let mut attrs = Vec::new();
    for (field, arr) in batch.schema_ref().fields().iter().zip(batch.columns()) {
        let Some(st) = arr.as_struct_opt() else { continue };
        let ts = st
            .column_by_name(format::TS)
            .and_then(|a| a.as_primitive_opt::<Int64Type>())
            .ok_or_else(|| Error::corruption(format!("column {} has no ts child", field.name())))?;
        let mut values = Vec::new();
        for (bit, child, _) in format::VALUE_CHILDREN.iter() {
            if let Some(c) = st.column_by_name(child) {
                values.push(Child::of(field.name(), *bit, c)?);
            }
        }
        attrs.push(Attr {
            name: field.name(),
            present: format::cell_present(st),
            ts,
            values,
        });
    }
    let n = batch.num_rows();
    let mut out = BinaryBuilder::with_capacity(n, n * 32);
    let mut buf = Vec::with_capacity(256);
    let mut body = Vec::with_capacity(256);
    let mut r = 0;
    while r < n {
        if rank.value(r) != 0 {
            return Err(Error::corruption("a key's rows do not start at rank 0"));
        }
        let end = (r + 1..n).find(|&i| rank.value(i) == 0).unwrap_or(n);
        buf.clear();
        buf.push(VERSION);
        let mut flags = 0;
        if row.value(r) != ROW_MERGE {
            flags |= REPLACE;
        }
        if row_ts.is_valid(r) {
            flags |= HAS_ROW_TS;
        }
        if tomb.is_valid(r) {
            flags |= HAS_TOMB;
        }
        buf.push(flags);
        codec::put_varint(&mut buf, seq.value(r));
        if row_ts.is_valid(r) {
            codec::put_i64(&mut buf, row_ts.value(r));
        }
        if tomb.is_valid(r) {
            codec::put_bytes(&mut buf, tomb.value(r));
        }
        let mut columns = 0u64;
        let mut prev = 0i64;
        body.clear();
        for (index, a) in attrs.iter().enumerate() {
            let here = |i: usize| a.present.as_ref().is_none_or(|p| p.is_valid(i));
            let m = (r..end).filter(|&i| here(i)).count();
            if m == 0 {
                continue;
            }
            columns += 1;
            codec::put_varint(&mut body, index as u64);
            codec::put_varint(&mut body, m as u64);
            for i in (r..end).filter(|&i| here(i)) {
                let ts = a.ts.value(i);
                codec::put_i64(&mut body, ts.wrapping_sub(prev));
                prev = ts;
                if !a.values.iter().any(|c| c.put(&mut body, i)) {
                    return Err(Error::corruption(format!(
                        "column {} has a version without a value",
                        a.name
                    )));
                }
            }
        }
        codec::put_varint(&mut buf, columns);
        buf.extend_from_slice(&body);
        out.append_value(&buf);
        for _ in r + 1..end {
            out.append_null();
        }
        r = end;
    }
    Ok(Arc::new(out.finish()))
}

/// The attribute columns of a segment file in schema order: what a
/// `__cells` column index names.
pub(crate) fn attribute_names(schema: &parquet::schema::types::SchemaDescriptor) -> Vec<String> {
    schema
        .root_schema()
        .get_fields()
        .iter()
        .filter(|f| f.is_group() && !f.name().starts_with("__"))
        .map(|f| f.name().to_string())
        .collect()
}

/// A decoder past a `__cells` value's encoding byte, and its flags.
fn open(bytes: &[u8]) -> Result<(Decoder<'_>, u8)> {
    let mut d = Decoder::new(bytes, "segment __cells");
    let version = d.u8()?;
    if !(1..=VERSION).contains(&version) {
        return Err(Error::corruption(format!(
            "segment __cells: unknown encoding {version} (this build reads 1 to {VERSION})"
        )));
    }
    let flags = d.u8()?;
    Ok((d, flags))
}

/// The state in a `__cells` value of a file whose attribute columns are
/// `names`; `columns`: the attribute columns to keep (`None`: all;
/// tombstones are kept whatever the projection, as the columnar decoders
/// keep them).
pub(crate) fn decode_cells(bytes: &[u8], names: &[String], columns: Option<&[String]>) -> Result<RowState> {
    let (mut d, flags) = open(bytes)?;
    let mut st = RowState {
        seq: d.varint()?,
        replace: flags & REPLACE != 0,
        row_ts: None,
        columns: Default::default(),
    };
    if flags & HAS_ROW_TS != 0 {
        st.row_ts = Some(d.i64()?);
    }
    if flags & HAS_TOMB != 0 {
        decode_tombstones(d.bytes()?, &mut st)?;
    }
    let n = d.varint()?;
    let mut prev = 0i64;
    for _ in 0..n {
        let index = d.varint()?;
        let m = d.len()?;
        let name = usize::try_from(index).ok().and_then(|i| names.get(i)).ok_or_else(|| {
            Error::corruption(format!(
                "segment __cells: column {index} of a file with {} attribute columns",
                names.len()
            ))
        })?;
        let keep = columns.is_none_or(|c| c.iter().any(|c| c == name));
        let mut versions = Vec::with_capacity(if keep { m } else { 0 });
        for _ in 0..m {
            prev = prev.wrapping_add(d.i64()?);
            if keep {
                versions.push((prev, d.value()?));
            } else {
                d.skip_value()?;
            }
        }
        if keep {
            st.columns.entry(name.clone()).or_default().versions = versions;
        }
    }
    if !d.is_empty() {
        return Err(Error::corruption("segment __cells: bytes after the last column"));
    }
    Ok(st)
}

/// The most versions any one column holds in a `__cells` value: the
/// number of rows the key takes in the full layout (at least 1 there),
/// read without decoding a value.
pub(crate) fn ranks(bytes: &[u8]) -> Result<usize> {
    let (mut d, flags) = open(bytes)?;
    d.varint()?;
    if flags & HAS_ROW_TS != 0 {
        d.i64()?;
    }
    if flags & HAS_TOMB != 0 {
        d.bytes()?;
    }
    let mut most = 0;
    for _ in 0..d.varint()? {
        d.varint()?;
        let m = d.len()?;
        most = most.max(m);
        for _ in 0..m {
            d.i64()?;
            d.skip_value()?;
        }
    }
    if !d.is_empty() {
        return Err(Error::corruption("segment __cells: bytes after the last column"));
    }
    Ok(most)
}

/// Checks that every key's `__cells` in a whole segment file states what
/// its columns state (the two copies are written together, so a difference
/// is a writer's bug or damage that still decodes). A file without
/// `__cells` passes.
pub(crate) fn verify_cells(path: &str, bytes: bytes::Bytes) -> Result<()> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    super::no_panic(path, || {
        let bad = |e: &dyn std::fmt::Display| Error::corruption(format!("segment {path} does not decode: {e}"));
        let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| bad(&e))?;
        if builder.schema().field_with_name(format::CELLS).is_err() {
            return Ok(());
        }
        let names = attribute_names(builder.parquet_schema());
        let relative = super::versions::relative(builder.metadata());
        // Columns of newest rows state each column's newest version only.
        let newest = format::newest_rows(builder.metadata());
        let reader = builder.with_batch_size(8192).build().map_err(|e| bad(&e))?;
        let mut columns: Vec<(Vec<u8>, RowState)> = Vec::new();
        let mut cells: Vec<RowState> = Vec::new();
        let compare = |columns: &mut Vec<(Vec<u8>, RowState)>, cells: &mut Vec<RowState>, keep: usize| -> Result<()> {
            if columns.len() != cells.len() {
                return Err(Error::corruption(format!(
                    "segment {path}: {} keys in its columns but {} in __cells",
                    columns.len(),
                    cells.len()
                )));
            }
            let done = columns.len().saturating_sub(keep);
            for ((key, want), got) in columns.drain(..done).zip(cells.drain(..done)) {
                if want != got {
                    return Err(Error::corruption(format!(
                        "segment {path}: key {} has __cells {got:?} but its columns say {want:?}",
                        super::hex_encode(&key)
                    )));
                }
            }
            Ok(())
        };
        for batch in reader {
            let mut batch = batch.map_err(|e| bad(&e))?;
            if relative {
                batch = super::versions::to_absolute(&batch).map_err(|e| bad(&e.message()))?;
            }
            super::decode_batch(&batch, &crate::model::key::KeyRange::all(), &mut columns)
                .map_err(|e| bad(&e.message()))?;
            let col = batch
                .column_by_name(format::CELLS)
                .and_then(|c| c.as_binary_opt::<i32>())
                .ok_or_else(|| bad(&"__cells is not binary"))?;
            for v in col.iter().flatten() {
                let mut st = decode_cells(v, &names, None).map_err(|e| bad(&e.message()))?;
                if newest {
                    for c in st.columns.values_mut() {
                        c.versions.truncate(1);
                    }
                }
                cells.push(st);
            }
            // The last key may go on in the next batch.
            compare(&mut columns, &mut cells, 1)?;
        }
        compare(&mut columns, &mut cells, 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::key::KeyRange;
    use crate::model::row::ColumnState;
    use crate::model::schema::TableSchema;
    use crate::model::types::{PkType, TypeSet, Value};
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i64>().prop_map(Value::Integer),
            any::<f64>().prop_map(Value::Double),
            (-100_000_000i64..100_000_000).prop_map(|c| Value::Double(c as f64 / 100.0)),
            ".{0,12}".prop_map(Value::String),
            any::<bool>().prop_map(Value::Boolean),
            proptest::collection::vec(any::<u8>(), 0..12).prop_map(Value::Binary),
        ]
    }

    fn version() -> impl Strategy<Value = i64> {
        prop_oneof![
            any::<i64>(),
            Just(i64::MIN),
            Just(i64::MAX),
            0i64..5,
            1_700_000_000_000i64..1_700_000_000_010
        ]
    }

    fn column() -> impl Strategy<Value = ColumnState> {
        (
            proptest::collection::btree_map(version(), value(), 0..4),
            any::<bool>(),
            proptest::collection::btree_set(version(), 0..3),
        )
            .prop_map(|(versions, delete_all, deleted)| ColumnState {
                versions: versions.into_iter().rev().collect(),
                delete_all,
                deleted: deleted.into_iter().collect(),
            })
    }

    fn state() -> impl Strategy<Value = RowState> {
        (
            any::<u64>(),
            any::<bool>(),
            proptest::option::of(version()),
            proptest::collection::btree_map(
                prop_oneof![Just("a"), Just("b"), Just("c d"), Just("é")],
                column(),
                0..4,
            ),
        )
            .prop_map(|(seq, replace, row_ts, cols)| {
                let mut columns = std::collections::BTreeMap::new();
                for (name, mut c) in cols {
                    if replace {
                        // A state that replaces older sources has no tombstones.
                        c.delete_all = false;
                        c.deleted.clear();
                    }
                    if !c.versions.is_empty() || c.delete_all || !c.deleted.is_empty() {
                        columns.insert(name.to_string(), c);
                    }
                }
                RowState {
                    seq,
                    replace,
                    row_ts,
                    columns,
                }
            })
    }

    fn table() -> TableSchema {
        TableSchema::new("t").pk("k", PkType::Integer)
    }

    /// The columns (and every type they hold) of `states`.
    fn columns_of(states: &[(Vec<u8>, RowState)]) -> Vec<(String, TypeSet)> {
        let mut m: std::collections::BTreeMap<String, [u64; 5]> = Default::default();
        for (_, st) in states {
            for (name, c) in &st.columns {
                let counts = m.entry(name.clone()).or_default();
                for (_, v) in &c.versions {
                    counts[v.value_type().index()] += 1;
                }
            }
        }
        m.into_iter().map(|(n, c)| (n, TypeSet::from_counts(&c))).collect()
    }

    proptest! {
        /// `__cells` decodes to what the columns of the same rows decode to,
        /// whole and projected.
        #[test]
        fn cells_decode_as_the_columns_do(states in proptest::collection::vec(state(), 1..6)) {
            let t = table();
            let states: Vec<(Vec<u8>, RowState)> = states
                .into_iter()
                .enumerate()
                .map(|(i, st)| (crate::model::key::encode_integer(i as i64).to_vec(), st))
                .collect();
            let columns = columns_of(&states);
            let schema = format::arrow_schema(&t, &columns);
            let batch = super::super::encode_states(&t, &columns, &schema, &states).unwrap();
            let cells = encode_cells(&batch).unwrap();
            let names: Vec<String> = columns.iter().map(|(n, _)| n.clone()).collect();
            let cells = cells.as_binary::<i32>();
            let mut decoded = Vec::new();
            super::super::decode_batch(&batch, &KeyRange::all(), &mut decoded).unwrap();
            let mut at = 0;
            let rank = batch.column_by_name(format::RANK).unwrap().as_primitive::<UInt16Type>();
            for (key, st) in &decoded {
                while rank.value(at) != 0 { prop_assert!(cells.is_null(at)); at += 1; }
                prop_assert!(cells.is_valid(at));
                prop_assert_eq!(&decode_cells(cells.value(at), &names, None).unwrap(), st, "key {:?}", key);
                let only_a = vec!["a".to_string()];
                let mut want = st.clone();
                want.columns.retain(|n, c| n == "a" || c.delete_all || !c.deleted.is_empty());
                for (n, c) in want.columns.iter_mut() {
                    if n != "a" { c.versions.clear(); }
                }
                prop_assert_eq!(decode_cells(cells.value(at), &names, Some(&only_a)).unwrap(), want);
                at += 1;
            }
        }
    }

    /// Files written before decimal-coded doubles (encoding 1) read as
    /// they did, and the two encodings of one state decode the same.
    #[test]
    fn both_encodings_read() {
        let names = ["a".to_string()];
        let mut v1 = vec![1, 0, 5, 1, 0, 1, 14, 1];
        v1.extend_from_slice(&42.37f64.to_le_bytes());
        let mut v2 = vec![2, 0, 5, 1, 0, 1, 14];
        codec::put_double(&mut v2, 42.37);
        assert_eq!(v2.len(), 10, "{v2:?}");
        let want = decode_cells(&v1, &names, None).unwrap();
        assert_eq!(want.seq, 5);
        assert_eq!(want.columns["a"].versions, vec![(7, Value::Double(42.37))]);
        assert_eq!(decode_cells(&v2, &names, None).unwrap(), want);
        assert_eq!(ranks(&v1).unwrap(), 1);
        assert_eq!(ranks(&v2).unwrap(), 1);
    }

    #[test]
    fn damaged_cells_are_an_error_not_a_panic() {
        for bytes in [
            &[][..],
            &[3, 0, 0, 0],
            &[0, 0, 0, 0],
            &[1, 0, 5],
            &[2, 0, 1, 1, 0, 1, 0, 32, 0],
            &[2, 0, 1, 1, 0, 1, 0, 18],
            &[1, 0, 1, 1, 3, 1],
            &[1, 0, 1, 0, 7],
            &[1, 0, 1, 1, 0, 1, 0, 0, 0, 9],
        ] {
            assert!(decode_cells(bytes, &["a".to_string()], None).is_err(), "{bytes:?}");
        }
    }
}
