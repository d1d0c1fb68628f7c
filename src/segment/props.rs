//! The Parquet writer settings of segment files: the options a database
//! sets ([`SegmentWriteOptions`]) and what they become per column: codec,
//! encoding, page and dictionary limits, statistics and the `__pk` bloom
//! filter (`docs/format.md`, "Segments", lists them).
//!
//! Some settings are chosen from a segment's first batch of rows: string
//! key columns that are mostly distinct go without a dictionary, and so do
//! numbers a dictionary would not shrink. Invariant: every setting is a
//! choice Parquet readers follow from the file itself (encodings, codecs
//! and page sizes may differ per file and per column chunk); none changes
//! what a file means.

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Int64Type};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use super::format;
use crate::model::schema::TableSchema;
use crate::model::types::TypeSet;

/// Layout settings of new segments.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentWriteOptions {
    /// Rows per Parquet row group (a key's ranks never straddle two).
    /// Defaults to 16384.
    pub row_group_rows: usize,
    /// Rows written to Parquet at a time; where values are sometimes null,
    /// a page may run up to this many rows past `page_bytes`. Defaults to
    /// 256.
    pub page_rows: usize,
    /// Data pages end past this many encoded bytes. Defaults to 2 KiB.
    pub page_bytes: usize,
    /// Dictionary page limit of integer and double values (0: plain).
    pub numeric_dictionary_bytes: usize,
    /// Write `__cells` (see `cells`). Defaults to true.
    pub cells: bool,
    /// Store versions relative to their key's newest (`versions`).
    /// Defaults to true.
    pub relative_versions: bool,
    /// With `cells`: store only each key's newest row in the columns,
    /// older versions in `__cells` alone (`newest`). Defaults to true.
    pub newest_rows: bool,
    /// The value and system leaves (every leaf but `__pk`, the typed key
    /// columns and `__cells`): ZSTD at this level with pages cut past
    /// `value_page_bytes`, or (None, the default) as `value_lz4` says with
    /// pages cut like the rest. Point reads never decode these leaves (they read
    /// `__pk` and `__cells`); scans do, and memtable keys are placed by
    /// the key leaves, which stay small and LZ4 either way.
    pub value_zstd: Option<i32>,
    /// Page limit of the value and system leaves under `value_zstd`.
    pub value_page_bytes: usize,
    /// Without `value_zstd`: LZ4 on the value and system leaves (else
    /// they are stored as encoded). Defaults to false.
    pub value_lz4: bool,
    /// `__pk` and `__cells` (what point reads decode): ZSTD at this level
    /// instead of LZ4. Their pages are cut as without it.
    pub point_zstd: Option<i32>,
}

impl Default for SegmentWriteOptions {
    fn default() -> Self {
        SegmentWriteOptions {
            row_group_rows: 16 * 1024,
            page_rows: 256,
            page_bytes: 2 << 10,
            numeric_dictionary_bytes: 64 << 10,
            cells: true,
            relative_versions: true,
            newest_rows: true,
            value_zstd: None,
            value_page_bytes: 64 << 10,
            value_lz4: false,
            point_zstd: None,
        }
    }
}

/// Dictionary pages are read whole by every read of a column chunk, so
/// they are kept small: string and binary values get up to 64 KiB,
/// integer and double values up to `numeric_dictionary_bytes` (64 KiB by
/// default: repeated amounts or codes encode as small run-length indices,
/// which scans decode almost for free; point reads of segments with
/// `__cells` never read them); versions and sequence numbers are
/// delta-coded (`docs/decisions.md`, "Writer settings").
const DICTIONARY_PAGE_BYTES: usize = 64 * 1024;

/// The string and binary key columns whose values in `batch` (a
/// segment's first) are mostly distinct: they are written plain, without
/// a dictionary. A unique key column (order numbers, ids) filled the
/// 64 KiB dictionary page with a row group's first few thousand values and
/// then fell back to plain anyway, and placing memtable keys in it decoded
/// that page for every row group touched (`docs/decisions.md`). Columns
/// whose values repeat (regions, device kinds, a partition key with many
/// rows each) keep it.
pub(super) fn plain_key_columns(table: &TableSchema, batch: &RecordBatch) -> Vec<String> {
    /// Below this many values the sample says too little; keep the default.
    const MIN_SAMPLE: usize = 64;
    let mut plain = Vec::new();
    for c in &table.primary_key {
        let Some(col) = batch.column_by_name(&c.name) else {
            continue;
        };
        let values: Vec<&[u8]> = match col.data_type() {
            DataType::Utf8 => col.as_string::<i32>().iter().flatten().map(str::as_bytes).collect(),
            DataType::Binary => col.as_binary::<i32>().iter().flatten().collect(),
            _ => continue,
        };
        if values.len() < MIN_SAMPLE {
            continue;
        }
        let distinct: std::collections::HashSet<&[u8]> = values.iter().copied().collect();
        if distinct.len() * 2 > values.len() {
            plain.push(c.name.clone());
        }
    }
    plain
}

