//! SQL that reads through indexes returns what a table scan returns: a
//! differential test over random data (rows missing indexed columns,
//! updates, deletes, writes before and after the indexes) and random
//! queries, each run as Cellar chooses, with the table forced
//! (`USE INDEX ()`) and through every index (`USE INDEX (i)`).

use cellar::sql::SqlSession;
use cellar::*;
use rand::{Rng, SeedableRng, rngs::StdRng};

use crate::sql::{rows, text_rows};

fn random_write(rng: &mut StdRng) -> RowWrite {
    let key = PrimaryKey::new()
        .with("a", rng.random_range(0..4i64))
        .with("b", format!("k{}", rng.random_range(0..12)));
    match rng.random_range(0..10) {
        0..=4 => {
            let mut p = PutRow::new(key);
            if rng.random_bool(0.8) {
                p = p.column("x", rng.random_range(0..6i64));
            }
            if rng.random_bool(0.8) {
                p = p.column("y", format!("y{}", rng.random_range(0..4)));
            }
            if rng.random_bool(0.7) {
                p = p.column("z", rng.random_range(-3..3i64));
            }
            if rng.random_bool(0.5) {
                p = p.column("w", rng.random_range(0..100) as f64 / 10.0);
            }
            RowWrite::Put(p)
        }
        5..=7 => {
            let u = match rng.random_range(0..5) {
                0 => UpdateRow::new(key).put("x", rng.random_range(0..6i64)),
                1 => UpdateRow::new(key).delete_all("y"),
                2 => UpdateRow::new(key).increment("z", 1),
                3 => UpdateRow::new(key).put("y", format!("y{}", rng.random_range(0..4))),
                _ => UpdateRow::new(key).put("w", 1.5).delete_all("x"),
            };
            RowWrite::Update(u)
        }
        _ => RowWrite::Delete(DeleteRow::new(key)),
    }
}

/// One random conjunct.
fn predicate(rng: &mut StdRng) -> String {
    match rng.random_range(0..11) {
        0 => format!("x = {}", rng.random_range(0..6)),
        1 => format!("x > {}", rng.random_range(0..6)),
        2 => format!("y = 'y{}'", rng.random_range(0..4)),
        3 => format!("y IN ('y{}', 'y{}')", rng.random_range(0..4), rng.random_range(0..4)),
        4 => format!("z BETWEEN {} AND {}", rng.random_range(-3..0), rng.random_range(0..3)),
        5 => format!("a = {}", rng.random_range(0..4)),
        6 => format!("b = 'k{}'", rng.random_range(0..12)),
        7 => format!("w > {}", rng.random_range(0..10)),
        8 => format!("z = {}", rng.random_range(-3..3)),
        9 => format!("a >= {}", rng.random_range(0..4)),
        _ => "y IS NOT NULL".to_string(),
    }
}

#[tokio::test]
async fn index_reads_equal_table_scans_on_random_data_and_queries() {
    for seed in 0..crate::common::seeds("CELLAR_INDEX_SQL_SEEDS", 2) {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(dir.path()).await.unwrap();
        let sql = SqlSession::new(db.clone());
        sql.execute(
            "CREATE TABLE t (a BIGINT, b VARCHAR, x BIGINT, y VARCHAR, z BIGINT, w DOUBLE, PRIMARY KEY (a, b))",
        )
        .await
        .unwrap();
        let t = db.table("t").unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        for _ in 0..60 {
            let _ = t.write(random_write(&mut rng)).await;
        }
        t.flush().await.unwrap();
        for stmt in [
            "CREATE INDEX l_ax ON t (a, x) INCLUDE (y)",
            "CREATE INDEX g_yz ON t (y, z) INCLUDE (w) WITH (type = 'global')",
            "CREATE INDEX g_x ON t (x) WITH (type = 'global')",
            "CREATE INDEX g_ba ON t (b, a) INCLUDE (x, y, z, w) WITH (type = 'global')",
            "CREATE INDEX g_b ON t (b) WITH (type = 'global')",
        ] {
            sql.execute(stmt).await.unwrap();
        }
        let indexes = ["l_ax", "g_yz", "g_x", "g_ba", "g_b"];
        for round in 0..6 {
            for _ in 0..40 {
                let _ = t.write(random_write(&mut rng)).await;
            }
            // SQL writes too.
            sql.execute(&format!(
                "UPDATE t SET x = {} WHERE y = 'y{}'",
                rng.random_range(0..6),
                round % 4
            ))
            .await
            .unwrap();
            sql.execute(&format!("DELETE FROM t WHERE z = {}", rng.random_range(-3..3)))
                .await
                .unwrap();
            match round {
                2 => t.flush().await.unwrap(),
                4 => t.compact().await.unwrap(),
                _ => {}
            }
            for i in ["g_yz", "g_x", "g_ba", "g_b"] {
                db.wait_for_index(i, std::time::Duration::from_secs(20)).await.unwrap();
            }
            for _ in 0..25 {
                let n = rng.random_range(1..4);
                let preds: Vec<String> = (0..n).map(|_| predicate(&mut rng)).collect();
                let cols = ["*", "a, b, x", "y, z, a, b", "a, b, w", "b, a, x, y, z, w"][rng.random_range(0..5)];
                let q = |hint: &str| {
                    format!(
                        "SELECT {cols} FROM t {hint} WHERE {} ORDER BY a, b",
                        preds.join(" AND ")
                    )
                };
                let want = text_rows(&rows(&sql, &q("USE INDEX ()")).await);
                let got = text_rows(&rows(&sql, &q("")).await);
                assert_eq!(got, want, "seed {seed} round {round}: {}", q(""));
                for i in indexes {
                    let forced = q(&format!("USE INDEX ({i})"));
                    let got = text_rows(&rows(&sql, &forced).await);
                    assert_eq!(got, want, "seed {seed} round {round}: {forced}");
                }
            }
        }
    }
}

