//! Point reads of one key's state from the attribute leaves of a mapped
//! segment written before `__cells`, with Parquet's column readers: no
//! Arrow arrays, no record-batch decoder. (Segments with `__cells` are
//! read through [`super::pages`].)
//!
//! A GetRow through the Arrow reader built a row-group reader, Arrow
//! readers for every leaf and record batches for one key, and that
//! machinery cost more than the pages it decoded (p50 ~150 us on 1M rows).
//! Here each leaf column gets a page reader over just the pages that hold
//! the key's rows: the page index says which, every page before them is
//! skipped without being read, and only the key's values are materialised.
//!
//! Segments on object storage (archived tables) keep the async Arrow path.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use parquet::column::reader::ColumnReaderImpl;
use parquet::data_type::{BoolType, ByteArrayType, DataType, DoubleType, Int32Type, Int64Type};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::page_index::offset_index::PageLocation;
use parquet::file::serialized_reader::SerializedPageReader;
use parquet::file::statistics::Statistics;
use parquet::schema::types::ColumnDescPtr;

use super::checksum::BlockChecks;
use super::encode::decode_tombstones;
use super::format::{self, ROW_MERGE};
use crate::error::{Error, Result};
use crate::model::row::RowState;
use crate::model::types::Value;

/// One row group of a mapped segment file.
pub(crate) struct RowGroupFile<'a> {
    pub file: Arc<Bytes>,
    /// The file's block checksums: pages are checked before they are read.
    pub checks: Option<&'a BlockChecks>,
    pub md: &'a ParquetMetaData,
    pub rg: usize,
    /// For error messages.
    pub path: &'a str,
}

/// The values of one leaf for a run of rows, nulls as `None`.
type Leaf<T> = Vec<Option<T>>;

