//! The engines compared, behind one interface of the operations the
//! workloads need: `Engine` for the stores (they take writes, updates and
//! reads of any kind), `parquet::FileEngine` for the engines that query
//! plain Parquet files written once.
//!
//! Invariants: every engine stores the same logical rows (the latest
//! values of a record, plus older versions of `amount` where the data set
//! has them); a write call returns only once its data is durable (fsynced
//! as the engine's own durable mode does it); reads see every write that
//! returned before them.

use crate::data::Record;

#[macro_use]
mod sql_rows;

pub mod cellar;
#[cfg(feature = "duckdb")]
pub mod duck;
pub mod fjall;
pub mod parquet;
#[cfg(feature = "rocksdb")]
pub mod rocks;
pub mod sqlite;

pub type Result<T> = std::result::Result<T, String>;

/// A record's key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub card_id: i64,
    pub seller_id: String,
    pub device_id: String,
    pub order_no: i64,
}

impl Key {
    pub fn of(r: &Record) -> Key {
        Key {
            card_id: r.card_id,
            seller_id: r.seller_id.clone(),
            device_id: r.device_id.clone(),
            order_no: r.order_no,
        }
    }
}

/// An engine under test, opened on a directory of its own.
pub trait Engine: Send + Sync {
    /// Writes records (every version of each) as one durable commit.
    fn write(&self, batch: &[Record]) -> Result<()>;
    /// The latest `amount` of a record, if it exists.
    fn get(&self, key: &Key) -> Result<Option<f64>>;
    /// Up to `limit` rows of one card, in key order; returns how many.
    fn card_rows(&self, card_id: i64, limit: usize) -> Result<usize>;
    /// Changes 1-3 columns of an existing record (durable).
    fn update(&self, key: &Key, amount: f64, category: Option<&str>, device_time: Option<i64>) -> Result<()>;
    /// The newest `n` versions of `amount`, newest first.
    fn versions(&self, key: &Key, n: usize) -> Result<Vec<f64>>;
    /// Runs a SQL query over table `t`; the number of result rows, or
    /// `None` when the engine has no SQL.
    fn sql(&self, query: &str) -> Result<Option<usize>>;
    /// Makes everything written so far part of the engine's read-optimised
    /// form, as its own docs suggest before heavy reads (a flush and
    /// compaction, a checkpoint); not timed as part of any workload.
    fn settle(&self) -> Result<()>;
    /// The engine's own account of its state, for tracing runs
    /// (`COMPARE_TRACE`); empty where it has none.
    fn trace(&self) -> String {
        String::new()
    }
}

/// The engines this build has, by name.
pub fn names() -> Vec<&'static str> {
    let mut v = vec!["cellar", "sqlite", "fjall"];
    if cfg!(feature = "rocksdb") {
        v.push("rocksdb");
    }
    if cfg!(feature = "duckdb") {
        v.push("duckdb");
    }
    v.push("datafusion-parquet");
    if cfg!(feature = "duckdb") {
        v.push("duckdb-parquet");
    }
    v
}

/// Whether engine `name` queries plain Parquet files (a `FileEngine`).
pub fn is_files(name: &str) -> bool {
    name.ends_with("-parquet")
}

/// Opens file engine `name` over the Parquet files in `dir`.
pub fn open_files(name: &str, dir: &std::path::Path) -> Result<Box<dyn parquet::FileEngine>> {
    match name {
        "datafusion-parquet" => Ok(Box::new(parquet::DataFusionFiles::open(dir)?)),
        #[cfg(feature = "duckdb")]
        "duckdb-parquet" => Ok(Box::new(duck::DuckFiles::open(dir)?)),
        other => Err(unknown(other)),
    }
}

fn unknown(name: &str) -> String {
    format!("unknown engine '{name}'; this build has: {}", names().join(", "))
}

/// Opens engine `name` on `dir` (created empty by the caller).
pub fn open(name: &str, dir: &std::path::Path) -> Result<Box<dyn Engine>> {
    match name {
        "cellar" => Ok(Box::new(cellar::CellarEngine::open(dir)?)),
        "sqlite" => Ok(Box::new(sqlite::SqliteEngine::open(dir)?)),
        "fjall" => Ok(Box::new(fjall::FjallEngine::open(dir)?)),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => Ok(Box::new(rocks::RocksEngine::open(dir)?)),
        #[cfg(feature = "duckdb")]
        "duckdb" => Ok(Box::new(duck::DuckEngine::open(dir)?)),
        other => Err(unknown(other)),
    }
}

/// Bytes of the files under `dir`.
pub fn dir_bytes(dir: &std::path::Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => n += dir_bytes(&e.path()),
                Ok(m) => n += m.len(),
                Err(_) => {}
            }
        }
    }
    n
}
