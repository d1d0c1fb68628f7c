//! Export throughput against a loopback S3 server (s3s-fs on 127.0.0.1),
//! next to a plain copy of the same bytes to the same server.
//!
//! `cargo bench -j2 --bench export [-- ROWS]` (default 2M): loads ROWS
//! 7-column rows and compacts them, then runs `CELLAR_BENCH_ROUNDS`
//! rounds (default 3) of, in turn: an export to a local directory, an
//! export to S3, and a plain upload of the first export's files to S3
//! (`object_store` puts, no Cellar). Prints each run and the medians in
//! MB/s of exported bytes. Data goes under `$CELLAR_BENCH_DIR` (default:
//! the system's temporary directory).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "common/mod.rs"]
mod common;

use std::time::Instant;

use cellar::sql::{ExportOptions, export};
use cellar::*;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};

#[path = "../tests/it/s3_server.rs"]
mod s3_server;

fn main() {
    let rows = common::rows_arg(2_000_000);
    let rounds = common::rounds(3);
    // Credentials for the exports, set before any thread starts.
    // SAFETY: no other thread runs yet.
    unsafe { s3_server::export_credentials() };
    let dir = common::bench_dir();
    common::runtime().block_on(async {
        let db = Database::open(dir.path().join("db")).await.unwrap();
        let t = common::bench_table(&db).await;
        common::write_pipelined(&t, rows, common::row).await;
        t.compact().await.unwrap();
        let s3_root = dir.path().join("s3");
        std::fs::create_dir_all(s3_root.join("bench")).unwrap();
        let endpoint = s3_server::start(&s3_root).await;
        let plain = s3_server::client(&endpoint, "bench");
        let opts = ExportOptions::default();
        let (mut local, mut s3, mut copy) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let out = dir.path().join(format!("local{round}"));
            let start = Instant::now();
            let r = export(
                &db,
                "bench",
                &RemoteLocation::new(out.to_str().unwrap()),
                &opts,
                &|_, _| {},
            )
            .await
            .unwrap();
            let secs = start.elapsed().as_secs_f64();
            let mb = r.bytes() as f64 / 1e6;
            local.push(mb / secs);
            println!(
                "export to a local directory: {} rows, {} files, {mb:.1} MB in {secs:.2} s = {:.1} MB/s, {:.2}M rows/s",
                r.rows(),
                r.files.len(),
                mb / secs,
                r.rows() as f64 / secs / 1e6
            );

            let to = RemoteLocation {
                url: format!("s3://bench/export{round}"),
                endpoint: Some(endpoint.clone()),
                region: None,
                allow_http: true,
            };
            let start = Instant::now();
            let r = export(&db, "bench", &to, &opts, &|_, _| {}).await.unwrap();
            let secs = start.elapsed().as_secs_f64();
            s3.push(mb / secs);
            println!(
                "export to loopback S3: {mb:.1} MB in {secs:.2} s = {:.1} MB/s, {:.2}M rows/s",
                mb / secs,
                rows as f64 / secs / 1e6
            );
            assert_eq!(r.rows(), rows);

            // The same bytes, uploaded as they are.
            let files: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).collect();
            let start = Instant::now();
            for f in &files {
                let bytes = std::fs::read(f).unwrap();
                let name = f.file_name().unwrap().to_str().unwrap();
                plain
                    .put(&Path::from(format!("copy{round}/{name}")), PutPayload::from(bytes))
                    .await
                    .unwrap();
            }
            let secs = start.elapsed().as_secs_f64();
            copy.push(mb / secs);
            println!(
                "plain upload of the same files: {mb:.1} MB in {secs:.2} s = {:.1} MB/s",
                mb / secs
            );
        }
        let (l, s, c) = (common::median(local), common::median(s3), common::median(copy));
        println!(
            "medians over {rounds} rounds: export local {l:.1} MB/s, export S3 {s:.1} MB/s, plain upload {c:.1} MB/s \
             (export S3 / plain upload = {:.2})",
            s / c
        );
        drop(t);
        db.close().await.unwrap();
    });
}
