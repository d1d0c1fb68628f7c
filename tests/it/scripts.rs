//! `cellar sql` without a terminal: shell commands in `-c`, `-f` and stdin
//! scripts, long results, and readers that close the pipe early.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use crate::common::{cli_fails, run_cli};

fn cellar(dir: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cellar"));
    c.arg("--data").arg(dir);
    c
}

const SCRIPT: &str = "\
\\mode csv
SELECT 1 AS a;
.mode ndjson
SELECT 2 AS b;
-- a command on a continuation line runs, and is not part of the statement
SELECT 3
\\timing off
AS c;
";

#[test]
fn shell_commands_work_in_files_on_stdin_and_in_c() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("script.sql");
    std::fs::write(&file, SCRIPT).unwrap();
    let data = dir.path().join("data");
    let expected = "a\n1\n{\"b\":2}\n{\"c\":3}\n";
    run_cli(&data, &["sql", "-c", "CREATE TABLE t (k BIGINT, PRIMARY KEY (k))"], "");
    let (code, out, err) = run_cli(&data, &["sql", "-f", file.to_str().unwrap()], "");
    assert_eq!((code, out.as_str(), err.as_str()), (0, expected, ""));
    let (code, out, err) = run_cli(&data, &["sql"], SCRIPT);
    assert_eq!((code, out.as_str(), err.as_str()), (0, expected, ""));
    let (code, out, _) = run_cli(&data, &["sql", "-c", SCRIPT], "");
    assert_eq!((code, out.as_str()), (0, expected));
    for list in ["\\dt", ".tables", "\\d"] {
        let (code, out, _) = run_cli(&data, &["sql", "--format", "csv", "-c", list], "");
        assert_eq!(
            (code, out.as_str()),
            (0, "table_name,kind,series,state,archive\nt,cellar,,local,\n"),
            "{list}"
        );
    }
    // `exit` ends a script where it stands.
    let (code, out, _) = run_cli(
        &data,
        &["sql", "--format", "csv"],
        "SELECT 1 AS x;\nexit\nSELECT 2 AS y;\n",
    );
    assert_eq!((code, out.as_str()), (0, "x\n1\n"));
}

#[test]
fn a_bad_command_stops_a_script_like_a_bad_statement() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let script = "\\mode csv\nSELECT 1 AS a;\n\\frobnicate\nSELECT 2 AS b;\n";
    let (code, out, err) = run_cli(&data, &["sql"], script);
    assert_eq!(code, 1, "{err}");
    assert_eq!(out, "a\n1\n");
    assert!(
        err.contains("unknown command '\\frobnicate'") && err.contains("\\?"),
        "{err}"
    );
    cli_fails(
        &data,
        &["sql", "-c", "\\mode xml"],
        1,
        &["accepted: table, csv, json, ndjson, line"],
    );
    cli_fails(
        &data,
        &["sql", "-c", "\\i /no/such/file.sql"],
        1,
        &["/no/such/file.sql"],
    );
}

#[test]
fn output_files_and_included_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let inner = dir.path().join("inner.sql");
    let results = dir.path().join("results.csv");
    std::fs::write(&inner, "SELECT 'from inner' AS src;\n").unwrap();
    let script = format!(
        "\\mode csv\n\\o {}\nSELECT 1 AS n;\n\\i {}\n\\o\nSELECT 2 AS m;\n",
        results.display(),
        inner.display()
    );
    let (code, out, err) = run_cli(&data, &["sql"], &script);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "m\n2\n");
    assert_eq!(std::fs::read_to_string(&results).unwrap(), "n\n1\nsrc\nfrom inner\n");
    // A file that includes itself is stopped.
    let selfish = dir.path().join("self.sql");
    std::fs::write(&selfish, format!("\\i {}\n", selfish.display())).unwrap();
    cli_fails(
        &data,
        &["sql", "-f", selfish.to_str().unwrap()],
        1,
        &["include each other more than 16 deep"],
    );
}

#[test]
fn long_results_print_every_row_from_c() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = run_cli(
        dir.path(),
        &[
            "sql",
            "-c",
            "SELECT value FROM generate_series(1, 25000) ORDER BY value",
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    let values: Vec<i64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("| ")?.trim_end_matches('|').trim().parse().ok())
        .collect();
    assert_eq!(values, (1..=25000).collect::<Vec<_>>());
    // Printed in blocks of 10,000 rows, each with its header.
    assert_eq!(out.matches("| value |").count(), 3);
    assert!(!out.contains("shown"), "no row limit outside the REPL");
}

/// Runs `args`, reads the first line of its output, closes the pipe, and
/// returns the exit code and stderr.
fn first_line_then_close(data: &std::path::Path, args: &[&str]) -> (String, Option<i32>, String) {
    let mut child = cellar(data)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let o = child.wait_with_output().unwrap();
    (first, o.status.code(), String::from_utf8(o.stderr).unwrap())
}

