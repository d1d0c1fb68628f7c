//! The write-ahead log.
//!
//! Files `wal/NNNNNNNNNNNNNNNNNNNN.log`, numbered upwards. A file starts
//! with [`MAGIC`], then holds records
//! `[len: u32 LE][crc32c(payload): u32 LE][crc32c(the first 8 bytes): u32 LE][payload]`.
//! One record is one group commit: every write drained by the committer in
//! one round, so a record is either replayed whole or not at all (a batch
//! is atomic).
//!
//! Recovery reads the files in order. Only the newest file can end in a torn
//! record (a crash mid-append): a header cut short, a payload cut short, or
//! the file's very last record with a bad payload checksum; it is cut off
//! there. Anything else is corruption and opening fails with an error naming
//! the file and offset, rather than silently dropping acknowledged writes.
//! The header's own checksum is what tells the two apart: without it, a
//! flipped bit that made a middle record's length run past the end of the
//! file looked like a torn tail, and every later record was dropped.
//!
//! With `Durability::Sync` a file is preallocated (`fallocate`, 4 MiB
//! at a time ahead of its records) and starts with
//! [`MAGIC_PREALLOCATED`]: records are written in place, so an fsync need
//! not also record the file's new length (1.4x the fsyncs a second on
//! this machine's ext4). Such a file, when
//! it is the newest, may end in zeros after its last record, and a crash
//! may leave one record written in part (any of its pages, the header's
//! included, still zero): the log ends at the first record that is not
//! whole, unless a whole record lies anywhere after it (then the file is
//! damaged, and opening fails). Every write into it is synced before the
//! next starts, so no acknowledged record can lie past a torn one. A
//! sealed file is cut back to its records before the next is created.
//!
//! Files without the magic were written before it (records with the
//! 8-byte header `[len][crc32c(payload)]`) and are read as such.
//!
//! The byte layout is in `docs/format.md`, "WAL".

mod appender;
mod replay;

pub use appender::{OsWalOpener, WalFile, WalOpener};
pub(crate) use appender::{WalWriter, sync_dir};
pub(crate) use replay::{
    Replayed, WalCursor, cut_above, file_numbers, read_file, read_one_record, replay, replay_live,
};

use crate::error::Result;
use crate::model::codec::{self, Decoder};
use crate::model::row::Mutation;

/// The first bytes of every WAL file (its first four, read as a length of
/// the old format, would be over 1 GiB: no old file starts with them).
pub(crate) const MAGIC: &[u8; 8] = b"CWAL\x02\r\n\x1a";

/// The first bytes of a preallocated WAL file (see the module docs):
/// records as in a [`MAGIC`] file, then zeros up to the file's end.
pub(crate) const MAGIC_PREALLOCATED: &[u8; 8] = b"CWAL\x03\r\n\x1a";

/// A record's header: length, payload checksum, header checksum.
pub(crate) const HEADER_LEN: usize = 12;

/// The header of files written before [`MAGIC`]: length, payload checksum.
pub(crate) const OLD_HEADER_LEN: usize = 8;

/// A record's header for a payload.
pub(crate) fn record_header(payload: &[u8]) -> Result<[u8; HEADER_LEN]> {
    let len = u32::try_from(payload.len()).map_err(|_| crate::error::Error::param("group commit larger than 4 GiB"))?;
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&len.to_le_bytes());
    h[4..8].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    let hcrc = crc32c::crc32c(&h[0..8]);
    h[8..12].copy_from_slice(&hcrc.to_le_bytes());
    Ok(h)
}

/// One row write as logged.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WalEntry {
    pub seq: u64,
    pub table_id: u64,
    pub key: Vec<u8>,
    pub mutation: Mutation,
    /// When its group was committed, in microseconds since the epoch
    /// (0: logged before groups carried it).
    pub commit_us: u64,
    /// For a stream that records origin columns: their newest values
    /// before the write (column, version, value).
    pub origin: Option<Vec<(String, i64, crate::model::types::Value)>>,
}

/// Group header versions: 1, entries as they are; 2, each entry followed
/// by its origin (see [`encode_origin`]).
const GROUP_HEADER_VERSION: u64 = 1;
const GROUP_HEADER_WITH_ORIGINS: u64 = 2;

/// Starts a group's payload with its header: a zero byte (no entry
/// starts with one: sequences start at 1), the header's version, and the
/// group's commit time in microseconds. `origins`: every entry is
/// followed by its origin ([`encode_origin`]).
pub(crate) fn encode_group_header(out: &mut Vec<u8>, commit_us: u64, origins: bool) {
    codec::put_varint(out, 0);
    codec::put_varint(
        out,
        if origins {
            GROUP_HEADER_WITH_ORIGINS
        } else {
            GROUP_HEADER_VERSION
        },
    );
    codec::put_varint(out, commit_us);
}

