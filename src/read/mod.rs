//! The read path: every read of a table's snapshot, and the one interface
//! the SQL layer (and any later reader) scans through.
//!
//! - point reads ([`get`]): the merged state of one key;
//! - range scans ([`MergeScan`]): a k-way merge of memtables and segments,
//!   row by row, for GetRange and the versions table function;
//! - latest-version scans ([`LatestScan`]): Arrow batches of the newest
//!   visible version of each row, planned by source overlap ([`plan`]),
//!   read column by column from a lone segment with memtable keys spliced
//!   in ([`splice`], [`overlay`]), or merged.
//!
//! Invariants: a read sees exactly the writes its snapshot's sequence
//! covers; sources are laid oldest first, so the newest write wins; the
//! columnar and the row-by-row paths apply the same TTL, version and type
//! rules, and give the same rows. See `docs/architecture.md`, "The read
//! path".
mod arrow;
mod context;
mod get;
mod latest;
mod locate;
mod merge_scan;
mod overlay;
mod overlay_rows;
mod placement;
mod plan;
mod runs;
mod splice;

pub(crate) use self::arrow::{BATCH_ROWS, ColBuilder, OutCol, arrow_type, pk_value_type, true_bits};
pub(crate) use self::context::ScanShared;
pub(crate) use self::latest::{LatestScan, ScanOutput};
pub(crate) use self::merge_scan::MergeScan;
pub(crate) use self::overlay::overlay_bytes;
pub(crate) use self::overlay::warm as warm_overlays;
pub(crate) use self::plan::{RowFilter, RowGroupFilter, ScanCounters, ScanRange, SegmentStats, intersect_ranges};
pub(crate) use crate::state::Snapshot;
