//! Write conditions: row existence and a column condition, checked against
//! the row's current visible state.
//!
//! Invariant: the state given is the row as every write sequenced before
//! the checked one leaves it, or as of a snapshot the committer then
//! confirms unchanged (see `checked`), so a condition that passes here
//! holds at the moment the write commits.

use crate::error::{Error, ErrorKind, Result};
use crate::model::api::{RowExistence, RowWrite};
use crate::model::row::{ReadOptions, RowState, visible_cells};
use crate::model::schema::{TableOptions, TableSchema};

/// Checks `w`'s condition against the row's state at `now_ms` (TTL and the
/// table's `max_versions` applied); `ConditionCheckFail` names the table,
/// the key and what failed.
pub(crate) fn check(
    schema: &TableSchema,
    opts: &TableOptions,
    now_ms: i64,
    w: &RowWrite,
    state: Option<&RowState>,
) -> Result<()> {
    let cond = w.condition();
    if cond.is_ignore() {
        return Ok(());
    }
    let all_versions = ReadOptions {
        max_versions: Some(opts.max_versions),
        ..Default::default()
    };
    let exists = state.is_some_and(|st| visible_cells(st, now_ms, opts, &all_versions).is_some());
    let fail = |what: String| {
        Err(Error::new(
            ErrorKind::ConditionCheckFail,
            format!(
                "condition check failed: {} of table '{}' at key {}: {what}; nothing was changed",
                w.op_name(),
                schema.name,
                w.primary_key()
            ),
        ))
    };
    match cond.row {
        RowExistence::ExpectExist if !exists => return fail("expect_exist, but the row does not exist".into()),
        RowExistence::ExpectNotExist if exists => return fail("expect_not_exist, but the row exists".into()),
        _ => {}
    }
    if let Some(f) = &cond.column {
        if !exists {
            return fail(format!(
                "the row does not exist, so it cannot pass the column condition {f}"
            ));
        }
        let filtered = ReadOptions {
            filter: Some(f.clone()),
            ..all_versions
        };
        if state.is_none_or(|st| visible_cells(st, now_ms, opts, &filtered).is_none()) {
            return fail(format!("the row does not pass the column condition {f}"));
        }
    }
    Ok(())
}
