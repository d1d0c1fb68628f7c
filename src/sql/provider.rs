//! A Cellar table as a DataFusion `TableProvider`: schema discovery, key
//! range pushdown, a partitioned scan with PK ordering, and DML.
//!
//! Invariant: a filter is claimed Exact only when the key ranges encode it
//! fully; everything else is re-checked by DataFusion.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, Result as DfResult, plan_err};
use datafusion::datasource::TableType;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::expressions::Column as PhysicalColumn;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};

use super::dml::DmlExec;
use super::errors::df_err;
use super::index_scan::{self, Candidate, Choice, IndexHint, IndexLookupExec};
use super::insert::insert_plan;
use super::prune::StatsPruner;
use super::pushdown::{self, KeyPlan};
use super::scan_exec::ScanPiece;
use super::scan_exec::{CellarScanExec, PredicateFilter, keeps_key_order};
use crate::db::table::Table;
use crate::model::key::KeyRange;
use crate::model::types::ValueType;
use crate::read::{OutCol, RowFilter, RowGroupFilter, ScanRange, Snapshot, arrow_type, pk_value_type};

use datafusion::physical_optimizer::pruning::PruningPredicateBuilder;

/// One Cellar table seen from SQL.
pub struct CellarTable {
    table: Table,
    pub(super) schema: SchemaRef,
    pub(super) cols: Vec<OutCol>,
    /// The statement's `USE INDEX`, and the table's indexes as of its
    /// planning (one list for the pushdown and the scan).
    hint: IndexHint,
    indexes: Vec<Candidate>,
    /// For a scan of an index in place of its table: the table's name.
    via: Option<String>,
}

impl fmt::Debug for CellarTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CellarTable").field("name", &self.table.name()).finish()
    }
}

/// The type most values of a discovered column have (ties: the first of
/// integer, double, string, binary, boolean).
fn majority_type(counts: &[u64; 5]) -> ValueType {
    let mut best = 0;
    for i in 1..5 {
        if counts[i] > counts[best] {
            best = i;
        }
    }
    ValueType::ALL[best]
}

impl CellarTable {
    /// The provider for `table`, with the columns known now: the primary
    /// key, the declared columns, then the columns found in the data.
    pub fn new(table: Table) -> Self {
        let mut fields = Vec::new();
        let mut cols = Vec::new();
        for (i, c) in table.schema().primary_key.iter().enumerate() {
            // An auto-increment column is nullable for INSERT: NULL (or
            // leaving it out) asks for a new value.
            fields.push(Field::new(
                &c.name,
                arrow_type(pk_value_type(c.pk_type)),
                c.auto_increment,
            ));
            cols.push(OutCol::Pk(i));
        }
        let declared = table.declared_columns();
        for c in &declared {
            fields.push(Field::new(&c.name, arrow_type(c.value_type), true));
            cols.push(OutCol::Attr {
                name: c.name.clone(),
                ty: c.value_type,
            });
        }
        for (name, counts) in table.discovered_columns() {
            if declared.iter().any(|d| d.name == name) || table.schema().is_pk_column(&name) {
                continue;
            }
            let ty = majority_type(&counts);
            fields.push(Field::new(&name, arrow_type(ty), true));
            cols.push(OutCol::Attr { name, ty });
        }
        let indexes = table
            .index_tables()
            .into_iter()
            .map(|(def, table, complete)| Candidate { def, table, complete })
            .collect();
        CellarTable {
            table,
            schema: Arc::new(Schema::new(fields)),
            cols,
            hint: IndexHint::Auto,
            indexes,
            via: None,
        }
    }

    /// The same table under a statement's `USE INDEX`.
    pub(crate) fn with_hint(mut self, hint: IndexHint) -> Self {
        self.hint = hint;
        self
    }

    /// The schema of a table with no data yet: its key and declared columns.
    pub(crate) fn schema_of(schema: &crate::model::schema::TableSchema) -> SchemaRef {
        let mut fields = Vec::new();
        for c in &schema.primary_key {
            // An auto-increment column is nullable for INSERT: NULL (or
            // leaving it out) asks for a new value.
            fields.push(Field::new(
                &c.name,
                arrow_type(pk_value_type(c.pk_type)),
                c.auto_increment,
            ));
        }
        for c in &schema.columns {
            fields.push(Field::new(&c.name, arrow_type(c.value_type), true));
        }
        Arc::new(Schema::new(fields))
    }

