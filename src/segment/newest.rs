//! Newest rows: segment files whose columns hold only each key's rank-0
//! row, its older versions living in `__cells` alone.
//!
//! The wide layout gives a key one row per rank: rank 0 holds the newest
//! version of every column, rank 1 the next, and so on. A SQL scan of the
//! latest rows then decodes every rank and filters the older ones out,
//! reading `__rank` and copying each projected column through the filter
//! (a third of a quiet GROUP BY over a table where a tenth of the keys have
//! three versions). Yet a file with `__cells` already holds every version
//! of every key there, where point reads, range reads and version reads
//! take them from. So such a file keeps only the rank-0 rows in its
//! columns, and marks itself with the footer entry `cellar.rows = newest`
//! ([`format::newest_rows`] reads it).
//!
//! - Writing: [`keep_newest`] drops the older ranks of a batch after its
//!   `__cells` was computed from all of them.
//! - Compaction, the one reader of older ranks in the columns, gets them
//!   back with [`with_older_versions`]: a key with more than one version
//!   is decoded from its `__cells` and encoded into its rows again;
//!   every other row stays as read.
//! - A scan of the latest rows needs nothing: every row is a rank-0 row
//!   (the file's row count equals its key count).
//!
//! Invariant: the columns of a newest-rows file are exactly the rank-0 rows
//! of the full layout of the same keys, and `__cells` is what it would be
//! there; [`with_older_versions`] returns exactly the full layout.

use arrow::array::{Array, AsArray, RecordBatch, UInt16Array};
use arrow::compute::{filter_record_batch, interleave_record_batch};
use arrow::datatypes::UInt16Type;

use super::cells::{decode_cells, ranks};
use super::format;
use crate::error::{Error, Result};
use crate::model::schema::TableSchema;
use crate::model::types::TypeSet;

/// The rank-0 rows of `batch` (whole keys in the layout, any extra columns
/// such as `__cells` kept alongside).
pub(crate) fn keep_newest(batch: &RecordBatch) -> Result<RecordBatch> {
    let rank: &UInt16Array = format::column(batch, format::RANK)?.as_primitive::<UInt16Type>();
    if rank.values().iter().all(|r| *r == 0) {
        return Ok(batch.clone());
    }
    let keep = arrow::compute::kernels::cmp::eq(rank, &UInt16Array::new_scalar(0))?;
    Ok(filter_record_batch(batch, &keep)?)
}

