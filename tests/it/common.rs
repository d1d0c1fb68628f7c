//! Helpers shared by the scenario tests.

use std::sync::Arc;

use cellar::*;

/// 2016-07-21 00:00:00 UTC, the time of Tablestore's documentation examples.
pub const T0: i64 = 1_469_059_200_000;

/// How many seeds a randomized test runs: environment variable `var`
/// (a longer hunt for bugs), else `default`.
pub fn seeds(var: &str, default: u64) -> u64 {
    std::env::var(var).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

pub async fn open(dir: &std::path::Path, clock: &Arc<ManualClock>) -> Database {
    Database::open_with(dir, DbOptions::default().clock(clock.clone()))
        .await
        .unwrap()
}

pub fn pk(card: i64, order: &str) -> PrimaryKey {
    PrimaryKey::new().with("card", card).with("order", order)
}

pub async fn card_order_table(db: &Database, options: TableOptions) -> Table {
    db.create_table(
        TableSchema::new("t")
            .pk("card", PkType::Integer)
            .pk("order", PkType::String),
        options,
    )
    .await
    .unwrap();
    db.table("t").unwrap()
}

/// Every row of a table, following continuation keys.
pub async fn scan_all(t: &Table, mut req: GetRange) -> Vec<Row> {
    let mut out = Vec::new();
    loop {
        let page = t.get_range(req.clone()).await.unwrap();
        out.extend(page.rows);
        match page.next_start {
            Some(n) => req.start = Some(n.into()),
            None => return out,
        }
    }
}

/// A fresh database in a temporary directory on a manual clock at [`T0`],
/// with the `t(card INTEGER, order STRING)` table.
pub async fn fixture(options: TableOptions) -> (tempfile::TempDir, Arc<ManualClock>, Database, Table) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let db = open(dir.path(), &clock).await;
    let t = card_order_table(&db, options).await;
    (dir, clock, db, t)
}

/// Runs the `cellar` binary on `data` with `input` on stdin; returns the
/// exit code, stdout and stderr.
pub fn run_cli(data: &std::path::Path, args: &[&str], input: &str) -> (i32, String, String) {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_cellar"))
        .arg("--data")
        .arg(data)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

/// Runs the `cellar` binary on `data` (no stdin), expects exit `code`
/// and every one of `needles` in its stderr; returns the stderr.
pub fn cli_fails(data: &std::path::Path, args: &[&str], code: i32, needles: &[&str]) -> String {
    let (got, _, err) = run_cli(data, args, "");
    assert_eq!(got, code, "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: no {n:?} in {err}");
    }
    err
}
