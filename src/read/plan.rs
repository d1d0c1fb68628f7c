//! Scan planning: key ranges cut into pieces by how the table's sources
//! overlap, and the filter interfaces the SQL layer implements.
//!
//! Invariant: pieces are sorted, disjoint and cover the ranges exactly; a
//! `Single` piece is covered by one segment and by no other.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use arrow::array::RecordBatch;

use crate::error::Result;
use crate::model::key::{KeyRange, key_successor};
use crate::model::types::ValueType;
use crate::segment::Segment;
use crate::state::Snapshot;

/// Decides which row groups of a segment can hold rows a query wants, from
/// their statistics (the SQL layer implements it with the query's
/// non-key predicates). Must be conservative: `false` only when no row of
/// the group can match.
pub(crate) trait RowGroupFilter: Send + Sync {
    /// Per group of `groups` (row-group indices of `seg`), whether to read it.
    fn keep(&self, seg: &SegmentStats<'_>, groups: &[usize]) -> Vec<bool>;

    /// The columns its predicates read, when known: a row of a group it
    /// ruled out can match only once a write changed one of them.
    fn columns(&self) -> Option<Vec<String>> {
        None
    }

    /// Per group of `groups` (row groups of `seg`), the rows that can hold
    /// a match, from page statistics: ascending, disjoint ranges of the
    /// group's rows; `None` when nothing is known (every row may).
    /// Conservative like [`RowGroupFilter::keep`].
    fn keep_rows(&self, _seg: &SegmentStats<'_>, groups: &[usize]) -> Vec<Option<Vec<std::ops::Range<usize>>>> {
        vec![None; groups.len()]
    }
}

/// What the statistics pruning of a scan's segment pieces saved, counted
/// as each piece opens (only pieces read with a [`RowGroupFilter`]).
#[derive(Debug, Default)]
pub(crate) struct ScanCounters {
    /// Row groups in the pieces' key ranges.
    pub row_groups: AtomicU64,
    /// Of those, the groups no row is read from.
    pub row_groups_pruned: AtomicU64,
    /// Pages of the leaves read that hold a row of the key ranges.
    pub pages: AtomicU64,
    /// Of those, the pages read (the rest were ruled out).
    pub pages_read: AtomicU64,
}

/// The rows in both `a` and `b` (each ascending and disjoint), ascending
/// and disjoint.
pub(crate) fn intersect_ranges(
    a: &[std::ops::Range<usize>],
    b: &[std::ops::Range<usize>],
) -> Vec<std::ops::Range<usize>> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let (start, end) = (a[i].start.max(b[j].start), a[i].end.min(b[j].end));
        if start < end {
            out.push(start..end);
        }
        if a[i].end < b[j].end {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// What a [`RowGroupFilter`] sees of one segment: its Parquet metadata, and
/// which leaf column holds a SQL column's values (the layout stays here).
pub(crate) struct SegmentStats<'a> {
    seg: &'a Segment,
    md: &'a parquet::file::metadata::ParquetMetaData,
}

impl<'a> SegmentStats<'a> {
    pub(super) fn new(seg: &'a Segment, md: &'a parquet::file::metadata::ParquetMetaData) -> Self {
        SegmentStats { seg, md }
    }

    /// The segment's Parquet metadata (row groups and their statistics).
    pub fn metadata(&self) -> &'a parquet::file::metadata::ParquetMetaData {
        self.md
    }

    /// The leaf of key column `name`.
    pub fn key_leaf(&self, name: &str) -> Option<usize> {
        self.leaf(&[name])
    }

    /// The leaf holding attribute column `name`'s values of type `ty`, when
    /// every value of the column in this segment has that type (otherwise
    /// the leaf's statistics say nothing about the column as SQL shows it)
    /// and, for doubles, the file proves none is NaN (statistics leave NaN
    /// out).
    pub fn value_leaf(&self, name: &str, ty: ValueType) -> Option<usize> {
        let (bit, child, _) = &crate::segment::format::VALUE_CHILDREN[ty.index()];
        let types = self.seg.meta.columns.iter().find(|(n, _)| n == name).map(|(_, t)| *t)?;
        if types.0 != *bit {
            return None;
        }
        if ty == ValueType::Double && !crate::segment::format::doubles_without_nan(self.md, name) {
            return None;
        }
        self.leaf(&[name, child])
    }

