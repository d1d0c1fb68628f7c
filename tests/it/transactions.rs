//! Local transactions: reads see their own writes and nobody else does
//! before the commit; other writers of the partition are refused; abort,
//! expiry and writes outside the partition; and a commit is all or nothing
//! across SIGKILL of the process that makes it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use cellar::*;

use crate::common::*;

async fn get(t: &Table, k: PrimaryKey) -> Option<Row> {
    t.get_row(GetRow::new(k)).await.unwrap().row
}

#[tokio::test]
async fn reads_see_own_writes_and_others_are_refused_until_commit() {
    let (_dir, _clock, db, t) = fixture(TableOptions::default()).await;
    t.put_row(PutRow::new(pk(1, "old")).column("n", 1)).await.unwrap();
    let tx = t.start_transaction(1i64).await.unwrap();
    tx.write(PutRow::new(pk(1, "a")).column("n", 10).into()).await.unwrap();
    tx.write(UpdateRow::new(pk(1, "old")).increment("n", 5).into())
        .await
        .unwrap();
    tx.write(DeleteRow::new(pk(1, "gone")).into()).await.unwrap();
    // The transaction sees its writes; the table does not yet.
    let row = tx.get_row(GetRow::new(pk(1, "old"))).await.unwrap().row.unwrap();
    assert_eq!(row.latest("n"), Some(&Value::Integer(6)));
    assert!(tx.get_row(GetRow::new(pk(1, "a"))).await.unwrap().row.is_some());
    assert!(get(&t, pk(1, "a")).await.is_none());
    assert_eq!(
        get(&t, pk(1, "old")).await.unwrap().latest("n"),
        Some(&Value::Integer(1))
    );
    let keys: Vec<PrimaryKey> = tx
        .get_range(GetRange::new())
        .await
        .unwrap()
        .rows
        .into_iter()
        .map(|r| r.primary_key)
        .collect();
    assert_eq!(keys, vec![pk(1, "a"), pk(1, "old")], "the range is the partition's");
    // Conditions in the transaction see its writes.
    let e = tx
        .write(PutRow::new(pk(1, "a")).condition(Condition::expect_not_exist()).into())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConditionCheckFail);
    // Other writers of partition 1 are refused, alone and in batches;
    // partition 2 is free.
    let e = t.put_row(PutRow::new(pk(1, "z")).column("n", 0)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RowOperationConflict);
    assert!(e.message().contains(&format!("transaction {}", tx.id())), "{e}");
    let r = db
        .batch_write(vec![
            ("t".into(), PutRow::new(pk(2, "x")).into()),
            ("t".into(), DeleteRow::new(pk(1, "old")).into()),
        ])
        .await
        .unwrap();
    assert!(r[0].is_ok());
    assert_eq!(r[1].as_ref().unwrap_err().kind(), ErrorKind::RowOperationConflict);
    assert_eq!(
        t.start_transaction(1i64).await.unwrap_err().kind(),
        ErrorKind::RowOperationConflict
    );
    // Writes and reads outside the partition are refused in it.
    let e = tx.write(PutRow::new(pk(2, "y")).into()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ParameterInvalid);
    assert!(e.message().contains("outside local transaction"), "{e}");
    tx.commit().await.unwrap();
    assert_eq!(
        get(&t, pk(1, "a")).await.unwrap().latest("n"),
        Some(&Value::Integer(10))
    );
    assert_eq!(
        get(&t, pk(1, "old")).await.unwrap().latest("n"),
        Some(&Value::Integer(6))
    );
    // The partition is free again.
    t.put_row(PutRow::new(pk(1, "z"))).await.unwrap();
}

#[tokio::test]
async fn abort_drop_and_expiry_free_the_partition() {
    let (_dir, clock, _db, t) = fixture(TableOptions::default()).await;
    let tx = t.start_transaction(7i64).await.unwrap();
    tx.write(PutRow::new(pk(7, "a")).into()).await.unwrap();
    tx.abort().await.unwrap();
    assert!(get(&t, pk(7, "a")).await.is_none());
    t.put_row(PutRow::new(pk(7, "b"))).await.unwrap();
    // Dropped without commit: aborted.
    {
        let tx = t.start_transaction(7i64).await.unwrap();
        tx.write(PutRow::new(pk(7, "c")).into()).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    t.put_row(PutRow::new(pk(7, "d"))).await.unwrap();
    assert!(get(&t, pk(7, "c")).await.is_none());
    // Used within 60 s it stays; idle for more it expires.
    let tx = t.start_transaction(7i64).await.unwrap();
    tx.write(PutRow::new(pk(7, "e")).into()).await.unwrap();
    clock.advance(50_000);
    tx.get_row(GetRow::new(pk(7, "e"))).await.unwrap();
    clock.advance(50_000);
    assert_eq!(
        t.put_row(PutRow::new(pk(7, "f"))).await.unwrap_err().kind(),
        ErrorKind::RowOperationConflict
    );
    clock.advance(10_001);
    t.put_row(PutRow::new(pk(7, "f"))).await.unwrap();
    let e = tx.write(PutRow::new(pk(7, "g")).into()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ObjectNotExist);
    assert!(e.message().contains("idle"), "{e}");
    assert_eq!(tx.commit().await.unwrap_err().kind(), ErrorKind::ObjectNotExist);
    assert!(
        get(&t, pk(7, "e")).await.is_none(),
        "an expired transaction commits nothing"
    );
    // A bad partition key value.
    let e = t.start_transaction("seven").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidPk);
}

