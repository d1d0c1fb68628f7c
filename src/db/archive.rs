//! Archiving a table to an object store, restoring it, and dropping an
//! archived table.
//!
//! Invariants:
//! - An archive changes nothing the table relies on until the catalog
//!   records it: the table is flushed and compacted (unless it already is
//!   one run without deleted keys), refuses writes while
//!   its segments are copied and verified (writable again if the archive
//!   fails or is cancelled), and its local files are freed only after the
//!   catalog commit. A crash anywhere before that commit leaves the local
//!   table as it was; running the archive again reuses what was copied.
//! - A restore copies every segment back and checks each against its
//!   block checksums, commits a fresh local manifest, and only then the
//!   catalog; until that commit the table stays archived (the next open
//!   deletes a half-restored local copy).
//! - An archive's objects are never deleted by the engine except by
//!   `drop_table_with(.., ArchiveOnDrop::Delete)`: archived segments are
//!   never compacted nor marked obsolete.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;
use object_store::path::Path;

use super::Database;
use crate::archive::{
    self, ArchiveRecord, ArchiveSpec, MARKER, MARKER_FORMAT, Marker, MarkerState, TransferProgress, TransferReport,
};
use crate::error::{Error, ErrorKind, Result};
use crate::manifest::TableManifest;
use crate::remote::{Remote, RemoteLocation};
use crate::segment::Segment;
use crate::state::{ArchiveState, TableInner};
use crate::storage::Storage;

/// What [`Database::drop_table_with`] does with an archived table's
/// objects in its archive location.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ArchiveOnDrop {
    /// Refuse to drop an archived table (what [`Database::drop_table`] does).
    #[default]
    Refuse,
    /// Drop the table and leave its archive where it is.
    Keep,
    /// Drop the table and delete its archive's objects.
    Delete,
}

/// Makes a table writable again unless the archive got to its catalog
/// commit (also when the archive's future is dropped half-way).
struct Unfreeze<'a> {
    table: &'a TableInner,
    armed: bool,
}

impl Drop for Unfreeze<'_> {
    fn drop(&mut self) {
        if self.armed {
            *self.table.archive.write() = None;
            self.table.read_only.store(false, Ordering::Release);
        }
    }
}

