//! The differential stream test: a stream of writes gives the same
//! results whether it is sent one write at a time or pipelined (many
//! batches in flight), and both equal a sequential reference.
//!
//! Each stream is a few dozen random PutRow / UpdateRow / DeleteRow writes
//! over three hot keys (and in some streams new keys in ascending order), with row and column conditions, increments
//! (overflowing ones too), explicit versions (some outside the version
//! window) and every return type. The same stream goes to two tables of
//! one database: to `pipelined` in random batches of 1-5 writes, all queued
//! before the first is awaited; to `sequential` one write at a time. Every
//! line's result (error kind, capacity units, returned row) must be equal
//! on both, its error kind must be the reference's (`model::Model`), and
//! after each stream both tables must hold the reference's rows. Between
//! streams the tables are flushed, compacted or reopened now and then;
//! memtables of 4 KiB make flushes run in the background during a stream,
//! so a checked write's row often moves to a segment between its check and
//! its commit. The pipelined table's range partitions are split and merged
//! while a stream's batches are in flight (a split at card 1 puts the hot
//! keys in two partitions), so checked writes also cross layout changes
//! between their check and their commit.
//!
//! `CELLAR_DIFF_STREAMS=N` runs more streams (default 2000);
//! `CELLAR_DIFF_SEED` another seed.

use std::sync::Arc;

use cellar::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::*;
use crate::model::{Key, Model, key_of, random_write, with_extras};

const HOT: [(i64, &str); 3] = [(0, ""), (0, "a"), (1, "b\0")];

fn returning(w: RowWrite, r: ReturnType) -> RowWrite {
    match w {
        RowWrite::Put(p) => p.returning(r).into(),
        RowWrite::Update(u) => u.returning(r).into(),
        RowWrite::Delete(d) => d.returning(r).into(),
    }
}

/// A stream of writes. With `ascending`, one stream in three writes
/// mostly new keys in ascending order (`fresh` counts them), above the hot
/// ones: a flush then holds mostly keys above the table's highest and a
/// few hot ones below, and is cut into pieces (`flush::pieces`) that
/// checked writes read their rows from.
fn random_stream(rng: &mut StdRng, now: i64, ascending: bool, fresh: &mut i64) -> Vec<(Key, RowWrite)> {
    let ascending = ascending && rng.random_range(0..3) == 0;
    (0..rng.random_range(1..40))
        .map(|_| {
            let key: Key = if ascending && rng.random_range(0..8) > 0 {
                *fresh += 1;
                (1 + *fresh, "f".to_string())
            } else {
                let (card, order) = HOT[rng.random_range(0..HOT.len())];
                (card, order.to_string())
            };
            let w = random_write(rng, now, &key);
            let w = with_extras(rng, w);
            let r = [ReturnType::None, ReturnType::PrimaryKey, ReturnType::AfterModify][rng.random_range(0..3)];
            (key, returning(w, r))
        })
        .collect()
}

fn options(clock: &Arc<ManualClock>, durability: Durability) -> DbOptions {
    DbOptions {
        row_group_rows: 16,
        page_rows: 4,
        page_bytes: 16,
        // Compactions run where the test says: the reference drops hidden
        // versions only at a full compaction.
        auto_compaction: false,
        ..DbOptions::default()
            .clock(clock.clone())
            .memtable_bytes(4 << 10)
            .durability(durability)
    }
}

async fn create(db: &Database, name: &str, options: TableOptions) {
    db.create_table(
        TableSchema::new(name)
            .pk("card", PkType::Integer)
            .pk("order", PkType::String),
        options,
    )
    .await
    .unwrap();
}

async fn rows(t: &Table) -> Vec<(Key, Vec<(String, Vec<Cell>)>)> {
    let all = GetRange::new().options(ReadOptions {
        max_versions: Some(10),
        ..Default::default()
    });
    scan_all(t, all)
        .await
        .iter()
        .map(|r| (key_of(r), r.columns.clone()))
        .collect()
}

fn outcome(r: &Result<WriteResult>) -> Result<&WriteResult, ErrorKind> {
    r.as_ref().map_err(|e| e.kind())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_streams_equal_one_at_a_time_and_the_reference() {
    // Order, not durability, is under test here: no fsync per write.
    run(Durability::None, 2000, false).await;
}

/// The same with every group fsynced: preallocated WAL files written in
/// place, cut back as memtables freeze and at each close, replayed at the
/// reopens; with streams of ascending new keys, whose flushes are cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_streams_equal_one_at_a_time_with_synced_preallocated_wal() {
    run(Durability::Sync, 150, true).await;
}

