//! Reading key states back from a segment, pruned by key range.
//!
//! Pruning goes from coarse to fine: the manifest's key range (no I/O), then
//! row-group statistics on `__pk`, then the `__pk` page index, so a point get
//! decodes one page per column of one row group.
//!
//! Invariants: pruning only skips data that cannot hold a key in range;
//! every byte decoded has matched its checksum first.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{
    Array, AsArray, BinaryArray, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray, UInt8Array,
    UInt16Array, UInt64Array,
};
use arrow::datatypes::{Int64Type, UInt8Type, UInt16Type, UInt64Type};
use bytes::Bytes;
use futures::StreamExt;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, RowSelection, RowSelector};
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use parquet::file::metadata::ParquetMetaData;

use super::Segment;
use super::encode::decode_tombstones;
use super::format::{self, ROW_MERGE};
use super::pages::{CellsCursor, GroupPages, KeyCells, first_page_reaching, pk_page_index};
use super::point::{RowGroupFile, cells_leaf, partition};
use super::reader::{MappedRange, overlapping_row_groups, pk_bounds};
use super::versions::{self, SegmentBatchStream};
use crate::error::{Error, Result};
use crate::model::key::KeyRange;
use crate::model::row::RowState;
use crate::model::types::Value;

impl Segment {
    /// The state of one key in this segment, if it has it.
    pub async fn get(self: &Arc<Self>, key: &[u8], columns: Option<&[String]>) -> Result<Option<RowState>> {
        super::no_panic_async(&self.meta.path, self.get_unguarded(key, columns)).await
    }

    async fn get_unguarded(self: &Arc<Self>, key: &[u8], columns: Option<&[String]>) -> Result<Option<RowState>> {
        if key < self.min_key.as_slice() || key > self.max_key.as_slice() {
            return Ok(None);
        }
        let Some(file) = self.local_path.clone() else {
            if !self.may_contain(key).await? {
                return Ok(None);
            }
            let mut cursor = SegmentCursor::new(self.clone(), KeyRange::point(key), false, columns);
            // One read of the pages that hold the key, even across a page edge.
            cursor.window = usize::MAX;
            while let Some(chunk) = cursor.next_chunk().await? {
                if let Some((_, st)) = chunk.into_iter().next() {
                    return Ok(Some(st));
                }
            }
            return Ok(None);
        };
        // A local file: the key's `__pk` and `__cells` pages, through the
        // page cache.
        let meta = self.reader_metadata().await?;
        let blooms = self.blooms().await?;
        let md = meta.metadata();
        let bounds = |rg: usize| pk_bounds(md.row_group(rg).column(0).statistics());
        // Row groups ascend by key: start at the first whose largest key is
        // not below this one.
        let n = md.num_row_groups();
        let first = partition(n, |rg| bounds(rg).is_some_and(|(_, max)| max < key));
        let pread = self.pread_file(&file)?;
        for rg in first..n {
            match bounds(rg) {
                Some((min, _)) if min > key => break,
                Some((_, max)) if max < key => continue,
                _ => {}
            }
            if blooms.get(rg).and_then(|b| b.as_ref()).is_some_and(|b| !b.check(key)) {
                continue;
            }
            let pages = self.group_pages(&pread, md, rg);
            let Some(row) = pages.find_key(key)? else { continue };
            let err = |e: Error| Error::corruption(format!("segment {}: {}", self.meta.path, e.message()));
            return match cells_leaf(md) {
                Some(cells) => {
                    let page = pages.page_holding(cells, row)?;
                    let c = page.value(row).ok_or_else(|| {
                        Error::corruption(format!(
                            "segment {}: __cells is null on row {row} of row group {rg}, a key's first row",
                            self.meta.path
                        ))
                    })?;
                    super::cells::decode_cells(c, &self.attribute_names(md), columns)
                        .map(Some)
                        .map_err(err)
                }
                None => {
                    let rows = pages.key_rows(row)?;
                    let Some(map) = self.local_file()? else {
                        return Err(Error::corruption(format!(
                            "segment {} is no longer mapped",
                            self.meta.path
                        )));
                    };
                    self.row_group_file(&mapped_bytes(&map), md, rg)
                        .key_state(rows, columns)
                        .map(Some)
                }
            };
        }
        Ok(None)
    }
}

