//! Keys written in ascending order by several writers at once (a sorted
//! load, a time series): flushes are cut at the table's highest key,
//! automatic compactions carry the bulk into their runs unchanged, and
//! every row, also those overwritten, updated or deleted across those
//! flushes and compactions, reads back as written, through GetRow,
//! GetRange and SQL, before and after a reopen and a full compaction.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use cellar::sql::SqlSession;
use cellar::*;
use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{card_order_table, pk, scan_all};

const WRITERS: i64 = 4;
const ROWS: i64 = 40;

/// What a row holds: column name to latest value.
type Rows = BTreeMap<i64, BTreeMap<String, Value>>;

fn options() -> DbOptions {
    DbOptions {
        compaction_trigger_runs: 3,
        ..DbOptions::default().memtable_bytes(128 << 10)
    }
}

/// Batches `from..to` of `ROWS` new keys each, ascending, handed out to
/// `WRITERS` writers in order (as a sorted load's batches are): each writer
/// writes the batches it takes, and with `churn`, in the same batch, also
/// updates, overwrites or deletes two of its own earlier keys. Returns the
/// rows the writers expect (each key is written by one writer only).
async fn load(t: &Table, from: i64, to: i64, churn: bool) -> Rows {
    let next = Arc::new(AtomicI64::new(from));
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (t, next) = (t.clone(), next.clone());
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(w as u64 + 7 * from as u64);
                let mut rows = Rows::new();
                loop {
                    let b = next.fetch_add(1, Ordering::Relaxed);
                    if b >= to {
                        return rows;
                    }
                    let mut writes: Vec<RowWrite> = Vec::new();
                    let mut olds: Vec<i64> = Vec::new();
                    if churn && rows.len() > 2 {
                        let keys: Vec<i64> = rows.keys().copied().collect();
                        while olds.len() < 2 {
                            let k = keys[rng.random_range(0..keys.len())];
                            if !olds.contains(&k) {
                                olds.push(k);
                            }
                        }
                    }
                    for card in b * ROWS..(b + 1) * ROWS {
                        let v = format!("w{w}b{b}");
                        writes.push(
                            PutRow::new(pk(card, "k"))
                                .column("v", v.as_str())
                                .column("n", card)
                                .into(),
                        );
                        rows.insert(
                            card,
                            BTreeMap::from([("v".into(), Value::from(v)), ("n".into(), Value::from(card))]),
                        );
                    }
                    for card in olds {
                        let row = rows.entry(card).or_default();
                        match rng.random_range(0..3) {
                            0 => {
                                let u = format!("u{w}b{b}");
                                writes.push(
                                    UpdateRow::new(pk(card, "k"))
                                        .put("u", u.as_str())
                                        .delete_all("v")
                                        .into(),
                                );
                                row.insert("u".into(), Value::from(u));
                                row.remove("v");
                            }
                            1 => {
                                writes.push(PutRow::new(pk(card, "k")).column("n", -card).into());
                                *row = BTreeMap::from([("n".into(), Value::from(-card))]);
                            }
                            _ => {
                                writes.push(DeleteRow::new(pk(card, "k")).into());
                                rows.remove(&card);
                            }
                        }
                    }
                    for r in t.write_batch(writes).await.unwrap() {
                        r.unwrap();
                    }
                }
            })
        })
        .collect();
    let mut all = Rows::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    // A writer's earlier rows may have been deleted: drop the empty ones.
    all.retain(|_, r| !r.is_empty());
    all
}

