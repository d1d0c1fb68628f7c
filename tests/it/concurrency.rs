//! Writers and scans at the same time: every scan sees one consistent state.

use std::sync::Arc;

use cellar::*;

use crate::common::*;

/// Each batch writes generation g to all ten rows of a group in one
/// commit; a scan must never see two generations within a group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_see_whole_batches_while_writers_and_flushes_run() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let db = Database::open_with(
        dir.path(),
        DbOptions::default().clock(clock.clone()).memtable_bytes(16 << 10),
    )
    .await
    .unwrap();
    let t = card_order_table(&db, TableOptions::default()).await;
    let writers: Vec<_> = (0..4i64)
        .map(|group| {
            let t = t.clone();
            tokio::spawn(async move {
                for g in 0..150i64 {
                    let batch: Vec<RowWrite> = (0..10)
                        .map(|i| {
                            PutRow::new(pk(group, &format!("r{i}")))
                                .column("gen", g)
                                .column("pad", "x".repeat(50))
                                .into()
                        })
                        .collect();
                    for r in t.write_batch(batch).await.unwrap() {
                        r.unwrap();
                    }
                }
            })
        })
        .collect();
    let mut scans = 0;
    while writers.iter().any(|w| !w.is_finished()) || scans < 5 {
        let rows = t.get_range(GetRange::new()).await.unwrap().rows;
        for group in rows.chunk_by(|a, b| a.primary_key.columns[0] == b.primary_key.columns[0]) {
            let gens: Vec<_> = group.iter().map(|r| r.latest("gen").cloned()).collect();
            assert_eq!(group.len(), 10, "a group is written whole");
            assert!(gens.windows(2).all(|w| w[0] == w[1]), "torn batch seen: {gens:?}");
        }
        scans += 1;
    }
    for w in writers {
        w.await.unwrap();
    }
    let rows = scan_all(&t, GetRange::new()).await;
    assert_eq!(rows.len(), 40);
    assert!(rows.iter().all(|r| r.latest("gen") == Some(&Value::Integer(149))));
    assert!(
        t.stats().flushes > 0,
        "the small memtable budget made flushes run during the test"
    );
}
