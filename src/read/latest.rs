//! Columnar scans of the latest visible version of each row, for SQL.
//!
//! A scan range is cut into pieces by how the table's sources overlap:
//! - **single**: one segment covers the piece and no other segment does. Its
//!   rank-0 rows already are the latest version of each row, so the scan
//!   reads them column by column straight from Parquet (only the projected
//!   attribute children, plus `__rank`, `__row` and `__max_ts` for
//!   visibility) and applies the TTL with Arrow kernels. Memtable keys that
//!   fall into the piece are spliced in by position from the memtables'
//!   [`Overlay`]s of the segment when there are (built once per memtable
//!   state by the first large scan); otherwise by comparing them with each
//!   batch's key columns: a key only in the memtable, or replaced there
//!   (PutRow / DeleteRow), needs nothing from the segment; a memtable
//!   UpdateRow over a segment key reads that key's full state.
//! - **merge**: several segments overlap (not yet compacted), or there is no
//!   segment at all (memtables only): a row-by-row k-way merge, the same
//!   one GetRange uses.
//! - **point**: a full primary key: one GetRow.
//!
//! So a compacted table scans at Parquet speed, and writes since the last
//! flush cost in proportion to their number, not to the table's size.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

use super::arrow::{BATCH_ROWS, OutCol};
use super::context::{ScanCtx, ScanShared};
use super::merge_scan::MergeScan;
use super::overlay_rows::{OverlayRows, gap_rows};
use super::plan::{RowFilter, RowGroupFilter, ScanCounters, ScanPiece, ScanRange, plan_pieces};
use super::splice::SingleReader;
use crate::error::Result;
use crate::state::{Snapshot, TableInner};

/// A scan of the latest visible version of each row over some key ranges,
/// producing Arrow batches with the given columns.
pub(crate) struct LatestScan {
    cx: ScanCtx,
    pieces: VecDeque<ScanPiece>,
    current: Option<Current>,
    remaining: usize,
    filter: Option<Arc<dyn RowGroupFilter>>,
}

enum Current {
    Single(Box<SingleReader>),
    /// A piece no segment overlaps, from its gap's memtable overlay.
    Gap(Box<OverlayRows>),
    Merge(MergeScan),
}

/// The attribute columns a scan reads from overlay rows: those it outputs,
/// and those its row-group and row filters name (a laid-over update is
/// judged by whether it wrote them).
fn overlay_columns(out: &ScanOutput) -> Arc<std::collections::BTreeSet<String>> {
    let mut names: std::collections::BTreeSet<String> = out
        .cols
        .iter()
        .filter_map(|c| match c {
            OutCol::Attr { name, .. } => Some(name.clone()),
            OutCol::Pk(_) => None,
        })
        .collect();
    let filters = [
        out.filter.as_ref().and_then(|f| f.columns()),
        out.row_filter.as_ref().and_then(|f| f.columns()),
    ];
    names.extend(filters.into_iter().flatten().flatten());
    Arc::new(names)
}

/// What a scan returns: its columns, their Arrow schema, a row limit and
/// an optional row-group filter.
pub(crate) struct ScanOutput {
    pub cols: Arc<[OutCol]>,
    pub schema: SchemaRef,
    pub limit: Option<usize>,
    pub filter: Option<Arc<dyn RowGroupFilter>>,
    pub row_filter: Option<Arc<dyn RowFilter>>,
    /// Where the scan counts what statistics pruning saved.
    pub counters: Arc<ScanCounters>,
    /// What the chunks of one scan share (a default one for a scan read
    /// whole).
    pub shared: Arc<ScanShared>,
}

impl LatestScan {
    pub fn new(
        table: Arc<TableInner>,
        snap: Arc<Snapshot>,
        now_ms: i64,
        ranges: &[ScanRange],
        out: ScanOutput,
    ) -> Self {
        let pieces = plan_pieces(&snap, ranges).into();
        let overlay_columns = overlay_columns(&out);
        LatestScan {
            cx: ScanCtx {
                cutoff: snap.options.ttl_cutoff_ms(now_ms),
                pk_types: table.schema.pk_types(),
                table,
                snap,
                cols: out.cols,
                schema: out.schema,
                row_filter: out.row_filter,
                overlay_columns,
                counters: out.counters,
                shared: out.shared,
            },
            pieces,
            current: None,
            remaining: out.limit.unwrap_or(usize::MAX),
            filter: out.filter,
        }
    }

    /// The next non-empty batch, or `None` at the end.
    pub async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        while self.remaining > 0 {
            let batch = match self.current.as_mut() {
                None => {
                    let Some(piece) = self.pieces.pop_front() else {
                        return Ok(None);
                    };
                    match piece {
                        ScanPiece::Point(key) => point(&self.cx, &key).await?,
                        ScanPiece::Merge(range) => {
                            if let Some(rows) = gap_rows(&self.cx, &range).await? {
                                self.current = Some(Current::Gap(Box::new(rows)));
                                continue;
                            }
                            let scan = MergeScan::new(&self.cx.snap, range, false, None);
                            self.current = Some(Current::Merge(scan));
                            continue;
                        }
                        ScanPiece::Single { seg, range } => {
                            let r = SingleReader::open(&self.cx, seg, range, self.filter.as_deref()).await?;
                            self.current = Some(Current::Single(Box::new(r)));
                            continue;
                        }
                    }
                }
                Some(Current::Merge(scan)) => {
                    let b = merge_batch(scan, &self.cx).await?;
                    if b.is_none() {
                        self.current = None;
                    }
                    b
                }
                Some(Current::Gap(r)) => {
                    let b = r.rest(BATCH_ROWS)?;
                    if b.is_none() {
                        self.current = None;
                    }
                    b
                }
                Some(Current::Single(r)) => {
                    let b = r.next_batch(&self.cx).await?;
                    if b.is_none() {
                        self.current = None;
                    }
                    b
                }
            };
            if let Some(b) = batch
                && b.num_rows() > 0
            {
                let b = if b.num_rows() > self.remaining {
                    b.slice(0, self.remaining)
                } else {
                    b
                };
                self.remaining -= b.num_rows();
                return Ok(Some(b));
            }
        }
        Ok(None)
    }
}

async fn point(cx: &ScanCtx, key: &[u8]) -> Result<Option<RecordBatch>> {
    let mut rows = cx.rows();
    if let Some(state) = cx.snap.get_state(key, None).await? {
        cx.push_visible(&mut rows, key, &state, None)?;
    }
    Ok(Some(cx.finish(&mut rows)?))
}

async fn merge_batch(scan: &mut MergeScan, cx: &ScanCtx) -> Result<Option<RecordBatch>> {
    let mut rows = cx.rows();
    while rows.rows < BATCH_ROWS {
        let Some((key, state)) = scan.next().await? else {
            if rows.rows == 0 {
                return Ok(None);
            }
            break;
        };
        cx.push_visible(&mut rows, &key, &state, None)?;
    }
    Ok(Some(cx.finish(&mut rows)?))
}