async fn run(durability: Durability, default_streams: u64, ascending: bool) {
    let env = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    let streams = env("CELLAR_DIFF_STREAMS").unwrap_or(default_streams);
    let seed = env("CELLAR_DIFF_SEED").unwrap_or(20261125);
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let mut db = Database::open_with(dir.path(), options(&clock, durability))
        .await
        .unwrap();
    let table_options = TableOptions {
        max_versions: 3,
        ..Default::default()
    };
    create(&db, "pipelined", table_options).await;
    create(&db, "sequential", table_options).await;
    let mut model = Model {
        opts: table_options,
        ..Default::default()
    };
    let (mut checked, mut lines, mut fresh) = (0usize, 0usize, 0i64);
    for stream in 0..streams {
        let now = clock.now_ms();
        let writes = random_stream(&mut rng, now, ascending, &mut fresh);
        let want: Vec<Option<ErrorKind>> = writes.iter().map(|(k, w)| model.apply(now, k, w)).collect();
        let (p, s) = (db.table("pipelined").unwrap(), db.table("sequential").unwrap());
        let mut queued = Vec::new();
        let mut i = 0;
        while i < writes.len() {
            let n = rng.random_range(1..=5).min(writes.len() - i);
            let batch = writes[i..i + n].iter().map(|(_, w)| w.clone()).collect();
            queued.push(p.enqueue_batch(batch).await.unwrap());
            i += n;
        }
        // A split or merge of the pipelined table beside its queued writes.
        let layout = (rng.random_range(0..4) == 0).then(|| {
            let (p, at) = (p.clone(), rng.random_range(1..3i64));
            tokio::spawn(async move {
                let parts = p.partitions().await.unwrap();
                if parts.len() < 3 {
                    p.split_partition(at).await.unwrap();
                } else if let Err(e) = p.merge_partitions(parts[0].id).await {
                    assert!(e.to_string().contains("share segments"), "{e}");
                }
            })
        });
        let mut pipelined = Vec::new();
        for q in queued {
            pipelined.extend(q.durable().await.unwrap());
        }
        if let Some(l) = layout {
            l.await.unwrap();
        }
        let mut sequential = Vec::new();
        for (_, w) in &writes {
            sequential.push(s.write(w.clone()).await);
        }
        for (i, (key, w)) in writes.iter().enumerate() {
            let what = format!(
                "seed {seed} stream {stream} line {i} {key:?}: {w:?}\npipelined {:?}\nsequential {:?}",
                pipelined[i], sequential[i]
            );
            assert_eq!(outcome(&sequential[i]).err(), want[i], "reference: {what}");
            assert_eq!(outcome(&pipelined[i]), outcome(&sequential[i]), "{what}");
            checked += (!w.condition().is_ignore()) as usize;
        }
        lines += writes.len();
        let want_rows: Vec<_> = model
            .rows
            .iter()
            .filter_map(|(k, r)| model.visible(now, r).map(|c| (k.clone(), c)))
            .collect();
        assert_eq!(
            rows(&s).await,
            want_rows,
            "seed {seed} stream {stream}: sequential table"
        );
        assert_eq!(
            rows(&p).await,
            want_rows,
            "seed {seed} stream {stream}: pipelined table"
        );
        match rng.random_range(0..40) {
            0..=3 => {
                p.flush().await.unwrap();
                s.flush().await.unwrap();
            }
            4 => {
                p.compact().await.unwrap();
                s.compact().await.unwrap();
                model.compact(now);
            }
            5 => {
                drop((p, s));
                db.close().await.unwrap();
                db = Database::open_with(dir.path(), options(&clock, durability))
                    .await
                    .unwrap();
            }
            _ => {}
        }
        clock.advance(rng.random_range(0..1500));
    }
    let parts = db.table("pipelined").unwrap().partitions().await.unwrap();
    assert!(
        parts.len() > 1 || streams < 100,
        "the pipelined table was split: {parts:?}"
    );
    eprintln!(
        "{streams} streams, {lines} writes ({checked} with a condition), seed {seed}; pipelined table in {} \
         partitions",
        parts.len()
    );
}
