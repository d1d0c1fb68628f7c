//! `cellar sql`: statements and shell commands from `-c`, `-f`, stdin, or
//! the REPL.
//!
//! Invariants: input is read a line at a time; a line is a shell command
//! or statement text by the rules of [`meta`], the same everywhere;
//! statements run in order, each once its `;` is read (a script's last
//! one also without it). In a script the first error stops the run with
//! exit 1, keeping what earlier statements did; in the REPL an error ends
//! the statements of its line only. Result formats are a public interface
//! ([`output`]).

mod complete;
mod meta;
mod output;
mod repl;

use std::io::{BufRead, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use futures::future::LocalBoxFuture;
use parking_lot::Mutex;

pub use output::Format;
pub(crate) use output::print_output;

use super::stdout;
use crate::Database;
use crate::error::{Error, Result};
use crate::sql::{InsertProgress, SqlSession, ends_inside_quote, is_incomplete, session_config, split_statements};
use meta::Meta;

/// The progress line of the running INSERT and when it started: it shows
/// only once the INSERT has run for a second (short ones print nothing).
type Bar = Arc<Mutex<Option<(indicatif::ProgressBar, Instant)>>>;

fn session(db: &Database, bar: &Bar) -> SqlSession {
    let b = bar.clone();
    let progress = InsertProgress(Box::new(move |n| {
        if let Some((p, started)) = b.lock().as_ref() {
            if p.is_hidden() && started.elapsed() >= std::time::Duration::from_secs(1) {
                p.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                p.enable_steady_tick(std::time::Duration::from_millis(200));
            }
            p.set_position(n);
        }
    }));
    let config = session_config().with_extension(Arc::new(progress));
    let ctx = crate::sql::session_context_with(db, config);
    SqlSession::with_context(db.clone(), ctx)
}

/// How deep `\i` files may include each other.
const MAX_INCLUDE_DEPTH: usize = 16;

/// Where results go: standard output, or the file of `\o`.
enum Sink {
    Stdout,
    File(PathBuf, BufWriter<std::fs::File>),
}

/// A SQL shell's state: its session, settings and the statement being
/// typed.
pub(super) struct Shell {
    sess: SqlSession,
    bar: Bar,
    format: Format,
    timing: bool,
    /// Rows the table and line formats show in the REPL (`None`: all).
    max_rows: Option<usize>,
    /// The REPL: settings changes are confirmed, rows are limited.
    interactive: bool,
    sink: Sink,
    /// Statement text read and not run yet.
    pending: String,
    quit: bool,
    depth: usize,
}

pub(super) async fn run(
    db: &Database,
    commands: Vec<String>,
    files: Vec<PathBuf>,
    format: Format,
    cluster: Option<&str>,
) -> Result<i32> {
    let bar: Bar = Arc::new(Mutex::new(None));
    let sess = match cluster {
        Some(url) => SqlSession::with_cluster(db.clone(), url).await?,
        None => session(db, &bar),
    };
    let mut shell = Shell {
        sess,
        bar,
        format,
        timing: false,
        max_rows: None,
        interactive: false,
        sink: Sink::Stdout,
        pending: String::new(),
        quit: false,
        depth: 0,
    };
    if commands.is_empty() && files.is_empty() && std::io::stdin().is_terminal() {
        return repl::run(shell).await;
    }
    let outcome = shell.scripts(commands, files).await;
    let closed = shell.close_output();
    match outcome.and(closed) {
        Ok(()) => Ok(0),
        // The reader of our output is gone: nothing to say to it.
        Err(_) if stdout::closed() => Ok(0),
        Err(e) => {
            eprintln!("error: {}", shown(&e));
            Ok(1)
        }
    }
}

impl Shell {
    /// `-c` texts, then `-f` files, else standard input.
    async fn scripts(&mut self, commands: Vec<String>, files: Vec<PathBuf>) -> Result<()> {
        if commands.is_empty() && files.is_empty() {
            for line in std::io::stdin().lock().lines() {
                self.line(&line.map_err(|e| Error::io("read SQL from stdin", e))?)
                    .await?;
                if self.quit {
                    return Ok(());
                }
            }
            return self.finish().await;
        }
        for c in &commands {
            self.script(c).await?;
            if self.quit {
                return Ok(());
            }
        }
        for f in &files {
            let text = read_script(f)?;
            self.script(&text).await?;
            if self.quit {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Runs a script's lines, then its last statement if it lacks a `;`.
    fn script<'a>(&'a mut self, text: &'a str) -> LocalBoxFuture<'a, Result<()>> {
        Box::pin(async move {
            for line in text.lines() {
                self.line(line).await?;
                if self.quit {
                    return Ok(());
                }
            }
            self.finish().await
        })
    }

    /// One line of input: a shell command, or statement text (run once a
    /// `;` ends it).
    async fn line(&mut self, line: &str) -> Result<()> {
        if !ends_inside_quote(&self.pending)
            && let Some(m) = meta::parse(line, self.pending.trim().is_empty())?
        {
            return self.meta(m).await;
        }
        if !self.pending.is_empty() {
            self.pending.push('\n');
        }
        self.pending.push_str(line);
        if is_incomplete(&self.pending) {
            return Ok(());
        }
        self.finish().await
    }

    /// Runs the statements pending (the last one may lack its `;`).
    async fn finish(&mut self) -> Result<()> {
        let text = std::mem::take(&mut self.pending);
        for stmt in split_statements(&text) {
            self.statement(&stmt).await?;
        }
        Ok(())
    }

    async fn meta(&mut self, m: Meta) -> Result<()> {
        match m {
            Meta::Quit => self.quit = true,
            Meta::Tables => self.statement("SHOW TABLES").await?,
            Meta::Describe(name) => self.statement(&format!("DESCRIBE {name}")).await?,
            Meta::Mode(None) => say(&format!("mode is {}", self.format.name()))?,
            Meta::Mode(Some(f)) => {
                self.format = f;
                self.confirm(&format!("mode is {}", f.name()))?;
            }
            Meta::Timing(on) => {
                self.timing = on.unwrap_or(!self.timing);
                self.confirm(&format!("timing is {}", if self.timing { "on" } else { "off" }))?;
            }
            Meta::Output(path) => {
                self.close_output()?;
                if let Some(p) = path {
                    let f = std::fs::File::create(&p)
                        .map_err(|e| Error::io(format!("open {} for results (\\o)", p.display()), e))?;
                    self.confirm(&format!("results go to {}", p.display()))?;
                    self.sink = Sink::File(p, BufWriter::new(f));
                } else {
                    self.confirm("results go to standard output")?;
                }
            }
            Meta::Include(path) => {
                if self.depth >= MAX_INCLUDE_DEPTH {
                    return Err(Error::param(format!(
                        "\\i {}: files include each other more than {MAX_INCLUDE_DEPTH} deep",
                        path.display()
                    )));
                }
                let text = read_script(&path)?;
                let outer = std::mem::take(&mut self.pending);
                self.depth += 1;
                let r = self.script(&text).await;
                self.depth -= 1;
                self.pending = outer;
                r?;
            }
            Meta::MaxRows(None) => say(&match self.max_rows {
                Some(n) => format!("maxrows is {n}"),
                None => "maxrows is 0 (all rows)".to_string(),
            })?,
            Meta::MaxRows(Some(n)) => {
                self.max_rows = (n > 0).then_some(n);
                self.confirm(&format!("maxrows is {n}"))?;
            }
            Meta::Help => say(meta::HELP)?,
        }
        Ok(())
    }

    /// A settings change is confirmed in the REPL only (scripts' output
    /// stays the results).
    fn confirm(&self, msg: &str) -> Result<()> {
        if self.interactive { say(msg) } else { Ok(()) }
    }

    /// Runs one statement and prints its result.
    async fn statement(&mut self, stmt: &str) -> Result<()> {
        let started = Instant::now();
        let first = stmt.split_whitespace().next().unwrap_or("");
        let is_insert = first.eq_ignore_ascii_case("insert") || first.eq_ignore_ascii_case("copy");
        if is_insert {
            let p = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::hidden());
            p.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {pos} rows written ({per_sec}, {elapsed})")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            *self.bar.lock() = Some((p, Instant::now()));
        }
        let max_rows = if self.interactive { self.max_rows } else { None };
        // Read-only: each statement sees what the writer committed before
        // it began.
        self.sess.database().refresh().await?;
        let result = async {
            let out = self.sess.execute(stmt).await.map_err(sql_err)?;
            match &mut self.sink {
                Sink::Stdout => print_output(out, self.format, max_rows, &mut stdout::stdout()).await,
                Sink::File(_, f) => print_output(out, self.format, max_rows, f).await,
            }
        }
        .await;
        self.clear_bar();
        let rows = result?;
        if self.timing {
            let secs = started.elapsed().as_secs_f64();
            say(&match rows {
                Some(n) => format!("{n} row(s) in {secs:.3} s"),
                None => format!("done in {secs:.3} s"),
            })?;
        }
        Ok(())
    }

    fn clear_bar(&self) {
        if let Some((p, _)) = self.bar.lock().take() {
            p.finish_and_clear();
        }
    }

    /// Flushes and closes the `\o` file, if there is one.
    fn close_output(&mut self) -> Result<()> {
        if let Sink::File(p, mut f) = std::mem::replace(&mut self.sink, Sink::Stdout) {
            f.flush()
                .map_err(|e| Error::io(format!("write results to {}", p.display()), e))?;
        }
        Ok(())
    }
}

/// A line for the user on standard output.
fn say(msg: &str) -> Result<()> {
    writeln!(stdout::stdout(), "{msg}").map_err(|e| Error::io("write to stdout", e))
}

fn read_script(path: &std::path::Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::io(format!("read SQL file {}", path.display()), e))
}

/// How an error reads on stderr: DataFusion's own errors (planning, parsing,
/// execution) as DataFusion words them; engine errors with their kind.
fn shown(e: &Error) -> String {
    if e.kind() == crate::ErrorKind::ParameterInvalid {
        e.message().to_string()
    } else {
        e.to_string()
    }
}

fn sql_err(e: datafusion::error::DataFusionError) -> Error {
    // Engine errors keep their own message; DataFusion's get its wording.
    match e {
        datafusion::error::DataFusionError::External(inner) => match inner.downcast::<Error>() {
            Ok(e) => *e,
            Err(inner) => Error::param(inner.to_string()),
        },
        other => Error::param(other.strip_backtrace()),
    }
}

/// Whether a script holds only queries (and shell commands other than
/// `\i` and `\o`, which may lead to more).
pub(super) fn only_queries(script: &str) -> bool {
    let mut sql = String::new();
    for line in script.lines() {
        let t = line.trim_start();
        if t.starts_with('\\') || t.starts_with('.') {
            if !matches!(
                meta::parse(t, true),
                Ok(Some(
                    Meta::Tables
                        | Meta::Describe(_)
                        | Meta::Mode(_)
                        | Meta::Timing(_)
                        | Meta::MaxRows(_)
                        | Meta::Help
                        | Meta::Quit
                ))
            ) {
                return false;
            }
            continue;
        }
        sql.push_str(line);
        sql.push('\n');
    }
    split_statements(&sql).iter().all(|stmt| {
        let first = stmt.split(|c: char| !c.is_ascii_alphabetic()).next().unwrap_or("");
        ["select", "with", "show", "describe", "desc", "explain", "values"]
            .iter()
            .any(|k| first.eq_ignore_ascii_case(k))
    })
}
