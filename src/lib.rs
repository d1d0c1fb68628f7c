//! # Cellar
//!
//! An embeddable wide-column table engine with the data model of Alibaba
//! Cloud Tablestore (the Bigtable / HBase family): tables with 1-4 typed
//! primary-key columns, schema-free attribute columns, timestamped versions
//! per cell, max versions, TTL and a version-offset write window.
//!
//! Storage is a write-ahead log with group commit, per-table memtables and
//! immutable Parquet segments in a wide layout, tracked by manifests that
//! are committed through `object_store`.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use cellar::*;
//! let dir = tempfile::tempdir().unwrap();
//! let db = Database::open(dir.path()).await.unwrap();
//! db.create_table(
//!     TableSchema::new("consumption").pk("card_id", PkType::Integer).pk("order_no", PkType::String),
//!     TableOptions { max_versions: 3, ..Default::default() },
//! ).await.unwrap();
//! let t = db.table("consumption").unwrap();
//! for (order, amount) in [("o1", 12.5), ("o2", 3.0), ("o3", 7.25)] {
//!     let pk = PrimaryKey::new().with("card_id", 42).with("order_no", order);
//!     t.put_row(PutRow::new(pk).column("amount", amount).column("category", "food")).await.unwrap();
//! }
//! // Rows of card 42, newest order first.
//! let page = t
//!     .get_range(GetRange::new().start(PkBound::new().with("card_id", 42)).end(PkBound::new().with("card_id", 41)).backward())
//!     .await
//!     .unwrap();
//! let orders: Vec<_> = page.rows.iter().map(|r| r.primary_key.get("order_no").cloned().unwrap()).collect();
//! assert_eq!(orders, vec![PkValue::from("o3"), PkValue::from("o2"), PkValue::from("o1")]);
//! # });
//! ```

#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
// The embedding API.
mod check;
mod clock;
mod error;
mod options;

pub use archive::{TransferProgress, TransferReport};
pub use check::{CheckOptions, CheckReport, FileCheck, FileState, check, check_with};
pub use clock::{Clock, ManualClock, SystemClock};
pub use db::queued::QueuedWrites;
pub use db::table::{ColumnSize, Table, TableStats};
pub use db::transaction::Transaction;
pub use db::{
    ArchiveOnDrop, DEFAULT_STREAM_EXPIRATION_HOURS, Database, MAX_STREAM_EXPIRATION_HOURS, MAX_STREAM_RECORDS,
    MaintenanceAction, MaintenanceStep, PartitionInfo, SequenceInfo, Series, SeriesOptions, SeriesUpdate, ShardInfo,
    SplitRange, StreamAction, StreamChange, StreamColumn, StreamDescription, StreamInfo, StreamRecord, StreamRecords,
    StreamSpec, StreamStart, TableDescription, TableListing,
};
pub use db::{
    ChannelContext, ChannelStatus, ProcessFn, ShutdownFn, TunnelChannel, TunnelDescription, TunnelStage, TunnelType,
    TunnelWorker,
};
pub use db::{IndexCheck, IndexInfo, IndexPhase};
pub use error::{Error, ErrorKind, Result};
pub use model::api::{
    ColumnValue, Condition, DeleteRow, Direction, GetRange, GetRow, GetRowResult, MAX_RANGE_BYTES, MAX_RANGE_ROWS,
    PutRow, RangeResult, ReturnType, RowExistence, RowWrite, UpdateAction, UpdateRow, WriteResult,
};
pub use model::capacity::{CU_BYTES, CapacityUnit};
pub use model::filter::{ColumnCondition, CompareOp, Filter};
pub use model::index::{
    IndexDef, IndexKind, IndexSpec, MAX_INCLUDED_COLUMNS, MAX_INDEX_COLUMNS, MAX_INDEX_KEY_COLUMNS,
    MAX_INDEXES_PER_TABLE,
};
pub use model::row::ReadOptions;
pub use model::schema::{
    ColumnDef, MAX_BATCH_GET_ROWS, MAX_BATCH_WRITE_ROWS, MAX_COLUMNS_PER_WRITE, MAX_COLUMNS_TO_GET,
    MAX_DEFINED_COLUMNS, MAX_PK_VALUE_BYTES, MAX_ROW_WRITE_BYTES, MAX_VALUE_BYTES, OptionsUpdate, PkColumn,
    TableOptions, TableSchema, validate_name,
};
pub use model::types::{Cell, PkBound, PkBoundValue, PkType, PkValue, PrimaryKey, Row, Value, ValueType};
pub use options::{DEFAULT_MEMORY_BUDGET, DbOptions, MIN_MEMORY_BUDGET, ValueCompression, parse_memory_size};
pub use remote::RemoteLocation;
pub use segment::pages::PageCacheStats;
pub use wal::{Durability, OsWalOpener, WalFile, WalOpener};

// Storage components (crate-private).
mod archive;
mod compaction;
mod crash_point;
mod db;
mod flush;
mod manifest;
mod memtable;
mod model;
mod read;
mod remote;
mod segment;
mod state;
mod storage;
mod stream;
mod wal;
mod write;

/// SQL on DataFusion: catalog, table provider, DDL/DML, table functions.
pub mod cluster;
pub mod sql;

/// The command-line front end (used by the `cellar` binary).
pub mod cli;

/// Entry points of the fuzz targets (not a stable API).
#[doc(hidden)]
pub mod fuzzing;
