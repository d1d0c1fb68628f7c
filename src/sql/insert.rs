//! INSERT: rows written with PutRow in pipelined batches.
//!
//! Invariant: batches are queued with the committer in the order the
//! statement's input produces them, and only the waits for their
//! acknowledgements overlap, so sequence order is input order and a later
//! row for a key wins; the first failing row stops the statement (rows
//! written before it stay).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type, SchemaRef};
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::datasource::sink::DataSink;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use futures::StreamExt;
use futures::stream::FuturesOrdered;

use super::errors::df_err;
use crate::db::Writer;
use crate::model::api::{PutRow, RowWrite};
use crate::model::schema::MAX_BATCH_WRITE_ROWS;
use crate::model::schema::TableSchema;
use crate::model::types::{PkValue, PrimaryKey, Value};

/// Reports rows written by INSERT (a progress bar in the CLI). Put one in
/// the session config as an extension.
pub struct InsertProgress(pub Box<dyn Fn(u64) + Send + Sync>);

impl fmt::Debug for InsertProgress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InsertProgress")
    }
}

/// The plan of an INSERT into `target` (a table or a series): `input`'s
/// rows written by a [`CellarSink`]. INSERT OVERWRITE is refused.
pub(super) fn insert_plan(
    target: Writer,
    schema: SchemaRef,
    input: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    insert_op: datafusion::logical_expr::dml::InsertOp,
) -> DfResult<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
    if insert_op == datafusion::logical_expr::dml::InsertOp::Overwrite {
        let what = match &target {
            Writer::Table(_) => "tables; INSERT writes each row (PutRow replaces a row with the same key)",
            Writer::Series(_) => "series; INSERT routes each row to its month",
        };
        return datafusion::common::not_impl_err!("INSERT OVERWRITE is not supported for Cellar {what}");
    }
    let sink = CellarSink { target, schema };
    Ok(Arc::new(datafusion::datasource::sink::DataSinkExec::new(
        input,
        Arc::new(sink),
        None,
    )))
}

/// Writes INSERTed rows with PutRow, in pipelined batches.
pub(super) struct CellarSink {
    pub(super) target: Writer,
    pub(super) schema: SchemaRef,
}

impl fmt::Debug for CellarSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CellarSink({})", self.target.name())
    }
}

impl DisplayAs for CellarSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match &self.target {
            Writer::Table(t) => write!(f, "CellarSink: table={} (PutRow per row)", t.name()),
            Writer::Series(s) => write!(
                f,
                "CellarSink: series={} (PutRow per row, to the month of each)",
                s.name()
            ),
        }
    }
}

/// Writes in flight at once (each a batch of up to 200 rows).
const WRITES_IN_FLIGHT: usize = 16;

/// One batch of writes in flight: its first row's index and the results.
type BatchWrite = futures::future::BoxFuture<'static, crate::Result<(usize, Vec<crate::Result<()>>)>>;

/// Sends batches of writes with up to [`WRITES_IN_FLIGHT`] in flight; the
/// first failing row stops the statement (rows written before it stay).
pub(super) struct Pipeline {
    target: Writer,
    pending: Vec<RowWrite>,
    in_flight: FuturesOrdered<BatchWrite>,
    done: u64,
    /// Rows handed in before the current batch (for error messages).
    sent: u64,
    progress: Option<Arc<InsertProgress>>,
}

impl Pipeline {
    pub(super) fn new(target: Writer, progress: Option<Arc<InsertProgress>>) -> Self {
        Pipeline {
            target,
            pending: Vec::new(),
            in_flight: FuturesOrdered::new(),
            done: 0,
            sent: 0,
            progress,
        }
    }

    pub(super) async fn push(&mut self, w: RowWrite) -> DfResult<()> {
        self.pending.push(w);
        if self.pending.len() >= MAX_BATCH_WRITE_ROWS {
            self.send().await?;
        }
        Ok(())
    }

