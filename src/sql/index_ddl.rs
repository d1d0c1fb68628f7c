//! `CREATE INDEX` and `DROP INDEX`: secondary indexes from SQL.
//!
//! `CREATE INDEX idx ON t (c1, c2) [INCLUDE (a, b)] [WITH (type = 'local' |
//! 'global', include_base_data = true | false)]` maps onto
//! `Database::create_index`; `DROP INDEX idx [ON t]` onto `drop_index`.
//! Index names share the tables' namespace, so `DROP INDEX idx` finds its
//! table by itself.
//!
//! Invariant: everything the statement says is either honoured or refused
//! with what is accepted (no clause is silently ignored).

use datafusion::error::Result as DfResult;
use datafusion::sql::sqlparser::ast::{CreateIndex, Expr as SqlExpr, ObjectName};

use super::errors::{df_err, plan_err, table_name};
use crate::error::ErrorKind;
use crate::model::index::{IndexKind, IndexSpec};

/// Runs `CREATE INDEX`.
pub(super) async fn create(db: &crate::Database, ci: &CreateIndex) -> DfResult<()> {
    let Some(name) = &ci.name else {
        return Err(plan_err("CREATE INDEX needs a name: CREATE INDEX idx ON t (c1, ...)"));
    };
    let name = table_name(name)?;
    let table = table_name(&ci.table_name)?;
    if ci.unique || ci.concurrently || ci.using.is_some() || ci.predicate.is_some() || ci.nulls_distinct.is_some() {
        return Err(plan_err(
            "CREATE INDEX accepts: CREATE INDEX idx ON t (c1, ...) [INCLUDE (a, ...)] \
             [WITH (type = 'local'|'global', include_base_data = true|false)]; UNIQUE, CONCURRENTLY, USING, \
             WHERE and NULLS [NOT] DISTINCT are not supported",
        ));
    }
    let mut columns = Vec::new();
    for c in &ci.columns {
        if c.column.options.asc == Some(false) || c.operator_class.is_some() {
            return Err(plan_err(format!(
                "index column '{}': indexes are ascending only, with no operator class",
                c.column.expr
            )));
        }
        match &c.column.expr {
            SqlExpr::Identifier(i) => columns.push(i.value.clone()),
            e => {
                return Err(plan_err(format!(
                    "index column '{e}' is not a column name; an index is keyed by columns"
                )));
            }
        }
    }
    let mut spec = IndexSpec {
        name,
        columns,
        include: ci.include.iter().map(|i| i.value.clone()).collect(),
        kind: IndexKind::Local,
        include_base_data: true,
    };
    for w in &ci.with {
        let SqlExpr::BinaryOp { left, op, right } = w else {
            return Err(plan_err(format!("CREATE INDEX option '{w}' is not `name = value`")));
        };
        if op.to_string() != "=" {
            return Err(plan_err(format!("CREATE INDEX option '{w}' is not `name = value`")));
        }
        let key = left.to_string().to_ascii_lowercase();
        let value = right.to_string().trim_matches('\'').to_ascii_lowercase();
        match (key.as_str(), value.as_str()) {
            ("type" | "index_type", "local") => spec.kind = IndexKind::Local,
            ("type" | "index_type", "global") => spec.kind = IndexKind::Global,
            ("include_base_data", "true") => spec.include_base_data = true,
            ("include_base_data", "false") => spec.include_base_data = false,
            ("type" | "index_type", v) => {
                return Err(plan_err(format!(
                    "index type '{v}' is not known; accepted: 'local', 'global'"
                )));
            }
            ("include_base_data", v) => {
                return Err(plan_err(format!("include_base_data needs true or false, got '{v}'")));
            }
            (k, _) => {
                return Err(plan_err(format!(
                    "CREATE INDEX option '{k}' is not known; accepted: type = 'local'|'global', include_base_data = true|false"
                )));
            }
        }
    }
    match db.create_index(&table, spec).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::ObjectAlreadyExist && ci.if_not_exists => Ok(()),
        Err(e) => Err(df_err(e)),
    }
}

/// Runs `DROP INDEX idx [, ...] [ON t]`.
pub(super) async fn drop(
    db: &crate::Database,
    names: &[ObjectName],
    on: Option<&ObjectName>,
    if_exists: bool,
) -> DfResult<()> {
    for n in names {
        let name = table_name(n)?;
        let table = match (db.index_base(&name), on) {
            (Some(t), _) => t,
            (None, _) if if_exists => continue,
            (None, _) => {
                return Err(df_err(crate::Error::new(
                    ErrorKind::ObjectNotExist,
                    format!("index '{name}' does not exist"),
                )));
            }
        };
        if let Some(on) = on {
            let given = table_name(on)?;
            if given != table {
                return Err(plan_err(format!(
                    "'{name}' is an index of table '{table}', not of '{given}'"
                )));
            }
        }
        db.drop_index(&table, &name).await.map_err(df_err)?;
    }
    Ok(())
}