impl RowGroupFile<'_> {
    fn err(&self, what: impl std::fmt::Display) -> Error {
        Error::corruption(format!("segment {}: {what}", self.path))
    }

    /// Leaf `leaf`'s descriptor, checked to be a flat column of type `T`.
    fn leaf<T: DataType>(&self, leaf: usize) -> Result<ColumnDescPtr> {
        let descr: ColumnDescPtr = self.md.file_metadata().schema_descr().column(leaf);
        if descr.physical_type() != T::get_physical_type() || descr.max_rep_level() != 0 {
            return Err(self.err(format!(
                "column {} is {:?} (repetition {}), expected flat {:?}",
                descr.path(),
                descr.physical_type(),
                descr.max_rep_level(),
                T::get_physical_type()
            )));
        }
        Ok(descr)
    }

    /// A reader of leaf `leaf` positioned at row `rows.start`, whose pages
    /// cover `rows` (pages before them are skipped unread).
    fn reader<T: DataType>(&self, leaf: usize, rows: &Range<usize>) -> Result<ColumnReaderImpl<T>> {
        let descr = self.leaf::<T>(leaf)?;
        let rg = self.md.row_group(self.rg);
        let total = rg.num_rows() as usize;
        let all_pages = self
            .md
            .offset_index()
            .and_then(|o| o.get(self.rg))
            .and_then(|o| o.get(leaf))
            .map(|o| o.page_locations());
        let pages = all_pages.map(|all| pick_pages(all, rows));
        if let Some(checks) = self.checks {
            let chunk = rg.column(leaf);
            let check = |r: Range<u64>| checks.check_mapped(&self.file, r);
            match (&pages, all_pages) {
                (Some(pages), Some(all)) => {
                    // The dictionary page lies before the first data page.
                    if let (Some(dict), Some(first)) = (chunk.dictionary_page_offset(), all.first()) {
                        check(dict as u64..first.offset as u64)?;
                    }
                    for p in pages {
                        check(p.offset as u64..p.offset as u64 + p.compressed_page_size as u64)?;
                    }
                }
                _ => {
                    let (start, len) = chunk.byte_range();
                    check(start..start + len)?;
                }
            }
        }
        let page_reader =
            SerializedPageReader::new(self.file.clone(), rg.column(leaf), total, pages).map_err(|e| self.err(e))?;
        let mut reader = ColumnReaderImpl::<T>::new(descr, Box::new(page_reader));
        let skipped = reader.skip_records(rows.start).map_err(|e| self.err(e))?;
        if skipped != rows.start {
            return Err(self.err(format!("row group {} ends before row {}", self.rg, rows.start)));
        }
        Ok(reader)
    }

    /// The value every row of leaf `leaf` holds in this row group, when the
    /// column chunk's statistics prove there is one: `Some(None)` when all
    /// rows are null, `Some(Some(v))` when none is and min equals max. In a
    /// compacted segment of PutRows that is `__row`, `__row_ts` and
    /// `__tomb` (and any value child of a type the row group never holds),
    /// so a point get reads those pages not at all.
    fn uniform<T: UniformLeaf>(&self, leaf: usize) -> Option<Option<T::T>> {
        let rg = self.md.row_group(self.rg);
        let stats = rg.column(leaf).statistics()?;
        match stats.null_count_opt()? {
            n if n == rg.num_rows() as u64 => Some(None),
            0 => T::constant(stats).map(Some),
            _ => None,
        }
    }

    /// The values of leaf `leaf` in `rows`.
    fn read<T: UniformLeaf>(&self, leaf: usize, rows: Range<usize>) -> Result<Leaf<T::T>> {
        let max_def = self.leaf::<T>(leaf)?.max_def_level();
        if let Some(v) = self.uniform::<T>(leaf) {
            return Ok(vec![v; rows.len()]);
        }
        let mut reader = self.reader::<T>(leaf, &rows)?;
        self.read_from(&mut reader, max_def, rows)
    }

    /// The values of `rows` from `reader`, which stands at `rows.start`.
    fn read_from<T: DataType>(
        &self,
        reader: &mut ColumnReaderImpl<T>,
        max_def: i16,
        rows: Range<usize>,
    ) -> Result<Leaf<T::T>> {
        let Some((defs, values)) = read_records(reader, max_def, rows.len()).map_err(|e| self.err(e))? else {
            return Err(self.err(format!("row group {} ends inside rows {rows:?}", self.rg)));
        };
        if max_def == 0 {
            return Ok(values.into_iter().map(Some).collect());
        }
        let mut values = values.into_iter();
        defs.iter()
            .map(|&d| {
                if d == max_def {
                    values
                        .next()
                        .map(Some)
                        .ok_or_else(|| self.err("fewer values than levels"))
                } else {
                    Ok(None)
                }
            })
            .collect()
    }

    /// The state of the key stored in `rows`; `columns`: the attribute
    /// columns to read (`None`: all).
    pub fn key_state(&self, rows: Range<usize>, columns: Option<&[String]>) -> Result<RowState> {
        let descr = self.md.file_metadata().schema_descr();
        let mut system = [None; 4];
        let mut max_ts = None;
        let mut attrs: Vec<AttrLeaves> = Vec::new();
        for leaf in 0..descr.num_columns() {
            let col = descr.column(leaf);
            match col.path().parts() {
                [name] => {
                    let slot = [format::SEQ, format::ROW, format::ROW_TS, format::TOMB]
                        .iter()
                        .position(|s| s == name);
                    if let Some(i) = slot {
                        system[i] = Some(leaf);
                    }
                    if name == format::MAX_TS {
                        max_ts = Some(leaf);
                    }
                }
                [name, child] if !name.starts_with("__") => {
                    if columns.is_some_and(|c| !c.iter().any(|n| n == name)) {
                        continue;
                    }
                    if attrs.last().is_none_or(|a| &a.name != name) {
                        attrs.push(AttrLeaves {
                            name: name.clone(),
                            ts: None,
                            values: Vec::new(),
                        });
                    }
                    let entry = attrs.last_mut().expect("pushed above");
                    if child == format::TS {
                        entry.ts = Some(leaf);
                    } else {
                        entry.values.push((child.clone(), leaf));
                    }
                }
                _ => {}
            }
        }
        let [Some(seq), Some(row), Some(row_ts), Some(tomb)] = system else {
            return Err(self.err("missing a system column"));
        };
        // The row marker, tombstones and seq live on the key's first row.
        let r = rows.start;
        let mut st = RowState {
            seq: self
                .one::<Int64Type>(seq, r)?
                .ok_or_else(|| self.err("__seq is null"))? as u64,
            replace: self
                .one::<Int32Type>(row, r)?
                .ok_or_else(|| self.err("__row is null"))?
                != ROW_MERGE as i32,
            row_ts: self.one::<Int64Type>(row_ts, r)?,
            columns: Default::default(),
        };
        if let Some(t) = self.one::<ByteArrayType>(tomb, r)? {
            decode_tombstones(t.data(), &mut st)?;
        }
        // Versions relative to the key's newest (`super::versions`).
        let base = match (super::versions::relative(self.md), max_ts) {
            (false, _) => None,
            (true, Some(leaf)) => Some(self.one::<Int64Type>(leaf, r)?.unwrap_or(0)),
            (true, None) => return Err(self.err("relative versions without __max_ts")),
        };
        for attr in attrs {
            let name = attr.name;
            let ts_leaf = attr
                .ts
                .ok_or_else(|| self.err(format!("column {name} has no ts child")))?;
            let ts = self.read::<Int64Type>(ts_leaf, rows.clone())?;
            let mut values: Vec<Option<Value>> = vec![None; rows.len()];
            for (child, leaf) in &attr.values {
                let col = self.child_values(&name, child, *leaf, rows.clone())?;
                for (slot, v) in values.iter_mut().zip(col) {
                    if slot.is_none() {
                        *slot = v;
                    }
                }
            }
            // A version exists where the struct is set (its `ts` is), and
            // then exactly one value child is.
            for (ts, v) in ts.into_iter().zip(values) {
                if let (Some(ts), Some(v)) = (ts, v) {
                    let ts = base.map_or(ts, |b| b.wrapping_sub(ts));
                    st.columns.entry(name.clone()).or_default().versions.push((ts, v));
                }
            }
        }
        Ok(st)
    }

    /// The value of leaf `leaf` in row `row`.
    fn one<T: UniformLeaf>(&self, leaf: usize, row: usize) -> Result<Option<T::T>> {
        Ok(self.read::<T>(leaf, row..row + 1)?.into_iter().next().flatten())
    }

    /// The values of value child `child` (leaf `leaf`) of attribute column
    /// `column` in `rows`.
    fn child_values(&self, column: &str, child: &str, leaf: usize, rows: Range<usize>) -> Result<Vec<Option<Value>>> {
        fn map<T>(col: Leaf<T>, f: impl Fn(T) -> Value) -> Vec<Option<Value>> {
            col.into_iter().map(|v| v.map(&f)).collect()
        }
        Ok(match child {
            "i" => map(self.read::<Int64Type>(leaf, rows)?, Value::Integer),
            "d" => map(self.read::<DoubleType>(leaf, rows)?, Value::Double),
            "t" => map(self.read::<BoolType>(leaf, rows)?, Value::Boolean),
            "b" => map(self.read::<ByteArrayType>(leaf, rows)?, |b| {
                Value::Binary(b.data().to_vec())
            }),
            "s" => self
                .read::<ByteArrayType>(leaf, rows)?
                .into_iter()
                .map(|v| {
                    v.map(|b| {
                        String::from_utf8(b.data().to_vec())
                            .map(Value::String)
                            .map_err(|_| self.err(format!("column {column} holds a string that is not UTF-8")))
                    })
                    .transpose()
                })
                .collect::<Result<_>>()?,
            other => return Err(self.err(format!("column {column} has an unknown value child {other:?}"))),
        })
    }
}

