//! SQL predicates on primary-key columns turned into key ranges.
//!
//! Conjuncts of the WHERE clause that constrain one PK column with
//! literals (`=`, `IN`, `<`, `<=`, `>`, `>=`, `BETWEEN`, an `OR` of
//! equalities) are collected per column. Walking the key columns in order,
//! equality sets extend the key prefixes (up to [`MAX_RANGES`] ranges) and
//! the first column with a range (or with no constraint) ends the walk.
//! Conjuncts used up this way are exact: the scan returns precisely the
//! rows they select, so DataFusion drops them. The others stay for
//! DataFusion to evaluate.
//!
//! Invariant: the ranges cover every row the predicate can match; a
//! conjunct counts as fully encoded only when the ranges hold exactly its
//! rows.

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};

use crate::model::key::{self, KeyRange};
use crate::model::schema::TableSchema;
use crate::model::types::{PkType, PkValue};
use crate::read::ScanRange;

/// Most key ranges one scan expands to (IN lists multiply).
pub(crate) const MAX_RANGES: usize = 4096;

#[derive(Debug, Clone, PartialEq)]
enum Constraint {
    /// One of these values (sorted, deduplicated).
    Points(Vec<PkValue>),
    /// Between optional bounds (value, inclusive).
    Interval {
        lo: Option<(PkValue, bool)>,
        hi: Option<(PkValue, bool)>,
    },
}

/// The key ranges a scan needs and which filters they make exact.
#[derive(Debug, Clone)]
pub(crate) struct KeyPlan {
    /// Sorted, disjoint.
    pub ranges: Vec<ScanRange>,
    /// Per filter: true when the ranges apply it exactly.
    pub exact: Vec<bool>,
    /// Human-readable key conditions, for EXPLAIN.
    pub description: String,
}

impl KeyPlan {
    /// What each filter gets from a scan with these ranges: `Exact` where
    /// the ranges apply it, `otherwise` for the rest.
    pub fn support(&self, otherwise: TableProviderFilterPushDown) -> Vec<TableProviderFilterPushDown> {
        self.exact
            .iter()
            .map(|e| {
                if *e {
                    TableProviderFilterPushDown::Exact
                } else {
                    otherwise.clone()
                }
            })
            .collect()
    }
}

/// The PK column and constraint one conjunct expresses, if it is one.
fn conjunct(schema: &TableSchema, e: &Expr) -> Option<(usize, Constraint)> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            if *op == Operator::Or {
                let (a, ca) = conjunct(schema, left)?;
                let (b, cb) = conjunct(schema, right)?;
                return match (ca, cb) {
                    (Constraint::Points(mut x), Constraint::Points(y)) if a == b => {
                        x.extend(y);
                        x.sort();
                        x.dedup();
                        Some((a, Constraint::Points(x)))
                    }
                    _ => None,
                };
            }
            let (col, lit, op) = match (pk_column(schema, left), pk_column(schema, right)) {
                (Some(c), None) => (c, literal(schema, c, right)?, *op),
                (None, Some(c)) => (c, literal(schema, c, left)?, op.swap()?),
                _ => return None,
            };
            let c = match op {
                Operator::Eq => Constraint::Points(vec![lit]),
                Operator::Lt => Constraint::Interval {
                    lo: None,
                    hi: Some((lit, false)),
                },
                Operator::LtEq => Constraint::Interval {
                    lo: None,
                    hi: Some((lit, true)),
                },
                Operator::Gt => Constraint::Interval {
                    lo: Some((lit, false)),
                    hi: None,
                },
                Operator::GtEq => Constraint::Interval {
                    lo: Some((lit, true)),
                    hi: None,
                },
                _ => return None,
            };
            Some((col, c))
        }
        Expr::InList(list) if !list.negated => {
            let col = pk_column(schema, &list.expr)?;
            let mut vals = list
                .list
                .iter()
                .map(|e| literal(schema, col, e))
                .collect::<Option<Vec<_>>>()?;
            vals.sort();
            vals.dedup();
            Some((col, Constraint::Points(vals)))
        }
        Expr::Between(b) if !b.negated => {
            let col = pk_column(schema, &b.expr)?;
            let lo = literal(schema, col, &b.low)?;
            let hi = literal(schema, col, &b.high)?;
            Some((
                col,
                Constraint::Interval {
                    lo: Some((lo, true)),
                    hi: Some((hi, true)),
                },
            ))
        }
        _ => None,
    }
}

