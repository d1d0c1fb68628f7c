//! Shared by the bench binaries: the 7-column row of the targets.

use cellar::*;

pub fn schema() -> TableSchema {
    TableSchema::new("bench")
        .pk("card_id", PkType::Integer)
        .pk("order_no", PkType::String)
}

/// Row i: 2 PK columns + 5 attribute columns.
pub fn row(i: u64) -> RowWrite {
    let pk = PrimaryKey::new()
        .with("card_id", (i % 100_000) as i64)
        .with("order_no", format!("o{:010}", i));
    PutRow::new(pk)
        .column("amount", (i % 10_000) as f64 / 100.0)
        .column("seller_id", format!("seller_{}", i % 500))
        .column("category", ["food", "drink", "books", "service"][(i % 4) as usize])
        .column("device_time", 1_700_000_000_000i64 + i as i64)
        .column("refund", i.is_multiple_of(31))
        .into()
}

/// The row count from the command line (`cargo bench --bench X -- ROWS`).
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

pub async fn bench_table(db: &Database) -> Table {
    db.create_table(schema(), TableOptions::default()).await.unwrap();
    db.table("bench").unwrap()
}
