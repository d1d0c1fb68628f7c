//! `cellar write`: NDJSON operations committed in pipelined batches (so
//! one fsync covers many), each line's result printed in input order once
//! it is durable, and a summary on stderr.
//!
//! Invariants: lines take effect in input order (a condition or an
//! increment sees exactly the lines before it), whatever the batching; a
//! result is printed only once its line is durable, in input order;
//! results carry the input's line numbers, blank lines and the lines
//! before `--from-line` included (those are read, not applied, and get no
//! result). After Ctrl-C no further line is taken, every line taken is
//! made durable and reported, and the summary names the line to resume
//! from. A reader of the results that goes away does not stop the writes.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use futures::stream::{FuturesOrdered, StreamExt};

use super::{json, stdout};
use crate::error::{Error, Result};
use crate::model::api::RowWrite;

/// `cellar write`'s flags.
#[derive(clap::Args, Debug, Default)]
pub struct WriteArgs {
    /// Print only the lines that failed (and the summary on stderr); no
    /// progress bar
    #[arg(long)]
    quiet: bool,
    /// Start at line N of the input (1 is the first): the lines before it
    /// are read and skipped, as after an interruption the summary said
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    from_line: u64,
}

/// Most operations per commit batch, and most batches in flight.
const WRITE_BATCH: usize = 200;
const WRITE_IN_FLIGHT: usize = 16;

/// What the lines came to.
#[derive(Default)]
struct Tally {
    ok: u64,
    failed: u64,
    blank: u64,
    /// The last line reported (durable or failed), 0 before any.
    last_line: usize,
}

/// What one input line is, before its batch commits.
enum Slot {
    /// Blank, or before `--from-line`.
    Skipped,
    /// An operation: its result is the commit's.
    Op,
    /// Not an operation (bad JSON, a bad key, ...).
    Bad(Error),
}

/// A batch in flight: its first line, a slot per line, and the commit.
type Pending = (usize, Vec<Slot>, Result<Vec<Result<crate::WriteResult>>>);

pub(super) async fn write_ops(table: &crate::db::Writer, file: Option<PathBuf>, args: WriteArgs) -> Result<i32> {
    let started = Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<String>>(WRITE_BATCH * WRITE_IN_FLIGHT);
    let reader = std::thread::spawn(move || {
        let input: Box<dyn std::io::BufRead> = match file {
            Some(path) => match std::fs::File::open(&path) {
                Ok(f) => Box::new(std::io::BufReader::new(f)),
                Err(e) => {
                    let _ = tx.blocking_send(Err(std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))));
                    return;
                }
            },
            None => Box::new(std::io::stdin().lock()),
        };
        for line in std::io::BufRead::lines(input) {
            let stop = line.is_err();
            if tx.blocking_send(line).is_err() || stop {
                return;
            }
        }
    });
    let bar = progress_bar(args.quiet);
    let mut line_no = 0usize;
    let mut tally = Tally::default();
    let mut in_flight = FuturesOrdered::new();
    let mut input_open = true;
    let mut interrupted = false;
    let mut out = stdout::stdout();
    // Once the reader of the results is gone, the operations are still
    // all applied (their results are not printed).
    let mut printing = true;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    while input_open || !in_flight.is_empty() {
        tokio::select! {
            _ = &mut ctrl_c, if input_open => {
                input_open = false;
                interrupted = true;
            }
            first = rx.recv(), if input_open && in_flight.len() < WRITE_IN_FLIGHT => {
                let Some(first) = first else { input_open = false; continue };
                let mut lines = vec![first];
                while lines.len() < WRITE_BATCH {
                    match rx.try_recv() {
                        Ok(l) => lines.push(l),
                        Err(_) => break,
                    }
                }
                let mut results: Vec<Slot> = Vec::with_capacity(lines.len());
                let mut ops: Vec<RowWrite> = Vec::new();
                let first_line = line_no + 1;
                for l in lines {
                    line_no += 1;
                    let l = l.map_err(|e| Error::io("read operations", e))?;
                    if (line_no as u64) < args.from_line || l.trim().is_empty() {
                        results.push(Slot::Skipped);
                        continue;
                    }
                    match json::parse_op(table.schema(), &l) {
                        Ok(op) => { ops.push(op); results.push(Slot::Op); }
                        Err(e) => results.push(Slot::Bad(e)),
                    }
                }
                // Queue now, in input order (the committer numbers writes in
                // the order they are queued); only the wait for durability
                // is pipelined.
                let committed = if ops.is_empty() { None } else { Some(table.enqueue_batch(ops).await) };
                in_flight.push_back(async move {
                    let committed = match committed {
                        None => Ok(Vec::new()),
                        Some(Ok(queued)) => queued.durable().await,
                        Some(Err(e)) => Err(e),
                    };
                    (first_line, results, committed)
                });
            }
            Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                let text = report(done, &args, &mut tally);
                bar.set_position(tally.ok + tally.failed);
                if printing && !text.is_empty() && let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                    if !stdout::closed() {
                        return Err(Error::io("write to stdout", e));
                    }
                    printing = false;
                }
            }
        }
    }
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    let applied = tally.ok + tally.failed;
    let mut summary = format!(
        "cellar write: {applied} operations, {} ok, {} failed, in {secs:.2} s ({:.0}/s)",
        tally.ok,
        tally.failed,
        applied as f64 / secs.max(1e-9)
    );
    if tally.blank > 0 {
        summary.push_str(&format!("; {} blank lines skipped", tally.blank));
    }
    if args.from_line > 1 {
        summary.push_str(&format!("; lines before {} skipped (--from-line)", args.from_line));
    }
    if interrupted {
        let next = (tally.last_line as u64 + 1).max(args.from_line);
        summary.push_str(&format!(
            "; interrupted: every line before {next} is done (applied or failed), resume with --from-line {next}"
        ));
    } else {
        let _ = reader.join();
    }
    eprintln!("{summary}");
    Ok(if interrupted {
        130
    } else if tally.failed == 0 {
        0
    } else {
        1
    })
}

/// The results of a batch that is done, as lines to print; counts them.
fn report((first_line, results, committed): Pending, args: &WriteArgs, tally: &mut Tally) -> String {
    let mut committed = match committed {
        Ok(v) => v.into_iter().map(Some).collect::<Vec<_>>().into_iter(),
        Err(e) => {
            let n = results.iter().filter(|r| matches!(r, Slot::Op)).count();
            vec![Some(Err(e)); n].into_iter()
        }
    };
    let mut buf = String::new();
    for (i, r) in results.into_iter().enumerate() {
        let line = first_line + i;
        tally.last_line = line;
        let r = match r {
            Slot::Skipped => {
                if line as u64 >= args.from_line {
                    tally.blank += 1;
                }
                continue;
            }
            Slot::Op => committed.next().flatten().unwrap_or_else(|| Err(Error::closed())),
            Slot::Bad(e) => Err(e),
        };
        let j = match r {
            Ok(w) => {
                tally.ok += 1;
                if args.quiet {
                    continue;
                }
                json::write_result_json(line, &w)
            }
            Err(e) => {
                tally.failed += 1;
                serde_json::json!({"line": line, "ok": false, "error": {"kind": e.kind().as_str(), "message": e.message()}})
            }
        };
        buf.push_str(&j.to_string());
        buf.push('\n');
    }
    buf
}

/// A count of lines done on stderr when it is a terminal (and not
/// `--quiet`).
fn progress_bar(quiet: bool) -> indicatif::ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {pos} operations ({per_sec}, {elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}
