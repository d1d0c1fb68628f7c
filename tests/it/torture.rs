//! Crash torture: a writer process is killed over and over, and after
//! every kill the database must open and hold exactly a prefix of what the
//! writer did, at least everything it had acknowledged.
//!
//! The writer (this test binary, started again as
//! `torture::torture_writer_process`) writes three tables at once from a
//! deterministic stream of units (one unit = one atomic write: a PutRow,
//! UpdateRow or DeleteRow with explicit versions, a `write_batch`, a
//! BatchWriteRow, or an SQL INSERT / UPDATE / DELETE; row writes include
//! conditional ones and increments), with memtables and
//! WAL files small enough that flushes, compactions and WAL switches run
//! all the time. It prints `ACK table unit time outcomes` once a unit is
//! durable, `outcomes` saying which of its row writes passed their check
//! (`1`) and which failed it (`0`); each must be what the model's serial
//! replay gives. The
//! parent kills it with SIGKILL at a random moment, or lets it abort at a
//! crash point (a flush or compaction commit, a manifest write, a WAL
//! switch, a partition split or merge: `CELLAR_CRASH_POINT`; partitions
//! split and merge beside the writes), then opens the database and compares a
//! full scan of each table, every kept version, with a model replaying the
//! same stream: the table must equal the model after the acknowledged
//! units, or after one more (the unit in flight, whole). Any other state
//! is a lost, reordered or half-applied write. The SQL table has a local
//! and a global index, each compared with it after every kill (the global
//! one once caught up).
//!
//! CI runs 10 cycles; `CELLAR_TORTURE_CYCLES=200 cargo test --release
//! crash_torture` is the soak (`CELLAR_TORTURE_SEED` repeats a run).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cellar::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Keys per table: few, so that most writes rewrite a key.
pub(crate) const KEYS: i64 = 300;
/// The tables and their `max_versions`.
pub(crate) const TABLES: [(&str, u32); 3] = [("ints", 3), ("strs", 2), ("sqlt", 1)];
const COLUMNS: [&str; 5] = ["a", "b", "c", "d", "e"];
/// Crash points the writer may be aimed at (see `src/crash_point.rs`).
const CRASH_POINTS: [&str; 8] = [
    "wal.switched",
    "flush.segment_written",
    "flush.committed",
    "compaction.outputs_written",
    "compaction.committed",
    "manifest.written",
    "partition.split_committed",
    "partition.merge_committed",
];

/// A value as the model keeps it (doubles by their bits).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Val {
    I(i64),
    D(u64),
    S(String),
    T(bool),
    B(Vec<u8>),
}

impl Val {
    fn value(&self) -> Value {
        match self {
            Val::I(i) => Value::Integer(*i),
            Val::D(b) => Value::Double(f64::from_bits(*b)),
            Val::S(s) => Value::String(s.clone()),
            Val::T(t) => Value::Boolean(*t),
            Val::B(b) => Value::Binary(b.clone()),
        }
    }

    fn of(v: &Value) -> Val {
        match v {
            Value::Integer(i) => Val::I(*i),
            Value::Double(d) => Val::D(d.to_bits()),
            Value::String(s) => Val::S(s.clone()),
            Value::Boolean(t) => Val::T(*t),
            Value::Binary(b) => Val::B(b.clone()),
        }
    }
}

/// column -> version -> value; the SQL table keeps version 0 only.
pub(crate) type ModelRow = BTreeMap<String, BTreeMap<i64, Val>>;
pub(crate) type ModelTable = BTreeMap<i64, ModelRow>;

#[derive(Clone, Debug)]
pub(crate) enum Action {
    Put(String, i64, Val),
    DeleteAll(String),
}

#[derive(Clone, Debug)]
pub(crate) enum Op {
    Put(i64, Vec<(String, i64, Val)>),
    Update(i64, Vec<Action>),
    /// SQL UPDATE: only a row that exists is changed.
    UpdateIfExists(i64, Vec<Action>),
    Delete(i64),
    /// A write with a condition or an increment: it may fail its check.
    Checked(i64, Check),
}

