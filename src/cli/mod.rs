//! The `cellar` command line: table management and the data commands.
//!
//! Output formats are a public interface (scripts depend on them); see the
//! README ("Command line"). Usage and parameter errors exit 2, a damaged
//! file found by `cellar check` exits 3, other errors exit 1.
//!
//! Invariant: flags and output formats are only ever extended, never
//! changed.

mod args;
mod demo;
mod import;
mod index;
pub mod json;
mod partitions;
mod series;
mod sql;
mod stdout;
mod stream;
mod transfer;
mod tunnel;
mod write;

use std::io::Write;
use std::path::PathBuf;

use clap::Parser;
use serde_json::{Value as Json, json};

pub use self::args::{Cli, Command, IndexCommand, OptionArgs, ReadArgs, SeriesArgs, TunnelCommand};
use crate::Database;
use crate::error::{Error, Result};
use crate::model::api::{GetRange, GetRow};
use crate::model::schema::{TableOptions, TableSchema};
use crate::model::types::PkType;

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
        Command::SplitPoints { .. } => true,
        Command::Tunnel { command } => !matches!(command, TunnelCommand::Create { .. }),
        Command::Index { command } => matches!(command, IndexCommand::List { .. }),
        Command::Check { .. } | Command::Export { .. } | Command::Stream { .. } => true,
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

