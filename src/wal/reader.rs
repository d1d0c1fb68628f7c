//! Recovery: reading every WAL file back, tolerating a torn tail.

use std::path::Path;

use super::{HEADER_LEN, WalEntry, decode_payload, file_name};
use crate::error::{Error, Result};

/// What recovery found.
pub(crate) struct Replayed {
    /// Entries in log order.
    pub entries: Vec<WalEntry>,
    /// Files found: (number, largest sequence in them).
    pub files: Vec<(u64, u64)>,
    /// Bytes cut off the newest file's torn tail.
    pub torn_bytes: u64,
}

/// Reads every WAL file in `dir` in order. A torn record at the end of the
/// newest file is cut off (the file is truncated there); a bad record
/// anywhere else fails with a corruption error.
pub(crate) fn replay(dir: &Path) -> Result<Replayed> {
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
    let mut out = Replayed {
        entries: Vec::new(),
        files: Vec::new(),
        torn_bytes: 0,
    };
    for (i, &number) in numbers.iter().enumerate() {
        let is_last = i + 1 == numbers.len();
        let path = dir.join(file_name(number));
        let data = std::fs::read(&path).map_err(|e| Error::io(format!("read WAL file {}", path.display()), e))?;
        let mut pos = 0usize;
        let mut max_seq = 0;
        while pos < data.len() {
            match parse_record(&data[pos..]) {
                Ok((payload, len)) => {
                    let entries = decode_payload(payload).map_err(|e| {
                        Error::corruption(format!("WAL file {} at offset {pos}: {}", path.display(), e.message()))
                    })?;
                    max_seq = entries.iter().map(|e| e.seq).fold(max_seq, u64::max);
                    out.entries.extend(entries);
                    pos += len;
                }
                Err(RecordError::Torn) if is_last => {
                    out.torn_bytes = (data.len() - pos) as u64;
                    let f = std::fs::OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .map_err(|e| Error::io(format!("open WAL file {}", path.display()), e))?;
                    f.set_len(pos as u64)
                        .and_then(|_| f.sync_all())
                        .map_err(|e| Error::io(format!("truncate torn tail of WAL file {}", path.display()), e))?;
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
                        }
                    )));
                }
            }
        }
        out.files.push((number, max_seq));
    }
    Ok(out)
}

enum RecordError {
    /// The record runs past the end of the data: a crash mid-append.
    Torn,
    /// Complete, but its checksum is wrong.
    Checksum,
}

fn parse_record(data: &[u8]) -> Result<(&[u8], usize), RecordError> {
    if data.len() < HEADER_LEN {
        return Err(RecordError::Torn);
    }
    let len = u32::from_le_bytes([data[0], data[1], data[2], data[3]]) as usize;
    let crc = u32::from_le_bytes([data[4], data[5], data[6], data[7]]);
    let end = HEADER_LEN.checked_add(len).ok_or(RecordError::Torn)?;
    if end > data.len() {
        return Err(RecordError::Torn);
    }
    let payload = &data[HEADER_LEN..end];
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
    use super::super::{Durability, WalWriter, encode_entry};
    use super::*;
    use crate::row::Mutation;

    fn write_records(dir: &Path, n: u64) {
        let mut w = WalWriter::create(
            dir,
            vec![],
            Durability::Sync,
            1 << 20,
            std::sync::Arc::new(super::super::OsWalOpener),
        )
        .unwrap();
        for seq in 1..=n {
            let mut p = Vec::new();
            encode_entry(&mut p, seq, 7, b"k", &Mutation::Delete);
            w.append(&p, seq).unwrap();
        }
    }

    #[test]
    fn torn_tail_is_cut_and_corrupt_middle_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_records(dir.path(), 5);
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
        bad[HEADER_LEN + 1] ^= 0xFF;
        std::fs::write(&path, &bad).unwrap();
        let err = replay(dir.path()).err().unwrap();
        assert_eq!(err.kind(), crate::ErrorKind::Corruption);
        assert!(err.message().contains("offset 0"), "{}", err.message());
    }
}
