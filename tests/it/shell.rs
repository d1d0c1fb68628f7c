//! The SQL shell on a terminal: `cellar sql` driven through a
//! pseudo-terminal, as a user types (cancel, completion, shell commands,
//! row limits, history).

use std::process::Command;
use std::time::{Duration, Instant};

use rexpect::session::{Options, PtySession};

const PROMPT: &str = "cellar> ";

struct Shell {
    dir: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Shell {
    fn new() -> Self {
        Shell {
            dir: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// `cellar sql -c SQL` on the same directory, outside the terminal.
    fn sql(&self, sql: &str) -> String {
        let o = Command::new(env!("CARGO_BIN_EXE_cellar"))
            .arg("--data")
            .arg(self.dir.path())
            .args(["sql", "-c", sql])
            .output()
            .unwrap();
        assert!(o.status.success(), "{sql}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    }

    /// The REPL on a pseudo-terminal, at its first prompt.
    fn start(&self) -> PtySession {
        self.start_with(&[])
    }

    /// The REPL with `flags` before `sql`, at its first prompt.
    fn start_with(&self, flags: &[&str]) -> PtySession {
        let mut c = Command::new(env!("CARGO_BIN_EXE_cellar"));
        c.arg("--data")
            .arg(self.dir.path())
            .args(flags)
            .arg("sql")
            .env("HOME", self.home.path())
            .env("TERM", "xterm");
        let mut p = rexpect::session::spawn_with_options(
            c,
            Options::new().timeout_ms(Some(60_000)).strip_ansi_escape_codes(true),
        )
        .unwrap();
        p.exp_string(PROMPT).unwrap();
        p
    }

    /// The process id of the shell on this directory (from `/proc`).
    fn pid(&self) -> u32 {
        let dir = self.dir.path().to_str().unwrap().to_string();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
                continue;
            };
            let cmd = String::from_utf8_lossy(&cmd);
            if cmd.contains(&dir) && cmd.contains("sql") {
                return pid;
            }
        }
        panic!("no shell process on {dir}");
    }

    fn history(&self) -> String {
        std::fs::read_to_string(self.home.path().join(".cellar_history")).unwrap_or_default()
    }
}

/// CPU seconds (user + system) a process has used.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command's closing parenthesis: utime is the 12th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// How long until process `pid` used under 0.2 CPU seconds in a second;
/// fails past `limit`.
fn went_idle(pid: u32, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let before = cpu_secs(pid);
        std::thread::sleep(Duration::from_secs(1));
        let used = cpu_secs(pid) - before;
        if used < 0.2 {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "still {used} CPU seconds a second after {limit:?}"
        );
    }
}

/// Types `keys` (no Enter): sent at once, not held for a line's end.
fn typed(p: &mut PtySession, keys: &str) {
    p.send(keys).unwrap();
    p.flush().unwrap();
}

/// Sends a line and waits for the next prompt; returns what came before it.
fn run(p: &mut PtySession, line: &str) -> String {
    p.send_line(line).unwrap();
    p.exp_string(PROMPT).unwrap()
}

#[test]
fn ctrl_c_cancels_the_running_statement_and_the_work_stops() {
    let s = Shell::new();
    let mut p = s.start();
    let pid = s.pid();
    for query in [
        "SELECT count(*) FROM generate_series(1, 20000000000);",
        "SELECT count(*) FROM generate_series(1, 200000) a, generate_series(1, 200000) b WHERE a.value + b.value = 7;",
    ] {
        p.send_line(query).unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        let cancel = Instant::now();
        p.send_control('c').unwrap();
        p.exp_string("cancelled").unwrap();
        p.exp_string(PROMPT).unwrap();
        assert!(cancel.elapsed() < Duration::from_secs(10), "{:?}", cancel.elapsed());
        // The statement's tasks stop: the shell goes idle (a batch under
        // way finishes first, ~3 s of the cross join's).
        went_idle(pid, Duration::from_secs(20));
    }
    // The shell goes on, and the history was written as it went.
    let out = run(&mut p, "SELECT 40 + 2 AS answer;");
    assert!(out.contains("42"), "{out}");
    assert!(
        s.history().contains("generate_series(1, 20000000000)"),
        "{}",
        s.history()
    );
    assert!(s.history().contains("SELECT 40 + 2 AS answer;"), "{}", s.history());
    // Ctrl-C on a half-typed statement drops it; twice at an empty prompt leaves.
    p.send_line("SELECT").unwrap();
    p.exp_string("-> ").unwrap();
    p.send_control('c').unwrap();
    p.exp_string(PROMPT).unwrap();
    p.send_control('c').unwrap();
    p.exp_string("Ctrl-C again").unwrap();
    // At the prompt again (the line editor reads keys in raw mode once it
    // has drawn it; a Ctrl-C sent before that is a signal, not a key).
    p.exp_string(PROMPT).unwrap();
    p.send_control('c').unwrap();
    p.exp_eof().unwrap();
}

#[test]
fn ctrl_d_and_quit_leave() {
    let s = Shell::new();
    let mut p = s.start();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
    let mut p = s.start();
    p.send_line("quit").unwrap();
    p.exp_eof().unwrap();
    let mut p = s.start();
    p.send_line("\\q").unwrap();
    p.exp_eof().unwrap();
}

#[test]
fn tab_completes_keywords_tables_columns_and_commands() {
    let s = Shell::new();
    s.sql(
        "CREATE TABLE orders (card BIGINT, amount DOUBLE, PRIMARY KEY (card)); \
         INSERT INTO orders VALUES (1, 0.5), (2, 7.25);",
    );
    let mut p = s.start();
    // Keyword, then table: without completion these would be errors.
    typed(&mut p, "SEL\t");
    typed(&mut p, " card FROM ord\t");
    p.send_line("").unwrap();
    p.exp_string("-> ").unwrap();
    // A column of the table named on the line before.
    typed(&mut p, "WHERE amo\t");
    let out = run(&mut p, " > 1;");
    assert!(out.contains("| 2    |"), "{out}");
    assert!(!out.contains("error"), "{out}");
    // Shell commands.
    typed(&mut p, "\\tim\t");
    p.exp_string("\\timing").unwrap();
    let out = run(&mut p, "");
    assert!(out.contains("timing is off"), "{out}");
}

#[test]
fn shell_commands_modes_and_row_limits() {
    let s = Shell::new();
    s.sql("CREATE TABLE t (k BIGINT, v VARCHAR, PRIMARY KEY (k)); INSERT INTO t VALUES (1, 'a'), (2, NULL);");
    let mut p = s.start();
    let out = run(&mut p, "\\dt");
    assert!(out.contains("| t "), "{out}");
    let out = run(&mut p, ".tables");
    assert!(out.contains("| t "), "{out}");
    let out = run(&mut p, "\\d t");
    assert!(out.contains("| k "), "{out}");
    // 40 rows by default, then a count.
    let out = run(&mut p, "SELECT value FROM generate_series(1, 1000);");
    assert!(out.contains("| 40    |"), "{out}");
    assert!(!out.contains("| 41    |"), "{out}");
    assert!(out.contains("(1000 rows, the first 40 shown"), "{out}");
    run(&mut p, "\\maxrows 3");
    let out = run(&mut p, "SELECT value FROM generate_series(1, 10);");
    assert!(out.contains("| 3     |") && !out.contains("| 4     |"), "{out}");
    assert!(out.contains("(10 rows, the first 3 shown"), "{out}");
    run(&mut p, "\\timing off");
    run(&mut p, "\\mode csv");
    let out = run(&mut p, "SELECT k, v FROM t ORDER BY k;");
    assert!(out.contains("k,v\r\n1,a\r\n2,\r\n"), "{out:?}");
    run(&mut p, ".mode line");
    let out = run(&mut p, "SELECT k, v FROM t ORDER BY k;");
    assert!(out.contains("k = 1\r\nv = a\r\n\r\nk = 2\r\nv = NULL"), "{out:?}");
    // Results to a file and back; a file of commands and statements.
    let file = s.home.path().join("out.csv");
    run(&mut p, "\\mode csv");
    run(&mut p, &format!("\\o {}", file.display()));
    run(&mut p, "SELECT k FROM t ORDER BY k;");
    run(&mut p, "\\o");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "k\n1\n2\n");
    let script = s.home.path().join("more.sql");
    std::fs::write(&script, "\\mode table\nSELECT 7 * 6\n  AS x;\n").unwrap();
    let out = run(&mut p, &format!("\\i {}", script.display()));
    assert!(out.contains("| 42 |"), "{out}");
    // Unknown commands say so; a command on a continuation line is not SQL.
    let out = run(&mut p, "\\frobnicate");
    assert!(out.contains("unknown command '\\frobnicate'"), "{out}");
    p.send_line("SELECT 5").unwrap();
    p.exp_string("-> ").unwrap();
    p.send_line("\\timing on").unwrap();
    p.exp_string("timing is on").unwrap();
    let out = run(&mut p, "AS five;");
    assert!(out.contains("| 5    |") && out.contains("1 row(s) in"), "{out}");
    let out = run(&mut p, "\\?");
    assert!(out.contains("\\maxrows N"), "{out}");
    p.send_line("exit").unwrap();
    p.exp_eof().unwrap();
}

#[test]
fn write_shows_progress_on_a_terminal_and_a_summary() {
    let s = Shell::new();
    s.sql("CREATE TABLE t (k BIGINT, v BIGINT, PRIMARY KEY (k))");
    let file = s.home.path().join("ops.ndjson");
    let ops: String = (0..300_000)
        .map(|k| format!("{{\"op\":\"put\",\"pk\":{{\"k\":{k}}},\"columns\":{{\"v\":{k}}}}}\n"))
        .collect();
    std::fs::write(&file, ops).unwrap();
    // Results go to a file; stderr, the terminal, shows the progress.
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!(
            "'{}' --data '{}' write t '{}' > /dev/null",
            env!("CARGO_BIN_EXE_cellar"),
            s.dir.path().display(),
            file.display()
        ))
        .env("TERM", "xterm");
    let mut p = rexpect::session::spawn_with_options(
        c,
        Options::new().timeout_ms(Some(120_000)).strip_ansi_escape_codes(true),
    )
    .unwrap();
    p.exp_string(" operations (").unwrap();
    p.exp_string("cellar write: 300000 operations, 300000 ok, 0 failed")
        .unwrap();
    p.exp_eof().unwrap();
    // `cellar import` the same way.
    let csv = s.home.path().join("rows.csv");
    let rows: String = std::iter::once("k,v\n".to_string())
        .chain((0..300_000).map(|k| format!("{k},{}\n", k * 2)))
        .collect();
    std::fs::write(&csv, rows).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_cellar"));
    c.arg("--data")
        .arg(s.dir.path())
        .arg("import")
        .arg("t")
        .arg(&csv)
        .env("TERM", "xterm");
    let mut p = rexpect::session::spawn_with_options(
        c,
        Options::new().timeout_ms(Some(120_000)).strip_ansi_escape_codes(true),
    )
    .unwrap();
    p.exp_string(" rows written (").unwrap();
    p.exp_string("cellar import: 300000 rows into t").unwrap();
    p.exp_eof().unwrap();
}

