//! The write path above the storage layer: requests are validated into
//! mutations ([`validate`]) and handed to the committer ([`committer`]),
//! the one thread that numbers, logs and applies every write.
//!
//! Invariants: sequence numbers follow the order writes reach the
//! committer; a write is acknowledged only once its WAL record is durable
//! (as the durability setting says) and it is visible to reads; a group of
//! writes is one WAL record, visible all at once. See
//! `docs/architecture.md`, "The write path".

pub(crate) mod checked;
pub(crate) mod committer;
pub(crate) mod condition;
pub(crate) mod index;
pub(crate) mod locks;
mod recent;
mod stream_append;
pub(crate) mod validate;
