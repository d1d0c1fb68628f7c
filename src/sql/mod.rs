//! SQL over Cellar tables, on Apache DataFusion.
//!
//! - [`session_context`] gives a `SessionContext` whose default catalog is
//!   the database: every table is a SQL table (new ones appear without
//!   registering anything), plus the table functions `cellar_versions` and
//!   `cellar_as_of`.
//! - [`register_table`] adds one Cellar table to a context you already have.
//! - [`SqlSession`] runs statements, including the DDL DataFusion's planner
//!   does not know (`CREATE TABLE ... PRIMARY KEY ... WITH (ttl = ...)`,
//!   `ALTER TABLE ... SET (...)` / `ADD COLUMN`, `DROP TABLE`, `SHOW
//!   TABLES`, `DESCRIBE`), parsed before DataFusion sees them.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let db = cellar::Database::open(dir.path()).await.unwrap();
//! let sql = cellar::sql::SqlSession::new(db);
//! sql.execute("CREATE TABLE t (k BIGINT, v DOUBLE, PRIMARY KEY (k))").await.unwrap();
//! sql.execute("INSERT INTO t VALUES (1, 2.5), (2, 4.0)").await.unwrap();
//! let rows = sql.query("SELECT sum(v) AS s FROM t").await.unwrap();
//! assert_eq!(datafusion::arrow::util::pretty::pretty_format_batches(&rows).unwrap().to_string().lines().nth(3), Some("| 6.5 |"));
//! # });
//! ```
//!
//! Invariants: every Cellar table of the database is a SQL table of the
//! `cellar.public` schema; a statement's writes are durable when
//! `SqlSession::execute` returns.

/// The `ExecutionPlan` methods of a plan node without children whose
/// `PlanProperties` live in a `props` field.
macro_rules! leaf_plan {
    ($name:literal) => {
        fn name(&self) -> &str {
            $name
        }

        fn properties(&self) -> &std::sync::Arc<datafusion::physical_plan::PlanProperties> {
            &self.props
        }

        fn children(&self) -> Vec<&std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
            vec![]
        }

        fn apply_expressions(
            &self,
            _f: &mut dyn FnMut(
                &std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>,
            ) -> datafusion::error::Result<datafusion::common::tree_node::TreeNodeRecursion>,
        ) -> datafusion::error::Result<datafusion::common::tree_node::TreeNodeRecursion> {
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        }

        fn replace_children(
            self: std::sync::Arc<Self>,
            _children: Vec<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>>,
            _options: datafusion::physical_plan::ReplaceChildrenOptions,
        ) -> datafusion::error::Result<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
            Ok(self)
        }

        fn with_new_children(
            self: std::sync::Arc<Self>,
            _children: Vec<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>>,
        ) -> datafusion::error::Result<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
            Ok(self)
        }
    };
}

mod catalog_provider;
mod copy_from;
mod ddl;
mod describe;
mod dml;
mod errors;
mod export;
mod import;
mod index_ddl;
mod index_scan;
mod insert;
mod messages;
mod ordered_scan;
mod provider;
mod prune;
pub(crate) mod pushdown;
pub(crate) mod scan_exec;
mod series;
pub(crate) mod shipped;
mod stream_options;
mod text;
mod url_stores;
mod versions;

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use futures::TryStreamExt;

use catalog_provider::sql_schema;
pub use catalog_provider::{CellarCatalog, CellarSchema, column_names};
pub(crate) use export::export_query;
pub use export::{ExportOptions, ExportReport, ExportedFile, export};
pub use import::{ImportFormat, ImportOptions, ImportReport, MAX_REPORTED_REJECTS, Rejected, import_file};
pub use insert::InsertProgress;
pub use provider::CellarTable;
pub use scan_exec::CellarScanExec;
pub use text::{ends_inside_quote, is_incomplete, split_statements};

use crate::db::Database;

/// The catalog Cellar tables live in.
pub const CATALOG: &str = "cellar";
/// The schema Cellar tables live in.
pub const SCHEMA: &str = "public";

/// A DataFusion config for Cellar sessions: Cellar's catalog as the
/// default and `information_schema` on.
pub fn session_config() -> SessionConfig {
    SessionConfig::new()
        .with_default_catalog_and_schema(CATALOG, SCHEMA)
        .with_create_default_catalog_and_schema(false)
        .with_information_schema(true)
}

/// A `SessionContext` over the database with this config: every table of
/// the database is a SQL table, files can be queried by path
/// (`SELECT * FROM 'data.parquet'`), and the table functions
/// `cellar_versions` and `cellar_as_of` are registered.
pub fn session_context_with(db: &Database, config: SessionConfig) -> SessionContext {
    let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
        .with_object_store_registry(Arc::new(url_stores::UrlStores::default()))
        .build_arc();
    let ctx = match runtime {
        Ok(rt) => SessionContext::new_with_config_rt(config, rt),
        Err(_) => SessionContext::new_with_config(config),
    }
    .enable_url_table();
    ctx.register_catalog(CATALOG, Arc::new(CellarCatalog::new(db.clone())));
    versions::register(&ctx, db);
    ctx
}

