//! RocksDB (the `rocksdb` crate, `--features rocksdb`): the same layout as
//! fjall's (column family `t`: key -> the row's latest values; `v`: key +
//! inverted version -> an older `amount`), with the settings RocksDB's
//! tuning guide gives for a point-lookup and range workload: level-style
//! compaction, background jobs for both cores, a 10-bit bloom filter and a
//! 256 MiB block cache. Every write batch is written with `sync = true`
//! (an fsync of the WAL per batch; concurrent writers share it through
//! RocksDB's group commit).

use rocksdb::{BlockBasedOptions, Cache, ColumnFamilyDescriptor, DB, IteratorMode, Options, WriteBatch, WriteOptions};

use super::fjall::{encode, key_bytes, version_key};
use super::{Engine, Key, Result};
use crate::data::Record;

pub struct RocksEngine {
    db: DB,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl RocksEngine {
    pub fn open(dir: &std::path::Path) -> Result<Self> {
        let cache = Cache::new_lru_cache(256 << 20);
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        table.set_block_cache(&cache);
        let mut cf = Options::default();
        cf.set_block_based_table_factory(&table);
        cf.optimize_level_style_compaction(256 << 20);
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.increase_parallelism(2);
        let cfs = ["t", "v"].map(|n| ColumnFamilyDescriptor::new(n, cf.clone()));
        let db = DB::open_cf_descriptors(&opts, dir, cfs).map_err(err)?;
        Ok(RocksEngine { db })
    }

    fn cf(&self, name: &str) -> Result<&rocksdb::ColumnFamily> {
        self.db
            .cf_handle(name)
            .ok_or_else(|| format!("column family {name} missing"))
    }

    fn commit(&self, b: WriteBatch) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        self.db.write_opt(b, &wo).map_err(err)
    }
}

fn amount_of(v: &[u8]) -> Result<f64> {
    let b: [u8; 8] = v.get(..8).and_then(|s| s.try_into().ok()).ok_or("short row value")?;
    Ok(f64::from_le_bytes(b))
}

impl Engine for RocksEngine {
    fn write(&self, batch: &[Record]) -> Result<()> {
        let (t, v) = (self.cf("t")?, self.cf("v")?);
        let mut b = WriteBatch::default();
        for r in batch {
            let k = key_bytes(&Key::of(r));
            b.put_cf(t, &k, encode(r.amounts[0].1, r.category, r.device_time, &r.sparse));
            for (ver, a) in &r.amounts {
                b.put_cf(v, version_key(&k, *ver), a.to_le_bytes());
            }
        }
        self.commit(b)
    }

    fn get(&self, key: &Key) -> Result<Option<f64>> {
        match self.db.get_pinned_cf(self.cf("t")?, key_bytes(key)).map_err(err)? {
            Some(v) => Ok(Some(amount_of(&v)?)),
            None => Ok(None),
        }
    }

    fn card_rows(&self, card_id: i64, limit: usize) -> Result<usize> {
        let mut prefix = Vec::new();
        prefix.extend_from_slice(&((card_id as u64) ^ (1 << 63)).to_be_bytes());
        let mut n = 0;
        let it = self
            .db
            .iterator_cf(self.cf("t")?, IteratorMode::From(&prefix, rocksdb::Direction::Forward));
        for kv in it {
            let (k, _) = kv.map_err(err)?;
            if !k.starts_with(&prefix) || n >= limit {
                break;
            }
            n += 1;
        }
        Ok(n)
    }

    fn update(&self, key: &Key, amount: f64, category: Option<&str>, device_time: Option<i64>) -> Result<()> {
        let k = key_bytes(key);
        let Some(old) = self.db.get_cf(self.cf("t")?, &k).map_err(err)? else {
            return Err(format!("update of a missing row {key:?}"));
        };
        let v = super::fjall::patch(old, amount, category, device_time);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(err)?
            .as_millis() as i64;
        let mut b = WriteBatch::default();
        b.put_cf(self.cf("v")?, version_key(&k, now), amount.to_le_bytes());
        b.put_cf(self.cf("t")?, &k, v);
        self.commit(b)
    }

    fn versions(&self, key: &Key, n: usize) -> Result<Vec<f64>> {
        let k = key_bytes(key);
        let mut out = Vec::new();
        let it = self
            .db
            .iterator_cf(self.cf("v")?, IteratorMode::From(&k, rocksdb::Direction::Forward));
        for kv in it {
            let (vk, v) = kv.map_err(err)?;
            if !vk.starts_with(&k) || out.len() >= n {
                break;
            }
            out.push(amount_of(&v)?);
        }
        Ok(out)
    }

    fn sql(&self, _query: &str) -> Result<Option<usize>> {
        Ok(None)
    }

    fn settle(&self) -> Result<()> {
        for name in ["t", "v"] {
            let cf = self.cf(name)?;
            self.db.flush_cf(cf).map_err(err)?;
            self.db.compact_range_cf(cf, None::<&[u8]>, None::<&[u8]>);
        }
        Ok(())
    }
}
