//! Injected object-store failures: a failed flush loses nothing, reads go
//! on, and the next flush succeeds.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use cellar::*;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, UploadPart,
};

use crate::common::*;

/// Delegates to a real store; while `fail_puts` is set every write fails,
/// and once `puts_left` (when not negative) counts down to zero too. The
/// parts and completion of a multipart upload count as writes. An upload
/// can also be held: its completion waits until released.
#[derive(Debug)]
pub struct FailingStore {
    inner: Arc<dyn object_store::ObjectStore>,
    faults: Arc<Faults>,
}

#[derive(Debug)]
struct Faults {
    fail_puts: AtomicBool,
    /// Multipart uploads (compaction outputs) fail, other writes do not.
    fail_uploads: AtomicBool,
    puts_left: AtomicI64,
    /// The next multipart upload started waits at its completion for a
    /// permit of `release`.
    hold_next_upload: AtomicBool,
    release: tokio::sync::Semaphore,
}

impl FailingStore {
    pub fn over(inner: Arc<dyn object_store::ObjectStore>) -> Self {
        FailingStore {
            inner,
            faults: Arc::new(Faults {
                fail_puts: AtomicBool::new(false),
                fail_uploads: AtomicBool::new(false),
                puts_left: AtomicI64::new(-1),
                hold_next_upload: AtomicBool::new(false),
                release: tokio::sync::Semaphore::new(0),
            }),
        }
    }

    /// The next multipart upload (a compaction output) completes only
    /// after [`Self::release_upload`].
    pub fn hold_next_upload(&self) {
        self.faults.hold_next_upload.store(true, Ordering::SeqCst);
    }

    pub fn release_upload(&self) {
        self.faults.release.add_permits(1);
    }

    /// The next `n` writes succeed, then every write fails.
    pub fn fail_after(&self, n: i64) {
        self.faults.puts_left.store(n, Ordering::SeqCst);
    }

    /// Every multipart upload (a compaction output) fails while set.
    pub fn fail_uploads(&self, fail: bool) {
        self.faults.fail_uploads.store(fail, Ordering::SeqCst);
    }

    pub fn fail_all(&self, fail: bool) {
        self.faults.fail_puts.store(fail, Ordering::SeqCst);
    }

    pub fn heal(&self) {
        self.fail_all(false);
        self.faults.puts_left.store(-1, Ordering::SeqCst);
    }

    fn check(&self) -> object_store::Result<()> {
        self.faults.check()
    }
}

impl fmt::Display for FailingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FailingStore({})", self.inner)
    }
}

impl Faults {
    fn check_upload(&self) -> object_store::Result<()> {
        if self.fail_uploads.load(Ordering::SeqCst) {
            return Err(object_store::Error::Generic {
                store: "FailingStore",
                source: "injected upload failure".into(),
            });
        }
        self.check()
    }

    fn check(&self) -> object_store::Result<()> {
        let left = self
            .puts_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n > 0).then(|| n - 1))
            .unwrap_or_else(|n| n);
        if self.fail_puts.load(Ordering::SeqCst) || left == 0 {
            return Err(object_store::Error::Generic {
                store: "FailingStore",
                source: "injected write failure".into(),
            });
        }
        Ok(())
    }
}

/// A multipart upload of the real store whose parts and completion fail
/// as the store's writes do.
#[derive(Debug)]
struct FailingUpload {
    inner: Box<dyn MultipartUpload>,
    faults: Arc<Faults>,
    held: bool,
}

#[async_trait::async_trait]
impl MultipartUpload for FailingUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        match self.faults.check_upload() {
            Ok(()) => self.inner.put_part(data),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        if self.held {
            self.faults.release.acquire().await.expect("never closed").forget();
        }
        self.faults.check_upload()?;
        self.inner.complete().await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}

#[async_trait::async_trait]
impl ObjectStore for FailingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.check()?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.check()?;
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(FailingUpload {
            inner,
            faults: self.faults.clone(),
            held: self.faults.hold_next_upload.swap(false, Ordering::SeqCst),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
        self.check()?;
        self.inner.copy_opts(from, to, options).await
    }
}

