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
    /// A series: its months from this one on (YYYY-MM), each under URL/NAME_YYYYMM
    #[arg(long, value_name = "YYYY-MM")]
    from_month: Option<String>,
    /// A series: its months up to this one, included (YYYY-MM)
    #[arg(long, value_name = "YYYY-MM")]
    to_month: Option<String>,
}

/// `cellar export SERIES --to URL`: each month (of `--from-month` ..
/// `--to-month`, oldest first) exported to `URL/NAME_YYYYMM`, a JSON line
/// each, `{"table":..,"location":..,"files":N,"rows":R,"bytes":B}`, once
/// that month is done. The first month that fails stops it (the months
/// before it are complete).
async fn export_series(db: &Database, series: &str, to: RemoteLocation, args: ExportArgs) -> Result<()> {
    let month = |flag: &str, v: &Option<String>| -> Result<Option<String>> {
        match v {
            None => Ok(None),
            Some(m) => {
                let ok = m.len() == 7
                    && m.as_bytes()[4] == b'-'
                    && m[..4].bytes().all(|b| b.is_ascii_digit())
                    && m[5..].parse::<u32>().is_ok_and(|n| (1..=12).contains(&n));
                if !ok {
                    return Err(Error::param(format!(
                        "{flag} '{m}' is not a month; give YYYY-MM, as 2024-01"
                    )));
                }
                Ok(Some(m.replace('-', "")))
            }
        }
    };
    let (from, until) = (
        month("--from-month", &args.from_month)?,
        month("--to-month", &args.to_month)?,
    );
    let months: Vec<String> = db
        .series(series)?
        .months()
        .into_iter()
        .filter(|m| {
            let yyyymm = m.rsplit('_').next().unwrap_or("");
            from.as_deref().is_none_or(|f| yyyymm >= f) && until.as_deref().is_none_or(|u| yyyymm <= u)
        })
        .collect();
    if months.is_empty() {
        return Err(Error::param(format!(
            "series '{series}' has no months in the range asked for"
        )));
    }
    let base = to.url.trim_end_matches('/').to_string();
    for m in months {
        let mut loc = to.clone();
        loc.url = format!("{base}/{m}");
        let one = ExportArgs {
            versions: args.versions,
            format: args.format.clone(),
            max_file_mb: args.max_file_mb,
            quiet: args.quiet,
            from_month: None,
            to_month: None,
        };
        export_table(db, &m, loc, one, Some(&m)).await?;
    }
    Ok(())
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
    if db.series(table).is_ok() {
        return export_series(db, table, to, args).await;
    }
    if args.from_month.is_some() || args.to_month.is_some() {
        return Err(Error::param(format!(
            "--from-month and --to-month pick months of a series; '{table}' is a table"
        )));
    }
    export_table(db, table, to, args, None).await
}

/// One table's export; `named`: the table's name goes in the JSON line.
async fn export_table(
    db: &Database,
    table: &str,
    to: RemoteLocation,
    args: ExportArgs,
    named: Option<&str>,
) -> Result<()> {
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
    let mut line = serde_json::json!({
        "location": to.url,
        "files": report.files.len(),
        "rows": report.rows(),
        "bytes": report.bytes(),
    });
    if let Some(t) = named {
        line["table"] = serde_json::json!(t);
    }
    writeln!(super::stdout::stdout(), "{line}").map_err(|e| Error::io("write to stdout", e))
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
    writeln!(super::stdout::stdout(), "{line}").map_err(|e| Error::io("write to stdout", e))
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
    let mut out = super::stdout::stdout();
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
