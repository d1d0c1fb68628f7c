//! A monthly series as one SQL table: a union of its month tables, local
//! and archived, that skips the months a predicate on the time column
//! excludes; INSERT routes each row to its month.
//!
//! Invariants: the series' schema is its key columns plus every attribute
//! column any month has (a month without one reads it as NULL); a month is
//! skipped only when the conjunction of the filters on the time column
//! cannot hold in it; every filter is re-checked above the union.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::datasource::TableType;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{CastExpr, Column, Literal};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

use super::insert::insert_plan;
use super::provider::CellarTable;
use crate::db::series::{Month, month_bounds, parse_month_table};
use crate::db::{Database, Series, Writer};

/// A series seen from SQL.
pub struct SeriesTable {
    series: Series,
    /// The months, oldest first, each as a table provider.
    months: Vec<(Month, CellarTable)>,
    schema: SchemaRef,
}

impl fmt::Debug for SeriesTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SeriesTable({})", self.series.name())
    }
}

impl SeriesTable {
    /// The series with the months it has now.
    pub fn new(db: &Database, series: Series) -> Self {
        let months: Vec<(Month, CellarTable)> = series
            .months()
            .into_iter()
            .filter_map(|name| {
                let m = parse_month_table(series.name(), &name)?;
                Some((m, CellarTable::new(db.table(&name).ok()?)))
            })
            .collect();
        // Key columns, then every attribute column of any month (the first
        // month that has one gives its type), then declared ones no month
        // has yet.
        let npk = series.schema().primary_key.len();
        let mut fields: Vec<Field> = Vec::new();
        for (_, m) in &months {
            for f in m.schema().fields() {
                if !fields.iter().any(|g| g.name() == f.name()) {
                    fields.push(f.as_ref().clone());
                }
            }
        }
        if fields.is_empty() {
            let empty = CellarTable::schema_of(series.schema());
            fields.extend(empty.fields().iter().map(|f| f.as_ref().clone()));
        } else {
            for f in CellarTable::schema_of(series.schema()).fields().iter().skip(npk) {
                if !fields.iter().any(|g| g.name() == f.name()) {
                    fields.push(f.as_ref().clone());
                }
            }
        }
        if series.series_options().time_is_timestamp
            && let Some(col) = series.series_options().time_column.as_deref()
        {
            for f in &mut fields {
                if f.name() == col {
                    *f = f
                        .clone()
                        .with_data_type(DataType::Timestamp(TimeUnit::Millisecond, None));
                }
            }
        }
        SeriesTable {
            schema: Arc::new(Schema::new(fields)),
            series,
            months,
        }
    }

    /// The inclusive range of times the filters allow, in ms.
    fn time_range(&self, filters: &[Expr]) -> (i64, i64) {
        let Some(col) = self.series.series_options().time_column.as_deref() else {
            return (i64::MIN, i64::MAX);
        };
        let mut range = (i64::MIN, i64::MAX);
        for f in filters {
            narrow(f, col, &mut range);
        }
        range
    }
}

/// Narrows `range` by what `e` (a conjunct) says of column `col`.
fn narrow(e: &Expr, col: &str, range: &mut (i64, i64)) {
    // An integer, or a timestamp in milliseconds.
    let int = |e: &Expr| match e {
        Expr::Literal(v, _) => {
            let v = match v.data_type() {
                DataType::Timestamp(_, _) => v.cast_to(&DataType::Timestamp(TimeUnit::Millisecond, None)).ok()?,
                _ => v.clone(),
            };
            match v.cast_to(&DataType::Int64).ok()? {
                ScalarValue::Int64(Some(x)) => Some(x),
                _ => None,
            }
        }
        _ => None,
    };
    let is_col = |e: &Expr| match e {
        Expr::Column(c) => c.name == col,
        // The column cast to another timestamp unit for a comparison.
        Expr::Cast(c) => {
            matches!(&*c.expr, Expr::Column(c) if c.name == col)
                && matches!(c.field.data_type(), DataType::Timestamp(_, _))
        }
        _ => false,
    };
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            if *op == Operator::And {
                narrow(left, col, range);
                narrow(right, col, range);
                return;
            }
            let (op, v) = match (is_col(left), is_col(right)) {
                (true, false) => (*op, int(right)),
                (false, true) => match op.swap() {
                    Some(op) => (op, int(left)),
                    None => return,
                },
                _ => return,
            };
            let Some(v) = v else { return };
            match op {
                Operator::Eq => {
                    range.0 = range.0.max(v);
                    range.1 = range.1.min(v);
                }
                Operator::Gt => range.0 = range.0.max(v.saturating_add(1)),
                Operator::GtEq => range.0 = range.0.max(v),
                Operator::Lt => range.1 = range.1.min(v.saturating_sub(1)),
                Operator::LtEq => range.1 = range.1.min(v),
                _ => {}
            }
        }
        Expr::Between(b) if !b.negated && is_col(&b.expr) => {
            if let (Some(lo), Some(hi)) = (int(&b.low), int(&b.high)) {
                range.0 = range.0.max(lo);
                range.1 = range.1.min(hi);
            }
        }
        _ => {}
    }
}

