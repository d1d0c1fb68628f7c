//! Reading segments with many row groups, pages and multi-version keys:
//! window boundaries in forward scans, page selection, bloom filters.

use std::sync::Arc;

use cellar::*;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_version_keys_read_back_across_row_groups_pages_and_windows() {
    let (_dir, t) = small_segments(700, 64).await;
    let n = 3000i64;
    let versions = |i: i64| (i % 3 + 1) as usize;
    let mut batch = Vec::new();
    for i in 0..n {
        let mut p = PutRow::new(pk(i, "k")).column_at("s", format!("v{i}"), T0);
        for v in 0..versions(i) {
            p = p.column_at("c", i * 10 + v as i64, T0 - 1000 * v as i64);
        }
        batch.push(RowWrite::from(p));
        if batch.len() == 200 {
            t.write_batch(std::mem::take(&mut batch)).await.unwrap();
        }
    }
    t.flush().await.unwrap();
    let all = ReadOptions {
        max_versions: Some(3),
        ..Default::default()
    };
    let check = |rows: &[Row], expect: Vec<i64>| {
        let got: Vec<i64> = rows
            .iter()
            .map(|r| {
                let PkValue::Integer(i) = r.primary_key.columns[0].1 else {
                    panic!()
                };
                assert_eq!(r.column("c").unwrap().len(), versions(i), "versions of key {i}");
                assert_eq!(r.latest("c"), Some(&Value::Integer(i * 10)));
                i
            })
            .collect();
        assert_eq!(got, expect);
    };
    check(
        &scan_all(&t, GetRange::new().options(all.clone())).await,
        (0..n).collect(),
    );
    check(
        &scan_all(&t, GetRange::new().backward().options(all.clone())).await,
        (0..n).rev().collect(),
    );
    for start in [0, 1, 63, 64, 699, 700, 1024, 2047, 2999] {
        let page = t
            .get_range(
                GetRange::new()
                    .start(PkBound::new().with("card", start))
                    .limit(7)
                    .options(all.clone()),
            )
            .await
            .unwrap();
        check(&page.rows, (start..(start + 7).min(n)).collect());
        let page = t
            .get_range(
                GetRange::new()
                    .start(PkBound::new().with("card", start))
                    .backward()
                    .limit(7)
                    .options(all.clone()),
            )
            .await
            .unwrap();
        check(&page.rows, ((start - 6).max(0)..=start).rev().collect());
    }
    for i in (0..n).step_by(97) {
        let r = t
            .get_row(GetRow::new(pk(i, "k")).options(all.clone()))
            .await
            .unwrap()
            .row
            .unwrap();
        assert_eq!(r.column("c").unwrap().len(), versions(i));
        assert!(t.get_row(GetRow::new(pk(i, "missing"))).await.unwrap().row.is_none());
    }
}

