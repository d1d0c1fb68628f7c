//! `cellar-compare`: Cellar side by side with other engines, on the same
//! data, in one run (see BENCHMARKS.md, "Side by side").
//!
//! The parent process runs each engine in a child process of its own (the
//! same binary, `engine NAME`), so that peak memory and bytes written are
//! each engine's alone, then writes the report. After the data set sizes
//! comes U's pass: upserts into a table of its own size, in a child per
//! engine that has keys.

#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod chart;
mod data;
mod engines;
mod report;
#[path = "../../common/sizes.rs"]
mod sizes;
mod workloads;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cellar-compare",
    about = "Cellar side by side with other engines on the same data"
)]
struct Cli {
    /// A short run (100k rows, fewer operations): under 5 minutes
    #[arg(long, global = true)]
    quick: bool,
    /// Data set sizes in rows (default 1000000,10000000; --quick: 100000;
    /// 0: none, to run U's pass alone)
    #[arg(long, value_delimiter = ',', global = true)]
    rows: Option<Vec<u64>>,
    /// Rows of the table U upserts into, in a pass of its own after the
    /// sizes (default 2000000; --quick: 200000; 0: no U)
    #[arg(long)]
    upsert_into: Option<u64>,
    /// Engines to run (default: all this build has)
    #[arg(long, value_delimiter = ',')]
    engines: Option<Vec<String>>,
    /// Where the report goes
    #[arg(long, default_value = "benches/results", global = true)]
    out: PathBuf,
    /// Where the engines' data goes (default: the system's temporary directory)
    #[arg(long, global = true)]
    scratch: Option<PathBuf>,
    /// The data set's seed
    #[arg(long, default_value_t = 42, global = true)]
    seed: u64,
    /// Seconds one load may take before it is stopped (default 600;
    /// --quick: 120); the report marks a stopped load
    #[arg(long, global = true)]
    load_cap: Option<u64>,
    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(Subcommand)]
enum Sub {
    /// (internal) Run every workload against one engine; print JSON
    Engine {
        name: String,
        /// U's pass (load --rows rows, then upsert) instead of the rest
        #[arg(long)]
        upserts: bool,
    },
    /// Write the report (markdown and charts) again from a results JSON
    /// file of an earlier run, into --out
    Report { json: PathBuf },
}

fn main() {
    let cli = Cli::parse();
    let rows = cli.rows.clone().unwrap_or(if cli.quick {
        vec![100_000]
    } else {
        vec![1_000_000, 10_000_000]
    });
    let scratch = cli.scratch.clone().unwrap_or_else(std::env::temp_dir);
    let mut sizes = workloads::Sizes::new(cli.quick);
    if let Some(secs) = cli.load_cap {
        sizes.load_cap = std::time::Duration::from_secs(secs);
    }
    match &cli.command {
        Some(Sub::Engine { name, upserts }) => {
            let data = data::DataSet::new(cli.seed, rows[0]);
            let run = if *upserts {
                workloads::run_upserts
            } else {
                workloads::run
            };
            match run(name, data, sizes, &scratch) {
                Ok(j) => println!("{j}"),
                Err(e) => {
                    eprintln!("cellar-compare: {name}: {e}");
                    std::process::exit(1);
                }
            }
        }
        Some(Sub::Report { json }) => {
            let all = std::fs::read(json)
                .map_err(|e| format!("{}: {e}", json.display()))
                .and_then(|b| {
                    serde_json::from_slice::<Vec<serde_json::Value>>(&b)
                        .map_err(|e| format!("{}: not a results file ({e})", json.display()))
                })
                .and_then(|all| report::write(&cli.out, &all, cli.quick));
            if let Err(e) = all {
                eprintln!("cellar-compare: report: {e}");
                std::process::exit(1);
            }
        }
        None => {
            let engines = cli
                .engines
                .clone()
                .unwrap_or_else(|| engines::names().into_iter().map(String::from).collect());
            let exe = match std::env::current_exe() {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("cellar-compare: cannot find its own executable: {e}");
                    std::process::exit(1);
                }
            };
            let upsert_into = cli.upsert_into.unwrap_or(if cli.quick { 200_000 } else { 2_000_000 });
            // (rows, engine, U's pass?) in the order they run.
            let mut jobs: Vec<(u64, &str, bool)> = Vec::new();
            for &n in rows.iter().filter(|&&n| n > 0) {
                jobs.extend(engines.iter().map(|e| (n, e.as_str(), false)));
            }
            if upsert_into > 0 {
                let keyed = engines.iter().filter(|e| !engines::is_files(e));
                jobs.extend(keyed.map(|e| (upsert_into, e.as_str(), true)));
            }
            let mut all = Vec::new();
            let mut reported = Ok(());
            for (n, name, upserts) in jobs {
                if upserts {
                    eprintln!("== {name}, U: {} upserts into {n} rows", sizes.upserts);
                } else {
                    eprintln!("== {name}, {n} rows");
                }
                let mut cmd = Command::new(&exe);
                cmd.args(["--rows", &n.to_string(), "--seed", &cli.seed.to_string()]);
                cmd.arg("--scratch").arg(&scratch);
                cmd.args(["--load-cap", &sizes.load_cap.as_secs().to_string()]);
                if cli.quick {
                    cmd.arg("--quick");
                }
                cmd.args(["engine", name]);
                if upserts {
                    cmd.arg("--upserts");
                }
                // The child draws its progress bars on our terminal.
                cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
                let out = match cmd.output() {
                    Ok(out) => out,
                    Err(e) => {
                        eprintln!("{name}: cannot start its process: {e}");
                        continue;
                    }
                };
                if !out.status.success() {
                    eprintln!("{name} failed ({}); see above", out.status);
                    continue;
                }
                match serde_json::from_slice::<serde_json::Value>(&out.stdout) {
                    Ok(j) => all.push(j),
                    Err(e) => eprintln!("{name}: unreadable results ({e})"),
                }
                // After every engine, so that a long run that is cut
                // short still leaves the figures it has; the last one is
                // the report.
                reported = report::write(&cli.out, &all, cli.quick);
                if let Err(e) = &reported {
                    eprintln!("cellar-compare: report: {e}");
                }
            }
            if all.is_empty() {
                eprintln!("cellar-compare: no engine ran to the end; no report");
                std::process::exit(1);
            }
            if reported.is_err() {
                std::process::exit(1);
            }
        }
    }
}
