//! Change streams (the Stream API): every acknowledged write has its
//! record once, in commit order, across flushes, compactions, reopens and
//! a stream log that lost its unsynced tail; expiration; bad input.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cellar::*;

use crate::common::*;

/// A record as the tests compare it: action, key, and columns.
type Seen = (StreamAction, PrimaryKey, Vec<StreamColumn>);

/// Every record of the table's stream from the oldest, waiting until
/// there are `want` (records come once their log is synced).
async fn records(db: &Database, table: &str, want: usize) -> Vec<StreamRecord> {
    let stream = db.list_streams(Some(table)).await.unwrap().remove(0).stream_id;
    let shard = db.describe_stream(&stream).await.unwrap().shards.remove(0).shard_id;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut it = db.shard_iterator(&stream, &shard, StreamStart::Oldest).await.unwrap();
        let mut out = Vec::new();
        loop {
            let page = db.get_stream_records(&it, 7).await.unwrap();
            if page.records.is_empty() {
                break;
            }
            out.extend(page.records);
            it = page.next_iterator.unwrap();
        }
        if out.len() >= want || Instant::now() > deadline {
            return out;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn seen(r: &[StreamRecord]) -> Vec<Seen> {
    r.iter()
        .map(|r| (r.action, r.primary_key.clone(), r.columns.clone()))
        .collect()
}

fn put(name: &str, value: impl Into<Value>, version: i64) -> StreamColumn {
    StreamColumn::Put {
        name: name.into(),
        value: value.into(),
        version,
    }
}

/// Every kind of write, through every path, gives its record in commit
/// order with its columns and versions; sequences rise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_has_its_record_in_commit_order() {
    let (_dir, _clock, db, t) = fixture(TableOptions {
        max_versions: 5,
        ..Default::default()
    })
    .await;
    t.put_row(PutRow::new(pk(0, "before"))).await.unwrap();
    db.set_stream("t", Some(StreamSpec::new(24))).await.unwrap();
    t.put_row(
        PutRow::new(pk(1, "a"))
            .column_at("x", 1, T0 - 10)
            .column_at("s", "hi", T0 - 10),
    )
    .await
    .unwrap();
    t.update_row(
        UpdateRow::new(pk(1, "a"))
            .put_at("x", 2, T0 - 5)
            .delete_version("x", T0 - 10)
            .delete_all("s"),
    )
    .await
    .unwrap();
    t.delete_row(DeleteRow::new(pk(1, "a"))).await.unwrap();
    t.write_batch(vec![
        RowWrite::Put(PutRow::new(pk(2, "b")).column_at("x", 3, T0)),
        RowWrite::Put(PutRow::new(pk(3, "c")).column_at("x", 4, T0)),
    ])
    .await
    .unwrap();
    let tx = t.start_transaction(4).await.unwrap();
    tx.write(RowWrite::Put(PutRow::new(pk(4, "d")).column_at("x", 5, T0)))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // A failed condition writes nothing, and has no record.
    let refused = t
        .put_row(PutRow::new(pk(2, "b")).condition(Condition::expect_not_exist()))
        .await;
    assert!(refused.is_err());
    let got = records(&db, "t", 6).await;
    let k = |c, o| pk(c, o);
    assert_eq!(
        seen(&got),
        vec![
            (
                StreamAction::PutRow,
                k(1, "a"),
                vec![put("s", "hi", T0 - 10), put("x", 1, T0 - 10)]
            ),
            (
                StreamAction::UpdateRow,
                k(1, "a"),
                vec![
                    put("x", 2, T0 - 5),
                    StreamColumn::DeleteOneVersion {
                        name: "x".into(),
                        version: T0 - 10
                    },
                    StreamColumn::DeleteAllVersions { name: "s".into() },
                ]
            ),
            (StreamAction::DeleteRow, k(1, "a"), vec![]),
            (StreamAction::PutRow, k(2, "b"), vec![put("x", 3, T0)]),
            (StreamAction::PutRow, k(3, "c"), vec![put("x", 4, T0)]),
            (StreamAction::PutRow, k(4, "d"), vec![put("x", 5, T0)]),
        ]
    );
    assert!(got.windows(2).all(|w| w[0].sequence < w[1].sequence));
    // The batch's two writes were committed together: same time, indexes 0 and 1.
    assert_eq!(got[3].sequence.timestamp_us, got[4].sequence.timestamp_us);
    assert_eq!((got[3].sequence.row_index, got[4].sequence.row_index), (0, 1));
}

/// A stream log that lost its tail (a power cut before its sync) gets it
/// back from the WAL at the next open: every write once, in order, across
/// flushes, a compaction and reopens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopens_and_a_lost_log_tail_keep_every_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let mut expected = Vec::new();
    for round in 0..3i64 {
        let db = open(dir.path(), &clock).await;
        if round == 0 {
            card_order_table(&db, TableOptions::default()).await;
            db.set_stream("t", Some(StreamSpec::new(24))).await.unwrap();
        }
        let t = db.table("t").unwrap();
        let logs = dir.path().join("streams").join("1");
        // The newest log file and its length once the records up to the
        // last flush are synced: what comes after is in the WAL too.
        let mut synced_at = None;
        for i in 0..200 {
            let key = pk(i % 37, "k");
            if i % 5 == 4 {
                t.delete_row(DeleteRow::new(key.clone())).await.unwrap();
                expected.push((StreamAction::DeleteRow, key));
            } else {
                t.put_row(PutRow::new(key.clone()).column("v", round * 1000 + i))
                    .await
                    .unwrap();
                expected.push((StreamAction::PutRow, key));
            }
            if round == 1 && i == 60 {
                t.compact().await.unwrap();
            }
            if i == 120 {
                t.flush().await.unwrap();
                assert_eq!(records(&db, "t", expected.len()).await.len(), expected.len());
                let newest = newest_log(&logs);
                synced_at = Some((newest.clone(), std::fs::metadata(&newest).unwrap().len()));
            }
        }
        let got = records(&db, "t", expected.len()).await;
        let got: Vec<_> = got.iter().map(|r| (r.action, r.primary_key.clone())).collect();
        let first_diff = got.iter().zip(&expected).position(|(a, b)| a != b);
        assert!(
            got.len() == expected.len() && first_diff.is_none(),
            "round {round}: {} records for {} writes, first difference at {first_diff:?}",
            got.len(),
            expected.len()
        );
        drop(t);
        db.close().await.unwrap();
        // Cut the log back into what was appended after the last flush,
        // mid-record: a tail lost to a power cut before its sync (records
        // a flush covered are synced before their WAL file may go, so
        // only such a tail can be lost).
        let (file, at) = synced_at.unwrap();
        let len = std::fs::metadata(&file).unwrap().len();
        assert!(len > at + 100, "records were appended after the flush");
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        f.set_len(at + (len - at) / 2).unwrap();
    }
    let db = open(dir.path(), &clock).await;
    let got = records(&db, "t", expected.len()).await;
    assert_eq!(got.len(), expected.len(), "nothing lost, nothing twice");
    db.close().await.unwrap();
}

