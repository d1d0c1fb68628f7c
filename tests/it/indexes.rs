//! Predefined columns and secondary indexes: the rules, and every kind of
//! write keeping every index exact, across flushes, compactions and
//! reopens. The expected index is derived here from the table's rows,
//! independently of the engine's own derivation.

use std::collections::BTreeMap;
use std::sync::Arc;

use cellar::*;
use rand::{Rng, SeedableRng, rngs::StdRng};

use crate::common::*;

/// `t(card INTEGER, order STRING)` with predefined seller STRING, price
/// INTEGER, note STRING, score DOUBLE.
fn schema() -> TableSchema {
    TableSchema::new("t")
        .pk("card", PkType::Integer)
        .pk("order", PkType::String)
        .column("seller", ValueType::String)
        .column("price", ValueType::Integer)
        .column("note", ValueType::String)
        .column("score", ValueType::Double)
}

async fn fresh() -> (tempfile::TempDir, Arc<ManualClock>, Database) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let db = open(dir.path(), &clock).await;
    db.create_table(schema(), TableOptions::default()).await.unwrap();
    (dir, clock, db)
}

fn spec(name: &str, columns: &[&str], include: &[&str], kind: IndexKind) -> IndexSpec {
    IndexSpec {
        name: name.into(),
        columns: columns.iter().map(|c| c.to_string()).collect(),
        include: include.iter().map(|c| c.to_string()).collect(),
        kind,
        include_base_data: true,
    }
}

fn to_pk(v: &Value) -> Option<PkValue> {
    match v {
        Value::Integer(i) => Some(PkValue::Integer(*i)),
        Value::String(s) => Some(PkValue::String(s.clone())),
        Value::Binary(b) => Some(PkValue::Binary(b.clone())),
        _ => None,
    }
}

type IndexRows = BTreeMap<Vec<PkValue>, Vec<(String, Value)>>;

/// The index rows the table's rows call for.
async fn expected(db: &Database, table: &str, columns: &[&str], include: &[&str]) -> IndexRows {
    let t = db.table(table).unwrap();
    let pk_names: Vec<String> = t.schema().primary_key.iter().map(|c| c.name.clone()).collect();
    let mut out = BTreeMap::new();
    'rows: for r in scan_all(&t, GetRange::new()).await {
        let value = |c: &str| -> Option<Value> {
            r.columns
                .iter()
                .find(|(n, _)| n == c)
                .map(|(_, cells)| cells[0].value.clone())
        };
        let mut key = Vec::new();
        for c in columns {
            match r.primary_key.get(c) {
                Some(v) => key.push(v.clone()),
                None => match value(c).as_ref().and_then(to_pk) {
                    Some(v) => key.push(v),
                    None => continue 'rows,
                },
            }
        }
        for n in &pk_names {
            if !columns.contains(&n.as_str()) {
                key.push(r.primary_key.get(n).unwrap().clone());
            }
        }
        let attrs = include
            .iter()
            .filter_map(|c| value(c).map(|v| (c.to_string(), v)))
            .collect();
        out.insert(key, attrs);
    }
    out
}

/// The index's rows as read by its name.
async fn actual(db: &Database, index: &str) -> IndexRows {
    let t = db.table(index).unwrap();
    scan_all(&t, GetRange::new())
        .await
        .into_iter()
        .map(|r| {
            let key = r.primary_key.columns.into_iter().map(|(_, v)| v).collect();
            let attrs = r.columns.into_iter().map(|(n, c)| (n, c[0].value.clone())).collect();
            (key, attrs)
        })
        .collect()
}

async fn assert_index(db: &Database, index: &str, columns: &[&str], include: &[&str], when: &str) {
    let want = expected(db, "t", columns, include).await;
    let got = actual(db, index).await;
    if want != got {
        let missing: Vec<_> = want.iter().filter(|(k, v)| got.get(*k) != Some(v)).take(5).collect();
        let extra: Vec<_> = got.iter().filter(|(k, v)| want.get(*k) != Some(v)).take(5).collect();
        panic!(
            "index {index} differs from its table {when}: {} rows expected, {} found\nmissing or different: {missing:?}\nextra or different: {extra:?}",
            want.len(),
            got.len()
        );
    }
}

