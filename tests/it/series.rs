//! Monthly series: writes routed to the table of their month (row API,
//! NDJSON, SQL), SQL reading every month against a reference model with
//! overwrites and deletes across flushes and a reopen, time pruning, and
//! `maintain` archiving and dropping months by age.

use std::collections::BTreeMap;
use std::sync::Arc;

use cellar::sql::SqlSession;
use cellar::*;
use datafusion::arrow::util::pretty::pretty_format_batches;
use futures::TryStreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::open;

/// 2024-01-01T00:00:00Z.
const JAN_2024: i64 = 1_704_067_200_000;
const DAY: i64 = 86_400_000;

async fn query(sess: &SqlSession, sql: &str) -> String {
    match sess.execute(sql).await.unwrap() {
        cellar::sql::StatementOutput::Rows(s) => {
            let b: Vec<_> = s.try_collect().await.unwrap();
            pretty_format_batches(&b).unwrap().to_string()
        }
        cellar::sql::StatementOutput::Done(m) => m,
    }
}

fn orders_schema(name: &str) -> TableSchema {
    TableSchema::new(name)
        .pk("card", PkType::Integer)
        .pk("ts", PkType::Integer)
        .column("amount", ValueType::Double)
}

fn time_series() -> SeriesOptions {
    SeriesOptions {
        time_column: Some("ts".into()),
        ..Default::default()
    }
}

/// The model's rows as the SQL text of `SELECT card, ts, amount ... ORDER BY card, ts`.
fn model_rows(model: &BTreeMap<(i64, i64), f64>, keep: impl Fn(i64) -> bool) -> String {
    let mut out = String::from("card,ts,amount\n");
    for ((c, t), a) in model {
        if keep(*t) {
            out.push_str(&format!("{c},{t},{a:?}\n"));
        }
    }
    out
}

