//! Auto-increment key columns: assigned values are unique and strictly
//! increasing within a partition key value, in batches, across reopens and
//! SIGKILL; they come back to the writer (API, NDJSON, SQL INSERT); and
//! every misuse is refused with a message that says what is accepted.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use cellar::*;

fn schema() -> TableSchema {
    TableSchema::new("log")
        .pk("user", PkType::String)
        .pk("id", PkType::Integer)
        .auto_increment("id")
        .unwrap()
}

fn new_row(user: &str) -> PrimaryKey {
    PrimaryKey::new().with("user", user).with("id", PkValue::AutoIncrement)
}

fn id_of(r: &WriteResult) -> i64 {
    match r.row.as_ref().expect("the key comes back").primary_key.columns[1].1 {
        PkValue::Integer(i) => i,
        ref other => panic!("id is {other:?}"),
    }
}

/// Every (user, id) in the table, in key order.
async fn ids(t: &Table) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for r in crate::common::scan_all(t, GetRange::new()).await {
        let (PkValue::String(u), PkValue::Integer(i)) = (&r.primary_key.columns[0].1, &r.primary_key.columns[1].1)
        else {
            panic!("{:?}", r.primary_key)
        };
        out.push((u.clone(), *i));
    }
    out
}

#[tokio::test]
async fn values_increase_within_a_partition_across_batches_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let mut last: std::collections::BTreeMap<String, i64> = Default::default();
    for round in 0..3 {
        let db = Database::open(dir.path()).await.unwrap();
        if round == 0 {
            db.create_table(schema(), TableOptions::default()).await.unwrap();
        }
        let t = db.table("log").unwrap();
        // A row at the key the placeholder's bytes encode (id = i64::MIN).
        t.put_row(PutRow::new(PrimaryKey::new().with("user", "c").with("id", i64::MIN)).column("hits", 100))
            .await
            .unwrap();
        for i in 0..20 {
            let user = ["a", "b"][i % 2];
            let r = t
                .put_row(PutRow::new(new_row(user)).column("n", i as i64))
                .await
                .unwrap();
            let id = id_of(&r);
            assert!(id > *last.get(user).unwrap_or(&0), "round {round}: {id} after {last:?}");
            last.insert(user.to_string(), id);
            // The row is there under the returned key.
            let k = PrimaryKey::new().with("user", user).with("id", id);
            assert!(t.get_row(GetRow::new(k)).await.unwrap().row.is_some());
        }
        // A batch: in order within it; an UpdateRow may create one too.
        let mut batch: Vec<RowWrite> = (0..10)
            .map(|i| PutRow::new(new_row("c")).column("n", i).into())
            .collect();
        batch.push(UpdateRow::new(new_row("c")).put("n", 99).into());
        // An increment on a new row starts from nothing (not from the row
        // the placeholder's bytes would name).
        batch.push(
            UpdateRow::new(new_row("c"))
                .increment("hits", 3)
                .returning(ReturnType::AfterModify)
                .into(),
        );
        let got: Vec<i64> = t
            .write_batch(batch)
            .await
            .unwrap()
            .into_iter()
            .map(|r| id_of(&r.unwrap()))
            .collect();
        assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
        let hits = PrimaryKey::new().with("user", "c").with("id", *got.last().unwrap());
        let row = t.get_row(GetRow::new(hits)).await.unwrap().row.unwrap();
        assert_eq!(row.latest("hits"), Some(&Value::Integer(3)));
        assert!(got[0] > *last.get("c").unwrap_or(&0));
        last.insert("c".into(), *got.last().unwrap());
        if round == 1 {
            t.flush().await.unwrap();
        }
        drop(t);
        db.close().await.unwrap();
    }
    let db = Database::open(dir.path()).await.unwrap();
    let all = ids(&db.table("log").unwrap()).await;
    assert_eq!(
        all.len(),
        3 * 32 + 1,
        "32 new rows a round, and the one at id = i64::MIN"
    );
    let mut seen = std::collections::HashSet::new();
    assert!(all.iter().all(|(_, id)| seen.insert(*id)), "ids are unique");
}