/// A data directory whose files go through a [`FailingStore`], and the
/// options that open a database on it.
pub(crate) fn failing_store() -> (tempfile::TempDir, Arc<FailingStore>, impl Fn() -> DbOptions) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let local = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let store = Arc::new(FailingStore::over(Arc::new(local)));
    let s = store.clone();
    (dir, store, move || {
        DbOptions::default().clock(clock.clone()).object_store(s.clone())
    })
}

#[tokio::test]
async fn a_failed_flush_loses_nothing_and_the_next_one_succeeds() {
    let (dir, store, options) = failing_store();
    let db = Database::open_with(dir.path(), options()).await.unwrap();
    let t = card_order_table(&db, TableOptions::default()).await;
    for i in 0..50 {
        t.put_row(PutRow::new(pk(i, "a")).column("n", i)).await.unwrap();
    }
    t.flush().await.unwrap();
    for i in 50..100 {
        t.put_row(PutRow::new(pk(i, "a")).column("n", i)).await.unwrap();
    }
    store.fail_all(true);
    let err = t.flush().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert!(err.message().contains("injected"), "{}", err.message());
    // the frozen memtable still serves reads, and writes go on
    assert_eq!(scan_all(&t, GetRange::new()).await.len(), 100);
    t.put_row(PutRow::new(pk(100, "a")).column("n", 100)).await.unwrap();
    let failed_compaction = t.compact().await;
    assert!(failed_compaction.is_err());
    assert_eq!(scan_all(&t, GetRange::new()).await.len(), 101);

    // a restart while flushes fail: the WAL still has everything
    drop(t);
    db.close().await.unwrap();
    let db = Database::open_with(dir.path(), options()).await.unwrap();
    let t = db.table("t").unwrap();
    assert_eq!(scan_all(&t, GetRange::new()).await.len(), 101);

    store.fail_all(false);
    t.flush().await.unwrap();
    t.compact().await.unwrap();
    assert_eq!(t.stats().segments, 1);
    drop(t);
    db.close().await.unwrap();
    let db = Database::open_with(dir.path(), options()).await.unwrap();
    let rows = scan_all(&db.table("t").unwrap(), GetRange::new()).await;
    assert_eq!(rows.len(), 101);
    assert_eq!(rows[100].latest("n"), Some(&Value::Integer(100)));
}

/// A flush larger than one upload part streams to the store: when its
/// upload fails, the flush fails and nothing is lost (reads, a reopen);
/// once uploads work, the same memtable flushes and reads back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_flush_streams_and_a_failed_upload_loses_nothing() {
    use rand::{Rng, SeedableRng};
    let (dir, store, options) = failing_store();
    let db = Database::open_with(dir.path(), options()).await.unwrap();
    let t = card_order_table(&db, TableOptions::default()).await;
    // ~24 MiB of segment (incompressible values, then `__cells`' copy).
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let blob = |rng: &mut rand::rngs::StdRng| -> Vec<u8> { (0..4096).map(|_| rng.random()).collect() };
    let mut want = Vec::new();
    for i in 0..3000i64 {
        let b = blob(&mut rng);
        t.put_row(PutRow::new(pk(i, "a")).column("b", b.clone())).await.unwrap();
        want.push(b);
    }
    let check = |rows: Vec<Row>| {
        assert_eq!(rows.len(), want.len());
        for (r, b) in rows.iter().zip(&want) {
            assert_eq!(r.latest("b"), Some(&Value::Binary(b.clone())));
        }
    };
    store.fail_uploads(true);
    let err = t.flush().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    assert_eq!(t.stats().segments, 0);
    check(scan_all(&t, GetRange::new()).await);
    store.fail_uploads(false);
    t.flush().await.unwrap();
    let s = t.stats();
    assert_eq!(s.segments, 1);
    assert!(
        s.flush_bytes > 8 << 20,
        "{} bytes flushed: not past one upload part",
        s.flush_bytes
    );
    check(scan_all(&t, GetRange::new()).await);
    drop(t);
    db.close().await.unwrap();
    let db = Database::open_with(dir.path(), options()).await.unwrap();
    check(scan_all(&db.table("t").unwrap(), GetRange::new()).await);
    db.close().await.unwrap();
}