/// Waits until the flushes and the compactions the policy asks for are
/// done: nothing frozen, and no compaction for half a second.
async fn settled(t: &Table) {
    let (mut last, mut quiet) = (u64::MAX, 0);
    for _ in 0..3000 {
        let s = t.stats();
        if s.frozen_memtables == 0 && s.compactions == last {
            quiet += 1;
            if quiet == 50 {
                return;
            }
        } else {
            (last, quiet) = (s.compactions, 0);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("compactions did not settle: {:?}", t.stats());
}

/// Closes `db` and opens it again, with `t` again.
async fn reopen(dir: &std::path::Path, db: Database, t: Table) -> (Database, Table) {
    drop(t);
    db.close().await.unwrap();
    let db = Database::open_with(dir, options()).await.unwrap();
    let t = db.table("t").unwrap();
    (db, t)
}

/// Every read agrees with `want`: a full GetRange, GetRow of a sample, and
/// SQL's count and sum.
async fn check(db: &Database, t: &Table, want: &Rows, what: &str) {
    let got: Rows = scan_all(t, GetRange::new())
        .await
        .into_iter()
        .map(|r| {
            let card = match &r.primary_key.columns[0].1 {
                PkValue::Integer(c) => *c,
                other => panic!("unexpected key {other:?}"),
            };
            let cols = r
                .columns
                .iter()
                .map(|(name, cells)| (name.clone(), cells[0].value.clone()))
                .collect();
            (card, cols)
        })
        .collect();
    assert_eq!(got.len(), want.len(), "{what}: rows");
    assert!(got == *want, "{what}: GetRange differs from what was written");
    for (card, cols) in want.iter().step_by(97) {
        let row = t.get_row(GetRow::new(pk(*card, "k"))).await.unwrap().row.unwrap();
        for (name, v) in cols {
            assert_eq!(row.latest(name), Some(v), "{what}: card {card} column {name}");
        }
    }
    let sql = SqlSession::new(db.clone());
    let batches = sql.query("SELECT count(*), sum(n) FROM t").await.unwrap();
    let count = batches[0].column(0).as_primitive::<Int64Type>().value(0);
    let sum = batches[0].column(1).as_primitive::<Int64Type>().value(0);
    let want_sum: i64 = want
        .values()
        .filter_map(|r| match r.get("n") {
            Some(Value::Integer(n)) => Some(*n),
            _ => None,
        })
        .sum();
    assert_eq!((count as usize, sum), (want.len(), want_sum), "{what}: SQL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_written_in_order_are_compacted_without_rewriting() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_with(dir.path(), options()).await.unwrap();
    let t = card_order_table(&db, TableOptions::default()).await;
    let want = load(&t, 0, 300, false).await;
    t.flush().await.unwrap();
    settled(&t).await;
    let s = t.stats();
    // Many flushes, merged by the policy, but what they merged was mostly
    // carried over: the bytes rewritten are a fraction of those flushed.
    assert!(s.flushes >= 10 && s.compactions >= 3, "{s:?}");
    assert!(s.compaction_moved_bytes > s.compaction_read_bytes, "{s:?}");
    assert!(s.compaction_bytes * 3 < s.flush_bytes, "{s:?}");
    check(&db, &t, &want, "after the load").await;
    let (db, t) = reopen(dir.path(), db, t).await;
    assert_eq!(t.stats().compaction_moved_bytes, s.compaction_moved_bytes);
    check(&db, &t, &want, "after a reopen").await;
    t.compact().await.unwrap();
    assert_eq!(t.stats().runs, 1);
    check(&db, &t, &want, "after a full compaction").await;
    drop(t);
    db.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_changed_behind_an_ordered_load_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Database::open_with(dir.path(), options()).await.unwrap();
    let mut t = card_order_table(&db, TableOptions::default()).await;
    let mut want = Rows::new();
    // Phases of ascending keys, each writer also changing its own earlier
    // keys (which land below the table's highest key, in the flushes' low
    // pieces), with reopens between them.
    for phase in 0..3 {
        let rows = load(&t, phase * 100, (phase + 1) * 100, phase > 0).await;
        // A later phase's writers change keys of their own phase only.
        want.extend(rows);
        check(&db, &t, &want, &format!("phase {phase}, while compactions run")).await;
        settled(&t).await;
        check(&db, &t, &want, &format!("phase {phase}, settled")).await;
        (db, t) = reopen(dir.path(), db, t).await;
        check(&db, &t, &want, &format!("phase {phase}, reopened")).await;
    }
    assert!(t.stats().compaction_moved_bytes > 0, "{:?}", t.stats());
    t.compact().await.unwrap();
    check(&db, &t, &want, "after a full compaction").await;
    drop(t);
    db.close().await.unwrap();
}

/// A flush's low piece (keys at or below the table's highest, here
/// overwrites) is merged with the segment it overlaps; the other segments
/// of the span join the output run as they are, and stay one run after a
/// reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_piece_is_merged_and_the_rest_carried() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || DbOptions {
        compaction_trigger_runs: 2,
        ..DbOptions::default()
    };
    let db = Database::open_with(dir.path(), opts()).await.unwrap();
    let t = card_order_table(&db, TableOptions::default()).await;
    let put = |card: i64, v: &str| PutRow::new(pk(card, "k")).column("v", v).column("n", card).into();
    let write = |writes: Vec<RowWrite>| {
        let t = t.clone();
        async move {
            for r in t.write_batch(writes).await.unwrap() {
                r.unwrap();
            }
        }
    };
    // Flush 1: one segment.
    write((0..150).map(|c| put(c, "a")).collect()).await;
    t.flush().await.unwrap();
    assert_eq!((t.stats().segments, t.stats().runs), (1, 1));
    // Flush 2: overwrites of 90..95 below the top (a low piece), the bulk
    // of the new keys and a tail of 20.
    write(
        (90..95)
            .chain(150..330)
            .map(|c| put(c, if c < 150 { "b" } else { "c" }))
            .collect(),
    )
    .await;
    t.flush().await.unwrap();
    settled(&t).await;
    let s = t.stats();
    // One compaction: the low piece and flush 1 merged into one segment,
    // flush 2's bulk and tail carried over.
    assert_eq!((s.compactions, s.runs, s.segments), (1, 1, 3), "{s:?}");
    assert!(s.compaction_read_bytes > 0 && s.compaction_moved_bytes > 0, "{s:?}");
    let mut want = Rows::new();
    for c in 0..330 {
        let v = match c {
            90..95 => "b",
            0..150 => "a",
            _ => "c",
        };
        want.insert(
            c,
            BTreeMap::from([("v".into(), Value::from(v)), ("n".into(), Value::from(c))]),
        );
    }
    check(&db, &t, &want, "after the compaction").await;
    drop(t);
    db.close().await.unwrap();
    let db = Database::open_with(dir.path(), opts()).await.unwrap();
    let t = db.table("t").unwrap();
    assert_eq!((t.stats().runs, t.stats().segments), (1, 3));
    check(&db, &t, &want, "after a reopen").await;
    drop(t);
    db.close().await.unwrap();
}
