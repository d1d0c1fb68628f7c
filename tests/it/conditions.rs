//! Conditional writes, atomic counters, return content and capacity units:
//! scenarios on every row state (missing, live, deleted, expired, beyond
//! max_versions, in a segment or a memtable), races of many writers on one
//! row (exactly one conditional insert wins; increments add up exactly)
//! while flushes and compactions run, and the CLI's NDJSON keys.

use std::sync::Arc;

use cellar::*;

use crate::common::*;

fn kind<T: std::fmt::Debug>(r: Result<T>) -> ErrorKind {
    r.unwrap_err().kind()
}

fn amount_gt(v: i64) -> Filter {
    Filter::Column(ColumnCondition::new("amount", CompareOp::Gt, v))
}

async fn latest(t: &Table, k: PrimaryKey, col: &str) -> Option<Value> {
    let r = t.get_row(GetRow::new(k)).await.unwrap().row?;
    r.latest(col).cloned()
}

#[tokio::test]
async fn row_existence_and_column_conditions() {
    let (_dir, clock, _db, t) = fixture(TableOptions {
        ttl_secs: 100,
        max_versions: 2,
        ..Default::default()
    })
    .await;
    let k = || pk(1, "a");
    // Missing row: expect_exist fails, expect_not_exist passes.
    let e = t
        .put_row(
            PutRow::new(k())
                .column("amount", 5)
                .condition(Condition::expect_exist()),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConditionCheckFail);
    assert!(
        e.message().contains("'t'") && e.message().contains("card=1") && e.message().contains("expect_exist"),
        "{e}"
    );
    assert_eq!(
        latest(&t, k(), "amount").await,
        None,
        "a failed condition changes nothing"
    );
    // A column condition on a missing row fails.
    let cond = Condition::ignore().with_column(amount_gt(0));
    assert_eq!(
        kind(
            t.put_row(PutRow::new(k()).column("amount", 5).condition(cond.clone()))
                .await
        ),
        ErrorKind::ConditionCheckFail
    );
    let r = t
        .put_row(
            PutRow::new(k())
                .column("amount", 5)
                .condition(Condition::expect_not_exist()),
        )
        .await
        .unwrap();
    assert_eq!(r.consumed, CapacityUnit { read: 1, write: 1 });
    for flush in [false, true] {
        if flush {
            t.flush().await.unwrap();
        }
        // Existing row: expect_not_exist fails and changes nothing.
        assert_eq!(
            kind(
                t.put_row(
                    PutRow::new(k())
                        .column("amount", 6)
                        .condition(Condition::expect_not_exist())
                )
                .await
            ),
            ErrorKind::ConditionCheckFail
        );
        assert_eq!(latest(&t, k(), "amount").await, Some(Value::Integer(5)));
        // Column conditions: amount > 4 passes, amount > 5 fails.
        t.update_row(
            UpdateRow::new(k())
                .put("seen", true)
                .condition(Condition::expect_exist().with_column(amount_gt(4))),
        )
        .await
        .unwrap();
        let e = t
            .update_row(
                UpdateRow::new(k())
                    .put("amount", 0)
                    .condition(Condition::expect_exist().with_column(amount_gt(5))),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConditionCheckFail);
        assert!(e.message().contains("amount > 5"), "{e}");
        // Another type never matches.
        let s = Filter::Column(ColumnCondition::new("amount", CompareOp::Ne, "5"));
        assert_eq!(
            kind(
                t.delete_row(DeleteRow::new(k()).condition(Condition::ignore().with_column(s)))
                    .await
            ),
            ErrorKind::ConditionCheckFail
        );
        assert_eq!(latest(&t, k(), "amount").await, Some(Value::Integer(5)));
    }
    // Versions beyond max_versions are not the row's state: with two kept,
    // an old 100 pushed out by two newer versions no longer matches.
    t.update_row(UpdateRow::new(k()).put_at("amount", 100, T0 - 3000))
        .await
        .unwrap();
    let any_over_50 = Filter::Column(ColumnCondition {
        latest_version_only: false,
        ..ColumnCondition::new("amount", CompareOp::Gt, 50)
    });
    t.update_row(
        UpdateRow::new(k())
            .put("x", 1)
            .condition(Condition::ignore().with_column(any_over_50.clone())),
    )
    .await
    .unwrap();
    t.update_row(UpdateRow::new(k()).put_at("amount", 1, T0 - 2000))
        .await
        .unwrap();
    t.update_row(UpdateRow::new(k()).put_at("amount", 2, T0 - 1000))
        .await
        .unwrap();
    // amount now holds 5 (T0), 2, 1, 100 by version: two kept are 5 and 2.
    assert_eq!(
        kind(
            t.update_row(
                UpdateRow::new(k())
                    .put("x", 2)
                    .condition(Condition::ignore().with_column(any_over_50))
            )
            .await
        ),
        ErrorKind::ConditionCheckFail
    );
    // A deleted row does not exist.
    t.delete_row(DeleteRow::new(k()).condition(Condition::expect_exist()))
        .await
        .unwrap();
    assert_eq!(
        kind(
            t.delete_row(DeleteRow::new(k()).condition(Condition::expect_exist()))
                .await
        ),
        ErrorKind::ConditionCheckFail
    );
    // An expired row does not exist either.
    t.put_row(
        PutRow::new(k())
            .column("amount", 7)
            .condition(Condition::expect_not_exist()),
    )
    .await
    .unwrap();
    clock.advance(101_000);
    t.put_row(
        PutRow::new(k())
            .column("amount", 8)
            .condition(Condition::expect_not_exist()),
    )
    .await
    .unwrap();
    assert_eq!(latest(&t, k(), "amount").await, Some(Value::Integer(8)));
    // A column page is no condition.
    let page = Condition::ignore().with_column(Filter::ColumnPage { offset: 0, limit: 1 });
    assert_eq!(
        kind(t.put_row(PutRow::new(k()).condition(page)).await),
        ErrorKind::ParameterInvalid
    );
}

