//! The data set: student card consumption records, seeded and reproducible.
//!
//! Row `i` is a pure function of (seed, i): any row can be made again on
//! its own (to pick keys for reads, or to load in another order), and every
//! engine gets exactly the same rows.
//!
//! - Key: (card_id INTEGER, seller_id STRING, device_id STRING,
//!   order_no INTEGER). About 20 rows per card, so a card's rows are a
//!   short range (1-100 rows).
//! - Sellers follow a Zipf distribution (s = 1.1) over 2000 sellers; each
//!   seller has 8 devices.
//! - Columns: amount (DOUBLE), category (STRING), device_time (INTEGER,
//!   ms), and 20 sparse columns x00..x19, each present with probability
//!   5% (INTEGER for even, STRING for odd ones).
//! - 10% of the rows have 3 versions of `amount` (the newest 1 s and 2 s
//!   after the older ones); the others have one.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

/// Sellers, Zipf-distributed.
pub const SELLERS: u64 = 2000;
/// Devices per seller.
pub const DEVICES: u64 = 8;
/// Sparse columns.
pub const SPARSE: usize = 20;
/// Categories of a purchase.
pub const CATEGORIES: [&str; 8] = ["canteen", "shop", "library", "print", "laundry", "sport", "bus", "cafe"];
/// The first device time, ms (2026-09-01 UTC).
pub const T0: i64 = 1_788_220_800_000;

/// A sparse column's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Sparse {
    Int(i64),
    Str(String),
}

/// One record, with its versions of `amount` (newest first).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub card_id: i64,
    pub seller_id: String,
    pub device_id: String,
    pub order_no: i64,
    /// (version ms, amount), newest first: 1 or 3 of them.
    pub amounts: Vec<(i64, f64)>,
    pub category: &'static str,
    pub device_time: i64,
    /// (column index 0..SPARSE, value).
    pub sparse: Vec<(usize, Sparse)>,
}

impl Record {
    /// The sparse column's name.
    pub fn sparse_name(i: usize) -> String {
        format!("x{i:02}")
    }
}

/// The data set of `rows` rows.
#[derive(Debug, Clone, Copy)]
pub struct DataSet {
    pub seed: u64,
    pub rows: u64,
}

impl DataSet {
    pub fn new(seed: u64, rows: u64) -> Self {
        DataSet { seed, rows }
    }

    /// Cards: about 20 rows each.
    pub fn cards(&self) -> u64 {
        (self.rows / 20).max(1)
    }

    /// Row `i`.
    pub fn record(&self, i: u64) -> Record {
        let mut rng = StdRng::seed_from_u64(self.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let zipf = Zipf::new(SELLERS as f64, 1.1).expect("valid Zipf parameters");
        let seller = zipf.sample(&mut rng) as u64 - 1;
        let card_id = rng.random_range(0..self.cards()) as i64;
        let device_time = T0 + i as i64 * 50 + rng.random_range(0..50);
        let amount = (rng.random_range(1..5000) as f64) / 100.0;
        let amounts = if rng.random_range(0..10) == 0 {
            vec![
                (device_time + 2000, amount + 1.0),
                (device_time + 1000, amount + 0.5),
                (device_time, amount),
            ]
        } else {
            vec![(device_time, amount)]
        };
        let mut sparse = Vec::new();
        for c in 0..SPARSE {
            if rng.random_range(0..20) == 0 {
                sparse.push((
                    c,
                    if c % 2 == 0 {
                        Sparse::Int(rng.random_range(0..1_000_000))
                    } else {
                        Sparse::Str(format!("v{}", rng.random_range(0..10_000)))
                    },
                ));
            }
        }
        Record {
            card_id,
            seller_id: format!("s{seller:04}"),
            device_id: format!("d{}", rng.random_range(0..DEVICES)),
            order_no: i as i64,
            amounts,
            category: CATEGORIES[rng.random_range(0..CATEGORIES.len())],
            device_time,
            sparse,
        }
    }

    /// Row indices in key order (card, seller, device, order). Keys are
    /// sorted packed into integers (16 bytes a row), so that the harness
    /// does not hold a gigabyte of key strings at 10M rows, which a
    /// process's peak RSS would charge to the engine under test: seller
    /// ids have four digits and device ids one, so their string order is
    /// their numeric order.
    pub fn sorted_order(&self) -> Vec<u64> {
        const _: () = assert!(SELLERS <= 10_000 && DEVICES <= 10);
        let mut keys: Vec<(u64, u64)> = (0..self.rows)
            .map(|i| {
                let r = self.record(i);
                let seller: u64 = r.seller_id[1..].parse().expect("seller id s{nnnn}");
                let device: u64 = r.device_id[1..].parse().expect("device id d{n}");
                (((r.card_id as u64) << 17) | (seller << 4) | device, i)
            })
            .collect();
        keys.sort_unstable();
        // Not `into_iter().collect()`: that collects in place, keeping
        // the pairs' allocation (twice the order's size) for the whole load.
        let mut order = Vec::with_capacity(keys.len());
        order.extend(keys.iter().map(|k| k.1));
        order
    }

    /// Row indices in a random (seeded) order.
    pub fn random_order(&self) -> Vec<u64> {
        let mut v: Vec<u64> = (0..self.rows).collect();
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x5EED);
        for i in (1..v.len()).rev() {
            v.swap(i, rng.random_range(0..=i));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_reproducible_and_shaped_as_described() {
        let d = DataSet::new(7, 20_000);
        assert_eq!(d.record(123), d.record(123));
        let rows: Vec<Record> = (0..20_000).map(|i| d.record(i)).collect();
        let versioned = rows.iter().filter(|r| r.amounts.len() == 3).count();
        assert!((1500..2500).contains(&versioned), "{versioned}");
        let sparse: usize = rows.iter().map(|r| r.sparse.len()).sum();
        let density = sparse as f64 / (20_000.0 * SPARSE as f64);
        assert!((0.04..0.06).contains(&density), "{density}");
        // Zipf: the top seller has far more rows than the median one.
        let top = rows.iter().filter(|r| r.seller_id == "s0000").count();
        assert!(top > 1000, "{top}");
    }

    #[test]
    fn sorted_order_is_the_order_of_the_key_strings() {
        let d = DataSet::new(7, 20_000);
        let mut by_strings: Vec<(i64, String, String, u64)> = (0..20_000)
            .map(|i| {
                let r = d.record(i);
                (r.card_id, r.seller_id, r.device_id, i)
            })
            .collect();
        by_strings.sort();
        let want: Vec<u64> = by_strings.into_iter().map(|k| k.3).collect();
        assert_eq!(d.sorted_order(), want);
    }
}
