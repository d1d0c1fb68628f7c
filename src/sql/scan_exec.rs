//! The physical scan of one Cellar table: a partition per set of key
//! ranges of one table partition, each a latest-version scan of that
//! partition's snapshot; or, when the scan declares its key order, one
//! partition whose chunks of key ranges are read in parallel and handed
//! on in order ([`super::ordered_scan`]).
//!
//! Invariants: every partition reads the snapshots taken together when
//! the plan was made, so a query sees each row once, as of one moment; a
//! table partition is read only within its own key range; a declared key
//! order holds within each partition.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result as DfResult;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, LexOrdering, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties};

use super::errors::df_err;
use crate::db::table::Table;
use crate::read::{
    LatestScan, OutCol, RowFilter, RowGroupFilter, ScanCounters, ScanOutput, ScanRange, ScanShared, Snapshot,
};

/// The scan of one Cellar table.
#[derive(Debug)]
pub struct CellarScanExec {
    pub(super) table: Table,
    pub(super) now_ms: i64,
    /// Key ranges of one table partition, with its snapshot, per
    /// DataFusion partition; when `parallel` > 1, per chunk of the one
    /// ordered partition (in key order).
    pub(super) partitions: Vec<ScanPiece>,
    /// Chunks read at once by the ordered partition (1: the ranges are
    /// DataFusion's partitions).
    pub(super) parallel: usize,
    pub(super) cols: Arc<[OutCol]>,
    pub(super) schema: SchemaRef,
    pub(super) limit: Option<usize>,
    pub(super) keys: String,
    /// Row-group pruning by non-key predicates, and its text for EXPLAIN.
    pub(super) filter: Option<Arc<dyn RowGroupFilter>>,
    pub(super) pruning: String,
    /// The same predicates on rows, for scans that copy rows anyway.
    pub(super) row_filter: Option<Arc<dyn RowFilter>>,
    pub(super) props: Arc<PlanProperties>,
    /// What statistics pruning saved, over every partition executed.
    pub(super) counters: Arc<ScanCounters>,
    /// The projection and the filters the key ranges leave to pruning and
    /// the row filter: with the pieces, what another process holding the
    /// same (archived) table needs to make this plan again (`cluster`).
    pub(super) projection: Option<Vec<usize>>,
    pub(super) residual: Vec<datafusion::logical_expr::Expr>,
}

/// A table partition's snapshot and key ranges of it to read.
pub(super) type ScanPiece = (Arc<Snapshot>, Vec<ScanRange>);

/// Non-key predicates evaluated on a scan's output rows.
pub(super) struct PredicateFilter(pub(super) Arc<dyn PhysicalExpr>);

impl fmt::Debug for dyn RowFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RowFilter")
    }
}

impl RowFilter for PredicateFilter {
    fn columns(&self) -> Option<Vec<String>> {
        Some(super::prune::expr_columns(&self.0))
    }

    /// Rows the predicates do not rule out. A predicate that fails to
    /// evaluate rules nothing out: the query's own filter then reports the
    /// error (or not, where it evaluates conjuncts lazily).
    fn matches(&self, batch: &RecordBatch) -> crate::Result<datafusion::arrow::buffer::BooleanBuffer> {
        let n = batch.num_rows();
        let all = || datafusion::arrow::buffer::BooleanBuffer::new_set(n);
        let Ok(v) = self.0.evaluate(batch).and_then(|v| v.into_array(n)) else {
            return Ok(all());
        };
        Ok(match v.as_boolean_opt() {
            Some(b) => crate::read::true_bits(b),
            None => all(),
        })
    }
}

impl fmt::Debug for dyn RowGroupFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RowGroupFilter")
    }
}

