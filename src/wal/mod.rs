//! The write-ahead log.
//!
//! Files `wal/NNNNNNNNNNNNNNNNNNNN.log`, numbered upwards, each a sequence of
//! records `[len: u32 LE][crc32c(payload): u32 LE][payload]`. One record is
//! one group commit: every write drained by the committer in one round, so a
//! record is either replayed whole or not at all (a batch is atomic).
//!
//! Recovery reads the files in order. Only the newest file can end in a torn
//! record (a crash mid-append): it is cut off there. A bad record anywhere
//! else is corruption and opening fails with an error naming the file and
//! offset, rather than silently dropping acknowledged writes.

mod reader;
mod writer;

pub(crate) use reader::replay;
pub use writer::{OsWalOpener, WalFile, WalOpener};
pub(crate) use writer::{WalWriter, sync_dir};

use crate::codec::{self, Reader};
use crate::error::Result;
use crate::row::Mutation;

pub(crate) const HEADER_LEN: usize = 8;

/// One row write as logged.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WalEntry {
    pub seq: u64,
    pub table_id: u64,
    pub key: Vec<u8>,
    pub mutation: Mutation,
}

pub(crate) fn encode_entry(out: &mut Vec<u8>, seq: u64, table_id: u64, key: &[u8], m: &Mutation) {
    codec::put_varint(out, seq);
    codec::put_varint(out, table_id);
    codec::put_bytes(out, key);
    codec::put_mutation(out, m);
}

pub(crate) fn decode_payload(payload: &[u8]) -> Result<Vec<WalEntry>> {
    let mut r = Reader::new(payload, "WAL record");
    let mut out = Vec::new();
    while !r.is_empty() {
        let seq = r.varint()?;
        let table_id = r.varint()?;
        let key = r.bytes()?.to_vec();
        let mutation = r.mutation()?;
        out.push(WalEntry {
            seq,
            table_id,
            key,
            mutation,
        });
    }
    Ok(out)
}

pub(crate) fn file_name(number: u64) -> String {
    format!("{number:020}.log")
}

/// When an acknowledged write is on stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every group commit is fsynced before any of its writes is
    /// acknowledged: an acknowledged write survives a process crash and a
    /// power loss. The default.
    #[default]
    Sync,
    /// Writes are handed to the OS before they are acknowledged and fsynced
    /// at most this many milliseconds later: an acknowledged write survives a
    /// process crash; a power loss may lose the last interval.
    IntervalMs(u64),
    /// Writes are handed to the OS before they are acknowledged and never
    /// fsynced by Cellar: survives a process crash, not a power loss.
    None,
}
