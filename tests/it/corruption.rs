//! Damaged files are detected, never served as different data.
//!
//! Parquet's writer leaves page checksums out, and one in eight random
//! single-bit flips in a compacted segment's data used to change what a
//! scan printed, with no error. Segments now carry block checksums (and
//! their footer a checksum in the manifest), manifests and the catalog a
//! checksum of their own. Each flip below must either leave every read
//! exactly as before or make the read fail naming the file, and
//! `cellar::check` must report the file as damaged.

use std::path::{Path, PathBuf};

use cellar::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

async fn build(dir: &Path) -> PathBuf {
    let db = Database::open(dir).await.unwrap();
    db.create_table(
        TableSchema::new("t").pk("k", PkType::Integer).pk("s", PkType::String),
        TableOptions::default(),
    )
    .await
    .unwrap();
    let t = db.table("t").unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    for chunk in 0..20 {
        let batch: Vec<RowWrite> = (0..200)
            .map(|i| {
                let k = chunk * 200 + i;
                RowWrite::Put(
                    PutRow::new(PrimaryKey::new().with("k", k).with("s", format!("s{}", k % 7)))
                        .column("d", rng.random::<f64>())
                        .column("i", rng.random::<i64>())
                        .column("txt", format!("text {k} {}", rng.random::<u32>()))
                        .column("b", rng.random::<bool>()),
                )
            })
            .collect();
        for r in t.write_batch(batch).await.unwrap() {
            r.unwrap();
        }
    }
    t.compact().await.unwrap();
    drop(t);
    db.close().await.unwrap();
    // The segment the manifest names (the compaction's inputs may still
    // be on disk, named by none, until the next open deletes them).
    let segs: Vec<PathBuf> = cellar::check(dir, None)
        .await
        .unwrap()
        .files
        .into_iter()
        .filter(|f| f.path.ends_with(".parquet") && f.state == FileState::Ok)
        .map(|f| dir.join(f.path))
        .collect();
    assert_eq!(segs.len(), 1, "{segs:?}");
    segs[0].clone()
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Everything the row API and SQL read: the full scan (all versions), a
/// few point gets and an aggregate; or the first error.
async fn read_all(dir: &Path) -> Result<String> {
    let db = Database::open(dir).await?;
    let t = db.table("t")?;
    let mut out = String::new();
    let mut req = GetRange::new().options(ReadOptions {
        max_versions: Some(10),
        ..Default::default()
    });
    loop {
        let page = t.get_range(req.clone()).await?;
        for r in &page.rows {
            out.push_str(&format!("{r:?}\n"));
        }
        match page.next_start {
            Some(n) => req.start = Some(n.into()),
            None => break,
        }
    }
    for k in [0i64, 1, 777, 2024, 3999] {
        let row = t
            .get_row(GetRow::new(
                PrimaryKey::new().with("k", k).with("s", format!("s{}", k % 7)),
            ))
            .await?
            .row;
        out.push_str(&format!("{row:?}\n"));
    }
    let sql = cellar::sql::SqlSession::new(db.clone());
    let agg = sql
        .query("SELECT count(*), sum(i % 1000), sum(d), count(DISTINCT txt) FROM t")
        .await
        .map_err(|e| Error::new(ErrorKind::Corruption, e.to_string()))?;
    out.push_str(&format!("{agg:?}"));
    drop((sql, t));
    db.close().await?;
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_bits_in_a_segment_are_detected_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let seg = build(dir.path()).await;
    let good = std::fs::read(&seg).unwrap();
    let reference = read_all(dir.path()).await.unwrap();
    let rel = seg.strip_prefix(dir.path()).unwrap().to_str().unwrap().to_string();
    let clean = cellar::check(dir.path(), None).await.unwrap();
    assert_eq!(clean.damaged(), 0, "{:?}", clean.files);

    let mut rng = StdRng::seed_from_u64(11);
    let mut failed_reads = 0;
    for round in 0..40 {
        let bit = rng.random_range(0..good.len() * 8);
        let mut bad = good.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        std::fs::write(&seg, &bad).unwrap();
        match read_all(dir.path()).await {
            Ok(got) => assert!(
                got == reference,
                "round {round}: bit {bit} flipped changed what reads return, with no error"
            ),
            Err(e) => {
                failed_reads += 1;
                assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
                assert!(
                    e.to_string().contains(&rel) || e.to_string().contains("segments/"),
                    "bit {bit}: {e}"
                );
            }
        }
        let report = cellar::check(dir.path(), None).await.unwrap();
        let damaged: Vec<_> = report
            .files
            .iter()
            .filter(|f| matches!(f.state, FileState::Damaged(_)))
            .collect();
        assert_eq!(damaged.len(), 1, "bit {bit}: {:?}", report.files);
        assert_eq!(damaged[0].path, rel);
    }
    // Most flips land in pages the reads above decode.
    assert!(failed_reads >= 20, "only {failed_reads} of 40 flips made a read fail");

    // A truncated segment.
    std::fs::write(&seg, &good[..good.len() / 2]).unwrap();
    assert!(read_all(dir.path()).await.is_err());
    assert_eq!(cellar::check(dir.path(), Some("t")).await.unwrap().damaged(), 1);
    std::fs::write(&seg, &good).unwrap();
    assert_eq!(read_all(dir.path()).await.unwrap(), reference);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_manifests_catalogs_and_wal_files_refuse_to_open_and_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path()).await;
    // A write left in the WAL only.
    {
        let db = Database::open(dir.path()).await.unwrap();
        let t = db.table("t").unwrap();
        t.put_row(PutRow::new(PrimaryKey::new().with("k", -1).with("s", "w")).column("v", 1))
            .await
            .unwrap();
        drop(t);
        db.close().await.unwrap();
    }
    let files = walk(dir.path());
    let newest = |sub: &str| {
        files
            .iter()
            .filter(|p| p.to_str().unwrap().contains(sub))
            .max()
            .unwrap()
            .clone()
    };
    for victim in [newest("/manifest/"), newest("/catalog/"), newest("/wal/")] {
        let good = std::fs::read(&victim).unwrap();
        let mut rng = StdRng::seed_from_u64(5);
        for _ in 0..10 {
            let mut bad = good.clone();
            // Past the WAL magic and before the newest record's payload,
            // which a crash may legitimately tear: its first record.
            let at = if victim.to_str().unwrap().contains("/wal/") {
                rng.random_range(8..20)
            } else {
                rng.random_range(0..good.len())
            };
            bad[at] ^= 1 << rng.random_range(0..8);
            std::fs::write(&victim, &bad).unwrap();
            let name = victim.file_name().unwrap().to_str().unwrap();
            match Database::open(dir.path()).await {
                Ok(_) => panic!("{} with byte {at} damaged opened", victim.display()),
                Err(e) => assert!(e.to_string().contains(name), "{e}"),
            }
            let report = cellar::check(dir.path(), None).await.unwrap();
            assert!(
                report
                    .files
                    .iter()
                    .any(|f| f.path.ends_with(name) && matches!(f.state, FileState::Damaged(_))),
                "{:?}",
                report.files
            );
        }
        std::fs::write(&victim, &good).unwrap();
    }
    let db = Database::open(dir.path()).await.unwrap();
    let row = db
        .table("t")
        .unwrap()
        .get_row(GetRow::new(PrimaryKey::new().with("k", -1).with("s", "w")))
        .await
        .unwrap()
        .row;
    assert!(row.is_some());
}

