//! Where a database's objects live, and how they are written durably.
//!
//! [`Storage`] names the object store, the local directory behind it (when
//! there is one) and how segments are written and opened. Every object the
//! engine creates goes through here: whole objects with [`put_durable`],
//! streamed ones with [`UploadSink`], flushes with [`SpillSink`] (whole
//! while small, streamed past one upload part).
//!
//! Invariant: when either returns, the object is complete under its final
//! path and, on a local disk, fsynced together with its directory, so it
//! survives a power cut; nothing is visible under the path before that.
//! The format of what is written is the caller's (see `docs/format.md`).
//! On a local disk, running compactions together never claim more than
//! the free space minus what flushes and the WAL need
//! ([`Storage::reserve_for_compaction`]).

use std::path::PathBuf;
use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::error::{Error, Result};
use crate::segment::{ReadChecks, Segment, SegmentMeta, SegmentWriteOptions};

/// Where segment files are written and how.
#[derive(Clone)]
pub(crate) struct Storage {
    pub store: Arc<dyn ObjectStore>,
    /// The local directory behind `store`, to fsync new files.
    pub local_root: Option<PathBuf>,
    /// How flushes write segments.
    pub segment_options: SegmentWriteOptions,
    /// The ZSTD level of compaction outputs' value columns
    /// (`DbOptions::compaction_zstd_level`).
    pub compaction_zstd: Option<i32>,
    /// The ZSTD level of compaction outputs' `__pk` and `__cells`
    /// (`DbOptions::compaction_point_zstd_level`).
    pub compaction_point_zstd: Option<i32>,
    /// How segments opened by this database use their checksums.
    pub read_checks: ReadChecks,
    /// Column chunks read from archived segments (`DbOptions::archive_cache_bytes`).
    pub chunk_cache: Arc<crate::segment::chunk_cache::ChunkCache>,
    /// Bytes of disk that running compactions may still write (see
    /// [`Storage::reserve_for_compaction`]).
    pub compaction_reserved: Arc<std::sync::atomic::AtomicU64>,
    /// The bound on mapped segment pages (`DbOptions::mapped_segment_bytes`).
    pub residency: Arc<crate::segment::residency::Residency>,
    /// Decoded pages of point and range reads (`DbOptions::page_cache_bytes`).
    pub page_cache: Arc<crate::segment::pages::PageCache>,
}

impl Storage {
    /// How compactions write segments: as flushes, with the value and
    /// system columns, and `__pk` and `__cells`, under ZSTD where the
    /// options ask for it.
    pub fn compaction_options(&self) -> SegmentWriteOptions {
        SegmentWriteOptions {
            value_zstd: self.compaction_zstd,
            point_zstd: self.compaction_point_zstd,
            ..self.segment_options
        }
    }

    /// Bytes free to this process on the file system of `local_root`;
    /// `None` when the store is not a local disk or the system did not say.
    pub fn free_bytes(&self) -> Option<u64> {
        self.local_root.as_deref().and_then(free_bytes)
    }

    /// Claims room for a compaction that may write `output` bytes, so that
    /// it cannot fill the disk that flushes and WAL appends need: refused
    /// (with what was needed and what is free) unless `output`, what other
    /// running compactions claimed and `keep_free` all fit in the free
    /// space. Claims nothing where free space is unknown (not a local disk).
    /// The claim lasts as long as the returned guard.
    pub fn reserve_for_compaction(&self, output: u64, keep_free: u64) -> Result<CompactionRoom> {
        use std::sync::atomic::Ordering;
        let Some(free) = self.free_bytes() else {
            return Ok(CompactionRoom(None));
        };
        let others = self.compaction_reserved.fetch_add(output, Ordering::AcqRel);
        let room = CompactionRoom(Some((self.compaction_reserved.clone(), output)));
        if free >= output.saturating_add(others).saturating_add(keep_free) {
            return Ok(room);
        }
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        let dir = self.local_root.as_deref().unwrap_or(std::path::Path::new(""));
        Err(Error::new(
            crate::error::ErrorKind::Io,
            format!(
                "not enough free space to compact: {:.1} MiB free in {}, and the merge needs up to {:.1} MiB (the size of its inputs){} while {:.1} MiB stay free for flushes and the WAL; free some space, or the table stays uncompacted (reads merge more segments)",
                mib(free),
                dir.display(),
                mib(output),
                if others > 0 {
                    format!(" besides {:.1} MiB for compactions already running", mib(others))
                } else {
                    String::new()
                },
                mib(keep_free),
            ),
        ))
    }

