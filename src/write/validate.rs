//! Turning API writes into validated mutations (limits, version window,
//! increments resolved against the row's current state).
//!
//! Invariant: a mutation that comes out of here fits every limit and the
//! version window, so the committer never refuses it; an increment comes
//! out as the PUT of its sum.

use crate::error::{Error, ErrorKind, Result};
use crate::model::api::{RowWrite, UpdateAction};
use crate::model::row::{Action, Mutation, ReadOptions, RowState, visible_cells};
use crate::model::schema::{
    ColumnDef, MAX_COLUMNS_PER_WRITE, MAX_ROW_WRITE_BYTES, MAX_VALUE_BYTES, TableOptions, TableSchema, validate_name,
};
use crate::model::types::{Value, ValueType};

/// A write checked and turned into what the committer logs.
pub(crate) struct Validated {
    pub key: Vec<u8>,
    pub mutation: Mutation,
    /// Where the auto-increment placeholder's 8 bytes are in `key`.
    pub auto_increment: Option<usize>,
    /// Row data the write carries, for capacity units: its key, the values
    /// it puts (an increment's sum included) and the names of the columns
    /// it deletes.
    pub data_bytes: usize,
}

/// The checks that need no read of the row: the key (and where an
/// auto-increment placeholder may be), the condition's filter, and what
/// an UpdateRow with increments may combine.
pub(crate) fn precheck(schema: &TableSchema, w: &RowWrite) -> Result<(Vec<u8>, Option<usize>)> {
    let (key, placeholder) = match w {
        RowWrite::Delete(d) => (schema.encode_pk(&d.primary_key)?, None),
        _ => schema.encode_write_pk(w.primary_key())?,
    };
    let cond = w.condition();
    if let Some(f) = &cond.column {
        f.validate()?;
        if f.page().is_some() {
            return Err(Error::param(
                "a column condition cannot be a column page; give a column filter (column, and, or, not)",
            ));
        }
    }
    if placeholder.is_some() && !cond.is_ignore() {
        return Err(Error::param(format!(
            "a {} with an auto-increment placeholder writes a new row; its condition must be ignore, got {}",
            w.op_name(),
            cond.row.name()
        )));
    }
    if let RowWrite::Update(u) = w {
        for a in &u.actions {
            if let UpdateAction::Increment { name, .. } = a
                && u.actions.iter().filter(|b| b.column() == name).count() > 1
            {
                return Err(Error::param(format!(
                    "column '{name}' has an increment and another action in this UpdateRow; \
                     an increment must be the column's only action"
                )));
            }
        }
    }
    Ok((key, placeholder))
}

/// The row's newest visible INTEGER plus `delta` (a missing column counts
/// as 0), and the version to write it at: the write time, or the version
/// read when that is newer (a concurrent writer's clock read can be ahead
/// of this one's), so the sum is the column's newest version.
fn increment(
    schema: &TableSchema,
    opts: &TableOptions,
    now_ms: i64,
    current: Option<&RowState>,
    name: &str,
    delta: i64,
) -> Result<(i64, i64)> {
    let read = ReadOptions {
        columns_to_get: Some(vec![name.to_string()]),
        ..Default::default()
    };
    let latest = current
        .and_then(|st| visible_cells(st, now_ms, opts, &read))
        .and_then(|cells| cells.into_iter().next())
        .and_then(|(_, mut c)| (!c.is_empty()).then(|| c.swap_remove(0)));
    let version = latest.as_ref().map_or(now_ms, |c| c.version.max(now_ms));
    let base = match latest.map(|c| c.value) {
        None => 0,
        Some(Value::Integer(i)) => i,
        Some(other) => {
            return Err(Error::param(format!(
                "cannot increment column '{name}' of table '{}': its current value is {}, not INTEGER",
                schema.name,
                other.type_name()
            )));
        }
    };
    base.checked_add(delta).map(|sum| (sum, version)).ok_or_else(|| {
        Error::param(format!(
            "incrementing column '{name}' of table '{}' by {delta} overflows: {base} + {delta} is outside the INTEGER (i64) range",
            schema.name
        ))
    })
}