/// Tasks run transactions on their own partitions while plain writers
/// update the same rows and readers scan them: a reader never sees half a
/// transaction, and plain writes are refused while one is open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_transactions_are_whole_under_concurrent_writers() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let db = Database::open_with(dir.path(), DbOptions::default().clock(clock).memtable_bytes(16 << 10))
        .await
        .unwrap();
    let t = card_order_table(&db, TableOptions::default()).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let running = |stop: &Arc<std::sync::atomic::AtomicBool>| !stop.load(std::sync::atomic::Ordering::Relaxed);
    let plain = {
        let (t, stop) = (t.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut ok, mut refused) = (0, 0);
            let mut i = 0i64;
            while running(&stop) {
                let k = pk(i % 3, &format!("r{}", i % 10));
                match t.update_row(UpdateRow::new(k).put("plain", i)).await {
                    Ok(_) => ok += 1,
                    Err(e) if e.kind() == ErrorKind::RowOperationConflict => refused += 1,
                    Err(e) => panic!("{e}"),
                }
                i += 1;
            }
            (ok, refused)
        })
    };
    let reader = {
        let (t, stop) = (t.clone(), stop.clone());
        tokio::spawn(async move {
            while running(&stop) {
                for p in 0..3i64 {
                    let rows = scan_all(&t, GetRange::new().start(pk(p, "r")).end(pk(p, "s"))).await;
                    let rounds: Vec<_> = rows.iter().map(|r| r.latest("round").cloned()).collect();
                    assert!(rounds.windows(2).all(|w| w[0] == w[1]), "partition {p}: {rounds:?}");
                }
            }
        })
    };
    let tasks: Vec<_> = (0..3i64)
        .map(|p| {
            let t = t.clone();
            tokio::spawn(async move {
                for round in 0..40i64 {
                    let tx = t.start_transaction(p).await.unwrap();
                    for i in 0..10 {
                        tx.write(UpdateRow::new(pk(p, &format!("r{i}"))).put("round", round).into())
                            .await
                            .unwrap();
                    }
                    tx.commit().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.await.unwrap();
    let (ok, refused) = plain.await.unwrap();
    assert!(ok > 0 && refused > 0, "plain writes: {ok} committed, {refused} refused");
    for p in 0..3i64 {
        let rows = scan_all(&t, GetRange::new().start(pk(p, "r")).end(pk(p, "s"))).await;
        assert_eq!(rows.len(), 10);
        assert!(rows.iter().all(|r| r.latest("round") == Some(&Value::Integer(39))));
    }
}

/// The child of `commits_are_all_or_nothing_across_sigkill`: commits
/// transactions of 50 rows each and prints each committed partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the writer process of commits_are_all_or_nothing_across_sigkill, which starts it"]
async fn transaction_writer_process() {
    let Ok(dir) = std::env::var("CELLAR_TXN_DIR") else {
        return;
    };
    let base: i64 = std::env::var("CELLAR_TXN_BASE").unwrap().parse().unwrap();
    let db = Database::open(&dir).await.unwrap();
    let t = db.table("t").unwrap();
    for p in base.. {
        let tx = t.start_transaction(p).await.unwrap();
        for i in 0..50 {
            tx.write(
                PutRow::new(pk(p, &format!("r{i:02}")))
                    .column("p", p)
                    .column("pad", "x".repeat(500))
                    .into(),
            )
            .await
            .unwrap();
        }
        tx.commit().await.unwrap();
        println!("committed {p}");
    }
}

#[tokio::test]
async fn commits_are_all_or_nothing_across_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(dir.path()).await.unwrap();
        card_order_table(&db, TableOptions::default()).await;
        db.close().await.unwrap();
    }
    let mut committed = Vec::new();
    for round in 0..3i64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "transactions::transaction_writer_process",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CELLAR_TXN_DIR", dir.path())
            .env("CELLAR_TXN_BASE", (round * 1_000_000).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let want = 20 + round as usize * 15;
        let mut n = 0;
        while n < want {
            let line = lines.next().unwrap().unwrap();
            if let Some(p) = line.strip_prefix("committed ") {
                committed.push(p.trim().parse::<i64>().unwrap());
                n += 1;
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let db = Database::open(dir.path()).await.unwrap();
        let t = db.table("t").unwrap();
        let mut per: std::collections::BTreeMap<i64, usize> = Default::default();
        for r in scan_all(&t, GetRange::new()).await {
            let PkValue::Integer(p) = r.primary_key.columns[0].1 else {
                panic!()
            };
            assert_eq!(r.latest("p"), Some(&Value::Integer(p)));
            *per.entry(p).or_default() += 1;
        }
        for (p, n) in &per {
            assert_eq!(*n, 50, "round {round}: partition {p} has {n} of its 50 rows");
        }
        for p in &committed {
            assert_eq!(per.get(p), Some(&50), "committed partition {p} lost");
        }
        db.close().await.unwrap();
    }
}