/// The whole mapped file as `Bytes`, without a copy.
fn mapped_bytes(file: &Arc<memmap2::Mmap>) -> Arc<Bytes> {
    Arc::new(Bytes::from_owner(MappedRange(file.clone(), 0..file.len())))
}

impl Segment {
    /// Row group `rg`'s pages for point and range reads, read from
    /// `pread` through the database's page cache.
    fn group_pages<'a>(
        &'a self,
        pread: &'a Arc<super::pages::PreadFile>,
        md: &'a ParquetMetaData,
        rg: usize,
    ) -> GroupPages<'a> {
        GroupPages {
            cache: self.page_cache.as_ref().map(|(c, _)| &**c),
            id: self.page_cache.as_ref().map_or(0, |(_, id)| *id),
            file: pread,
            md,
            rg,
        }
    }

    /// Row group `rg` of this segment's mapped `file` (see
    /// [`mapped_bytes`]), for Parquet's column readers.
    fn row_group_file<'a>(&'a self, file: &Arc<Bytes>, md: &'a ParquetMetaData, rg: usize) -> RowGroupFile<'a> {
        RowGroupFile {
            file: file.clone(),
            checks: self.checks.get().map(|c| &**c),
            md,
            rg,
            path: &self.meta.path,
        }
    }

    /// The rows of row group `rg` (whose key bounds hold `key`) that can
    /// hold `key`, found from the `__pk` page index without reading a
    /// page: the rows of the page where the first row at or past `key` is.
    /// Empty, at that page's first row, when `key` is below the page's
    /// smallest key (it goes before that row). The whole row group without
    /// a page index.
    pub fn key_page_rows(&self, md: &ParquetMetaData, rg: usize, key: &[u8]) -> Range<usize> {
        let (page, rows) = first_page_reaching(md, rg, key);
        let below = page.is_some_and(|(index, i)| index.min_value(i).is_some_and(|min| key < min));
        if below { rows.start..rows.start } else { rows }
    }
}

/// The rows of one row group a columnar scan reads.
#[derive(Debug, Clone)]
pub(crate) struct RowSpan {
    pub row_group: usize,
    pub rows: Range<usize>,
    /// True when every key of these rows is known to lie in the range (the
    /// row group's key statistics are inside it): no per-row key check.
    pub inside: bool,
}

/// How many pages of the given leaves hold a row of `spans` (in
/// row-group order, ascending and disjoint within a group): the pages a
/// scan of those spans decodes, from the offset index (0 without one).
pub(crate) fn pages_overlapping(md: &ParquetMetaData, leaves: &[usize], spans: &[RowSpan]) -> u64 {
    let Some(offsets) = md.offset_index() else {
        return 0;
    };
    let mut count = 0u64;
    let mut at = 0;
    while at < spans.len() {
        let rg = spans[at].row_group;
        let end = at + spans[at..].iter().take_while(|s| s.row_group == rg).count();
        let group = &spans[at..end];
        at = end;
        let rows = md.row_group(rg).num_rows() as usize;
        for &leaf in leaves {
            let Some(pages) = offsets.get(rg).and_then(|o| o.get(leaf)).map(|o| o.page_locations()) else {
                continue;
            };
            // Both lists ascend: walk them together.
            let mut s = 0;
            for (i, page) in pages.iter().enumerate() {
                let start = page.first_row_index as usize;
                let stop = pages.get(i + 1).map_or(rows, |p| p.first_row_index as usize);
                while s < group.len() && group[s].rows.end <= start {
                    s += 1;
                }
                if s == group.len() {
                    break;
                }
                if group[s].rows.start < stop {
                    count += 1;
                }
            }
        }
    }
    count
}

