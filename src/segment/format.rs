//! The wide segment layout (see `docs/format.md`, "Segments").
//!
//! One Parquet row per (key, rank): rank 0 holds the newest version of every
//! column of the key, rank 1 the next, and so on. Columns:
//!
//! | column      | type                     | meaning                                     |
//! |-------------|--------------------------|---------------------------------------------|
//! | `__pk`      | Binary                   | memcomparable key, ascending                |
//! | PK columns  | Int64 / Utf8 / Binary    | the key's typed values (statistics, SQL)    |
//! | `__seq`     | UInt64                   | newest write sequence folded into the key   |
//! | `__rank`    | UInt16                   | 0 = newest version of each column           |
//! | `__row`     | UInt8                    | 0 merge, 1 replaces older sources, 2 deleted|
//! | `__row_ts`  | Int64, nullable          | row marker of a PK-only PutRow              |
//! | `__tomb`    | Binary, nullable         | column / version tombstones (rank 0 only)   |
//! | `__max_ts`  | Int64, nullable          | newest version of any cell or row marker    |
//! | attribute c | Struct{ts, i, d, s, b, t}| version and value; one value child is set   |
//!
//! An attribute struct has only the value children whose type occurs in the
//! segment. The struct itself is required and an absent cell has a null
//! `ts` (and null values): every leaf then has one definition level, which
//! Parquet's reader decodes straight into a validity bitmap (a nullable
//! struct gave each value two levels, ~11% of an aggregate's time). Segments
//! written before this have a nullable struct with a required `ts`; readers
//! take a cell as present when both the struct slot and `ts` are valid
//! ([`cell_present`]), and compaction rewrites them in this layout.
//!
//! `__row`, `__row_ts`, `__tomb` and `__max_ts` are meaningful on rank 0
//! only. `__max_ts` (null: the key holds no value and no row marker
//! here) lets a SQL scan decide whether a row exists under the TTL without
//! reading every attribute column. Segments written before it existed lack
//! it; readers then look at every attribute's `ts`.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, Schema};

use crate::model::schema::TableSchema;
use crate::model::types::{PkType, TypeSet};

pub(crate) const PK: &str = "__pk";
pub(crate) const SEQ: &str = "__seq";
pub(crate) const RANK: &str = "__rank";
pub(crate) const ROW: &str = "__row";
pub(crate) const ROW_TS: &str = "__row_ts";
pub(crate) const TOMB: &str = "__tomb";
pub(crate) const MAX_TS: &str = "__max_ts";
pub(crate) const TS: &str = "ts";
/// The last column of a file: each key's whole state, row-encoded (see
/// `segment::cells`).
pub(crate) const CELLS: &str = "__cells";

/// The Parquet key-value metadata entry listing, as a JSON array, the
/// attribute columns whose double values include a NaN (Parquet's min/max
/// statistics leave NaN out). Files written before it lack the entry:
/// their double bounds are not trusted.
pub(crate) const NAN_COLUMNS: &str = "cellar.nan_columns";
/// Whether the file's metadata proves column `name`'s doubles hold no NaN
/// (so their min/max statistics bound every value as SQL orders them).
pub(crate) fn doubles_without_nan(md: &parquet::file::metadata::ParquetMetaData, name: &str) -> bool {
    let Some(entry) = md
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|e| e.key == NAN_COLUMNS))
    else {
        return false;
    };
    match entry.value.as_deref().map(serde_json::from_str::<Vec<String>>) {
        Some(Ok(names)) => !names.iter().any(|n| n == name),
        _ => false,
    }
}

/// The footer key-value metadata entry of a file of newest rows
/// (`segment::newest`): its columns hold only each key's rank-0 row.
pub(crate) const ROWS_KEY: &str = "cellar.rows";
pub(crate) const ROWS_NEWEST: &str = "newest";

/// Whether the file holds only rank-0 rows in its columns.
pub(crate) fn newest_rows(md: &parquet::file::metadata::ParquetMetaData) -> bool {
    md.file_metadata().key_value_metadata().is_some_and(|kv| {
        kv.iter()
            .any(|e| e.key == ROWS_KEY && e.value.as_deref() == Some(ROWS_NEWEST))
    })
}