impl Database {
    /// Archives a table to `to` (`s3://BUCKET/PREFIX`, `file:///PATH` or a
    /// local path): flushes and fully compacts it, refuses writes from then
    /// on, copies its segments and a marker object there, reads every
    /// object back to check its size and CRC-32C, records the location in
    /// the catalog and only then frees the local copy. The table then
    /// answers reads from the archive and refuses writes
    /// ([`ErrorKind::ReadOnly`]) until [`Database::restore_table`].
    ///
    /// A failed or interrupted archive leaves the table local and
    /// writable; running it again completes it, reusing the objects already
    /// copied. Archiving a table already archived at `to` does nothing.
    /// `progress` is called as bytes are copied.
    pub async fn archive_table(
        &self,
        name: &str,
        to: &RemoteLocation,
        progress: &(dyn Fn(&TransferProgress) + Sync),
    ) -> Result<TransferReport> {
        self.inner.writable("an archive")?;
        let to = &to.absolute()?;
        let t = self.table_inner(name)?;
        if t.index_of.is_some() || !t.indexes.read().is_empty() {
            return Err(Error::param(format!(
                "'{name}' is an index or has indexes, which an archived (read-only) table cannot keep; drop its \
                 indexes first (DROP INDEX)"
            )));
        }
        if t.stream.read().is_some() {
            return Err(Error::param(format!(
                "table '{name}' has a change stream, which an archived (read-only) table cannot keep; disable it \
                 first (`Database::set_stream(\"{name}\", None)`)"
            )));
        }
        let _transfer = t.transfer.lock().await;
        if let Some(record) = self.archive_record(t.id).await {
            if same_place(&record.location, to) {
                let segs = &record.manifest.segments;
                return Ok(TransferReport {
                    location: to.url.clone(),
                    files: segs.len(),
                    bytes: segs.iter().map(|s| s.size_bytes).sum(),
                    reused_files: segs.len(),
                    already_done: true,
                });
            }
            return Err(Error::param(format!(
                "table '{name}' is already archived at {}; restore it (`cellar restore {name}`) before archiving it elsewhere",
                record.location.describe()
            )));
        }
        let remote = to.open()?;
        remote.probe().await?;
        check_location(&remote, &t).await?;

        // From here on writes are refused, by validation and by the
        // committer, so the flush below is the table's last.
        *t.archive.write() = Some(ArchiveState {
            location: to.clone(),
            complete: false,
        });
        t.read_only.store(true, Ordering::Release);
        let mut undo = Unfreeze { table: &t, armed: true };
        let table = self.table(name)?;
        table.flush().await?;
        if !is_compacted(&t) {
            table.compact().await?;
        }
        let _compaction = t.compaction.write().await;
        let _flushing = t.flushing.lock().await;
        if t.unflushed_bytes() > 0 || t.state.read().parts.iter().any(|p| !p.immutables.is_empty()) {
            return Err(Error::new(
                ErrorKind::Io,
                format!("table '{name}' still holds unflushed writes after its flush; the archive was not made, retry"),
            ));
        }
        let local = t.manifest.lock().await.1.clone();
        let marker = |state, manifest| Marker {
            format: MARKER_FORMAT.to_string(),
            state,
            table: name.to_string(),
            table_id: t.id,
            schema: t.full_schema(),
            options: *t.options.read(),
            manifest,
        };
        archive::put_marker(&remote, &marker(MarkerState::Uploading, None)).await?;
        let storage = &self.inner.shared.storage;
        let report = upload_segments(storage, &remote, &local, progress).await?;
        delete_leftovers(&remote, &local).await?;
        let manifest = archive::with_paths(&local, archive::archived_path);
        archive::put_marker(&remote, &marker(MarkerState::Complete, Some(manifest.clone()))).await?;
        crate::crash_point::hit("archive.uploaded");
        let record = ArchiveRecord {
            location: to.clone(),
            manifest,
        };
        self.set_archive_record(t.id, Some(record.clone())).await?;
        crate::crash_point::hit("archive.committed");

        // The archive is the table now: swap its segments, free the local
        // files (a segment a reader still holds goes when it lets go).
        undo.armed = false;
        let mut manifest = record.manifest.clone();
        let cache = Some(self.path());
        let parts = crate::state::parts_of(&mut manifest, |m| {
            Ok(archived_segment(t.id, m, &remote, storage, cache))
        })?;
        let old = std::mem::replace(&mut t.state.write().parts, parts);
        let mut seen = std::collections::HashSet::new();
        old.iter()
            .flat_map(|p| p.segments.iter())
            .filter(|s| seen.insert(s.meta.id))
            .for_each(|s| s.mark_obsolete());
        *t.manifest.lock().await = (0, manifest);
        if let Some(a) = t.archive.write().as_mut() {
            a.complete = true;
        }
        delete_local(storage, &format!("tables/{}/manifest", t.id)).await?;
        Ok(report)
    }

