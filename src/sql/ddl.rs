//! Cellar's DDL, handled before DataFusion's planner (which would create
//! in-memory tables and knows nothing of primary keys or table options).
//!
//! Invariant: Cellar DDL goes to the catalog (durable when the statement
//! returns); what DataFusion plans itself stays in the session.

use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::error::Result as DfResult;
use datafusion::sql::sqlparser::ast::{
    AlterTableOperation, ColumnOption, CreateTableOptions, Expr as SqlExpr, ObjectType, SqlOption, Statement,
    TableConstraint,
};

use super::errors::{df_err, plan_err, table_name};
use super::{SqlSession, StatementOutput, batches_stream};
use crate::db::SeriesOptions;
use crate::error::ErrorKind;
use crate::model::schema::{ColumnDef, OptionsUpdate, TableOptions, TableSchema};
use crate::model::types::{PkType, ValueType};
use crate::remote::RemoteLocation;

/// The value type of a SQL type name.
fn value_type(sql_type: &str) -> Option<ValueType> {
    let t = sql_type.to_ascii_uppercase();
    let base = t.split('(').next().unwrap_or("").trim();
    Some(match base {
        "BIGINT" | "INT" | "INTEGER" | "INT8" | "INT64" | "SMALLINT" | "TINYINT" => ValueType::Integer,
        "DOUBLE" | "DOUBLE PRECISION" | "FLOAT" | "FLOAT8" | "FLOAT64" | "REAL" => ValueType::Double,
        "VARCHAR" | "STRING" | "TEXT" | "CHAR" | "CHARACTER VARYING" => ValueType::String,
        "VARBINARY" | "BYTEA" | "BINARY" | "BLOB" => ValueType::Binary,
        "BOOLEAN" | "BOOL" => ValueType::Boolean,
        _ => return None,
    })
}

const ATTR_TYPES: &str = "BIGINT, DOUBLE, VARCHAR, BOOLEAN or VARBINARY";
const PK_TYPES: &str = "BIGINT/INT/INTEGER, VARCHAR/STRING/TEXT or VARBINARY/BYTEA";

/// An option value as an integer (`86400`, `-1`) or boolean.
fn option_value(v: &SqlExpr) -> String {
    v.to_string().trim_matches('\'').to_ascii_lowercase()
}

fn int_option(name: &str, v: &str) -> DfResult<i64> {
    v.parse::<i64>()
        .map_err(|_| plan_err(format!("table option {name} needs an integer, got '{v}'")))
}

/// Applies `WITH (...)` / `SET (...)` options onto an update.
fn options_update(opts: &[SqlOption]) -> DfResult<OptionsUpdate> {
    let mut u = OptionsUpdate::default();
    for o in opts {
        let SqlOption::KeyValue { key, value } = o else {
            return Err(plan_err(format!(
                "table option '{o}' is not of the form name = value; accepted: ttl, max_versions, max_version_offset, allow_update"
            )));
        };
        let v = option_value(value);
        match key.value.to_ascii_lowercase().as_str() {
            "ttl" | "time_to_live" => u.ttl_secs = Some(int_option("ttl", &v)?),
            "max_versions" => {
                let n = int_option("max_versions", &v)?;
                u.max_versions = Some(
                    u32::try_from(n)
                        .map_err(|_| plan_err(format!("max_versions must be between 1 and {}, got {n}", u32::MAX)))?,
                );
            }
            "max_version_offset" | "deviation_cell_version_in_sec" => {
                u.max_version_offset_secs = Some(int_option("max_version_offset", &v)?)
            }
            "allow_update" => {
                u.allow_update = Some(match v.as_str() {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => return Err(plan_err(format!("allow_update needs true or false, got '{v}'"))),
                })
            }
            "partition_split_bytes" => {
                let n = int_option("partition_split_bytes", &v)?;
                u.partition_split_bytes = Some(u64::try_from(n).map_err(|_| {
                    plan_err(format!(
                        "partition_split_bytes must be 0 or a positive number of bytes, got {n}"
                    ))
                })?);
            }
            other => {
                return Err(plan_err(format!(
                    "unknown table option '{other}'; accepted: ttl (seconds, -1 = never), max_versions, max_version_offset (seconds), allow_update, partition_split_bytes, \
                     auto_increment = 'column' (at creation), stream (true/false), stream_expiration_hours, stream_columns = 'a,b', \
                     and for a series: series = 'monthly', time_column, archive_after_months, drop_after_months, archive_to, \
                     archive_endpoint, archive_region, archive_allow_http"
                )));
            }
        }
    }
    Ok(u)
}

