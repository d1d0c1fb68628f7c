//! The model test: random writes, reads, flushes, reopens, compactions and
//! option changes against a plain in-memory reference (see `docs/model.md`).

use std::collections::BTreeMap;
use std::sync::Arc;

use cellar::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::*;

type Key = (i64, String);
type Cells = Vec<(String, Vec<Cell>)>;

#[derive(Debug, Clone, Default)]
struct ModelRow {
    columns: BTreeMap<String, BTreeMap<i64, Value>>,
    marker: Option<i64>,
}

#[derive(Default)]
struct Model {
    rows: BTreeMap<Key, ModelRow>,
    opts: TableOptions,
}

impl Model {
    fn window_ok(&self, now: i64, version: i64) -> bool {
        let now_s = now.div_euclid(1000);
        let v = version.div_euclid(1000);
        let mut lo = now_s - self.opts.max_version_offset_secs;
        if self.opts.ttl_secs != -1 {
            lo = lo.max(now_s - self.opts.ttl_secs);
        }
        v >= lo && v < now_s + self.opts.max_version_offset_secs
    }

    /// Applies a write; returns whether it should succeed.
    fn apply(&mut self, now: i64, key: &Key, w: &RowWrite) -> bool {
        match w {
            RowWrite::Put(p) => {
                if !p.columns.iter().all(|c| self.window_ok(now, c.version.unwrap_or(now))) {
                    return false;
                }
                let mut row = ModelRow::default();
                for c in &p.columns {
                    row.columns
                        .entry(c.name.clone())
                        .or_default()
                        .insert(c.version.unwrap_or(now), c.value.clone());
                }
                if p.columns.is_empty() {
                    row.marker = Some(now);
                }
                self.rows.insert(key.clone(), row);
            }
            RowWrite::Update(u) => {
                let ok = u.actions.iter().all(|a| match a {
                    UpdateAction::Put { version, .. } => self.window_ok(now, version.unwrap_or(now)),
                    _ => true,
                });
                if !ok {
                    return false;
                }
                let row = self.rows.entry(key.clone()).or_default();
                for a in &u.actions {
                    match a {
                        UpdateAction::Put { name, value, version } => {
                            row.columns
                                .entry(name.clone())
                                .or_default()
                                .insert(version.unwrap_or(now), value.clone());
                        }
                        UpdateAction::DeleteVersion { name, version } => {
                            if let Some(c) = row.columns.get_mut(name) {
                                c.remove(version);
                            }
                        }
                        UpdateAction::DeleteAll { name } => {
                            row.columns.remove(name);
                        }
                        UpdateAction::Increment { .. } => unreachable!("checked writes are applied by apply_checked"),
                    }
                }
            }
            RowWrite::Delete(_) => {
                self.rows.remove(key);
            }
        }
        true
    }

    /// What a read with `max_versions` 10 returns for one row.
    fn visible(&self, now: i64, row: &ModelRow) -> Option<Cells> {
        let cutoff = if self.opts.ttl_secs == -1 {
            i64::MIN
        } else {
            now - self.opts.ttl_secs * 1000
        };
        let mut exists = row.marker.is_some_and(|m| m >= cutoff);
        let mut out = Vec::new();
        for (name, versions) in &row.columns {
            let cells: Vec<Cell> = versions
                .iter()
                .rev()
                .take(self.opts.max_versions as usize)
                .filter(|(v, _)| **v >= cutoff)
                .map(|(v, x)| Cell {
                    value: x.clone(),
                    version: *v,
                })
                .collect();
            if !cells.is_empty() {
                exists = true;
                out.push((name.clone(), cells));
            }
        }
        exists.then_some(out)
    }