#[tokio::test]
async fn misuse_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).await.unwrap();
    db.create_table(schema(), TableOptions::default()).await.unwrap();
    let t = db.table("log").unwrap();
    let e = |r: Result<WriteResult>| r.unwrap_err();
    // Reads, deletes and conditions need the assigned value.
    let err = t.get_row(GetRow::new(new_row("a"))).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidPk);
    assert!(err.message().contains("assigned value"), "{err}");
    assert_eq!(
        e(t.delete_row(DeleteRow::new(new_row("a"))).await).kind(),
        ErrorKind::InvalidPk
    );
    let err = e(t
        .put_row(PutRow::new(new_row("a")).condition(Condition::expect_not_exist()))
        .await);
    assert_eq!(err.kind(), ErrorKind::ParameterInvalid);
    assert!(err.message().contains("ignore"), "{err}");
    // An explicit value is fine (it overwrites that row).
    t.put_row(PutRow::new(PrimaryKey::new().with("user", "a").with("id", 5)))
        .await
        .unwrap();
    // A placeholder in a table without auto-increment.
    let plain = TableSchema::new("p").pk("a", PkType::String).pk("b", PkType::Integer);
    db.create_table(plain, TableOptions::default()).await.unwrap();
    let err = e(db
        .table("p")
        .unwrap()
        .put_row(PutRow::new(
            PrimaryKey::new().with("a", "x").with("b", PkValue::AutoIncrement),
        ))
        .await);
    assert_eq!(err.kind(), ErrorKind::InvalidPk);
    assert!(err.message().contains("not auto-increment"), "{err}");
    // Bad schemas.
    for (s, what) in [
        (
            TableSchema::new("x")
                .pk("a", PkType::Integer)
                .auto_increment("a")
                .unwrap(),
            "partition key",
        ),
        (
            TableSchema::new("x")
                .pk("a", PkType::String)
                .pk("b", PkType::String)
                .auto_increment("b")
                .unwrap(),
            "INTEGER",
        ),
        (
            TableSchema::new("x")
                .pk("a", PkType::String)
                .pk("b", PkType::Integer)
                .pk("c", PkType::Integer)
                .auto_increment("b")
                .unwrap()
                .auto_increment("c")
                .unwrap(),
            "at most one",
        ),
    ] {
        let err = db.create_table(s, TableOptions::default()).await.unwrap_err();
        assert!(err.message().contains(what), "{err}");
    }
    let err = TableSchema::new("x")
        .pk("a", PkType::String)
        .auto_increment("zz")
        .unwrap_err();
    assert!(err.message().contains("not a primary-key column"), "{err}");
}

/// SQL: `WITH (auto_increment = 'id')`; INSERT that leaves the column out
/// (or gives NULL) gets new values.
#[tokio::test]
async fn sql_create_and_insert() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).await.unwrap();
    let sess = cellar::sql::SqlSession::new(db.clone());
    for q in [
        "CREATE TABLE ev (user VARCHAR, id BIGINT, v BIGINT, PRIMARY KEY (user, id)) WITH (auto_increment = 'id')",
        "INSERT INTO ev (user, v) VALUES ('a', 1), ('a', 2), ('b', 3)",
        "INSERT INTO ev VALUES ('a', NULL, 4)",
    ] {
        sess.execute(q).await.unwrap();
    }
    let all = ids(&db.table("ev").unwrap()).await;
    let a: Vec<i64> = all.iter().filter(|(u, _)| u == "a").map(|(_, i)| *i).collect();
    assert_eq!(a.len(), 3);
    assert!(a.windows(2).all(|w| w[0] < w[1]));
    let err = sess
        .execute("CREATE TABLE bad (user VARCHAR, PRIMARY KEY (user)) WITH (auto_increment = 'user')")
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("partition key"), "{err}");
}

/// `cellar write` with `{"auto_increment":true}`, killed with SIGKILL
/// mid-stream: every acknowledged value is there, and values assigned after
/// the reopen are above every value in the table.
#[test]
fn cli_values_survive_sigkill_and_keep_increasing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let (code, _, err) = crate::common::run_cli(
        &data,
        &[
            "create",
            "log",
            "--pk",
            "user:string,id:integer",
            "--auto-increment",
            "id",
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    let bin = env!("CARGO_BIN_EXE_cellar");
    let mut acked: Vec<i64> = Vec::new();
    for round in 0..2 {
        let mut child = Command::new(bin)
            .arg("--data")
            .arg(&data)
            .args(["write", "log"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let feeder = std::thread::spawn(move || {
            for i in 0..100_000 {
                let line = format!(
                    r#"{{"op":"put","pk":{{"user":"u","id":{{"auto_increment":true}}}},"columns":{{"n":{i}}}}}"#
                );
                if writeln!(stdin, "{line}").is_err() {
                    return;
                }
            }
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let before = acked.len();
        while acked.len() < before + 2000 {
            let line = lines.next().unwrap().unwrap();
            let j: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(j["ok"], true, "{line}");
            let id = j["pk"]["id"].as_i64().unwrap();
            assert!(
                acked.last().is_none_or(|l| *l < id),
                "round {round}: {id} after {:?}",
                acked.last()
            );
            acked.push(id);
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let _ = feeder.join();
    }
    // Every acknowledged value is stored; one more write goes above all.
    let (code, out, err) = crate::common::run_cli(
        &data,
        &["write", "log"],
        "{\"op\":\"put\",\"pk\":{\"user\":\"u\",\"id\":{\"auto_increment\":true}}}\n",
    );
    assert_eq!(code, 0, "{err}");
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let next = j["pk"]["id"].as_i64().unwrap();
    let (code, out, err) = crate::common::run_cli(&data, &["scan", "log"], "");
    assert_eq!(code, 0, "{err}");
    let stored: Vec<i64> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["pk"]["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let set: std::collections::HashSet<i64> = stored.iter().copied().collect();
    assert!(acked.iter().all(|a| set.contains(a)), "an acknowledged row was lost");
    assert_eq!(stored.iter().max(), Some(&next));
}
