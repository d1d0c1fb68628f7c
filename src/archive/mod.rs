//! Archives: a table's segments copied byte for byte to an object store,
//! described by a marker object, and read there in place.
//!
//! Layout at an archive location (see `docs/format.md`, "Archives"):
//! ```text
//! cellar-table.json          the marker: table, schema, options, state, manifest
//! segments/NNNN.parquet      the table's segments, as they were on disk
//! ```
//!
//! Invariants:
//! - A location holds the archive of one table: its marker names the table
//!   (name and id), and an archive refuses a location whose marker names
//!   another table, or that holds anything else.
//! - The marker is written first (state `uploading`) and last (state
//!   `complete`, with the manifest), after every segment object was read
//!   back and matched the local file's size and CRC-32C. Only then does the
//!   catalog record the archive; only after that is the local copy freed.
//! - Nothing here deletes a local file or changes the catalog: that is the
//!   caller's (`db::archive`), which decides when it is safe.

mod transfer;

pub(crate) use transfer::{delete_objects, download, get_marker, local_crc, put_marker, stored_crc, upload};

use serde::{Deserialize, Serialize};

use crate::manifest::TableManifest;
use crate::model::schema::{TableOptions, TableSchema};
use crate::remote::RemoteLocation;
use crate::segment::SegmentMeta;

/// The marker object's name at an archive location.
pub(crate) const MARKER: &str = "cellar-table.json";

/// The marker's `format` field.
pub(crate) const MARKER_FORMAT: &str = "cellar-archive-v1";

/// What the catalog records of an archived table: where it is, and the
/// manifest of its segments there (paths relative to the location).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ArchiveRecord {
    pub location: RemoteLocation,
    pub manifest: TableManifest,
}

/// Whether the marker's archive is whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MarkerState {
    /// Segments are being uploaded; the archive is not usable yet.
    Uploading,
    /// Every segment is there and verified; `manifest` lists them.
    Complete,
}

/// The marker object: makes an archive self-describing.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Marker {
    pub format: String,
    pub state: MarkerState,
    pub table: String,
    pub table_id: u64,
    pub schema: TableSchema,
    pub options: TableOptions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<TableManifest>,
}

/// Everything a process needs to read an archived table on its own,
/// without the catalog of the database that archived it: what a cluster's
/// scheduler and executors are sent (`cluster`). The segments are
/// immutable, so two processes reading one spec read the same rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ArchiveSpec {
    pub name: String,
    pub schema: TableSchema,
    pub options: TableOptions,
    pub record: ArchiveRecord,
}

/// How far an archive or a restore has got, for a progress bar.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransferProgress {
    /// Segment files copied and verified.
    pub files_done: usize,
    /// Segment files to copy.
    pub files: usize,
    /// Bytes copied so far (including files found already copied).
    pub bytes_done: u64,
    /// Bytes to copy.
    pub bytes: u64,
}

/// What an archive or a restore did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransferReport {
    /// The archive location (URL).
    pub location: String,
    /// Segment files the table has.
    pub files: usize,
    /// Their total size in bytes.
    pub bytes: u64,
    /// Files an earlier, interrupted run had already copied (found
    /// identical, so not copied again).
    pub reused_files: usize,
    /// True when there was nothing to do (already archived there).
    pub already_done: bool,
}

/// The object name of a segment at an archive location.
pub(crate) fn archived_path(meta: &SegmentMeta) -> String {
    format!("segments/{}", file_name(&meta.path))
}

/// The path of a segment in a table's local directory.
pub(crate) fn local_path(table_id: u64, meta: &SegmentMeta) -> String {
    format!("tables/{table_id}/segments/{}", file_name(&meta.path))
}

fn file_name(path: &str) -> &str {
    path.rsplit_once('/').map_or(path, |(_, name)| name)
}

/// `manifest` with every segment path changed by `to`.
pub(crate) fn with_paths(manifest: &TableManifest, to: impl Fn(&SegmentMeta) -> String) -> TableManifest {
    let mut m = manifest.clone();
    for s in &mut m.segments {
        s.path = to(s);
    }
    m
}