    fn leaf(&self, path: &[&str]) -> Option<usize> {
        let descr = self.md.file_metadata().schema_descr();
        (0..descr.num_columns()).find(|i| {
            let column = descr.column(*i);
            let parts = column.path().parts();
            parts.len() == path.len() && parts.iter().zip(path).all(|(a, b)| a == b)
        })
    }
}

/// Evaluates a query's non-key predicates on rows the scan produces (the
/// SQL layer implements it). A scan that copies a batch anyway (to drop
/// replaced or invisible rows, or to splice memtable rows in) keeps only
/// the rows that can match, so it copies less. Must be conservative: false
/// only for rows that cannot match; the query still filters afterwards.
pub(crate) trait RowFilter: Send + Sync {
    fn matches(&self, batch: &RecordBatch) -> Result<arrow::buffer::BooleanBuffer>;

    /// The columns it reads, when known.
    fn columns(&self) -> Option<Vec<String>> {
        None
    }
}

/// A key range to scan; `point` when it is exactly one full key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScanRange {
    pub range: KeyRange,
    pub point: bool,
}

impl ScanRange {
    pub fn point(key: Vec<u8>) -> Self {
        ScanRange {
            range: KeyRange::point(&key),
            point: true,
        }
    }
}

pub(super) enum ScanPiece {
    Point(Vec<u8>),
    Single { seg: Arc<Segment>, range: KeyRange },
    Merge(KeyRange),
}

/// Cuts ranges (sorted, disjoint) into pieces by segment overlap, kept
/// to the snapshot's partition.
pub(super) fn plan_pieces(snap: &Snapshot, ranges: &[ScanRange]) -> Vec<ScanPiece> {
    let mut out = Vec::new();
    for r in ranges {
        if r.point {
            if snap.range.contains(&r.range.lo) {
                out.push(ScanPiece::Point(r.range.lo.clone()));
            }
            continue;
        }
        let clipped = r.range.intersect(&snap.range);
        let r = &ScanRange {
            range: clipped,
            point: false,
        };
        if r.range.is_empty() {
            continue;
        }
        let mut segs: Vec<&Arc<Segment>> = snap
            .segments
            .iter()
            .filter(|s| r.range.overlaps(&s.min_key, &s.max_key))
            .collect();
        segs.sort_by(|a, b| a.min_key.cmp(&b.min_key));
        // Groups of transitively overlapping segments, in key order.
        // (min key, max key, members)
        type Group<'a> = (Vec<u8>, Vec<u8>, Vec<&'a Arc<Segment>>);
        let mut groups: Vec<Group> = Vec::new();
        for s in segs {
            match groups.last_mut() {
                Some((_, max, members)) if s.min_key <= *max => {
                    if s.max_key > *max {
                        *max = s.max_key.clone();
                    }
                    members.push(s);
                }
                _ => groups.push((s.min_key.clone(), s.max_key.clone(), vec![s])),
            }
        }
        let mut cursor = r.range.lo.clone();
        let clip_hi = |h: Vec<u8>| match &r.range.hi {
            Some(rh) if *rh < h => rh.clone(),
            _ => h,
        };
        for (min, max, members) in groups {
            if min > cursor {
                out.push(ScanPiece::Merge(KeyRange {
                    lo: cursor.clone(),
                    hi: Some(clip_hi(min.clone())),
                }));
            }
            let lo = if min > cursor { min } else { cursor.clone() };
            let hi = clip_hi(key_successor(&max));
            let range = KeyRange {
                lo,
                hi: Some(hi.clone()),
            };
            if members.len() == 1 {
                out.push(ScanPiece::Single {
                    seg: members[0].clone(),
                    range,
                });
            } else {
                out.push(ScanPiece::Merge(range));
            }
            cursor = hi;
        }
        let tail = KeyRange {
            lo: cursor,
            hi: r.range.hi.clone(),
        };
        if !tail.is_empty() {
            out.push(ScanPiece::Merge(tail));
        }
    }
    out
}
