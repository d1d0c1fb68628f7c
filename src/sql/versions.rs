//! Multi-version reads in SQL, as table functions.
//!
//! - `cellar_versions('t' [, max_versions [, start_ms, end_ms]])`: every
//!   visible version in long form, one row per (row, column, version):
//!   the PK columns, `column_name`, `version` (ms), `value_type`, and the
//!   value in the one of `int_value`, `double_value`, `string_value`,
//!   `binary_value`, `bool_value` that matches its type. The version limit
//!   (per cell, newest first; NULL = all the table keeps) and the time range
//!   `[start_ms, end_ms)` are applied in storage, as GetRange would.
//! - `cellar_as_of('t', version)`: time travel. The table in its usual wide
//!   form, each cell showing its newest version at or before `version` (ms,
//!   or a TIMESTAMP). Rows with no such version are left out.
//!
//! Both push primary-key conditions of the WHERE clause down as key ranges.
//!
//! Invariant: the version limit and time range are applied in storage
//! exactly as GetRange applies them, so both give the same cells.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{Result as DfResult, ScalarValue, plan_err};
use datafusion::datasource::TableType;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties};
use datafusion::prelude::SessionContext;

use super::errors::df_err;
use super::provider::CellarTable;
use super::pushdown;
use crate::db::Database;
use crate::db::table::Table;
use crate::model::row::{ReadOptions, visible_cells};
use crate::model::types::ValueType;
use crate::read::MergeScan;
use crate::read::{BATCH_ROWS, ColBuilder, OutCol, ScanRange, pk_value_type};

pub(super) fn register(ctx: &SessionContext, db: &Database) {
    ctx.register_udtf(
        "cellar_versions",
        Arc::new(VersionsFn {
            db: db.clone(),
            as_of: false,
        }),
    );
    ctx.register_udtf(
        "cellar_as_of",
        Arc::new(VersionsFn {
            db: db.clone(),
            as_of: true,
        }),
    );
}

struct VersionsFn {
    db: Database,
    as_of: bool,
}

impl fmt::Debug for VersionsFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.as_of { "cellar_as_of" } else { "cellar_versions" })
    }
}

/// A literal argument as an integer (ms for timestamps); NULL is `None`.
fn int_arg(f: &str, i: usize, e: &Expr) -> DfResult<Option<i64>> {
    let v = match e {
        Expr::Literal(v, _) => v.clone(),
        Expr::Cast(c) => match c.expr.as_ref() {
            Expr::Literal(v, _) => v.cast_to(c.field.data_type())?,
            _ => return plan_err!("argument {i} of {f} must be a literal"),
        },
        _ => return plan_err!("argument {i} of {f} must be a literal"),
    };
    if v.is_null() {
        return Ok(None);
    }
    let v = match v.data_type() {
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 => v
            .cast_to(&DataType::Timestamp(TimeUnit::Millisecond, None))?
            .cast_to(&DataType::Int64)?,
        _ => v
            .cast_to(&DataType::Int64)
            .or_else(|_| plan_err!("argument {i} of {f} must be an integer (milliseconds) or a timestamp, got {v}"))?,
    };
    match v {
        ScalarValue::Int64(x) => Ok(x),
        _ => plan_err!("argument {i} of {f} must be an integer"),
    }
}

impl TableFunctionImpl for VersionsFn {
    fn call_with_args(&self, args: TableFunctionArgs) -> DfResult<Arc<dyn TableProvider>> {
        let f = if self.as_of { "cellar_as_of" } else { "cellar_versions" };
        let exprs = args.exprs();
        let usage = if self.as_of {
            "cellar_as_of('table', version_ms_or_timestamp)"
        } else {
            "cellar_versions('table' [, max_versions [, start_ms, end_ms]])"
        };
        let name = match exprs.first() {
            Some(Expr::Literal(ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)), _)) => s.clone(),
            _ => return plan_err!("{f} needs a table name as its first argument: {usage}"),
        };
        let table = self.db.table(&name).map_err(df_err)?;
        let read = if self.as_of {
            if exprs.len() != 2 {
                return plan_err!("{f} takes 2 arguments: {usage}");
            }
            let Some(ts) = int_arg(f, 2, &exprs[1])? else {
                return plan_err!("the version of {f} cannot be NULL");
            };
            ReadOptions {
                max_versions: Some(1),
                time_range: Some((i64::MIN, ts.saturating_add(1))),
                ..Default::default()
            }
        } else {
            if exprs.len() > 4 || exprs.len() == 3 {
                return plan_err!("{f} takes 1, 2 or 4 arguments: {usage}");
            }
            let max_versions = match exprs.get(1) {
                Some(e) => match int_arg(f, 2, e)? {
                    Some(n) if n >= 1 => Some(u32::try_from(n).unwrap_or(u32::MAX)),
                    Some(n) => return plan_err!("max_versions of {f} must be at least 1, got {n}"),
                    None => None,
                },
                None => None,
            };
            let time_range = if exprs.len() == 4 {
                let s = int_arg(f, 3, &exprs[2])?.unwrap_or(i64::MIN);
                let e = int_arg(f, 4, &exprs[3])?.unwrap_or(i64::MAX);
                if s >= e {
                    return plan_err!("the time range [{s}, {e}) of {f} is empty: the start must be below the end");
                }
                Some((s, e))
            } else {
                None
            };
            ReadOptions {
                // Without a limit or a range: every version the table keeps.
                max_versions: max_versions.or(if time_range.is_none() { Some(u32::MAX) } else { None }),
                time_range,
                ..Default::default()
            }
        };
        Ok(Arc::new(VersionsTable::new(table, read, self.as_of)))
    }
}