#[tokio::test]
async fn batches_check_each_row_in_write_order() {
    let (_dir, _clock, db, t) = fixture(TableOptions::default()).await;
    // Two inserts of one key in one batch: the first wins, the second sees it.
    let ins = |v: i64| {
        RowWrite::from(
            PutRow::new(pk(1, "a"))
                .column("v", v)
                .condition(Condition::expect_not_exist()),
        )
    };
    let r = t.write_batch(vec![ins(1), ins(2), ins(3)]).await.unwrap();
    assert!(r[0].is_ok());
    assert_eq!(r[1].as_ref().unwrap_err().kind(), ErrorKind::ConditionCheckFail);
    assert_eq!(r[2].as_ref().unwrap_err().kind(), ErrorKind::ConditionCheckFail);
    assert_eq!(latest(&t, pk(1, "a"), "v").await, Some(Value::Integer(1)));
    // A plain write before a checked one in the same batch is seen by it.
    let r = t
        .write_batch(vec![
            DeleteRow::new(pk(1, "a")).into(),
            ins(4),
            UpdateRow::new(pk(1, "a")).increment("v", 10).into(),
        ])
        .await
        .unwrap();
    assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    assert_eq!(latest(&t, pk(1, "a"), "v").await, Some(Value::Integer(14)));
    // BatchWriteRow across tables: per-row results.
    let r = db
        .batch_write(vec![
            ("t".into(), ins(5)),
            (
                "t".into(),
                PutRow::new(pk(2, "b")).condition(Condition::expect_not_exist()).into(),
            ),
        ])
        .await
        .unwrap();
    assert_eq!(r[0].as_ref().unwrap_err().kind(), ErrorKind::ConditionCheckFail);
    assert_eq!(r[1].as_ref().unwrap().consumed, CapacityUnit { read: 1, write: 1 });
}