/// The PK column index `e` names (through casts between string types).
fn pk_column(schema: &TableSchema, e: &Expr) -> Option<usize> {
    match e {
        Expr::Column(c) => schema.primary_key.iter().position(|p| p.name == c.name),
        Expr::Cast(c) => {
            let i = pk_column(schema, &c.expr)?;
            let ok = match schema.primary_key[i].pk_type {
                PkType::String => c.field.data_type().is_string(),
                PkType::Integer => *c.field.data_type() == datafusion::arrow::datatypes::DataType::Int64,
                PkType::Binary => matches!(
                    c.field.data_type(),
                    datafusion::arrow::datatypes::DataType::Binary
                        | datafusion::arrow::datatypes::DataType::LargeBinary
                        | datafusion::arrow::datatypes::DataType::BinaryView
                ),
            };
            ok.then_some(i)
        }
        _ => None,
    }
}

/// A literal of the PK column's type.
fn literal(schema: &TableSchema, col: usize, e: &Expr) -> Option<PkValue> {
    let v = match e {
        Expr::Literal(v, _) => v,
        Expr::Cast(c) => return literal(schema, col, &c.expr),
        _ => return None,
    };
    let t = schema.primary_key[col].pk_type;
    match (t, v) {
        (PkType::Integer, ScalarValue::Int64(Some(x))) => Some(PkValue::Integer(*x)),
        (PkType::Integer, ScalarValue::Int32(Some(x))) => Some(PkValue::Integer(*x as i64)),
        (PkType::Integer, ScalarValue::Int16(Some(x))) => Some(PkValue::Integer(*x as i64)),
        (PkType::Integer, ScalarValue::Int8(Some(x))) => Some(PkValue::Integer(*x as i64)),
        (PkType::Integer, ScalarValue::UInt32(Some(x))) => Some(PkValue::Integer(*x as i64)),
        (PkType::Integer, ScalarValue::UInt16(Some(x))) => Some(PkValue::Integer(*x as i64)),
        (PkType::Integer, ScalarValue::UInt8(Some(x))) => Some(PkValue::Integer(*x as i64)),
        (PkType::Integer, ScalarValue::UInt64(Some(x))) => i64::try_from(*x).ok().map(PkValue::Integer),
        (PkType::String, ScalarValue::Utf8(Some(s)))
        | (PkType::String, ScalarValue::LargeUtf8(Some(s)))
        | (PkType::String, ScalarValue::Utf8View(Some(s))) => Some(PkValue::String(s.clone())),
        (PkType::Binary, ScalarValue::Binary(Some(b)))
        | (PkType::Binary, ScalarValue::LargeBinary(Some(b)))
        | (PkType::Binary, ScalarValue::BinaryView(Some(b))) => Some(PkValue::Binary(b.clone())),
        _ => None,
    }
}

fn intersect(a: Constraint, b: Constraint) -> Constraint {
    use Constraint::*;
    match (a, b) {
        (Points(x), Points(y)) => Points(x.into_iter().filter(|v| y.contains(v)).collect()),
        (Points(x), i @ Interval { .. }) | (i @ Interval { .. }, Points(x)) => {
            Points(x.into_iter().filter(|v| admits(&i, v)).collect())
        }
        (Interval { lo: l1, hi: h1 }, Interval { lo: l2, hi: h2 }) => {
            let lo = match (l1, l2) {
                (Some(a), Some(b)) => Some(if a.0 > b.0 || (a.0 == b.0 && !a.1) { a } else { b }),
                (a, b) => a.or(b),
            };
            let hi = match (h1, h2) {
                (Some(a), Some(b)) => Some(if a.0 < b.0 || (a.0 == b.0 && !a.1) { a } else { b }),
                (a, b) => a.or(b),
            };
            Interval { lo, hi }
        }
    }
}

