//! The `cellar` command line: table management and the data commands.
//!
//! Output formats are a public interface (scripts depend on them); see the
//! README ("Command line"). Usage and parameter errors exit 2, a damaged
//! file found by `cellar check` exits 3, other errors exit 1.
//!
//! Invariant: flags and output formats are only ever extended, never
//! changed.

mod demo;
mod import;
pub mod json;
mod series;
mod sql;
mod stdout;
mod transfer;
mod write;

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use serde_json::{Value as Json, json};

use crate::Database;
use crate::error::{Error, Result};
use crate::model::api::{GetRange, GetRow};
use crate::model::row::ReadOptions;
use crate::model::schema::{OptionsUpdate, TableOptions, TableSchema};
use crate::model::types::PkType;

#[derive(Parser, Debug)]
#[command(
    name = "cellar",
    version,
    about = "Cellar: a wide-column table engine (Tablestore data model)"
)]
/// The `cellar` command line, as parsed.
pub struct Cli {
    /// Data directory [default: $CELLAR_DATA, else ./cellar-data]
    #[arg(long, global = true)]
    pub data: Option<PathBuf>,
    /// Decode segments written before segment checksums (unchecked); `compact`
    /// with it rewrites a table's old segments with checksums
    #[arg(long, global = true)]
    pub legacy_segments: bool,
    /// Memory the database may use: memtables, write buffer, mapped
    /// segment pages, archive cache (`DbOptions::memory_budget`), as
    /// 512MiB, 2GiB or 1GB [default: 512MiB]
    #[arg(long, global = true, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Open the data directory for reading only, beside the process that
    /// holds it for writing: takes no lock, writes nothing, and sees what
    /// was written when each command or statement began; changes are refused
    #[arg(long, global = true)]
    pub read_only: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Table option flags (`create`, `alter`).
#[derive(Args, Debug, Default)]
pub struct OptionArgs {
    /// Time to live in seconds (-1: never expire)
    #[arg(long, allow_negative_numbers = true)]
    ttl: Option<i64>,
    /// Versions kept per cell (>= 1)
    #[arg(long)]
    max_versions: Option<u32>,
    /// How far a written version may be from now, in seconds (> 0)
    #[arg(long, allow_negative_numbers = true)]
    max_version_offset: Option<i64>,
    /// Whether UpdateRow is allowed
    #[arg(long, value_parser = parse_bool)]
    allow_update: Option<bool>,
}

impl OptionArgs {
    fn update(&self) -> OptionsUpdate {
        OptionsUpdate {
            ttl_secs: self.ttl,
            max_versions: self.max_versions,
            max_version_offset_secs: self.max_version_offset,
            allow_update: self.allow_update,
        }
    }
}

fn parse_bool(s: &str) -> std::result::Result<bool, String> {
    match s {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("'{s}' is not true or false")),
    }
}

/// Read flags (`get`, `scan`).
#[derive(Args, Debug)]
pub struct ReadArgs {
    /// Columns to return, comma-separated (default: all)
    #[arg(long, value_delimiter = ',')]
    columns: Option<Vec<String>>,
    /// Newest versions per cell to return (default 1)
    #[arg(long, conflicts_with = "time_range")]
    max_versions: Option<u32>,
    /// Versions in [START_MS, END_MS) only
    #[arg(long, value_name = "START_MS,END_MS", allow_hyphen_values = true)]
    time_range: Option<String>,
    /// Only rows that pass FILTER_JSON: {"column":C,"op":"=","value":V,"pass_if_missing":true,
    /// "latest_version_only":true}, {"and":[F,...]}, {"or":[F,...]}, {"not":F},
    /// {"column_page":{"offset":N,"limit":N}}
    #[arg(long, value_name = "FILTER_JSON")]
    filter: Option<String>,
    /// First column to return (inclusive), to page through a wide row
    #[arg(long)]
    start_column: Option<String>,
    /// Column to stop before (exclusive)
    #[arg(long)]
    end_column: Option<String>,
    /// Print the capacity units consumed on stderr: {"cu":{"read":R,"write":W}}
    #[arg(long)]
    cu: bool,
}