    /// Brings an archived table back into the data directory, local and
    /// writable. Its archive stays where it is. Every segment is checked
    /// against its block checksums before the catalog changes; a failed
    /// restore leaves the table archived.
    pub async fn restore_table(
        &self,
        name: &str,
        progress: &(dyn Fn(&TransferProgress) + Sync),
    ) -> Result<TransferReport> {
        self.inner.writable("a restore")?;
        let t = self.table_inner(name)?;
        let _transfer = t.transfer.lock().await;
        let Some(record) = self.archive_record(t.id).await else {
            return Err(Error::param(format!(
                "table '{name}' is not archived; restore applies to tables `cellar list` shows as archived"
            )));
        };
        let remote = record.location.open()?;
        let storage = &self.inner.shared.storage;
        // What an interrupted restore left.
        delete_local(storage, &format!("tables/{}", t.id)).await?;
        let local = archive::with_paths(&record.manifest, |m| archive::local_path(t.id, m));
        let mut p = TransferProgress {
            files: local.segments.len(),
            bytes: local.segments.iter().map(|s| s.size_bytes).sum(),
            ..Default::default()
        };
        progress(&p);
        for (from, to) in record.manifest.segments.iter().zip(&local.segments) {
            let base = p.bytes_done;
            let mut on_bytes = |n: u64| {
                p.bytes_done += n;
                progress(&p);
            };
            archive::download(&remote, &from.path, storage, &to.path, &mut on_bytes).await?;
            check_restored(storage, to, &record.location).await?;
            p.bytes_done = base + to.size_bytes;
            p.files_done += 1;
            progress(&p);
        }
        t.manifest_log
            .commit(&*storage.store, storage.local_root.as_deref(), 1, &local)
            .await?;
        crate::crash_point::hit("restore.manifest");
        self.set_archive_record(t.id, None).await?;

        let mut local = local;
        let parts = crate::state::parts_of(&mut local, |m| Ok(storage.open_segment(m.clone())))?;
        t.state.write().parts = parts;
        *t.manifest.lock().await = (1, local);
        *t.archive.write() = None;
        t.read_only.store(false, Ordering::Release);
        let _ = std::fs::remove_dir_all(tail_cache_dir(self.path(), t.id));
        Ok(TransferReport {
            location: record.location.url.clone(),
            files: p.files,
            bytes: p.bytes,
            reused_files: 0,
            already_done: false,
        })
    }

    /// Drops a table; an archived one as `archive` says (see
    /// [`ArchiveOnDrop`]). A series is dropped when it has no months left. With `Delete`, the archive location is checked
    /// to be reachable before the table is dropped; if deleting its objects
    /// then fails, the table is dropped and the error names what is left.
    pub async fn drop_table_with(&self, name: &str, archive: ArchiveOnDrop) -> Result<()> {
        self.inner.writable("DROP TABLE")?;
        if self.inner.series.read().contains_key(name) {
            return self.drop_series(name).await;
        }
        let t = self.table_inner(name)?;
        if let Some(def) = &t.index_of {
            return Err(Error::param(format!(
                "'{name}' is an index of table '{}'; drop it with DROP INDEX {name} (cellar index drop {} {name})",
                def.table, def.table
            )));
        }
        let Ok(_transfer) = t.transfer.try_lock() else {
            return Err(Error::param(format!(
                "table '{name}' is being archived or restored; drop it once that ends"
            )));
        };
        let Some(record) = self.archive_record(t.id).await else {
            self.drop_indexes_of(name).await?;
            return self.drop_local_table(name).await;
        };
        match archive {
            ArchiveOnDrop::Refuse => Err(Error::param(format!(
                "table '{name}' is archived at {}; drop it with --keep-archive (the archive stays) or \
                 --delete-archive (its objects are deleted too; in SQL: DROP TABLE {name} PURGE)",
                record.location.describe()
            ))),
            ArchiveOnDrop::Keep => {
                self.drop_local_table(name).await?;
                let _ = std::fs::remove_dir_all(tail_cache_dir(self.path(), t.id));
                Ok(())
            }
            ArchiveOnDrop::Delete => {
                let remote = record.location.open()?;
                remote.probe().await?;
                self.drop_local_table(name).await?;
                let _ = std::fs::remove_dir_all(tail_cache_dir(self.path(), t.id));
                let mut objects: Vec<Path> = record
                    .manifest
                    .segments
                    .iter()
                    .map(|s| Path::from(s.path.as_str()))
                    .collect();
                objects.push(Path::from(MARKER));
                archive::delete_objects(&remote, objects).await.map_err(|e| {
                    Error::new(
                        e.kind(),
                        format!(
                            "table '{name}' was dropped, but its archive at {} was not wholly deleted ({}); \
                             delete what is left there by hand",
                            record.location.url,
                            e.message()
                        ),
                    )
                })
            }
        }
    }

