//! The model test: random writes (with conditions and increments), reads
//! (with filters), flushes, reopens, compactions and option changes against
//! a plain in-memory reference (see `docs/model.md`); and a second table
//! with an auto-increment key whose assigned values the reference keeps.

use std::collections::BTreeMap;
use std::sync::Arc;

use cellar::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::*;

pub(crate) type Key = (i64, String);
pub(crate) type Cells = Vec<(String, Vec<Cell>)>;

#[derive(Debug, Clone, Default)]
pub(crate) struct ModelRow {
    columns: BTreeMap<String, BTreeMap<i64, Value>>,
    marker: Option<i64>,
}

#[derive(Default, Clone)]
pub(crate) struct Model {
    pub(crate) rows: BTreeMap<Key, ModelRow>,
    pub(crate) opts: TableOptions,
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

    /// Whether the row passes a filter (the reference of `Filter`).
    fn passes(&self, now: i64, row: Option<&ModelRow>, f: &Filter) -> bool {
        let cells = row.and_then(|r| self.visible(now, r)).unwrap_or_default();
        passes(&cells, f)
    }

    /// Checks a write's condition, then applies it; returns the error kind
    /// it should fail with, or `None` when it should succeed.
    pub(crate) fn apply(&mut self, now: i64, key: &Key, w: &RowWrite) -> Option<ErrorKind> {
        let row = self.rows.get(key);
        let exists = row.and_then(|r| self.visible(now, r)).is_some();
        let cond = w.condition();
        let ok = match cond.row {
            RowExistence::Ignore => true,
            RowExistence::ExpectExist => exists,
            RowExistence::ExpectNotExist => !exists,
        } && cond.column.as_ref().is_none_or(|f| exists && self.passes(now, row, f));
        if !ok {
            return Some(ErrorKind::ConditionCheckFail);
        }
        if let RowWrite::Update(u) = w {
            // Increments: the newest visible value plus delta, at `now`.
            let cells = row.and_then(|r| self.visible(now, r)).unwrap_or_default();
            for a in &u.actions {
                if let UpdateAction::Increment { name, delta } = a {
                    let cur = cells.iter().find(|(n, _)| n == name).map(|(_, c)| &c[0].value);
                    match cur {
                        None => {}
                        Some(Value::Integer(i)) if i.checked_add(*delta).is_some() => {}
                        Some(_) => return Some(ErrorKind::ParameterInvalid),
                    }
                }
            }
            let sums: Vec<(String, i64)> = u
                .actions
                .iter()
                .filter_map(|a| match a {
                    UpdateAction::Increment { name, delta } => {
                        let cur = cells.iter().find(|(n, _)| n == name).map(|(_, c)| &c[0].value);
                        let base = match cur {
                            Some(Value::Integer(i)) => *i,
                            _ => 0,
                        };
                        Some((name.clone(), base + delta))
                    }
                    _ => None,
                })
                .collect();
            let plain = UpdateRow {
                actions: u
                    .actions
                    .iter()
                    .map(|a| match a {
                        // At the write time, or at the newest version read
                        // when that is later (the sum must be the newest).
                        UpdateAction::Increment { name, .. } => UpdateAction::Put {
                            name: name.clone(),
                            value: Value::Integer(sums.iter().find(|(n, _)| n == name).unwrap().1),
                            version: Some(
                                cells
                                    .iter()
                                    .find(|(n, _)| n == name)
                                    .map_or(now, |(_, c)| c[0].version.max(now)),
                            ),
                        },
                        other => other.clone(),
                    })
                    .collect(),
                ..u.clone()
            };
            return (!self.apply_plain(now, key, &RowWrite::Update(plain))).then_some(ErrorKind::ParameterInvalid);
        }
        (!self.apply_plain(now, key, w)).then_some(ErrorKind::ParameterInvalid)
    }