impl ReadArgs {
    fn options(&self) -> Result<ReadOptions> {
        let time_range = match &self.time_range {
            None => None,
            Some(s) => {
                let parts: Vec<_> = s.split(',').map(|p| p.trim().parse::<i64>()).collect();
                match parts.as_slice() {
                    [Ok(a), Ok(b)] => Some((*a, *b)),
                    _ => {
                        return Err(Error::param(format!(
                            "--time-range '{s}' must be START_MS,END_MS (two integers, milliseconds)"
                        )));
                    }
                }
            }
        };
        let filter = match &self.filter {
            Some(f) => Some(json::parse_filter(&parse_json(f, "--filter")?)?),
            None => None,
        };
        Ok(ReadOptions {
            columns_to_get: self.columns.clone(),
            max_versions: self.max_versions,
            time_range,
            start_column: self.start_column.clone(),
            end_column: self.end_column.clone(),
            filter,
        })
    }
}

/// `cellar create`'s series flags.
#[derive(Args, Debug)]
pub struct SeriesArgs {
    /// Create a series of monthly tables NAME_YYYYMM instead of one table (accepted: monthly)
    #[arg(long, value_name = "monthly")]
    series: Option<String>,
    /// The column (INTEGER, ms since the epoch) whose month a row goes to, as COL or
    /// COL:timestamp (SQL then shows it as a TIMESTAMP); default: the write time
    #[arg(long, requires = "series", value_name = "COL[:timestamp]")]
    time_column: Option<String>,
    /// `cellar maintain` archives months this many months old (to --archive-to)
    #[arg(long, requires = "series")]
    archive_after_months: Option<u32>,
    /// `cellar maintain` drops months this many months old, with their archives
    #[arg(long, requires = "series")]
    drop_after_months: Option<u32>,
    /// Where months are archived: s3://BUCKET/PREFIX, file:///PATH or a directory
    #[arg(long, requires = "series")]
    archive_to: Option<String>,
}