#[tokio::test]
async fn predefined_columns_refuse_other_types() {
    let (_dir, _clock, db) = fresh().await;
    let t = db.table("t").unwrap();
    let bad = t
        .put_row(PutRow::new(pk(1, "a")).column("price", "ten"))
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::ParameterInvalid);
    for needle in ["price", "INTEGER", "STRING", "PutRow"] {
        assert!(bad.to_string().contains(needle), "{bad}");
    }
    let bad = t
        .update_row(UpdateRow::new(pk(1, "a")).put("score", 3i64))
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("DOUBLE"), "{bad}");
    let bad = t
        .update_row(UpdateRow::new(pk(1, "a")).increment("note", 1))
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("note"), "{bad}");
    // Right types, and undeclared columns of any type, are accepted.
    t.put_row(
        PutRow::new(pk(1, "a"))
            .column("price", 10i64)
            .column("score", 1.5)
            .column("free", "x")
            .column("free2", true),
    )
    .await
    .unwrap();
    // In a transaction too.
    let txn = t.start_transaction(1i64).await.unwrap();
    let bad = txn
        .write(RowWrite::Put(PutRow::new(pk(1, "b")).column("seller", 5i64)))
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("seller"), "{bad}");
    txn.abort().await.unwrap();
    // Dropping the column lifts the rule; the data stays.
    db.drop_column("t", "price").await.unwrap();
    t.put_row(PutRow::new(pk(1, "c")).column("price", "ten")).await.unwrap();
    let e = db.drop_column("t", "price").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ObjectNotExist);
    // At most 32.
    for i in 0..29 {
        db.add_column(
            "t",
            ColumnDef {
                name: format!("c{i}"),
                value_type: ValueType::Integer,
            },
        )
        .await
        .unwrap();
    }
    let e = db
        .add_column(
            "t",
            ColumnDef {
                name: "one_more".into(),
                value_type: ValueType::Integer,
            },
        )
        .await
        .unwrap_err();
    assert!(
        e.message()
            .starts_with("The number of defined columns must be in range: [0, 32].")
            && e.to_string().contains("one_more"),
        "{e}"
    );
}