    /// The Cellar table behind this provider.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Every column with the value type SQL shows it with.
    pub(crate) fn schema_fields(&self) -> Vec<(String, ValueType)> {
        self.cols
            .iter()
            .map(|c| match c {
                OutCol::Pk(i) => {
                    let p = &self.table.schema().primary_key[*i];
                    (p.name.clone(), pk_value_type(p.pk_type))
                }
                OutCol::Attr { name, ty } => (name.clone(), *ty),
            })
            .collect()
    }

    pub(crate) fn out_cols(&self) -> &[OutCol] {
        &self.cols
    }

    /// Row-group pruning from predicates the key ranges do not cover.
    pub(super) fn pruner(&self, state: &dyn Session, filters: &[Expr]) -> Option<(Arc<dyn RowGroupFilter>, String)> {
        let expr = filters.iter().cloned().reduce(|a, b| a.and(b))?;
        let df_schema = DFSchema::try_from(self.schema.clone()).ok()?;
        let physical = state.create_physical_expr(expr.clone(), &df_schema).ok()?;
        let predicate = PruningPredicateBuilder::new()
            .with_file_schema(self.schema.clone())
            .build(physical.clone())?;
        let pruner = StatsPruner::new(
            predicate,
            &physical,
            &self.schema,
            super::prune::column_types(&self.table, &self.cols),
        );
        Some((Arc::new(pruner), expr.to_string()))
    }

    /// The non-key predicates as a row filter on the scan's output columns
    /// (`None` when some predicate is volatile or needs a column the scan
    /// does not return).
    pub(super) fn row_filter(
        &self,
        state: &dyn Session,
        filters: &[Expr],
        projection: Option<&Vec<usize>>,
    ) -> Option<Arc<dyn RowFilter>> {
        if filters.iter().any(|f| f.is_volatile()) {
            return None;
        }
        let expr = filters.iter().cloned().reduce(|a, b| a.and(b))?;
        let schema = match projection {
            Some(p) => self.schema.project(p).ok()?,
            None => self.schema.as_ref().clone(),
        };
        let df_schema = DFSchema::try_from(schema).ok()?;
        let physical = state.create_physical_expr(expr, &df_schema).ok()?;
        Some(Arc::new(PredicateFilter(physical)))
    }

    fn key_plan(&self, filters: &[Expr]) -> KeyPlan {
        pushdown::plan(self.table.schema(), &filters.iter().collect::<Vec<_>>())
    }

    /// A scan plan over the given columns (indices into the schema).
    async fn scan_plan(
        &self,
        projection: Option<&Vec<usize>>,
        plan: KeyPlan,
        limit: Option<usize>,
        target_partitions: usize,
    ) -> DfResult<CellarScanExec> {
        let idx: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.cols.len()).collect(),
        };
        let cols: Arc<[OutCol]> = idx.iter().map(|i| self.cols[*i].clone()).collect();
        let schema = Arc::new(self.schema.project(&idx)?);
        // One snapshot of every table partition, taken together; each
        // partition the ranges reach is read by its own DataFusion
        // partitions (or chunks).
        let touched: Vec<(Arc<Snapshot>, Vec<ScanRange>)> = self
            .table
            .snapshots()
            .into_iter()
            .map(|snap| {
                let ranges = within(&plan.ranges, &snap.range);
                (Arc::new(snap), ranges)
            })
            .filter(|(_, r)| !r.is_empty())
            .collect();
        let err = |e| df_err(self.table.inner().read_error(e));
        // A scan that declares its key order is one partition of ordered
        // chunks read in parallel (`ordered_scan`); others get a partition
        // per core, and at least one per table partition.
        let mut pieces: Vec<ScanPiece> = Vec::new();
        let ordered = target_partitions > 1 && keeps_key_order(&cols);
        let per_part = target_partitions.div_ceil(touched.len().max(1));
        for (snap, ranges) in touched {
            let cut = match ordered {
                true => Cut::Groups(chunk_groups(cols.len())),
                false => Cut::Parts(per_part),
            };
            for chunk in split(&snap, ranges, cut).await.map_err(err)? {
                pieces.push((snap.clone(), chunk));
            }
        }
        if pieces.is_empty() {
            let first = self
                .table
                .snapshots()
                .into_iter()
                .next()
                .expect("a table has a partition");
            pieces.push((Arc::new(first), Vec::new()));
        }
        let partitions = (pieces, if ordered { target_partitions } else { 1 });
        Ok(CellarScanExec::new(
            self.table.clone(),
            self.table.now_ms(),
            partitions,
            cols,
            schema,
            limit,
            match &self.via {
                Some(base) => format!("{}] index_of=[{base}", plan.description),
                None => plan.description,
            },
        ))
    }
}

