//! Appending records, rotating files and deleting obsolete ones.
//!
//! Invariants: a record is appended whole or cut back out (after a failed
//! append); a file is deleted only when every write in it is flushed; after
//! a failed fsync no further write is acknowledged.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Durability, MAGIC, MAGIC_PREALLOCATED, file_name, record_header};
use crate::error::{Error, Result};

/// The WAL's appender. Owned by the committer thread; not shared.
pub(crate) struct WalWriter {
    dir: PathBuf,
    durability: Durability,
    file: Box<dyn WalFile>,
    opener: Arc<dyn WalOpener>,
    number: u64,
    size: u64,
    /// Largest sequence in the current file.
    max_seq: u64,
    /// Largest sequence appended by this writer.
    appended_seq: u64,
    /// Largest sequence whose record is durable (fsynced): every record
    /// this writer appended up to it is.
    durable_seq: u64,
    /// Older files: (number, largest sequence in them).
    sealed: Vec<(u64, u64)>,
    last_sync: Instant,
    dirty: bool,
    file_limit: u64,
    /// The current file was preallocated (records are written in place,
    /// zeros after them).
    preallocated: bool,
    /// Set when a failure left the file in a state this writer cannot
    /// vouch for (a failed fsync, or an append it could not roll back):
    /// the caller must stop writing until the database is reopened.
    poisoned: bool,
}

impl WalWriter {
    /// Starts a new file numbered after `sealed` (files found by recovery).
    pub fn create(
        dir: &Path,
        sealed: Vec<(u64, u64)>,
        durability: Durability,
        file_limit: u64,
        opener: Arc<dyn WalOpener>,
    ) -> Result<Self> {
        let number = sealed.iter().map(|(n, _)| *n + 1).max().unwrap_or(1);
        let (file, preallocated) = open_new(&*opener, dir, number, preallocation(durability, file_limit))?;
        Ok(WalWriter {
            dir: dir.to_path_buf(),
            durability,
            file,
            opener,
            number,
            size: 0,
            max_seq: 0,
            appended_seq: 0,
            durable_seq: 0,
            sealed,
            last_sync: Instant::now(),
            dirty: false,
            file_limit,
            preallocated,
            poisoned: false,
        })
    }

    /// Appends one record holding entries up to `max_seq`, and makes it as
    /// durable as the durability setting says before returning.
    pub fn append(&mut self, payload: &[u8], max_seq: u64) -> Result<()> {
        if self.size >= self.file_limit {
            self.rotate()?;
        }
        // Header and payload as two appends: no copy of the group (up to
        // 8 MiB) into a fresh buffer, whose new pages the kernel had to zero
        // on every group. A crash between the two leaves a torn record.
        let header = record_header(payload)?;
        if let Err(e) = self.file.append(&header).and_then(|_| self.file.append(payload)) {
            // Part of the record may be in the file: cut it back to the
            // last whole record, so that the group is simply not logged and
            // later groups can go on (a full disk may get space back). If
            // that fails too, the file's end is unknown.
            let whole = MAGIC.len() as u64 + self.size;
            if self.file.truncate(whole).is_err() {
                self.poisoned = true;
            }
            return Err(self.err("append to", e));
        }
        self.size += (header.len() + payload.len()) as u64;
        self.max_seq = self.max_seq.max(max_seq);
        self.appended_seq = self.appended_seq.max(max_seq);
        self.dirty = true;
        match self.durability {
            Durability::Sync => self.sync()?,
            Durability::IntervalMs(ms) if self.last_sync.elapsed() >= Duration::from_millis(ms) => self.sync()?,
            _ => {}
        }
        Ok(())
    }

    /// Fsyncs pending appends (used by the interval timer and on close).
    pub fn sync(&mut self) -> Result<()> {
        if self.dirty {
            if let Err(e) = self.file.sync() {
                // After a failed fsync the kernel may have dropped the
                // pages it could not write: nothing since the last good
                // fsync can be vouched for.
                self.poisoned = true;
                return Err(self.err("fsync", e));
            }
            self.dirty = false;
            if crate::crash_point::sync_log_on() {
                let path = self.dir.join(file_name(self.number));
                crate::crash_point::synced(&path, Some(MAGIC.len() as u64 + self.size));
            }
        }
        self.durable_seq = self.appended_seq;
        self.last_sync = Instant::now();
        Ok(())
    }