/// [`session_context_with`] and [`session_config`].
pub fn session_context(db: &Database) -> SessionContext {
    session_context_with(db, session_config())
}

/// Registers one Cellar table in a context of your own under `as_name`.
/// Its column list is the one known now (declared and discovered columns).
pub fn register_table(ctx: &SessionContext, db: &Database, table: &str, as_name: &str) -> crate::Result<()> {
    let t = db.table(table)?;
    ctx.register_table(as_name, Arc::new(CellarTable::new(t)))
        .map_err(|e| crate::Error::param(e.to_string()))?;
    Ok(())
}

/// Whether `p` is one of Cellar's providers (a table, a series, a
/// versions view).
pub(crate) fn is_cellar_provider(p: &dyn datafusion::catalog::TableProvider) -> bool {
    p.is::<CellarTable>() || p.is::<series::SeriesTable>() || versions::is_versions(p)
}

/// What one statement produced.
pub enum StatementOutput {
    /// A result set (SELECT, SHOW, DESCRIBE, EXPLAIN, DML row counts).
    Rows(SendableRecordBatchStream),
    /// A statement without a result set (CREATE, ALTER, DROP, SET ...),
    /// with a short confirmation such as "CREATE TABLE".
    Done(String),
}

/// Runs SQL statements against a database.
pub struct SqlSession {
    db: Database,
    ctx: SessionContext,
    /// Statements run on a Ballista cluster ([`SqlSession::with_cluster`]):
    /// queries only.
    cluster: Option<String>,
}

impl SqlSession {
    /// A session over `db` in Cellar's own context ([`session_context`]).
    pub fn new(db: Database) -> Self {
        let ctx = session_context(&db);
        SqlSession { db, ctx, cluster: None }
    }

    /// A session over `db` in a context of your own (register Cellar's tables in it first).
    pub fn with_context(db: Database, ctx: SessionContext) -> Self {
        SqlSession { db, ctx, cluster: None }
    }

    /// A session over `ctx`, a context whose queries run on the cluster
    /// at `url` (made by `SqlSession::with_cluster`, in `cluster`).
    pub(crate) fn on_cluster(db: Database, ctx: SessionContext, url: &str) -> Self {
        SqlSession {
            db,
            ctx,
            cluster: Some(url.to_string()),
        }
    }

    /// The DataFusion context statements run in.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// The database.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Runs one statement (a trailing `;` is allowed). Writes (INSERT,
    /// UPDATE, DELETE, COPY) and DDL have taken effect when this returns;
    /// a query's rows stream as the returned stream is read.
    pub async fn execute(&self, sql: &str) -> DfResult<StatementOutput> {
        if let Some(copy) = copy_from::parse(sql) {
            let copy = copy.map_err(errors::df_err)?;
            return copy_from::execute(self, copy).await.map_err(errors::df_err);
        }
        let (sql, hints) = index_scan::strip_hints(sql);
        let mut stmts = parse_bounded(&sql)
            .await
            .map_err(|e| messages::reword(e, &self.db, None))?;
        if stmts.len() != 1 {
            return Err(DataFusionError::Plan(format!(
                "expected one SQL statement, found {}; split the text with split_statements",
                stmts.len()
            )));
        }
        let stmt = stmts.pop_front().expect("one statement");
        let insert = messages::insert_into(&stmt);
        if let Some(target) = &insert {
            messages::check_insert(&self.db, &stmt, target)?;
        }
        // The hints reach the table providers made while this statement
        // is planned (on this task).
        index_scan::HINTS
            .scope(hints, self.run(stmt))
            .await
            .map_err(|e| messages::reword(e, &self.db, insert.as_ref()))
    }