#[tokio::test]
async fn create_index_rules_are_refused_with_what_is_accepted() {
    let (_dir, _clock, db) = fresh().await;
    let local = IndexKind::Local;
    let many: Vec<String> = (0..33).map(|i| format!("c{i}")).collect();
    let many_included: Vec<&str> = many.iter().map(|s| s.as_str()).collect();
    let cases: Vec<(IndexSpec, &[&str])> = vec![
        // Tablestore's own texts lead where it has one.
        (
            spec("i", &[], &[], IndexKind::Global),
            &[
                "The number of primary key columns must be in range: [1, 4] in index.",
                "has 0",
            ],
        ),
        (
            spec("i", &["a", "b", "c", "d", "e"], &[], IndexKind::Global),
            &[
                "The number of primary key columns must be in range: [1, 4] in index.",
                "has 5",
            ],
        ),
        (
            spec("i", &["seller"], &many_included, IndexKind::Global),
            &[
                "The number of attribute columns must be in range: [0, 32] in index.",
                "includes 33",
            ],
        ),
        (
            spec("i", &["nope"], &[], IndexKind::Global),
            &["nope", "predefined", "ADD COLUMN"],
        ),
        (
            spec("i", &["score"], &[], IndexKind::Global),
            &["DOUBLE", "INTEGER, STRING or BINARY"],
        ),
        (
            spec("i", &["seller"], &["free"], IndexKind::Global),
            &["free", "not a predefined"],
        ),
        (
            spec("i", &["seller"], &["seller"], IndexKind::Global),
            &["already in the index"],
        ),
        (spec("i", &["seller", "seller"], &[], IndexKind::Global), &["twice"]),
        (spec("i", &["seller"], &[], local), &["partition key", "card"]),
        (spec("t", &["card", "seller"], &[], local), &["taken"]),
        (spec("__x", &["card", "seller"], &[], local), &["reserved"]),
    ];
    for (s, needles) in cases {
        let e = db.create_index("t", s.clone()).await.unwrap_err();
        for n in needles {
            assert!(e.to_string().contains(n), "{s:?}: {e}");
        }
    }
    let e = db
        .create_index("nope", spec("i", &["card"], &[], local))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ObjectNotExist);
    // Table options: one version, no TTL with updates.
    db.alter_table(
        "t",
        OptionsUpdate {
            max_versions: Some(2),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let e = db
        .create_index("t", spec("i", &["card", "seller"], &[], local))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("max_versions = 1"), "{e}");
    db.alter_table(
        "t",
        OptionsUpdate {
            max_versions: Some(1),
            ttl_secs: Some(86400),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let e = db
        .create_index("t", spec("i", &["card", "seller"], &[], local))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("allow_update = false"), "{e}");
    db.alter_table(
        "t",
        OptionsUpdate {
            ttl_secs: Some(-1),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    // At most 5 per table.
    for i in 0..5 {
        db.create_index("t", spec(&format!("i{i}"), &["card", "seller"], &[], local))
            .await
            .unwrap();
    }
    let e = db
        .create_index("t", spec("i5", &["card"], &[], local))
        .await
        .unwrap_err();
    assert!(
        e.message()
            .starts_with("Number of index per table exceeds the quota:5.")
            && e.to_string().contains("5 indexes"),
        "{e}"
    );
    // Once indexed, the rules hold for ALTER too, and indexed columns stay.
    let e = db
        .alter_table(
            "t",
            OptionsUpdate {
                max_versions: Some(3),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("max_versions = 1"), "{e}");
    let e = db.drop_column("t", "seller").await.unwrap_err();
    assert!(e.to_string().contains("i0"), "{e}");
    // Indexes refuse writes and are listed apart from tables.
    let e = db
        .table("i0")
        .unwrap()
        .put_row(PutRow::new(PrimaryKey::new().with("card", 1i64)))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("refuse writes"), "{e}");
    assert_eq!(db.list_tables(), vec!["t".to_string()]);
    let listed = db.list_indexes("t").await.unwrap();
    assert_eq!(listed.len(), 5);
    assert_eq!(listed[0].primary_key, vec!["card", "seller", "order"]);
    assert_eq!(listed[0].phase, IndexPhase::Incr);
    let e = db.drop_table("i0").await.unwrap_err();
    assert!(e.to_string().contains("DROP INDEX"), "{e}");
    // A key value longer than a key may be is refused for an index column.
    let long = "x".repeat(1025);
    let e = db
        .table("t")
        .unwrap()
        .put_row(PutRow::new(pk(1, "a")).column("seller", long.as_str()))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("1024"), "{e}");
    // Dropping the table drops its indexes.
    db.drop_table("t").await.unwrap();
    assert!(db.table("i0").is_err());
}

/// One random write of the model test.
fn random_write(rng: &mut StdRng, now: i64) -> RowWrite {
    let key = pk(rng.random_range(0..3), ["a", "b", "c", "d"][rng.random_range(0..4)]);
    let sellers = ["s1", "s2", "s3"];
    match rng.random_range(0..10) {
        0..=3 => {
            let mut p = PutRow::new(key);
            if rng.random_bool(0.8) {
                p = p.column("seller", sellers[rng.random_range(0..3)]);
            }
            if rng.random_bool(0.6) {
                p = p.column("price", rng.random_range(0..5i64));
            }
            if rng.random_bool(0.5) {
                p = p.column("note", format!("n{}", rng.random_range(0..100)));
            }
            if rng.random_bool(0.2) {
                p = p.condition(Condition::expect_not_exist());
            }
            RowWrite::Put(p)
        }
        4..=7 => {
            let mut u = UpdateRow::new(key);
            match rng.random_range(0..6) {
                0 => u = u.put("seller", sellers[rng.random_range(0..3)]),
                1 => u = u.delete_all("seller"),
                2 => u = u.increment("price", rng.random_range(-2..3)),
                3 => u = u.delete_all("note"),
                4 => u = u.put_at("note", "old", now - 1000),
                _ => u = u.put("price", rng.random_range(0..5i64)).put("other", 1i64),
            }
            if rng.random_bool(0.2) {
                u = u.condition(Condition::expect_exist());
            }
            RowWrite::Update(u)
        }
        _ => RowWrite::Delete(DeleteRow::new(key)),
    }
}

/// Random writes, one at a time, in batches and pipelined, with flushes,
/// compactions and reopens: every index equals its table after each step.
#[tokio::test]
async fn local_indexes_follow_every_write_across_flushes_compactions_and_reopens() {
    for seed in 0..seeds("CELLAR_INDEX_SEEDS", 3) {
        let (dir, clock, mut db) = fresh().await;
        let mut rng = StdRng::seed_from_u64(seed);
        // Some rows before the indexes: the backfill indexes them.
        for _ in 0..20 {
            let _ = db.table("t").unwrap().write(random_write(&mut rng, T0)).await;
        }
        let indexes: [(&str, &[&str], &[&str], IndexKind); 5] = [
            ("by_seller", &["card", "seller"], &["note", "price"], IndexKind::Local),
            ("by_price", &["card", "price", "seller"], &[], IndexKind::Local),
            ("by_order", &["card", "order"], &["seller"], IndexKind::Local),
            ("g_seller", &["seller", "price"], &["note"], IndexKind::Global),
            ("g_order", &["order"], &["seller"], IndexKind::Global),
        ];
        for (name, cols, inc, kind) in indexes {
            db.create_index("t", spec(name, cols, inc, kind)).await.unwrap();
        }
        for step in 0..40 {
            let t = db.table("t").unwrap();
            match rng.random_range(0..4) {
                0 => {
                    let _ = t.write(random_write(&mut rng, T0)).await;
                }
                1 => {
                    let batch = (0..rng.random_range(1..30))
                        .map(|_| random_write(&mut rng, T0))
                        .collect();
                    t.write_batch(batch).await.unwrap();
                }
                2 => {
                    // Pipelined: many batches in flight.
                    let mut queued = Vec::new();
                    for _ in 0..4 {
                        let batch = (0..10).map(|_| random_write(&mut rng, T0)).collect();
                        queued.push(t.enqueue_batch(batch).await.unwrap());
                    }
                    for q in queued {
                        q.durable().await.unwrap();
                    }
                }
                _ => {
                    let card = rng.random_range(0..3i64);
                    let txn = t.start_transaction(card).await.unwrap();
                    for _ in 0..3 {
                        let mut w = random_write(&mut rng, T0);
                        match &mut w {
                            RowWrite::Put(p) => p.primary_key = pk(card, "a"),
                            RowWrite::Update(u) => u.primary_key = pk(card, "b"),
                            RowWrite::Delete(d) => d.primary_key = pk(card, "a"),
                        }
                        let _ = txn.write(w).await;
                    }
                    txn.commit().await.unwrap();
                }
            }
            match step % 10 {
                3 => t.flush().await.unwrap(),
                6 => t.compact().await.unwrap(),
                9 => {
                    drop(t);
                    db.close().await.unwrap();
                    db = open(dir.path(), &clock).await;
                }
                _ => {}
            }
            for (name, cols, inc, kind) in indexes {
                if kind == IndexKind::Global {
                    db.wait_for_index(name, std::time::Duration::from_secs(20))
                        .await
                        .unwrap();
                }
                assert_index(&db, name, cols, inc, &format!("(seed {seed}, step {step})")).await;
            }
        }
    }
}

/// Runs `;`-separated statements.
async fn run(sql: &cellar::sql::SqlSession, text: &str) -> std::result::Result<(), String> {
    for stmt in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        sql.execute(stmt).await.map_err(|e| format!("{stmt}: {e}"))?;
    }
    Ok(())
}

async fn texts(sql: &cellar::sql::SqlSession, q: &str) -> Vec<String> {
    crate::sql::text_rows(&crate::sql::rows(sql, q).await)
}

/// SQL: CREATE INDEX, reading an index by name, DROP INDEX, DDL errors.
#[tokio::test]
async fn sql_creates_reads_and_drops_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).await.unwrap();
    let sql = cellar::sql::SqlSession::new(db.clone());
    run(
        &sql,
        "CREATE TABLE orders (shop BIGINT, id BIGINT, seller VARCHAR, price BIGINT, PRIMARY KEY (shop, id));
         INSERT INTO orders VALUES (1, 1, 'ann', 10), (1, 2, 'bob', 20), (2, 3, 'ann', 30), (2, 4, NULL, 5);
         CREATE INDEX orders_by_seller ON orders (seller) INCLUDE (price) WITH (type = 'global');
         CREATE INDEX orders_local ON orders (shop, price)",
    )
    .await
    .unwrap();
    let rows = texts(&sql, "SELECT seller, shop, id, price FROM orders_by_seller").await;
    assert_eq!(
        rows,
        vec![
            "seller=ann shop=1 id=1 price=10",
            "seller=ann shop=2 id=3 price=30",
            "seller=bob shop=1 id=2 price=20"
        ]
    );
    let rows = texts(&sql, "SELECT shop, price, id FROM orders_local").await;
    assert_eq!(
        rows,
        vec![
            "shop=1 price=10 id=1",
            "shop=1 price=20 id=2",
            "shop=2 price=5 id=4",
            "shop=2 price=30 id=3"
        ]
    );
    run(
        &sql,
        "UPDATE orders SET price = 7 WHERE id = 1; DELETE FROM orders WHERE id = 3",
    )
    .await
    .unwrap();
    let rows = texts(&sql, "SELECT shop, price, id FROM orders_local").await;
    assert_eq!(
        rows,
        vec!["shop=1 price=7 id=1", "shop=1 price=20 id=2", "shop=2 price=5 id=4"]
    );
    let e = run(&sql, "INSERT INTO orders_local VALUES (1, 1, 1)")
        .await
        .unwrap_err();
    assert!(e.contains("refuse writes"), "{e}");
    let e = run(&sql, "CREATE INDEX x ON orders (seller) WITH (type = 'fancy')")
        .await
        .unwrap_err();
    assert!(e.contains("'local', 'global'"), "{e}");
    let e = run(&sql, "CREATE UNIQUE INDEX x ON orders (seller)").await.unwrap_err();
    assert!(e.contains("UNIQUE"), "{e}");
    run(&sql, "DROP INDEX orders_local; DROP INDEX IF EXISTS orders_local")
        .await
        .unwrap();
    assert!(db.table("orders_local").is_err());
    let e = run(&sql, "DROP INDEX orders_local").await.unwrap_err();
    assert!(e.contains("does not exist"), "{e}");
    assert_eq!(db.list_indexes("orders").await.unwrap().len(), 1);
}

