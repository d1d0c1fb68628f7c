//! SQL errors in the user's words: which column, which row, what is
//! accepted, instead of the planner's internals (`column1 is declared as
//! non-nullable`, `Optimizer rule .. failed`, `ParserError("..")`).
//!
//! Invariants: nothing here changes whether a statement fails or what it
//! does: an INSERT's literal VALUES are checked before planning only for
//! what would fail anyway (a NULL or missing key column, a literal that
//! does not convert to its column's type), and rewording keeps the
//! failure. Engine errors (`DataFusionError::External`) pass untouched.

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::error::DataFusionError;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{Expr, Ident, ObjectName, SetExpr, Statement, TableObject, Value};
use datafusion::sql::sqlparser::parser::ParserError;

use crate::db::Database;
use crate::error::Error;

/// The table an INSERT writes and the columns it names (empty: all, in
/// the table's order).
pub(crate) struct InsertInto {
    table: String,
    columns: Vec<String>,
}

fn ident(i: &Ident) -> String {
    // Unquoted identifiers fold to lower case, as DataFusion folds them.
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_lowercase()
    }
}

fn last_ident(n: &ObjectName) -> Option<String> {
    n.0.last().and_then(|p| p.as_ident()).map(ident)
}

/// The INSERT's target, if `stmt` is an INSERT into a named table.
pub(crate) fn insert_into(stmt: &DfStatement) -> Option<InsertInto> {
    let DfStatement::Statement(s) = stmt else { return None };
    let Statement::Insert(ins) = s.as_ref() else {
        return None;
    };
    let TableObject::TableName(name) = &ins.table else {
        return None;
    };
    Some(InsertInto {
        table: last_ident(name)?,
        columns: ins.columns.iter().filter_map(last_ident).collect(),
    })
}

fn engine(msg: String) -> DataFusionError {
    DataFusionError::External(Box::new(Error::param(msg)))
}

/// SQL's name of a column type.
pub(super) fn sql_type(t: &DataType) -> String {
    match t {
        DataType::Int64 => "BIGINT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => "VARCHAR".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Binary | DataType::BinaryView | DataType::LargeBinary => "VARBINARY".into(),
        DataType::Timestamp(..) => "TIMESTAMP".into(),
        other => other.to_string(),
    }
}

/// `t (k BIGINT NOT NULL, v DOUBLE, ...)`, for messages.
fn describe(table: &str, schema: &SchemaRef) -> String {
    let cols: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| {
            let null = if f.is_nullable() { "" } else { " NOT NULL" };
            format!("{} {}{null}", f.name(), sql_type(f.data_type()))
        })
        .collect();
    format!("{table} ({})", cols.join(", "))
}

fn key_needed(table: &str, column: &str, what: &str, schema: &SchemaRef) -> DataFusionError {
    engine(format!(
        "INSERT INTO {table}: primary-key column '{column}' {what}; every primary-key column (NOT NULL below) \
         needs a value: {}",
        describe(table, schema)
    ))
}

