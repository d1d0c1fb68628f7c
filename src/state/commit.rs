//! The one routine that changes a table's manifest, for flushes and
//! compactions alike.
//!
//! Invariant: a change reaches readers only after the manifest version that
//! records it is durable. Under the table's manifest lock, a copy of the
//! committed manifest is edited, the table's counters are recorded in it,
//! the version is written (`ManifestLog::commit`: fsynced with its
//! directory on a local disk), it becomes the committed one, and only then
//! is the same change installed in the in-memory state. A crash at any
//! point leaves either the old version or the new one, whole; segment files
//! written for a version that never committed are orphans, deleted by the
//! next open.

use std::sync::Arc;

use super::{TableInner, TableState};
use crate::error::Result;
use crate::manifest::TableManifest;
use crate::storage::Storage;

impl TableInner {
    /// Reserves the id of a new segment. The counter is recorded by the
    /// next committed version; an id reserved by a flush or compaction that
    /// never commits is simply not used again.
    pub async fn reserve_segment_id(&self) -> u64 {
        let mut m = self.manifest.lock().await;
        m.1.next_segment_id += 1;
        m.1.next_segment_id - 1
    }

    /// Commits the next manifest version, then installs it in memory.
    ///
    /// `edit` changes a copy of the committed manifest; it returns false to
    /// give up (nothing is written, and `false` is returned). `install`
    /// applies the same change to the in-memory state, under the state
    /// lock. `crash_point` names the moment just after the durable write
    /// (see [`crate::crash_point`]).
    pub async fn commit_manifest(
        self: &Arc<Self>,
        storage: &Storage,
        crash_point: &'static str,
        edit: impl FnOnce(&mut TableManifest) -> Result<bool>,
        install: impl FnOnce(&mut TableState),
    ) -> Result<bool> {
        let mut manifest = self.manifest.lock().await;
        let mut next = manifest.1.clone();
        if !edit(&mut next)? {
            return Ok(false);
        }
        next.counters = self.stats.counters();
        // What versions before partitions read: the table's floor.
        next.flushed_seq = next
            .partitions
            .iter()
            .map(|p| p.flushed_seq)
            .min()
            .unwrap_or(next.flushed_seq);
        let version = manifest.0 + 1;
        self.manifest_log
            .commit(&*storage.store, storage.local_root.as_deref(), version, &next)
            .await?;
        crate::crash_point::hit(crash_point);
        *manifest = (version, next);
        install(&mut self.state.write());
        Ok(true)
    }

    /// Commits a manifest version that changes the table's partitions,
    /// without touching the in-memory state: the caller installs the same
    /// change on the committer thread (see `db::partitions`). Returns
    /// false when `edit` gives up.
    pub async fn commit_layout(
        self: &Arc<Self>,
        crash_point: &'static str,
        edit: impl FnOnce(&mut TableManifest) -> Result<bool>,
        storage: &Storage,
    ) -> Result<bool> {
        self.commit_manifest(storage, crash_point, edit, |_| {}).await
    }
}