/// EXPLAIN shows the choice; the choice follows the leftmost prefix.
#[tokio::test]
async fn explain_shows_the_index_a_query_uses() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).await.unwrap();
    let sql = SqlSession::new(db.clone());
    for s in [
        "CREATE TABLE t (a BIGINT, b VARCHAR, x BIGINT, y VARCHAR, PRIMARY KEY (a, b))",
        "INSERT INTO t VALUES (1, 'p', 5, 'q'), (2, 'r', 6, 's')",
        "CREATE INDEX by_y ON t (y, x) WITH (type = 'global')",
        "CREATE INDEX by_ax ON t (a, x)",
    ] {
        sql.execute(s).await.unwrap();
    }
    db.wait_for_index("by_y", std::time::Duration::from_secs(10))
        .await
        .unwrap();
    let plan = |q: &str| {
        let sql = &sql;
        let q = format!("EXPLAIN {q}");
        async move { text_rows(&rows(sql, &q).await).join("\n") }
    };
    // Covering: the index is scanned in place of the table.
    let p = plan("SELECT a, b, x FROM t WHERE y = 'q' AND x > 0").await;
    assert!(
        p.contains("CellarScanExec: table=by_y") && p.contains("index_of=[t]"),
        "{p}"
    );
    // Not covering: a lookup.
    let p = plan("SELECT * FROM t WHERE a = 1 AND x = 5").await;
    assert!(p.contains("IndexLookupExec: table=t, index=by_ax (local)"), "{p}");
    // The table's own key serves better: no index.
    let p = plan("SELECT * FROM t WHERE a = 1 AND b = 'p'").await;
    assert!(p.contains("CellarScanExec: table=t,"), "{p}");
    // Rows without x are not in by_y: y alone cannot use it.
    let p = plan("SELECT a, b FROM t WHERE y = 'q'").await;
    assert!(p.contains("CellarScanExec: table=t,"), "{p}");
    // A predicate on a non-leading index column alone: no index.
    let p = plan("SELECT * FROM t WHERE x = 5").await;
    assert!(p.contains("CellarScanExec: table=t,"), "{p}");
    // Hints.
    let p = plan("SELECT * FROM t USE INDEX () WHERE y = 'q' AND x = 5").await;
    assert!(p.contains("CellarScanExec: table=t,"), "{p}");
    let p = plan("SELECT a FROM t AS tt USE INDEX (by_ax) WHERE a = 2 AND x > 0").await;
    assert!(p.contains("table=by_ax"), "{p}");
    let e = sql.execute("SELECT * FROM t USE INDEX (nope)").await.err().unwrap();
    assert!(
        e.to_string().contains("no index 'nope'") && e.to_string().contains("by_ax"),
        "{e}"
    );
    let got = text_rows(&rows(&sql, "SELECT a, b FROM t WHERE y = 'q' AND x >= 5").await);
    assert_eq!(got, vec!["a=1 b=p"]);
}

