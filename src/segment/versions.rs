//! Cell versions stored relative to their key's newest version.
//!
//! A cell's version (its attribute's `ts` leaf) is almost always its row's
//! write time, which `__max_ts` already holds: cells written together
//! share it. Files whose footer carries [`KEY`] store each `ts` as
//! `base - ts` (wrapping), where `base` is the key's `__max_ts` (0 where
//! that is null), and hold the key's `__max_ts` on every rank of it, not
//! only on rank 0, so that each row carries its own base. Delta-coded, a
//! leaf of zeros costs a few bytes a page where random write times cost 3
//! to 4 bytes a cell (16 MB of 125 in the 1M-row compare table).
//!
//! Invariants: the conversion happens only at the file boundary. Batches
//! handed to a segment writer and every batch a segment reader hands out
//! are in the layout of `format` (absolute versions, `__max_ts` null on
//! ranks above 0), whatever the file holds; [`to_relative`] and
//! [`to_absolute`] are inverse on whole keys. The `ts` leaves' statistics
//! of such a file bound nothing: version bounds come from `__max_ts`'s
//! (which bounds every version of its key).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, StructArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{Int64Type, UInt16Type};
use futures::Stream;
use parquet::arrow::async_reader::ParquetRecordBatchStream;
use parquet::file::metadata::ParquetMetaData;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::format;
use super::reader::SegmentFileReader;
use crate::error::{Error, Result};

/// The footer key-value entry of files whose versions are relative.
pub(crate) const KEY: &str = "cellar.versions";
/// Its value: versions stored as `__max_ts - ts`.
pub(crate) const FROM_MAX_TS: &str = "from_max_ts";

/// Whether the file stores versions relative to `__max_ts`.
pub(crate) fn relative(md: &ParquetMetaData) -> bool {
    md.file_metadata().key_value_metadata().is_some_and(|kv| {
        kv.iter()
            .any(|e| e.key == KEY && e.value.as_deref() == Some(FROM_MAX_TS))
    })
}

/// `batch` (whole keys, the layout) as the file stores it: versions
/// relative to their key's `__max_ts`, which every rank of the key carries.
pub(crate) fn to_relative(batch: &RecordBatch) -> Result<RecordBatch> {
    let rank = column(batch, format::RANK)?.as_primitive::<UInt16Type>();
    let max_ts = column(batch, format::MAX_TS)?.as_primitive::<Int64Type>();
    if !rank.is_empty() && rank.value(0) != 0 {
        return Err(Error::corruption("rows written to a segment start inside a key"));
    }
    // Each row's base: the `__max_ts` of its key's rank-0 row.
    let mut base: Option<i64> = None;
    let bases: Int64Array = (0..batch.num_rows())
        .map(|r| {
            if rank.value(r) == 0 {
                base = max_ts.is_valid(r).then(|| max_ts.value(r));
            }
            base
        })
        .collect();
    convert(batch, &bases, bases.clone())
}

/// A batch read from a file with relative versions back in the layout.
/// `batch` must hold `__max_ts` if it holds any `ts` leaf, and `__rank` if
/// it holds `__max_ts` and the file has more than one rank of a key.
pub(crate) fn to_absolute(batch: &RecordBatch) -> Result<RecordBatch> {
    let Some(max_ts) = batch.column_by_name(format::MAX_TS) else {
        if batch.columns().iter().any(has_ts) {
            return Err(Error::corruption(
                "versions read without the __max_ts they are relative to",
            ));
        }
        return Ok(batch.clone());
    };
    let bases = max_ts.as_primitive::<Int64Type>().clone();
    // `__max_ts` is meaningful on rank 0 only, in the layout.
    let max_ts = match batch.column_by_name(format::RANK) {
        Some(rank) => {
            let rank = rank.as_primitive::<UInt16Type>();
            let keep = NullBuffer::from_iter((0..rank.len()).map(|r| rank.value(r) == 0));
            let nulls = NullBuffer::union(bases.nulls(), Some(&keep));
            Int64Array::new(bases.values().clone(), nulls)
        }
        None => bases.clone(),
    };
    convert(batch, &bases, max_ts)
}

