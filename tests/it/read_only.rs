//! A reader beside a writer: `Database::open_read_only` and `cellar
//! --read-only` on a directory another handle or process holds for
//! writing (see `src/db/read_only.rs`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use cellar::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::*;

fn every_version() -> GetRange {
    GetRange::new().options(ReadOptions {
        max_versions: Some(10),
        ..Default::default()
    })
}

/// Every file under `dir` with its length and modification time.
fn files(dir: &Path) -> BTreeMap<String, (u64, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else {
                let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
                out.insert(rel, (m.len(), m.modified().unwrap()));
            }
        }
    }
    out
}

/// Overwrites, column deletes, row deletes and versions of a few keys,
/// with flushes and compactions among them: after each refresh the reader
/// shows exactly what the writer shows, and a table handle it took before
/// still shows its old state whole (its segments are held open, whatever
/// the writer's compactions deleted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_shows_each_state_the_writer_committed() {
    for seed in 0..seeds("CELLAR_READ_ONLY_SEEDS", 3) {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let w = open(dir.path(), &clock).await;
        let wt = card_order_table(
            &w,
            TableOptions {
                max_versions: 3,
                ..Default::default()
            },
        )
        .await;
        let r = Database::open_read_only_with(dir.path(), DbOptions::default().clock(clock.clone()))
            .await
            .unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut old: Option<(Table, Vec<Row>)> = None;
        let (mut flushes, mut compactions) = (0, 0);
        for step in 0..300i64 {
            clock.advance(1);
            let key = pk(rng.random_range(0..4), ["a", "b", "c"][rng.random_range(0..3)]);
            match rng.random_range(0..100) {
                0..40 => {
                    let p = PutRow::new(key)
                        .column("v", step)
                        .column("s", "x".repeat(step as usize % 7));
                    wt.put_row(p).await.unwrap();
                }
                40..60 => {
                    let u = UpdateRow::new(key).put("v", -step).delete_all("s");
                    wt.update_row(u).await.unwrap();
                }
                60..70 => {
                    wt.delete_row(DeleteRow::new(key)).await.unwrap();
                }
                70..76 => {
                    wt.flush().await.unwrap();
                    flushes += 1;
                }
                76..80 => {
                    wt.compact().await.unwrap();
                    compactions += 1;
                }
                _ => {
                    // A handle from before, read now for the first time:
                    // the state it was taken from, whole, whatever the
                    // writer compacted and deleted since.
                    if let Some((t, expected)) = old.take() {
                        assert_eq!(
                            scan_all(&t, every_version()).await,
                            expected,
                            "seed {seed}, step {step}"
                        );
                    }
                    r.refresh().await.unwrap();
                    let rt = r.table("t").unwrap();
                    let expected = scan_all(&wt, every_version()).await;
                    if rng.random_bool(0.5) {
                        // Read now, or after the writer moved on.
                        if rng.random_bool(0.5) {
                            wt.compact().await.unwrap();
                        }
                        assert_eq!(
                            scan_all(&rt, every_version()).await,
                            expected,
                            "seed {seed}, step {step}"
                        );
                    } else {
                        old = Some((rt, expected));
                    }
                }
            }
        }
        assert!(
            flushes > 3 && compactions > 1,
            "seed {seed}: {flushes} flushes, {compactions} compactions"
        );
        r.close().await.unwrap();
        w.close().await.unwrap();
    }
}