impl Segment {
    /// The rows that can hold keys of `range`, row group by row group
    /// (pruned by row-group statistics and the `__pk` page index).
    pub async fn row_spans(&self, range: &KeyRange) -> Result<Vec<RowSpan>> {
        let meta = self.reader_metadata().await?;
        let md = meta.metadata();
        Ok(overlapping_row_groups(md, range)
            .into_iter()
            .map(|rg| RowSpan {
                row_group: rg,
                rows: selected_rows(md, rg, range),
                inside: pk_bounds(md.row_group(rg).column(0).statistics())
                    .is_some_and(|(min, max)| range.contains(min) && range.contains(max)),
            })
            .filter(|s| s.rows.start < s.rows.end)
            .collect())
    }

    /// The first key of every row group with its row count, in key order:
    /// where a scan can be split without cutting a key.
    pub async fn row_group_starts(&self) -> Result<Vec<(Vec<u8>, u64)>> {
        let meta = self.reader_metadata().await?;
        let md = meta.metadata();
        Ok((0..md.num_row_groups())
            .filter_map(|rg| {
                let (min, _) = pk_bounds(md.row_group(rg).column(0).statistics())?;
                Some((min.to_vec(), md.row_group(rg).num_rows() as u64))
            })
            .collect())
    }

    /// A row group's smallest and largest key, from its statistics.
    pub fn row_group_key_range<'m>(&self, md: &'m ParquetMetaData, rg: usize) -> Option<(&'m [u8], &'m [u8])> {
        pk_bounds(md.row_group(rg).column(0).statistics())
    }

    /// Per row group, an upper bound on the versions of each of `columns`
    /// in it, from the chunk statistics of the column's `ts` leaf:
    /// `Some(Some(v))` no version is above `v`, `Some(None)` the group
    /// holds no version of the column (or the segment no such column),
    /// `None` unknown (no statistics).
    /// In a file with relative versions (`versions`), the bound of a
    /// column that has a version is the group's newest `__max_ts`.
    pub fn newest_versions(md: &ParquetMetaData, columns: &[&str]) -> Vec<Vec<Option<Option<i64>>>> {
        let descr = md.file_metadata().schema_descr();
        // Files with relative versions: `Some(the leaf of __max_ts)`.
        let newest_of_keys: Option<Option<usize>> = versions::relative(md)
            .then(|| (0..descr.num_columns()).find(|&i| descr.column(i).path().parts() == [format::MAX_TS]));
        let leaves: Vec<Option<usize>> = columns
            .iter()
            .map(|name| {
                (0..descr.num_columns()).find(|i| {
                    let column = descr.column(*i);
                    let parts = column.path().parts();
                    parts.len() == 2 && parts[0] == *name && parts[1] == format::TS
                })
            })
            .collect();
        (0..md.num_row_groups())
            .map(|rg| {
                let group = md.row_group(rg);
                leaves
                    .iter()
                    .map(|leaf| {
                        let Some(leaf) = leaf else {
                            return Some(None);
                        };
                        let chunk = group.column(*leaf);
                        if let Some(max_ts) = newest_of_keys {
                            // Relative versions: whether the group holds one
                            // from the leaf, how new from `__max_ts`.
                            if chunk.statistics()?.null_count_opt() == Some(chunk.num_values() as u64) {
                                return Some(None);
                            }
                            let max_ts = group.column(max_ts?);
                            return match max_ts.statistics()? {
                                parquet::file::statistics::Statistics::Int64(s) => s.max_opt().map(|m| Some(*m)),
                                _ => None,
                            };
                        }
                        match chunk.statistics()? {
                            parquet::file::statistics::Statistics::Int64(s) => match s.max_opt() {
                                Some(max) => Some(Some(*max)),
                                None if s.null_count_opt() == Some(chunk.num_values() as u64) => Some(None),
                                None => None,
                            },
                            _ => None,
                        }
                    })
                    .collect()
            })
            .collect()
    }

    /// Leaf column indices by path (`["amount", "d"]`, `["__pk"]`).
    pub async fn leaf_paths(&self) -> Result<Vec<Vec<String>>> {
        let meta = self.reader_metadata().await?;
        let descr = meta.metadata().file_metadata().schema_descr();
        Ok((0..descr.num_columns())
            .map(|i| descr.column(i).path().parts().to_vec())
            .collect())
    }

    /// Streams every row and column of the segment in key order, with the
    /// types it was written with (compaction reads whole segments).
    ///
    /// Reads copy from the file even on a local disk, rather than going
    /// through the mapping: a compaction touches every page of its inputs
    /// once, and mapped pages stay resident (in the process's RSS) until
    /// the segment is dropped, which added up to ~220 MB to the peak of a
    /// 10M-row load. Copied buffers are freed row group by row group.
    pub async fn stream_all(self: &Arc<Self>, batch_rows: usize) -> Result<SegmentBatchStream> {
        let meta = self.reader_metadata().await?.clone();
        let relative = versions::relative(meta.metadata());
        let inner = ParquetRecordBatchStreamBuilder::new_with_metadata(self.object_reader(false), meta)
            .with_batch_size(batch_rows)
            .build()
            .map_err(|e| Error::corruption(format!("segment {}: {e}", self.meta.path)))?;
        Ok(SegmentBatchStream::new(inner, relative.then(Vec::new)))
    }

    /// Streams the given rows with only the given leaf columns, strings
    /// as `Utf8View`. Spans are in row-group order; several may share a
    /// row group, with ascending rows that do not overlap.
    pub async fn stream_rows(
        self: &Arc<Self>,
        spans: &[RowSpan],
        leaves: Vec<usize>,
        batch_rows: usize,
    ) -> Result<SegmentBatchStream> {
        let meta = self.view_metadata().await?.clone();
        let md = meta.metadata().clone();
        let (leaves, convert) = if versions::relative(&md) {
            let (leaves, added) = versions::with_bases(&md, leaves, self.meta.num_rows > self.meta.num_keys);
            (leaves, Some(added))
        } else {
            (leaves, None)
        };
        let mask = ProjectionMask::leaves(md.file_metadata().schema_descr(), leaves.iter().copied());
        // Consecutive spans may share a row group (ascending, disjoint rows).
        let mut selectors = Vec::new();
        let mut groups: Vec<usize> = Vec::new();
        let mut at = 0;
        let rows_of = |rg: usize| md.row_group(rg).num_rows() as usize;
        for s in spans {
            if groups.last() != Some(&s.row_group) {
                if let Some(&prev) = groups.last() {
                    selectors.push(RowSelector::skip(rows_of(prev) - at));
                }
                groups.push(s.row_group);
                at = 0;
            }
            if s.rows.start < at || s.rows.end > rows_of(s.row_group) {
                return Err(Error::corruption(format!(
                    "segment {}: rows {:?} of row group {} read out of order",
                    self.meta.path, s.rows, s.row_group
                )));
            }
            selectors.push(RowSelector::skip(s.rows.start - at));
            selectors.push(RowSelector::select(s.rows.end - s.rows.start));
            at = s.rows.end;
        }
        if let Some(&last) = groups.last() {
            selectors.push(RowSelector::skip(rows_of(last) - at));
        }
        selectors.retain(|s| s.row_count > 0);
        // A remote segment: the chunks of the next row groups are fetched
        // while one is decoded.
        let chunks = groups
            .iter()
            .map(|&rg| {
                leaves
                    .iter()
                    .map(|&leaf| {
                        let (start, len) = md.row_group(rg).column(leaf).byte_range();
                        start..start + len
                    })
                    .collect()
            })
            .collect();
        let reader = self.object_reader(true).with_prefetch(chunks);
        let inner = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, meta)
            .with_row_groups(groups)
            .with_projection(mask)
            .with_row_selection(RowSelection::from(selectors))
            .with_batch_size(batch_rows)
            .build()
            .map_err(|e| Error::corruption(format!("segment {}: {e}", self.meta.path)))?;
        Ok(SegmentBatchStream::new(inner, convert))
    }
}

