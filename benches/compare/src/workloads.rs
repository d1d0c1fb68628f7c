//! The workloads, run against one engine in its own process (so that peak
//! memory and bytes written are that engine's alone).
//!
//! L bulk load (random and key order), C point get of the latest version,
//! E short range (one card's rows, up to 100), V get of 3 versions, A
//! 50/50 get / update of 1-3 columns. Writes go in batches of 200, each
//! durable before it counts; loads use several writer threads so that
//! engines with group commit can use it. Reads and A run on one thread,
//! for their latency. On the engines with SQL: S, four aggregates, alone
//! and while A runs on another thread; R, a GROUP BY right after each of
//! 3 bursts of writes.
//!
//! U, upserts (half new keys, half existing), is a pass of its own, into
//! a table of its own size (2M rows by default): `run_upserts`.
//!
//! A load that runs past `Sizes::load_cap` is stopped and says so; the
//! workloads after it then run on a table that does hold the whole data
//! set, or not at all (see `run_engine`).
//!
//! The engines over plain Parquet files run what applies to files written
//! once: L in key order (writing the files), C and E as queries, S alone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value as Json, json};

use crate::data::{CATEGORIES, DataSet, Record};
use crate::engines::{self, Engine, Key, Result};

/// Rows per write batch.
pub const BATCH: usize = 200;
/// Threads that write during a load.
pub const WRITERS: usize = 4;

/// How much each workload does.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub reads: usize,
    pub upserts: usize,
    pub mixed: usize,
    /// Runs of each SQL query.
    pub queries: usize,
    /// Rows of each write burst before R's query.
    pub burst: usize,
    /// How long one read or query workload may run (see `each`).
    pub cap: Duration,
    /// How long one load may run before it is stopped (see `in_parallel`).
    pub load_cap: Duration,
}

impl Sizes {
    pub fn new(quick: bool) -> Self {
        if quick {
            Sizes {
                reads: 5_000,
                upserts: 10_000,
                mixed: 2_000,
                queries: 3,
                burst: 10_000,
                cap: Duration::from_secs(10),
                load_cap: Duration::from_secs(120),
            }
        } else {
            Sizes {
                reads: 100_000,
                upserts: 100_000,
                mixed: 20_000,
                queries: 5,
                burst: 100_000,
                cap: Duration::from_secs(30),
                load_cap: Duration::from_secs(600),
            }
        }
    }
}

fn bar(name: &str, len: u64) -> ProgressBar {
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template("{prefix:>24} [{bar:30}] {pos}/{len} {per_sec} {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    b.set_prefix(name.to_string());
    b
}

/// Bytes this process has caused to be written to storage.
fn bytes_written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("write_bytes:").and_then(|v| v.trim().parse().ok()))
        })
        .unwrap_or(0)
}

/// Peak resident memory of this process, bytes.
pub fn peak_rss() -> u64 {
    status_kb("VmHWM:") * 1024
}

/// A `kB` line of `/proc/self/status`, 0 where there is none.
fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix(field)
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
        })
        .unwrap_or(0)
}

/// Resident memory now and at its peak so far, for trace lines: where in
/// a run the peak is reached.
fn memory() -> String {
    format!(
        "rss {} MB, peak {} MB, file-backed {} MB",
        status_kb("VmRSS:") / 1024,
        status_kb("VmHWM:") / 1024,
        status_kb("RssFile:") / 1024
    )
}

/// Timings of one workload.
struct Timed {
    ops: usize,
    wall: Duration,
    latencies_us: Vec<f64>,
    written: u64,
    /// Set when a load was stopped at its time cap: the rows it was to write.
    stopped_of: Option<usize>,
}

impl Timed {
    fn json(mut self, workload: &str) -> Json {
        self.latencies_us.sort_by(f64::total_cmp);
        let pct = |p: f64| {
            self.latencies_us
                .get(((self.latencies_us.len() as f64 - 1.0) * p).round() as usize)
                .copied()
                .unwrap_or(0.0)
        };
        let mut j = json!({
            "workload": workload,
            "ops": self.ops,
            "secs": self.wall.as_secs_f64(),
            "ops_per_sec": self.ops as f64 / self.wall.as_secs_f64(),
            "p50_us": pct(0.5),
            "p99_us": pct(0.99),
            "bytes_written": self.written,
        });
        if let Some(of) = self.stopped_of {
            j["stopped_of"] = json!(of);
        }
        j
    }
}

