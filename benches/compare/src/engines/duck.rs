//! DuckDB (the `duckdb` crate, bundled; `--features duckdb`): a table with
//! a PRIMARY KEY on the four key columns, the 20 sparse columns as nullable
//! columns, and a table of `amount` versions, as for SQLite. Writes are one
//! transaction per batch with multi-row `INSERT OR REPLACE` (DuckDB's way to
//! upsert into a keyed table); DuckDB syncs its WAL at every commit. One
//! connection per thread, cloned from the first.

use std::sync::Mutex;

use duckdb::{Connection, OptionalExt, params};

use super::{Engine, Key, Result};
use crate::data::{Record, SPARSE, Sparse};

pub struct DuckEngine {
    first: Mutex<Connection>,
    pool: Mutex<Vec<Connection>>,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Columns of `t`, in order.
const FIXED: usize = 7;

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

fn placeholders(rows: usize, cols: usize) -> String {
    let one = format!("({})", vec!["?"; cols].join(", "));
    vec![one; rows].join(", ")
}

impl Engine for DuckEngine {
    fn write(&self, batch: &[Record]) -> Result<()> {
        self.with(|c| {
            let tx = c.transaction().map_err(err)?;
            let values: Vec<duckdb::types::Value> = batch.iter().flat_map(row_values).collect();
            tx.execute(
                &format!(
                    "INSERT OR REPLACE INTO t VALUES {}",
                    placeholders(batch.len(), FIXED + SPARSE)
                ),
                duckdb::params_from_iter(values),
            )
            .map_err(err)?;
            let versions: Vec<duckdb::types::Value> = batch
                .iter()
                .flat_map(|r| {
                    r.amounts.iter().flat_map(move |(v, a)| {
                        use duckdb::types::Value as V;
                        [
                            V::BigInt(r.card_id),
                            V::Text(r.seller_id.clone()),
                            V::Text(r.device_id.clone()),
                            V::BigInt(r.order_no),
                            V::BigInt(*v),
                            V::Double(*a),
                        ]
                    })
                })
                .collect();
            let n = versions.len() / 6;
            tx.execute(
                &format!("INSERT OR REPLACE INTO amount_versions VALUES {}", placeholders(n, 6)),
                duckdb::params_from_iter(versions),
            )
            .map_err(err)?;
            tx.commit().map_err(err)
        })
    }

    fn get(&self, k: &Key) -> Result<Option<f64>> {
        self.with(|c| {
            c.prepare_cached("SELECT * FROM t WHERE card_id = ? AND seller_id = ? AND device_id = ? AND order_no = ?")
                .map_err(err)?
                .query_row(params![k.card_id, k.seller_id, k.device_id, k.order_no], |r| {
                    r.get::<_, Option<f64>>(4)
                })
                .optional()
                .map(|o| o.flatten())
                .map_err(err)
        })
    }

    fn card_rows(&self, card_id: i64, limit: usize) -> Result<usize> {
        self.with(|c| {
            let mut st = c
                .prepare_cached("SELECT * FROM t WHERE card_id = ? ORDER BY seller_id, device_id, order_no LIMIT ?")
                .map_err(err)?;
            let mut rows = st.query(params![card_id, limit as i64]).map_err(err)?;
            let mut n = 0;
            while rows.next().map_err(err)?.is_some() {
                n += 1;
            }
            Ok(n)
        })
    }

    fn update(&self, k: &Key, amount: f64, category: Option<&str>, device_time: Option<i64>) -> Result<()> {
        self.with(|c| {
            let tx = c.transaction().map_err(err)?;
            tx.execute(
                "UPDATE t SET amount = ?, category = coalesce(?, category), device_time = coalesce(?, device_time) \
                 WHERE card_id = ? AND seller_id = ? AND device_id = ? AND order_no = ?",
                params![
                    amount,
                    category,
                    device_time,
                    k.card_id,
                    k.seller_id,
                    k.device_id,
                    k.order_no
                ],
            )
            .map_err(err)?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_err(err)?
                .as_millis() as i64;
            tx.execute(
                "INSERT OR REPLACE INTO amount_versions VALUES (?, ?, ?, ?, ?, ?)",
                params![k.card_id, k.seller_id, k.device_id, k.order_no, now, amount],
            )
            .map_err(err)?;
            tx.commit().map_err(err)
        })
    }

    fn versions(&self, k: &Key, n: usize) -> Result<Vec<f64>> {
        self.with(|c| {
            let mut st = c
                .prepare_cached(
                    "SELECT amount FROM amount_versions WHERE card_id = ? AND seller_id = ? AND device_id = ? \
                     AND order_no = ? ORDER BY version DESC LIMIT ?",
                )
                .map_err(err)?;
            let rows = st
                .query_map(
                    params![k.card_id, k.seller_id, k.device_id, k.order_no, n as i64],
                    |r| r.get::<_, f64>(0),
                )
                .map_err(err)?;
            rows.collect::<std::result::Result<Vec<_>, _>>().map_err(err)
        })
    }

    fn sql(&self, query: &str) -> Result<Option<usize>> {
        self.with(|c| {
            let mut st = c.prepare(query).map_err(err)?;
            let mut rows = st.query([]).map_err(err)?;
            let mut n = 0;
            while rows.next().map_err(err)?.is_some() {
                n += 1;
            }
            Ok(Some(n))
        })
    }

    fn settle(&self) -> Result<()> {
        self.with(|c| c.execute_batch("CHECKPOINT;").map_err(err))
    }
}
