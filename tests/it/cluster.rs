//! `cellar scheduler`, `cellar executor` and `cellar sql --cluster`: a
//! Ballista scheduler and two executors as separate processes on
//! 127.0.0.1, reading a table archived to a real S3 server (s3s-fs, in
//! this process), answer what one process answers; live tables, writes
//! and bad addresses are refused with what to do instead.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::archive::{cellar, ok, orders_beside_s3, random_queries, run, s3_archive};
use crate::s3_server::{KEY, SECRET};

/// Child processes killed when the test ends, however it ends.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A port nothing listens on now (and its successor, for an executor's
/// gRPC service).
fn free_port() -> u16 {
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        if port < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
}

fn spawn(args: &[String]) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cellar"));
    for v in ["AWS_ENDPOINT", "AWS_REGION", "AWS_SESSION_TOKEN", "CELLAR_CRASH_POINT"] {
        c.env_remove(v);
    }
    c.env("AWS_ACCESS_KEY_ID", KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("RUST_LOG", "warn")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A scheduler and `executors` executors; returns them and the cluster URL.
fn cluster(executors: usize) -> (Procs, String) {
    let port = free_port();
    let mut procs = vec![spawn(&[
        "scheduler".into(),
        "--bind".into(),
        format!("127.0.0.1:{port}"),
    ])];
    for _ in 0..executors {
        let p = free_port();
        procs.push(spawn(&[
            "executor".into(),
            "--bind".into(),
            format!("127.0.0.1:{p}"),
            "--scheduler".into(),
            format!("127.0.0.1:{port}"),
            "--slots".into(),
            "2".into(),
        ]));
    }
    (Procs(procs), format!("df://127.0.0.1:{port}"))
}

/// `cellar sql --cluster URL --format csv -f FILE`, retried until the
/// cluster has its executors (a minute at most).
fn on_cluster(data: &Path, url: &str, queries: &Path) -> String {
    let started = Instant::now();
    loop {
        let (code, out, err) = run(cellar(data)
            .args(["sql", "--cluster", url, "--format", "csv", "-f"])
            .arg(queries));
        if code == 0 {
            return out;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the cluster did not answer within a minute: {err}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_answers_archived_tables_as_one_process_does() {
    let (dir, data, _s3, server) = orders_beside_s3(3000).await;
    ok(&mut s3_archive(&data, "orders", "s3://bucket/orders", &server.endpoint));

    // Queries of the `queries/` kinds, but versions views (not read by a
    // cluster: see below).
    let queries: String = random_queries(80, 7)
        .lines()
        .filter(|q| !q.contains("cellar_versions"))
        .map(|q| format!("{q}\n"))
        .collect();
    let file = dir.path().join("q.sql");
    std::fs::write(&file, &queries).unwrap();
    let local = ok(cellar(&data).args(["sql", "--format", "csv", "-f"]).arg(&file));
    assert!(local.lines().count() > 300, "the queries return rows");

    let (_procs, url) = cluster(2);
    assert_eq!(on_cluster(&data, &url, &file), local);

    // The plan shows the cluster's stages reading the archive.
    let explain = dir.path().join("explain.sql");
    std::fs::write(&explain, "EXPLAIN SELECT count(*) FROM orders WHERE card_id < 10;").unwrap();
    let plan = on_cluster(&data, &url, &explain);
    assert!(
        plan.contains("distributed_plan") && plan.contains("ShuffleWriterExec") && plan.contains("CellarScanExec"),
        "{plan}"
    );

    // A live table is refused, saying why and what to do.
    ok(cellar(&data).args([
        "sql",
        "-c",
        "CREATE TABLE live (k BIGINT, v VARCHAR, PRIMARY KEY (k)); INSERT INTO live VALUES (1, 'a');",
    ]));
    let (code, _, err) = run(cellar(&data).args(["sql", "--cluster", &url, "-c", "SELECT * FROM live"]));
    assert_ne!(code, 0);
    assert!(
        err.contains("'live' is live") && err.contains("cellar archive live"),
        "{err}"
    );
    // Writes and DDL are not the cluster's.
    let (code, _, err) = run(cellar(&data).args(["sql", "--cluster", &url, "-c", "INSERT INTO live VALUES (2, 'b')"]));
    assert_ne!(code, 0);
    assert!(err.contains("queries (SELECT, EXPLAIN) only"), "{err}");
}

#[test]
fn bad_cluster_addresses_fail_fast_and_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    ok(cellar(&data).args(["sql", "-c", "CREATE TABLE t (k BIGINT, PRIMARY KEY (k))"]));
    let started = Instant::now();
    for (url, exit, needle) in [
        ("df://127.0.0.1", 2, "HOST:PORT"),
        ("df://127.0.0.1:notaport", 2, "HOST:PORT"),
        (&*format!("df://127.0.0.1:{}", free_port()), 1, "no scheduler answers"),
    ] {
        let (code, _, err) = run(cellar(&data).args(["sql", "--cluster", url, "-c", "SELECT 1"]));
        assert_eq!(code, exit, "{url}: {err}");
        assert!(err.contains(needle), "{url}: {err}");
    }
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    let (code, _, err) = run(cellar(&data).args(["executor", "--bind", "nowhere"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("IP:PORT"), "{err}");
}

/// An executor killed mid-query: the query completes on the other one
/// (Ballista runs the lost tasks again) with exactly one process's answer.
/// Every executor gone: a query fails within seconds, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_executor_costs_time_never_rows() {
    let (dir, data, _s3, server) = orders_beside_s3(3000).await;
    ok(&mut s3_archive(&data, "orders", "s3://bucket/orders", &server.endpoint));
    let (mut procs, url) = cluster(2);
    let file = dir.path().join("q.sql");
    std::fs::write(&file, "SELECT count(*) FROM orders;").unwrap();
    on_cluster(&data, &url, &file);
    // Seconds of work: millions of joined rows.
    let heavy = "SELECT count(*), sum(a.amount * b.amount + c.amount) FROM orders a \
                 JOIN orders b ON a.card_id <> b.card_id AND a.order_no < b.order_no \
                 CROSS JOIN (SELECT amount FROM orders WHERE card_id < 2) c";
    let local = ok(cellar(&data).args(["sql", "--format", "csv", "-c", heavy]));
    let mut child = cellar(&data)
        .args(["sql", "--cluster", &url, "--format", "csv", "-c", heavy])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(child.try_wait().unwrap().is_none(), "the query is still running");
    procs.0[1].kill().unwrap();
    procs.0[1].wait().unwrap();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), local);

    procs.0[2].kill().unwrap();
    procs.0[2].wait().unwrap();
    let started = Instant::now();
    let (code, _, err) = run(cellar(&data).args(["sql", "--cluster", &url, "-c", "SELECT count(*) FROM orders"]));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("all executors were lost"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
}
