//! Segments: immutable Parquet files in the wide layout (see [`format`]).
//!
//! A segment holds the canonical state of each of its keys: every key once
//! per rank, its own writes already resolved. Its metadata (key range, seq
//! range, columns) lives in the table manifest, so pruning needs no file
//! open; the Parquet footer and page index are cached on first use.
//!
//! Invariants: a segment file never changes once written; its keys ascend
//! (the writer refuses keys out of order); no byte reaches a decoder before
//! its checksum matched ([`checksum`]). The layer knows nothing of
//! memtables or tables: writers take rows through `model::row`'s
//! `KeyWrites`. The layout is in `docs/format.md`, "Segments".

mod build;
mod cells;
mod checksum;
pub(crate) mod chunk_cache;
mod encode;
pub(crate) mod format;
pub(crate) mod newest;
mod page_decode;
pub(crate) mod pages;
mod point;
mod prefetch;
mod props;
mod reader;
pub(crate) mod residency;
mod scan;
mod versions;

pub(crate) use build::SegmentBuilder;
pub(crate) use cells::verify_cells;
pub(crate) use checksum::verify_file;
pub(crate) use encode::{RowEncoder, encode_states};
pub(crate) use point::partition;
pub(crate) use props::SegmentWriteOptions;
pub(crate) use reader::view_type;
pub(crate) use scan::{RowSpan, SegmentCursor, decode_batch, pages_overlapping};
pub(crate) use versions::SegmentBatchStream;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use parquet::bloom_filter::Sbbf;
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

use crate::model::types::TypeSet;

/// What the manifest records about a segment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SegmentMeta {
    pub id: u64,
    /// Object path relative to the database root.
    pub path: String,
    pub size_bytes: u64,
    /// Smallest and largest encoded key, hex.
    pub min_key: String,
    pub max_key: String,
    pub num_keys: u64,
    pub num_rows: u64,
    pub min_seq: u64,
    pub max_seq: u64,
    /// Attribute columns and the value types present, sorted by name.
    pub columns: Vec<(String, TypeSet)>,
    /// Per column (same order), how many values of each type were written
    /// (`ValueType::index` order). SQL shows a discovered column with the
    /// type most of its values have. Empty for segments written before it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub value_counts: Vec<[u64; 5]>,
    /// Keys that are not a live row in this segment on their own (deleted,
    /// or holding only tombstones). `Some(0)` lets a scan without a TTL skip
    /// reading `__row` and `__max_ts`. `None` for older segments.
    #[serde(default)]
    pub dead_keys: Option<u64>,
    /// The newest version or row marker in the segment (`i64::MIN`: none);
    /// once it is past the TTL, every value in the segment has expired.
    /// `None` for older segments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ts: Option<i64>,
    /// The sorted run the segment belongs to: the outputs of one compaction
    /// share it (they do not overlap each other). `None`: a run of its own
    /// (a flushed segment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<u64>,
    /// The file's checksums (see [`checksum`]); `None` for segments
    /// written before them, which are decoded only when asked (see
    /// [`ReadChecks`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<checksum::FileChecksum>,
}

impl SegmentMeta {
    /// The sorted run this segment belongs to.
    pub fn run_id(&self) -> u64 {
        self.run.unwrap_or(self.id)
    }

    pub fn key_bounds(&self) -> (Vec<u8>, Vec<u8>) {
        (hex_decode(&self.min_key), hex_decode(&self.max_key))
    }
}

/// How a segment's reads use its checksums (`DbOptions::verify_checksums`,
/// `DbOptions::legacy_segments`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadChecks {
    /// Every byte is checked before it is decoded; a segment written
    /// before checksums is refused (damage in it would reach Parquet's
    /// decoders unseen).
    Verify,
    /// As `Verify`, but a segment written before checksums is decoded
    /// unchecked.
    VerifyOrLegacy,
    /// Nothing is checked.
    Off,
}

