//! Loading what a data directory holds: the WAL, the catalog, each
//! table's manifest, and the WAL's unflushed writes put back into each
//! table's memtable; and the storage they are read through. The writable
//! open ([`open`](super::open)) and the read-only one
//! ([`read_only`](super::read_only)) share it.
//!
//! Invariants: the WAL is read before the catalog and the manifests.
//! Beside a live writer (`live`) that order is what makes the result
//! whole: a WAL file the writer deletes after the listing held only
//! writes that a manifest committed before the deletion names, and the
//! manifests are read after; a flush after the WAL was read only moves
//! writes into segments a manifest read later names. A write is put back
//! into a table only when its sequence is above the table's
//! `flushed_seq`, and never into an archived table. Live loading changes
//! nothing in the directory, holds every local segment it names open (so
//! the loaded state stays readable whatever the writer deletes), and
//! loads again when the catalog changed while the tables were being
//! loaded (a table dropped or archived meanwhile would otherwise read as
//! empty) or a segment was gone before it was held.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::local::LocalFileSystem;

use super::catalog::CatalogFile;
use crate::error::{Error, Result};
use crate::manifest::{ManifestLog, TableManifest};
use crate::options::DbOptions;
use crate::segment::{ReadChecks, Segment, SegmentWriteOptions};
use crate::state::TableInner;
use crate::storage::Storage;
use crate::wal;

/// A directory's contents as loaded.
pub(super) struct Loaded {
    pub catalog_version: u64,
    pub catalog: CatalogFile,
    /// Tables by name, memtables holding their unflushed writes.
    pub tables: BTreeMap<String, Arc<TableInner>>,
    /// The highest write sequence seen (manifests and WAL).
    pub max_seq: u64,
    /// The newest commit time in the WAL, in microseconds (0: none).
    pub last_commit_us: u64,
    /// WAL files read: (number, largest sequence in them).
    pub wal_files: Vec<(u64, u64)>,
    /// Bytes of a torn WAL tail that were cut off (never when `live`).
    pub torn_bytes: u64,
    /// Live: where the WAL was read up to (see [`read_tail`]).
    pub wal_cursor: Option<wal::WalCursor>,
    /// The WAL's writes to tables with a stream (flushed ones too): what
    /// their stream logs may lack.
    pub stream_entries: Vec<wal::WalEntry>,
}

/// How many times a live load starts over when the catalog keeps
/// changing under it.
const LIVE_ATTEMPTS: usize = 20;

/// Loads the directory at `root`. `live`: another process may be writing
/// it, so nothing is changed (a torn WAL tail is left alone, leftovers of
/// interrupted commits too), every local segment is pinned (held open, so
/// that the writer's compactions cannot take it away; a segment already
/// gone means a newer manifest, and the load starts over), and the result
/// is checked against a catalog that changed meanwhile. `previous`: the
/// tables of an earlier load, whose segments are taken over where the new
/// manifests name them unchanged (with their footers and caches).
pub(super) async fn load(root: &Path, storage: &Storage, live: bool, previous: &[Arc<TableInner>]) -> Result<Loaded> {
    let catalog_log = ManifestLog::new("catalog");
    let reuse: HashMap<String, Arc<Segment>> = previous
        .iter()
        .flat_map(|t| t.state.read().all_segments())
        .map(|s| (s.meta.path.clone(), s))
        .collect();
    let mut attempt = 0;
    loop {
        let loaded = load_once(root, storage, live, &catalog_log, &reuse).await?;
        if let Some(loaded) = loaded
            && (!live || catalog_log.newest_version(&*storage.store).await? == loaded.catalog_version)
        {
            return Ok(loaded);
        }
        attempt += 1;
        if attempt >= LIVE_ATTEMPTS {
            return Err(Error::new(
                crate::error::ErrorKind::Io,
                format!(
                    "the catalog or manifests of {} changed {LIVE_ATTEMPTS} times while they were being read (its \
                     writer is busy flushing, compacting, creating or dropping tables); try again",
                    root.display()
                ),
            ));
        }
    }
}

