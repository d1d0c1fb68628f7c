//! Manifests: numbered JSON versions committed with conditional create.
//!
//! The catalog (`catalog/`) and each table (`tables/<id>/manifest/`) keep a
//! sequence of versions `NNNNNNNNNNNNNNNNNNNN.json`. Each version is a full
//! snapshot (a checkpoint), which keeps recovery to "read the newest file";
//! they are small (one line per segment). A version is committed with
//! `PutMode::Create`, which is atomic and refuses to overwrite on a local
//! disk and on S3 alike, so two writers can never both commit version n.
//! Versions older than the newest few are pruned after each commit.

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, ErrorKind, Result};
use crate::segment::SegmentMeta;

/// How many committed versions to keep behind the newest one.
const KEEP_VERSIONS: u64 = 2;

/// A table's storage state: which segments hold its data, up to which
/// write sequence.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct TableManifest {
    /// Every write with a sequence <= this is in the segments.
    pub flushed_seq: u64,
    pub next_segment_id: u64,
    pub segments: Vec<SegmentMeta>,
    /// Cumulative storage counters, as of this version (so they outlive
    /// the process: `cellar describe --stats` opens the database anew).
    #[serde(default)]
    pub counters: Counters,
}

/// What flushes and compactions have done to a table so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Counters {
    pub flushes: u64,
    pub flush_bytes: u64,
    pub compactions: u64,
    pub compaction_bytes: u64,
    pub compaction_read_bytes: u64,
}

pub(crate) struct ManifestLog {
    prefix: Path,
}

impl ManifestLog {
    pub fn new(prefix: &str) -> Self {
        ManifestLog {
            prefix: Path::from(prefix),
        }
    }

    pub fn path(&self, n: u64) -> Path {
        self.prefix.clone().join(format!("{n:020}.json"))
    }

    async fn versions(&self, store: &dyn ObjectStore) -> Result<Vec<u64>> {
        let metas: Vec<_> = store.list(Some(&self.prefix)).try_collect().await?;
        let mut ns: Vec<u64> = metas
            .iter()
            .filter_map(|m| m.location.filename()?.strip_suffix(".json")?.parse().ok())
            .collect();
        ns.sort_unstable();
        Ok(ns)
    }

    /// The newest version and its number, or `None` when there is none.
    pub async fn load<T: DeserializeOwned>(&self, store: &dyn ObjectStore) -> Result<Option<(u64, T)>> {
        let Some(&n) = self.versions(store).await?.last() else {
            return Ok(None);
        };
        let bytes = store.get(&self.path(n)).await?.bytes().await?;
        let value = serde_json::from_slice(&bytes)
            .map_err(|e| Error::corruption(format!("manifest {} cannot be read: {e}", self.path(n))))?;
        Ok(Some((n, value)))
    }

    /// Commits `value` as version `n`; fails if version `n` already exists
    /// (another writer got there first).
    pub async fn commit<T: Serialize>(&self, store: &dyn ObjectStore, n: u64, value: &T) -> Result<()> {
        let bytes = serde_json::to_vec(value).map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match store.put_opts(&self.path(n), PutPayload::from(bytes), opts).await {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("manifest version {} was committed by another writer", self.path(n)),
                ));
            }
            Err(e) => return Err(e.into()),
        }
        if n > KEEP_VERSIONS {
            for old in self.versions(store).await? {
                if old + KEEP_VERSIONS < n {
                    match store.delete(&self.path(old)).await {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        Ok(())
    }
}