/// Writes `pieces` (of `rows` rows in all) with up to WRITERS threads,
/// each taking the next piece; `write(i, piece, bar)` writes piece `i`
/// and returns its latency in microseconds. Once `cap` has passed, no
/// thread takes another piece: the timing is then of the rows written,
/// and says it was stopped (a peer that takes hours over a load would
/// keep the rest of the run from ever finishing).
fn in_parallel(
    name: &str,
    rows: usize,
    pieces: &[&[u64]],
    cap: Duration,
    write: impl Fn(usize, &[u64], &ProgressBar) -> Result<f64> + Sync,
) -> Result<Timed> {
    let b = bar(name, rows as u64);
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let w0 = bytes_written();
    let start = Instant::now();
    let lat = std::thread::scope(|s| {
        let workers: Vec<_> = (0..WRITERS.min(pieces.len()))
            .map(|_| {
                s.spawn(|| -> Result<Vec<f64>> {
                    let mut lat = Vec::new();
                    while start.elapsed() < cap {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(piece) = pieces.get(i) else { break };
                        lat.push(write(i, piece, &b)?);
                        done.fetch_add(piece.len(), Ordering::Relaxed);
                    }
                    Ok(lat)
                })
            })
            .collect();
        let mut all = Vec::new();
        for w in workers {
            all.extend(w.join().map_err(|_| "a writer thread panicked".to_string())??);
        }
        Ok::<_, String>(all)
    })?;
    let wall = start.elapsed();
    b.finish_and_clear();
    let done = done.into_inner();
    Ok(Timed {
        ops: done,
        wall,
        latencies_us: lat,
        written: bytes_written() - w0,
        stopped_of: (done < rows).then_some(rows),
    })
}

/// Loads `order` with WRITERS threads, BATCH rows per durable write, for
/// at most `cap` (see `in_parallel`). Latencies are per batch (the write
/// alone, not making its records).
fn load(e: &dyn Engine, data: &DataSet, order: &[u64], name: &str, cap: Duration) -> Result<Timed> {
    let batches: Vec<&[u64]> = order.chunks(BATCH).collect();
    in_parallel(name, order.len(), &batches, cap, |_, rows, b| {
        let batch: Vec<Record> = rows.iter().map(|&j| data.record(j)).collect();
        let t = Instant::now();
        e.write(&batch)?;
        let us = t.elapsed().as_secs_f64() * 1e6;
        b.inc(batch.len() as u64);
        Ok(us)
    })
}

/// Runs `op` `n` times on one thread, timing each, or fewer times when
/// `cap` has passed after at least one (an engine that takes 5 ms an
/// operation would spend minutes on 100k of them; its rate and latencies
/// are those of the operations it did).
fn each(name: &str, n: usize, cap: Duration, mut op: impl FnMut(usize) -> Result<()>) -> Result<Timed> {
    let b = bar(name, n as u64);
    if std::env::var_os("COMPARE_TRACE").is_some() {
        // For profiling one phase: its start on stderr, with the time.
        eprintln!("phase {name} at {:?} ({})", std::time::SystemTime::now(), memory());
    }
    let w0 = bytes_written();
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        if i > 0 && start.elapsed() > cap {
            break;
        }
        let t = Instant::now();
        op(i)?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        if i % 256 == 0 {
            b.set_position(i as u64);
        }
    }
    let wall = start.elapsed();
    b.finish_and_clear();
    Ok(Timed {
        ops: lat.len(),
        wall,
        latencies_us: lat,
        written: bytes_written() - w0,
        stopped_of: None,
    })
}

