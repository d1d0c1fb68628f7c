//! Change streams' storage: one log per shard, in `streams/<shard>/`.
//!
//! A shard's log holds the row writes committed to it, in commit order,
//! in the WAL's file and record format (a record is a group with its
//! commit time, see `docs/format.md`, "WAL"); the committer appends each
//! group's writes for the shard right after logging the group in the WAL.
//! Appends are not synced one by one: [`StreamLog::sync`] syncs what was
//! appended and only then lets readers see it. The WAL is the source of
//! truth until then: a WAL file is deleted only when every stream log is
//! synced past its writes ([`StreamLog::synced_seq`]), and an open puts
//! back into each stream log the WAL writes it lacks.
//!
//! Invariants: a log holds each write of its shard at most once, in
//! sequence order (an append below [`StreamLog::last_seq`] is refused);
//! readers see only synced records, so nothing a reader saw can be lost
//! or change place (a power cut may cut an unsynced tail, which the open
//! refills from the WAL); a sealed file is deleted only when its newest
//! record is past the expiration.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

mod shards;
pub(crate) use shards::StreamShards;

use crate::error::{Error, Result};
use crate::wal::{self, Durability, WalEntry, WalWriter};

/// Where a reader of a stream log is: a record (file, offset) and how many
/// of its entries were read already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct LogPosition {
    pub file: u64,
    pub offset: usize,
    pub skip: usize,
}

/// What [`StreamLog::read`] gives: entries, each with its index in its
/// record, and where the next read starts.
pub(crate) type LogRead = (Vec<(WalEntry, u32)>, LogPosition);

/// A stream log file is sealed past this size.
const FILE_BYTES: u64 = 16 << 20;

/// One shard's log (see the module docs).
pub(crate) struct StreamLog {
    dir: PathBuf,
    /// `None`: a log read beside the process that writes it (see
    /// [`StreamLog::open_live`]).
    writer: Option<Mutex<Appender>>,
    /// What readers may read: the end of the synced records.
    readable: Mutex<(u64, usize)>,
    /// The highest sequence appended.
    last_seq: AtomicU64,
    /// The highest sequence synced: WAL writes up to it may go.
    synced_seq: AtomicU64,
    /// The newest commit time appended, in microseconds.
    last_commit_us: AtomicU64,
    /// Set when an append or a sync failed: nothing more is appended or
    /// synced (the WAL keeps what the log lacks until the next open).
    failed: Mutex<Option<String>>,
    /// How long records are kept, in microseconds.
    expiration_us: AtomicU64,
    /// The last file read, by number (see `StreamLog::file_data`).
    cache: Mutex<Option<(u64, Arc<Vec<u8>>)>>,
}

struct Appender {
    wal: WalWriter,
    /// Sealed files' newest commit times, by number.
    times: Vec<(u64, u64)>,
    /// The current file's newest commit time.
    time: u64,
    /// Records appended and not readable yet, oldest first: each one's
    /// largest sequence and the position just past it.
    unread: std::collections::VecDeque<(u64, (u64, usize))>,
}

impl StreamLog {
    /// Opens (creating) the log in `dir`: reads it back, cutting a torn
    /// tail and every record above sequence `keep` (the database's
    /// newest durable write: a record above it is of a write a power cut
    /// took out of the WAL, whose sequence a new write will have), and
    /// starts a new file for appends.
    pub fn open(dir: &Path, keep: u64) -> Result<Arc<StreamLog>> {
        Self::open_with(dir, FILE_BYTES, keep)
    }

