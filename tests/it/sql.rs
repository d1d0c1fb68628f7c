//! SQL behaviour that golden files cannot show: SQL results against the row
//! API on random data, discovered columns and type conversion, memtable and
//! segment mixes, file import/export, and embedding.

use std::sync::Arc;

use cellar::sql::{SqlSession, register_table, session_context};
use cellar::*;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{T0, fixture, open, pk, scan_all};

pub(crate) async fn rows(sess: &SqlSession, sql: &str) -> Vec<RecordBatch> {
    sess.query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Renders every row as text, "col=value" joined, for comparisons.
pub(crate) fn text_rows(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            let mut cells = Vec::new();
            for (f, c) in b.schema().fields().iter().zip(b.columns()) {
                if c.is_null(r) {
                    continue;
                }
                let v = match c.data_type() {
                    DataType::Int64 => c.as_primitive::<Int64Type>().value(r).to_string(),
                    DataType::Float64 => c.as_primitive::<Float64Type>().value(r).to_string(),
                    DataType::Utf8 => c.as_string::<i32>().value(r).to_string(),
                    DataType::Utf8View => c.as_string_view().value(r).to_string(),
                    DataType::Boolean => c.as_boolean().value(r).to_string(),
                    DataType::Binary => format!("{:?}", c.as_binary::<i32>().value(r)),
                    t => panic!("unexpected type {t}"),
                };
                cells.push(format!("{}={v}", f.name()));
            }
            out.push(cells.join(" "));
        }
    }
    out
}

/// The same rendering for row-API rows (latest value per column).
pub(crate) fn api_rows(rows: &[Row], columns: &[&str]) -> Vec<String> {
    rows.iter()
        .map(|r| {
            let mut cells: Vec<String> = r
                .primary_key
                .columns
                .iter()
                .map(|(n, v)| match v {
                    PkValue::Integer(i) => format!("{n}={i}"),
                    PkValue::String(s) => format!("{n}={s}"),
                    PkValue::Binary(b) => format!("{n}={b:?}"),
                    PkValue::AutoIncrement => unreachable!("a read key holds values"),
                })
                .collect();
            for c in columns {
                if let Some(v) = r.latest(c) {
                    cells.push(match v {
                        Value::Integer(i) => format!("{c}={i}"),
                        Value::Double(d) => format!("{c}={d}"),
                        Value::String(s) => format!("{c}={s}"),
                        Value::Boolean(b) => format!("{c}={b}"),
                        Value::Binary(b) => format!("{c}={b:?}"),
                    });
                }
            }
            cells.join(" ")
        })
        .collect()
}

/// A key condition as a Rust predicate on (card, order).
type KeyFilter = Box<dyn Fn(i64, &str) -> bool>;