#[tokio::test]
async fn increments_and_return_content() {
    let (_dir, clock, _db, t) = fixture(TableOptions::default()).await;
    let k = || pk(1, "a");
    // A missing column counts as 0; the values after the change come back.
    let r = t
        .update_row(
            UpdateRow::new(k())
                .increment("n", 5)
                .put("tag", "x")
                .returning(ReturnType::AfterModify),
        )
        .await
        .unwrap();
    let row = r.row.unwrap();
    assert_eq!(row.primary_key, k());
    assert_eq!(row.latest("n"), Some(&Value::Integer(5)));
    assert_eq!(row.column("n").unwrap()[0].version, T0);
    assert_eq!(row.latest("tag"), Some(&Value::String("x".into())));
    assert_eq!(r.consumed.read, 1);
    clock.advance(1);
    t.flush().await.unwrap();
    let r = t
        .update_row(
            UpdateRow::new(k())
                .increment("n", -7)
                .returning(ReturnType::AfterModify),
        )
        .await
        .unwrap();
    assert_eq!(r.row.unwrap().latest("n"), Some(&Value::Integer(-2)));
    // Return the key only.
    let r = t
        .put_row(
            PutRow::new(pk(2, "b"))
                .column("n", i64::MAX)
                .returning(ReturnType::PrimaryKey),
        )
        .await
        .unwrap();
    assert_eq!(
        r.row,
        Some(Row {
            primary_key: pk(2, "b"),
            columns: vec![]
        })
    );
    let r = t.put_row(PutRow::new(pk(3, "c")).column("s", "str")).await.unwrap();
    assert_eq!(r.row, None);
    // Overflow, a non-integer value, two actions on one column.
    let e = t
        .update_row(UpdateRow::new(pk(2, "b")).increment("n", 1))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ParameterInvalid);
    assert!(e.message().contains("overflow"), "{e}");
    t.update_row(UpdateRow::new(pk(2, "b")).increment("n", -1))
        .await
        .unwrap();
    let e = t
        .update_row(UpdateRow::new(pk(3, "c")).increment("s", 1))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ParameterInvalid);
    assert!(e.message().contains("STRING"), "{e}");
    let e = t
        .update_row(UpdateRow::new(k()).increment("n", 1).put("n", 3))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ParameterInvalid);
    assert!(e.message().contains("'n'"), "{e}");
    assert_eq!(latest(&t, k(), "n").await, Some(Value::Integer(-2)));
    assert_eq!(latest(&t, pk(2, "b"), "n").await, Some(Value::Integer(i64::MAX - 1)));
    // An increment with a condition.
    let e = t
        .update_row(
            UpdateRow::new(k()).increment("n", 1).condition(
                Condition::ignore().with_column(Filter::Column(ColumnCondition::new("n", CompareOp::Ge, 0))),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConditionCheckFail);
}

#[tokio::test]
async fn capacity_units_follow_the_row_data() {
    let (_dir, _clock, db, t) = fixture(TableOptions::default()).await;
    // card (4) + 8, order (5) + 1, s (1) + 5000: 5019 bytes = 2 CU.
    let r = t
        .put_row(PutRow::new(pk(1, "a")).column("s", "x".repeat(5000)))
        .await
        .unwrap();
    assert_eq!(r.consumed, CapacityUnit { read: 0, write: 2 });
    let g = t.get_row(GetRow::new(pk(1, "a"))).await.unwrap();
    assert_eq!(g.consumed, CapacityUnit { read: 2, write: 0 });
    let g = t.get_row(GetRow::new(pk(9, "zz"))).await.unwrap();
    assert_eq!((g.row, g.consumed), (None, CapacityUnit { read: 1, write: 0 }));
    // A filtered-out row is still charged: it was read.
    let opts = ReadOptions {
        filter: Some(Filter::Column(ColumnCondition::new("s", CompareOp::Eq, "no"))),
        ..Default::default()
    };
    let g = t.get_row(GetRow::new(pk(1, "a")).options(opts.clone())).await.unwrap();
    assert_eq!((g.row, g.consumed.read), (None, 2));
    for i in 0..10 {
        t.put_row(PutRow::new(pk(2, &format!("{i}"))).column("s", "x".repeat(1000)))
            .await
            .unwrap();
    }
    let page = t.get_range(GetRange::new().options(opts)).await.unwrap();
    assert!(page.rows.is_empty());
    // 11 rows of ~1000-5000 bytes: 15,219 bytes = 4 CU for the response.
    assert_eq!(page.consumed, CapacityUnit { read: 4, write: 0 });
    let b = db
        .batch_get(vec![
            ("t".into(), GetRow::new(pk(1, "a"))),
            ("t".into(), GetRow::new(pk(1, "b"))),
        ])
        .await
        .unwrap();
    assert_eq!(b[0].as_ref().unwrap().consumed.read, 2);
    assert_eq!(b[1].as_ref().unwrap().consumed.read, 1);
    let r = t.delete_row(DeleteRow::new(pk(1, "a"))).await.unwrap();
    assert_eq!(r.consumed, CapacityUnit { read: 0, write: 1 });
}

