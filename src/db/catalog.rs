//! The catalog: the names, ids, schemas and options of a database's
//! tables, and where archived ones are, committed as numbered versions
//! like a table's manifest. An archived table's segment list lives here
//! (its local manifest is gone), so one catalog commit switches a table
//! between local and archived. An index is a table here whose entry
//! carries its definition (`db/index.rs`).
//!
//! Invariant: DDL holds the catalog lock from reading the committed
//! version to committing the next one, so DDL statements are serialised and
//! a version never loses a concurrent change.

use serde::{Deserialize, Serialize};

use super::series::SeriesDef;
use crate::archive::ArchiveRecord;
use crate::model::schema::{TableOptions, TableSchema};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct CatalogFile {
    pub(super) next_table_id: u64,
    pub(super) tables: Vec<CatalogEntry>,
    /// Monthly series (their months are in `tables`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) series: Vec<SeriesDef>,
}

impl CatalogFile {
    /// Adds a table's entry under a new id (never reused), returned.
    pub(super) fn add_table(
        &mut self,
        schema: TableSchema,
        options: TableOptions,
        series: Option<String>,
        index: Option<IndexRecord>,
    ) -> u64 {
        let id = self.next_table_id.max(1);
        self.next_table_id = id + 1;
        self.tables.push(CatalogEntry {
            id,
            schema,
            options,
            archive: None,
            series,
            stream: None,
            index,
        });
        id
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct CatalogEntry {
    pub(super) id: u64,
    pub(super) schema: TableSchema,
    pub(super) options: TableOptions,
    /// Set once the table is archived: where, and its segments there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) archive: Option<ArchiveRecord>,
    /// The series the table is a month of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) series: Option<String>,
    /// The table's change stream, when enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) stream: Option<super::stream::StreamState>,
    /// Set for an index table: its definition and phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) index: Option<IndexRecord>,
}

/// Where an index is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum IndexPhase {
    /// Indexing the rows the table held when it was created (writes since
    /// are indexed as they come).
    Full,
    /// Every row is indexed; writes keep it so.
    Incr,
}

impl IndexPhase {
    /// `FULL` or `INCR`, as Tablestore's DescribeTable shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            IndexPhase::Full => "FULL",
            IndexPhase::Incr => "INCR",
        }
    }
}

/// The catalog's record of an index table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct IndexRecord {
    pub(super) def: crate::model::index::IndexDef,
    pub(super) phase: IndexPhase,
}
