//! Compaction: partial merges keep deletions, expired data leaves the disk,
//! the engine compacts on its own, options changes interplay, files held by
//! a reader stay until it lets go, and a failed compaction changes nothing.

use std::sync::Arc;
use std::time::Duration;

use cellar::*;
use futures::StreamExt;

use crate::common::*;
use crate::faults::FailingStore;

pub(crate) fn manual(clock: &Arc<ManualClock>) -> DbOptions {
    DbOptions {
        auto_compaction: false,
        ..DbOptions::default().clock(clock.clone())
    }
}

/// A `t` table with default options in a new database that compacts only
/// when asked, on a manual clock.
async fn manual_table() -> (tempfile::TempDir, Arc<ManualClock>, Database, Table) {
    manual_table_with(TableOptions::default()).await
}

/// Table options that keep three versions of a cell.
pub(crate) fn three_versions_kept() -> TableOptions {
    TableOptions {
        max_versions: 3,
        ..TableOptions::default()
    }
}

/// [`manual_table`] with the given table options.
async fn manual_table_with(options: TableOptions) -> (tempfile::TempDir, Arc<ManualClock>, Database, Table) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let db = Database::open_with(dir.path(), manual(&clock)).await.unwrap();
    let t = card_order_table(&db, options).await;
    (dir, clock, db, t)
}

/// Closes `db` (with `t`), opens it again, and asserts that a scan of
/// table `t` with `req` returns `rows`.
async fn reopened_reads_the_same(
    dir: &std::path::Path,
    clock: &Arc<ManualClock>,
    (db, t): (Database, Table),
    req: GetRange,
    rows: &[Row],
) {
    drop(t);
    db.close().await.unwrap();
    let db = Database::open_with(dir, manual(clock)).await.unwrap();
    assert_eq!(scan_all(&db.table("t").unwrap(), req).await, rows);
}

/// Bytes of segment files on disk under the data directory.
fn segment_bytes_on_disk(dir: &std::path::Path) -> u64 {
    walkdir(dir.join("tables"))
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum()
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting until {what}");
}

