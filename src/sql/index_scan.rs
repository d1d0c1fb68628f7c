//! SQL reads through secondary indexes: which index a scan uses, and the
//! index lookup that reads table rows by the keys an index gives.
//!
//! For a scan's `WHERE` conjuncts, the key ranges of the table and of each
//! complete index are worked out as for any table (`pushdown::plan`, on
//! the index's own key); an index is chosen when its key applies more of
//! the conjuncts (a longer leftmost prefix) than the table's key does.
//! An index holds only the rows that have all its columns, so it is a
//! candidate only when the conjuncts require each of its attribute key
//! columns to be non-NULL (a comparison, `IN`, `BETWEEN`, `LIKE` or `IS NOT
//! NULL` on it); otherwise the table answers, even under `USE INDEX`.
//! `USE INDEX (idx)` forces an index and `USE INDEX ()` the table. A
//! chosen index that holds every column the query needs is scanned in
//! place of the table (covering); otherwise its entries give table keys
//! that are read in batches ([`IndexLookupExec`]), when a bounded probe of
//! the index ranges finds few enough of them (else the table is scanned).
//!
//! Invariants: the conjuncts a scan claims to apply exactly are those of
//! the plan it was chosen with, and whatever path runs applies exactly
//! those (a lookup checks every conjunct again on the table rows it
//! reads, so a global index that is behind yields no row the table would
//! not); a lookup returns each table row once.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result as DfResult;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties, SendableRecordBatchStream,
};

use super::errors::df_err;
use super::pushdown::{self, KeyPlan};
use crate::db::table::Table;
use crate::model::index::IndexDef;
use crate::model::row::{ReadOptions, visible_cells};
use crate::model::types::PkValue;
use crate::read::{ColBuilder, MergeScan, OutCol, ScanRange};

/// What a statement asks of a table's indexes (`USE INDEX`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum IndexHint {
    /// Cellar chooses.
    #[default]
    Auto,
    /// `USE INDEX (idx)`: read through this index.
    Use(String),
    /// `USE INDEX ()`: read the table itself.
    Table,
}

tokio::task_local! {
    /// The `USE INDEX` hints of the statement being planned, by table.
    pub(crate) static HINTS: HashMap<String, IndexHint>;
}

