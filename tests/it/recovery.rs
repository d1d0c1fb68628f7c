//! Reopening: WAL replay, flushed data, the catalog, the lock, corruption.

use std::sync::Arc;

use cellar::*;

use crate::common::*;

#[tokio::test]
async fn writes_survive_reopen_with_and_without_flush() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    {
        let db = open(dir.path(), &clock).await;
        let t = card_order_table(
            &db,
            TableOptions {
                max_versions: 2,
                ..Default::default()
            },
        )
        .await;
        for i in 0..50 {
            t.put_row(PutRow::new(pk(i, "a")).column("n", i)).await.unwrap();
        }
        t.flush().await.unwrap();
        for i in 50..100 {
            t.put_row(PutRow::new(pk(i, "a")).column("n", i)).await.unwrap();
        }
        t.delete_row(DeleteRow::new(pk(3, "a"))).await.unwrap();
        db.create_table(
            TableSchema::new("gone").pk("k", PkType::String),
            TableOptions::default(),
        )
        .await
        .unwrap();
        db.table("gone")
            .unwrap()
            .put_row(PutRow::new(PrimaryKey::new().with("k", "x")).column("n", 1))
            .await
            .unwrap();
        db.drop_table("gone").await.unwrap();
    }
    let db = open(dir.path(), &clock).await;
    assert_eq!(db.list_tables(), vec!["t".to_string()]);
    assert_eq!(db.describe_table("t").unwrap().options.max_versions, 2);
    let t = db.table("t").unwrap();
    let rows = scan_all(&t, GetRange::new()).await;
    assert_eq!(rows.len(), 99);
    assert!(t.get_row(GetRow::new(pk(3, "a"))).await.unwrap().row.is_none());
    assert_eq!(
        t.get_row(GetRow::new(pk(77, "a")))
            .await
            .unwrap()
            .row
            .unwrap()
            .latest("n"),
        Some(&Value::Integer(77))
    );
    // a dropped table's name can be reused and starts empty
    db.create_table(
        TableSchema::new("gone").pk("k", PkType::String),
        TableOptions::default(),
    )
    .await
    .unwrap();
    assert!(scan_all(&db.table("gone").unwrap(), GetRange::new()).await.is_empty());
}

#[tokio::test]
async fn a_second_open_is_refused_while_the_first_holds_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let db = open(dir.path(), &clock).await;
    let err = Database::open(dir.path()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DatabaseLocked);
    assert!(err.message().contains("in use"), "{}", err.message());
    drop(db);
    Database::open(dir.path()).await.unwrap();
}

#[tokio::test]
async fn a_corrupt_wal_record_in_the_middle_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    {
        let db = open(dir.path(), &clock).await;
        let t = card_order_table(&db, TableOptions::default()).await;
        for i in 0..10 {
            t.put_row(PutRow::new(pk(i, "a")).column("n", i)).await.unwrap();
        }
    }
    let wal = std::fs::read_dir(dir.path().join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| std::fs::metadata(p).unwrap().len() > 0)
        .unwrap();
    let mut bytes = std::fs::read(&wal).unwrap();
    // The first record starts after the 8-byte magic; its payload after
    // the 12-byte header.
    bytes[24] ^= 0x55;
    std::fs::write(&wal, &bytes).unwrap();
    let err = Database::open(dir.path()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corruption);
    assert!(err.message().contains("offset 8"), "{}", err.message());
    // a torn tail, on the other hand, is cut off and the rest replays
    bytes[24] ^= 0x55;
    let len = bytes.len();
    std::fs::write(&wal, &bytes[..len - 2]).unwrap();
    let db = open(dir.path(), &clock).await;
    assert_eq!(scan_all(&db.table("t").unwrap(), GetRange::new()).await.len(), 9);
}

/// WAL files whose writes are all in segments are deleted, so reopening
/// does not replay (or keep) history that is already flushed.
#[tokio::test]
async fn flushed_wal_files_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let wal_files = || std::fs::read_dir(dir.path().join("wal")).unwrap().count();
    for round in 0..3 {
        let db = open(dir.path(), &clock).await;
        if round == 0 {
            card_order_table(&db, TableOptions::default()).await;
        }
        let t = db.table("t").unwrap();
        for i in 0..100 {
            t.put_row(PutRow::new(pk(i, "a")).column("n", round)).await.unwrap();
        }
        t.flush().await.unwrap();
        drop(t);
        db.close().await.unwrap();
    }
    let db = open(dir.path(), &clock).await;
    assert_eq!(wal_files(), 1, "only the new, empty WAL file is left");
    let rows = scan_all(&db.table("t").unwrap(), GetRange::new()).await;
    assert_eq!(rows.len(), 100);
    assert!(rows.iter().all(|r| r.latest("n") == Some(&Value::Integer(2))));
}

