//! Commands that move a table's data out of the data directory and back:
//! `export`, `archive`, `restore`, `maintain`.
//!
//! Invariants: a progress bar is drawn only on a terminal and never with
//! `--quiet`; the one line on stdout (JSON) is printed only once the work
//! is complete.

use std::io::{IsTerminal, Write};

use clap::Args;

use crate::Database;
use crate::error::{Error, Result};
use crate::remote::RemoteLocation;
use crate::sql::{ExportOptions, ExportReport};
use crate::{TransferProgress, TransferReport};

/// Where a remote location's server is (S3); credentials come from the
/// `AWS_*` environment variables.
#[derive(Args, Debug)]
pub struct RemoteArgs {
    /// S3 endpoint URL (a local or non-AWS server); default: AWS or $AWS_ENDPOINT
    #[arg(long)]
    endpoint: Option<String>,
    /// S3 region; default: $AWS_REGION, else us-east-1
    #[arg(long)]
    region: Option<String>,
    /// Allow an http:// endpoint
    #[arg(long)]
    allow_http: bool,
}

impl RemoteArgs {
    /// The location of `url` with these settings.
    pub fn location(&self, url: &str) -> RemoteLocation {
        RemoteLocation {
            url: url.to_string(),
            endpoint: self.endpoint.clone(),
            region: self.region.clone(),
            allow_http: self.allow_http,
        }
    }
}

/// `cellar export`'s flags besides the table and the location.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// One row per kept version (as cellar_versions shows them)
    #[arg(long)]
    versions: bool,
    /// File format (parquet)
    #[arg(long, default_value = "parquet")]
    format: String,
    /// Start a new file past this many MiB
    #[arg(long, default_value_t = 128)]
    max_file_mb: usize,
    /// No progress bar
    #[arg(long)]
    quiet: bool,
}

/// A progress bar on stderr over `total` rows (a spinner when it is not
/// known), or nothing when stderr is not a terminal or `quiet` is set.
fn bar(quiet: bool, total: Option<u64>) -> Option<indicatif::ProgressBar> {
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let (p, template) = match total {
        Some(n) => (
            indicatif::ProgressBar::new(n),
            "{bar:30} {pos}/{len} rows ({per_sec}, ETA {eta}) {msg}",
        ),
        None => (
            indicatif::ProgressBar::new_spinner(),
            "{spinner} {pos} rows ({per_sec}) {msg}",
        ),
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        p.set_style(style);
    }
    p.enable_steady_tick(std::time::Duration::from_millis(200));
    Some(p)
}

/// The rows an export of `table` will write, for the progress bar's ETA
/// (`None` when counting fails: the bar is then a spinner).
async fn rows_to_export(db: &Database, table: &str, versions: bool) -> Option<u64> {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::Int64Type;
    let sql = format!("SELECT count(*) FROM ({})", crate::sql::export_query(table, versions));
    let ctx = crate::sql::session_context(db);
    let batches = ctx.sql(&sql).await.ok()?.collect().await.ok()?;
    let n = batches.first()?.column(0).as_primitive_opt::<Int64Type>()?.value(0);
    u64::try_from(n).ok()
}

/// `cellar export TABLE --to URL`: prints
/// `{"location":...,"files":N,"rows":R,"bytes":B}` once done.
pub(super) async fn export(db: &Database, table: &str, to: RemoteLocation, args: ExportArgs) -> Result<()> {
    if args.format != "parquet" {
        return Err(Error::param(format!(
            "--format {} is not supported; accepted: parquet",
            args.format
        )));
    }
    if args.max_file_mb == 0 {
        return Err(Error::param("--max-file-mb must be at least 1"));
    }
    let options = ExportOptions {
        versions: args.versions,
        max_file_bytes: args.max_file_mb << 20,
    };
    let shown = !args.quiet && std::io::stderr().is_terminal();
    let total = if shown {
        rows_to_export(db, table, args.versions).await
    } else {
        None
    };
    let bar = bar(args.quiet, total);
    let progress = |r: &ExportReport, rows: u64| {
        if let Some(p) = &bar {
            p.set_position(rows);
            p.set_message(format!(
                "{} files, {:.1} MiB stored",
                r.files.len(),
                r.bytes() as f64 / (1 << 20) as f64
            ));
        }
    };
    let result = crate::sql::export(db, table, &to, &options, &progress).await;
    if let Some(p) = &bar {
        p.finish_and_clear();
    }
    let report = result?;
    let line = serde_json::json!({
        "location": to.url,
        "files": report.files.len(),
        "rows": report.rows(),
        "bytes": report.bytes(),
    });
    writeln!(std::io::stdout().lock(), "{line}").map_err(|e| Error::io("write to stdout", e))
}

