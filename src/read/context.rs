//! What every part of one scan reads with (the table, the snapshot, the
//! clock reading, the output columns) and how it builds output rows.
//!
//! Invariant: every row a scan outputs goes through [`ScanCtx::output`] or
//! [`ScanCtx::push_visible`], which apply the TTL and the type conversions
//! the same way whatever source the row came from.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use arrow::array::{ArrayRef, AsArray, RecordBatch, RecordBatchOptions, new_null_array};
use arrow::datatypes::SchemaRef;

use super::arrow::{ColBuilder, OutCol, arrow_type, attr_array, pk_value_type};
use super::overlay::Overlay;
use super::plan::{RowFilter, ScanCounters};
use crate::error::{Error, Result};
use crate::memtable::Memtable;
use crate::model::key::KeyRange;
use crate::model::row::RowState;
use crate::model::types::{PkValue, Value};
use crate::segment::Segment;
use crate::state::{Snapshot, TableInner};

/// What every part of one scan reads with: the table, the snapshot, the
/// clock reading and the output columns.
pub(super) struct ScanCtx {
    pub(super) table: Arc<TableInner>,
    pub(super) snap: Arc<Snapshot>,
    /// Versions older than this are expired (`i64::MIN`: no TTL).
    pub(super) cutoff: i64,
    pub(super) pk_types: Vec<crate::model::types::PkType>,
    pub(super) cols: Arc<[OutCol]>,
    pub(super) schema: SchemaRef,
    pub(super) row_filter: Option<Arc<dyn RowFilter>>,
    /// The attribute columns the scan reads from memtable overlays: its
    /// output columns and those its filters name (an overlay encodes only
    /// the columns scans ask for, see [`super::overlay`]).
    pub(super) overlay_columns: Arc<std::collections::BTreeSet<String>>,
    pub(super) counters: Arc<ScanCounters>,
    /// What the parts of a scan read in chunks share.
    pub(super) shared: Arc<ScanShared>,
}

/// What the chunks of one scan share, so that reading a scan in chunks
/// (each a [`super::LatestScan`] of a few row groups, see the SQL layer's
/// ordered scans) costs what reading it whole does.
///
/// Invariant: every overlay held was valid for the scan's snapshot when it
/// was taken, and stays so (overlays never change; a newer one replaces
/// it in its slot).
#[derive(Default)]
pub(crate) struct ScanShared {
    /// The key ranges of the whole scan, when it is read in chunks: a
    /// piece judges whether an overlay is worth building by the whole
    /// scan's share of a segment, not its own chunk's.
    whole: Option<Vec<KeyRange>>,
    /// Rows of each segment (by path) the whole scan reads.
    whole_rows: Mutex<HashMap<String, u64>>,
    /// The overlays the scan's pieces used, by memtable and slot: later
    /// chunks take the same one, even once upkeep has brought the slot's
    /// past the scan's snapshot (which a piece may not use).
    overlays: Mutex<HashMap<(usize, String), Arc<Overlay>>>,
}

impl ScanShared {
    /// For a scan of `ranges` read in chunks.
    pub(crate) fn chunked(ranges: Vec<KeyRange>) -> Self {
        ScanShared {
            whole: Some(ranges),
            ..ScanShared::default()
        }
    }

    /// The rows of `seg` the whole scan reads, when it is read in chunks.
    pub(super) async fn whole_rows(&self, seg: &Segment) -> Result<Option<u64>> {
        let Some(ranges) = &self.whole else {
            return Ok(None);
        };
        if let Some(n) = self.whole_rows.lock().get(&seg.meta.path) {
            return Ok(Some(*n));
        }
        let mut n = 0u64;
        for r in ranges {
            n += seg.row_spans(r).await?.iter().map(|s| s.rows.len() as u64).sum::<u64>();
        }
        self.whole_rows.lock().insert(seg.meta.path.clone(), n);
        Ok(Some(n))
    }

    pub(super) fn overlay(&self, mem: &Arc<Memtable>, slot: &str) -> Option<Arc<Overlay>> {
        self.overlays
            .lock()
            .get(&(Arc::as_ptr(mem) as usize, slot.to_string()))
            .cloned()
    }

    pub(super) fn keep_overlay(&self, mem: &Arc<Memtable>, slot: String, ov: &Arc<Overlay>) {
        self.overlays
            .lock()
            .insert((Arc::as_ptr(mem) as usize, slot), ov.clone());
    }
}

impl ScanCtx {
    pub(super) fn rows(&self) -> RowsBuilder {
        RowsBuilder::new(&self.table, &self.cols)
    }

