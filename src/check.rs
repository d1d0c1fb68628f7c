//! `cellar check`: verifies every file of a database without opening it.
//!
//! Checking works on the files alone, so that it also reports on a
//! database that no longer opens: the catalog versions, each table's
//! manifest versions (their checksums), every segment the newest manifest
//! names (size, footer and page-index checksum, every data block's
//! checksum; segments written before checksums are listed, and decoded
//! whole with `CheckOptions::legacy`), every segment of an archived table where it is (in its
//! archive location), and every WAL file (record checksums, a torn tail of
//! the newest one). It holds the directory lock while it runs and changes
//! nothing: a torn WAL tail is reported, and cut off by the next open.
//! When another process holds the lock, it checks beside that writer:
//! files the writer deletes while they are checked (old versions, flushed
//! WAL files, segments a compaction replaced) are skipped or noted, never
//! reported damaged, and the newest WAL file's tail may be a record being
//! written.
//!
//! Invariants: it never writes and never opens the database; a file is
//! `ok` only when every checksum it has matched; a file the newest
//! manifest names and that is gone is damaged unless a newer manifest
//! appeared meanwhile.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::archive::ArchiveRecord;
use crate::error::{Error, Result};
use crate::manifest::{self, TableManifest};
use crate::segment::SegmentMeta;

/// What was found in one file.
#[derive(Debug, Clone, PartialEq)]
pub enum FileState {
    /// Nothing wrong.
    Ok,
    /// Readable, with something worth knowing (a torn WAL tail, a segment
    /// without checksums, an orphan file).
    Note(String),
    /// The file cannot be trusted: what is wrong, with offsets.
    Damaged(String),
}

/// One file's result; `path` is relative to the data directory.
#[derive(Debug, Clone, PartialEq)]
pub struct FileCheck {
    /// The file, relative to the data directory.
    pub path: String,
    /// What was found.
    pub state: FileState,
}

/// Every file checked, in the order checked.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// Every file checked.
    pub files: Vec<FileCheck>,
}

impl CheckReport {
    /// How many files are damaged.
    pub fn damaged(&self) -> usize {
        self.files
            .iter()
            .filter(|f| matches!(f.state, FileState::Damaged(_)))
            .count()
    }

    fn push(&mut self, path: impl Into<String>, state: FileState) {
        self.files.push(FileCheck {
            path: path.into(),
            state,
        });
    }
}

/// What `check` does besides verifying checksums.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions {
    /// Decode segments written before segment checksums whole (Parquet's
    /// decoders then meet whatever damage they hold); without it such a
    /// segment is only listed, as a note.
    pub legacy: bool,
}

/// Checks the database in `root`: every table, or only `table` (with the
/// catalog; the WAL is shared by all tables and checked only without one).
pub async fn check(root: impl AsRef<Path>, table: Option<&str>) -> Result<CheckReport> {
    check_with(root, table, CheckOptions::default()).await
}

