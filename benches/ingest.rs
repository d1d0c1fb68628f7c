//! Durable batched ingest of 7-column rows (issue target: >= 300k rows/s),
//! plain, conditional and by SQL `INSERT INTO .. SELECT`.
//!
//! `cargo bench --bench ingest [-- ROWS]`: writes ROWS rows (default 2M) in
//! BatchWriteRow-sized batches of 200 with 16 batches in flight, default
//! durability (fsync before acknowledging, group commit), memtable flushes
//! running as they would. Prints rows/s and MB of WAL. Then, interleaved
//! over `CELLAR_BENCH_ROUNDS` rounds (default 3), the same load plain and
//! with every PutRow conditional (EXPECT_NOT_EXIST on fresh keys: each
//! write reads its row first, and the committer confirms it unchanged):
//! medians and their ratio (target: conditional >= 50% of plain); and the
//! same rows by `INSERT INTO bench SELECT * FROM 'rows.parquet'` (a file
//! written once, before the rounds), whose rate is compared with the
//! plain load's (target: >= 80%), three of its rows checked.
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
        // The same rows in a Parquet file, for `INSERT INTO .. SELECT`.
        let files = tempfile::tempdir().unwrap();
        let parquet = files.path().join("rows.parquet");
        write_rows_parquet(&parquet, rows).await;
        let (mut plain, mut checked, mut inserted) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..common::rounds(3) {
            for (kind, out) in [
                (Load::Plain, &mut plain),
                (Load::Conditional, &mut checked),
                (Load::InsertSelect, &mut inserted),
            ] {
                let dir = tempfile::tempdir().unwrap();
                let db = Database::open(dir.path()).await.unwrap();
                // The columns declared, so that SQL sees them in the
                // file's order (the same table for every load).
                let schema = common::schema()
                    .column("amount", ValueType::Double)
                    .column("seller_id", ValueType::String)
                    .column("category", ValueType::String)
                    .column("device_time", ValueType::Integer)
                    .column("refund", ValueType::Boolean);
                db.create_table(schema, TableOptions::default()).await.unwrap();
                let t = db.table("bench").unwrap();
                let sql = cellar::sql::SqlSession::new(db.clone());
                let start = Instant::now();
                match kind {
                    Load::Plain => common::write_pipelined(&t, rows, common::row).await,
                    Load::Conditional => common::write_pipelined(&t, rows, conditional).await,
                    Load::InsertSelect => {
                        let q = format!("INSERT INTO bench SELECT * FROM '{}'", parquet.display());
                        sql.query(&q).await.unwrap();
                    }
                }
                let rate = rows as f64 / start.elapsed().as_secs_f64();
                println!("round {round}: {kind:?} {rate:.0} rows/s");
                out.push(rate);
                if kind == Load::InsertSelect {
                    // The statement wrote what the PutRows write.
                    for i in [0, rows / 2, rows - 1] {
                        let RowWrite::Put(p) = common::row(i) else { unreachable!() };
                        let row = t.get_row(GetRow::new(common::key(i))).await.unwrap().row.unwrap();
                        for c in &p.columns {
                            assert_eq!(row.latest(&c.name), Some(&c.value), "row {i} column {}", c.name);
                        }
                    }
                }
                drop(t);
                db.close().await.unwrap();
            }
        }
        if !plain.is_empty() {
            let (p, c, ins) = (common::median(plain), common::median(checked), common::median(inserted));
            println!(
                "conditional put (expect_not_exist, fresh keys): {c:.0} rows/s vs plain {p:.0} rows/s = {:.0}% (medians)",
                100.0 * c / p
            );
            println!(
                "INSERT INTO .. SELECT * FROM 'rows.parquet': {ins:.0} rows/s vs write_batch {p:.0} rows/s = {:.0}% (medians; target >= 80%)",
                100.0 * ins / p
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

/// One way of loading the rows.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Load {
    /// `write_batch` of PutRows, 200 a batch, 16 in flight.
    Plain,
    /// The same, every PutRow with EXPECT_NOT_EXIST.
    Conditional,
    /// SQL `INSERT INTO bench SELECT * FROM 'rows.parquet'`.
    InsertSelect,
}

/// Writes `common::row(0..rows)` as a Parquet file (ZSTD, as `COPY .. TO`
/// writes it), columns in the order of the bench table's SQL schema.
async fn write_rows_parquet(path: &std::path::Path, rows: u64) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).await.unwrap();
    let sql = cellar::sql::SqlSession::new(db.clone());
    let q = format!(
        "COPY (SELECT value % 100000 AS card_id, 'o' || lpad(CAST(value AS VARCHAR), 10, '0') AS order_no, \
         CAST(value % 10000 AS DOUBLE) / 100.0 AS amount, 'seller_' || CAST(value % 500 AS VARCHAR) AS seller_id, \
         CASE value % 4 WHEN 0 THEN 'food' WHEN 1 THEN 'drink' WHEN 2 THEN 'books' ELSE 'service' END AS category, \
         1700000000000 + value AS device_time, value % 31 = 0 AS refund \
         FROM generate_series(0, {}) AS g(value)) TO '{}'",
        rows - 1,
        path.display()
    );
    sql.query(&q).await.unwrap();
    db.close().await.unwrap();
}