/// The full layout (every rank of every key, no `__cells`) of a batch read
/// from a newest-rows file with every column, `__cells` included, and its
/// versions absolute. `columns`: the file's attribute columns and the
/// value types they hold, in the file's order (its manifest entry).
pub(crate) fn with_older_versions(
    batch: &RecordBatch,
    table: &TableSchema,
    columns: &[(String, TypeSet)],
) -> Result<RecordBatch> {
    let schema = batch.schema();
    let at = schema
        .index_of(format::CELLS)
        .map_err(|_| Error::corruption("a segment of newest rows has no __cells"))?;
    let cells = batch
        .column(at)
        .as_binary_opt::<i32>()
        .ok_or_else(|| Error::corruption("__cells is not binary"))?;
    let others: Vec<usize> = (0..schema.fields().len()).filter(|&i| i != at).collect();
    let rows = batch.project(&others)?;
    let out_schema = rows.schema();
    // The file's attribute columns, in the order a `__cells` index names.
    let names: Vec<String> = columns.iter().map(|(n, _)| n.clone()).collect();
    let pk = format::column(&rows, format::PK)?.as_binary::<i32>();
    // Keys of several versions, decoded; every key's rows as (source,
    // row): 0 the batch as read, 1 those keys encoded again.
    let mut states = Vec::new();
    let mut take: Vec<(usize, usize)> = Vec::with_capacity(rows.num_rows());
    let mut encoded_rows = 0;
    for r in 0..rows.num_rows() {
        if cells.is_null(r) {
            return Err(Error::corruption("a key of a segment of newest rows has no __cells"));
        }
        let n = ranks(cells.value(r))?;
        if n <= 1 {
            take.push((0, r));
            continue;
        }
        states.push((pk.value(r).to_vec(), decode_cells(cells.value(r), &names, None)?));
        take.extend((encoded_rows..encoded_rows + n).map(|i| (1, i)));
        encoded_rows += n;
    }
    if states.is_empty() {
        return Ok(rows);
    }
    let encoded = super::encode_states(table, columns, &out_schema, &states)?;
    if encoded.num_rows() != encoded_rows {
        return Err(Error::corruption(
            "a key's __cells and its rows disagree on its versions",
        ));
    }
    Ok(interleave_record_batch(&[&rows, &encoded], &take)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::key::{KeyRange, encode_integer};
    use crate::model::row::{ColumnState, RowState};
    use crate::model::types::{PkType, Value};
    use arrow::datatypes::DataType;

    fn state(versions: &[(i64, f64)], note: Option<&str>) -> RowState {
        let mut st = RowState {
            seq: 7,
            replace: true,
            ..Default::default()
        };
        st.columns.insert(
            "amount".to_string(),
            ColumnState {
                versions: versions.iter().map(|(v, x)| (*v, Value::Double(*x))).collect(),
                ..Default::default()
            },
        );
        if let Some(n) = note {
            st.columns.insert(
                "note".to_string(),
                ColumnState {
                    versions: vec![(5, Value::String(n.to_string()))],
                    ..Default::default()
                },
            );
        }
        st
    }

    /// Dropping the older ranks after `__cells` was computed, then bringing
    /// them back, gives the full layout again, row for row.
    #[test]
    fn older_versions_come_back_from_cells() {
        let table = TableSchema::new("t").pk("k", PkType::Integer);
        let columns = vec![("amount".to_string(), TypeSet(2)), ("note".to_string(), TypeSet(4))];
        let schema = format::arrow_schema(&table, &columns);
        let states: Vec<(Vec<u8>, RowState)> = [
            state(&[(3, 1.5)], Some("a")),
            state(&[(9, 2.0), (8, 1.0), (2, -0.0)], None),
            state(&[(4, 4.0)], None),
            state(&[(6, 6.0), (1, 0.5)], Some("b")),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, st)| (encode_integer(i as i64).to_vec(), st))
        .collect();
        let full = super::super::encode_states(&table, &columns, &schema, &states).unwrap();
        assert_eq!(full.num_rows(), 1 + 3 + 1 + 2);
        let cells = super::super::cells::encode_cells(&full).unwrap();
        let mut with_cells = full.columns().to_vec();
        with_cells.push(cells);
        let file = RecordBatch::try_new(format::file_schema(&schema), with_cells).unwrap();
        let newest = keep_newest(&file).unwrap();
        assert_eq!(newest.num_rows(), 4);
        let back = with_older_versions(&newest, &table, &columns).unwrap();
        assert_eq!(back, full);
        let mut decoded = Vec::new();
        super::super::decode_batch(&back, &KeyRange::all(), &mut decoded).unwrap();
        assert_eq!(decoded, states);
        // A batch whose keys all hold one version comes back as read.
        let one = newest.slice(2, 1);
        assert_eq!(with_older_versions(&one, &table, &columns).unwrap(), full.slice(4, 1));
    }

    /// A newest-rows batch without `__cells`, or a key without its value,
    /// is an error, not a loss of versions.
    #[test]
    fn missing_cells_are_an_error() {
        let table = TableSchema::new("t").pk("k", PkType::Integer);
        let columns = vec![("amount".to_string(), TypeSet(2))];
        let schema = format::arrow_schema(&table, &columns);
        let states = vec![(encode_integer(1).to_vec(), state(&[(2, 1.0), (1, 0.0)], None))];
        let full = super::super::encode_states(&table, &columns, &schema, &states).unwrap();
        let err = with_older_versions(&full, &table, &columns).unwrap_err();
        assert!(err.to_string().contains("no __cells"), "{err}");
        let mut cols = full.columns().to_vec();
        cols.push(arrow::array::new_null_array(&DataType::Binary, full.num_rows()));
        let file = RecordBatch::try_new(format::file_schema(&schema), cols).unwrap();
        let err = with_older_versions(&file, &table, &columns).unwrap_err();
        assert!(err.to_string().contains("has no __cells"), "{err}");
    }
}