    /// The catalog's record of the table's archive, if it is archived.
    pub(super) async fn archive_record(&self, id: u64) -> Option<ArchiveRecord> {
        let cat = self.inner.catalog.lock().await;
        cat.1.tables.iter().find(|e| e.id == id).and_then(|e| e.archive.clone())
    }

    async fn set_archive_record(&self, id: u64, record: Option<ArchiveRecord>) -> Result<()> {
        let mut cat = self.inner.catalog.lock().await;
        let mut next = cat.1.clone();
        let entry = next
            .tables
            .iter_mut()
            .find(|e| e.id == id)
            .ok_or_else(|| Error::new(ErrorKind::ObjectNotExist, "the table was dropped meanwhile"))?;
        entry.archive = record;
        self.commit_catalog(&mut cat, next).await
    }
}

/// Whether the table's segments already are what a full compaction
/// would make of them: one sorted run without deleted keys or tombstones.
/// (A rerun of an interrupted archive then uploads the same files again
/// and finds them there.)
fn is_compacted(t: &TableInner) -> bool {
    let st = t.state.read();
    st.parts.iter().all(|p| {
        crate::state::runs(&p.segments).len() <= 1
            && p.owns_its_sources()
            && p.segments.iter().all(|s| s.meta.dead_keys == Some(0))
    })
}

/// Whether two locations name the same place.
fn same_place(a: &RemoteLocation, b: &RemoteLocation) -> bool {
    a.url.trim_end_matches('/') == b.url.trim_end_matches('/') && a.endpoint == b.endpoint
}

/// Refuses a location that holds another table's archive or anything
/// that is not an archive of this table.
async fn check_location(remote: &Remote, t: &TableInner) -> Result<()> {
    let name = &t.schema.name;
    let at = remote.location.describe();
    match archive::get_marker(remote).await? {
        Some(m) if m.format == MARKER_FORMAT && m.table == *name && m.table_id == t.id => Ok(()),
        Some(m) => Err(Error::param(format!(
            "{at} holds the archive of table '{}' (id {}); archive '{name}' to a location of its own",
            m.table, m.table_id
        ))),
        None => {
            let first = remote
                .store
                .list(None)
                .try_next()
                .await
                .map_err(|e| remote.location.error("list", e))?;
            match first {
                Some(o) => Err(Error::param(format!(
                    "{at} is not empty (it holds {}); archive to an empty location",
                    o.location
                ))),
                None => Ok(()),
            }
        }
    }
}

/// Segment files an archive copies at once.
const PARALLEL_FILES: usize = 2;

/// Copies every segment of `local` to the location ([`PARALLEL_FILES`] at
/// once), skipping those an earlier run already copied whole, and reads
/// each back to check it.
async fn upload_segments(
    storage: &Storage,
    remote: &Remote,
    local: &TableManifest,
    progress: &(dyn Fn(&TransferProgress) + Sync),
) -> Result<TransferReport> {
    use std::sync::atomic::{AtomicU64, AtomicUsize};
    let total = TransferProgress {
        files: local.segments.len(),
        bytes: local.segments.iter().map(|s| s.size_bytes).sum(),
        ..Default::default()
    };
    let (bytes_done, files_done) = (AtomicU64::new(0), AtomicUsize::new(0));
    let show = || {
        progress(&TransferProgress {
            bytes_done: bytes_done.load(Ordering::Relaxed),
            files_done: files_done.load(Ordering::Relaxed),
            ..total
        })
    };
    show();
    let reused: Vec<bool> = futures::stream::iter(&local.segments)
        .map(|seg| async {
            let on_bytes = |n: u64| {
                bytes_done.fetch_add(n, Ordering::Relaxed);
                show();
            };
            let reused = upload_segment(storage, remote, seg, &on_bytes).await?;
            if reused {
                bytes_done.fetch_add(seg.size_bytes, Ordering::Relaxed);
            }
            files_done.fetch_add(1, Ordering::Relaxed);
            show();
            Ok::<bool, Error>(reused)
        })
        .buffered(PARALLEL_FILES)
        .try_collect()
        .await?;
    Ok(TransferReport {
        location: remote.location.url.clone(),
        files: total.files,
        bytes: total.bytes,
        reused_files: reused.iter().filter(|r| **r).count(),
        already_done: false,
    })
}

