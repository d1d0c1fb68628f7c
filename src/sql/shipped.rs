//! A table scan as it crosses to another process (`cluster`): the plan's
//! pieces, columns, limit, clock and residual filters, and the same plan
//! made again from them over the same table there.
//!
//! Invariants: only a scan of an archived table is shipped (its segments
//! and manifest never change, so the receiving process reads exactly the
//! rows this one would, with the sender's clock for TTLs); the receiver's
//! columns must be the sender's, and every piece must name a partition
//! the table has, or the rebuild is refused: never a different plan.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::{Result as DfResult, plan_err};
use datafusion::logical_expr::Expr;

use super::provider::CellarTable;
use super::scan_exec::CellarScanExec;
use crate::db::table::Table;
use crate::read::ScanRange;

/// What [`CellarScanExec::shipped`] gives and [`rebuild`] takes.
#[derive(Debug, Clone)]
pub(crate) struct ShippedScan {
    pub now_ms: i64,
    /// Per piece: the table partition it reads (its position among the
    /// table's partitions, in key order) and its key ranges there.
    pub pieces: Vec<(usize, Vec<ScanRange>)>,
    pub parallel: usize,
    pub limit: Option<usize>,
    /// The key plan's text, for EXPLAIN.
    pub keys: String,
    pub projection: Option<Vec<usize>>,
    pub residual: Vec<Expr>,
    /// The output columns as planned: name and Arrow type (as text).
    pub columns: Vec<(String, String)>,
}

impl CellarScanExec {
    /// The table scanned.
    pub(crate) fn table(&self) -> &Table {
        &self.table
    }

    /// This plan as another process can make it again.
    pub(crate) fn shipped(&self) -> crate::Result<ShippedScan> {
        let snaps = self.table.snapshots();
        let mut pieces = Vec::with_capacity(self.partitions.len());
        for (snap, ranges) in &self.partitions {
            let Some(i) = snaps.iter().position(|s| s.range == snap.range) else {
                return Err(crate::Error::param(format!(
                    "table '{}' changed its partitions while the query was planned; retry",
                    self.table.name()
                )));
            };
            pieces.push((i, ranges.clone()));
        }
        Ok(ShippedScan {
            now_ms: self.now_ms,
            pieces,
            parallel: self.parallel,
            limit: self.limit,
            keys: self.keys.clone(),
            projection: self.projection.clone(),
            residual: self.residual.clone(),
            columns: columns_of(&self.schema),
        })
    }
}

/// Each column's name and Arrow type, as text.
pub(crate) fn columns_of(schema: &SchemaRef) -> Vec<(String, String)> {
    schema
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().to_string()))
        .collect()
}

/// The scan `s` describes, over `table` (the same archived table the
/// sender scanned, opened here).
pub(crate) fn rebuild(table: Table, state: &dyn Session, s: ShippedScan) -> DfResult<CellarScanExec> {
    let provider = CellarTable::new(table.clone());
    let idx: Vec<usize> = match &s.projection {
        Some(p) => p.clone(),
        None => (0..provider.cols.len()).collect(),
    };
    if idx.iter().any(|i| *i >= provider.cols.len()) {
        return plan_err!(
            "table '{}' here has {} columns, fewer than the plan sent uses",
            table.name(),
            provider.cols.len()
        );
    }
    let schema = Arc::new(provider.schema.project(&idx)?);
    let here = columns_of(&schema);
    if here != s.columns {
        return plan_err!(
            "table '{}' here has columns {here:?}; the plan sent was made for {:?}",
            table.name(),
            s.columns
        );
    }
    let cols = idx.iter().map(|i| provider.cols[*i].clone()).collect();
    let snaps: Vec<Arc<crate::read::Snapshot>> = table.snapshots().into_iter().map(Arc::new).collect();
    let mut pieces = Vec::with_capacity(s.pieces.len());
    for (i, ranges) in s.pieces {
        let Some(snap) = snaps.get(i) else {
            return plan_err!(
                "table '{}' here has {} partitions; the plan sent reads partition {i}",
                table.name(),
                snaps.len()
            );
        };
        pieces.push((snap.clone(), ranges));
    }
    let mut exec = CellarScanExec::new(table, s.now_ms, (pieces, s.parallel), cols, schema, s.limit, s.keys);
    if let Some((p, text)) = provider.pruner(state, &s.residual) {
        exec.filter = Some(p);
        exec.pruning = text;
    }
    exec.row_filter = provider.row_filter(state, &s.residual, s.projection.as_ref());
    exec.projection = s.projection;
    exec.residual = s.residual;
    Ok(exec)
}
