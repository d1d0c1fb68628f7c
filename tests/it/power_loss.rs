//! Power loss: what each durability setting promises after a power cut.
//!
//! The writer of the crash torture (`torture.rs`) runs with
//! `CELLAR_SYNC_LOG`, so every fsync it completes is logged: a file durable
//! up to a length, or a directory's entries. After the writer is killed
//! (at a random moment or at a crash point), the parent cuts the power on
//! the data directory: every file keeps what the log shows durable plus a
//! random prefix of the rest (all, none or part of the bytes not yet
//! synced, as a disk may have written some of them), and a file never
//! synced is deleted or cut to a random prefix. Then the database must
//! open, and hold a prefix of the writer's stream (never a hole, a
//! reordering or half a batch) that includes:
//! - with `Durability::Sync`, every acknowledged unit;
//! - with `Durability::IntervalMs(n)`, every unit acknowledged before the
//!   last WAL fsync (so at most the last interval is lost);
//! - with `Durability::None`, what was there before the run (the rest may
//!   be lost).
//!
//! A preallocated WAL file (`Durability::Sync`) keeps its length: what
//! was not synced reads as zeros, and a later part of it may have reached
//! the disk without an earlier one.
//!
//! A file's name survives only if its directory was fsynced after the file
//! appeared (its creation or first fsync is logged); otherwise the cut
//! deletes it. Not simulated: a deleted file coming back (the simulation
//! cannot restore its bytes), a new directory's own entry. `CELLAR_POWER_CYCLES=N` runs N cuts per setting.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use cellar::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::torture::{
    ModelTable, TABLES, WriterRun, apply, create_tables, run_writer, stored, unit, unit_ops, visible, writer_now,
};

/// The sync log: per file the length known durable and when it first
/// appeared (created or first fsynced), per directory when it was last
/// fsynced, and when the last WAL fsync completed (unix ns).
#[derive(Default)]
struct SyncLog {
    durable: BTreeMap<PathBuf, u64>,
    appeared: BTreeMap<PathBuf, u128>,
    dir_synced: BTreeMap<PathBuf, u128>,
    last_wal_sync: u128,
}

impl SyncLog {
    /// Whether the file's name survives a cut: its directory was fsynced
    /// after the file appeared (files marked by `settle` always do).
    fn name_durable(&self, f: &Path) -> bool {
        match (self.appeared.get(f), f.parent().and_then(|d| self.dir_synced.get(d))) {
            (Some(0), _) => true,
            (Some(a), Some(d)) => d >= a,
            _ => false,
        }
    }
}

fn read_log(path: &Path) -> SyncLog {
    let mut log = SyncLog::default();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for line in text.lines() {
        let f: Vec<&str> = line.splitn(3, ' ').collect();
        let ts: u128 = f[0].parse().unwrap();
        match (f[1], f[2]) {
            ("file", rest) => {
                let (len, p) = rest.split_once(' ').unwrap();
                let p = PathBuf::from(p);
                if p.parent().is_some_and(|d| d.ends_with("wal")) {
                    log.last_wal_sync = log.last_wal_sync.max(ts);
                }
                let e = log.durable.entry(p.clone()).or_default();
                *e = (*e).max(len.parse().unwrap());
                if ts == 0 {
                    // `settle`: on the disk after a cut, name and all.
                    log.appeared.insert(p, 0);
                } else {
                    log.appeared.entry(p).or_insert(ts);
                }
            }
            ("create", p) => {
                log.appeared.entry(PathBuf::from(p)).or_insert(ts);
            }
            ("dir", p) => {
                log.dir_synced.insert(PathBuf::from(p), ts);
            }
            _ => panic!("bad sync log line {line}"),
        }
    }
    log
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else if p.file_name().is_some_and(|n| n != "LOCK") {
            out.push(p);
        }
    }
    out
}

