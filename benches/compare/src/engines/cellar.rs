//! Cellar through its embedding API: one table keyed (card_id, seller_id,
//! device_id, order_no), `max_versions = 3`, default durability (an fsync
//! before every acknowledgement, group commit).

use cellar::*;

use super::{Engine, Key, Result};
use crate::data::{Record, Sparse};

pub struct CellarEngine {
    rt: tokio::runtime::Runtime,
    db: Option<Database>,
    /// Taken before the database is closed: a closing database whose
    /// handles are still held elsewhere stays open.
    handles: Option<(Table, cellar::sql::SqlSession)>,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn pk(k: &Key) -> PrimaryKey {
    PrimaryKey::new()
        .with("card_id", k.card_id)
        .with("seller_id", k.seller_id.as_str())
        .with("device_id", k.device_id.as_str())
        .with("order_no", k.order_no)
}

impl CellarEngine {
    pub fn open(dir: &std::path::Path) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(err)?;
        let (db, table) = rt.block_on(async {
            // COMPARE_POINT_ZSTD=LEVEL: `compaction_point_zstd_level` (0: LZ4, the default).
            let mut o = cellar::DbOptions::default();
            if let Ok(v) = std::env::var("COMPARE_POINT_ZSTD") {
                o.compaction_point_zstd_level = v.parse().ok().filter(|l| *l > 0);
            }
            let db = Database::open_with(dir, o).await.map_err(err)?;
            if db.table("t").is_err() {
                db.create_table(
                    TableSchema::new("t")
                        .pk("card_id", PkType::Integer)
                        .pk("seller_id", PkType::String)
                        .pk("device_id", PkType::String)
                        .pk("order_no", PkType::Integer),
                    TableOptions {
                        max_versions: 3,
                        // The data set's versions are device times, months back.
                        max_version_offset_secs: 10 * 365 * 86400,
                        ..Default::default()
                    },
                )
                .await
                .map_err(err)?;
            }
            let t = db.table("t").map_err(err)?;
            Ok::<_, String>((db, t))
        })?;
        let sql = cellar::sql::SqlSession::new(db.clone());
        Ok(CellarEngine {
            rt,
            db: Some(db),
            handles: Some((table, sql)),
        })
    }
}

impl CellarEngine {
    fn table(&self) -> &Table {
        &self.handles.as_ref().expect("open until dropped").0
    }

    fn sql(&self) -> &cellar::sql::SqlSession {
        &self.handles.as_ref().expect("open until dropped").1
    }
}

impl Drop for CellarEngine {
    fn drop(&mut self) {
        drop(self.handles.take());
        if let Some(db) = self.db.take() {
            if std::env::var_os("COMPARE_TRACE").is_some() {
                eprintln!("cellar page cache: {:?}", db.page_cache_stats());
            }
            let _ = self.rt.block_on(db.close());
        }
    }
}

fn put(r: &Record) -> RowWrite {
    let mut p = PutRow::new(pk(&Key::of(r)));
    for (v, a) in &r.amounts {
        p = p.column_at("amount", *a, *v);
    }
    let t = r.amounts[0].0;
    p = p
        .column_at("category", r.category, t)
        .column_at("device_time", r.device_time, t);
    for (c, v) in &r.sparse {
        let value = match v {
            Sparse::Int(i) => Value::Integer(*i),
            Sparse::Str(s) => Value::String(s.clone()),
        };
        p = p.column_at(Record::sparse_name(*c), value, t);
    }
    p.into()
}

impl Engine for CellarEngine {
    fn write(&self, batch: &[Record]) -> Result<()> {
        let writes: Vec<RowWrite> = batch.iter().map(put).collect();
        self.rt.block_on(async {
            for r in self.table().write_batch(writes).await.map_err(err)? {
                r.map_err(err)?;
            }
            Ok(())
        })
    }

    fn get(&self, key: &Key) -> Result<Option<f64>> {
        self.rt.block_on(async {
            let got = self.table().get_row(GetRow::new(pk(key))).await.map_err(err)?;
            Ok(got.row.and_then(|r| match r.latest("amount") {
                Some(Value::Double(d)) => Some(*d),
                _ => None,
            }))
        })
    }

    fn card_rows(&self, card_id: i64, limit: usize) -> Result<usize> {
        self.rt.block_on(async {
            let req = GetRange::new()
                .start(PkBound::new().with("card_id", card_id))
                .end(PkBound::new().with("card_id", card_id + 1))
                .limit(limit);
            Ok(self.table().get_range(req).await.map_err(err)?.rows.len())
        })
    }

    fn update(&self, key: &Key, amount: f64, category: Option<&str>, device_time: Option<i64>) -> Result<()> {
        let mut u = UpdateRow::new(pk(key)).put("amount", amount);
        if let Some(c) = category {
            u = u.put("category", c);
        }
        if let Some(t) = device_time {
            u = u.put("device_time", t);
        }
        self.rt
            .block_on(async { self.table().update_row(u).await.map(|_| ()).map_err(err) })
    }

    fn versions(&self, key: &Key, n: usize) -> Result<Vec<f64>> {
        self.rt.block_on(async {
            let opts = ReadOptions {
                columns_to_get: Some(vec!["amount".into()]),
                max_versions: Some(n as u32),
                ..Default::default()
            };
            let got = self
                .table()
                .get_row(GetRow::new(pk(key)).options(opts))
                .await
                .map_err(err)?;
            Ok(got
                .row
                .and_then(|r| r.column("amount").map(|c| c.to_vec()))
                .unwrap_or_default()
                .into_iter()
                .filter_map(|c| match c.value {
                    Value::Double(d) => Some(d),
                    _ => None,
                })
                .collect())
        })
    }

    fn sql(&self, query: &str) -> Result<Option<usize>> {
        let batches = self.rt.block_on(self.sql().query(query)).map_err(err)?;
        Ok(Some(batches.iter().map(|b| b.num_rows()).sum()))
    }

    fn settle(&self) -> Result<()> {
        self.rt.block_on(self.table().compact()).map_err(err)
    }

    fn trace(&self) -> String {
        let s = self.table().stats();
        format!(
            "segments {} runs {} memtable {} B frozen {} flushes {} ({} MB) compactions {} (read {} MB, wrote {} MB) \
             stalled {:.1} s overlay builds {} extensions {} ({} MB)",
            s.segments,
            s.runs,
            s.memtable_bytes,
            s.frozen_memtables,
            s.flushes,
            s.flush_bytes >> 20,
            s.compactions,
            s.compaction_read_bytes >> 20,
            s.compaction_bytes >> 20,
            s.write_stall_micros as f64 / 1e6,
            s.scan_overlay_builds,
            s.scan_overlay_extensions,
            s.scan_overlay_bytes >> 20
        )
    }
}