#[test]
fn a_reader_that_closes_the_pipe_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (first, code, err) = first_line_then_close(&data, &["demo"]);
    assert!(first.starts_with("-- loaded"), "{first}");
    assert_eq!((code, err.as_str()), (Some(0), ""));
    let (first, code, err) = first_line_then_close(
        &data,
        &[
            "sql",
            "--format",
            "csv",
            "-c",
            "SELECT value FROM generate_series(1, 3000000)",
        ],
    );
    assert_eq!(first, "value\n");
    assert_eq!((code, err.as_str()), (Some(0), ""));
    for format in ["table", "json", "ndjson", "line"] {
        let (_, code, err) = first_line_then_close(
            &data,
            &[
                "sql",
                "--format",
                format,
                "-c",
                "SELECT value FROM generate_series(1, 3000000)",
            ],
        );
        assert_eq!((code, err.as_str()), (Some(0), ""), "{format}");
    }
    let (code, _, err) = run_cli(
        &data,
        &[
            "sql",
            "-c",
            "CREATE TABLE wide (k BIGINT, v VARCHAR, PRIMARY KEY (k)); \
             INSERT INTO wide SELECT value, repeat('x', 200) FROM generate_series(1, 3000)",
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    let (first, code, err) = first_line_then_close(&data, &["scan", "wide"]);
    assert!(first.contains("\"k\":1"), "{first}");
    assert_eq!((code, err.as_str()), (Some(0), ""));
}

/// `cellar write t` on a new table `t` (key `k`), its pipes open.
fn writer_of_new_table(data: &std::path::Path) -> std::process::Child {
    run_cli(data, &["create", "t", "--pk", "k:integer"], "");
    cellar(data)
        .args(["write", "t"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn write_applies_every_operation_after_its_reader_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut child = writer_of_new_table(&data);
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, r#"{{"op":"put","pk":{{"k":0}},"columns":{{"v":0}}}}"#).unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("\"ok\":true"), "{first}");
    // The reader is gone; 20,000 more operations follow.
    for k in 1..20_000 {
        writeln!(stdin, r#"{{"op":"put","pk":{{"k":{k}}},"columns":{{"v":{k}}}}}"#).unwrap();
    }
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        count_and_sum(&data),
        format!("n,s\n20000,{}\n", (0..20_000i64).sum::<i64>())
    );
}

#[test]
fn reads_of_a_missing_directory_say_so_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("never-made");
    for args in [
        &["list"][..],
        &["describe", "t"],
        &["get", "t", r#"{"k":1}"#],
        &["scan", "t"],
        &["check"],
        &["sql", "-c", "SELECT 1; SHOW TABLES"],
        &["sql", "-c", "\\dt"],
    ] {
        let (code, out, err) = run_cli(&data, args, "");
        assert_eq!((code, out.as_str()), (2, ""), "{args:?}: {err}");
        assert!(
            err.contains("never-made does not exist") && err.contains("nothing was created"),
            "{args:?}: {err}"
        );
        assert!(!data.exists(), "{args:?} created the directory");
    }
    // A statement that writes makes the directory, as before.
    let (code, _, err) = run_cli(&data, &["sql", "-c", "CREATE TABLE t (k BIGINT, PRIMARY KEY (k))"], "");
    assert_eq!(code, 0, "{err}");
    assert!(data.exists());
}

fn put(k: usize) -> String {
    format!("{{\"op\":\"put\",\"pk\":{{\"k\":{k}}},\"columns\":{{\"v\":{k}}}}}\n")
}

fn count_and_sum(data: &std::path::Path) -> String {
    let (_, out, _) = run_cli(
        data,
        &[
            "sql",
            "--format",
            "csv",
            "-c",
            "SELECT count(*) AS n, sum(v) AS s FROM t",
        ],
        "",
    );
    out
}

#[test]
fn write_quiet_and_from_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    run_cli(&data, &["create", "t", "--pk", "k:integer"], "");
    // Line 3 is bad, line 4 blank.
    let input = format!("{}{}{{\"op\":\"put\"}}\n\n{}", put(1), put(2), put(5));
    let (code, out, err) = run_cli(&data, &["write", "t", "--quiet"], &input);
    assert_eq!(code, 1, "{err}");
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1, "only the failure: {out}");
    assert_eq!(
        (lines[0]["line"].as_u64(), lines[0]["ok"].as_bool()),
        (Some(3), Some(false))
    );
    assert!(
        err.starts_with("cellar write: 4 operations, 3 ok, 1 failed, in "),
        "{err}"
    );
    assert!(err.contains("; 1 blank lines skipped"), "{err}");
    assert_eq!(count_and_sum(&data), "n,s\n3,8\n");
    // From line 4: lines 1-3 are not applied, line numbers stay the input's.
    let input = format!("{}{}{}{}", put(10), put(20), put(30), put(40));
    let (code, out, err) = run_cli(&data, &["write", "t", "--from-line", "4"], &input);
    assert_eq!(code, 0, "{err}");
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j["line"], 4);
    assert!(
        err.contains("1 operations, 1 ok") && err.contains("lines before 4 skipped (--from-line)"),
        "{err}"
    );
    assert_eq!(count_and_sum(&data), "n,s\n4,48\n");
    cli_fails(&data, &["write", "t", "--from-line", "0"], 2, &["--from-line"]);
}