/// Every workload that applies to engine `name`, in fresh directories
/// under `scratch`; the results as JSON.
pub fn run(name: &str, data: DataSet, sizes: Sizes, scratch: &std::path::Path) -> Result<Json> {
    if engines::is_files(name) {
        run_files(name, data, sizes, scratch)
    } else {
        run_engine(name, data, sizes, scratch)
    }
}

/// Every workload against store `name`. The reads and everything after
/// them run on the table of the random-order load; when that load was
/// stopped at its time cap, on the table of the key-order load (the run's
/// JSON says so); when both were, nothing runs after them.
fn run_engine(name: &str, data: DataSet, sizes: Sizes, scratch: &std::path::Path) -> Result<Json> {
    let mut results = Vec::new();
    let mut rng = StdRng::seed_from_u64(data.seed ^ 0xC0FFEE);
    // L, key order, then random order, each in a directory of its own.
    let mut tables = Vec::new();
    for what in ["L sorted", "L random"] {
        // One order at a time: they are the harness's largest allocations.
        let order = if what == "L sorted" {
            data.sorted_order()
        } else {
            data.random_order()
        };
        let dir = tempfile::tempdir_in(scratch).map_err(|e| e.to_string())?;
        let e = engines::open(name, dir.path())?;
        let t = load(&*e, &data, &order, &format!("{name} {what}"), sizes.load_cap)?;
        let whole = t.stopped_of.is_none();
        let mut j = t.json(what);
        if std::env::var_os("COMPARE_TRACE").is_some() {
            eprintln!("after {what} ({}): {}", memory(), e.trace());
        }
        drop(e);
        j["bytes_on_disk"] = json!(engines::dir_bytes(dir.path()));
        results.push(j);
        tables.push((whole, dir));
    }
    let Some((read_on, dir)) = tables
        .into_iter()
        .enumerate()
        .rev()
        .find_map(|(i, (whole, dir))| whole.then_some((i, dir)))
    else {
        // Neither table holds the data set: no reads can be checked.
        return Ok(engine_json(name, data.rows, 0, results));
    };
    let e = engines::open(name, dir.path())?;
    e.settle()?;
    let on_disk = engines::dir_bytes(dir.path());
    let columns = column_sizes(name, dir.path());
    if let Some(keep) = std::env::var_os("COMPARE_KEEP") {
        // For studying the settled files: a copy of them, under DIR/<engine>.
        copy_dir(dir.path(), &std::path::Path::new(&keep).join(name)).map_err(|e| format!("COMPARE_KEEP: {e}"))?;
    }

    let key = |rng: &mut StdRng| Key::of(&data.record(rng.random_range(0..data.rows)));
    let t = each(&format!("{name} C get"), sizes.reads, sizes.cap, |_| {
        let k = key(&mut rng);
        e.get(&k)?.map(|_| ()).ok_or_else(|| format!("row {k:?} missing"))
    })?;
    results.push(t.json("C get"));
    let mut rng = StdRng::seed_from_u64(data.seed ^ 0xE);
    let t = each(&format!("{name} E range"), sizes.reads / 4, sizes.cap, |_| {
        let card = rng.random_range(0..data.cards()) as i64;
        e.card_rows(card, 100).map(|_| ())
    })?;
    results.push(t.json("E range"));
    // V: records with 3 versions are every tenth on average; pick among them.
    let versioned: Vec<u64> = (0..data.rows.min(200_000))
        .filter(|&i| data.record(i).amounts.len() == 3)
        .collect();
    let mut rng = StdRng::seed_from_u64(data.seed ^ 0x5);
    let t = each(&format!("{name} V versions"), sizes.reads, sizes.cap, |_| {
        let r = data.record(versioned[rng.random_range(0..versioned.len())]);
        let got = e.versions(&Key::of(&r), 3)?;
        if got.len() != 3 {
            return Err(format!("{} versions of {:?}, expected 3", got.len(), Key::of(&r)));
        }
        Ok(())
    })?;
    results.push(t.json("V 3 versions"));
    // A: 50/50 get / update of 1-3 columns.
    let mut rng = StdRng::seed_from_u64(data.seed ^ 0xA);
    let t = each(&format!("{name} A get/update"), sizes.mixed, sizes.cap, |i| {
        mixed_op(&*e, &data, &mut rng, i)
    })?;
    results.push(t.json("A get/update 50/50"));
    // S: SQL aggregates (engines with SQL).
    let queries = sql_queries(&data);
    if e.sql("SELECT 1")?.is_some() {
        for (what, q) in &queries {
            let t = each(&format!("{name} {what}"), sizes.queries, sizes.cap, |_| {
                e.sql(q).map(|_| ())
            })?;
            results.push(t.json(what));
        }
        // The same queries while A runs on another thread.
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (during, a_ops, a_secs) = std::thread::scope(|s| {
            let a = s.spawn(|| -> Result<(usize, f64)> {
                let mut rng = StdRng::seed_from_u64(data.seed ^ 0xAA);
                let start = Instant::now();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    mixed_op(&*e, &data, &mut rng, i)?;
                    i += 1;
                }
                Ok((i, start.elapsed().as_secs_f64()))
            });
            let mut during = Vec::new();
            for (what, q) in &queries {
                match each(&format!("{name} {what} during A"), sizes.queries, sizes.cap, |_| {
                    e.sql(q).map(|_| ())
                }) {
                    Ok(t) => during.push(t.json(&format!("{what}, during A"))),
                    Err(err) => {
                        stop.store(true, Ordering::Relaxed);
                        return Err(err);
                    }
                }
            }
            stop.store(true, Ordering::Relaxed);
            let (n, secs) = a.join().map_err(|_| "the A thread panicked".to_string())??;
            Ok::<_, String>((during, n, secs))
        })?;
        results.extend(during);
        results.push(json!({
            "workload": "A during S",
            "ops": a_ops,
            "secs": a_secs,
            "ops_per_sec": a_ops as f64 / a_secs,
            "p50_us": 0.0,
            "p99_us": 0.0,
            "bytes_written": 0,
        }));
        // R: the GROUP BY right after each of 3 bursts of writes.
        let burst = sizes.burst;
        if std::env::var_os("COMPARE_TRACE").is_some() {
            eprintln!("phase {name} R at {:?} ({})", std::time::SystemTime::now(), memory());
        }
        let fresh = DataSet::new(data.seed ^ 0xB0B, data.rows * 2 + burst as u64 * 3);
        let mut lat = Vec::new();
        let w0 = bytes_written();
        let start = Instant::now();
        for round in 0..3u64 {
            let first = data.rows * 2 + round * burst as u64;
            let order: Vec<u64> = (first..first + burst as u64).collect();
            for chunk in order.chunks(BATCH) {
                let batch: Vec<Record> = chunk.iter().map(|&i| fresh.record(i)).collect();
                e.write(&batch)?;
            }
            let t = Instant::now();
            e.sql(&queries[0].1)?;
            lat.push(t.elapsed().as_secs_f64() * 1e6);
            if std::env::var_os("COMPARE_TRACE").is_some() {
                // The monotonic clock, as `perf record -k mono` stamps samples.
                eprintln!(
                    "R query {round} from {t:?} to {:?} ({}): {}",
                    Instant::now(),
                    memory(),
                    e.trace()
                );
            }
        }
        let t = Timed {
            ops: 3,
            wall: start.elapsed(),
            latencies_us: lat,
            written: bytes_written() - w0,
            stopped_of: None,
        };
        let mut j = t.json("R group by right after a burst");
        // Its rate is of the queries alone, not the bursts.
        let secs: f64 = j["p50_us"].as_f64().unwrap_or(0.0) / 1e6;
        j["ops_per_sec"] = json!(if secs > 0.0 { 1.0 / secs } else { 0.0 });
        j["burst_rows"] = json!(burst);
        results.push(j);
    }
    drop(e);
    let mut j = engine_json(name, data.rows, on_disk, results);
    if !columns.is_empty() {
        j["column_bytes"] = json!(columns);
    }
    if read_on == 0 {
        j["read_on"] = json!("key-order load");
    }
    Ok(j)
}

