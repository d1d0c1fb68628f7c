//! SQL scans of key ranges no segment overlaps (keys before, between and
//! after the segments, or a table with no segment yet), read from the
//! memtable's overlay of the gap: PutRows, UpdateRows over memtable keys,
//! DeleteRows and explicit versions, scanned whole, by key range and with
//! a filter, after extensions and with writers racing the scans; every
//! result checked against the row API.

use std::sync::Arc;

use cellar::sql::SqlSession;
use cellar::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{T0, pk};
use crate::sql::{grouped_table_of, overlay_check, rows, text_rows, write_ok};

/// A random write to key `(card, order)` (an order of 4).
fn random_write(rng: &mut StdRng, card: i64) -> RowWrite {
    let k = pk(card, ["", "o", "o2", "p"][rng.random_range(0..4)]);
    match rng.random_range(0..6) {
        0 | 1 => PutRow::new(k)
            .column("x", rng.random_range(0..5000i64))
            .column("s", format!("n{}", rng.random_range(0..100)))
            .into(),
        2 => UpdateRow::new(k).put("x", rng.random_range(0..5000i64)).into(),
        3 => UpdateRow::new(k)
            .put_at(
                "x",
                rng.random_range(0..5000i64),
                T0 + rng.random_range(-5_000..5_000i64),
            )
            .into(),
        4 => UpdateRow::new(k).delete_all("x").put("s", "u").into(),
        _ => DeleteRow::new(k).into(),
    }
}

/// A batch of `n` random writes to cards in `cards`.
fn writes(rng: &mut StdRng, cards: std::ops::Range<i64>, n: usize) -> Vec<RowWrite> {
    (0..n)
        .map(|_| {
            let c = rng.random_range(cards.clone());
            random_write(rng, c)
        })
        .collect()
}

/// A segment holds cards 1000..1300; the memtable gets thousands of keys
/// below and above it (gaps), a few inside it; scans read the gaps from
/// their overlays, extended after each round of writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gaps_are_read_from_memtable_overlays() {
    let (_dir, _clock, db, t) = grouped_table_of((1000..1300i64).map(|i| (i, "o".to_string()))).await;
    let mut rng = StdRng::seed_from_u64(5);
    let sess = SqlSession::new(db.clone());
    let mut batch = writes(&mut rng, 0..1000, 3000);
    batch.extend(writes(&mut rng, 1300..2500, 3000));
    batch.extend(writes(&mut rng, 1000..1300, 50));
    write_ok(&t, batch).await;
    overlay_check(&sess, &t, "first scans").await;
    let built = t.stats().scan_overlay_builds;
    assert!(built >= 3, "the segment's overlay and both gaps': {built}");
    for round in 0..5 {
        let (lo, hi) = [(0, 1000), (1300, 2500), (0, 2500), (2500, 2600), (-50, 0)][round];
        write_ok(&t, writes(&mut rng, lo..hi, 400 + 300 * round)).await;
        overlay_check(&sess, &t, &format!("round {round}")).await;
    }
    assert!(t.stats().scan_overlay_extensions > 0, "{:?}", t.stats());
    drop(sess);
    db.close().await.unwrap();
}

/// A table with no segment: the whole memtable is one gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_without_segments_is_read_from_its_overlay() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let db = crate::common::open(dir.path(), &clock).await;
    let t = crate::common::card_order_table(&db, TableOptions::default()).await;
    let mut rng = StdRng::seed_from_u64(9);
    write_ok(&t, writes(&mut rng, 0..2000, 5000)).await;
    assert_eq!(t.stats().segments, 0);
    let sess = SqlSession::new(db.clone());
    overlay_check(&sess, &t, "no segment").await;
    assert_eq!(t.stats().scan_overlay_builds, 1, "{:?}", t.stats());
    write_ok(&t, writes(&mut rng, 0..2000, 500)).await;
    overlay_check(&sess, &t, "extended").await;
    assert_eq!(t.stats().scan_overlay_extensions, 1, "{:?}", t.stats());
    // A narrow scan uses the overlay too (it holds the snapshot's writes).
    let b = rows(&sess, "SELECT count(*) FROM t WHERE card = 7").await;
    let want = crate::common::scan_all(&t, GetRange::new())
        .await
        .iter()
        .filter(|r| r.primary_key.get("card") == Some(&PkValue::Integer(7)))
        .count();
    assert_eq!(text_rows(&b), vec![format!("count(*)={want}")]);
    drop(sess);
    db.close().await.unwrap();
}

/// A writer adds keys to a gap while scans run: whether a scan builds,
/// extends or reuses the gap's overlay, it sees a prefix of the writer's
/// keys (its snapshot), so counts never fall, and the last one is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gap_overlays_beside_a_writer() {
    let (_dir, _clock, db, t) = grouped_table_of((1000..1300i64).map(|i| (i, "o".to_string()))).await;
    let mut rng = StdRng::seed_from_u64(13);
    write_ok(&t, writes(&mut rng, 1300..3000, 4000)).await;
    let writer = {
        let t = t.clone();
        tokio::spawn(async move {
            for b in 0..40i64 {
                let batch = (0..100).map(|i| PutRow::new(pk(3000 + b * 100 + i, "w")).column("x", 1i64).into());
                write_ok(&t, batch.collect()).await;
            }
        })
    };
    let sess = SqlSession::new(db.clone());
    let q = "SELECT count(*), sum(x) FROM t WHERE card >= 3000";
    let mut last = 0;
    let mut scans = 0;
    while !writer.is_finished() {
        let got = text_rows(&rows(&sess, q).await);
        let n: i64 = got[0].split(['=', ' ']).nth(1).unwrap().parse().unwrap();
        assert!(n >= last, "a scan saw {n} of the writer's rows after one saw {last}");
        last = n;
        scans += 1;
    }
    writer.await.unwrap();
    assert_eq!(text_rows(&rows(&sess, q).await), vec!["count(*)=4000 sum(t.x)=4000"]);
    assert!(scans > 1);
    overlay_check(&sess, &t, "after the writer").await;
    drop(sess);
    db.close().await.unwrap();
}
