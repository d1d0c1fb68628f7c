//! Point and range reads of a local segment's `__pk` and `__cells`
//! leaves, page by page, through a bounded cache of decoded pages.
//!
//! Reads of these two leaves used to borrow the segment's memory map:
//! every page a get touched stayed resident (`RssFile`) until the kernel
//! wanted it back, so the point reads of a 10M-row table held ~600 MB of
//! mapped pages whatever the memory budget said, and each get
//! decompressed its pages again. Here a page is read with `pread` (its
//! checksum blocks checked), decompressed and decoded once, and kept in
//! the database's [`PageCache`] (RocksDB's block cache holds blocks
//! uncompressed the same way); a get that finds its pages there does no
//! I/O and no decompression.
//!
//! Invariants: no byte is decoded before its checksum blocks matched; a
//! page in the cache is keyed by its segment's process-unique id and its
//! byte offset, and segment files never change, so an entry is never
//! stale; the cache's weight (the decoded pages' bytes) stays within its
//! capacity, so what these reads hold is bounded by it alone (they never
//! touch the map).

use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Buf, Bytes};
use parquet::column::reader::ColumnReaderImpl;
use parquet::data_type::{ByteArray, ByteArrayType, DataType};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::page_index::offset_index::PageLocation;
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::serialized_reader::SerializedPageReader;

use super::checksum::BlockChecks;
use super::point::page_of;
use crate::error::{Error, Result};

/// Decoded pages of the database's local segments; see the module docs.
pub(crate) struct PageCache {
    pages: quick_cache::sync::Cache<(u64, u64), Arc<Page>, PageWeight>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Clone)]
struct PageWeight;

impl quick_cache::Weighter<(u64, u64), Arc<Page>> for PageWeight {
    fn weight(&self, _: &(u64, u64), page: &Arc<Page>) -> u64 {
        page.weight
    }
}

/// What the cache has done, for `Db::memory_stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageCacheStats {
    /// Pages found decoded.
    pub hits: u64,
    /// Pages read, checked and decoded.
    pub misses: u64,
    /// Bytes of decoded pages held.
    pub bytes: u64,
    /// The bound on `bytes`.
    pub capacity: u64,
}

impl PageCache {
    /// A cache of at most `capacity` bytes of decoded pages (0: pages are
    /// decoded for each read and not kept).
    pub fn new(capacity: u64) -> Self {
        // quick_cache sizes its table from an estimate of the entries: a
        // decoded 2 KiB page weighs ~4-8 KiB.
        let items = (capacity / 4096).clamp(16, 1 << 20) as usize;
        PageCache {
            pages: quick_cache::sync::Cache::with_weighter(items, capacity, PageWeight),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn stats(&self) -> PageCacheStats {
        PageCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes: self.pages.weight(),
            capacity: self.pages.capacity(),
        }
    }
}

/// Ids of segments in the page cache, unique in the process.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A new segment id for the page cache.
pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// One decoded page of a byte-array leaf: its rows' values, `None` where
/// a row has none.
pub(crate) struct Page {
    /// The row group's row this page starts at.
    pub first_row: usize,
    pub values: Vec<Option<ByteArray>>,
    /// Bytes it holds (its values share the decompressed page).
    weight: u64,
}

impl Page {
    /// The row group's row after this page's last.
    pub fn end_row(&self) -> usize {
        self.first_row + self.values.len()
    }

    pub fn holds(&self, row: usize) -> bool {
        (self.first_row..self.end_row()).contains(&row)
    }

    /// The value of row `row` (which the page holds).
    pub fn value(&self, row: usize) -> Option<&ByteArray> {
        self.values.get(row - self.first_row)?.as_ref()
    }
}

/// A segment file read with `pread`, every read widened to whole checksum
/// blocks and checked before it is handed out.
pub(crate) struct PreadFile {
    file: std::fs::File,
    len: u64,
    checks: Option<Arc<BlockChecks>>,
    path: String,
}

impl PreadFile {
    /// `checks`: the file's block checksums (`None`: reads are not checked).
    pub fn open(local: &std::path::Path, checks: Option<Arc<BlockChecks>>, path: &str) -> Result<Self> {
        let err = |e| Error::io(format!("open segment {}", local.display()), e);
        let file = std::fs::File::open(local).map_err(err)?;
        let len = file.metadata().map_err(err)?.len();
        Ok(PreadFile {
            file,
            len,
            checks,
            path: path.to_string(),
        })
    }
}

impl Length for PreadFile {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for PreadFile {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        let rest = self.len.saturating_sub(start) as usize;
        Ok(self.get_bytes(start, rest)?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let want = start..start.saturating_add(length as u64);
        if want.end > self.len {
            return Err(parquet::errors::ParquetError::EOF(format!(
                "segment {}: bytes {}..{} are past its end ({} bytes)",
                self.path, want.start, want.end, self.len
            )));
        }
        let wide = self.checks.as_ref().map_or(want.clone(), |c| c.whole_blocks(&want));
        let mut buf = vec![0u8; (wide.end - wide.start) as usize];
        self.file.read_exact_at(&mut buf, wide.start).map_err(|e| {
            parquet::errors::ParquetError::External(Box::new(Error::io(format!("read segment {}", self.path), e)))
        })?;
        if let Some(c) = &self.checks {
            c.check_fetched(&wide, &buf)
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))?;
        }
        let at = (want.start - wide.start) as usize;
        Ok(Bytes::from(buf).slice(at..at + length))
    }
}