/// One load; `None` (live only): a segment a manifest names was gone
/// when it was pinned, so that manifest is outdated.
async fn load_once(
    root: &Path,
    storage: &Storage,
    live: bool,
    catalog_log: &ManifestLog,
    reuse: &HashMap<String, Arc<Segment>>,
) -> Result<Option<Loaded>> {
    let wal_dir = root.join("wal");
    let (replayed, wal_cursor) = tokio::task::spawn_blocking(move || {
        if !live {
            wal::replay(&wal_dir).map(|r| (r, None))
        } else if wal_dir.is_dir() {
            Ok(wal::replay_live(&wal_dir, None)?.unwrap_or_default())
        } else {
            Ok(Default::default())
        }
    })
    .await
    .map_err(|e| Error::io("WAL replay task", e))??;
    let store = &*storage.store;
    let (catalog_version, catalog) = match live {
        false => catalog_log.load::<CatalogFile>(store).await?,
        true => catalog_log.load_live::<CatalogFile>(store).await?,
    }
    .unwrap_or_default();

    let mut tables = BTreeMap::new();
    // table id -> (table, flushed_seq)
    let mut by_id = BTreeMap::new();
    let mut max_seq = 0;
    for entry in &catalog.tables {
        let mut t = match &entry.archive {
            None => {
                let log = ManifestLog::new(&format!("tables/{}/manifest", entry.id));
                let (mv, mut manifest) = match live {
                    false => log.load::<TableManifest>(store).await?,
                    true => log.load_live::<TableManifest>(store).await?,
                }
                .unwrap_or_default();
                let mut gone = false;
                let parts = crate::state::parts_of(&mut manifest, |m| {
                    let seg = match reuse.get(&m.path) {
                        Some(s) if s.meta == *m => s.clone(),
                        _ => storage.open_segment(m.clone()),
                    };
                    if live {
                        match seg.pin() {
                            Ok(()) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => gone = true,
                            Err(e) => return Err(Error::io(format!("open segment {}", m.path), e)),
                        }
                    }
                    Ok(seg)
                })?;
                if gone {
                    return Ok(None);
                }
                TableInner::new(entry.id, entry.schema.clone(), entry.options, mv, manifest, parts)
            }
            Some(record) => {
                super::archive::open_archived(entry.id, &entry.schema, entry.options, record, storage, root, live)?
            }
        };
        // An archived table takes no replayed write (it refused them).
        let (flushed, seen) = match &entry.archive {
            None => {
                let m = &t.manifest.get_mut().1;
                let f: Vec<u64> = m.partitions.iter().map(|p| p.flushed_seq).collect();
                (f, m.partitions.iter().map(|p| p.flushed_seq).max().unwrap_or(0))
            }
            Some(record) => (vec![u64::MAX], record.manifest.flushed_seq),
        };
        max_seq = max_seq.max(seen);
        t.series = entry.series.clone();
        t.index_of = super::index::loaded_def(entry, &catalog);
        let t = Arc::new(t);
        by_id.insert(entry.id, (t.clone(), flushed));
        tables.insert(entry.schema.name.clone(), t);
    }
    super::index::link_loaded(&catalog, &tables);
    let mut last_commit_us = 0;
    let streamed: Vec<u64> = catalog
        .tables
        .iter()
        .filter(|e| e.stream.is_some() && e.archive.is_none())
        .map(|e| e.id)
        .collect();
    let mut stream_entries = Vec::new();
    for e in replayed.entries {
        if !live && streamed.contains(&e.table_id) {
            stream_entries.push(e.clone());
        }
        max_seq = max_seq.max(e.seq);
        last_commit_us = last_commit_us.max(e.commit_us);
        if let Some((t, flushed)) = by_id.get(&e.table_id) {
            replay_into(t, flushed, e);
        }
    }
    Ok(Some(Loaded {
        catalog_version,
        catalog,
        tables,
        max_seq,
        last_commit_us,
        wal_files: replayed.files,
        torn_bytes: replayed.torn_bytes,
        wal_cursor,
        stream_entries,
    }))
}

