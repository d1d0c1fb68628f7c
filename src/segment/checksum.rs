//! Checksums of segment files.
//!
//! Parquet 59's writer leaves the optional page CRC out, so a flipped bit in
//! a compressed page could decode into different values. Cellar checksums
//! each segment file itself, in two parts:
//!
//! - **Data** (`[0, data_bytes)`: every row group's pages, dictionaries and
//!   bloom filters): one CRC-32C per [`BLOCK_BYTES`] block, stored in the
//!   file's Parquet key-value metadata under [`KEY`].
//! - **Tail** (`[data_bytes, size)`: page index and footer, which holds the
//!   block table): one CRC-32C, stored in the manifest
//!   ([`SegmentMeta::checksum`](super::SegmentMeta)), itself checksummed.
//!
//! Invariants:
//! - The footer is parsed only after the tail's checksum matched.
//! - Segment bytes reach a decoder only after every block they touch
//!   matched: blocks of a mapped file once per open segment (the verified
//!   bits live as long as the [`BlockChecks`]); bytes read through the
//!   object store on every read (they are a fresh copy each time).
//! - A mismatch is a corruption error naming the file and the byte range.
//!
//! Fixed-size blocks rather than per-page sums: the writer sees only a
//! byte stream, and a point get's 2 KiB page then costs one or two 4 KiB
//! blocks (a few hundred nanoseconds) the first time it is read.

use std::io::Write;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Bytes per checksummed block of a segment's data region.
pub(crate) const BLOCK_BYTES: u64 = 4096;

/// The Parquet key-value metadata entry holding the block table:
/// `"<block bytes>:<base64 of little-endian CRC-32C values>"`.
pub(crate) const KEY: &str = "cellar.block_crc32c";

/// What the manifest keeps of a segment's checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileChecksum {
    /// Where the data region ends and the tail (page index, footer) starts.
    pub data_bytes: u64,
    /// CRC-32C of the tail.
    pub tail_crc32c: u32,
}

/// A [`Write`] that checksums what passes through it: blocks until
/// [`ChecksumWriter::end_data`], then the tail as one sum.
pub(crate) struct ChecksumWriter<W> {
    inner: W,
    pos: u64,
    /// The running sum of the current block, or of the tail once `tail`.
    sum: u32,
    blocks: Vec<u32>,
    /// Where the data ended, once it has.
    data_bytes: Option<u64>,
}