/// A run of records of a flat leaf: definition levels and values.
pub(super) type Records<T> = (Vec<i16>, Vec<<T as DataType>::T>);

/// The next `n` records of a flat leaf from `reader`: their definition
/// levels (none when `max_def` is 0) and values; `None` when the leaf
/// ends first.
pub(super) fn read_records<T: DataType>(
    reader: &mut ColumnReaderImpl<T>,
    max_def: i16,
    n: usize,
) -> parquet::errors::Result<Option<Records<T>>> {
    let mut defs = Vec::with_capacity(n);
    let mut values = Vec::with_capacity(n);
    let mut read = 0;
    while read < n {
        let (records, _, _) = reader.read_records(n - read, (max_def > 0).then_some(&mut defs), None, &mut values)?;
        if records == 0 {
            return Ok(None);
        }
        read += records;
    }
    Ok(Some((defs, values)))
}

/// Leaf types whose column-chunk statistics can stand in for their pages.
trait UniformLeaf: DataType {
    /// The one value all non-null rows hold, if the statistics prove it.
    fn constant(stats: &Statistics) -> Option<Self::T>;
}

macro_rules! uniform_leaf {
    ($($t:ty => $variant:ident),*) => {$(
        impl UniformLeaf for $t {
            fn constant(stats: &Statistics) -> Option<Self::T> {
                match stats {
                    Statistics::$variant(v) => v.min_opt().filter(|&min| Some(min) == v.max_opt()).cloned(),
                    _ => None,
                }
            }
        }
    )*};
}
uniform_leaf!(Int32Type => Int32, Int64Type => Int64, BoolType => Boolean, ByteArrayType => ByteArray);