/// A table whose only index is global: every kind of write reaches it
/// through the stream, across reopens, and a close leaves it caught up.
#[tokio::test]
async fn a_global_index_alone_follows_writes_across_reopens() {
    let (dir, clock, mut db) = fresh().await;
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..30 {
        let _ = db.table("t").unwrap().write(random_write(&mut rng, T0)).await;
    }
    db.create_index("t", spec("g", &["seller"], &["price"], IndexKind::Global))
        .await
        .unwrap();
    // The stream it follows was enabled for it, and cannot be disabled.
    let e = db
        .change_stream(
            "t",
            StreamChange {
                enable: Some(false),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("global index"), "{e}");
    for round in 0..4 {
        let t = db.table("t").unwrap();
        for _ in 0..5 {
            let batch = (0..20).map(|_| random_write(&mut rng, T0)).collect();
            for r in t.write_batch(batch).await.unwrap() {
                if let Err(e) = r {
                    assert_eq!(e.kind(), ErrorKind::ConditionCheckFail, "{e}");
                }
            }
        }
        drop(t);
        // A close applies what the stream holds: the next open finds it
        // caught up before its follower runs again.
        db.close().await.unwrap();
        db = open(dir.path(), &clock).await;
        assert_index(&db, "g", &["seller"], &["price"], &format!("after reopen {round}")).await;
        let info = db.describe_index("g").await.unwrap();
        assert_eq!((info.phase, info.lag_ms), (IndexPhase::Incr, 0), "{info:?}");
    }
}

/// `cellar check` compares each index with its table: exact ones are
/// `ok`; an index made without its table's existing rows lacks them.
#[tokio::test]
async fn cellar_check_compares_indexes_with_their_tables() {
    let (dir, _clock, db) = fresh().await;
    let t = db.table("t").unwrap();
    for i in 0..50i64 {
        let p = PutRow::new(pk(i % 3, &format!("o{i}")))
            .column("seller", format!("s{}", i % 7))
            .column("price", i);
        t.put_row(p).await.unwrap();
    }
    t.flush().await.unwrap();
    db.create_index(
        "t",
        spec("by_seller", &["card", "seller"], &["price"], IndexKind::Local),
    )
    .await
    .unwrap();
    db.create_index("t", spec("g", &["price"], &[], IndexKind::Global))
        .await
        .unwrap();
    let mut late = spec("late", &["card", "price"], &[], IndexKind::Local);
    late.include_base_data = false;
    db.create_index("t", late).await.unwrap();
    for i in 50..60i64 {
        t.put_row(
            PutRow::new(pk(1, &format!("o{i}")))
                .column("seller", "new")
                .column("price", i),
        )
        .await
        .unwrap();
    }
    t.delete_row(DeleteRow::new(pk(0, "o0"))).await.unwrap();
    let checks = db.check_indexes(Some("t")).await.unwrap();
    let by = |n: &str| checks.iter().find(|c| c.index == n).unwrap().clone();
    assert!(by("by_seller").is_exact(), "{:?}", by("by_seller"));
    assert_eq!(by("by_seller").index_rows, 59);
    assert!(by("g").is_exact(), "{:?}", by("g"));
    let late = by("late");
    assert_eq!((late.missing, late.extra, late.index_rows), (49, 0, 10), "{late:?}");
    assert!(late.examples[0].contains("missing index row"), "{late:?}");
    drop(t);
    db.close().await.unwrap();
    let (code, out, _) = run_cli(dir.path(), &["check"], "");
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("ok       index by_seller of t: 59 rows"), "{out}");
    assert!(out.contains("ok       index g of t: 59 rows"), "{out}");
    assert!(out.contains("DAMAGED  index late of t: 49 missing, 0 extra"), "{out}");
    assert!(out.contains("checked 3 indexes: 1 differ"), "{out}");
    // Dropping it leaves a clean check.
    let db = Database::open(dir.path()).await.unwrap();
    db.drop_index("t", "late").await.unwrap();
    db.close().await.unwrap();
    let (code, out, _) = run_cli(dir.path(), &["check"], "");
    assert_eq!(code, 0, "{out}");
}