/// Compactions that keep failing (a full disk, say) do not make every
/// write group sit out the run-count stall: writes go on at once, and the
/// runs are merged once compactions succeed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_compactions_do_not_stall_writers() {
    let (dir, store, options) = failing_store();
    let opts = DbOptions {
        compaction_trigger_runs: 2,
        compaction_stall_runs: 3,
        ..options()
    };
    let db = Database::open_with(dir.path(), opts).await.unwrap();
    let t = card_order_table(&db, TableOptions::default()).await;
    store.fail_uploads(true);
    for f in 0..8i64 {
        // Flushes that overlap one another: compactions rewrite them (ones
        // side by side would be carried over without a write).
        t.put_row(PutRow::new(pk(f, "a")).column("n", f)).await.unwrap();
        t.put_row(PutRow::new(pk(200 - f, "a")).column("n", f)).await.unwrap();
        t.flush().await.unwrap();
    }
    let waited = std::time::Instant::now();
    while t.stats().last_compaction_error.is_none() {
        assert!(waited.elapsed() < Duration::from_secs(20), "no compaction failed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(t.stats().runs > 3, "{} runs", t.stats().runs);
    // Each of these waited 30 s before (the stall's limit).
    let start = std::time::Instant::now();
    for i in 100..110i64 {
        t.put_row(PutRow::new(pk(i, "a")).column("n", i)).await.unwrap();
    }
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "10 writes took {:?} while compactions failed",
        start.elapsed()
    );
    store.fail_uploads(false);
    t.compact().await.unwrap();
    assert_eq!(t.stats().runs, 1);
    assert_eq!(scan_all(&t, GetRange::new()).await.len(), 26);
    drop(t);
    db.close().await.unwrap();
}

/// A flush whose segment is written but whose manifest commit fails (the
/// put after the segment's): the flush fails, nothing is lost or doubled,
/// the segment no manifest names is deleted at the next open, and the next
/// flush commits.
#[tokio::test]
async fn a_failed_manifest_commit_fails_the_flush_and_loses_nothing() {
    let (dir, store, options) = failing_store();
    let db = Database::open_with(dir.path(), options()).await.unwrap();
    let t = card_order_table(&db, TableOptions::default()).await;
    for i in 0..50 {
        t.put_row(PutRow::new(pk(i, "a")).column("n", i)).await.unwrap();
    }
    store.fail_after(1);
    let err = t.flush().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert!(err.message().contains("injected"), "{}", err.message());
    assert_eq!(t.stats().segments, 0);
    store.heal();
    // an overwrite after the failed commit must win over the flushed copy
    t.put_row(PutRow::new(pk(7, "a")).column("n", 700)).await.unwrap();
    assert_eq!(scan_all(&t, GetRange::new()).await.len(), 50);
    drop(t);
    db.close().await.unwrap();

    let db = Database::open_with(dir.path(), options()).await.unwrap();
    let t = db.table("t").unwrap();
    let segments_on_disk = || {
        std::fs::read_dir(dir.path().join("tables/1/segments"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    assert_eq!(
        segments_on_disk(),
        0,
        "the segment no manifest names is deleted at open"
    );
    t.flush().await.unwrap();
    let rows = scan_all(&t, GetRange::new()).await;
    assert_eq!(rows.len(), 50);
    let seven = rows.iter().find(|r| r.primary_key == pk(7, "a")).unwrap();
    assert_eq!(seven.latest("n"), Some(&Value::Integer(700)));
    drop(t);
    db.close().await.unwrap();
    assert_eq!(cellar::check(dir.path(), None).await.unwrap().damaged(), 0);
}

/// A WAL file whose appends fail while `fail` is set, after writing half
/// their bytes (as a write cut short by a full disk does); with
/// `truncatable`, it can be cut back.
#[derive(Debug)]
struct FlakyWal {
    fail: Arc<AtomicBool>,
    truncatable: bool,
}

struct FlakyFile {
    inner: std::fs::File,
    fail: Arc<AtomicBool>,
    truncatable: bool,
}

impl WalFile for FlakyFile {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            std::io::Write::write_all(&mut self.inner, &bytes[..bytes.len() / 2])?;
            return Err(std::io::Error::other("injected: no space left on device"));
        }
        std::io::Write::write_all(&mut self.inner, bytes)
    }

    fn sync(&mut self) -> std::io::Result<()> {
        self.inner.sync_data()
    }

    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        if !self.truncatable {
            return Err(std::io::Error::other("injected: truncate unsupported"));
        }
        self.inner.set_len(len)
    }
}