/// Random writes through the row API (puts, updates, column deletes, row
/// deletes, explicit older versions), with flushes and a compaction in
/// between so that segments overlap, some are compacted and the memtable
/// holds the rest; then SQL must return exactly what GetRange returns, for
/// full scans and for random key conditions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_matches_the_row_api_on_random_data() {
    for seed in 0..3u64 {
        let (_dir, clock, db, t) = fixture(TableOptions {
            max_versions: 2,
            ..Default::default()
        })
        .await;
        let mut rng = StdRng::seed_from_u64(seed);
        let orders = ["a", "b", "ab", "", "z\u{e9}"];
        for step in 0..600 {
            let card = rng.random_range(-5..20i64);
            let order = orders[rng.random_range(0..orders.len())];
            let k = pk(card, order);
            match rng.random_range(0..10) {
                0..=4 => {
                    let mut p = PutRow::new(k).column("x", rng.random_range(0..100i64));
                    if rng.random_bool(0.5) {
                        p = p.column("y", format!("s{}", rng.random_range(0..9)));
                    }
                    t.put_row(p).await.unwrap();
                }
                5..=6 => {
                    let mut u = UpdateRow::new(k).put("x", rng.random_range(100..200i64));
                    if rng.random_bool(0.3) {
                        u = u.delete_all("y");
                    }
                    if rng.random_bool(0.2) {
                        u = u.put_at("z", 1.5, T0 - 10_000);
                    }
                    t.update_row(u).await.unwrap();
                }
                7 => {
                    t.delete_row(DeleteRow::new(k)).await.unwrap();
                }
                _ => {
                    t.update_row(UpdateRow::new(k).put("y", "u")).await.unwrap();
                }
            }
            clock.advance(1);
            // Flushes leave the last writes in the memtable; seed 0 compacts
            // early (overlapping segments later), the others late (one
            // compacted segment plus memtable writes).
            if step % 150 == 100 {
                t.flush().await.unwrap();
            }
            if step == if seed == 0 { 320 } else { 560 } {
                t.compact().await.unwrap();
            }
        }
        let sess = SqlSession::new(db.clone());
        let cols = ["x", "y", "z"];
        let all = scan_all(&t, GetRange::new()).await;
        let got = text_rows(&rows(&sess, "SELECT card, \"order\", x, y, z FROM t ORDER BY card, \"order\"").await);
        assert_eq!(got, api_rows(&all, &cols), "seed {seed}: full scan");
        let n = rows(&sess, "SELECT count(*) AS n FROM t").await;
        assert_eq!(
            n[0].column(0).as_primitive::<Int64Type>().value(0) as usize,
            all.len(),
            "seed {seed}: count(*)"
        );
        for _ in 0..25 {
            let a = rng.random_range(-6..21i64);
            let b = rng.random_range(-6..21i64);
            let o = orders[rng.random_range(0..orders.len())];
            let (cond, keep): (String, KeyFilter) = match rng.random_range(0..5) {
                0 => (format!("card = {a}"), Box::new(move |c, _| c == a)),
                1 => (
                    format!("card BETWEEN {a} AND {b}"),
                    Box::new(move |c, _| c >= a && c <= b),
                ),
                2 => (
                    format!("card IN ({a}, {b}) AND \"order\" >= '{o}'"),
                    Box::new(move |c, s| (c == a || c == b) && s >= o),
                ),
                3 => (
                    format!("card > {a} AND \"order\" = '{o}'"),
                    Box::new(move |c, s| c > a && s == o),
                ),
                _ => (
                    format!("card = {a} AND \"order\" = '{o}'"),
                    Box::new(move |c, s| c == a && s == o),
                ),
            };
            let sql = format!("SELECT card, \"order\", x, y, z FROM t WHERE {cond} ORDER BY card, \"order\"");
            let got = text_rows(&rows(&sess, &sql).await);
            let want: Vec<Row> = all
                .iter()
                .filter(|r| {
                    let c = match r.primary_key.get("card") {
                        Some(PkValue::Integer(c)) => *c,
                        _ => unreachable!(),
                    };
                    let s = match r.primary_key.get("order") {
                        Some(PkValue::String(s)) => s.as_str(),
                        _ => unreachable!(),
                    };
                    keep(c, s)
                })
                .cloned()
                .collect();
            assert_eq!(got, api_rows(&want, &cols), "seed {seed}: {sql}");
        }
        // A short TTL expires part of every source: SQL and GetRange agree.
        db.alter_table(
            "t",
            OptionsUpdate {
                ttl_secs: Some(5),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        clock.set(T0 + 5300);
        let all = scan_all(&t, GetRange::new()).await;
        assert!(!all.is_empty());
        let got = text_rows(&rows(&sess, "SELECT card, \"order\", x, y, z FROM t ORDER BY card, \"order\"").await);
        assert_eq!(got, api_rows(&all, &cols), "seed {seed}: full scan after TTL");
        let n = rows(&sess, "SELECT count(*) AS n FROM t").await;
        assert_eq!(n[0].column(0).as_primitive::<Int64Type>().value(0) as usize, all.len());
        drop(sess);
        db.close().await.unwrap();
    }
}

/// A discovered column shows with the type most of its values have; other
/// values read as NULL unless they convert exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovered_columns_take_the_majority_type() {
    let (_dir, _clock, db, t) = fixture(TableOptions::default()).await;
    let vals: [Value; 5] = [
        Value::Integer(1),
        Value::Integer(2),
        Value::Double(3.0),
        Value::Double(3.5),
        Value::String("7".into()),
    ];
    for (i, v) in vals.iter().enumerate() {
        t.put_row(PutRow::new(pk(i as i64, "o")).column("n", v.clone()))
            .await
            .unwrap();
    }
    // Half flushed, half in the memtable: both paths convert the same way.
    t.flush().await.unwrap();
    t.put_row(PutRow::new(pk(9, "o")).column("n", Value::Boolean(true)))
        .await
        .unwrap();
    let sess = SqlSession::new(db.clone());
    let b = rows(&sess, "SELECT card, n FROM t ORDER BY card").await;
    assert_eq!(b[0].schema().field(1).data_type(), &DataType::Int64);
    assert_eq!(
        text_rows(&b),
        vec![
            "card=0 n=1",
            "card=1 n=2",
            "card=2 n=3",
            "card=3",
            "card=4 n=7",
            "card=9"
        ]
    );
    // Declaring the column fixes its type.
    db.add_column(
        "t",
        ColumnDef {
            name: "n".into(),
            value_type: ValueType::String,
        },
    )
    .await
    .unwrap();
    let b = rows(&sess, "SELECT n FROM t ORDER BY card").await;
    assert_eq!(text_rows(&b), vec!["n=1", "n=2", "n=3", "n=3.5", "n=7", "n=true"]);
    drop(sess);
    db.close().await.unwrap();
}

