//! Reads checked against the reference model while they race writes,
//! flushes and compactions: GetRow, GetRange and SQL, each with a
//! projection of one column, a few or all, over random streams of PutRow,
//! UpdateRow (puts, DeleteOneVersion, DeleteAll, increments), DeleteRow and
//! explicit versions, across reopens, with keys written anywhere and in
//! ascending order (flushes cut at the table's top, compactions that carry
//! segments over unchanged), with segments written with and
//! without `__cells` in one table, through a page cache that evicts all
//! the time or keeps nothing.
//!
//! A read runs while writes go on, so it may see any state between the
//! last write acknowledged before it started and the one in flight when it
//! ended: each read is checked against every model state in that window
//! and must equal one of them (a snapshot holds a prefix of the writes).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cellar::sql::SqlSession;
use cellar::*;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{T0, pk, scan_all};
use crate::model::{Key, Model, key_of, random_write, with_extras, write_as_model};

pub(crate) const ORDERS: [&str; 4] = ["", "a", "ab", "b\0"];
/// The model's columns, each given one type so that SQL shows every value.
pub(crate) const COLS: [(&str, ValueType); 4] = [
    ("a", ValueType::Integer),
    ("b", ValueType::String),
    ("c", ValueType::Double),
    ("d", ValueType::Boolean),
];

/// `v` turned into column `name`'s type (deterministically).
fn typed(name: &str, v: Value) -> Value {
    let n: i64 = match &v {
        Value::Integer(i) => *i,
        Value::Double(d) => (*d * 2.0) as i64,
        Value::String(s) => s.len() as i64,
        Value::Boolean(b) => *b as i64,
        Value::Binary(b) => b.iter().map(|&x| x as i64).sum(),
    };
    match name {
        "a" => Value::Integer(n),
        "b" => Value::String(format!("s{n}")),
        "c" => Value::Double(n as f64 / 4.0),
        _ => Value::Boolean(n % 2 == 0),
    }
}

/// A random write of the model's generator with every value typed by its
/// column.
pub(crate) fn typed_write(w: RowWrite) -> RowWrite {
    match w {
        RowWrite::Put(mut p) => {
            for c in &mut p.columns {
                c.value = typed(&c.name, c.value.clone());
            }
            p.into()
        }
        RowWrite::Update(mut u) => {
            // Increments go to the integer column, as its only action.
            if let Some(delta) = u.actions.iter().find_map(|a| match a {
                UpdateAction::Increment { delta, .. } => Some(*delta),
                _ => None,
            }) {
                u.actions
                    .retain(|a| a.column() != "a" && !matches!(a, UpdateAction::Increment { .. }));
                u.actions.push(UpdateAction::Increment {
                    name: "a".into(),
                    delta,
                });
            }
            for a in &mut u.actions {
                if let UpdateAction::Put { name, value, .. } = a {
                    *value = typed(name, value.clone());
                }
            }
            u.into()
        }
        d => d,
    }
}

/// What one read asked for.
#[derive(Debug, Clone)]
enum Read {
    Get {
        key: Key,
        columns: Option<Vec<String>>,
        versions: u32,
    },
    Range {
        lo: i64,
        hi: i64,
        columns: Option<Vec<String>>,
        versions: u32,
    },
    Sql {
        columns: Vec<String>,
    },
}

/// A read, the model states it may have seen (`from..=to`) and what it
/// returned, rendered.
struct Observed {
    read: Read,
    from: usize,
    to: usize,
    got: Vec<String>,
}

fn render_cells(key: &Key, cells: &[(String, Vec<Cell>)]) -> String {
    let mut s = format!("{key:?}");
    for (name, versions) in cells {
        s.push_str(&format!(" {name}="));
        for c in versions {
            s.push_str(&format!("{:?}@{} ", c.value, c.version));
        }
    }
    s
}

/// A row as the row API returns it under a projection and a version limit
/// (the reference: `Model::visible`, then the read options).
fn expected_row(model: &Model, key: &Key, columns: &Option<Vec<String>>, versions: u32) -> Option<String> {
    let mut cells = model.visible(0, model.rows.get(key)?)?;
    if let Some(cols) = columns {
        cells.retain(|(n, _)| cols.contains(n));
        if cells.is_empty() {
            return None;
        }
    }
    for (_, v) in &mut cells {
        v.truncate(versions as usize);
    }
    Some(render_cells(key, &cells))
}

