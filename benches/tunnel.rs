//! A tunnel's consumer against ingest (issue target: a consumer keeps up
//! with the ingest benchmark's rate).
//!
//! `cargo bench --bench tunnel [-- ROWS]` (default 1M): a table with a
//! change stream and a `stream` tunnel; ROWS 7-column rows written the way
//! the ingest bench writes them (batches of 200, 16 in flight), timed;
//! then a `TunnelWorker` whose callback counts the records (and touches
//! each key), timed, its checkpoints included; then the same with a
//! worker running beside the writer (`follow`), timed until it has every
//! record. Rounds: `CELLAR_BENCH_ROUNDS` (default 3), medians reported.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use cellar::*;

fn worker(db: &Database, name: &str, count: &Arc<AtomicU64>) -> TunnelWorker {
    let count = count.clone();
    db.tunnel_worker(
        "bench",
        name,
        Arc::new(move |_: &ChannelContext, records: &[StreamRecord]| {
            let keys: usize = records.iter().map(|r| r.primary_key.columns.len()).sum();
            std::hint::black_box(keys);
            count.fetch_add(records.len() as u64, Ordering::Relaxed);
            Ok(())
        }),
        Arc::new(|_: &ChannelContext| {}),
    )
    .unwrap()
}

fn main() {
    let rows = common::rows_arg(1_000_000);
    let rounds = common::rounds(3);
    let rt = common::runtime();
    rt.block_on(async {
        let (mut ingest, mut after, mut beside) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let dir = common::bench_dir();
            let db = Database::open(dir.path()).await.unwrap();
            let t = common::bench_table(&db).await;
            db.set_stream("bench", Some(StreamSpec::new(24))).await.unwrap();
            db.create_tunnel("bench", "after", TunnelType::Stream).await.unwrap();
            db.create_tunnel("bench", "beside", TunnelType::Stream).await.unwrap();
            // A consumer beside the writer, following.
            let seen = Arc::new(AtomicU64::new(0));
            let follower = worker(&db, "beside", &seen);
            let stop = follower.stopper();
            let follow = tokio::spawn(async move { follower.run(true).await });
            let start = Instant::now();
            common::write_pipelined(&t, rows, common::row).await;
            let written = start.elapsed().as_secs_f64();
            while seen.load(Ordering::Relaxed) < rows {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            let caught_up = start.elapsed().as_secs_f64();
            stop.store(true, Ordering::Release);
            follow.await.unwrap().unwrap();
            // A consumer started once everything is written.
            let count = Arc::new(AtomicU64::new(0));
            let start = Instant::now();
            while count.load(Ordering::Relaxed) < rows {
                worker(&db, "after", &count).run(false).await.unwrap();
            }
            let consumed = start.elapsed().as_secs_f64();
            eprintln!(
                "round {round}: ingest {written:.2} s; the follower had every record {caught_up:.2} s after the \
                 first write; a consumer afterwards {consumed:.2} s"
            );
            ingest.push(rows as f64 / written);
            beside.push(rows as f64 / caught_up);
            after.push(rows as f64 / consumed);
            db.close().await.unwrap();
        }
        println!("tunnel over {rows} rows (median of {rounds}):");
        println!(
            "  ingest                          {:>10.0} rows/s",
            common::median(ingest)
        );
        println!(
            "  follower beside the writer      {:>10.0} records/s (to the last record)",
            common::median(beside)
        );
        println!(
            "  consumer after the writes       {:>10.0} records/s",
            common::median(after)
        );
    });
}
