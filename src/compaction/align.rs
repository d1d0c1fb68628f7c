//! Input batches brought to the output layout of a merge: the union of the
//! inputs' attribute columns and value types, and `__max_ts` for segments
//! written before it existed.
//!
//! Invariant: alignment adds only what reads would infer anyway (absent
//! cells, absent value children, the derived newest version); no value of
//! the input changes.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Builder, RecordBatch, StructArray, make_array, new_null_array};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Fields, Int64Type, SchemaRef, UInt16Type};

use crate::error::{Error, Result};
use crate::segment::format::{self};

/// `batch` (as stored in one input) in the output layout: attribute
/// columns the input lacks are all null, struct children for value types
/// it lacks are null, and `__max_ts` is derived for segments written
/// before it existed.
pub(super) fn align(batch: &RecordBatch, schema: &SchemaRef, npk: usize) -> Result<RecordBatch> {
    let n = batch.num_rows();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let have = batch.column_by_name(field.name());
        let col: ArrayRef = match (field.data_type(), have) {
            (DataType::Struct(fields), Some(a)) => {
                let st = a
                    .as_struct_opt()
                    .ok_or_else(|| Error::corruption(format!("column {} is not a struct", field.name())))?;
                let children = fields
                    .iter()
                    .map(|f| match st.column_by_name(f.name()) {
                        Some(c) if c.data_type() == f.data_type() => Ok(c.clone()),
                        Some(c) => Err(Error::corruption(format!(
                            "column {}.{} has type {}, expected {}",
                            field.name(),
                            f.name(),
                            c.data_type(),
                            f.data_type()
                        ))),
                        None => Ok(new_null_array(f.data_type(), n)),
                    })
                    .collect::<Result<Vec<_>>>()?;
                // Older segments mark an absent cell on the struct: it
                // moves to the children (the output struct is required).
                let children = match st.nulls() {
                    None => children,
                    Some(absent) => children
                        .into_iter()
                        .map(|c| {
                            let nulls = NullBuffer::union(Some(absent), c.nulls());
                            Ok(make_array(c.into_data().into_builder().nulls(nulls).build()?))
                        })
                        .collect::<std::result::Result<Vec<_>, arrow::error::ArrowError>>()?,
                };
                Arc::new(StructArray::try_new(fields.clone(), children, None)?)
            }
            (DataType::Struct(fields), None) => absent_column(fields, n),
            (t, Some(a)) if a.data_type() == t => a.clone(),
            (_, None) if field.name() == format::MAX_TS => derive_max_ts(batch, npk)?,
            (t, _) => {
                return Err(Error::corruption(format!(
                    "column {} is missing or not of type {t}",
                    field.name()
                )));
            }
        };
        columns.push(col);
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// An attribute column with no cell, written as the row builder writes an
/// absent cell (no version, no value).
fn absent_column(fields: &Fields, n: usize) -> ArrayRef {
    let children = fields.iter().map(|f| new_null_array(f.data_type(), n)).collect();
    Arc::new(StructArray::new(fields.clone(), children, None))
}

/// `__max_ts` of rows from a segment without it: on rank 0, the newest of
/// the row marker and every cell's version; null when there is none.
fn derive_max_ts(batch: &RecordBatch, npk: usize) -> Result<ArrayRef> {
    let col = |name: &str| format::column(batch, name);
    let rank = col(format::RANK)?.as_primitive::<UInt16Type>();
    let row_ts = col(format::ROW_TS)?.as_primitive::<Int64Type>();
    let attrs: Vec<(&StructArray, Option<NullBuffer>)> = batch.columns()[npk + 6..]
        .iter()
        .filter_map(|a| a.as_struct_opt())
        .map(|st| (st, format::cell_present(st)))
        .collect();
    let mut out = Int64Builder::with_capacity(batch.num_rows());
    for r in 0..batch.num_rows() {
        let mut newest = (rank.value(r) == 0 && row_ts.is_valid(r)).then(|| row_ts.value(r));
        if rank.value(r) == 0 {
            for (st, present) in &attrs {
                if present.as_ref().is_none_or(|p| p.is_valid(r)) {
                    let ts = st.column(0).as_primitive::<Int64Type>().value(r);
                    newest = Some(newest.map_or(ts, |t| t.max(ts)));
                }
            }
        }
        out.append_option(newest);
    }
    Ok(Arc::new(out.finish()))
}