impl ReadChecks {
    pub fn new(verify: bool, legacy: bool) -> Self {
        match (verify, legacy) {
            (false, _) => ReadChecks::Off,
            (true, false) => ReadChecks::Verify,
            (true, true) => ReadChecks::VerifyOrLegacy,
        }
    }

    fn verify(self) -> bool {
        self != ReadChecks::Off
    }
}

/// An open segment: its metadata plus the lazily loaded Parquet footer.
pub(crate) struct Segment {
    /// What the segment was opened with; its run may have changed since
    /// (see [`Segment::run_id`]).
    pub meta: SegmentMeta,
    /// The sorted run the segment belongs to now: a compaction can carry a
    /// segment into its output run without rewriting it, and only the
    /// manifest (and this) record that.
    run: AtomicU64,
    pub min_key: Vec<u8>,
    pub max_key: Vec<u8>,
    store: Arc<dyn ObjectStore>,
    local_path: Option<std::path::PathBuf>,
    local_file: std::sync::OnceLock<Arc<memmap2::Mmap>>,
    reader_meta: OnceCell<ArrowReaderMetadata>,
    /// The same footer with strings read as `Utf8View` (SQL scans).
    view_meta: OnceCell<ArrowReaderMetadata>,
    /// The `__pk` bloom filter of each row group, read once.
    blooms: OnceCell<Vec<Option<Sbbf>>>,
    /// The attribute columns in file order (what `__cells` indexes name).
    attribute_names: std::sync::OnceLock<Arc<Vec<String>>>,
    /// The data region's block checksums, from the footer (set with
    /// `reader_meta` for a segment that has them).
    checks: std::sync::OnceLock<Arc<checksum::BlockChecks>>,
    /// How reads use the file's checksums.
    read_checks: ReadChecks,
    /// A local file keeping the file's tail (page index and footer) for
    /// the next process, for a segment in a remote store (see
    /// [`Segment::with_tail_cache`]).
    tail_cache: Option<std::path::PathBuf>,
    /// The database's cache of remote column chunks, and this segment's
    /// id in it (see [`Segment::with_chunk_cache`]).
    chunk_cache: Option<(Arc<chunk_cache::ChunkCache>, u64)>,
    /// The database's bound on mapped pages (see [`Segment::with_residency`]).
    residency: Option<Arc<residency::Residency>>,
    /// The database's cache of decoded `__pk`/`__cells` pages, and this
    /// segment's id in it (see [`Segment::with_page_cache`]).
    page_cache: Option<(Arc<pages::PageCache>, u64)>,
    /// The local file opened for `pread` by point and range reads.
    pread: std::sync::OnceLock<Arc<pages::PreadFile>>,
    /// The local file, held open from [`Segment::pin`] on: every later
    /// open uses it, so the segment stays readable after its file is
    /// deleted (by a writer beside a read-only database).
    pinned: std::sync::OnceLock<std::fs::File>,
    /// Set when no manifest references the file any more: it is deleted
    /// when the last reader holding this segment drops it.
    obsolete: AtomicBool,
}

impl Drop for Segment {
    fn drop(&mut self) {
        if let Some((cache, id)) = &self.chunk_cache {
            cache.forget(*id);
        }
        if !self.obsolete.load(Ordering::Acquire) {
            return;
        }
        // A local file goes at once (one unlink), so that it is gone when
        // the last holder is: a task spawned for it could run after the
        // database was closed, or not at all.
        if let Some(local) = &self.local_path {
            let _ = std::fs::remove_file(local);
            return;
        }
        let store = self.store.clone();
        let path = self.object_path();
        // Without a runtime (shutdown) the file stays as an orphan that no
        // manifest names; the next open deletes it.
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                let _ = store.delete(&path).await;
            });
        }
    }
}

