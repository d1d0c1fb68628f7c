//! Filters on GetRow / GetRange (and the CLI's `--filter`,
//! `--start-column`, `--end-column`): against a reference evaluation over
//! random rows with versions, deletes and missing columns, across a flush;
//! GetRange pages that end early when a filter passes few rows.

use std::collections::BTreeMap;
use std::sync::Arc;

use cellar::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{T0, open};

/// Per key: per column, versions newest first (what the table keeps).
type Model = BTreeMap<i64, BTreeMap<String, Vec<Value>>>;

fn random_value(rng: &mut StdRng) -> Value {
    match rng.random_range(0..10) {
        0 => Value::String(format!("s{}", rng.random_range(0..5))),
        1 => Value::Double(rng.random_range(0..10) as f64 / 2.0),
        _ => Value::Integer(rng.random_range(0..10)),
    }
}

fn cmp(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Value::Integer(x), Value::Integer(y)) => Some(x.cmp(y)),
        (Value::Double(x), Value::Double(y)) => x.partial_cmp(y),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

/// The reference: does a row pass `f`?
fn passes(row: &BTreeMap<String, Vec<Value>>, f: &Filter) -> bool {
    use std::cmp::Ordering::*;
    match f {
        Filter::Column(c) => {
            let Some(vs) = row.get(&c.column).filter(|v| !v.is_empty()) else {
                return c.pass_if_missing;
            };
            let n = if c.latest_version_only { 1 } else { vs.len() };
            vs.iter().take(n).any(|v| {
                cmp(v, &c.value).is_some_and(|o| match c.op {
                    CompareOp::Eq => o == Equal,
                    CompareOp::Ne => o != Equal,
                    CompareOp::Gt => o == Greater,
                    CompareOp::Ge => o != Less,
                    CompareOp::Lt => o == Less,
                    CompareOp::Le => o != Greater,
                })
            })
        }
        Filter::Not(f) => !passes(row, f),
        Filter::And(fs) => fs.iter().all(|f| passes(row, f)),
        Filter::Or(fs) => fs.iter().any(|f| passes(row, f)),
        Filter::ColumnPage { .. } => true,
    }
}