pub(crate) async fn put_range(t: &Table, cards: std::ops::Range<i64>, tag: &str) {
    for i in cards {
        t.put_row(PutRow::new(pk(i, "a")).column("v", tag).column("n", i))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletions_survive_a_partial_compaction() {
    let (dir, clock, db, t) = manual_table().await;
    // Oldest segment: rows 0..100.
    put_range(&t, 0..100, "old").await;
    t.flush().await.unwrap();
    // Newer: deletes of rows 0..20, column deletes on 20..40, updates.
    for i in 0..20 {
        t.delete_row(DeleteRow::new(pk(i, "a"))).await.unwrap();
    }
    for i in 20..40 {
        t.update_row(UpdateRow::new(pk(i, "a")).delete_all("v")).await.unwrap();
    }
    t.flush().await.unwrap();
    put_range(&t, 100..120, "new").await;
    t.flush().await.unwrap();
    assert_eq!(t.stats().runs, 3);

    let check = |rows: &[Row]| {
        assert_eq!(rows.len(), 100, "rows 20..120 are left");
        assert_eq!(rows[0].primary_key.get("card"), Some(&PkValue::Integer(20)));
        for r in rows {
            let card = match r.primary_key.get("card") {
                Some(PkValue::Integer(c)) => *c,
                other => panic!("{other:?}"),
            };
            assert_eq!(r.latest("v").is_none(), card < 40, "row {card}: {:?}", r.columns);
            assert_eq!(r.latest("n"), Some(&Value::Integer(card)));
        }
    };
    check(&scan_all(&t, GetRange::new()).await);
    // Merge the newest two runs only: the oldest segment still holds the
    // deleted rows, so the tombstones must stay.
    assert!(t.compact_newest(2).await.unwrap());
    assert_eq!(t.stats().runs, 2);
    check(&scan_all(&t, GetRange::new()).await);
    for i in 0..20 {
        assert!(t.get_row(GetRow::new(pk(i, "a"))).await.unwrap().row.is_none());
    }
    // A full compaction may drop them now; still nothing comes back, and
    // the data survives a reopen.
    t.compact().await.unwrap();
    assert_eq!(t.stats().runs, 1);
    check(&scan_all(&t, GetRange::new()).await);
    drop(t);
    db.close().await.unwrap();
    let db = Database::open_with(dir.path(), manual(&clock)).await.unwrap();
    check(&scan_all(&db.table("t").unwrap(), GetRange::new()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_data_leaves_the_disk_without_anyone_asking() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let opts = DbOptions {
        compaction_check_interval: Duration::from_millis(20),
        ..DbOptions::default().clock(clock.clone())
    };
    let db = Database::open_with(dir.path(), opts).await.unwrap();
    let t = card_order_table(
        &db,
        TableOptions {
            ttl_secs: 60,
            ..Default::default()
        },
    )
    .await;
    for round in 0..3 {
        put_range(&t, round * 500..(round + 1) * 500, "x").await;
        t.flush().await.unwrap();
    }
    let before = segment_bytes_on_disk(dir.path());
    assert!(before > 10_000, "{before} bytes of segments");
    assert_eq!(scan_all(&t, GetRange::new()).await.len(), 1500);
    clock.advance(61_000);
    // Invisible at once...
    assert!(scan_all(&t, GetRange::new()).await.is_empty());
    // ...and gone from disk once the background check has compacted.
    wait_until("the expired segments are compacted away", || t.stats().segments == 0).await;
    wait_until("the files are deleted", || segment_bytes_on_disk(dir.path()) == 0).await;
    assert!(t.stats().compactions >= 1);
    assert!(scan_all(&t, GetRange::new()).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_compacts_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let opts = DbOptions {
        compaction_trigger_runs: 3,
        ..DbOptions::default().clock(clock.clone())
    };
    let db = Database::open_with(dir.path(), opts).await.unwrap();
    let t = card_order_table(&db, TableOptions::default()).await;
    for round in 0..8i64 {
        // Overlapping key ranges, newer values win.
        put_range(&t, round * 10..round * 10 + 50, &format!("r{round}")).await;
        t.flush().await.unwrap();
    }
    // Eight flushes of about one size, merged three alike runs at a time:
    // at most two merged runs and two flushes are left.
    wait_until("background compaction merges the runs", || t.stats().runs <= 4).await;
    let s = t.stats();
    assert!(s.compactions >= 1, "{s:?}");
    assert!(s.compaction_bytes > 0 && s.compaction_read_bytes > 0, "{s:?}");
    let rows = scan_all(&t, GetRange::new()).await;
    assert_eq!(rows.len(), 120);
    // Card 75 was last written in round 7 (cards 70..120).
    let r = t.get_row(GetRow::new(pk(75, "a"))).await.unwrap().row.unwrap();
    assert_eq!(r.latest("v"), Some(&Value::from("r7")));
    let r = t.get_row(GetRow::new(pk(5, "a"))).await.unwrap().row.unwrap();
    assert_eq!(r.latest("v"), Some(&Value::from("r0")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowered_options_drop_versions_for_good_only_after_a_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let db = Database::open_with(dir.path(), manual(&clock)).await.unwrap();
    let t = card_order_table(
        &db,
        TableOptions {
            max_versions: 3,
            ..Default::default()
        },
    )
    .await;
    for v in 1..=3 {
        t.put_row(PutRow::new(pk(1, "a")).column_at("c", v, T0 - 1000 + v))
            .await
            .unwrap();
        t.update_row(UpdateRow::new(pk(2, "a")).put_at("c", v, T0 - 100_000 * v))
            .await
            .unwrap();
    }
    t.flush().await.unwrap();
    let all = ReadOptions {
        max_versions: Some(10),
        ..Default::default()
    };
    let versions = |t: Table, card: i64| {
        let all = all.clone();
        async move {
            t.get_row(GetRow::new(pk(card, "a")).options(all))
                .await
                .unwrap()
                .row
                .map(|r| r.columns.iter().map(|(_, c)| c.len()).sum::<usize>())
                .unwrap_or(0)
        }
    };
    // Row 1 is replaced by each PutRow: one version. Row 2 has three, the
    // oldest 300 s old.
    assert_eq!(versions(t.clone(), 2).await, 3);
    let set = |max_versions: u32, ttl_secs: i64| OptionsUpdate {
        max_versions: Some(max_versions),
        ttl_secs: Some(ttl_secs),
        ..Default::default()
    };
    // Lowered, then raised before any compaction: the versions come back.
    db.alter_table("t", set(1, -1)).await.unwrap();
    assert_eq!(versions(t.clone(), 2).await, 1);
    db.alter_table("t", set(3, 150)).await.unwrap();
    assert_eq!(versions(t.clone(), 2).await, 1, "TTL 150 s hides the two older ones");
    db.alter_table("t", set(3, -1)).await.unwrap();
    assert_eq!(versions(t.clone(), 2).await, 3);
    // Lowered, compacted, raised: gone for good.
    db.alter_table("t", set(2, -1)).await.unwrap();
    t.compact().await.unwrap();
    db.alter_table("t", set(3, -1)).await.unwrap();
    assert_eq!(versions(t.clone(), 2).await, 2);
    db.alter_table("t", set(3, 150)).await.unwrap();
    t.compact().await.unwrap();
    db.alter_table("t", set(3, -1)).await.unwrap();
    assert_eq!(versions(t.clone(), 2).await, 1);
    assert_eq!(versions(t.clone(), 1).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_files_stay_while_a_reader_holds_them() {
    let (dir, _clock, db, t) = manual_table().await;
    for round in 0..3 {
        put_range(&t, round * 3000..(round + 1) * 3000, "x").await;
        t.flush().await.unwrap();
    }
    let files = |dir: &std::path::Path| -> Vec<String> {
        let mut v: Vec<String> = walkdir(dir.join("tables"));
        v.sort();
        v
    };
    let before = files(dir.path());
    assert_eq!(before.len(), 3);
    // A SQL scan pins the current segments while its stream is alive (one
    // partition: with more, a partition can finish and buffer its rows
    // ahead of the reader, and then rightly lets its files go).
    let config = cellar::sql::session_config().with_target_partitions(1);
    let ctx = cellar::sql::session_context_with(&db, config);
    let mut stream = ctx
        .sql("SELECT card, n FROM t")
        .await
        .unwrap()
        .execute_stream()
        .await
        .unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert!(first.num_rows() > 0);
    t.compact().await.unwrap();
    let during = files(dir.path());
    for f in &before {
        assert!(during.contains(f), "{f} was deleted while a reader held it");
    }
    let mut rows = first.num_rows();
    while let Some(b) = stream.next().await {
        rows += b.unwrap().num_rows();
    }
    assert_eq!(rows, 9000);
    drop(stream);
    drop(ctx);
    wait_until("the replaced files are deleted", || {
        let now = files(dir.path());
        before.iter().all(|f| !now.contains(f))
    })
    .await;
    assert_eq!(files(dir.path()).len(), t.stats().segments);
}

/// The segment files under `p`, recursively.
pub(crate) fn walkdir(p: std::path::PathBuf) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(&p).into_iter().flatten().flatten() {
        let path = e.path();
        if path.is_dir() {
            out.extend(walkdir(path));
        } else if path.to_string_lossy().contains(".parquet") {
            // Segments, and the staging files (`NAME.parquet#N`) of
            // streamed uploads, which must not be left behind either.
            out.push(path.display().to_string());
        }
    }
    out
}

/// Writes before the injected failure: each output is an upload start, its
/// parts (one here) and a completion. 2: the first output's completion
/// fails; 1: its part fails; 4: the second output's part fails.
/// While a long compaction runs, flushes keep adding runs; past half the
/// stall limit a second compaction merges the newest runs beside it, and
/// both commit without losing or reviving anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_compaction_merges_new_runs_while_a_long_one_runs() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let local = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let store = Arc::new(FailingStore::over(Arc::new(local)));
    let opts = DbOptions {
        compaction_trigger_runs: 2,
        // Catch-up past max(8 / 2, 2 * 2) = 4 runs.
        compaction_stall_runs: 8,
        ..DbOptions::default().clock(clock.clone()).object_store(store.clone())
    };
    let db = Database::open_with(dir.path(), opts).await.unwrap();
    let t = card_order_table(&db, TableOptions::default()).await;
    // The first compaction's output upload is held: it stays running
    // (released on every way out, so that a failed check cannot leave the
    // runtime waiting for it).
    struct Release(Arc<FailingStore>);
    impl Drop for Release {
        fn drop(&mut self) {
            self.0.release_upload();
        }
    }
    let release = Release(store.clone());
    store.hold_next_upload();
    put_range(&t, 0..100, "r0").await;
    t.flush().await.unwrap();
    put_range(&t, 50..150, "r1").await;
    t.flush().await.unwrap();
    // Deleted in a run the held compaction does not merge (no later round
    // writes these cards again).
    for card in [10, 140] {
        t.delete_row(DeleteRow::new(pk(card, "a"))).await.unwrap();
    }
    t.flush().await.unwrap();
    for round in 2..6i64 {
        put_range(&t, round * 20..round * 20 + 30, &format!("r{round}")).await;
        t.flush().await.unwrap();
    }
    // 2 held runs + 5 new ones: the catch-up merges new ones and commits
    // while the first compaction is still waiting.
    wait_until("a catch-up compaction commits beside the held one", || {
        t.stats().compactions >= 1
    })
    .await;
    let s = t.stats();
    assert!(s.runs < 7, "{s:?}");
    let check = |rows: Vec<Row>| {
        assert_eq!(rows.len(), 148, "every card of 0..150 but the deleted 10 and 140");
        for r in &rows {
            let card = match r.primary_key.get("card") {
                Some(PkValue::Integer(c)) => *c,
                other => panic!("card {other:?}"),
            };
            assert!(card != 10 && card != 140, "deleted card {card} is back");
            // The newest round that wrote the card.
            let newest = (2..6i64)
                .rev()
                .find(|r| (r * 20..r * 20 + 30).contains(&card))
                .map(|r| format!("r{r}"))
                .unwrap_or_else(|| if card >= 50 { "r1".into() } else { "r0".into() });
            assert_eq!(r.latest("v"), Some(&Value::from(newest.as_str())), "card {card}");
        }
    };
    check(scan_all(&t, GetRange::new()).await);
    drop(release);
    wait_until("the held compaction commits too", || {
        let s = t.stats();
        s.compactions >= 2 && s.runs <= 2
    })
    .await;
    check(scan_all(&t, GetRange::new()).await);
    t.compact().await.unwrap();
    assert_eq!(t.stats().runs, 1);
    check(scan_all(&t, GetRange::new()).await);
    drop(t);
    db.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_failing_midway_changes_nothing_and_the_next_one_succeeds() {
    for writes in [2, 1, 4] {
        compaction_failing_after(writes).await;
    }
}

async fn compaction_failing_after(writes: i64) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let local = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let store = Arc::new(FailingStore::over(Arc::new(local)));
    let options = || DbOptions {
        auto_compaction: false,
        // Small outputs, so that the failure hits after some were written.
        compaction_segment_bytes: 16 << 10,
        ..DbOptions::default().clock(clock.clone()).object_store(store.clone())
    };
    let db = Database::open_with(dir.path(), options()).await.unwrap();
    let t = card_order_table(&db, TableOptions::default()).await;
    for round in 0..3 {
        put_range(&t, round * 2000..(round + 1) * 2000 + 500, &format!("r{round}")).await;
        t.flush().await.unwrap();
    }
    let before = walkdir(dir.path().join("tables"));
    let rows_before = scan_all(&t, GetRange::new()).await;
    assert_eq!(rows_before.len(), 6500);
    store.fail_after(writes);
    let err = t.compact().await.unwrap_err();
    assert!(err.message().contains("injected"), "{}", err.message());
    // Readable and complete, with the same segments; the outputs written
    // before the failure are gone, and so are the staging files of failed
    // uploads (an upload whose part failed is cleaned up by the store in
    // the background).
    assert_eq!(t.stats().segments, 3);
    assert_eq!(scan_all(&t, GetRange::new()).await, rows_before);
    let mut expected = before.clone();
    expected.sort();
    let files = || {
        let mut after = walkdir(dir.path().join("tables"));
        after.sort();
        after
    };
    wait_until("only the input files are left", || files() == expected).await;
    store.heal();
    t.compact().await.unwrap();
    let s = t.stats();
    assert!(s.segments > 1 && s.runs == 1, "{s:?}");
    assert_eq!(scan_all(&t, GetRange::new()).await, rows_before);
    drop(t);
    db.close().await.unwrap();
    let db = Database::open_with(dir.path(), options()).await.unwrap();
    assert_eq!(scan_all(&db.table("t").unwrap(), GetRange::new()).await, rows_before);
}

/// Keys with several versions whose rows straddle the merge's read
/// batches, inputs with different columns and value types, keys one input
/// holds (copied) and keys both hold (folded): every version survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_keeps_every_version_across_batches_columns_and_types() {
    let (dir, clock, db, t) = manual_table_with(three_versions_kept()).await;
    let write = |keys: Vec<i64>, odd: bool| {
        let t = t.clone();
        async move {
            for chunk in keys.chunks(200) {
                let batch = chunk
                    .iter()
                    .map(|&i| {
                        let mut p = PutRow::new(pk(i, "a"));
                        for v in 0..3 {
                            p = if odd {
                                p.column_at("c", i as f64 + 0.5, T0 - 10 * v)
                            } else {
                                p.column_at("c", i * 10 + v, T0 - 100 - 10 * v)
                            };
                        }
                        if odd {
                            p = p.column_at("x", format!("x{i}"), T0);
                        }
                        RowWrite::from(p)
                    })
                    .collect();
                t.write_batch(batch).await.unwrap();
            }
        }
    };
    // 6000 keys x 3 ranks = 18000 rows: the 8192-row read batches end
    // inside a key. The newer segment holds odd keys and rewrites 0..300.
    write((0..12000).step_by(2).collect(), false).await;
    t.flush().await.unwrap();
    write((1..12000).step_by(2).chain(0..300).collect(), true).await;
    t.flush().await.unwrap();
    let all = || three_versions(GetRange::new());
    let before = scan_all(&t, all()).await;
    assert_eq!(before.len(), 12000);
    // Keys 0..300 hold 3 double versions (newer) over 3 integer ones: the
    // newest 3 are the doubles.
    assert_eq!(before[2].column("c").unwrap().len(), 3);
    assert_eq!(before[2].latest("c"), Some(&Value::Double(2.5)));
    t.compact().await.unwrap();
    let s = t.stats();
    assert_eq!((s.runs, s.compactions), (1, 1), "{s:?}");
    assert_eq!(scan_all(&t, all()).await, before);
    // The copied even keys above 300 kept all three integer versions.
    let r = &before[1000];
    assert_eq!(r.column("c").unwrap().len(), 3);
    assert_eq!(r.latest("c"), Some(&Value::Integer(1000 * 10)));
    reopened_reads_the_same(dir.path(), &clock, (db, t), all(), &before).await;
}

/// A full compaction of 40 segments of 1500 keys (of three versions)
/// reads its inputs 1024 rows at a time (the inputs share a row budget),
/// so every input is read in two batches, each expanded to its keys'
/// older versions. Neighbouring segments rewrite each other's keys with
/// newer versions, some delete keys of the one before: the merged table
/// equals what every read showed before, and after a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wide_merge_reads_small_batches_and_keeps_every_version() {
    let (dir, clock, db, t) = manual_table_with(three_versions_kept()).await;
    for s in 0..40i64 {
        // Keys s*1000 .. s*1000+1500: the first 500 are the previous
        // segment's last 500, written again with newer versions.
        let keys: Vec<i64> = (s * 1000..s * 1000 + 1500).collect();
        for chunk in keys.chunks(100) {
            let mut batch: Vec<RowWrite> = chunk
                .iter()
                .map(|&i| {
                    let mut p = PutRow::new(pk(i, "a"));
                    for v in 0..3 {
                        p = p.column_at("c", i * 100 + s * 10 + v, T0 - 1000 + s * 10 + v);
                    }
                    if (i + s) % 3 == 0 {
                        p = p.column_at("x", format!("s{s}"), T0 - 1000 + s * 10);
                    }
                    RowWrite::from(p)
                })
                .collect();
            if s % 7 == 6 && chunk[0] == s * 1000 {
                // Deletes of keys only the previous segment holds.
                batch.extend((s * 1000 - 60..s * 1000 - 50).map(|i| RowWrite::from(DeleteRow::new(pk(i, "a")))));
            }
            t.write_batch(batch).await.unwrap();
        }
        t.flush().await.unwrap();
    }
    assert_eq!(t.stats().segments, 40, "{:?}", t.stats());
    let all = || three_versions(GetRange::new());
    let before = scan_all(&t, all()).await;
    assert_eq!(before.len(), 39 * 1000 + 1500 - 5 * 10);
    // A rewritten key: the newer segment's three versions.
    let r = before.iter().find(|r| r.primary_key == pk(1200, "a")).unwrap();
    assert_eq!(r.latest("c"), Some(&Value::Integer(1200 * 100 + 10 + 2)));
    assert_eq!(r.column("c").unwrap().len(), 3);
    t.compact().await.unwrap();
    assert_eq!(t.stats().runs, 1, "{:?}", t.stats());
    assert_eq!(scan_all(&t, all()).await, before);
    reopened_reads_the_same(dir.path(), &clock, (db, t), all(), &before).await;
}

/// Compaction outputs stream through multipart uploads; the local store
/// stages them as `NAME#N`, out of its listings. A crash leaves such a file:
/// the next open deletes it, and keeps everything else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staged_uploads_left_by_a_crash_are_deleted_on_open() {
    let (dir, clock, db, t) = manual_table().await;
    put_range(&t, 0..100, "a").await;
    t.flush().await.unwrap();
    put_range(&t, 50..150, "b").await;
    t.flush().await.unwrap();
    t.compact().await.unwrap();
    let rows = scan_all(&t, GetRange::new()).await;
    assert_eq!(rows.len(), 150);
    drop(t);
    db.close().await.unwrap();
    let segments = walkdir(dir.path().join("tables"));
    assert_eq!(segments.len(), 1, "{segments:?}");
    let seg_dir = std::path::Path::new(&segments[0]).parent().unwrap().to_path_buf();
    let staged = seg_dir.join("00000000000000000099.parquet#3");
    std::fs::write(&staged, b"half an upload").unwrap();
    let db = Database::open_with(dir.path(), manual(&clock)).await.unwrap();
    assert!(!staged.exists());
    assert_eq!(walkdir(dir.path().join("tables")), segments);
    assert_eq!(scan_all(&db.table("t").unwrap(), GetRange::new()).await, rows);
}

/// `req` reading up to 3 versions of each column.
pub(crate) fn three_versions(req: GetRange) -> GetRange {
    req.options(ReadOptions {
        max_versions: Some(3),
        ..Default::default()
    })
}