/// Every change is refused, and a writer opens beside the reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_refuses_every_change_and_writes_nothing() {
    let (dir, _clock, w, t) = fixture(TableOptions::default()).await;
    for i in 0..20 {
        t.put_row(PutRow::new(pk(i, "a")).column("v", i)).await.unwrap();
    }
    t.flush().await.unwrap();
    t.put_row(PutRow::new(pk(100, "a")).column("v", 100)).await.unwrap();
    drop(t);
    w.close().await.unwrap();

    let r = Database::open_read_only(dir.path()).await.unwrap();
    assert!(r.is_read_only());
    let t = r.table("t").unwrap();
    assert_eq!(scan_all(&t, GetRange::new()).await.len(), 21);
    let refused = |what: &str, e: Error| {
        assert_eq!(e.kind(), ErrorKind::ReadOnly, "{what}: {e}");
        assert!(e.message().contains("read-only"), "{what}: {e}");
    };
    refused(
        "put",
        t.put_row(PutRow::new(pk(1, "z")).column("v", 1)).await.unwrap_err(),
    );
    refused(
        "update",
        t.update_row(UpdateRow::new(pk(1, "a")).increment("n", 1))
            .await
            .unwrap_err(),
    );
    refused("delete", t.delete_row(DeleteRow::new(pk(1, "a"))).await.unwrap_err());
    refused(
        "batch",
        r.batch_write(vec![("t".into(), RowWrite::Put(PutRow::new(pk(2, "z"))))])
            .await
            .unwrap_err(),
    );
    refused("transaction", t.start_transaction(1).await.unwrap_err());
    refused("flush", t.flush().await.unwrap_err());
    refused("compact", t.compact().await.unwrap_err());
    refused("compact_newest", t.compact_newest(2).await.unwrap_err());
    let schema = TableSchema::new("u").pk("k", PkType::Integer);
    refused(
        "create",
        r.create_table(schema, TableOptions::default()).await.unwrap_err(),
    );
    refused("alter", r.alter_table("t", OptionsUpdate::default()).await.unwrap_err());
    refused("drop", r.drop_table("t").await.unwrap_err());
    let to = RemoteLocation::new(dir.path().join("archive").to_str().unwrap());
    refused("archive", r.archive_table("t", &to, &|_| {}).await.unwrap_err());
    refused("maintain", r.maintain(&|_, _| {}).await.unwrap_err());

    // SQL: queries work, changes are refused.
    let sess = cellar::sql::SqlSession::new(r.clone());
    let rows = sess.query("SELECT count(*) AS n FROM t").await.unwrap();
    let n = rows[0]
        .column(0)
        .as_any()
        .downcast_ref::<arrow::array::Int64Array>()
        .unwrap()
        .value(0);
    assert_eq!(n, 21);
    for stmt in [
        "INSERT INTO t (card, \"order\", v) VALUES (7, 'q', 1)",
        "DELETE FROM t WHERE card = 1",
        "CREATE TABLE u (k BIGINT, PRIMARY KEY (k))",
        "DROP TABLE t",
    ] {
        let e = sess.query(stmt).await.unwrap_err().to_string();
        assert!(e.contains("read-only"), "{stmt}: {e}");
    }

    // A writer opens beside the reader; the reader sees its writes after a refresh.
    let w = Database::open(dir.path()).await.unwrap();
    w.table("t")
        .unwrap()
        .put_row(PutRow::new(pk(200, "a")).column("v", 1))
        .await
        .unwrap();
    assert_eq!(
        scan_all(&t, GetRange::new()).await.len(),
        21,
        "a handle keeps its state"
    );
    assert!(!r.is_stale().await.unwrap(), "nothing flushed yet");
    w.table("t").unwrap().flush().await.unwrap();
    assert!(r.is_stale().await.unwrap(), "a flush committed a manifest");
    r.refresh().await.unwrap();
    assert!(!r.is_stale().await.unwrap());
    assert_eq!(scan_all(&r.table("t").unwrap(), GetRange::new()).await.len(), 22);
    drop((t, sess));
    r.close().await.unwrap();
    w.close().await.unwrap();
}

