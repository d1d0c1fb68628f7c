//! A segment file's bytes and metadata: the reader every scan and point
//! get goes through, the Parquet footer and page index (read once per
//! process and cached), and the `__pk` bloom filters.
//!
//! Invariants: no byte reaches a decoder before its checksum matched; on a
//! local disk reads borrow the mapped file; a remote segment's tail comes
//! from the local tail cache only when its CRC-32C matches the manifest.

use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder};
use parquet::bloom_filter::Sbbf;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::statistics::Statistics;

use super::prefetch::{Prefetch, checksum_err, fetch_checked};
use super::{Segment, checksum};
use crate::error::{Error, Result};
use crate::model::key::KeyRange;

impl Segment {
    /// Bytes per top-level column of this segment, from its footer:
    /// (column, compressed, uncompressed), in schema order. Struct
    /// columns sum their leaves.
    pub async fn column_bytes(&self) -> Result<Vec<(String, u64, u64)>> {
        let md = self.reader_metadata().await?.metadata().clone();
        let mut out: Vec<(String, u64, u64)> = Vec::new();
        for rg in md.row_groups() {
            for c in rg.columns() {
                let top = &c.column_path().parts()[0];
                let (z, u) = (c.compressed_size().max(0) as u64, c.uncompressed_size().max(0) as u64);
                match out.iter_mut().find(|(name, _, _)| name == top) {
                    Some(e) => {
                        e.1 += z;
                        e.2 += u;
                    }
                    None => out.push((top.clone(), z, u)),
                }
            }
        }
        Ok(out)
    }

    /// The Parquet footer with its page index, read once and cached.
    pub async fn reader_metadata(&self) -> Result<&ArrowReaderMetadata> {
        self.reader_meta
            .get_or_try_init(|| {
                super::no_panic_async(&self.meta.path, async {
                    if self.read_checks == super::ReadChecks::Verify && self.meta.checksum.is_none() {
                        return Err(Error::new(
                            crate::error::ErrorKind::Corruption,
                            format!(
                                "segment {} was written before segment checksums, so damage in it could not be \
                                 told from data; it is not decoded unless asked: open the database with \
                                 `DbOptions::legacy_segments` (`cellar --legacy-segments ...`) and compact the table \
                                 to rewrite it with checksums, or verify it with `cellar check --legacy`",
                                self.meta.path
                            ),
                        ));
                    }
                    // A store that fails (network, credentials) is I/O, not damage.
                    let corrupt = |e| super::read_error(&self.meta.path, e);
                    let mut reader = self.object_reader(true);
                    // The footer is parsed only once the tail's checksum matched.
                    let sum = (self.read_checks.verify() || self.tail_cache.is_some())
                        .then_some(self.meta.checksum.as_ref())
                        .flatten();
                    if let Some(sum) = sum {
                        let tail = match self.cached_tail(sum) {
                            Some(tail) => tail,
                            None => {
                                let tail = reader
                                    .get_bytes(sum.data_bytes..self.meta.size_bytes)
                                    .await
                                    .map_err(corrupt)?;
                                checksum::check_tail(&self.meta.path, sum, &tail)?;
                                self.cache_tail(&tail);
                                tail
                            }
                        };
                        reader.tail = Some((sum.data_bytes, tail));
                    }
                    let sum = sum.filter(|_| self.read_checks.verify());
                    let opts = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
                    let meta = ArrowReaderMetadata::load_async(&mut reader, opts)
                        .await
                        .map_err(corrupt)?;
                    if let Some(sum) = sum {
                        let table = meta
                        .metadata()
                        .file_metadata()
                        .key_value_metadata()
                        .and_then(|kv| kv.iter().find(|e| e.key == checksum::KEY))
                        .and_then(|e| e.value.as_deref())
                        .ok_or_else(|| {
                            Error::corruption(format!(
                                "segment {} is damaged: its manifest entry has checksums but its footer no block table",
                                self.meta.path
                            ))
                        })?;
                        let checks = checksum::BlockChecks::parse(&self.meta.path, sum.data_bytes, table)?;
                        let _ = self.checks.set(Arc::new(checks));
                    }
                    Ok(meta)
                })
            })
            .await
    }