fn expected(model: &Model, read: &Read) -> Vec<String> {
    match read {
        Read::Get { key, columns, versions } => expected_row(model, key, columns, *versions).into_iter().collect(),
        Read::Range {
            lo,
            hi,
            columns,
            versions,
        } => model
            .rows
            .keys()
            .filter(|k| k.0 >= *lo && k.0 < *hi)
            .filter_map(|k| expected_row(model, k, columns, *versions))
            .collect(),
        Read::Sql { columns } => {
            let mut out: Vec<String> = model
                .rows
                .iter()
                .filter_map(|(k, r)| {
                    let cells = model.visible(0, r)?;
                    let mut s = format!("{} {:?}", k.0, k.1);
                    for c in columns {
                        match cells.iter().find(|(n, _)| n == c) {
                            Some((_, v)) => s.push_str(&format!(" {c}={}", sql_text(&v[0].value))),
                            None => s.push_str(&format!(" {c}=NULL")),
                        }
                    }
                    Some(s)
                })
                .collect();
            out.sort();
            out
        }
    }
}

pub(crate) fn sql_text(v: &Value) -> String {
    match v {
        Value::Integer(i) => i.to_string(),
        Value::Double(d) => d.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Boolean(b) => b.to_string(),
        Value::Binary(b) => format!("{b:?}"),
    }
}

pub(crate) fn sql_rows(batches: &[RecordBatch], columns: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            let card = b.column(0).as_primitive::<Int64Type>().value(r);
            let order = match b.column(1).data_type() {
                DataType::Utf8View => b.column(1).as_string_view().value(r).to_string(),
                _ => b.column(1).as_string::<i32>().value(r).to_string(),
            };
            let mut s = format!("{card} {order:?}");
            for (i, c) in columns.iter().enumerate() {
                let col = b.column(i + 2);
                let v = if col.is_null(r) {
                    "NULL".to_string()
                } else {
                    match col.data_type() {
                        DataType::Int64 => col.as_primitive::<Int64Type>().value(r).to_string(),
                        DataType::Float64 => col.as_primitive::<Float64Type>().value(r).to_string(),
                        DataType::Utf8 => format!("{:?}", col.as_string::<i32>().value(r)),
                        DataType::Utf8View => format!("{:?}", col.as_string_view().value(r)),
                        DataType::Boolean => col.as_boolean().value(r).to_string(),
                        t => panic!("unexpected type {t}"),
                    }
                };
                s.push_str(&format!(" {c}={v}"));
            }
            out.push(s);
        }
    }
    out.sort();
    out
}

/// One column, a few, or all (`None` for the row API).
fn projection(rng: &mut StdRng) -> Option<Vec<String>> {
    match rng.random_range(0..3) {
        0 => Some(vec![COLS[rng.random_range(0..4)].0.to_string()]),
        1 => Some(
            COLS.iter()
                .filter(|_| rng.random())
                .map(|(c, _)| c.to_string())
                .chain(["zz".to_string()])
                .collect(),
        ),
        _ => None,
    }
}

