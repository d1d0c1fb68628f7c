//! Manifests: numbered JSON versions committed with conditional create.
//!
//! The catalog (`catalog/`) and each table (`tables/<id>/manifest/`) keep a
//! sequence of versions `NNNNNNNNNNNNNNNNNNNN.json`. Each version is a full
//! snapshot (a checkpoint), which keeps recovery to "read the newest file";
//! they are small (one line per segment). A version is committed with
//! `PutMode::Create`, which is atomic and refuses to overwrite on a local
//! disk and on S3 alike, so two writers can never both commit version n.
//! Versions older than the newest few are pruned after each commit.
//!
//! A version is durable when `commit` returns. On a local disk it is
//! written to `NNN.json.tmp`, fsynced, hard-linked to its name (which, like
//! `PutMode::Create`, refuses to overwrite) and its directory fsynced: after
//! a power cut a version is there whole or not at all. (`object_store`'s
//! local `put` renames an unsynced staging file into place, so a cut could
//! leave a torn newest version, and the database would not open.) A
//! leftover `.tmp` file is deleted by the next `load`.
//!
//! Every version is checksummed: the file is `{"crc32c":N,"body":...}`
//! where N is the CRC-32C of the body's exact bytes, so a flipped bit or a
//! truncation is reported with the file's name instead of being read as
//! different data (a digit of `flushed_seq` changed by a bit flip is still
//! valid JSON). Files written before checksums (a bare body) are read as
//! they are.
//!
//! The JSON layout is in `docs/format.md`, "Manifests".

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
    /// The table's partitions in key order. Empty in versions written
    /// before partitions: one partition (id 0) then holds every segment
    /// (see [`TableManifest::normalize`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<PartitionMeta>,
    /// The id the next partition a split or merge makes gets.
    #[serde(default)]
    pub next_partition_id: u64,
    /// Partitions split or merged away whose change stream shards are
    /// still kept (until their records expire), for their lineage.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closed_partitions: Vec<ClosedPartition>,
}

/// A partition split or merged away, as its stream shard's lineage needs it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ClosedPartition {
    pub id: u64,
    /// Its keys: from `lower` to `upper` (hex encodings; `upper` absent:
    /// unbounded).
    pub lower: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upper: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<u64>,
}

/// One range partition of a table: the partition-key values from `lower`
/// up to the next partition's `lower`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct PartitionMeta {
    pub id: u64,
    /// The encoding of the lowest partition-key value it holds, hex;
    /// empty for the first partition.
    pub lower: String,
    /// Every write to its keys with a sequence <= this is in its segments.
    pub flushed_seq: u64,
    /// Its segments' ids (in `TableManifest::segments`), oldest first. A
    /// segment a split left in both halves is named by both; each reads
    /// only its own keys of it.
    pub segments: Vec<u64>,
    /// The partitions it was split or merged from (none for the first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<u64>,
}

impl PartitionMeta {
    /// The lower bound's bytes (empty: the first partition).
    pub fn lower_key(&self) -> Vec<u8> {
        crate::segment::hex_decode(&self.lower)
    }
}

impl TableManifest {
    /// Gives a version written before partitions its one partition (id 0,
    /// every segment, the table's `flushed_seq`).
    pub fn normalize(&mut self) {
        if self.partitions.is_empty() {
            self.partitions.push(PartitionMeta {
                id: 0,
                lower: String::new(),
                flushed_seq: self.flushed_seq,
                segments: self.segments.iter().map(|s| s.id).collect(),
                parents: Vec::new(),
            });
            self.next_partition_id = self.next_partition_id.max(1);
        }
    }

    /// The partition `id`, if the version still has it.
    pub fn partition_mut(&mut self, id: u64) -> Option<&mut PartitionMeta> {
        self.partitions.iter_mut().find(|p| p.id == id)
    }