    /// [`open`](Self::open), sealing files past `file_bytes`.
    fn open_with(dir: &Path, file_bytes: u64, keep: u64) -> Result<Arc<StreamLog>> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("create stream log {}", dir.display()), e))?;
        let mut replayed = wal::replay(dir)?;
        if replayed.entries.last().is_some_and(|e| e.seq > keep) && wal::cut_above(dir, keep)? {
            replayed = wal::replay(dir)?;
        }
        let last_seq = replayed.entries.last().map_or(0, |e| e.seq);
        let last_commit_us = replayed.entries.iter().map(|e| e.commit_us).max().unwrap_or(0);
        let times: Vec<(u64, u64)> = replayed
            .files
            .iter()
            .zip(&replayed.times)
            .map(|((n, _), t)| (*n, *t))
            .collect();
        let writer = WalWriter::create(
            dir,
            replayed.files,
            Durability::None,
            file_bytes,
            Arc::new(wal::OsWalOpener),
        )?;
        let readable = writer.position();
        Ok(Arc::new(StreamLog {
            dir: dir.to_path_buf(),
            readable: Mutex::new(readable),
            writer: Some(Mutex::new(Appender {
                wal: writer,
                times,
                time: 0,
                unread: Default::default(),
            })),
            last_seq: AtomicU64::new(last_seq),
            synced_seq: AtomicU64::new(last_seq),
            last_commit_us: AtomicU64::new(last_commit_us),
            failed: Mutex::new(None),
            expiration_us: AtomicU64::new(u64::MAX),
            cache: Mutex::new(None),
        }))
    }

    /// The log in `dir` read beside the process that writes it (a
    /// read-only open): nothing is created or changed, and reads go up to
    /// the newest whole record, synced or not. A power cut may take back
    /// a tail such a reader saw; the writer's next open puts the same
    /// records back, in new places, so a reader that saw them sees them
    /// again (at least once, not exactly once, after a power cut).
    pub fn open_live(dir: &Path) -> Arc<StreamLog> {
        Arc::new(StreamLog {
            dir: dir.to_path_buf(),
            writer: None,
            readable: Mutex::new((u64::MAX, usize::MAX)),
            last_seq: AtomicU64::new(0),
            synced_seq: AtomicU64::new(0),
            last_commit_us: AtomicU64::new(0),
            failed: Mutex::new(None),
            expiration_us: AtomicU64::new(u64::MAX),
            cache: Mutex::new(None),
        })
    }

    /// The appender, or the refusal of a change to a live log.
    fn appender(&self) -> Result<parking_lot::MutexGuard<'_, Appender>> {
        self.writer.as_ref().map(|w| w.lock()).ok_or_else(|| {
            Error::new(
                crate::error::ErrorKind::ReadOnly,
                format!(
                    "stream log {} is read beside its writer and is not changed here",
                    self.dir.display()
                ),
            )
        })
    }

    /// Sets how long records are kept.
    pub fn set_expiration_hours(&self, hours: u32) {
        self.expiration_us
            .store(hours as u64 * 3_600_000_000, Ordering::Release);
    }

    /// How long records are kept, in microseconds.
    pub fn expiration_us(&self) -> u64 {
        self.expiration_us.load(Ordering::Acquire)
    }

    /// The highest sequence in the log.
    pub fn last_seq(&self) -> u64 {
        self.last_seq.load(Ordering::Acquire)
    }

    /// The highest sequence synced (and readable).
    pub fn synced_seq(&self) -> u64 {
        self.synced_seq.load(Ordering::Acquire)
    }

    /// The newest commit time in the log, in microseconds (0: none).
    pub fn last_commit_us(&self) -> u64 {
        self.last_commit_us.load(Ordering::Acquire)
    }

    /// Appends one group's writes for this shard: `payload` is a group
    /// header and entries (`wal::encode_group_header`, `wal::encode_entry`)
    /// with sequences from `first_seq` to `max_seq`, all above
    /// [`last_seq`](Self::last_seq).
    pub fn append(&self, payload: &[u8], first_seq: u64, max_seq: u64, commit_us: u64) -> Result<()> {
        let mut w = self.appender()?;
        let last = self.last_seq.load(Ordering::Acquire);
        if first_seq <= last {
            return Err(Error::new(
                crate::error::ErrorKind::Corruption,
                format!(
                    "stream log {}: write {first_seq} appended after write {last} (a stream holds each write once, in \
                     order)",
                    self.dir.display()
                ),
            ));
        }
        let before = w.wal.position().0;
        w.wal.append(payload, max_seq)?;
        let (number, _) = w.wal.position();
        if number != before {
            // The append sealed the file before it.
            let sealed_time = w.time;
            w.times.push((before, sealed_time));
            w.time = 0;
        }
        w.time = w.time.max(commit_us);
        let end = w.wal.position();
        w.unread.push_back((max_seq, end));
        self.last_seq.store(max_seq, Ordering::Release);
        self.last_commit_us.fetch_max(commit_us, Ordering::AcqRel);
        Ok(())
    }

    /// [`append`](Self::append), for the committer: a failure stops the
    /// log instead of failing the writes, which the WAL holds already.
    pub fn append_or_fail(&self, payload: &[u8], first_seq: u64, max_seq: u64, commit_us: u64) {
        // (`failed` is never held while `writer` is taken.)
        if self.failed.lock().is_none()
            && let Err(e) = self.append(payload, first_seq, max_seq, commit_us)
        {
            self.failed.lock().get_or_insert(e.to_string());
        }
    }

    /// The refusal of a stopped log, if it is stopped.
    pub fn check(&self) -> Result<()> {
        match &*self.failed.lock() {
            None => Ok(()),
            Some(why) => Err(Error::new(
                crate::error::ErrorKind::Io,
                format!(
                    "the stream log {} stopped after an error ({why}); the writes are in the WAL, and the next open \
                     puts them into the log",
                    self.dir.display()
                ),
            )),
        }
    }

    /// Syncs what was appended and lets readers see it, up to the records
    /// whose writes are durable in the WAL (`durable`: a power cut takes
    /// back no write up to it). A record above it stays unread: a power
    /// cut may take its write out of the WAL, and a reader must never
    /// see a write the table then lacks (the next open cuts such records,
    /// see [`StreamLog::open`]). `covered`: every write with a sequence
    /// up to it that belongs in this log had been appended when the call
    /// began (the committer appends before it makes a write visible, so
    /// the visible sequence read before the call is one): WAL writes up
    /// to `min(covered, durable)` are no longer needed by this log.
    pub fn sync(&self, covered: u64, durable: u64) -> Result<()> {
        self.check()?;
        if self.writer.is_none() {
            return Ok(());
        }
        // The records that become readable: the oldest unread ones whose
        // writes are durable.
        let (position, seq) = {
            let mut w = self.appender()?;
            let mut position = None;
            let mut seq = covered.min(durable);
            while let Some(&(max_seq, at)) = w.unread.front()
                && max_seq <= durable
            {
                w.unread.pop_front();
                position = Some(at);
                seq = seq.max(max_seq);
            }
            (position, seq)
        };
        if let Some(position) = position {
            // The fsync goes through a handle of its own, outside the
            // appender's lock: the committer's appends go on meanwhile.
            // Files before the current one were synced when they were
            // sealed.
            let path = self.dir.join(wal::file_name(position.0));
            let synced = std::fs::File::open(&path).and_then(|f| f.sync_data());
            if let Err(e) = synced {
                let e = Error::io(format!("fsync stream log {}", path.display()), e);
                self.failed.lock().get_or_insert(e.to_string());
                return Err(e);
            }
            // (The power-cut tests cut a file back to what it logged durable.)
            crate::crash_point::synced(&path, Some(position.1 as u64));
            let mut readable = self.readable.lock();
            *readable = (*readable).max(position);
        }
        self.synced_seq.fetch_max(seq, Ordering::AcqRel);
        Ok(())
    }

    /// Deletes the oldest sealed files whose every record was committed
    /// before `cutoff_us` (a prefix of the log: it stays contiguous).
    pub fn expire(&self, cutoff_us: u64) -> Result<()> {
        if self.writer.is_none() {
            return Ok(());
        }
        let mut w = self.appender()?;
        let mut min_kept = 0;
        for (number, max_seq) in w.wal.sealed().to_vec() {
            let time = w.times.iter().find(|(n, _)| *n == number).map_or(u64::MAX, |(_, t)| *t);
            if time >= cutoff_us {
                break;
            }
            min_kept = max_seq + 1;
        }
        if min_kept == 0 {
            return Ok(());
        }
        w.wal.delete_obsolete(min_kept)?;
        let left: Vec<u64> = w.wal.sealed().iter().map(|(n, _)| *n).collect();
        w.times.retain(|(n, _)| left.contains(n));
        Ok(())
    }

    /// Whether every record appended is synced (readable): for a shard
    /// that takes no more records, whether a reader at its end is done.
    pub fn fully_synced(&self) -> bool {
        self.writer.is_none() || self.synced_seq() >= self.last_seq()
    }

    /// The position just past the newest synced record: where a reader
    /// that wants only records appended from now on starts.
    pub fn end(&self) -> LogPosition {
        let (file, offset) = *self.readable.lock();
        LogPosition { file, offset, skip: 0 }
    }

    /// The position of the log's oldest record.
    pub fn start(&self) -> Result<LogPosition> {
        let first = self.files()?.first().copied().unwrap_or(0);
        Ok(LogPosition {
            file: first,
            offset: 0,
            skip: 0,
        })
    }

    /// Up to `limit` entries from `from` on, among the synced ones, each
    /// with its index in its record (its group), and where the next read
    /// starts. A position whose file was deleted (expired) is refused with
    /// `None`.
    pub fn read(&self, from: LogPosition, limit: usize) -> Result<Option<LogRead>> {
        self.read_inner(from, limit, false)
    }

    /// [`read`](Self::read) in whole records: the last one read is read to
    /// its end, past `limit` if need be. A record holds a commit group's
    /// writes (thousands under a pipelined load) and is decoded whole on
    /// every read: a reader that cut it at the limit decoded it once per
    /// cut.
    pub fn read_whole(&self, from: LogPosition, limit: usize) -> Result<Option<LogRead>> {
        self.read_inner(from, limit, true)
    }

    fn read_inner(&self, from: LogPosition, limit: usize, whole: bool) -> Result<Option<LogRead>> {
        self.check()?;
        let readable = *self.readable.lock();
        let numbers = self.files()?;
        let newest = numbers.last().copied();
        if from.file < numbers.first().copied().unwrap_or(u64::MAX) && from.file < readable.0 {
            return Ok(None);
        }
        let mut out = Vec::new();
        let mut at = from;
        for number in numbers.into_iter().filter(|n| *n >= from.file && *n <= readable.0) {
            if number > at.file {
                at = LogPosition {
                    file: number,
                    offset: 0,
                    skip: 0,
                };
            }
            let path = self.dir.join(wal::file_name(number));
            let data = match self.file_data(number, &path) {
                Ok(d) => d,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && number == from.file => return Ok(None),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(format!("read stream log {}", path.display()), e)),
            };
            let end = if number == readable.0 {
                readable.1.min(data.len())
            } else {
                data.len()
            };
            loop {
                let (entries, next) = match wal::read_one_record(&path, &data[..end], at.offset) {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    // Read beside the writer: the newest file may end in a
                    // record being appended.
                    Err(_) if self.writer.is_none() && Some(number) == newest => break,
                    Err(e) => return Err(e),
                };
                let count = entries.len();
                let rest = count.saturating_sub(at.skip);
                let take = if whole { rest } else { rest.min(limit - out.len()) };
                out.extend(
                    entries
                        .into_iter()
                        .enumerate()
                        .skip(at.skip)
                        .take(take)
                        .map(|(i, e)| (e, i as u32)),
                );
                if at.skip + take < count {
                    // The limit ends inside this record.
                    at.skip += take;
                    return Ok(Some((out, at)));
                }
                at.skip = 0;
                at.offset = next;
                if out.len() >= limit {
                    return Ok(Some((out, at)));
                }
            }
        }
        Ok(Some((out, at)))
    }

    /// The bytes of file `number` (at `path`), from the cache of the last
    /// file read: a reader goes through a file page by page, and reading
    /// it whole each time cost a copy of up to 16 MiB per page. Files only
    /// grow (a sealed one never changes), so the cached copy is extended
    /// by what was appended since.
    fn file_data(&self, number: u64, path: &Path) -> std::io::Result<Arc<Vec<u8>>> {
        use std::io::{Read, Seek};
        let mut cache = self.cache.lock();
        let len = std::fs::metadata(path)?.len() as usize;
        match &mut *cache {
            Some((n, data)) if *n == number && data.len() == len => return Ok(data.clone()),
            Some((n, data)) if *n == number && data.len() < len => {
                let mut f = std::fs::File::open(path)?;
                f.seek(std::io::SeekFrom::Start(data.len() as u64))?;
                let buf = Arc::make_mut(data);
                f.take((len - buf.len()) as u64).read_to_end(buf)?;
                return Ok(data.clone());
            }
            _ => {}
        }
        let data = Arc::new(std::fs::read(path)?);
        *cache = Some((number, data.clone()));
        Ok(data)
    }

    /// The log's file numbers, ascending (none when its directory is
    /// not there yet).
    fn files(&self) -> Result<Vec<u64>> {
        if !self.dir.is_dir() {
            return Ok(Vec::new());
        }
        wal::file_numbers(&self.dir)
    }

    /// Bytes of the log's files.
    pub fn bytes(&self) -> u64 {
        self.files()
            .unwrap_or_default()
            .iter()
            .filter_map(|n| std::fs::metadata(self.dir.join(wal::file_name(*n))).ok())
            .map(|m| m.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::row::Mutation;

    /// A group of `n` deletes of keys `k<seq>`, from `first`, at `us`.
    fn group(first: u64, n: u64, us: u64) -> Vec<u8> {
        let mut p = Vec::new();
        wal::encode_group_header(&mut p, us, false);
        for seq in first..first + n {
            wal::encode_entry(&mut p, seq, 9, format!("k{seq}").as_bytes(), &Mutation::Delete);
        }
        p
    }

    fn seqs(e: &[(WalEntry, u32)]) -> Vec<u64> {
        e.iter().map(|(e, _)| e.seq).collect()
    }

    /// Everything from the start, `limit` at a time.
    fn read_all(log: &StreamLog, limit: usize) -> Vec<u64> {
        let mut at = log.start().unwrap();
        let mut out = Vec::new();
        loop {
            let (e, next) = log.read(at, limit).unwrap().unwrap();
            if e.is_empty() {
                return out;
            }
            assert!(e.len() <= limit);
            out.extend(seqs(&e));
            at = next;
        }
    }

    #[test]
    fn records_are_read_once_synced_in_order_at_any_limit() {
        let dir = tempfile::tempdir().unwrap();
        let log = StreamLog::open_with(dir.path(), 300, u64::MAX).unwrap();
        let mut seq = 1;
        for g in 0..20u64 {
            let n = g % 4 + 1;
            log.append(&group(seq, n, 1000 + g), seq, seq + n - 1, 1000 + g)
                .unwrap();
            seq += n;
            if g == 9 {
                assert!(read_all(&log, 5).is_empty(), "nothing is readable before a sync");
                log.sync(0, u64::MAX).unwrap();
            }
        }
        let first_half: Vec<u64> = (1..=read_all(&log, 100).len() as u64).collect();
        assert_eq!(read_all(&log, 100), first_half);
        log.sync(0, u64::MAX).unwrap();
        let all: Vec<u64> = (1..seq).collect();
        for limit in [1, 2, 3, 7, 100] {
            assert_eq!(read_all(&log, limit), all, "limit {limit}");
            // In whole records: the same writes, each read ending at a
            // record's end.
            let mut at = log.start().unwrap();
            let mut whole = Vec::new();
            loop {
                let (e, next) = log.read_whole(at, limit).unwrap().unwrap();
                if e.is_empty() {
                    break;
                }
                assert_eq!(next.skip, 0, "limit {limit}");
                assert!(
                    e.len() < limit + 4,
                    "limit {limit}: {} writes (a record holds at most 4)",
                    e.len()
                );
                whole.extend(seqs(&e));
                at = next;
            }
            assert_eq!(whole, all, "limit {limit}");
        }
        assert!(
            wal::file_numbers(dir.path()).unwrap().len() > 2,
            "small files were sealed"
        );
        // Appending a sequence already there is refused.
        assert!(log.append(&group(3, 1, 5000), 3, 3, 5000).is_err());
        assert_eq!(log.last_seq(), seq - 1);
        assert_eq!(log.synced_seq(), seq - 1);
    }

    #[test]
    fn a_reopen_finds_the_last_write_and_cuts_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let log = StreamLog::open_with(dir.path(), 1 << 20, u64::MAX).unwrap();
        log.append(&group(1, 3, 10), 1, 3, 10).unwrap();
        log.append(&group(4, 2, 11), 4, 5, 11).unwrap();
        log.sync(0, u64::MAX).unwrap();
        drop(log);
        let newest = *wal::file_numbers(dir.path()).unwrap().last().unwrap();
        let path = dir.path().join(wal::file_name(newest));
        let mut data = std::fs::read(&path).unwrap();
        data.extend_from_slice(&[9, 0, 0, 0, 1]);
        std::fs::write(&path, &data).unwrap();
        let log = StreamLog::open_with(dir.path(), 1 << 20, u64::MAX).unwrap();
        assert_eq!((log.last_seq(), log.last_commit_us()), (5, 11));
        assert_eq!(read_all(&log, 10), [1, 2, 3, 4, 5]);
        log.append(&group(6, 1, 12), 6, 6, 12).unwrap();
        log.sync(0, u64::MAX).unwrap();
        assert_eq!(read_all(&log, 10), [1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn records_above_the_durable_write_stay_unread_and_an_open_cuts_them() {
        let dir = tempfile::tempdir().unwrap();
        let log = StreamLog::open_with(dir.path(), 80, u64::MAX).unwrap();
        let mut seq = 1;
        for g in 0..12u64 {
            log.append(&group(seq, 2, 10 + g), seq, seq + 1, 10 + g).unwrap();
            seq += 2;
        }
        // The WAL is durable up to write 9: the records up to it are read.
        log.sync(24, 9).unwrap();
        assert_eq!(
            read_all(&log, 100),
            (1..=8).collect::<Vec<_>>(),
            "a record is read whole"
        );
        assert_eq!(log.synced_seq(), 9);
        assert!(!log.fully_synced());
        log.sync(24, 16).unwrap();
        assert_eq!(read_all(&log, 100), (1..=16).collect::<Vec<_>>());
        // A power cut took writes 17.. out of the WAL: the next open cuts
        // them from the log (across files), and new writes take their
        // sequences.
        drop(log);
        let files = wal::file_numbers(dir.path()).unwrap();
        assert!(files.len() > 2, "{files:?}");
        let log = StreamLog::open_with(dir.path(), 80, 16).unwrap();
        assert_eq!(log.last_seq(), 16);
        assert_eq!(read_all(&log, 100), (1..=16).collect::<Vec<_>>());
        assert!(
            wal::file_numbers(dir.path()).unwrap().starts_with(&files),
            "the cut files keep their numbers"
        );
        log.append(&group(17, 3, 50), 17, 19, 50).unwrap();
        log.sync(19, 19).unwrap();
        assert_eq!(read_all(&log, 100), (1..=19).collect::<Vec<_>>());
        drop(log);
        let log = StreamLog::open_with(dir.path(), 80, 19).unwrap();
        assert_eq!(read_all(&log, 100), (1..=19).collect::<Vec<_>>());
    }

    #[test]
    fn expired_files_go_oldest_first_and_their_positions_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let log = StreamLog::open_with(dir.path(), 100, u64::MAX).unwrap();
        for g in 0..12u64 {
            log.append(&group(g * 2 + 1, 2, 100 * g), g * 2 + 1, g * 2 + 2, 100 * g)
                .unwrap();
        }
        log.sync(0, u64::MAX).unwrap();
        let start = log.start().unwrap();
        let before = wal::file_numbers(dir.path()).unwrap().len();
        log.expire(550).unwrap();
        let left = read_all(&log, 100);
        assert!(wal::file_numbers(dir.path()).unwrap().len() < before);
        assert!(left.first().unwrap() > &1, "{left:?}");
        assert_eq!(*left.last().unwrap(), 24);
        assert!(left.windows(2).all(|w| w[1] == w[0] + 1), "contiguous: {left:?}");
        // Every record committed at or after the cutoff is kept.
        assert!(*left.first().unwrap() <= 13, "{left:?}");
        assert!(log.read(start, 10).unwrap().is_none(), "a position in a deleted file");
    }
}