    /// A full compaction removes what is invisible, for good.
    fn compact(&mut self, now: i64) {
        let cutoff = if self.opts.ttl_secs == -1 {
            i64::MIN
        } else {
            now - self.opts.ttl_secs * 1000
        };
        let maxv = self.opts.max_versions as usize;
        self.rows.retain(|_, row| {
            row.marker = row.marker.filter(|m| *m >= cutoff);
            for versions in row.columns.values_mut() {
                let keep: Vec<i64> = versions
                    .keys()
                    .rev()
                    .take(maxv)
                    .filter(|v| **v >= cutoff)
                    .copied()
                    .collect();
                versions.retain(|v, _| keep.contains(v));
            }
            row.columns.retain(|_, v| !v.is_empty());
            row.marker.is_some() || !row.columns.is_empty()
        });
    }
}

const ORDERS: [&str; 4] = ["", "a", "ab", "b\0"];
const COLS: [&str; 4] = ["a", "b", "c", "d"];

fn random_value(rng: &mut StdRng) -> Value {
    match rng.random_range(0..5) {
        0 => Value::Integer(rng.random_range(-5..5)),
        1 => Value::Double(rng.random_range(-5..5) as f64 / 2.0),
        2 => Value::String(["", "x", "yz"][rng.random_range(0..3)].to_string()),
        3 => Value::Boolean(rng.random()),
        _ => Value::Binary(vec![0, rng.random()]),
    }
}

fn random_version(rng: &mut StdRng, now: i64) -> Option<i64> {
    match rng.random_range(0..4) {
        0 => None,
        // sometimes far outside the window, to check refusals agree
        1 if rng.random_range(0..10) == 0 => Some(now - 200_000_000),
        _ => Some(now - rng.random_range(0..6) * 1000 + rng.random_range(0..3)),
    }
}

fn random_write(rng: &mut StdRng, now: i64, key: &Key) -> RowWrite {
    let pk = pk(key.0, &key.1);
    match rng.random_range(0..10) {
        0..=3 => {
            let mut p = PutRow::new(pk);
            for _ in 0..rng.random_range(0..4) {
                let name = COLS[rng.random_range(0..COLS.len())];
                let value = random_value(rng);
                p.columns.push(ColumnValue {
                    name: name.into(),
                    value,
                    version: random_version(rng, now),
                });
            }
            p.into()
        }
        4..=8 => {
            let mut u = UpdateRow::new(pk);
            for _ in 0..rng.random_range(1..4) {
                let name = COLS[rng.random_range(0..COLS.len())].to_string();
                u.actions.push(match rng.random_range(0..6) {
                    0 => UpdateAction::DeleteAll { name },
                    1 | 2 => UpdateAction::DeleteVersion {
                        name,
                        version: random_version(rng, now).unwrap_or(now),
                    },
                    _ => UpdateAction::Put {
                        name,
                        value: random_value(rng),
                        version: random_version(rng, now),
                    },
                });
            }
            u.into()
        }
        _ => DeleteRow::new(pk).into(),
    }
}

fn key_of(row: &Row) -> Key {
    match (&row.primary_key.columns[0].1, &row.primary_key.columns[1].1) {
        (PkValue::Integer(c), PkValue::String(o)) => (*c, o.clone()),
        other => panic!("unexpected key {other:?}"),
    }
}

