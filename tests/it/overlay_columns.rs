//! Memtable overlays hold the columns scans ask for: a query of one
//! column encodes that one, a query of others builds the overlay again
//! with all of them (keys keep their places), later writes extend it with
//! the same columns, and the background's builds encode what scans asked
//! for. Every answer is checked against the row API, with updates laid
//! over segment rows on output and filter columns alike.

use cellar::sql::SqlSession;
use cellar::*;
use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::common::{T0, pk, scan_all};
use crate::overlay_frozen::writes;
use crate::sql::{api_rows, rows, text_rows, write_ok};

/// Cards 0..3000 (order "o") with `x = card`, `s = "v{card:05}"` and
/// `y = 2 * card`, compacted into one segment of 64-row groups, in a
/// database opened in `dir` with `opts` (no background overlays unless
/// `background`).
pub(crate) async fn xsy_table(dir: &std::path::Path, opts: DbOptions, background: bool) -> (Database, Table) {
    let opts = DbOptions {
        row_group_rows: 64,
        page_rows: 16,
        background_overlays: background.then_some(std::time::Duration::from_millis(5)),
        ..opts
    };
    let db = Database::open_with(dir, opts).await.unwrap();
    let t = crate::common::card_order_table(&db, TableOptions::default()).await;
    let writes: Vec<RowWrite> = (0..3000i64)
        .map(|i| {
            PutRow::new(pk(i, "o"))
                .column("x", i)
                .column("s", format!("v{i:05}"))
                .column("y", 2 * i)
                .into()
        })
        .collect();
    write_ok(&t, writes).await;
    t.compact().await.unwrap();
    (db, t)
}

async fn table(background: bool) -> (tempfile::TempDir, Database, Table) {
    let dir = tempfile::tempdir().unwrap();
    let opts = DbOptions::default().clock(std::sync::Arc::new(ManualClock::new(T0)));
    let (db, t) = xsy_table(dir.path(), opts, background).await;
    (dir, db, t)
}

/// The sum of `x` over the table's rows, from the row API.
async fn api_sum_x(t: &Table) -> i64 {
    scan_all(t, GetRange::new())
        .await
        .iter()
        .filter_map(|r| match r.latest("x") {
            Some(Value::Integer(x)) => Some(*x),
            _ => None,
        })
        .sum()
}

async fn sum_x(sess: &SqlSession) -> i64 {
    let b = rows(sess, "SELECT sum(x) FROM t").await;
    b[0].column(0).as_primitive::<Int64Type>().value(0)
}

/// `SELECT card, order, y ... WHERE s > 'v01500'`, against the row API.
async fn check_y_where_s(sess: &SqlSession, t: &Table, what: &str) {
    let q = "SELECT card, \"order\", y FROM t WHERE s > 'v01500' ORDER BY card, \"order\"";
    let want: Vec<Row> = scan_all(t, GetRange::new())
        .await
        .into_iter()
        .filter(|r| matches!(r.latest("s"), Some(Value::String(s)) if s.as_str() > "v01500"))
        .collect();
    assert_eq!(text_rows(&rows(sess, q).await), api_rows(&want, &["y"]), "{what}");
}

fn builds(t: &Table) -> (u64, u64) {
    let s = t.stats();
    (s.scan_overlay_builds, s.scan_overlay_extensions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlays_encode_the_columns_scans_ask_for() {
    let (_dir, db, t) = table(false).await;
    let mut rng = StdRng::seed_from_u64(3);
    write_ok(&t, writes(&mut rng, 400, 0)).await;
    let sess = SqlSession::new(db.clone());

    assert_eq!(sum_x(&sess).await, api_sum_x(&t).await, "one column");
    assert_eq!(builds(&t), (1, 0));
    let one_column = t.stats().scan_overlay_bytes;
    assert!(one_column > 0);
    // The same column again, and fewer: the overlay serves them.
    assert_eq!(sum_x(&sess).await, api_sum_x(&t).await);
    let n = rows(&sess, "SELECT count(*) FROM t").await;
    let want = scan_all(&t, GetRange::new()).await.len() as i64;
    assert_eq!(n[0].column(0).as_primitive::<Int64Type>().value(0), want);
    assert_eq!(builds(&t), (1, 0), "no build for columns the overlay holds");

    // Two columns it lacks, one only in the filter: built again with
    // all three.
    check_y_where_s(&sess, &t, "columns the overlay lacked").await;
    assert_eq!(builds(&t), (2, 0));
    let three_columns = t.stats().scan_overlay_bytes;
    assert!(
        three_columns > one_column + one_column / 2,
        "an overlay of x, y and s ({three_columns} B) against one of x ({one_column} B)"
    );
    assert_eq!(sum_x(&sess).await, api_sum_x(&t).await);
    assert_eq!(builds(&t), (2, 0));

    // Later writes extend it, keeping every column it holds.
    write_ok(&t, writes(&mut rng, 300, 0)).await;
    assert_eq!(sum_x(&sess).await, api_sum_x(&t).await, "after more writes");
    assert_eq!(builds(&t), (2, 1));
    check_y_where_s(&sess, &t, "after more writes").await;
    assert_eq!(builds(&t), (2, 1), "the extension kept y and s");
    drop(sess);
    db.close().await.unwrap();
}

/// The background builds overlays with the columns scans asked for, and
/// scans asking for those columns use them as built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_overlays_encode_what_scans_asked_for() {
    let (_dir, db, t) = table(true).await;
    let mut rng = StdRng::seed_from_u64(4);
    let sess = SqlSession::new(db.clone());
    // Marks the table as scanned whole, asking for x, y and s.
    assert_eq!(sum_x(&sess).await, api_sum_x(&t).await);
    check_y_where_s(&sess, &t, "no memtable").await;
    assert_eq!(builds(&t), (0, 0));
    write_ok(&t, writes(&mut rng, 400, 0)).await;
    let start = std::time::Instant::now();
    while builds(&t) == (0, 0) {
        assert!(start.elapsed().as_secs() < 10, "no overlay was built in the background");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // Writes have settled: the background's overlay is the newest.
    let settled = loop {
        let b = builds(&t);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if builds(&t) == b {
            break b;
        }
    };
    check_y_where_s(&sess, &t, "built in the background").await;
    assert_eq!(sum_x(&sess).await, api_sum_x(&t).await);
    assert_eq!(builds(&t), settled, "the scans used the background's overlay");
    drop(sess);
    db.close().await.unwrap();
}