/// Writes after the last flush (the memtable) and rows overwritten or
/// deleted there are merged into the columnar scan of a compacted segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memtable_changes_merge_into_compacted_scans() {
    let (_dir, clock, db, t) = fixture(TableOptions::default()).await;
    let sess = SqlSession::new(db.clone());
    sess.query("INSERT INTO t SELECT value, 'o', value * 10 AS x FROM generate_series(0, 9999) AS g(value)")
        .await
        .unwrap_err(); // column x is not known yet: a clear error
    t.put_row(PutRow::new(pk(-1, "o")).column("x", 0i64)).await.unwrap();
    let sess = SqlSession::new(db.clone());
    sess.query(
        "INSERT INTO t (card, \"order\", x) SELECT value, 'o', value * 10 FROM generate_series(0, 9999) AS g(value)",
    )
    .await
    .unwrap();
    t.compact().await.unwrap();
    clock.advance(1000);
    // Memtable: an overwrite, an update (merges over the segment), a delete,
    // a new key between segment keys and one past the end.
    t.put_row(PutRow::new(pk(5, "o")).column("y", "replaced"))
        .await
        .unwrap();
    t.update_row(UpdateRow::new(pk(6, "o")).put("y", "updated"))
        .await
        .unwrap();
    t.delete_row(DeleteRow::new(pk(7, "o"))).await.unwrap();
    t.put_row(PutRow::new(pk(7, "p")).column("x", 1i64)).await.unwrap();
    t.put_row(PutRow::new(pk(20000, "o")).column("x", 2i64)).await.unwrap();
    let sess = SqlSession::new(db.clone());
    let b = rows(&sess, "SELECT card, \"order\", x, y FROM t WHERE card BETWEEN 4 AND 8").await;
    assert_eq!(
        text_rows(&b),
        vec![
            "card=4 order=o x=40",
            "card=5 order=o y=replaced",
            "card=6 order=o x=60 y=updated",
            "card=7 order=p x=1",
            "card=8 order=o x=80",
        ]
    );
    let b = rows(&sess, "SELECT count(*), sum(x) FROM t").await;
    let n = b[0].column(0).as_primitive::<Int64Type>().value(0);
    let sum = b[0].column(1).as_primitive::<Int64Type>().value(0);
    assert_eq!(n, 10001 + 1);
    let base: i64 = (0..10000).map(|v| v * 10).sum();
    assert_eq!(sum, base - 50 - 70 + 1 + 2);
    drop(sess);
    db.close().await.unwrap();
}