async fn run_model(seed: u64, steps: usize) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    // Tiny memtables, row groups and pages, so that background flushes,
    // many segments and page-level pruning all happen on small data.
    let small = || DbOptions {
        row_group_rows: 16,
        page_rows: 4,
        // Plain numbers get a page per 4 rows, codes and booleans longer ones.
        page_bytes: 16,
        // Compactions happen where the test says (random steps below).
        auto_compaction: false,
        ..DbOptions::default().clock(clock.clone()).memtable_bytes(4 << 10)
    };
    let mut db = Database::open_with(dir.path(), small()).await.unwrap();
    let mut t = card_order_table(
        &db,
        TableOptions {
            max_versions: 3,
            ..Default::default()
        },
    )
    .await;
    let mut model = Model {
        opts: t.options(),
        ..Default::default()
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut partial_since_full = false;
    let all_read = ReadOptions {
        max_versions: Some(10),
        ..Default::default()
    };
    for step in 0..steps {
        let now = clock.now_ms();
        let key: Key = (
            rng.random_range(-3..3),
            ORDERS[rng.random_range(0..ORDERS.len())].to_string(),
        );
        match rng.random_range(0..100) {
            0..=54 => {
                let w = random_write(&mut rng, now, &key);
                let expect_ok = model.apply(now, &key, &w);
                let got = t.write(w.clone()).await;
                assert_eq!(got.is_ok(), expect_ok, "seed {seed} step {step}: {w:?} -> {got:?}");
            }
            55..=69 => {
                let got = t
                    .get_row(GetRow::new(pk(key.0, &key.1)).options(all_read.clone()))
                    .await
                    .unwrap()
                    .row;
                let want = model.rows.get(&key).and_then(|r| model.visible(now, r));
                assert_eq!(got.map(|r| r.columns), want, "seed {seed} step {step}: get {key:?}");
            }
            70..=79 => {
                let backward = rng.random();
                let (a, b) = (rng.random_range(-4..4), rng.random_range(-4..4));
                let (lo, hi) = (a.min(b), a.max(b));
                let limit = rng.random_range(1..6);
                let mut req = GetRange::new().limit(limit).options(all_read.clone());
                let mut expect: Vec<(Key, Cells)> = model
                    .rows
                    .iter()
                    .filter(|(k, _)| {
                        if backward {
                            k.0 > lo && k.0 <= hi
                        } else {
                            k.0 >= lo && k.0 < hi
                        }
                    })
                    .filter_map(|(k, r)| model.visible(now, r).map(|c| (k.clone(), c)))
                    .collect();
                if backward {
                    expect.reverse();
                    req = req
                        .start(PkBound::new().with("card", hi))
                        .end(PkBound::new().with("card", lo))
                        .backward();
                } else {
                    req = req
                        .start(PkBound::new().with("card", lo))
                        .end(PkBound::new().with("card", hi));
                }
                let got: Vec<_> = scan_all(&t, req)
                    .await
                    .iter()
                    .map(|r| (key_of(r), r.columns.clone()))
                    .collect();
                assert_eq!(
                    got, expect,
                    "seed {seed} step {step}: scan {lo}..{hi} backward={backward}"
                );
            }
            80..=84 => t.flush().await.unwrap(),
            85..=87 => {
                drop(t);
                db.close().await.unwrap();
                db = Database::open_with(dir.path(), small()).await.unwrap();
                t = db.table("t").unwrap();
            }
            88..=89 => {
                t.compact().await.unwrap();
                model.compact(now);
                partial_since_full = false;
            }
            90 => {
                // A partial compaction drops only what is invisible under
                // the current options, for the keys it merges; the model
                // cannot tell which keys, so a full compaction precedes the
                // next options change (below).
                let runs = rng.random_range(1..4);
                partial_since_full |= t.compact_newest(runs).await.unwrap();
            }
            91..=94 => {
                if partial_since_full {
                    t.compact().await.unwrap();
                    model.compact(now);
                    partial_since_full = false;
                }
                let update = OptionsUpdate {
                    max_versions: Some(rng.random_range(1..4)),
                    ttl_secs: Some([-1, 4, 100_000][rng.random_range(0..3)]),
                    ..Default::default()
                };
                model.opts = db.alter_table("t", update).await.unwrap();
            }
            _ => clock.advance(rng.random_range(0..3000)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_matches_reference_with_flush_reopen_compact() {
    // CELLAR_MODEL_SEEDS=N runs more seeds (a longer hunt for bugs).
    let seeds = std::env::var("CELLAR_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6u64);
    for seed in 0..seeds {
        run_model(seed, 700).await;
    }
}