/// The series options among `WITH (...)`: `series = 'monthly'`,
/// `time_column`, `archive_after_months`, `drop_after_months`,
/// `archive_to` and its `archive_endpoint`, `archive_region`,
/// `archive_allow_http`. Returns the other options, and the series
/// settings when `series` is given.
fn split_series_options(opts: &[SqlOption]) -> DfResult<(Vec<SqlOption>, Option<SeriesOptions>)> {
    let monthly = opts
        .iter()
        .any(|o| matches!(o, SqlOption::KeyValue { key, .. } if key.value.eq_ignore_ascii_case("series")));
    let (rest, series) = parse_series_options(opts)?;
    if monthly {
        return Ok((rest, Some(series)));
    }
    if series != SeriesOptions::default() {
        let k = opts
            .iter()
            .filter_map(|o| match o {
                SqlOption::KeyValue { key, .. } => Some(key.value.to_ascii_lowercase()),
                _ => None,
            })
            .find(|k| {
                !rest
                    .iter()
                    .any(|r| matches!(r, SqlOption::KeyValue { key, .. } if key.value.eq_ignore_ascii_case(k)))
            })
            .unwrap_or_default();
        return Err(plan_err(format!(
            "table option {k} belongs to a series; add series = 'monthly' to create one"
        )));
    }
    Ok((rest, None))
}

/// The series settings among `WITH (...)` / `SET (...)` (`series`
/// itself is checked, then dropped), and the other options.
fn parse_series_options(opts: &[SqlOption]) -> DfResult<(Vec<SqlOption>, SeriesOptions)> {
    let mut rest = Vec::new();
    let mut series = SeriesOptions::default();
    let mut location = RemoteLocation::new("");
    for o in opts {
        let SqlOption::KeyValue { key, value } = o else {
            rest.push(o.clone());
            continue;
        };
        let raw = value.to_string();
        let text = raw.trim_matches('\'').to_string();
        let months = |name: &str| -> DfResult<u32> {
            text.parse::<u32>()
                .map_err(|_| plan_err(format!("{name} needs a whole number of months, got '{text}'")))
        };
        let k = key.value.to_ascii_lowercase();
        match k.as_str() {
            "series" => {
                if !text.eq_ignore_ascii_case("monthly") {
                    return Err(plan_err(format!(
                        "series = '{text}' is not supported; accepted: series = 'monthly'"
                    )));
                }
            }
            "time_column" => series.time_column = Some(text.clone()),
            "archive_after_months" => series.archive_after_months = Some(months("archive_after_months")?),
            "drop_after_months" => series.drop_after_months = Some(months("drop_after_months")?),
            "archive_to" => location.url = text.clone(),
            "archive_endpoint" => location.endpoint = Some(text.clone()),
            "archive_region" => location.region = Some(text.clone()),
            "archive_allow_http" => location.allow_http = matches!(text.to_ascii_lowercase().as_str(), "true" | "1"),
            _ => {
                rest.push(o.clone());
                continue;
            }
        }
    }
    if !location.url.is_empty() {
        series.archive_to = Some(location);
    }
    Ok((rest, series))
}

/// `ALTER TABLE series SET (..)`: table options (its months' and new
/// months'), `archive_after_months`, `drop_after_months`, `archive_to`
/// (with `archive_endpoint`, `archive_region`, `archive_allow_http`).
async fn alter_series(
    db: &crate::Database,
    name: &str,
    ops: &[AlterTableOperation],
) -> DfResult<Option<StatementOutput>> {
    for op in ops {
        let (AlterTableOperation::SetOptionsParens { options }
        | AlterTableOperation::SetTblProperties {
            table_properties: options,
        }) = op
        else {
            return Err(plan_err(format!(
                "ALTER TABLE {name} ... {op} is not supported for a series; accepted: ALTER TABLE {name} SET \
                 (ttl = ..., max_versions = ..., archive_after_months = ..., drop_after_months = ..., archive_to = ...)"
            )));
        };
        let (rest, parsed) = parse_series_options(options)?;
        if parsed.time_column.is_some() {
            return Err(plan_err(format!(
                "the time column of series '{name}' cannot change (its rows are filed by it); create a new series"
            )));
        }
        let change = crate::SeriesUpdate {
            archive_after_months: parsed.archive_after_months,
            drop_after_months: parsed.drop_after_months,
            archive_to: parsed.archive_to,
        };
        db.alter_series(name, options_update(&rest)?, change)
            .await
            .map_err(df_err)?;
    }
    Ok(done("ALTER TABLE"))
}

