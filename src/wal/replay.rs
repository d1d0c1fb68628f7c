//! Recovery: reading every WAL file back, tolerating a torn tail.
//!
//! Invariant: a record is replayed whole or not at all; only the newest
//! file's torn tail is dropped, any other damage fails with the file and
//! offset.

use std::path::Path;

use super::{HEADER_LEN, MAGIC, MAGIC_PREALLOCATED, OLD_HEADER_LEN, WalEntry, decode_payload, file_name};
use crate::error::{Error, Result};

/// What recovery found.
#[derive(Default)]
pub(crate) struct Replayed {
    /// Entries in log order.
    pub entries: Vec<WalEntry>,
    /// Files found: (number, largest sequence in them).
    pub files: Vec<(u64, u64)>,
    /// The newest commit time in each of `files`, in microseconds.
    pub times: Vec<u64>,
    /// Bytes cut off the newest file's torn tail.
    pub torn_bytes: u64,
}

/// Reads every WAL file in `dir` in order. A torn record at the end of the
/// newest file is cut off (the file is truncated there); a bad record
/// anywhere else fails with a corruption error.
pub(crate) fn replay(dir: &Path) -> Result<Replayed> {
    let numbers = file_numbers(dir)?;
    let mut out = Replayed::default();
    for (i, &number) in numbers.iter().enumerate() {
        let is_last = i + 1 == numbers.len();
        let path = dir.join(file_name(number));
        let data = std::fs::read(&path).map_err(|e| Error::io(format!("read WAL file {}", path.display()), e))?;
        let read = read_file(&path, &data, is_last)?;
        if let Some(pos) = read.torn_at {
            // Zeros after the log (a preallocated file) are not counted.
            out.torn_bytes = data
                .iter()
                .rposition(|&b| b != 0)
                .map_or(0, |last| (last + 1).saturating_sub(pos)) as u64;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| Error::io(format!("open WAL file {}", path.display()), e))?;
            f.set_len(pos as u64)
                .and_then(|_| f.sync_all())
                .map_err(|e| Error::io(format!("truncate torn tail of WAL file {}", path.display()), e))?;
        }
        out.push(number, read);
    }
    Ok(out)
}

impl Replayed {
    /// Adds file `number`'s records.
    fn push(&mut self, number: u64, read: FileRead) {
        self.times
            .push(read.entries.iter().map(|e| e.commit_us).max().unwrap_or(0));
        self.entries.extend(read.entries);
        self.files.push((number, read.max_seq));
    }
}

/// Where a live reader of the WAL stopped: a file, and the offset just
/// past its last whole record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WalCursor {
    pub file: u64,
    pub offset: usize,
}

/// Reads the WAL files in `dir` in order beside a process that may be
/// writing them (a read-only open), changing nothing: from the start, or
/// from `from` (where an earlier call stopped) on. A file deleted after
/// the listing is skipped (its writes were flushed first, and the caller
/// reads the manifests after the log), and the newest file ends at its
/// first record that is not whole (the writer may be appending it, and a
/// plain read is not atomic against that append). `torn_bytes` is 0.
/// Returns where it stopped, or `None` when `from`'s file is gone (its
/// writes were flushed: the caller loads the directory anew).
pub(crate) fn replay_live(dir: &Path, from: Option<WalCursor>) -> Result<Option<(Replayed, Option<WalCursor>)>> {
    let numbers = file_numbers(dir)?;
    if let Some(c) = from
        && !numbers.contains(&c.file)
    {
        return Ok(None);
    }
    let mut out = Replayed::default();
    let mut cursor = from;
    for (i, &number) in numbers.iter().enumerate() {
        let start = match from {
            Some(c) if number < c.file => continue,
            Some(c) if number == c.file => c.offset,
            _ => 0,
        };
        let is_last = i + 1 == numbers.len();
        let path = dir.join(file_name(number));
        let data = match std::fs::read(&path) {
            Ok(data) => data,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && start == 0 => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(format!("read WAL file {}", path.display()), e)),
        };
        let read = read_records(&path, &data, start, is_last, is_last)?;
        cursor = Some(WalCursor {
            file: number,
            offset: read.end,
        });
        out.push(number, read);
    }
    Ok(Some((out, cursor)))
}

