//! Flush: a frozen memtable becomes a segment, then a manifest version.
//!
//! Order matters for crash safety: (1) the segment file is written and
//! made durable, (2) a manifest version naming it with the new
//! `flushed_seq` is committed, (3) the memtable is swapped for the segment
//! in memory, (4) the committer is told so WAL files can be deleted. A crash
//! before (2) leaves an unreferenced file (ignored) and the WAL replays the
//! writes; after (2), replay skips them.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::table::TableInner;
use crate::error::{Error, Result};
use crate::segment::{Segment, SegmentBuilder, SegmentWriteOptions};

/// Where segment files are written and how.
#[derive(Clone)]
pub(crate) struct FlushEnv {
    pub store: Arc<dyn ObjectStore>,
    /// The local directory behind `store`, to fsync new files.
    pub local_root: Option<PathBuf>,
    pub segment_options: SegmentWriteOptions,
    /// Whether segments opened by this database check their checksums.
    pub verify_checksums: bool,
}

/// Flushes every frozen memtable of `table`, oldest first, calling
/// `flushed` after each (under sustained writes the loop may not end for a
/// long time: compaction is scheduled per flush, not when it ends).
///
/// The manifest lock is held only to reserve a segment id and to commit,
/// never while a segment is encoded or written: under sustained writes
/// flushes follow each other without pause, and a compaction waiting to
/// commit would otherwise wait for all of them.
pub(crate) async fn flush_frozen(env: &FlushEnv, table: &Arc<TableInner>, flushed: &(dyn Fn() + Sync)) -> Result<()> {
    let _flushing = table.flushing.lock().await;
    loop {
        let Some(mem) = table.state.read().immutables.first().cloned() else {
            return Ok(());
        };
        if table.dropped.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut new_segment = None;
        if !mem.is_empty() {
            let schema = table.schema.clone();
            let seq_range = (mem.min_seq().unwrap_or(0), mem.max_seq());
            let opts = env.segment_options;
            let mem2 = mem.clone();
            let (bytes, mut meta) = tokio::task::spawn_blocking(move || {
                // Frozen: no more writes come, so fold straight from it.
                let mut b = SegmentBuilder::new(&schema, mem2.columns(), opts, mem2.key_count())?;
                mem2.for_each_key(|k, w| b.push_writes(k, w))?;
                b.finish(seq_range)
            })
            .await
            .map_err(|e| Error::io("flush task", e))??;
            // Reserve an id: the next manifest version records the counter;
            // a crash before that leaves an orphan that the next open deletes.
            meta.id = {
                let mut m = table.manifest.lock().await;
                m.1.next_segment_id += 1;
                m.1.next_segment_id - 1
            };
            meta.path = format!("tables/{}/segments/{:020}.parquet", table.id, meta.id);
            let size = bytes.len() as u64;
            put_durable(env, &meta.path, bytes).await?;
            crate::crash_point::hit("flush.segment_written");
            table.stats.flush_bytes.fetch_add(size, Ordering::Relaxed);
            new_segment = Some(meta);
        }
        let mut manifest = table.manifest.lock().await;
        let mut next = manifest.1.clone();
        next.flushed_seq = next.flushed_seq.max(mem.max_seq());
        if let Some(meta) = &new_segment {
            next.segments.push(meta.clone());
        }
        table.stats.flushes.fetch_add(1, Ordering::Relaxed);
        next.counters = table.stats.counters();
        let version = manifest.0 + 1;
        table
            .manifest_log
            .commit(&*env.store, env.local_root.as_deref(), version, &next)
            .await?;
        crate::crash_point::hit("flush.committed");
        *manifest = (version, next);
        {
            let mut st = table.state.write();
            st.immutables.retain(|m| !Arc::ptr_eq(m, &mem));
            if let Some(meta) = new_segment {
                let mut segs = (*st.segments).clone();
                segs.push(Arc::new(Segment::new(
                    meta,
                    env.store.clone(),
                    env.local_root.as_deref(),
                    env.verify_checksums,
                )));
                st.segments = Arc::new(segs);
            }
        }
        flushed();
    }
}

/// Writes an object and, on a local disk, fsyncs it and its directory.
pub(crate) async fn put_durable(env: &FlushEnv, path: &str, bytes: Vec<u8>) -> Result<()> {
    env.store.put(&Path::from(path), PutPayload::from(bytes)).await?;
    sync_object(env, path).await
}

/// On a local disk, fsyncs an object's file and its directory so that it
/// survives a power loss (the object store itself does not).
pub(crate) async fn sync_object(env: &FlushEnv, path: &str) -> Result<()> {
    if let Some(root) = &env.local_root {
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
    pub fn start(env: &FlushEnv, path: &str, rt: &tokio::runtime::Handle) -> Result<Self> {
        let upload = rt.block_on(env.store.put_multipart(&Path::from(path)))?;
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
    pub fn finish(self, env: &FlushEnv) -> Result<u64> {
        let UploadSink {
            upload,
            rt,
            path,
            written,
        } = self;
        let upload = upload.ok_or_else(|| Error::io(format!("upload {path}"), "it was aborted"))?;
        rt.block_on(async {
            upload.finish().await?;
            sync_object(env, &path).await
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