/// The part of sorted `ranges` inside a table partition's `range`.
fn within(ranges: &[ScanRange], range: &KeyRange) -> Vec<ScanRange> {
    ranges
        .iter()
        .filter_map(|r| {
            if r.point {
                return range.contains(&r.range.lo).then(|| r.clone());
            }
            let clipped = r.range.intersect(range);
            (!clipped.is_empty()).then_some(ScanRange {
                range: clipped,
                point: false,
            })
        })
        .collect()
}

/// Segment row groups per chunk of an ordered scan of a few columns: 64k
/// rows at the default group size, while 2M rows still make 30 chunks to
/// share out.
const ORDERED_CHUNK_GROUPS: usize = 4;

/// Row groups per chunk for an ordered scan of `columns` output columns.
/// The chunks read ahead of the one handed on hold their rows whole, so
/// wider projections get shorter chunks: in flight, about
/// `target_partitions` x 64k rows of 4 columns at most (down to one row
/// group per chunk), a few MB for typical columns.
fn chunk_groups(columns: usize) -> usize {
    (16 / columns.max(1)).clamp(1, ORDERED_CHUNK_GROUPS)
}

/// How [`split`] cuts: into a number of parts, or into parts of about so
/// many segment row groups.
#[derive(Clone, Copy)]
enum Cut {
    Parts(usize),
    Groups(usize),
}

/// Splits sorted ranges into parts of similar segment row counts, at
/// row-group boundaries of the segments (so no key is cut).
async fn split(snap: &Snapshot, ranges: Vec<ScanRange>, cut: Cut) -> crate::Result<Vec<Vec<ScanRange>>> {
    if matches!(cut, Cut::Parts(0 | 1)) || ranges.iter().all(|r| r.point) || ranges.is_empty() {
        return Ok(vec![ranges]);
    }
    let mut starts = Vec::new();
    for seg in snap.segments.iter() {
        if ranges.iter().any(|r| r.range.overlaps(&seg.min_key, &seg.max_key)) {
            starts.extend(
                seg.row_group_starts()
                    .await?
                    .into_iter()
                    .filter(|(k, _)| ranges.iter().any(|r| r.range.contains(k))),
            );
        }
    }
    starts.sort();
    let total: u64 = starts.iter().map(|(_, r)| r).sum();
    let n = match cut {
        Cut::Parts(n) => n,
        Cut::Groups(g) => starts.len().div_ceil(g.max(1)),
    };
    if n <= 1 {
        return Ok(vec![ranges]);
    }
    let mut bounds: Vec<Vec<u8>> = Vec::new();
    let mut acc = 0;
    for (k, rows) in &starts {
        if acc >= total * (bounds.len() as u64 + 1) / n as u64 && bounds.len() + 1 < n && acc > 0 {
            bounds.push(k.clone());
        }
        acc += rows;
    }
    if bounds.is_empty() {
        return Ok(vec![ranges]);
    }
    let mut parts = vec![Vec::new(); bounds.len() + 1];
    for r in ranges {
        let mut lo = r.range.lo.clone();
        for (i, part) in parts.iter_mut().enumerate() {
            let hi = bounds.get(i).cloned();
            let piece_hi = match (&hi, &r.range.hi) {
                (Some(b), Some(h)) => Some(b.min(h).clone()),
                (Some(b), None) => Some(b.clone()),
                (None, h) => h.clone(),
            };
            let piece = KeyRange {
                lo: lo.clone(),
                hi: piece_hi.clone(),
            };
            if !piece.is_empty() {
                part.push(ScanRange {
                    range: piece,
                    point: false,
                });
            }
            match piece_hi {
                Some(h) if lo < h => lo = h,
                _ => {}
            }
            if r.range.hi.as_ref().is_some_and(|h| lo >= *h) {
                break;
            }
        }
    }
    parts.retain(|p| !p.is_empty());
    if parts.is_empty() {
        parts.push(Vec::new());
    }
    Ok(parts)
}