    /// Applies a write without a condition or increment; returns whether
    /// its versions are in the window (else nothing changes).
    fn apply_plain(&mut self, now: i64, key: &Key, w: &RowWrite) -> bool {
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
                        UpdateAction::Increment { .. } => unreachable!("increments are turned into puts by apply"),
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
    pub(crate) fn visible(&self, now: i64, row: &ModelRow) -> Option<Cells> {
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
    pub(crate) fn compact(&mut self, now: i64) {
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

/// Applies `w` to the model and to `t`, and checks that the table
/// accepted or refused it as the model did (`what` names the step).
pub(crate) async fn write_as_model(model: &mut Model, t: &Table, now: i64, key: &Key, w: RowWrite, what: &str) {
    let want = model.apply(now, key, &w);
    let got = t.write(w.clone()).await;
    assert_eq!(got.as_ref().err().map(|e| e.kind()), want, "{what}: {w:?} -> {got:?}");
}

pub(crate) fn random_write(rng: &mut StdRng, now: i64, key: &Key) -> RowWrite {
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

/// The reference of a filter over a row's visible cells.
fn passes(cells: &Cells, f: &Filter) -> bool {
    use std::cmp::Ordering::*;
    match f {
        Filter::Column(c) => {
            let Some((_, vs)) = cells.iter().find(|(n, _)| *n == c.column) else {
                return c.pass_if_missing;
            };
            let n = if c.latest_version_only { 1 } else { vs.len() };
            vs.iter().take(n).any(|cell| {
                let o = match (&cell.value, &c.value) {
                    (Value::Integer(x), Value::Integer(y)) => Some(x.cmp(y)),
                    (Value::Double(x), Value::Double(y)) => x.partial_cmp(y),
                    (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
                    (Value::Binary(x), Value::Binary(y)) => Some(x.cmp(y)),
                    (Value::Boolean(x), Value::Boolean(y)) => Some(x.cmp(y)),
                    _ => None,
                };
                o.is_some_and(|o| match c.op {
                    CompareOp::Eq => o == Equal,
                    CompareOp::Ne => o != Equal,
                    CompareOp::Gt => o == Greater,
                    CompareOp::Ge => o != Less,
                    CompareOp::Lt => o == Less,
                    CompareOp::Le => o != Greater,
                })
            })
        }
        Filter::Not(f) => !passes(cells, f),
        Filter::And(fs) => fs.iter().all(|f| passes(cells, f)),
        Filter::Or(fs) => fs.iter().any(|f| passes(cells, f)),
        Filter::ColumnPage { .. } => true,
    }
}

fn random_filter(rng: &mut StdRng, depth: u32) -> Filter {
    if depth > 0 && rng.random_range(0..3) == 0 {
        return match rng.random_range(0..3) {
            0 => Filter::Not(Box::new(random_filter(rng, depth - 1))),
            1 => Filter::And(vec![random_filter(rng, depth - 1), random_filter(rng, depth - 1)]),
            _ => Filter::Or(vec![random_filter(rng, depth - 1), random_filter(rng, depth - 1)]),
        };
    }
    let ops = [
        CompareOp::Eq,
        CompareOp::Ne,
        CompareOp::Gt,
        CompareOp::Ge,
        CompareOp::Lt,
        CompareOp::Le,
    ];
    Filter::Column(ColumnCondition {
        column: COLS[rng.random_range(0..COLS.len())].into(),
        op: ops[rng.random_range(0..ops.len())],
        value: random_value(rng),
        pass_if_missing: rng.random(),
        latest_version_only: rng.random(),
    })
}

/// Adds a random condition to some writes and an increment to some updates.
pub(crate) fn with_extras(rng: &mut StdRng, w: RowWrite) -> RowWrite {
    let condition = match rng.random_range(0..10) {
        0..=5 => Condition::ignore(),
        6 => Condition::expect_exist(),
        7 => Condition::expect_not_exist(),
        _ => Condition {
            row: [RowExistence::Ignore, RowExistence::ExpectExist][rng.random_range(0..2)],
            column: Some(random_filter(rng, 1)),
        },
    };
    match w {
        RowWrite::Put(p) => p.condition(condition).into(),
        RowWrite::Delete(d) => d.condition(condition).into(),
        RowWrite::Update(mut u) => {
            if rng.random_range(0..3) == 0 {
                // An increment, the only action on its column.
                let name = COLS[rng.random_range(0..COLS.len())];
                u.actions.retain(|a| a.column() != name);
                u.actions.push(UpdateAction::Increment {
                    name: name.into(),
                    delta: [1, -3, 100, i64::MAX][rng.random_range(0..4)],
                });
            }
            u.condition(condition).into()
        }
    }
}

pub(crate) fn key_of(row: &Row) -> Key {
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
        // Compactions happen where the test says (random steps below);
        // odd seeds write their outputs' value columns under ZSTD.
        auto_compaction: false,
        compaction_zstd_level: (seed % 2 == 1).then_some(3),
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
    db.create_table(
        TableSchema::new("a")
            .pk("card", PkType::Integer)
            .pk("id", PkType::Integer)
            .auto_increment("id")
            .unwrap(),
        TableOptions::default(),
    )
    .await
    .unwrap();
    let mut a = db.table("a").unwrap();
    let mut auto: BTreeMap<(i64, i64), Value> = BTreeMap::new();
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
            0..=49 => {
                let w = random_write(&mut rng, now, &key);
                let w = with_extras(&mut rng, w);
                write_as_model(&mut model, &t, now, &key, w, &format!("seed {seed} step {step}")).await;
            }
            50..=54 => {
                // The auto-increment table: a new row, or a change to a known one.
                let card = key.0;
                let value = random_value(&mut rng);
                let known: Vec<i64> = auto.keys().filter(|(c, _)| *c == card).map(|(_, id)| *id).collect();
                if known.is_empty() || rng.random() {
                    let k = PrimaryKey::new().with("card", card).with("id", PkValue::AutoIncrement);
                    let r = a.put_row(PutRow::new(k).column("v", value.clone())).await.unwrap();
                    let PkValue::Integer(id) = r.row.unwrap().primary_key.columns[1].1 else {
                        panic!()
                    };
                    let last = known.iter().max().copied().unwrap_or(i64::MIN);
                    assert!(id > last, "seed {seed} step {step}: id {id} after {last}");
                    auto.insert((card, id), value);
                } else {
                    let id = known[rng.random_range(0..known.len())];
                    let k = PrimaryKey::new().with("card", card).with("id", id);
                    a.put_row(PutRow::new(k).column("v", value.clone())).await.unwrap();
                    auto.insert((card, id), value);
                }
            }
            55..=69 => {
                let mut read = all_read.clone();
                if rng.random() {
                    read.filter = Some(random_filter(&mut rng, 2));
                }
                let got = t
                    .get_row(GetRow::new(pk(key.0, &key.1)).options(read.clone()))
                    .await
                    .unwrap()
                    .row;
                let row = model.rows.get(&key);
                let want = row
                    .and_then(|r| model.visible(now, r))
                    .filter(|_| read.filter.as_ref().is_none_or(|f| model.passes(now, row, f)));
                assert_eq!(
                    got.map(|r| r.columns),
                    want,
                    "seed {seed} step {step}: get {key:?} filter {:?}",
                    read.filter
                );
                // The auto-increment table holds what the reference does.
                let got: Vec<((i64, i64), Value)> = scan_all(&a, GetRange::new())
                    .await
                    .into_iter()
                    .map(|r| {
                        let (PkValue::Integer(c), PkValue::Integer(i)) =
                            (&r.primary_key.columns[0].1, &r.primary_key.columns[1].1)
                        else {
                            panic!()
                        };
                        ((*c, *i), r.latest("v").unwrap().clone())
                    })
                    .collect();
                let want: Vec<((i64, i64), Value)> = auto.iter().map(|(k, v)| (*k, v.clone())).collect();
                assert_eq!(got, want, "seed {seed} step {step}: auto-increment table");
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
                drop((t, a));
                db.close().await.unwrap();
                db = Database::open_with(dir.path(), small()).await.unwrap();
                t = db.table("t").unwrap();
                a = db.table("a").unwrap();
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
    let seeds = crate::common::seeds("CELLAR_MODEL_SEEDS", 6);
    for seed in 0..seeds {
        run_model(seed, 700).await;
    }
}