impl UniformLeaf for DoubleType {
    /// Never: NaN is left out of min and max, and -0.0 equals 0.0.
    fn constant(_: &Statistics) -> Option<f64> {
        None
    }
}

/// The leaf of `__cells` (the last one), when the file has it (segments
/// written before it do not).
pub(super) fn cells_leaf(md: &ParquetMetaData) -> Option<usize> {
    let descr = md.file_metadata().schema_descr();
    let last = descr.num_columns().checked_sub(1)?;
    (descr.column(last).path().parts() == [format::CELLS]).then_some(last)
}

/// The leaves of one attribute column: its `ts` and its value children.
struct AttrLeaves {
    name: String,
    ts: Option<usize>,
    values: Vec<(String, usize)>,
}

/// The page locations a reader of `rows` needs: the pages that hold them,
/// behind the chunk's first page. The first page stays so that the reader
/// still finds a dictionary page before it; with the next location being
/// the first wanted page, it counts as one page of all the rows before
/// them, which `skip_records` passes over without reading.
fn pick_pages(pages: &[PageLocation], rows: &Range<usize>) -> Vec<PageLocation> {
    if pages.is_empty() {
        return Vec::new();
    }
    let first = page_of(pages, rows.start);
    let last = page_of(pages, rows.end.saturating_sub(1).max(rows.start)).max(first);
    let mut out = Vec::with_capacity(last - first + 2);
    if first > 0 {
        out.push(pages[0].clone());
    }
    out.extend_from_slice(&pages[first..=last]);
    out
}

/// The page (index into non-empty `pages`) that holds `row`. Pages mostly
/// hold the same number of rows, so the page that would hold it then is
/// tried before a binary search: the page locations of a large segment do
/// not stay in cache, and a search cost ~9 cache misses per column.
pub(super) fn page_of(pages: &[PageLocation], row: usize) -> usize {
    let holds = |i: usize| {
        pages[i].first_row_index as usize <= row && pages.get(i + 1).is_none_or(|n| n.first_row_index as usize > row)
    };
    if let Some(step) = pages.get(1).map(|p| p.first_row_index as usize).filter(|&s| s > 0) {
        let guess = (row / step).min(pages.len() - 1);
        if holds(guess) {
            return guess;
        }
    }
    partition(pages.len(), |i| pages[i].first_row_index as usize <= row).saturating_sub(1)
}

/// The first index in `0..n` where `pred` turns false (`pred` is true on a
/// prefix).
pub(crate) fn partition(n: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(first_row: i64) -> PageLocation {
        PageLocation {
            offset: first_row * 10,
            compressed_page_size: 10,
            first_row_index: first_row,
        }
    }

    #[test]
    fn pick_pages_keeps_the_first_page_and_the_ones_holding_the_rows() {
        let pages: Vec<_> = [0, 256, 512, 768].into_iter().map(loc).collect();
        let rows = |p: Vec<PageLocation>| p.iter().map(|l| l.first_row_index).collect::<Vec<_>>();
        assert_eq!(rows(pick_pages(&pages, &(0..3))), vec![0]);
        assert_eq!(rows(pick_pages(&pages, &(300..301))), vec![0, 256]);
        assert_eq!(rows(pick_pages(&pages, &(500..530))), vec![0, 256, 512]);
        assert_eq!(rows(pick_pages(&pages, &(900..901))), vec![0, 768]);
        assert_eq!(rows(pick_pages(&pages, &(200..300))), vec![0, 256]);
        // Uneven pages: the guess misses and the search finds them.
        let uneven: Vec<_> = [0, 100, 150, 700, 710].into_iter().map(loc).collect();
        assert_eq!(rows(pick_pages(&uneven, &(0..1))), vec![0]);
        assert_eq!(rows(pick_pages(&uneven, &(160..170))), vec![0, 150]);
        assert_eq!(rows(pick_pages(&uneven, &(699..705))), vec![0, 150, 700]);
        assert_eq!(rows(pick_pages(&uneven, &(5000..5001))), vec![0, 710]);
    }
}