/// U against store `name`, in a table of its own: `data`'s rows loaded in
/// key order (timed as "L sorted") and settled, then `sizes.upserts`
/// upserts, half new keys and half existing keys with new values, in
/// batches of BATCH on one thread.
pub fn run_upserts(name: &str, data: DataSet, sizes: Sizes, scratch: &std::path::Path) -> Result<Json> {
    let dir = tempfile::tempdir_in(scratch).map_err(|e| e.to_string())?;
    let e = engines::open(name, dir.path())?;
    let t = load(
        &*e,
        &data,
        &data.sorted_order(),
        &format!("{name} L sorted"),
        sizes.load_cap,
    )?;
    let whole = t.stopped_of.is_none();
    let mut results = vec![t.json("L sorted")];
    // Without the whole table, an "existing" key might not exist.
    if whole {
        e.settle()?;
        let upsert = UpsertSet {
            base: data,
            fresh: DataSet::new(data.seed ^ 0xFEED, data.rows + sizes.upserts as u64),
        };
        let mut rng = StdRng::seed_from_u64(data.seed ^ 0xFEED);
        let order: Vec<u64> = (0..sizes.upserts as u64)
            .map(|i| {
                if i % 2 == 0 {
                    data.rows + i
                } else {
                    rng.random_range(0..data.rows)
                }
            })
            .collect();
        let t = load_upserts(&*e, &upsert, &order, &format!("{name} U upsert"))?;
        results.push(t.json("U upsert"));
        e.settle()?;
    }
    drop(e);
    let mut j = engine_json(name, data.rows, engines::dir_bytes(dir.path()), results);
    j["pass"] = json!("upserts");
    j["upserts"] = json!(sizes.upserts);
    Ok(j)
}

