//! SQL speed against DataFusion on plain Parquet (issue targets: GROUP BY and
//! a filtered aggregate at most 1.1x plain Parquet on a compacted table,
//! at most 1.3x with 1% of rows also in the memtable; point lookup by full
//! PK through SQL p50 at most 1 ms).
//!
//! `cargo bench --bench sql [-- ROWS]` (default 10M): loads ROWS 7-column
//! rows, compacts, writes the same rows as one plain Parquet file with
//! DataFusion (`COPY ... TO`), then times both. Each query runs 5 times
//! after a warm-up; the median is reported (and Cellar's warm-up time
//! apart), the Cellar and Parquet runs
//! interleaved so that machine drift hits both. 1% of the rows are then
//! rewritten into the memtable, and the same queries run once the
//! overlays are built in the background; then five bursts of 1000 writes,
//! each followed at once by one GROUP BY (the query that brings the
//! memtable overlays up to date), 1% more rows, queried at once, and 1% of
//! the rows updated (one column), queried; last, 1% of the rows appended
//! past the table's last key (a gap with its own overlay), queried five
//! times (Parquet lacks those rows: timed alone). After the compacted
//! queries, a
//! time-series table of the same size (100 devices, `ts` rising within
//! each) answers a 1% time window over all devices and over one, with the
//! pages read reported (`CELLAR_BENCH_WINDOWS=0` skips it). Data goes to a temporary directory under
//! `$CELLAR_BENCH_DIR` (default: the system's).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use cellar::sql::session_context;
use cellar::*;
use datafusion::prelude::{ParquetReadOptions, SessionContext};

async fn load(db: &Database, rows: u64) {
    let t = common::bench_table(db).await;
    common::write_pipelined(&t, rows, common::row).await;
    let start = Instant::now();
    t.compact().await.unwrap();
    eprintln!("loaded {rows} rows; compaction {:.1} s", start.elapsed().as_secs_f64());
}

async fn time(ctx: &SessionContext, sql: &str) -> Duration {
    let start = Instant::now();
    let b = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    std::hint::black_box(b);
    start.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn compare(cellar: &SessionContext, plain: &SessionContext, label: &str, sql: &str) {
    compare_on(cellar, plain, label, sql, ("bench", "plain")).await
}

/// [`compare`] with `{t}` standing for the given Cellar and Parquet tables.
async fn compare_on(cellar: &SessionContext, plain: &SessionContext, label: &str, sql: &str, names: (&str, &str)) {
    // CELLAR_BENCH_SPIN=WORD[:parquet]: before the comparison whose label
    // contains WORD, run its Cellar (or Parquet) query for 10 s, to attach
    // a profiler.
    if let Ok(spin) = std::env::var("CELLAR_BENCH_SPIN") {
        let (word, side) = spin.split_once(':').unwrap_or((spin.as_str(), "cellar"));
        if label.contains(word) {
            let (ctx, t) = if side == "parquet" {
                (plain, names.1)
            } else {
                (cellar, names.0)
            };
            eprintln!("spinning on {side}: {label}");
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                time(ctx, &sql.replace("{t}", t)).await;
            }
        }
    }
    // The first run is reported apart: it pays one-time work (opening
    // footers; with memtable writes, building the scan overlay).
    let first = time(cellar, &sql.replace("{t}", names.0)).await;
    time(plain, &sql.replace("{t}", names.1)).await;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        a.push(time(cellar, &sql.replace("{t}", names.0)).await);
        b.push(time(plain, &sql.replace("{t}", names.1)).await);
    }
    let (a, b) = (median(a), median(b));
    println!(
        "{label:<34} cellar {:>8.1} ms   parquet {:>8.1} ms   ratio {:.2}   (cellar first run {:.1} ms)",
        a.as_secs_f64() * 1e3,
        b.as_secs_f64() * 1e3,
        a.as_secs_f64() / b.as_secs_f64(),
        first.as_secs_f64() * 1e3
    );
}