/// The newest file of a stream log directory.
fn newest_log(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .max()
        .unwrap()
}

/// Applies `writes`: one at a time, or queued in batches of `batch`, all
/// in flight at once; returns how many succeeded.
async fn apply(t: &Table, writes: Vec<RowWrite>, batch: Option<usize>) -> usize {
    let Some(n) = batch else {
        let mut ok = 0;
        for w in writes {
            ok += t.write(w).await.is_ok() as usize;
        }
        return ok;
    };
    let mut queued = Vec::new();
    for chunk in writes.chunks(n) {
        queued.push(t.enqueue_batch(chunk.to_vec()).await.unwrap());
    }
    let mut ok = 0;
    for q in queued {
        ok += q.durable().await.unwrap().iter().filter(|r| r.is_ok()).count();
    }
    ok
}

/// Writes queued many batches at a time give the stream that one write at
/// a time gives, conditions and increments included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_writes_give_the_stream_of_one_at_a_time() {
    let writes = |n: i64| -> Vec<RowWrite> {
        (0..n)
            .map(|i| {
                let key = pk(i % 5, "k");
                match i % 4 {
                    0 => RowWrite::Put(PutRow::new(key).column("v", i)),
                    1 => RowWrite::Update(UpdateRow::new(key).increment("n", 1)),
                    2 => RowWrite::Put(PutRow::new(key).column("v", -i).condition(Condition::expect_exist())),
                    _ => RowWrite::Delete(DeleteRow::new(key)),
                }
            })
            .collect()
    };
    let mut streams = Vec::new();
    for pipelined in [false, true] {
        let (_dir, _clock, db, t) = fixture(TableOptions::default()).await;
        db.set_stream("t", Some(StreamSpec::new(24))).await.unwrap();
        let ok = apply(&t, writes(400), pipelined.then_some(7)).await;
        let got = records(&db, "t", ok).await;
        assert_eq!(got.len(), ok);
        streams.push(seen(&got));
    }
    assert_eq!(streams[0], streams[1]);
}