/// One WAL file's records.
pub(crate) struct FileRead {
    pub entries: Vec<WalEntry>,
    pub max_seq: u64,
    /// Where a torn tail starts (only in the newest file).
    pub torn_at: Option<usize>,
    /// Just past the last whole record.
    pub end: usize,
}

/// Reads the records of one WAL file (`data`, read from `path`); a torn
/// tail is accepted only when `is_last`. Changes nothing on disk.
pub(crate) fn read_file(path: &Path, data: &[u8], is_last: bool) -> Result<FileRead> {
    read_records(path, data, 0, is_last, false)
}

/// [`read_file`] from offset `from` (0, or the end of a record read
/// before); `live`: the file may be being appended, so it ends at the
/// first record that is not whole, whatever follows it.
fn read_records(path: &Path, data: &[u8], from: usize, is_last: bool, live: bool) -> Result<FileRead> {
    let mut out = FileRead {
        entries: Vec::new(),
        max_seq: 0,
        torn_at: None,
        end: 0,
    };
    let (mut pos, format) = match file_format(data) {
        // A crash right after the file was created: part of the magic,
        // or zeros (a preallocated file), cut off like a torn record (an
        // empty file reads as no records).
        _ if is_last && !data.is_empty() && created_only(data) => {
            out.torn_at = Some(0);
            return Ok(out);
        }
        Some(f) => f,
        None => {
            return Err(Error::corruption(format!(
                "WAL file {} is damaged: it is {} bytes long and does not start with a WAL file's first bytes",
                path.display(),
                data.len()
            )));
        }
    };
    pos = pos.max(from);
    while pos < data.len() {
        match parse_record(&data[pos..], format) {
            Ok((payload, len)) => {
                let entries = decode_payload(payload).map_err(|e| {
                    Error::corruption(format!("WAL file {} at offset {pos}: {}", path.display(), e.message()))
                })?;
                out.max_seq = entries.iter().map(|e| e.seq).fold(out.max_seq, u64::max);
                out.entries.extend(entries);
                pos += len;
            }
            Err(RecordError::Torn) if is_last => {
                out.torn_at = Some(pos);
                break;
            }
            Err(_) if live => {
                out.torn_at = Some(pos);
                break;
            }
            // The end of a preallocated file's records: zeros, or the one
            // record a crash cut short (see `wal`'s module docs), with no
            // whole record after it.
            Err(e)
                if is_last
                    && matches!(format, RecordFormat::Preallocated)
                    && (matches!(e, RecordError::Checksum) || header_unwritten(data, pos))
                    && !whole_record_after(data, pos + 1) =>
            {
                out.torn_at = Some(pos);
                break;
            }
            Err(e) => {
                return Err(Error::corruption(format!(
                    "WAL file {} is corrupt at offset {pos} ({}); it is not the newest file's tail, so acknowledged writes \
                     would be lost by skipping it. Restore the file or move it away to open the database without it",
                    path.display(),
                    match e {
                        RecordError::Torn => "record cut short",
                        RecordError::Checksum => "checksum mismatch",
                        RecordError::Header => "record header checksum mismatch",
                    }
                )));
            }
        }
    }
    out.end = pos;
    Ok(out)
}

/// The entries of the one record at `offset` of a file's `data` (0: its
/// first) and where the next record starts; `None` past the last. For
/// data known to hold whole records only (a stream log up to its synced
/// end): anything else is damage.
pub(crate) fn read_one_record(path: &Path, data: &[u8], offset: usize) -> Result<Option<(Vec<WalEntry>, usize)>> {
    let Some((start, format)) = file_format(data) else {
        return Err(Error::corruption(format!(
            "log file {} does not start with a log file's first bytes",
            path.display()
        )));
    };
    let pos = offset.max(start);
    if pos >= data.len() || matches!(format, RecordFormat::Preallocated) && header_unwritten(data, pos) {
        return Ok(None);
    }
    match parse_record(&data[pos..], format) {
        Ok((payload, len)) => {
            let entries = decode_payload(payload).map_err(|e| {
                Error::corruption(format!("log file {} at offset {pos}: {}", path.display(), e.message()))
            })?;
            Ok(Some((entries, pos + len)))
        }
        Err(_) => Err(Error::corruption(format!(
            "log file {} is damaged at offset {pos}: a record there does not read whole",
            path.display()
        ))),
    }
}

