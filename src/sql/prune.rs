//! Row-group pruning with the query's non-key predicates: DataFusion's
//! `PruningPredicate` over the Parquet statistics of the wide layout's
//! columns (the typed PK columns, and an attribute's value child when the
//! segment holds only the column's SQL type).
//!
//! Conservative by construction: statistics are offered only where every
//! value of the column in the row group is in that child (mixed-type
//! columns, inexact string bounds and binaries are "unknown"), and values
//! only ever turn to NULL on read (TTL), which no comparison matches.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, StringViewArray};
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use datafusion::physical_optimizer::pruning::PruningPredicate;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::statistics::Statistics;

use crate::model::types::ValueType;
use crate::read::{OutCol, RowGroupFilter, SegmentStats, pk_value_type};

/// The names of the columns an expression reads.
pub(super) fn expr_columns(expr: &Arc<dyn datafusion::physical_expr::PhysicalExpr>) -> Vec<String> {
    datafusion::physical_expr::utils::collect_columns(expr)
        .into_iter()
        .map(|c| c.name().to_string())
        .collect()
}

pub(crate) struct StatsPruner {
    pub predicate: Arc<PruningPredicate>,
    /// Every table column with its SQL type.
    pub columns: Vec<(String, OutCol, ValueType)>,
}

struct SegStats<'a> {
    md: &'a ParquetMetaData,
    groups: &'a [usize],
    leaves: HashMap<&'a str, (usize, ValueType)>,
}

impl SegStats<'_> {
    fn values(&self, column: &Column, min: bool) -> Option<ArrayRef> {
        let (leaf, ty) = *self.leaves.get(column.name.as_str())?;
        let stats = self
            .groups
            .iter()
            .map(|rg| self.md.row_group(*rg).column(leaf).statistics());
        Some(match ty {
            ValueType::Integer => Arc::new(
                stats
                    .map(|s| match s {
                        Some(Statistics::Int64(s)) => bound(s, min),
                        _ => None,
                    })
                    .collect::<Int64Array>(),
            ),
            ValueType::Double => Arc::new(
                stats
                    .map(|s| match s {
                        Some(Statistics::Double(s)) => bound(s, min).filter(|v| !v.is_nan()),
                        _ => None,
                    })
                    .collect::<Float64Array>(),
            ),
            ValueType::String => Arc::new(
                stats
                    .map(|s| match s {
                        Some(Statistics::ByteArray(s)) => {
                            let (v, exact) = if min {
                                (s.min_opt(), s.min_is_exact())
                            } else {
                                (s.max_opt(), s.max_is_exact())
                            };
                            v.filter(|_| exact)
                                .and_then(|v| std::str::from_utf8(v.data()).ok().map(str::to_string))
                        }
                        _ => None,
                    })
                    .collect::<StringViewArray>(),
            ),
            ValueType::Boolean => Arc::new(
                stats
                    .map(|s| match s {
                        Some(Statistics::Boolean(s)) => bound(s, min),
                        _ => None,
                    })
                    .collect::<BooleanArray>(),
            ),
            ValueType::Binary => return None,
        })
    }
}

/// A row group's min or max of a fixed-width column, when recorded.
fn bound<T: Copy>(s: &parquet::file::statistics::ValueStatistics<T>, min: bool) -> Option<T> {
    if min {
        s.min_opt().copied()
    } else {
        s.max_opt().copied()
    }
}

impl PruningStatistics for SegStats<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        self.values(column, true)
    }

    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        self.values(column, false)
    }

    fn num_containers(&self) -> usize {
        self.groups.len()
    }

    fn null_counts(&self, _column: &Column) -> Option<ArrayRef> {
        None
    }

    fn row_counts(&self) -> Option<ArrayRef> {
        None
    }

    fn contained(&self, _column: &Column, _values: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        None
    }
}

impl RowGroupFilter for StatsPruner {
    fn columns(&self) -> Option<Vec<String>> {
        Some(expr_columns(self.predicate.orig_expr()))
    }

    fn keep(&self, seg: &SegmentStats<'_>, groups: &[usize]) -> Vec<bool> {
        let md = seg.metadata();
        let mut leaves = HashMap::new();
        for (name, col, ty) in &self.columns {
            let leaf = match col {
                OutCol::Pk(_) => seg.key_leaf(name),
                OutCol::Attr { .. } => seg.value_leaf(name, *ty),
            };
            if let Some(leaf) = leaf {
                leaves.insert(name.as_str(), (leaf, *ty));
            }
        }
        let stats = SegStats { md, groups, leaves };
        self.predicate
            .prune(&stats)
            .unwrap_or_else(|_| vec![true; groups.len()])
    }
}

/// The SQL type of each output column of a table.
pub(crate) fn column_types(table: &crate::db::table::Table, cols: &[OutCol]) -> Vec<(String, OutCol, ValueType)> {
    cols.iter()
        .map(|c| match c {
            OutCol::Pk(i) => {
                let p = &table.schema().primary_key[*i];
                (p.name.clone(), c.clone(), pk_value_type(p.pk_type))
            }
            OutCol::Attr { name, ty } => (name.clone(), c.clone(), *ty),
        })
        .collect()
}