/// With a row per older version, a key's ranks never straddle two row
/// groups; with newest rows, the file holds one row per key and the older
/// versions read back from `__cells`, through a compaction too.
#[tokio::test]
async fn row_groups_are_cut_at_key_boundaries() {
    for version_rows in [true, false] {
        let (dir, db, t) = segments_table_with(100, 16, 3, version_rows).await;
        for i in 0..400i64 {
            let p = PutRow::new(pk(i, "k"))
                .column_at("c", 1, T0)
                .column_at("c", 2, T0 - 1)
                .column_at("c", 3, T0 - 2);
            t.put_row(p).await.unwrap();
        }
        t.flush().await.unwrap();
        // A newer segment over every other key, so that compaction folds
        // those and copies the rest.
        for i in (0..400i64).step_by(2) {
            t.update_row(UpdateRow::new(pk(i, "k")).put_at("c", 4, T0 + 1))
                .await
                .unwrap();
        }
        t.flush().await.unwrap();
        let all = ReadOptions {
            max_versions: Some(3),
            ..Default::default()
        };
        let check = |rows: Vec<Row>| {
            assert_eq!(rows.len(), 400);
            for r in &rows {
                let PkValue::Integer(i) = r.primary_key.columns[0].1 else {
                    panic!()
                };
                let want: Vec<i64> = if i % 2 == 0 { vec![4, 1, 2] } else { vec![1, 2, 3] };
                let got: Vec<i64> = r
                    .column("c")
                    .unwrap()
                    .iter()
                    .map(|c| match c.value {
                        Value::Integer(x) => x,
                        _ => panic!(),
                    })
                    .collect();
                assert_eq!(got, want, "key {i}, version rows {version_rows}");
            }
        };
        check(scan_all(&t, GetRange::new().backward().options(all.clone())).await);
        for compacted in [false, true] {
            if compacted {
                t.compact().await.unwrap();
                check(scan_all(&t, GetRange::new().options(all.clone())).await);
                let sql = cellar::sql::SqlSession::new(db.clone());
                let b = sql.query("SELECT sum(c) AS s, count(*) AS n FROM t").await.unwrap();
                assert_eq!(
                    crate::sql::text_rows(&b),
                    ["s=1000 n=400"],
                    "version rows {version_rows}"
                );
            }
            let mut rows = 0;
            for seg in std::fs::read_dir(dir.path().join("tables/1/segments")).unwrap() {
                let file = std::fs::File::open(seg.unwrap().path()).unwrap();
                let reader = parquet::file::serialized_reader::SerializedFileReader::new(file).unwrap();
                use parquet::file::reader::FileReader;
                let groups = reader.metadata().row_groups();
                let file_rows: i64 = groups.iter().map(|g| g.num_rows()).sum();
                // The files of three versions a key (not the one of updates).
                if version_rows && file_rows == 1200 {
                    assert!(
                        groups.iter().all(|g| g.num_rows() % 3 == 0),
                        "every key's three ranks stay in one row group"
                    );
                }
                if !compacted {
                    assert!(groups.len() >= 2, "{} row groups", groups.len());
                }
                rows += groups.iter().map(|g| g.num_rows()).sum::<i64>();
            }
            // Keys, plus the older versions' rows where they are kept.
            let keys = if compacted { 400 } else { 600 };
            let want = match (version_rows, compacted) {
                (false, _) => keys,
                (true, false) => 400 * 3 + 200,
                (true, true) => 400 * 3,
            };
            assert_eq!(rows, want, "version rows {version_rows}, compacted {compacted}");
        }
        drop(t);
        db.close().await.unwrap();
    }
}

async fn small_segments(row_group_rows: usize, page_rows: usize) -> (tempfile::TempDir, Table) {
    let (dir, _db, t) = segments_table(row_group_rows, page_rows, 3).await;
    (dir, t)
}

/// A `t` table keeping `max_versions` versions, in a database whose
/// segments have row groups of `row_group_rows`, written `page_rows` at a
/// time, with pages cut past 64 bytes (so their lengths differ from column
/// to column).
async fn segments_table(
    row_group_rows: usize,
    page_rows: usize,
    max_versions: u32,
) -> (tempfile::TempDir, Database, Table) {
    segments_table_with(row_group_rows, page_rows, max_versions, false).await
}

/// [`segments_table`], with a row per older version in the columns or not.
async fn segments_table_with(
    row_group_rows: usize,
    page_rows: usize,
    max_versions: u32,
    older_version_rows: bool,
) -> (tempfile::TempDir, Database, Table) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let opts = DbOptions {
        row_group_rows,
        page_rows,
        page_bytes: 64,
        older_version_rows,
        ..DbOptions::default().clock(clock)
    };
    let db = Database::open_with(dir.path(), opts).await.unwrap();
    let t = card_order_table(
        &db,
        TableOptions {
            max_versions,
            ..Default::default()
        },
    )
    .await;
    (dir, db, t)
}