/// The pages of one row group of a local segment, through the cache.
pub(crate) struct GroupPages<'a> {
    pub cache: Option<&'a PageCache>,
    /// The segment's id in the cache.
    pub id: u64,
    pub file: &'a Arc<PreadFile>,
    pub md: &'a ParquetMetaData,
    pub rg: usize,
}

impl GroupPages<'_> {
    fn err(&self, what: impl std::fmt::Display) -> Error {
        Error::corruption(format!("segment {}: {what}", self.file.path))
    }

    fn locations(&self, leaf: usize) -> Option<&[PageLocation]> {
        self.md
            .offset_index()
            .and_then(|o| o.get(self.rg))
            .and_then(|o| o.get(leaf))
            .map(|o| o.page_locations().as_slice())
            .filter(|p| !p.is_empty())
    }

    /// The page of leaf `leaf` that holds `row`; the whole column chunk as
    /// one page when the file has no offset index.
    pub fn page_holding(&self, leaf: usize, row: usize) -> Result<Arc<Page>> {
        let i = self.locations(leaf).map(|all| page_of(all, row));
        self.page(leaf, i)
    }

    /// Page `i` of leaf `leaf` (`None`: the whole chunk).
    pub fn page(&self, leaf: usize, i: Option<usize>) -> Result<Arc<Page>> {
        let offset = match (i, self.locations(leaf)) {
            (Some(i), Some(all)) => all
                .get(i)
                .ok_or_else(|| self.err(format!("row group {} has no page {i} in leaf {leaf}", self.rg)))?
                .offset as u64,
            _ => self.md.row_group(self.rg).column(leaf).byte_range().0,
        };
        let Some(cache) = self.cache else {
            return self.load(leaf, i).map(Arc::new);
        };
        let key = (self.id, offset);
        if let Some(p) = cache.pages.get(&key) {
            cache.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(p);
        }
        cache.misses.fetch_add(1, Ordering::Relaxed);
        let page = Arc::new(self.load(leaf, i)?);
        cache.pages.insert(key, page.clone());
        Ok(page)
    }

    /// Reads, checks and decodes page `i` of leaf `leaf` (a flat byte
    /// array leaf).
    fn load(&self, leaf: usize, i: Option<usize>) -> Result<Page> {
        let descr = self.md.file_metadata().schema_descr().column(leaf);
        if descr.physical_type() != ByteArrayType::get_physical_type() || descr.max_rep_level() != 0 {
            return Err(self.err(format!(
                "column {} is {:?} (repetition {}), expected a flat byte array",
                descr.path(),
                descr.physical_type(),
                descr.max_rep_level()
            )));
        }
        let group = self.md.row_group(self.rg);
        let total = group.num_rows() as usize;
        let (locations, rows) = match (i, self.locations(leaf)) {
            (Some(i), Some(all)) => {
                let end = all.get(i + 1).map_or(total, |n| n.first_row_index as usize);
                // The chunk's first page goes first, so that the reader
                // still finds a dictionary page before it; it then counts
                // as one page of every row before page `i`, which
                // `skip_records` passes over unread.
                let mut pick = Vec::with_capacity(2);
                if i > 0 {
                    pick.push(all[0].clone());
                }
                pick.push(all[i].clone());
                (Some(pick), all[i].first_row_index as usize..end)
            }
            _ => (None, 0..total),
        };
        let path = self.file.path.as_str();
        let pages = SerializedPageReader::new(self.file.clone(), group.column(leaf), total, locations)
            .map_err(|e| super::read_error(path, e))?;
        let mut reader = ColumnReaderImpl::<ByteArrayType>::new(descr.clone(), Box::new(pages));
        let skipped = reader.skip_records(rows.start).map_err(|e| super::read_error(path, e))?;
        if skipped != rows.start {
            return Err(self.err(format!("row group {} ends before row {}", self.rg, rows.start)));
        }
        let max_def = descr.max_def_level();
        let n = rows.len();
        let mut defs = Vec::with_capacity(n);
        let mut values = Vec::with_capacity(n);
        let mut read = 0;
        while read < n {
            let (records, _, _) = reader
                .read_records(n - read, (max_def > 0).then_some(&mut defs), None, &mut values)
                .map_err(|e| super::read_error(path, e))?;
            if records == 0 {
                return Err(self.err(format!("row group {} ends inside rows {rows:?}", self.rg)));
            }
            read += records;
        }
        let bytes: usize = values.iter().map(|v: &ByteArray| v.len()).sum();
        let values: Vec<Option<ByteArray>> = if max_def == 0 {
            values.into_iter().map(Some).collect()
        } else {
            let mut values = values.into_iter();
            defs.iter()
                .map(|&d| match d == max_def {
                    true => values.next().map(Some).ok_or_else(|| self.err("fewer values than levels")),
                    false => Ok(None),
                })
                .collect::<Result<_>>()?
        };
        Ok(Page {
            first_row: rows.start,
            weight: (bytes + values.len() * std::mem::size_of::<Option<ByteArray>>() + 128) as u64,
            values,
        })
    }

    /// The first row of `key` in this row group, found in the `__pk` page
    /// (leaf 0) whose largest key is not below it; `None` when no row
    /// holds it.
    pub fn find_key(&self, key: &[u8]) -> Result<Option<usize>> {
        let (page, rows) = super::scan::first_page_reaching(self.md, self.rg, key);
        if rows.is_empty() {
            return Ok(None);
        }
        if page.is_some_and(|(index, i)| index.min_value(i).is_some_and(|min| key < min)) {
            return Ok(None);
        }
        let page = self.page(0, page.map(|(_, i)| i))?;
        let at = super::point::partition(page.values.len(), |r| {
            page.values[r].as_ref().is_some_and(|k| k.data() < key)
        });
        Ok(page.values.get(at).and_then(|k| k.as_ref()).is_some_and(|k| k.data() == key).then_some(page.first_row + at))
    }

    /// The rows of the key whose first row is `first` (a key's rows are
    /// consecutive), through the `__pk` pages.
    pub fn key_rows(&self, first: usize) -> Result<Range<usize>> {
        let mut page = self.page_holding(0, first)?;
        let key = page.value(first).ok_or_else(|| self.err("__pk is null"))?.clone();
        let total = self.md.row_group(self.rg).num_rows() as usize;
        let mut end = first + 1;
        while end < total {
            if !page.holds(end) {
                page = self.page_holding(0, end)?;
            }
            if page.value(end).is_none_or(|k| k != &key) {
                break;
            }
            end += 1;
        }
        Ok(first..end)
    }
}