/// [`check`] with options.
pub async fn check_with(root: impl AsRef<Path>, table: Option<&str>, options: CheckOptions) -> Result<CheckReport> {
    let root = root.as_ref().to_path_buf();
    if !root.join("catalog").is_dir() {
        return Err(Error::param(format!(
            "{} is not a Cellar data directory (it has no catalog/)",
            root.display()
        )));
    }
    // Waits, as an open does, for a database of this process that is
    // closing to let go of the directory. Held by another process: checked
    // beside its writer (`live`).
    let lock = match crate::db::lock::DirLock::acquire(&root).await {
        Ok(l) => Some(l),
        Err(e) if e.kind() == crate::error::ErrorKind::DatabaseLocked => None,
        Err(e) => return Err(e),
    };
    let live = lock.is_none();
    let store: Arc<dyn ObjectStore> = Arc::new(
        LocalFileSystem::new_with_prefix(&root)
            .map_err(|e| Error::io(format!("open data directory {}", root.display()), e))?,
    );
    let mut report = CheckReport::default();
    let tables = check_versions::<serde_json::Value>(&*store, "catalog", &mut report)
        .await?
        .map(|(_, v)| v);
    let entries = tables
        .and_then(|c| c.get("tables").and_then(|t| t.as_array()).cloned())
        .unwrap_or_default();
    // (id, name) of each table in the newest readable catalog.
    let mut ids: Vec<(u64, String)> = entries
        .iter()
        .filter_map(|t| Some((t.get("id")?.as_u64()?, t.pointer("/schema/name")?.as_str()?.to_string())))
        .collect();
    if let Some(name) = table {
        ids.retain(|(_, n)| n == name);
        if ids.is_empty() {
            return Err(Error::new(
                crate::error::ErrorKind::ObjectNotExist,
                format!("table '{name}' does not exist (in the newest readable catalog)"),
            ));
        }
    }
    for (id, _) in &ids {
        let archived = entries
            .iter()
            .find(|e| e.get("id").and_then(|v| v.as_u64()) == Some(*id))
            .and_then(|e| e.get("archive"))
            .and_then(|a| serde_json::from_value::<ArchiveRecord>(a.clone()).ok());
        if let Some(record) = archived {
            check_archive(&record, &mut report, options).await?;
            continue;
        }
        let prefix = format!("tables/{id}/manifest");
        let Some((version, m)) = check_versions::<TableManifest>(&*store, &prefix, &mut report).await? else {
            continue;
        };
        let named: std::collections::HashSet<&str> = m.segments.iter().map(|s| s.path.as_str()).collect();
        for seg in &m.segments {
            let mut state = match check_segment(&*store, seg, options).await {
                Ok(state) => state,
                Err(e) => FileState::Damaged(e.message().to_string()),
            };
            // Beside a writer, a segment the manifest read named may have
            // been replaced (and deleted) by a compaction since: benign
            // when a newer manifest version exists.
            if live && state == FileState::Damaged(MISSING.into()) && newest_version(&*store, &prefix).await? > version
            {
                state = FileState::Note("replaced by the running writer while it was being checked".into());
            }
            report.push(&seg.path, state);
        }
        let seg_dir = ObjectPath::from(format!("tables/{id}/segments"));
        let listed: Vec<_> = store.list(Some(&seg_dir)).try_collect().await?;
        for o in listed {
            if !named.contains(o.location.as_ref()) {
                let why = if live {
                    "named by no manifest yet (being written by the running writer, or left by a crash)"
                } else {
                    "named by no manifest (left by a crash; deleted at the next open)"
                };
                report.push(o.location.to_string(), FileState::Note(why.into()));
            }
        }
    }
    if table.is_none() {
        check_wal(&root.join("wal"), &mut report, live)?;
    }
    drop(lock);
    Ok(report)
}

/// What a segment that its manifest names but is gone reads as.
const MISSING: &str = "missing: the manifest names it but the file is gone";

/// The newest version file's path under `prefix` (version files sort by
/// name).
async fn newest_version(store: &dyn ObjectStore, prefix: &str) -> Result<String> {
    let listed: Vec<_> = store.list(Some(&ObjectPath::from(prefix))).try_collect().await?;
    Ok(listed
        .into_iter()
        .map(|o| o.location.to_string())
        .filter(|p| p.ends_with(".json"))
        .max()
        .unwrap_or_default())
}

/// Checks an archived table's segments where they are (read whole from
/// the archive location, credentials from `AWS_*`).
async fn check_archive(record: &ArchiveRecord, report: &mut CheckReport, options: CheckOptions) -> Result<()> {
    let remote = record.location.open()?;
    let url = record.location.url.trim_end_matches('/');
    for seg in &record.manifest.segments {
        let state = match check_segment(&*remote.store, seg, options).await {
            Ok(state) => state,
            Err(e) => FileState::Damaged(e.message().to_string()),
        };
        report.push(format!("{url}/{}", seg.path), state);
    }
    Ok(())
}