/// Non-overlapping segments are started lazily by a scan; overlapping ones
/// and the memtable still merge correctly in both directions.
#[tokio::test]
async fn scans_over_disjoint_and_overlapping_segments() {
    let (_dir, _clock, _db, t) = fixture(TableOptions::default()).await;
    for part in 0..3i64 {
        for i in part * 100..(part + 1) * 100 {
            t.put_row(PutRow::new(pk(i, "k")).column("v", i)).await.unwrap();
        }
        t.flush().await.unwrap();
    }
    // an overlapping segment, and newer values in the memtable
    for i in (0..300).step_by(7) {
        t.put_row(PutRow::new(pk(i, "k")).column("v", -i)).await.unwrap();
    }
    t.flush().await.unwrap();
    for i in (0..300).step_by(11) {
        t.delete_row(DeleteRow::new(pk(i, "k"))).await.unwrap();
    }
    let expect = |i: i64| -> Option<i64> {
        if i % 11 == 0 {
            None
        } else if i % 7 == 0 {
            Some(-i)
        } else {
            Some(i)
        }
    };
    let seen = |rows: Vec<Row>| -> Vec<(i64, i64)> {
        rows.iter()
            .map(|r| {
                let (PkValue::Integer(k), Some(Value::Integer(v))) = (&r.primary_key.columns[0].1, r.latest("v"))
                else {
                    panic!("{r:?}")
                };
                (*k, *v)
            })
            .collect()
    };
    for start in [0i64, 1, 99, 100, 150, 199, 200, 299] {
        let fwd = t
            .get_range(GetRange::new().start(PkBound::new().with("card", start)).limit(12))
            .await
            .unwrap();
        let want: Vec<_> = (start..300)
            .filter_map(|i| expect(i).map(|v| (i, v)))
            .take(12)
            .collect();
        assert_eq!(seen(fwd.rows), want, "forward from {start}");
        let bwd = t
            .get_range(
                GetRange::new()
                    .start(PkBound::new().with("card", start))
                    .backward()
                    .limit(12),
            )
            .await
            .unwrap();
        let want: Vec<_> = (0..=start)
            .rev()
            .filter_map(|i| expect(i).map(|v| (i, v)))
            .take(12)
            .collect();
        assert_eq!(seen(bwd.rows), want, "backward from {start}");
    }
    let all = seen(scan_all(&t, GetRange::new().limit(7)).await);
    assert_eq!(
        all,
        (0..300).filter_map(|i| expect(i).map(|v| (i, v))).collect::<Vec<_>>()
    );
}

/// Point gets read the key's rows through Parquet column readers over just
/// its pages: keys whose versions span several pages, every value type,
/// sparse columns, dictionary strings, tombstones and row markers read back
/// exactly as they did from the memtable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_gets_from_segments_match_the_memtable() {
    let (_dir, _db, t) = segments_table(500, 16, 50).await;
    let n = 300i64;
    // Key i has i % 41 + 1 versions of `c` (up to 41 rows: several pages of
    // 64 bytes).
    for i in 0..n {
        let mut p = PutRow::new(pk(i, "k"));
        for v in 0..(i % 41 + 1) {
            let version = T0 - 10 * v;
            p = match v % 5 {
                0 => p.column_at("c", i * 100 + v, version),
                1 => p.column_at("c", (i * 100 + v) as f64 + 0.25, version),
                2 => p.column_at("c", format!("s{i}-{v}"), version),
                3 => p.column_at("c", vec![i as u8, v as u8, 0], version),
                _ => p.column_at("c", v % 2 == 0, version),
            };
        }
        if i % 3 == 0 {
            p = p.column_at("cat", ["food", "drink"][(i % 2) as usize], T0);
        }
        if i % 7 == 0 {
            p = p.column_at("sparse", i, T0 - 5).column_at("sparse", i + 1, T0 - 15);
        }
        t.put_row(p).await.unwrap();
        if i % 11 == 0 {
            t.update_row(UpdateRow::new(pk(i, "k")).delete_version("c", T0 - 10))
                .await
                .unwrap();
        }
        if i % 13 == 0 {
            t.update_row(UpdateRow::new(pk(i, "k")).delete_all("cat"))
                .await
                .unwrap();
        }
    }
    t.put_row(PutRow::new(pk(n, "pk-only"))).await.unwrap();
    let all = ReadOptions {
        max_versions: Some(50),
        ..Default::default()
    };
    let get = |i: i64, order: &'static str, options: ReadOptions| {
        let t = t.clone();
        async move { t.get_row(GetRow::new(pk(i, order)).options(options)).await.unwrap().row }
    };
    let some_columns = ReadOptions {
        columns_to_get: Some(vec!["sparse".into(), "cat".into()]),
        ..all.clone()
    };
    let mut before = Vec::new();
    for i in 0..n {
        before.push((get(i, "k", all.clone()).await, get(i, "k", some_columns.clone()).await));
    }
    let marker = get(n, "pk-only", all.clone()).await;
    assert!(marker.is_some());
    assert_eq!(before[40].0.as_ref().unwrap().column("c").unwrap().len(), 41);
    t.flush().await.unwrap();
    assert_eq!(t.stats().segments, 1);
    for i in 0..n {
        let after = (get(i, "k", all.clone()).await, get(i, "k", some_columns.clone()).await);
        assert_eq!(after, before[i as usize], "key {i}");
        assert!(get(i, "x", all.clone()).await.is_none());
    }
    assert_eq!(get(n, "pk-only", all.clone()).await, marker);
}