/// Marks every file as it is now as durable (after a cut, what is on the
/// disk is what the disk holds).
fn settle(dir: &Path, log: &Path) {
    let mut text = String::new();
    for f in files(dir) {
        let len = std::fs::metadata(&f).unwrap().len();
        text.push_str(&format!("0 file {len} {}\n", f.display()));
    }
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(log)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

/// Whether `f` is a preallocated WAL file (its magic says so).
fn preallocated_wal(f: &Path) -> bool {
    let mut head = [0u8; 8];
    f.extension().is_some_and(|e| e == "log")
        && std::fs::File::open(f)
            .and_then(|mut h| std::io::Read::read_exact(&mut h, &mut head))
            .is_ok()
        && head == *b"CWAL\x03\r\n\x1a"
}

/// Drops what the log does not show durable; returns the bytes dropped.
fn cut_power(dir: &Path, log: &SyncLog, rng: &mut StdRng) -> u64 {
    let mut dropped = 0;
    for f in files(dir) {
        let len = std::fs::metadata(&f).unwrap().len();
        if log.appeared.contains_key(&f) && !log.name_durable(&f) {
            // Created, but its directory not fsynced since: the name is gone.
            std::fs::remove_file(&f).unwrap();
            dropped += len;
            continue;
        }
        let keep = match log.durable.get(&f) {
            Some(&durable) if durable >= len => continue,
            Some(&durable) => durable + rng.random_range(0..=len - durable),
            None if rng.random_range(0..2) == 0 => {
                std::fs::remove_file(&f).unwrap();
                dropped += len;
                continue;
            }
            None => rng.random_range(0..=len),
        };
        let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
        if preallocated_wal(&f) {
            // Written in place over zeros: what did not reach the disk
            // reads as zeros, the length stays. The disk may also have
            // written a later page of the unsynced bytes and not an
            // earlier one (a record's payload without its header).
            // Disks write whole sectors: the bytes kept and the hole end
            // at sector boundaries.
            const SECTOR: u64 = 512;
            let durable = log.durable.get(&f).copied().unwrap_or(0);
            let keep = (keep / SECTOR * SECTOR).max(durable);
            use std::os::unix::fs::FileExt;
            file.write_all_at(&vec![0; (len - keep) as usize], keep).unwrap();
            let first_cut = (durable / SECTOR + 1) * SECTOR;
            if keep > first_cut && rng.random_range(0..2) == 0 {
                let hole_end = rng.random_range(first_cut / SECTOR..=keep / SECTOR) * SECTOR;
                file.write_all_at(&vec![0; (hole_end - durable) as usize], durable)
                    .unwrap();
            }
        } else {
            file.set_len(keep).unwrap();
        }
        dropped += len - keep;
    }
    dropped
}

/// The first `p` in `lower..=upper` such that the table equals the model
/// after units `start..p`; `model` is left at that point.
fn find_prefix(
    model: &mut ModelTable,
    got: &ModelTable,
    seed: u64,
    table: usize,
    base: i64,
    (start, lower, upper): (u64, u64, u64),
) -> Option<u64> {
    let mv = TABLES[table].1;
    for i in start..lower {
        apply(model, unit_ops(&unit(seed, table, i, base)), writer_now(base));
    }
    for p in lower..=upper {
        if visible(model, mv) == *got {
            return Some(p);
        }
        apply(model, unit_ops(&unit(seed, table, p, base)), writer_now(base));
    }
    None
}

async fn power_cuts(durability: &str, cycles: usize, seed: u64) -> (u64, u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log_path = dir.path().join("sync.log");
    let base = SystemClock.now_ms() - 12 * 3600 * 1000;
    // The parent's opens write nothing the cut could take (the index
    // rows its global index writes are synced at its close, and settled).
    let quiet = || DbOptions {
        auto_compaction: false,
        background_overlays: None,
        ..Default::default()
    };
    create_tables(&data, quiet(), true).await;
    settle(&data, &log_path);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut models = vec![ModelTable::new(); TABLES.len()];
    let mut starts = vec![0u64; TABLES.len()];
    let (mut acked_total, mut survived, mut dropped_bytes) = (0u64, 0u64, 0u64);
    // WAL files found preallocated at the cuts: with `sync`, every newest one.
    let mut preallocated = 0;
    for cycle in 0..cycles {
        let env = [
            ("CELLAR_SYNC_LOG", log_path.display().to_string()),
            ("CELLAR_TORTURE_DURABILITY", durability.to_string()),
        ];
        // (Stream logs, in the WAL's format, are preallocated whatever the
        // durability, and the parent's opens, with the default durability,
        // leave preallocated WAL files: only the writer's WAL files count.)
        let wal_dir = data.join("wal");
        let before = files(&wal_dir);
        let WriterRun {
            acked, ack_times, how, ..
        } = tokio::task::block_in_place(|| run_writer(&data, seed, base, &starts, &mut rng, &env));
        let log = read_log(&log_path);
        preallocated += files(&wal_dir)
            .iter()
            .filter(|f| !before.contains(f) && preallocated_wal(f))
            .count();
        dropped_bytes += cut_power(&data, &log, &mut rng);
        let db = Database::open_with(&data, quiet()).await.unwrap_or_else(|e| {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let name = e.message().split(' ').next().unwrap_or("").to_string();
            let dir_of = name.rsplit_once('/').map_or("", |(d, _)| d).to_string();
            let lines: Vec<&str> = log.lines().filter(|l| l.contains(dir_of.as_str())).collect();
            let lines = &lines[lines.len().saturating_sub(12)..];
            panic!("{durability}, cycle {cycle} ({how}): no open after a power cut: {e}\nsync log for it: {lines:?}")
        });
        for table in 0..TABLES.len() {
            let got = stored(&db, table).await;
            // What must have survived.
            let lower = match durability {
                "sync" => acked[table],
                "none" => starts[table],
                _ => ack_times[table]
                    .iter()
                    .filter(|(_, t)| *t <= log.last_wal_sync)
                    .map(|(i, _)| i + 1)
                    .max()
                    .unwrap_or(starts[table]),
            };
            let mut model = models[table].clone();
            let Some(p) = find_prefix(
                &mut model,
                &got,
                seed,
                table,
                base,
                (starts[table], lower, acked[table] + 1),
            ) else {
                panic!(
                    "{durability}, cycle {cycle} ({how}), table {}: after the power cut the rows are no prefix of \
                     the writes from unit {lower} (must survive) to {} (acknowledged + 1); CELLAR_POWER_SEED={seed}",
                    TABLES[table].0,
                    acked[table] + 1
                );
            };
            acked_total += acked[table] - starts[table];
            survived += p - starts[table];
            models[table] = model;
            starts[table] = p;
        }
        // The SQL table's indexes: the local one equals its table as
        // opened, the global one once caught up (its stream kept no write
        // the cut took from the WAL, and took the new ones after it).
        let local = db.check_index("sqlt_v").await.unwrap();
        assert!(
            local.is_exact(),
            "{durability}, cycle {cycle} ({how}): local index sqlt_v: {local:?}"
        );
        db.wait_for_index("sqlt_s", std::time::Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("{durability}, cycle {cycle} ({how}): global index sqlt_s: {e}"));
        let global = db.check_index("sqlt_s").await.unwrap();
        assert!(
            global.is_exact(),
            "{durability}, cycle {cycle} ({how}): global index sqlt_s: {global:?}"
        );
        db.close().await.unwrap();
        settle(&data, &log_path);
    }
    let report = cellar::check(&data, None).await.unwrap();
    assert_eq!(report.damaged(), 0, "{:?}", report.files);
    assert_eq!(
        preallocated >= cycles,
        durability == "sync",
        "{durability}: {preallocated} preallocated WAL files"
    );
    (acked_total, survived, dropped_bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_lose_only_what_the_durability_setting_allows() {
    let cycles: usize = std::env::var("CELLAR_POWER_CYCLES").map_or(3, |c| c.parse().unwrap());
    let seed: u64 = std::env::var("CELLAR_POWER_SEED").map_or_else(|_| rand::random(), |s| s.parse().unwrap());
    eprintln!("power cuts: {cycles} per setting, CELLAR_POWER_SEED={seed}");
    let mut seen = BTreeSet::new();
    for durability in ["sync", "interval:50", "none"] {
        let (acked, survived, dropped) = power_cuts(durability, cycles, seed).await;
        eprintln!(
            "power cuts ({durability}): {cycles} cuts, {acked} units acknowledged, {survived} survived, {dropped} unsynced bytes dropped"
        );
        seen.insert(dropped > 0);
    }
    // The cuts must have had something to drop.
    assert!(seen.contains(&true));
}