/// Checks a write against the table and returns its encoded key and
/// mutation, with missing versions set to `now_ms`. `current` is the row's
/// state when the write reads it (increments add to it).
pub(crate) fn to_mutation(
    schema: &TableSchema,
    opts: &TableOptions,
    now_ms: i64,
    w: RowWrite,
    current: Option<&RowState>,
) -> Result<Validated> {
    let (key, auto_increment) = precheck(schema, &w)?;
    let mut row_bytes = crate::model::capacity::pk_bytes(w.primary_key());
    // Names of deleted columns: not row data for the size limit, but
    // charged in capacity units.
    let mut deleted_names = 0usize;
    let mut check_cell = |name: &str, value: Option<&Value>, version: Option<i64>| -> Result<()> {
        validate_name("column", name)?;
        if schema.is_pk_column(name) {
            return Err(Error::param(format!(
                "'{name}' is a primary-key column of table '{}'; it cannot be written as an attribute column",
                schema.name
            )));
        }
        if let Some(v) = value {
            if v.data_len() > MAX_VALUE_BYTES && matches!(v, Value::String(_) | Value::Binary(_)) {
                return Err(Error::new(
                    ErrorKind::OutOfRowSizeLimit,
                    format!(
                        "column '{name}' value is {} bytes; a STRING or BINARY value may be at most {MAX_VALUE_BYTES} bytes",
                        v.data_len()
                    ),
                ));
            }
            row_bytes += name.len() + v.data_len();
        } else {
            deleted_names += name.len();
        }
        if let Some(version) = version {
            check_version(schema, opts, now_ms, name, version)?;
        }
        Ok(())
    };
    let count_check = |n: usize| -> Result<()> {
        if n > MAX_COLUMNS_PER_WRITE {
            return Err(Error::new(
                ErrorKind::OutOfColumnCountLimit,
                format!("the write has {n} columns; at most {MAX_COLUMNS_PER_WRITE} are accepted per row"),
            ));
        }
        Ok(())
    };
    let mutation = match w {
        RowWrite::Put(p) => {
            count_check(p.columns.len())?;
            let mut cells: Vec<(String, i64, Value)> = Vec::with_capacity(p.columns.len());
            for c in p.columns {
                let version = c.version.unwrap_or(now_ms);
                check_cell(&c.name, Some(&c.value), Some(version))?;
                cells.push((c.name, version, c.value));
            }
            // Stored by column name (the order segments use), so that a
            // flush encodes the row straight from its cells. Stable: of two
            // cells with the same name and version, the later still wins.
            if !cells.is_sorted_by(|a, b| a.0 <= b.0) {
                cells.sort_by(|a, b| a.0.cmp(&b.0));
            }
            let row_ts = cells.is_empty().then_some(now_ms);
            Mutation::Put { row_ts, cells }
        }
        RowWrite::Update(u) => {
            if !opts.allow_update {
                return Err(Error::param(format!(
                    "table '{}' has allow_update = false: UpdateRow is refused; use PutRow, or set allow_update = true",
                    schema.name
                )));
            }
            if u.actions.is_empty() {
                return Err(Error::param(
                    "UpdateRow needs at least one column action (put, delete or delete_all)",
                ));
            }
            count_check(u.actions.len())?;
            let mut actions = Vec::with_capacity(u.actions.len());
            for a in u.actions {
                actions.push(match a {
                    UpdateAction::Put { name, value, version } => {
                        let version = version.unwrap_or(now_ms);
                        check_cell(&name, Some(&value), Some(version))?;
                        Action::Put {
                            column: name,
                            version,
                            value,
                        }
                    }
                    UpdateAction::DeleteVersion { name, version } => {
                        check_cell(&name, None, None)?;
                        Action::DeleteVersion { column: name, version }
                    }
                    UpdateAction::DeleteAll { name } => {
                        check_cell(&name, None, None)?;
                        Action::DeleteAll { column: name }
                    }
                    UpdateAction::Increment { name, delta } => {
                        check_cell(&name, Some(&Value::Integer(0)), Some(now_ms))?;
                        let (sum, version) = increment(schema, opts, now_ms, current, &name, delta)?;
                        Action::Put {
                            column: name,
                            version,
                            value: Value::Integer(sum),
                        }
                    }
                });
            }
            Mutation::Update { actions }
        }
        RowWrite::Delete(_) => Mutation::Delete,
    };
    if row_bytes > MAX_ROW_WRITE_BYTES {
        return Err(Error::new(
            ErrorKind::OutOfRowSizeLimit,
            format!("the row write is {row_bytes} bytes; at most {MAX_ROW_WRITE_BYTES} are accepted"),
        ));
    }
    Ok(Validated {
        key,
        mutation,
        auto_increment,
        data_bytes: row_bytes + deleted_names,
    })
}

fn check_version(schema: &TableSchema, opts: &TableOptions, now_ms: i64, column: &str, version: i64) -> Result<()> {
    let (lo, hi) = opts.version_window_secs(now_ms);
    let v = version.div_euclid(1000);
    if v < lo || v >= hi {
        let ttl = if opts.ttl_secs == -1 {
            "none".to_string()
        } else {
            format!("{} s", opts.ttl_secs)
        };
        return Err(Error::param(format!(
            "column '{column}' of table '{}': version {version} is outside the accepted window [{}, {}) ms \
             (now {now_ms} ms, max_version_offset {} s, ttl {ttl})",
            schema.name,
            lo.saturating_mul(1000),
            hi.saturating_mul(1000),
            opts.max_version_offset_secs
        )));
    }
    Ok(())
}

/// Refuses a write that gives a predefined column a value of another type
/// (an increment counts as INTEGER). `defined`: the table's predefined
/// columns.
pub(crate) fn check_defined_types(table: &str, defined: &[ColumnDef], w: &RowWrite) -> Result<()> {
    if defined.is_empty() {
        return Ok(());
    }
    let check = |name: &str, got: ValueType| -> Result<()> {
        match defined.iter().find(|d| d.name == name) {
            Some(d) if d.value_type != got => Err(Error::param(format!(
                "column '{name}' of table '{table}' is predefined as {}; this {} writes {} to it",
                d.value_type.as_str().to_uppercase(),
                w.op_name(),
                got.as_str().to_uppercase()
            ))),
            _ => Ok(()),
        }
    };
    match w {
        RowWrite::Put(p) => p.columns.iter().try_for_each(|c| check(&c.name, c.value.value_type())),
        RowWrite::Update(u) => u.actions.iter().try_for_each(|a| match a {
            UpdateAction::Put { name, value, .. } => check(name, value.value_type()),
            UpdateAction::Increment { name, .. } => check(name, ValueType::Integer),
            _ => Ok(()),
        }),
        RowWrite::Delete(_) => Ok(()),
    }
}