/// Streams a segment's key states within a range, in either direction.
///
/// Forward scans read a row group in growing windows (32 rows, doubling),
/// so that a short range scan with a small limit decodes a page or two, not
/// a whole row group; a key cut by a window boundary is held back and
/// completed by the next window. Backward scans read the selected rows of a
/// row group at once.
pub(crate) struct SegmentCursor {
    seg: Arc<Segment>,
    range: KeyRange,
    backward: bool,
    columns: Option<Vec<String>>,
    /// Row groups still to read, each with its rows not yet read.
    pending: Option<VecDeque<(usize, Range<usize>)>>,
    window: usize,
    carry: Option<(Vec<u8>, RowState)>,
    /// Where the read of the row group being read stands in its `__pk`
    /// and `__cells` pages (a local file with `__cells`): the next window
    /// goes on from the pages the last one ended in.
    open: Option<CellsCursor>,
    /// Keys in range read from `__cells` and not decoded yet, in scan
    /// order: a chunk decodes `decode_keys` of them, so that a GetRange
    /// with a small limit decodes about as many states as it returns,
    /// not a window's worth.
    raw: VecDeque<KeyCells>,
    decode_keys: usize,
}

/// States decoded by a cursor's first chunk from `__cells` (doubling in
/// each chunk after it).
const FIRST_DECODE_KEYS: usize = 16;

