//! Statistics pruning in SQL scans: row groups by their chunk statistics,
//! pages by the column index, checked against unpruned answers (the same
//! rows in the memtable) and with memtable writes over pruned pages; NaN
//! and -0.0, which Parquet's statistics order differently from SQL.

use cellar::sql::SqlSession;
use cellar::*;
use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;

use crate::common::pk;
use crate::sql::{rows, text_rows, write_ok};

/// A double column holding NaN (with and without the sign bit) and -0.0: Parquet
/// leaves NaN out of min/max statistics, while SQL orders NaN above every
/// number (and -NaN below), so a statistics-pruned scan of the compacted
/// table must return what the unpruned scan of the memtable returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nan_survives_statistics_pruning() {
    let dir = tempfile::tempdir().unwrap();
    let opts = DbOptions {
        row_group_rows: 64,
        page_rows: 16,
        ..DbOptions::default()
    };
    let db = Database::open_with(dir.path(), opts).await.unwrap();
    let t = crate::common::card_order_table(&db, TableOptions::default()).await;
    let y = |i: i64| match i {
        700 => f64::NAN,
        1300 => -f64::NAN,
        1600 => -0.0,
        _ => i as f64,
    };
    let writes: Vec<RowWrite> = (0..2000i64)
        .map(|i| PutRow::new(pk(i, "o")).column("y", y(i)).into())
        .collect();
    write_ok(&t, writes).await;
    let sess = SqlSession::new(db.clone());
    let queries = [
        "SELECT card FROM t WHERE y > 5000 ORDER BY card",
        "SELECT card FROM t WHERE y >= 2500 ORDER BY card",
        "SELECT card FROM t WHERE y < -1 ORDER BY card",
        "SELECT card FROM t WHERE y <= -5 ORDER BY card",
        "SELECT card FROM t WHERE y BETWEEN 690 AND 710 ORDER BY card",
        "SELECT card FROM t WHERE y = 700 ORDER BY card",
        "SELECT card FROM t WHERE y < 0 ORDER BY card",
        "SELECT card FROM t WHERE y >= 0 AND y <= 0 ORDER BY card",
    ];
    let mut before = Vec::new();
    for q in queries {
        before.push(text_rows(&rows(&sess, q).await));
    }
    // DataFusion's order: NaN above every number, -NaN below.
    assert_eq!(before[0], vec!["card=700"]);
    assert_eq!(before[2], vec!["card=1300"]);
    t.compact().await.unwrap();
    assert_eq!(t.stats().segments, 1);
    for (q, want) in queries.iter().zip(&before) {
        assert_eq!(&text_rows(&rows(&sess, q).await), want, "{q}");
    }
    drop(sess);
    db.close().await.unwrap();
}