    /// The tail from the local cache file, if there is one and its
    /// checksum matches.
    fn cached_tail(&self, sum: &checksum::FileChecksum) -> Option<Bytes> {
        let bytes = Bytes::from(std::fs::read(self.tail_cache.as_ref()?).ok()?);
        checksum::check_tail(&self.meta.path, sum, &bytes).ok()?;
        Some(bytes)
    }

    /// Keeps a checked tail in the cache file (best effort: a failure only
    /// costs the next process a read).
    fn cache_tail(&self, tail: &[u8]) {
        let Some(path) = &self.tail_cache else { return };
        let tmp = path.with_extension("tmp");
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|_| std::fs::write(&tmp, tail))
            .and_then(|_| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }

    /// The footer with every string column (PK columns and the `s` value
    /// children) read as `Utf8View`: no per-row copy of dictionary strings,
    /// and what DataFusion's own Parquet scans produce.
    pub async fn view_metadata(&self) -> Result<&ArrowReaderMetadata> {
        self.view_meta
            .get_or_try_init(|| async {
                let base = self.reader_metadata().await?;
                let schema = views_schema(base.schema());
                let opts = ArrowReaderOptions::new()
                    .with_page_index_policy(PageIndexPolicy::Optional)
                    .with_schema(schema);
                super::no_panic(&self.meta.path, || {
                    ArrowReaderMetadata::try_new(base.metadata().clone(), opts)
                        .map_err(|e| Error::corruption(format!("segment {}: {e}", self.meta.path)))
                })
            })
            .await
    }

    /// A reader of the file; `mapped`: reads on a local disk borrow pages of
    /// the mapped file instead of copying.
    pub(super) fn object_reader(&self, mapped: bool) -> SegmentFileReader {
        SegmentFileReader {
            store: self.store().clone(),
            path: self.object_path(),
            size: self.meta.size_bytes,
            local: if mapped { self.local_file().ok().flatten() } else { None },
            checks: self.checks.get().cloned(),
            tail: None,
            prefetch: None,
            chunk_cache: self.chunk_cache.clone(),
            residency: self.residency.clone(),
        }
    }

    /// The `__pk` bloom filters of every row group, read once and cached.
    pub(super) async fn blooms(&self) -> Result<&Vec<Option<Sbbf>>> {
        self.blooms
            .get_or_try_init(|| async {
                let meta = self.reader_metadata().await?.clone();
                let n = meta.metadata().num_row_groups();
                let mut b = ParquetRecordBatchStreamBuilder::new_with_metadata(self.object_reader(true), meta);
                let mut out = Vec::with_capacity(n);
                for rg in 0..n {
                    out.push(
                        b.get_row_group_column_bloom_filter(rg, 0)
                            .await
                            .map_err(|e| Error::corruption(format!("segment {} bloom filter: {e}", self.meta.path)))?,
                    );
                }
                Ok(out)
            })
            .await
    }

    /// True when some row group may hold `key` (key statistics and the
    /// bloom filter say it might).
    pub(super) async fn may_contain(&self, key: &[u8]) -> Result<bool> {
        let md = self.reader_metadata().await?.metadata().clone();
        let blooms = self.blooms().await?;
        let range = KeyRange::point(key);
        Ok(overlapping_row_groups(&md, &range)
            .into_iter()
            .any(|rg| blooms.get(rg).and_then(|b| b.as_ref()).is_none_or(|b| b.check(key))))
    }
}

/// Byte-range reads of a segment file through `object_store`.
pub(crate) struct SegmentFileReader {
    store: Arc<dyn object_store::ObjectStore>,
    path: object_store::path::Path,
    size: u64,
    /// Set on a local disk: the file mapped into memory, read without copies.
    local: Option<Arc<memmap2::Mmap>>,
    /// The block checksums every read of the data region is checked
    /// against (`None` for a segment without them, or before its footer
    /// was read).
    checks: Option<Arc<checksum::BlockChecks>>,
    /// The file's tail (page index and footer) from this offset, already
    /// read and checked while the footer is loaded.
    tail: Option<(u64, Bytes)>,
    /// Read-ahead of a scan of a remote segment.
    prefetch: Option<Prefetch>,
    /// The segment's place in the chunk cache, if it uses one.
    chunk_cache: Option<(Arc<super::chunk_cache::ChunkCache>, u64)>,
    /// Counts the bytes read from `local` (see [`super::residency`]).
    residency: Option<Arc<super::residency::Residency>>,
}