#[async_trait]
impl TableProvider for CellarTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> DfResult<Vec<TableProviderFilterPushDown>> {
        let choice = index_scan::choose(&self.table, &self.indexes, &self.hint, filters)?;
        Ok(choice.plan().support(TableProviderFilterPushDown::Inexact))
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if self.indexes.is_empty() {
            return self.table_scan(state, projection, filters, limit).await;
        }
        let refs: Vec<&Expr> = filters.iter().collect();
        self.index_scan(
            state,
            projection,
            filters,
            limit,
            index_scan::choose(&self.table, &self.indexes, &self.hint, &refs)?,
        )
        .await
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        insert_plan(
            crate::db::Writer::Table(self.table.clone()),
            self.schema.clone(),
            input,
            insert_op,
        )
    }

    async fn delete_from(&self, state: &dyn Session, filters: Vec<Expr>) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.dml(state, filters, None).await
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let mut set = Vec::new();
        for (name, e) in assignments {
            if matches!(&e, Expr::Column(c) if c.name == name) {
                continue;
            }
            if self.table.schema().is_pk_column(&name) {
                return plan_err!(
                    "UPDATE cannot change primary-key column '{name}' of table '{}'; DELETE the row and INSERT it with the new key",
                    self.table.name()
                );
            }
            set.push((name, e));
        }
        self.dml(state, filters, Some(set)).await
    }
}

