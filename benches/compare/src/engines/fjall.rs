//! fjall (an LSM-tree key-value store in Rust): partition `t` maps an
//! order-preserving key to the record's latest values, encoded; partition
//! `v` maps key + inverted version to an older `amount`. Each write is a
//! batch committed with `PersistMode::SyncAll` (an fsync per commit), the
//! durable mode of fjall's docs. An update reads, changes and writes back
//! the row (a key-value store has no partial update).

use fjall::{Config, Keyspace, PartitionCreateOptions, PartitionHandle, PersistMode};

use super::{Engine, Key, Result};
use crate::data::{Record, Sparse};

pub struct FjallEngine {
    ks: Keyspace,
    rows: PartitionHandle,
    versions: PartitionHandle,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Big-endian with the sign flipped: bytewise order is numeric order.
fn int(out: &mut Vec<u8>, i: i64) {
    out.extend_from_slice(&((i as u64) ^ (1 << 63)).to_be_bytes());
}

/// The key's bytes; strings end with 0 (they hold no 0 byte).
pub fn key_bytes(k: &Key) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    int(&mut out, k.card_id);
    out.extend_from_slice(k.seller_id.as_bytes());
    out.push(0);
    out.extend_from_slice(k.device_id.as_bytes());
    out.push(0);
    int(&mut out, k.order_no);
    out
}

/// A row's latest values: amount, device_time, then length-prefixed
/// category and sparse columns (index, tag, value).
pub fn encode(amount: f64, category: &str, device_time: i64, sparse: &[(usize, Sparse)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(48);
    v.extend_from_slice(&amount.to_le_bytes());
    v.extend_from_slice(&device_time.to_le_bytes());
    v.push(category.len() as u8);
    v.extend_from_slice(category.as_bytes());
    for (i, s) in sparse {
        v.push(*i as u8);
        match s {
            Sparse::Int(x) => {
                v.push(0);
                v.extend_from_slice(&x.to_le_bytes());
            }
            Sparse::Str(s) => {
                v.push(1);
                v.push(s.len() as u8);
                v.extend_from_slice(s.as_bytes());
            }
        }
    }
    v
}

/// A row value with 1-3 of its columns changed.
pub fn patch(mut v: Vec<u8>, amount: f64, category: Option<&str>, device_time: Option<i64>) -> Vec<u8> {
    v[..8].copy_from_slice(&amount.to_le_bytes());
    if let Some(t) = device_time {
        v[8..16].copy_from_slice(&t.to_le_bytes());
    }
    if let Some(c) = category {
        let len = v[16] as usize;
        let rest = v[17 + len..].to_vec();
        v.truncate(16);
        v.push(c.len() as u8);
        v.extend_from_slice(c.as_bytes());
        v.extend_from_slice(&rest);
    }
    v
}

fn amount_of(v: &[u8]) -> Result<f64> {
    let b: [u8; 8] = v.get(..8).and_then(|s| s.try_into().ok()).ok_or("short row value")?;
    Ok(f64::from_le_bytes(b))
}

impl FjallEngine {
    pub fn open(dir: &std::path::Path) -> Result<Self> {
        let ks = Config::new(dir).open().map_err(err)?;
        let rows = ks.open_partition("t", PartitionCreateOptions::default()).map_err(err)?;
        let versions = ks.open_partition("v", PartitionCreateOptions::default()).map_err(err)?;
        Ok(FjallEngine { ks, rows, versions })
    }
}

/// The key of an older version: the row key, then the inverted version
/// (newest first in key order).
pub fn version_key(key: &[u8], version: i64) -> Vec<u8> {
    let mut k = key.to_vec();
    int(&mut k, !version);
    k
}

impl Engine for FjallEngine {
    fn write(&self, batch: &[Record]) -> Result<()> {
        let mut b = self.ks.batch().durability(Some(PersistMode::SyncAll));
        for r in batch {
            let k = key_bytes(&Key::of(r));
            b.insert(
                &self.rows,
                k.clone(),
                encode(r.amounts[0].1, r.category, r.device_time, &r.sparse),
            );
            for (v, a) in &r.amounts {
                b.insert(&self.versions, version_key(&k, *v), a.to_le_bytes().to_vec());
            }
        }
        b.commit().map_err(err)
    }

    fn get(&self, key: &Key) -> Result<Option<f64>> {
        match self.rows.get(key_bytes(key)).map_err(err)? {
            Some(v) => Ok(Some(amount_of(&v)?)),
            None => Ok(None),
        }
    }

    fn card_rows(&self, card_id: i64, limit: usize) -> Result<usize> {
        let mut prefix = Vec::new();
        int(&mut prefix, card_id);
        let mut n = 0;
        for kv in self.rows.prefix(prefix).take(limit) {
            kv.map_err(err)?;
            n += 1;
        }
        Ok(n)
    }

    fn update(&self, key: &Key, amount: f64, category: Option<&str>, device_time: Option<i64>) -> Result<()> {
        let k = key_bytes(key);
        let Some(old) = self.rows.get(&k).map_err(err)? else {
            return Err(format!("update of a missing row {key:?}"));
        };
        let v = patch(old.to_vec(), amount, category, device_time);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(err)?
            .as_millis() as i64;
        let mut b = self.ks.batch().durability(Some(PersistMode::SyncAll));
        b.insert(&self.versions, version_key(&k, now), amount.to_le_bytes().to_vec());
        b.insert(&self.rows, k, v);
        b.commit().map_err(err)
    }

    fn versions(&self, key: &Key, n: usize) -> Result<Vec<f64>> {
        let k = key_bytes(key);
        let mut out = Vec::new();
        for kv in self.versions.prefix(k).take(n) {
            let (_, v) = kv.map_err(err)?;
            out.push(amount_of(&v)?);
        }
        Ok(out)
    }

    fn sql(&self, _query: &str) -> Result<Option<usize>> {
        Ok(None)
    }

    fn settle(&self) -> Result<()> {
        for p in [&self.rows, &self.versions] {
            p.rotate_memtable_and_wait().map_err(err)?;
            p.major_compact().map_err(err)?;
        }
        Ok(())
    }
}
