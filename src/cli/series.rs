//! `cellar describe SERIES`: a series' definition and its months as JSON.
//!
//! Invariant: field names are a public interface, only ever extended.

use serde_json::{Value as Json, json};

use crate::Database;
use crate::error::Result;

/// The JSON `cellar describe` prints for series `name`: the key, the
/// options new months get, the series settings, and each month (oldest
/// first) with its state and archive location.
pub(super) fn describe_series(db: &Database, name: &str) -> Result<Json> {
    let s = db.series(name)?;
    let schema = s.schema();
    let options = s.options();
    let so = s.series_options();
    let pk: Vec<Json> = schema
        .primary_key
        .iter()
        .map(|c| json!({"name": c.name, "type": c.pk_type.as_str()}))
        .collect();
    let time_type = so
        .time_column
        .as_ref()
        .map(|_| if so.time_is_timestamp { "timestamp" } else { "integer" });
    let months: Vec<Json> = db
        .table_listing()
        .into_iter()
        .filter(|t| t.series.as_deref() == Some(name))
        .map(|t| {
            let month = t
                .name
                .rsplit_once('_')
                .map(|(_, m)| format!("{}-{}", &m[..4.min(m.len())], &m[4.min(m.len())..]))
                .unwrap_or_default();
            json!({
                "table": t.name,
                "month": month,
                "state": t.state(),
                "location": t.archive.as_ref().map(|a| &a.url),
                "endpoint": t.archive.as_ref().and_then(|a| a.endpoint.as_ref()),
            })
        })
        .collect();
    Ok(json!({
        "name": schema.name,
        "kind": "series",
        "primary_key": pk,
        "ttl": options.ttl_secs,
        "max_versions": options.max_versions,
        "max_version_offset": options.max_version_offset_secs,
        "allow_update": options.allow_update,
        "series": "monthly",
        "time_column": so.time_column,
        "time_type": time_type,
        "archive_after_months": so.archive_after_months,
        "drop_after_months": so.drop_after_months,
        "archive_to": so.archive_to.as_ref().map(|a| &a.url),
        "archive_endpoint": so.archive_to.as_ref().and_then(|a| a.endpoint.as_ref()),
        "months": months,
    }))
}
