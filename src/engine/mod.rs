//! The engine: the write path (validation, committer, flush) and the read
//! path (snapshots, merging sources, visibility) under the public API.

pub(crate) mod commit;
pub(crate) mod compact;
pub(crate) mod flush;
pub(crate) mod latest;
pub(crate) mod merge;
pub(crate) mod overlay;
pub(crate) mod scan;
pub(crate) mod table;
pub(crate) mod validate;