/// A `cellar` command.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a table
    Create {
        /// Table name
        table: String,
        /// Primary key: NAME:TYPE[,NAME:TYPE...], TYPE integer | string | binary
        #[arg(long)]
        pk: String,
        /// Make this INTEGER primary-key column (not the first) auto-increment:
        /// writes pass {"auto_increment":true} and get the assigned value back
        #[arg(long, value_name = "NAME")]
        auto_increment: Option<String>,
        /// Table options
        #[command(flatten)]
        options: OptionArgs,
        /// Series settings
        #[command(flatten)]
        series: SeriesArgs,
        /// Where the S3 server of --archive-to is
        #[command(flatten)]
        remote: transfer::RemoteArgs,
    },
    /// Change table options (of a series: of its months and new ones, and its ages and archive target)
    Alter {
        /// Table or series name
        table: String,
        /// Table options
        #[command(flatten)]
        options: OptionArgs,
        /// A series: archive months this many months old (`cellar maintain`)
        #[arg(long)]
        archive_after_months: Option<u32>,
        /// A series: drop months this many months old, with their archives
        #[arg(long)]
        drop_after_months: Option<u32>,
        /// A series: where months are archived from now on
        #[arg(long, value_name = "URL")]
        archive_to: Option<String>,
        /// Where the S3 server of --archive-to is
        #[command(flatten)]
        remote: transfer::RemoteArgs,
    },
    /// Drop a table and its data
    Drop {
        /// Table name
        table: String,
        /// For an archived table: drop it and leave its archive in place
        #[arg(long, conflicts_with = "delete_archive")]
        keep_archive: bool,
        /// For an archived table: drop it and delete its archive's objects
        #[arg(long)]
        delete_archive: bool,
        /// For a series: drop it with all its months (archived months as
        /// --keep-archive or --delete-archive say; without either, refused)
        #[arg(long)]
        cascade: bool,
    },
    /// List table (and series) names, one per line, sorted
    List {
        /// One JSON object per table and series instead: table, kind
        /// (table, series, month), series, state (local or archived),
        /// location and endpoint (of its archive)
        #[arg(long)]
        long: bool,
    },
    /// Print a table's (or a series' with its months) definition as JSON
    Describe {
        /// Table or series name
        table: String,
        /// Add storage counters under "stats"
        #[arg(long)]
        stats: bool,
        /// Add the bytes each column takes in the table's segments (from
        /// their Parquet footers) under "column_sizes", largest first
        #[arg(long)]
        sizes: bool,
    },
    /// Apply NDJSON operations from FILE or stdin
    Write {
        /// Table name
        table: String,
        /// NDJSON file of operations (default: stdin)
        file: Option<PathBuf>,
        /// How to run it
        #[command(flatten)]
        args: write::WriteArgs,
    },
    /// Load a CSV, Parquet or NDJSON file into a table or series (as COPY t FROM 'file')
    Import(import::ImportArgs),
    /// Print one row as JSON, or null
    Get {
        /// Table name
        table: String,
        /// Primary key, a JSON object of every key column
        pk: String,
        /// What to read
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Print rows of a key range, one JSON row per line
    Scan {
        /// Table name
        table: String,
        /// Start bound (inclusive), a JSON object of PK columns
        #[arg(long)]
        start: Option<String>,
        /// End bound (exclusive), a JSON object of PK columns
        #[arg(long)]
        end: Option<String>,
        /// Scan from high keys to low
        #[arg(long)]
        backward: bool,
        /// Most rows to print
        #[arg(long)]
        limit: Option<usize>,
        /// What to read
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Full compaction now; waits until done
    Compact {
        /// Table name
        table: String,
    },
    /// Verify every file of the database (or of one table) against its
    /// checksums; exit 3 when something is damaged
    Check {
        /// Only this table's files (and the catalog)
        table: Option<String>,
        /// Also decode segments written before segment checksums, whole
        /// (without it they are listed as a note)
        #[arg(long)]
        legacy: bool,
    },
    /// Write a table as plain Parquet files to an empty directory or S3 prefix
    Export {
        /// Table name
        table: String,
        /// Where: s3://BUCKET[/PREFIX], file:///PATH or a local directory
        #[arg(long)]
        to: String,
        /// Export settings
        #[command(flatten)]
        export: transfer::ExportArgs,
        /// Where the S3 server is
        #[command(flatten)]
        remote: transfer::RemoteArgs,
    },
    /// Move a table's data to an object store (S3 or a directory), where it
    /// stays queryable and read-only
    Archive {
        /// Table name
        table: String,
        /// Where: s3://BUCKET[/PREFIX], file:///PATH or a local directory
        #[arg(long)]
        to: String,
        /// No progress bar
        #[arg(long)]
        quiet: bool,
        /// Where the S3 server is
        #[command(flatten)]
        remote: transfer::RemoteArgs,
    },
    /// Archive and drop the months of every series that passed their ages;
    /// one JSON line per step; exit 1 when a step failed
    Maintain {
        /// No progress bar
        #[arg(long)]
        quiet: bool,
    },
    /// Bring an archived table back into the data directory, writable
    Restore {
        /// Table name
        table: String,
        /// No progress bar
        #[arg(long)]
        quiet: bool,
    },
    /// Create the demo dataset on the data directory and run the demo queries
    Demo,
    /// Run SQL: -c statements, -f files, else stdin, or a REPL on a terminal
    Sql {
        /// SQL to run (repeatable; each may hold several statements)
        #[arg(short = 'c', long = "command", value_name = "SQL")]
        command: Vec<String>,
        /// A file of SQL statements (repeatable)
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: Vec<PathBuf>,
        /// Output format of result sets
        #[arg(long, value_enum, default_value = "table")]
        format: sql::Format,
    },
}

/// Runs the CLI; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return 1;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        // The reader of our output went away (`cellar scan t | head`):
        // it has what it wanted.
        Err(_) if stdout::closed() => 0,
        Err(e) => {
            eprintln!("error: {e}");
            if e.kind().is_user_error() { 2 } else { 1 }
        }
    }
}

/// Whether a command only reads (so a missing data directory is an error,
/// not a new database): `sql` when every statement of its `-c` and `-f`
/// scripts is a query.
fn only_reads(command: &Command) -> bool {
    match command {
        Command::List { .. } | Command::Describe { .. } | Command::Get { .. } | Command::Scan { .. } => true,
        Command::Check { .. } | Command::Export { .. } => true,
        Command::Sql { command, file, .. } if !command.is_empty() || !file.is_empty() => {
            let files: Option<Vec<String>> = file.iter().map(|f| std::fs::read_to_string(f).ok()).collect();
            files.is_some_and(|files| command.iter().chain(&files).all(|s| sql::only_queries(s)))
        }
        _ => false,
    }
}

fn data_dir(cli: &Cli) -> PathBuf {
    cli.data
        .clone()
        .or_else(|| std::env::var_os("CELLAR_DATA").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("cellar-data"))
}