impl CellarTable {
    /// A scan of the table itself (its key ranges).
    async fn table_scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let plan = self.key_plan(filters);
        // A LIMIT reaches the scan only when every filter is exact.
        let limit = if plan.exact.iter().all(|e| *e) { limit } else { None };
        let inexact: Vec<Expr> = filters
            .iter()
            .zip(&plan.exact)
            .filter(|(_, e)| !**e)
            .map(|(f, _)| f.clone())
            .collect();
        let pruner = self.pruner(state, &inexact);
        let row_filter = self.row_filter(state, &inexact, projection);
        let n = state.config().target_partitions();
        let mut exec = self.scan_plan(projection, plan, limit, n).await?;
        if let Some((p, text)) = pruner {
            exec.filter = Some(p);
            exec.pruning = text;
        }
        exec.row_filter = row_filter;
        exec.projection = projection.cloned();
        exec.residual = inexact;
        Ok(Arc::new(exec))
    }

    /// The scan of a table with indexes (see `sql/index_scan.rs`): the
    /// table, or the chosen index in place of the table when it has every
    /// column needed, else a lookup of the table rows its entries name when
    /// few enough (else the table). The pushdown of other subsets of the
    /// filters may have chosen otherwise and claimed other filters exact,
    /// so every filter the path taken does not apply exactly is checked on
    /// its rows here (a lookup checks them all: a global index may be
    /// behind).
    async fn index_scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
        choice: Choice,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let wanted: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.cols.len()).collect(),
        };
        let names: Vec<String> = wanted.iter().map(|i| self.schema.field(*i).name().clone()).collect();
        #[allow(clippy::large_enum_variant)]
        enum Path {
            Table,
            Covering(Candidate),
            Lookup(Candidate),
        }
        let (path, plan) = match choice {
            Choice::Table(plan) => (Path::Table, plan),
            Choice::Index(c, plan) => {
                let in_index = |n: &String| c.table.schema().is_pk_column(n) || c.def.include.contains(n);
                // What a covering scan returns: the columns wanted and those
                // of the filters its keys do not apply.
                let mut needed = names.clone();
                for (f, exact) in filters.iter().zip(&plan.exact) {
                    if !*exact {
                        needed.extend(f.column_refs().into_iter().map(|c| c.name.clone()));
                    }
                }
                if needed.iter().all(in_index) {
                    (Path::Covering(c), plan)
                } else {
                    let rows: u64 = self
                        .table
                        .snapshots()
                        .iter()
                        .flat_map(|s| s.segments.iter().map(|g| g.meta.num_rows))
                        .sum();
                    let forced = matches!(self.hint, IndexHint::Use(_));
                    // The lookup pays when it reads under a twentieth of the
                    // table. A LIMIT under that bounds what it reads when the
                    // index keys apply every filter (no entry is read only
                    // to be dropped), so only a query without one counts the
                    // entries its ranges hold.
                    let cap = (rows / 20).max(64) as usize;
                    let bounded = limit.is_some_and(|n| n < cap) && plan.exact.iter().all(|e| *e);
                    let pays =
                        forced || bounded || index_scan::probe_below(&c.table, &plan, cap).await.map_err(df_err)?;
                    if pays {
                        (Path::Lookup(c), plan)
                    } else {
                        (Path::Table, self.key_plan(filters))
                    }
                }
            }
        };
        let residual: Vec<Expr> = filters
            .iter()
            .zip(&plan.exact)
            .filter(|(_, e)| matches!(path, Path::Lookup(_)) || !**e)
            .map(|(f, _)| f.clone())
            .collect();
        let mut ext = wanted.clone();
        for f in &residual {
            for col in f.column_refs() {
                let i = self.schema.index_of(&col.name)?;
                if !ext.contains(&i) {
                    ext.push(i);
                }
            }
        }
        let input: Arc<dyn ExecutionPlan> = match path {
            Path::Table => self.table_scan(state, Some(&ext), filters, limit).await?,
            Path::Covering(c) => {
                let mut index = CellarTable::new(c.table.clone());
                index.via = Some(self.table.name().to_string());
                let proj: Vec<usize> = ext
                    .iter()
                    .map(|i| index.schema.index_of(self.schema.field(*i).name()))
                    .collect::<Result<_, _>>()?;
                index.table_scan(state, Some(&proj), filters, limit).await?
            }
            Path::Lookup(c) => {
                let cols: Arc<[OutCol]> = ext.iter().map(|i| self.cols[*i].clone()).collect();
                let schema = Arc::new(self.schema.project(&ext)?);
                Arc::new(IndexLookupExec::new(
                    self.table.clone(),
                    (c.table.clone(), c.def.clone()),
                    &plan,
                    cols,
                    schema,
                ))
            }
        };
        let filtered: Arc<dyn ExecutionPlan> = match residual.into_iter().reduce(|a, b| a.and(b)) {
            None => input,
            Some(e) => {
                let df_schema = DFSchema::try_from(input.schema())?;
                let predicate = state.create_physical_expr(e, &df_schema)?;
                match input.downcast_ref::<IndexLookupExec>() {
                    // The lookup checks them itself, row batch by batch.
                    Some(lookup) => Arc::new(IndexLookupExec {
                        predicate: Some(predicate),
                        ..lookup.clone()
                    }),
                    None => Arc::new(FilterExec::try_new(predicate, input)?),
                }
            }
        };
        if ext.len() == wanted.len() {
            return Ok(filtered);
        }
        let schema = filtered.schema();
        let exprs: Vec<ProjectionExpr> = (0..wanted.len())
            .map(|i| {
                let name = schema.field(i).name().clone();
                ProjectionExpr::new(Arc::new(PhysicalColumn::new(&name, i)), name)
            })
            .collect();
        Ok(Arc::new(ProjectionExec::try_new(exprs, filtered)?))
    }

    /// DELETE (assignments `None`) or UPDATE: a plan that scans the matching
    /// rows when executed and writes DeleteRow / UpdateRow for each.
    async fn dml(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
        assignments: Option<Vec<(String, Expr)>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let df_schema = DFSchema::try_from(self.schema.clone())?;
        let predicate = match filters.iter().cloned().reduce(|a, b| a.and(b)) {
            Some(e) => Some(state.create_physical_expr(e, &df_schema)?),
            None => None,
        };
        let assignments = match assignments {
            Some(a) => Some(
                a.into_iter()
                    .map(|(n, e)| {
                        let i = self.schema.index_of(&n)?;
                        Ok((i, state.create_physical_expr(e, &df_schema)?))
                    })
                    .collect::<DfResult<Vec<_>>>()?,
            ),
            None => None,
        };
        let scan = self.scan_plan(None, self.key_plan(&filters), None, 1).await?;
        Ok(Arc::new(DmlExec::new(
            self.table.clone(),
            scan,
            predicate,
            assignments,
            self.schema.clone(),
        )))
    }
}