/// The double value child of an attribute struct.
pub(crate) const VALUE_D: &str = "d";

pub(crate) const ROW_MERGE: u8 = 0;
pub(crate) const ROW_REPLACE: u8 = 1;
pub(crate) const ROW_DELETED: u8 = 2;

/// The value children in their fixed order: (bit, child name, arrow type).
pub(crate) const VALUE_CHILDREN: [(u8, &str, DataType); 5] = [
    (1, "i", DataType::Int64),
    (2, "d", DataType::Float64),
    (4, "s", DataType::Utf8),
    (8, "b", DataType::Binary),
    (16, "t", DataType::Boolean),
];

pub(crate) fn pk_arrow_type(t: PkType) -> DataType {
    match t {
        PkType::Integer => DataType::Int64,
        PkType::String => DataType::Utf8,
        PkType::Binary => DataType::Binary,
    }
}

pub(crate) fn struct_fields(types: TypeSet) -> Fields {
    let mut fields = vec![Field::new(TS, DataType::Int64, true)];
    for (bit, name, dt) in VALUE_CHILDREN.iter() {
        if types.has(*bit) {
            fields.push(Field::new(*name, dt.clone(), true));
        }
    }
    Fields::from(fields)
}

/// Where a cell of attribute column `st` is present: the struct slot (older
/// segments) and its `ts` are both valid. None: present everywhere.
pub(crate) fn cell_present(st: &arrow::array::StructArray) -> Option<arrow::buffer::NullBuffer> {
    use arrow::array::Array;
    let ts = st.column_by_name(TS).and_then(|a| a.logical_nulls());
    arrow::buffer::NullBuffer::union(st.nulls(), ts.as_ref())
}

/// The Arrow schema of a segment with these attribute columns (sorted).
pub(crate) fn arrow_schema(table: &TableSchema, columns: &[(String, TypeSet)]) -> Arc<Schema> {
    let mut fields = vec![Field::new(PK, DataType::Binary, false)];
    for c in &table.primary_key {
        fields.push(Field::new(&c.name, pk_arrow_type(c.pk_type), false));
    }
    fields.push(Field::new(SEQ, DataType::UInt64, false));
    fields.push(Field::new(RANK, DataType::UInt16, false));
    fields.push(Field::new(ROW, DataType::UInt8, false));
    fields.push(Field::new(ROW_TS, DataType::Int64, true));
    fields.push(Field::new(TOMB, DataType::Binary, true));
    fields.push(Field::new(MAX_TS, DataType::Int64, true));
    for (name, types) in columns {
        fields.push(Field::new(name, DataType::Struct(struct_fields(*types)), false));
    }
    Arc::new(Schema::new(fields))
}

/// Column `name` of a batch in the layout, or a corruption error naming it.
pub(crate) fn column<'a>(
    batch: &'a arrow::array::RecordBatch,
    name: &str,
) -> crate::error::Result<&'a dyn arrow::array::Array> {
    batch
        .column_by_name(name)
        .map(|a| a.as_ref())
        .ok_or_else(|| crate::error::Error::corruption(format!("missing column {name}")))
}

/// The schema of a segment file: the layout's columns (`layout`, an
/// [`arrow_schema`]) and `__cells` after them. Batches in memory (encoders,
/// merges, overlays) have the layout alone; the writer adds `__cells`.
pub(crate) fn file_schema(layout: &Schema) -> Arc<Schema> {
    let mut fields: Vec<Field> = layout.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(CELLS, DataType::Binary, true));
    Arc::new(Schema::new_with_metadata(fields, layout.metadata().clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::types::ValueType;

    /// A value child's bit is its type's bit in a [`TypeSet`].
    #[test]
    fn value_children_follow_the_type_bits() {
        for (t, (bit, _, _)) in ValueType::ALL.iter().zip(VALUE_CHILDREN.iter()) {
            assert_eq!(*bit, 1 << t.index());
            let mut counts = [0u64; 5];
            counts[t.index()] = 3;
            assert_eq!(TypeSet::from_counts(&counts), TypeSet(*bit));
        }
    }
}
