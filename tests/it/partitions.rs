//! Range partitions: splits and merges while writers run, checked against
//! a model of the table across flushes, compactions and reopens; reads
//! (GetRow, GetRange both ways, SQL) across partition bounds.

use std::collections::BTreeMap;
use std::sync::Arc;

use cellar::sql::SqlSession;
use cellar::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::*;
use crate::sql::{overlay_check, rows, text_rows};

type Model = BTreeMap<(i64, String), (i64, String)>;

/// A query's rows as values joined by `|`.
async fn values(sess: &SqlSession, sql: &str) -> Vec<String> {
    text_rows(&rows(sess, sql).await)
        .iter()
        .map(|r| {
            r.split(' ')
                .map(|c| c.rsplit('=').next().unwrap_or(c))
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect()
}

/// Applies one random write to the table and the model: puts, updates
/// and deletes of the same few hundred keys, over and over.
async fn random_write(t: &Table, rng: &mut StdRng, model: &mut Model) {
    let card = rng.random_range(0..300i64);
    let order = format!("o{}", rng.random_range(0..3));
    let key = pk(card, &order);
    match rng.random_range(0..10) {
        0..=5 => {
            let (x, s) = (rng.random_range(0..2000i64), format!("s{}", rng.random_range(0..50)));
            t.put_row(PutRow::new(key).column("x", x).column("s", s.clone()))
                .await
                .unwrap();
            model.insert((card, order), (x, s));
        }
        6..=7 => {
            let x = rng.random_range(0..2000i64);
            t.update_row(UpdateRow::new(key).put("x", x)).await.unwrap();
            let e = model.entry((card, order)).or_insert((0, String::new()));
            e.0 = x;
        }
        _ => {
            t.delete_row(DeleteRow::new(key)).await.unwrap();
            model.remove(&(card, order));
        }
    }
}

/// The table holds exactly the model: every row through GetRange both
/// ways, a sample through GetRow, and SQL against the API.
async fn check(t: &Table, sess: &SqlSession, model: &Model, what: &str) {
    let all = scan_all(t, GetRange::new()).await;
    let got: Vec<(i64, String)> = all
        .iter()
        .map(|r| match (r.primary_key.get("card"), r.primary_key.get("order")) {
            (Some(PkValue::Integer(c)), Some(PkValue::String(o))) => (*c, o.clone()),
            other => panic!("{what}: a bad key {other:?}"),
        })
        .collect();
    let want: Vec<(i64, String)> = model.keys().cloned().collect();
    if got != want {
        let first = got.iter().zip(&want).position(|(a, b)| a != b);
        panic!(
            "{what}: {} rows, model {}; first difference at {first:?}",
            got.len(),
            want.len()
        );
    }
    for (r, ((_, _), (x, s))) in all.iter().zip(model) {
        assert_eq!(r.latest("x"), Some(&Value::Integer(*x)), "{what}: {:?}", r.primary_key);
        if !s.is_empty() {
            assert_eq!(
                r.latest("s"),
                Some(&Value::String(s.clone())),
                "{what}: {:?}",
                r.primary_key
            );
        }
    }
    let mut back = scan_all(t, GetRange::new().backward()).await;
    back.reverse();
    assert_eq!(back.len(), all.len(), "{what}: backward");
    assert!(
        back.iter().zip(&all).all(|(a, b)| a.primary_key == b.primary_key),
        "{what}: backward order"
    );
    for card in [0, 57, 150, 299] {
        let got = t.get_row(GetRow::new(pk(card, "o1"))).await.unwrap().row;
        assert_eq!(
            got.is_some(),
            model.contains_key(&(card, "o1".into())),
            "{what}: get {card}"
        );
    }
    overlay_check(sess, t, what).await;
    let n = values(sess, "SELECT count(*) FROM t").await;
    assert_eq!(n, vec![model.len().to_string()], "{what}: count");
    let g = values(
        sess,
        "SELECT card % 7 AS g, count(*), sum(x) FROM t GROUP BY g ORDER BY g",
    )
    .await;
    let mut want: BTreeMap<i64, (usize, i64)> = BTreeMap::new();
    for ((card, _), (x, _)) in model {
        let e = want.entry(card % 7).or_default();
        e.0 += 1;
        e.1 += x;
    }
    let want: Vec<String> = want.iter().map(|(g, (n, s))| format!("{g}|{n}|{s}")).collect();
    assert_eq!(g, want, "{what}: GROUP BY");
}

/// Splits and merges while a writer overwrites and deletes the same keys;
/// flushes, compactions and reopens between rounds. Nothing is lost,
/// nothing comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn splits_and_merges_under_writes_keep_every_row() {
    for seed in 0..seeds("CELLAR_PARTITION_SEEDS", 2) {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let mut db = open(dir.path(), &clock).await;
        let mut t = card_order_table(&db, TableOptions::default()).await;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut model = Model::new();
        let mut most_parts = 1;
        for round in 0..6 {
            let writer = {
                let (t, mut model, seed) = (t.clone(), model.clone(), seed * 100 + round);
                tokio::spawn(async move {
                    let mut rng = StdRng::seed_from_u64(seed);
                    for _ in 0..1500 {
                        random_write(&t, &mut rng, &mut model).await;
                    }
                    model
                })
            };
            // Layout changes while the writer runs.
            for _ in 0..3 {
                let parts = t.partitions().await.unwrap();
                most_parts = most_parts.max(parts.len());
                if parts.len() < 2 || (parts.len() < 5 && rng.random_bool(0.7)) {
                    assert!(t.split_partition(rng.random_range(1..300i64)).await.is_ok());
                } else {
                    let i = rng.random_range(0..parts.len() - 1);
                    // Shared segments make a merge wait for compaction.
                    if let Err(e) = t.merge_partitions(parts[i].id).await {
                        assert!(e.to_string().contains("share segments"), "{e}");
                    }
                }
                if rng.random_bool(0.5) {
                    t.flush().await.unwrap();
                }
            }
            model = writer.await.unwrap();
            let sess = SqlSession::new(db.clone());
            // SQL UPDATE and DELETE reach every partition their keys span.
            let (lo, hi) = (rng.random_range(0..150i64), rng.random_range(150..300i64));
            let x = rng.random_range(0..2000i64);
            rows(
                &sess,
                &format!("UPDATE t SET x = {x} WHERE card >= {lo} AND card < {hi}"),
            )
            .await;
            for ((card, _), v) in model.iter_mut() {
                if (lo..hi).contains(card) {
                    v.0 = x;
                }
            }
            let gone: Vec<i64> = (0..8).map(|_| rng.random_range(0..300i64)).collect();
            let list = gone.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
            rows(&sess, &format!("DELETE FROM t WHERE card IN ({list})")).await;
            model.retain(|(card, _), _| !gone.contains(card));
            check(&t, &sess, &model, &format!("seed {seed} round {round}")).await;
            match round % 3 {
                0 => t.compact().await.unwrap(),
                1 => t.flush().await.unwrap(),
                _ => {
                    drop(sess);
                    drop(t);
                    db.close().await.unwrap();
                    db = open(dir.path(), &clock).await;
                    t = db.table("t").unwrap();
                }
            }
            let sess = SqlSession::new(db.clone());
            check(&t, &sess, &model, &format!("seed {seed} round {round}, after")).await;
        }
        // Splits happened (merges may have joined them all again).
        assert!(most_parts > 1, "seed {seed}: never split");
        let parts = t.partitions().await.unwrap();
        // Bounds are whole partition-key values, in order, covering all.
        assert_eq!(parts[0].lower, None);
        assert_eq!(parts.last().unwrap().upper, None);
        for w in parts.windows(2) {
            assert_eq!(w[0].upper, w[1].lower);
        }
        db.close().await.unwrap();
    }
}

/// A split and a merge after a compaction; lineage, bytes and rows; split
/// points at partition-key values; the size threshold splits by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_report_lineage_and_split_points() {
    let dir = tempfile::tempdir().unwrap();
    // Row groups of 500 rows: split points fall on row-group bounds.
    let options = DbOptions {
        row_group_rows: 500,
        ..DbOptions::default()
    };
    let db = Database::open_with(dir.path(), options).await.unwrap();
    let t = card_order_table(&db, TableOptions::default()).await;
    for card in 0..2000i64 {
        for o in ["a", "b"] {
            t.put_row(PutRow::new(pk(card, o)).column("x", card).column("s", "y".repeat(40)))
                .await
                .unwrap();
        }
    }
    t.compact().await.unwrap();
    let one = t.partitions().await.unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].rows, 4000);
    assert!(t.split_partition(1000i64).await.unwrap());
    assert!(!t.split_partition(1000i64).await.unwrap(), "already a bound");
    let two = t.partitions().await.unwrap();
    assert_eq!(two.len(), 2);
    assert_eq!(two[0].upper, Some(PkValue::Integer(1000)));
    assert!(two.iter().all(|p| p.shared && p.parents == vec![one[0].id]), "{two:?}");
    let rows: u64 = two.iter().map(|p| p.rows).sum();
    assert!((3500..=4500).contains(&rows), "{two:?}");
    // A merge waits until compaction rewrote the shared segments.
    let e = t.merge_partitions(two[0].id).await.unwrap_err();
    assert!(e.to_string().contains("share segments"), "{e}");
    t.compact().await.unwrap();
    let two = t.partitions().await.unwrap();
    assert!(two.iter().all(|p| !p.shared), "{two:?}");
    assert_eq!(two[0].rows + two[1].rows, 4000);
    assert!(t.merge_partitions(two[0].id).await.unwrap());
    let merged = t.partitions().await.unwrap();
    assert_eq!(merged.len(), 1);
    assert_eq!(merged[0].parents, vec![two[0].id, two[1].id]);
    assert_eq!(merged[0].rows, 4000);
    // Split points: ranges of about the size asked, at card values.
    let bytes = merged[0].bytes;
    let ranges = t.compute_split_points(bytes / 4).await.unwrap();
    assert!((3..=6).contains(&ranges.len()), "{ranges:?}");
    assert_eq!(ranges[0].lower, None);
    assert_eq!(ranges.last().unwrap().upper, None);
    assert!(ranges.iter().all(|r| r.location.starts_with("partition-")));
    assert!(t.compute_split_points(0).await.is_err());
    // Bad input.
    let e = t.split_partition("x").await.unwrap_err();
    assert!(e.to_string().contains("partition key 'card'"), "{e}");
    let e = t.merge_partitions(9999).await.unwrap_err();
    assert!(e.to_string().contains("no partition 9999"), "{e}");
    // The threshold: the background splits a partition past it.
    db.alter_table(
        "t",
        OptionsUpdate {
            partition_split_bytes: Some((bytes / 3).max(64 * 1024)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    for card in 2000..2100i64 {
        t.put_row(PutRow::new(pk(card, "a")).column("x", card)).await.unwrap();
    }
    t.flush().await.unwrap();
    let mut split = false;
    for _ in 0..200 {
        if t.partitions().await.unwrap().len() > 1 {
            split = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(split, "{:?}", t.partitions().await.unwrap());
    let all = scan_all(&t, GetRange::new()).await;
    assert_eq!(all.len(), 4100);
    let sess = SqlSession::new(db.clone());
    let got = values(&sess, "SELECT count(*), sum(x) FROM t").await;
    let want: i64 = (0..2000i64).map(|c| 2 * c).sum::<i64>() + (2000..2100i64).sum::<i64>();
    assert_eq!(got, vec![format!("4100|{want}")]);
    db.close().await.unwrap();
}

/// `describe --partitions`, `split-points`, the option on the command
/// line and in SQL, and their bad input.
#[test]
fn partitions_from_the_command_line_and_sql() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let (code, _, err) = run_cli(&data, &["create", "t", "--pk", "k:integer,o:string"], "");
    assert_eq!(code, 0, "{err}");
    let ops: String = (0..300)
        .map(|k| format!("{{\"op\":\"put\",\"pk\":{{\"k\":{k},\"o\":\"a\"}},\"columns\":{{\"v\":{k}}}}}\n"))
        .collect();
    let (code, _, err) = run_cli(&data, &["write", "t"], &ops);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run_cli(&data, &["describe", "t", "--partitions"], "");
    assert_eq!(code, 0, "{err}");
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let parts = j["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 1, "{j}");
    assert_eq!(parts[0]["rows"], 300, "{j}");
    assert_eq!(
        (parts[0]["lower"].clone(), parts[0]["upper"].clone()),
        (serde_json::Value::Null, serde_json::Value::Null)
    );
    let (code, out, err) = run_cli(&data, &["split-points", "t", "--size", "1000000"], "");
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert_eq!(lines[0]["location"], "partition-0");
    cli_fails(
        &data,
        &["split-points", "t", "--size", "0"],
        2,
        &["positive number of bytes"],
    );
    cli_fails(
        &data,
        &["split-points", "nope", "--size", "10"],
        1,
        &["'nope' does not exist"],
    );
    cli_fails(
        &data,
        &["alter", "t", "--partition-split-bytes", "10"],
        2,
        &["partition_split_bytes", "65536"],
    );
    let (code, _, err) = run_cli(&data, &["alter", "t", "--partition-split-bytes", "1048576"], "");
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run_cli(&data, &["describe", "t"], "");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"partition_split_bytes\":1048576"), "{out}");
    let (code, _, err) = run_cli(
        &data,
        &["sql", "-c", "ALTER TABLE t SET (partition_split_bytes = 0)"],
        "",
    );
    assert_eq!(code, 0, "{err}");
    cli_fails(
        &data,
        &["sql", "-c", "ALTER TABLE t SET (partition_split_bytes = -5)"],
        1,
        &["partition_split_bytes"],
    );
}

/// Every record of a table's stream, reading each shard only once its
/// parents are read to their end (the order a consumer must keep), with
/// the shard each came from; waits until there are `want`.
pub(crate) async fn lineage_records(db: &Database, table: &str, want: usize) -> Vec<(String, StreamRecord)> {
    let stream = db.list_streams(Some(table)).await.unwrap().remove(0).stream_id;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let shards = db.describe_stream(&stream).await.unwrap().shards;
        let mut finished: Vec<String> = Vec::new();
        let mut out = Vec::new();
        let mut progress = true;
        while progress {
            progress = false;
            for s in &shards {
                let parents: Vec<&String> = [&s.parent_id, &s.parent_sibling_id].into_iter().flatten().collect();
                let ready = parents
                    .iter()
                    .all(|p| finished.contains(p) || !shards.iter().any(|x| &&x.shard_id == p));
                if !ready || finished.contains(&s.shard_id) {
                    continue;
                }
                let mut it = db
                    .shard_iterator(&stream, &s.shard_id, StreamStart::Oldest)
                    .await
                    .unwrap();
                loop {
                    let page = db.get_stream_records(&it, 500).await.unwrap();
                    let empty = page.records.is_empty();
                    out.extend(page.records.into_iter().map(|r| (s.shard_id.clone(), r)));
                    match page.next_iterator {
                        Some(next) if !empty => it = next,
                        _ => break,
                    }
                }
                finished.push(s.shard_id.clone());
                progress = true;
            }
        }
        if out.len() >= want || std::time::Instant::now() > deadline {
            return out;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Change streams across splits and merges: a shard per partition, the
/// halves of a split naming their parent, a merged shard naming both;
/// every write has its record exactly once, and the table rebuilt from
/// the records read in lineage order equals the table, also across a
/// reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_follow_splits_and_merges() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let mut db = open(dir.path(), &clock).await;
    let mut t = card_order_table(&db, TableOptions::default()).await;
    db.set_stream("t", Some(StreamSpec::new(24))).await.unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut model = Model::new();
    let mut writes = 0;
    for round in 0..5 {
        let writer = {
            let (t, mut model) = (t.clone(), model.clone());
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(round);
                for _ in 0..800 {
                    random_write(&t, &mut rng, &mut model).await;
                }
                model
            })
        };
        for _ in 0..2 {
            let parts = t.partitions().await.unwrap();
            if parts.len() < 2 || rng.random_bool(0.6) {
                t.split_partition(rng.random_range(1..300i64)).await.unwrap();
            } else if let Err(e) = t.merge_partitions(parts[rng.random_range(0..parts.len() - 1)].id).await {
                assert!(e.to_string().contains("share segments"), "{e}");
            }
        }
        model = writer.await.unwrap();
        writes += 800;
        t.compact().await.unwrap();
        if round == 2 {
            drop(t);
            db.close().await.unwrap();
            db = open(dir.path(), &clock).await;
            t = db.table("t").unwrap();
        }
    }
    // Merges once compaction has rewritten what splits left shared.
    let parts = t.partitions().await.unwrap();
    assert!(t.merge_partitions(parts[0].id).await.unwrap());
    t.put_row(PutRow::new(pk(0, "o0")).column("x", 5i64).column("s", "last"))
        .await
        .unwrap();
    model.insert((0, "o0".into()), (5, "last".into()));
    writes += 1;
    let got = lineage_records(&db, "t", writes).await;
    assert_eq!(got.len(), writes, "every write once");
    // Lineage: every shard but the first names a parent; the merge's names two.
    let stream = db.list_streams(Some("t")).await.unwrap().remove(0).stream_id;
    let shards = db.describe_stream(&stream).await.unwrap().shards;
    assert!(shards.len() > 2, "{shards:?}");
    assert!(
        shards.iter().filter(|s| s.parent_id.is_none()).count() <= 1,
        "{shards:?}"
    );
    assert!(shards.iter().any(|s| s.parent_sibling_id.is_some()), "{shards:?}");
    // Rebuild the table from the records.
    let mut rebuilt = crate::tunnels::Rebuilt::new();
    for (_, r) in &got {
        crate::tunnels::apply(&mut rebuilt, r);
    }
    let want: BTreeMap<(i64, String), BTreeMap<String, Value>> = model
        .iter()
        .map(|(k, (x, s))| {
            let mut row = BTreeMap::from([("x".to_string(), Value::Integer(*x))]);
            if !s.is_empty() {
                row.insert("s".to_string(), Value::String(s.clone()));
            }
            (k.clone(), row)
        })
        .collect();
    if rebuilt != want {
        let first = rebuilt.iter().zip(&want).find(|(a, b)| a != b);
        panic!(
            "rebuilt {} rows, model {}; first difference {first:?}",
            rebuilt.len(),
            want.len()
        );
    }
    drop(t);
    db.close().await.unwrap();
}

/// A table of several partitions archives (each partition compacted, the
/// partitions kept in the archive's manifest), reads the same archived
/// and restored, and a read-only handle beside a writer that splits and
/// merges sees each state whole after a refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_tables_archive_restore_and_read_beside_a_writer() {
    let (dir, _clock, db, t) = fixture(TableOptions::default()).await;
    let mut rng = StdRng::seed_from_u64(3);
    let mut model = Model::new();
    for _ in 0..2000 {
        random_write(&t, &mut rng, &mut model).await;
    }
    let reader = Database::open_read_only(dir.path()).await.unwrap();
    for at in [100i64, 200] {
        assert!(t.split_partition(at).await.unwrap());
        for _ in 0..300 {
            random_write(&t, &mut rng, &mut model).await;
        }
        reader.refresh().await.unwrap();
        let seen = scan_all(&reader.table("t").unwrap(), GetRange::new()).await;
        assert_eq!(seen.len(), model.len(), "the reader after a split at {at}");
    }
    t.compact().await.unwrap();
    let parts = t.partitions().await.unwrap();
    assert!(t.merge_partitions(parts[0].id).await.unwrap());
    reader.refresh().await.unwrap();
    assert_eq!(reader.table("t").unwrap().partitions().await.unwrap().len(), 2);
    assert_eq!(
        scan_all(&reader.table("t").unwrap(), GetRange::new()).await.len(),
        model.len()
    );
    drop(reader);
    let sess = SqlSession::new(db.clone());
    check(&t, &sess, &model, "before the archive").await;
    let to = RemoteLocation::new(dir.path().join("archive").to_str().unwrap());
    db.archive_table("t", &to, &|_| {}).await.unwrap();
    let t = db.table("t").unwrap();
    assert_eq!(t.partitions().await.unwrap().len(), 2);
    check(&t, &sess, &model, "archived").await;
    db.restore_table("t", &|_| {}).await.unwrap();
    let t = db.table("t").unwrap();
    check(&t, &sess, &model, "restored").await;
    random_write(&t, &mut rng, &mut model).await;
    check(&t, &sess, &model, "written after the restore").await;
    drop(sess);
    drop(t);
    db.close().await.unwrap();
}
