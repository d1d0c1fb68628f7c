//! Pipelined writers apply writes in input order.
//!
//! `cellar write` and SQL `INSERT` keep many batches in flight so that one
//! fsync covers many of them. Until the fix, each batch queued itself with
//! the committer on its own, and a batch whose queueing had to wait was
//! overtaken by later ones: its older puts and deletes got the higher
//! sequence numbers and won, undoing acknowledged writes. These tests
//! rewrite a small key space many times, so a reordering changes what the
//! last write of some key is, and compare every key with the last write.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What a key holds after the writes so far: `v` and the `pad` length.
type Model = BTreeMap<i64, (i64, Option<usize>)>;

/// `n` NDJSON operations over keys `0..keys` (80% puts with a pad of
/// 50-400 bytes, 10% updates of `v`, 10% deletes), and the model they
/// leave behind.
fn operations(seed: u64, n: usize, keys: i64) -> (String, Model) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::new();
    let mut text = String::with_capacity(n * 200);
    for i in 0..n as i64 {
        let k = rng.random_range(0..keys);
        let roll = rng.random_range(0..10);
        if roll < 8 {
            let pad = rng.random_range(50..=400);
            text.push_str(&format!(
                r#"{{"op":"put","pk":{{"k":{k}}},"columns":{{"v":{i},"pad":"{}"}}}}"#,
                "x".repeat(pad)
            ));
            model.insert(k, (i, Some(pad)));
        } else if roll < 9 {
            text.push_str(&format!(r#"{{"op":"update","pk":{{"k":{k}}},"put":{{"v":{i}}}}}"#));
            let pad = model.get(&k).and_then(|(_, p)| *p);
            model.insert(k, (i, pad));
        } else {
            text.push_str(&format!(r#"{{"op":"delete","pk":{{"k":{k}}}}}"#));
            model.remove(&k);
        }
        text.push('\n');
    }
    (text, model)
}

fn cellar(data: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cellar"));
    c.arg("--data").arg(data);
    c
}

/// Rows printed by `cellar scan` as the model's shape.
fn scanned(data: &std::path::Path, table: &str) -> Model {
    let o = cellar(data).args(["scan", table]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut out = Model::new();
    for line in String::from_utf8(o.stdout).unwrap().lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let k = row["pk"]["k"].as_i64().unwrap();
        let v = row["columns"]["v"][0]["value"].as_i64().unwrap();
        let pad = row["columns"]["pad"][0]["value"].as_str().map(str::len);
        out.insert(k, (v, pad));
    }
    out
}

/// Keys whose stored state differs from the model, for the message.
fn differences(want: &Model, got: &Model) -> Vec<String> {
    let keys: std::collections::BTreeSet<_> = want.keys().chain(got.keys()).collect();
    keys.into_iter()
        .filter(|k| want.get(k) != got.get(k))
        .map(|k| format!("k={k}: want {:?}, got {:?}", want.get(k), got.get(k)))
        .collect()
}

#[test]
fn cellar_write_applies_pipelined_batches_in_input_order() {
    let dir = tempfile::tempdir().unwrap();
    // Several streams, each into a table of its own: the reordering showed
    // in most single runs of 60,000 operations, so three make a miss of a
    // regression unlikely.
    for round in 0..3u64 {
        let table = format!("t{round}");
        let st = cellar(dir.path())
            .args(["create", &table, "--pk", "k:integer", "--max-versions", "2"])
            .status()
            .unwrap();
        assert!(st.success());
        let (input, model) = operations(round, 60_000, 40_000);
        let mut child = cellar(dir.path())
            .args(["write", &table])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let feeder = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
        let o = child.wait_with_output().unwrap();
        feeder.join().unwrap();
        assert!(o.status.success());
        let acks = String::from_utf8(o.stdout).unwrap();
        assert_eq!(acks.lines().filter(|l| l.contains(r#""ok":true"#)).count(), 60_000);
        let diff = differences(&model, &scanned(dir.path(), &table));
        assert!(
            diff.is_empty(),
            "round {round}: {} keys differ from their last write: {:?}",
            diff.len(),
            &diff[..diff.len().min(10)]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_insert_applies_rows_in_source_order() {
    use datafusion::arrow::array::Int64Array;

    let dir = tempfile::tempdir().unwrap();
    let db = cellar::Database::open(dir.path().join("db")).await.unwrap();
    let sql = cellar::sql::SqlSession::new(db.clone());
    // 400,000 rows in 8 row groups, each of 1000 keys written 400 times;
    // the last row of key k has v = 399,000 + k. The pad makes the file
    // large enough (> 10 MiB) for DataFusion to split its scan.
    let file = dir.path().join("f.parquet");
    sql.execute(&format!(
        "COPY (SELECT value % 1000 AS k, value AS v, md5(value::varchar) AS pad FROM generate_series(0, 399999) ORDER BY value) \
         TO '{}' STORED AS PARQUET OPTIONS ('format.max_row_group_size' '50000')",
        file.display()
    ))
    .await
    .unwrap();
    sql.execute("CREATE TABLE t (k BIGINT, v BIGINT, PRIMARY KEY (k))")
        .await
        .unwrap();
    sql.query(&format!("INSERT INTO t SELECT k, v FROM '{}'", file.display()))
        .await
        .unwrap();
    let rows = sql.query("SELECT k, v FROM t ORDER BY k").await.unwrap();
    let mut wrong = Vec::new();
    let mut n = 0;
    for b in &rows {
        let k = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let v = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        for i in 0..b.num_rows() {
            n += 1;
            if v.value(i) != 399_000 + k.value(i) {
                wrong.push((k.value(i), v.value(i)));
            }
        }
    }
    assert_eq!(n, 1000);
    assert!(
        wrong.is_empty(),
        "{} keys keep an earlier row than the file's last: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );

    // With ORDER BY, the rows are applied in that order: descending v
    // leaves each key's first row of the file.
    sql.query(&format!(
        "INSERT INTO t SELECT k, v FROM '{}' ORDER BY v DESC",
        file.display()
    ))
    .await
    .unwrap();
    let rows = sql.query("SELECT count(*) FROM t WHERE v = k").await.unwrap();
    let c = rows[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap();
    assert_eq!(c.value(0), 1000);
    drop(sql);
    db.close().await.unwrap();
}

/// A writer that waits for each write commits it on its own thread when
/// nothing is queued for the committer; it must never overtake what was
/// queued before it. Each round queues a batch (not waited for) that sets
/// `n = 0` on a key, then at once increments `n` and reads it back: the
/// increment must see the batch, and so must every later read. 300 rounds,
/// so that the queued batch is still in the committer's hands in many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_committed_inline_overtakes_nothing_queued() {
    use cellar::*;
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).await.unwrap();
    db.create_table(TableSchema::new("t").pk("k", PkType::Integer), TableOptions::default())
        .await
        .unwrap();
    let t = db.table("t").unwrap();
    for round in 0..300i64 {
        let key = || PrimaryKey::new().with("k", round % 7);
        let queued = t
            .enqueue_batch(vec![PutRow::new(key()).column("n", 0i64).into()])
            .await
            .unwrap();
        let r = t
            .update_row(
                UpdateRow::new(key())
                    .increment("n", 1)
                    .returning(ReturnType::AfterModify),
            )
            .await
            .unwrap();
        let after = r.row.and_then(|r| r.latest("n").cloned());
        assert_eq!(
            after,
            Some(Value::Integer(1)),
            "round {round}: the increment ran before the queued put"
        );
        for r in queued.durable().await.unwrap() {
            r.unwrap();
        }
        let got = t.get_row(GetRow::new(key())).await.unwrap().row.unwrap();
        assert_eq!(got.latest("n"), Some(&Value::Integer(1)), "round {round}");
    }
    db.close().await.unwrap();
}
