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
use parquet::basic::Compression;
use parquet::column::page::PageReader;
use parquet::column::reader::ColumnReaderImpl;
use parquet::data_type::{ByteArray, ByteArrayType, DataType};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::page_index::column_index::{ByteArrayColumnIndex, ColumnIndexMetaData};
use parquet::file::page_index::offset_index::PageLocation;
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::serialized_reader::SerializedPageReader;

use super::checksum::BlockChecks;
use super::page_decode::{NULL, plain_offsets, unzstd};
use super::point::{page_of, partition};
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
        page.weight()
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

/// One decoded page of a byte-array leaf: the decompressed page and,
/// per row, where its PLAIN-encoded value (`[length: u32 LE][bytes]`)
/// starts in it. (A value per row cost 32 bytes as Parquet's
/// `ByteArray`, more than a `__pk` key itself, and decoding them cost
/// more than the page's decompression.)
pub(crate) struct Page {
    /// The row group's row this page starts at.
    pub first_row: usize,
    buf: Bytes,
    /// Per row, the offset of its value in `buf`; [`NULL`] where the row
    /// has none.
    at: Vec<u32>,
}

impl Page {
    /// The row group's row after this page's last.
    pub fn end_row(&self) -> usize {
        self.first_row + self.at.len()
    }

    pub fn holds(&self, row: usize) -> bool {
        (self.first_row..self.end_row()).contains(&row)
    }

    /// The value of row `row` (which the page holds), `None` when null.
    /// (Offsets and lengths were checked against the page when it was
    /// decoded.)
    pub fn value(&self, row: usize) -> Option<&[u8]> {
        let at = *self.at.get(row.checked_sub(self.first_row)?)?;
        if at == NULL {
            return None;
        }
        let at = at as usize;
        let len = u32::from_le_bytes(self.buf.get(at..at + 4)?.try_into().ok()?) as usize;
        self.buf.get(at + 4..at + 4 + len)
    }

