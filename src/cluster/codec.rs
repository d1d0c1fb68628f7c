//! The logical and physical extension codecs of Cellar's plan nodes, over
//! Ballista's own (see the module docs of `cluster`).
//!
//! Wire form: one tag byte, then either Ballista's encoding (tag 0) or
//! Cellar's as JSON (tag 1): an [`ArchiveSpec`] for a table, a
//! [`ScanWire`] for a scan. Residual filters travel as DataFusion's
//! protobuf expressions (base64).

use std::collections::HashMap;
use std::sync::Arc;

use ballista_core::serde::{BallistaLogicalExtensionCodec, BallistaPhysicalExtensionCodec};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use datafusion::catalog::TableProvider;
use datafusion::common::{DataFusionError, Result as DfResult, TableReference};
use datafusion::datasource::file_format::FileFormatFactory;
use datafusion::execution::TaskContext;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::logical_expr::{Expr, Extension, LogicalPlan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::bytes::Serializeable;
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::archive::ArchiveSpec;
use crate::db::Database;
use crate::db::table::Table;
use crate::model::key::KeyRange;
use crate::read::ScanRange;
use crate::sql::CellarTable;
use crate::sql::scan_exec::CellarScanExec;
use crate::sql::shipped::{self, ShippedScan};

const TAG_BALLISTA: u8 = 0;
const TAG_CELLAR: u8 = 1;

fn err(e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Plan(e.to_string())
}

/// Archived tables this process opened from specs, by spec: every task of
/// a query (and later queries) reuses one open table, its footers and
/// chunk cache.
#[derive(Debug)]
struct Opened {
    db: Database,
    tables: Mutex<HashMap<String, Table>>,
}

/// Specs kept open at most; past it the map starts again.
const OPEN_TABLES: usize = 64;

impl Opened {
    fn new(db: Database) -> Self {
        Opened {
            db,
            tables: Mutex::new(HashMap::new()),
        }
    }

    fn spec_of(&self, table: &Table) -> DfResult<ArchiveSpec> {
        self.db.archive_spec(table).map_err(err)
    }

    fn table(&self, spec: &ArchiveSpec) -> DfResult<Table> {
        let key = serde_json::to_string(spec).map_err(err)?;
        if let Some(t) = self.tables.lock().get(&key) {
            return Ok(t.clone());
        }
        let t = self.db.open_detached(spec).map_err(err)?;
        let mut tables = self.tables.lock();
        if tables.len() >= OPEN_TABLES {
            tables.clear();
        }
        Ok(tables.entry(key).or_insert(t).clone())
    }
}

/// Cellar's logical codec: Cellar tables as their archive specs.
#[derive(Debug)]
pub struct CellarLogicalCodec {
    opened: Opened,
    ballista: BallistaLogicalExtensionCodec,
}

impl CellarLogicalCodec {
    /// A codec that opens the archived tables it decodes through `db`.
    pub fn new(db: Database) -> Self {
        CellarLogicalCodec {
            opened: Opened::new(db),
            ballista: BallistaLogicalExtensionCodec::default(),
        }
    }
}

impl LogicalExtensionCodec for CellarLogicalCodec {
    fn try_decode(&self, buf: &[u8], inputs: &[LogicalPlan], ctx: &TaskContext) -> DfResult<Extension> {
        self.ballista.try_decode(buf, inputs, ctx)
    }

    fn try_encode(&self, node: &Extension, buf: &mut Vec<u8>) -> DfResult<()> {
        self.ballista.try_encode(node, buf)
    }

    fn try_decode_table_provider(
        &self,
        buf: &[u8],
        table_ref: &TableReference,
        schema: datafusion::arrow::datatypes::SchemaRef,
        ctx: &TaskContext,
    ) -> DfResult<Arc<dyn TableProvider>> {
        match buf.split_first() {
            Some((&TAG_CELLAR, rest)) => {
                let spec: ArchiveSpec = serde_json::from_slice(rest).map_err(err)?;
                let provider = CellarTable::new(self.opened.table(&spec)?);
                let (ours, planned) = (shipped::columns_of(&provider.schema()), shipped::columns_of(&schema));
                if ours != planned {
                    return Err(err(format!(
                        "table '{table_ref}' read from its archive has columns {:?}; the query was planned with {:?}",
                        ours.iter().map(|(n, _)| n).collect::<Vec<_>>(),
                        planned.iter().map(|(n, _)| n).collect::<Vec<_>>()
                    )));
                }
                Ok(Arc::new(provider))
            }
            Some((&TAG_BALLISTA, rest)) => self.ballista.try_decode_table_provider(rest, table_ref, schema, ctx),
            _ => Err(err(format!(
                "table '{table_ref}': an encoding this codec does not know"
            ))),
        }
    }

    fn try_encode_table_provider(
        &self,
        table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> DfResult<()> {
        if let Some(t) = node.downcast_ref::<CellarTable>() {
            let spec = self.opened.spec_of(t.table())?;
            buf.push(TAG_CELLAR);
            return serde_json::to_writer(buf, &spec).map_err(err);
        }
        if crate::sql::is_cellar_provider(node.as_ref()) {
            return Err(err(format!(
                "'{table_ref}' cannot be read by a cluster: only archived tables can (a series, a versions view \
                 or a live table runs without --cluster)"
            )));
        }
        buf.push(TAG_BALLISTA);
        self.ballista.try_encode_table_provider(table_ref, node, buf)
    }

    fn try_decode_file_format(&self, buf: &[u8], ctx: &TaskContext) -> DfResult<Arc<dyn FileFormatFactory>> {
        self.ballista.try_decode_file_format(buf, ctx)
    }

    fn try_encode_file_format(&self, buf: &mut Vec<u8>, node: Arc<dyn FileFormatFactory>) -> DfResult<()> {
        self.ballista.try_encode_file_format(buf, node)
    }
}

/// A key range on the wire.
#[derive(Debug, Serialize, Deserialize)]
struct RangeWire {
    lo: String,
    hi: Option<String>,
    point: bool,
}

/// A scan on the wire: the table's spec and [`ShippedScan`].
#[derive(Debug, Serialize, Deserialize)]
struct ScanWire {
    spec: ArchiveSpec,
    now_ms: i64,
    pieces: Vec<(usize, Vec<RangeWire>)>,
    parallel: usize,
    limit: Option<usize>,
    keys: String,
    projection: Option<Vec<usize>>,
    /// DataFusion protobuf expressions, base64.
    residual: Vec<String>,
    /// The output columns (name, Arrow type) as planned.
    columns: Vec<(String, String)>,
}

/// Cellar's physical codec: scans of archived tables.
#[derive(Debug)]
pub struct CellarPhysicalCodec {
    opened: Opened,
    ballista: BallistaPhysicalExtensionCodec,
}

impl CellarPhysicalCodec {
    /// A codec that opens the archived tables it decodes through `db`.
    pub fn new(db: Database) -> Self {
        CellarPhysicalCodec {
            opened: Opened::new(db),
            ballista: BallistaPhysicalExtensionCodec::default(),
        }
    }

    fn encode_scan(&self, scan: &CellarScanExec) -> DfResult<ScanWire> {
        let spec = self.opened.spec_of(scan.table())?;
        let s = scan.shipped().map_err(err)?;
        let residual = s
            .residual
            .iter()
            .map(|e| e.to_bytes().map(|b| B64.encode(b)))
            .collect::<DfResult<Vec<_>>>()?;
        Ok(ScanWire {
            spec,
            now_ms: s.now_ms,
            pieces: s
                .pieces
                .into_iter()
                .map(|(i, ranges)| {
                    let ranges = ranges
                        .into_iter()
                        .map(|r| RangeWire {
                            lo: B64.encode(&r.range.lo),
                            hi: r.range.hi.as_ref().map(|h| B64.encode(h)),
                            point: r.point,
                        })
                        .collect();
                    (i, ranges)
                })
                .collect(),
            parallel: s.parallel,
            limit: s.limit,
            keys: s.keys,
            projection: s.projection,
            residual,
            columns: s.columns,
        })
    }

    fn decode_scan(&self, wire: ScanWire, ctx: &TaskContext) -> DfResult<CellarScanExec> {
        let table = self.opened.table(&wire.spec)?;
        let bytes = |s: &str| B64.decode(s).map_err(|e| err(format!("a scan's key range: {e}")));
        let mut pieces = Vec::with_capacity(wire.pieces.len());
        for (i, ranges) in wire.pieces {
            let mut out = Vec::with_capacity(ranges.len());
            for r in ranges {
                out.push(ScanRange {
                    range: KeyRange {
                        lo: bytes(&r.lo)?,
                        hi: r.hi.as_deref().map(bytes).transpose()?,
                    },
                    point: r.point,
                });
            }
            pieces.push((i, out));
        }
        let residual = wire
            .residual
            .iter()
            .map(|s| {
                let b = B64.decode(s).map_err(|e| err(format!("a scan's filter: {e}")))?;
                Expr::from_bytes_with_ctx(&b, ctx)
            })
            .collect::<DfResult<Vec<_>>>()?;
        let state = SessionStateBuilder::new()
            .with_config(ctx.session_config().clone())
            .with_runtime_env(ctx.runtime_env())
            .with_default_features()
            .build();
        shipped::rebuild(
            table,
            &state,
            ShippedScan {
                now_ms: wire.now_ms,
                pieces,
                parallel: wire.parallel,
                limit: wire.limit,
                keys: wire.keys,
                projection: wire.projection,
                residual,
                columns: wire.columns,
            },
        )
    }
}

impl PhysicalExtensionCodec for CellarPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        match buf.split_first() {
            Some((&TAG_CELLAR, rest)) => {
                let wire: ScanWire = serde_json::from_slice(rest).map_err(err)?;
                Ok(Arc::new(self.decode_scan(wire, ctx)?))
            }
            Some((&TAG_BALLISTA, rest)) => self.ballista.try_decode(rest, inputs, ctx, proto_converter),
            _ => Err(err("a plan node in an encoding this codec does not know")),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<()> {
        if let Some(scan) = node.downcast_ref::<CellarScanExec>() {
            let wire = self.encode_scan(scan)?;
            buf.push(TAG_CELLAR);
            return serde_json::to_writer(buf, &wire).map_err(err);
        }
        buf.push(TAG_BALLISTA);
        self.ballista.try_encode(node, buf, proto_converter)
    }
}