    /// Drops from `segments` every segment no partition names any more;
    /// returns their ids.
    pub fn drop_unnamed_segments(&mut self) -> Vec<u64> {
        let named: std::collections::HashSet<u64> = self
            .partitions
            .iter()
            .flat_map(|p| p.segments.iter().copied())
            .collect();
        let gone = self
            .segments
            .iter()
            .filter(|s| !named.contains(&s.id))
            .map(|s| s.id)
            .collect();
        self.segments.retain(|s| named.contains(&s.id));
        gone
    }
}

/// What flushes and compactions have done to a table so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Counters {
    pub flushes: u64,
    pub flush_bytes: u64,
    pub compactions: u64,
    pub compaction_bytes: u64,
    pub compaction_read_bytes: u64,
    #[serde(default)]
    pub compaction_moved_bytes: u64,
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

    /// The committed version numbers, ascending; `clean`: delete what an
    /// interrupted local commit left (never beside a live writer, whose
    /// commit in progress it would break).
    async fn versions(&self, store: &dyn ObjectStore, clean: bool) -> Result<Vec<u64>> {
        let metas: Vec<_> = store.list(Some(&self.prefix)).try_collect().await?;
        // A commit a crash interrupted on a local disk.
        for m in metas
            .iter()
            .filter(|m| clean && m.location.as_ref().ends_with(".json.tmp"))
        {
            match store.delete(&m.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let mut ns: Vec<u64> = metas
            .iter()
            .filter_map(|m| m.location.filename()?.strip_suffix(".json")?.parse().ok())
            .collect();
        ns.sort_unstable();
        Ok(ns)
    }

    /// The newest version and its number, or `None` when there is none.
    pub async fn load<T: DeserializeOwned>(&self, store: &dyn ObjectStore) -> Result<Option<(u64, T)>> {
        self.load_newest(store, false).await
    }

    /// [`load`](Self::load) beside a process that may be committing:
    /// changes nothing, and when the newest version listed was pruned
    /// before it was read (newer ones were committed meanwhile), lists
    /// again.
    pub async fn load_live<T: DeserializeOwned>(&self, store: &dyn ObjectStore) -> Result<Option<(u64, T)>> {
        self.load_newest(store, true).await
    }

    async fn load_newest<T: DeserializeOwned>(&self, store: &dyn ObjectStore, live: bool) -> Result<Option<(u64, T)>> {
        let mut attempt = 0;
        loop {
            let Some(&n) = self.versions(store, !live).await?.last() else {
                return Ok(None);
            };
            let path = self.path(n);
            match store.get(&path).await {
                Ok(got) => return Ok(Some((n, decode(&path, &got.bytes().await?)?))),
                Err(object_store::Error::NotFound { .. }) if live && attempt < 10 => attempt += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The newest committed version's number (0: none), changing nothing.
    pub async fn newest_version(&self, store: &dyn ObjectStore) -> Result<u64> {
        Ok(self.versions(store, false).await?.last().copied().unwrap_or(0))
    }

    /// Commits `value` as version `n`, durably; fails if version `n`
    /// already exists (another writer got there first). `local_root`: the
    /// directory behind `store` when it is a local disk.
    pub async fn commit<T: Serialize>(
        &self,
        store: &dyn ObjectStore,
        local_root: Option<&std::path::Path>,
        n: u64,
        value: &T,
    ) -> Result<()> {
        let bytes = encode(value)?;
        let taken = || {
            Error::new(
                ErrorKind::Io,
                format!("manifest version {} was committed by another writer", self.path(n)),
            )
        };
        if let Some(root) = local_root {
            let path = root.join(self.path(n).as_ref());
            tokio::task::spawn_blocking(move || write_durably(&path, &bytes))
                .await
                .map_err(|e| Error::io("manifest write task", e))?
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::AlreadyExists => taken(),
                    _ => Error::io(format!("commit manifest version {}", self.path(n)), e),
                })?;
        } else {
            let opts = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            match store.put_opts(&self.path(n), PutPayload::from(bytes), opts).await {
                Ok(_) => {}
                Err(object_store::Error::AlreadyExists { .. }) => return Err(taken()),
                Err(e) => return Err(e.into()),
            }
        }
        crate::crash_point::hit("manifest.written");
        if n > KEEP_VERSIONS {
            for old in self.versions(store, true).await? {
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

/// Writes a new file at `path` that is whole and durable when this
/// returns, or absent: temp file, fsync, hard link (fails with
/// `AlreadyExists` if `path` exists), directory fsync.
fn write_durably(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("a manifest path has no directory"))?;
    std::fs::create_dir_all(dir)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        // The content is durable under whichever name the link gives it.
        crate::crash_point::synced(path, Some(bytes.len() as u64));
        std::fs::hard_link(&tmp, path)
    })();
    let _ = std::fs::remove_file(&tmp);
    result?;
    crate::wal::sync_dir(dir).map_err(|e| std::io::Error::other(e.to_string()))
}

/// How every version file starts: a reader that sees anything else takes
/// the file for one written before checksums.
const ENVELOPE_START: &[u8] = b"{\"crc32c\":";

#[derive(serde::Deserialize)]
struct Envelope<'a> {
    crc32c: u32,
    #[serde(borrow)]
    body: &'a serde_json::value::RawValue,
}

/// A version's file: the body's JSON wrapped with its CRC-32C.
pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    let body = serde_json::to_vec(value).map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?;
    let mut out = Vec::with_capacity(body.len() + 32);
    out.extend_from_slice(ENVELOPE_START);
    out.extend_from_slice(crc32c::crc32c(&body).to_string().as_bytes());
    out.extend_from_slice(b",\"body\":");
    out.extend_from_slice(&body);
    out.push(b'}');
    Ok(out)
}

/// Reads a version's file, checking its checksum; `path` names it in errors.
pub(crate) fn decode<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T> {
    let damaged = |what: String| Error::corruption(format!("{path} is damaged: {what}"));
    if !bytes.starts_with(ENVELOPE_START) {
        // Written before checksums (or damaged in its first bytes, which
        // then fails to parse as the bare body).
        return serde_json::from_slice(bytes).map_err(|e| damaged(format!("not a valid version file ({e})")));
    }
    let env: Envelope = serde_json::from_slice(bytes)
        .map_err(|e| damaged(format!("not a valid version file ({e}); {} bytes", bytes.len())))?;
    let body = env.body.get().as_bytes();
    let actual = crc32c::crc32c(body);
    if actual != env.crc32c {
        return Err(damaged(format!(
            "checksum mismatch (stored {:#010x}, computed {actual:#010x} over bytes {}..{})",
            env.crc32c,
            ENVELOPE_START.len(),
            bytes.len()
        )));
    }
    serde_json::from_slice(body).map_err(|e| damaged(format!("its contents do not parse ({e})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TableManifest {
        TableManifest {
            flushed_seq: 1234567,
            next_segment_id: 9,
            ..Default::default()
        }
    }

    #[test]
    fn versions_round_trip_and_old_files_still_read() {
        let path = Path::from("tables/1/manifest/00000000000000000001.json");
        let bytes = encode(&sample()).unwrap();
        assert_eq!(decode::<TableManifest>(&path, &bytes).unwrap(), sample());
        let old = serde_json::to_vec(&sample()).unwrap();
        assert_eq!(decode::<TableManifest>(&path, &old).unwrap(), sample());
    }

    /// Every single-bit flip and every truncation of a version file is an
    /// error naming the file, never a different manifest.
    #[test]
    fn every_bit_flip_and_truncation_is_detected() {
        let path = Path::from("tables/1/manifest/00000000000000000001.json");
        let bytes = encode(&sample()).unwrap();
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[i / 8] ^= 1 << (i % 8);
            match decode::<TableManifest>(&path, &b) {
                Err(e) => assert!(e.to_string().contains(path.as_ref()), "{e}"),
                Ok(m) => assert_eq!(m, sample(), "bit {i} flipped read as a different manifest"),
            }
        }
        for len in 0..bytes.len() {
            assert!(
                decode::<TableManifest>(&path, &bytes[..len]).is_err(),
                "truncated to {len}"
            );
        }
    }
}