async fn reader(
    kind: u8,
    t: Table,
    sql: SqlSession,
    history: Arc<parking_lot::Mutex<Vec<Model>>>,
    done: Arc<AtomicBool>,
    seed: u64,
) -> Vec<Observed> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    while !done.load(Ordering::Acquire) {
        let from = history.lock().len() - 1;
        let versions = rng.random_range(1..4);
        let (read, got) = match kind {
            0 => {
                let key: Key = (rng.random_range(-3..3), ORDERS[rng.random_range(0..4)].to_string());
                let columns = projection(&mut rng);
                let options = ReadOptions {
                    max_versions: Some(versions),
                    columns_to_get: columns.clone(),
                    ..Default::default()
                };
                let row = t
                    .get_row(GetRow::new(pk(key.0, &key.1)).options(options))
                    .await
                    .unwrap()
                    .row;
                let got = row.map(|r| render_cells(&key_of(&r), &r.columns)).into_iter().collect();
                (Read::Get { key, columns, versions }, got)
            }
            1 => {
                let (a, b) = (rng.random_range(-4..4), rng.random_range(-4..4));
                let (lo, hi) = (a.min(b), a.max(b));
                let columns = projection(&mut rng);
                let options = ReadOptions {
                    max_versions: Some(versions),
                    columns_to_get: columns.clone(),
                    ..Default::default()
                };
                // One page: each page is a snapshot of its own, so pages
                // together are not one cut of the writes.
                let req = GetRange::new()
                    .start(PkBound::new().with("card", lo))
                    .end(PkBound::new().with("card", hi))
                    .limit(1000)
                    .options(options);
                let page = t.get_range(req).await.unwrap();
                assert!(page.next_start.is_none(), "a page of at most 24 rows was cut");
                let rows = page.rows;
                let got = rows.iter().map(|r| render_cells(&key_of(r), &r.columns)).collect();
                (
                    Read::Range {
                        lo,
                        hi,
                        columns,
                        versions,
                    },
                    got,
                )
            }
            _ => {
                let columns: Vec<String> = match projection(&mut rng) {
                    Some(c) => c.into_iter().filter(|c| c != "zz").collect(),
                    None => COLS.iter().map(|(c, _)| c.to_string()).collect(),
                };
                let list: String = columns.iter().map(|c| format!(", {c}")).collect();
                let q = format!("SELECT card, \"order\"{list} FROM t");
                let batches = sql.query(&q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
                (
                    Read::Sql {
                        columns: columns.clone(),
                    },
                    sql_rows(&batches, &columns),
                )
            }
        };
        let to = history.lock().len();
        out.push(Observed { read, from, to, got });
        // Leave the writer most of the machine.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    out
}

async fn run(seed: u64, phases: usize, writes: usize) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let small = |cells: bool, version_rows: bool| DbOptions {
        row_group_rows: 16,
        page_rows: 4,
        page_bytes: 16,
        compaction_trigger_runs: 2,
        row_cells: cells,
        // Segments with versions as they are (as earlier releases wrote
        // them) mix with segments of relative versions, as `__cells` does.
        relative_versions: cells == (seed % 4 < 2),
        // Segments with a row per older version (as earlier releases wrote
        // them) mix with segments of newest rows, whose older versions
        // live in `__cells` alone.
        older_version_rows: version_rows,
        // Odd seeds compact into ZSTD-compressed value columns.
        compaction_zstd_level: (seed % 2 == 1).then_some(3),
        // Mapped segment pages are let go every four reads or so, while
        // other reads borrow them.
        mapped_segment_bytes: 256 << 10,
        // Point and range reads' decoded pages: none kept (every third
        // seed), or a few dozen, evicted all the time.
        page_cache_bytes: if seed.is_multiple_of(3) { 0 } else { 8 << 10 },
        ..DbOptions::default().clock(clock.clone()).memtable_bytes(4 << 10)
    };
    let mut rng = StdRng::seed_from_u64(seed);
    // The first phase writes segments without `__cells`; later phases mix
    // them with segments that have it, until compaction rewrites them.
    let mut db = Database::open_with(dir.path(), small(false, false)).await.unwrap();
    let mut schema = TableSchema::new("t")
        .pk("card", PkType::Integer)
        .pk("order", PkType::String);
    for (c, ty) in COLS {
        schema = schema.column(c, ty);
    }
    let options = TableOptions {
        max_versions: 3,
        ..Default::default()
    };
    db.create_table(schema, options).await.unwrap();
    let mut t = db.table("t").unwrap();
    let mut model = Model {
        opts: t.options(),
        ..Default::default()
    };
    let mut reads = 0;
    let mut fresh = 0i64;
    let mut page_stats = Vec::new();
    for phase in 0..phases {
        let history = Arc::new(parking_lot::Mutex::new(vec![model.clone()]));
        let done = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3u8)
            .map(|kind| {
                tokio::spawn(reader(
                    kind,
                    t.clone(),
                    SqlSession::new(db.clone()),
                    history.clone(),
                    done.clone(),
                    seed * 100 + phase as u64 * 10 + kind as u64,
                ))
            })
            .collect();
        for step in 0..writes {
            let now = clock.now_ms();
            // The second phase writes mostly new keys in ascending order,
            // and some below them: its flushes are cut at the table's top
            // and its compactions carry segments that overlap nothing.
            let key: Key = if phase == 1 && rng.random_range(0..10) < 9 {
                fresh += 1;
                (2 + fresh, ORDERS[rng.random_range(0..4)].to_string())
            } else {
                (rng.random_range(-3..3), ORDERS[rng.random_range(0..4)].to_string())
            };
            match rng.random_range(0..100) {
                0..=84 => {
                    let w = random_write(&mut rng, now, &key);
                    let w = typed_write(with_extras(&mut rng, w));
                    let what = format!("seed {seed} phase {phase} step {step}");
                    write_as_model(&mut model, &t, now, &key, w, &what).await;
                    history.lock().push(model.clone());
                }
                85..=89 => t.flush().await.unwrap(),
                90..=91 => t.compact().await.unwrap(),
                92..=93 => {
                    t.compact_newest(2).await.unwrap();
                }
                _ => clock.advance(rng.random_range(0..3000)),
            }
            if step % 8 == 0 {
                tokio::task::yield_now().await;
            }
        }
        eprintln!("read_diff seed {seed} phase {phase}: {writes} steps written");
        done.store(true, Ordering::Release);
        let history = history.lock().clone();
        for r in readers {
            for o in r.await.unwrap() {
                reads += 1;
                let to = o.to.min(history.len() - 1);
                let fits = (o.from..=to).any(|k| expected(&history[k], &o.read) == o.got);
                assert!(
                    fits,
                    "seed {seed} phase {phase}: {:?} returned\n{:#?}\nbut the model had, after write {}:\n{:#?}\nand after write {to}:\n{:#?}",
                    o.read,
                    o.got,
                    o.from,
                    expected(&history[o.from], &o.read),
                    expected(&history[to], &o.read),
                );
            }
        }
        page_stats.push(db.page_cache_stats());
        drop(t);
        db.close().await.unwrap();
        db = Database::open_with(
            dir.path(),
            small(phase % 2 == 0, (seed + phase as u64).is_multiple_of(3)),
        )
        .await
        .unwrap();
        t = db.table("t").unwrap();
    }
    // Reads of every kind ran, many of them during writes.
    assert!(reads > 30 * phases, "seed {seed}: only {reads} reads");
    // Some compaction carried a segment over unchanged.
    assert!(t.stats().compaction_moved_bytes > 0, "seed {seed}: {:?}", t.stats());
    let all = scan_all(
        &t,
        GetRange::new().options(ReadOptions {
            max_versions: Some(3),
            ..Default::default()
        }),
    )
    .await;
    let want: BTreeMap<Key, String> = model
        .rows
        .keys()
        .filter_map(|k| expected_row(&model, k, &None, 3).map(|r| (k.clone(), r)))
        .collect();
    let got: BTreeMap<Key, String> = all
        .iter()
        .map(|r| (key_of(r), render_cells(&key_of(r), &r.columns)))
        .collect();
    assert_eq!(got, want, "seed {seed}: after the last reopen");
    assert!(
        db.mapped_page_releases() > 0,
        "seed {seed}: no mapped pages were let go"
    );
    page_stats.push(db.page_cache_stats());
    for pages in &page_stats {
        assert!(pages.bytes <= pages.capacity, "seed {seed}: {pages:?}");
    }
    // Reads found pages in the cache, and read pages on misses.
    let (hits, misses) = page_stats.iter().fold((0, 0), |(h, m), p| (h + p.hits, m + p.misses));
    assert!(misses > 0, "seed {seed}: {page_stats:?}");
    assert_eq!(hits > 0, !seed.is_multiple_of(3), "seed {seed}: {page_stats:?}");
    drop(t);
    db.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_racing_writes_flushes_and_compactions_match_the_model() {
    // CELLAR_READ_DIFF_SEEDS=N runs more seeds.
    let seeds = crate::common::seeds("CELLAR_READ_DIFF_SEEDS", 3);
    for seed in 0..seeds {
        run(seed, 3, 300).await;
    }
}