/// COPY to Parquet and CSV, then INSERT ... SELECT from those files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_and_export_files() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let db = open(dir.path(), &clock).await;
    let sess = SqlSession::new(db.clone());
    sess.query("CREATE TABLE src (id BIGINT, name VARCHAR, score DOUBLE, PRIMARY KEY (id))")
        .await
        .unwrap();
    sess.query("INSERT INTO src SELECT value, 'n' || value, value / 4.0 FROM generate_series(1, 5000) AS g(value)")
        .await
        .unwrap();
    let pq = dir.path().join("out.parquet");
    let csv = dir.path().join("out.csv");
    let b = rows(
        &sess,
        &format!("COPY (SELECT * FROM src WHERE id <= 3000) TO '{}'", pq.display()),
    )
    .await;
    assert_eq!(
        b[0].column(0)
            .as_primitive::<datafusion::arrow::datatypes::UInt64Type>()
            .value(0),
        3000
    );
    rows(
        &sess,
        &format!("COPY (SELECT * FROM src WHERE id > 3000) TO '{}'", csv.display()),
    )
    .await;
    sess.query("CREATE TABLE dst (id BIGINT, name VARCHAR, score DOUBLE, PRIMARY KEY (id))")
        .await
        .unwrap();
    rows(&sess, &format!("INSERT INTO dst SELECT * FROM '{}'", pq.display())).await;
    rows(
        &sess,
        &format!(
            "CREATE EXTERNAL TABLE ext (id BIGINT, name VARCHAR, score DOUBLE) STORED AS CSV LOCATION '{}' OPTIONS ('format.has_header' 'true')",
            csv.display()
        ),
    )
    .await;
    rows(&sess, "INSERT INTO dst SELECT * FROM ext").await;
    let a = text_rows(&rows(&sess, "SELECT * FROM src").await);
    let b = text_rows(&rows(&sess, "SELECT * FROM dst").await);
    assert_eq!(a.len(), 5000);
    assert_eq!(a, b);
    drop(sess);
    db.close().await.unwrap();
}

/// A program can register Cellar tables into its own SessionContext, or
/// take Cellar's context (every table, the table functions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedding_contexts() {
    let (_dir, _clock, db, t) = fixture(TableOptions::default()).await;
    t.put_row(PutRow::new(pk(1, "a")).column("x", 5i64)).await.unwrap();
    let own = datafusion::prelude::SessionContext::new();
    register_table(&own, &db, "t", "orders").unwrap();
    let b = own
        .sql("SELECT sum(x) FROM orders")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(b[0].column(0).as_primitive::<Int64Type>().value(0), 5);
    let ctx = session_context(&db);
    let b = ctx
        .sql("SELECT count(*) FROM cellar_versions('t')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(b[0].column(0).as_primitive::<Int64Type>().value(0), 1);
    assert!(register_table(&own, &db, "missing", "m").is_err());
    drop((own, ctx));
    db.close().await.unwrap();
}

/// Non-key predicates prune row groups by their statistics; memtable writes
/// that fall into a pruned row group still come out (placed from the
/// memtable overlay, or, without one, by reading that group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_group_pruning_keeps_memtable_rows() {
    let (_dir, _clock, db, t) = grouped_table(2000).await;
    t.update_row(UpdateRow::new(pk(3, "o")).put("x", 100_000i64))
        .await
        .unwrap();
    t.put_row(PutRow::new(pk(5, "new")).column("x", 99_999i64))
        .await
        .unwrap();
    t.update_row(UpdateRow::new(pk(1990, "o")).put("x", 1i64))
        .await
        .unwrap();
    let sess = SqlSession::new(db.clone());
    let plan = text_rows(&rows(&sess, "EXPLAIN SELECT card FROM t WHERE x > 1950").await).join("\n");
    assert!(plan.contains("row_group_pruning=[x > Int64(1950)]"), "{plan}");
    let b = rows(
        &sess,
        "SELECT card, \"order\", x, s FROM t WHERE x > 1950 ORDER BY card, \"order\"",
    )
    .await;
    let got = text_rows(&b);
    // Card 3's update merges over its segment row (s stays).
    let mut want = vec![
        "card=3 order=o x=100000 s=v00003".to_string(),
        "card=5 order=new x=99999".to_string(),
    ];
    want.extend(
        (1951..2000)
            .filter(|i| *i != 1990)
            .map(|i| format!("card={i} order=o x={i} s=v{i:05}")),
    );
    assert_eq!(got, want);
    let b = rows(&sess, "SELECT count(*) FROM t WHERE s >= 'v01990' AND s < 'v01995'").await;
    assert_eq!(b[0].column(0).as_primitive::<Int64Type>().value(0), 5);
    drop(sess);
    db.close().await.unwrap();
}

