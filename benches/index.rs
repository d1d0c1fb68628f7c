//! Secondary indexes: what they cost ingest, how far a global one lags,
//! and a lookup by an indexed attribute against the scan it replaces.
//!
//! `cargo bench --bench index [-- ROWS [LOOKUP_ROWS]]` (defaults 1M and
//! 10M). Ingest: ROWS bench rows (7 columns, `seller_id` and `device_time`
//! predefined) written as the ingest bench writes them (batches of 200, 16
//! in flight) into a table with no index, a local index `(card_id,
//! seller_id)`, and a global index `(seller_id, device_time)`, interleaved
//! round by round (`CELLAR_BENCH_ROUNDS`, default 3); for the global
//! index, its lag sampled every 20 ms while writing and the time it takes
//! to catch up once the writes end. Lookup: LOOKUP_ROWS rows, then a
//! global index `(seller_id, device_time)` built over them; `SELECT * FROM
//! bench WHERE seller_id = ? AND device_time > ? LIMIT 100` through SQL,
//! 300 times with random values (p50, p99), against the same query with
//! `USE INDEX ()` (the table scan), 3 times. The lookup table's sellers
//! are spread over its keys (see `spread_row`; `CELLAR_LOOKUP_SELLERS=card`
//! for the bench row's own, a function of the card).
//! `CELLAR_BENCH_STALLS=1` prints each ingest's write-stall time.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use cellar::*;
use futures::TryStreamExt;

fn schema() -> TableSchema {
    common::schema()
        .column("seller_id", ValueType::String)
        .column("device_time", ValueType::Integer)
}

fn index(kind: IndexKind) -> IndexSpec {
    let columns = match kind {
        IndexKind::Local => vec!["card_id".to_string(), "seller_id".to_string()],
        IndexKind::Global => vec!["seller_id".to_string(), "device_time".to_string()],
    };
    IndexSpec {
        name: "idx".into(),
        columns,
        include: Vec::new(),
        kind,
        include_base_data: true,
    }
}

/// Rows per second of one ingest, and for a global index the time it took
/// to catch up after the last write.
async fn ingest(rows: u64, kind: Option<IndexKind>) -> (f64, Option<f64>) {
    let dir = common::bench_dir();
    let db = Database::open(dir.path()).await.unwrap();
    db.create_table(schema(), TableOptions::default()).await.unwrap();
    if let Some(k) = kind {
        db.create_index("bench", index(k)).await.unwrap();
    }
    let t = db.table("bench").unwrap();
    let start = Instant::now();
    common::write_pipelined(&t, rows, common::row).await;
    let secs = start.elapsed().as_secs_f64();
    if std::env::var_os("CELLAR_BENCH_STALLS").is_some() {
        eprintln!("write stalls: {:.3} s", db.stall_micros() as f64 / 1e6);
    }
    // A global index: how long it takes to catch up after the writes.
    let mut catch_up = None;
    if kind == Some(IndexKind::Global) {
        let done = Instant::now();
        db.wait_for_index("idx", Duration::from_secs(600)).await.unwrap();
        catch_up = Some(done.elapsed().as_secs_f64());
    }
    drop(t);
    db.close().await.unwrap();
    (rows as f64 / secs, catch_up)
}

/// The largest lag of a global index seen while `rows` are written.
async fn global_lag(rows: u64) -> u64 {
    let dir = common::bench_dir();
    let db = Database::open(dir.path()).await.unwrap();
    db.create_table(schema(), TableOptions::default()).await.unwrap();
    db.create_index("bench", index(IndexKind::Global)).await.unwrap();
    let t = db.table("bench").unwrap();
    let writer = {
        let t = t.clone();
        tokio::spawn(async move { common::write_pipelined(&t, rows, common::row).await })
    };
    let mut worst = 0;
    while !writer.is_finished() {
        tokio::time::sleep(Duration::from_millis(20)).await;
        worst = worst.max(db.describe_index("idx").await.unwrap().lag_ms);
    }
    writer.await.unwrap();
    drop(t);
    db.close().await.unwrap();
    worst
}

