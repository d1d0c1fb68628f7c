//! Row-group and page pruning with the query's non-key predicates:
//! DataFusion's `PruningPredicate` over the Parquet statistics of the wide
//! layout's columns (the typed PK columns, and an attribute's value child
//! when the segment holds only the column's SQL type): row groups by their
//! chunk statistics, then, within a row group kept, pages by the column
//! index, with each predicate conjunct that reads one column.
//!
//! Conservative by construction: statistics are offered only where every
//! value of the column in the row group is in that child (mixed-type
//! columns, inexact string bounds and binaries are "unknown"), and values
//! only ever turn to NULL on read (TTL), which no comparison matches.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, StringViewArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use datafusion::physical_expr::{PhysicalExpr, split_conjunction};
use datafusion::physical_optimizer::pruning::{PruningPredicate, PruningPredicateBuilder};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::page_index::column_index::ColumnIndexMetaData;
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
    /// The conjuncts of the predicate that read one column each, for the
    /// pages of that column (pages of different columns cut rows at
    /// different places, so only one-column predicates apply to them).
    pub pages: Vec<(String, Arc<PruningPredicate>)>,
    /// Every table column with its SQL type.
    pub columns: Vec<(String, OutCol, ValueType)>,
}

impl StatsPruner {
    /// The pruner of `predicate` over a table whose columns are `schema`.
    pub fn new(
        predicate: Arc<PruningPredicate>,
        expr: &Arc<dyn PhysicalExpr>,
        schema: &SchemaRef,
        columns: Vec<(String, OutCol, ValueType)>,
    ) -> Self {
        let pages = split_conjunction(expr)
            .into_iter()
            .filter_map(|conjunct| {
                let pp = PruningPredicateBuilder::new()
                    .with_file_schema(schema.clone())
                    .try_build(conjunct.clone())
                    .ok()?;
                let column = pp.required_columns().single_column()?.name().to_string();
                (!pp.always_true()).then(|| (column, Arc::new(pp)))
            })
            .collect();
        StatsPruner {
            predicate,
            pages,
            columns,
        }
    }

    /// The leaf and SQL type of each column whose statistics describe it
    /// in this segment.
    fn leaves<'a>(&'a self, seg: &SegmentStats<'_>) -> Leaves<'a> {
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
        leaves
    }
}

/// What the statistics describe: whole row groups (their chunk
/// statistics), or the pages of one row group (its column index).
enum Containers<'a> {
    Groups(&'a [usize]),
    Pages { rg: usize, pages: usize },
}

/// Leaf and SQL type by column name (see [`StatsPruner::leaves`]).
type Leaves<'a> = HashMap<&'a str, (usize, ValueType)>;

struct SegStats<'a> {
    md: &'a ParquetMetaData,
    containers: Containers<'a>,
    leaves: &'a Leaves<'a>,
}