/// Cuts from the log files in `dir` (read back whole, see [`replay`])
/// every record whose writes are above sequence `keep`, oldest file
/// first: the first such record and everything after it go. The files
/// stay, cut to their first bytes if need be, so that their numbers are
/// not given again to files with other records. Returns whether
/// anything was cut.
pub(crate) fn cut_above(dir: &Path, keep: u64) -> Result<bool> {
    let mut cut = false;
    for number in file_numbers(dir)? {
        let path = dir.join(file_name(number));
        let data = std::fs::read(&path).map_err(|e| Error::io(format!("read log file {}", path.display()), e))?;
        let Some((start, _)) = file_format(&data) else {
            continue;
        };
        let mut at = if cut { Some(start) } else { None };
        let mut pos = start;
        while at.is_none() {
            let Some((entries, next)) = read_one_record(&path, &data, pos)? else {
                break;
            };
            if entries.first().is_some_and(|e| e.seq > keep) {
                at = Some(pos);
            }
            pos = next;
        }
        let Some(at) = at.filter(|at| *at < data.len()) else {
            continue;
        };
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("open log file {}", path.display()), e))?;
        f.set_len(at as u64)
            .and_then(|_| f.sync_all())
            .map_err(|e| Error::io(format!("cut log file {}", path.display()), e))?;
        cut = true;
    }
    Ok(cut)
}

/// The numbers of the WAL files in `dir`, ascending.
pub(crate) fn file_numbers(dir: &Path) -> Result<Vec<u64>> {
    let mut numbers = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(format!("list WAL directory {}", dir.display()), e))?;
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(format!("list WAL directory {}", dir.display()), e))?;
        let name = ent.file_name();
        let name = name.to_string_lossy();
        if let Some(n) = name.strip_suffix(".log").and_then(|s| s.parse::<u64>().ok()) {
            numbers.push(n);
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}

enum RecordError {
    /// The record runs past the end of the data: a crash mid-append.
    Torn,
    /// Complete, but its checksum is wrong.
    Checksum,
    /// The header's own checksum is wrong: its length cannot be trusted.
    Header,
}

#[derive(Clone, Copy)]
enum RecordFormat {
    /// Files with [`MAGIC`]: 12-byte record headers.
    Current,
    /// Files with [`MAGIC_PREALLOCATED`]: as `Current`, then zeros.
    Preallocated,
    /// Files written before it: 8-byte headers, no header checksum.
    Old,
}

/// Where a file's first record starts, and the format of its records;
/// `None` for a file that is neither: at most a prefix of the magic (a
/// crash right after creating it), or damaged in its first bytes. An old
/// file is one whose first record reads whole with the old header, so a
/// damaged magic is not mistaken for an old file whose "torn" first
/// record would be cut off with every record after it.
fn file_format(data: &[u8]) -> Option<(usize, RecordFormat)> {
    if data.starts_with(MAGIC) {
        return Some((MAGIC.len(), RecordFormat::Current));
    }
    if data.starts_with(MAGIC_PREALLOCATED) {
        return Some((MAGIC.len(), RecordFormat::Preallocated));
    }
    if data.is_empty() || parse_record(data, RecordFormat::Old).is_ok() {
        return Some((0, RecordFormat::Old));
    }
    None
}