    async fn run(&self, stmt: DfStatement) -> DfResult<StatementOutput> {
        if let Some(url) = &self.cluster {
            let query = matches!(
                &stmt,
                DfStatement::Statement(s) if matches!(
                    **s,
                    datafusion::sql::sqlparser::ast::Statement::Query(_)
                        | datafusion::sql::sqlparser::ast::Statement::Explain { .. }
                )
            ) || matches!(&stmt, DfStatement::Explain(_));
            if !query {
                return Err(DataFusionError::Plan(format!(
                    "the cluster at {url} runs queries (SELECT, EXPLAIN) only; run writes and DDL without --cluster"
                )));
            }
        }
        if let DfStatement::Statement(s) = &stmt
            && let Some(out) = ddl::try_execute(self, s).await?
        {
            return Ok(out);
        }
        let state = self.ctx.state();
        let plan = state.statement_to_plan(stmt).await?;
        let is_ddl = matches!(
            plan,
            datafusion::logical_expr::LogicalPlan::Ddl(_) | datafusion::logical_expr::LogicalPlan::Statement(_)
        );
        // Writes (INSERT, UPDATE, DELETE, COPY) run to the end here, so
        // that a caller that drops the output still gets the effect.
        let is_write = matches!(
            plan,
            datafusion::logical_expr::LogicalPlan::Dml(_) | datafusion::logical_expr::LogicalPlan::Copy(_)
        );
        let is_insert = matches!(
            &plan,
            datafusion::logical_expr::LogicalPlan::Dml(d) if matches!(d.op, datafusion::logical_expr::WriteOp::Insert(_))
        );
        let df = if is_insert {
            // An INSERT applies its rows in the source's order (the last
            // row of a key wins): one partition reads a file in file order,
            // and an ORDER BY reaches the sink in its order. Several
            // partitions would be interleaved as they happen to arrive.
            let mut config = state.config().clone();
            config.options_mut().execution.target_partitions = 1;
            let single = datafusion::execution::session_state::SessionStateBuilder::new_from_existing(state)
                .with_config(config)
                .build();
            datafusion::dataframe::DataFrame::new(single, plan)
        } else {
            self.ctx.execute_logical_plan(plan).await?
        };
        if is_ddl {
            df.collect().await?;
            return Ok(StatementOutput::Done("OK".into()));
        }
        if is_write {
            let schema = Arc::new(df.schema().as_arrow().clone());
            let batches = df.collect().await?;
            return Ok(StatementOutput::Rows(batches_stream(schema, batches)));
        }
        Ok(StatementOutput::Rows(df.execute_stream().await?))
    }

    /// Runs one statement and collects its rows (empty for DDL).
    pub async fn query(&self, sql: &str) -> DfResult<Vec<RecordBatch>> {
        match self.execute(sql).await? {
            StatementOutput::Rows(s) => s.try_collect().await,
            StatementOutput::Done(_) => Ok(Vec::new()),
        }
    }
}

/// Most parts of a dotted name (`catalog.schema.table.column.field...`,
/// bracketed subscripts included) a statement may hold.
pub const MAX_NAME_PARTS: usize = 16;

/// Refuses a statement holding a name of more than [`MAX_NAME_PARTS`]
/// dotted parts before it reaches the parser: sqlparser 0.62 (the version
/// DataFusion 55 pins) backtracks exponentially on long chains such as
/// `a.b.c[d.e...` (fuzzing found 300-byte statements that took 12-20 s to
/// be rejected; sqlparser 0.63 fixes it). Tokenizing is linear, and at 16
/// parts the parser's worst case is well under a second.
pub(crate) fn check_name_chains(sql: &str) -> DfResult<()> {
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    // What does not tokenize is the parser's to report.
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
        return Ok(());
    };
    // A chain is names joined by dots, through brackets and parentheses
    // (`a.b[c.(d.e...`) and whitespace; any two tokens in a row without a
    // dot between them (`a.b JOIN c.d`, `x.y = z.w`, `a.b, c.d`) end it.
    // Every token but a dot or an opening bracket counts as a name here,
    // so no token kind (placeholders, numbers, operators) slips through.
    let mut parts = 1;
    let mut after_name = false;
    for t in tokens.iter().filter(|t| !matches!(t, Token::Whitespace(_))) {
        match t {
            Token::Period => {
                parts += 1;
                after_name = false;
                if parts > MAX_NAME_PARTS {
                    return Err(DataFusionError::Plan(format!(
                        "a dotted name has more than {MAX_NAME_PARTS} parts; at most {MAX_NAME_PARTS} are accepted"
                    )));
                }
            }
            Token::LBracket | Token::LParen => after_name = false,
            _ => {
                if after_name {
                    parts = 1;
                }
                after_name = true;
            }
        }
    }
    Ok(())
}

/// How long a statement of up to 1 MiB may take to parse; a longer one
/// gets as much again per MiB.
pub const PARSE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(3);