/// The reader leaves the directory exactly as it found it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_changes_no_file() {
    let (dir, _clock, w, t) = fixture(TableOptions::default()).await;
    for i in 0..50 {
        t.put_row(PutRow::new(pk(i, "a")).column("v", i)).await.unwrap();
        if i % 20 == 19 {
            t.flush().await.unwrap();
        }
    }
    drop(t);
    // An archived table too: a writable open would cache its segments'
    // tails under the data directory.
    let archive = tempfile::tempdir().unwrap();
    let schema = TableSchema::new("old").pk("k", PkType::Integer);
    w.create_table(schema, TableOptions::default()).await.unwrap();
    let old = w.table("old").unwrap();
    for k in 0..30 {
        old.put_row(PutRow::new(PrimaryKey::new().with("k", k)).column("v", k))
            .await
            .unwrap();
    }
    drop(old);
    let to = RemoteLocation::new(archive.path().to_str().unwrap());
    w.archive_table("old", &to, &|_| {}).await.unwrap();
    w.close().await.unwrap();
    let before = files(dir.path());
    let r = Database::open_read_only(dir.path()).await.unwrap();
    let t = r.table("t").unwrap();
    assert_eq!(scan_all(&t, GetRange::new()).await.len(), 50);
    assert_eq!(scan_all(&r.table("old").unwrap(), GetRange::new()).await.len(), 30);
    let got = r
        .table("old")
        .unwrap()
        .get_row(GetRow::new(PrimaryKey::new().with("k", 7)))
        .await
        .unwrap();
    assert_eq!(got.row.unwrap().latest("v"), Some(&Value::Integer(7)));
    let _ = t.put_row(PutRow::new(pk(1, "z"))).await;
    let _ = t.compact().await;
    let sess = cellar::sql::SqlSession::new(r.clone());
    sess.query("SELECT sum(v) FROM t").await.unwrap();
    sess.query("SELECT sum(v) FROM old").await.unwrap();
    let _ = sess.query("INSERT INTO t (card, \"order\") VALUES (1, 'y')").await;
    r.refresh().await.unwrap();
    drop((t, sess));
    r.close().await.unwrap();
    assert_eq!(files(dir.path()), before);
}

/// A torn record at the end of the WAL (a writer cut short, or one being
/// appended) is not read and not cut off: that is the writer's to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_leaves_a_torn_wal_tail_alone() {
    let (dir, _clock, w, t) = fixture(TableOptions::default()).await;
    for i in 0..10 {
        t.put_row(PutRow::new(pk(i, "a")).column("v", i)).await.unwrap();
    }
    drop(t);
    w.close().await.unwrap();
    let wal = dir.path().join("wal");
    let last = std::fs::read_dir(&wal)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .max()
        .unwrap();
    let data = std::fs::read(&last).unwrap();
    let end = data.iter().rposition(|&b| b != 0).unwrap() + 1;
    // Half of a record header: what an append in progress looks like.
    let mut torn = data[..end].to_vec();
    torn.extend_from_slice(&[40, 0, 0, 0, 1, 2]);
    std::fs::write(&last, &torn).unwrap();
    let r = Database::open_read_only(dir.path()).await.unwrap();
    assert_eq!(scan_all(&r.table("t").unwrap(), GetRange::new()).await.len(), 10);
    r.close().await.unwrap();
    assert_eq!(std::fs::read(&last).unwrap(), torn);
}

#[tokio::test]
async fn a_read_only_open_of_a_missing_directory_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let e = Database::open_read_only(&missing).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ParameterInvalid);
    assert!(e.message().contains("does not exist"), "{e}");
    assert!(!missing.exists());
}

fn cellar(data: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cellar"))
        .arg("--data")
        .arg(data)
        .args(args)
        .output()
        .unwrap()
}

