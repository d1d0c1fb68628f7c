//! Crash test: kill the writing process mid-stream with SIGKILL, reopen,
//! and check that every acknowledged operation is there and nothing
//! half-written is: before any flush, on top of segments, and among
//! flushes and compactions of ascending keys.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use cellar::*;

fn op(i: u64) -> String {
    format!(r#"{{"op":"put","pk":{{"card":{i},"order":"o"}},"columns":{{"a":{i},"b":"v{i}","c":{i}.5}}}}"#)
}

#[tokio::test]
async fn acknowledged_writes_survive_sigkill_and_nothing_is_half_written() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap().to_string();
    let bin = env!("CARGO_BIN_EXE_cellar");
    let st = Command::new(bin)
        .args(["--data", &data, "create", "t", "--pk", "card:integer,order:string"])
        .status()
        .unwrap();
    assert!(st.success());
    for round in 0..3u64 {
        // The last round runs on a small memory budget (2 MiB memtables):
        // the kill lands among flushes of ascending keys and compactions
        // that carry their segments into runs.
        let memory = if round == 2 { "16MiB" } else { "512MiB" };
        let mut child = Command::new(bin)
            .args(["--data", &data, "--memory", memory, "write", "t"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let base = round * 1_000_000;
        let feeder = std::thread::spawn(move || {
            for i in 0..200_000u64 {
                if writeln!(stdin, "{}", op(base + i)).is_err() {
                    return;
                }
            }
        });
        let mut acked = Vec::new();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        while acked.len() < [3000, 5000, 60_000][round as usize] {
            let line = lines.next().unwrap().unwrap();
            let j: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(j["ok"], true, "{line}");
            acked.push(base + j["line"].as_u64().unwrap() - 1);
        }
        // SIGKILL: no chance to flush or sync anything more.
        child.kill().unwrap();
        child.wait().unwrap();
        let _ = feeder.join();

        let db = Database::open(&data).await.unwrap();
        let t = db.table("t").unwrap();
        if round == 2 {
            // Several flushes happened before the kill (and compactions,
            // or the kill cut one short).
            let s = t.stats();
            assert!(s.flushes >= 3, "{s:?}");
        }
        for &i in &acked {
            let pk = PrimaryKey::new().with("card", i as i64).with("order", "o");
            let row = t
                .get_row(GetRow::new(pk))
                .await
                .unwrap()
                .row
                .unwrap_or_else(|| panic!("acknowledged row {i} lost"));
            assert_eq!(row.latest("a"), Some(&Value::Integer(i as i64)));
        }
        // every row present is whole
        let mut req = GetRange::new();
        loop {
            let page = t.get_range(req.clone()).await.unwrap();
            for r in &page.rows {
                let PkValue::Integer(i) = r.primary_key.columns[0].1 else {
                    panic!()
                };
                assert_eq!(r.columns.len(), 3, "half-written row {i}");
                assert_eq!(r.latest("b"), Some(&Value::String(format!("v{i}"))));
            }
            match page.next_start {
                Some(n) => req.start = Some(n.into()),
                None => break,
            }
        }
        if round == 0 {
            // flush part of it so the second round crashes on top of segments
            t.flush().await.unwrap();
        }
    }
}