/// Row `i` of the lookup table: the bench row with its card and its
/// seller spread (hashes of `i`: orders come from any card, to any
/// seller, as time goes on). In the bench row both are functions of `i`
/// (card `i % 100_000`, seller `i % 500`): a seller's rows sit in a 500th
/// of the cards and the newest rows in the last tenth of them, so page
/// statistics prune a table scan by seller or by time to a few pages;
/// `CELLAR_LOOKUP_SELLERS=card` loads those rows instead.
fn spread_row(i: u64) -> RowWrite {
    let mix = |mut h: u64| {
        h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        h ^ (h >> 31)
    };
    let h = mix(i.wrapping_add(0x9E37_79B9_7F4A_7C15));
    let card = mix(h) % 100_000;
    let key = PrimaryKey::new()
        .with("card_id", card as i64)
        .with("order_no", format!("o{:010}", i));
    PutRow::new(key)
        .column("amount", common::amount(i))
        .column("seller_id", format!("seller_{}", h % 500))
        .column("category", ["food", "drink", "books", "service"][(i % 4) as usize])
        .column("device_time", 1_700_000_000_000i64 + i as i64)
        .column("refund", i.is_multiple_of(31))
        .into()
}

async fn query_ms(sql: &cellar::sql::SqlSession, q: &str) -> (f64, usize) {
    let start = Instant::now();
    let batches: Vec<_> = match sql.execute(q).await.unwrap() {
        cellar::sql::StatementOutput::Rows(s) => s.try_collect().await.unwrap(),
        cellar::sql::StatementOutput::Done(_) => Vec::new(),
    };
    let rows = batches
        .iter()
        .map(|b: &datafusion::arrow::array::RecordBatch| b.num_rows())
        .sum();
    (start.elapsed().as_secs_f64() * 1e3, rows)
}

