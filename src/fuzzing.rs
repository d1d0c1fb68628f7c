//! Entry points for the fuzz targets in `fuzz/` and for the test that
//! replays their corpus on stable (`tests/it/fuzz_corpus.rs`). Not a stable
//! API.
//!
//! Each takes arbitrary bytes and must return, with a value or a clear
//! error, without a panic, a hang or an allocation the input's size does
//! not bound. Each reads its input the way Cellar reads that kind of data
//! from disk or from a user: a WAL file, a manifest or catalog version, a
//! segment file (its footer, a point get and a scan), a memcomparable key,
//! an NDJSON operation, an SQL statement (planned, not run: a fuzzer must
//! not write files through `COPY`).

use std::path::Path;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::model::key::KeyRange;
use crate::model::types::PkType;
use crate::segment::{ReadChecks, Segment, SegmentCursor, SegmentMeta};

/// A WAL file, as the newest file (torn tail allowed) and as an older one.
pub fn wal_file(data: &[u8]) {
    for is_last in [true, false] {
        let _ = crate::wal::read_file(Path::new("wal/00000000000000000001.log"), data, is_last);
    }
}

/// A manifest or catalog version file.
pub fn manifest(data: &[u8]) {
    let path = object_store::path::Path::from("tables/1/manifest/00000000000000000001.json");
    let _ = crate::manifest::decode::<crate::manifest::TableManifest>(&path, data);
    let _ = crate::manifest::decode::<serde_json::Value>(&path, data);
}

/// A memcomparable key under several key layouts.
pub fn key(data: &[u8]) {
    use PkType::*;
    for types in [
        &[Integer][..],
        &[String],
        &[Binary],
        &[String, Integer],
        &[Binary, String, Integer, Integer],
    ] {
        let _ = crate::model::key::decode_key(data, types);
    }
}

/// One NDJSON operation line for a table `(card INTEGER, order STRING)`.
pub fn ndjson_op(data: &[u8]) {
    let schema = crate::TableSchema::new("t")
        .pk("card", PkType::Integer)
        .pk("order", PkType::String);
    let _ = crate::cli::json::parse_op(&schema, &String::from_utf8_lossy(data));
}

/// The runtime the async targets run on (one per fuzzing thread).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// Restores the default panic hook once. libfuzzer-sys's hook aborts on
/// every panic, also one that Cellar catches on purpose (a panic inside
/// the Parquet reader on a damaged file becomes a corruption error); a
/// panic that escapes an entry point still aborts the fuzzer.
fn default_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| drop(std::panic::take_hook()));
}

/// A segment file without checksums (so that the decoders, not the
/// checksums, meet the damage): the whole-file check, a point get of a few
/// keys and a scan, through the object store.
pub fn segment(data: &[u8]) {
    default_panic_hook();
    let _ = crate::segment::verify_file("s.parquet", None, Bytes::copy_from_slice(data));
    let store = Arc::new(object_store::memory::InMemory::new());
    let meta = SegmentMeta {
        id: 1,
        path: "s.parquet".into(),
        size_bytes: data.len() as u64,
        min_key: String::new(),
        max_key: "ffffffffffffffff".into(),
        num_keys: 0,
        num_rows: 0,
        min_seq: 0,
        max_seq: 0,
        columns: Vec::new(),
        value_counts: Vec::new(),
        dead_keys: None,
        max_ts: None,
        run: None,
        checksum: None,
    };
    runtime().block_on(async {
        use object_store::ObjectStoreExt;
        if store
            .put(
                &object_store::path::Path::from("s.parquet"),
                Bytes::copy_from_slice(data).into(),
            )
            .await
            .is_err()
        {
            return;
        }
        let seg = Arc::new(Segment::new(meta, store, None, ReadChecks::VerifyOrLegacy));
        for key in [&b""[..], b"\x80\x00\x00\x00\x00\x00\x00\x01", b"\xff"] {
            let _ = seg.get(key, None).await;
        }
        let mut cursor = SegmentCursor::new(seg, KeyRange::all(), false, None);
        // A damaged file may claim any number of rows: stop after a few chunks.
        for _ in 0..64 {
            match cursor.next_chunk().await {
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    });
}

/// An SQL statement, planned (`EXPLAIN`) against a database with one table
/// `t(k BIGINT, v DOUBLE, s VARCHAR)`.
pub fn sql(data: &[u8]) {
    // The database's background work needs a runtime that outlives it.
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    static SESSION: OnceLock<(TempDir, crate::sql::SqlSession)> = OnceLock::new();
    let Ok(text) = std::str::from_utf8(data) else { return };
    // `EXPLAIN ANALYZE` runs its statement (a `COPY ... TO` would write
    // files anywhere): only plans are fuzzed.
    if text.to_ascii_lowercase().contains("analyze") {
        return;
    }
    let rt = RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    });
    let (_, sess) = SESSION.get_or_init(|| {
        let dir = TempDir::new();
        let sess = rt.block_on(async {
            let db = crate::Database::open(&dir.0).await.expect("open a fuzzing database");
            let sess = crate::sql::SqlSession::new(db);
            sess.execute("CREATE TABLE t (k BIGINT, v DOUBLE, s VARCHAR, PRIMARY KEY (k))")
                .await
                .expect("create the fuzzing table");
            sess
        });
        (dir, sess)
    });
    let stmt = format!("EXPLAIN {text}");
    // Parse here first, on this thread: the session gives a slow parse up
    // after its deadline and leaves it running on a thread of its own,
    // where the fuzzer's timeout would never see it.
    if crate::sql::check_name_chains(&stmt).is_ok() {
        let _ = datafusion::sql::parser::DFParser::parse_sql_with_dialect(
            &stmt,
            &datafusion::sql::sqlparser::dialect::GenericDialect {},
        );
    }
    let _ = rt.block_on(sess.execute(&stmt));
}

/// A directory under the system's temporary directory for this process's
/// fuzzing session, which lives as long as the process: it is not removed
/// on exit, so each new one removes those of processes that are gone.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> Self {
        let root = std::env::temp_dir().join("cellar-fuzz-sql");
        #[cfg(target_os = "linux")]
        for e in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let pid = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok());
            if pid.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists()) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let p = root.join(std::process::id().to_string());
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }
}