/// The child of `an_index_backfill_killed_midway_resumes_at_the_next_open`:
/// creates the index, aborting at a crash point mid-backfill.
#[tokio::test]
#[ignore = "started by an_index_backfill_killed_midway_resumes_at_the_next_open"]
async fn index_backfill_child_process() {
    let Ok(dir) = std::env::var("CELLAR_INDEX_CHILD_DIR") else {
        return;
    };
    let db = Database::open(&dir).await.unwrap();
    let kind = match std::env::var("CELLAR_INDEX_CHILD_KIND").as_deref() {
        Ok("global") => IndexKind::Global,
        _ => IndexKind::Local,
    };
    let cols: &[&str] = if kind == IndexKind::Local {
        &["card", "seller"]
    } else {
        &["seller"]
    };
    db.create_index("t", spec("i", cols, &["price"], kind)).await.unwrap();
    println!("CREATED");
}

/// A process killed while an index indexes the table's rows (phase
/// FULL): the next open resumes it, writes going on, and it ends exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_backfill_killed_midway_resumes_at_the_next_open() {
    for kind in ["local", "global"] {
        let (dir, _clock, db) = fresh().await;
        let t = db.table("t").unwrap();
        for i in 0..3000i64 {
            let p = PutRow::new(pk(i % 5, &format!("o{i:05}")))
                .column("seller", format!("s{}", i % 13))
                .column("price", i);
            t.put_row(p).await.unwrap();
        }
        drop(t);
        db.close().await.unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "indexes::index_backfill_child_process",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env("CELLAR_INDEX_CHILD_DIR", dir.path())
            .env("CELLAR_INDEX_CHILD_KIND", kind)
            .env("CELLAR_CRASH_POINT", "index.backfill_synced:2")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            !stdout.contains("CREATED"),
            "{kind}: the child was to abort midway: {stdout}"
        );
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(6),
            "{kind}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let db = Database::open(dir.path()).await.unwrap();
        // Writes go on while it resumes.
        let t = db.table("t").unwrap();
        for i in 0..200i64 {
            t.put_row(
                PutRow::new(pk(i % 5, &format!("o{:05}", i * 7)))
                    .column("seller", "moved")
                    .column("price", -i),
            )
            .await
            .unwrap();
            if i % 10 == 0 {
                t.delete_row(DeleteRow::new(pk(i % 5, &format!("o{:05}", i * 3))))
                    .await
                    .unwrap();
            }
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while db.describe_index("i").await.unwrap().phase != IndexPhase::Incr {
            assert!(
                std::time::Instant::now() < deadline,
                "{kind}: the backfill did not resume"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let cols: &[&str] = if kind == "local" {
            &["card", "seller"]
        } else {
            &["seller"]
        };
        if kind == "global" {
            db.wait_for_index("i", std::time::Duration::from_secs(20))
                .await
                .unwrap();
        }
        assert_index(&db, "i", cols, &["price"], &format!("({kind}, resumed)")).await;
        assert!(db.check_index("i").await.unwrap().is_exact());
    }
}

/// Auto-increment writes (their key assigned by the committer) are indexed
/// under the key they get, in a local and a global index.
#[tokio::test]
async fn auto_increment_writes_are_indexed_under_their_assigned_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).await.unwrap();
    let schema = TableSchema::new("t")
        .pk("card", PkType::Integer)
        .pk("seq", PkType::Integer)
        .column("seller", ValueType::String)
        .auto_increment("seq")
        .unwrap();
    db.create_table(schema, TableOptions::default()).await.unwrap();
    db.create_index("t", spec("l", &["card", "seller"], &[], IndexKind::Local))
        .await
        .unwrap();
    db.create_index("t", spec("g", &["seller"], &[], IndexKind::Global))
        .await
        .unwrap();
    let t = db.table("t").unwrap();
    let mut assigned = Vec::new();
    for i in 0..20i64 {
        let pk = PrimaryKey::new()
            .with("card", i % 3)
            .with("seq", PkValue::AutoIncrement);
        let r = t
            .put_row(
                PutRow::new(pk)
                    .column("seller", format!("s{}", i % 4))
                    .returning(ReturnType::PrimaryKey),
            )
            .await
            .unwrap();
        assigned.push(r.row.unwrap().primary_key);
    }
    db.wait_for_index("g", std::time::Duration::from_secs(10))
        .await
        .unwrap();
    let l = scan_all(&db.table("l").unwrap(), GetRange::new()).await;
    let g = scan_all(&db.table("g").unwrap(), GetRange::new()).await;
    assert_eq!((l.len(), g.len()), (20, 20));
    for pk in &assigned {
        let seq = pk.get("seq").unwrap();
        assert!(l.iter().any(|r| r.primary_key.get("seq") == Some(seq)), "{pk} not in l");
        assert!(g.iter().any(|r| r.primary_key.get("seq") == Some(seq)), "{pk} not in g");
    }
    assert!(db.check_index("l").await.unwrap().is_exact());
    assert!(db.check_index("g").await.unwrap().is_exact());
}