impl WalOpener for FlakyWal {
    fn create(&self, path: &std::path::Path) -> std::io::Result<Box<dyn WalFile>> {
        let inner = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Box::new(FlakyFile {
            inner,
            fail: self.fail.clone(),
            truncatable: self.truncatable,
        }))
    }
}

/// A database whose WAL files fail on demand (see [`FlakyWal`]), with the
/// `t` table holding cards 0..10.
async fn flaky_db(truncatable: bool) -> (tempfile::TempDir, Arc<ManualClock>, Arc<AtomicBool>, Database, Table) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let fail = Arc::new(AtomicBool::new(false));
    let opts = DbOptions {
        wal_opener: Arc::new(FlakyWal {
            fail: fail.clone(),
            truncatable,
        }),
        ..DbOptions::default().clock(clock.clone())
    };
    let db = Database::open_with(dir.path(), opts).await.unwrap();
    let t = card_order_table(&db, TableOptions::default()).await;
    for i in 0..10 {
        t.put_row(PutRow::new(pk(i, "a")).column("n", i)).await.unwrap();
    }
    (dir, clock, fail, db, t)
}

/// A failed WAL append that the WAL cannot cut back (its half-written
/// record stays) fails that write with an I/O error, stops the writer
/// (later writes are refused until reopen rather than risk acknowledging
/// what a restart would drop), and loses nothing acknowledged.
#[tokio::test]
async fn a_wal_write_error_fails_the_write_and_stops_the_writer_until_reopen() {
    let (dir, clock, fail, db, t) = flaky_db(false).await;
    fail.store(true, Ordering::SeqCst);
    let err = t.put_row(PutRow::new(pk(10, "a")).column("n", 10)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert!(err.message().contains("no space left"), "{}", err.message());
    fail.store(false, Ordering::SeqCst);
    let err = t.put_row(PutRow::new(pk(11, "a")).column("n", 11)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    assert!(err.message().contains("reopen"), "{}", err.message());
    // reads still work
    assert_eq!(scan_all(&t, GetRange::new()).await.len(), 10);
    drop(t);
    db.close().await.unwrap();

    // The half-written record ends the newest file: a torn tail, cut off.
    let db = open(dir.path(), &clock).await;
    let t = db.table("t").unwrap();
    assert_eq!(scan_all(&t, GetRange::new()).await.len(), 10);
    t.put_row(PutRow::new(pk(12, "a")).column("n", 12)).await.unwrap();
    assert_eq!(scan_all(&t, GetRange::new()).await.len(), 11);
}

/// A failed WAL append (a full disk) is cut back out of the file: that
/// write fails with an I/O error, and once space is back writes go on
/// without a reopen; a reopen then replays every acknowledged write and
/// nothing of the failed one, from the middle of the file.
#[tokio::test]
async fn a_failed_wal_append_is_cut_back_and_writes_resume_without_a_reopen() {
    let (dir, clock, fail, db, t) = flaky_db(true).await;
    fail.store(true, Ordering::SeqCst);
    for i in 10..13 {
        let err = t.put_row(PutRow::new(pk(i, "a")).column("n", i)).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Io);
        assert!(err.message().contains("no space left"), "{}", err.message());
    }
    fail.store(false, Ordering::SeqCst);
    for i in 13..20 {
        t.put_row(PutRow::new(pk(i, "a")).column("n", i)).await.unwrap();
    }
    assert_eq!(scan_all(&t, GetRange::new()).await.len(), 17);
    drop(t);
    db.close().await.unwrap();

    let db = open(dir.path(), &clock).await;
    let rows = scan_all(&db.table("t").unwrap(), GetRange::new()).await;
    let cards: Vec<i64> = rows
        .iter()
        .map(|r| match r.primary_key.columns[0].1 {
            PkValue::Integer(c) => c,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(cards, (0..10).chain(13..20).collect::<Vec<_>>());
}