fn random_filter(rng: &mut StdRng, depth: u32) -> Filter {
    match if depth > 1 { 0 } else { rng.random_range(0..6) } {
        0..=2 => {
            let ops = [
                CompareOp::Eq,
                CompareOp::Ne,
                CompareOp::Gt,
                CompareOp::Ge,
                CompareOp::Lt,
                CompareOp::Le,
            ];
            let mut c = ColumnCondition::new(
                ["a", "b", "c"][rng.random_range(0..3)],
                ops[rng.random_range(0..6)],
                random_value(rng),
            );
            c.pass_if_missing = rng.random();
            c.latest_version_only = rng.random();
            Filter::Column(c)
        }
        3 => Filter::Not(Box::new(random_filter(rng, depth + 1))),
        4 => Filter::And(
            (0..rng.random_range(2..4))
                .map(|_| random_filter(rng, depth + 1))
                .collect(),
        ),
        _ => Filter::Or(
            (0..rng.random_range(2..4))
                .map(|_| random_filter(rng, depth + 1))
                .collect(),
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_match_a_reference_over_versions_deletes_and_missing_columns() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let db = open(dir.path(), &clock).await;
    db.create_table(
        TableSchema::new("t").pk("k", PkType::Integer),
        TableOptions {
            max_versions: 3,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let t = db.table("t").unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    let mut model: Model = BTreeMap::new();
    for round in 0..4 {
        for _ in 0..400 {
            clock.advance(1);
            let k = rng.random_range(0..300i64);
            let pk = PrimaryKey::new().with("k", k);
            match rng.random_range(0..10) {
                0 => {
                    t.delete_row(DeleteRow::new(pk)).await.unwrap();
                    model.remove(&k);
                }
                1..=4 => {
                    let mut put = PutRow::new(pk);
                    let mut row = BTreeMap::new();
                    for c in ["a", "b", "c"] {
                        if rng.random_range(0..4) > 0 {
                            let v = random_value(&mut rng);
                            put = put.column(c, v.clone());
                            row.insert(c.to_string(), vec![v]);
                        }
                    }
                    t.put_row(put).await.unwrap();
                    model.insert(k, row);
                }
                _ => {
                    let c = ["a", "b", "c"][rng.random_range(0..3)];
                    let v = random_value(&mut rng);
                    t.update_row(UpdateRow::new(pk).put(c, v.clone())).await.unwrap();
                    let vs = model.entry(k).or_default().entry(c.to_string()).or_default();
                    vs.insert(0, v);
                    vs.truncate(3);
                }
            }
        }
        if round == 1 {
            t.flush().await.unwrap();
        }
    }
    for _ in 0..150 {
        let f = random_filter(&mut rng, 0);
        let want: Vec<i64> = model.iter().filter(|(_, r)| passes(r, &f)).map(|(k, _)| *k).collect();
        // GetRange pages through everything, with the filter column not
        // among the returned ones.
        let mut got = Vec::new();
        let mut req = GetRange::new().limit(7);
        req.options = ReadOptions {
            columns_to_get: Some(vec!["zz".into()]),
            filter: Some(f.clone()),
            max_versions: Some(3),
            ..Default::default()
        };
        loop {
            let page = t.get_range(req.clone()).await.unwrap();
            assert!(page.rows.len() <= 7);
            got.extend(page.rows.iter().map(|r| match r.primary_key.get("k") {
                Some(PkValue::Integer(k)) => *k,
                other => panic!("{other:?}"),
            }));
            match page.next_start {
                Some(next) => req = req.start(next),
                None => break,
            }
        }
        // A row with no returned column is not returned when columns_to_get
        // names none of its columns: compare against keys with a row.
        // Conditions see the versions the read returns: all three here.
        let opts = ReadOptions {
            filter: Some(f.clone()),
            max_versions: Some(3),
            ..Default::default()
        };
        let mut all = Vec::new();
        let mut req = GetRange::new();
        req.options = opts.clone();
        all.extend(
            t.get_range(req)
                .await
                .unwrap()
                .rows
                .iter()
                .map(|r| match r.primary_key.get("k") {
                    Some(PkValue::Integer(k)) => *k,
                    _ => unreachable!(),
                }),
        );
        assert_eq!(all, want, "GetRange with {f:?}");
        assert!(got.iter().all(|k| want.contains(k)), "{f:?}");
        for k in [0i64, 17, 150, 299] {
            let row = t
                .get_row(GetRow::new(PrimaryKey::new().with("k", k)).options(opts.clone()))
                .await
                .unwrap()
                .row;
            assert_eq!(row.is_some(), want.contains(&k), "GetRow {k} with {f:?}");
        }
    }
    // A column page cuts the returned columns, after columns_to_get.
    let mut req = GetRange::new();
    req.options.filter = Some(Filter::ColumnPage { offset: 1, limit: 1 });
    for r in t.get_range(req).await.unwrap().rows {
        let k = match r.primary_key.get("k") {
            Some(PkValue::Integer(k)) => *k,
            _ => unreachable!(),
        };
        let names: Vec<&String> = model[&k]
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(n, _)| n)
            .collect();
        let expect: Vec<&String> = names.into_iter().skip(1).take(1).collect();
        let got: Vec<&String> = r.columns.iter().map(|(n, _)| n).collect();
        assert_eq!(got, expect, "row {k}");
    }
    let bad = GetRow::new(PrimaryKey::new().with("k", 1)).options(ReadOptions {
        filter: Some(Filter::Not(Box::new(Filter::ColumnPage { offset: 0, limit: 1 }))),
        ..Default::default()
    });
    let e = t.get_row(bad).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ParameterInvalid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_passing_one_percent_pages_without_reading_everything_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let db = open(dir.path(), &clock).await;
    db.create_table(TableSchema::new("t").pk("k", PkType::Integer), TableOptions::default())
        .await
        .unwrap();
    let t = db.table("t").unwrap();
    let rows = 120_000i64;
    for chunk in (0..rows).collect::<Vec<_>>().chunks(200) {
        let batch = chunk
            .iter()
            .map(|i| PutRow::new(PrimaryKey::new().with("k", *i)).column("m", i % 100).into())
            .collect();
        for r in t.write_batch(batch).await.unwrap() {
            r.unwrap();
        }
    }
    t.flush().await.unwrap();
    let mut req = GetRange::new();
    req.options.filter = Some(Filter::Column(ColumnCondition::new("m", CompareOp::Eq, 0)));
    let (mut pages, mut total) = (0, 0);
    loop {
        let page = t.get_range(req.clone()).await.unwrap();
        pages += 1;
        total += page.rows.len();
        // At most 50,000 rows looked at per response: 500 of them pass.
        assert!(page.rows.len() <= 500, "{}", page.rows.len());
        match page.next_start {
            Some(next) => req = req.start(next),
            None => break,
        }
    }
    assert_eq!(total, 1200);
    assert_eq!(pages, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_with_filters_and_column_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let run = |args: &[&str], input: &str| crate::common::run_cli(&data, args, input);
    assert_eq!(run(&["create", "t", "--pk", "k:integer"], "").0, 0);
    let ops: String = (0..10)
        .map(|k| {
            format!(
                "{{\"op\":\"put\",\"pk\":{{\"k\":{k}}},\"columns\":{{\"a\":{k},\"b\":\"x\",\"c\":true,\"d\":1.5}}}}\n"
            )
        })
        .collect();
    assert_eq!(run(&["write", "t"], &ops).0, 0);
    let (code, out, err) = run(
        &[
            "scan",
            "t",
            "--filter",
            r#"{"and":[{"column":"a","op":">=","value":3},{"not":{"column":"a","op":">","value":5}}]}"#,
            "--columns",
            "a",
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 3, "{out}");
    let (_, out, _) = run(
        &["get", "t", r#"{"k":4}"#, "--start-column", "b", "--end-column", "d"],
        "",
    );
    assert_eq!(column_names(&out), ["b", "c"]);
    let (_, out, _) = run(
        &[
            "get",
            "t",
            r#"{"k":4}"#,
            "--filter",
            r#"{"column_page":{"offset":1,"limit":2}}"#,
        ],
        "",
    );
    assert_eq!(column_names(&out), ["b", "c"]);
    let (_, out, _) = run(
        &[
            "get",
            "t",
            r#"{"k":4}"#,
            "--filter",
            r#"{"column":"a","op":"=","value":"4"}"#,
        ],
        "",
    );
    assert_eq!(out.trim(), "null", "a STRING never equals an INTEGER");
    let (code, _, err) = run(&["scan", "t", "--filter", r#"{"column":"a","op":"~","value":1}"#], "");
    assert_eq!(code, 2);
    assert!(err.contains("accepted: =, !=, >, >=, <, <="), "{err}");
    let (code, _, err) = run(
        &[
            "scan",
            "t",
            "--filter",
            r#"{"and":[{"column":"a","op":"=","value":1}]}"#,
        ],
        "",
    );
    assert_eq!(code, 2);
    assert!(err.contains("two or more"), "{err}");
}

/// The column names of the row `cellar get` printed.
fn column_names(out: &str) -> Vec<String> {
    let row: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    row["columns"].as_object().unwrap().keys().cloned().collect()
}
