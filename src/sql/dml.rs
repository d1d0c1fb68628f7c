//! UPDATE and DELETE: a scan of the matching rows, filtered, then written
//! back as UpdateRow / DeleteRow through the same pipeline as INSERT.
//!
//! Invariant: rows are written in scan order through the same pipeline as
//! INSERT, and the statement returns only once every write is durable.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::Result as DfResult;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties};
use futures::StreamExt;

use super::insert::{Pipeline, cell, primary_key};
use super::scan_exec::CellarScanExec;
use crate::db::table::Table;
use crate::model::api::{DeleteRow, RowWrite, UpdateRow};

/// DELETE / UPDATE: scans, filters, writes; returns the row count.
#[derive(Debug)]
pub(super) struct DmlExec {
    table: Table,
    scan: CellarScanExec,
    predicate: Option<Arc<dyn PhysicalExpr>>,
    assignments: Option<Vec<(usize, Arc<dyn PhysicalExpr>)>>,
    table_schema: SchemaRef,
    props: Arc<PlanProperties>,
}

fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("count", DataType::UInt64, false)]))
}

impl DmlExec {
    pub(super) fn new(
        table: Table,
        scan: CellarScanExec,
        predicate: Option<Arc<dyn PhysicalExpr>>,
        assignments: Option<Vec<(usize, Arc<dyn PhysicalExpr>)>>,
        table_schema: SchemaRef,
    ) -> Self {
        let props = PlanProperties::new(
            EquivalenceProperties::new(count_schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        DmlExec {
            table,
            scan,
            predicate,
            assignments,
            table_schema,
            props: Arc::new(props),
        }
    }

    async fn run(
        table: Table,
        mut input: SendableRecordBatchStream,
        predicate: Option<Arc<dyn PhysicalExpr>>,
        assignments: Option<Vec<(usize, Arc<dyn PhysicalExpr>)>>,
        schema: SchemaRef,
    ) -> DfResult<u64> {
        let mut pipe = Pipeline::new(crate::db::Writer::Table(table.clone()), None);
        let npk = table.schema().primary_key.len();
        while let Some(batch) = input.next().await {
            let batch = batch?;
            let mask = match &predicate {
                Some(p) => {
                    let v = p.evaluate(&batch)?.into_array(batch.num_rows())?;
                    Some(v.as_boolean().clone())
                }
                None => None,
            };
            let new_values: Vec<(usize, ArrayRef)> = match &assignments {
                Some(a) => a
                    .iter()
                    .map(|(i, e)| {
                        let v = e.evaluate(&batch)?.into_array(batch.num_rows())?;
                        let t = schema.field(*i).data_type();
                        let v = if v.data_type() == t { v } else { cast(&v, t)? };
                        Ok((*i, v))
                    })
                    .collect::<DfResult<_>>()?,
                None => Vec::new(),
            };
            let cols = batch.columns().to_vec();
            for row in 0..batch.num_rows() {
                if let Some(m) = &mask
                    && !(m.is_valid(row) && m.value(row))
                {
                    continue;
                }
                let pk = primary_key(table.schema(), &cols, row)?;
                let w = match &assignments {
                    None => RowWrite::Delete(DeleteRow::new(pk)),
                    Some(_) => {
                        let mut u = UpdateRow::new(pk);
                        for (i, arr) in &new_values {
                            let name = schema.field(*i).name().clone();
                            debug_assert!(*i >= npk);
                            u = match cell(arr, row) {
                                Some(v) => u.put(name, v),
                                None => u.delete_all(name),
                            };
                        }
                        RowWrite::Update(u)
                    }
                };
                pipe.push(w).await?;
            }
        }
        pipe.finish().await
    }
}

impl DisplayAs for DmlExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let what = if self.assignments.is_some() {
            "UpdateRow"
        } else {
            "DeleteRow"
        };
        write!(
            f,
            "CellarDmlExec: table={}, {what} per matching row, scan: ",
            self.table.name()
        )?;
        self.scan.fmt_as(t, f)
    }
}

impl ExecutionPlan for DmlExec {
    leaf_plan!("CellarDmlExec");

    fn execute(&self, _partition: usize, _context: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        let input = self.scan.stream_all();
        let fut = Self::run(
            self.table.clone(),
            input,
            self.predicate.clone(),
            self.assignments.clone(),
            self.table_schema.clone(),
        );
        let s = futures::stream::once(async move {
            let n = fut.await?;
            Ok(RecordBatch::try_new(
                count_schema(),
                vec![Arc::new(UInt64Array::from(vec![n]))],
            )?)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(count_schema(), s)))
    }
}