/// A segment written before segment checksums is not decoded unless asked
/// (damage in it would reach Parquet's decoders unseen): reads fail naming
/// it and the way out, `check` lists it without decoding it (`--legacy`
/// decodes it), and a database opened with `legacy_segments` reads it and
/// rewrites it with checksums at a compaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_without_checksums_are_decoded_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let key = |k: i64| PrimaryKey::new().with("k", k);
    {
        let db = Database::open(dir.path()).await.unwrap();
        db.create_table(TableSchema::new("t").pk("k", PkType::Integer), TableOptions::default())
            .await
            .unwrap();
        let t = db.table("t").unwrap();
        let batch = (0..100).map(|k| PutRow::new(key(k)).column("v", k).into()).collect();
        t.write_batch(batch).await.unwrap();
        t.flush().await.unwrap();
        drop(t);
        db.close().await.unwrap();
    }
    // Make the newest manifest version one written before checksums: a
    // bare body whose segment entries have none.
    let manifests = dir.path().join("tables/1/manifest");
    let newest = std::fs::read_dir(&manifests)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .max()
        .unwrap();
    let file: serde_json::Value = serde_json::from_slice(&std::fs::read(&newest).unwrap()).unwrap();
    let mut body = file["body"].clone();
    let segments = body["segments"].as_array_mut().unwrap();
    assert_eq!(segments.len(), 1);
    for s in segments.iter_mut() {
        assert!(s.as_object_mut().unwrap().remove("checksum").is_some());
    }
    std::fs::write(&newest, serde_json::to_vec(&body).unwrap()).unwrap();
    let seg_path = body["segments"][0]["path"].as_str().unwrap().to_string();

    let get = |t: Table, k: i64| async move { t.get_row(GetRow::new(key(k))).await };
    let db = Database::open(dir.path()).await.unwrap();
    let e = get(db.table("t").unwrap(), 5).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corruption);
    for part in [
        seg_path.as_str(),
        "written before segment checksums",
        "legacy_segments",
        "--legacy",
    ] {
        assert!(e.message().contains(part), "{part}: {e}");
    }
    db.close().await.unwrap();

    let state = |report: &CheckReport| {
        report
            .files
            .iter()
            .find(|f| f.path == seg_path)
            .map(|f| f.state.clone())
            .unwrap()
    };
    let report = check(dir.path(), None).await.unwrap();
    assert!(
        matches!(state(&report), FileState::Note(n) if n.contains("not decoded")),
        "{report:?}"
    );
    let report = check_with(dir.path(), None, CheckOptions { legacy: true })
        .await
        .unwrap();
    assert!(
        matches!(state(&report), FileState::Note(n) if n.contains("decoded whole")),
        "{report:?}"
    );
    let (code, out, err) = crate::common::run_cli(dir.path(), &["check", "--legacy"], "");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("decoded whole"), "{out}");

    // Asked for: read, then rewritten with checksums by a compaction.
    let legacy = DbOptions {
        legacy_segments: true,
        ..Default::default()
    };
    let db = Database::open_with(dir.path(), legacy).await.unwrap();
    let row = get(db.table("t").unwrap(), 5).await.unwrap().row.unwrap();
    assert_eq!(row.latest("v"), Some(&Value::Integer(5)));
    db.table("t").unwrap().compact().await.unwrap();
    db.close().await.unwrap();
    let db = Database::open(dir.path()).await.unwrap();
    let row = get(db.table("t").unwrap(), 99).await.unwrap().row.unwrap();
    assert_eq!(row.latest("v"), Some(&Value::Integer(99)));
    db.close().await.unwrap();
    let report = check(dir.path(), None).await.unwrap();
    assert!(report.files.iter().all(|f| f.state == FileState::Ok), "{report:?}");
}