/// The hint the statement being planned gives `table`.
pub(crate) fn hint_for(table: &str) -> IndexHint {
    HINTS
        .try_with(|h| h.get(table).cloned())
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// An index a scan may read instead of its table.
#[derive(Clone)]
pub(super) struct Candidate {
    pub def: Arc<IndexDef>,
    pub table: Table,
    /// Complete (not being built).
    pub complete: bool,
}

/// The scan a filter set gets.
pub(super) enum Choice {
    Table(KeyPlan),
    Index(Candidate, KeyPlan),
}

impl Choice {
    pub fn plan(&self) -> &KeyPlan {
        match self {
            Choice::Table(p) | Choice::Index(_, p) => p,
        }
    }
}

/// How many conjuncts a key plan applies exactly.
fn score(plan: &KeyPlan) -> usize {
    plan.exact.iter().filter(|e| **e).count()
}

/// Whether some conjunct of `filters` is false or unknown when `column`
/// is NULL (a comparison, `IN`, `BETWEEN`, `LIKE` or `IS NOT NULL` on
/// it): only then may an index keyed by that column answer, since rows
/// without it are not in the index.
fn rejects_null(filters: &[&Expr], column: &str) -> bool {
    fn on(e: &Expr, column: &str) -> bool {
        matches!(e, Expr::Column(c) if c.name == column)
            || matches!(e, Expr::Cast(c) if on(&c.expr, column))
            || matches!(e, Expr::TryCast(c) if on(&c.expr, column))
    }
    fn rejects(e: &Expr, column: &str) -> bool {
        use datafusion::logical_expr::Operator;
        match e {
            Expr::BinaryExpr(b) if b.op == Operator::And => rejects(&b.left, column) || rejects(&b.right, column),
            Expr::BinaryExpr(b) if b.op == Operator::Or => rejects(&b.left, column) && rejects(&b.right, column),
            Expr::BinaryExpr(b) => {
                matches!(
                    b.op,
                    Operator::Eq | Operator::NotEq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
                ) && (on(&b.left, column) || on(&b.right, column))
            }
            Expr::InList(l) => on(&l.expr, column),
            Expr::Between(b) => on(&b.expr, column),
            Expr::Like(l) => on(&l.expr, column),
            Expr::IsNotNull(x) => on(x, column),
            _ => false,
        }
    }
    filters.iter().any(|f| rejects(f, column))
}

/// Whether index `c` holds every row `filters` can select: each of its
/// attribute key columns is required non-NULL by them.
fn answers(c: &Candidate, filters: &[&Expr]) -> bool {
    c.def.key_attribute_columns().all(|col| rejects_null(filters, col))
}

/// The scan `filters` get on `table` with `indexes` and `hint`.
pub(super) fn choose(table: &Table, indexes: &[Candidate], hint: &IndexHint, filters: &[&Expr]) -> DfResult<Choice> {
    let table_plan = pushdown::plan(table.schema(), filters);
    match hint {
        IndexHint::Table => Ok(Choice::Table(table_plan)),
        IndexHint::Use(name) => {
            let Some(c) = indexes.iter().find(|c| c.def.name == *name) else {
                let known: Vec<&str> = indexes.iter().map(|c| c.def.name.as_str()).collect();
                return Err(df_err(crate::Error::param(format!(
                    "USE INDEX ({name}): table '{}' has no index '{name}'; its indexes: {}",
                    table.name(),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ))));
            };
            if !c.complete {
                return Err(df_err(crate::Error::param(format!(
                    "USE INDEX ({name}): index '{name}' is still indexing the rows of '{}' (phase FULL); \
                     read the table, or wait until it is done",
                    table.name()
                ))));
            }
            // An index that lacks rows the query selects (rows without one
            // of its columns) cannot answer it: the table does, as with
            // MySQL's USE INDEX, which never changes a result.
            if !answers(c, filters) {
                return Ok(Choice::Table(table_plan));
            }
            Ok(Choice::Index(c.clone(), pushdown::plan(c.table.schema(), filters)))
        }
        IndexHint::Auto => {
            let mut best: Option<(usize, Candidate, KeyPlan)> = None;
            for c in indexes.iter().filter(|c| c.complete && answers(c, filters)) {
                let plan = pushdown::plan(c.table.schema(), filters);
                let s = score(&plan);
                // A local index first on a tie (it is never behind).
                let better = match &best {
                    None => true,
                    Some((b, bc, _)) => {
                        s > *b
                            || (s == *b
                                && bc.def.kind == crate::model::index::IndexKind::Global
                                && c.def.kind == crate::model::index::IndexKind::Local)
                    }
                };
                if better {
                    best = Some((s, c.clone(), plan));
                }
            }
            match best {
                Some((s, c, plan)) if s > score(&table_plan) => Ok(Choice::Index(c, plan)),
                _ => Ok(Choice::Table(table_plan)),
            }
        }
    }
}

/// Reads index entries in key ranges and then, in batches, the table rows
/// they name: the columns of `cols` (the table's), as `schema`.
#[derive(Clone)]
pub(super) struct IndexLookupExec {
    pub base: Table,
    pub index: Table,
    pub def: Arc<IndexDef>,
    pub ranges: Vec<ScanRange>,
    pub keys: String,
    pub cols: Arc<[OutCol]>,
    pub schema: SchemaRef,
    pub props: Arc<PlanProperties>,
    /// The conjuncts checked on the rows read (here rather than in a
    /// `FilterExec`, which DataFusion would feed through a repartition
    /// that reads the whole range ahead of a LIMIT).
    pub predicate: Option<Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
}

/// Most table rows read per lookup batch.
const LOOKUP_BATCH: usize = 256;

impl IndexLookupExec {
    pub fn new(
        base: Table,
        (index, def): (Table, Arc<IndexDef>),
        plan: &KeyPlan,
        cols: Arc<[OutCol]>,
        schema: SchemaRef,
    ) -> Self {
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        IndexLookupExec {
            base,
            index,
            def,
            ranges: plan.ranges.clone(),
            keys: plan.description.clone(),
            cols,
            schema,
            props,
            predicate: None,
        }
    }
}

impl fmt::Debug for IndexLookupExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexLookupExec")
            .field("index", &self.def.name)
            .finish()
    }
}

