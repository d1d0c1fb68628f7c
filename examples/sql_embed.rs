//! Embedding Cellar in a Rust analytics job: write rows with the row API,
//! then query them with SQL, both through Cellar's own `SessionContext` and
//! by registering a Cellar table into a context of your own.
//!
//! Run with `cargo run --example sql_embed [DATA_DIR]` (default: a
//! temporary directory).

use cellar::sql::{SqlSession, register_table, session_context};
use cellar::{Database, PkType, PrimaryKey, PutRow, TableOptions, TableSchema, ValueType};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::SessionContext;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let dir = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or(tmp.path().to_path_buf());
    let db = Database::open(&dir).await?;

    // A table with a two-column key and one declared column.
    if db.table("visits").is_err() {
        db.create_table(
            TableSchema::new("visits")
                .pk("site", PkType::String)
                .pk("day", PkType::Integer)
                .column("hits", ValueType::Integer),
            TableOptions::default(),
        )
        .await?;
    }
    let t = db.table("visits")?;
    let rows: Vec<_> = (0..1000)
        .map(|i| {
            let pk = PrimaryKey::new()
                .with("site", format!("site{}", i % 7))
                .with("day", i / 7);
            PutRow::new(pk)
                .column("hits", i * 3 % 101)
                .column("country", ["de", "cn", "br"][i as usize % 3])
                .into()
        })
        .collect();
    for chunk in rows.chunks(200) {
        for r in t.write_batch(chunk.to_vec()).await? {
            r?;
        }
    }

    // 1. Cellar's context: every table of the database, plus DDL via SqlSession.
    let ctx = session_context(&db);
    let df = ctx
        .sql("SELECT site, count(*) AS days, sum(hits) AS hits FROM visits GROUP BY site ORDER BY site")
        .await?;
    println!("{}", pretty_format_batches(&df.collect().await?)?);

    // 2. Your own context: register the table under any name and join it
    //    with other data.
    let own = SessionContext::new();
    register_table(&own, &db, "visits", "v")?;
    own.sql("CREATE VIEW countries AS SELECT * FROM (VALUES ('de', 'Germany'), ('cn', 'China'), ('br', 'Brazil')) AS c(code, name)")
        .await?;
    let df = own
        .sql("SELECT c.name, sum(v.hits) AS hits FROM v JOIN countries c ON v.country = c.code GROUP BY c.name ORDER BY hits DESC")
        .await?;
    println!("{}", pretty_format_batches(&df.collect().await?)?);

    // 3. Statements with Cellar DDL.
    let sql = SqlSession::new(db.clone());
    sql.execute("ALTER TABLE visits SET (max_versions = 2)").await?;
    let batches = sql
        .query("SELECT count(*) AS n FROM visits WHERE site = 'site3' AND day BETWEEN 10 AND 19")
        .await?;
    println!("{}", pretty_format_batches(&batches)?);
    drop((ctx, own, sql, t));
    db.close().await?;
    Ok(())
}
