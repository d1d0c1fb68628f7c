//! Scale-out on Apache Ballista: archived tables read by a cluster.
//!
//! A cluster is one Ballista scheduler and any number of executors
//! ([`run_scheduler`], [`run_executor`]; `cellar scheduler|executor`); a
//! client session ([`cluster_context`]; `cellar sql --cluster URL`) sends
//! its plans to the scheduler, which splits them into stages and has the
//! executors run them. What crosses between the processes is Cellar's part
//! of a plan, encoded by [`CellarLogicalCodec`] (a table: its
//! [`ArchiveSpec`](crate::archive::ArchiveSpec)) and
//! [`CellarPhysicalCodec`] (a table scan: the spec and the scan's pieces,
//! columns, limit, clock and residual filters); everything else goes
//! through Ballista's own codecs.
//!
//! Invariants:
//! - Only archived tables cross: their segments and manifest sit on object
//!   storage and never change, so every process reads the rows this one
//!   would. A live table (its newest rows in this process's memtables and
//!   WAL) is refused when its plan is encoded, with what to do instead:
//!   never shipped, never read stale.
//! - An executor makes exactly the scan the scheduler planned (same
//!   partitions, ranges, columns, TTL clock) or refuses it
//!   (`sql::shipped`); it opens the segments from the object store itself,
//!   with credentials from its own environment.
//! - Each process reads archives through a scratch database of its own
//!   (an empty data directory it deletes on exit); nothing a cluster does
//!   writes to the archive or to the client's database.

mod codec;
mod process;

pub use codec::{CellarLogicalCodec, CellarPhysicalCodec};
pub use process::{cluster_context, run_executor, run_scheduler};