/// A progress bar on stderr over `total` bytes, or nothing when stderr is
/// not a terminal or `quiet` is set.
fn bytes_bar(quiet: bool) -> Option<indicatif::ProgressBar> {
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let p = indicatif::ProgressBar::new(0);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{bar:30} {bytes}/{total_bytes} ({bytes_per_sec}, ETA {eta}) {msg}")
    {
        p.set_style(style);
    }
    p.enable_steady_tick(std::time::Duration::from_millis(200));
    Some(p)
}

/// Shows an archive's or a restore's progress on the bar.
fn show(bar: &Option<indicatif::ProgressBar>, p: &TransferProgress) {
    if let Some(b) = bar {
        b.set_length(p.bytes);
        b.set_position(p.bytes_done);
        b.set_message(format!("{}/{} files", p.files_done, p.files));
    }
}

/// Clears the bar, then prints the report as one JSON line.
fn report(table: &str, bar: Option<indicatif::ProgressBar>, result: Result<TransferReport>) -> Result<()> {
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let r = result?;
    let line = serde_json::json!({
        "table": table,
        "location": r.location,
        "files": r.files,
        "bytes": r.bytes,
        "reused_files": r.reused_files,
        "already_done": r.already_done,
    });
    writeln!(std::io::stdout().lock(), "{line}").map_err(|e| Error::io("write to stdout", e))
}

/// `cellar archive TABLE --to URL`: prints
/// `{"table":..,"location":..,"files":N,"bytes":B,"reused_files":R,"already_done":false}`.
pub(super) async fn archive(db: &Database, table: &str, to: RemoteLocation, quiet: bool) -> Result<()> {
    let bar = bytes_bar(quiet);
    let result = db.archive_table(table, &to, &|p| show(&bar, p)).await;
    report(table, bar, result)
}

/// `cellar restore TABLE`: prints the same line as `archive`.
pub(super) async fn restore(db: &Database, table: &str, quiet: bool) -> Result<()> {
    let bar = bytes_bar(quiet);
    let result = db.restore_table(table, &|p| show(&bar, p)).await;
    report(table, bar, result)
}

/// `cellar maintain`: one line per step,
/// `{"series":..,"table":..,"action":"archive"|"drop","ok":true}` or with
/// `"ok":false,"error":{"kind":..,"message":..}`; exit 1 when one failed.
pub(super) async fn maintain(db: &Database, quiet: bool) -> Result<i32> {
    let bar = bytes_bar(quiet);
    let result = db
        .maintain(&|table, p| {
            show(&bar, p);
            if let Some(b) = &bar {
                b.set_message(format!("{table}: {}/{} files", p.files_done, p.files));
            }
        })
        .await;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let mut out = std::io::stdout().lock();
    let mut failed = false;
    for s in result? {
        let mut line = serde_json::json!({
            "series": s.series,
            "table": s.table,
            "action": s.action.as_str(),
            "ok": s.error.is_none(),
        });
        if let Some(e) = &s.error {
            failed = true;
            line["error"] = serde_json::json!({"kind": e.kind().as_str(), "message": e.message()});
        }
        writeln!(out, "{line}").map_err(|e| Error::io("write to stdout", e))?;
    }
    Ok(if failed { 1 } else { 0 })
}