#[derive(Debug, Clone)]
enum Layout {
    /// One row per version.
    Long,
    /// The wide table (columns as in SELECT).
    Wide(Vec<OutCol>),
}

/// Whether `any` is a versions view.
pub(super) fn is_versions(p: &dyn datafusion::catalog::TableProvider) -> bool {
    p.is::<VersionsTable>()
}

struct VersionsTable {
    table: Table,
    read: ReadOptions,
    layout: Layout,
    schema: SchemaRef,
}

impl fmt::Debug for VersionsTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VersionsTable({})", self.table.name())
    }
}

const VALUE_COLUMNS: [(&str, ValueType); 5] = [
    ("int_value", ValueType::Integer),
    ("double_value", ValueType::Double),
    ("string_value", ValueType::String),
    ("binary_value", ValueType::Binary),
    ("bool_value", ValueType::Boolean),
];

impl VersionsTable {
    fn new(table: Table, read: ReadOptions, as_of: bool) -> Self {
        let (layout, schema) = if as_of {
            let p = CellarTable::new(table.clone());
            (Layout::Wide(p.out_cols().to_vec()), p.schema())
        } else {
            let mut fields = Vec::new();
            for c in &table.schema().primary_key {
                fields.push(Field::new(
                    &c.name,
                    crate::read::arrow_type(pk_value_type(c.pk_type)),
                    false,
                ));
            }
            fields.push(Field::new(
                "column_name",
                crate::read::arrow_type(ValueType::String),
                false,
            ));
            fields.push(Field::new("version", DataType::Int64, false));
            fields.push(Field::new("value_type", DataType::Utf8, false));
            for (n, t) in VALUE_COLUMNS {
                fields.push(Field::new(n, crate::read::arrow_type(t), true));
            }
            (Layout::Long, Arc::new(Schema::new(fields)))
        };
        VersionsTable {
            table,
            read,
            layout,
            schema,
        }
    }
}

#[async_trait]
impl TableProvider for VersionsTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(pushdown::plan(self.table.schema(), filters).support(TableProviderFilterPushDown::Unsupported))
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let plan = pushdown::plan(self.table.schema(), &filters.iter().collect::<Vec<_>>());
        let projection = projection.cloned();
        let out_schema = match &projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => self.schema.clone(),
        };
        let props = PlanProperties::new(
            EquivalenceProperties::new(out_schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Ok(Arc::new(VersionsExec {
            table: self.table.clone(),
            read: self.read.clone(),
            layout: self.layout.clone(),
            full_schema: self.schema.clone(),
            projection,
            out_schema,
            ranges: plan.ranges,
            keys: plan.description,
            props: Arc::new(props),
        }))
    }
}

#[derive(Debug)]
struct VersionsExec {
    table: Table,
    read: ReadOptions,
    layout: Layout,
    full_schema: SchemaRef,
    projection: Option<Vec<usize>>,
    out_schema: SchemaRef,
    ranges: Vec<ScanRange>,
    keys: String,
    props: Arc<PlanProperties>,
}

impl DisplayAs for VersionsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "CellarVersionsExec: table={}, keys=[{}], max_versions={:?}, time_range={:?}",
            self.table.name(),
            self.keys,
            self.read.max_versions,
            self.read.time_range
        )
    }
}

