//! `cellar demo`: a realistic dataset of student card consumption records,
//! written through the row API and read back. Safe to run again: the data is
//! loaded only when the table does not exist yet.

use crate::Database;
use crate::api::{GetRange, GetRow, PutRow, RowWrite, UpdateRow};
use crate::error::{ErrorKind, Result};
use crate::row::ReadOptions;
use crate::schema::{TableOptions, TableSchema};
use crate::types::{PkBound, PkType, PrimaryKey};

use super::json;

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
        .pk("order_no", PkType::String);
    let options = TableOptions {
        max_versions: 3,
        ..Default::default()
    };
    match db.create_table(schema, options).await {
        Ok(()) => load(db).await?,
        Err(e) if e.kind() == ErrorKind::ObjectAlreadyExist => {
            println!("-- table '{TABLE}' exists in {}; reading it", db.path().display());
        }
        Err(e) => return Err(e),
    }
    let t = db.table(TABLE)?;

    println!("\n-- cellar describe {TABLE}");
    let d = db.describe_table(TABLE)?;
    println!(
        "primary key: {}; max_versions {}, ttl {}",
        d.schema
            .primary_key
            .iter()
            .map(|c| format!("{} {}", c.name, c.pk_type))
            .collect::<Vec<_>>()
            .join(", "),
        d.options.max_versions,
        d.options.ttl_secs
    );

    println!("\n-- GetRow with every version of card 7's first order (amount was corrected twice)");
    let pk = order_pk(7, 0);
    let row = t
        .get_row(GetRow::new(pk).options(ReadOptions {
            max_versions: Some(3),
            ..Default::default()
        }))
        .await?;
    println!(
        "{}",
        row.as_ref().map(json::row_json).unwrap_or(serde_json::Value::Null)
    );

    println!("\n-- GetRange backward, limit 3: card 7's last three orders (in key order) at canteen_1");
    let page = t
        .get_range(
            GetRange::new()
                .start(PkBound::new().with("card_id", 7).with("seller_id", "canteen_1"))
                .end(PkBound::new().with("card_id", 7).with("seller_id", "canteen_0"))
                .backward()
                .limit(3)
                .options(ReadOptions {
                    columns_to_get: Some(vec!["amount".into(), "category".into()]),
                    ..Default::default()
                }),
        )
        .await?;
    for r in &page.rows {
        println!("{}", json::row_json(r));
    }

    println!("\n-- Full scan: rows, total amount and refunds per category");
    let mut req = GetRange::new();
    let mut rows = 0u64;
    let mut total = 0.0f64;
    let mut refunds = std::collections::BTreeMap::<String, u64>::new();
    loop {
        let page = t.get_range(req.clone()).await?;
        for r in &page.rows {
            rows += 1;
            if let Some(crate::Value::Double(a)) = r.latest("amount") {
                total += a;
            }
            if let (Some(crate::Value::Boolean(true)), Some(crate::Value::String(c))) =
                (r.latest("refund"), r.latest("category"))
            {
                *refunds.entry(c.clone()).or_default() += 1;
            }
        }
        match page.next_start {
            Some(n) => req.start = Some(n.into()),
            None => break,
        }
    }
    println!("rows {rows}, total amount {total:.2}");
    for (c, n) in refunds {
        println!("refunds {c}: {n}");
    }

    println!("\n-- Compaction");
    t.compact().await?;
    let s = t.stats();
    println!("segments {}, {} bytes on disk", s.segments, s.segment_bytes);
    Ok(())
}

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
    println!(
        "-- loaded {} consumption records into {}",
        CARDS * ORDERS_PER_CARD,
        db.path().display()
    );
    Ok(())
}

fn db_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
