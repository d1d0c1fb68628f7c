//! Tunnels: a consumer that rebuilds a table from a full-and-stream tunnel
//! alone equals the table, across concurrent writes, splits, merges,
//! flushes, compactions, a reopen and consumer restarts from their
//! checkpoints; stream tunnels; bad input; the command line.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use cellar::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::*;

pub(crate) type Rebuilt = BTreeMap<(i64, String), BTreeMap<String, Value>>;

/// What a consumer saw: the table it rebuilt and each record's identity.
#[derive(Default)]
struct Consumer {
    rebuilt: Rebuilt,
    /// (channel, commit time, row index) of each stream record, and how
    /// often it came.
    seen: BTreeMap<(String, u64, u32), usize>,
    finished: Vec<String>,
}

fn key_of(r: &StreamRecord) -> (i64, String) {
    match (r.primary_key.get("card"), r.primary_key.get("order")) {
        (Some(PkValue::Integer(c)), Some(PkValue::String(o))) => (*c, o.clone()),
        other => panic!("{other:?}"),
    }
}

/// Applies a record to a rebuilt table (latest values only).
pub(crate) fn apply(rebuilt: &mut Rebuilt, r: &StreamRecord) {
    let key = key_of(r);
    match r.action {
        StreamAction::DeleteRow => {
            rebuilt.remove(&key);
        }
        StreamAction::PutRow | StreamAction::UpdateRow => {
            let row = rebuilt.entry(key).or_default();
            if r.action == StreamAction::PutRow {
                row.clear();
            }
            // Columns come newest version first in a full row; later ones
            // must not replace them.
            let mut done = HashSet::new();
            for c in &r.columns {
                match c {
                    StreamColumn::Put { name, value, .. } => {
                        if done.insert(name.clone()) {
                            row.insert(name.clone(), value.clone());
                        }
                    }
                    StreamColumn::DeleteAllVersions { name } | StreamColumn::DeleteOneVersion { name, .. } => {
                        row.remove(name);
                    }
                }
            }
        }
    }
}

fn worker(db: &Database, name: &str, c: &Arc<Mutex<Consumer>>) -> TunnelWorker {
    let (c1, c2) = (c.clone(), c.clone());
    db.tunnel_worker(
        "t",
        name,
        Arc::new(move |ctx: &ChannelContext, records: &[StreamRecord]| {
            let mut c = c1.lock().unwrap();
            for r in records {
                apply(&mut c.rebuilt, r);
                if ctx.channel != "full" {
                    *c.seen
                        .entry((ctx.channel.clone(), r.sequence.timestamp_us, r.sequence.row_index))
                        .or_default() += 1;
                }
            }
            Ok(())
        }),
        Arc::new(move |ctx: &ChannelContext| c2.lock().unwrap().finished.push(ctx.channel.clone())),
    )
    .unwrap()
}

/// The table as the consumer rebuilds it.
async fn table_now(t: &Table) -> Rebuilt {
    scan_all(t, GetRange::new())
        .await
        .into_iter()
        .map(|r| {
            let key = match (r.primary_key.get("card"), r.primary_key.get("order")) {
                (Some(PkValue::Integer(c)), Some(PkValue::String(o))) => (*c, o.clone()),
                other => panic!("{other:?}"),
            };
            let cols = r
                .columns
                .into_iter()
                .filter_map(|(n, cells)| cells.into_iter().next().map(|c| (n, c.value)))
                .collect();
            (key, cols)
        })
        .collect()
}

async fn write_some(t: &Table, rng: &mut StdRng, n: usize) {
    for _ in 0..n {
        let key = pk(rng.random_range(0..300), &format!("o{}", rng.random_range(0..3)));
        match rng.random_range(0..10) {
            0..=5 => {
                let w = PutRow::new(key)
                    .column("x", rng.random_range(0..1000i64))
                    .column("s", format!("s{}", rng.random_range(0..9)));
                t.put_row(w).await.unwrap();
            }
            6..=7 => {
                t.update_row(UpdateRow::new(key).put("x", rng.random_range(0..1000i64)))
                    .await
                    .unwrap();
            }
            _ => {
                t.delete_row(DeleteRow::new(key)).await.unwrap();
            }
        }
    }
}

