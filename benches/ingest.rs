//! Durable batched ingest of 7-column rows (issue target: >= 300k rows/s).
//!
//! `cargo bench --bench ingest [-- ROWS]`: writes ROWS rows (default 2M) in
//! BatchWriteRow-sized batches of 200 with 16 batches in flight, default
//! durability (fsync before acknowledging, group commit), memtable flushes
//! running as they would. Prints rows/s and MB/s of WAL.

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
    });
}