/// Records past the expiration are not returned; an iterator into them
/// is refused; a time iterator starts at the first record at or after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiration_and_time_iterators() {
    let (_dir, clock, db, t) = fixture(TableOptions::default()).await;
    db.set_stream("t", Some(StreamSpec::new(1))).await.unwrap();
    for i in 0..3 {
        t.put_row(PutRow::new(pk(i, "old"))).await.unwrap();
    }
    clock.advance(1_800_000);
    let middle = clock.now_ms();
    for i in 0..2 {
        t.put_row(PutRow::new(pk(i, "new"))).await.unwrap();
    }
    assert_eq!(records(&db, "t", 5).await.len(), 5);
    let stream = db.list_streams(None).await.unwrap().remove(0).stream_id;
    let shard = "1";
    let at = db
        .shard_iterator(&stream, shard, StreamStart::AtMs(middle))
        .await
        .unwrap();
    let page = db.get_stream_records(&at, 100).await.unwrap();
    assert_eq!(page.records.len(), 2, "from the middle: the two newer");
    let oldest = db.shard_iterator(&stream, shard, StreamStart::Oldest).await.unwrap();
    let first = db.get_stream_records(&oldest, 1).await.unwrap();
    // An hour and a half later the first three have expired.
    clock.advance(2_700_000);
    let e = db
        .get_stream_records(first.next_iterator.as_ref().unwrap(), 10)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TrimmedDataAccess, "{e}");
    let fresh = db.shard_iterator(&stream, shard, StreamStart::Oldest).await.unwrap();
    let left = db.get_stream_records(&fresh, 100).await.unwrap().records;
    assert_eq!(left.len(), 2, "only the unexpired: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_stream_input_is_refused_clearly() {
    let (_dir, _clock, db, t) = fixture(TableOptions::default()).await;
    for (spec, needle) in [
        (StreamSpec::new(0), "1 to 168"),
        (StreamSpec::new(169), "1 to 168"),
        (
            StreamSpec {
                expiration_hours: 24,
                columns: vec!["card".into()],
            },
            "primary-key",
        ),
    ] {
        let e = db.set_stream("t", Some(spec)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ParameterInvalid);
        assert!(e.message().contains(needle), "{e}");
    }
    assert!(db.list_streams(None).await.unwrap().is_empty());
    assert_eq!(
        db.set_stream("nope", Some(StreamSpec::new(1)))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::ObjectNotExist
    );
    db.set_stream("t", Some(StreamSpec::new(2))).await.unwrap();
    t.put_row(PutRow::new(pk(1, "a"))).await.unwrap();
    let stream = db.list_streams(Some("t")).await.unwrap().remove(0).stream_id;
    let e = db.describe_stream("no_such_stream").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ObjectNotExist);
    let e = db.shard_iterator(&stream, "99", StreamStart::Oldest).await.unwrap_err();
    assert!(e.message().contains("shard '99' does not exist"), "{e}");
    let it = db.shard_iterator(&stream, "1", StreamStart::Oldest).await.unwrap();
    let mut garbled = it.clone();
    garbled.replace_range(0..2, "ff");
    let e = db.get_stream_records(&garbled, 10).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ParameterInvalid);
    assert!(e.message().contains("not a shard iterator"), "{e}");
    let e = db.get_stream_records(&it, 0).await.unwrap_err();
    assert!(e.message().contains("1 to 1000"), "{e}");
    // Disabled, then enabled again: a new stream; the old one's iterators are refused.
    db.set_stream("t", None).await.unwrap();
    assert!(db.list_streams(None).await.unwrap().is_empty());
    db.set_stream("t", Some(StreamSpec::new(2))).await.unwrap();
    let e = db.get_stream_records(&it, 10).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ObjectNotExist, "{e}");
    // A table with a stream is not archived.
    let to = RemoteLocation::new(_dir.path().join("archive").to_str().unwrap());
    let e = db.archive_table("t", &to, &|_| {}).await.unwrap_err();
    assert!(e.message().contains("change stream"), "{e}");
}