fn parse_json(s: &str, what: &str) -> Result<Json> {
    serde_json::from_str(s).map_err(|e| Error::param(format!("{what} is not valid JSON ({e}): {s}")))
}

async fn run(cli: Cli) -> Result<i32> {
    let dir = data_dir(&cli);
    if !dir.exists() && only_reads(&cli.command) {
        return Err(Error::param(format!(
            "the data directory {} does not exist, so there is nothing to read (nothing was created); \
             --data DIR or $CELLAR_DATA names another, `cellar create` or CREATE TABLE starts a new one",
            dir.display()
        )));
    }
    if let Command::Check { table, legacy } = &cli.command {
        // On the files alone: a database that no longer opens is checked too.
        return check(&data_dir(&cli), table.as_deref(), *legacy).await;
    }
    let mut options = crate::DbOptions {
        legacy_segments: cli.legacy_segments,
        ..Default::default()
    };
    if let Some(m) = &cli.memory {
        options = options.memory_budget(crate::parse_memory_size(m)?);
    }
    if !cli.read_only {
        let db = Database::open_with(data_dir(&cli), options).await?;
        let code = run_command(&db, cli.command).await;
        db.close().await?;
        return code;
    }
    if let Some(name) = changes(&cli.command) {
        return Err(Error::param(format!(
            "`cellar {name}` changes the database, and --read-only only reads (list, describe, get, scan, export, \
             check, sql queries); run it without --read-only, in the process that writes the directory or once \
             that one has closed it"
        )));
    }
    let db = Database::open_read_only_with(data_dir(&cli), options).await?;
    let code = run_command(&db, cli.command).await;
    db.close().await?;
    code
}

/// The name of a command that changes the database (refused with
/// `--read-only`); `None` for one that only reads.
fn changes(command: &Command) -> Option<&'static str> {
    Some(match command {
        Command::Create { .. } => "create",
        Command::Alter { .. } => "alter",
        Command::Drop { .. } => "drop",
        Command::Write { .. } => "write",
        Command::Import(_) => "import",
        Command::Compact { .. } => "compact",
        Command::Archive { .. } => "archive",
        Command::Maintain { .. } => "maintain",
        Command::Restore { .. } => "restore",
        Command::Demo => "demo",
        Command::List { .. }
        | Command::Describe { .. }
        | Command::Get { .. }
        | Command::Scan { .. }
        | Command::Check { .. }
        | Command::Export { .. }
        | Command::Sql { .. } => return None,
    })
}

