//! DuckDB (the `duckdb` crate, bundled; `--features duckdb`): a table with
//! a PRIMARY KEY on the four key columns, the 20 sparse columns as nullable
//! columns, and a table of `amount` versions, as for SQLite. A write is one
//! transaction per batch: the rows go through DuckDB's Appender into a
//! temporary staging table, then `INSERT OR REPLACE INTO t SELECT ...`
//! (DuckDB's docs: bulk data through the Appender, not row-by-row inserts;
//! `INSERT OR REPLACE` to upsert into a keyed table). A multi-row VALUES
//! insert with bound parameters took 285 ms per 200-row batch here. DuckDB
//! syncs its WAL at every commit. One connection per thread, cloned from
//! the first.
//!
//! Also DuckDB over the plain Parquet files (`DuckFiles`), through a view.

use std::sync::Mutex;

use duckdb::{Connection, OptionalExt, params};

use super::parquet::FileEngine;
use super::{Engine, Key, Result};
use crate::data::{Record, SPARSE, Sparse};

pub struct DuckEngine {
    first: Mutex<Connection>,
    pool: Mutex<Vec<Connection>>,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl DuckEngine {
    pub fn open(dir: &std::path::Path) -> Result<Self> {
        let c = Connection::open(dir.join("db.duckdb")).map_err(err)?;
        let sparse: Vec<String> = (0..SPARSE)
            .map(|i| {
                format!(
                    "{} {}",
                    Record::sparse_name(i),
                    if i % 2 == 0 { "BIGINT" } else { "VARCHAR" }
                )
            })
            .collect();
        c.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS t (card_id BIGINT NOT NULL, seller_id VARCHAR NOT NULL, \
             device_id VARCHAR NOT NULL, order_no BIGINT NOT NULL, amount DOUBLE, category VARCHAR, \
             device_time BIGINT, {}, PRIMARY KEY (card_id, seller_id, device_id, order_no));
             CREATE TABLE IF NOT EXISTS amount_versions (card_id BIGINT NOT NULL, seller_id VARCHAR NOT NULL, \
             device_id VARCHAR NOT NULL, order_no BIGINT NOT NULL, version BIGINT NOT NULL, amount DOUBLE, \
             PRIMARY KEY (card_id, seller_id, device_id, order_no, version));",
            sparse.join(", ")
        ))
        .map_err(err)?;
        Ok(DuckEngine {
            first: Mutex::new(c),
            pool: Mutex::new(Vec::new()),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let taken = self.pool.lock().map_err(err)?.pop();
        let mut c = match taken {
            Some(c) => c,
            None => self.first.lock().map_err(err)?.try_clone().map_err(err)?,
        };
        let r = f(&mut c);
        if let Ok(mut p) = self.pool.lock() {
            p.push(c);
        }
        r
    }
}

fn row_values(r: &Record) -> Vec<duckdb::types::Value> {
    use duckdb::types::Value as V;
    let mut v = vec![
        V::BigInt(r.card_id),
        V::Text(r.seller_id.clone()),
        V::Text(r.device_id.clone()),
        V::BigInt(r.order_no),
        V::Double(r.amounts[0].1),
        V::Text(r.category.to_string()),
        V::BigInt(r.device_time),
    ];
    let mut sparse = vec![V::Null; SPARSE];
    for (i, s) in &r.sparse {
        sparse[*i] = match s {
            Sparse::Int(x) => V::BigInt(*x),
            Sparse::Str(x) => V::Text(x.clone()),
        };
    }
    v.extend(sparse);
    v
}

impl Engine for DuckEngine {
    fn write(&self, batch: &[Record]) -> Result<()> {
        self.with(|c| {
            // The staging tables are temporary: each connection has its own.
            c.execute_batch(
                "CREATE TEMP TABLE IF NOT EXISTS stage_t AS SELECT * FROM t LIMIT 0;
                 CREATE TEMP TABLE IF NOT EXISTS stage_v AS SELECT * FROM amount_versions LIMIT 0;",
            )
            .map_err(err)?;
            let tx = c.transaction().map_err(err)?;
            {
                let mut a = tx.appender("stage_t").map_err(err)?;
                for r in batch {
                    a.append_row(duckdb::appender_params_from_iter(row_values(r)))
                        .map_err(err)?;
                }
                a.flush().map_err(err)?;
                let mut a = tx.appender("stage_v").map_err(err)?;
                for r in batch {
                    for (v, amount) in &r.amounts {
                        a.append_row(params![r.card_id, r.seller_id, r.device_id, r.order_no, v, amount])
                            .map_err(err)?;
                    }
                }
                a.flush().map_err(err)?;
            }
            tx.execute_batch(
                "INSERT OR REPLACE INTO t SELECT * FROM stage_t;
                 INSERT OR REPLACE INTO amount_versions SELECT * FROM stage_v;
                 DELETE FROM stage_t; DELETE FROM stage_v;",
            )
            .map_err(err)?;
            tx.commit().map_err(err)
        })
    }

    sql_row_methods!();

    fn sql(&self, query: &str) -> Result<Option<usize>> {
        self.with(|c| count_rows(c, query).map(Some))
    }

    fn settle(&self) -> Result<()> {
        self.with(|c| c.execute_batch("CHECKPOINT;").map_err(err))
    }
}

/// The number of rows `query` returns.
fn count_rows(c: &Connection, query: &str) -> Result<usize> {
    let mut st = c.prepare(query).map_err(err)?;
    let mut rows = st.query([]).map_err(err)?;
    let mut n = 0;
    while rows.next().map_err(err)?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// DuckDB (an in-memory database, default settings) querying the Parquet
/// files of a directory through the view `t`.
pub struct DuckFiles {
    conn: Mutex<Connection>,
}

impl DuckFiles {
    pub fn open(dir: &std::path::Path) -> Result<Self> {
        let c = Connection::open_in_memory().map_err(err)?;
        let glob = dir.join("*.parquet");
        let glob = glob.to_str().ok_or("the scratch path is not UTF-8")?;
        c.execute_batch(&format!(
            "CREATE VIEW t AS SELECT * FROM read_parquet('{}')",
            glob.replace('\'', "''")
        ))
        .map_err(err)?;
        Ok(DuckFiles { conn: Mutex::new(c) })
    }
}

impl FileEngine for DuckFiles {
    fn sql(&self, query: &str) -> Result<usize> {
        count_rows(&*self.conn.lock().map_err(err)?, query)
    }
}