/// Range reads over a segment whose row groups hold many keys, with a newer
/// segment and the memtable overwriting and deleting some of them: every
/// limit and start, forward and backward, reads what a model says (the
/// segment cursor keeps its column readers across windows and decodes the
/// keys it has read a chunk at a time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_ranges_over_overwritten_segments_match_the_model() {
    let (_dir, _db, t) = segments_table(16 * 1024, 256, 1).await;
    let n = 3000i64;
    let mut model: std::collections::BTreeMap<i64, String> = Default::default();
    let mut batch = Vec::new();
    for i in 0..n {
        batch.push(RowWrite::from(PutRow::new(pk(i, "k")).column("s", format!("a{i}"))));
        model.insert(i, format!("a{i}"));
    }
    for b in batch.chunks(200) {
        t.write_batch(b.to_vec()).await.unwrap();
    }
    t.flush().await.unwrap();
    // A newer segment: every 5th key overwritten, every 7th deleted.
    for i in (0..n).filter(|i| i % 5 == 0 || i % 7 == 0) {
        if i % 7 == 0 {
            t.delete_row(DeleteRow::new(pk(i, "k"))).await.unwrap();
            model.remove(&i);
        } else {
            t.put_row(PutRow::new(pk(i, "k")).column("s", format!("b{i}")))
                .await
                .unwrap();
            model.insert(i, format!("b{i}"));
        }
    }
    t.flush().await.unwrap();
    // The memtable: every 11th key overwritten (some deleted ones revived).
    for i in (0..n).step_by(11) {
        t.put_row(PutRow::new(pk(i, "k")).column("s", format!("c{i}")))
            .await
            .unwrap();
        model.insert(i, format!("c{i}"));
    }
    let rows = |rows: &[Row]| -> Vec<(i64, String)> {
        rows.iter()
            .map(|r| {
                let PkValue::Integer(i) = r.primary_key.columns[0].1 else {
                    panic!()
                };
                let Some(Value::String(s)) = r.latest("s") else {
                    panic!("row {i} has no s")
                };
                (i, s.clone())
            })
            .collect()
    };
    let want: Vec<(i64, String)> = model.iter().map(|(k, v)| (*k, v.clone())).collect();
    assert_eq!(rows(&scan_all(&t, GetRange::new()).await), want);
    let back: Vec<_> = want.iter().rev().cloned().collect();
    assert_eq!(rows(&scan_all(&t, GetRange::new().backward()).await), back);
    for start in [0, 1, 15, 16, 17, 100, 1499, 2980, 2999] {
        for limit in [1, 16, 17, 40, 500] {
            let page = t
                .get_range(GetRange::new().start(PkBound::new().with("card", start)).limit(limit))
                .await
                .unwrap();
            let expect: Vec<_> = want.iter().filter(|(k, _)| *k >= start).take(limit).cloned().collect();
            assert_eq!(rows(&page.rows), expect, "from {start}, limit {limit}");
            let page = t
                .get_range(
                    GetRange::new()
                        .start(PkBound::new().with("card", start))
                        .backward()
                        .limit(limit),
                )
                .await
                .unwrap();
            let expect: Vec<_> = back.iter().filter(|(k, _)| *k <= start).take(limit).cloned().collect();
            assert_eq!(rows(&page.rows), expect, "back from {start}, limit {limit}");
            // A bounded range: one card's rows and a few after it.
            let page = t
                .get_range(
                    GetRange::new()
                        .start(PkBound::new().with("card", start))
                        .end(PkBound::new().with("card", start + limit as i64)),
                )
                .await
                .unwrap();
            let expect: Vec<_> = want
                .iter()
                .filter(|(k, _)| *k >= start && *k < start + limit as i64)
                .cloned()
                .collect();
            assert_eq!(rows(&page.rows), expect, "cards {start}..+{limit}");
        }
    }
}
