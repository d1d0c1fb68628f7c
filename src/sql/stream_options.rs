//! The change stream options of `CREATE TABLE .. WITH (..)` and `ALTER
//! TABLE .. SET (..)`: `stream = true|false`, `stream_expiration_hours =
//! N`, `stream_columns = 'a,b'`.
//!
//! Invariant: a value that does not parse is refused with the option's
//! name and what it accepts; other options pass through untouched.

use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::sql::sqlparser::ast::SqlOption;

use crate::StreamChange;

/// Takes the stream options out of `opts`: the other options, and the
/// change they ask for.
pub(super) fn split(opts: &[SqlOption]) -> DfResult<(Vec<SqlOption>, StreamChange)> {
    let mut rest = Vec::new();
    let mut change = StreamChange::default();
    for o in opts {
        let SqlOption::KeyValue { key, value } = o else {
            rest.push(o.clone());
            continue;
        };
        let v = value.to_string().trim_matches('\'').trim().to_string();
        match key.value.to_ascii_lowercase().as_str() {
            "stream" | "enable_stream" => {
                change.enable = Some(match v.to_ascii_lowercase().as_str() {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => return Err(plan_err(format!("stream needs true or false, got '{v}'"))),
                })
            }
            "stream_expiration_hours" | "expiration_time" => {
                change.expiration_hours = Some(v.parse::<u32>().map_err(|_| {
                    plan_err(format!(
                        "stream_expiration_hours needs a whole number of hours, 1 to {}, got '{v}'",
                        crate::MAX_STREAM_EXPIRATION_HOURS
                    ))
                })?)
            }
            "stream_columns" | "columns_to_get" => {
                change.columns = Some(
                    v.split(',')
                        .map(|c| c.trim().to_string())
                        .filter(|c| !c.is_empty())
                        .collect(),
                )
            }
            _ => rest.push(o.clone()),
        }
    }
    Ok((rest, change))
}

fn plan_err(msg: String) -> DataFusionError {
    DataFusionError::Plan(msg)
}