/// Where a range read stands in a row group's `__pk` and `__cells` pages:
/// the next window goes on from the pages the last one ended in.
pub(crate) struct CellsCursor {
    /// The row group it reads.
    pub rg: usize,
    /// The row it stands at.
    pub next: usize,
    pk: Option<Arc<Page>>,
    cells: Option<Arc<Page>>,
}

impl CellsCursor {
    pub fn new(rg: usize, row: usize) -> Self {
        CellsCursor {
            rg,
            next: row,
            pk: None,
            cells: None,
        }
    }

    /// Reads the next `n` rows (of `group`, this cursor's row group, whose
    /// `__cells` is leaf `cells_leaf`) and calls `f(key, cells)` for each
    /// that starts a key (the other rows of a key have no `__cells`), in
    /// key order, until it breaks. The cursor stands after the `n` rows
    /// either way.
    pub fn each(
        &mut self,
        group: &GroupPages<'_>,
        cells_leaf: usize,
        n: usize,
        mut f: impl FnMut(&ByteArray, &ByteArray) -> Result<std::ops::ControlFlow<()>>,
    ) -> Result<()> {
        let rows = self.next..self.next + n;
        self.next = rows.end;
        for row in rows {
            let cells = fresh(&mut self.cells, |p| group.page_holding(cells_leaf, p), row)?;
            let Some(c) = cells.value(row) else { continue };
            let pk = fresh(&mut self.pk, |p| group.page_holding(0, p), row)?;
            let k = pk.value(row).ok_or_else(|| group.err("__pk is null"))?;
            if f(k, c)?.is_break() {
                break;
            }
        }
        Ok(())
    }
}

/// The page in `slot`, replaced by `load(row)`'s when it does not hold `row`.
fn fresh<'p>(
    slot: &'p mut Option<Arc<Page>>,
    load: impl FnOnce(usize) -> Result<Arc<Page>>,
    row: usize,
) -> Result<&'p Page> {
    if !slot.as_ref().is_some_and(|p| p.holds(row)) {
        *slot = Some(load(row)?);
    }
    Ok(slot.as_ref().expect("set above"))
}