/// A scan of a segment with memtable writes over it places those writes by
/// position from an overlay: built once per memtable state, reused by
/// every later scan (whatever its key range or filter), extended by the
/// keys written since after writes, built anew when a write adds a column.
/// Results match the row API at each step, also after a TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memtable_overlays_place_writes_by_position() {
    let (_dir, clock, db, t) = grouped_table(3000).await;
    clock.advance(10_000);
    let mut rng = StdRng::seed_from_u64(7);
    let orders = ["", "o", "o2", "p"];
    let random_key = |rng: &mut StdRng| pk(rng.random_range(-5..3010i64), orders[rng.random_range(0..orders.len())]);
    let random_op = |rng: &mut StdRng, k: PrimaryKey| -> RowWrite {
        match rng.random_range(0..4) {
            0 => PutRow::new(k).column("x", rng.random_range(0..5000i64)).into(),
            1 => UpdateRow::new(k).put("x", rng.random_range(0..5000i64)).into(),
            2 => UpdateRow::new(k).delete_all("x").put("s", "u").into(),
            _ => DeleteRow::new(k).into(),
        }
    };
    // Keys spread over the table (a few per 64-row group) and a dense run
    // (many in a group).
    let mut first: Vec<PrimaryKey> = (0..300).map(|_| random_key(&mut rng)).collect();
    first.extend((1000..1100).map(|c| pk(c, orders[c as usize % orders.len()])));
    let batch: Vec<RowWrite> = first.iter().map(|k| random_op(&mut rng, k.clone())).collect();
    for r in write_all(&t, batch).await {
        r.unwrap();
    }
    let sess = SqlSession::new(db.clone());
    overlay_check(&sess, &t, "first scans").await;
    assert_eq!(t.stats().scan_overlay_builds, 1, "one overlay for the segment");
    overlay_check(&sess, &t, "repeated scans").await;
    assert_eq!(t.stats().scan_overlay_builds, 1, "no write: the overlay is reused");
    t.update_row(UpdateRow::new(pk(1500, "o")).put("x", 4242i64))
        .await
        .unwrap();
    overlay_check(&sess, &t, "after one more write").await;
    let built = |t: &Table| (t.stats().scan_overlay_builds, t.stats().scan_overlay_extensions);
    assert_eq!(built(&t), (1, 1), "a write makes the next scan extend it");
    let b = rows(&sess, "SELECT x FROM t WHERE card = 1500 AND \"order\" = 'o'").await;
    assert_eq!(text_rows(&b), vec!["x=4242"]);
    // Rounds of writes, each followed by scans: keys new to the memtable,
    // keys it already holds (rewritten, updated, deleted), segment keys.
    for round in 0..4 {
        let mut keys: Vec<PrimaryKey> = (0..30).map(|_| random_key(&mut rng)).collect();
        keys.extend((0..10).map(|_| first[rng.random_range(0..first.len())].clone()));
        let batch: Vec<RowWrite> = keys.into_iter().map(|k| random_op(&mut rng, k)).collect();
        for r in t.write_batch(batch).await.unwrap() {
            r.unwrap();
        }
        overlay_check(&sess, &t, &format!("extension round {round}")).await;
    }
    assert_eq!(built(&t), (1, 5), "each round extends the overlay");
    // A new attribute column changes the overlay's layout: built anew.
    t.update_row(UpdateRow::new(pk(1501, "o")).put("y", 1i64))
        .await
        .unwrap();
    overlay_check(&sess, &t, "after a new column").await;
    assert_eq!(built(&t), (2, 5), "a new column makes the next scan build it anew");
    let b = rows(&sess, "SELECT x, y FROM t WHERE card = 1501 AND \"order\" = 'o'").await;
    assert_eq!(text_rows(&b), vec!["x=1501 y=1"]);
    // The segment's values expire, the memtable's do not.
    db.alter_table(
        "t",
        OptionsUpdate {
            ttl_secs: Some(5),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    clock.advance(5_000);
    overlay_check(&sess, &t, "after the TTL").await;
    drop(sess);
    db.close().await.unwrap();
}

/// SQL against the row API on a full scan, a key range with a value
/// filter, and a filtered count.
pub(crate) async fn overlay_check(sess: &SqlSession, t: &Table, what: &str) {
    let cols = ["x", "s"];
    let all = scan_all(t, GetRange::new()).await;
    let q = "SELECT card, \"order\", x, s FROM t ORDER BY card, \"order\"";
    assert_eq!(
        text_rows(&rows(sess, q).await),
        api_rows(&all, &cols),
        "{what}: full scan"
    );
    let q = "SELECT card, \"order\", x, s FROM t WHERE card BETWEEN 100 AND 900 AND x > 1000 ORDER BY card, \"order\"";
    let x_over = |r: &&Row| matches!(r.latest("x"), Some(Value::Integer(x)) if *x > 1000);
    let want: Vec<Row> = all
        .iter()
        .filter(|r| matches!(r.primary_key.get("card"), Some(PkValue::Integer(c)) if (100..=900).contains(c)))
        .filter(x_over)
        .cloned()
        .collect();
    assert_eq!(text_rows(&rows(sess, q).await), api_rows(&want, &cols), "{what}: {q}");
    let n = rows(sess, "SELECT count(*) FROM t WHERE x > 1000").await;
    let want = all.iter().filter(x_over).count();
    assert_eq!(
        n[0].column(0).as_primitive::<Int64Type>().value(0) as usize,
        want,
        "{what}: count"
    );
}

/// `rows` rows `(i, "o")` with `x = i`, `s = "v{i:05}"`, compacted into one
/// segment of 64-row groups (pages of 16 rows).
async fn grouped_table(rows: i64) -> (tempfile::TempDir, Arc<ManualClock>, Database, Table) {
    grouped_table_of((0..rows).map(|i| (i, "o".to_string()))).await
}

/// Rows `(card, order)` (ascending) with `x = card`, `s = "v{card:05}"`,
/// compacted into one segment of 64-row groups (pages of 16 rows).
pub(crate) async fn grouped_table_of(
    keys: impl Iterator<Item = (i64, String)>,
) -> (tempfile::TempDir, Arc<ManualClock>, Database, Table) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let opts = DbOptions {
        row_group_rows: 64,
        page_rows: 16,
        ..DbOptions::default().clock(clock.clone())
    };
    let db = Database::open_with(dir.path(), opts).await.unwrap();
    let t = crate::common::card_order_table(&db, TableOptions::default()).await;
    let writes: Vec<RowWrite> = keys
        .map(|(i, order)| {
            PutRow::new(pk(i, &order))
                .column("x", i)
                .column("s", format!("v{i:05}"))
                .into()
        })
        .collect();
    write_ok(&t, writes).await;
    t.compact().await.unwrap();
    assert_eq!(t.stats().segments, 1);
    (dir, clock, db, t)
}