/// Whether `data` is what a crash right after creating a WAL file can
/// leave: part of either magic, then zeros (a preallocated file).
fn created_only(data: &[u8]) -> bool {
    if data.starts_with(MAGIC) || data.starts_with(MAGIC_PREALLOCATED) {
        return false;
    }
    let magic = data.len().min(MAGIC.len());
    let head = &data[..magic];
    (MAGIC.starts_with(head) || MAGIC_PREALLOCATED.starts_with(head) || head.iter().all(|&b| b == 0))
        && data[magic..].iter().all(|&b| b == 0)
}

/// Whether the record header at `pos` of a preallocated file `data` is
/// one a crash left unwritten, in whole or in part: all zeros, or zeros
/// on one side of a sector boundary (512 bytes) it straddles. A header
/// damaged otherwise is damage, not a torn write.
fn header_unwritten(data: &[u8], pos: usize) -> bool {
    const SECTOR: usize = 512;
    let h = pos..data.len().min(pos + HEADER_LEN);
    let zero = |r: std::ops::Range<usize>| data[r].iter().all(|&x| x == 0);
    if zero(h.clone()) {
        return true;
    }
    let cut = (pos / SECTOR + 1) * SECTOR;
    cut < h.end && (zero(pos..cut) || zero(cut..h.end))
}

/// Whether a whole record (both checksums matching) starts anywhere in
/// `data` at or after `from`. Stretches of zeros are skipped: a header
/// of twelve zeros never matches its checksum.
fn whole_record_after(data: &[u8], from: usize) -> bool {
    let mut at = from;
    while at + HEADER_LEN <= data.len() {
        if data[at..at + HEADER_LEN].iter().all(|&b| b == 0) {
            // The next header that can match holds a byte that is not
            // zero: at most HEADER_LEN - 1 bytes before it.
            match data[at + HEADER_LEN..].iter().position(|&b| b != 0) {
                Some(nz) => at = (at + HEADER_LEN + nz + 1).saturating_sub(HEADER_LEN).max(at + 1),
                None => return false,
            }
            continue;
        }
        if parse_record(&data[at..], RecordFormat::Current).is_ok() {
            return true;
        }
        at += 1;
    }
    false
}

fn parse_record(data: &[u8], format: RecordFormat) -> Result<(&[u8], usize), RecordError> {
    let header = match format {
        RecordFormat::Current | RecordFormat::Preallocated => HEADER_LEN,
        RecordFormat::Old => OLD_HEADER_LEN,
    };
    if data.len() < header {
        return Err(RecordError::Torn);
    }
    let word = |i: usize| u32::from_le_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
    if !matches!(format, RecordFormat::Old) && crc32c::crc32c(&data[..8]) != word(8) {
        return Err(RecordError::Header);
    }
    let len = word(0) as usize;
    let crc = word(4);
    let end = header.checked_add(len).ok_or(RecordError::Torn)?;
    if end > data.len() {
        return Err(RecordError::Torn);
    }
    let payload = &data[header..end];
    if crc32c::crc32c(payload) != crc {
        // A bad checksum on the very last record is a torn write too: the
        // length made it to disk but not all of the payload.
        return Err(if end == data.len() {
            RecordError::Torn
        } else {
            RecordError::Checksum
        });
    }
    Ok((payload, end))
}

#[cfg(test)]
mod tests {
    use super::super::{Durability, WalWriter, encode_entry, record_header};
    use super::*;
    use crate::model::row::Mutation;

    /// A writer of a fresh log in `dir`.
    fn writer(dir: &Path, durability: Durability, file_limit: u64) -> WalWriter {
        WalWriter::create(
            dir,
            vec![],
            durability,
            file_limit,
            std::sync::Arc::new(super::super::OsWalOpener),
        )
        .unwrap()
    }

    /// Writes `n` records to WAL file 1; returns where they end (a
    /// `Durability::Sync` file is preallocated: zeros follow).
    fn write_records(dir: &Path, n: u64, durability: Durability) -> usize {
        let mut w = writer(dir, durability, 1 << 20);
        for seq in 1..=n {
            let mut p = Vec::new();
            encode_entry(&mut p, seq, 7, b"k", &Mutation::Delete);
            w.append(&p, seq).unwrap();
        }
        MAGIC.len() + w.current_size() as usize
    }