impl DisplayAs for IndexLookupExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let names: Vec<&str> = self.schema.fields().iter().map(|f| f.name().as_str()).collect();
        write!(
            f,
            "IndexLookupExec: table={}, index={} ({}), keys=[{}], projection=[{}]",
            self.base.name(),
            self.def.name,
            self.def.kind.as_str(),
            self.keys,
            names.join(", ")
        )?;
        if let Some(p) = &self.predicate {
            write!(f, ", predicate={p}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for IndexLookupExec {
    leaf_plan!("IndexLookupExec");

    fn execute(&self, _partition: usize, _context: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        let state = Lookup {
            base: self.base.clone(),
            index: self.index.clone(),
            ranges: self.ranges.clone(),
            cols: self.cols.clone(),
            schema: self.schema.clone(),
            snapshots: None,
            range: 0,
            scan: None,
            seen: HashSet::new(),
            batch: 8,
        };
        let predicate = self.predicate.clone();
        let stream = futures::stream::try_unfold(state, move |mut st| {
            let predicate = predicate.clone();
            async move {
                loop {
                    let Some(batch) = st.next_batch().await.map_err(df_err)? else {
                        return Ok(None);
                    };
                    let batch = match &predicate {
                        None => batch,
                        Some(p) => {
                            let mask = p.evaluate(&batch)?.into_array(batch.num_rows())?;
                            let mask = datafusion::arrow::array::AsArray::as_boolean_opt(&mask)
                                .cloned()
                                .ok_or_else(|| {
                                    datafusion::error::DataFusionError::Internal(
                                        "a predicate that is not boolean".into(),
                                    )
                                })?;
                            datafusion::arrow::compute::filter_record_batch(&batch, &mask)?
                        }
                    };
                    if batch.num_rows() > 0 {
                        return Ok(Some((batch, st)));
                    }
                }
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream)))
    }
}

/// A lookup's progress.
struct Lookup {
    base: Table,
    index: Table,
    ranges: Vec<ScanRange>,
    cols: Arc<[OutCol]>,
    schema: SchemaRef,
    /// The table's and the index's partitions at one sequence.
    snapshots: Option<(Vec<crate::state::Snapshot>, Vec<crate::state::Snapshot>)>,
    /// The range being read, and its scans (one per index partition it
    /// reaches, in key order).
    range: usize,
    scan: Option<Vec<MergeScan>>,
    /// Table keys already returned (a global index may name one twice
    /// while it catches up).
    seen: HashSet<Vec<u8>>,
    /// Rows read by the last batch.
    batch: usize,
}

impl Lookup {
    /// The next batch of table rows (`None`: done).
    async fn next_batch(&mut self) -> crate::Result<Option<RecordBatch>> {
        if self.snapshots.is_none() {
            self.snapshots = Some(self.base.snapshots_with(&self.index));
        }
        let index_schema = self.index.schema().clone();
        let base_schema = self.base.schema().clone();
        let now = self.base.now_ms();
        let index_opts = *self.index.inner().options.read();
        loop {
            // 16 rows first, then twice as many each batch: a LIMIT
            // above reads about as many table rows as it returns.
            self.batch = (self.batch * 2).clamp(16, LOOKUP_BATCH);
            let mut keys = Vec::new();
            while keys.len() < self.batch {
                let Some(entry) = self.next_entry().await? else { break };
                let (key, state) = entry;
                if visible_cells(&state, now, &index_opts, &ReadOptions::default()).is_none() {
                    continue;
                }
                let pk = index_schema.decode_pk(&key)?;
                let mut base_pk = crate::model::types::PrimaryKey::new();
                for c in &base_schema.primary_key {
                    let v = pk.get(&c.name).cloned().unwrap_or(PkValue::Integer(0));
                    base_pk = base_pk.with(c.name.clone(), v);
                }
                let base_key = base_schema.encode_pk(&base_pk)?;
                if self.seen.insert(base_key.clone()) {
                    keys.push((base_key, base_pk));
                }
            }
            if keys.is_empty() {
                return Ok(None);
            }
            let batch = self.read_rows(keys, now).await?;
            if batch.num_rows() > 0 {
                return Ok(Some(batch));
            }
        }
    }

    /// The next index entry in the ranges, in order.
    async fn next_entry(&mut self) -> crate::Result<Option<(Vec<u8>, crate::model::row::RowState)>> {
        loop {
            if self.range >= self.ranges.len() {
                return Ok(None);
            }
            if self.scan.is_none() {
                let (_, index_snaps) = self.snapshots.as_ref().expect("taken");
                let r = &self.ranges[self.range].range;
                self.scan = Some(
                    index_snaps
                        .iter()
                        .filter_map(|s| {
                            let part = s.range.intersect(r);
                            (!part.is_empty()).then(|| MergeScan::new(s, part, false, None))
                        })
                        .collect(),
                );
            }
            let scans = self.scan.as_mut().expect("set");
            while let Some(first) = scans.first_mut() {
                if let Some(e) = first.next().await? {
                    return Ok(Some(e));
                }
                scans.remove(0);
            }
            self.scan = None;
            self.range += 1;
        }
    }

    /// The table rows of `keys` (absent ones left out), as a batch.
    async fn read_rows(
        &self,
        keys: Vec<(Vec<u8>, crate::model::types::PrimaryKey)>,
        now: i64,
    ) -> crate::Result<RecordBatch> {
        let (base_snaps, _) = self.snapshots.as_ref().expect("taken");
        let opts = *self.base.inner().options.read();
        let mut builders: Vec<ColBuilder> = self
            .cols
            .iter()
            .map(|c| match c {
                OutCol::Pk(i) => {
                    ColBuilder::new(crate::read::pk_value_type(self.base.schema().primary_key[*i].pk_type))
                }
                OutCol::Attr { ty, .. } => ColBuilder::new(*ty),
            })
            .collect();
        let read = ReadOptions::default();
        for (key, pk) in keys {
            let Some(snap) = base_snaps.iter().find(|s| s.range.contains(&key)) else {
                continue;
            };
            // The whole row: one without the columns asked for still exists
            // (and shows them as NULL).
            let Some(state) = snap.get_state(&key, None).await? else {
                continue;
            };
            let Some(cells) = visible_cells(&state, now, &opts, &read) else {
                continue;
            };
            let values: HashMap<&str, &crate::model::types::Value> = cells
                .iter()
                .filter_map(|(n, c)| c.first().map(|c| (n.as_str(), &c.value)))
                .collect();
            for (b, c) in builders.iter_mut().zip(self.cols.iter()) {
                match c {
                    OutCol::Pk(i) => b.push_pk(&pk.columns[*i].1),
                    OutCol::Attr { name, .. } => b.push(values.get(name.as_str()).copied()),
                }
            }
        }
        let arrays = builders.iter_mut().map(|b| b.finish()).collect();
        RecordBatch::try_new(self.schema.clone(), arrays).map_err(|e| crate::Error::param(e.to_string()))
    }
}

/// Whether a probe of `plan`'s ranges of `index` finds fewer than `limit`
/// entries (the lookup then reads fewer table rows than that).
pub(super) async fn probe_below(index: &Table, plan: &KeyPlan, limit: usize) -> crate::Result<bool> {
    let mut n = 0;
    for snap in index.snapshots() {
        for r in &plan.ranges {
            let part = snap.range.intersect(&r.range);
            if part.is_empty() {
                continue;
            }
            let mut scan = MergeScan::new(&snap, part, false, Some(&[]));
            while scan.next().await?.is_some() {
                n += 1;
                if n >= limit {
                    return Ok(false);
                }
            }
        }
    }
    Ok(true)
}

/// Takes the `USE INDEX (...)` hints out of a statement's text: the text
/// without them, and the hint per table name.
pub(crate) fn strip_hints(sql: &str) -> (String, HashMap<String, IndexHint>) {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let mut hints = HashMap::new();
    if !sql.to_ascii_uppercase().contains("INDEX") {
        return (sql.to_string(), hints);
    }
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
        return (sql.to_string(), hints);
    };
    let word =
        |t: &Token, w: &str| matches!(t, Token::Word(x) if x.value.eq_ignore_ascii_case(w) && x.quote_style.is_none());
    let significant: Vec<usize> = (0..tokens.len())
        .filter(|i| !matches!(tokens[*i], Token::Whitespace(_)))
        .collect();
    let mut drop = vec![false; tokens.len()];
    let mut k = 0;
    while k + 3 < significant.len() {
        let at = |j: usize| &tokens[significant[k + j]];
        if !(word(at(0), "USE") && word(at(1), "INDEX") && matches!(at(2), Token::LParen)) || k == 0 {
            k += 1;
            continue;
        }
        // The table: the word before the hint (`FROM t USE INDEX`), or
        // before its alias (`FROM t AS a USE INDEX`, `FROM t a USE INDEX`).
        let name_at = |j: usize| match &tokens[significant[j]] {
            Token::Word(w) => Some(w.value.clone()),
            _ => None,
        };
        let before = |j: usize, kw: &str| j >= 1 && word(&tokens[significant[j - 1]], kw);
        let t = k - 1;
        let table = if before(t, "AS") && t >= 2 {
            name_at(t - 2)
        } else if t >= 1
            && matches!(tokens[significant[t - 1]], Token::Word(_))
            && !before(t, "FROM")
            && !before(t, "JOIN")
        {
            name_at(t - 1)
        } else {
            name_at(t)
        };
        let mut end = k + 3;
        let mut names = Vec::new();
        while end < significant.len() && !matches!(tokens[significant[end]], Token::RParen) {
            if let Token::Word(w) = &tokens[significant[end]] {
                names.push(w.value.clone());
            }
            end += 1;
        }
        if end >= significant.len() {
            break;
        }
        if let Some(table) = table {
            let hint = match names.first() {
                None => IndexHint::Table,
                Some(n) => IndexHint::Use(n.clone()),
            };
            hints.insert(table, hint);
            drop[significant[k]..=significant[end]].fill(true);
        }
        k = end + 1;
    }
    let text: String = tokens
        .iter()
        .zip(&drop)
        .filter(|(_, d)| !**d)
        .map(|(t, _)| t.to_string())
        .collect();
    (text, hints)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_index_hints_are_taken_out_per_table() {
        let (sql, h) = strip_hints("SELECT * FROM t USE INDEX (i) WHERE x = 1");
        assert_eq!(sql, "SELECT * FROM t  WHERE x = 1");
        assert_eq!(h.get("t"), Some(&IndexHint::Use("i".into())));
        let (_, h) = strip_hints("SELECT * FROM t AS a USE INDEX () JOIN u b USE INDEX (j) ON a.k = b.k");
        assert_eq!(h.get("t"), Some(&IndexHint::Table));
        assert_eq!(h.get("u"), Some(&IndexHint::Use("j".into())));
        // Text that merely mentions it is left alone.
        let (sql, h) = strip_hints("SELECT 'USE INDEX (i)' FROM t");
        assert_eq!(sql, "SELECT 'USE INDEX (i)' FROM t");
        assert!(h.is_empty());
        let (sql, h) = strip_hints("CREATE INDEX i ON t (a)");
        assert_eq!(sql, "CREATE INDEX i ON t (a)");
        assert!(h.is_empty());
    }
}