/// Copies one segment and reads it back to check it; true when an
/// earlier run had already copied it whole (nothing was copied).
async fn upload_segment(
    storage: &Storage,
    remote: &Remote,
    seg: &crate::segment::SegmentMeta,
    on_bytes: &(dyn Fn(u64) + Sync),
) -> Result<bool> {
    let to = archive::archived_path(seg);
    let stored = archive::stored_crc(remote, &to).await?;
    if let Some(s) = stored
        && s.0 == seg.size_bytes
        && archive::local_crc(storage, &seg.path).await? == Some(s)
    {
        return Ok(true);
    }
    let sent = archive::upload(storage, &seg.path, remote, &to, &mut |n| on_bytes(n)).await?;
    if sent.0 != seg.size_bytes {
        return Err(Error::corruption(format!(
            "segment {} is {} bytes long, its manifest says {}; the archive was not made",
            seg.path, sent.0, seg.size_bytes
        )));
    }
    let back = archive::stored_crc(remote, &to).await?;
    if back != Some(sent) {
        return Err(Error::new(
            ErrorKind::Io,
            format!(
                "{to} at {} does not read back as it was uploaded ({} bytes, CRC-32C {:08x}; read back: {}); \
                 the table was not changed, retry the archive",
                remote.location.describe(),
                sent.0,
                sent.1,
                back.map_or("nothing".to_string(), |(n, c)| format!("{n} bytes, CRC-32C {c:08x}"))
            ),
        ));
    }
    Ok(false)
}

/// Deletes segment objects at the location that `manifest` does not list
/// (copied by an earlier attempt before the table changed).
async fn delete_leftovers(remote: &Remote, manifest: &TableManifest) -> Result<()> {
    let keep: std::collections::HashSet<String> = manifest.segments.iter().map(archive::archived_path).collect();
    let listed: Vec<_> = remote
        .store
        .list(Some(&Path::from("segments")))
        .try_collect()
        .await
        .map_err(|e| remote.location.error("list", e))?;
    let gone: Vec<Path> = listed
        .into_iter()
        .map(|o| o.location)
        .filter(|p| !keep.contains(p.as_ref()))
        .collect();
    archive::delete_objects(remote, gone).await
}

/// Checks a restored segment against its block checksums.
async fn check_restored(storage: &Storage, seg: &crate::segment::SegmentMeta, from: &RemoteLocation) -> Result<()> {
    let bytes = storage.store.get(&Path::from(seg.path.as_str())).await?.bytes().await?;
    let (path, sum) = (seg.path.clone(), seg.checksum);
    let (problems, _) = tokio::task::spawn_blocking(move || crate::segment::verify_file(&path, sum.as_ref(), bytes))
        .await
        .map_err(|e| Error::io("verify a restored segment", e))?;
    match problems.first() {
        None => Ok(()),
        Some(p) => Err(Error::corruption(format!(
            "a segment restored from {} is damaged ({p}); the table stays archived",
            from.describe()
        ))),
    }
}