impl Segment {
    /// `local_root`: the directory behind `store` when it is a local disk;
    /// reads then go straight to the file (`pread` on a cached handle)
    /// instead of through `object_store`'s blocking-thread hand-off, which
    /// cost more than the read itself for point gets.
    pub fn new(
        meta: SegmentMeta,
        store: Arc<dyn ObjectStore>,
        local_root: Option<&std::path::Path>,
        read_checks: ReadChecks,
    ) -> Self {
        let (min_key, max_key) = meta.key_bounds();
        Segment {
            run: AtomicU64::new(meta.run_id()),
            local_path: local_root.map(|r| r.join(&meta.path)),
            local_file: std::sync::OnceLock::new(),
            meta,
            min_key,
            max_key,
            store,
            reader_meta: OnceCell::new(),
            view_meta: OnceCell::new(),
            blooms: OnceCell::new(),
            attribute_names: std::sync::OnceLock::new(),
            checks: std::sync::OnceLock::new(),
            read_checks,
            tail_cache: None,
            chunk_cache: None,
            residency: None,
            page_cache: None,
            pread: std::sync::OnceLock::new(),
            pinned: std::sync::OnceLock::new(),
            obsolete: AtomicBool::new(false),
        }
    }

    /// Keeps the file's tail (page index and footer, one read) in a local
    /// file at `path`, so that a later process opening the same segment
    /// reads its metadata without a round trip to the store. The cached
    /// copy is used only when its CRC-32C matches the manifest's, so a
    /// stale or damaged cache file is read again from the store. For
    /// segments with checksums; others ignore it.
    pub fn with_tail_cache(mut self, path: std::path::PathBuf) -> Self {
        self.tail_cache = Some(path);
        self
    }

    /// Keeps the column chunks scans of this (remote) segment fetch in
    /// `cache`, for the scans after them.
    pub fn with_chunk_cache(mut self, cache: Arc<chunk_cache::ChunkCache>) -> Self {
        self.chunk_cache = Some((cache, chunk_cache::next_id()));
        self
    }

    /// Counts the bytes reads take from this (local) segment's map in
    /// `residency`, which drops the maps' pages past its limit.
    pub fn with_residency(mut self, residency: Arc<residency::Residency>) -> Self {
        self.residency = Some(residency);
        self
    }

    /// Keeps the `__pk` and `__cells` pages point and range reads of this
    /// (local) segment decode in `cache`, for the reads after them.
    pub fn with_page_cache(mut self, cache: Arc<pages::PageCache>) -> Self {
        self.page_cache = Some((cache, pages::next_id()));
        self
    }

    /// The local file opened for `pread` (after the footer is loaded, so
    /// that its reads are checked against the block checksums).
    fn pread_file(&self, local: &std::path::Path) -> crate::error::Result<Arc<pages::PreadFile>> {
        if let Some(f) = self.pread.get() {
            return Ok(f.clone());
        }
        let err = |e| crate::error::Error::io(format!("open segment {}", local.display()), e);
        let file = self.open_local(local).map_err(err)?;
        let f = Arc::new(pages::PreadFile::new(file, self.checks.get().cloned(), &self.meta.path).map_err(err)?);
        Ok(self.pread.get_or_init(|| f).clone())
    }

    /// Opens the local file now and holds it open, so that the segment
    /// can be read after the file is deleted: a read-only database pins
    /// the segments of the state it loaded, which its writer's compactions
    /// may delete. A file already gone fails with `NotFound`. Nothing to
    /// do for a segment in a remote store.
    pub(crate) fn pin(&self) -> std::io::Result<()> {
        if let Some(path) = &self.local_path
            && self.pinned.get().is_none()
        {
            let _ = self.pinned.set(std::fs::File::open(path)?);
        }
        Ok(())
    }

    /// The local file `path` (this segment's): a handle of the pinned file
    /// when there is one, else the file opened by its name.
    fn open_local(&self, path: &std::path::Path) -> std::io::Result<std::fs::File> {
        match self.pinned.get() {
            Some(f) => f.try_clone(),
            None => std::fs::File::open(path),
        }
    }