/// The integer and double value children and the versions (`ts`, as
/// stored) of attribute columns that a dictionary would not shrink,
/// judged on `batch` (a segment's first, as stored): they are written
/// without one (integers and versions as deltas, doubles plain). A
/// dictionary that fills up falls back for the rest of the row group but
/// is stored all the same: 64 KiB a row group for unique times or ids.
pub(super) fn numbers_without_dictionary(batch: &RecordBatch) -> Vec<ColumnPath> {
    /// Below this many values the sample says too little; keep the default.
    const MIN_SAMPLE: usize = 64;
    let mut out = Vec::new();
    for (field, col) in batch.schema().fields().iter().zip(batch.columns()) {
        let Some(st) = col.as_struct_opt() else { continue };
        for child in ["i", "d", format::TS] {
            let Some(values) = st.column_by_name(child) else {
                continue;
            };
            let (bits, delta): (Vec<u64>, bool) = match values.data_type() {
                DataType::Int64 => (
                    values
                        .as_primitive::<Int64Type>()
                        .iter()
                        .flatten()
                        .map(|v| v as u64)
                        .collect(),
                    true,
                ),
                DataType::Float64 => (
                    values
                        .as_primitive::<arrow::datatypes::Float64Type>()
                        .iter()
                        .flatten()
                        .map(f64::to_bits)
                        .collect(),
                    false,
                ),
                _ => continue,
            };
            if bits.len() < MIN_SAMPLE {
                continue;
            }
            let distinct = bits.iter().collect::<std::collections::HashSet<_>>().len();
            let n = bits.len();
            let dictionary = distinct * 8 + n * (usize::BITS - distinct.leading_zeros()) as usize / 8;
            let other = if delta { delta_bytes(&bits) } else { n * 8 };
            if dictionary >= other {
                out.push(ColumnPath::new(vec![field.name().clone(), child.to_string()]));
            }
        }
    }
    out
}

/// About what DELTA_BINARY_PACKED takes for `values` (as i64): each run
/// of 32 deltas packed at the width of its largest less its smallest.
fn delta_bytes(values: &[u64]) -> usize {
    let deltas: Vec<i64> = values
        .windows(2)
        .map(|w| (w[1] as i64).wrapping_sub(w[0] as i64))
        .collect();
    deltas
        .chunks(32)
        .map(|c| {
            let (lo, hi) = c
                .iter()
                .fold((i64::MAX, i64::MIN), |(lo, hi), &d| (lo.min(d), hi.max(d)));
            let width = 64 - (hi.wrapping_sub(lo) as u64).leading_zeros() as usize;
            4 + width * 4
        })
        .sum()
}

/// The most rows a page holds: 2048 by default. Parquet writes a leaf
/// with no nulls in one step per this many rows, whatever `page_bytes`
/// says, so this is the page size of dense value leaves (before, the row
/// group's 16k rows: a page per write batch of 8192). Page statistics skip
/// pages of this size; 1024, 2048, 4096 and 16384 scanned the same within
/// noise (BENCHMARKS.md, "Page statistics").
fn page_row_limit(opts: SegmentWriteOptions) -> usize {
    (opts.page_rows * PAGE_ROW_LIMIT_STEPS).clamp(opts.page_rows.max(1), opts.row_group_rows.max(opts.page_rows).max(1))
}

/// [`page_row_limit`] in write steps (`page_rows`).
const PAGE_ROW_LIMIT_STEPS: usize = 8;