fn admits(c: &Constraint, v: &PkValue) -> bool {
    match c {
        Constraint::Points(p) => p.contains(v),
        Constraint::Interval { lo, hi } => {
            lo.as_ref().is_none_or(|(l, incl)| v > l || (*incl && v == l))
                && hi.as_ref().is_none_or(|(h, incl)| v < h || (*incl && v == h))
        }
    }
}

fn render(v: &PkValue) -> String {
    match v {
        PkValue::Integer(i) => i.to_string(),
        PkValue::String(s) => format!("'{}'", s.replace('\'', "''")),
        PkValue::Binary(b) => format!("X'{}'", b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
        PkValue::AutoIncrement => "AUTO_INCREMENT".to_string(),
    }
}

/// Works out the key ranges for `filters` (conjuncts) on `schema`.
pub(crate) fn plan(schema: &TableSchema, filters: &[&Expr]) -> KeyPlan {
    let npk = schema.primary_key.len();
    let parsed: Vec<Option<(usize, Constraint)>> = filters.iter().map(|f| conjunct(schema, f)).collect();
    let mut per_col: Vec<Option<Constraint>> = vec![None; npk];
    for (col, c) in parsed.iter().flatten() {
        per_col[*col] = Some(match per_col[*col].take() {
            Some(prev) => intersect(prev, c.clone()),
            None => c.clone(),
        });
    }
    let mut prefixes: Vec<Vec<u8>> = vec![Vec::new()];
    let mut used = 0;
    let mut desc = Vec::new();
    let mut ranges: Option<Vec<KeyRange>> = None;
    for (i, c) in per_col.iter().enumerate() {
        let name = &schema.primary_key[i].name;
        match c {
            Some(Constraint::Points(ps)) if prefixes.len().saturating_mul(ps.len()) <= MAX_RANGES => {
                let mut next = Vec::with_capacity(prefixes.len() * ps.len());
                for p in &prefixes {
                    for v in ps {
                        let mut k = p.clone();
                        key::encode_value(&mut k, v);
                        next.push(k);
                    }
                }
                prefixes = next;
                used = i + 1;
                desc.push(match ps.as_slice() {
                    [v] => format!("{name} = {}", render(v)),
                    _ => format!("{name} IN ({})", ps.iter().map(render).collect::<Vec<_>>().join(", ")),
                });
            }
            Some(Constraint::Interval { lo, hi }) => {
                let mut out = Vec::new();
                for p in &prefixes {
                    let start = match lo {
                        Some((v, incl)) => {
                            let mut k = p.clone();
                            key::encode_value(&mut k, v);
                            if *incl { Some(k) } else { key::prefix_successor(&k) }
                        }
                        None => Some(p.clone()),
                    };
                    let end = match hi {
                        Some((v, incl)) => {
                            let mut k = p.clone();
                            key::encode_value(&mut k, v);
                            if *incl { key::prefix_successor(&k) } else { Some(k) }
                        }
                        None => key::prefix_successor(p).filter(|_| !p.is_empty()),
                    };
                    if let Some(lo) = start {
                        out.push(KeyRange { lo, hi: end });
                    }
                }
                used = i + 1;
                if let Some((v, incl)) = lo {
                    desc.push(format!("{name} {} {}", if *incl { ">=" } else { ">" }, render(v)));
                }
                if let Some((v, incl)) = hi {
                    desc.push(format!("{name} {} {}", if *incl { "<=" } else { "<" }, render(v)));
                }
                ranges = Some(out);
                break;
            }
            _ => break,
        }
    }
    let full_points = ranges.is_none() && used == npk;
    let mut ranges: Vec<ScanRange> = match ranges {
        Some(r) => r.into_iter().map(|range| ScanRange { range, point: false }).collect(),
        None if full_points => prefixes.into_iter().map(ScanRange::point).collect(),
        None => prefixes
            .into_iter()
            .map(|p| ScanRange {
                range: KeyRange {
                    hi: key::prefix_successor(&p).filter(|_| !p.is_empty()),
                    lo: p,
                },
                point: false,
            })
            .collect(),
    };
    ranges.retain(|r| !r.range.is_empty());
    ranges.sort_by(|a, b| a.range.lo.cmp(&b.range.lo));
    let exact = parsed
        .iter()
        .map(|p| p.as_ref().is_some_and(|(col, _)| *col < used))
        .collect();
    let description = if desc.is_empty() {
        "all".to_string()
    } else if full_points {
        format!("point get {}", desc.join(" AND "))
    } else {
        desc.join(" AND ")
    };
    KeyPlan {
        ranges,
        exact,
        description,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{col, lit};

    fn schema() -> TableSchema {
        TableSchema::new("t").pk("a", PkType::Integer).pk("b", PkType::String)
    }

    fn key(a: i64, b: &str) -> Vec<u8> {
        schema()
            .encode_pk(&crate::PrimaryKey::new().with("a", a).with("b", b))
            .unwrap()
    }

    fn contains(p: &KeyPlan, k: &[u8]) -> bool {
        p.ranges.iter().any(|r| r.range.contains(k))
    }

    #[test]
    fn equality_on_every_column_is_a_point_get() {
        let f = [col("a").eq(lit(5i64)), col("b").eq(lit("x"))];
        let p = plan(&schema(), &f.iter().collect::<Vec<_>>());
        assert_eq!(p.exact, vec![true, true]);
        assert_eq!(p.ranges, vec![ScanRange::point(key(5, "x"))]);
        assert!(p.description.starts_with("point get"));
    }

    #[test]
    fn ranges_follow_the_leading_column() {
        let f = [col("a").gt(lit(3i64)), col("b").eq(lit("x"))];
        let p = plan(&schema(), &f.iter().collect::<Vec<_>>());
        assert_eq!(p.exact, vec![true, false]);
        assert!(!contains(&p, &key(3, "zzz")) && contains(&p, &key(4, "")) && contains(&p, &key(i64::MAX, "x")));
        let f = [
            col("a").in_list(vec![lit(1i64), lit(7i64)], false),
            col("b").lt_eq(lit("m")),
        ];
        let p = plan(&schema(), &f.iter().collect::<Vec<_>>());
        assert_eq!(p.exact, vec![true, true]);
        assert!(contains(&p, &key(1, "m")) && contains(&p, &key(7, "a")) && !contains(&p, &key(7, "ma")));
        assert!(!contains(&p, &key(2, "a")));
        let f = [col("a").between(lit(2i64), lit(4i64)), col("a").lt(lit(4i64))];
        let p = plan(&schema(), &f.iter().collect::<Vec<_>>());
        assert!(contains(&p, &key(2, "")) && contains(&p, &key(3, "z")) && !contains(&p, &key(4, "")));
    }

    #[test]
    fn other_predicates_stay_inexact() {
        let f = [col("b").eq(lit("x")), col("c").gt(lit(1i64))];
        let p = plan(&schema(), &f.iter().collect::<Vec<_>>());
        assert_eq!(p.exact, vec![false, false]);
        assert_eq!(p.description, "all");
        assert_eq!(p.ranges.len(), 1);
        let f = [col("a").eq(lit(1i64)), col("a").eq(lit(2i64))];
        let p = plan(&schema(), &f.iter().collect::<Vec<_>>());
        assert!(p.ranges.is_empty());
    }
}