    /// The largest sequence this writer appended whose record is durable
    /// (0: none yet). Under `Durability::Sync` it is the last appended;
    /// otherwise it follows the syncs (timer, rotation, an explicit one).
    pub fn durable_seq(&self) -> u64 {
        self.durable_seq
    }

    /// Cuts a preallocated file back to its records, durably, so that a
    /// sealed file ends with its last record (only the newest file may
    /// end in zeros).
    fn trim(&mut self) -> Result<()> {
        if !self.preallocated || self.poisoned {
            return Ok(());
        }
        let len = MAGIC.len() as u64 + self.size;
        self.file
            .truncate(len)
            .and_then(|_| self.file.sync())
            .map_err(|e| self.err("cut back the preallocated", e))?;
        self.preallocated = false;
        if crate::crash_point::sync_log_on() {
            let path = self.dir.join(file_name(self.number));
            crate::crash_point::synced(&path, Some(len));
        }
        Ok(())
    }

    /// Syncs the log and cuts a preallocated file back to its records (a
    /// clean close: the next open reads no zeros).
    pub fn finish(&mut self) -> Result<()> {
        self.sync()?;
        self.trim()
    }

    /// Whether a failure left the file in a state that forbids further
    /// appends (see `poisoned`).
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Seals the current file and starts the next (on failure the current
    /// file stays the current one).
    pub fn rotate(&mut self) -> Result<()> {
        if self.size == 0 {
            return Ok(());
        }
        self.sync()?;
        self.trim()?;
        let (file, preallocated) = open_new(
            &*self.opener,
            &self.dir,
            self.number + 1,
            preallocation(self.durability, self.file_limit),
        )?;
        self.sealed.push((self.number, self.max_seq));
        self.number += 1;
        self.file = file;
        self.preallocated = preallocated;
        crate::crash_point::hit("wal.switched");
        self.size = 0;
        self.max_seq = 0;
        Ok(())
    }

    /// Deletes sealed files whose every entry has a sequence below
    /// `min_unflushed` (everything in them is in segments or obsolete).
    pub fn delete_obsolete(&mut self, min_unflushed: u64) -> Result<()> {
        let dir = self.dir.clone();
        let mut keep = Vec::new();
        for (number, max_seq) in std::mem::take(&mut self.sealed) {
            if max_seq < min_unflushed {
                let path = dir.join(file_name(number));
                if let Err(e) = std::fs::remove_file(&path)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    keep.push((number, max_seq));
                    return Err(Error::io(format!("delete WAL file {}", path.display()), e));
                }
            } else {
                keep.push((number, max_seq));
            }
        }
        self.sealed = keep;
        Ok(())
    }

    pub fn current_size(&self) -> u64 {
        self.size
    }

    /// The current file's number and the offset just past its last record.
    pub fn position(&self) -> (u64, usize) {
        (self.number, MAGIC.len() + self.size as usize)
    }

    /// Sealed files: (number, largest sequence in them).
    pub fn sealed(&self) -> &[(u64, u64)] {
        &self.sealed
    }

    fn err(&self, what: &str, e: std::io::Error) -> Error {
        Error::io(
            format!("{what} WAL file {}", self.dir.join(file_name(self.number)).display()),
            e,
        )
    }
}

/// How many bytes of zeros a new WAL file is allocated at a time, ahead
/// of its appends: only when every append is synced before the next (see
/// the module docs of `wal`). A few MiB: an fsync records a new length
/// once per allocation, not per append, and a database holds at most this
/// much of zeros on disk.
fn preallocation(durability: Durability, file_limit: u64) -> Option<u64> {
    (durability == Durability::Sync).then_some(file_limit.clamp(MAGIC.len() as u64, PREALLOCATION_BYTES))
}

/// See [`preallocation`].
const PREALLOCATION_BYTES: u64 = 4 << 20;

/// Creates WAL file `number`, preallocated to `prealloc` bytes where the
/// opener can; true when it was.
fn open_new(
    opener: &dyn WalOpener,
    dir: &Path,
    number: u64,
    prealloc: Option<u64>,
) -> Result<(Box<dyn WalFile>, bool)> {
    let path = dir.join(file_name(number));
    let err = |e| Error::io(format!("create WAL file {}", path.display()), e);
    let preallocated = match prealloc {
        Some(bytes) => opener.create_preallocated(&path, bytes).map_err(err)?,
        None => None,
    };
    let (file, preallocated) = match preallocated {
        Some(mut f) => {
            // The magic is made durable at once: a crash before the first
            // record then leaves a file that reads as empty, not zeros
            // without a magic.
            f.append(MAGIC_PREALLOCATED).and_then(|_| f.sync()).map_err(err)?;
            crate::crash_point::created(&path);
            if crate::crash_point::sync_log_on() {
                crate::crash_point::synced(&path, Some(MAGIC.len() as u64));
            }
            (f, true)
        }
        None => {
            let f = opener
                .create(&path)
                .and_then(|mut f| f.append(MAGIC).map(|_| f))
                .map_err(err)?;
            // The magic reaches the disk with the first record's sync; a
            // crash before that leaves a file that is empty or holds part
            // of the magic, which recovery reads as empty.
            crate::crash_point::created(&path);
            (f, false)
        }
    };
    sync_dir(dir)?;
    Ok((file, preallocated))
}