/// A listening address.
fn socket_addr(s: &str) -> Result<std::net::SocketAddr> {
    s.parse().map_err(|_| {
        Error::param(format!(
            "'{s}' is not an address to listen on: give IP:PORT, e.g. 127.0.0.1:50050"
        ))
    })
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
    // A cluster's processes hold no database of their own.
    match &cli.command {
        Command::Scheduler { bind } => {
            crate::cluster::run_scheduler(socket_addr(bind)?).await?;
            return Ok(0);
        }
        Command::Executor { bind, scheduler, slots } => {
            crate::cluster::run_executor(socket_addr(bind)?, scheduler, *slots).await?;
            return Ok(0);
        }
        _ => {}
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
        Command::Tunnel {
            command: TunnelCommand::Create { .. },
        } => "tunnel create",
        Command::Tunnel {
            command: TunnelCommand::Delete { .. },
        } => "tunnel delete",
        Command::Tunnel {
            command: TunnelCommand::Consume { .. },
        } => "tunnel consume",
        Command::Index {
            command: IndexCommand::Create { .. },
        } => "index create",
        Command::Index {
            command: IndexCommand::Drop { .. },
        } => "index drop",
        Command::Tunnel { .. }
        | Command::Index { .. }
        | Command::List { .. }
        | Command::Stream { .. }
        | Command::Describe { .. }
        | Command::SplitPoints { .. }
        | Command::Get { .. }
        | Command::Scan { .. }
        | Command::Check { .. }
        | Command::Export { .. }
        | Command::Sql { .. }
        | Command::Scheduler { .. }
        | Command::Executor { .. } => return None,
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
            columns,
            options,
            series,
            stream,
            remote,
        } => {
            let stream = stream.change();
            if !stream.is_empty() && series.series.is_some() {
                return Err(Error::param(
                    "--stream is for a table; a series' months have no streams (yet): create the series without it",
                ));
            }
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
            if let Some(columns) = columns {
                schema.columns = index::parse_columns(&columns, "--columns")?;
            }
            let opts = options.update().apply(&TableOptions::default());
            match series.series.as_deref() {
                None => db.create_table_with_stream(schema, opts, stream).await?,
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
            stream,
            remote,
            add_columns,
            drop_columns,
        } => {
            if let Some(spec) = &add_columns {
                for c in index::parse_columns(spec, "--add-columns")? {
                    db.add_column(&table, c).await?;
                }
            }
            for c in &drop_columns {
                db.drop_column(&table, c).await?;
            }
            let stream = stream.change();
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
            if !stream.is_empty() {
                if db.series(&table).is_ok() {
                    return Err(Error::param(format!(
                        "--stream is for a table; series '{table}' has no stream (yet)"
                    )));
                }
                db.change_stream(&table, stream).await?;
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
        Command::Describe {
            table, stats, sizes, ..
        } if db.series(&table).is_ok() && !stats && !sizes => {
            writeln!(out, "{}", series::describe_series(db, &table)?).map_err(io)?;
        }
        Command::SplitPoints { table, size } => {
            for line in partitions::split_points_lines(db, &table, size).await? {
                writeln!(out, "{line}").map_err(io)?;
            }
        }
        Command::Describe {
            table,
            stats,
            sizes,
            partitions: with_partitions,
        } => {
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
                "partition_split_bytes": d.options.partition_split_bytes,
            });
            let mut j = j;
            if !d.schema.columns.is_empty() {
                j["columns"] = d
                    .schema
                    .columns
                    .iter()
                    .map(|c| json!({"name": c.name, "type": c.value_type.as_str()}))
                    .collect();
            }
            if db.index_base(&table).is_some() {
                j["index_of"] = index::index_json(&db.describe_index(&table).await?);
            } else if let Ok(list) = db.list_indexes(&table).await
                && !list.is_empty()
            {
                j["indexes"] = list.iter().map(index::index_json).collect();
            }
            let stream = match db.list_streams(Some(&table)).await?.into_iter().next() {
                Some(info) => Some(db.describe_stream(&info.stream_id).await?),
                None => None,
            };
            if let Some(st) = &stream {
                j["stream"] = json!({
                    "stream_id": st.stream_id,
                    "expiration_hours": st.expiration_hours,
                    "columns": st.columns,
                    "shards": st.shards.iter().map(|s| s.shard_id.clone()).collect::<Vec<_>>(),
                });
            }
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
                if let Some(st) = &stream {
                    j["stats"]["stream_bytes"] = json!(st.bytes);
                }
            }
            if with_partitions {
                j["partitions"] = partitions::partitions_json(db, &table).await?;
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
        Command::Stream {
            table, since, follow, ..
        } => {
            drop(out);
            stream::run(db, &table, since, follow).await?;
        }
        Command::Sql {
            command,
            file,
            format,
            cluster,
        } => {
            drop(out);
            return sql::run(db, command, file, format, cluster.as_deref()).await;
        }
        // Run before a database is opened (see `run`).
        Command::Scheduler { .. } | Command::Executor { .. } => {}
        Command::Tunnel { command } => {
            drop(out);
            tunnel::run(db, command).await?;
        }
        Command::Index { command } => {
            drop(out);
            index::run(db, command).await?;
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
    // Then each index against its table, on the data (read-only, beside a
    // writer if there is one), once the files are sound.
    let mut bad_indexes = 0;
    if damaged == 0 {
        let db = Database::open_read_only(dir).await?;
        let checks = db.check_indexes(table).await?;
        for c in &checks {
            let what = format!("index {} of {}", c.index, c.table);
            if c.is_exact() {
                out.push_str(&format!("ok       {what}: {} rows\n", c.index_rows));
                continue;
            }
            let summary = format!(
                "{} missing, {} extra, {} different of {} rows; {}",
                c.missing,
                c.extra,
                c.different,
                c.index_rows,
                c.examples.join("; ")
            );
            if c.lag_ms > 0 {
                out.push_str(&format!(
                    "note     {what}: {} ms behind its table (a global index catches up while the database is open \
                     for writing): {summary}\n",
                    c.lag_ms
                ));
            } else {
                bad_indexes += 1;
                out.push_str(&format!(
                    "DAMAGED  {what}: {summary} (drop and create it again to rebuild it)\n"
                ));
            }
        }
        if !checks.is_empty() {
            out.push_str(&format!(
                "checked {} indexes: {bad_indexes} differ from their tables\n",
                checks.len()
            ));
        }
    }
    stdout::stdout()
        .write_all(out.as_bytes())
        .map_err(|e| Error::io("write to stdout", e))?;
    Ok(if damaged == 0 && bad_indexes == 0 { 0 } else { 3 })
}