    fn weight(&self) -> u64 {
        (self.buf.len() + self.at.capacity() * 4 + 96) as u64
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
    /// The open segment `file` (`path`: its name in the manifest);
    /// `checks`: the file's block checksums (`None`: reads are not checked).
    pub fn new(file: std::fs::File, checks: Option<Arc<BlockChecks>>, path: &str) -> std::io::Result<Self> {
        let len = file.metadata()?.len();
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
            (Some(i), Some(all)) => {
                all.get(i)
                    .ok_or_else(|| self.err(format!("row group {} has no page {i} in leaf {leaf}", self.rg)))?
                    .offset as u64
            }
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
        self.load_with(leaf, i, true)
    }

    /// [`Self::load`]; `direct`: PLAIN pages are decoded here rather than
    /// by Parquet's column reader (off only in tests, to compare).
    fn load_with(&self, leaf: usize, i: Option<usize>, direct: bool) -> Result<Page> {
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
        let n = rows.len();
        let chunk = group.column(leaf);
        // A page of one PLAIN byte array leaf without a dictionary (as
        // `__pk` and `__cells` are written) is decoded here directly.
        if direct && chunk.dictionary_page_offset().is_none() && locations.is_some() {
            // Under ZSTD the page is read as stored (the reader is told
            // the chunk is uncompressed) and decompressed with this
            // thread's context: Parquet's reader makes a new one per page
            // reader, which cost a get ~45 us.
            let zstd = matches!(chunk.compression(), Compression::ZSTD(_));
            let stored;
            let meta = if zstd {
                stored = chunk
                    .clone()
                    .into_builder()
                    .set_compression(Compression::UNCOMPRESSED)
                    .build()
                    .map_err(|e| super::read_error(path, e))?;
                &stored
            } else {
                chunk
            };
            let mut pages = SerializedPageReader::new(self.file.clone(), meta, total, locations.clone())
                .map_err(|e| super::read_error(path, e))?;
            if i.is_some_and(|i| i > 0) {
                pages.skip_next_page().map_err(|e| super::read_error(path, e))?;
            }
            let page = pages
                .get_next_page()
                .map_err(|e| super::read_error(path, e))?
                .ok_or_else(|| {
                    self.err(format!(
                        "row group {} leaf {leaf} ends before row {}",
                        self.rg, rows.start
                    ))
                })?;
            let page = if zstd {
                unzstd(page).map_err(|e| self.err(format!("row group {} leaf {leaf}: {e}", self.rg)))?
            } else {
                page
            };
            if let Some(at) = plain_offsets(&page, descr.max_def_level(), n).map_err(|e| self.err(e))? {
                return Ok(Page {
                    first_row: rows.start,
                    buf: page.buffer().clone(),
                    at,
                });
            }
            #[cfg(test)]
            tests::FALLBACKS.fetch_add(1, Ordering::Relaxed);
        }
        let pages = SerializedPageReader::new(self.file.clone(), chunk, total, locations)
            .map_err(|e| super::read_error(path, e))?;
        let mut reader = ColumnReaderImpl::<ByteArrayType>::new(descr.clone(), Box::new(pages));
        let skipped = reader
            .skip_records(rows.start)
            .map_err(|e| super::read_error(path, e))?;
        if skipped != rows.start {
            return Err(self.err(format!("row group {} ends before row {}", self.rg, rows.start)));
        }
        let max_def = descr.max_def_level();
        let Some((defs, values)) =
            super::point::read_records(&mut reader, max_def, n).map_err(|e| super::read_error(path, e))?
        else {
            return Err(self.err(format!("row group {} ends inside rows {rows:?}", self.rg)));
        };
        // Laid out as a PLAIN page would be.
        let bytes: usize = values.iter().map(|v: &ByteArray| 4 + v.len()).sum();
        if bytes >= NULL as usize {
            return Err(self.err(format!("a page of row group {} holds {bytes} bytes of values", self.rg)));
        }
        let mut buf = Vec::with_capacity(bytes);
        let mut at = Vec::with_capacity(n);
        let mut values = values.into_iter();
        for r in 0..n {
            if max_def > 0 && defs.get(r) != Some(&max_def) {
                at.push(NULL);
                continue;
            }
            let v = values.next().ok_or_else(|| self.err("fewer values than levels"))?;
            at.push(buf.len() as u32);
            buf.extend_from_slice(&(v.len() as u32).to_le_bytes());
            buf.extend_from_slice(v.data());
        }
        Ok(Page {
            first_row: rows.start,
            buf: Bytes::from(buf),
            at,
        })
    }

    /// The first row of `key` in this row group, found in the `__pk` page
    /// (leaf 0) whose largest key is not below it; `None` when no row
    /// holds it.
    pub fn find_key(&self, key: &[u8]) -> Result<Option<usize>> {
        let (page, rows) = first_page_reaching(self.md, self.rg, key);
        if rows.is_empty() {
            return Ok(None);
        }
        if page.is_some_and(|(index, i)| index.min_value(i).is_some_and(|min| key < min)) {
            return Ok(None);
        }
        let page = self.page(0, page.map(|(_, i)| i))?;
        let (first, rows) = (page.first_row, page.end_row() - page.first_row);
        let at = partition(rows, |r| page.value(first + r).is_some_and(|k| k < key));
        Ok((page.value(first + at) == Some(key)).then_some(first + at))
    }

    /// The rows of the key whose first row is `first` (a key's rows are
    /// consecutive), through the `__pk` pages.
    pub fn key_rows(&self, first: usize) -> Result<Range<usize>> {
        let mut page = self.page_holding(0, first)?;
        let key = page.value(first).ok_or_else(|| self.err("__pk is null"))?.to_vec();
        let total = self.md.row_group(self.rg).num_rows() as usize;
        let mut end = first + 1;
        while end < total {
            if !page.holds(end) {
                page = self.page_holding(0, end)?;
            }
            if page.value(end).is_none_or(|k| k != key) {
                break;
            }
            end += 1;
        }
        Ok(first..end)
    }
}

/// The rows of row group `rg`'s first `__pk` page whose largest key is not
/// below `key`: that page holds the first row at or past `key`; with the
/// page index and the page's number in it. The whole row group without a
/// page index.
pub(super) fn first_page_reaching<'m>(
    md: &'m ParquetMetaData,
    rg: usize,
    key: &[u8],
) -> (Option<(&'m ByteArrayColumnIndex, usize)>, Range<usize>) {
    let total = md.row_group(rg).num_rows() as usize;
    let Some((index, pages)) = pk_page_index(md, rg) else {
        return (None, 0..total);
    };
    let i = partition(pages.len(), |i| index.max_value(i).is_some_and(|max| max < key));
    match pages.get(i) {
        Some(p) => (
            Some((index, i)),
            p.first_row_index as usize..pages.get(i + 1).map_or(total, |n| n.first_row_index as usize),
        ),
        None => (None, total..total),
    }
}

/// The page index of row group `rg`'s `__pk` column (leaf 0): per-page key
/// bounds and page locations. `None` without one.
pub(super) fn pk_page_index(md: &ParquetMetaData, rg: usize) -> Option<(&ByteArrayColumnIndex, &[PageLocation])> {
    let index = match md.column_index()?.get(rg)?.first()? {
        ColumnIndexMetaData::BYTE_ARRAY(index) => index,
        _ => return None,
    };
    let pages = md.offset_index()?.get(rg)?.first()?.page_locations();
    Some((index, pages))
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
        mut f: impl FnMut(KeyCells) -> Result<std::ops::ControlFlow<()>>,
    ) -> Result<()> {
        let rows = self.next..self.next + n;
        self.next = rows.end;
        for row in rows {
            let cells = fresh(&mut self.cells, |p| group.page_holding(cells_leaf, p), row)?;
            if cells.value(row).is_none() {
                continue;
            }
            let pk = fresh(&mut self.pk, |p| group.page_holding(0, p), row)?;
            if pk.value(row).is_none() {
                return Err(group.err("__pk is null"));
            }
            let found = KeyCells {
                pk: pk.clone(),
                cells: cells.clone(),
                row,
            };
            if f(found)?.is_break() {
                break;
            }
        }
        Ok(())
    }
}