pub(super) fn writer_properties(
    table: &TableSchema,
    columns: &[(String, TypeSet)],
    opts: SegmentWriteOptions,
    keys: usize,
    plain_keys: &[String],
    plain_numbers: &[ColumnPath],
) -> WriterProperties {
    let pk = ColumnPath::from(format::PK);
    let point_codec = match opts.point_zstd {
        Some(level) => Compression::ZSTD(ZstdLevel::try_new(level).unwrap_or_default()),
        None => Compression::LZ4_RAW,
    };
    // The value and system leaves' codec and page limit (see
    // `SegmentWriteOptions::value_zstd`); the key leaves and `__cells`
    // set theirs below.
    let (codec, value_page_bytes) = match opts.value_zstd {
        Some(level) => (
            Compression::ZSTD(ZstdLevel::try_new(level).unwrap_or_default()),
            opts.value_page_bytes.max(1),
        ),
        None if opts.value_lz4 => (Compression::LZ4_RAW, opts.page_bytes.max(1)),
        None => (Compression::UNCOMPRESSED, opts.page_bytes.max(1)),
    };
    let mut b = WriterProperties::builder()
        .set_dictionary_enabled(false)
        .set_dictionary_page_size_limit(DICTIONARY_PAGE_BYTES)
        .set_compression(codec)
        .set_max_row_group_row_count(None)
        .set_max_row_group_bytes(None)
        // Pages are cut by encoded size: plain numbers get 256 rows a page,
        // `__pk` a few hundred prefix-compressed keys, dictionary codes and
        // runs many more rows (fewer page headers and decoder set-ups in a
        // scan), and a point get still decompresses ~`page_bytes` per
        // column. (A 1-byte limit on `__pk` alone gave one key per page:
        // Parquet sizes byte-array batches by the limit.)
        .set_data_page_row_count_limit(page_row_limit(opts))
        .set_data_page_size_limit(value_page_bytes)
        .set_write_batch_size(opts.page_rows)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        // Exact key bounds: pruning compares against them byte for byte.
        .set_statistics_truncate_length(None)
        .set_column_index_truncate_length(None)
        .set_column_statistics_enabled(pk.clone(), EnabledStatistics::Page)
        .set_column_compression(pk.clone(), point_codec)
        .set_column_data_page_size_limit(pk.clone(), opts.page_bytes.max(1))
        .set_column_dictionary_enabled(pk.clone(), false)
        // Plain, not prefix-coded: a point get decodes the keys of a page
        // up to its own, and DELTA_BYTE_ARRAY rebuilt each into a fresh
        // buffer (2.3x the whole get's time, for 5% more bytes than plain
        // keys after LZ4).
        .set_column_encoding(pk.clone(), Encoding::PLAIN)
        .set_column_bloom_filter_enabled(pk.clone(), true)
        // 3%: Parquet rounds a filter up to a power of two, and 1% made
        // a full row group's 32 KiB (2.5% of a 10M-row table's bytes);
        // 3% is 16 KiB. A false positive costs a point read one `__pk`
        // page of a segment that lacks the key.
        .set_column_bloom_filter_fpp(pk.clone(), 0.03)
        .set_column_bloom_filter_max_ndv(pk, keys.clamp(1, opts.row_group_rows) as u64);
    // `__rank` and `__row`: a handful of distinct values (mostly 0), as
    // dictionary codes in runs: a few bytes a page, where plain 1- and
    // 2-byte values cost a byte or two a row without a codec on top.
    for path in [ColumnPath::from(format::RANK), ColumnPath::from(format::ROW)] {
        b = b.set_column_dictionary_enabled(path, true);
    }
    // `__cells`: read one value at a time by point reads, never by scans;
    // no statistics (they would copy whole rows into the footer).
    let cells = ColumnPath::from(format::CELLS);
    b = b
        .set_column_statistics_enabled(cells.clone(), EnabledStatistics::None)
        .set_column_compression(cells.clone(), point_codec)
        // PLAIN, as `__pk`: point reads decode these pages themselves
        // (`pages.rs`), without Parquet's column readers.
        .set_column_encoding(cells.clone(), Encoding::PLAIN)
        // Twice `page_bytes`: LZ4 finds more repeats in longer pages (11%
        // fewer bytes than at 2 KiB), at no cost to a get measured.
        .set_column_data_page_size_limit(cells, opts.page_bytes.max(1) * 2);
    for c in &table.primary_key {
        let path = ColumnPath::from(c.name.as_str());
        b = b
            .set_column_statistics_enabled(path.clone(), EnabledStatistics::Page)
            .set_column_compression(path.clone(), Compression::LZ4_RAW)
            .set_column_data_page_size_limit(path.clone(), opts.page_bytes.max(1));
        if c.pk_type == crate::model::types::PkType::Integer {
            // Integer keys as deltas: sorted, or at least close within a
            // row group (1.6x fewer bytes than plain for random order
            // numbers under a card, 4x for the card ids themselves).
            b = b.set_column_encoding(path, Encoding::DELTA_BINARY_PACKED);
        } else if !plain_keys.contains(&c.name) {
            b = b.set_column_dictionary_enabled(path, true);
        }
    }
    // Versions, newest versions and sequence numbers: 8-byte integers
    // that sit close together (writes of one period), as deltas. A delta
    // page is decoded from its start, so in files without `__cells`, whose
    // point reads decode these leaves, pages are cut at an eighth of
    // `page_bytes`: about as many values as a plain page holds, not the
    // thousands 2 KiB of small deltas would hold. With `__cells` only scans
    // read them, and they take the value leaves' pages (up to 2048 rows:
    // 1 MB less in the 1M-row compare table, fewer page headers to scan).
    let delta_page_bytes = match opts.value_zstd {
        Some(_) => value_page_bytes,
        None if opts.cells => value_page_bytes,
        None => (opts.page_bytes / 8).max(1),
    };
    // Parquet's delta encoder reserves 1 MiB per column writer, and a
    // segment writer opens one per leaf per row group: 23 attribute
    // versions made a flush hold ~30 MiB of it. Relative versions are
    // nearly all equal (0 where cells were written together), which a
    // dictionary of a few values codes in runs, smaller still than
    // deltas; they fall back to plain where the dictionary fills.
    let mut deltas = vec![ColumnPath::from(format::SEQ), ColumnPath::from(format::MAX_TS)];
    for (name, _) in columns {
        let path = ColumnPath::new(vec![name.clone(), format::TS.to_string()]);
        if opts.relative_versions && !plain_numbers.contains(&path) {
            b = b
                .set_column_dictionary_enabled(path.clone(), true)
                .set_column_dictionary_page_size_limit(path.clone(), DICTIONARY_PAGE_BYTES)
                .set_column_encoding(path.clone(), Encoding::PLAIN)
                .set_column_data_page_size_limit(path, delta_page_bytes);
        } else {
            deltas.push(path);
        }
    }
    for path in deltas {
        b = b
            .set_column_encoding(path.clone(), Encoding::DELTA_BINARY_PACKED)
            .set_column_data_page_size_limit(path, delta_page_bytes);
    }
    // Page statistics (Parquet's column index) on the fixed-width value
    // leaves: SQL range predicates skip the pages they rule out. Not on
    // strings and binaries, whose bounds would copy values of any length
    // into the footer.
    for (name, types) in columns {
        for (bit, child, _) in format::VALUE_CHILDREN.iter() {
            if types.has(*bit) && matches!(*child, "i" | "d" | "t") {
                let path = ColumnPath::new(vec![name.clone(), child.to_string()]);
                b = b.set_column_statistics_enabled(path, EnabledStatistics::Page);
            }
        }
    }
    for (name, types) in columns {
        for child in ["s", "b"] {
            if types.has(if child == "s" { 4 } else { 8 }) {
                b = b.set_column_dictionary_enabled(ColumnPath::new(vec![name.clone(), child.to_string()]), true);
            }
        }
        // Integers without a dictionary as deltas: half the bytes of plain
        // values for times and counters, which no codec compresses here
        // (BENCHMARKS.md, "Size"). Those with one fall back to plain if
        // it fills: the first batch said it would not (and a delta
        // encoder costs its writer 1 MiB, above).
        let ints = ColumnPath::new(vec![name.clone(), "i".to_string()]);
        if types.has(1) && (opts.numeric_dictionary_bytes == 0 || plain_numbers.contains(&ints)) {
            b = b.set_column_encoding(ints, Encoding::DELTA_BINARY_PACKED);
        }
        if opts.numeric_dictionary_bytes > 0 {
            for (bit, child) in [(1, "i"), (2, "d")] {
                let path = ColumnPath::new(vec![name.clone(), child.to_string()]);
                if types.has(bit) && !plain_numbers.contains(&path) {
                    b = b
                        .set_column_dictionary_enabled(path.clone(), true)
                        .set_column_dictionary_page_size_limit(path, opts.numeric_dictionary_bytes);
                }
            }
        }
    }
    b.build()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::types::PkType;
    use arrow::array::{ArrayRef, BinaryArray, Float64Array, Int64Array, StringArray, StructArray};
    use arrow::datatypes::{Field, Fields, Schema};

    #[test]
    fn mostly_distinct_string_and_binary_key_columns_are_written_plain() {
        let table = TableSchema::new("t")
            .pk("region", PkType::String)
            .pk("card", PkType::Integer)
            .pk("order", PkType::String)
            .pk("blob", PkType::Binary);
        let batch = |n: usize| {
            let schema = Arc::new(Schema::new(vec![
                Field::new("region", DataType::Utf8, true),
                Field::new("card", DataType::Int64, true),
                Field::new("order", DataType::Utf8, true),
                Field::new("blob", DataType::Binary, true),
            ]));
            let region: StringArray = (0..n).map(|i| Some(format!("r{}", i % 3))).collect();
            let card: Int64Array = (0..n as i64).map(Some).collect();
            // Unique, with nulls (ranks > 0) in between.
            let order: StringArray = (0..n).map(|i| (i % 4 != 3).then(|| format!("o{i}"))).collect();
            let blob: BinaryArray = (0..n).map(|i| Some(vec![(i % 200) as u8])).collect();
            RecordBatch::try_new(
                schema,
                vec![Arc::new(region), Arc::new(card), Arc::new(order), Arc::new(blob)],
            )
            .unwrap()
        };
        // 300 rows: 3 regions, 225 orders, 200 blobs (over half distinct).
        assert_eq!(plain_key_columns(&table, &batch(300)), vec!["order", "blob"]);
        // 1000 rows: the 200 blobs repeat now.
        assert_eq!(plain_key_columns(&table, &batch(1000)), vec!["order"]);
        // Too few values to judge: the default (dictionary) stays.
        assert!(plain_key_columns(&table, &batch(40)).is_empty());
    }

    /// Unique integers and doubles go without a dictionary; repeated ones
    /// keep it; a column with too few values keeps the default.
    #[test]
    fn numbers_a_dictionary_would_not_shrink_go_without_one() {
        let n = 4096;
        let attr = |ts: ArrayRef, i: ArrayRef, d: ArrayRef| {
            let fields = Fields::from(vec![
                Field::new(format::TS, DataType::Int64, true),
                Field::new("i", DataType::Int64, true),
                Field::new("d", DataType::Float64, true),
            ]);
            StructArray::new(fields, vec![ts, i, d], None)
        };
        // Times: unique, rising in small random steps; amounts in cents.
        let times = || -> Int64Array {
            (0..n as i64)
                .map(|r| Some(1_788_220_800_000 + r * 50 + (r * 7919) % 50))
                .collect()
        };
        let cents: Float64Array = (0..n).map(|r| Some(((r * 7919) % 300) as f64 / 100.0)).collect();
        let codes: Int64Array = (0..n as i64).map(|r| Some(r % 8)).collect();
        let random: Float64Array = (0..n as u64)
            .map(|r| Some(f64::from_bits(r.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 2)))
            .collect();
        let few: Int64Array = (0..n as i64).map(|r| (r < 10).then_some(r * 1_000_003)).collect();
        let few_d: Float64Array = (0..n).map(|_| None).collect();
        // Versions as stored: relative ones (cells written with the row:
        // 0, older versions 1000 or 2000 below), or absolute times.
        let relative: Int64Array = (0..n as i64)
            .map(|r| Some([0, 0, 0, 1000, 2000][r as usize % 5]))
            .collect();
        let columns: Vec<(&str, StructArray)> = vec![
            (
                "a",
                attr(Arc::new(relative.clone()), Arc::new(times()), Arc::new(cents)),
            ),
            ("b", attr(Arc::new(times()), Arc::new(codes), Arc::new(random))),
            ("c", attr(Arc::new(relative), Arc::new(few), Arc::new(few_d))),
        ];
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|(name, st)| Field::new(*name, st.data_type().clone(), false))
                .collect::<Vec<_>>(),
        ));
        let batch = RecordBatch::try_new(
            schema,
            columns.into_iter().map(|(_, st)| Arc::new(st) as ArrayRef).collect(),
        )
        .unwrap();
        let path = |c: &str, child: &str| ColumnPath::new(vec![c.to_string(), child.to_string()]);
        assert_eq!(
            numbers_without_dictionary(&batch),
            vec![path("a", "i"), path("b", "d"), path("b", format::TS)]
        );
    }
}