    /// The file's attribute columns in schema order (`md`: its footer).
    pub(crate) fn attribute_names(&self, md: &parquet::file::metadata::ParquetMetaData) -> Arc<Vec<String>> {
        self.attribute_names
            .get_or_init(|| Arc::new(cells::attribute_names(md.file_metadata().schema_descr())))
            .clone()
    }

    /// The sorted run the segment belongs to (`meta.run` is the one it was
    /// opened with).
    pub fn run_id(&self) -> u64 {
        self.run.load(Ordering::Acquire)
    }

    /// Moves the segment into `run`, once a manifest version saying so is
    /// durable.
    pub(crate) fn join_run(&self, run: u64) {
        self.run.store(run, Ordering::Release);
    }

    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }

    pub fn object_path(&self) -> Path {
        Path::from(self.meta.path.as_str())
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The segment file mapped into memory, when it is on a local disk.
    pub fn local_file(&self) -> crate::error::Result<Option<Arc<memmap2::Mmap>>> {
        let Some(path) = &self.local_path else { return Ok(None) };
        if let Some(m) = self.local_file.get() {
            return Ok(Some(m.clone()));
        }
        let err = |e| crate::error::Error::io(format!("map segment {}", path.display()), e);
        let file = self.open_local(path).map_err(err)?;
        // SAFETY: segment files are immutable once their manifest names them:
        // nothing writes to or truncates them afterwards (they are only
        // deleted, which leaves an existing mapping intact on Unix).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(err)?;
        let mut fresh = false;
        let map = self
            .local_file
            .get_or_init(|| {
                fresh = true;
                Arc::new(map)
            })
            .clone();
        if fresh && let Some(r) = &self.residency {
            r.register(&map);
        }
        Ok(Some(map))
    }
}

/// Runs `f`, turning a panic inside the Parquet or Arrow readers (a
/// damaged footer reached arrow-ipc's `unimplemented!` in the fuzzer) into
/// a corruption error naming the segment. Checked segments never get that
/// far with damage; segments written before checksums, or read with checks
/// off, can.
pub(crate) fn no_panic<T>(path: &str, f: impl FnOnce() -> crate::error::Result<T>) -> crate::error::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| Err(panic_error(path, p)))
}

/// [`no_panic`] for a future.
pub(crate) async fn no_panic_async<T>(
    path: &str,
    f: impl std::future::Future<Output = crate::error::Result<T>>,
) -> crate::error::Result<T> {
    use futures::FutureExt;
    std::panic::AssertUnwindSafe(f)
        .catch_unwind()
        .await
        .unwrap_or_else(|p| Err(panic_error(path, p)))
}

fn panic_error(path: &str, p: Box<dyn std::any::Any + Send>) -> crate::error::Error {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    crate::error::Error::corruption(format!(
        "segment {path} does not decode: the Parquet reader failed on it ({what})"
    ))
}

/// The error of a failed segment read: a checksum mismatch or an object
/// store failure passed through Parquet's reader as they are (they name
/// the file), anything else as corruption (the file does not decode).
pub(crate) fn read_error(path: &str, e: impl std::error::Error + 'static) -> crate::error::Error {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(x) = cur {
        if let Some(ours) = x.downcast_ref::<crate::error::Error>() {
            return ours.clone();
        }
        if let Some(store) = x.downcast_ref::<object_store::Error>() {
            return crate::error::Error::io(format!("read segment {path}"), store);
        }
        cur = x.source();
    }
    crate::error::Error::corruption(format!("segment {path} does not decode: {e}"))
}

pub(crate) fn hex_encode(b: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(HEX[(x >> 4) as usize] as char);
        s.push(HEX[(x & 15) as usize] as char);
    }
    s
}

pub(crate) fn hex_decode(s: &str) -> Vec<u8> {
    let nib = |c: u8| match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => 0,
    };
    s.as_bytes()
        .chunks(2)
        .map(|p| (nib(p[0]) << 4) | nib(*p.get(1).unwrap_or(&b'0')))
        .collect()
}