/// Parses one statement's text on a thread of its own and gives up on it
/// after [`PARSE_DEADLINE`]: sqlparser 0.62 (the version DataFusion 55
/// pins) backtracks exponentially on some malformed statements of a few
/// hundred bytes (fuzzing found chains of dotted names with brackets and
/// operators that run for hours; sqlparser 0.63 fixes several such
/// shapes), and a caller, a server above all, must get an error instead of
/// waiting for ever. An abandoned parse keeps its thread busy until the
/// parser gives up on its own. Shapes known to backtrack are refused
/// before parsing ([`check_name_chains`]).
async fn parse_bounded(sql: &str) -> DfResult<std::collections::VecDeque<DfStatement>> {
    check_name_chains(sql)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let text = sql.to_string();
    std::thread::Builder::new()
        .name("cellar-sql-parse".into())
        .spawn(move || {
            let _ = tx.send(DFParser::parse_sql_with_dialect(&text, &GenericDialect {}));
        })
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
    let deadline = PARSE_DEADLINE * (1 + (sql.len() >> 20) as u32);
    match tokio::time::timeout(deadline, rx).await {
        Ok(Ok(parsed)) => Ok(parsed?),
        Ok(Err(_)) => Err(DataFusionError::Plan(
            "the SQL parser failed on this statement (it stopped without an answer)".into(),
        )),
        Err(_) => Err(DataFusionError::Plan(format!(
            "the statement was still being parsed after {} s and was given up: its shape (long chains of dotted \
             names, brackets and operators) makes the SQL parser backtrack exponentially; simplify or split it",
            deadline.as_secs()
        ))),
    }
}

/// Wraps collected batches as a stream.
pub(crate) fn batches_stream(schema: SchemaRef, batches: Vec<RecordBatch>) -> SendableRecordBatchStream {
    Box::pin(RecordBatchStreamAdapter::new(
        schema,
        futures::stream::iter(batches.into_iter().map(Ok)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A statement of the shape that made sqlparser 0.62 backtrack for
    /// seconds (found by fuzzing) is refused at once; ordinary dotted
    /// names, numbers and subscripts are not.
    #[test]
    fn long_dotted_name_chains_are_refused_before_parsing() {
        let slow = "SELECT k, suml|eiadxr.ndnd.un.pmt.amoe.con.umml.tnp[d.umpt.amoe.llar.un.pmt.amoe.con.umml.tnp[d.umpt.ae.con.umml.tnp[d.umpt.amoe.llar_versions(''consu[mpti$n  moe.llar_versions(''consu[mpti$n       RE  ,on-w)d";
        let start = std::time::Instant::now();
        // The same with whitespace around the dots (a later fuzzer find).
        let spaced = "SELECT k, suml|eiadxr.ndnd.un.pmt.amoe.con.umml.tnp[d.umpt.amoe.\rll.r.un.pmt.amoe.con.vmml.tnp[d.ump$at$t.amoe.\rcon.vmml.tnp[d.ump$at$t.amoe.\rllar_versions(''c";
        assert!(check_name_chains(spaced).is_err());
        // ... and with parentheses inside the chain (a third find).
        let parens = "SELECT k, suml|eiadxr.ndnn.un.pmt.amo|eiadxr.ndnn.un.pmt.amoe.con.umml.tnp[d.(umpt.amoe.\rllar.un.pmt.amoe.e.con.umml.tnp[d.(umpt.amoe.\rllar.un.pmt.amoe.con.umml.tnp[d.ulp$at$t.amoe";
        assert!(check_name_chains(parens).is_err());
        // ... and with placeholders in it (a fourth).
        let dollars = "SELECT k, ELoe.con.umptM[sumlleiad_r.nd.Umpt.amoe.con.$usumlleiad_r.nd.umpt.amoe.cleiadtM[sumlleiad_r.nd.Umpt.amoe.con.$usumlleiad_r.nd.umpt.amoe.cleiad_r.nd";
        assert!(check_name_chains(dollars).is_err());
        let err = check_name_chains(slow).unwrap_err().to_string();
        assert!(err.contains("at most 16"), "{err}");
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
        for ok in [
            "SELECT cellar.public.t.k, a.b[1].c, 1.5 + 2.25 FROM cellar.public.t AS t JOIN u ON t.k = u.k",
            "SELECT x.y FROM a.b, c.d, e.f, g.h, i.j, k.l, m.n, o.p, q.r, s.t, u.v, w.x, y.z, aa.bb, cc.dd, ee.ff, gg.hh",
            "SELECT a.b FROM s.t1 JOIN s.t2 USING (k) JOIN s.t3 USING (k) JOIN s.t4 USING (k) JOIN s.t5 USING (k) JOIN s.t6 USING (k) JOIN s.t7 USING (k) JOIN s.t8 USING (k) JOIN s.t9 USING (k) JOIN s.t10 USING (k) JOIN s.t11 USING (k) JOIN s.t12 USING (k) JOIN s.t13 USING (k) JOIN s.t14 USING (k) JOIN s.t15 USING (k) JOIN s.t16 USING (k) JOIN s.t17 USING (k)",
            "SELECT a . b . c FROM t WHERE x.y IN (1.5, 2.5) AND m.n[1].o = p.q",
            "SELECT f(a.b) FROM s.t WHERE (s.t.x) IN (SELECT u.v.w FROM u.v) AND (x.y.z) > (p.q.r) ORDER BY (a.b)",
        ] {
            check_name_chains(ok).unwrap();
        }
    }
}