/// Checks every version file under `prefix`; returns the newest readable
/// one's path and contents. A file listed and gone when read (a writer
/// beside deletes old versions) is skipped.
async fn check_versions<T: serde::de::DeserializeOwned>(
    store: &dyn ObjectStore,
    prefix: &str,
    report: &mut CheckReport,
) -> Result<Option<(String, T)>> {
    let listed: Vec<_> = store.list(Some(&ObjectPath::from(prefix))).try_collect().await?;
    let mut paths: Vec<ObjectPath> = listed
        .into_iter()
        .map(|o| o.location)
        .filter(|p| p.as_ref().ends_with(".json"))
        .collect();
    paths.sort();
    let mut newest = None;
    for path in paths {
        let bytes = match store.get(&path).await {
            Ok(r) => r.bytes().await?,
            Err(object_store::Error::NotFound { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        match manifest::decode::<T>(&path, &bytes) {
            Ok(v) => {
                newest = Some((path.to_string(), v));
                report.push(path.to_string(), FileState::Ok);
            }
            Err(e) => report.push(path.to_string(), FileState::Damaged(e.message().to_string())),
        }
    }
    Ok(newest)
}

/// Checks one segment file against what its manifest entry says.
async fn check_segment(store: &dyn ObjectStore, seg: &SegmentMeta, options: CheckOptions) -> Result<FileState> {
    let path = ObjectPath::from(seg.path.as_str());
    if seg.checksum.is_none() && !options.legacy {
        return Ok(FileState::Note(
            "written before segment checksums: not decoded (`cellar check --legacy` decodes it whole); reads \
             refuse it unless the database is opened with legacy segments allowed"
                .into(),
        ));
    }
    let bytes: Bytes = match store.get(&path).await {
        Ok(r) => r.bytes().await?,
        Err(object_store::Error::NotFound { .. }) => {
            return Ok(FileState::Damaged(MISSING.into()));
        }
        Err(e) => return Err(e.into()),
    };
    if bytes.len() as u64 != seg.size_bytes {
        return Ok(FileState::Damaged(format!(
            "{} bytes long, but {} bytes were written (truncated or extended)",
            bytes.len(),
            seg.size_bytes
        )));
    }
    let (mut problems, checksummed) = crate::segment::verify_file(&seg.path, seg.checksum.as_ref(), bytes.clone());
    if problems.is_empty()
        && let Err(e) = crate::segment::verify_cells(&seg.path, bytes)
    {
        problems.push(e.message().to_string());
    }
    Ok(if !problems.is_empty() {
        FileState::Damaged(problems.join("; "))
    } else if !checksummed {
        FileState::Note("written before segment checksums: decoded whole without an error, but bit flips that still decode cannot be seen".into())
    } else {
        FileState::Ok
    })
}

/// Checks every WAL file, the newest one allowing a torn tail (`live`:
/// beside a writer, whose newest file's tail may be a record being
/// written, and whose older files may be deleted once flushed).
fn check_wal(dir: &Path, report: &mut CheckReport, live: bool) -> Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    let numbers = crate::wal::file_numbers(dir)?;
    for (i, &n) in numbers.iter().enumerate() {
        let path = dir.join(crate::wal::file_name(n));
        let name = format!("wal/{}", crate::wal::file_name(n));
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if live && e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(format!("read WAL file {}", path.display()), e)),
        };
        let state = match crate::wal::read_file(&path, &data, i + 1 == numbers.len()) {
            Ok(r) => match r.torn_at {
                Some(at) if live => FileState::Note(format!(
                    "{} bytes at offset {at} past the last whole record (the running writer's tail)",
                    data.len() - at
                )),
                Some(at) => FileState::Note(format!(
                    "a torn tail of {} bytes at offset {at} (a write cut short by a crash, never acknowledged; cut off at the next open)",
                    data.len() - at
                )),
                None => FileState::Ok,
            },
            Err(e) => FileState::Damaged(e.message().to_string()),
        };
        report.push(name, state);
    }
    Ok(())
}