/// An entry's origin: `varint(n)` then `n x (bytes(column) zigzag(version) value)`.
pub(crate) fn encode_origin(out: &mut Vec<u8>, origin: &[(String, i64, crate::model::types::Value)]) {
    codec::put_varint(out, origin.len() as u64);
    for (c, v, x) in origin {
        codec::put_bytes(out, c.as_bytes());
        codec::put_i64(out, *v);
        codec::put_value(out, x);
    }
}

pub(crate) fn encode_entry(out: &mut Vec<u8>, seq: u64, table_id: u64, key: &[u8], m: &Mutation) {
    codec::put_varint(out, seq);
    codec::put_varint(out, table_id);
    codec::put_bytes(out, key);
    codec::put_mutation(out, m);
}

pub(crate) fn decode_payload(payload: &[u8]) -> Result<Vec<WalEntry>> {
    let mut r = Decoder::new(payload, "WAL record");
    let mut out = Vec::new();
    let mut commit_us = 0;
    let mut origins = false;
    if payload.first() == Some(&0) {
        r.varint()?;
        let version = r.varint()?;
        origins = version == GROUP_HEADER_WITH_ORIGINS;
        if version != GROUP_HEADER_VERSION && !origins {
            return Err(crate::error::Error::corruption(format!(
                "WAL record has a group header of version {version}; this version of Cellar reads versions \
                 {GROUP_HEADER_VERSION} and {GROUP_HEADER_WITH_ORIGINS}"
            )));
        }
        commit_us = r.varint()?;
    }
    while !r.is_empty() {
        let seq = r.varint()?;
        let table_id = r.varint()?;
        let key = r.bytes()?.to_vec();
        let mutation = r.mutation()?;
        let origin = if origins {
            let n = r.varint()?;
            let mut o = Vec::new();
            for _ in 0..n {
                let c = r.string()?;
                let v = r.i64()?;
                o.push((c, v, r.value()?));
            }
            Some(o)
        } else {
            None
        };
        out.push(WalEntry {
            seq,
            table_id,
            key,
            mutation,
            commit_us,
            origin,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A group with a header gives every entry its commit time; a payload
    /// written before headers decodes as before, with time 0; a header of
    /// an unknown version is refused rather than misread.
    #[test]
    fn group_headers_carry_the_commit_time() {
        let mut p = Vec::new();
        encode_group_header(&mut p, 1_700_000_000_123_456, false);
        encode_entry(&mut p, 7, 3, b"k1", &Mutation::Delete);
        encode_entry(&mut p, 8, 4, b"k2", &Mutation::Delete);
        let e = decode_payload(&p).unwrap();
        assert_eq!(
            e.iter().map(|e| (e.seq, e.commit_us)).collect::<Vec<_>>(),
            [(7, 1_700_000_000_123_456), (8, 1_700_000_000_123_456)]
        );
        let mut old = Vec::new();
        encode_entry(&mut old, 9, 3, b"k", &Mutation::Delete);
        assert_eq!(decode_payload(&old).unwrap()[0].commit_us, 0);
        let mut future = Vec::new();
        codec::put_varint(&mut future, 0);
        codec::put_varint(&mut future, 2);
        codec::put_varint(&mut future, 5);
        codec::put_varint(&mut future, 0);
        let _ = future;
        let mut future = Vec::new();
        codec::put_varint(&mut future, 0);
        codec::put_varint(&mut future, 3);
        codec::put_varint(&mut future, 5);
        assert!(decode_payload(&future).unwrap_err().message().contains("version 3"));
        // Version 2: each entry with its origin.
        let mut p = Vec::new();
        encode_group_header(&mut p, 9, true);
        encode_entry(&mut p, 1, 3, b"k", &Mutation::Delete);
        encode_origin(&mut p, &[("a".into(), 5, crate::model::types::Value::Integer(7))]);
        encode_entry(&mut p, 2, 3, b"k", &Mutation::Delete);
        encode_origin(&mut p, &[]);
        let e = decode_payload(&p).unwrap();
        assert_eq!(
            e[0].origin.as_deref(),
            Some(&[("a".to_string(), 5, crate::model::types::Value::Integer(7))][..])
        );
        assert_eq!(e[1].origin.as_deref(), Some(&[][..]));
    }
}