async fn run_command(db: &Database, command: Command) -> Result<i32> {
    let mut out = stdout::stdout();
    let io = |e: std::io::Error| Error::io("write to stdout", e);
    match command {
        Command::Create {
            table,
            pk,
            auto_increment,
            options,
            series,
            remote,
        } => {
            let mut schema = TableSchema::new(table);
            for part in pk.split(',') {
                let (name, ty) = part.split_once(':').ok_or_else(|| {
                    Error::param(format!(
                        "--pk entry '{part}' must be NAME:TYPE with TYPE integer, string or binary"
                    ))
                })?;
                schema = schema.pk(name.trim(), ty.trim().parse::<PkType>()?);
            }
            if let Some(col) = auto_increment {
                schema = schema.auto_increment(&col)?;
            }
            let opts = options.update().apply(&TableOptions::default());
            match series.series.as_deref() {
                None => db.create_table(schema, opts).await?,
                Some(kind) if kind.eq_ignore_ascii_case("monthly") => {
                    let (time_column, time_is_timestamp) =
                        match series.time_column.as_deref().map(|c| c.split_once(':')) {
                            None => (None, false),
                            Some(None) => (series.time_column.clone(), false),
                            Some(Some((c, ty))) if ty.eq_ignore_ascii_case("timestamp") => (Some(c.to_string()), true),
                            Some(Some((c, ty))) if ty.eq_ignore_ascii_case("integer") => (Some(c.to_string()), false),
                            Some(Some((_, ty))) => {
                                return Err(Error::param(format!(
                                    "--time-column type '{ty}' is not accepted; give COL, COL:integer or COL:timestamp"
                                )));
                            }
                        };
                    let s = crate::SeriesOptions {
                        time_column,
                        archive_after_months: series.archive_after_months,
                        drop_after_months: series.drop_after_months,
                        archive_to: series.archive_to.map(|url| remote.location(&url)),
                        time_is_timestamp,
                    };
                    db.create_series(schema, opts, s).await?
                }
                Some(other) => {
                    return Err(Error::param(format!(
                        "--series {other} is not supported; accepted: monthly"
                    )));
                }
            }
        }
        Command::Alter {
            table,
            options,
            archive_after_months,
            drop_after_months,
            archive_to,
            remote,
        } => {
            let change = crate::SeriesUpdate {
                archive_after_months,
                drop_after_months,
                archive_to: archive_to.map(|url| remote.location(&url)),
            };
            if db.series(&table).is_ok() {
                db.alter_series(&table, options.update(), change).await?;
            } else if change != crate::SeriesUpdate::default() {
                return Err(Error::param(format!(
                    "--archive-after-months, --drop-after-months and --archive-to change a series; '{table}' is not one"
                )));
            } else {
                db.alter_table(&table, options.update()).await?;
            }
        }
        Command::Drop {
            table,
            keep_archive,
            delete_archive,
            cascade,
        } => {
            let archive = match (keep_archive, delete_archive) {
                (true, _) => crate::ArchiveOnDrop::Keep,
                (_, true) => crate::ArchiveOnDrop::Delete,
                _ => crate::ArchiveOnDrop::Refuse,
            };
            if !cascade {
                db.drop_table_with(&table, archive).await?
            } else if db.series(&table).is_ok() {
                db.drop_series_cascade(&table, archive).await?
            } else {
                return Err(Error::param(format!(
                    "--cascade drops a series with its months; '{table}' is not a series (drop it without --cascade)"
                )));
            }
        }
        Command::List { long } => {
            for t in db.table_listing() {
                if long {
                    let line = json!({
                        "table": t.name,
                        "kind": t.kind(),
                        "series": t.series,
                        "state": t.state(),
                        "location": t.archive.as_ref().map(|a| &a.url),
                        "endpoint": t.archive.as_ref().and_then(|a| a.endpoint.as_ref()),
                    });
                    writeln!(out, "{line}").map_err(io)?;
                } else {
                    writeln!(out, "{}", t.name).map_err(io)?;
                }
            }
        }
        Command::Describe { table, stats, sizes } if db.series(&table).is_ok() && !stats && !sizes => {
            writeln!(out, "{}", series::describe_series(db, &table)?).map_err(io)?;
        }
        Command::Describe { table, stats, sizes } => {
            let d = db.describe_table(&table)?;
            let pk: Vec<Json> = d
                .schema
                .primary_key
                .iter()
                .map(|c| {
                    let mut j = json!({"name": c.name, "type": c.pk_type.as_str()});
                    if c.auto_increment {
                        j["auto_increment"] = json!(true);
                    }
                    j
                })
                .collect();
            let j = json!({
                "name": d.schema.name,
                "primary_key": pk,
                "ttl": d.options.ttl_secs,
                "max_versions": d.options.max_versions,
                "max_version_offset": d.options.max_version_offset_secs,
                "allow_update": d.options.allow_update,
            });
            let mut j = j;
            if stats {
                let s = db.table(&table)?.stats();
                j["stats"] = json!({
                    "segments": s.segments,
                    "segment_bytes": s.segment_bytes,
                    "memtable_bytes": s.memtable_bytes,
                    "frozen_memtables": s.frozen_memtables,
                    "flushes": s.flushes,
                    "flush_bytes": s.flush_bytes,
                    "runs": s.runs,
                    "compactions": s.compactions,
                    "compaction_bytes": s.compaction_bytes,
                    "compaction_read_bytes": s.compaction_read_bytes,
                    "compaction_moved_bytes": s.compaction_moved_bytes,
                    "stall_micros": db.stall_micros(),
                    "mapped_page_releases": db.mapped_page_releases(),
                    "last_flush_error": s.last_flush_error,
                    "last_compaction_error": s.last_compaction_error,
                });
            }
            if sizes {
                let cols = db.table(&table)?.column_sizes().await?;
                j["column_sizes"] = cols
                    .iter()
                    .map(|c| json!({"column": c.column, "bytes": c.bytes, "uncompressed_bytes": c.uncompressed_bytes}))
                    .collect();
            }
            writeln!(out, "{j}").map_err(io)?;
        }
        Command::Write { table, file, args } => {
            drop(out);
            let target = match db.series(&table) {
                Ok(s) => crate::db::Writer::Series(s),
                Err(_) => crate::db::Writer::Table(db.table(&table)?),
            };
            return write::write_ops(&target, file, args).await;
        }
        Command::Get { table, pk, read } => {
            let t = db.table(&table)?;
            let pk = json::parse_pk(t.schema(), &parse_json(&pk, "the primary key")?)?;
            let got = t.get_row(GetRow::new(pk).options(read.options()?)).await?;
            let j = got.row.as_ref().map(json::row_json).unwrap_or(Json::Null);
            writeln!(out, "{j}").map_err(io)?;
            if read.cu {
                eprintln!("{}", json!({"cu": json::cu_json(&got.consumed)}));
            }
        }
        Command::Scan {
            table,
            start,
            end,
            backward,
            limit,
            read,
        } => {
            let t = db.table(&table)?;
            let mut req = GetRange::new().options(read.options()?);
            if let Some(s) = start {
                req.start = Some(json::parse_bound(t.schema(), &parse_json(&s, "--start")?)?);
            }
            if let Some(e) = end {
                req.end = Some(json::parse_bound(t.schema(), &parse_json(&e, "--end")?)?);
            }
            if backward {
                req = req.backward();
            }
            if limit == Some(0) {
                return Err(Error::param("--limit must be at least 1"));
            }
            let mut left = limit.unwrap_or(usize::MAX);
            let mut consumed = crate::CapacityUnit::default();
            loop {
                req.limit = Some(left.min(crate::model::api::MAX_RANGE_ROWS));
                let page = t.get_range(req.clone()).await?;
                consumed += page.consumed;
                for row in &page.rows {
                    writeln!(out, "{}", json::row_json(row)).map_err(io)?;
                }
                left -= page.rows.len().min(left);
                match page.next_start {
                    Some(next) if left > 0 => req.start = Some(next.into()),
                    _ => break,
                }
            }
            if read.cu {
                // Each response is charged on its own (rounded up per response).
                out.flush().map_err(io)?;
                eprintln!("{}", json!({"cu": json::cu_json(&consumed)}));
            }
        }
        Command::Compact { table } => db.table(&table)?.compact().await?,
        Command::Import(args) => {
            drop(out);
            return import::import(db, args).await;
        }
        Command::Export {
            table,
            to,
            export,
            remote,
        } => {
            drop(out);
            transfer::export(db, &table, remote.location(&to), export).await?;
        }
        Command::Archive {
            table,
            to,
            quiet,
            remote,
        } => {
            drop(out);
            transfer::archive(db, &table, remote.location(&to), quiet).await?;
        }
        Command::Maintain { quiet } => {
            drop(out);
            return transfer::maintain(db, quiet).await;
        }
        Command::Restore { table, quiet } => {
            drop(out);
            transfer::restore(db, &table, quiet).await?;
        }
        Command::Check { .. } => unreachable!("handled before the database is opened"),
        Command::Demo => {
            drop(out);
            demo::run(db).await?;
        }
        Command::Sql { command, file, format } => {
            drop(out);
            return sql::run(db, command, file, format).await;
        }
    }
    Ok(0)
}

/// `cellar check`: one line per file (`ok`, `note` or `DAMAGED`, the
/// path relative to the data directory, what was found), then a summary.
/// Exit 0 when nothing is damaged, 3 when something is.
async fn check(dir: &std::path::Path, table: Option<&str>, legacy: bool) -> Result<i32> {
    let report = crate::check_with(dir, table, crate::CheckOptions { legacy }).await?;
    let mut out = String::new();
    for f in &report.files {
        let line = match &f.state {
            crate::FileState::Ok => format!("ok       {}", f.path),
            crate::FileState::Note(n) => format!("note     {}: {n}", f.path),
            crate::FileState::Damaged(d) => format!("DAMAGED  {}: {d}", f.path),
        };
        out.push_str(&line);
        out.push('\n');
    }
    let damaged = report.damaged();
    out.push_str(&format!("checked {} files: {damaged} damaged\n", report.files.len()));
    stdout::stdout()
        .write_all(out.as_bytes())
        .map_err(|e| Error::io("write to stdout", e))?;
    Ok(if damaged == 0 { 0 } else { 3 })
}
