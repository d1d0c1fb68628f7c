//! Row reads on a snapshot: GetRow and one GetRange response, for tables
//! and local transactions alike.
//!
//! Invariants: a read sees exactly the snapshot it is given; it is charged
//! capacity units for the rows it looked at (filtered out or not, a missing
//! row 1 read CU); a GetRange response looks at no more than
//! `MAX_RANGE_SCANNED_ROWS` rows.

use crate::error::{Error, ErrorKind, Result};
use crate::model::api::{
    GetRange, GetRow, GetRowResult, MAX_RANGE_BYTES, MAX_RANGE_ROWS, MAX_RANGE_SCANNED_ROWS, RangeResult,
};
use crate::model::capacity::{self, CapacityUnit};
use crate::model::key::KeyRange;
use crate::model::row::{ReadOptions, visible_cells_owned};
use crate::model::schema::MAX_COLUMNS_TO_GET;
use crate::model::types::Row;
use crate::read::MergeScan;
use crate::state::{Snapshot, TableInner};

/// GetRow on a snapshot.
pub(super) async fn read_row(t: &TableInner, snap: &Snapshot, now: i64, get: GetRow) -> Result<GetRowResult> {
    read_row_inner(t, snap, now, get).await.map_err(|e| t.read_error(e))
}

async fn read_row_inner(t: &TableInner, snap: &Snapshot, now: i64, get: GetRow) -> Result<GetRowResult> {
    check_read_options(&get.options)?;
    let key = t.schema.encode_pk(&get.primary_key)?;
    let cols = fetched_columns(&get.options);
    let Some(state) = snap.get_state(&key, cols.as_deref()).await? else {
        return Ok(GetRowResult {
            row: None,
            consumed: CapacityUnit::read(0),
        });
    };
    let mut bytes = 0;
    let row = visible_cells_owned(state, now, &snap.options, &get.options, &mut bytes);
    if bytes > 0 || row.is_some() {
        bytes += capacity::pk_bytes(&get.primary_key);
    }
    Ok(GetRowResult {
        row: row.map(|columns| Row {
            primary_key: get.primary_key,
            columns,
        }),
        consumed: CapacityUnit::read(bytes),
    })
}

/// One GetRange response on the snapshots of a table's partitions (in
/// key order, taken together); `within` narrows the range (a local
/// transaction's partition).
pub(super) async fn read_range(
    t: &TableInner,
    snaps: &[Snapshot],
    now: i64,
    req: GetRange,
    within: Option<&KeyRange>,
) -> Result<RangeResult> {
    read_range_inner(t, snaps, now, req, within)
        .await
        .map_err(|e| t.read_error(e))
}

async fn read_range_inner(
    t: &TableInner,
    snaps: &[Snapshot],
    now: i64,
    req: GetRange,
    within: Option<&KeyRange>,
) -> Result<RangeResult> {
    check_read_options(&req.options)?;
    if req.limit == Some(0) {
        return Err(Error::param("GetRange limit must be at least 1"));
    }
    let backward = req.direction == crate::model::api::Direction::Backward;
    let mut range = t.schema.key_range(req.start.as_ref(), req.end.as_ref(), backward)?;
    if let Some(w) = within {
        range = range.intersect(w);
    }
    let limit = req.limit.unwrap_or(MAX_RANGE_ROWS).min(MAX_RANGE_ROWS);
    let cols = fetched_columns(&req.options);
    // The partitions the range reaches, in the scan's direction.
    let mut parts: Vec<&Snapshot> = snaps.iter().filter(|s| !s.range.intersect(&range).is_empty()).collect();
    if backward {
        parts.reverse();
    }
    let mut parts = parts.into_iter();
    let Some(mut snap) = parts.next() else {
        return Ok(RangeResult::default());
    };
    let mut scan = MergeScan::new(snap, range.clone(), backward, cols.as_deref());
    let mut out = RangeResult::default();
    let mut bytes = 0usize;
    let mut scanned = 0usize;
    let mut read_bytes = 0usize;
    let types = t.schema.pk_types();
    let pk_names: usize = t.schema.primary_key.iter().map(|c| c.name.len()).sum();
    loop {
        let Some((key, state)) = scan.next().await? else {
            match parts.next() {
                Some(next) => {
                    snap = next;
                    scan = MergeScan::new(snap, range.clone(), backward, cols.as_deref());
                    continue;
                }
                None => break,
            }
        };
        // A filter that passes few rows ends a response after
        // MAX_RANGE_SCANNED_ROWS rows looked at, however few it holds.
        if out.rows.len() >= limit || bytes >= MAX_RANGE_BYTES || scanned >= MAX_RANGE_SCANNED_ROWS {
            out.next_start = Some(t.schema.decode_pk(&key)?);
            break;
        }
        scanned += 1;
        let before = read_bytes;
        let Some(columns) = visible_cells_owned(state, now, &snap.options, &req.options, &mut read_bytes) else {
            if read_bytes > before {
                // Looked at, filtered out: its key is charged too (counted
                // from the encoding, nothing decoded).
                read_bytes += pk_names + key_value_bytes(&key, &types)?;
            }
            continue;
        };
        let primary_key = t.schema.decode_pk(&key)?;
        read_bytes += capacity::pk_bytes(&primary_key);
        bytes += key.len() + capacity::cells_bytes(&columns);
        out.rows.push(Row { primary_key, columns });
    }
    out.consumed = CapacityUnit::read(read_bytes);
    Ok(out)
}

/// The columns a read needs from storage: those it returns, plus those
/// its filter reads (`None`: all).
fn fetched_columns(o: &ReadOptions) -> Option<Vec<String>> {
    let mut cols = o.columns_to_get.clone()?;
    if let Some(f) = &o.filter {
        f.columns(&mut cols);
        cols.sort();
        cols.dedup();
    }
    Some(cols)
}

fn check_read_options(o: &ReadOptions) -> Result<()> {
    if let Some(f) = &o.filter {
        f.validate()?;
    }
    if let Some(c) = &o.columns_to_get
        && c.len() > MAX_COLUMNS_TO_GET
    {
        return Err(Error::new(
            ErrorKind::OutOfColumnCountLimit,
            format!(
                "columns_to_get lists {} columns; at most {MAX_COLUMNS_TO_GET} are accepted",
                c.len()
            ),
        ));
    }
    if o.max_versions == Some(0) {
        return Err(Error::param("max_versions must be at least 1"));
    }
    if let Some((s, e)) = o.time_range
        && s >= e
    {
        return Err(Error::param(format!(
            "time range [{s}, {e}) is empty: the start must be below the end"
        )));
    }
    Ok(())
}

/// The value bytes of an encoded key (INTEGER 8, STRING / BINARY their
/// length), without decoding it into values.
fn key_value_bytes(key: &[u8], types: &[crate::model::types::PkType]) -> Result<usize> {
    let mut n = 0;
    crate::model::key::for_each_value(key, types.iter().copied(), |v| {
        n += match v {
            crate::model::key::PkRef::Integer(_) => 8,
            crate::model::key::PkRef::Bytes(b) => b.len(),
        };
        Ok(())
    })?;
    Ok(n)
}