/// A range of a mapped segment, owned by `Bytes` without copying.
pub(super) struct MappedRange(pub(super) Arc<memmap2::Mmap>, pub(super) std::ops::Range<usize>);

impl AsRef<[u8]> for MappedRange {
    fn as_ref(&self) -> &[u8] {
        &self.0[self.1.clone()]
    }
}

fn read_local(map: &Arc<memmap2::Mmap>, range: std::ops::Range<u64>) -> parquet::errors::Result<Bytes> {
    let (start, end) = (range.start as usize, range.end as usize);
    if start > end || end > map.len() {
        return Err(parquet::errors::ParquetError::EOF(format!(
            "range {start}..{end} is past the end of a {}-byte segment",
            map.len()
        )));
    }
    Ok(Bytes::from_owner(MappedRange(map.clone(), start..end)))
}

impl SegmentFileReader {
    /// Fetches the column chunks `groups` (per row group in the order the
    /// scan reads them) ahead of the reads, for a segment in a remote
    /// store (a mapped file needs none).
    pub(super) fn with_prefetch(mut self, groups: Vec<Vec<std::ops::Range<u64>>>) -> Self {
        if self.local.is_none() && groups.len() > 1 {
            self.prefetch = Some(Prefetch::new(
                self.store.clone(),
                self.path.clone(),
                self.checks.clone(),
                self.chunk_cache.clone(),
                groups,
            ));
        }
        self
    }

    /// `range` of the mapped file, its blocks checked.
    fn read_mapped(&self, map: &Arc<memmap2::Mmap>, range: std::ops::Range<u64>) -> parquet::errors::Result<Bytes> {
        let bytes = read_local(map, range.clone())?;
        if let Some(r) = &self.residency {
            r.touch(range.clone());
            // A scan's column chunk: mapped in one call (2-20% faster
            // scans than faulting its pages in after a release).
            r.populate(map, range.clone());
        }
        if let Some(c) = &self.checks {
            c.check_mapped(map, range).map_err(checksum_err)?;
        }
        Ok(bytes)
    }

    /// The part of the already read tail that is `range`, if it lies there.
    fn tail_part(&self, range: &std::ops::Range<u64>) -> Option<Bytes> {
        let (start, tail) = self.tail.as_ref()?;
        (range.start >= *start && range.end <= start + tail.len() as u64)
            .then(|| tail.slice((range.start - start) as usize..(range.end - start) as usize))
    }

    /// Reads `ranges` through the object store, each widened to whole
    /// checksum blocks, checked and cut back.
    async fn read_checked(&mut self, ranges: Vec<std::ops::Range<u64>>) -> parquet::errors::Result<Vec<Bytes>> {
        if let Some(p) = &mut self.prefetch
            && let Some(r) = p.serve(&ranges).await
        {
            return r;
        }
        fetch_checked(&*self.store, &self.path, self.checks.as_deref(), &ranges).await
    }
}

impl AsyncFileReader for SegmentFileReader {
    fn get_bytes(&mut self, range: std::ops::Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        if let Some(b) = self.tail_part(&range) {
            return async move { Ok(b) }.boxed();
        }
        if let Some(f) = &self.local {
            let r = self.read_mapped(f, range);
            return async move { r }.boxed();
        }
        async move {
            let mut v = self.read_checked(vec![range]).await?;
            v.pop()
                .ok_or_else(|| parquet::errors::ParquetError::General("empty read".into()))
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<std::ops::Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        if let Some(f) = &self.local {
            let r = ranges.into_iter().map(|r| self.read_mapped(f, r)).collect();
            return async move { r }.boxed();
        }
        async move { self.read_checked(ranges).await }.boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let size = self.size;
            let md = ParquetMetaDataReader::new()
                .with_arrow_reader_options(options)
                .load_and_finish(self, size)
                .await?;
            Ok(Arc::new(md))
        }
        .boxed()
    }
}