fn pct(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args: Vec<u64> = std::env::args().filter_map(|a| a.parse().ok()).collect();
    let rows = args.first().copied().unwrap_or(1_000_000);
    let lookup_rows = args.get(1).copied().unwrap_or(10_000_000);
    let rounds = common::rounds(3);
    let rt = common::runtime();
    rt.block_on(async {
        // `CELLAR_INDEX_ONLY=none|local|global`: that ingest alone (to profile).
        let only = std::env::var("CELLAR_INDEX_ONLY").unwrap_or_default();
        if !only.is_empty() && only != "lookup" {
            let kind = match only.as_str() {
                "local" => Some(IndexKind::Local),
                "global" => Some(IndexKind::Global),
                _ => None,
            };
            for _ in 0..rounds {
                let (r, up) = ingest(rows, kind).await;
                println!("{only}: {r:.0} rows/s, caught up after {up:?} s");
            }
            return;
        }
        let (mut none, mut local, mut global, mut catch_up) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in 0..if only.is_empty() { rounds } else { 0 } {
            let (a, _) = ingest(rows, None).await;
            let (b, _) = ingest(rows, Some(IndexKind::Local)).await;
            let (c, g) = ingest(rows, Some(IndexKind::Global)).await;
            let up = g.unwrap();
            println!(
                "round {round}: no index {a:.0} rows/s, local {b:.0} rows/s ({:.2}), global {c:.0} rows/s ({:.2}), \
                 global caught up {up:.3} s after the last write",
                b / a,
                c / a
            );
            none.push(a);
            local.push(b);
            global.push(c);
            catch_up.push(up);
        }
        if only.is_empty() {
        let lag = global_lag(rows).await;
        let (n, l, g) = (common::median(none), common::median(local), common::median(global));
        println!(
            "ingest of {rows} rows, medians of {rounds}: no index {n:.0} rows/s; local index {l:.0} rows/s ({:.1}%); \
             global index {g:.0} rows/s ({:.1}%); global index: largest lag while writing {lag} ms, caught up {:.3} s \
             after the last write",
            100.0 * l / n,
            100.0 * g / n,
            common::median(catch_up)
        );
        }

        // Lookup by an indexed attribute.
        let dir = common::bench_dir();
        let db = Database::open(dir.path()).await.unwrap();
        db.create_table(schema(), TableOptions::default()).await.unwrap();
        let t = db.table("bench").unwrap();
        let start = Instant::now();
        let card_sellers = std::env::var("CELLAR_LOOKUP_SELLERS").is_ok_and(|v| v == "card");
        let row_of: fn(u64) -> RowWrite = if card_sellers { common::row } else { spread_row };
        common::write_pipelined(&t, lookup_rows, row_of).await;
        let load = start.elapsed().as_secs_f64();
        let start = Instant::now();
        db.create_index("bench", index(IndexKind::Global)).await.unwrap();
        let build = start.elapsed().as_secs_f64();
        // Settled: each of the table and the index compacted once.
        let start = Instant::now();
        t.compact().await.unwrap();
        db.table("idx").unwrap().compact().await.unwrap();
        println!("compacted in {:.1} s", start.elapsed().as_secs_f64());
        println!(
            "lookup table: {lookup_rows} rows (sellers {}) loaded in {load:.1} s, global index (seller_id, device_time) \
             built in {build:.1} s",
            if card_sellers { "by card" } else { "spread" }
        );
        let sql = cellar::sql::SqlSession::new(db.clone());
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let query = |seller: u64, after: u64, hint: &str| {
            format!(
                "SELECT * FROM bench {hint} WHERE seller_id = 'seller_{seller}' AND device_time > {} LIMIT 100",
                1_700_000_000_000u64 + after
            )
        };
        let plan = query(7, lookup_rows / 2, "");
        let explain = match sql.execute(&format!("EXPLAIN {plan}")).await.unwrap() {
            cellar::sql::StatementOutput::Rows(s) => {
                let b: Vec<_> = s.try_collect().await.unwrap();
                datafusion::arrow::util::pretty::pretty_format_batches(&b).unwrap().to_string()
            }
            _ => String::new(),
        };
        println!("{explain}");
        for _ in 0..20 {
            query_ms(&sql, &query(next() % 500, next() % lookup_rows, "")).await;
        }
        let mut times = Vec::new();
        let mut returned = 0;
        for _ in 0..300 {
            let (ms, n) = query_ms(&sql, &query(next() % 500, next() % lookup_rows, "")).await;
            times.push(ms);
            returned += n;
        }
        // The same lookup answered by the index alone (the columns it
        // holds: a covering scan).
        let covering = |seller: u64, after: u64| {
            format!(
                "SELECT card_id, order_no, device_time FROM bench WHERE seller_id = 'seller_{seller}' \
                 AND device_time > {} LIMIT 100",
                1_700_000_000_000u64 + after
            )
        };
        let mut cover = Vec::new();
        for _ in 0..300 {
            cover.push(query_ms(&sql, &covering(next() % 500, next() % lookup_rows)).await.0);
        }
        println!(
            "covering (card_id, order_no, device_time from the index): p50 {:.3} ms, p99 {:.3} ms",
            pct(cover.clone(), 0.5),
            pct(cover, 0.99)
        );
        let mut scans = Vec::new();
        for _ in 0..3 {
            scans.push(query_ms(&sql, &query(next() % 500, next() % lookup_rows, "USE INDEX ()")).await.0);
        }
        let (p50, p99) = (pct(times.clone(), 0.5), pct(times, 0.99));
        let scan = common::median(scans);
        println!(
            "lookup in {lookup_rows} rows through the index, any device_time: p50 {p50:.3} ms, p99 {p99:.3} ms \
             ({:.0} rows a query); the table scan (USE INDEX ()), which stops at its 100th row: median {scan:.0} ms; \
             {:.0}x",
            returned as f64 / 300.0,
            scan / p50
        );
        // Selective: device_time in the newest 0.1%, fewer than 100 rows a
        // seller, so a scan reads the whole table.
        let late = |r: u64| lookup_rows - 1 - r % (lookup_rows / 1000);
        let (mut idx, mut cov, mut scans, mut n) = (Vec::new(), Vec::new(), Vec::new(), 0);
        for _ in 0..300 {
            let (s, a) = (next() % 500, late(next()));
            let (ms, rows) = query_ms(&sql, &query(s, a, "")).await;
            idx.push(ms);
            n += rows;
            cov.push(query_ms(&sql, &covering(s, a)).await.0);
        }
        for _ in 0..3 {
            scans.push(query_ms(&sql, &query(next() % 500, late(next()), "USE INDEX ()")).await.0);
        }
        let scan = common::median(scans);
        let (p50, c50) = (pct(idx.clone(), 0.5), pct(cov.clone(), 0.5));
        println!(
            "selective (newest 0.1% of device_time, {:.1} rows a query): lookup p50 {p50:.3} ms, p99 {:.3} ms; \
             covering p50 {c50:.3} ms, p99 {:.3} ms; the table scan: median {scan:.0} ms; {:.0}x (lookup), \
             {:.0}x (covering)",
            n as f64 / 300.0,
            pct(idx, 0.99),
            pct(cov, 0.99),
            scan / p50,
            scan / c50
        );
        drop(t);
        db.close().await.unwrap();
    });
}
