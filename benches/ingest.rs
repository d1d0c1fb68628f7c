//! Durable batched ingest of 7-column rows (issue target: >= 300k rows/s),
//! plain and conditional.
//!
//! `cargo bench --bench ingest [-- ROWS]`: writes ROWS rows (default 2M) in
//! BatchWriteRow-sized batches of 200 with 16 batches in flight, default
//! durability (fsync before acknowledging, group commit), memtable flushes
//! running as they would. Prints rows/s and MB of WAL. Then, interleaved
//! over `CELLAR_BENCH_ROUNDS` rounds (default 3), the same load plain and
//! with every PutRow conditional (EXPECT_NOT_EXIST on fresh keys: each
//! write reads its row first, and the committer confirms it unchanged):
//! medians and their ratio (target: conditional >= 50% of plain).
//!
//! Then the flush alone: `CELLAR_BENCH_FLUSH_ROWS` rows (default 1M, 0
//! skips it) written into one memtable large enough to hold them (no
//! fsync, no flush on the way), then flushed to a segment with
//! `Table::flush`, timed. A flush folds every key's writes and encodes
//! them as Parquet; under sustained ingest it is the largest CPU cost
//! besides the WAL, so its rate bounds what the load can sustain on a
//! small machine.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "common/mod.rs"]
mod common;

use std::time::Instant;

use cellar::*;

fn main() {
    let rows = common::rows_arg(2_000_000);
    common::runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(dir.path()).await.unwrap();
        let t = common::bench_table(&db).await;
        let start = Instant::now();
        common::write_pipelined(&t, rows, common::row).await;
        let secs = start.elapsed().as_secs_f64();
        let wal_bytes: u64 = std::fs::read_dir(dir.path().join("wal"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        let stats = t.stats();
        println!(
            "ingest: {rows} rows in {secs:.2} s = {:.0} rows/s (durability Sync; {} flushes, {:.1} MB of segments; \
             WAL left {:.1} MB; writer stall {:.2} s)",
            rows as f64 / secs,
            stats.flushes,
            stats.flush_bytes as f64 / 1e6,
            wal_bytes as f64 / 1e6,
            db.stall_micros() as f64 / 1e6
        );
        drop(t);
        db.close().await.unwrap();

        let conditional = |i: u64| match common::row(i) {
            RowWrite::Put(p) => RowWrite::Put(p.condition(Condition::expect_not_exist())),
            other => other,
        };
        let (mut plain, mut checked) = (Vec::new(), Vec::new());
        for round in 0..common::rounds(3) {
            for (cond, out) in [(false, &mut plain), (true, &mut checked)] {
                let dir = tempfile::tempdir().unwrap();
                let db = Database::open(dir.path()).await.unwrap();
                let t = common::bench_table(&db).await;
                let start = Instant::now();
                if cond {
                    common::write_pipelined(&t, rows, conditional).await;
                } else {
                    common::write_pipelined(&t, rows, common::row).await;
                }
                let rate = rows as f64 / start.elapsed().as_secs_f64();
                println!(
                    "round {round}: {} put {rate:.0} rows/s",
                    if cond { "conditional" } else { "plain" }
                );
                out.push(rate);
                drop(t);
                db.close().await.unwrap();
            }
        }
        if !plain.is_empty() {
            let (p, c) = (common::median(plain), common::median(checked));
            println!(
                "conditional put (expect_not_exist, fresh keys): {c:.0} rows/s vs plain {p:.0} rows/s = {:.0}% (medians)",
                100.0 * c / p
            );
        }

        let flush_rows: u64 = std::env::var("CELLAR_BENCH_FLUSH_ROWS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        if flush_rows == 0 {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let opts = DbOptions {
            durability: Durability::None,
            memtable_bytes: 8 << 30,
            write_buffer_bytes: 16 << 30,
            auto_compaction: false,
            ..Default::default()
        };
        let db = Database::open_with(dir.path(), opts).await.unwrap();
        let t = common::bench_table(&db).await;
        common::write_pipelined(&t, flush_rows, common::row).await;
        let mut times = Vec::new();
        // Three memtables of the same rows: the median flush is reported.
        for round in 0..3 {
            if round > 0 {
                common::write_pipelined(&t, flush_rows, common::row).await;
            }
            let start = Instant::now();
            t.flush().await.unwrap();
            times.push(start.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        println!(
            "flush: {flush_rows} rows from one memtable in {:.0} ms = {:.0} rows/s (median of 3; {:.0}-{:.0} ms)",
            times[1] * 1e3,
            flush_rows as f64 / times[1],
            times[0] * 1e3,
            times[2] * 1e3
        );
        drop(t);
        db.close().await.unwrap();
    });
}
