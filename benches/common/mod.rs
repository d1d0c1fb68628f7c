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
