//! `DESCRIBE t` for Cellar tables and series: one row per key column,
//! attribute column and option (and for a series, its settings and each
//! month), as `section | name | value`.
//!
//! Invariant: the three columns and the section names are a public
//! interface, only ever extended (new sections, new names).

use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::error::Result as DfResult;
use datafusion::execution::SendableRecordBatchStream;

use super::batches_stream;
use super::provider::CellarTable;
use crate::db::Database;
use crate::model::types::ValueType;

fn sql_type(t: ValueType) -> &'static str {
    match t {
        ValueType::Integer => "BIGINT",
        ValueType::Double => "DOUBLE",
        ValueType::String => "VARCHAR",
        ValueType::Binary => "VARBINARY",
        ValueType::Boolean => "BOOLEAN",
    }
}

/// `DESCRIBE t`: one row per key column, attribute column and option.
pub(super) fn table(t: crate::db::table::Table) -> DfResult<SendableRecordBatchStream> {
    let mut section = Vec::new();
    let mut name = Vec::new();
    let mut value = Vec::new();
    for (i, c) in t.schema().primary_key.iter().enumerate() {
        section.push("primary key".to_string());
        name.push(c.name.clone());
        let ty = sql_type(crate::read::pk_value_type(c.pk_type));
        value.push(if i == 0 {
            format!("{ty} NOT NULL (partition key)")
        } else if c.auto_increment {
            format!("{ty} NOT NULL (auto-increment)")
        } else {
            format!("{ty} NOT NULL")
        });
    }
    let declared = t.declared_columns();
    let provider = CellarTable::new(t.clone());
    for f in provider.schema_fields().iter().skip(t.schema().primary_key.len()) {
        section.push("column".to_string());
        name.push(f.0.clone());
        let origin = if declared.iter().any(|d| d.name == f.0) {
            "declared"
        } else {
            "discovered"
        };
        value.push(format!("{} ({origin})", sql_type(f.1)));
    }
    let o = t.options();
    let opts = [
        (
            "ttl",
            if o.ttl_secs == -1 {
                "-1 (never expire)".to_string()
            } else {
                format!("{} s", o.ttl_secs)
            },
        ),
        ("max_versions", o.max_versions.to_string()),
        ("max_version_offset", format!("{} s", o.max_version_offset_secs)),
        ("allow_update", o.allow_update.to_string()),
        ("partition_split_bytes", o.partition_split_bytes.to_string()),
    ];
    for (k, v) in opts {
        section.push("option".to_string());
        name.push(k.to_string());
        value.push(v);
    }
    rows(section, name, value)
}

/// The `section | name | value` result.
fn rows(section: Vec<String>, name: Vec<String>, value: Vec<String>) -> DfResult<SendableRecordBatchStream> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("section", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("value", DataType::Utf8, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(section)),
            Arc::new(StringArray::from(name)),
            Arc::new(StringArray::from(value)),
        ],
    )?;
    Ok(batches_stream(schema, vec![batch]))
}

/// `DESCRIBE series`: its key and columns (every month's), the options
/// new months get, the series settings, and each month with where its
/// data is.
pub(super) fn series(db: &Database, name: &str) -> DfResult<SendableRecordBatchStream> {
    let s = db.series(name).map_err(super::errors::df_err)?;
    let mut out: Vec<(String, String, String)> = Vec::new();
    let mut add = |sec: &str, n: &str, v: String| out.push((sec.to_string(), n.to_string(), v));
    let keys = s.schema().primary_key.len();
    let schema = super::sql_schema(db, name)
        .ok_or_else(|| super::errors::df_err(crate::Error::param(format!("series '{name}' does not exist"))))?;
    for (i, f) in schema.fields().iter().enumerate() {
        let ty = super::messages::sql_type(f.data_type());
        if i < keys {
            let note = if i == 0 { " (partition key)" } else { "" };
            add("primary key", f.name(), format!("{ty} NOT NULL{note}"));
        } else {
            add("column", f.name(), ty);
        }
    }
    let o = s.options();
    add(
        "option",
        "ttl",
        if o.ttl_secs == -1 {
            "-1 (never expire)".into()
        } else {
            format!("{} s", o.ttl_secs)
        },
    );
    add("option", "max_versions", o.max_versions.to_string());
    add(
        "option",
        "max_version_offset",
        format!("{} s", o.max_version_offset_secs),
    );
    add("option", "allow_update", o.allow_update.to_string());
    let so = s.series_options();
    let or_none = |v: Option<String>| v.unwrap_or_else(|| "none".to_string());
    add("series", "series", "monthly".into());
    add(
        "series",
        "time_column",
        or_none(so.time_column.clone()).to_string()
            + match (&so.time_column, so.time_is_timestamp) {
                (None, _) => " (the write time)",
                (Some(_), true) => " (TIMESTAMP)",
                (Some(_), false) => " (BIGINT milliseconds)",
            },
    );
    add(
        "series",
        "archive_after_months",
        or_none(so.archive_after_months.map(|m| m.to_string())),
    );
    add(
        "series",
        "drop_after_months",
        or_none(so.drop_after_months.map(|m| m.to_string())),
    );
    add(
        "series",
        "archive_to",
        or_none(so.archive_to.as_ref().map(|a| a.describe())),
    );
    for t in db
        .table_listing()
        .into_iter()
        .filter(|t| t.series.as_deref() == Some(name))
    {
        let v = match &t.archive {
            Some(a) => format!("archived at {}", a.describe()),
            None => "local".to_string(),
        };
        add("month", &t.name, v);
    }
    let (section, rest): (Vec<String>, Vec<(String, String)>) = out.into_iter().map(|(a, b, c)| (a, (b, c))).unzip();
    let (names, values) = rest.into_iter().unzip();
    rows(section, names, values)
}