/// The checked writes of the stream.
#[derive(Clone, Debug)]
pub(crate) enum Check {
    /// PutRow expecting the row not to exist.
    PutIfAbsent(Vec<(String, i64, Val)>),
    /// UpdateRow expecting the row to exist.
    UpdateIfPresent(Vec<Action>),
    /// DeleteRow expecting the row to exist.
    DeleteIfPresent,
    /// UpdateRow adding to the counter column `n` (a missing one counts
    /// as 0; never fails, since only increments write `n`).
    Increment(i64),
    /// PutRow if the row's counter `n` is above the bound.
    PutIfCounterAbove(i64, Vec<(String, i64, Val)>),
}

/// The counter column of the checked writes.
const COUNTER: &str = "n";

/// The writer's clock: fixed, so that an increment's version (the write
/// time, or the counter's newest version when that is later) is the
/// model's too. Explicit versions lie around `base`, well inside the
/// version window around it.
pub(crate) fn writer_now(base: i64) -> i64 {
    base + 12 * 3600 * 1000
}

/// One atomic unit of the writer's stream.
#[derive(Clone, Debug)]
pub(crate) enum Unit {
    /// One row write, or several through `Table::write_batch`.
    Table(Vec<Op>),
    /// Several row writes through `Database::batch_write`.
    BatchWriteRow(Vec<Op>),
    /// A statement and what it does.
    Sql(String, Vec<Op>),
}

pub(crate) fn value(rng: &mut StdRng) -> Val {
    match rng.random_range(0..10) {
        0 => Val::I([i64::MIN, i64::MAX, 0, -1][rng.random_range(0..4)]),
        1 | 2 => Val::I(rng.random()),
        3 | 4 => loop {
            let d = f64::from_bits(rng.random());
            if d.is_finite() {
                break Val::D(d.to_bits());
            }
        },
        5 | 6 => {
            let len = if rng.random_range(0..50) == 0 {
                5000
            } else {
                rng.random_range(0..40)
            };
            Val::S((0..len).map(|_| rng.random_range('a'..='z')).collect())
        }
        7 => Val::T(rng.random()),
        _ => Val::B((0..rng.random_range(0..20)).map(|_| rng.random()).collect()),
    }
}

