//! Row filters (Tablestore's SingleColumnValueFilter, the composite
//! NOT / AND / OR, and ColumnPaginationFilter), evaluated inside the engine
//! after version visibility, before a row is returned.
//!
//! Invariants: a column condition sees the column's versions a read would
//! return (TTL, the table's `max_versions`, the read's time range and
//! version limit applied), whatever `columns_to_get` says; a value of
//! another type than the condition's never matches (for every operator,
//! `!=` too: Cellar's choice, as Tablestore's condition checks do); a
//! column page cuts the columns the read returns, and only at the top of a
//! filter. See `docs/model.md`, "Filters".

use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::model::types::Value;

/// A comparison of a [`ColumnCondition`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    /// `=`
    Eq,
    /// `!=`
    Ne,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
}

impl CompareOp {
    /// The operator's symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            CompareOp::Eq => "=",
            CompareOp::Ne => "!=",
            CompareOp::Gt => ">",
            CompareOp::Ge => ">=",
            CompareOp::Lt => "<",
            CompareOp::Le => "<=",
        }
    }

    /// The operator of `= != > >= < <=`.
    pub fn parse(s: &str) -> Result<CompareOp> {
        Ok(match s {
            "=" | "==" => CompareOp::Eq,
            "!=" | "<>" => CompareOp::Ne,
            ">" => CompareOp::Gt,
            ">=" => CompareOp::Ge,
            "<" => CompareOp::Lt,
            "<=" => CompareOp::Le,
            other => {
                return Err(Error::param(format!(
                    "'{other}' is not a filter operator; accepted: =, !=, >, >=, <, <="
                )));
            }
        })
    }

    fn holds(self, o: Ordering) -> bool {
        match self {
            CompareOp::Eq => o == Ordering::Equal,
            CompareOp::Ne => o != Ordering::Equal,
            CompareOp::Gt => o == Ordering::Greater,
            CompareOp::Ge => o != Ordering::Less,
            CompareOp::Lt => o == Ordering::Less,
            CompareOp::Le => o != Ordering::Greater,
        }
    }
}

/// SingleColumnValueFilter: `column op value`.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnCondition {
    /// The attribute column compared.
    pub column: String,
    /// How.
    pub op: CompareOp,
    /// With what.
    pub value: Value,
    /// Whether a row without the column passes. Defaults to true.
    pub pass_if_missing: bool,
    /// Compare the newest version only (true, the default), or pass when
    /// any version matches.
    pub latest_version_only: bool,
}

impl ColumnCondition {
    /// `column op value`, with the defaults (pass if missing, newest
    /// version only).
    pub fn new(column: impl Into<String>, op: CompareOp, value: impl Into<Value>) -> Self {
        ColumnCondition {
            column: column.into(),
            op,
            value: value.into(),
            pass_if_missing: true,
            latest_version_only: true,
        }
    }
}

/// A row filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// SingleColumnValueFilter.
    Column(ColumnCondition),
    /// Passes when the child does not.
    Not(Box<Filter>),
    /// Passes when every child (two or more) does.
    And(Vec<Filter>),
    /// Passes when any child (two or more) does.
    Or(Vec<Filter>),
    /// ColumnPaginationFilter: of the columns the read returns (by name),
    /// skip `offset` and return at most `limit`. Only at the top.
    ColumnPage {
        /// Columns skipped.
        offset: usize,
        /// Columns returned at most.
        limit: usize,
    },
}

/// `amount > 10`, `(a = 1 AND NOT b < 2)`, `column page offset 0 limit 10`;
/// non-default options are named after the condition.
impl std::fmt::Display for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |f: &mut std::fmt::Formatter<'_>, fs: &[Filter], op: &str| -> std::fmt::Result {
            f.write_str("(")?;
            for (i, c) in fs.iter().enumerate() {
                if i > 0 {
                    write!(f, " {op} ")?;
                }
                write!(f, "{c}")?;
            }
            f.write_str(")")
        };
        match self {
            Filter::Column(c) => {
                write!(f, "{} {} ", c.column, c.op.symbol())?;
                match &c.value {
                    Value::Integer(x) => write!(f, "{x}")?,
                    Value::Double(x) => write!(f, "{x:?}")?,
                    Value::Boolean(x) => write!(f, "{x}")?,
                    Value::String(s) => write!(f, "{s:?}")?,
                    Value::Binary(b) => write!(f, "0x{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>())?,
                }
                if !c.pass_if_missing {
                    f.write_str(" [fail if missing]")?;
                }
                if !c.latest_version_only {
                    f.write_str(" [any version]")?;
                }
                Ok(())
            }
            Filter::Not(c) => write!(f, "NOT {c}"),
            Filter::And(fs) => list(f, fs, "AND"),
            Filter::Or(fs) => list(f, fs, "OR"),
            Filter::ColumnPage { offset, limit } => write!(f, "column page offset {offset} limit {limit}"),
        }
    }
}

fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Integer(x), Value::Integer(y)) => Some(x.cmp(y)),
        (Value::Double(x), Value::Double(y)) => x.partial_cmp(y),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Binary(x), Value::Binary(y)) => Some(x.cmp(y)),
        (Value::Boolean(x), Value::Boolean(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

impl Filter {
    /// Checks the filter's shape: AND / OR with two or more children, a
    /// column page only at the top and with a limit of at least 1.
    pub fn validate(&self) -> Result<()> {
        self.check(true)
    }

    fn check(&self, top: bool) -> Result<()> {
        match self {
            Filter::Column(c) => crate::model::schema::validate_name("filter column", &c.column),
            Filter::Not(f) => f.check(false),
            Filter::And(fs) | Filter::Or(fs) => {
                if fs.len() < 2 {
                    return Err(Error::param(format!(
                        "an AND / OR filter needs two or more conditions, got {}",
                        fs.len()
                    )));
                }
                fs.iter().try_for_each(|f| f.check(false))
            }
            Filter::ColumnPage { limit, .. } => {
                if !top {
                    return Err(Error::param(
                        "a column page filter (ColumnPaginationFilter) may not sit inside NOT / AND / OR",
                    ));
                }
                if *limit == 0 {
                    return Err(Error::param("a column page filter needs a limit of at least 1"));
                }
                Ok(())
            }
        }
    }

    /// The columns the filter's conditions read.
    pub(crate) fn columns(&self, out: &mut Vec<String>) {
        match self {
            Filter::Column(c) => out.push(c.column.clone()),
            Filter::Not(f) => f.columns(out),
            Filter::And(fs) | Filter::Or(fs) => fs.iter().for_each(|f| f.columns(out)),
            Filter::ColumnPage { .. } => {}
        }
    }

    /// Whether a row passes; `versions(name)` gives a column's visible
    /// versions, newest first (empty: missing).
    pub(crate) fn passes<'a>(&self, versions: &dyn Fn(&str) -> Vec<&'a Value>) -> bool {
        match self {
            Filter::Column(c) => {
                let vs = versions(&c.column);
                if vs.is_empty() {
                    return c.pass_if_missing;
                }
                let take = if c.latest_version_only { 1 } else { vs.len() };
                vs.iter()
                    .take(take)
                    .any(|v| compare(v, &c.value).is_some_and(|o| c.op.holds(o)))
            }
            Filter::Not(f) => !f.passes(versions),
            Filter::And(fs) => fs.iter().all(|f| f.passes(versions)),
            Filter::Or(fs) => fs.iter().any(|f| f.passes(versions)),
            Filter::ColumnPage { .. } => true,
        }
    }

    /// The column page to cut, if the filter is one.
    pub(crate) fn page(&self) -> Option<(usize, usize)> {
        match self {
            Filter::ColumnPage { offset, limit } => Some((*offset, *limit)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_compare_values_of_their_own_type_only() {
        let row = |name: &str| -> Vec<&'static Value> {
            static A: [Value; 3] = [Value::Integer(5), Value::Integer(1), Value::Integer(9)];
            static S: Value = Value::String(String::new());
            match name {
                "a" => A.iter().collect(),
                "s" => vec![&S],
                _ => vec![],
            }
        };
        let c = |op, v: Value| Filter::Column(ColumnCondition::new("a", op, v));
        assert!(c(CompareOp::Eq, Value::Integer(5)).passes(&row));
        assert!(!c(CompareOp::Gt, Value::Integer(5)).passes(&row));
        assert!(c(CompareOp::Ge, Value::Integer(5)).passes(&row));
        assert!(!c(CompareOp::Ne, Value::Integer(5)).passes(&row));
        // Another type never matches, not even `!=`.
        assert!(!c(CompareOp::Ne, Value::Double(5.0)).passes(&row));
        assert!(!c(CompareOp::Eq, Value::String("5".into())).passes(&row));
        // Any version.
        let mut any = ColumnCondition::new("a", CompareOp::Gt, 8);
        assert!(!Filter::Column(any.clone()).passes(&row));
        any.latest_version_only = false;
        assert!(Filter::Column(any).passes(&row));
        // Missing columns.
        let mut m = ColumnCondition::new("zz", CompareOp::Eq, 1);
        assert!(Filter::Column(m.clone()).passes(&row));
        m.pass_if_missing = false;
        assert!(!Filter::Column(m.clone()).passes(&row));
        let both = Filter::And(vec![
            c(CompareOp::Lt, Value::Integer(6)),
            Filter::Not(Box::new(Filter::Column(m))),
        ]);
        assert!(both.passes(&row));
        assert!(Filter::Or(vec![c(CompareOp::Gt, Value::Integer(6)), both]).passes(&row));
    }

    #[test]
    fn shapes_are_checked() {
        let c = Filter::Column(ColumnCondition::new("a", CompareOp::Eq, 1));
        assert!(Filter::And(vec![c.clone()]).validate().is_err());
        let page = Filter::ColumnPage { offset: 0, limit: 1 };
        assert!(page.validate().is_ok());
        assert!(Filter::Not(Box::new(page)).validate().is_err());
        assert!(Filter::ColumnPage { offset: 0, limit: 0 }.validate().is_err());
    }
}