/// Page statistics: within a row group kept, a range predicate on an
/// attribute (integer, double, boolean) or a key column skips the pages it
/// rules out, `EXPLAIN ANALYZE` reports pages read against pages in range,
/// and memtable writes over skipped pages still come out right: an update
/// that moves a row into the range, one that moves it out, a delete, a new
/// key; with the memtable placed by an overlay and without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_pruning_skips_pages_and_keeps_memtable_rows() {
    let dir = tempfile::tempdir().unwrap();
    let opts = DbOptions {
        row_group_rows: 512,
        page_rows: 16,
        page_bytes: 64,
        background_overlays: None,
        ..DbOptions::default()
    };
    let db = Database::open_with(dir.path(), opts).await.unwrap();
    let t = crate::common::card_order_table(&db, TableOptions::default()).await;
    let writes: Vec<RowWrite> = (0..4000i64)
        .map(|i| {
            PutRow::new(pk(i, "o"))
                .column("x", i)
                .column("z", i as f64 / 2.0)
                .column("flag", i >= 3900)
                .column("s", format!("v{i:05}"))
                .into()
        })
        .collect();
    write_ok(&t, writes).await;
    t.compact().await.unwrap();
    let sess = SqlSession::new(db.clone());
    let metric = |plan: &str, name: &str| -> u64 {
        let at = plan
            .find(&format!("{name}="))
            .unwrap_or_else(|| panic!("no {name} in {plan}"));
        plan[at + name.len() + 1..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect::<String>()
            .parse()
            .unwrap()
    };
    let cards = |b: &[RecordBatch]| -> Vec<i64> {
        b.iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    };
    // (predicate, the cards it selects from the stored rows, whether page
    // statistics rule out most pages: strings have none, and a key range
    // is cut from the key index before statistics are looked at)
    let cases: [(&str, Vec<i64>, bool); 6] = [
        ("x BETWEEN 1000 AND 1010", (1000..=1010).collect(), true),
        ("z > 1990.5", (3982..4000).collect(), true),
        ("flag = true AND x < 3950", (3900..3950).collect(), true),
        ("x < 5 OR x > 3995", (0..5).chain(3996..4000).collect(), true),
        (
            "card >= 2040 AND card < 2050 AND s > 'v0'",
            (2040..2050).collect(),
            false,
        ),
        ("s >= 'v01000' AND s < 'v01003'", (1000..1003).collect(), false),
    ];
    for (p, want, pruned) in &cases {
        let q = format!("SELECT card FROM t WHERE {p} ORDER BY card");
        assert_eq!(&cards(&rows(&sess, &q).await), want, "{q}");
        let plan = text_rows(&rows(&sess, &format!("EXPLAIN ANALYZE {q}")).await).join("\n");
        let (pages, read) = (metric(&plan, "pages"), metric(&plan, "pages_read"));
        assert!(pages > 0 && read <= pages, "{p}: {read} of {pages} pages read\n{plan}");
        if *pruned {
            assert!(read * 10 < pages, "{p}: {read} of {pages} pages read\n{plan}");
        }
    }
    let before = t.stats();
    assert!(before.scan_pages_read * 10 < before.scan_pages, "{before:?}");
    // Writes over skipped pages: row 2500 moves into the range, 1005 out
    // of it, 1007 is deleted, 1003 updates another column, a new key.
    t.update_row(UpdateRow::new(pk(2500, "o")).put("x", 1004i64))
        .await
        .unwrap();
    t.update_row(UpdateRow::new(pk(1005, "o")).put("x", 99_999i64))
        .await
        .unwrap();
    t.delete_row(DeleteRow::new(pk(1007, "o"))).await.unwrap();
    t.update_row(UpdateRow::new(pk(1003, "o")).put("s", "changed"))
        .await
        .unwrap();
    t.put_row(PutRow::new(pk(7, "new")).column("x", 1001i64)).await.unwrap();
    t.update_row(UpdateRow::new(pk(650, "o")).put("x", 1002i64))
        .await
        .unwrap();
    let mut want = vec![
        "card=650 order=o x=1002 s=v00650".to_string(),
        "card=1000 order=o x=1000 s=v01000".to_string(),
        "card=1001 order=o x=1001 s=v01001".to_string(),
        "card=1002 order=o x=1002 s=v01002".to_string(),
        "card=1003 order=o x=1003 s=changed".to_string(),
        "card=1004 order=o x=1004 s=v01004".to_string(),
        "card=1006 order=o x=1006 s=v01006".to_string(),
        "card=1008 order=o x=1008 s=v01008".to_string(),
        "card=1009 order=o x=1009 s=v01009".to_string(),
        "card=1010 order=o x=1010 s=v01010".to_string(),
    ];
    let q = "SELECT card, \"order\", x, s FROM t WHERE x BETWEEN 1000 AND 1010 ORDER BY card, \"order\"";
    // First a key range too small to build an overlay for (the scan
    // merges memtable keys itself), then the whole table, from the
    // overlay its scan builds.
    let narrow = q.replace("WHERE", "WHERE card BETWEEN 600 AND 1100 AND");
    assert_eq!(text_rows(&rows(&sess, &narrow).await), want, "without an overlay");
    assert_eq!(t.stats().scan_overlay_builds, 0);
    want.insert(0, "card=7 order=new x=1001".to_string());
    want.push("card=2500 order=o x=1004 s=v02500".to_string());
    assert_eq!(text_rows(&rows(&sess, q).await), want, "from the overlay");
    assert!(t.stats().scan_overlay_builds > 0);
    drop(sess);
    db.close().await.unwrap();
}
