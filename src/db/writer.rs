//! Where rows are written, for the front ends that take rows for a name
//! that may be a table or a series (`cellar write`, SQL INSERT).
//!
//! Invariant: a series routes each row to its month before validation; a
//! table takes them as they are.

use super::queued::QueuedWrites;
use super::series::Series;
use super::table::Table;
use crate::error::Result;
use crate::model::api::RowWrite;
use crate::model::schema::TableSchema;

/// Where rows are written: a table, or a series (each row to its month).
#[derive(Clone, Debug)]
pub(crate) enum Writer {
    Table(Table),
    Series(Series),
}

impl Writer {
    pub fn name(&self) -> &str {
        match self {
            Writer::Table(t) => t.name(),
            Writer::Series(s) => s.name(),
        }
    }

    /// The key columns and declared columns rows are parsed with.
    pub fn schema(&self) -> &TableSchema {
        match self {
            Writer::Table(t) => t.schema(),
            Writer::Series(s) => s.schema(),
        }
    }

    pub async fn enqueue_batch(&self, writes: Vec<RowWrite>) -> Result<QueuedWrites> {
        match self {
            Writer::Table(t) => t.enqueue_batch(writes).await,
            Writer::Series(s) => s.enqueue_batch(writes).await,
        }
    }
}