/// A GetRange with a small limit decodes a window or two: each key's state
/// is decoded whole (from `__cells` or the columns) as it is read.
const FIRST_WINDOW_ROWS: usize = 32;

impl SegmentCursor {
    /// `columns`: the attribute columns to read (`None`: all of them).
    pub fn new(seg: Arc<Segment>, range: KeyRange, backward: bool, columns: Option<&[String]>) -> Self {
        SegmentCursor {
            seg,
            range,
            backward,
            columns: columns.map(|c| c.to_vec()),
            pending: None,
            window: FIRST_WINDOW_ROWS,
            carry: None,
            open: None,
            raw: VecDeque::new(),
            decode_keys: FIRST_DECODE_KEYS,
        }
    }

    /// The next run of key states in scan order, or `None` at the end.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<(Vec<u8>, RowState)>>> {
        let seg = self.seg.clone();
        super::no_panic_async(&seg.meta.path, self.next_chunk_unguarded()).await
    }

    async fn next_chunk_unguarded(&mut self) -> Result<Option<Vec<(Vec<u8>, RowState)>>> {
        let meta = self.seg.reader_metadata().await?.clone();
        let md = meta.metadata();
        if self.pending.is_none() {
            let groups = overlapping_row_groups(md, &self.range)
                .into_iter()
                .map(|rg| (rg, selected_rows(md, rg, &self.range)))
                .filter(|(_, rows)| rows.start < rows.end);
            self.pending = Some(if self.backward {
                groups.rev().collect()
            } else {
                groups.collect()
            });
        }
        loop {
            if !self.raw.is_empty() {
                return self.decode_raw(md).map(Some);
            }
            let backward = self.backward;
            let step = self.window;
            let Some(pending) = self.pending.as_mut() else {
                return Ok(None);
            };
            let Some((rg, rows)) = pending.front_mut() else {
                return Ok(self.carry.take().map(|c| vec![c]));
            };
            let rg = *rg;
            let window = if backward {
                rows.clone()
            } else {
                rows.start..rows.end.min(rows.start.saturating_add(step))
            };
            rows.start = window.end;
            let last_of_group = rows.start >= rows.end;
            if last_of_group {
                pending.pop_front();
            }
            self.window = self.window.saturating_mul(2).min(1 << 16);
            let mut states: Vec<_> = self.carry.take().into_iter().collect();
            let read = self.read_rows(&meta, rg, window, &mut states).await?;
            if read.past_end && !self.backward {
                // Keys ascend: nothing later is in the range.
                if let Some(p) = self.pending.as_mut() {
                    p.clear();
                }
            } else if !self.backward && !last_of_group && !read.whole_keys {
                // The last key may go on in the next window.
                self.carry = states.pop();
            }
            if states.is_empty() {
                continue;
            }
            if self.backward {
                states.reverse();
            }
            return Ok(Some(states));
        }
    }

    /// Decodes the next `decode_keys` states of `raw` (not empty).
    fn decode_raw(&mut self, md: &ParquetMetaData) -> Result<Vec<(Vec<u8>, RowState)>> {
        let names = self.seg.attribute_names(md);
        let n = self.decode_keys.min(self.raw.len());
        self.decode_keys = self.decode_keys.saturating_mul(2).min(1 << 16);
        self.raw
            .drain(..n)
            .map(|found| {
                let st = super::cells::decode_cells(found.cells(), &names, self.columns.as_deref())
                    .map_err(|e| Error::corruption(format!("segment {}: {}", self.seg.meta.path, e.message())))?;
                Ok((found.key().to_vec(), st))
            })
            .collect()
    }

    /// Reads `rows` of row group `rg` into `out`.
    async fn read_rows(
        &mut self,
        meta: &ArrowReaderMetadata,
        rg: usize,
        rows: Range<usize>,
        out: &mut Vec<(Vec<u8>, RowState)>,
    ) -> Result<WindowRead> {
        let md = meta.metadata();
        // A local file with `__cells`: two leaves, page by page through
        // the page cache, no Arrow decoding of every attribute.
        if let (Some(local), Some(cells)) = (self.seg.local_path.clone(), cells_leaf(md)) {
            let pread = self.seg.pread_file(&local)?;
            let pages = self.seg.group_pages(&pread, md, rg);
            let mut past_end = false;
            let first = self.raw.len();
            // Taken: an error leaves no half-read cursor behind.
            let mut open = match self.open.take() {
                Some(o) if o.rg == rg && o.next == rows.start => o,
                _ => CellsCursor::new(rg, rows.start),
            };
            open.each(&pages, cells, rows.len(), |found| {
                if self.range.hi.as_deref().is_some_and(|hi| found.key() >= hi) {
                    past_end = true;
                    return Ok(std::ops::ControlFlow::Break(()));
                }
                if self.range.contains(found.key()) {
                    self.raw.push_back(found);
                }
                Ok(std::ops::ControlFlow::Continue(()))
            })?;
            self.open = Some(open);
            if self.backward {
                // Read in key order; handed out in scan order.
                self.raw.make_contiguous()[first..].reverse();
            }
            // Each key's `__cells` is its whole state.
            return Ok(WindowRead {
                whole_keys: true,
                past_end,
            });
        }
        let schema = meta.schema();
        // A remote file with `__cells` is read through it too: two columns
        // fetched instead of every attribute's.
        let cells = schema.index_of(format::CELLS).ok();
        let relative = versions::relative(md);
        let wanted: Vec<usize> = schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| {
                let name = f.name().as_str();
                if cells.is_some() {
                    return matches!(name, format::PK | format::CELLS);
                }
                matches!(
                    name,
                    format::PK | format::SEQ | format::RANK | format::ROW | format::ROW_TS | format::TOMB
                ) || (name == format::MAX_TS && relative)
                    || (matches!(f.data_type(), arrow::datatypes::DataType::Struct(_))
                        && self.columns.as_ref().is_none_or(|c| c.iter().any(|n| n == name)))
            })
            .map(|(i, _)| i)
            .collect();
        let names = self.seg.attribute_names(md);
        let mask = ProjectionMask::roots(md.file_metadata().schema_descr(), wanted);
        let total = md.row_group(rg).num_rows() as usize;
        // Batch buffers are sized up front: a point get selects one page.
        let batch_rows = (rows.end - rows.start).clamp(1, 8192);
        let selection = RowSelection::from_consecutive_ranges(std::iter::once(rows), total);
        let mut stream = ParquetRecordBatchStreamBuilder::new_with_metadata(self.seg.object_reader(true), meta.clone())
            .with_row_groups(vec![rg])
            .with_projection(mask)
            .with_row_selection(selection)
            .with_batch_size(batch_rows)
            .build()
            .map_err(|e| Error::corruption(format!("segment {}: {e}", self.seg.meta.path)))?;
        while let Some(batch) = stream.next().await {
            let mut batch = batch.map_err(|e| super::read_error(&self.seg.meta.path, e))?;
            if relative && cells.is_none() {
                batch = versions::to_absolute(&batch)?;
            }
            let decoded = match cells {
                Some(_) => decode_cells_batch(&batch, &self.range, &names, self.columns.as_deref(), out),
                None => decode_batch(&batch, &self.range, out),
            };
            decoded.map_err(|e| Error::corruption(format!("segment {}: {}", self.seg.meta.path, e.message())))?;
        }
        Ok(WindowRead {
            // The remote path's states are whole when read from `__cells`.
            whole_keys: cells.is_some(),
            past_end: false,
        })
    }
}

