//! SQL scans while a frozen memtable waits to be flushed under the active
//! one: each memtable gets its overlay of the segment and of the gaps
//! between segments, the active one's built over the frozen one (an
//! UpdateRow of a key the frozen memtable holds is merged over it), and a
//! scan takes each key's row from the newest. Checked against the row API
//! with updates, deletes and new keys in both memtables, through an
//! extension and after the flush succeeds.

use cellar::sql::SqlSession;
use cellar::*;
use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{pk, scan_all};
use crate::overlay_columns::xsy_table;
use crate::sql::{api_rows, rows, text_rows, write_ok};

/// Random writes over cards -5..3010 (the segment's and a few around it)
/// and, half of them when `tail` > 0, 5000..5000 + `tail` (past the
/// segment, in its gap): PutRows, UpdateRows of one column or two, a
/// column deleted, DeleteRows.
pub(crate) fn writes(rng: &mut StdRng, n: usize, tail: i64) -> Vec<RowWrite> {
    (0..n)
        .map(|_| {
            let card = if tail == 0 || rng.random_bool(0.5) {
                rng.random_range(-5..3010i64)
            } else {
                5000 + rng.random_range(0..tail)
            };
            let k = pk(card, ["o", "o2"][rng.random_range(0..2)]);
            let v = rng.random_range(0..6000i64);
            match rng.random_range(0..6) {
                0 => PutRow::new(k)
                    .column("x", v)
                    .column("s", format!("v{v:05}"))
                    .column("y", -v)
                    .into(),
                1 => UpdateRow::new(k).put("s", format!("v{v:05}")).into(),
                2 => UpdateRow::new(k).put("y", v).put("x", v + 1).into(),
                3 => UpdateRow::new(k).put("x", v).into(),
                4 => UpdateRow::new(k).delete_all("y").into(),
                _ => DeleteRow::new(k).into(),
            }
        })
        .collect()
}

/// Every query's answer against the row API.
async fn check(sess: &SqlSession, t: &Table, what: &str) {
    let all = scan_all(t, GetRange::new()).await;
    let q = "SELECT card, \"order\", x, s, y FROM t ORDER BY card, \"order\"";
    assert_eq!(
        text_rows(&rows(sess, q).await),
        api_rows(&all, &["x", "s", "y"]),
        "{what}: {q}"
    );
    let q = "SELECT card, \"order\", y FROM t WHERE s > 'v01500' ORDER BY card, \"order\"";
    let want: Vec<Row> = all
        .iter()
        .filter(|r| matches!(r.latest("s"), Some(Value::String(s)) if s.as_str() > "v01500"))
        .cloned()
        .collect();
    assert_eq!(text_rows(&rows(sess, q).await), api_rows(&want, &["y"]), "{what}: {q}");
    let b = rows(sess, "SELECT sum(x), count(*) FROM t").await;
    let sum: i64 = all
        .iter()
        .filter_map(|r| match r.latest("x") {
            Some(Value::Integer(x)) => Some(*x),
            _ => None,
        })
        .sum();
    let got = (
        b[0].column(0).as_primitive::<Int64Type>().value(0),
        b[0].column(1).as_primitive::<Int64Type>().value(0) as usize,
    );
    assert_eq!(got, (sum, all.len()), "{what}: sum(x), count(*)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_beside_a_frozen_memtable_use_overlays_of_both() {
    let (dir, store, options) = crate::faults::failing_store();
    let (db, t) = xsy_table(dir.path(), options(), false).await;
    let sess = SqlSession::new(db.clone());
    let mut rng = StdRng::seed_from_u64(21);

    // The frozen memtable: its flush fails until the store heals.
    write_ok(&t, writes(&mut rng, 3000, 1500)).await;
    check(&sess, &t, "one memtable").await;
    store.fail_all(true);
    assert!(t.flush().await.is_err());
    assert_eq!(t.stats().frozen_memtables, 1);

    // The active memtable over it: the same keys again, and others.
    write_ok(&t, writes(&mut rng, 3000, 1500)).await;
    let before = t.stats().scan_overlay_builds;
    check(&sess, &t, "a frozen memtable under the active one").await;
    assert!(
        t.stats().scan_overlay_builds >= before + 2,
        "the active memtable's overlays of the segment and the gap were built"
    );
    let (builds, extensions) = (t.stats().scan_overlay_builds, t.stats().scan_overlay_extensions);
    check(&sess, &t, "again").await;
    assert_eq!(
        (t.stats().scan_overlay_builds, t.stats().scan_overlay_extensions),
        (builds, extensions),
        "the overlays served the next scans as built"
    );
    write_ok(&t, writes(&mut rng, 500, 1500)).await;
    check(&sess, &t, "after the active memtable's overlays were extended").await;
    assert!(t.stats().scan_overlay_extensions > extensions);

    store.fail_all(false);
    t.flush().await.unwrap();
    assert_eq!(t.stats().frozen_memtables, 0);
    check(&sess, &t, "flushed").await;
    drop(sess);
    db.close().await.unwrap();
}

/// The active memtable's overlay of a segment is built over the frozen
/// memtable's keys anywhere in the segment's span, not only in the piece
/// of the scan that builds it: a later scan of the whole span reuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlay_built_by_a_range_scan_merges_the_frozen_memtable_outside_the_range() {
    let (dir, store, options) = crate::faults::failing_store();
    let (db, t) = xsy_table(dir.path(), options(), false).await;
    let sess = SqlSession::new(db.clone());
    // Frozen: updates of keys new to the table (x) and of segment rows (x).
    let frozen: Vec<RowWrite> = (2000..2100i64)
        .flat_map(|c| {
            [
                UpdateRow::new(pk(c, "o2")).put("x", -c).into(),
                UpdateRow::new(pk(c, "o")).put("x", -c).into(),
            ]
        })
        .collect();
    write_ok(&t, frozen).await;
    store.fail_all(true);
    assert!(t.flush().await.is_err());
    // Active: updates of the same keys (s), and keys early in the segment.
    let mut active: Vec<RowWrite> = (2000..2100i64)
        .flat_map(|c| {
            [
                UpdateRow::new(pk(c, "o2")).put("s", format!("w{c}")).into(),
                UpdateRow::new(pk(c, "o")).put("s", format!("w{c}")).into(),
            ]
        })
        .collect();
    active.extend((0..800i64).map(|c| UpdateRow::new(pk(c, "o")).put("s", format!("u{c}")).into()));
    write_ok(&t, active).await;
    // A scan of the first third builds the active memtable's overlay.
    let all = scan_all(&t, GetRange::new()).await;
    let first: Vec<Row> = all
        .iter()
        .filter(|r| matches!(r.primary_key.get("card"), Some(PkValue::Integer(c)) if *c < 1000))
        .cloned()
        .collect();
    let q = "SELECT card, \"order\", x, s FROM t WHERE card < 1000 ORDER BY card, \"order\"";
    assert_eq!(text_rows(&rows(&sess, q).await), api_rows(&first, &["x", "s"]), "{q}");
    let q = "SELECT card, \"order\", x, s FROM t ORDER BY card, \"order\"";
    assert_eq!(text_rows(&rows(&sess, q).await), api_rows(&all, &["x", "s"]), "{q}");
    store.fail_all(false);
    drop(sess);
    db.close().await.unwrap();
}
