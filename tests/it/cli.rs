//! The CLI contract: commands, output formats and exit codes.

use std::io::Write;
use std::process::{Command, Output, Stdio};

struct Cli {
    dir: tempfile::TempDir,
}

impl Cli {
    fn new() -> Self {
        Cli {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_cellar"));
        c.arg("--data").arg(self.dir.path()).args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    }

    /// Runs a command that must fail as a usage / parameter error (exit 2).
    fn usage_error(&self, args: &[&str]) -> Output {
        let o = self.run(args);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o
    }

    fn write(&self, table: &str, input: &str) -> (i32, String) {
        let mut child = self
            .cmd(&["write", table])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let o = child.wait_with_output().unwrap();
        (o.status.code().unwrap(), String::from_utf8(o.stdout).unwrap())
    }
}

#[test]
fn table_management_commands() {
    let c = Cli::new();
    c.ok(&[
        "create",
        "orders",
        "--pk",
        "card:integer,order:string",
        "--ttl",
        "86400",
        "--max-versions",
        "3",
    ]);
    c.ok(&["create", "a_first", "--pk", "k:binary"]);
    assert_eq!(c.ok(&["list"]), "a_first\norders\n");
    assert_eq!(
        c.ok(&["describe", "orders"]),
        "{\"name\":\"orders\",\"primary_key\":[{\"name\":\"card\",\"type\":\"integer\"},{\"name\":\"order\",\"type\":\"string\"}],\
         \"ttl\":86400,\"max_versions\":3,\"max_version_offset\":86400,\"allow_update\":true,\"partition_split_bytes\":0}\n"
    );
    c.ok(&[
        "alter",
        "orders",
        "--ttl",
        "-1",
        "--allow-update",
        "false",
        "--max-version-offset",
        "600",
    ]);
    let d: serde_json::Value = serde_json::from_str(&c.ok(&["describe", "orders"])).unwrap();
    assert_eq!(
        (
            d["ttl"].as_i64(),
            d["allow_update"].as_bool(),
            d["max_version_offset"].as_i64()
        ),
        (Some(-1), Some(false), Some(600))
    );
    c.ok(&["drop", "a_first"]);
    assert_eq!(c.ok(&["list"]), "orders\n");

    // usage and parameter errors exit 2, others 1
    for bad in [
        vec!["create", "x", "--pk", "card:float"],
        vec!["create", "1x", "--pk", "card:integer"],
        vec![
            "create",
            "x",
            "--pk",
            "a:integer,b:integer,c:integer,d:integer,e:integer",
        ],
        vec!["alter", "orders", "--max-versions", "0"],
        vec!["alter", "orders", "--allow-update", "maybe"],
        vec!["get", "orders", "not json"],
        vec!["nonsense"],
    ] {
        let o = c.usage_error(&bad);
        assert!(!o.stderr.is_empty());
    }
    let o = c.run(&["describe", "missing"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("'missing' does not exist"));
    let o = c.run(&["create", "orders", "--pk", "k:string"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn write_get_and_scan_formats() {
    let c = Cli::new();
    c.ok(&[
        "create",
        "t",
        "--pk",
        "card:integer,order:string",
        "--max-versions",
        "3",
    ]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let v1 = now - 5000;
    let input = format!(
        "{}\n{}\n{}\n{}\n{}\n",
        format_args!(
            r#"{{"op":"put","pk":{{"card":1,"order":"a"}},"columns":{{"amount":12.0,"n":3,"note":"hi","ok":true,"raw":{{"binary":"aGk="}},"v":{{"value":7,"version":{v1}}}}}}}"#
        ),
        r#"{"op":"put","pk":{"card":-2,"order":"b"},"columns":{"x":1}}"#,
        r#"{"op":"put","pk":{"card":1}}"#,
        format_args!(
            r#"{{"op":"update","pk":{{"card":1,"order":"a"}},"put":{{"v":{{"value":8,"version":{}}}}},"delete_all":["ok"]}}"#,
            v1 + 1
        ),
        r#"{"op":"delete","pk":{"card":-2,"order":"b"}}"#,
    );
    let (code, out) = c.write("t", &input);
    assert_eq!(code, 1);
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 5);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["line"], i + 1);
        assert_eq!(l["ok"], i != 2, "{l}");
    }
    assert_eq!(lines[2]["error"]["kind"], "InvalidPK");
    assert!(lines[2]["error"]["message"].as_str().unwrap().contains("order"));

    let got = c.ok(&[
        "get",
        "t",
        r#"{"card":1,"order":"a"}"#,
        "--max-versions",
        "2",
        "--columns",
        "amount,v,raw",
    ]);
    let row: serde_json::Value = serde_json::from_str(&got).unwrap();
    assert_eq!(row["pk"], serde_json::json!({"card": 1, "order": "a"}));
    assert!(got.contains(r#""amount":[{"value":12.0,"#), "{got}");
    assert_eq!(row["columns"]["raw"][0]["value"], serde_json::json!({"binary": "aGk="}));
    assert_eq!(
        row["columns"]["v"],
        serde_json::json!([{"value": 8, "version": v1 + 1}, {"value": 7, "version": v1}])
    );
    let names: Vec<_> = row["columns"].as_object().unwrap().keys().cloned().collect();
    assert_eq!(names, vec!["amount", "raw", "v"]);
    let got = c.ok(&[
        "get",
        "t",
        r#"{"card":1,"order":"a"}"#,
        "--time-range",
        &format!("{v1},{}", v1 + 1),
        "--columns",
        "v",
    ]);
    assert!(got.contains(&format!(r#""v":[{{"value":7,"version":{v1}}}]"#)), "{got}");
    assert_eq!(c.ok(&["get", "t", r#"{"card":9,"order":"zz"}"#]), "null\n");

    let (code, _) = c.write(
        "t",
        &(0..6)
            .map(|i| format!("{{\"op\":\"put\",\"pk\":{{\"card\":{i},\"order\":\"k\"}},\"columns\":{{}}}}\n"))
            .collect::<String>(),
    );
    assert_eq!(code, 0);
    let cards = |out: String| -> Vec<(i64, String)> {
        out.lines()
            .map(|l| {
                let j: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    j["pk"]["card"].as_i64().unwrap(),
                    j["pk"]["order"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(
        cards(c.ok(&["scan", "t", "--start", r#"{"card":1}"#, "--end", r#"{"card":3}"#])),
        vec![(1, "a".into()), (1, "k".into()), (2, "k".into())]
    );
    assert_eq!(
        cards(c.ok(&[
            "scan",
            "t",
            "--backward",
            "--start",
            r#"{"card":3}"#,
            "--end",
            r#"{"card":1}"#
        ])),
        vec![(3, "k".into()), (2, "k".into())]
    );
    assert_eq!(
        cards(c.ok(&["scan", "t", "--start", r#"{"card":{"inf":"min"}}"#, "--limit", "2"])),
        vec![(0, "k".into()), (1, "a".into())]
    );
    assert_eq!(
        cards(c.ok(&["scan", "t", "--backward", "--limit", "1"])),
        vec![(5, "k".into())]
    );
    c.ok(&["compact", "t"]);
    let d: serde_json::Value = serde_json::from_str(&c.ok(&["describe", "t", "--stats"])).unwrap();
    assert_eq!(d["name"], "t");
    assert_eq!(d["stats"]["segments"], 1);
    assert!(d["stats"]["segment_bytes"].as_u64().unwrap() > 0);
    // `cellar compact` ran a compaction: one run, its counters filled in.
    assert_eq!(d["stats"]["runs"], 1);
    assert!(d["stats"]["compactions"].as_u64().unwrap() >= 1);
    assert!(d["stats"]["compaction_bytes"].as_u64().unwrap() > 0);
    assert!(d["stats"]["compaction_read_bytes"].as_u64().unwrap() > 0);
    assert!(d["stats"]["last_compaction_error"].is_null());
    // `--sizes`: every column's bytes from the segment footers, largest
    // first, summing to about the segment's size (the footer is the rest).
    let d: serde_json::Value = serde_json::from_str(&c.ok(&["describe", "t", "--sizes"])).unwrap();
    let cols = d["column_sizes"].as_array().unwrap();
    let names: Vec<&str> = cols.iter().map(|c| c["column"].as_str().unwrap()).collect();
    for want in ["__pk", "__cells", "card", "order"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let bytes: Vec<u64> = cols.iter().map(|c| c["bytes"].as_u64().unwrap()).collect();
    assert!(bytes.windows(2).all(|w| w[0] >= w[1]), "{bytes:?}");
    assert!(cols.iter().all(|c| c["uncompressed_bytes"].as_u64().unwrap() > 0));
    let total: u64 = bytes.iter().sum();
    let seg = segment_bytes_of_t(&c);
    assert!(total > 0 && total < seg, "columns {total} of a {seg}-byte segment");
    assert!(d.get("stats").is_none(), "--sizes alone adds no stats");
    assert_eq!(cards(c.ok(&["scan", "t"])).len(), 7);
    let o = c.run(&["scan", "t", "--start", r#"{"order":"x"}"#]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn a_second_process_is_told_the_directory_is_in_use() {
    let c = Cli::new();
    c.ok(&["create", "t", "--pk", "k:string"]);
    let mut holder = c
        .cmd(&["write", "t"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = holder.stdin.take().unwrap();
    writeln!(stdin, r#"{{"op":"put","pk":{{"k":"a"}},"columns":{{"n":1}}}}"#).unwrap();
    // wait for the first ack, so the holder has surely opened the database
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut first,
    )
    .unwrap();
    assert!(first.contains("\"ok\":true"));
    let o = c.run(&["list"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("in use") && err.contains(&format!("(process {})", holder.id())),
        "{err}"
    );
    drop(stdin);
    assert!(holder.wait().unwrap().success());
    assert!(c.ok(&["get", "t", r#"{"k":"a"}"#]).contains("\"n\""));
}

#[test]
fn write_from_a_file_and_parameter_errors() {
    let c = Cli::new();
    c.ok(&["create", "t", "--pk", "k:string"]);
    let file = c.dir.path().join("ops.ndjson");
    std::fs::write(
        &file,
        "{\"op\":\"put\",\"pk\":{\"k\":\"a\"},\"columns\":{\"n\":1}}\n\n{\"op\":\"delete\",\"pk\":{\"k\":\"zz\"}}\n",
    )
    .unwrap();
    let o = c.run(&["write", "t", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "the blank line is skipped");
    let out = String::from_utf8(o.stdout).unwrap();
    let oks: Vec<(u64, bool)> = out
        .lines()
        .map(|l| {
            let j = serde_json::from_str::<serde_json::Value>(l).unwrap();
            (j["line"].as_u64().unwrap(), j["ok"].as_bool().unwrap())
        })
        .collect();
    assert_eq!(oks, vec![(1, true), (3, true)]);
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(
        err.starts_with("cellar write: 2 operations, 2 ok, 0 failed, in "),
        "{err}"
    );
    assert!(err.contains("; 1 blank lines skipped"), "{err}");
    let o = c.run(&["write", "t", "/nonexistent/ops.ndjson"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/ops.ndjson"));
    for bad in [
        vec!["get", "t", r#"{"k":"a"}"#, "--time-range", "5"],
        vec!["get", "t", r#"{"k":"a"}"#, "--time-range", "9,3"],
        vec!["get", "t", r#"{"k":"a"}"#, "--max-versions", "2", "--time-range", "1,2"],
        vec!["get", "t", r#"{"k":1}"#],
        vec!["scan", "t", "--limit", "0"],
        vec!["scan", "t", "--start", r#"{"k":{"inf":"middle"}}"#],
    ] {
        c.usage_error(&bad);
    }
    assert!(c.ok(&["get", "t", r#"{"k":"a"}"#]).contains("\"n\":[{\"value\":1"));
}

impl Cli {
    /// `cellar sql` with SQL on stdin.
    fn sql_stdin(&self, args: &[&str], input: &str) -> Output {
        let mut a = vec!["sql"];
        a.extend_from_slice(args);
        let mut child = self
            .cmd(&a)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }
}

#[test]
fn sql_command_formats() {
    let c = Cli::new();
    c.ok(&[
        "sql",
        "-c",
        "CREATE TABLE t (k BIGINT, name VARCHAR, score DOUBLE, raw VARBINARY, PRIMARY KEY (k))",
        "-c",
        "INSERT INTO t VALUES (1, 'a,b', 1.5, X'00ff'), (2, NULL, NULL, NULL)",
    ]);
    let q = "SELECT * FROM t ORDER BY k";
    assert_eq!(
        c.ok(&["sql", "--format", "csv", "-c", q]),
        "k,name,score,raw\n1,\"a,b\",1.5,00ff\n2,,,\n"
    );
    assert_eq!(
        c.ok(&["sql", "--format", "json", "-c", q]),
        "[{\"k\":1,\"name\":\"a,b\",\"score\":1.5,\"raw\":\"00ff\"},{\"k\":2,\"name\":null,\"score\":null,\"raw\":null}]\n"
    );
    assert_eq!(
        c.ok(&["sql", "--format", "ndjson", "-c", q]),
        "{\"k\":1,\"name\":\"a,b\",\"score\":1.5,\"raw\":\"00ff\"}\n{\"k\":2,\"name\":null,\"score\":null,\"raw\":null}\n"
    );
    assert_eq!(
        c.ok(&["sql", "--format", "json", "-c", "SELECT * FROM t WHERE k = 9"]),
        "[]\n"
    );
    assert_eq!(
        c.ok(&["sql", "--format", "csv", "-c", "SELECT k FROM t WHERE k = 9"]),
        "k\n"
    );
    let table = c.ok(&["sql", "-c", "SELECT k, name FROM t WHERE k = 1"]);
    assert_eq!(
        table,
        "+---+------+\n| k | name |\n+---+------+\n| 1 | a,b  |\n+---+------+\n"
    );
    // A file, and several statements on stdin.
    let f = c.dir.path().join("q.sql");
    std::fs::write(&f, "-- a comment; with a semicolon\nSELECT count(*) AS n FROM t;\n").unwrap();
    assert_eq!(c.ok(&["sql", "--format", "csv", "-f", f.to_str().unwrap()]), "n\n2\n");
    let o = c.sql_stdin(&["--format", "csv"], "SELECT 1 AS a;\nSELECT 'x;y' AS b;\n");
    assert!(o.status.success());
    assert_eq!(String::from_utf8(o.stdout).unwrap(), "a\n1\nb\nx;y\n");
}

#[test]
fn sql_errors_exit_1_and_keep_earlier_statements() {
    let c = Cli::new();
    let o = c.sql_stdin(
        &["--format", "csv"],
        "CREATE TABLE t (k BIGINT PRIMARY KEY, v BIGINT);\nINSERT INTO t VALUES (1, 1);\nSELECT nope FROM t;\nINSERT INTO t VALUES (2, 2);\n",
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(err.contains("nope"), "{err}");
    assert_eq!(String::from_utf8(o.stdout).unwrap(), "count\n1\n");
    assert_eq!(c.ok(&["sql", "--format", "csv", "-c", "SELECT k FROM t"]), "k\n1\n");
    let o = c.run(&["sql", "-c", "CREATE TABLE bad (a DOUBLE PRIMARY KEY)"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("primary keys accept"));
    // The row API sees what SQL wrote, and the other way round.
    let row = c.ok(&["get", "t", "{\"k\":1}"]);
    assert!(row.contains("\"v\":[{\"value\":1,"), "{row}");
}

#[test]
fn demo_runs_every_query_and_is_safe_to_rerun() {
    let c = Cli::new();
    let first = c.ok(&["demo"]);
    assert!(first.contains("-- loaded 20000 consumption records"), "{first}");
    for f in [
        "01_tables.sql",
        "02_spend_per_seller.sql",
        "04_point_lookup.sql",
        "05_versions.sql",
        "08_explain.sql",
    ] {
        assert!(first.contains(&format!("-- queries/demo/{f}")), "{f} missing");
    }
    assert!(first.contains("keys=[card_id IN (3, 5)]"), "{first}");
    let second = c.ok(&["demo"]);
    assert!(second.contains("exists"), "{second}");
    let n = c.ok(&["sql", "--format", "csv", "-c", "SELECT count(*) AS n FROM consumption"]);
    assert_eq!(n, "n\n20000\n");
}

/// `describe TABLE --stats`' segment bytes of table `t`.
fn segment_bytes_of_t(c: &Cli) -> u64 {
    let d: serde_json::Value = serde_json::from_str(&c.ok(&["describe", "t", "--stats"])).unwrap();
    d["stats"]["segment_bytes"].as_u64().unwrap()
}

#[test]
fn a_memory_budget_is_taken_in_units_and_bad_ones_are_named() {
    let c = Cli::new();
    c.ok(&["--memory", "64MiB", "create", "t", "--pk", "k:integer"]);
    c.ok(&["--memory", "1 GB", "sql", "-c", "INSERT INTO t (k) VALUES (7)"]);
    let out = c.ok(&[
        "--memory",
        "16777216",
        "sql",
        "-c",
        "SELECT k FROM t",
        "--format",
        "csv",
    ]);
    assert_eq!(out, "k\n7\n");
    for (bad, why) in [
        ("lots", "does not start with a number"),
        ("64 parsecs", "unknown unit"),
        ("1MiB", "too small"),
    ] {
        let o = c.usage_error(&["--memory", bad, "sql", "-c", "SELECT 1"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("memory size '{bad}'")) && err.contains(why),
            "{err}"
        );
        assert!(err.contains("512MiB, 2GiB or 1GB"), "{err}");
    }
}

#[test]
fn check_reads_a_database_beside_its_writer() {
    let c = Cli::new();
    c.ok(&["create", "t", "--pk", "k:integer"]);
    // A small memory budget: flushes and compactions while it writes.
    let mut writer = c
        .cmd(&["--memory", "16MiB", "write", "t", "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = writer.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        for k in 0..400_000u64 {
            let line = format!(
                "{{\"op\":\"put\",\"pk\":{{\"k\":{}}},\"columns\":{{\"v\":{k},\"pad\":\"{}\"}}}}\n",
                k % 50_000,
                "x".repeat(40)
            );
            if stdin.write_all(line.as_bytes()).is_err() {
                return;
            }
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    for round in 0..4 {
        let o = c.run(&["check"]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(
            o.status.code(),
            Some(0),
            "round {round}: {out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(out.contains(": 0 damaged"), "round {round}: {out}");
    }
    feeder.join().unwrap();
    let o = writer.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = c.ok(&["check"]);
    assert!(out.contains(": 0 damaged"), "{out}");
}