    /// Appends the row of `key` when `st` leaves one visible (`pk`: the
    /// key's decoded values, when known); true when it did.
    pub(super) fn push_visible(
        &self,
        rows: &mut RowsBuilder,
        key: &[u8],
        st: &RowState,
        pk: Option<&[PkValue]>,
    ) -> Result<bool> {
        rows.push_state(key, st, self.cutoff, pk)
    }

    pub(super) fn finish(&self, rows: &mut RowsBuilder) -> Result<RecordBatch> {
        rows.finish(&self.schema)
    }

    /// The output columns of rows in the segment layout (typed key columns,
    /// one struct per attribute column): TTL and type conversion applied,
    /// an attribute the rows lack as NULLs. `kind` and `name` name the rows
    /// in errors ("segment" and its path).
    pub(super) fn output(&self, rows: &RecordBatch, kind: &str, name: &str) -> Result<RecordBatch> {
        let corrupt = |m: &str| Error::corruption(format!("{kind} {name}: {m}"));
        let n = rows.num_rows();
        let mut arrays = Vec::with_capacity(self.cols.len());
        for c in self.cols.iter() {
            arrays.push(match c {
                OutCol::Pk(i) => rows
                    .column_by_name(&self.table.schema.primary_key[*i].name)
                    .cloned()
                    .ok_or_else(|| corrupt("missing a primary-key column"))?,
                OutCol::Attr { name, ty } => match rows.column_by_name(name) {
                    Some(a) => attr_array(
                        a.as_struct_opt().ok_or_else(|| corrupt("attribute is not a struct"))?,
                        *ty,
                        self.cutoff,
                    )?,
                    None => new_null_array(&arrow_type(*ty), n),
                },
            });
        }
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }
}

/// Builds output batches from rows given as key + visible cells.
pub(super) struct RowsBuilder {
    pub(super) cols: Arc<[OutCol]>,
    pub(super) builders: Vec<ColBuilder>,
    pub(super) pk_types: Vec<crate::model::types::PkType>,
    pub(super) rows: usize,
}

impl RowsBuilder {
    pub(super) fn new(table: &TableInner, cols: &Arc<[OutCol]>) -> Self {
        let builders = cols
            .iter()
            .map(|c| match c {
                OutCol::Pk(i) => ColBuilder::new(pk_value_type(table.schema.primary_key[*i].pk_type)),
                OutCol::Attr { ty, .. } => ColBuilder::new(*ty),
            })
            .collect();
        RowsBuilder {
            cols: cols.clone(),
            builders,
            pk_types: table.schema.pk_types(),
            rows: 0,
        }
    }

    /// Appends the row `st` leaves visible (its newest live version of
    /// each output column), straight from the state without copying it;
    /// false when no row is visible. `pk`: the key's decoded values when
    /// the caller has them.
    pub(super) fn push_state(
        &mut self,
        key: &[u8],
        st: &RowState,
        cutoff: i64,
        pk: Option<&[PkValue]>,
    ) -> Result<bool> {
        // The newest version of a column is within any max_versions (>= 1),
        // so a row exists when its marker or any column's newest version
        // is not expired (the rule `visible_cells` applies).
        fn live(c: &crate::model::row::ColumnState, cutoff: i64) -> Option<&Value> {
            c.versions.first().filter(|(v, _)| *v >= cutoff).map(|(_, x)| x)
        }
        let exists = st.row_ts.is_some_and(|ts| ts >= cutoff) || st.columns.values().any(|c| live(c, cutoff).is_some());
        if !exists {
            return Ok(false);
        }
        let decoded;
        let pk = match pk {
            Some(pk) if !pk.is_empty() => Some(pk),
            _ if self.cols.iter().any(|c| matches!(c, OutCol::Pk(_))) => {
                decoded = crate::model::key::decode_key(key, &self.pk_types)?;
                Some(decoded.as_slice())
            }
            _ => None,
        };
        for (c, b) in self.cols.iter().zip(&mut self.builders) {
            match c {
                OutCol::Pk(i) => {
                    if let Some(v) = pk.and_then(|pk| pk.get(*i)) {
                        b.push_pk(v);
                    }
                }
                OutCol::Attr { name, .. } => b.push(st.columns.get(name).and_then(|c| live(c, cutoff))),
            }
        }
        self.rows += 1;
        Ok(true)
    }

    pub(super) fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        let arrays: Vec<ArrayRef> = self.builders.iter_mut().map(|b| b.finish()).collect();
        let n = std::mem::take(&mut self.rows);
        Ok(RecordBatch::try_new_with_options(
            schema.clone(),
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }
}