async fn sql_rows(sess: &SqlSession, sql: &str) -> String {
    let cellar::sql::StatementOutput::Rows(s) = sess.execute(sql).await.unwrap() else {
        panic!("{sql} returned no rows");
    };
    let batches: Vec<_> = s.try_collect().await.unwrap();
    let mut out = String::from("card,ts,amount\n");
    for b in &batches {
        use datafusion::arrow::array::AsArray;
        use datafusion::arrow::datatypes::{Float64Type, Int64Type};
        let (c, t, a) = (
            b.column(0).as_primitive::<Int64Type>(),
            b.column(1).as_primitive::<Int64Type>(),
            b.column(2).as_primitive::<Float64Type>(),
        );
        for i in 0..b.num_rows() {
            out.push_str(&format!("{},{},{:?}\n", c.value(i), t.value(i), a.value(i)));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn series_match_a_model_across_months_flushes_and_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(JAN_2024 + 200 * DAY));
    let db = open(dir.path(), &clock).await;
    db.create_series(orders_schema("orders"), TableOptions::default(), time_series())
        .await
        .unwrap();
    let orders = db.series("orders").unwrap();
    let mut model = BTreeMap::new();
    let mut rng = StdRng::seed_from_u64(7);
    // Six months of puts, overwrites and deletes of the same keys (a key's
    // time picks its month, so a key lives in one month).
    for round in 0..4 {
        let mut batch = Vec::new();
        for _ in 0..3000 {
            let card = rng.random_range(0..300i64);
            let ts = JAN_2024 + rng.random_range(0..180) * DAY + rng.random_range(0..3) * 1000;
            let pk = PrimaryKey::new().with("card", card).with("ts", ts);
            if rng.random_range(0..10) == 0 {
                model.remove(&(card, ts));
                batch.push(DeleteRow::new(pk).into());
            } else {
                let a = rng.random_range(0..100_000) as f64 / 100.0;
                model.insert((card, ts), a);
                batch.push(PutRow::new(pk).column("amount", a).into());
            }
            if batch.len() == 200 {
                for r in orders.write_batch(std::mem::take(&mut batch)).await.unwrap() {
                    r.unwrap();
                }
            }
        }
        for month in orders.months() {
            let t = db.table(&month).unwrap();
            if round % 2 == 0 {
                t.flush().await.unwrap()
            } else {
                t.compact().await.unwrap()
            }
        }
    }
    assert_eq!(orders.months().len(), 6, "{:?}", orders.months());
    assert_eq!(orders.months()[0], "orders_202401");

    let check = |db: Database, model: BTreeMap<(i64, i64), f64>| async move {
        let sess = SqlSession::new(db.clone());
        let all = "SELECT card, ts, amount FROM orders ORDER BY card, ts";
        assert_eq!(sql_rows(&sess, all).await, model_rows(&model, |_| true));
        // Time predicates skip months and still return exactly the rows.
        for (lo, hi) in [(31, 59), (0, 1), (100, 180), (45, 46)] {
            let (lo, hi) = (JAN_2024 + lo * DAY, JAN_2024 + hi * DAY);
            let q = format!("SELECT card, ts, amount FROM orders WHERE ts >= {lo} AND ts < {hi} ORDER BY card, ts");
            assert_eq!(
                sql_rows(&sess, &q).await,
                model_rows(&model, |t| t >= lo && t < hi),
                "{q}"
            );
            let plan = query(&sess, &format!("EXPLAIN {q}")).await;
            let months = (lo / DAY..hi / DAY)
                .map(|d| d / 30)
                .collect::<std::collections::HashSet<_>>()
                .len();
            assert!(plan.contains("SeriesScanExec"), "{plan}");
            assert!(
                !plan.contains("months read=6"),
                "a time range reads fewer months ({months}): {plan}"
            );
        }
        // A month as a table of its own.
        let feb = model_rows(&model, |t| (JAN_2024 + 31 * DAY..JAN_2024 + 60 * DAY).contains(&t));
        assert_eq!(
            sql_rows(&sess, "SELECT card, ts, amount FROM orders_202402 ORDER BY card, ts").await,
            feb
        );
    };
    check(db.clone(), model.clone()).await;
    drop(orders);
    db.close().await.unwrap();
    let db = open(dir.path(), &clock).await;
    check(db.clone(), model.clone()).await;
    let listing = db.table_listing();
    assert_eq!(listing.iter().filter(|l| l.kind() == "month").count(), 6);
    assert!(listing.iter().any(|l| l.name == "orders" && l.kind() == "series"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_whose_month_cannot_be_told_are_refused_alone() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(JAN_2024 + 40 * DAY));
    let db = open(dir.path(), &clock).await;
    // The time column is an attribute here.
    db.create_series(
        TableSchema::new("ev").pk("dev", PkType::String),
        TableOptions::default(),
        SeriesOptions {
            time_column: Some("at".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let ev = db.series("ev").unwrap();
    let pk = |d: &str| PrimaryKey::new().with("dev", d);
    let results = ev
        .write_batch(vec![
            PutRow::new(pk("a")).column("at", JAN_2024).column("v", 1i64).into(),
            PutRow::new(pk("b")).column("v", 2i64).into(),
            PutRow::new(pk("c")).column("at", "yesterday").into(),
            PutRow::new(pk("d")).column("at", -5i64).into(),
            DeleteRow::new(pk("a")).into(),
            UpdateRow::new(pk("e")).put("at", JAN_2024 + 35 * DAY).into(),
            UpdateRow::new(pk("f")).put("v", 3i64).into(),
        ])
        .await
        .unwrap();
    let msg = |i: usize| results[i].as_ref().unwrap_err().message().to_string();
    assert!(results[0].is_ok() && results[5].is_ok(), "{results:?}");
    assert!(msg(1).contains("no value for its time column 'at'"), "{}", msg(1));
    assert!(
        msg(2).contains("is a String") && msg(2).contains("INTEGER of milliseconds"),
        "{}",
        msg(2)
    );
    assert!(msg(3).contains("outside years 1970-9999"), "{}", msg(3));
    assert!(
        msg(4).contains("cannot tell its month") && msg(4).contains("ev_YYYYMM"),
        "{}",
        msg(4)
    );
    assert!(msg(6).contains("no value for its time column"), "{}", msg(6));
    assert_eq!(ev.months(), vec!["ev_202401", "ev_202402"]);
    // BatchWriteRow routes a series' writes too, each on its own.
    let results = db
        .batch_write(vec![
            (
                "ev".to_string(),
                PutRow::new(pk("g")).column("at", JAN_2024 + 70 * DAY).into(),
            ),
            ("ev".to_string(), PutRow::new(pk("h")).into()),
        ])
        .await
        .unwrap();
    assert!(results[0].is_ok() && results[1].is_err(), "{results:?}");
    assert_eq!(ev.months(), vec!["ev_202401", "ev_202402", "ev_202403"]);
    // Reads of the series name point to its months or SQL.
    let e = db.table("ev").unwrap_err();
    assert!(
        e.message().contains("is a series") && e.message().contains("SELECT ... FROM ev"),
        "{e}"
    );

    // Without a time column, the write time picks the month.
    db.create_series(orders_schema("log"), TableOptions::default(), SeriesOptions::default())
        .await
        .unwrap();
    let log = db.series("log").unwrap();
    log.write(PutRow::new(PrimaryKey::new().with("card", 1).with("ts", 0)).into())
        .await
        .unwrap();
    clock.advance(30 * DAY);
    log.write(PutRow::new(PrimaryKey::new().with("card", 1).with("ts", 0)).into())
        .await
        .unwrap();
    assert_eq!(log.months(), vec!["log_202402", "log_202403"]);

    // A table already holding a month's name is not taken over.
    db.create_table(orders_schema("orders_202401"), TableOptions::default())
        .await
        .unwrap();
    db.create_series(orders_schema("orders"), TableOptions::default(), time_series())
        .await
        .unwrap();
    let e = db
        .series("orders")
        .unwrap()
        .write(PutRow::new(PrimaryKey::new().with("card", 1).with("ts", JAN_2024)).into())
        .await
        .unwrap_err();
    assert!(e.message().contains("not a month of series 'orders'"), "{e}");
    let e = db
        .create_series(orders_schema("log"), TableOptions::default(), SeriesOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ObjectAlreadyExist);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintain_archives_and_drops_months_by_age_and_goes_on_past_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    // Now: 2024-07-15.
    let clock = Arc::new(ManualClock::new(JAN_2024 + 196 * DAY));
    let db = open(&dir.path().join("db"), &clock).await;
    db.create_series(
        orders_schema("orders"),
        TableOptions::default(),
        SeriesOptions {
            time_column: Some("ts".into()),
            archive_after_months: Some(2),
            drop_after_months: Some(5),
            archive_to: Some(RemoteLocation::new(archive.to_str().unwrap())),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let orders = db.series("orders").unwrap();
    let mut writes = Vec::new();
    for month in 0..7 {
        for card in 0..50 {
            let ts = JAN_2024 + month * 31 * DAY + card * 1000;
            writes.push(
                PutRow::new(PrimaryKey::new().with("card", card).with("ts", ts))
                    .column("amount", 1.5)
                    .into(),
            );
        }
    }
    for chunk in writes.chunks(200) {
        for r in orders.write_batch(chunk.to_vec()).await.unwrap() {
            r.unwrap();
        }
    }
    assert_eq!(orders.months().len(), 7);
    // One month's archive location is taken: that month fails alone.
    std::fs::create_dir_all(archive.join("orders_202404")).unwrap();
    std::fs::write(archive.join("orders_202404/other.txt"), "x").unwrap();

    let steps = db.maintain(&|_, _| {}).await.unwrap();
    let summary: Vec<(String, &str, bool)> = steps
        .iter()
        .map(|s| (s.table.clone(), s.action.as_str(), s.error.is_none()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("orders_202401".to_string(), "drop", true),
            ("orders_202402".to_string(), "drop", true),
            ("orders_202403".to_string(), "archive", true),
            ("orders_202404".to_string(), "archive", false),
            ("orders_202405".to_string(), "archive", true),
        ]
    );
    assert!(steps[3].error.as_ref().unwrap().message().contains("not empty"));
    let state = |name: &str| {
        db.table_listing()
            .into_iter()
            .find(|l| l.name == name)
            .and_then(|l| l.state())
    };
    assert_eq!(state("orders_202403"), Some("archived"));
    assert_eq!(state("orders_202404"), Some("local"));
    assert_eq!(state("orders_202406"), Some("local"));
    assert_eq!(state("orders_202401"), None);

    // SQL reads local and archived months alike.
    let sess = SqlSession::new(db.clone());
    let count = query(&sess, "SELECT count(*) AS n FROM orders").await;
    assert!(count.contains("| 250 |"), "{count}");

    // Fixed, a second run does only what is left; a third does nothing.
    std::fs::remove_dir_all(archive.join("orders_202404")).unwrap();
    let steps = db.maintain(&|_, _| {}).await.unwrap();
    assert_eq!(steps.len(), 1);
    assert!(steps[0].table == "orders_202404" && steps[0].error.is_none());
    assert!(db.maintain(&|_, _| {}).await.unwrap().is_empty());

    // Months age: a month later the oldest archived month is dropped with
    // its archive.
    clock.advance(31 * DAY);
    let steps = db.maintain(&|_, _| {}).await.unwrap();
    let actions: Vec<_> = steps.iter().map(|s| (s.table.as_str(), s.action.as_str())).collect();
    assert_eq!(actions, vec![("orders_202403", "drop"), ("orders_202406", "archive")]);
    assert!(!archive.join("orders_202403/cellar-table.json").exists());
    let count = query(&sess, "SELECT count(*) AS n FROM orders").await;
    assert!(count.contains("| 200 |"), "{count}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_creates_writes_lists_and_maintains_series() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let cellar = |args: &[&str], input: Option<&str>| crate::common::run_cli(&data, args, input.unwrap_or(""));
    let arch = dir.path().join("arch");
    create_device_series(&data, "ev", Some(&arch));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let input = format!(
        "{{\"op\":\"put\",\"pk\":{{\"dev\":\"a\",\"ts\":{now}}},\"columns\":{{\"v\":1}}}}\n\
         {{\"op\":\"put\",\"pk\":{{\"dev\":\"b\",\"ts\":{}}},\"columns\":{{\"v\":2}}}}\n\
         {{\"op\":\"put\",\"pk\":{{\"dev\":\"c\"}},\"columns\":{{\"v\":3}}}}\n",
        now - 62 * DAY
    );
    let (code, out, _) = cellar(&["write", "ev"], Some(&input));
    assert_eq!(code, 1, "{out}");
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(
        (
            lines[0]["ok"].as_bool(),
            lines[1]["ok"].as_bool(),
            lines[2]["ok"].as_bool()
        ),
        (Some(true), Some(true), Some(false))
    );
    let (_, out, _) = cellar(&["list", "--long"], None);
    let kinds: Vec<(String, String)> = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| {
            (
                v["table"].as_str().unwrap().to_string(),
                v["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(kinds.len(), 3, "{out}");
    assert_eq!(kinds[0], ("ev".to_string(), "series".to_string()));
    let (code, out, err) = cellar(&["maintain"], None);
    assert_eq!(code, 0, "{err}");
    let step: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (step["action"].as_str(), step["ok"].as_bool()),
        (Some("archive"), Some(true)),
        "{out}"
    );
    assert!(err.is_empty(), "no progress bar off a terminal: {err}");
    let (code, out, _) = cellar(
        &["sql", "--format", "csv", "-c", "SELECT dev, v FROM ev ORDER BY dev"],
        None,
    );
    assert_eq!((code, out.as_str()), (0, "dev,v\na,1\nb,2\n"));
    let (code, _, err) = cellar(&["get", "ev", "{\"dev\":\"a\",\"ts\":1}"], None);
    assert_ne!(code, 0);
    assert!(err.contains("is a series"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn series_are_described_and_dropped_with_their_months() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let cellar = |args: &[&str]| crate::common::run_cli(&data, args, "");
    let ok = |args: &[&str]| {
        let (code, out, err) = cellar(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    let arch = dir.path().join("arch");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for name in ["ev", "gone"] {
        create_device_series(&data, name, Some(&arch.join(name)));
        let input = format!(
            "{{\"op\":\"put\",\"pk\":{{\"dev\":\"a\",\"ts\":{now}}},\"columns\":{{\"v\":1}}}}\n\
             {{\"op\":\"put\",\"pk\":{{\"dev\":\"b\",\"ts\":{}}},\"columns\":{{\"v\":2}}}}\n",
            now - 62 * DAY
        );
        assert_eq!(crate::common::run_cli(&data, &["write", name], &input).0, 0);
    }
    ok(&["maintain"]);
    let d: serde_json::Value = serde_json::from_str(ok(&["describe", "ev"]).trim()).unwrap();
    assert_eq!(d["kind"], "series");
    assert_eq!(
        (d["time_column"].as_str(), d["time_type"].as_str()),
        (Some("ts"), Some("integer"))
    );
    assert_eq!(d["archive_after_months"], 1);
    let months = d["months"].as_array().unwrap();
    assert_eq!(months.len(), 2, "{d}");
    assert_eq!(
        (months[0]["state"].as_str(), months[1]["state"].as_str()),
        (Some("archived"), Some("local"))
    );
    assert!(months[0]["location"].as_str().unwrap().contains("arch/ev"), "{d}");
    assert!(months[0]["month"].as_str().unwrap().len() == 7, "YYYY-MM: {d}");

    let out = ok(&["sql", "--format", "csv", "-c", "DESCRIBE ev"]);
    for want in [
        "primary key,dev,VARCHAR NOT NULL (partition key)",
        "column,v,BIGINT",
        "series,time_column,ts (BIGINT milliseconds)",
        "series,archive_after_months,1",
        "series,drop_after_months,none",
        ",archived at ",
        ",local\n",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
    assert_eq!(out.matches("\nmonth,ev_").count(), 2, "{out}");
    // Altered: the settings, and the options of every month and new ones.
    ok(&["alter", "ev", "--drop-after-months", "6", "--ttl", "864000"]);
    ok(&[
        "sql",
        "-c",
        "ALTER TABLE ev SET (archive_after_months = 2, max_versions = 2)",
    ]);
    let d: serde_json::Value = serde_json::from_str(ok(&["describe", "ev"]).trim()).unwrap();
    assert_eq!(
        (
            &d["drop_after_months"],
            &d["archive_after_months"],
            &d["ttl"],
            &d["max_versions"]
        ),
        (
            &serde_json::json!(6),
            &serde_json::json!(2),
            &serde_json::json!(864000),
            &serde_json::json!(2)
        ),
        "{d}"
    );
    for m in d["months"].as_array().unwrap() {
        let t: serde_json::Value =
            serde_json::from_str(ok(&["describe", m["table"].as_str().unwrap()]).trim()).unwrap();
        assert_eq!(
            (t["ttl"].as_i64(), t["max_versions"].as_i64()),
            (Some(864000), Some(2)),
            "{t}"
        );
    }
    let (code, _, err) = cellar(&["alter", "ev", "--drop-after-months", "1"]);
    assert_eq!(code, 2);
    assert!(err.contains("must be greater than archive_after_months"), "{err}");
    let (code, _, err) = cellar(&["sql", "-c", "ALTER TABLE ev SET (time_column = 'x')"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot change"), "{err}");
    let d2: serde_json::Value = serde_json::from_str(ok(&["describe", "ev"]).trim()).unwrap();
    assert_eq!(d2["drop_after_months"], 6, "a refused change changes nothing");
    let month = d["months"][1]["table"].as_str().unwrap().to_string();
    let (code, _, err) = cellar(&["alter", &month, "--archive-after-months", "1"]);
    assert_eq!(code, 2);
    assert!(err.contains("is not one"), "{err}");
    // Without --cascade, or with an archived month and no archive choice:
    // refused, nothing dropped.
    let (code, _, err) = cellar(&["drop", "ev"]);
    assert_eq!(code, 2);
    assert!(err.contains("cellar drop ev --cascade"), "{err}");
    let (code, _, err) = cellar(&["drop", "ev", "--cascade"]);
    assert_eq!(code, 2);
    assert!(err.contains("is archived") && err.contains("--keep-archive"), "{err}");
    let (code, _, err) = cellar(&["sql", "-c", "DROP TABLE ev CASCADE"]);
    assert_eq!(code, 1);
    assert!(err.contains("CASCADE PURGE"), "{err}");
    assert_eq!(ok(&["list"]).lines().filter(|l| l.starts_with("ev")).count(), 3);
    let (code, _, err) = cellar(&["drop", "ev_999912", "--cascade"]);
    assert_eq!(code, 2, "{err}");
    // Keep the archive: everything local goes, the archive stays.
    ok(&["drop", "ev", "--cascade", "--keep-archive"]);
    assert!(!ok(&["list"]).contains("ev"));
    assert!(arch.join("ev").read_dir().unwrap().next().is_some());
    // SQL with PURGE: the archives go too.
    ok(&["sql", "-c", "DROP TABLE gone CASCADE PURGE"]);
    assert_eq!(ok(&["list"]), "");
    let left: Vec<_> = walk(&arch.join("gone"));
    assert!(left.is_empty(), "{left:?}");

    // A TIMESTAMP time column from the command line.
    ok(&[
        "create",
        "tsd",
        "--pk",
        "dev:string,ts:integer",
        "--series",
        "monthly",
        "--time-column",
        "ts:timestamp",
    ]);
    let d: serde_json::Value = serde_json::from_str(ok(&["describe", "tsd"]).trim()).unwrap();
    assert_eq!(d["time_type"], "timestamp");
    ok(&[
        "sql",
        "-c",
        "INSERT INTO tsd (dev, ts) VALUES ('a', TIMESTAMP '2026-11-01 10:00:00')",
    ]);
    let out = ok(&[
        "sql",
        "--format",
        "csv",
        "-c",
        "SELECT dev, ts FROM tsd WHERE ts >= TIMESTAMP '2026-11-01 00:00:00'",
    ]);
    assert_eq!(out, "dev,ts\na,2026-11-01T10:00:00\n");
    let (code, _, err) = cellar(&[
        "create",
        "x",
        "--pk",
        "ts:integer",
        "--series",
        "monthly",
        "--time-column",
        "ts:date",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("COL:timestamp"), "{err}");
}

/// `cellar create NAME` of a monthly series keyed (dev, ts), filed by
/// `ts`; with `arch`, archiving months a month old there.
fn create_device_series(data: &std::path::Path, name: &str, arch: Option<&std::path::Path>) {
    let mut args = vec![
        "create",
        name,
        "--pk",
        "dev:string,ts:integer",
        "--series",
        "monthly",
        "--time-column",
        "ts",
    ];
    let arch = arch.map(|a| a.to_str().unwrap().to_string());
    if let Some(a) = &arch {
        args.extend(["--archive-after-months", "1", "--archive-to", a]);
    }
    let (code, _, err) = crate::common::run_cli(data, &args, "");
    assert_eq!(code, 0, "{err}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = dir.read_dir() {
        for e in rd.flatten() {
            if e.path().is_dir() {
                out.extend(walk(&e.path()));
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_series_exports_month_by_month() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let cellar = |args: &[&str]| crate::common::run_cli(&data, args, "");
    create_device_series(&data, "ev", None);
    // 2024-01, 2024-02, 2024-03: 1, 2 and 3 rows.
    let mut input = String::new();
    for (m, n) in [(0i64, 1), (1, 2), (2, 3)] {
        for i in 0..n {
            let ts = 1_704_067_200_000 + m * 31 * DAY + i;
            input.push_str(&format!(
                "{{\"op\":\"put\",\"pk\":{{\"dev\":\"d{i}\",\"ts\":{ts}}},\"columns\":{{\"v\":{m}}}}}\n"
            ));
        }
    }
    assert_eq!(crate::common::run_cli(&data, &["write", "ev"], &input).0, 0);
    let out_dir = dir.path().join("out");
    let (code, out, err) = cellar(&[
        "export",
        "ev",
        "--to",
        out_dir.to_str().unwrap(),
        "--from-month",
        "2024-02",
        "--to-month",
        "2024-03",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let got: Vec<(String, u64)> = lines
        .iter()
        .map(|l| (l["table"].as_str().unwrap().to_string(), l["rows"].as_u64().unwrap()))
        .collect();
    assert_eq!(got, vec![("ev_202402".to_string(), 2), ("ev_202403".to_string(), 3)]);
    assert!(out_dir.join("ev_202403/part-00000.parquet").exists());
    assert!(!out_dir.join("ev_202401").exists());
    let (_, csv, _) = cellar(&[
        "sql",
        "--format",
        "csv",
        "-c",
        &format!(
            "SELECT count(*) AS n FROM '{}/ev_202403/part-00000.parquet'",
            out_dir.display()
        ),
    ]);
    assert_eq!(csv, "n\n3\n");
    let (code, _, err) = cellar(&["export", "ev", "--to", "/tmp/x", "--from-month", "2024-13"]);
    assert_eq!(code, 2);
    assert!(err.contains("give YYYY-MM"), "{err}");
    let (code, _, err) = cellar(&["export", "ev_202401", "--to", "/tmp/x", "--from-month", "2024-01"]);
    assert_eq!(code, 2);
    assert!(err.contains("is a table"), "{err}");
}