/// Dense memtable keys placed by narrowing column by column: many orders
/// per card, keys on stored rows, between them, before and after a card's
/// rows, in cards the segment lacks; PutRows, UpdateRows merged over their
/// stored row, DeleteRows; more keys than an overlay build encodes at a
/// time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memtable_overlays_place_dense_keys_by_narrowing() {
    // Cards 0, 3, 6, ... with orders o000, o002, ... o038: 20 rows a card.
    let stored = (0..300i64)
        .filter(|c| c % 3 == 0)
        .flat_map(|c| (0..20).map(move |o| (c, format!("o{:03}", 2 * o))));
    let (_dir, _clock, db, t) = grouped_table_of(stored).await;
    let mut rng = StdRng::seed_from_u64(11);
    let mut writes: Vec<RowWrite> = Vec::new();
    for c in -2..305i64 {
        for o in -1..42 {
            if rng.random_range(0..10) > 3 {
                continue;
            }
            let order = match o {
                -1 => "a".to_string(),
                41 => "z".to_string(),
                o => format!("o{o:03}"),
            };
            let k = pk(c, &order);
            writes.push(match rng.random_range(0..4) {
                0 => PutRow::new(k).column("x", rng.random_range(0..5000i64)).into(),
                1 => UpdateRow::new(k).put("x", rng.random_range(0..5000i64)).into(),
                2 => UpdateRow::new(k).delete_all("s").into(),
                _ => DeleteRow::new(k).into(),
            });
        }
    }
    assert!(writes.len() > 5000, "{} writes", writes.len());
    write_ok(&t, writes).await;
    let sess = SqlSession::new(db.clone());
    overlay_check(&sess, &t, "dense keys").await;
    assert_eq!(t.stats().scan_overlay_builds, 1);
    drop(sess);
    db.close().await.unwrap();
}