/// What reading one window of rows found.
struct WindowRead {
    /// Every state read is its key's whole state (read from `__cells`), so
    /// none goes on in the next window.
    whole_keys: bool,
    /// A key at or past the range's end was met: a forward scan is done.
    past_end: bool,
}

/// Appends the key states of a batch of `__pk` and `__cells` that fall in
/// `range` to `out` (a key's other ranks have no `__cells`).
fn decode_cells_batch(
    batch: &RecordBatch,
    range: &KeyRange,
    names: &[String],
    columns: Option<&[String]>,
    out: &mut Vec<(Vec<u8>, RowState)>,
) -> Result<()> {
    let pk = format::column(batch, format::PK)?.as_binary::<i32>();
    let cells = format::column(batch, format::CELLS)?.as_binary::<i32>();
    for r in 0..batch.num_rows() {
        if cells.is_valid(r) && range.contains(pk.value(r)) {
            out.push((
                pk.value(r).to_vec(),
                super::cells::decode_cells(cells.value(r), names, columns)?,
            ));
        }
    }
    Ok(())
}

/// The rows of a row group whose `__pk` pages (sorted) can hold keys in
/// `range`; the whole row group without a page index.
fn selected_rows(md: &ParquetMetaData, rg: usize, range: &KeyRange) -> Range<usize> {
    let total = md.row_group(rg).num_rows() as usize;
    let Some((index, pages)) = pk_page_index(md, rg) else {
        return 0..total;
    };
    let n = pages.len();
    // Keys are sorted, so page bounds are too: the pages that overlap the
    // range are one run, found by two binary searches.
    let below = |i: usize| index.max_value(i).is_some_and(|max| max < range.lo.as_slice());
    let starts_before_end = |i: usize| {
        index
            .min_value(i)
            .is_none_or(|min| range.hi.as_deref().is_none_or(|h| min < h))
    };
    let first = partition(n, below);
    let end = partition(n, starts_before_end);
    if first >= end {
        return 0..0;
    }
    pages[first].first_row_index as usize..pages.get(end).map_or(total, |p| p.first_row_index as usize)
}

