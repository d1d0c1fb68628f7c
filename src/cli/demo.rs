//! `cellar demo`: a realistic dataset of student card consumption records,
//! written through the row API, then the SQL queries of `queries/demo/`
//! run against it, each printed with its result. Safe to run again: the
//! data is loaded only when the table does not exist yet.

use crate::Database;
use crate::error::{ErrorKind, Result};
use crate::model::api::{PutRow, RowWrite, UpdateRow};
use crate::model::schema::{TableOptions, TableSchema};
use crate::model::types::{PkType, PrimaryKey, ValueType};

const TABLE: &str = "consumption";
const CARDS: i64 = 200;
const ORDERS_PER_CARD: i64 = 100;
const SELLERS: [&str; 8] = [
    "canteen_1",
    "canteen_2",
    "bookstore",
    "laundry",
    "cafe",
    "gym",
    "printshop",
    "market",
];
const CATEGORIES: [&str; 6] = ["food", "drink", "books", "service", "sports", "groceries"];

/// A small deterministic generator (the demo prints the same data each time).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

pub(super) async fn run(db: &Database) -> Result<()> {
    let schema = TableSchema::new(TABLE)
        .pk("card_id", PkType::Integer)
        .pk("seller_id", PkType::String)
        .pk("device_id", PkType::String)
        .pk("order_no", PkType::String)
        .column("amount", ValueType::Double)
        .column("category", ValueType::String)
        .column("device_time", ValueType::Integer);
    let options = TableOptions {
        max_versions: 3,
        ..Default::default()
    };
    match db.create_table(schema, options).await {
        Ok(()) => load(db).await?,
        Err(e) if e.kind() == ErrorKind::ObjectAlreadyExist => {
            say(&format!(
                "-- table '{TABLE}' exists in {}; reading it",
                db.path().display()
            ))?;
        }
        Err(e) => return Err(e),
    }
    let sess = crate::sql::SqlSession::new(db.clone());
    for (name, text) in QUERIES {
        say(&format!("\n-- queries/demo/{name}"))?;
        for stmt in crate::sql::split_statements(text) {
            say(&format!("{stmt};"))?;
            let out = sess
                .execute(&stmt)
                .await
                .map_err(|e| crate::Error::new(ErrorKind::Io, format!("demo query {name} failed: {e}")))?;
            super::sql::print_output(out, super::sql::Format::Table, None, &mut super::stdout::stdout()).await?;
        }
    }
    Ok(())
}

/// The demo queries, in the order they run (`queries/demo/*.sql`).
pub(crate) const QUERIES: &[(&str, &str)] = &[
    ("01_tables.sql", include_str!("../../queries/demo/01_tables.sql")),
    (
        "02_spend_per_seller.sql",
        include_str!("../../queries/demo/02_spend_per_seller.sql"),
    ),
    (
        "03_card_history.sql",
        include_str!("../../queries/demo/03_card_history.sql"),
    ),
    (
        "04_point_lookup.sql",
        include_str!("../../queries/demo/04_point_lookup.sql"),
    ),
    ("05_versions.sql", include_str!("../../queries/demo/05_versions.sql")),
    (
        "06_sparse_columns.sql",
        include_str!("../../queries/demo/06_sparse_columns.sql"),
    ),
    ("07_top_cards.sql", include_str!("../../queries/demo/07_top_cards.sql")),
    ("08_explain.sql", include_str!("../../queries/demo/08_explain.sql")),
];

fn order_pk(card: i64, order: i64) -> PrimaryKey {
    let seller = SELLERS[(card as usize + order as usize) % SELLERS.len()];
    PrimaryKey::new()
        .with("card_id", card)
        .with("seller_id", seller)
        .with("device_id", format!("pos-{}", (card * 7 + order) % 13))
        .with("order_no", format!("o{order:05}"))
}

async fn load(db: &Database) -> Result<()> {
    let t = db.table(TABLE)?;
    let now = db_now();
    let mut rng = Lcg(42);
    let mut batch: Vec<RowWrite> = Vec::new();
    for card in 0..CARDS {
        for order in 0..ORDERS_PER_CARD {
            let amount = (rng.next() % 5000) as f64 / 100.0 + 0.5;
            let device_time = now - ((CARDS * ORDERS_PER_CARD - card * ORDERS_PER_CARD - order) * 1000);
            let mut p = PutRow::new(order_pk(card, order))
                .column("amount", amount)
                .column("category", CATEGORIES[(rng.next() as usize) % CATEGORIES.len()])
                .column("device_time", device_time);
            if rng.next().is_multiple_of(10) {
                p = p.column("coupon", format!("C{}", rng.next() % 1000));
            }
            if rng.next().is_multiple_of(30) {
                p = p.column("refund", true);
            }
            batch.push(p.into());
            if batch.len() == 200 {
                t.write_batch(std::mem::take(&mut batch))
                    .await?
                    .into_iter()
                    .collect::<Result<Vec<_>>>()?;
            }
        }
    }
    if !batch.is_empty() {
        t.write_batch(std::mem::take(&mut batch))
            .await?
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
    }
    // Corrections: some amounts get newer versions.
    let now = db_now();
    for card in (0..CARDS).step_by(7) {
        let pk = order_pk(card, 0);
        t.update_row(UpdateRow::new(pk.clone()).put_at("amount", 1.25, now + 1))
            .await?;
        t.update_row(UpdateRow::new(pk).put_at("amount", 2.5, now + 2)).await?;
    }
    say(&format!(
        "-- loaded {} consumption records into {}",
        CARDS * ORDERS_PER_CARD,
        db.path().display()
    ))?;
    Ok(())
}

fn say(line: &str) -> Result<()> {
    use std::io::Write;
    writeln!(super::stdout::stdout(), "{line}").map_err(|e| crate::Error::io("write to stdout", e))
}

fn db_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