/// A columnar stream of segment rows in the layout of `format`, whatever
/// the file stores (see the module's invariants).
pub(crate) struct SegmentBatchStream {
    inner: ParquetRecordBatchStream<SegmentFileReader>,
    /// Files with relative versions: the columns read only to convert
    /// them, left out of the batches handed out.
    convert: Option<Vec<String>>,
}

impl SegmentBatchStream {
    /// Over `inner`, which reads a file with relative versions when
    /// `convert` is set (and then holds the columns [`with_bases`] asked
    /// for).
    pub(crate) fn new(inner: ParquetRecordBatchStream<SegmentFileReader>, convert: Option<Vec<String>>) -> Self {
        SegmentBatchStream { inner, convert }
    }

    fn fix(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let Some(drop) = &self.convert else {
            return Ok(batch);
        };
        let batch = to_absolute(&batch)?;
        if drop.is_empty() {
            return Ok(batch);
        }
        let schema = batch.schema();
        let keep: Vec<usize> = (0..batch.num_columns())
            .filter(|&i| !drop.iter().any(|d| d == schema.field(i).name()))
            .collect();
        Ok(batch.project(&keep)?)
    }
}

impl Stream for SegmentBatchStream {
    type Item = parquet::errors::Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match Pin::new(&mut self.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(batch))) => Poll::Ready(Some(
                self.fix(batch)
                    .map_err(|e| parquet::errors::ParquetError::External(Box::new(e))),
            )),
            other => other,
        }
    }
}

/// The leaves to read of a file with relative versions for a caller that
/// wants `leaves`: those, `__max_ts` where a `ts` leaf is among them, and
/// `__rank` where `__max_ts` is read and a key may have several ranks.
/// Also the names of the columns added (to leave out of what is handed
/// out).
pub(crate) fn with_bases(md: &ParquetMetaData, mut leaves: Vec<usize>, ranks: bool) -> (Vec<usize>, Vec<String>) {
    let descr = md.file_metadata().schema_descr();
    let find = |name: &str| (0..descr.num_columns()).find(|&i| descr.column(i).path().parts() == [name.to_string()]);
    let mut added = Vec::new();
    let wants_ts = leaves.iter().any(|&i| {
        let column = descr.column(i);
        let parts = column.path().parts();
        parts.len() == 2 && parts[1] == format::TS
    });
    let mut add = |leaves: &mut Vec<usize>, name: &str| {
        if let Some(leaf) = find(name)
            && !leaves.contains(&leaf)
        {
            leaves.push(leaf);
            added.push(name.to_string());
        }
    };
    if wants_ts {
        add(&mut leaves, format::MAX_TS);
    }
    let reads_max_ts = find(format::MAX_TS).is_some_and(|m| leaves.contains(&m));
    if ranks && reads_max_ts {
        add(&mut leaves, format::RANK);
    }
    leaves.sort_unstable();
    (leaves, added)
}

