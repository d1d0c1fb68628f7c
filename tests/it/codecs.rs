//! Segment codecs: flushes keep LZ4 on the typed key leaves, `__pk` and
//! `__cells` and store the value leaves as encoded (LZ4 on request);
//! compaction outputs put ZSTD on the value leaves, and on `__pk` and
//! `__cells`, when asked. Files of every mix read the same through point
//! reads, range reads and SQL, before and after a reopen.

use std::sync::Arc;

use cellar::*;
use parquet::basic::Compression;

use crate::common::*;
use crate::compaction::{manual, put_range, three_versions, three_versions_kept, walkdir};

/// The typed key leaves of `card_order_table`: LZ4 in every segment.
const TYPED_KEYS: [&str; 2] = ["card", "order"];

/// What point reads decode: LZ4, or ZSTD in compaction outputs under
/// `compaction_point_zstd_level`.
const POINT_LEAVES: [&str; 2] = ["__pk", "__cells"];

/// `value_compression: Lz4` puts LZ4 on every column of a flush, and the
/// rows read back the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lz4_value_columns_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let opts = DbOptions {
        value_compression: ValueCompression::Lz4,
        ..manual(&clock)
    };
    let db = Database::open_with(dir.path(), opts).await.unwrap();
    let t = card_order_table(&db, TableOptions::default()).await;
    put_range(&t, 0..200, "x").await;
    let before = scan_all(&t, GetRange::new()).await;
    t.flush().await.unwrap();
    let codecs = chunk_codecs(dir.path());
    assert!(codecs.len() > 4);
    assert!(codecs.iter().all(|(_, c)| *c == Compression::LZ4_RAW), "{codecs:?}");
    assert_eq!(scan_all(&t, GetRange::new()).await, before);
    drop(t);
    db.close().await.unwrap();
}

/// The codec of every column chunk of every segment file under `dir`:
/// (top-level column, codec), file by file.
fn chunk_codecs_by_file(dir: &std::path::Path) -> Vec<Vec<(String, Compression)>> {
    use parquet::file::reader::FileReader;
    let mut out = Vec::new();
    for f in walkdir(dir.join("tables")) {
        let r = parquet::file::serialized_reader::SerializedFileReader::new(std::fs::File::open(f).unwrap()).unwrap();
        let mut file = Vec::new();
        for rg in r.metadata().row_groups() {
            for c in rg.columns() {
                file.push((c.column_path().parts()[0].clone(), c.compression()));
            }
        }
        out.push(file);
    }
    out
}

/// [`chunk_codecs_by_file`], all files together.
fn chunk_codecs(dir: &std::path::Path) -> Vec<(String, Compression)> {
    chunk_codecs_by_file(dir).into_iter().flatten().collect()
}

/// `rounds` flushes over the same 700 keys of `t`, one per round: puts,
/// updates with explicit versions, column deletes and row deletes.
async fn rewrite_rounds(t: &Table, rounds: std::ops::Range<i64>) {
    for round in rounds {
        for i in 0..300i64 {
            let key = pk(i % 100, &format!("o{}", i % 7));
            match (i + round) % 5 {
                0 => t.delete_row(DeleteRow::new(key)).await.map(|_| ()).unwrap(),
                1 => t
                    .update_row(UpdateRow::new(key).delete_all("s"))
                    .await
                    .map(|_| ())
                    .unwrap(),
                2 => t
                    .update_row(UpdateRow::new(key).put_at("n", i * 10 + round, T0 + round))
                    .await
                    .map(|_| ())
                    .unwrap(),
                _ => t
                    .put_row(
                        PutRow::new(key)
                            .column("s", format!("v{round}-{i}"))
                            .column("n", i)
                            .column("d", i as f64 / 3.0)
                            .column("b", i % 2 == 0),
                    )
                    .await
                    .map(|_| ())
                    .unwrap(),
            }
        }
        t.flush().await.unwrap();
    }
}

/// Every row of `want` read back by a point read of its key (through
/// `__cells`), up to 3 versions, and SQL counts as many rows.
async fn points_and_sql_read(db: &Database, t: &Table, want: &[Row]) {
    for r in want {
        let got = t
            .get_row(GetRow::new(r.primary_key.clone()).options(ReadOptions {
                max_versions: Some(3),
                ..Default::default()
            }))
            .await
            .unwrap()
            .row;
        assert_eq!(got.as_ref(), Some(r));
    }
    let sql = cellar::sql::SqlSession::new(db.clone());
    let n = sql.query("SELECT count(*) AS n FROM t").await.unwrap();
    let n = arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(n[0].column(0)).value(0);
    assert_eq!(n as usize, want.len());
}

/// Small pages and row groups, so that a few hundred keys span many.
fn small_pages(clock: &Arc<ManualClock>) -> DbOptions {
    DbOptions {
        row_group_rows: 64,
        page_bytes: 64,
        compacted_page_bytes: 512,
        ..manual(clock)
    }
}