/// The unit `i` of table `table` in the stream of `seed`; `base` is the
/// version (ms) the explicit versions are counted from.
pub(crate) fn unit(seed: u64, table: usize, i: u64, base: i64) -> Unit {
    let mut rng = StdRng::seed_from_u64(seed ^ ((table as u64) << 56) ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let version = |rng: &mut StdRng| {
        let now = base + i as i64 * 10;
        if rng.random_range(0..10) == 0 {
            now - rng.random_range(1..1_000_000)
        } else {
            now + rng.random_range(0..3)
        }
    };
    // Each column at most once per row write: what two actions on one
    // column in one write mean is not this test's subject.
    let columns = |rng: &mut StdRng, n: usize| {
        let mut cols: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
        for i in 0..n {
            let j = rng.random_range(i..cols.len());
            cols.swap(i, j);
        }
        cols.truncate(n);
        cols
    };
    let cells = |rng: &mut StdRng| {
        let n = rng.random_range(1..5);
        columns(rng, n)
            .into_iter()
            .map(|c| (c, version(rng), value(rng)))
            .collect::<Vec<_>>()
    };
    let op = |rng: &mut StdRng| {
        let k = rng.random_range(0..KEYS);
        if rng.random_range(0..4) == 0 {
            let check = match rng.random_range(0..10) {
                0..2 => Check::PutIfAbsent(cells(rng)),
                2..4 => Check::UpdateIfPresent(vec![Action::Put("a".into(), version(rng), value(rng))]),
                4 => Check::DeleteIfPresent,
                5..9 => Check::Increment(rng.random_range(-100..=100)),
                _ => Check::PutIfCounterAbove(rng.random_range(-50..50), cells(rng)),
            };
            return Op::Checked(k, check);
        }
        match rng.random_range(0..10) {
            0..5 => {
                let n = rng.random_range(1..5);
                Op::Put(
                    k,
                    columns(rng, n)
                        .into_iter()
                        .map(|c| (c, version(rng), value(rng)))
                        .collect(),
                )
            }
            5..8 => {
                let n = rng.random_range(1..4);
                let actions = columns(rng, n)
                    .into_iter()
                    .map(|c| {
                        if rng.random_range(0..5) == 0 {
                            Action::DeleteAll(c)
                        } else {
                            Action::Put(c, version(rng), value(rng))
                        }
                    })
                    .collect();
                Op::Update(k, actions)
            }
            _ => Op::Delete(k),
        }
    };
    if table == 2 {
        let k = |rng: &mut StdRng| rng.random_range(0..KEYS);
        return match rng.random_range(0..10) {
            0..6 => {
                let mut rows = Vec::new();
                let mut ops = Vec::new();
                for _ in 0..rng.random_range(1..50) {
                    let (k, v) = (k(&mut rng), rng.random::<i64>());
                    let s = (rng.random_range(0..5) > 0).then(|| format!("s'{}", rng.random::<u16>()));
                    rows.push(format!(
                        "({k}, {v}, {})",
                        s.as_ref()
                            .map_or("NULL".into(), |s| format!("'{}'", s.replace('\'', "''")))
                    ));
                    let mut cells = vec![("v".to_string(), 0, Val::I(v))];
                    cells.extend(s.map(|s| ("s".to_string(), 0, Val::S(s))));
                    ops.push(Op::Put(k, cells));
                }
                Unit::Sql(format!("INSERT INTO sqlt VALUES {}", rows.join(", ")), ops)
            }
            6..8 => {
                let (k, v) = (k(&mut rng), rng.random::<i64>());
                Unit::Sql(
                    format!("UPDATE sqlt SET v = {v} WHERE k = {k}"),
                    vec![Op::UpdateIfExists(k, vec![Action::Put("v".into(), 0, Val::I(v))])],
                )
            }
            _ => {
                let mut keys: Vec<i64> = (0..rng.random_range(1..6)).map(|_| k(&mut rng)).collect();
                keys.sort_unstable();
                keys.dedup();
                let list = keys.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
                Unit::Sql(
                    format!("DELETE FROM sqlt WHERE k IN ({list})"),
                    keys.into_iter().map(Op::Delete).collect(),
                )
            }
        };
    }
    match rng.random_range(0..10) {
        0..6 => Unit::Table(vec![op(&mut rng)]),
        6..8 if table == 1 => Unit::BatchWriteRow((0..rng.random_range(2..60)).map(|_| op(&mut rng)).collect()),
        _ => Unit::Table((0..rng.random_range(2..60)).map(|_| op(&mut rng)).collect()),
    }
}

/// Applies a unit's writes in order (`now`: the writer's clock, see
/// [`writer_now`]); returns whether each passed its check.
pub(crate) fn apply(model: &mut ModelTable, ops: &[Op], now: i64) -> Vec<bool> {
    let mut passed = Vec::with_capacity(ops.len());
    let act = |row: &mut ModelRow, actions: &[Action]| {
        for a in actions {
            match a {
                Action::Put(c, v, x) => {
                    row.entry(c.clone()).or_default().insert(*v, x.clone());
                }
                Action::DeleteAll(c) => {
                    row.remove(c);
                }
            }
        }
    };
    let put = |model: &mut ModelTable, k: i64, cells: &[(String, i64, Val)]| {
        let mut row = ModelRow::new();
        for (c, v, x) in cells {
            row.entry(c.clone()).or_default().insert(*v, x.clone());
        }
        model.insert(k, row);
    };
    for op in ops {
        let mut ok = true;
        match op {
            Op::Put(k, cells) => put(model, *k, cells),
            Op::Update(k, actions) => act(model.entry(*k).or_default(), actions),
            Op::UpdateIfExists(k, actions) => {
                if let Some(row) = model.get_mut(k) {
                    act(row, actions)
                }
            }
            Op::Delete(k) => {
                model.remove(k);
            }
            Op::Checked(k, check) => {
                // Rows never hold an empty column map (see below).
                let exists = model.contains_key(k);
                let counter = model
                    .get(k)
                    .and_then(|r| r.get(COUNTER))
                    .and_then(|vs| vs.last_key_value())
                    .map(|(v, x)| match x {
                        Val::I(i) => (*v, *i),
                        other => panic!("the counter holds {other:?}"),
                    });
                match check {
                    Check::PutIfAbsent(cells) => {
                        ok = !exists;
                        if ok {
                            put(model, *k, cells);
                        }
                    }
                    Check::UpdateIfPresent(actions) => {
                        ok = exists;
                        if ok {
                            act(model.entry(*k).or_default(), actions);
                        }
                    }
                    Check::DeleteIfPresent => {
                        ok = exists;
                        model.remove(k);
                    }
                    Check::Increment(delta) => {
                        let (version, sum) = counter.map_or((now, *delta), |(v, i)| (v.max(now), i + delta));
                        model
                            .entry(*k)
                            .or_default()
                            .entry(COUNTER.into())
                            .or_default()
                            .insert(version, Val::I(sum));
                    }
                    Check::PutIfCounterAbove(bound, cells) => {
                        ok = counter.is_some_and(|(_, i)| i > *bound);
                        if ok {
                            put(model, *k, cells);
                        }
                    }
                }
            }
        }
        if let Op::Put(k, _) | Op::Update(k, _) | Op::UpdateIfExists(k, _) | Op::Checked(k, _) = op
            && model.get(k).is_some_and(|r| r.is_empty())
        {
            model.remove(k);
        }
        passed.push(ok);
    }
    passed
}

pub(crate) fn unit_ops(u: &Unit) -> &[Op] {
    match u {
        Unit::Table(ops) | Unit::BatchWriteRow(ops) | Unit::Sql(_, ops) => ops,
    }
}

/// What a read shows of the model: the newest `max_versions` versions of
/// each column.
pub(crate) fn visible(model: &ModelTable, max_versions: u32) -> ModelTable {
    model
        .iter()
        .map(|(k, row)| {
            let row = row
                .iter()
                .map(|(c, vs)| {
                    (
                        c.clone(),
                        vs.iter()
                            .rev()
                            .take(max_versions as usize)
                            .map(|(v, x)| (*v, x.clone()))
                            .collect(),
                    )
                })
                .collect();
            (*k, row)
        })
        .collect()
}

pub(crate) fn pk(table: usize, k: i64) -> PrimaryKey {
    match table {
        1 => PrimaryKey::new().with("p", format!("p{:02}", k % 20)).with("q", k / 20),
        _ => PrimaryKey::new().with("k", k),
    }
}

pub(crate) fn key_of(table: usize, pk: &PrimaryKey) -> i64 {
    match (table, &pk.columns[..]) {
        (1, [(_, PkValue::String(p)), (_, PkValue::Integer(q))]) => q * 20 + p[1..].parse::<i64>().unwrap(),
        (_, [(_, PkValue::Integer(k))]) => *k,
        _ => panic!("unexpected key {pk:?}"),
    }
}

pub(crate) fn row_write(table: usize, op: &Op) -> RowWrite {
    let actions = |mut u: UpdateRow, actions: &[Action]| {
        for a in actions {
            u = match a {
                Action::Put(c, v, x) => u.put_at(c.as_str(), x.value(), *v),
                Action::DeleteAll(c) => u.delete_all(c.as_str()),
            };
        }
        u
    };
    match op {
        Op::Put(k, cells) => {
            let mut p = PutRow::new(pk(table, *k));
            for (c, v, x) in cells {
                p = p.column_at(c.as_str(), x.value(), *v);
            }
            RowWrite::Put(p)
        }
        Op::Update(k, a) => RowWrite::Update(actions(UpdateRow::new(pk(table, *k)), a)),
        Op::Delete(k) => RowWrite::Delete(DeleteRow::new(pk(table, *k))),
        Op::UpdateIfExists(..) => unreachable!("SQL only"),
        Op::Checked(k, check) => {
            let pk = pk(table, *k);
            let put = |cells: &[(String, i64, Val)]| {
                let mut p = PutRow::new(pk.clone());
                for (c, v, x) in cells {
                    p = p.column_at(c.as_str(), x.value(), *v);
                }
                p
            };
            match check {
                Check::PutIfAbsent(cells) => put(cells).condition(Condition::expect_not_exist()).into(),
                Check::UpdateIfPresent(a) => actions(UpdateRow::new(pk.clone()), a)
                    .condition(Condition::expect_exist())
                    .into(),
                Check::DeleteIfPresent => DeleteRow::new(pk).condition(Condition::expect_exist()).into(),
                Check::Increment(delta) => UpdateRow::new(pk).increment(COUNTER, *delta).into(),
                Check::PutIfCounterAbove(bound, cells) => {
                    let above = Filter::Column(ColumnCondition {
                        column: COUNTER.into(),
                        op: CompareOp::Gt,
                        value: Value::Integer(*bound),
                        pass_if_missing: false,
                        latest_version_only: true,
                    });
                    put(cells).condition(Condition::ignore().with_column(above)).into()
                }
            }
        }
    }
}

/// Every row of a table as the model's shape (the SQL table's versions
/// set to 0).
pub(crate) async fn stored(db: &Database, table: usize) -> ModelTable {
    let (name, max_versions) = TABLES[table];
    let t = db.table(name).unwrap();
    let req = GetRange::new().options(ReadOptions {
        max_versions: Some(max_versions),
        ..Default::default()
    });
    let mut out = ModelTable::new();
    for r in crate::common::scan_all(&t, req).await {
        let row = r
            .columns
            .iter()
            .map(|(c, cells)| {
                let vs = cells
                    .iter()
                    .map(|cell| (if table == 2 { 0 } else { cell.version }, Val::of(&cell.value)))
                    .collect();
                (c.clone(), vs)
            })
            .collect();
        out.insert(key_of(table, &r.primary_key), row);
    }
    out
}

pub(crate) fn writer_options(base: i64) -> DbOptions {
    let durability = match std::env::var("CELLAR_TORTURE_DURABILITY").as_deref() {
        Ok("none") => Durability::None,
        Ok(s) if s.starts_with("interval:") => Durability::IntervalMs(s[9..].parse().unwrap()),
        _ => Durability::Sync,
    };
    let mut o = DbOptions::default()
        .memtable_bytes(128 << 10)
        .durability(durability)
        .clock(Arc::new(ManualClock::new(writer_now(base))));
    o.wal_file_bytes = 64 << 10;
    o.compaction_trigger_runs = 2;
    o.background_overlays = None;
    o
}

/// The writer: started by `crash_torture` with its settings in the
/// environment; does nothing when run on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the writer process of crash_torture, which starts it"]
async fn torture_writer_process() {
    let Ok(dir) = std::env::var("CELLAR_TORTURE_DIR") else {
        return;
    };
    let env = |k: &str| std::env::var(k).unwrap();
    let seed: u64 = env("CELLAR_TORTURE_SEED").parse().unwrap();
    let base: i64 = env("CELLAR_TORTURE_BASE").parse().unwrap();
    let starts: Vec<u64> = env("CELLAR_TORTURE_STARTS")
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    let db = Database::open_with(&dir, writer_options(base)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut tasks = Vec::new();
    for (table, &start) in starts.iter().enumerate() {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            let sql = cellar::sql::SqlSession::new(db.clone());
            let t = db.table(TABLES[table].0).unwrap();
            let mut i = start;
            while Instant::now() < deadline {
                let outcomes = match unit(seed, table, i, base) {
                    Unit::Table(ops) => {
                        let results = t
                            .write_batch(ops.iter().map(|o| row_write(table, o)).collect())
                            .await
                            .unwrap();
                        outcomes(&results)
                    }
                    Unit::BatchWriteRow(ops) => {
                        let writes = ops
                            .iter()
                            .map(|o| (TABLES[table].0.to_string(), row_write(table, o)))
                            .collect();
                        outcomes(&db.batch_write(writes).await.unwrap())
                    }
                    Unit::Sql(stmt, _) => {
                        sql.query(&stmt).await.unwrap();
                        "-".to_string()
                    }
                };
                println!("ACK {table} {i} {} {outcomes}", unix_nanos());
                i += 1;
            }
        }));
    }
    // Partitions split and merge under the writers (a merge waits for
    // compaction to rewrite what a split left shared).
    let layout = {
        let db = db.clone();
        tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed ^ 0x5EED);
            while Instant::now() < deadline {
                let table = rng.random_range(0..TABLES.len());
                let t = db.table(TABLES[table].0).unwrap();
                let parts = t.partitions().await.unwrap();
                if parts.len() < 2 || (parts.len() < 6 && rng.random_bool(0.6)) {
                    let at = match table {
                        1 => PkValue::String(format!("p{:02}", rng.random_range(1..20))),
                        _ => PkValue::Integer(rng.random_range(1..KEYS)),
                    };
                    t.split_partition(at).await.unwrap();
                } else if let Err(e) = t.merge_partitions(parts[rng.random_range(0..parts.len() - 1)].id).await {
                    assert!(e.to_string().contains("share segments"), "{e}");
                }
                tokio::time::sleep(Duration::from_millis(rng.random_range(5..40))).await;
            }
        })
    };
    for t in tasks {
        t.await.unwrap();
    }
    layout.await.unwrap();
}