/// Files no manifest references (a flush that crashed before its manifest
/// commit, a dropped table's leftovers) are deleted at open; referenced
/// segments stay.
#[tokio::test]
async fn unreferenced_files_are_deleted_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    {
        let db = open(dir.path(), &clock).await;
        let t = card_order_table(&db, TableOptions::default()).await;
        t.put_row(PutRow::new(pk(1, "a")).column("n", 1)).await.unwrap();
        t.flush().await.unwrap();
    }
    let segs = dir.path().join("tables/1/segments");
    let orphan = segs.join("00000000000000000099.parquet");
    std::fs::write(&orphan, b"half-written").unwrap();
    let gone_table = dir.path().join("tables/77/segments");
    std::fs::create_dir_all(&gone_table).unwrap();
    std::fs::write(gone_table.join("00000000000000000001.parquet"), b"x").unwrap();
    let db = open(dir.path(), &clock).await;
    assert!(!orphan.exists());
    assert!(!gone_table.join("00000000000000000001.parquet").exists());
    assert_eq!(std::fs::read_dir(&segs).unwrap().count(), 1);
    let t = db.table("t").unwrap();
    assert_eq!(
        t.get_row(GetRow::new(pk(1, "a")))
            .await
            .unwrap()
            .row
            .unwrap()
            .latest("n"),
        Some(&Value::Integer(1))
    );
}

/// `close()` returns only once the directory lock is released: reopening
/// right after it never finds the directory in use, even when background
/// flushes and compactions were running to the last moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_right_after_close_finds_the_directory_free() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..150i64 {
        let (db, t) = open_round(dir.path(), round).await;
        write_round(&t, round).await;
        drop(t);
        db.close().await.unwrap();
    }
}

/// Tiny memtables and an eager compaction trigger: background work runs
/// up to the moment a round ends.
fn busy_options() -> DbOptions {
    DbOptions {
        compaction_trigger_runs: 2,
        ..DbOptions::default().memtable_bytes(4 << 10)
    }
}

async fn open_round(dir: &std::path::Path, round: i64) -> (Database, Table) {
    let db = Database::open_with(dir, busy_options())
        .await
        .unwrap_or_else(|e| panic!("round {round}: {e}"));
    if round == 0 {
        db.create_table(TableSchema::new("t").pk("k", PkType::Integer), TableOptions::default())
            .await
            .unwrap();
    }
    let t = db.table("t").unwrap();
    (db, t)
}

/// 200 rows whose `r` is the round.
async fn write_round(t: &Table, round: i64) {
    let batch: Vec<RowWrite> = (0..200)
        .map(|i| PutRow::new(PrimaryKey::new().with("k", i)).column("r", round).into())
        .collect();
    for r in t.write_batch(batch).await.unwrap() {
        r.unwrap();
    }
}

/// Dropping every handle without `close()` (an early return on an error
/// path, say) and opening the directory again in the same process
/// succeeds, also while the dropped database's background flushes and
/// compactions are still running: the open waits for their release of the
/// directory. Every acknowledged write is there. A directory still open in
/// this process is refused at once, with a message that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_right_after_drop_waits_for_the_release() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..100i64 {
        let (db, t) = open_round(dir.path(), round).await;
        if round > 0 {
            let row = t
                .get_row(GetRow::new(PrimaryKey::new().with("k", 199)))
                .await
                .unwrap()
                .row;
            assert_eq!(
                row.unwrap().latest("r"),
                Some(&Value::Integer(round - 1)),
                "round {round}"
            );
        }
        if round == 1 {
            let e = Database::open_with(dir.path(), busy_options()).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::DatabaseLocked);
            assert!(e.message().contains("already open in this process"), "{e}");
        }
        write_round(&t, round).await;
        drop((t, db));
    }
}