/// `DbOptions::compaction_zstd_level`: compaction outputs compress their
/// value and system columns with ZSTD and keep the typed key leaves,
/// `__pk` and `__cells` under LZ4; overwrites, deletes and versions read
/// the same before and after, and after a reopen. Out-of-range levels of
/// it and of `compaction_point_zstd_level` are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zstd_compaction_outputs_read_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let opts = || DbOptions {
        compaction_zstd_level: Some(3),
        ..small_pages(&clock)
    };
    let db = Database::open_with(dir.path(), opts()).await.unwrap();
    let t = card_order_table(&db, three_versions_kept()).await;
    rewrite_rounds(&t, 0..3).await;
    let all = || three_versions(GetRange::new());
    let before = scan_all(&t, all()).await;
    assert!(before.len() > 50, "{} rows", before.len());
    // Flushes: the key leaves, `__pk` and `__cells` LZ4, the value and
    // system leaves as encoded (`DbOptions::value_compression`).
    for (col, codec) in chunk_codecs(dir.path()) {
        let lz4 = TYPED_KEYS.contains(&col.as_str()) || POINT_LEAVES.contains(&col.as_str());
        let want = if lz4 {
            Compression::LZ4_RAW
        } else {
            Compression::UNCOMPRESSED
        };
        assert_eq!(codec, want, "flushed column {col}");
    }
    t.compact().await.unwrap();
    assert_eq!(scan_all(&t, all()).await, before, "after the compaction");
    let codecs = chunk_codecs(dir.path());
    assert!(!codecs.is_empty());
    for (col, codec) in &codecs {
        let lz4 = TYPED_KEYS.contains(&col.as_str()) || POINT_LEAVES.contains(&col.as_str());
        assert_eq!(matches!(codec, Compression::ZSTD(_)), !lz4, "column {col} is {codec:?}");
    }
    points_and_sql_read(&db, &t, &before).await;
    drop(t);
    db.close().await.unwrap();
    let db = Database::open_with(dir.path(), opts()).await.unwrap();
    let t = db.table("t").unwrap();
    assert_eq!(scan_all(&t, all()).await, before, "after a reopen");
    drop(t);
    db.close().await.unwrap();

    for level in [0, 23] {
        for point in [false, true] {
            let other = tempfile::tempdir().unwrap();
            let mut o = DbOptions::default();
            let name = if point {
                o.compaction_point_zstd_level = Some(level);
                "compaction_point_zstd_level"
            } else {
                o.compaction_zstd_level = Some(level);
                "compaction_zstd_level"
            };
            let Err(err) = Database::open_with(other.path(), o).await else {
                panic!("{name} {level} was accepted")
            };
            assert!(
                err.to_string().contains(&format!("DbOptions::{name} {level}")) && err.to_string().contains("1 to 22"),
                "{err}"
            );
        }
    }
}

/// A table whose compacted segments hold `__pk` and `__cells` under LZ4
/// (the default) and, over them, a compaction output of a database opened
/// with `compaction_point_zstd_level`, under ZSTD: point reads, range
/// reads and SQL give the same rows through the mix, after a reopen, and
/// once a full compaction has rewritten everything under ZSTD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_leaves_of_either_codec_read_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let opts = |point| DbOptions {
        compaction_point_zstd_level: point,
        ..small_pages(&clock)
    };
    let db = Database::open_with(dir.path(), opts(None)).await.unwrap();
    let t = card_order_table(&db, three_versions_kept()).await;
    rewrite_rounds(&t, 0..3).await;
    t.compact().await.unwrap();
    for (col, codec) in chunk_codecs(dir.path()) {
        assert!(
            !matches!(codec, Compression::ZSTD(_)),
            "column {col} is {codec:?} under compaction_point_zstd_level None"
        );
    }
    drop(t);
    db.close().await.unwrap();

    let db = Database::open_with(dir.path(), opts(Some(1))).await.unwrap();
    let t = db.table("t").unwrap();
    rewrite_rounds(&t, 3..6).await;
    let all = || three_versions(GetRange::new());
    let want = scan_all(&t, all()).await;
    assert!(want.len() > 50, "{} rows", want.len());
    // The three new flushes merged into one run over the LZ4 one.
    assert!(t.compact_newest(3).await.unwrap());
    let cells: Vec<bool> = chunk_codecs_by_file(dir.path())
        .iter()
        .filter_map(|f| {
            f.iter()
                .find(|(c, _)| c == "__cells")
                .map(|(_, z)| matches!(z, Compression::ZSTD(_)))
        })
        .collect();
    assert!(
        cells.len() >= 2 && cells.contains(&true) && cells.contains(&false),
        "{cells:?}"
    );
    assert_eq!(scan_all(&t, all()).await, want, "over segments of both codecs");
    points_and_sql_read(&db, &t, &want).await;
    drop(t);
    db.close().await.unwrap();

    let db = Database::open_with(dir.path(), opts(Some(1))).await.unwrap();
    let t = db.table("t").unwrap();
    assert_eq!(scan_all(&t, all()).await, want, "after a reopen");
    points_and_sql_read(&db, &t, &want).await;
    t.compact().await.unwrap();
    for (col, codec) in chunk_codecs(dir.path()) {
        if POINT_LEAVES.contains(&col.as_str()) {
            assert!(matches!(codec, Compression::ZSTD(_)), "column {col} is {codec:?}");
        }
    }
    assert_eq!(scan_all(&t, all()).await, want, "after the full compaction");
    points_and_sql_read(&db, &t, &want).await;
    drop(t);
    db.close().await.unwrap();
}