/// Deletes every local object under `prefix`.
pub(super) async fn delete_local(storage: &Storage, prefix: &str) -> Result<()> {
    let objects: Vec<_> = storage.store.list(Some(&Path::from(prefix))).try_collect().await?;
    for o in objects {
        match storage.store.delete(&o.location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Where the tails of a table's archived segments are cached.
fn tail_cache_dir(root: &std::path::Path, table_id: u64) -> std::path::PathBuf {
    root.join("cache").join("tails").join(table_id.to_string())
}

/// Tables opened from an [`ArchiveSpec`] get ids from here: far above any
/// catalog's, so that nothing keyed by a table id mistakes one for a table
/// of the database.
static NEXT_DETACHED_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 56);

impl Database {
    /// What another process needs to read `table` from its archive: refused
    /// for a table that is not archived (its newest rows live in this
    /// process's memtables and WAL).
    pub(crate) fn archive_spec(&self, table: &super::table::Table) -> Result<ArchiveSpec> {
        let t = table.inner();
        let location = match &*t.archive.read() {
            Some(a) if a.complete => a.location.clone(),
            _ => {
                return Err(Error::param(format!(
                    "table '{}' is live: its newest rows exist only in this process (memtable and WAL); \
                     archive it first (cellar archive {} --to URL), or query it without a cluster",
                    t.schema.name, t.schema.name
                )));
            }
        };
        // An archived table's manifest never changes after its open.
        let manifest = match t.manifest.try_lock() {
            Ok(m) => m.1.clone(),
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::RowOperationConflict,
                    format!("table '{}' is changing (a restore?); retry", t.schema.name),
                ));
            }
        };
        Ok(ArchiveSpec {
            name: t.schema.name.clone(),
            // With its declared columns (SQL shows them first, in order).
            schema: t.full_schema(),
            options: *t.options.read(),
            record: ArchiveRecord { location, manifest },
        })
    }

    /// The archived table `spec` describes, opened from its archive alone
    /// (credentials from this process's environment), outside the catalog:
    /// read-only, its segments read in place, nothing cached on disk.
    pub(crate) fn open_detached(&self, spec: &ArchiveSpec) -> Result<super::table::Table> {
        let id = NEXT_DETACHED_ID.fetch_add(1, Ordering::Relaxed);
        let shared = &self.inner.shared;
        let t = open_archived(
            id,
            &spec.schema,
            spec.options,
            &spec.record,
            &shared.storage,
            &self.inner.root,
            true,
        )?;
        Ok(super::table::Table::new(self.inner.clone(), Arc::new(t)))
    }
}

/// An archived table as the catalog records it, for `open`.
pub(super) fn open_archived(
    id: u64,
    schema: &crate::model::schema::TableSchema,
    options: crate::model::schema::TableOptions,
    record: &ArchiveRecord,
    storage: &Storage,
    root: &std::path::Path,
    read_only: bool,
) -> Result<TableInner> {
    let remote = record.location.open().map_err(|e| {
        Error::new(
            e.kind(),
            format!(
                "table '{}' is archived at {}: {}",
                schema.name,
                record.location.describe(),
                e.message()
            ),
        )
    })?;
    // A read-only open writes nothing, the tail cache included.
    let cache = (!read_only).then_some(root);
    let mut manifest = record.manifest.clone();
    let parts = crate::state::parts_of(&mut manifest, |m| Ok(archived_segment(id, m, &remote, storage, cache)))?;
    let t = TableInner::new(id, schema.clone(), options, 0, manifest, parts);
    *t.archive.write() = Some(ArchiveState {
        location: record.location.clone(),
        complete: true,
    });
    t.read_only.store(true, Ordering::Release);
    Ok(t)
}

/// A segment of an archived table, read from its archive location (its
/// tail cached under the data directory `cache` when it is local).
fn archived_segment(
    id: u64,
    m: &crate::segment::SegmentMeta,
    remote: &Remote,
    storage: &Storage,
    cache: Option<&std::path::Path>,
) -> Arc<Segment> {
    let seg = Segment::new(m.clone(), remote.store.clone(), None, storage.read_checks)
        .with_chunk_cache(storage.chunk_cache.clone());
    let seg = match (&storage.local_root, cache) {
        (Some(_), Some(root)) => seg.with_tail_cache(tail_cache_dir(root, id).join(format!("{}.tail", m.id))),
        _ => seg,
    };
    Arc::new(seg)
}
