//! Range partitions and parallel SQL (issue target: a GROUP BY over 10M
//! rows in 4 partitions at least 1.7x faster than the same table in one
//! partition, on 2 cores).
//!
//! `cargo bench --bench partitions [-- ROWS]` (default 10M): loads the
//! same ROWS 7-column rows into two tables, `one` (one partition) and
//! `four` (split at three card_id values into four, then compacted), and
//! runs the GROUP BY and the filtered aggregate of the `sql` bench on
//! three variants, interleaved round by round (`CELLAR_BENCH_ROUNDS`,
//! default 5), medians reported: `one` read as one DataFusion partition
//! (`target_partitions = 1`: what a scan per table partition gives a
//! table of one), `one` as the engine reads it (a partition per core,
//! cut at row-group bounds), and `four` (a DataFusion partition per
//! table partition).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "common/mod.rs"]
mod common;

use std::time::Instant;

use cellar::sql::{session_config, session_context, session_context_with};
use cellar::*;
use datafusion::prelude::SessionContext;

const GROUP_BY: &str = "SELECT seller_id, count(*), sum(amount) FROM {t} GROUP BY seller_id";
const FILTERED: &str = "SELECT category, count(*), sum(amount) FROM {t} WHERE amount > 90 GROUP BY category";

async fn load(db: &Database, name: &str, rows: u64) -> Table {
    let mut schema = common::schema();
    schema.name = name.to_string();
    db.create_table(schema, TableOptions::default()).await.unwrap();
    let t = db.table(name).unwrap();
    let start = Instant::now();
    common::write_pipelined(&t, rows, common::row).await;
    t.compact().await.unwrap();
    eprintln!(
        "{name}: {rows} rows loaded and compacted in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    t
}

async fn secs(ctx: &SessionContext, sql: &str) -> f64 {
    let start = Instant::now();
    let b = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    std::hint::black_box(b);
    start.elapsed().as_secs_f64()
}

fn main() {
    let rows = common::rows_arg(10_000_000);
    let rounds = common::rounds(5);
    let rt = common::runtime();
    rt.block_on(async {
        let dir = common::bench_dir();
        let db = Database::open(dir.path()).await.unwrap();
        load(&db, "one", rows).await;
        let four = load(&db, "four", rows).await;
        let start = Instant::now();
        for at in [25_000i64, 50_000, 75_000] {
            assert!(four.split_partition(at).await.unwrap());
        }
        four.compact().await.unwrap();
        eprintln!(
            "four: split and compacted in {:.1} s; partitions {:?}",
            start.elapsed().as_secs_f64(),
            four.partitions()
                .await
                .unwrap()
                .iter()
                .map(|p| p.rows)
                .collect::<Vec<_>>()
        );
        let default = session_context(&db);
        let single = session_context_with(&db, session_config().with_target_partitions(1));
        for (label, query) in [("GROUP BY", GROUP_BY), ("filtered aggregate", FILTERED)] {
            let variants: [(&str, &SessionContext, &str); 3] = [
                ("one partition, 1 DataFusion partition", &single, "one"),
                ("one partition, a DataFusion partition per core", &default, "one"),
                ("four partitions", &default, "four"),
            ];
            for (_, ctx, t) in &variants {
                secs(ctx, &query.replace("{t}", t)).await;
            }
            let mut times = vec![Vec::new(); variants.len()];
            for _ in 0..rounds {
                for (i, (_, ctx, t)) in variants.iter().enumerate() {
                    times[i].push(secs(ctx, &query.replace("{t}", t)).await);
                }
            }
            let medians: Vec<f64> = times.into_iter().map(common::median).collect();
            println!("{label} over {rows} rows (median of {rounds}):");
            for ((name, _, _), m) in variants.iter().zip(&medians) {
                println!(
                    "  {name:<48} {:>8.1} ms   {:.2}x faster than one DataFusion partition",
                    m * 1000.0,
                    medians[0] / m
                );
            }
        }
        db.close().await.unwrap();
    });
}