/// The columns an expression reads.
fn columns_of(e: &Expr) -> Vec<String> {
    e.column_refs().into_iter().map(|c| c.name.clone()).collect()
}

#[async_trait]
impl TableProvider for SeriesTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let out = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => self.schema.clone(),
        };
        let (lo, hi) = self.time_range(filters);
        let mut plans = Vec::new();
        let mut read = Vec::new();
        for (month, table) in &self.months {
            let (start, end) = month_bounds(*month);
            if start > hi || end - 1 < lo {
                continue;
            }
            read.push(table.table().name().to_string());
            let ms = table.schema();
            // The month's columns the output needs; the others are NULL.
            let mut month_proj = Vec::new();
            let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = Vec::new();
            for f in out.fields() {
                let expr: Arc<dyn PhysicalExpr> = match ms.index_of(f.name()) {
                    Ok(i) => {
                        month_proj.push(i);
                        let c: Arc<dyn PhysicalExpr> = Arc::new(Column::new(f.name(), month_proj.len() - 1));
                        if ms.field(i).data_type() == f.data_type() {
                            c
                        } else {
                            Arc::new(CastExpr::new(c, f.data_type().clone(), None))
                        }
                    }
                    Err(_) => Arc::new(Literal::new(ScalarValue::try_from(f.data_type())?)),
                };
                exprs.push((expr, f.name().clone()));
            }
            // Filters the month can evaluate with the same column types.
            let month_filters: Vec<Expr> = filters
                .iter()
                .filter(|e| {
                    columns_of(e).iter().all(|c| {
                        matches!((ms.field_with_name(c), self.schema.field_with_name(c)),
                            (Ok(a), Ok(b)) if a.data_type() == b.data_type())
                    })
                })
                .cloned()
                .collect();
            let scan = table.scan(state, Some(&month_proj), &month_filters, None).await?;
            plans.push(Arc::new(ProjectionExec::try_new(exprs, scan)?) as Arc<dyn ExecutionPlan>);
        }
        let skipped = self.months.len() - read.len();
        let input: Arc<dyn ExecutionPlan> = match plans.len() {
            0 => Arc::new(EmptyExec::new(out)),
            1 => plans
                .pop()
                .ok_or_else(|| datafusion::error::DataFusionError::Internal("no plan".into()))?,
            _ => UnionExec::try_new(plans)?,
        };
        Ok(Arc::new(SeriesScanExec::new(
            self.series.name().to_string(),
            read,
            skipped,
            input,
        )))
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        insert_plan(
            Writer::Series(self.series.clone()),
            self.schema.clone(),
            input,
            insert_op,
        )
    }
}

/// The scan of a series: the months it reads (a union of their scans),
/// and how many the time predicate skipped.
#[derive(Debug)]
pub(super) struct SeriesScanExec {
    series: String,
    read: Vec<String>,
    skipped: usize,
    input: Arc<dyn ExecutionPlan>,
    props: Arc<PlanProperties>,
}

impl SeriesScanExec {
    fn new(series: String, read: Vec<String>, skipped: usize, input: Arc<dyn ExecutionPlan>) -> Self {
        let props = input.properties().clone();
        SeriesScanExec {
            series,
            read,
            skipped,
            input,
            props,
        }
    }
}

impl DisplayAs for SeriesScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "SeriesScanExec: series={}, months read={} [{}], skipped by time={}",
            self.series,
            self.read.len(),
            self.read.join(", "),
            self.skipped
        )
    }
}

impl ExecutionPlan for SeriesScanExec {
    fn name(&self) -> &str {
        "SeriesScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion> {
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> DfResult<Arc<dyn ExecutionPlan>> {
        let input = children
            .into_iter()
            .next()
            .ok_or_else(|| datafusion::error::DataFusionError::Internal("SeriesScanExec needs one child".into()))?;
        Ok(Arc::new(SeriesScanExec::new(
            self.series.clone(),
            self.read.clone(),
            self.skipped,
            input,
        )))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        self.input.execute(partition, context)
    }
}
