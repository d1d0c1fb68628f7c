//! Archived tables against a loopback S3 server (s3s-fs on 127.0.0.1):
//! archive and restore throughput next to a plain copy of the same bytes,
//! the GROUP BY of the demo over the archived table next to the same
//! table kept local, and point gets on the archived table.
//!
//! `cargo bench -j2 --bench archive [-- ROWS]` (default 10M): loads ROWS
//! 7-column rows into two tables, `local` and `month`, and compacts both.
//! Then `CELLAR_BENCH_ROUNDS` rounds (default 3) of: archive `month` to a
//! fresh prefix, a plain multipart upload of its segment files to the same
//! server, and (but in the last round) a restore. Then interleaved runs of
//! the GROUP BY on each table, and GetRow / SQL point lookups on the
//! archived one with its metadata cached. Prints each run and the medians.
//! Data goes under `$CELLAR_BENCH_DIR` (default: the system's temporary
//! directory).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use cellar::*;
use object_store::path::Path;
use object_store::{ObjectStoreExt, WriteMultipart};

#[path = "../tests/it/s3_server.rs"]
mod s3_server;

/// The demo's GROUP BY (queries/demo/02_spend_per_seller.sql).
const GROUP_BY: &str = "SELECT seller_id, count(*) AS orders, round(sum(amount), 2) AS total FROM {t} GROUP BY seller_id ORDER BY total DESC";

async fn timed_query(ctx: &datafusion::prelude::SessionContext, sql: &str) -> (Duration, usize) {
    let start = Instant::now();
    let b = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    (start.elapsed(), b.iter().map(|b| b.num_rows()).sum())
}

fn main() {
    let rows = common::rows_arg(10_000_000);
    let rounds = common::rounds(3);
    // Credentials for the archive, set before any thread starts.
    // SAFETY: no other thread runs yet.
    unsafe { s3_server::export_credentials() };
    let dir = common::bench_dir();
    common::runtime().block_on(async {
        let db = Database::open(dir.path().join("db")).await.unwrap();
        for name in ["local", "month"] {
            let schema = TableSchema {
                name: name.to_string(),
                ..common::schema()
            };
            db.create_table(schema, TableOptions::default()).await.unwrap();
            let t = db.table(name).unwrap();
            common::write_pipelined(&t, rows, common::row).await;
            t.compact().await.unwrap();
        }
        let s3_root = dir.path().join("s3");
        std::fs::create_dir_all(s3_root.join("bench")).unwrap();
        let endpoint = s3_server::start(&s3_root).await;
        let plain = s3_server::client(&endpoint, "bench");
        let month = db.table("month").unwrap();
        let stats = month.stats();
        let mb = stats.segment_bytes as f64 / 1e6;
        println!(
            "{rows} rows per table; `month`: {} segments, {mb:.1} MB",
            stats.segments
        );
        let (mut archive, mut copy, mut restore) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            // A plain copy of the segment files: read, then one multipart
            // upload each (what the archive does, without checks).
            let seg_dir = dir.path().join("db/tables/2/segments");
            let start = Instant::now();
            for f in std::fs::read_dir(&seg_dir).unwrap() {
                let f = f.unwrap();
                let bytes = std::fs::read(f.path()).unwrap();
                let to = Path::from(format!("copy{round}/{}", f.file_name().to_string_lossy()));
                let mut w = WriteMultipart::new_with_chunk_size(plain.put_multipart(&to).await.unwrap(), 8 << 20);
                for part in bytes.chunks(8 << 20) {
                    w.wait_for_capacity(2).await.unwrap();
                    w.write(part);
                }
                w.finish().await.unwrap();
            }
            let c = mb / start.elapsed().as_secs_f64();

            let to = RemoteLocation {
                url: format!("s3://bench/archive{round}"),
                endpoint: Some(endpoint.clone()),
                region: None,
                allow_http: true,
            };
            let start = Instant::now();
            let r = db.archive_table("month", &to, &|_| {}).await.unwrap();
            let a = r.bytes as f64 / 1e6 / start.elapsed().as_secs_f64();
            print!(
                "round {round}: archive {a:.0} MB/s ({} files), plain copy {c:.0} MB/s",
                r.files
            );
            archive.push(a);
            copy.push(c);
            if round + 1 < rounds {
                let start = Instant::now();
                db.restore_table("month", &|_| {}).await.unwrap();
                let x = mb / start.elapsed().as_secs_f64();
                print!(", restore {x:.0} MB/s");
                restore.push(x);
            }
            println!();
        }
        println!(
            "median: archive {:.0} MB/s, plain copy {:.0} MB/s (archive / copy {:.2}){}",
            common::median(archive.clone()),
            common::median(copy.clone()),
            common::median(archive) / common::median(copy),
            if restore.is_empty() {
                String::new()
            } else {
                format!(", restore {:.0} MB/s", common::median(restore))
            }
        );

        // The demo's GROUP BY, local and archived, interleaved.
        let ctx = cellar::sql::session_context(&db);
        let (mut on_local, mut on_archive) = (Vec::new(), Vec::new());
        for run in 0..7 {
            let (l, ln) = timed_query(&ctx, &GROUP_BY.replace("{t}", "local")).await;
            let (a, an) = timed_query(&ctx, &GROUP_BY.replace("{t}", "month")).await;
            assert_eq!(ln, an);
            println!(
                "GROUP BY run {run}: local {:.1} ms, archived {:.1} ms",
                l.as_secs_f64() * 1e3,
                a.as_secs_f64() * 1e3
            );
            on_local.push(l.as_secs_f64());
            on_archive.push(a.as_secs_f64());
        }
        let (l, a) = (common::median(on_local), common::median(on_archive));
        println!(
            "GROUP BY median: local {:.1} ms, archived {:.1} ms (ratio {:.2})",
            l * 1e3,
            a * 1e3,
            a / l
        );

        // Point gets on the archived table (metadata cached by the runs above).
        let key = |k: u64| {
            let i = (k * 7_919_993) % rows;
            PrimaryKey::new()
                .with("card_id", (i % 100_000) as i64)
                .with("order_no", format!("o{i:010}"))
        };
        for k in 0..20 {
            month.get_row(GetRow::new(key(k))).await.unwrap().row.unwrap();
        }
        let mut lat = Vec::new();
        for k in 0..500u64 {
            let start = Instant::now();
            month.get_row(GetRow::new(key(k * 13 + 1))).await.unwrap().row.unwrap();
            lat.push(start.elapsed());
        }
        lat.sort();
        println!(
            "GetRow on the archived table: p50 {:.2} ms, p99 {:.2} ms",
            lat[lat.len() / 2].as_secs_f64() * 1e3,
            lat[lat.len() * 99 / 100].as_secs_f64() * 1e3
        );
        let mut lat = Vec::new();
        for k in 0..200u64 {
            let i = (k * 7_919_993 + 5) % rows;
            let sql = format!(
                "SELECT * FROM month WHERE card_id = {} AND order_no = 'o{i:010}'",
                i % 100_000
            );
            let (d, n) = timed_query(&ctx, &sql).await;
            assert_eq!(n, 1);
            lat.push(d);
        }
        lat.sort();
        println!(
            "SQL point lookup on the archived table: p50 {:.2} ms, p99 {:.2} ms",
            lat[lat.len() / 2].as_secs_f64() * 1e3,
            lat[lat.len() * 99 / 100].as_secs_f64() * 1e3
        );
        drop((ctx, month));
        db.close().await.unwrap();
    });
}