/// An open WAL file: appends and syncs. Behind a trait so that tests can
/// inject I/O errors (a full disk, a failing fsync).
pub trait WalFile: Send {
    /// Appends `bytes` at the end of the file.
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    /// Makes every append so far durable (`fdatasync`).
    fn sync(&mut self) -> std::io::Result<()>;
    /// Cuts the file back to `len` bytes (after a failed append). Without
    /// it, a failed append stops the database's writes until it is reopened.
    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        let _ = len;
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this WAL file cannot be truncated",
        ))
    }
}

/// Creates WAL files. The default, [`OsWalOpener`], uses the file system.
pub trait WalOpener: Send + Sync + std::fmt::Debug {
    /// Creates the WAL file `path` (it does not exist yet).
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn WalFile>>;

    /// Creates the WAL file `path` with `bytes` of zeros allocated to it
    /// (its length `bytes`), appends written over them in order from the
    /// start, and `bytes` more allocated whenever they reach the end;
    /// `None` where this opener cannot (the file is then made by
    /// [`Self::create`]). The default cannot.
    fn create_preallocated(&self, path: &Path, bytes: u64) -> std::io::Result<Option<Box<dyn WalFile>>> {
        let _ = (path, bytes);
        Ok(None)
    }
}

/// WAL files on the operating system's file system.
#[derive(Debug, Default)]
pub struct OsWalOpener;

impl WalOpener for OsWalOpener {
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn WalFile>> {
        let f = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Box::new(f))
    }

    fn create_preallocated(&self, path: &Path, bytes: u64) -> std::io::Result<Option<Box<dyn WalFile>>> {
        let file = OpenOptions::new().create(true).write(true).truncate(true).open(path)?;
        if !allocate(&file, 0, bytes) {
            // Not supported here (or no room for it): appended.
            return Ok(None);
        }
        Ok(Some(Box::new(Preallocated {
            file,
            pos: 0,
            allocated: bytes,
            step: bytes,
        })))
    }
}

/// Allocates `len` bytes of `file` from `offset` (reading as zeros, the
/// file's length extended to cover them).
#[cfg(target_os = "linux")]
fn allocate(file: &File, offset: u64, len: u64) -> bool {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return false;
    };
    // SAFETY: a plain system call on an open descriptor this function
    // borrows; mode 0 allocates the range and extends the file's length.
    unsafe { libc::fallocate(file.as_raw_fd(), 0, offset, len) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn allocate(_: &File, _: u64, _: u64) -> bool {
    false
}

/// A preallocated WAL file: appends are written in place at `pos`, over
/// zeros allocated `step` bytes at a time.
struct Preallocated {
    file: File,
    pos: u64,
    /// The file's allocated length.
    allocated: u64,
    step: u64,
}

impl WalFile for Preallocated {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let end = self.pos + bytes.len() as u64;
        if end > self.allocated {
            // The next stretch of zeros; where that fails, the write below
            // extends the file as an append would.
            let to = end.max(self.allocated + self.step);
            if allocate(&self.file, self.allocated, to - self.allocated) {
                self.allocated = to;
            }
        }
        self.file.write_all_at(bytes, self.pos)?;
        self.pos += bytes.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        // The zeros after `len` go too: a cut-back file ends with its
        // records, and later appends extend it.
        self.file.set_len(len)?;
        self.pos = len;
        self.allocated = len;
        Ok(())
    }
}

impl WalFile for File {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.write_all(bytes)
    }

    fn sync(&mut self) -> std::io::Result<()> {
        self.sync_data()
    }

    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        // Appends go to the end whatever the position: no seek needed.
        self.set_len(len)
    }
}

/// Fsyncs a directory so that a file created or removed in it persists.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("fsync directory {}", dir.display()), e))?;
    crate::crash_point::synced(dir, None);
    Ok(())
}