struct AttrColumn<'a> {
    name: String,
    present: Option<arrow::buffer::NullBuffer>,
    ts: &'a Int64Array,
    i: Option<&'a Int64Array>,
    d: Option<&'a Float64Array>,
    s: Option<&'a StringArray>,
    b: Option<&'a BinaryArray>,
    t: Option<&'a BooleanArray>,
}

impl AttrColumn<'_> {
    fn value(&self, row: usize) -> Option<(i64, Value)> {
        if self.present.as_ref().is_some_and(|p| p.is_null(row)) {
            return None;
        }
        let ts = self.ts.value(row);
        let v = if let Some(a) = self.i.filter(|a| a.is_valid(row)) {
            Value::Integer(a.value(row))
        } else if let Some(a) = self.d.filter(|a| a.is_valid(row)) {
            Value::Double(a.value(row))
        } else if let Some(a) = self.s.filter(|a| a.is_valid(row)) {
            Value::String(a.value(row).to_string())
        } else if let Some(a) = self.b.filter(|a| a.is_valid(row)) {
            Value::Binary(a.value(row).to_vec())
        } else if let Some(a) = self.t.filter(|a| a.is_valid(row)) {
            Value::Boolean(a.value(row))
        } else {
            return None;
        };
        Some((ts, v))
    }
}