#[test]
fn write_interrupted_says_where_to_resume_and_resuming_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let all: String = (1..=3000).map(put).collect();
    let mut child = writer_of_new_table(&data);
    let mut stdin = child.stdin.take().unwrap();
    // The first 1000 lines, then the input stays open (a slow producer).
    stdin
        .write_all(
            all.lines()
                .take(1000)
                .map(|l| format!("{l}\n"))
                .collect::<String>()
                .as_bytes(),
        )
        .unwrap();
    stdin.flush().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    for _ in 0..10 {
        line.clear();
        stdout.read_line(&mut line).unwrap();
    }
    // SAFETY: kill(2) on the child's pid, which has not been waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let o = child.wait_with_output().unwrap();
    drop(stdin);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(130), "{err}");
    let next: usize = err
        .split("--from-line ")
        .nth(1)
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    // Every line before `next` was reported and applied; none after.
    let reported = rest.lines().count() + 10;
    assert_eq!(reported, next - 1, "{err}");
    let applied = next - 1;
    assert_eq!(
        count_and_sum(&data),
        format!("n,s\n{applied},{}\n", (1..=applied).sum::<usize>())
    );
    // Resumed from there with the whole input: every line once.
    let (code, out, err) = run_cli(&data, &["write", "t", "--from-line", &next.to_string()], &all);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 3000 - applied);
    assert_eq!(
        count_and_sum(&data),
        format!("n,s\n3000,{}\n", (1..=3000).sum::<usize>())
    );
}

#[test]
fn sql_errors_name_the_column_and_what_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let sql = |q: &str| run_cli(&data, &["sql", "-c", q], "");
    assert_eq!(
        sql("CREATE TABLE t (k BIGINT, s VARCHAR, v DOUBLE, PRIMARY KEY (k, s))").0,
        0
    );
    for (q, want) in [
        (
            "INSERT INTO t VALUES (NULL, 'a', 1.0)",
            "primary-key column 'k' is NULL in row 1",
        ),
        (
            "INSERT INTO t VALUES (1, 'a', 1.0), (2, NULL, 2.0)",
            "primary-key column 's' is NULL in row 2",
        ),
        (
            "INSERT INTO t (s, v) VALUES ('a', 1.0)",
            "primary-key column 'k' is not among the columns given",
        ),
        (
            "INSERT INTO t SELECT NULL, 'a', 2.0",
            "primary-key column 'k' is NULL or missing",
        ),
        (
            "INSERT INTO t VALUES ('abc', 'a', 1.0)",
            "'abc' in row 1 is not a BIGINT, the type of column 'k'",
        ),
        (
            "INSERT INTO t VALUES (1, 'a', 'xyz')",
            "'xyz' in row 1 is not a DOUBLE, the type of column 'v'",
        ),
        (
            "INSERT INTO t VALUES (1, 'a')",
            "row 1 has 2 values for the 3 columns (k, s, v)",
        ),
        ("SELEC 1", "syntax error: Expected: an SQL statement, found: SELEC"),
        (
            "SELECT * FROM t WHERE",
            "syntax error: Expected: an expression, found: EOF",
        ),
        (
            "SELECT CAST('x' AS BIGINT)",
            "Cannot cast string 'x' to value of Int64 type",
        ),
    ] {
        let (code, _, err) = sql(q);
        assert_eq!(code, 1, "{q}: {err}");
        assert!(err.contains(want), "{q}: {err}");
        assert!(
            !err.contains("ParserError(") && !err.contains("column1") && !err.contains("Optimizer rule"),
            "{q}: {err}"
        );
        if q.starts_with("INSERT") {
            assert!(
                err.contains("t (k BIGINT NOT NULL, s VARCHAR NOT NULL, v DOUBLE)") || err.contains("give"),
                "{q}: {err}"
            );
        }
    }
    let (_, out, _) = run_cli(
        &data,
        &["sql", "--format", "csv", "-c", "SELECT count(*) AS n FROM t"],
        "",
    );
    assert_eq!(out, "n\n0\n", "nothing was written");
}
