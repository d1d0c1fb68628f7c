//! Shared by the bench binaries: the 7-column row of the targets.

use cellar::*;

pub fn schema() -> TableSchema {
    TableSchema::new("bench")
        .pk("card_id", PkType::Integer)
        .pk("order_no", PkType::String)
}

/// Row i: 2 PK columns + 5 attribute columns.
pub fn row(i: u64) -> RowWrite {
    PutRow::new(key(i))
        .column("amount", amount(i))
        .column("seller_id", format!("seller_{}", i % 500))
        .column("category", ["food", "drink", "books", "service"][(i % 4) as usize])
        .column("device_time", 1_700_000_000_000i64 + i as i64)
        .column("refund", i.is_multiple_of(31))
        .into()
}

/// The row count from the command line (`cargo bench --bench X -- ROWS`).
/// Row `i`'s primary key.
pub fn key(i: u64) -> PrimaryKey {
    PrimaryKey::new()
        .with("card_id", (i % 100_000) as i64)
        .with("order_no", format!("o{:010}", i))
}

/// Row `i`'s `amount`.
pub fn amount(i: u64) -> f64 {
    (i % 10_000) as f64 / 100.0
}

/// An UpdateRow of row `i`'s `amount` to the value it has (at a newer
/// version), so that queries answer as before.
#[allow(dead_code)] // not every bench binary updates
pub fn update_amount(i: u64) -> RowWrite {
    UpdateRow::new(key(i)).put("amount", amount(i)).into()
}

#[allow(dead_code)] // not every bench binary takes one row count
pub fn rows_arg(default: u64) -> u64 {
    std::env::args()
        .filter_map(|a| a.parse().ok())
        .next()
        .unwrap_or(default)
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[allow(dead_code)] // not every bench binary has one table
pub async fn bench_table(db: &Database) -> Table {
    db.create_table(schema(), TableOptions::default()).await.unwrap();
    db.table("bench").unwrap()
}

/// Writes `rows` rows (`row_of(i)` for i in 0..rows) the way a loader
/// would: BatchWriteRow-sized batches of 200, 16 batches in flight.
#[allow(dead_code)] // not every bench binary loads this way
pub async fn write_pipelined(t: &Table, rows: u64, row_of: impl Fn(u64) -> RowWrite) {
    use futures::stream::{FuturesUnordered, StreamExt};
    let mut in_flight = FuturesUnordered::new();
    let mut next = 0u64;
    while next < rows || !in_flight.is_empty() {
        while next < rows && in_flight.len() < 16 {
            let batch: Vec<RowWrite> = (next..(next + 200).min(rows)).map(&row_of).collect();
            next += batch.len() as u64;
            let t = t.clone();
            in_flight.push(tokio::spawn(async move { t.write_batch(batch).await }));
        }
        if let Some(r) = in_flight.next().await {
            for r in r.unwrap().unwrap() {
                r.unwrap();
            }
        }
    }
}

/// The median of some measurements.
#[allow(dead_code)] // not every bench binary takes medians of f64
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// `CELLAR_BENCH_ROUNDS`, else `default`.
#[allow(dead_code)] // not every bench binary has rounds
pub fn rounds(default: usize) -> usize {
    std::env::var("CELLAR_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A temporary directory under `$CELLAR_BENCH_DIR` (default: the
/// system's temporary directory).
#[allow(dead_code)] // not every bench binary places its data this way
pub fn bench_dir() -> tempfile::TempDir {
    match std::env::var_os("CELLAR_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d).unwrap(),
        None => tempfile::tempdir().unwrap(),
    }
}

mod sizes;
#[allow(unused_imports)] // not every bench binary reports sizes
pub use sizes::{column_bytes, mb_per_column};

/// Prints [`column_bytes`] as one line.
#[allow(dead_code)] // not every bench binary reports sizes
pub fn print_column_bytes(label: &str, dir: &std::path::Path) {
    let (cols, total) = column_bytes(dir);
    println!(
        "{label}: {:.1} MB in segment files; MB per column: {}",
        total as f64 / 1e6,
        mb_per_column(&cols, 1)
    );
}
