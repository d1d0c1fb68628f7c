//! Bad input at the embedding API and the CLI: every refusal is a clear
//! error (the right kind, a message naming what was wrong), never a panic,
//! and nothing already stored changes.

use std::process::Command;

use cellar::*;
use proptest::prelude::*;

/// A column or table name, valid or not.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_][a-z0-9_]{0,8}",
        "\\PC{0,6}",
        Just(String::new()),
        Just("__pk".to_string()),
        Just("card".to_string()),
        Just("x".repeat(256)),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::Integer),
        any::<f64>().prop_map(Value::Double),
        "\\PC{0,8}".prop_map(Value::String),
        any::<bool>().prop_map(Value::Boolean),
        prop::collection::vec(any::<u8>(), 0..8).prop_map(Value::Binary),
        Just(Value::String("x".repeat(MAX_VALUE_BYTES + 1))),
    ]
}

fn pk_value() -> impl Strategy<Value = PkValue> {
    prop_oneof![
        any::<i64>().prop_map(PkValue::Integer),
        "\\PC{0,6}".prop_map(PkValue::String),
        prop::collection::vec(any::<u8>(), 0..6).prop_map(PkValue::Binary),
        Just(PkValue::String("k".repeat(MAX_PK_VALUE_BYTES + 1))),
    ]
}

#[derive(Debug, Clone)]
enum Call {
    Put(Vec<(String, PkValue)>, Vec<(String, Value, Option<i64>)>),
    Update(Vec<(String, PkValue)>, Vec<(String, Value)>),
    Range(
        Vec<(String, PkValue)>,
        Vec<(String, PkValue)>,
        Option<usize>,
        Option<u32>,
    ),
    Get(Vec<(String, PkValue)>, Vec<String>),
}

fn call() -> impl Strategy<Value = Call> {
    let key = || prop::collection::vec((name(), pk_value()), 0..4);
    prop_oneof![
        (
            key(),
            prop::collection::vec((name(), value(), prop::option::of(any::<i64>())), 0..5)
        )
            .prop_map(|(k, c)| Call::Put(k, c)),
        (key(), prop::collection::vec((name(), value()), 0..4)).prop_map(|(k, c)| Call::Update(k, c)),
        (key(), key(), prop::option::of(0usize..10), prop::option::of(0u32..3))
            .prop_map(|(s, e, l, v)| Call::Range(s, e, l, v)),
        (key(), prop::collection::vec(name(), 0..3)).prop_map(|(k, c)| Call::Get(k, c)),
    ]
}

fn primary_key(cols: &[(String, PkValue)]) -> PrimaryKey {
    cols.iter()
        .fold(PrimaryKey::new(), |pk, (n, v)| pk.with(n.as_str(), v.clone()))
}

fn bound(cols: &[(String, PkValue)]) -> PkBound {
    cols.iter()
        .fold(PkBound::new(), |b, (n, v)| b.with(n.as_str(), v.clone()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random calls of every shape: each returns Ok or an error of a kind
    /// the caller can act on, with a message, and a stored row never
    /// changes through a refused call.
    #[test]
    fn random_embedding_calls_are_answered_or_refused_cleanly(calls in prop::collection::vec(call(), 1..12)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let db = Database::open(dir.path()).await.unwrap();
            db.create_table(
                TableSchema::new("t").pk("card", PkType::Integer).pk("order", PkType::String),
                TableOptions::default(),
            )
            .await
            .unwrap();
            let t = db.table("t").unwrap();
            let anchor = PrimaryKey::new().with("card", 0).with("order", "anchor");
            t.put_row(PutRow::new(anchor.clone()).column("a", 1)).await.unwrap();
            for c in calls {
                let err = match c {
                    Call::Put(k, cols) => {
                        let mut p = PutRow::new(primary_key(&k));
                        for (n, v, ver) in cols {
                            p = match ver {
                                Some(ver) => p.column_at(n, v, ver),
                                None => p.column(n, v),
                            };
                        }
                        t.put_row(p).await.err()
                    }
                    Call::Update(k, cols) => {
                        let u = cols.into_iter().fold(UpdateRow::new(primary_key(&k)), |u, (n, v)| u.put(n, v));
                        t.update_row(u).await.err()
                    }
                    Call::Range(s, e, limit, mv) => {
                        let mut r = GetRange::new().start(bound(&s)).end(bound(&e));
                        if let Some(l) = limit {
                            r = r.limit(l);
                        }
                        r = r.options(ReadOptions { max_versions: mv, ..Default::default() });
                        t.get_range(r).await.err()
                    }
                    Call::Get(k, cols) => {
                        let o = ReadOptions { columns_to_get: Some(cols), ..Default::default() };
                        t.get_row(GetRow::new(primary_key(&k)).options(o)).await.err()
                    }
                };
                if let Some(e) = err {
                    assert!(!e.message().is_empty());
                    assert!(
                        matches!(
                            e.kind(),
                            ErrorKind::ParameterInvalid
                                | ErrorKind::InvalidPk
                                | ErrorKind::OutOfColumnCountLimit
                                | ErrorKind::OutOfRowSizeLimit
                        ),
                        "{e:?}"
                    );
                }
            }
            let row = t.get_row(GetRow::new(anchor)).await.unwrap().row;
            let row = row.expect("the anchor row is still there");
            // Only a valid write to the anchor's key could change it.
            assert!(row.latest("a").is_some() || !row.columns.is_empty());
        });
    }
}

