//! `cellar import TABLE FILE`: a CSV, Parquet or NDJSON file into a table
//! or series (as SQL's `COPY t FROM 'file'`).
//!
//! Invariants: a progress count on stderr only on a terminal and never
//! with `--quiet`; stdout stays empty; the summary and each rejected line
//! (`line N: why`, the first 100) go to stderr; exit 0 when every line
//! became a row, 1 when some were rejected (the rest are written).

use std::io::IsTerminal;
use std::path::PathBuf;

use crate::Database;
use crate::error::Result;
use crate::sql::{ImportFormat, ImportOptions, MAX_REPORTED_REJECTS, import_file};

/// `cellar import`'s flags.
#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// Table or series name
    table: String,
    /// The file to read
    file: PathBuf,
    /// File format [default: from the extension: .csv/.tsv, .parquet, .ndjson/.jsonl/.json]
    #[arg(long, value_enum)]
    format: Option<ImportFormat>,
    /// CSV: no header line (the columns are the key columns, then the declared ones)
    #[arg(long)]
    no_header: bool,
    /// CSV: the field delimiter, one character [default: ',', tab for .tsv]
    #[arg(long, value_name = "C")]
    delimiter: Option<char>,
    /// No progress count
    #[arg(long)]
    quiet: bool,
}

pub(super) async fn import(db: &Database, args: ImportArgs) -> Result<i32> {
    let delimiter = match args.delimiter {
        None => None,
        Some(c) if c.is_ascii() => Some(c as u8),
        Some(c) => {
            return Err(crate::Error::param(format!(
                "--delimiter must be one ASCII character, not '{c}'"
            )));
        }
    };
    let opts = ImportOptions {
        format: args.format,
        header: !args.no_header,
        delimiter,
    };
    let bar = if args.quiet || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new_spinner();
        b.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {pos} rows written ({per_sec}, {elapsed})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        b.enable_steady_tick(std::time::Duration::from_millis(200));
        b
    };
    let progress = |n: u64| bar.set_position(n);
    let report = import_file(db, &args.table, &args.file, &opts, Some(&progress)).await;
    bar.finish_and_clear();
    let report = report?;
    for r in &report.rejects {
        eprintln!("line {}: {}", r.line, r.reason);
    }
    if report.rejected > report.rejects.len() as u64 {
        eprintln!(
            "... {} more rejected lines (the first {MAX_REPORTED_REJECTS} are listed)",
            report.rejected - report.rejects.len() as u64
        );
    }
    eprintln!(
        "cellar import: {} rows into {} in {:.2} s ({:.0} rows/s), {} lines rejected",
        report.rows,
        args.table,
        report.seconds,
        report.rows as f64 / report.seconds.max(1e-9),
        report.rejected
    );
    Ok(if report.rejected == 0 { 0 } else { 1 })
}