    #[test]
    fn torn_tail_is_cut_and_corrupt_middle_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_records(dir.path(), 5, Durability::None);
        let path = dir.path().join(file_name(1));
        let full = std::fs::read(&path).unwrap();
        // cut the last record in half
        std::fs::write(&path, &full[..full.len() - 3]).unwrap();
        let r = replay(dir.path()).unwrap();
        assert_eq!(r.entries.len(), 4);
        assert!(r.torn_bytes > 0);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len() as usize,
            full.len() - r.torn_bytes as usize - 3
        );
        // flip a byte in the first record
        let mut bad = std::fs::read(&path).unwrap();
        bad[MAGIC.len() + HEADER_LEN + 1] ^= 0xFF;
        std::fs::write(&path, &bad).unwrap();
        let err = replay(dir.path()).err().unwrap();
        assert_eq!(err.kind(), crate::error::ErrorKind::Corruption);
        assert!(
            err.message().contains(&format!("offset {}", MAGIC.len())),
            "{}",
            err.message()
        );
    }

    /// A flipped bit anywhere in a WAL file that is not the newest file's
    /// last record never drops records silently: replay either returns
    /// every record or fails naming the file. Before the header checksum,
    /// a flip in a middle record's length read as a torn tail and cut off
    /// every record after it.
    #[test]
    fn a_flipped_bit_never_drops_later_records() {
        // Appended, and preallocated (zeros after the records).
        for durability in [Durability::None, Durability::Sync] {
            let dir = tempfile::tempdir().unwrap();
            let end = write_records(dir.path(), 6, durability);
            let path = dir.path().join(file_name(1));
            let full = std::fs::read(&path).unwrap();
            let record = (end - MAGIC.len()) / 6;
            // Every bit before the last record.
            for bit in 0..(end - record) * 8 {
                let mut bad = full.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                std::fs::write(&path, &bad).unwrap();
                match replay(dir.path()) {
                    // (A flip of the magic's version byte can turn one
                    // kind of file into the other, whose records read
                    // the same.)
                    Ok(r) if r.entries.iter().map(|e| e.seq).eq(1..=6) => {}
                    Ok(r) => panic!(
                        "{durability:?}, bit {bit}: read {} records and no error",
                        r.entries.len()
                    ),
                    Err(e) => assert!(e.message().contains(&file_name(1)), "{}", e.message()),
                }
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file_name(1));
        // A crash right after the file was created leaves part of the
        // magic: cut off, so that the file reads as empty once it is no
        // longer the newest.
        std::fs::write(&path, &MAGIC[..3]).unwrap();
        assert_eq!(replay(dir.path()).unwrap().entries.len(), 0);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        std::fs::write(dir.path().join(file_name(2)), MAGIC).unwrap();
        assert_eq!(replay(dir.path()).unwrap().entries.len(), 0);
    }

    /// A writer with `Durability::Sync` preallocates: its newest file ends
    /// in zeros, which recovery reads as the end of the log; a record a
    /// crash left with any part still zero (its header included) is cut
    /// off; zeros or damage with a whole record after them are refused.
    #[test]
    fn preallocated_files_end_at_their_zeros_and_refuse_holes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file_name(1));
        let mut w = writer(dir.path(), Durability::Sync, 1 << 20);
        let mut starts = Vec::new();
        for seq in 1..=6u64 {
            starts.push(MAGIC.len() as u64 + w.current_size());
            let mut p = Vec::new();
            encode_entry(&mut p, seq, 7, &vec![seq as u8; 300 * seq as usize], &Mutation::Delete);
            w.append(&p, seq).unwrap();
        }
        let end = MAGIC.len() as u64 + w.current_size();
        let full = std::fs::read(&path).unwrap();
        if full.len() as u64 == end {
            eprintln!("this file system cannot preallocate: the appended form was tested");
            return;
        }
        assert_eq!(full.len(), 1 << 20);
        assert!(full.starts_with(MAGIC_PREALLOCATED));
        let seqs = |r: &Replayed| r.entries.iter().map(|e| e.seq).collect::<Vec<_>>();
        let replay_of = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            replay(dir.path())
        };
        // Zeros after the records: the end, nothing reported torn.
        let r = replay_of(&full).unwrap();
        assert_eq!(seqs(&r), vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(r.torn_bytes, 0);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), end, "the zeros are cut off");
        // The last record's header never reached the disk, its payload did.
        let (last, last_end) = (starts[5] as usize, end as usize);
        let mut torn = full.clone();
        torn[last..last + HEADER_LEN].fill(0);
        let r = replay_of(&torn).unwrap();
        assert_eq!(seqs(&r), vec![1, 2, 3, 4, 5]);
        assert_eq!(r.torn_bytes, (last_end - last) as u64);
        // Its payload's second half never did.
        let mut torn = full.clone();
        torn[(last + last_end) / 2..last_end].fill(0);
        assert_eq!(seqs(&replay_of(&torn).unwrap()), vec![1, 2, 3, 4, 5]);
        // A middle record zeroed (acknowledged records after it) or damaged.
        for (at, len) in [(starts[2] as usize, HEADER_LEN), (starts[2] as usize + 20, 1)] {
            let mut bad = full.clone();
            bad[at..at + len]
                .iter_mut()
                .for_each(|b| *b = !*b & if len == 1 { 0xff } else { 0 });
            let e = replay_of(&bad).err().expect("a hole before whole records is refused");
            assert_eq!(e.kind(), crate::error::ErrorKind::Corruption);
            assert!(
                e.message().contains(&format!("offset {}", starts[2])),
                "{}",
                e.message()
            );
        }
        // A file created and preallocated, its magic not yet on disk.
        let r = replay_of(&vec![0; 1 << 20]).unwrap();
        assert!(r.entries.is_empty());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }

    /// A sealed preallocated file is cut back to its records, and so is
    /// the newest one on a clean finish: only the newest file, after a
    /// crash, ends in zeros.
    #[test]
    fn sealed_and_finished_files_end_with_their_records() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = writer(dir.path(), Durability::Sync, 1 << 20);
        let mut p = Vec::new();
        encode_entry(&mut p, 1, 7, b"k", &Mutation::Delete);
        w.append(&p, 1).unwrap();
        let first = MAGIC.len() as u64 + w.current_size();
        w.rotate().unwrap();
        w.append(&p, 2).unwrap();
        let second = MAGIC.len() as u64 + w.current_size();
        w.finish().unwrap();
        let len = |n| std::fs::metadata(dir.path().join(file_name(n))).unwrap().len();
        assert_eq!((len(1), len(2)), (first, second));
        assert_eq!(replay(dir.path()).unwrap().entries.len(), 2);
    }

    /// Appends past the allocated zeros allocate the next stretch; the
    /// file replays whole, before and after a clean finish.
    #[test]
    fn preallocated_files_grow_a_stretch_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = writer(dir.path(), Durability::Sync, 64 << 20);
        let path = dir.path().join(file_name(1));
        let first = std::fs::metadata(&path).unwrap().len();
        for seq in 1..=50u64 {
            let mut p = Vec::new();
            encode_entry(&mut p, seq, 7, &vec![seq as u8; 100 << 10], &Mutation::Delete);
            w.append(&p, seq).unwrap();
        }
        let end = MAGIC.len() as u64 + w.current_size();
        let len = std::fs::metadata(&path).unwrap().len();
        if first > MAGIC.len() as u64 {
            assert_eq!(first, 4 << 20, "the first stretch");
            assert!(
                len > end && len - end <= 4 << 20 && len.is_multiple_of(4 << 20),
                "{len} for {end}"
            );
        }
        let copy = std::fs::read(&path).unwrap();
        w.finish().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), end);
        let seqs = |r: Replayed| r.entries.iter().map(|e| e.seq).collect::<Vec<_>>();
        assert_eq!(seqs(replay(dir.path()).unwrap()), (1..=50).collect::<Vec<_>>());
        // As a crash would have left it: zeros after the records.
        std::fs::write(&path, &copy).unwrap();
        assert_eq!(seqs(replay(dir.path()).unwrap()), (1..=50).collect::<Vec<_>>());
    }

    /// Files written before the magic (8-byte headers) still replay.
    #[test]
    fn files_of_the_old_format_replay() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = Vec::new();
        for seq in 1..=3u64 {
            let mut p = Vec::new();
            encode_entry(&mut p, seq, 7, b"k", &Mutation::Delete);
            file.extend_from_slice(&(p.len() as u32).to_le_bytes());
            file.extend_from_slice(&crc32c::crc32c(&p).to_le_bytes());
            file.extend_from_slice(&p);
        }
        std::fs::write(dir.path().join(file_name(1)), &file).unwrap();
        let r = replay(dir.path()).unwrap();
        assert_eq!(r.entries.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
    }

    /// A live reader picks up where it stopped: only records appended
    /// since, a record cut short at the tail once it is whole, records in
    /// files created since; and its cursor's file gone says "load anew".
    #[test]
    fn a_live_reader_reads_on_from_its_cursor() {
        for durability in [Durability::Sync, Durability::IntervalMs(1000)] {
            let dir = tempfile::tempdir().unwrap();
            let mut w = writer(dir.path(), durability, 1 << 20);
            let record = |seq: u64| {
                let mut p = Vec::new();
                encode_entry(&mut p, seq, 7, b"k", &Mutation::Delete);
                p
            };
            let seqs = |r: &Replayed| r.entries.iter().map(|e| e.seq).collect::<Vec<_>>();
            for seq in 1..=3 {
                w.append(&record(seq), seq).unwrap();
            }
            w.sync().unwrap();
            let (r, at) = replay_live(dir.path(), None).unwrap().unwrap();
            assert_eq!(seqs(&r), [1, 2, 3]);
            let at = at.unwrap();
            // Nothing new: nothing read, the cursor stays.
            let (r, same) = replay_live(dir.path(), Some(at)).unwrap().unwrap();
            assert!(r.entries.is_empty());
            assert_eq!(same, Some(at));
            w.append(&record(4), 4).unwrap();
            w.sync().unwrap();
            // A record being appended: half of it is visible.
            let path = dir.path().join(file_name(1));
            let whole = std::fs::read(&path).unwrap();
            let (r, at) = replay_live(dir.path(), Some(at)).unwrap().unwrap();
            assert_eq!(seqs(&r), [4]);
            let at = at.unwrap();
            let mut half = whole.clone();
            let next = {
                let mut h = record_header(&record(5)).unwrap().to_vec();
                h.extend_from_slice(&record(5));
                h
            };
            half.truncate(at.offset);
            half.extend_from_slice(&next[..next.len() / 2]);
            std::fs::write(&path, &half).unwrap();
            let (r, same) = replay_live(dir.path(), Some(at)).unwrap().unwrap();
            assert!(r.entries.is_empty());
            assert_eq!(same, Some(at));
            assert_eq!(std::fs::read(&path).unwrap(), half, "nothing cut off");
            let mut full = half[..at.offset].to_vec();
            full.extend_from_slice(&next);
            std::fs::write(&path, &full).unwrap();
            let (r, at) = replay_live(dir.path(), Some(at)).unwrap().unwrap();
            assert_eq!(seqs(&r), [5]);
            // A new file.
            drop(w);
            let mut w2 = WalWriter::create(
                dir.path(),
                vec![(1, 5)],
                durability,
                1 << 20,
                std::sync::Arc::new(super::super::OsWalOpener),
            )
            .unwrap();
            w2.rotate().unwrap();
            w2.append(&record(6), 6).unwrap();
            w2.sync().unwrap();
            let (r, next_at) = replay_live(dir.path(), at).unwrap().unwrap();
            assert_eq!(seqs(&r), [6]);
            assert!(next_at.unwrap().file > 1);
            // The cursor's file deleted (its writes were flushed).
            std::fs::remove_file(&path).unwrap();
            assert!(replay_live(dir.path(), at).unwrap().is_none());
        }
    }
}