/// The command line: `--stream` flags on create and alter, `cellar
/// stream` printing NDJSON records, SQL options; bad values refused and
/// a create that fails on them leaves no table.
#[test]
fn stream_from_the_command_line_and_sql() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let (code, _, err) = run_cli(
        &data,
        &[
            "create",
            "t",
            "--pk",
            "k:integer",
            "--stream",
            "true",
            "--stream-expiration-hours",
            "2",
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    let ops = concat!(
        r#"{"op":"put","pk":{"k":1},"columns":{"a":1,"s":"x"}}"#,
        "\n",
        r#"{"op":"update","pk":{"k":1},"delete_all":["a"]}"#,
        "\n",
        r#"{"op":"delete","pk":{"k":1}}"#,
        "\n"
    );
    let (code, _, err) = run_cli(&data, &["write", "t"], ops);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run_cli(&data, &["stream", "t"], "");
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let actions: Vec<&str> = lines.iter().map(|l| l["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["PUT_ROW", "UPDATE_ROW", "DELETE_ROW"], "{out}");
    assert_eq!(lines[0]["pk"], serde_json::json!({"k": 1}));
    assert_eq!(lines[0]["columns"][0]["name"], "a");
    assert_eq!(lines[0]["columns"][0]["value"], 1);
    assert_eq!(lines[1]["columns"][0]["type"], "delete_all_versions");
    let seq = |l: &serde_json::Value| {
        (
            l["sequence"]["timestamp"].as_u64().unwrap(),
            l["sequence"]["row_index"].as_u64().unwrap(),
        )
    };
    assert!(
        seq(&lines[0]) < seq(&lines[1]) && seq(&lines[1]) < seq(&lines[2]),
        "{out}"
    );
    let (code, out, err) = run_cli(&data, &["describe", "t", "--stats"], "");
    assert_eq!(code, 0, "{err}");
    let d: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(d["stream"]["expiration_hours"], 2, "{d}");
    assert!(d["stats"]["stream_bytes"].as_u64().unwrap() > 0, "{d}");
    // From a time after every record: nothing.
    let (code, out, _) = run_cli(&data, &["stream", "t", "--since", "99999999999999"], "");
    assert_eq!((code, out.as_str()), (0, ""));
    cli_fails(
        &data,
        &["alter", "t", "--stream-expiration-hours", "200"],
        2,
        &["1 to 168"],
    );
    cli_fails(&data, &["alter", "t", "--stream", "maybe"], 2, &["true or false"]);
    // A create refused for its stream settings leaves no table.
    cli_fails(
        &data,
        &["create", "u", "--pk", "k:integer", "--stream-expiration-hours", "3"],
        2,
        &["no stream to change"],
    );
    let (_, list, _) = run_cli(&data, &["list"], "");
    assert_eq!(list, "t\n");
    let (code, _, err) = run_cli(&data, &["alter", "t", "--stream", "false"], "");
    assert_eq!(code, 0, "{err}");
    cli_fails(&data, &["stream", "t"], 2, &["has no change stream", "--stream true"]);
    // SQL.
    let (code, _, err) = run_cli(
        &data,
        &[
            "sql",
            "-c",
            "CREATE TABLE v (k BIGINT, x BIGINT, PRIMARY KEY (k)) WITH (stream = true, stream_expiration_hours = 5); \
             INSERT INTO v VALUES (1, 10), (2, 20); ALTER TABLE v SET (stream_expiration_hours = 6)",
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run_cli(&data, &["stream", "v"], "");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    let (code, _, err) = run_cli(
        &data,
        &[
            "sql",
            "-c",
            "CREATE TABLE w (k BIGINT, PRIMARY KEY (k)) WITH (stream = true, stream_expiration_hours = 0)",
        ],
        "",
    );
    assert_eq!(code, 1);
    assert!(err.contains("1 to 168"), "{err}");
    let (_, list, _) = run_cli(&data, &["list"], "");
    assert_eq!(list, "t\nv\n");
}

/// A `cellar write` process killed with SIGKILL mid-stream, three times
/// (the last on a small memory budget: among flushes and compactions),
/// its table split into partitions by the background as it grows: the
/// stream holds every acknowledged write once, nothing twice, each key's
/// in commit order, and replaying it rebuilds the table exactly; so does
/// a full-and-stream tunnel's consumer, `cellar tunnel consume` after
/// each kill going on from its checkpoint.
#[test]
fn sigkill_leaves_every_acknowledged_write_in_the_stream_once() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let (code, _, err) = run_cli(
        &data,
        &[
            "create",
            "t",
            "--pk",
            "k:integer",
            "--stream",
            "true",
            "--partition-split-bytes",
            "65536",
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run_cli(&data, &["tunnel", "create", "t", "c", "--type", "full-and-stream"], "");
    assert_eq!(code, 0, "{err}");
    let mut tunnel_model = std::collections::BTreeMap::new();
    let mut tunnel_seen = std::collections::HashSet::new();
    let bin = env!("CARGO_BIN_EXE_cellar");
    let mut acked_all = Vec::new();
    for round in 0..3u64 {
        let memory = if round == 2 { "16MiB" } else { "512MiB" };
        let mut child = Command::new(bin)
            .arg("--data")
            .arg(&data)
            .args(["--memory", memory, "write", "t"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let base = round * 1_000_000;
        let feeder = std::thread::spawn(move || {
            let pad = "p".repeat(100);
            for i in 0..200_000u64 {
                // Keys are overwritten (1000 of them); values name the write.
                let line = format!(
                    r#"{{"op":"put","pk":{{"k":{}}},"columns":{{"v":{},"pad":"{pad}"}}}}"#,
                    i % 1000,
                    base + i
                );
                if writeln!(stdin, "{line}").is_err() {
                    return;
                }
            }
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let want = [3000, 8000, 60_000][round as usize];
        let mut acked = 0;
        while acked < want {
            let line = lines.next().unwrap().unwrap();
            let j: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(j["ok"], true, "{line}");
            acked_all.push(base + j["line"].as_u64().unwrap() - 1);
            acked += 1;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let _ = feeder.join();

        let (code, out, err) = run_cli(&data, &["stream", "t"], "");
        assert_eq!(code, 0, "{err}");
        let mut values = Vec::new();
        let mut model: std::collections::BTreeMap<i64, u64> = std::collections::BTreeMap::new();
        for l in out.lines() {
            let j: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(j["action"], "PUT_ROW");
            let v = j["columns"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == "v")
                .unwrap()["value"]
                .as_u64()
                .unwrap();
            values.push(v);
            let k = j["pk"]["k"].as_i64().unwrap();
            // Shards are printed one after the other: each key's in order.
            assert!(
                model.get(&k).is_none_or(|before| *before < v),
                "round {round}: key {k} out of order"
            );
            model.insert(k, v);
        }
        let mut sorted = values.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), values.len(), "round {round}: a record twice");
        let set: std::collections::HashSet<u64> = values.iter().copied().collect();
        let lost = acked_all.iter().filter(|a| !set.contains(a)).count();
        assert_eq!(lost, 0, "round {round}: {lost} acknowledged writes have no record");
        // Replaying the stream gives the table.
        let (code, out, err) = run_cli(&data, &["scan", "t", "--columns", "v"], "");
        assert_eq!(code, 0, "{err}");
        let table: std::collections::BTreeMap<i64, u64> = out
            .lines()
            .map(|l| {
                let j: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    j["pk"]["k"].as_i64().unwrap(),
                    j["columns"]["v"][0]["value"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(table, model, "round {round}: the stream replayed is not the table");
        // The tunnel's consumer goes on from its checkpoint.
        let (code, out, err) = run_cli(&data, &["tunnel", "consume", "t", "c"], "");
        assert_eq!(code, 0, "{err}");
        for l in out.lines() {
            let j: serde_json::Value = serde_json::from_str(l).unwrap();
            let id = (
                j["channel"].to_string(),
                j["sequence"]["timestamp"].to_string(),
                j["sequence"]["row_index"].to_string(),
            );
            assert!(
                j["channel"] == "full" || tunnel_seen.insert(id),
                "round {round}: a record twice: {l}"
            );
            let k = j["pk"]["k"].as_i64().unwrap();
            let v = j["columns"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == "v")
                .map(|c| c["value"].as_u64().unwrap());
            match v {
                Some(v) => tunnel_model.insert(k, v),
                None => tunnel_model.remove(&k),
            };
        }
        assert_eq!(
            tunnel_model, table,
            "round {round}: the tunnel's consumer did not rebuild the table"
        );
    }
    let (code, out, err) = run_cli(&data, &["describe", "t", "--partitions"], "");
    assert_eq!(code, 0, "{err}");
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(
        j["partitions"].as_array().unwrap().len() > 1,
        "the table was split: {j}"
    );
}

/// `cellar --read-only stream` beside the process that writes the table:
/// it sees every acknowledged write, in order, once; `--follow` prints
/// writes as they come.
#[test]
fn a_stream_is_read_beside_its_writer() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let (code, _, err) = run_cli(&data, &["create", "t", "--pk", "k:integer", "--stream", "true"], "");
    assert_eq!(code, 0, "{err}");
    let bin = env!("CARGO_BIN_EXE_cellar");
    let mut writer = Command::new(bin)
        .arg("--data")
        .arg(&data)
        .args(["write", "t"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = writer.stdin.take().unwrap();
    let mut acks = BufReader::new(writer.stdout.take().unwrap()).lines();
    let mut follower = Command::new(bin)
        .arg("--data")
        .arg(&data)
        .args(["--read-only", "stream", "t", "--follow"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut followed = BufReader::new(follower.stdout.take().unwrap()).lines();
    let value = |l: &str| -> u64 {
        let j: serde_json::Value = serde_json::from_str(l).unwrap();
        j["columns"][0]["value"].as_u64().unwrap()
    };
    for batch in 0..3u64 {
        for i in 0..500u64 {
            let v = batch * 500 + i;
            writeln!(stdin, r#"{{"op":"put","pk":{{"k":{}}},"columns":{{"v":{v}}}}}"#, v % 77).unwrap();
        }
        stdin.flush().unwrap();
        for _ in 0..500 {
            let l = acks.next().unwrap().unwrap();
            assert!(l.contains(r#""ok":true"#), "{l}");
        }
        // Everything acknowledged so far, in order, once.
        let o = Command::new(bin)
            .arg("--data")
            .arg(&data)
            .args(["--read-only", "stream", "t"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let got: Vec<u64> = String::from_utf8(o.stdout).unwrap().lines().map(value).collect();
        assert_eq!(got, (0..(batch + 1) * 500).collect::<Vec<_>>(), "batch {batch}");
        // The follower has them too.
        for v in batch * 500..(batch + 1) * 500 {
            assert_eq!(value(&followed.next().unwrap().unwrap()), v);
        }
    }
    drop(stdin);
    assert!(writer.wait().unwrap().success());
    follower.kill().unwrap();
    follower.wait().unwrap();
}

fn origin(r: &StreamRecord) -> Vec<(String, Value)> {
    r.origin
        .iter()
        .map(|c| match c {
            StreamColumn::Put { name, value, .. } => (name.clone(), value.clone()),
            other => panic!("an origin column is a value: {other:?}"),
        })
        .collect()
}

fn o(pairs: &[(&str, Value)]) -> Vec<(String, Value)> {
    pairs.iter().map(|(n, v)| (n.to_string(), v.clone())).collect()
}

/// With stream columns, each record carries their values before its
/// write, whatever path the write took, and the same after a reopen that
/// refills the log from the WAL; pipelined writes give the origins one
/// write at a time gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_carry_the_origin_of_their_stream_columns() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let db = open(dir.path(), &clock).await;
    let t = card_order_table(&db, TableOptions::default()).await;
    let spec = StreamSpec {
        expiration_hours: 24,
        columns: vec!["a".into(), "b".into()],
    };
    db.set_stream("t", Some(spec)).await.unwrap();
    let k = pk(1, "x");
    t.put_row(PutRow::new(k.clone()).column("a", 1).column("b", "one").column("c", 0))
        .await
        .unwrap();
    t.update_row(UpdateRow::new(k.clone()).put("a", 2)).await.unwrap();
    t.write_batch(vec![
        RowWrite::Update(UpdateRow::new(k.clone()).put("b", "two")),
        RowWrite::Update(UpdateRow::new(k.clone()).increment("a", 5)),
    ])
    .await
    .unwrap();
    let tx = t.start_transaction(1).await.unwrap();
    tx.write(RowWrite::Update(UpdateRow::new(k.clone()).delete_all("b")))
        .await
        .unwrap();
    tx.write(RowWrite::Put(PutRow::new(k.clone()).column("c", 9)))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    t.delete_row(DeleteRow::new(k.clone())).await.unwrap();
    t.put_row(PutRow::new(k.clone()).column("a", 3)).await.unwrap();
    let got = records(&db, "t", 8).await;
    let origins: Vec<_> = got.iter().map(origin).collect();
    use Value::{Integer as I, String as S};
    assert_eq!(
        origins,
        vec![
            o(&[]),
            o(&[("a", I(1)), ("b", S("one".into()))]),
            o(&[("a", I(2)), ("b", S("one".into()))]),
            o(&[("a", I(2)), ("b", S("two".into()))]),
            o(&[("a", I(7)), ("b", S("two".into()))]),
            o(&[("a", I(7))]),
            o(&[]),
            o(&[]),
        ]
    );
    // After a reopen (the log refilled from the WAL where it lacks records).
    drop(t);
    db.close().await.unwrap();
    let logs = dir.path().join("streams").join("1");
    let newest = newest_log(&logs);
    let len = std::fs::metadata(&newest).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let db = open(dir.path(), &clock).await;
    let again = records(&db, "t", 8).await;
    assert_eq!(again, got, "the refilled records are the same, origins included");
    db.close().await.unwrap();
}

/// Pipelined batches and one write at a time give the same origins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_writes_give_the_origins_of_one_at_a_time() {
    let mut runs = Vec::new();
    for pipelined in [false, true] {
        let (_dir, _clock, db, t) = fixture(TableOptions::default()).await;
        let spec = StreamSpec {
            expiration_hours: 24,
            columns: vec!["v".into(), "n".into()],
        };
        db.set_stream("t", Some(spec)).await.unwrap();
        let writes: Vec<RowWrite> = (0..300i64)
            .map(|i| {
                let key = pk(i % 3, "k");
                match i % 5 {
                    0 | 1 => RowWrite::Put(PutRow::new(key).column("v", i)),
                    2 => RowWrite::Update(UpdateRow::new(key).increment("n", 1)),
                    3 => RowWrite::Update(UpdateRow::new(key).put("v", -i).condition(Condition::expect_exist())),
                    _ => RowWrite::Delete(DeleteRow::new(key)),
                }
            })
            .collect();
        let ok = apply(&t, writes, pipelined.then_some(9)).await;
        let got = records(&db, "t", ok).await;
        assert_eq!(got.len(), ok);
        runs.push(
            got.iter()
                .map(|r| (seen(std::slice::from_ref(r)), origin(r)))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(runs[0], runs[1]);
    assert!(runs[0].iter().any(|(_, o)| !o.is_empty()), "origins were recorded");
}

/// Reads to the end of the table's one shard; the iterator there.
async fn iterator_at_end(db: &Database) -> String {
    let stream = db.list_streams(Some("t")).await.unwrap().remove(0).stream_id;
    let shard = db.describe_stream(&stream).await.unwrap().shards.remove(0).shard_id;
    let mut it = db.shard_iterator(&stream, &shard, StreamStart::Oldest).await.unwrap();
    loop {
        let page = db.get_stream_records(&it, 100).await.unwrap();
        let empty = page.records.is_empty();
        it = page.next_iterator.unwrap();
        if empty {
            return it;
        }
    }
}

/// Iterators kept across reopens (each open starts a new log file, and
/// the expiry pass drops the empty ones) go on where they were: nothing
/// expired, so they are never `TrimmedDataAccess`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_iterator_at_the_end_outlives_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let db = open(dir.path(), &clock).await;
    let t = card_order_table(&db, TableOptions::default()).await;
    db.set_stream("t", Some(StreamSpec::new(24))).await.unwrap();
    t.put_row(PutRow::new(pk(1, "a"))).await.unwrap();
    assert_eq!(records(&db, "t", 1).await.len(), 1);
    let after_first = iterator_at_end(&db).await;
    drop(t);
    db.close().await.unwrap();
    // A session that writes nothing: its log file stays empty.
    let db = open(dir.path(), &clock).await;
    let at_empty = iterator_at_end(&db).await;
    db.close().await.unwrap();
    let db = open(dir.path(), &clock).await;
    // Let the expiry pass run over the sealed files.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    db.table("t").unwrap().put_row(PutRow::new(pk(2, "b"))).await.unwrap();
    assert_eq!(records(&db, "t", 2).await.len(), 2);
    for it in [&after_first, &at_empty] {
        let page = db.get_stream_records(it, 10).await.unwrap();
        assert_eq!(page.records.len(), 1, "only the new record");
        assert_eq!(page.records[0].primary_key, pk(2, "b"));
    }
    db.close().await.unwrap();
}