async fn race_table(dir: &std::path::Path) -> (Database, Table) {
    let db = Database::open_with(dir, DbOptions::default().memtable_bytes(8 << 10))
        .await
        .unwrap();
    let t = card_order_table(&db, TableOptions::default()).await;
    (db, t)
}

/// Many writers race to insert one key per round: exactly one wins each
/// round, and the row holds the winner's value, while other writers keep
/// overwriting neighbouring keys and flushes and compactions run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_conditional_insert_wins() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, t) = race_table(dir.path()).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let noise = {
        let (t, stop) = (t.clone(), stop.clone());
        tokio::spawn(async move {
            let mut i = 0i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                t.put_row(PutRow::new(pk(i % 7, "noise")).column("pad", "y".repeat(300)))
                    .await
                    .unwrap();
                if i % 50 == 0 {
                    t.compact().await.unwrap();
                }
                i += 1;
            }
        })
    };
    for round in 0..20i64 {
        let tasks: Vec<_> = (0..16i64)
            .map(|w| {
                let t = t.clone();
                tokio::spawn(async move {
                    let r = t
                        .put_row(
                            PutRow::new(pk(round, "x"))
                                .column("winner", w)
                                .condition(Condition::expect_not_exist()),
                        )
                        .await;
                    match r {
                        Ok(_) => Some(w),
                        Err(e) if e.kind() == ErrorKind::ConditionCheckFail => None,
                        Err(e) => panic!("{e}"),
                    }
                })
            })
            .collect();
        let mut winners = Vec::new();
        for task in tasks {
            winners.extend(task.await.unwrap());
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        assert_eq!(
            latest(&t, pk(round, "x"), "winner").await,
            Some(Value::Integer(winners[0]))
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    noise.await.unwrap();
}

/// Many tasks increment one counter (and a plain writer keeps updating
/// another column of the same row) across flushes and a reopen: the final
/// value is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_increments_add_up_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (db, t) = race_table(dir.path()).await;
    let plain = {
        let t = t.clone();
        tokio::spawn(async move {
            for i in 0..200i64 {
                t.update_row(UpdateRow::new(pk(0, "c")).put("note", "z".repeat(200 + i as usize)))
                    .await
                    .unwrap();
            }
        })
    };
    let tasks: Vec<_> = (0..12i64)
        .map(|w| {
            let t = t.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for _ in 0..25 {
                    let r = t
                        .update_row(
                            UpdateRow::new(pk(0, "c"))
                                .increment("n", w + 1)
                                .returning(ReturnType::AfterModify),
                        )
                        .await
                        .unwrap();
                    let Some(Value::Integer(v)) = r.row.unwrap().latest("n").cloned() else {
                        panic!("no value returned")
                    };
                    seen.push(v);
                }
                seen
            })
        })
        .collect();
    let mut returned = Vec::new();
    for task in tasks {
        returned.extend(task.await.unwrap());
    }
    plain.await.unwrap();
    let total: i64 = (1..=12).map(|w| w * 25).sum();
    assert_eq!(latest(&t, pk(0, "c"), "n").await, Some(Value::Integer(total)));
    // Every increment returned a distinct running total.
    returned.sort_unstable();
    returned.dedup();
    assert_eq!(returned.len(), 300);
    assert_eq!(returned.last(), Some(&total));
    drop(t);
    db.close().await.unwrap();
    let db = Database::open(dir.path()).await.unwrap();
    let t = db.table("t").unwrap();
    assert_eq!(latest(&t, pk(0, "c"), "n").await, Some(Value::Integer(total)));
}

