//! The interactive SQL shell: line editing, history, completion, and
//! Ctrl-C.
//!
//! Invariants: Ctrl-C while a statement runs cancels it (its future is
//! dropped: DataFusion stops its tasks; the rows an INSERT had written
//! stay, as after any failed INSERT) and the prompt comes back; Ctrl-C at
//! the prompt drops the line and the statement typed so far, and a
//! second one in a row at an empty prompt leaves, as Ctrl-D, `\q`, `exit`
//! and `quit` do. Each statement and command goes into the history file
//! as it is entered, so a killed shell keeps it.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::FileHistory;
use rustyline::validate::Validator;
use rustyline::{Cmd, CompletionType, ConditionalEventHandler, Editor, Event, EventContext, EventHandler, KeyEvent};

use super::complete::{self, Names};
use super::{Shell, say, shown};
use crate::Database;
use crate::error::{Error, Result};

/// Rows the table and line formats show before saying how many there were.
const DEFAULT_MAX_ROWS: usize = 40;

pub(super) async fn run(mut shell: Shell) -> Result<i32> {
    shell.interactive = true;
    shell.timing = true;
    shell.max_rows = Some(DEFAULT_MAX_ROWS);
    let config = rustyline::Config::builder()
        .completion_type(CompletionType::List)
        .auto_add_history(false)
        .build();
    let mut rl: Editor<ShellHelper, FileHistory> =
        Editor::with_config(config).map_err(|e| Error::io("start the line editor", e))?;
    rl.set_helper(Some(ShellHelper {
        db: shell.sess.database().clone(),
        pending: String::new(),
    }));
    let empty_line = Arc::new(AtomicBool::new(false));
    rl.bind_sequence(
        KeyEvent::ctrl('C'),
        EventHandler::Conditional(Box::new(NoteEmptyLine(empty_line.clone()))),
    );
    let history = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cellar_history"));
    if let Some(h) = &history {
        let _ = rl.load_history(h);
    }
    say(&format!(
        "Cellar SQL on {} - statements end with ';', \\? for help, \\q to quit",
        shell.sess.database().path().display()
    ))?;
    // The last key was Ctrl-C at an empty prompt.
    let mut leaving = false;
    while !shell.quit {
        if let Some(h) = rl.helper_mut() {
            h.pending.clone_from(&shell.pending);
        }
        let prompt = if shell.pending.is_empty() {
            "cellar> "
        } else {
            "     -> "
        };
        let line = match rl.readline(prompt) {
            Ok(l) => l,
            Err(ReadlineError::Interrupted) => {
                let empty = empty_line.load(Ordering::Relaxed) && shell.pending.is_empty();
                shell.pending.clear();
                if empty && leaving {
                    break;
                }
                leaving = empty;
                if empty {
                    eprintln!("(Ctrl-C again, Ctrl-D or \\q to leave)");
                }
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(Error::io("read a line", e)),
        };
        leaving = false;
        let entry = if shell.pending.is_empty() {
            line.clone()
        } else {
            format!("{}\n{line}", shell.pending)
        };
        let outcome = cancellable(shell.line(&line)).await;
        if shell.pending.is_empty() && !entry.trim().is_empty() {
            let _ = rl.add_history_entry(entry.as_str());
            if let Some(h) = &history {
                let _ = rl.append_history(h);
            }
        }
        match outcome {
            Some(Ok(())) => {}
            Some(Err(e)) => eprintln!("error: {}", shown(&e)),
            None => {
                shell.clear_bar();
                shell.pending.clear();
                eprintln!("cancelled");
            }
        }
    }
    shell.close_output()?;
    Ok(0)
}

/// Runs `f` until it ends or Ctrl-C (`None`) comes first.
async fn cancellable<F: std::future::Future<Output = Result<()>>>(f: F) -> Option<Result<()>> {
    // Listening starts before the statement does: no Ctrl-C is missed.
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::select! {
        r = f => Some(r),
        _ = ctrl_c => None,
    }
}

/// Notes whether the line was empty when Ctrl-C was pressed, then lets
/// rustyline interrupt as usual.
struct NoteEmptyLine(Arc<AtomicBool>);

impl ConditionalEventHandler for NoteEmptyLine {
    fn handle(&self, _evt: &Event, _n: rustyline::RepeatCount, _positive: bool, ctx: &EventContext) -> Option<Cmd> {
        self.0.store(ctx.line().is_empty(), Ordering::Relaxed);
        None
    }
}

/// Completion from the database's names.
struct ShellHelper {
    db: Database,
    /// The statement typed on earlier lines.
    pending: String,
}

struct DbNames<'a>(&'a Database);

impl Names for DbNames<'_> {
    fn tables(&self) -> Vec<String> {
        let mut names = self.0.list_tables();
        names.extend(self.0.list_series());
        names.sort();
        names.dedup();
        names
    }

    fn columns(&self, table: &str) -> Vec<String> {
        crate::sql::column_names(self.0, table).unwrap_or_default()
    }
}

impl Completer for ShellHelper {
    type Candidate = String;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        Ok(complete::complete(&self.pending, line, pos, &DbNames(&self.db)))
    }
}

impl Hinter for ShellHelper {
    type Hint = String;
}

impl Highlighter for ShellHelper {}

impl Validator for ShellHelper {}

impl rustyline::Helper for ShellHelper {}