/// `t` with strings (also inside structs) as `Utf8View`, as scans read them.
pub(crate) fn view_type(t: &arrow::datatypes::DataType) -> arrow::datatypes::DataType {
    use arrow::datatypes::DataType;
    match t {
        DataType::Utf8 => DataType::Utf8View,
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| Arc::new(f.as_ref().clone().with_data_type(view_type(f.data_type()))))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `s` with every string column read as `Utf8View`.
fn views_schema(s: &arrow::datatypes::SchemaRef) -> arrow::datatypes::SchemaRef {
    Arc::new(arrow::datatypes::Schema::new_with_metadata(
        s.fields()
            .iter()
            .map(|f| f.as_ref().clone().with_data_type(view_type(f.data_type())))
            .collect::<Vec<_>>(),
        s.metadata().clone(),
    ))
}

/// The smallest and largest `__pk` of a column chunk's statistics.
pub(super) fn pk_bounds(stats: Option<&Statistics>) -> Option<(&[u8], &[u8])> {
    match stats? {
        Statistics::ByteArray(s) => Some((s.min_opt()?.data(), s.max_opt()?.data())),
        _ => None,
    }
}

/// The row groups that may hold keys of `range`, ascending. A segment's
/// row groups hold ascending, disjoint key spans (flushes and compactions
/// check that keys ascend), so those that overlap `range` are one run,
/// found by two binary searches on their `__pk` statistics instead of a
/// look at each (a 10M-row table's range read looked at ~100 per
/// segment); a search that meets a row group without statistics falls
/// back to a look at each.
pub(super) fn overlapping_row_groups(md: &ParquetMetaData, range: &KeyRange) -> Vec<usize> {
    let n = md.num_row_groups();
    let missing = std::cell::Cell::new(false);
    let bound = |rg: usize| {
        let b = pk_bounds(md.row_group(rg).column(0).statistics());
        missing.set(missing.get() || b.is_none());
        b.unwrap_or_default()
    };
    let first = super::partition(n, |rg| bound(rg).1 < range.lo.as_slice());
    let end = super::partition(n, |rg| range.hi.as_deref().is_none_or(|h| bound(rg).0 < h));
    if missing.get() {
        return (0..n).filter(|&rg| row_group_overlaps(md, rg, range)).collect();
    }
    (first..end.max(first)).collect()
}

/// Whether row group `rg` may hold keys of `range` (its `__pk` statistics).
pub(super) fn row_group_overlaps(md: &ParquetMetaData, rg: usize, range: &KeyRange) -> bool {
    match pk_bounds(md.row_group(rg).column(0).statistics()) {
        Some((min, max)) => range.overlaps(min, max),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, BinaryArray, RecordBatch};
    use parquet::arrow::ArrowWriter;
    use parquet::file::metadata::ParquetMetaDataReader;
    use parquet::file::properties::WriterProperties;

    use super::*;

    /// The binary searches pick exactly the row groups a look at each
    /// picks, for ranges inside, between, at the edges of and past the
    /// row groups.
    #[test]
    fn overlapping_row_groups_match_a_look_at_each() {
        let keys: Vec<Vec<u8>> = (0..200u32).map(|i| (i * 2 + 10).to_be_bytes().to_vec()).collect();
        let batch =
            RecordBatch::try_from_iter([("__pk", Arc::new(BinaryArray::from_iter_values(&keys)) as ArrayRef)]).unwrap();
        let props = WriterProperties::builder().set_max_row_group_row_count(Some(7)).build();
        let mut buf = Vec::new();
        let mut w = ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let md = ParquetMetaDataReader::new()
            .parse_and_finish(&bytes::Bytes::from(buf))
            .unwrap();
        assert!(md.num_row_groups() > 20);
        // Statistics on every row group: the binary searches, not the fallback.
        assert!((0..md.num_row_groups()).all(|rg| pk_bounds(md.row_group(rg).column(0).statistics()).is_some()));
        let key = |i: u32| i.to_be_bytes().to_vec();
        let mut ranges = vec![KeyRange::all()];
        for lo in (0..430).step_by(3) {
            ranges.push(KeyRange::point(&key(lo)));
            for len in [0, 1, 2, 13, 14, 15, 40, 500] {
                ranges.push(KeyRange {
                    lo: key(lo),
                    hi: Some(key(lo + len)),
                });
            }
            ranges.push(KeyRange { lo: key(lo), hi: None });
            ranges.push(KeyRange {
                lo: Vec::new(),
                hi: Some(key(lo)),
            });
        }
        for range in &ranges {
            let each: Vec<usize> = (0..md.num_row_groups())
                .filter(|&rg| row_group_overlaps(&md, rg, range))
                .collect();
            assert_eq!(overlapping_row_groups(&md, range), each, "{range:?}");
        }
    }
}