#[test]
fn cli_conditions_increments_and_capacity_units() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let (code, _, err) = run_cli(&data, &["create", "t", "--pk", "k:string"], "");
    assert_eq!(code, 0, "{err}");
    let ops = concat!(
        r#"{"op":"put","pk":{"k":"a"},"columns":{"n":1},"condition":"expect_not_exist"}"#,
        "\n",
        r#"{"op":"put","pk":{"k":"a"},"columns":{"n":2},"condition":"expect_not_exist"}"#,
        "\n",
        r#"{"op":"update","pk":{"k":"a"},"increment":{"n":2},"return":"after_modify"}"#,
        "\n",
        r#"{"op":"update","pk":{"k":"a"},"put":{"m":1},"condition":{"row":"expect_exist","column":{"column":"n","op":">","value":100}}}"#,
        "\n",
        r#"{"op":"delete","pk":{"k":"b"},"condition":"sometimes"}"#,
        "\n",
        r#"{"op":"put","pk":{"k":"b"},"return":"pk"}"#,
        "\n",
    );
    let (code, out, err) = run_cli(&data, &["write", "t"], ops);
    assert_eq!(code, 1, "{out}{err}");
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["cu"], serde_json::json!({"read": 1, "write": 1}));
    assert_eq!(lines[1]["error"]["kind"], "ConditionCheckFail");
    assert_eq!(lines[2]["columns"]["n"][0]["value"], 3);
    assert_eq!(lines[2]["pk"], serde_json::json!({"k": "a"}));
    assert_eq!(lines[3]["error"]["kind"], "ConditionCheckFail");
    assert_eq!(lines[4]["error"]["kind"], "ParameterInvalid");
    assert!(
        lines[4]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expect_not_exist")
    );
    assert_eq!(lines[5]["pk"], serde_json::json!({"k": "b"}));
    assert_eq!(lines[5]["cu"], serde_json::json!({"read": 0, "write": 1}));
    // Several processes one after another increment one counter.
    for _ in 0..4 {
        let ops: String = (0..50)
            .map(|_| "{\"op\":\"update\",\"pk\":{\"k\":\"c\"},\"increment\":{\"n\":1}}\n")
            .collect();
        let (code, out, err) = run_cli(&data, &["write", "t"], &ops);
        assert_eq!(code, 0, "{out}{err}");
    }
    let (code, out, err) = run_cli(&data, &["get", "t", r#"{"k":"c"}"#, "--cu"], "");
    assert_eq!(code, 0, "{err}");
    let row: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(row["columns"]["n"][0]["value"], 200);
    assert_eq!(err.trim(), r#"{"cu":{"read":1,"write":0}}"#);
    let (code, out, err) = run_cli(
        &data,
        &[
            "scan",
            "t",
            "--filter",
            r#"{"column":"n","op":">","value":100,"pass_if_missing":false}"#,
            "--cu",
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 1);
    assert_eq!(err.trim(), r#"{"cu":{"read":1,"write":0}}"#);
}

/// An increment's sum is the column's newest version even when the value
/// it read carries a later version than the write time (a concurrent
/// writer's clock read ahead, or an explicit future version).
#[tokio::test]
async fn an_increment_is_newer_than_the_value_it_read() {
    let (_dir, _clock, _db, t) = fixture(TableOptions::default()).await;
    t.put_row(PutRow::new(pk(1, "a")).column_at("n", 5, T0 + 10_000))
        .await
        .unwrap();
    let r = t
        .update_row(
            UpdateRow::new(pk(1, "a"))
                .increment("n", 1)
                .returning(ReturnType::AfterModify),
        )
        .await
        .unwrap();
    assert_eq!(r.row.unwrap().column("n").unwrap()[0].version, T0 + 10_000);
    assert_eq!(latest(&t, pk(1, "a"), "n").await, Some(Value::Integer(6)));
}