/// The time-series table of the window queries: 100 devices, each with
/// its events in key order (`device`, `seq`) and `ts` rising with `seq`.
const DEVICES: u64 = 100;
const T0: i64 = 1_700_000_000_000;

fn event(rows: u64, i: u64) -> RowWrite {
    let per_device = rows.div_ceil(DEVICES);
    let (device, seq) = (i / per_device, i % per_device);
    PutRow::new(
        PrimaryKey::new()
            .with("device", format!("dev{device:03}"))
            .with("seq", seq as i64),
    )
    .column("ts", T0 + seq as i64 * 1000 + (device as i64 * 7) % 1000)
    .column("value", ((i * 37) % 1000) as f64 / 10.0)
    .column("status", ["ok", "warn", "fail"][(i % 3) as usize])
    .into()
}

/// A window of 1% of the time range, over every device or one.
fn window_queries(rows: u64) -> [(&'static str, String); 2] {
    let per_device = rows.div_ceil(DEVICES) as i64;
    let (from, to) = (T0 + per_device * 1000 / 2, T0 + per_device * 1000 / 2 + per_device * 10);
    [
        (
            "time window, all devices",
            format!("SELECT status, count(*), avg(value) FROM {{t}} WHERE ts BETWEEN {from} AND {to} GROUP BY status"),
        ),
        (
            "time window, one device",
            format!("SELECT count(*), avg(value) FROM {{t}} WHERE device = 'dev042' AND ts BETWEEN {from} AND {to}"),
        ),
    ]
}

/// Loads the events table and its Parquet copy, then compares the window
/// queries and reports the pages Cellar's scans read against the pages of
/// the columns they read in their key ranges.
async fn time_windows(db: &Database, cellar: &SessionContext, dir: &std::path::Path, rows: u64) {
    db.create_table(
        TableSchema::new("events")
            .pk("device", PkType::String)
            .pk("seq", PkType::Integer),
        TableOptions::default(),
    )
    .await
    .unwrap();
    let t = db.table("events").unwrap();
    common::write_pipelined(&t, rows, |i| event(rows, i)).await;
    t.compact().await.unwrap();
    let path = dir.join("plain_events.parquet");
    let copy = format!("COPY (SELECT * FROM events) TO '{}'", path.display());
    cellar.sql(&copy).await.unwrap().collect().await.unwrap();
    let plain = SessionContext::new();
    plain
        .register_parquet("plain_events", path.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    for (label, sql) in window_queries(rows) {
        let before = t.stats();
        time(cellar, &sql.replace("{t}", "events")).await;
        let after = t.stats();
        let (pages, read) = (
            after.scan_pages - before.scan_pages,
            after.scan_pages_read - before.scan_pages_read,
        );
        println!(
            "{label:<34} pages read {read} of {pages} ({:.1}%)",
            read as f64 * 100.0 / pages.max(1) as f64
        );
        compare_on(cellar, &plain, label, &sql, ("events", "plain_events")).await;
    }
}

const GROUP_BY: &str = "SELECT seller_id, count(*), sum(amount) FROM {t} GROUP BY seller_id";
const FILTERED: &str = "SELECT category, count(*), sum(amount) FROM {t} WHERE amount > 90 GROUP BY category";

fn main() {
    let rows = common::rows_arg(10_000_000);
    common::runtime().block_on(async {
        let tmp = match std::env::var_os("CELLAR_BENCH_DIR") {
            Some(d) => tempfile::tempdir_in(d).unwrap(),
            None => tempfile::tempdir().unwrap(),
        };
        let dir = tmp.path().to_path_buf();
        let opts = DbOptions {
            // Big enough that the 1% overwrite below stays in the memtable.
            memtable_bytes: 1 << 30,
            write_buffer_bytes: 2 << 30,
            ..Default::default()
        };
        // Experiments: CELLAR_BENCH_GROUP_ROWS, CELLAR_BENCH_PAGE_ROWS,
        // CELLAR_BENCH_PAGE_BYTES and CELLAR_BENCH_NUMERIC_DICT set the
        // segment writer's row-group rows, write step, page byte limit and
        // numeric dictionary limit (0: off); CELLAR_BENCH_COPY_OPTIONS is
        // appended to the COPY that writes the plain Parquet file (e.g.
        // `OPTIONS (compression 'lz4_raw', max_row_group_size 16384)`).
        let env_num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<usize>().ok());
        let opts = DbOptions {
            row_group_rows: env_num("CELLAR_BENCH_GROUP_ROWS").unwrap_or(opts.row_group_rows),
            page_rows: env_num("CELLAR_BENCH_PAGE_ROWS").unwrap_or(opts.page_rows),
            page_bytes: env_num("CELLAR_BENCH_PAGE_BYTES").unwrap_or(opts.page_bytes),
            numeric_dictionary_bytes: env_num("CELLAR_BENCH_NUMERIC_DICT").unwrap_or(opts.numeric_dictionary_bytes),
            // CELLAR_BENCH_BACKGROUND_OVERLAYS=0: scans build the overlays.
            background_overlays: match env_num("CELLAR_BENCH_BACKGROUND_OVERLAYS") {
                Some(0) => None,
                _ => opts.background_overlays,
            },
            // CELLAR_BENCH_VERIFY=0: reads skip the checksum checks.
            verify_checksums: env_num("CELLAR_BENCH_VERIFY") != Some(0),
            // CELLAR_BENCH_ZSTD=LEVEL: compaction outputs' value columns
            // under ZSTD (`compaction_zstd_level`), pages of
            // CELLAR_BENCH_COMPACTED_PAGE_BYTES.
            compaction_zstd_level: env_num("CELLAR_BENCH_ZSTD").map(|l| l as i32),
            compacted_page_bytes: env_num("CELLAR_BENCH_COMPACTED_PAGE_BYTES").unwrap_or(opts.compacted_page_bytes),
            ..opts
        };
        let background = opts.background_overlays.is_some();
        let db = Database::open_with(&dir, opts).await.unwrap();
        load(&db, rows).await;
        let plain_path = dir.join("plain.parquet");
        let cellar = session_context(&db);
        let sql = format!(
            "COPY (SELECT * FROM bench) TO '{}' {}",
            plain_path.display(),
            std::env::var("CELLAR_BENCH_COPY_OPTIONS").unwrap_or_default()
        );
        cellar.sql(&sql).await.unwrap().collect().await.unwrap();
        let plain = SessionContext::new();
        plain
            .register_parquet("plain", plain_path.to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
        let s = db.table("bench").unwrap().stats();
        println!(
            "{rows} rows, {} segments ({:.0} MB), target_partitions {}",
            s.segments,
            s.segment_bytes as f64 / 1e6,
            cellar.state().config().target_partitions()
        );
        compare(&cellar, &plain, "GROUP BY seller_id (compacted)", GROUP_BY).await;
        compare(&cellar, &plain, "filtered aggregate (compacted)", FILTERED).await;
        if std::env::var("CELLAR_BENCH_WINDOWS").as_deref() != Ok("0") {
            time_windows(&db, &cellar, &dir, rows).await;
        }

        // Point lookups by the full key through SQL (plan + execute).
        let mut lat = Vec::new();
        for k in 0..300u64 {
            let i = (k * 7_919_993) % rows;
            let sql = format!(
                "SELECT * FROM bench WHERE card_id = {} AND order_no = 'o{:010}'",
                i % 100_000,
                i
            );
            let start = Instant::now();
            let b = cellar.sql(&sql).await.unwrap().collect().await.unwrap();
            lat.push(start.elapsed());
            assert_eq!(b.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        }
        lat.sort();
        println!(
            "point lookup via SQL               p50 {:.0} us   p99 {:.0} us",
            lat[lat.len() / 2].as_secs_f64() * 1e6,
            lat[lat.len() * 99 / 100].as_secs_f64() * 1e6
        );

        // 1% of the rows rewritten, still in the memtable (same values, so
        // both sides keep answering the same).
        let t = db.table("bench").unwrap();
        let hot = rows / 100;
        common::write_pipelined(&t, hot, |j| common::row(j * 100 % rows)).await;
        println!(
            "{hot} rows rewritten into the memtable ({} bytes)",
            t.stats().memtable_bytes
        );
        // CELLAR_BENCH_PAUSE=SECS: wait before the first query over the
        // memtable, to attach a profiler.
        if let Some(secs) = std::env::var("CELLAR_BENCH_PAUSE").ok().and_then(|v| v.parse().ok()) {
            eprintln!("pausing {secs} s before the first memtable query");
            tokio::time::sleep(Duration::from_secs(secs)).await;
        }
        // The table was scanned whole above, so once the writes settle its
        // overlays are built in the background (`background_overlays`).
        if background {
            let segments = t.stats().segments as u64;
            let wait = Instant::now();
            while t.stats().scan_overlay_builds < segments && wait.elapsed() < Duration::from_secs(60) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            println!(
                "overlays of {segments} segments built in the background {:.0} ms after the last write",
                wait.elapsed().as_secs_f64() * 1e3
            );
        }
        let cellar = session_context(&db);
        compare(&cellar, &plain, "GROUP BY seller_id (1% in memtable)", GROUP_BY).await;
        compare(&cellar, &plain, "filtered aggregate (1% in memtable)", FILTERED).await;

        // Bursts of writes between queries: the first query after each
        // extends the overlays by the keys written since (new keys here).
        let mut after_burst = Vec::new();
        for burst in 1..=5u64 {
            common::write_pipelined(&t, 1000, |j| common::row((j * 100 + burst) % rows)).await;
            after_burst.push(time(&cellar, &GROUP_BY.replace("{t}", "bench")).await);
        }
        let s = t.stats();
        println!(
            "GROUP BY right after each of 5 bursts of 1000 writes: median {:.1} ms, max {:.1} ms \
             (overlays built {}, extended {})",
            median(after_burst.clone()).as_secs_f64() * 1e3,
            after_burst.iter().max().unwrap().as_secs_f64() * 1e3,
            s.scan_overlay_builds,
            s.scan_overlay_extensions
        );
        // Another 1% of the rows, keys new to the memtable, queried at
        // once: the query places and folds them itself.
        common::write_pipelined(&t, hot, |j| common::row((j * 100 + 50) % rows)).await;
        let right_after = time(&cellar, &GROUP_BY.replace("{t}", "bench")).await;
        println!(
            "GROUP BY right after {hot} more writes (extends the overlays itself): {:.1} ms",
            right_after.as_secs_f64() * 1e3
        );
        // Another 1% of the rows updated (one column, to the value it has,
        // at a newer version): laid over their segment rows column by
        // column, or merged with a point read each.
        common::write_pipelined(&t, hot, |j| common::update_amount((j * 100 + 25) % rows)).await;
        compare(&cellar, &plain, "GROUP BY seller_id (1% updated)", GROUP_BY).await;
        compare(&cellar, &plain, "filtered aggregate (1% updated)", FILTERED).await;
        // Rows appended past the table's last key (new cards, as growing
        // keys arrive), then the GROUP BY five times: the keys sort after
        // every segment, into a gap that has an overlay of its own once it
        // holds enough of them. (Plain Parquet lacks these rows.)
        let appended = hot.max(1000);
        common::write_pipelined(&t, appended, |j| {
            PutRow::new(
                PrimaryKey::new()
                    .with("card_id", 100_000 + (j % 1000) as i64)
                    .with("order_no", format!("o{j:010}")),
            )
            .column("amount", common::amount(j))
            .column("seller_id", format!("seller_{}", j % 500))
            .into()
        })
        .await;
        let mut after_append = Vec::new();
        for _ in 0..5 {
            after_append.push(time(&cellar, &GROUP_BY.replace("{t}", "bench")).await);
        }
        println!(
            "GROUP BY after {appended} rows appended past the last key: first {:.1} ms, then median {:.1} ms",
            after_append[0].as_secs_f64() * 1e3,
            median(after_append[1..].to_vec()).as_secs_f64() * 1e3
        );
        drop((cellar, t));
        db.close().await.unwrap();
    });
}
