//! The command line's arguments: the global flags, every command and
//! its flags, as clap parses them (`cellar --help`).
//!
//! Invariant: flags the README or an issue spell out are public
//! interfaces: they are extended, never renamed.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::{import, json, parse_json, sql, transfer, write};
use crate::error::{Error, Result};
use crate::model::row::ReadOptions;
use crate::model::schema::OptionsUpdate;

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
    pub(super) ttl: Option<i64>,
    /// Versions kept per cell (>= 1)
    #[arg(long)]
    pub(super) max_versions: Option<u32>,
    /// How far a written version may be from now, in seconds (> 0)
    #[arg(long, allow_negative_numbers = true)]
    pub(super) max_version_offset: Option<i64>,
    /// Whether UpdateRow is allowed
    #[arg(long, value_parser = parse_bool)]
    pub(super) allow_update: Option<bool>,
    /// Split a range partition past this many segment bytes (0: by hand only, `cellar partition split`)
    #[arg(long)]
    pub(super) partition_split_bytes: Option<u64>,
}

impl OptionArgs {
    pub(super) fn update(&self) -> OptionsUpdate {
        OptionsUpdate {
            ttl_secs: self.ttl,
            max_versions: self.max_versions,
            max_version_offset_secs: self.max_version_offset,
            allow_update: self.allow_update,
            partition_split_bytes: self.partition_split_bytes,
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
    pub(super) columns: Option<Vec<String>>,
    /// Newest versions per cell to return (default 1)
    #[arg(long, conflicts_with = "time_range")]
    pub(super) max_versions: Option<u32>,
    /// Versions in [START_MS, END_MS) only
    #[arg(long, value_name = "START_MS,END_MS", allow_hyphen_values = true)]
    pub(super) time_range: Option<String>,
    /// Only rows that pass FILTER_JSON: {"column":C,"op":"=","value":V,"pass_if_missing":true,
    /// "latest_version_only":true}, {"and":[F,...]}, {"or":[F,...]}, {"not":F},
    /// {"column_page":{"offset":N,"limit":N}}
    #[arg(long, value_name = "FILTER_JSON")]
    pub(super) filter: Option<String>,
    /// First column to return (inclusive), to page through a wide row
    #[arg(long)]
    pub(super) start_column: Option<String>,
    /// Column to stop before (exclusive)
    #[arg(long)]
    pub(super) end_column: Option<String>,
    /// Print the capacity units consumed on stderr: {"cu":{"read":R,"write":W}}
    #[arg(long)]
    pub(super) cu: bool,
}

impl ReadArgs {
    pub(super) fn options(&self) -> Result<ReadOptions> {
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
    pub(super) series: Option<String>,
    /// The column (INTEGER, ms since the epoch) whose month a row goes to, as COL or
    /// COL:timestamp (SQL then shows it as a TIMESTAMP); default: the write time
    #[arg(long, requires = "series", value_name = "COL[:timestamp]")]
    pub(super) time_column: Option<String>,
    /// `cellar maintain` archives months this many months old (to --archive-to)
    #[arg(long, requires = "series")]
    pub(super) archive_after_months: Option<u32>,
    /// `cellar maintain` drops months this many months old, with their archives
    #[arg(long, requires = "series")]
    pub(super) drop_after_months: Option<u32>,
    /// Where months are archived: s3://BUCKET/PREFIX, file:///PATH or a directory
    #[arg(long, requires = "series")]
    pub(super) archive_to: Option<String>,
}

/// Change stream flags (`create`, `alter`).
#[derive(Args, Debug, Default)]
pub struct StreamArgs {
    /// Enable (true) or disable (false) the table's change stream
    #[arg(long, value_parser = parse_bool, value_name = "true|false")]
    pub(super) stream: Option<bool>,
    /// Hours stream records are kept, 1 to 168 [default: 24]
    #[arg(long, value_name = "N")]
    pub(super) stream_expiration_hours: Option<u32>,
    /// Columns whose previous values stream records carry, comma-separated
    #[arg(long, value_delimiter = ',', value_name = "COLS")]
    pub(super) stream_columns: Option<Vec<String>>,
}

impl StreamArgs {
    pub(super) fn change(&self) -> crate::StreamChange {
        crate::StreamChange {
            enable: self.stream,
            expiration_hours: self.stream_expiration_hours,
            columns: self.stream_columns.clone(),
        }
    }
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
        /// Predefined attribute columns (at most 32): NAME:TYPE[,NAME:TYPE...],
        /// TYPE integer | double | boolean | string | binary; a write of another
        /// type to one is refused, and indexes may use them
        #[arg(long, value_name = "NAME:TYPE,..")]
        columns: Option<String>,
        /// Table options
        #[command(flatten)]
        options: OptionArgs,
        /// Series settings
        #[command(flatten)]
        series: SeriesArgs,
        /// Change stream settings
        #[command(flatten)]
        stream: StreamArgs,
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
        /// Change stream settings
        #[command(flatten)]
        stream: StreamArgs,
        /// Where the S3 server of --archive-to is
        #[command(flatten)]
        remote: transfer::RemoteArgs,
        /// Add predefined columns: NAME:TYPE[,NAME:TYPE...] (AddDefinedColumn)
        #[arg(long, value_name = "NAME:TYPE,..")]
        add_columns: Option<String>,
        /// Remove predefined columns: NAME[,NAME...] (DeleteDefinedColumn; their data stays)
        #[arg(long, value_delimiter = ',', value_name = "NAME,..")]
        drop_columns: Vec<String>,
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
        /// Add the table's range partitions under "partitions": id, lower
        /// and upper partition-key bounds (null: unbounded), bytes, rows,
        /// segments, parents (the partitions it was split or merged from)
        #[arg(long)]
        partitions: bool,
    },
    /// Cut a table into ranges of about SIZE bytes at partition-key values
    /// (ComputeSplitPointsBySize): one JSON line per range, with its lower
    /// and upper bound and the partition serving it
    SplitPoints {
        /// Table name
        table: String,
        /// Bytes per range (> 0)
        #[arg(long)]
        size: u64,
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
    /// Print a table's change stream records as NDJSON, oldest first (the
    /// table needs a stream: `create`/`alter --stream true`)
    Stream {
        /// Table name
        table: String,
        /// Start at the oldest record kept (the default)
        #[arg(long, conflicts_with = "since")]
        from_start: bool,
        /// Start at the first record committed at or after MS (milliseconds since the epoch)
        #[arg(long, value_name = "MS")]
        since: Option<i64>,
        /// Keep printing records as they come, until interrupted
        #[arg(long)]
        follow: bool,
    },
    /// Tunnels (the Tunnel Service): a table's rows, then its changes,
    /// consumed with checkpoints kept in the database
    Tunnel {
        /// What to do
        #[command(subcommand)]
        command: TunnelCommand,
    },
    /// Secondary indexes (local: kept with each write; global: follows the
    /// table's change stream)
    Index {
        /// What to do
        #[command(subcommand)]
        command: IndexCommand,
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
        /// Run queries on a Ballista cluster (df://HOST:PORT of its
        /// scheduler): archived tables are read by its executors; live
        /// tables, writes and DDL are refused
        #[arg(long, value_name = "URL")]
        cluster: Option<String>,
    },
    /// Run a Ballista scheduler that reads Cellar's archived tables
    /// (scale-out; docs/scale-out.md). Needs no data directory
    Scheduler {
        /// Address to listen on (HOST:PORT)
        #[arg(long, default_value = "127.0.0.1:50050")]
        bind: String,
    },
    /// Run a Ballista executor for a Cellar cluster: it reads archived
    /// segments from their object store (AWS_* credentials from its own
    /// environment). Needs no data directory
    Executor {
        /// Address of its Arrow Flight service (HOST:PORT); its gRPC
        /// service takes the next port
        #[arg(long, default_value = "127.0.0.1:50051")]
        bind: String,
        /// The scheduler (HOST:PORT or df://HOST:PORT)
        #[arg(long, default_value = "127.0.0.1:50050")]
        scheduler: String,
        /// Tasks run at once (0: one per core)
        #[arg(long, default_value_t = 0)]
        slots: usize,
    },
}

/// `cellar tunnel ...`.
#[derive(Subcommand, Debug)]
pub enum TunnelCommand {
    /// Make a tunnel: full (the rows as of one snapshot), stream (the
    /// changes from now on) or full-and-stream (the rows, then every
    /// change after them); stream tunnels need the table's change stream
    Create {
        /// Table name
        table: String,
        /// Tunnel name (letters, digits, '_', '-')
        name: String,
        /// full | stream | full-and-stream
        #[arg(long = "type", value_name = "TYPE")]
        kind: String,
    },
    /// One JSON line per tunnel (of TABLE, or of every table): table, name, type, stage
    List {
        /// Table name
        table: Option<String>,
    },
    /// A tunnel as JSON: type, stage, channels (id, status, checkpoint,
    /// delivered, last_commit_ms) and lag_ms
    Describe {
        /// Table name
        table: String,
        /// Tunnel name
        name: String,
    },
    /// Delete a tunnel and its checkpoints
    Delete {
        /// Table name
        table: String,
        /// Tunnel name
        name: String,
    },
    /// Print the tunnel's records as NDJSON (as `cellar stream`, with
    /// "channel"), from its checkpoint on, checkpointing what it printed
    /// every 100 ms and at the end: a consumer killed prints again what
    /// came after its last checkpoint, and skips nothing
    Consume {
        /// Table name
        table: String,
        /// Tunnel name
        name: String,
        /// Keep waiting for new records until interrupted
        #[arg(long)]
        follow: bool,
    },
}

/// `cellar index ...`.
#[derive(Subcommand, Debug)]
pub enum IndexCommand {
    /// Create an index of TABLE keyed by --columns (1-4 key or predefined
    /// columns), then the table's key columns not among them; existing rows
    /// are indexed before it returns (unless --no-base-data)
    Create {
        /// Table name
        table: String,
        /// Index name (unique among tables and indexes)
        name: String,
        /// Index columns, in key order: C1[,C2...]
        #[arg(long, value_delimiter = ',', required = true, value_name = "C1,..")]
        columns: Vec<String>,
        /// Predefined columns copied into the index: A[,B...]
        #[arg(long, value_delimiter = ',', value_name = "A,..")]
        include: Vec<String>,
        /// local (updated with each write; starts with the partition key) or
        /// global (follows the table's change stream, a little behind)
        #[arg(long = "type", value_name = "local|global", default_value = "local")]
        kind: String,
        /// Index only rows written from now on
        #[arg(long)]
        no_base_data: bool,
    },
    /// Drop an index and its data
    Drop {
        /// Table name
        table: String,
        /// Index name
        name: String,
    },
    /// One JSON line per index of TABLE: name, type, columns, include,
    /// primary_key, phase (FULL while existing rows are indexed, then INCR)
    /// and lag_ms (how far a global index is behind its table)
    List {
        /// Table name
        table: String,
    },
}
