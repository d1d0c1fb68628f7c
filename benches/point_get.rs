//! Point get of the latest version from flushed segments, metadata cached
//! (issue target: p50 <= 100 us).
//!
//! `cargo bench --bench point_get [-- ROWS]`: loads ROWS 7-column rows
//! (default 1M), flushes them to segments, warms the footer cache, then
//! times 20,000 GetRow calls on random existing keys and 5,000 on missing
//! keys, one at a time, then 5,000 10-row range scans from a random card on,
//! 5,000 reads of one card's rows (a range bounded on both sides), and full scans
//! through GetRange pages, plain and with a filter passing 1% of the rows
//! (issue target: as many rows looked at per second as the plain scan),
//! interleaved over 3 rounds. Prints p50 / p99 and rows/s.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "common/mod.rs"]
mod common;

use std::time::Instant;

use cellar::*;
use rand::{Rng, SeedableRng};

fn main() {
    let rows = common::rows_arg(1_000_000);
    common::runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        // CELLAR_BENCH_PAGE_BYTES: the segment page byte limit (experiments).
        let mut opts = DbOptions::default().durability(Durability::None);
        if let Some(b) = std::env::var("CELLAR_BENCH_PAGE_BYTES")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            opts.page_bytes = b;
        }
        // CELLAR_BENCH_VERIFY=0: reads skip the checksum checks (what they cost).
        opts.verify_checksums = std::env::var("CELLAR_BENCH_VERIFY").map_or(true, |v| v != "0");
        // CELLAR_BENCH_ZSTD=LEVEL: compaction outputs' value columns under ZSTD.
        opts.compaction_zstd_level = std::env::var("CELLAR_BENCH_ZSTD").ok().and_then(|v| v.parse().ok());
        let db = Database::open_with(dir.path(), opts).await.unwrap();
        let t = common::bench_table(&db).await;
        let mut batch = Vec::with_capacity(200);
        for i in 0..rows {
            batch.push(common::row(i));
            if batch.len() == 200 {
                t.write_batch(std::mem::take(&mut batch)).await.unwrap();
            }
        }
        t.write_batch(std::mem::take(&mut batch)).await.unwrap();
        t.compact().await.unwrap();
        println!(
            "point_get: {rows} rows in {} segment(s), {:.1} MB",
            t.stats().segments,
            t.stats().segment_bytes as f64 / 1e6
        );
        common::print_column_bytes("point_get sizes", dir.path());
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let key = |i: u64| {
            PrimaryKey::new()
                .with("card_id", (i % 100_000) as i64)
                .with("order_no", format!("o{:010}", i))
        };
        for _ in 0..2000 {
            t.get_row(GetRow::new(key(rng.random_range(0..rows)))).await.unwrap();
        }
        // CELLAR_BENCH_GETS: gets of existing keys (default 20,000; more to
        // attach a profiler).
        let gets = std::env::var("CELLAR_BENCH_GETS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20_000);
        for (label, n, missing) in [("existing", gets, false), ("missing", 5_000, true)] {
            let mut lat = Vec::with_capacity(n);
            for _ in 0..n {
                let i = rng.random_range(0..rows);
                let k = if missing {
                    PrimaryKey::new()
                        .with("card_id", (i % 100_000) as i64)
                        .with("order_no", format!("o{:010}x", i))
                } else {
                    key(i)
                };
                let s = Instant::now();
                let r = t.get_row(GetRow::new(k)).await.unwrap().row;
                lat.push(s.elapsed().as_secs_f64() * 1e6);
                assert_eq!(r.is_some(), !missing);
            }
            lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
            println!(
                "point_get {label}: p50 {:.1} us, p99 {:.1} us, mean {:.1} us",
                percentile(&lat, 0.5),
                percentile(&lat, 0.99),
                lat.iter().sum::<f64>() / n as f64
            );
        }
        // Short range scans: 10 rows from a random card's first order.
        // CELLAR_BENCH_RANGES: range scans (default 5,000; more to attach a
        // profiler).
        let ranges = std::env::var("CELLAR_BENCH_RANGES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5_000);
        let mut lat = Vec::with_capacity(ranges);
        for _ in 0..ranges {
            let card = rng.random_range(0..100_000i64);
            let req = GetRange::new().start(PkBound::new().with("card_id", card)).limit(10);
            let s = Instant::now();
            let page = t.get_range(req).await.unwrap();
            lat.push(s.elapsed().as_secs_f64() * 1e6);
            assert_eq!(page.rows.len(), 10);
        }
        lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "range_scan 10 rows: p50 {:.1} us, p99 {:.1} us",
            percentile(&lat, 0.5),
            percentile(&lat, 0.99)
        );
        // One card's rows (a range bounded on both sides, as a Tablestore
        // GetRange over a partition key's rows): 10 rows each.
        let mut lat = Vec::with_capacity(ranges);
        for _ in 0..ranges {
            let card = rng.random_range(0..100_000i64);
            let req = GetRange::new()
                .start(PkBound::new().with("card_id", card))
                .end(PkBound::new().with("card_id", card + 1));
            let s = Instant::now();
            let page = t.get_range(req).await.unwrap();
            lat.push(s.elapsed().as_secs_f64() * 1e6);
            assert_eq!(page.rows.len(), (rows / 100_000) as usize);
        }
        lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "one card's rows ({} rows): p50 {:.1} us, p99 {:.1} us",
            rows / 100_000,
            percentile(&lat, 0.5),
            percentile(&lat, 0.99)
        );
        // Full scans through GetRange pages, plain and with a filter that
        // passes 1% of the rows (amount < 1.0), interleaved: rows looked at
        // per second.
        let filter = Filter::Column(ColumnCondition::new("amount", CompareOp::Lt, 1.0));
        let (mut plain, mut filtered) = (Vec::new(), Vec::new());
        for round in 0..3 {
            for with_filter in [false, true] {
                let s = Instant::now();
                let mut req = GetRange::new();
                if with_filter {
                    req.options.filter = Some(filter.clone());
                }
                let mut n = 0u64;
                loop {
                    let page = t.get_range(req.clone()).await.unwrap();
                    n += page.rows.len() as u64;
                    match page.next_start {
                        Some(k) => req.start = Some(k.into()),
                        None => break,
                    }
                }
                assert_eq!(n, if with_filter { rows / 100 } else { rows });
                let rate = rows as f64 / s.elapsed().as_secs_f64();
                println!(
                    "round {round}: full scan via GetRange{}: {n} rows returned, {rate:.0} rows looked at/s",
                    if with_filter { " with a 1% filter" } else { "" }
                );
                if with_filter {
                    filtered.push(rate)
                } else {
                    plain.push(rate)
                }
            }
        }
        plain.sort_by(|a, b| a.total_cmp(b));
        filtered.sort_by(|a, b| a.total_cmp(b));
        println!(
            "full scan medians: plain {:.0} rows/s, 1% filter {:.0} rows looked at/s (ratio {:.2})",
            plain[1],
            filtered[1],
            filtered[1] / plain[1]
        );
    });
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}