/// Brings loaded `tables` up to date with the WAL records written after
/// `cursor`, when that is all that changed: the caller has checked (after
/// this read) that no catalog or manifest version is newer than the ones
/// loaded, so no WAL file was deleted before the read and every table's
/// `flushed_seq` is the loaded one. Returns the records' highest sequence
/// and the new cursor; `None` when the cursor's file is gone (a flush
/// happened: load anew).
pub(super) async fn read_tail(
    root: &Path,
    cursor: wal::WalCursor,
) -> Result<Option<(wal::Replayed, Option<wal::WalCursor>)>> {
    let wal_dir = root.join("wal");
    tokio::task::spawn_blocking(move || wal::replay_live(&wal_dir, Some(cursor)))
        .await
        .map_err(|e| Error::io("WAL read task", e))?
}

/// Puts WAL `entries` (read by [`read_tail`]) into the memtables of the
/// local `tables` whose `flushed_seq` is below them; returns the highest
/// sequence among them.
pub(super) async fn apply_tail(tables: &[Arc<TableInner>], entries: Vec<wal::WalEntry>) -> u64 {
    let mut by_id = HashMap::new();
    for t in tables.iter().filter(|t| !t.is_archived()) {
        let flushed: Vec<u64> = t
            .manifest
            .lock()
            .await
            .1
            .partitions
            .iter()
            .map(|p| p.flushed_seq)
            .collect();
        by_id.insert(t.id, (t, flushed));
    }
    let mut max_seq = 0;
    for e in entries {
        max_seq = max_seq.max(e.seq);
        if let Some((t, flushed)) = by_id.get(&e.table_id) {
            replay_into(t, flushed, e);
        }
    }
    max_seq
}

/// Puts a WAL entry into the active memtable of its partition unless that
/// partition's segments hold it (`flushed`: each partition's
/// `flushed_seq`, in the state's order).
fn replay_into(t: &TableInner, flushed: &[u64], e: wal::WalEntry) {
    let st = t.state.read();
    let i = st.part_index(&e.key);
    if e.seq > flushed.get(i).copied().unwrap_or(u64::MAX) {
        st.parts[i].active.insert(e.key, e.seq, e.mutation);
    }
}

/// The storage of the database at `root`: its object store (the local
/// directory unless `options` name another) and the segment settings.
pub(super) fn storage_for(root: &Path, options: &DbOptions) -> Result<Storage> {
    let (store, local_root): (Arc<dyn ObjectStore>, _) = match &options.object_store {
        Some(store) => (store.clone(), None),
        None => (
            Arc::new(
                LocalFileSystem::new_with_prefix(root)
                    .map_err(|e| Error::io(format!("open data directory {}", root.display()), e))?,
            ),
            Some(root.to_path_buf()),
        ),
    };
    Ok(Storage {
        store,
        local_root,
        segment_options: SegmentWriteOptions {
            row_group_rows: options.row_group_rows,
            page_rows: options.page_rows,
            page_bytes: options.page_bytes,
            numeric_dictionary_bytes: options.numeric_dictionary_bytes,
            cells: options.row_cells,
            relative_versions: options.relative_versions,
            newest_rows: !options.older_version_rows,
            value_zstd: None,
            value_page_bytes: options.compacted_page_bytes,
            value_lz4: options.value_compression == crate::options::ValueCompression::Lz4,
            point_zstd: None,
        },
        compaction_zstd: options.compaction_zstd_level,
        compaction_point_zstd: options.compaction_point_zstd_level,
        read_checks: ReadChecks::new(options.verify_checksums, options.legacy_segments),
        chunk_cache: Arc::new(crate::segment::chunk_cache::ChunkCache::new(
            options.archive_cache_bytes,
        )),
        compaction_reserved: Default::default(),
        residency: Arc::new(crate::segment::residency::Residency::new(options.mapped_segment_bytes)),
        page_cache: Arc::new(crate::segment::pages::PageCache::new(options.page_cache_bytes)),
    })
}

/// Series by name, as the catalog has them.
pub(super) fn series_map(catalog: &CatalogFile) -> std::collections::BTreeMap<String, Arc<super::series::SeriesDef>> {
    catalog
        .series
        .iter()
        .map(|s| (s.schema.name.clone(), Arc::new(s.clone())))
        .collect()
}