/// Runs the worker until the rebuilt table equals the table (records
/// reach readers once their logs are synced).
async fn catch_up(db: &Database, t: &Table, name: &str, c: &Arc<Mutex<Consumer>>) {
    let want = table_now(t).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        worker(db, name, c).run(false).await.unwrap();
        let got = c.lock().unwrap().rebuilt.clone();
        if got == want {
            return;
        }
        if std::time::Instant::now() > deadline {
            let first = got.iter().zip(&want).find(|(a, b)| a != b);
            panic!(
                "rebuilt {} rows, table {}; first difference {first:?}",
                got.len(),
                want.len()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A full-and-stream tunnel made on a table with rows, consumed while
/// writers, splits, merges, compactions and a reopen go on, its worker
/// stopped and restarted from its checkpoints: the table rebuilt from the
/// tunnel alone equals the table, and no record came twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_and_stream_tunnel_rebuilds_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let mut db = open(dir.path(), &clock).await;
    let mut t = card_order_table(&db, TableOptions::default()).await;
    db.set_stream("t", Some(StreamSpec::new(24))).await.unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    write_some(&t, &mut rng, 1500).await;
    t.flush().await.unwrap();
    db.create_tunnel("t", "copy", TunnelType::FullAndStream).await.unwrap();
    let consumer = Arc::new(Mutex::new(Consumer::default()));
    for round in 0..6u64 {
        let writer = {
            let t = t.clone();
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(round);
                write_some(&t, &mut rng, 600).await;
            })
        };
        // The consumer runs beside the writer, stopped after a while.
        let w = worker(&db, "copy", &consumer);
        let stop = w.stopper();
        let run = tokio::spawn(async move { w.run(true).await });
        let parts = t.partitions().await.unwrap();
        if parts.len() < 2 || rng.random_bool(0.6) {
            t.split_partition(rng.random_range(1..300i64)).await.unwrap();
        } else if let Err(e) = t.merge_partitions(parts[0].id).await {
            assert!(e.to_string().contains("share segments"), "{e}");
        }
        writer.await.unwrap();
        stop.store(true, std::sync::atomic::Ordering::Release);
        run.await.unwrap().unwrap();
        match round % 3 {
            0 => t.compact().await.unwrap(),
            1 => t.flush().await.unwrap(),
            _ => {
                drop(t);
                db.close().await.unwrap();
                db = open(dir.path(), &clock).await;
                t = db.table("t").unwrap();
            }
        }
    }
    catch_up(&db, &t, "copy", &consumer).await;
    {
        let c = consumer.lock().unwrap();
        let twice: Vec<_> = c.seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "records delivered twice: {twice:?}");
        assert!(c.finished.contains(&"full".to_string()));
    }
    let d = db.describe_tunnel("t", "copy").await.unwrap();
    assert_eq!(d.stage, TunnelStage::Stream);
    assert!(
        d.channels
            .iter()
            .any(|ch| ch.status == ChannelStatus::Finished && ch.id != "full"),
        "{d:?}"
    );
    assert!(d.lag_ms.is_some());
    drop(t);
    db.close().await.unwrap();
}