/// 900 rows of `t (a, b) x y` with an index `by_ax` on `(a, x)`: a
/// flush halfway, every 11th row without `x`, then updates that move rows
/// within the index and deletes.
async fn many_rows() -> (tempfile::TempDir, SqlSession) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).await.unwrap();
    let sql = SqlSession::new(db.clone());
    for s in [
        "CREATE TABLE t (a BIGINT, b VARCHAR, x BIGINT, y VARCHAR, PRIMARY KEY (a, b))",
        "CREATE INDEX by_ax ON t (a, x)",
    ] {
        sql.execute(s).await.unwrap();
    }
    let t = db.table("t").unwrap();
    let key = |i: i64| PrimaryKey::new().with("a", i % 3).with("b", format!("k{i:04}"));
    for i in 0..900i64 {
        let mut p = PutRow::new(key(i)).column("y", format!("y{i}"));
        if i % 11 != 0 {
            p = p.column("x", (i * 7) % 50);
        }
        t.put_row(p).await.unwrap();
        if i == 450 {
            t.flush().await.unwrap();
        }
    }
    for i in (0..900i64).step_by(13) {
        t.update_row(UpdateRow::new(key(i)).put("x", 49 - i % 50))
            .await
            .unwrap();
    }
    for i in (5..900i64).step_by(17) {
        t.delete_row(DeleteRow::new(key(i))).await.unwrap();
    }
    (dir, sql)
}

/// A lookup of hundreds of rows, read in growing batches, returns
/// each row the table scan returns, once, in the index's order, whether
/// the rows are in segments, a memtable or both, updated or deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_of_many_rows_keep_the_index_order() {
    let (_dir, sql) = many_rows().await;
    let q = "SELECT * FROM t USE INDEX (by_ax) WHERE a = 1 AND x >= 3";
    let plan = text_rows(&rows(&sql, &format!("EXPLAIN {q}")).await).join("\n");
    assert!(plan.contains("IndexLookupExec: table=t, index=by_ax"), "{plan}");
    let want = text_rows(
        &rows(
            &sql,
            "SELECT * FROM t USE INDEX () WHERE a = 1 AND x >= 3 ORDER BY x, b",
        )
        .await,
    );
    assert!(want.len() > 200, "{} rows", want.len());
    for _ in 0..3 {
        assert_eq!(text_rows(&rows(&sql, q).await), want);
    }
}

/// Unforced, a lookup that would read more than a twentieth of the table
/// is left for the table scan, unless a LIMIT bounds what it reads and
/// the index keys apply every filter: then the lookup is taken without
/// counting entries first, and returns the first rows in index order.
#[tokio::test]
async fn a_limit_makes_a_wide_lookup_pay() {
    let (_dir, sql) = many_rows().await;
    let explain = |q: String| {
        let sql = &sql;
        async move { text_rows(&rows(sql, &format!("EXPLAIN {q}")).await).join("\n") }
    };
    let lookup = "IndexLookupExec: table=t, index=by_ax";
    let wide = "SELECT * FROM t WHERE a = 1 AND x >= 3";
    assert!(!explain(wide.to_string()).await.contains(lookup));
    let want = text_rows(
        &rows(
            &sql,
            "SELECT * FROM t USE INDEX () WHERE a = 1 AND x >= 3 ORDER BY x, b",
        )
        .await,
    );
    for n in [1, 10, 40] {
        let q = format!("{wide} LIMIT {n}");
        assert!(explain(q.clone()).await.contains(lookup), "{q}");
        assert_eq!(text_rows(&rows(&sql, &q).await), want[..n], "{q}");
    }
    // A LIMIT past a twentieth of the table, or a filter the index keys
    // do not apply, leaves the choice to the count.
    for q in [format!("{wide} LIMIT 500"), format!("{wide} AND y LIKE 'y1%' LIMIT 10")] {
        assert!(!explain(q.clone()).await.contains(lookup), "{q}");
    }
    let q = format!("{wide} AND y LIKE 'y1%' LIMIT 10");
    let got = text_rows(&rows(&sql, &q).await);
    assert_eq!(got.len(), 10);
    let all = text_rows(
        &rows(
            &sql,
            "SELECT * FROM t USE INDEX () WHERE a = 1 AND x >= 3 AND y LIKE 'y1%'",
        )
        .await,
    );
    assert!(got.iter().all(|r| all.contains(r)), "{got:?}");
}