impl CellarScanExec {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        table: Table,
        now_ms: i64,
        (partitions, parallel): (Vec<ScanPiece>, usize),
        cols: Arc<[OutCol]>,
        schema: SchemaRef,
        limit: Option<usize>,
        keys: String,
    ) -> Self {
        // Rows come out in key order within each partition: declare the
        // ordering of the leading PK columns the projection keeps.
        debug_assert!(parallel <= 1 || keeps_key_order(&cols));
        let mut ordering = Vec::new();
        for i in 0..table.schema().primary_key.len() {
            match cols.iter().position(|c| *c == OutCol::Pk(i)) {
                Some(p) => ordering.push(PhysicalSortExpr::new_default(Arc::new(
                    datafusion::physical_expr::expressions::Column::new(schema.field(p).name(), p),
                ))),
                None => break,
            }
        }
        let eq = match LexOrdering::new(ordering) {
            Some(o) => EquivalenceProperties::new_with_orderings(schema.clone(), [o]),
            None => EquivalenceProperties::new(schema.clone()),
        };
        let props = PlanProperties::new(
            eq,
            Partitioning::UnknownPartitioning(if parallel > 1 { 1 } else { partitions.len().max(1) }),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        CellarScanExec {
            table,
            now_ms,
            partitions,
            parallel,
            cols,
            schema,
            limit,
            keys,
            filter: None,
            pruning: String::new(),
            row_filter: None,
            props: Arc::new(props),
            counters: Arc::default(),
            projection: None,
            residual: Vec::new(),
        }
    }

    /// A latest-version scan of a piece at the plan's snapshot, sharing
    /// `shared` with the other chunks of its scan.
    fn scan(&self, (snap, ranges): &ScanPiece, shared: Arc<ScanShared>) -> LatestScan {
        LatestScan::new(
            self.table.inner().clone(),
            snap.clone(),
            self.now_ms,
            ranges,
            ScanOutput {
                cols: self.cols.clone(),
                schema: self.schema.clone(),
                limit: self.limit,
                filter: self.filter.clone(),
                row_filter: self.row_filter.clone(),
                counters: self.counters.clone(),
                shared,
            },
        )
    }

    /// Whether the one partition is read as ordered chunks.
    fn chunked(&self) -> bool {
        self.parallel > 1 && self.partitions.len() > 1
    }

    /// Every partition's rows, one partition after the other (in key
    /// order when the plan was made for one target partition).
    pub(super) fn stream_all(&self) -> SendableRecordBatchStream {
        if self.chunked() || self.partitions.len() <= 1 {
            return self.stream(0);
        }
        let streams: Vec<_> = (0..self.partitions.len()).map(|p| self.stream(p)).collect();
        Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::StreamExt::flatten(futures::stream::iter(streams)),
        ))
    }

    pub(super) fn stream(&self, partition: usize) -> SendableRecordBatchStream {
        if self.chunked() {
            // Scans are made here, at the plan's snapshot, and started as
            // the ordered stream reaches them.
            let whole = self
                .partitions
                .iter()
                .flat_map(|(_, r)| r)
                .map(|r| r.range.clone())
                .collect();
            let shared = Arc::new(ScanShared::chunked(whole));
            let scans: Vec<_> = self
                .partitions
                .iter()
                .map(|r| batches(self.scan(r, shared.clone()), self.table.inner().clone()))
                .collect();
            let s = super::ordered_scan::ordered_stream(scans.into_iter(), self.parallel, self.limit);
            return Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), s));
        }
        let piece = match self.partitions.get(partition) {
            Some(p) => p.clone(),
            None => (self.partitions[0].0.clone(), Vec::new()),
        };
        let scan = self.scan(&piece, Arc::default());
        Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            batches(scan, self.table.inner().clone()),
        ))
    }
}

/// A scan's batches as a stream; it ends after an error.
fn batches(
    scan: LatestScan,
    table: Arc<crate::state::TableInner>,
) -> impl futures::Stream<Item = DfResult<RecordBatch>> + Send + 'static {
    futures::stream::unfold(Some(scan), move |scan| {
        let table = table.clone();
        async move {
            let mut scan = scan?;
            match scan.next_batch().await {
                Ok(Some(b)) => Some((Ok(b), Some(scan))),
                Ok(None) => None,
                Err(e) => Some((Err(df_err(table.read_error(e))), None)),
            }
        }
    })
}

/// Whether a scan with these output columns declares its key order: it
/// does when it keeps the leading primary-key column.
pub(super) fn keeps_key_order(cols: &[OutCol]) -> bool {
    cols.contains(&OutCol::Pk(0))
}

impl DisplayAs for CellarScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let names: Vec<&str> = self.schema.fields().iter().map(|f| f.name().as_str()).collect();
        write!(
            f,
            "CellarScanExec: table={}, keys=[{}], projection=[{}]",
            self.table.name(),
            self.keys,
            names.join(", ")
        )?;
        if let Some(l) = self.limit {
            write!(f, ", limit={l}")?;
        }
        if self.chunked() {
            write!(f, ", ordered_chunks={}", self.partitions.len())?;
        }
        if !self.pruning.is_empty() {
            write!(f, ", row_group_pruning=[{}]", self.pruning)?;
        }
        Ok(())
    }
}

impl ExecutionPlan for CellarScanExec {
    leaf_plan!("CellarScanExec");

    fn execute(&self, partition: usize, _context: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        Ok(self.stream(partition))
    }

    /// For `EXPLAIN ANALYZE`, with a non-key predicate: the row groups
    /// and pages of the columns read in the scanned key ranges, and how
    /// many statistics pruning left to read.
    fn metrics(&self) -> Option<MetricsSet> {
        self.filter.as_ref()?;
        let set = ExecutionPlanMetricsSet::new();
        let c = &self.counters;
        let groups = c.row_groups.load(Relaxed);
        for (name, value) in [
            ("row_groups", groups),
            (
                "row_groups_read",
                groups.saturating_sub(c.row_groups_pruned.load(Relaxed)),
            ),
            ("pages", c.pages.load(Relaxed)),
            ("pages_read", c.pages_read.load(Relaxed)),
        ] {
            MetricBuilder::new(&set)
                .global_counter(name)
                .add(usize::try_from(value).unwrap_or(usize::MAX));
        }
        Some(set.clone_inner())
    }
}