/// A stream of writes (conditions and increments among them) sent
/// pipelined, many batches in flight, gives what it gives one write at a
/// time on a table with a local and a global index: every write's
/// outcome, the rows, and both indexes.
#[tokio::test]
async fn pipelined_writes_equal_one_at_a_time_on_indexed_tables() {
    for seed in 0..seeds("CELLAR_INDEX_SEEDS", 3) {
        let mut rng = StdRng::seed_from_u64(seed ^ 0xD1FF);
        let stream: Vec<RowWrite> = (0..400).map(|_| random_write(&mut rng, T0)).collect();
        let mut results = Vec::new();
        let mut states = Vec::new();
        for pipelined in [false, true] {
            let (_dir, _clock, db) = fresh().await;
            db.create_index("t", spec("l", &["card", "seller"], &["price"], IndexKind::Local))
                .await
                .unwrap();
            db.create_index("t", spec("g", &["seller"], &["note"], IndexKind::Global))
                .await
                .unwrap();
            let t = db.table("t").unwrap();
            let mut outcomes = Vec::new();
            if pipelined {
                let mut queued = Vec::new();
                for chunk in stream.chunks(7) {
                    queued.push(t.enqueue_batch(chunk.to_vec()).await.unwrap());
                }
                for q in queued {
                    outcomes.extend(q.durable().await.unwrap().into_iter().map(|r| r.map_err(|e| e.kind())));
                }
            } else {
                for w in &stream {
                    outcomes.push(t.write(w.clone()).await.map_err(|e| e.kind()));
                }
            }
            let outcomes: Vec<_> = outcomes.into_iter().map(|r| r.map(|w| w.row)).collect();
            db.wait_for_index("g", std::time::Duration::from_secs(20))
                .await
                .unwrap();
            let rows = scan_all(&t, GetRange::new()).await;
            let rows: Vec<_> = rows.into_iter().map(|r| (r.primary_key, r.columns)).collect();
            states.push((rows, actual(&db, "l").await, actual(&db, "g").await));
            results.push(outcomes);
            assert_index(&db, "l", &["card", "seller"], &["price"], "").await;
            assert_index(&db, "g", &["seller"], &["note"], "").await;
        }
        assert_eq!(results[0], results[1], "seed {seed}: outcomes differ");
        assert!(states[0] == states[1], "seed {seed}: tables or indexes differ");
    }
}