    async fn send(&mut self) -> DfResult<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.pending);
        let first = self.sent as usize;
        self.sent += batch.len() as u64;
        // Queued here, in statement order (the committer numbers writes in
        // the order they are queued); only the wait for durability is
        // pipelined.
        let queued = self.target.enqueue_batch(batch).await.map_err(df_err)?;
        self.in_flight.push_back(Box::pin(async move {
            queued
                .durable()
                .await
                .map(|r| (first, r.into_iter().map(|r| r.map(|_| ())).collect::<Vec<_>>()))
        }));
        while self.in_flight.len() >= WRITES_IN_FLIGHT {
            self.settle_one().await?;
        }
        Ok(())
    }

    async fn settle_one(&mut self) -> DfResult<()> {
        if let Some(r) = self.in_flight.next().await {
            let (first, results) = r.map_err(df_err)?;
            let n = results.len() as u64;
            for (i, r) in results.into_iter().enumerate() {
                if let Err(e) = r {
                    return Err(DataFusionError::Execution(format!(
                        "row {} of the statement failed ({} rows written before it): {e}",
                        first + i + 1,
                        self.done + i as u64
                    )));
                }
            }
            self.done += n;
            if let Some(p) = &self.progress {
                (p.0)(self.done);
            }
        }
        Ok(())
    }

    pub(super) async fn finish(mut self) -> DfResult<u64> {
        self.send().await?;
        while !self.in_flight.is_empty() {
            self.settle_one().await?;
        }
        Ok(self.sent)
    }
}

/// The value at `row` of an Arrow column of the table schema's type.
pub(super) fn cell(a: &ArrayRef, row: usize) -> Option<Value> {
    if a.is_null(row) {
        return None;
    }
    Some(match a.data_type() {
        DataType::Int64 => Value::Integer(a.as_primitive::<Int64Type>().value(row)),
        DataType::Float64 => Value::Double(a.as_primitive::<datafusion::arrow::datatypes::Float64Type>().value(row)),
        DataType::Utf8 => Value::String(a.as_string::<i32>().value(row).to_string()),
        DataType::Utf8View => Value::String(a.as_string_view().value(row).to_string()),
        DataType::BinaryView => Value::Binary(a.as_binary_view().value(row).to_vec()),
        DataType::Binary => Value::Binary(a.as_binary::<i32>().value(row).to_vec()),
        DataType::Boolean => Value::Boolean(a.as_boolean().value(row)),
        // A series' TIMESTAMP time column: stored as milliseconds.
        DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Millisecond, _) => Value::Integer(
            a.as_primitive::<datafusion::arrow::datatypes::TimestampMillisecondType>()
                .value(row),
        ),
        _ => return None,
    })
}

/// Casts a batch's columns to the table schema's types (DataFusion may hand
/// in views or other string types).
fn conform(batch: &RecordBatch, schema: &SchemaRef) -> DfResult<Vec<ArrayRef>> {
    batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(a, f)| {
            if a.data_type() == f.data_type() {
                Ok(a.clone())
            } else {
                Ok(cast(a, f.data_type())?)
            }
        })
        .collect()
}

pub(super) fn primary_key(table: &TableSchema, cols: &[ArrayRef], row: usize) -> DfResult<PrimaryKey> {
    let mut pk = PrimaryKey::new();
    for (i, c) in table.primary_key.iter().enumerate() {
        let v = match cell(&cols[i], row) {
            Some(Value::Integer(x)) => PkValue::Integer(x),
            Some(Value::String(s)) => PkValue::String(s),
            Some(Value::Binary(b)) => PkValue::Binary(b),
            None if c.auto_increment => PkValue::AutoIncrement,
            Some(_) | None => {
                return Err(DataFusionError::Execution(format!(
                    "primary-key column '{}' of table '{}' is NULL in row {}; every primary-key column but an auto-increment one needs a value",
                    c.name,
                    table.name,
                    row + 1
                )));
            }
        };
        pk = pk.with(c.name.clone(), v);
    }
    Ok(pk)
}

#[async_trait]
impl DataSink for CellarSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(&self, mut data: SendableRecordBatchStream, context: &Arc<TaskContext>) -> DfResult<u64> {
        let progress = context.session_config().get_extension::<InsertProgress>();
        let mut pipe = Pipeline::new(self.target.clone(), progress);
        let npk = self.target.schema().primary_key.len();
        let names: Vec<String> = self.schema.fields().iter().map(|f| f.name().clone()).collect();
        while let Some(batch) = data.next().await {
            let batch = batch?;
            let cols = conform(&batch, &self.schema)?;
            for row in 0..batch.num_rows() {
                let pk = primary_key(self.target.schema(), &cols, row)?;
                let mut put = PutRow::new(pk);
                for (i, c) in cols.iter().enumerate().skip(npk) {
                    if let Some(v) = cell(c, row) {
                        put = put.column(names[i].clone(), v);
                    }
                }
                pipe.push(RowWrite::Put(put)).await?;
            }
        }
        pipe.finish().await
    }
}