fn done(s: &str) -> Option<StatementOutput> {
    Some(StatementOutput::Done(s.to_string()))
}

/// Runs `stmt` when it is Cellar DDL; `None` hands it to DataFusion.
pub(super) async fn try_execute(sess: &SqlSession, stmt: &Statement) -> DfResult<Option<StatementOutput>> {
    let db = &sess.db;
    match stmt {
        Statement::CreateTable(ct) if !ct.external => {
            let name = table_name(&ct.name)?;
            if ct.query.is_some() {
                return Err(plan_err(format!(
                    "CREATE TABLE ... AS SELECT is not supported: Cellar tables need a primary key. \
                     Create the table first (CREATE TABLE {name} (..., PRIMARY KEY (...))), then INSERT INTO {name} SELECT ..."
                )));
            }
            let mut pk_names: Vec<String> = Vec::new();
            for c in &ct.constraints {
                if let TableConstraint::PrimaryKey(pk) = c {
                    for col in &pk.columns {
                        let s = match &col.column.expr {
                            SqlExpr::Identifier(i) => i.value.clone(),
                            e => e.to_string(),
                        };
                        pk_names.push(s);
                    }
                }
            }
            for c in &ct.columns {
                if c.options
                    .iter()
                    .any(|o| matches!(o.option, ColumnOption::PrimaryKey(_)))
                {
                    pk_names.push(c.name.value.clone());
                }
            }
            if pk_names.is_empty() {
                return Err(plan_err(format!(
                    "CREATE TABLE {name} has no primary key; add PRIMARY KEY (col, ...) with 1 to 4 columns of type {PK_TYPES}"
                )));
            }
            let mut series = None;
            let mut auto_increment = None;
            let mut stream = crate::StreamChange::default();
            let update = match &ct.table_options {
                CreateTableOptions::None => OptionsUpdate::default(),
                CreateTableOptions::With(o) | CreateTableOptions::Options(o) | CreateTableOptions::Plain(o) => {
                    let (rest, change) = super::stream_options::split(o)?;
                    stream = change;
                    let (rest, s) = split_series_options(&rest)?;
                    series = s;
                    let mut others = Vec::new();
                    for o in rest {
                        match &o {
                            SqlOption::KeyValue { key, value } if key.value.eq_ignore_ascii_case("auto_increment") => {
                                auto_increment = Some(value.to_string().trim_matches('\'').to_string());
                            }
                            _ => others.push(o),
                        }
                    }
                    options_update(&others)?
                }
                other => {
                    return Err(plan_err(format!(
                        "unsupported table options '{other}'; use WITH (ttl = ..., max_versions = ..., max_version_offset = ..., allow_update = ...)"
                    )));
                }
            };
            // A series' time column may be declared TIMESTAMP: stored as
            // BIGINT milliseconds, shown as TIMESTAMP by the series.
            let time_column = series.as_ref().and_then(|s: &SeriesOptions| s.time_column.clone());
            let mut time_is_timestamp = false;
            let mut sql_type = |col: &str, t: String| -> String {
                if time_column.as_deref() == Some(col) && t.to_ascii_uppercase().starts_with("TIMESTAMP") {
                    time_is_timestamp = true;
                    "BIGINT".to_string()
                } else {
                    t
                }
            };
            let mut schema = TableSchema::new(name.clone());
            for pk in &pk_names {
                let Some(c) = ct.columns.iter().find(|c| c.name.value == *pk) else {
                    return Err(plan_err(format!(
                        "primary-key column '{pk}' of table '{name}' is not among its columns"
                    )));
                };
                let t = sql_type(pk, c.data_type.to_string());
                let pk_type = match value_type(&t) {
                    Some(ValueType::Integer) => PkType::Integer,
                    Some(ValueType::String) => PkType::String,
                    Some(ValueType::Binary) => PkType::Binary,
                    _ => {
                        return Err(plan_err(format!(
                            "primary-key column '{pk}' has type {t}; primary keys accept {PK_TYPES}"
                        )));
                    }
                };
                schema = schema.pk(pk.clone(), pk_type);
            }
            for c in &ct.columns {
                if pk_names.contains(&c.name.value) {
                    continue;
                }
                let t = sql_type(&c.name.value, c.data_type.to_string());
                let vt = value_type(&t).ok_or_else(|| {
                    plan_err(format!(
                        "column '{}' has type {t}; attribute columns accept {ATTR_TYPES}",
                        c.name.value
                    ))
                })?;
                schema = schema.column(c.name.value.clone(), vt);
            }
            if let Some(s) = series.as_mut() {
                s.time_is_timestamp = time_is_timestamp;
            }
            if let Some(col) = auto_increment {
                schema = schema.auto_increment(&col).map_err(df_err)?;
            }
            let options = update.apply(&TableOptions::default());
            if series.is_some() && !stream.is_empty() {
                return Err(plan_err(format!(
                    "stream options are for a table; series '{name}' and its months have no streams (yet)"
                )));
            }
            let created = match series {
                Some(series) => db.create_series(schema, options, series).await,
                None => db.create_table_with_stream(schema, options, stream).await,
            };
            match created {
                Ok(()) => Ok(done("CREATE TABLE")),
                Err(e) if e.kind() == ErrorKind::ObjectAlreadyExist && ct.if_not_exists => Ok(done("CREATE TABLE")),
                Err(e) => Err(df_err(e)),
            }
        }
        Statement::AlterTable(at) => {
            let name = table_name(&at.name)?;
            if db.series(&name).is_ok() {
                return alter_series(db, &name, &at.operations).await;
            }
            if db.table(&name).is_err() && at.if_exists {
                return Ok(done("ALTER TABLE"));
            }
            db.table(&name).map_err(df_err)?;
            for op in &at.operations {
                match op {
                    AlterTableOperation::AddColumn {
                        column_def,
                        if_not_exists,
                        ..
                    } => {
                        let t = column_def.data_type.to_string();
                        let vt = value_type(&t).ok_or_else(|| {
                            plan_err(format!(
                                "column '{}' has type {t}; attribute columns accept {ATTR_TYPES}",
                                column_def.name.value
                            ))
                        })?;
                        let c = ColumnDef {
                            name: column_def.name.value.clone(),
                            value_type: vt,
                        };
                        match db.add_column(&name, c).await {
                            Ok(()) => {}
                            Err(e) if e.kind() == ErrorKind::ObjectAlreadyExist && *if_not_exists => {}
                            Err(e) => return Err(df_err(e)),
                        }
                    }
                    AlterTableOperation::DropColumn {
                        column_names,
                        if_exists,
                        ..
                    } => {
                        for c in column_names {
                            match db.drop_column(&name, &c.value).await {
                                Ok(()) => {}
                                Err(e) if e.kind() == ErrorKind::ObjectNotExist && *if_exists => {}
                                Err(e) => return Err(df_err(e)),
                            }
                        }
                    }
                    AlterTableOperation::SetOptionsParens { options }
                    | AlterTableOperation::SetTblProperties {
                        table_properties: options,
                    } => {
                        let (rest, stream) = super::stream_options::split(options)?;
                        db.alter_table(&name, options_update(&rest)?).await.map_err(df_err)?;
                        db.change_stream(&name, stream).await.map_err(df_err)?;
                    }
                    other => {
                        return Err(plan_err(format!(
                            "ALTER TABLE ... {other} is not supported; accepted: ALTER TABLE t SET (ttl = ..., max_versions = ..., max_version_offset = ..., allow_update = ...), ALTER TABLE t ADD COLUMN c TYPE and ALTER TABLE t DROP COLUMN c"
                        )));
                    }
                }
            }
            Ok(done("ALTER TABLE"))
        }
        Statement::CreateIndex(ci) => {
            super::index_ddl::create(db, ci).await?;
            Ok(done("CREATE INDEX"))
        }
        Statement::Drop {
            object_type: ObjectType::Index,
            names,
            if_exists,
            table,
            ..
        } => {
            super::index_ddl::drop(db, names, table.as_ref(), *if_exists).await?;
            Ok(done("DROP INDEX"))
        }
        Statement::Drop {
            object_type: ObjectType::Table,
            names,
            if_exists,
            cascade,
            purge,
            ..
        } => {
            // Session tables (external tables) are DataFusion's to drop.
            let mut cellar = Vec::new();
            for n in names {
                let t = table_name(n)?;
                if db.table(&t).is_ok() || db.series(&t).is_ok() {
                    cellar.push(t);
                } else if !*if_exists && !session_table(sess, &t) {
                    return Err(df_err(crate::Error::new(
                        ErrorKind::ObjectNotExist,
                        format!("table '{t}' does not exist"),
                    )));
                }
            }
            if cellar.is_empty() {
                return Ok(None);
            }
            if cellar.len() != names.len() {
                return Err(plan_err(
                    "DROP TABLE mixes Cellar tables with session tables; drop them in separate statements",
                ));
            }
            // PURGE deletes an archived table's (or month's) archive too.
            let archive = if *purge {
                crate::ArchiveOnDrop::Delete
            } else {
                crate::ArchiveOnDrop::Refuse
            };
            for t in cellar {
                let dropped = if db.series(&t).is_ok() && *cascade {
                    db.drop_series_cascade(&t, archive).await
                } else {
                    db.drop_table_with(&t, archive).await
                };
                dropped.map_err(df_err)?;
            }
            Ok(done("DROP TABLE"))
        }
        Statement::ShowTables { .. } => {
            let schema = sess
                .ctx
                .catalog(super::CATALOG)
                .and_then(|c| c.schema(super::SCHEMA))
                .ok_or_else(|| plan_err("the cellar catalog is not registered"))?;
            let listing = db.table_listing();
            let names = schema.table_names();
            let mut kinds = Vec::new();
            let mut series = Vec::new();
            let mut states = Vec::new();
            let mut locations = Vec::new();
            for n in &names {
                match listing.iter().find(|l| l.name == *n) {
                    Some(l) => {
                        kinds.push(if l.is_series { "series" } else { "cellar" });
                        series.push(l.series.clone());
                        states.push(l.state());
                        locations.push(l.archive.as_ref().map(|a| a.url.clone()));
                    }
                    None => {
                        kinds.push("session");
                        series.push(None);
                        states.push(None);
                        locations.push(None);
                    }
                }
            }
            let out = Arc::new(Schema::new(vec![
                Field::new("table_name", DataType::Utf8, false),
                Field::new("kind", DataType::Utf8, false),
                Field::new("series", DataType::Utf8, true),
                Field::new("state", DataType::Utf8, true),
                Field::new("archive", DataType::Utf8, true),
            ]));
            let batch = RecordBatch::try_new(
                out.clone(),
                vec![
                    Arc::new(StringArray::from(names)),
                    Arc::new(StringArray::from(kinds)),
                    Arc::new(StringArray::from(series)),
                    Arc::new(StringArray::from(states)),
                    Arc::new(StringArray::from(locations)),
                ],
            )?;
            Ok(Some(StatementOutput::Rows(batches_stream(out, vec![batch]))))
        }
        Statement::ExplainTable { table_name: n, .. } => {
            let name = table_name(n)?;
            if let Ok(t) = db.table(&name) {
                return Ok(Some(StatementOutput::Rows(super::describe::table(t)?)));
            }
            if db.series(&name).is_ok() {
                return Ok(Some(StatementOutput::Rows(super::describe::series(db, &name)?)));
            }
            Ok(None)
        }
        _ => Ok(None),
    }
}

fn session_table(sess: &SqlSession, name: &str) -> bool {
    sess.ctx
        .catalog(super::CATALOG)
        .and_then(|c| c.schema(super::SCHEMA))
        .and_then(|s| {
            s.downcast_ref::<super::CellarSchema>()
                .map(|s| s.is_session_table(name))
        })
        .unwrap_or(false)
}