/// `1` per write that passed its check, `0` per one that failed it; any
/// other error stops the writer.
fn outcomes(results: &[Result<WriteResult>]) -> String {
    results
        .iter()
        .map(|r| match r {
            Ok(_) => '1',
            Err(e) if e.kind() == ErrorKind::ConditionCheckFail => '0',
            Err(e) => panic!("a write failed: {e}"),
        })
        .collect()
}

/// The outcomes a row-write unit's acknowledgement reports, as [`apply`]
/// gives them (an SQL unit reports `-`).
pub(crate) fn outcome_bits(passed: &[bool]) -> String {
    passed.iter().map(|p| if *p { '1' } else { '0' }).collect()
}

pub(crate) fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// What one writer run did before it died.
pub(crate) struct WriterRun {
    /// Per table, the units acknowledged (every unit below this one).
    pub acked: Vec<u64>,
    /// Per table, when each acknowledged unit was acknowledged (unix ns).
    pub ack_times: Vec<Vec<(u64, u128)>>,
    /// Per table, each acknowledged unit's outcomes (see [`outcome_bits`]).
    pub outcomes: Vec<BTreeMap<u64, String>>,
    /// How it was killed.
    pub how: String,
    /// Whether it died at its crash point.
    pub aborted: bool,
}

/// One writer run killed somehow; `env` is passed on to the writer.
pub(crate) fn run_writer(
    dir: &Path,
    seed: u64,
    base: i64,
    starts: &[u64],
    rng: &mut StdRng,
    env: &[(&str, String)],
) -> WriterRun {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.args([
        "torture::torture_writer_process",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("CELLAR_TORTURE_DIR", dir)
    .env("CELLAR_TORTURE_SEED", seed.to_string())
    .env("CELLAR_TORTURE_BASE", base.to_string())
    .env(
        "CELLAR_TORTURE_STARTS",
        starts.iter().map(u64::to_string).collect::<Vec<_>>().join(","),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    // A third of the runs aim at a crash point; all are killed by 4 s.
    let how = if rng.random_range(0..3) == 0 {
        let point = CRASH_POINTS[rng.random_range(0..CRASH_POINTS.len())];
        let n = rng.random_range(1..4);
        cmd.env("CELLAR_CRASH_POINT", format!("{point}:{n}"));
        (format!("crash point {point}:{n}"), Duration::from_secs(4))
    } else {
        let ms = rng.random_range(100..2500);
        (format!("SIGKILL after {ms} ms"), Duration::from_millis(ms))
    };
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let n = starts.len();
    let reader = std::thread::spawn(move || {
        let mut acked: Vec<Vec<(u64, u128)>> = vec![Vec::new(); n];
        let mut outcomes: Vec<BTreeMap<u64, String>> = vec![BTreeMap::new(); n];
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // The first may follow the test harness's own words on its line.
            if let Some(rest) = line.find("ACK ").map(|at| &line[at + 4..]) {
                let f: Vec<&str> = rest.split(' ').collect();
                // A line cut short by the kill is no acknowledgement.
                if f.len() != 4 {
                    continue;
                }
                let (table, unit) = (f[0].parse::<usize>().unwrap(), f[1].parse().unwrap());
                acked[table].push((unit, f[2].parse().unwrap()));
                outcomes[table].insert(unit, f[3].to_string());
            }
        }
        (acked, outcomes)
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    while started.elapsed() < how.1 {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill(); // SIGKILL
    let status = child.wait().unwrap();
    let (acked, outcomes) = reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    // A writer that panicked (a write refused) is a failure of its own.
    assert!(
        !stderr.contains("panicked"),
        "the writer failed ({}, {status}):\n{stderr}",
        how.0
    );
    use std::os::unix::process::ExitStatusExt;
    WriterRun {
        acked: acked
            .iter()
            .zip(starts)
            .map(|(a, s)| a.last().map_or(*s, |(i, _)| i + 1))
            .collect(),
        ack_times: acked,
        outcomes,
        how: how.0,
        aborted: status.signal() == Some(6),
    }
}

/// Creates the three tables in a new database at `dir`; `indexes`: the
/// SQL table gets a local and a global index (whose stream makes the
/// power-cut test's files a different set: it runs without them).
pub(crate) async fn create_tables(dir: &Path, options: DbOptions, indexes: bool) {
    let db = Database::open_with(dir, options).await.unwrap();
    for (name, mv) in &TABLES[..2] {
        let schema = if *name == "strs" {
            TableSchema::new(*name).pk("p", PkType::String).pk("q", PkType::Integer)
        } else {
            TableSchema::new(*name).pk("k", PkType::Integer)
        };
        let options = TableOptions {
            max_versions: *mv,
            ..Default::default()
        };
        db.create_table(schema, options).await.unwrap();
    }
    let sql = cellar::sql::SqlSession::new(db.clone());
    sql.execute("CREATE TABLE sqlt (k BIGINT, v BIGINT, s VARCHAR, PRIMARY KEY (k))")
        .await
        .unwrap();
    // Its indexes, checked against it after every kill: a local one kept
    // with each write, a global one following its stream.
    if indexes {
        sql.execute("CREATE INDEX sqlt_v ON sqlt (k, v) INCLUDE (s)")
            .await
            .unwrap();
        sql.execute("CREATE INDEX sqlt_s ON sqlt (s) INCLUDE (v) WITH (type = 'global')")
            .await
            .unwrap();
    }
    drop(sql);
    db.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_torture() {
    let cycles: usize = std::env::var("CELLAR_TORTURE_CYCLES").map_or(10, |c| c.parse().unwrap());
    let seed: u64 = std::env::var("CELLAR_TORTURE_SEED").map_or_else(|_| rand::random(), |s| s.parse().unwrap());
    eprintln!("crash_torture: {cycles} cycles, CELLAR_TORTURE_SEED={seed}");
    let dir = tempfile::tempdir().unwrap();
    let base = SystemClock.now_ms() - 12 * 3600 * 1000;
    create_tables(dir.path(), DbOptions::default(), true).await;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut models = vec![ModelTable::new(); TABLES.len()];
    let mut starts = vec![0u64; TABLES.len()];
    let (mut acked_total, mut in_flight_applied, mut checked_total) = (0u64, 0u64, 0u64);
    let mut indexed_rows = 0u64;
    let mut crash_points: BTreeMap<String, u32> = BTreeMap::new();
    for cycle in 0..cycles {
        let WriterRun {
            acked,
            outcomes,
            how,
            aborted,
            ..
        } = tokio::task::block_in_place(|| run_writer(dir.path(), seed, base, &starts, &mut rng, &[]));
        if aborted {
            *crash_points
                .entry(how.split(':').next().unwrap_or("").to_string())
                .or_insert(0) += 1;
        }
        let db = Database::open(dir.path())
            .await
            .unwrap_or_else(|e| panic!("cycle {cycle} ({how}): the database does not open: {e}"));
        for table in 0..TABLES.len() {
            let got = stored(&db, table).await;
            let mv = TABLES[table].1;
            let model = &mut models[table];
            for i in starts[table]..acked[table] {
                let u = unit(seed, table, i, base);
                let passed = apply(model, unit_ops(&u), writer_now(base));
                // Each acknowledged check went as the serial order says.
                assert_eq!(
                    outcomes[table].get(&i).map(String::as_str),
                    Some(match u {
                        Unit::Sql(..) => "-".to_string(),
                        _ => outcome_bits(&passed),
                    })
                    .as_deref(),
                    "cycle {cycle} ({how}), table {} unit {i}: checked writes (CELLAR_TORTURE_SEED={seed})",
                    TABLES[table].0
                );
                checked_total += unit_ops(&u).iter().filter(|o| matches!(o, Op::Checked(..))).count() as u64;
            }
            acked_total += acked[table] - starts[table];
            if visible(model, mv) == got {
                starts[table] = acked[table];
                continue;
            }
            // The unit in flight at the kill may be there, whole.
            let mut next = model.clone();
            apply(
                &mut next,
                unit_ops(&unit(seed, table, acked[table], base)),
                writer_now(base),
            );
            if visible(&next, mv) == got {
                *model = next;
                starts[table] = acked[table] + 1;
                in_flight_applied += 1;
                continue;
            }
            let want = visible(model, mv);
            let diff: Vec<_> = want
                .keys()
                .chain(got.keys())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .filter(|k| want.get(k) != got.get(k))
                .take(5)
                .map(|k| format!("key {k}: model {:?}\n  stored {:?}", want.get(k), got.get(k)))
                .collect();
            panic!(
                "cycle {cycle} ({how}), table {}: the stored rows are neither the {} acknowledged units nor one more \
                 (CELLAR_TORTURE_SEED={seed}); first differences:\n{}",
                TABLES[table].0,
                acked[table],
                diff.join("\n")
            );
        }
        // The local index equals its table as opened; the global one once
        // it has applied what its stream holds.
        let local = db.check_index("sqlt_v").await.unwrap();
        assert!(local.is_exact(), "cycle {cycle} ({how}): local index sqlt_v: {local:?}");
        db.wait_for_index("sqlt_s", Duration::from_secs(30)).await.unwrap();
        let global = db.check_index("sqlt_s").await.unwrap();
        assert!(
            global.is_exact(),
            "cycle {cycle} ({how}): global index sqlt_s: {global:?}"
        );
        indexed_rows += local.index_rows;
        db.close().await.unwrap();
    }
    let report = cellar::check(dir.path(), None).await.unwrap();
    assert_eq!(report.damaged(), 0, "{:?}", report.files);
    // The writers must have flushed and compacted for the kills to land
    // in the middle of that work.
    let db = Database::open(dir.path()).await.unwrap();
    let (mut flushes, mut compactions) = (0, 0);
    for (name, _) in TABLES {
        let s = db.table(name).unwrap().stats();
        flushes += s.flushes;
        compactions += s.compactions;
    }
    db.close().await.unwrap();
    assert!(
        flushes > 0 && compactions > 0,
        "{flushes} flushes, {compactions} compactions"
    );
    eprintln!(
        "crash_torture: {cycles} cycles survived, {acked_total} acknowledged units ({checked_total} checked writes \
         among them, each outcome as the serial order gives it) checked, \
         {in_flight_applied} in-flight units found applied whole, {flushes} flushes, {compactions} compactions, \
         {} aborts at crash points: {crash_points:?}, {indexed_rows} local index rows checked",
        crash_points.values().sum::<u32>()
    );
}