/// A writer process applies two passes over the same keys (puts, then
/// overwrites) with a small memory budget, so that it flushes and
/// compacts as it goes; `cellar --read-only sql` beside it sees, each
/// time, a prefix of the first pass and a prefix of the second, never a
/// hole, never less than before, and never an error.
#[test]
fn cellar_read_only_beside_a_writer_process() {
    const N: i64 = 60_000;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let create = "CREATE TABLE t (k BIGINT, v BIGINT, pad VARCHAR, PRIMARY KEY (k))";
    let o = cellar(&data, &["sql", "-c", create]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut writer = Command::new(env!("CARGO_BIN_EXE_cellar"))
        .arg("--data")
        .arg(&data)
        .args(["--memory", "16MiB", "write", "t", "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = writer.id();
    let mut stdin = writer.stdin.take().unwrap();
    // The writer's input stays open (and the writer with it) until the
    // lock was seen held and a few reads were made.
    let (close, closed) = std::sync::mpsc::channel::<()>();
    let feeder = std::thread::spawn(move || {
        let pad = "p".repeat(200);
        for pass in 1..=2 {
            for k in 0..N {
                let line = format!(r#"{{"op":"put","pk":{{"k":{k}}},"columns":{{"v":{pass},"pad":"{pad}"}}}}"#);
                writeln!(stdin, "{line}").unwrap();
            }
        }
        let _ = closed.recv();
    });
    let stderr = writer.stderr.take().unwrap();
    let errors = std::thread::spawn(move || BufReader::new(stderr).lines().map_while(Result::ok).collect::<Vec<_>>());

    // The writer holds the lock: a writable open says who and what to do.
    let mut said_locked = false;
    let query = "SELECT count(*), coalesce(max(k), -1), sum(CASE WHEN v = 2 THEN 1 ELSE 0 END), \
                 coalesce(max(CASE WHEN v = 2 THEN k END), -1) FROM t";
    let (mut last_ones, mut last_twos, mut reads) = (0i64, 0i64, 0);
    loop {
        let done = writer.try_wait().unwrap().is_some();
        let o = cellar(&data, &["--read-only", "sql", "--format", "csv", "-c", query]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let out = String::from_utf8(o.stdout).unwrap();
        let nums: Vec<i64> = out
            .lines()
            .nth(1)
            .unwrap()
            .split(',')
            .map(|s| s.parse().unwrap_or(0))
            .collect();
        let [count, max, twos, max_two] = nums[..] else {
            panic!("{out}")
        };
        assert_eq!(count, max + 1, "a hole in the first pass: {out}");
        assert_eq!(twos, max_two + 1, "a hole in the second pass: {out}");
        assert!(
            twos == 0 || count == N,
            "the second pass began before the first ended: {out}"
        );
        assert!(
            count >= last_ones && twos >= last_twos,
            "went back: {out} after {last_ones},{last_twos}"
        );
        (last_ones, last_twos) = (count, twos);
        reads += 1;
        // Rows seen: the writer has opened the directory and holds it (a
        // probe before that, on a busy machine, would open it first).
        if !said_locked && count > 0 {
            let o = cellar(&data, &["sql", "-c", "SELECT 1"]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success(), "a second writer opened the directory");
            assert!(
                err.contains("--read-only") && err.contains(&format!("process {pid}")),
                "{err}"
            );
            said_locked = true;
        } else if reads > 3 {
            let _ = close.send(());
        }
        if done {
            break;
        }
    }
    feeder.join().unwrap();
    let status = writer.wait().unwrap();
    assert!(status.success(), "{:?}", errors.join().unwrap());
    assert!(said_locked, "the writable open was never tried beside the writer");
    assert_eq!((last_ones, last_twos), (N, N), "after {reads} reads");
    // The run flushed and compacted while it was read.
    let o = cellar(&data, &["--read-only", "describe", "t", "--stats"]);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(d["stats"]["flushes"].as_u64().unwrap() > 2, "{d}");
    assert!(d["stats"]["compactions"].as_u64().unwrap() > 0, "{d}");
}

/// `--read-only` refuses commands that change the database before it
/// opens anything, and SQL changes statement by statement.
#[test]
fn cellar_read_only_refuses_changes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let (code, _, err) = run_cli(&data, &["create", "t", "--pk", "k:integer"], "");
    assert_eq!(code, 0, "{err}");
    for args in [
        &["--read-only", "write", "t"][..],
        &["--read-only", "create", "u", "--pk", "k:integer"],
        &["--read-only", "drop", "t"],
        &["--read-only", "compact", "t"],
        &["--read-only", "demo"],
    ] {
        cli_fails(&data, args, 2, &["changes the database", "--read-only"]);
    }
    let (code, out, err) = run_cli(
        &data,
        &[
            "--read-only",
            "sql",
            "-c",
            "SELECT count(*) AS n FROM t",
            "--format",
            "csv",
        ],
        "",
    );
    assert_eq!((code, out.as_str()), (0, "n\n0\n"), "{err}");
    let (code, _, err) = run_cli(&data, &["--read-only", "sql", "-c", "INSERT INTO t (k) VALUES (1)"], "");
    assert_eq!(code, 1);
    assert!(err.contains("ReadOnly") && err.contains("--read-only"), "{err}");
    cli_fails(
        &dir.path().join("missing"),
        &["--read-only", "list"],
        2,
        &["does not exist"],
    );
    assert!(!dir.path().join("missing").exists());
}
