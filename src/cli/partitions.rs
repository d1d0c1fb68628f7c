//! `cellar describe TABLE --partitions` and `cellar split-points`: a
//! table's range partitions and ComputeSplitPointsBySize, as JSON.

use serde_json::{Value as Json, json};

use super::json::pk_json;
use crate::db::Database;
use crate::error::Result;
use crate::model::types::{PkValue, PrimaryKey};

/// A partition-key bound as `{"col": value}`, or null when unbounded.
fn bound(column: &str, v: &Option<PkValue>) -> Json {
    match v {
        Some(v) => pk_json(&PrimaryKey::new().with(column, v.clone())),
        None => Json::Null,
    }
}

/// The `"partitions"` array of `describe --partitions`.
pub(super) async fn partitions_json(db: &Database, table: &str) -> Result<Json> {
    let t = db.table(table)?;
    let column = &t.schema().primary_key[0].name;
    Ok(t.partitions()
        .await?
        .iter()
        .map(|p| {
            json!({
                "id": p.id,
                "lower": bound(column, &p.lower),
                "upper": bound(column, &p.upper),
                "bytes": p.bytes,
                "rows": p.rows,
                "segments": p.segments,
                "parents": p.parents,
                "shared_segments": p.shared,
            })
        })
        .collect())
}

/// `cellar split-points`: one JSON line per range, in key order.
pub(super) async fn split_points_lines(db: &Database, table: &str, size: u64) -> Result<Vec<Json>> {
    let t = db.table(table)?;
    let column = &t.schema().primary_key[0].name;
    Ok(t.compute_split_points(size)
        .await?
        .iter()
        .map(|r| json!({"lower": bound(column, &r.lower), "upper": bound(column, &r.upper), "location": r.location}))
        .collect())
}