/// Waits (at most 10 s) until the table's overlay builds and extensions
/// reach `want`.
async fn overlays_reach(t: &Table, want: (u64, u64), what: &str) {
    let start = std::time::Instant::now();
    loop {
        let s = t.stats();
        let got = (s.scan_overlay_builds, s.scan_overlay_extensions);
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "{what}: overlays built / extended {got:?}, want {want:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// PutRows of `n` random keys over the cards of `grouped_table(3000)`.
async fn put_random(t: &Table, rng: &mut StdRng, n: usize) {
    let batch: Vec<RowWrite> = (0..n)
        .map(|_| {
            let k = pk(rng.random_range(-5..3010i64), ["o", "o2"][rng.random_range(0..2)]);
            PutRow::new(k).column("x", rng.random_range(0..5000i64)).into()
        })
        .collect();
    for r in write_all(t, batch).await {
        r.unwrap();
    }
}

/// Once writes to a table that SQL scanned whole settle, its overlays are
/// built (then extended) in the background: the next query builds none
/// and answers as the row API does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memtable_overlays_are_built_in_the_background_once_writes_settle() {
    let (_dir, _clock, db, t) = grouped_table(3000).await;
    let mut rng = StdRng::seed_from_u64(5);
    let sess = SqlSession::new(db.clone());
    // Marks the table as scanned whole (nothing to build: no memtable),
    // asking for the columns `overlay_check` reads.
    rows(&sess, "SELECT sum(x), count(s) FROM t").await;
    put_random(&t, &mut rng, 200).await;
    overlays_reach(&t, (1, 0), "after writes").await;
    overlay_check(&sess, &t, "built in the background").await;
    put_random(&t, &mut rng, 100).await;
    overlays_reach(&t, (1, 1), "after more writes").await;
    overlay_check(&sess, &t, "extended in the background").await;
    let s = t.stats();
    assert_eq!(
        (s.scan_overlay_builds, s.scan_overlay_extensions),
        (1, 1),
        "the scans used the overlay built in the background"
    );
    drop(sess);
    db.close().await.unwrap();
}

/// Tables no SQL scan read whole get no overlay in the background: a
/// point lookup does not count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memtable_overlays_are_not_built_for_tables_no_scan_read() {
    let (_dir, _clock, db, t) = grouped_table(3000).await;
    let mut rng = StdRng::seed_from_u64(6);
    put_random(&t, &mut rng, 200).await;
    let sess = SqlSession::new(db.clone());
    rows(&sess, "SELECT x FROM t WHERE card = 7 AND \"order\" = 'o'").await;
    rows(&sess, "SELECT x FROM t WHERE card BETWEEN 7 AND 9").await;
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    assert_eq!(t.stats().scan_overlay_builds, 0, "built without a scan asking for it");
    drop(sess);
    db.close().await.unwrap();
}

/// Sparse memtable keys: between two row groups (placed from the next
/// group's key bounds, its rows unread), inside one, past the segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memtable_overlays_place_keys_between_row_groups() {
    let (_dir, _clock, db, t) = grouped_table(3000).await;
    let writes: Vec<RowWrite> = vec![
        PutRow::new(pk(63, "p")).column("x", 5000i64).into(),
        PutRow::new(pk(191, "o2")).column("x", 5001i64).into(),
        UpdateRow::new(pk(1000, "o")).put("x", 5002i64).into(),
        DeleteRow::new(pk(640, "o")).into(),
        PutRow::new(pk(2999, "z")).column("x", 5003i64).into(),
        PutRow::new(pk(-1, "a")).column("x", 5004i64).into(),
    ];
    for r in t.write_batch(writes).await.unwrap() {
        r.unwrap();
    }
    let sess = SqlSession::new(db.clone());
    overlay_check(&sess, &t, "sparse keys").await;
    assert_eq!(t.stats().scan_overlay_builds, 1);
    let b = rows(
        &sess,
        "SELECT card, \"order\", x FROM t WHERE card BETWEEN 63 AND 64 ORDER BY card, \"order\"",
    )
    .await;
    assert_eq!(
        text_rows(&b),
        vec!["card=63 order=o x=63", "card=63 order=p x=5000", "card=64 order=o x=64"]
    );
    drop(sess);
    db.close().await.unwrap();
}

/// [`write_all`], every write expected to succeed.
pub(crate) async fn write_ok(t: &Table, writes: Vec<RowWrite>) {
    for r in write_all(t, writes).await {
        r.unwrap();
    }
}

/// Writes in batches of at most 200 (BatchWriteRow's limit), in order.
async fn write_all(t: &Table, writes: Vec<RowWrite>) -> Vec<cellar::Result<WriteResult>> {
    let mut out = Vec::new();
    for chunk in writes.chunks(200) {
        out.extend(t.write_batch(chunk.to_vec()).await.unwrap());
    }
    out
}