/// A stream tunnel delivers only what was written after it was made; a
/// full tunnel the rows, then it is finished; bad input is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_and_full_tunnels_and_bad_input() {
    let (_dir, clock, db, t) = fixture(TableOptions::default()).await;
    // No stream: a stream tunnel is refused, a full one is fine.
    let e = db.create_tunnel("t", "s", TunnelType::Stream).await.unwrap_err();
    assert!(
        e.to_string().contains("has no change stream") && e.to_string().contains("--stream true"),
        "{e}"
    );
    t.put_row(PutRow::new(pk(1, "a")).column("x", 1i64)).await.unwrap();
    db.create_tunnel("t", "f", TunnelType::Full).await.unwrap();
    let c = Arc::new(Mutex::new(Consumer::default()));
    worker(&db, "f", &c).run(false).await.unwrap();
    assert_eq!(c.lock().unwrap().rebuilt.len(), 1);
    assert_eq!(db.describe_tunnel("t", "f").await.unwrap().stage, TunnelStage::Finished);
    db.set_stream("t", Some(StreamSpec::new(1))).await.unwrap();
    t.put_row(PutRow::new(pk(2, "before"))).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    db.create_tunnel("t", "s", TunnelType::Stream).await.unwrap();
    t.put_row(PutRow::new(pk(3, "after")).column("x", 3i64)).await.unwrap();
    let s = Arc::new(Mutex::new(Consumer::default()));
    for _ in 0..50 {
        worker(&db, "s", &s).run(false).await.unwrap();
        if !s.lock().unwrap().rebuilt.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let keys: Vec<_> = s.lock().unwrap().rebuilt.keys().cloned().collect();
    assert_eq!(keys, vec![(3, "after".to_string())]);
    // Bad input, each named.
    let e = db.create_tunnel("t", "s", TunnelType::Stream).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ObjectAlreadyExist, "{e}");
    let e = db.create_tunnel("t", "bad name!", TunnelType::Full).await.unwrap_err();
    assert!(e.to_string().contains("not accepted"), "{e}");
    assert!(
        TunnelType::parse("both")
            .unwrap_err()
            .to_string()
            .contains("full-and-stream")
    );
    let e = db.describe_tunnel("t", "nope").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ObjectNotExist, "{e}");
    let e = db.create_tunnel("nope", "x", TunnelType::Full).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ObjectNotExist, "{e}");
    let e = db.set_stream("t", None).await.unwrap_err();
    assert!(e.to_string().contains("tunnel(s) s"), "{e}");
    // A consumer that fell behind the expiration is told so.
    t.put_row(PutRow::new(pk(4, "late"))).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    clock.advance(2 * 3_600_000);
    let e = worker(&db, "s", &s).run(false).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TrimmedDataAccess, "{e}");
    assert!(e.to_string().contains("fell behind"), "{e}");
    let names: Vec<String> = db
        .list_tunnels(Some("t"))
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(names, vec!["f", "s"]);
    db.delete_tunnel("t", "s").await.unwrap();
    assert!(db.describe_tunnel("t", "s").await.is_err());
    db.set_stream("t", None).await.unwrap();
}

/// `cellar tunnel create|list|describe|consume|delete`: a second consume
/// goes on from the first's checkpoint.
#[test]
fn tunnels_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let ok = |args: &[&str], input: &str| {
        let (code, out, err) = run_cli(&data, args, input);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    ok(&["create", "t", "--pk", "k:integer", "--stream", "true"], "");
    let ops = |from: i64, to: i64| -> String {
        (from..to)
            .map(|k| format!("{{\"op\":\"put\",\"pk\":{{\"k\":{k}}},\"columns\":{{\"v\":{k}}}}}\n"))
            .collect()
    };
    ok(&["write", "t"], &ops(0, 50));
    ok(&["tunnel", "create", "t", "c", "--type", "full-and-stream"], "");
    cli_fails(
        &data,
        &["tunnel", "create", "t", "d", "--type", "both"],
        2,
        &["full-and-stream"],
    );
    let list = ok(&["tunnel", "list"], "");
    assert!(
        list.contains("\"name\":\"c\"") && list.contains("\"stage\":\"full\""),
        "{list}"
    );
    let first = ok(&["tunnel", "consume", "t", "c"], "");
    assert_eq!(first.lines().count(), 50, "{first}");
    assert!(first.lines().all(|l| l.contains("\"channel\":\"full\"")), "{first}");
    ok(&["write", "t"], &ops(50, 60));
    // Records come once synced: a few tries.
    let mut second = String::new();
    for _ in 0..20 {
        second.push_str(&ok(&["tunnel", "consume", "t", "c"], ""));
        if second.lines().count() >= 10 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(second.lines().count(), 10, "only the new ones: {second}");
    let d: serde_json::Value = serde_json::from_str(ok(&["tunnel", "describe", "t", "c"], "").trim()).unwrap();
    assert_eq!(d["stage"], "stream", "{d}");
    assert_eq!(d["channels"][0]["status"], "finished", "{d}");
    cli_fails(&data, &["tunnel", "describe", "t", "nope"], 1, &["tunnel 'nope'"]);
    cli_fails(
        &data,
        &["--read-only", "tunnel", "consume", "t", "c"],
        2,
        &["--read-only"],
    );
    ok(&["tunnel", "delete", "t", "c"], "");
    assert_eq!(ok(&["tunnel", "list", "t"], ""), "");
}