/// Builds the rows of one key range at a time.
struct Producer {
    table: Table,
    read: ReadOptions,
    layout: Layout,
    full_schema: SchemaRef,
    projection: Option<Vec<usize>>,
    /// Key ranges, each with the table partition that holds it.
    ranges: std::collections::VecDeque<(usize, crate::model::key::KeyRange)>,
    scan: Option<MergeScan>,
    /// Every table partition's, taken together.
    snaps: Vec<crate::read::Snapshot>,
    now: i64,
}

impl Producer {
    async fn next_batch(&mut self) -> crate::Result<Option<RecordBatch>> {
        let npk = self.table.schema().primary_key.len();
        let types: Vec<ValueType> = self
            .full_schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Int64 => ValueType::Integer,
                DataType::Float64 => ValueType::Double,
                DataType::Binary => ValueType::Binary,
                DataType::Boolean => ValueType::Boolean,
                _ => ValueType::String,
            })
            .collect();
        let mut b: Vec<ColBuilder> = types.iter().map(|t| ColBuilder::new(*t)).collect();
        let mut names = StringBuilder::new();
        let mut rows = 0;
        while rows < BATCH_ROWS {
            if self.scan.is_none() {
                let Some((i, r)) = self.ranges.pop_front() else { break };
                self.scan = Some(MergeScan::new(&self.snaps[i], r, false, None));
            }
            let Some(scan) = self.scan.as_mut() else { break };
            let Some((key, state)) = scan.next().await? else {
                self.scan = None;
                continue;
            };
            let Some(cells) = visible_cells(&state, self.now, &self.snaps[0].options, &self.read) else {
                continue;
            };
            let pk = self.table.schema().decode_pk(&key)?;
            match &self.layout {
                Layout::Long => {
                    for (name, versions) in &cells {
                        for c in versions {
                            for (i, (_, v)) in pk.columns.iter().enumerate() {
                                b[i].push_pk(v);
                            }
                            b[npk].push(Some(&crate::model::types::Value::String(name.clone())));
                            b[npk + 1].push(Some(&crate::model::types::Value::Integer(c.version)));
                            names.append_value(c.value.value_type().as_str());
                            for (k, (_, t)) in VALUE_COLUMNS.iter().enumerate() {
                                let v = (c.value.value_type() == *t).then_some(&c.value);
                                b[npk + 3 + k].push(v);
                            }
                            rows += 1;
                        }
                    }
                }
                Layout::Wide(cols) => {
                    for (i, c) in cols.iter().enumerate() {
                        match c {
                            OutCol::Pk(k) => b[i].push_pk(&pk.columns[*k].1),
                            OutCol::Attr { name, .. } => {
                                let v = cells
                                    .iter()
                                    .find(|(n, _)| n == name)
                                    .and_then(|(_, v)| v.first())
                                    .map(|c| &c.value);
                                b[i].push(v);
                            }
                        }
                    }
                    rows += 1;
                }
            }
        }
        if rows == 0 {
            return Ok(None);
        }
        let mut arrays: Vec<ArrayRef> = b.iter_mut().map(|b| b.finish()).collect();
        if matches!(self.layout, Layout::Long) {
            arrays[npk + 2] = Arc::new(names.finish());
        }
        let batch = RecordBatch::try_new_with_options(
            self.full_schema.clone(),
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?;
        Ok(Some(match &self.projection {
            Some(p) => batch.project(p)?,
            None => batch,
        }))
    }
}

impl ExecutionPlan for VersionsExec {
    leaf_plan!("CellarVersionsExec");

    fn execute(&self, _partition: usize, _context: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        let snaps = self.table.snapshots();
        let mut ranges = std::collections::VecDeque::new();
        for r in &self.ranges {
            for (i, snap) in snaps.iter().enumerate() {
                let piece = r.range.intersect(&snap.range);
                if !piece.is_empty() {
                    ranges.push_back((i, piece));
                }
            }
        }
        let p = Producer {
            table: self.table.clone(),
            read: self.read.clone(),
            layout: self.layout.clone(),
            full_schema: self.full_schema.clone(),
            projection: self.projection.clone(),
            ranges,
            scan: None,
            snaps,
            now: self.table.now_ms(),
        };
        let s = futures::stream::unfold(p, |mut p| async move {
            match p.next_batch().await {
                Ok(Some(b)) => Some((Ok(b), p)),
                Ok(None) => None,
                Err(e) => {
                    let e = p.table.inner().read_error(e);
                    Some((Err(df_err(e)), p))
                }
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.out_schema.clone(), s)))
    }
}