/// Checks an INSERT's literal VALUES against its table before planning:
/// a NULL or missing primary-key column, a string literal that is not a
/// number where the column is BIGINT or DOUBLE. Errors name the column
/// and the row (1 is the first).
pub(crate) fn check_insert(db: &Database, stmt: &DfStatement, target: &InsertInto) -> Result<(), DataFusionError> {
    let Some(schema) = super::sql_schema(db, &target.table) else {
        return Ok(());
    };
    let fields: Vec<_> = if target.columns.is_empty() {
        schema.fields().iter().cloned().collect()
    } else {
        let mut named = Vec::new();
        for c in &target.columns {
            match schema.field_with_name(c) {
                Ok(f) => named.push(std::sync::Arc::new(f.clone())),
                // An unknown column: DataFusion says so.
                Err(_) => return Ok(()),
            }
        }
        for f in schema.fields().iter().filter(|f| !f.is_nullable()) {
            if !target.columns.iter().any(|c| c == f.name()) {
                return Err(key_needed(
                    &target.table,
                    f.name(),
                    "is not among the columns given",
                    &schema,
                ));
            }
        }
        named
    };
    let DfStatement::Statement(s) = stmt else { return Ok(()) };
    let Statement::Insert(ins) = s.as_ref() else {
        return Ok(());
    };
    let Some(SetExpr::Values(values)) = ins.source.as_ref().map(|q| q.body.as_ref()) else {
        return Ok(());
    };
    for (r, row) in values.rows.iter().enumerate() {
        if row.content.len() != fields.len() {
            let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
            return Err(engine(format!(
                "INSERT INTO {}: row {} has {} values for the {} columns ({}); the table has {}",
                target.table,
                r + 1,
                row.content.len(),
                fields.len(),
                names.join(", "),
                describe(&target.table, &schema)
            )));
        }
        for (expr, f) in row.content.iter().zip(&fields) {
            let Expr::Value(v) = expr else { continue };
            match (&v.value, f.data_type()) {
                (Value::Null, _) if !f.is_nullable() => {
                    return Err(key_needed(
                        &target.table,
                        f.name(),
                        &format!("is NULL in row {}", r + 1),
                        &schema,
                    ));
                }
                (Value::SingleQuotedString(s), DataType::Int64) if s.trim().parse::<i64>().is_err() => {
                    return Err(not_a(&target.table, f.name(), s, r, "BIGINT", "an integer such as 42"));
                }
                (Value::SingleQuotedString(s), DataType::Float64) if s.trim().parse::<f64>().is_err() => {
                    return Err(not_a(&target.table, f.name(), s, r, "DOUBLE", "a number such as 2.5"));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn not_a(table: &str, column: &str, value: &str, row: usize, ty: &str, example: &str) -> DataFusionError {
    engine(format!(
        "INSERT INTO {table}: '{value}' in row {} is not a {ty}, the type of column '{column}'; give {example}",
        row + 1
    ))
}

/// DataFusion's error for a statement, in the user's words where it has
/// a better one.
pub(crate) fn reword(e: DataFusionError, db: &Database, target: Option<&InsertInto>) -> DataFusionError {
    if let DataFusionError::SQL(p, _) = &e {
        let msg = match p.as_ref() {
            ParserError::ParserError(m) | ParserError::TokenizerError(m) => m.clone(),
            ParserError::RecursionLimitExceeded => "the statement nests too deeply".to_string(),
        };
        return engine(format!("syntax error: {msg}"));
    }
    if matches!(e, DataFusionError::External(_)) {
        return e;
    }
    let root = e.find_root().strip_backtrace();
    let root = root
        .strip_prefix("Arrow error: ")
        .map(|r| r.strip_prefix("Cast error: ").unwrap_or(r))
        .unwrap_or(&root)
        .to_string();
    let Some(t) = target else {
        // An optimizer's wrapping says nothing the cause does not.
        return if e.to_string().starts_with("Optimizer rule") {
            engine(root)
        } else {
            e
        };
    };
    let Some(schema) = super::sql_schema(db, &t.table) else {
        return e;
    };
    let targets: Vec<String> = if t.columns.is_empty() {
        schema.fields().iter().map(|f| f.name().clone()).collect()
    } else {
        t.columns.clone()
    };
    // A NULL reaching a NOT NULL (key) column, from VALUES or a query.
    if root.contains("non-nullable") {
        let named = column_in(&root, "Column 'column", '\'')
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| targets.get(i).cloned())
            .or_else(|| {
                column_in(&root, "column at '", '\'').and_then(|i| Some(schema.fields().get(i)?.name().clone()))
            });
        return match named {
            Some(c) => key_needed(&t.table, &c, "is NULL or missing", &schema),
            None => engine(format!(
                "INSERT INTO {}: a primary-key column is NULL or missing; every primary-key column (NOT NULL \
                 below) needs a value: {}",
                t.table,
                describe(&t.table, &schema)
            )),
        };
    }
    if root.starts_with("Cannot cast") {
        return engine(format!(
            "INSERT INTO {}: {root}; the columns take {}",
            t.table,
            describe(&t.table, &schema)
        ));
    }
    e
}

/// The number after `prefix` in `s`, up to `end`.
fn column_in(s: &str, prefix: &str, end: char) -> Option<usize> {
    let rest = &s[s.find(prefix)? + prefix.len()..];
    rest[..rest.find(end)?].parse().ok()
}