/// Malformed invocations: exit 2 (1 for a missing table), one `error:`
/// line naming the problem, no panic.
#[test]
fn malformed_cli_invocations_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str], stdin: Option<&str>| {
        use std::io::Write;
        let mut c = Command::new(env!("CARGO_BIN_EXE_cellar"));
        c.arg("--data").arg(dir.path()).args(args);
        c.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut si = child.stdin.take().unwrap();
        si.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
        drop(si);
        child.wait_with_output().unwrap()
    };
    assert!(
        run(&["create", "t", "--pk", "card:integer,order:string"], None)
            .status
            .success()
    );
    let cases: Vec<(Vec<&str>, Option<&str>, i32)> = vec![
        (vec!["create", "u", "--pk", "a"], None, 2),
        (vec!["create", "u", "--pk", "a:float"], None, 2),
        (vec!["create", "u", "--pk", ""], None, 2),
        (vec!["create", "1bad", "--pk", "a:integer"], None, 2),
        (
            vec!["create", "u", "--pk", "a:integer,b:string,c:binary,d:integer,e:integer"],
            None,
            2,
        ),
        (vec!["create", "u", "--pk", "a:integer", "--ttl", "0"], None, 2),
        (vec!["create", "u", "--pk", "a:integer", "--max-versions", "0"], None, 2),
        (vec!["create", "u", "--pk", "a:integer", "--max-versions", "x"], None, 2),
        (vec!["alter", "t", "--allow-update", "maybe"], None, 2),
        (vec!["get", "t", "{"], None, 2),
        (vec!["get", "t", "[]"], None, 2),
        (vec!["get", "t", r#"{"card":"x","order":"a"}"#], None, 2),
        (vec!["get", "t", r#"{"card":1}"#], None, 2),
        (
            vec!["get", "t", r#"{"card":1,"order":"a"}"#, "--max-versions", "0"],
            None,
            2,
        ),
        (
            vec!["get", "t", r#"{"card":1,"order":"a"}"#, "--time-range", "5,1"],
            None,
            2,
        ),
        (vec!["get", "nope", r#"{"card":1,"order":"a"}"#], None, 1),
        (vec!["scan", "t", "--start", r#"{"card":{"inf":"sideways"}}"#], None, 2),
        (
            vec!["scan", "t", "--start", r#"{"card":5}"#, "--end", r#"{"card":1}"#],
            None,
            2,
        ),
        (vec!["scan", "t", "--limit", "-1"], None, 2),
        (vec!["sql", "-c", "SELEC 1"], None, 1),
        (vec!["sql", "-c", "SELECT * FROM nope"], None, 1),
        (vec!["sql", "-f", "/nonexistent.sql"], None, 1),
        (vec!["check", "nope"], None, 1),
        (vec!["frobnicate"], None, 2),
    ];
    for (args, stdin, code) in &cases {
        let o = run(args, *stdin);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(*code), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.contains("error"), "{args:?}: {err}");
    }
    // Bad NDJSON lines fail alone, each with a message; the good one lands.
    let input = "not json\n{}\n{\"op\":\"put\"}\n[1]\n{\"op\":\"put\",\"pk\":{\"card\":1,\"order\":\"a\"},\"columns\":{\"v\":1}}\n\u{0}\n";
    let o = run(&["write", "t"], Some(input));
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 6, "{out}");
    for (i, l) in lines.iter().enumerate() {
        let j: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(j["ok"], i == 4, "{l}");
        if i != 4 {
            assert!(!j["error"]["message"].as_str().unwrap().is_empty());
        }
    }
    assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"));
}

/// A statement that makes the SQL parser backtrack for hours (found by
/// fuzzing: dotted chains with unclosed brackets and operators) gets an
/// error after the parse deadline instead of hanging the caller. It runs
/// in a `cellar sql` process, whose exit ends the abandoned parse.
#[test]
fn a_statement_the_parser_would_chew_on_for_hours_is_given_up() {
    let stmt = include_str!("../../fuzz/known-failures/sql-hang-sqlparser-chain-with-operators");
    let dir = tempfile::tempdir().unwrap();
    let start = std::time::Instant::now();
    let (code, _, err) = crate::common::run_cli(dir.path(), &["sql", "-c", stmt], "");
    let took = start.elapsed();
    assert_ne!(code, 0);
    assert!(err.contains("still being parsed after 3 s"), "{err}");
    assert!(took < std::time::Duration::from_secs(20), "took {took:?}");
    // Ordinary statements are not held up.
    let (code, out, err) = crate::common::run_cli(dir.path(), &["sql", "-c", "SELECT 1 + 2 AS x"], "");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains('3'), "{out}");
}