/// Appends the key states of `batch` that fall in `range` to `out`. A key's
/// ranks are consecutive rows; a key may continue from the previous batch.
pub(crate) fn decode_batch(batch: &RecordBatch, range: &KeyRange, out: &mut Vec<(Vec<u8>, RowState)>) -> Result<()> {
    let pk = format::column(batch, format::PK)?.as_binary::<i32>();
    let seq = format::column(batch, format::SEQ)?.as_primitive::<UInt64Type>();
    let rank: &UInt16Array = format::column(batch, format::RANK)?.as_primitive::<UInt16Type>();
    let row: &UInt8Array = format::column(batch, format::ROW)?.as_primitive::<UInt8Type>();
    let row_ts = format::column(batch, format::ROW_TS)?.as_primitive::<Int64Type>();
    let tomb = format::column(batch, format::TOMB)?.as_binary::<i32>();
    let seq: &UInt64Array = seq;
    let mut attrs = Vec::new();
    for (field, arr) in batch.schema().fields().iter().zip(batch.columns()) {
        let Some(st) = arr.as_struct_opt() else {
            continue;
        };
        let child = |n: &str| st.column_by_name(n);
        attrs.push(AttrColumn {
            name: field.name().clone(),
            present: format::cell_present(st),
            ts: child(format::TS)
                .and_then(|a| a.as_primitive_opt::<Int64Type>())
                .ok_or_else(|| Error::corruption(format!("column {} has no ts child", field.name())))?,
            i: child("i").and_then(|a| a.as_primitive_opt::<Int64Type>()),
            d: child("d").and_then(|a| a.as_primitive_opt::<arrow::datatypes::Float64Type>()),
            s: child("s").and_then(|a| a.as_string_opt::<i32>()),
            b: child("b").and_then(|a| a.as_binary_opt::<i32>()),
            t: child("t").and_then(|a| a.as_boolean_opt()),
        });
    }
    for r in 0..batch.num_rows() {
        let key = pk.value(r);
        if !range.contains(key) {
            continue;
        }
        let continues = rank.value(r) > 0 && out.last().is_some_and(|(k, _)| k.as_slice() == key);
        if !continues {
            let mut st = RowState {
                seq: seq.value(r),
                replace: row.value(r) != ROW_MERGE,
                row_ts: row_ts.is_valid(r).then(|| row_ts.value(r)),
                columns: Default::default(),
            };
            if tomb.is_valid(r) {
                decode_tombstones(tomb.value(r), &mut st)?;
            }
            out.push((key.to_vec(), st));
        }
        let Some((_, st)) = out.last_mut() else {
            continue;
        };
        for a in &attrs {
            if let Some(cell) = a.value(r) {
                st.columns.entry(a.name.clone()).or_default().versions.push(cell);
            }
        }
    }
    Ok(())
}