/// A key's `__pk` and `__cells` values in their decoded pages.
pub(crate) struct KeyCells {
    pk: Arc<Page>,
    cells: Arc<Page>,
    row: usize,
}

impl KeyCells {
    pub fn key(&self) -> &[u8] {
        self.pk.value(self.row).unwrap_or_default()
    }

    pub fn cells(&self) -> &[u8] {
        self.cells.value(self.row).unwrap_or_default()
    }
}

/// The page in `slot`, replaced by `load(row)`'s when it does not hold `row`.
fn fresh(
    slot: &mut Option<Arc<Page>>,
    load: impl FnOnce(usize) -> Result<Arc<Page>>,
    row: usize,
) -> Result<&Arc<Page>> {
    if !slot.as_ref().is_some_and(|p| p.holds(row)) {
        *slot = Some(load(row)?);
    }
    Ok(slot.as_ref().expect("set above"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, BinaryArray, RecordBatch};
    use parquet::arrow::ArrowWriter;
    use parquet::file::metadata::{PageIndexPolicy, ParquetMetaDataReader};
    use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};

    /// Pages the direct decoder left to the column reader.
    pub(super) static FALLBACKS: AtomicU64 = AtomicU64::new(0);

    /// Pages decoded directly equal what Parquet's column reader makes of
    /// them, for v1 and v2 pages, required and nullable leaves, runs of
    /// nulls and scattered ones, compressed or not.
    #[test]
    fn direct_decoding_matches_the_column_reader() {
        use parquet::basic::Encoding;
        for (version, codec, encoding) in [
            (WriterVersion::PARQUET_1_0, Compression::LZ4_RAW, Encoding::PLAIN),
            (WriterVersion::PARQUET_2_0, Compression::LZ4_RAW, Encoding::PLAIN),
            (WriterVersion::PARQUET_1_0, Compression::UNCOMPRESSED, Encoding::PLAIN),
            (
                WriterVersion::PARQUET_1_0,
                Compression::ZSTD(Default::default()),
                Encoding::PLAIN,
            ),
            (
                WriterVersion::PARQUET_2_0,
                Compression::ZSTD(Default::default()),
                Encoding::PLAIN,
            ),
            // Not PLAIN: left to the column reader.
            (
                WriterVersion::PARQUET_2_0,
                Compression::LZ4_RAW,
                Encoding::DELTA_BYTE_ARRAY,
            ),
        ] {
            let fallbacks = FALLBACKS.load(Ordering::Relaxed);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("p.parquet");
            let rows = 1000;
            let keys: Vec<Vec<u8>> = (0..rows).map(|i| format!("key{i:05}").into_bytes()).collect();
            // Nulls in runs (rows 100..300) and scattered (every third).
            let cells: Vec<Option<Vec<u8>>> = (0..rows)
                .map(|i| (!(100..300).contains(&i) && i % 3 != 0).then(|| vec![i as u8; i % 7]))
                .collect();
            let batch = RecordBatch::try_from_iter([
                ("k", Arc::new(BinaryArray::from_iter_values(&keys)) as ArrayRef),
                (
                    "c",
                    Arc::new(BinaryArray::from_iter(cells.iter().map(|c| c.as_deref()))) as ArrayRef,
                ),
            ])
            .unwrap();
            let props = WriterProperties::builder()
                .set_writer_version(version)
                .set_compression(codec)
                .set_dictionary_enabled(false)
                .set_encoding(encoding)
                .set_statistics_enabled(EnabledStatistics::Page)
                .set_data_page_row_count_limit(64)
                .set_write_batch_size(16)
                .set_max_row_group_row_count(Some(400))
                .build();
            let mut w =
                ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), Some(props)).unwrap();
            w.write(&batch).unwrap();
            w.close().unwrap();
            let file = Arc::new(PreadFile::new(std::fs::File::open(&path).unwrap(), None, "p.parquet").unwrap());
            let md = ParquetMetaDataReader::new()
                .with_page_index_policy(PageIndexPolicy::Required)
                .parse_and_finish(&*file)
                .unwrap();
            let mut first = 0;
            for rg in 0..md.num_row_groups() {
                let group = GroupPages {
                    cache: None,
                    id: 0,
                    file: &file,
                    md: &md,
                    rg,
                };
                let n = md.row_group(rg).num_rows() as usize;
                for leaf in 0..2 {
                    let pages = group.locations(leaf).unwrap().len();
                    assert!(pages > 1, "{version:?}: one page");
                    for i in 0..pages {
                        let direct = group.load_with(leaf, Some(i), true).unwrap();
                        let reader = group.load_with(leaf, Some(i), false).unwrap();
                        assert_eq!(
                            (direct.first_row, direct.end_row()),
                            (reader.first_row, reader.end_row())
                        );
                        for r in direct.first_row..direct.end_row() {
                            let want = match leaf {
                                0 => Some(keys[first + r].as_slice()),
                                _ => cells[first + r].as_deref(),
                            };
                            assert_eq!(
                                direct.value(r),
                                want,
                                "{version:?} {codec:?} rg {rg} leaf {leaf} row {r}"
                            );
                            assert_eq!(reader.value(r), want);
                        }
                    }
                }
                first += n;
            }
            assert_eq!(first, rows);
            let fallbacks = FALLBACKS.load(Ordering::Relaxed) - fallbacks;
            match encoding {
                Encoding::PLAIN => assert_eq!(fallbacks, 0, "{version:?}: a PLAIN page was not decoded directly"),
                _ => assert!(fallbacks > 0),
            }
        }
    }
}