/// One engine's results for one data set, as the report reads them.
/// Compressed bytes per column of the Parquet files under `dir` (a
/// store that keeps Parquet files: Cellar's segments), also printed on
/// stderr: the per-column size breakdown of BENCHMARKS.md.
fn column_sizes(name: &str, dir: &std::path::Path) -> Vec<(String, u64)> {
    let (cols, total) = crate::sizes::column_bytes(dir);
    if !cols.is_empty() {
        eprintln!(
            "{name}: {:.1} MB of Parquet files; MB per column: {}",
            total as f64 / 1e6,
            crate::sizes::mb_per_column(&cols, 2)
        );
    }
    cols
}

fn engine_json(name: &str, rows: u64, on_disk: u64, results: Vec<Json>) -> Json {
    json!({
        "engine": name,
        "rows": rows,
        "bytes_on_disk": on_disk,
        "peak_rss": peak_rss(),
        "results": results,
    })
}

/// The four queries of S, by workload name.
fn sql_queries(data: &DataSet) -> [(&'static str, String); 4] {
    let span = data.rows as i64 * 50;
    [
        (
            "S group by seller",
            "SELECT seller_id, count(*), sum(amount) FROM t GROUP BY seller_id".to_string(),
        ),
        (
            "S time window + device",
            format!(
                "SELECT count(*), sum(amount) FROM t WHERE device_time >= {} AND device_time < {} AND device_id = 'd3'",
                crate::data::T0 + span * 4 / 10,
                crate::data::T0 + span / 2
            ),
        ),
        (
            "S top-10 cards",
            "SELECT card_id, sum(amount) AS total FROM t GROUP BY card_id ORDER BY total DESC LIMIT 10".to_string(),
        ),
        ("S count distinct", "SELECT count(DISTINCT card_id) FROM t".to_string()),
    ]
}

/// The workloads that apply to files written once, against file engine
/// `name`: L sorted (writing the files, WRITERS at a time, each fsynced),
/// then C and E as SQL queries (each a query plan and a pruned scan; the
/// time cap of `each` bounds them) and S alone. A, U, V and R
/// change or version rows, which immutable files do not do.
fn run_files(name: &str, data: DataSet, sizes: Sizes, scratch: &std::path::Path) -> Result<Json> {
    let mut results = Vec::new();
    let dir = tempfile::tempdir_in(scratch).map_err(|e| e.to_string())?;
    let order = data.sorted_order();
    let files: Vec<&[u64]> = order.chunks(engines::parquet::FILE_ROWS).collect();
    // No cap: every query needs all the files.
    let t = in_parallel(
        &format!("{name} L sorted"),
        order.len(),
        &files,
        Duration::MAX,
        |i, rows, b| {
            let t = Instant::now();
            let path = dir.path().join(format!("part-{i:04}.parquet"));
            engines::parquet::write_file(&data, rows, &path, &|n| b.inc(n))?;
            Ok(t.elapsed().as_secs_f64() * 1e6)
        },
    )?;
    let on_disk = engines::dir_bytes(dir.path());
    let mut j = t.json("L sorted");
    j["bytes_on_disk"] = json!(on_disk);
    j["latency_of"] = json!("one file");
    results.push(j);

    let e = engines::open_files(name, dir.path())?;
    let queries = sizes.reads;
    let mut rng = StdRng::seed_from_u64(data.seed ^ 0xC0FFEE);
    let t = each(&format!("{name} C get"), queries, sizes.cap, |_| {
        let k = Key::of(&data.record(rng.random_range(0..data.rows)));
        if e.get(&k)? {
            Ok(())
        } else {
            Err(format!("row {k:?} missing"))
        }
    })?;
    results.push(t.json("C get"));
    let mut rng = StdRng::seed_from_u64(data.seed ^ 0xE);
    let t = each(&format!("{name} E range"), queries / 4, sizes.cap, |_| {
        let card = rng.random_range(0..data.cards()) as i64;
        e.card_rows(card, 100).map(|_| ())
    })?;
    results.push(t.json("E range"));
    for (what, q) in &sql_queries(&data) {
        let t = each(&format!("{name} {what}"), sizes.queries, sizes.cap, |_| {
            e.sql(q).map(|_| ())
        })?;
        results.push(t.json(what));
    }
    drop(e);
    Ok(engine_json(name, data.rows, on_disk, results))
}

/// One operation of A: even `i` a get, odd an update of 1-3 columns.
fn mixed_op(e: &dyn Engine, data: &DataSet, rng: &mut StdRng, i: usize) -> Result<()> {
    let k = Key::of(&data.record(rng.random_range(0..data.rows)));
    if i.is_multiple_of(2) {
        e.get(&k).map(|_| ())
    } else {
        let cols = rng.random_range(1..=3);
        let category = (cols >= 2).then(|| CATEGORIES[rng.random_range(0..CATEGORIES.len())]);
        let time = (cols == 3).then(|| rng.random_range(0..1_000_000_000));
        e.update(&k, rng.random_range(1..5000) as f64 / 100.0, category, time)
    }
}

/// Upserts: row `i` < base.rows is an existing key with new values; above,
/// a new record.
struct UpsertSet {
    base: DataSet,
    fresh: DataSet,
}

impl UpsertSet {
    fn record(&self, i: u64) -> Record {
        let mut r = self.fresh.record(i);
        if i < self.base.rows {
            let old = self.base.record(i);
            r.card_id = old.card_id;
            r.seller_id = old.seller_id;
            r.device_id = old.device_id;
            r.order_no = old.order_no;
        }
        r
    }
}

fn load_upserts(e: &dyn Engine, set: &UpsertSet, order: &[u64], name: &str) -> Result<Timed> {
    let b = bar(name, order.len() as u64);
    let w0 = bytes_written();
    let mut lat = Vec::new();
    let start = Instant::now();
    for chunk in order.chunks(BATCH) {
        let batch: Vec<Record> = chunk.iter().map(|&i| set.record(i)).collect();
        let t = Instant::now();
        e.write(&batch)?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        b.inc(batch.len() as u64);
    }
    let wall = start.elapsed();
    b.finish_and_clear();
    Ok(Timed {
        ops: order.len(),
        wall,
        latencies_us: lat,
        written: bytes_written() - w0,
        stopped_of: None,
    })
}

/// Copies directory `from` to `to` (created), recursively.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}