impl<W: Write> ChecksumWriter<W> {
    pub fn new(inner: W) -> Self {
        ChecksumWriter {
            inner,
            pos: 0,
            sum: 0,
            blocks: Vec::new(),
            data_bytes: None,
        }
    }

    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    /// Ends the data region at the bytes written so far (the caller has
    /// flushed every buffer in front of this writer) and returns the block
    /// table's metadata value.
    pub fn end_data(&mut self) -> String {
        if !self.pos.is_multiple_of(BLOCK_BYTES) {
            self.blocks.push(self.sum);
        }
        self.data_bytes = Some(self.pos);
        self.sum = 0;
        let raw: Vec<u8> = self.blocks.iter().flat_map(|c| c.to_le_bytes()).collect();
        format!(
            "{BLOCK_BYTES}:{}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }

    /// The sink and the checksum of the file (`None` without `end_data`).
    pub fn finish(self) -> (W, Option<FileChecksum>) {
        let sum = self.data_bytes.map(|data_bytes| FileChecksum {
            data_bytes,
            tail_crc32c: self.sum,
        });
        (self.inner, sum)
    }

    fn absorb(&mut self, mut buf: &[u8]) {
        if self.data_bytes.is_some() {
            self.sum = crc32c::crc32c_append(self.sum, buf);
            self.pos += buf.len() as u64;
            return;
        }
        while !buf.is_empty() {
            let room = (BLOCK_BYTES - self.pos % BLOCK_BYTES) as usize;
            let (now, rest) = buf.split_at(room.min(buf.len()));
            self.sum = crc32c::crc32c_append(self.sum, now);
            self.pos += now.len() as u64;
            if self.pos.is_multiple_of(BLOCK_BYTES) {
                self.blocks.push(self.sum);
                self.sum = 0;
            }
            buf = rest;
        }
    }
}

impl<W: Write> Write for ChecksumWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.absorb(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Checks a file's tail against the manifest's sum; `tail` holds the bytes
/// from `sum.data_bytes` to the end.
pub(crate) fn check_tail(path: &str, sum: &FileChecksum, tail: &[u8]) -> Result<()> {
    let actual = crc32c::crc32c(tail);
    if actual != sum.tail_crc32c {
        let end = sum.data_bytes + tail.len() as u64;
        return Err(Error::corruption(format!(
            "segment {path} is damaged: checksum mismatch in its footer and page index (bytes {}..{end}; stored {:#010x}, computed {actual:#010x})",
            sum.data_bytes, sum.tail_crc32c
        )));
    }
    Ok(())
}

/// A segment's block table, with the blocks of its mapped file already
/// verified.
pub(crate) struct BlockChecks {
    path: String,
    data_bytes: u64,
    crcs: Vec<u32>,
    verified: Box<[AtomicU64]>,
}

impl BlockChecks {
    /// The table from the footer's metadata value (see [`KEY`]).
    pub fn parse(path: &str, data_bytes: u64, value: &str) -> Result<Self> {
        let bad = |what: &str| Error::corruption(format!("segment {path} is damaged: its block checksum table {what}"));
        let (block, table) = value.split_once(':').ok_or_else(|| bad("has no block size"))?;
        if block.parse::<u64>().ok() != Some(BLOCK_BYTES) {
            return Err(bad(&format!(
                "uses blocks of {block} bytes; this version reads {BLOCK_BYTES}"
            )));
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(table)
            .map_err(|_| bad("is not valid base64"))?;
        let crcs: Vec<u32> = raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if raw.len() % 4 != 0 || crcs.len() as u64 != data_bytes.div_ceil(BLOCK_BYTES) {
            return Err(bad(&format!("holds {} bytes for {data_bytes} data bytes", raw.len())));
        }
        let words = crcs.len().div_ceil(64);
        Ok(BlockChecks {
            path: path.to_string(),
            data_bytes,
            crcs,
            verified: (0..words).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// The blocks `range` touches in the data region (none in the tail).
    fn blocks(&self, range: &Range<u64>) -> Range<usize> {
        let end = range.end.min(self.data_bytes);
        if range.start >= end {
            return 0..0;
        }
        (range.start / BLOCK_BYTES) as usize..end.div_ceil(BLOCK_BYTES) as usize
    }

    fn block_bytes(&self, b: usize) -> Range<u64> {
        b as u64 * BLOCK_BYTES..((b as u64 + 1) * BLOCK_BYTES).min(self.data_bytes)
    }

    fn check_block(&self, b: usize, bytes: &[u8]) -> Result<()> {
        let actual = crc32c::crc32c(bytes);
        if actual != self.crcs[b] {
            let r = self.block_bytes(b);
            return Err(Error::corruption(format!(
                "segment {} is damaged: checksum mismatch in bytes {}..{} (block {b}; stored {:#010x}, computed {actual:#010x})",
                self.path, r.start, r.end, self.crcs[b]
            )));
        }
        Ok(())
    }

    /// Checks the blocks under `range` of the whole mapped `file`, each
    /// once for the life of this table.
    pub fn check_mapped(&self, file: &[u8], range: Range<u64>) -> Result<()> {
        for b in self.blocks(&range) {
            let (word, bit) = (&self.verified[b / 64], 1u64 << (b % 64));
            if word.load(Ordering::Relaxed) & bit != 0 {
                continue;
            }
            let r = self.block_bytes(b);
            let bytes = file.get(r.start as usize..r.end as usize).ok_or_else(|| {
                Error::corruption(format!(
                    "segment {} is damaged: it ends at byte {} inside its data",
                    self.path,
                    file.len()
                ))
            })?;
            self.check_block(b, bytes)?;
            word.fetch_or(bit, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The range to fetch so that every block `range` touches is whole.
    pub fn whole_blocks(&self, range: &Range<u64>) -> Range<u64> {
        let blocks = self.blocks(range);
        if blocks.is_empty() {
            return range.clone();
        }
        let start = self.block_bytes(blocks.start).start.min(range.start);
        let end = self.block_bytes(blocks.end - 1).end.max(range.end);
        start..end
    }

    /// Checks bytes fetched for `fetched` (a [`Self::whole_blocks`] range).
    pub fn check_fetched(&self, fetched: &Range<u64>, bytes: &[u8]) -> Result<()> {
        for b in self.blocks(fetched) {
            let r = self.block_bytes(b);
            let (s, e) = ((r.start - fetched.start) as usize, (r.end - fetched.start) as usize);
            let bytes = bytes.get(s..e).ok_or_else(|| {
                Error::corruption(format!(
                    "segment {} is damaged: a read of bytes {}..{} came back short",
                    self.path, fetched.start, fetched.end
                ))
            })?;
            self.check_block(b, bytes)?;
        }
        Ok(())
    }

    /// Checks every block of the data region of `file` (the whole file),
    /// returning each damaged block's error ([`cellar check`]).
    pub fn check_all(&self, file: &[u8]) -> Vec<Error> {
        (0..self.crcs.len())
            .filter_map(|b| {
                let r = self.block_bytes(b);
                match file.get(r.start as usize..r.end as usize) {
                    Some(bytes) => self.check_block(b, bytes).err(),
                    None => Some(Error::corruption(format!(
                        "segment {} is damaged: it ends at byte {}, inside its data (which ends at {})",
                        self.path,
                        file.len(),
                        self.data_bytes
                    ))),
                }
            })
            .collect()
    }
}

/// Verifies a whole segment file (`bytes`, written with checksums `sum`):
/// the tail, then every data block; a file without checksums is decoded
/// whole instead. Returns what is wrong (empty: intact), and whether
/// checksums covered the file.
pub(crate) fn verify_file(path: &str, sum: Option<&FileChecksum>, bytes: bytes::Bytes) -> (Vec<String>, bool) {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::file::metadata::ParquetMetaDataReader;

    let Some(sum) = sum else {
        let decoded = super::no_panic(path, || {
            ParquetRecordBatchReaderBuilder::try_new(bytes)
                .and_then(|b| b.build())
                .and_then(|mut reader| reader.try_for_each(|b| b.map(|_| ()).map_err(Into::into)))
                .map_err(|e| Error::corruption(format!("segment {path} does not decode: {e}")))
        });
        return (
            decoded.err().map(|e| e.message().to_string()).into_iter().collect(),
            false,
        );
    };
    let Some(tail) = bytes.get(sum.data_bytes as usize..) else {
        return (
            vec![format!(
                "segment {path} is damaged: {} bytes long, its data alone should be {}",
                bytes.len(),
                sum.data_bytes
            )],
            true,
        );
    };
    if let Err(e) = check_tail(path, sum, tail) {
        return (vec![e.message().to_string()], true);
    }
    let checks = super::no_panic(path, || {
        ParquetMetaDataReader::new()
            .parse_and_finish(&bytes)
            .map_err(|e| Error::corruption(format!("segment {path}: its footer does not parse: {e}")))
    })
    .and_then(|md| {
        let table = md
            .file_metadata()
            .key_value_metadata()
            .and_then(|kv| kv.iter().find(|e| e.key == KEY))
            .and_then(|e| e.value.clone())
            .ok_or_else(|| Error::corruption(format!("segment {path} has no block checksum table in its footer")))?;
        BlockChecks::parse(path, sum.data_bytes, &table)
    });
    match checks {
        Ok(c) => (
            c.check_all(&bytes).iter().map(|e| e.message().to_string()).collect(),
            true,
        ),
        Err(e) => (vec![e.message().to_string()], true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(data: &[u8], tail: &[u8], writes: usize) -> (Vec<u8>, String, FileChecksum) {
        let mut w = ChecksumWriter::new(Vec::new());
        for chunk in data.chunks(data.len().div_ceil(writes).max(1)) {
            w.write_all(chunk).unwrap();
        }
        let table = w.end_data();
        w.write_all(tail).unwrap();
        let (bytes, sum) = w.finish();
        (bytes, table, sum.unwrap())
    }

    #[test]
    fn blocks_and_tail_check_out_whatever_the_write_sizes() {
        let data: Vec<u8> = (0..3 * BLOCK_BYTES as usize + 100).map(|i| (i * 7) as u8).collect();
        for writes in [1, 3, 1000] {
            let (file, table, sum) = written(&data, b"footer", writes);
            assert_eq!(sum.data_bytes, data.len() as u64);
            let checks = BlockChecks::parse("s", sum.data_bytes, &table).unwrap();
            assert!(checks.check_all(&file).is_empty());
            check_tail("s", &sum, &file[sum.data_bytes as usize..]).unwrap();
            checks.check_mapped(&file, 0..file.len() as u64).unwrap();
            let r = checks.whole_blocks(&(5000..5001));
            assert_eq!(r, BLOCK_BYTES..2 * BLOCK_BYTES);
            checks
                .check_fetched(&r, &file[r.start as usize..r.end as usize])
                .unwrap();
        }
    }

    #[test]
    fn a_flipped_bit_anywhere_is_found_with_its_offset() {
        let data: Vec<u8> = (0..2 * BLOCK_BYTES as usize + 10).map(|i| (i * 13) as u8).collect();
        let (file, table, sum) = written(&data, b"the footer", 5);
        for byte in [0, 4095, 4096, 8200, data.len() - 1] {
            let mut bad = file.clone();
            bad[byte] ^= 0x10;
            let checks = BlockChecks::parse("tables/1/segments/7.parquet", sum.data_bytes, &table).unwrap();
            let e = checks
                .check_mapped(&bad, byte as u64..byte as u64 + 1)
                .unwrap_err()
                .to_string();
            let block = byte as u64 / BLOCK_BYTES;
            assert!(e.contains("tables/1/segments/7.parquet"), "{e}");
            assert!(e.contains(&format!("bytes {}..", block * BLOCK_BYTES)), "{e}");
            assert_eq!(checks.check_all(&bad).len(), 1);
        }
        let mut bad = file.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(check_tail("s", &sum, &bad[sum.data_bytes as usize..]).is_err());
    }

    #[test]
    fn a_damaged_table_is_refused() {
        let (_, table, sum) = written(&[1; 5000], b"f", 1);
        assert!(BlockChecks::parse("s", sum.data_bytes + BLOCK_BYTES, &table).is_err());
        assert!(BlockChecks::parse("s", sum.data_bytes, &table.replace("4096:", "512:")).is_err());
        assert!(BlockChecks::parse("s", sum.data_bytes, "4096:!!").is_err());
    }
}
