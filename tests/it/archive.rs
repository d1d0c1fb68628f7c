//! `cellar archive` / `restore` / `drop --keep-archive|--delete-archive`
//! against a real S3 server on 127.0.0.1 (s3s-fs, in this process) and a
//! local directory: an archived table answers the same queries as before,
//! refuses writes naming its location, survives servers that die and
//! processes killed half-way, and comes back writable.

use std::path::Path;
use std::process::Command;

use cellar::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::s3_server::{DyingServer, KEY, SECRET};

/// The binary, with the test server's credentials (and no other AWS
/// setting from the environment).
pub(crate) fn cellar(data: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cellar"));
    c.arg("--data").arg(data);
    for v in ["AWS_ENDPOINT", "AWS_REGION", "AWS_SESSION_TOKEN", "CELLAR_CRASH_POINT"] {
        c.env_remove(v);
    }
    c.env("AWS_ACCESS_KEY_ID", KEY).env("AWS_SECRET_ACCESS_KEY", SECRET);
    c
}

pub(crate) fn run(c: &mut Command) -> (i32, String, String) {
    let o = c.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Runs and expects exit 0; returns stdout.
pub(crate) fn ok(c: &mut Command) -> String {
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{c:?} failed: {err}");
    out
}

pub(crate) fn s3_archive(data: &Path, table: &str, url: &str, endpoint: &str) -> Command {
    let mut c = cellar(data);
    c.args(["archive", table, "--to", url, "--endpoint", endpoint, "--allow-http"]);
    c
}

/// An orders table whose rows went through puts, updates (3 versions
/// kept), deletes, flushes and a compaction; `pad` bytes of text per row
/// make the segment as big as a test needs.
pub(crate) async fn orders(data: &Path, rows: i64, pad: usize) {
    let db = Database::open(data).await.unwrap();
    db.create_table(
        TableSchema::new("orders")
            .pk("card_id", PkType::Integer)
            .pk("seller_id", PkType::String)
            .pk("order_no", PkType::String)
            .column("amount", ValueType::Double)
            .column("category", ValueType::String)
            .column("device_time", ValueType::Integer),
        TableOptions {
            max_versions: 3,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let t = db.table("orders").unwrap();
    let mut rng = StdRng::seed_from_u64(20);
    let pk = |i: i64| {
        PrimaryKey::new()
            .with("card_id", i % 400)
            .with("seller_id", SELLERS[(i % 7) as usize])
            .with("order_no", format!("o{:06}", i / 7))
    };
    let mut batch = Vec::new();
    for round in 0..3 {
        for i in 0..rows {
            let w: RowWrite = match (round, rng.random_range(0..100)) {
                (0, _) => {
                    let mut p = PutRow::new(pk(i))
                        .column("amount", (rng.random_range(1..100_000) as f64) / 100.0)
                        .column("category", CATEGORIES[rng.random_range(0..CATEGORIES.len())])
                        .column("device_time", 1_700_000_000_000i64 + i * 1000);
                    if rng.random_range(0..20) == 0 {
                        p = p.column("coupon", format!("c{}", rng.random_range(0..50)));
                    }
                    if rng.random_range(0..20) == 0 {
                        p = p.column("refund", true);
                    }
                    if pad > 0 {
                        let text: String = (0..pad).map(|_| rng.random_range(b'a'..=b'z') as char).collect();
                        p = p.column("pad", text);
                    }
                    p.into()
                }
                (_, 0..10) => UpdateRow::new(pk(i))
                    .put("amount", (rng.random_range(1..100_000) as f64) / 100.0)
                    .into(),
                (_, 10..12) => DeleteRow::new(pk(i)).into(),
                _ => continue,
            };
            batch.push(w);
            if batch.len() == 200 {
                for r in t.write_batch(std::mem::take(&mut batch)).await.unwrap() {
                    r.unwrap();
                }
            }
        }
        for r in t.write_batch(std::mem::take(&mut batch)).await.unwrap() {
            r.unwrap();
        }
        match round {
            0 => t.flush().await.unwrap(),
            1 => t.compact().await.unwrap(),
            _ => {}
        }
    }
    db.close().await.unwrap();
}

/// A temporary directory holding a database `db` with [`orders`] of
/// `rows` rows, and `s3`, the root of an S3 server (running) with an
/// empty `bucket`.
pub(crate) async fn orders_beside_s3(
    rows: i64,
) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf, DyingServer) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let s3 = dir.path().join("s3");
    std::fs::create_dir_all(s3.join("bucket")).unwrap();
    let server = DyingServer::start(&s3, usize::MAX);
    orders(&data, rows, 0).await;
    (dir, data, s3, server)
}

const SELLERS: [&str; 7] = [
    "canteen_1",
    "canteen_2",
    "bookstore",
    "laundry",
    "cafe",
    "gym",
    "market",
];
const CATEGORIES: [&str; 5] = ["food", "drink", "books", "service", "sports"];

/// `n` random queries of the kinds in `queries/` (aggregates, key ranges,
/// point lookups, versions, sparse columns, top-k, backward scans,
/// non-key filters), each with a deterministic order.
pub(crate) fn random_queries(n: usize, seed: u64) -> String {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = String::new();
    for _ in 0..n {
        let card = rng.random_range(0..420);
        let card2 = card + rng.random_range(0..60);
        let seller = SELLERS[rng.random_range(0..SELLERS.len())];
        let category = CATEGORIES[rng.random_range(0..CATEGORIES.len())];
        let amount = rng.random_range(0..1000);
        let limit = rng.random_range(1..50);
        let q = match rng.random_range(0..8) {
            0 => format!(
                "SELECT seller_id, count(*), round(sum(amount), 2) FROM orders WHERE card_id BETWEEN {card} AND {card2} \
                 GROUP BY seller_id ORDER BY seller_id"
            ),
            1 => format!(
                "SELECT card_id, seller_id, order_no, amount, category, coupon FROM orders WHERE card_id = {card} \
                 ORDER BY card_id, seller_id, order_no LIMIT {limit}"
            ),
            2 => format!(
                "SELECT * FROM orders WHERE card_id = {card} AND seller_id = '{seller}' AND order_no = 'o{:06}'",
                rng.random_range(0..200)
            ),
            3 => format!(
                "SELECT seller_id, order_no, version, double_value FROM cellar_versions('orders', 3) \
                 WHERE card_id = {card} AND column_name = 'amount' ORDER BY seller_id, order_no, version DESC"
            ),
            4 => format!(
                "SELECT category, count(*), count(coupon), count(*) FILTER (WHERE refund) FROM orders \
                 WHERE amount > {amount} GROUP BY category ORDER BY category"
            ),
            5 => format!(
                "SELECT card_id, count(*), round(sum(amount), 2) AS spent FROM orders WHERE card_id BETWEEN {card} AND {card2} \
                 GROUP BY card_id ORDER BY spent DESC, card_id LIMIT 5"
            ),
            6 => format!(
                "SELECT card_id, seller_id, order_no FROM orders WHERE card_id < {card} \
                 ORDER BY card_id DESC, seller_id DESC, order_no DESC LIMIT {limit}"
            ),
            _ => format!(
                "SELECT count(*), min(device_time), max(device_time), round(avg(amount), 4) FROM orders \
                 WHERE category = '{category}' AND seller_id >= '{seller}'"
            ),
        };
        out.push_str(&q);
        out.push_str(";\n");
    }
    out
}

/// Everything the table answers: the queries' results, a full scan with
/// every version, and some rows by key.
fn answers(data: &Path, queries: &Path) -> String {
    let mut all = ok(cellar(data).args(["sql", "--format", "csv", "-f"]).arg(queries));
    all += &ok(cellar(data).args(["scan", "orders", "--max-versions", "3"]));
    for k in [
        r#"{"card_id":7,"seller_id":"cafe","order_no":"o000001"}"#,
        r#"{"card_id":0,"seller_id":"canteen_1","order_no":"o000000"}"#,
    ] {
        all += &ok(cellar(data).args(["get", "orders", k, "--max-versions", "3"]));
    }
    all
}

fn put_line(card: i64) -> String {
    format!(r#"{{"op":"put","pk":{{"card_id":{card},"seller_id":"new","order_no":"x"}},"columns":{{"amount":1.5}}}}"#)
}

fn write(data: &Path, line: &str) -> serde_json::Value {
    let mut c = cellar(data);
    c.args(["write", "orders"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{line}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

fn listing(data: &Path) -> serde_json::Value {
    let out = ok(cellar(data).args(["list", "--long"]));
    let line = out.lines().find(|l| l.contains("\"orders\"")).unwrap();
    serde_json::from_str(line).unwrap()
}

fn objects_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path().strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archived_tables_answer_the_same_queries_from_s3_and_come_back() {
    let (dir, data, s3, server) = orders_beside_s3(6000).await;
    let queries = dir.path().join("q.sql");
    std::fs::write(&queries, random_queries(300, 1)).unwrap();
    let before = answers(&data, &queries);
    assert!(before.lines().count() > 3000, "the queries return rows");

    let url = "s3://bucket/months/orders";
    let (code, out, err) = run(&mut s3_archive(&data, "orders", url, &server.endpoint));
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "no progress bar off a terminal: {err}");
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["location"], url);
    assert!(report["files"].as_u64().unwrap() >= 1, "{report}");
    let stored = objects_under(&s3.join("bucket/months/orders"));
    assert!(stored.contains(&"cellar-table.json".to_string()), "{stored:?}");
    assert_eq!(stored.len() as u64, report["files"].as_u64().unwrap() + 1, "{stored:?}");
    // The local copy is gone; the catalog names the place, no secret.
    assert!(objects_under(&data.join("tables")).is_empty());
    let l = listing(&data);
    assert_eq!(
        (l["state"].as_str(), l["location"].as_str()),
        (Some("archived"), Some(url))
    );
    assert_eq!(l["endpoint"].as_str(), Some(server.endpoint.as_str()));
    let catalog = objects_under(&data.join("catalog"))
        .iter()
        .map(|f| std::fs::read_to_string(data.join("catalog").join(f)).unwrap())
        .collect::<String>();
    assert!(!catalog.contains(SECRET) && !catalog.contains(KEY));

    // The same answers, read from S3 (each command a new process).
    assert_eq!(answers(&data, &queries), before);
    // `cellar check` reads the archived segments where they are.
    let checked = ok(cellar(&data).args(["check"]));
    assert!(
        checked.contains("ok       s3://bucket/months/orders/segments/"),
        "{checked}"
    );
    assert!(
        !objects_under(&data.join("cache")).is_empty(),
        "footers are cached for the next process"
    );
    // Writes are refused, naming the location and the way back.
    let refused = write(&data, &put_line(1));
    assert_eq!(refused["error"]["kind"], "ReadOnly", "{refused}");
    let msg = refused["error"]["message"].as_str().unwrap();
    assert!(msg.contains(url) && msg.contains("cellar restore orders"), "{msg}");
    let (code, _, err) = run(cellar(&data).args([
        "sql",
        "-c",
        "INSERT INTO orders (card_id, seller_id, order_no) VALUES (1, 'a', 'b')",
    ]));
    assert_ne!(code, 0);
    assert!(err.contains("archived"), "{err}");
    // Archiving again is a no-op; elsewhere is refused.
    let again: serde_json::Value =
        serde_json::from_str(ok(&mut s3_archive(&data, "orders", url, &server.endpoint)).trim()).unwrap();
    assert_eq!(again["already_done"], true);
    let (code, _, err) = run(&mut s3_archive(&data, "orders", "s3://bucket/other", &server.endpoint));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("already archived"), "{err}");
    // Dropping needs a decision about the archive.
    let (code, _, err) = run(cellar(&data).args(["drop", "orders"]));
    assert_eq!(code, 2);
    assert!(
        err.contains("--keep-archive") && err.contains("--delete-archive"),
        "{err}"
    );

    // Restore: local, writable, the same answers.
    let restored: serde_json::Value =
        serde_json::from_str(ok(cellar(&data).args(["restore", "orders"])).trim()).unwrap();
    assert_eq!(restored["files"], report["files"]);
    assert_eq!(listing(&data)["state"], "local");
    assert_eq!(answers(&data, &queries), before);
    // The archive stays; archiving the unchanged table again reuses it.
    let re: serde_json::Value =
        serde_json::from_str(ok(&mut s3_archive(&data, "orders", url, &server.endpoint)).trim()).unwrap();
    assert_eq!(re["reused_files"], re["files"], "{re}");
    assert_eq!(answers(&data, &queries), before);

    // Writable after a restore; a changed table archives anew, leaving no
    // stale segment behind.
    ok(cellar(&data).args(["restore", "orders"]));
    assert_eq!(write(&data, &put_line(1))["ok"], true);
    let after_write = answers(&data, &queries);
    ok(&mut s3_archive(&data, "orders", url, &server.endpoint));
    assert_eq!(answers(&data, &queries), after_write);
    let stored2 = objects_under(&s3.join("bucket/months/orders"));
    assert!(
        stored2.iter().all(|o| !stored.contains(o) || o == "cellar-table.json"),
        "{stored:?} {stored2:?}"
    );

    // --delete-archive removes the objects; the name is free again.
    ok(cellar(&data).args(["drop", "orders", "--delete-archive"]));
    assert!(objects_under(&s3.join("bucket/months/orders")).is_empty());
    assert!(ok(cellar(&data).args(["list"])).trim().is_empty());
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_errors_name_the_cause_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let s3 = dir.path().join("s3");
    std::fs::create_dir_all(s3.join("bucket/taken")).unwrap();
    std::fs::write(s3.join("bucket/taken/notes.txt"), "someone else's").unwrap();
    let server = DyingServer::start(&s3, usize::MAX);
    orders(&data, 1500, 0).await;
    let queries = dir.path().join("q.sql");
    std::fs::write(&queries, random_queries(40, 2)).unwrap();
    let before = answers(&data, &queries);
    let unchanged = |what: &str| {
        assert_eq!(listing(&data)["state"], "local", "{what}");
        assert_eq!(answers(&data, &queries), before, "{what}");
    };

    let (code, _, err) =
        run(s3_archive(&data, "orders", "s3://bucket/x", &server.endpoint).env("AWS_SECRET_ACCESS_KEY", "wrong"));
    assert_eq!(code, 1);
    assert!(err.contains("access denied") && err.contains("s3://bucket/x"), "{err}");
    unchanged("wrong credentials");
    let (code, _, err) = run(&mut s3_archive(&data, "orders", "s3://nobucket/x", &server.endpoint));
    assert_eq!(code, 1);
    assert!(err.contains("bucket does not exist"), "{err}");
    unchanged("missing bucket");
    let (code, _, err) = run(&mut s3_archive(&data, "orders", "s3://bucket/taken", &server.endpoint));
    assert_eq!(code, 2);
    assert!(err.contains("not empty") && err.contains("notes.txt"), "{err}");
    unchanged("a location in use");
    let (code, _, err) = run(cellar(&data).args([
        "archive",
        "orders",
        "--to",
        "s3://bucket/x",
        "--endpoint",
        "http://127.0.0.1:1",
        "--allow-http",
    ]));
    assert_eq!(code, 1);
    assert!(err.contains("cannot be reached"), "{err}");
    unchanged("an unreachable server");
    let (code, _, err) = run(cellar(&data).args(["restore", "orders"]));
    assert_eq!(code, 2);
    assert!(err.contains("not archived"), "{err}");
    let (code, _, err) = run(cellar(&data).args(["archive", "nosuch", "--to", "/tmp/x"]));
    assert_eq!(code, 1);
    assert!(err.contains("'nosuch' does not exist"), "{err}");

    // Another table's archive is not overwritten.
    ok(cellar(&data).args(["create", "other", "--pk", "id:integer"]));
    ok(&mut s3_archive(&data, "other", "s3://bucket/shared", &server.endpoint));
    let (code, _, err) = run(&mut s3_archive(&data, "orders", "s3://bucket/shared", &server.endpoint));
    assert_eq!(code, 2);
    assert!(err.contains("holds the archive of table 'other'"), "{err}");
    unchanged("another table's archive");
    assert_eq!(write(&data, &put_line(2))["ok"], true);

    // An archived table read without credentials: which table, where, and
    // which variables to set.
    ok(&mut s3_archive(&data, "orders", "s3://bucket/orders", &server.endpoint));
    let mut no_keys = cellar(&data);
    for v in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"] {
        no_keys.env_remove(v);
    }
    let started = std::time::Instant::now();
    let (code, _, err) = run(no_keys.args(["sql", "-c", "SELECT count(*) FROM orders"]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("'orders'")
            && err.contains("s3://bucket/orders")
            && err.contains("AWS_ACCESS_KEY_ID")
            && err.contains("AWS_SECRET_ACCESS_KEY"),
        "{err}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_dying_mid_upload_leaves_the_table_writable_and_a_rerun_completes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let s3 = dir.path().join("s3");
    std::fs::create_dir_all(s3.join("bucket")).unwrap();
    // About 20 MB: a segment of three parts; the server dies at its third
    // PUT (the marker, the first part, then the second part).
    orders(&data, 20_000, 1000).await;
    let queries = dir.path().join("q.sql");
    std::fs::write(&queries, random_queries(40, 3)).unwrap();
    let before = answers(&data, &queries);

    let mut dying = DyingServer::start(&s3, 3);
    let (code, _, err) = run(&mut s3_archive(&data, "orders", "s3://bucket/t", &dying.endpoint));
    dying.stop();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("s3://bucket/t"), "{err}");
    assert_eq!(listing(&data)["state"], "local");
    assert_eq!(answers(&data, &queries), before);
    assert_eq!(write(&data, &put_line(3))["ok"], true, "writable again");
    let after_write = answers(&data, &queries);

    let server = DyingServer::start(&s3, usize::MAX);
    let out = ok(&mut s3_archive(&data, "orders", "s3://bucket/t", &server.endpoint));
    assert!(out.contains("\"already_done\":false"), "{out}");
    assert_eq!(listing(&data)["state"], "archived");
    assert_eq!(answers(&data, &queries), after_write);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_during_archive_or_restore_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let target = dir.path().join("archive");
    orders(&data, 3000, 0).await;
    let queries = dir.path().join("q.sql");
    std::fs::write(&queries, random_queries(40, 4)).unwrap();
    let before = answers(&data, &queries);
    let killed_at = |point: &str, args: &[&str]| {
        let (code, _, err) = run(cellar(&data).args(args).env("CELLAR_CRASH_POINT", point));
        assert_ne!(code, 0, "{point}: {err}");
    };
    let archive = ["archive", "orders", "--to", target.to_str().unwrap()];

    // Uploaded, not committed: the table is still local and writable.
    killed_at("archive.uploaded", &archive);
    assert_eq!(listing(&data)["state"], "local");
    assert_eq!(answers(&data, &queries), before);
    // The rerun reuses what was uploaded (the stored objects are not
    // written again: their modification times stay).
    let stamps = || {
        objects_under(&target.join("segments"))
            .iter()
            .map(|o| {
                std::fs::metadata(target.join("segments").join(o))
                    .unwrap()
                    .modified()
                    .unwrap()
            })
            .collect::<Vec<_>>()
    };
    let uploaded = stamps();
    assert!(!uploaded.is_empty());
    killed_at("archive.committed", &archive);
    assert_eq!(stamps(), uploaded);
    assert_eq!(listing(&data)["state"], "archived");
    assert_eq!(answers(&data, &queries), before);
    assert!(
        objects_under(&data.join("tables")).is_empty(),
        "the next open freed the local copy"
    );
    // Restore killed before its catalog commit: still archived, then done.
    killed_at("restore.manifest", &["restore", "orders"]);
    assert_eq!(listing(&data)["state"], "archived");
    assert_eq!(answers(&data, &queries), before);
    ok(cellar(&data).args(["restore", "orders"]));
    assert_eq!(listing(&data)["state"], "local");
    assert_eq!(answers(&data, &queries), before);
    let again: serde_json::Value = serde_json::from_str(ok(cellar(&data).args(archive)).trim()).unwrap();
    assert_eq!(again["reused_files"], again["files"], "{again}");
    // --keep-archive drops the table and leaves the archive readable.
    ok(cellar(&data).args(["drop", "orders", "--keep-archive"]));
    assert!(objects_under(&target).contains(&"cellar-table.json".to_string()));
    // A file:// URL works as a target too.
    ok(cellar(&data).args(["create", "small", "--pk", "k:integer"]));
    let url = format!("file://{}", dir.path().join("small").display());
    ok(cellar(&data).args(["archive", "small", "--to", &url]));
    let line = ok(cellar(&data).args(["list", "--long"]));
    assert!(line.contains(&format!("\"location\":\"{url}\"")), "{line}");
    assert!(dir.path().join("small/cellar-table.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_racing_an_archive_are_either_archived_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().join("db")).await.unwrap();
    db.create_table(
        TableSchema::new("t").pk("w", PkType::Integer).pk("i", PkType::Integer),
        TableOptions::default(),
    )
    .await
    .unwrap();
    // Writers put rows until refused; each remembers what was acknowledged.
    let mut writers = Vec::new();
    for w in 0..4i64 {
        let t = db.table("t").unwrap();
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0.. {
                let batch: Vec<RowWrite> = (0..20)
                    .map(|j| {
                        PutRow::new(PrimaryKey::new().with("w", w).with("i", i * 20 + j))
                            .column("v", i)
                            .into()
                    })
                    .collect();
                let results = match t.write_batch(batch).await {
                    Ok(r) => r,
                    Err(e) => panic!("{e}"),
                };
                for (j, r) in results.into_iter().enumerate() {
                    match r {
                        Ok(_) => acked.push(i * 20 + j as i64),
                        Err(e) if e.kind() == ErrorKind::ReadOnly => return acked,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            acked
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let to = RemoteLocation::new(dir.path().join("archive").to_str().unwrap());
    db.archive_table("t", &to, &|_| {}).await.unwrap();
    let t = db.table("t").unwrap();
    let mut total = 0;
    for (w, h) in writers.into_iter().enumerate() {
        let acked = h.await.unwrap();
        assert!(!acked.is_empty());
        total += acked.len();
        for i in acked {
            let pk = PrimaryKey::new().with("w", w as i64).with("i", i);
            assert!(
                t.get_row(GetRow::new(pk)).await.unwrap().row.is_some(),
                "writer {w} row {i} was acknowledged but is not in the archive"
            );
        }
    }
    // Nothing refused got in either: the archive holds exactly the acknowledged rows.
    let sess = cellar::sql::SqlSession::new(db.clone());
    let cellar::sql::StatementOutput::Rows(s) = sess.execute("SELECT count(*) FROM t").await.unwrap() else {
        panic!()
    };
    use futures::TryStreamExt;
    let b: Vec<_> = s.try_collect().await.unwrap();
    use datafusion::arrow::array::AsArray;
    let n = b[0]
        .column(0)
        .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
        .value(0);
    assert_eq!(n as usize, total);
}