/// `cellar --read-only sql` beside a writer: each statement sees what the
/// writer committed before it began (across a flush and a compaction),
/// changes are refused, and the writer opened after the shell was not
/// kept out.
#[test]
fn a_read_only_shell_sees_the_writer_statement_by_statement() {
    let s = Shell::new();
    s.sql("CREATE TABLE t (k BIGINT, v BIGINT, PRIMARY KEY (k)); INSERT INTO t VALUES (1, 1), (2, 2), (3, 3)");
    let mut p = s.start_with(&["--read-only"]);
    assert!(run(&mut p, "SELECT count(*) AS n, sum(v) AS s FROM t;").contains("| 3 | 6 |"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = rt.block_on(cellar::Database::open(s.dir.path())).unwrap();
    let sess = cellar::sql::SqlSession::new(db.clone());
    rt.block_on(sess.query("INSERT INTO t VALUES (4, 4), (5, 5)")).unwrap();
    assert!(run(&mut p, "SELECT count(*) AS n, sum(v) AS s FROM t;").contains("| 5 | 15 |"));
    rt.block_on(async {
        let t = db.table("t").unwrap();
        t.flush().await.unwrap();
        sess.query("UPDATE t SET v = 10 WHERE k = 1").await.unwrap();
        sess.query("DELETE FROM t WHERE k = 2").await.unwrap();
        t.compact().await.unwrap();
    });
    assert!(run(&mut p, "SELECT count(*) AS n, sum(v) AS s FROM t;").contains("| 4 | 22 |"));
    let refused = run(&mut p, "INSERT INTO t VALUES (9, 9);");
    assert!(refused.contains("read-only"), "{refused}");
    rt.block_on(sess.query("CREATE TABLE u (k BIGINT, PRIMARY KEY (k))"))
        .unwrap();
    assert!(run(&mut p, "\\dt").contains("u"));
    drop(sess);
    rt.block_on(db.close()).unwrap();
    p.send_line("\\q").unwrap();
    p.exp_eof().unwrap();
}
