//! SQL scans that keep the leading key column are one partition read in
//! parallel chunks: their rows must come out in key order, once each, as
//! the newest state of every key, across chunk boundaries, segments that
//! overlap, memtable writes of every kind, and limits; and they must equal
//! the same scan read as one stream.

use cellar::sql::{session_config, session_context_with};
use cellar::*;
use datafusion::arrow::array::RecordBatch;
use datafusion::prelude::SessionContext;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{pk, scan_all};
use crate::sql::{grouped_table_of, text_rows};

async fn query(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    let df = ctx.sql(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    df.collect().await.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Each row's key as the row API gives it, in the order it gives them.
fn api_keys(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .map(|r| match (&r.primary_key.columns[0].1, &r.primary_key.columns[1].1) {
            (PkValue::Integer(c), PkValue::String(o)) => format!("card={c} order={o}"),
            k => panic!("unexpected key {k:?}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_scans_keep_key_order_across_chunks_segments_and_the_memtable() {
    // 3000 rows in 64-row groups: 47 groups, 12 chunks of 4 groups.
    let stored = (0..3000i64).map(|i| (i / 3, format!("o{}", i % 3 * 2)));
    let (_dir, _clock, db, t) = grouped_table_of(stored).await;
    let mut rng = StdRng::seed_from_u64(5);
    // Two rounds of writes over the same keys: the first flushed into a
    // segment overlapping the base (merged pieces), the second left in the
    // memtable (overlays). Overwrites, updates, deletes, and keys new to
    // the table between stored keys, before the first and after the last.
    for round in 0..2 {
        let mut writes: Vec<RowWrite> = Vec::new();
        for _ in 0..600 {
            let card = rng.random_range(-3..1003i64);
            let order = format!("o{}", rng.random_range(0..6));
            let k = pk(card, &order);
            writes.push(match rng.random_range(0..4) {
                0 => PutRow::new(k)
                    .column("x", 10_000 + card)
                    .column("s", format!("r{round}"))
                    .into(),
                1 => UpdateRow::new(k).put("x", 20_000 + card).delete_all("s").into(),
                2 => UpdateRow::new(k).put("s", format!("u{round}")).into(),
                _ => DeleteRow::new(k).into(),
            });
        }
        for batch in writes.chunks(200) {
            for r in t.write_batch(batch.to_vec()).await.unwrap() {
                r.unwrap();
            }
        }
        if round == 0 {
            t.flush().await.unwrap();
            assert_eq!(t.stats().segments, 2);
        }
    }

    let chunked = session_context_with(&db, session_config().with_target_partitions(3));
    let single = session_context_with(&db, session_config().with_target_partitions(1));
    let all = "SELECT card, \"order\", x, s FROM t";
    let plan = text_rows(&query(&chunked, &format!("EXPLAIN {all}")).await).join("\n");
    assert!(plan.contains("ordered_chunks="), "{plan}");
    let single_plan = text_rows(&query(&single, &format!("EXPLAIN {all}")).await).join("\n");
    assert!(!single_plan.contains("ordered_chunks="), "{single_plan}");

    // In key order, each key once, equal to the row API and to one stream.
    let got = text_rows(&query(&chunked, all).await);
    let api = api_keys(&scan_all(&t, GetRange::new()).await);
    let keys: Vec<String> = got
        .iter()
        .map(|r| r.split(' ').take(2).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(keys, api, "SQL rows out of key order or not the row API's keys");
    assert_eq!(got, text_rows(&query(&single, all).await));

    // Projections of the key alone, a limit, a sorted aggregate, a filter.
    for sql in [
        "SELECT card FROM t",
        "SELECT card, s FROM t LIMIT 700",
        "SELECT card, count(*) AS n, sum(x) AS sx FROM t GROUP BY card ORDER BY card",
        "SELECT count(DISTINCT card) AS n FROM t",
        "SELECT card, \"order\" FROM t WHERE x > 20500 ORDER BY card, \"order\"",
        "SELECT card, \"order\" FROM t ORDER BY card, \"order\" LIMIT 9",
    ] {
        let a = text_rows(&query(&chunked, sql).await);
        let b = text_rows(&query(&single, sql).await);
        assert_eq!(a, b, "{sql}");
    }
    // A limit without ORDER BY takes any rows, but whole and distinct ones.
    let some = text_rows(&query(&chunked, "SELECT card, \"order\" FROM t LIMIT 700").await);
    assert_eq!(some.len(), 700);
    let known: std::collections::BTreeSet<&String> = api.iter().collect();
    let distinct: std::collections::BTreeSet<&String> = some.iter().collect();
    assert_eq!(distinct.len(), 700);
    assert!(
        some.iter().all(|k| known.contains(k)),
        "a limit returned a key the table lacks"
    );
    let top = text_rows(
        &query(
            &chunked,
            "SELECT card, \"order\" FROM t ORDER BY card, \"order\" LIMIT 9",
        )
        .await,
    );
    assert_eq!(top, api[..9].to_vec());
}

/// Chunked scans beside a writer that overwrites and updates the same keys
/// while flushes and compactions replace the segments under the scans:
/// every scan sees each key once, in key order, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_scans_beside_overwrites_flushes_and_compactions_lose_no_key() {
    let keys = 3000i64;
    let stored = (0..keys).map(|i| (i / 3, format!("o{}", i % 3)));
    let (_dir, _clock, db, t) = grouped_table_of(stored).await;
    let want: Vec<String> = (0..keys).map(|i| format!("card={} order=o{}", i / 3, i % 3)).collect();
    let writer = {
        let t = t.clone();
        tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(9);
            for round in 0..30 {
                let writes: Vec<RowWrite> = (0..200)
                    .map(|_| {
                        let i = rng.random_range(0..keys);
                        let k = pk(i / 3, &format!("o{}", i % 3));
                        if rng.random_bool(0.5) {
                            PutRow::new(k)
                                .column("x", round)
                                .column("s", format!("p{round}"))
                                .into()
                        } else {
                            UpdateRow::new(k).put("x", round).delete_all("s").into()
                        }
                    })
                    .collect();
                for r in t.write_batch(writes).await.unwrap() {
                    r.unwrap();
                }
                match round % 10 {
                    4 => t.flush().await.unwrap(),
                    9 => t.compact().await.unwrap(),
                    _ => {}
                }
            }
        })
    };
    let ctx = session_context_with(&db, session_config().with_target_partitions(2));
    let mut scans = 0;
    while !writer.is_finished() || scans < 3 {
        let got = text_rows(&query(&ctx, "SELECT card, \"order\", x FROM t").await);
        let got: Vec<String> = got
            .iter()
            .map(|r| r.split(' ').take(2).collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(got, want, "scan {scans} lost, doubled or reordered keys");
        scans += 1;
    }
    writer.await.unwrap();
    let plan = text_rows(&query(&ctx, "EXPLAIN SELECT card, \"order\", x FROM t").await).join("\n");
    assert!(plan.contains("ordered_chunks="), "{plan}");
}
