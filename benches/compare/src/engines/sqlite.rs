//! SQLite (bundled, via rusqlite): a WITHOUT ROWID table keyed like
//! Cellar's, with the 20 sparse columns as nullable columns, and a second
//! table of `amount` versions. WAL journal with `synchronous = FULL`: every
//! commit is durable, as Cellar's default is. One connection per thread
//! (SQLite lets one writer in at a time; the others wait on its lock).

use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};

use super::{Engine, Key, Result};
use crate::data::{Record, SPARSE, Sparse};

pub struct SqliteEngine {
    path: std::path::PathBuf,
    pool: Mutex<Vec<Connection>>,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl SqliteEngine {
    pub fn open(dir: &std::path::Path) -> Result<Self> {
        let path = dir.join("db.sqlite");
        let e = SqliteEngine {
            path,
            pool: Mutex::new(Vec::new()),
        };
        let c = e.connect()?;
        let sparse: Vec<String> = (0..SPARSE)
            .map(|i| {
                format!(
                    "{} {}",
                    Record::sparse_name(i),
                    if i % 2 == 0 { "INTEGER" } else { "TEXT" }
                )
            })
            .collect();
        c.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS t (card_id INTEGER NOT NULL, seller_id TEXT NOT NULL, device_id TEXT NOT NULL, \
             order_no INTEGER NOT NULL, amount REAL, category TEXT, device_time INTEGER, {}, \
             PRIMARY KEY (card_id, seller_id, device_id, order_no)) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS amount_versions (card_id INTEGER NOT NULL, seller_id TEXT NOT NULL, \
             device_id TEXT NOT NULL, order_no INTEGER NOT NULL, version INTEGER NOT NULL, amount REAL, \
             PRIMARY KEY (card_id, seller_id, device_id, order_no, version)) WITHOUT ROWID;",
            sparse.join(", ")
        ))
        .map_err(err)?;
        e.put_back(c);
        Ok(e)
    }

    fn connect(&self) -> Result<Connection> {
        let c = Connection::open(&self.path).map_err(err)?;
        c.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 60000; \
             PRAGMA cache_size = -262144;",
        )
        .map_err(err)?;
        Ok(c)
    }

    fn with<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let taken = self.pool.lock().map_err(err)?.pop();
        let mut c = match taken {
            Some(c) => c,
            None => self.connect()?,
        };
        let r = f(&mut c);
        self.put_back(c);
        r
    }

    fn put_back(&self, c: Connection) {
        if let Ok(mut p) = self.pool.lock() {
            p.push(c);
        }
    }
}

impl Engine for SqliteEngine {
    fn write(&self, batch: &[Record]) -> Result<()> {
        self.with(|c| {
            let tx = c.transaction().map_err(err)?;
            {
                let cols: Vec<String> = (0..SPARSE).map(Record::sparse_name).collect();
                let marks: Vec<String> = (0..SPARSE).map(|i| format!("?{}", i + 8)).collect();
                let mut row = tx
                    .prepare_cached(&format!(
                        "INSERT OR REPLACE INTO t (card_id, seller_id, device_id, order_no, amount, category, \
                         device_time, {}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, {})",
                        cols.join(", "),
                        marks.join(", ")
                    ))
                    .map_err(err)?;
                let mut ver = tx
                    .prepare_cached("INSERT OR REPLACE INTO amount_versions VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
                    .map_err(err)?;
                for r in batch {
                    let mut sparse: Vec<rusqlite::types::Value> = vec![rusqlite::types::Value::Null; SPARSE];
                    for (i, v) in &r.sparse {
                        sparse[*i] = match v {
                            Sparse::Int(x) => rusqlite::types::Value::Integer(*x),
                            Sparse::Str(s) => rusqlite::types::Value::Text(s.clone()),
                        };
                    }
                    let mut p: Vec<rusqlite::types::Value> = vec![
                        r.card_id.into(),
                        r.seller_id.clone().into(),
                        r.device_id.clone().into(),
                        r.order_no.into(),
                        r.amounts[0].1.into(),
                        r.category.to_string().into(),
                        r.device_time.into(),
                    ];
                    p.extend(sparse);
                    row.execute(rusqlite::params_from_iter(p)).map_err(err)?;
                    for (v, a) in &r.amounts {
                        ver.execute(params![r.card_id, r.seller_id, r.device_id, r.order_no, v, a])
                            .map_err(err)?;
                    }
                }
            }
            tx.commit().map_err(err)
        })
    }

    sql_row_methods!();

    fn sql(&self, query: &str) -> Result<Option<usize>> {
        self.with(|c| {
            let mut st = c.prepare_cached(query).map_err(err)?;
            let mut rows = st.query([]).map_err(err)?;
            let mut n = 0;
            while rows.next().map_err(err)?.is_some() {
                n += 1;
            }
            Ok(Some(n))
        })
    }

    fn settle(&self) -> Result<()> {
        self.with(|c| {
            c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); ANALYZE;")
                .map_err(err)
        })
    }
}