/// Whether an attribute column holds a `ts` leaf.
fn has_ts(c: &ArrayRef) -> bool {
    c.as_struct_opt()
        .is_some_and(|st| st.column_by_name(format::TS).is_some())
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef> {
    batch
        .column_by_name(name)
        .ok_or_else(|| Error::corruption(format!("segment rows without {name}")))
}

/// `batch` with every `ts` leaf replaced by `base - ts` (wrapping; null
/// bases count as 0), which is its own inverse, and `__max_ts` replaced
/// by `max_ts`.
fn convert(batch: &RecordBatch, bases: &Int64Array, max_ts: Int64Array) -> Result<RecordBatch> {
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (field, c) in batch.schema().fields().iter().zip(batch.columns()) {
        if field.name() == format::MAX_TS {
            columns.push(Arc::new(max_ts.clone()) as ArrayRef);
            continue;
        }
        let Some(st) = c.as_struct_opt().filter(|st| st.column_by_name(format::TS).is_some()) else {
            columns.push(c.clone());
            continue;
        };
        let (fields, children, nulls) = st.clone().into_parts();
        let children = fields
            .iter()
            .zip(children)
            .map(|(f_, child)| {
                if f_.name() != format::TS {
                    return Ok(child);
                }
                let ts = child
                    .as_primitive_opt::<Int64Type>()
                    .ok_or_else(|| Error::corruption(format!("column {} has a ts of another type", field.name())))?;
                let values: Vec<i64> = ts
                    .values()
                    .iter()
                    .zip(bases.values().iter().zip(0..))
                    .map(|(&t, (&b, r))| if bases.is_valid(r) { b } else { 0 }.wrapping_sub(t))
                    .collect();
                Ok(Arc::new(Int64Array::new(values.into(), ts.nulls().cloned())) as ArrayRef)
            })
            .collect::<Result<Vec<_>>>()?;
        columns.push(Arc::new(StructArray::try_new(fields, children, nulls)?) as ArrayRef);
    }
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, UInt16Array};
    use arrow::datatypes::{DataType, Field, Fields, Schema};

    fn batch(rank: Vec<u16>, max_ts: Vec<Option<i64>>, ts: Vec<Option<i64>>) -> RecordBatch {
        let fields = Fields::from(vec![
            Field::new(format::TS, DataType::Int64, true),
            Field::new("d", DataType::Float64, true),
        ]);
        let n = ts.len();
        let st = StructArray::new(
            fields.clone(),
            vec![
                Arc::new(Int64Array::from(ts)) as ArrayRef,
                Arc::new(Float64Array::from(vec![Some(1.0); n])),
            ],
            None,
        );
        let schema = Arc::new(Schema::new(vec![
            Field::new(format::RANK, DataType::UInt16, false),
            Field::new(format::MAX_TS, DataType::Int64, true),
            Field::new("amount", DataType::Struct(fields), false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt16Array::from(rank)),
                Arc::new(Int64Array::from(max_ts)),
                Arc::new(st),
            ],
        )
        .unwrap()
    }

    /// Whole keys survive the round trip, versions at every edge included:
    /// a key without `__max_ts`, versions at i64's ends, older ranks.
    #[test]
    fn relative_versions_round_trip() {
        let b = batch(
            vec![0, 1, 2, 0, 0, 1, 0],
            vec![Some(100), None, None, None, Some(i64::MAX), None, Some(i64::MIN)],
            vec![
                Some(100),
                Some(90),
                Some(-5),
                None,
                Some(i64::MIN),
                Some(i64::MAX),
                Some(7),
            ],
        );
        let rel = to_relative(&b).unwrap();
        let stored = rel.column(2).as_struct().column(0).as_primitive::<Int64Type>().clone();
        assert_eq!(stored.value(0), 0);
        assert_eq!(stored.value(1), 10);
        assert_eq!(stored.value(2), 105);
        // Every rank carries its key's base.
        let m = rel.column(1).as_primitive::<Int64Type>();
        assert_eq!(
            m.iter().collect::<Vec<_>>(),
            [
                Some(100),
                Some(100),
                Some(100),
                None,
                Some(i64::MAX),
                Some(i64::MAX),
                Some(i64::MIN)
            ]
        );
        assert_eq!(to_absolute(&rel).unwrap(), b);
    }

    /// A batch of rows read mid-key (a row selection) converts on its own.
    #[test]
    fn rows_of_a_key_convert_without_its_first_row() {
        let b = batch(
            vec![0, 1, 2],
            vec![Some(100), None, None],
            vec![Some(100), Some(90), Some(80)],
        );
        let rel = to_relative(&b).unwrap();
        let tail = to_absolute(&rel.slice(1, 2)).unwrap();
        assert_eq!(tail, b.slice(1, 2));
    }

    #[test]
    fn versions_without_their_base_are_refused() {
        let b = batch(vec![0], vec![Some(1)], vec![Some(1)]);
        let without = b.project(&[0, 2]).unwrap();
        assert!(to_absolute(&without).is_err());
        assert!(to_relative(&without).is_err());
    }
}