impl SegStats<'_> {
    fn values(&self, column: &Column, min: bool) -> Option<ArrayRef> {
        let (leaf, ty) = *self.leaves.get(column.name.as_str())?;
        match self.containers {
            Containers::Groups(groups) => self.chunk_values(groups, leaf, ty, min),
            Containers::Pages { rg, .. } => {
                let index = self.md.column_index()?.get(rg)?.get(leaf)?;
                page_values(index, ty, min)
            }
        }
    }

    fn chunk_values(&self, groups: &[usize], leaf: usize, ty: ValueType, min: bool) -> Option<ArrayRef> {
        let stats = groups.iter().map(|rg| self.md.row_group(*rg).column(leaf).statistics());
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

/// The pages' minima or maxima of one column chunk, from its column index
/// (a page of nulls only has none). Segments write the index untruncated
/// (`segment::build`), so string bounds are exact.
fn page_values(index: &ColumnIndexMetaData, ty: ValueType, min: bool) -> Option<ArrayRef> {
    fn pick<'i, T: 'i>(
        min: bool,
        mins: impl Iterator<Item = Option<&'i T>>,
        maxes: impl Iterator<Item = Option<&'i T>>,
    ) -> Vec<Option<&'i T>> {
        if min { mins.collect() } else { maxes.collect() }
    }
    Some(match (ty, index) {
        (ValueType::Integer, ColumnIndexMetaData::INT64(ix)) => Arc::new(
            pick(min, ix.min_values_iter(), ix.max_values_iter())
                .into_iter()
                .map(|v| v.copied())
                .collect::<Int64Array>(),
        ),
        (ValueType::Double, ColumnIndexMetaData::DOUBLE(ix)) => Arc::new(
            pick(min, ix.min_values_iter(), ix.max_values_iter())
                .into_iter()
                .map(|v| v.copied().filter(|v| !v.is_nan()))
                .collect::<Float64Array>(),
        ),
        (ValueType::Boolean, ColumnIndexMetaData::BOOLEAN(ix)) => Arc::new(
            pick(min, ix.min_values_iter(), ix.max_values_iter())
                .into_iter()
                .map(|v| v.copied())
                .collect::<BooleanArray>(),
        ),
        (ValueType::String, ColumnIndexMetaData::BYTE_ARRAY(ix)) => {
            let values: Vec<Option<&[u8]>> = if min {
                ix.min_values_iter().collect()
            } else {
                ix.max_values_iter().collect()
            };
            Arc::new(
                values
                    .into_iter()
                    .map(|v| v.and_then(|v| std::str::from_utf8(v).ok()))
                    .collect::<StringViewArray>(),
            )
        }
        _ => return None,
    })
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
        match self.containers {
            Containers::Groups(groups) => groups.len(),
            Containers::Pages { pages, .. } => pages,
        }
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
        let leaves = self.leaves(seg);
        let stats = SegStats {
            md: seg.metadata(),
            containers: Containers::Groups(groups),
            leaves: &leaves,
        };
        self.predicate
            .prune(&stats)
            .unwrap_or_else(|_| vec![true; groups.len()])
    }

    fn keep_rows(&self, seg: &SegmentStats<'_>, groups: &[usize]) -> Vec<Option<Vec<Range<usize>>>> {
        let md = seg.metadata();
        let leaves = self.leaves(seg);
        groups.iter().map(|&rg| self.group_rows(md, &leaves, rg)).collect()
    }
}

impl StatsPruner {
    /// [`RowGroupFilter::keep_rows`] of one row group.
    fn group_rows(&self, md: &ParquetMetaData, leaves: &Leaves<'_>, rg: usize) -> Option<Vec<Range<usize>>> {
        let rows = md.row_group(rg).num_rows() as usize;
        let mut out: Option<Vec<Range<usize>>> = None;
        for (name, predicate) in &self.pages {
            let Some(&(leaf, _)) = leaves.get(name.as_str()) else {
                continue;
            };
            let index = md.column_index().and_then(|c| c.get(rg)).and_then(|c| c.get(leaf));
            let locations = md
                .offset_index()
                .and_then(|o| o.get(rg))
                .and_then(|o| o.get(leaf))
                .map(|o| o.page_locations());
            let (Some(index), Some(locations)) = (index, locations) else {
                continue;
            };
            if matches!(index, ColumnIndexMetaData::NONE) || index.num_pages() as usize != locations.len() {
                continue;
            }
            let stats = SegStats {
                md,
                containers: Containers::Pages {
                    rg,
                    pages: locations.len(),
                },
                leaves,
            };
            let Ok(keep) = predicate.prune(&stats) else {
                continue;
            };
            let mut ranges: Vec<Range<usize>> = Vec::new();
            for (i, page) in locations.iter().enumerate() {
                if !keep[i] {
                    continue;
                }
                let start = page.first_row_index as usize;
                let end = locations.get(i + 1).map_or(rows, |p| p.first_row_index as usize);
                match ranges.last_mut() {
                    Some(last) if last.end == start => last.end = end,
                    _ => ranges.push(start..end),
                }
            }
            out = Some(match out {
                None => ranges,
                Some(prev) => crate::read::intersect_ranges(&prev, &ranges),
            });
        }
        out
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
