//! Engine errors as DataFusion errors, planning errors, and Cellar table
//! names as statements give them.
//!
//! Invariant: an engine error crosses into DataFusion whole (kind and
//! message), as `DataFusionError::External`, so `SqlSession` can hand the
//! same `cellar::Error` back to its caller.

use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::sql::sqlparser::ast::ObjectName;

use crate::error::Error;

/// Converts an engine error for DataFusion.
pub(crate) fn df_err(e: Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// A planning error with `msg`.
pub(crate) fn plan_err(msg: impl Into<String>) -> DataFusionError {
    DataFusionError::Plan(msg.into())
}

/// A table name: one identifier (optionally `cellar.public.` qualified).
pub(crate) fn table_name(n: &ObjectName) -> DfResult<String> {
    let parts: Vec<String> =
        n.0.iter()
            .map(|p| p.as_ident().map(|i| i.value.clone()).unwrap_or_else(|| p.to_string()))
            .collect();
    match parts.as_slice() {
        [t] => Ok(t.clone()),
        [s, t] if s == super::SCHEMA => Ok(t.clone()),
        [c, s, t] if c == super::CATALOG && s == super::SCHEMA => Ok(t.clone()),
        _ => Err(plan_err(format!(
            "table name '{n}' is not a Cellar table name; use a plain name such as orders"
        ))),
    }
}