    /// A segment named by a manifest, opened for reading.
    pub fn open_segment(&self, meta: SegmentMeta) -> Arc<Segment> {
        Arc::new(
            Segment::new(meta, self.store.clone(), self.local_root.as_deref(), self.read_checks)
                .with_residency(self.residency.clone())
                .with_page_cache(self.page_cache.clone()),
        )
    }
}

/// Disk room a compaction claimed ([`Storage::reserve_for_compaction`]),
/// given back when dropped.
pub(crate) struct CompactionRoom(Option<(Arc<std::sync::atomic::AtomicU64>, u64)>);

impl Drop for CompactionRoom {
    fn drop(&mut self) {
        if let Some((reserved, bytes)) = &self.0 {
            reserved.fetch_sub(*bytes, std::sync::atomic::Ordering::AcqRel);
        }
    }
}

/// Bytes free to unprivileged users on the file system holding `dir`.
#[cfg(unix)]
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `path` is a NUL-terminated string that outlives the call, and
    // `st` is a plain C struct that statvfs fills in (all-zero is a valid
    // value of it).
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
    #[allow(clippy::unnecessary_cast)] // the field types differ by platform
    (rc == 0).then(|| (st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

#[cfg(not(unix))]
fn free_bytes(_dir: &std::path::Path) -> Option<u64> {
    None
}

/// Writes an object and, on a local disk, fsyncs it and its directory.
pub(crate) async fn put_durable(storage: &Storage, path: &str, bytes: Vec<u8>) -> Result<()> {
    storage.store.put(&Path::from(path), PutPayload::from(bytes)).await?;
    sync_object(storage, path).await
}

/// On a local disk, fsyncs an object's file and its directory so that it
/// survives a power loss (the object store itself does not).
pub(crate) async fn sync_object(storage: &Storage, path: &str) -> Result<()> {
    if let Some(root) = &storage.local_root {
        let file = root.join(path);
        tokio::task::spawn_blocking(move || -> Result<()> {
            let len = std::fs::File::open(&file)
                .and_then(|f| f.sync_all().and_then(|_| f.metadata()))
                .map_err(|e| Error::io(format!("fsync {}", file.display()), e))?
                .len();
            crate::crash_point::synced(&file, Some(len));
            if let Some(dir) = file.parent() {
                crate::wal::sync_dir(dir)?;
            }
            Ok(())
        })
        .await
        .map_err(|e| Error::io("fsync task", e))??;
    }
    Ok(())
}

/// A blocking [`std::io::Write`] for a new object of unknown size (a
/// flush's segment): held in memory while it is smaller than one upload
/// part, then streamed through an [`UploadSink`]. A small file costs one
/// `put` (one request to an object store, where a multipart upload takes
/// three); a large one holds at most a few parts in memory, not itself.
pub(crate) struct SpillSink {
    storage: Storage,
    path: String,
    rt: tokio::runtime::Handle,
    /// `Err` once the file outgrew memory.
    out: std::result::Result<Vec<u8>, UploadSink>,
}

impl SpillSink {
    /// `expected` bytes are set aside up front (at most one upload part):
    /// a buffer grown by doubling copied and faulted in each size on its
    /// way (2% of a flush-heavy load's time).
    pub fn new(storage: &Storage, path: &str, rt: &tokio::runtime::Handle, expected: usize) -> Self {
        SpillSink {
            storage: storage.clone(),
            path: path.to_string(),
            rt: rt.clone(),
            out: Ok(Vec::with_capacity(expected.min(UPLOAD_PART_BYTES))),
        }
    }

    /// Completes the object and makes it durable; returns its size.
    pub fn finish(self) -> Result<u64> {
        match self.out {
            Ok(bytes) => {
                let size = bytes.len() as u64;
                self.rt.block_on(put_durable(&self.storage, &self.path, bytes))?;
                Ok(size)
            }
            Err(upload) => upload.finish(&self.storage),
        }
    }
}

impl std::io::Write for SpillSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(held) = &mut self.out {
            if held.len() + buf.len() <= UPLOAD_PART_BYTES {
                held.extend_from_slice(buf);
                return Ok(buf.len());
            }
            let mut upload = UploadSink::start(&self.storage, &self.path, &self.rt)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            upload.write_all(&std::mem::take(held))?;
            self.out = Err(upload);
        }
        let Err(upload) = &mut self.out else {
            return Err(std::io::Error::other(format!("upload {} did not start", self.path)));
        };
        upload.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bytes per part of a streamed upload, and parts in flight at once: a
/// streamed file holds at most about `UPLOAD_PART_BYTES * (UPLOAD_PARTS + 1)`
/// in memory, whatever its size.
const UPLOAD_PART_BYTES: usize = 8 << 20;
const UPLOAD_PARTS: usize = 2;

/// A blocking [`std::io::Write`] that streams a new object through a
/// multipart upload, for code running on a blocking thread (compaction
/// outputs). Nothing is visible under the path until [`UploadSink::finish`].
/// An upload given up on is aborted with [`UploadSink::abort`] (the local
/// store then deletes its staging file before the call returns); dropping
/// the sink also aborts, in the background.
pub(crate) struct UploadSink {
    /// `None` once aborted.
    upload: Option<object_store::WriteMultipart>,
    rt: tokio::runtime::Handle,
    path: String,
    written: u64,
}

impl UploadSink {
    pub fn start(storage: &Storage, path: &str, rt: &tokio::runtime::Handle) -> Result<Self> {
        let upload = rt.block_on(storage.store.put_multipart(&Path::from(path)))?;
        Ok(UploadSink {
            upload: Some(object_store::WriteMultipart::new_with_chunk_size(
                upload,
                UPLOAD_PART_BYTES,
            )),
            rt: rt.clone(),
            path: path.to_string(),
            written: 0,
        })
    }

    /// Completes the upload and makes the file durable; returns its size.
    pub fn finish(self, storage: &Storage) -> Result<u64> {
        let UploadSink {
            upload,
            rt,
            path,
            written,
        } = self;
        let upload = upload.ok_or_else(|| Error::io(format!("upload {path}"), "it was aborted"))?;
        rt.block_on(async {
            upload.finish().await?;
            sync_object(storage, &path).await
        })?;
        Ok(written)
    }

    /// Gives the upload up and waits until the store has cleaned it up
    /// (best effort: the next open deletes what is left).
    pub fn abort(&mut self) {
        if let Some(upload) = self.upload.take() {
            let _ = self.rt.block_on(upload.abort());
        }
    }
}

impl std::io::Write for UploadSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let upload = self
            .upload
            .as_mut()
            .ok_or_else(|| std::io::Error::other(format!("upload {} was aborted", self.path)))?;
        // Bounded memory: wait while too many parts are still in flight.
        self.rt
            .block_on(upload.wait_for_capacity(UPLOAD_PARTS))
            .map_err(|e| std::io::Error::other(format!("upload {}: {e}", self.path)))?;
        // Full parts are handed to the runtime as tasks.
        let _runtime = self.rt.enter();
        upload.write(buf);
        self.written += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
