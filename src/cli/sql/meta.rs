//! The shell's own commands (`\dt`, `\mode csv`, `.tables`, `exit`, ...):
//! which lines are one, and what they ask for.
//!
//! Invariants: a line starting with `\` is always a shell command (an
//! unknown one is an error, never SQL); a line starting with `.` is one
//! when it names a known command, or when it starts a statement; `exit`
//! and `quit` are commands only where a statement would start. The same
//! rules hold in the REPL, in `-c`, `-f` and `\i` scripts and on stdin.

use std::path::PathBuf;

use super::output::Format;
use crate::error::{Error, Result};

/// A shell command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Meta {
    Quit,
    /// `\dt`, `\d`, `.tables`.
    Tables,
    /// `\d NAME`.
    Describe(String),
    /// `\mode FORMAT` (`None`: show the current one).
    Mode(Option<Format>),
    /// `\timing [on|off]` (`None`: toggle).
    Timing(Option<bool>),
    /// `\o FILE` (`None`: back to standard output).
    Output(Option<PathBuf>),
    /// `\i FILE`.
    Include(PathBuf),
    /// `\maxrows N` (`None`: show the current limit).
    MaxRows(Option<usize>),
    Help,
}

/// Every command name, for help and completion: `\` names, then `.` ones.
pub(super) const NAMES: &[&str] = &[
    "\\q",
    "\\dt",
    "\\d",
    "\\mode",
    "\\timing",
    "\\o",
    "\\i",
    "\\maxrows",
    "\\?",
    "\\help",
    ".tables",
    ".mode",
    ".timing",
    ".output",
    ".read",
    ".maxrows",
    ".quit",
    ".exit",
    ".help",
    "exit",
    "quit",
];

pub(super) const HELP: &str = "\
Statements end with ';' and may span lines. Shell commands (one a line; \\ or . both work):
  \\dt, .tables        list tables and series
  \\d NAME             describe a table (DESCRIBE NAME)
  \\mode FORMAT        result format: table, csv, json, ndjson, line (also .mode)
  \\maxrows N          rows the table and line formats show in the shell (0: all)
  \\timing [on|off]    the row count and time after each statement
  \\o FILE, \\o         results to FILE, or back to the terminal (also .output)
  \\i FILE             run the statements and commands of FILE (also .read)
  \\q, exit, quit      leave (or Ctrl-D)
  \\?                  this help
Ctrl-C cancels the running statement; at an empty prompt, twice, it leaves.
Table functions: cellar_versions('t' [, max_versions [, start_ms, end_ms]]), cellar_as_of('t', version_ms)";

/// The command `line` holds, if it is one. `at_start`: no statement text
/// is pending (where `.name` and `exit` may start one).
pub(super) fn parse(line: &str, at_start: bool) -> Result<Option<Meta>> {
    let t = line.trim();
    let t = t.strip_suffix(';').map(str::trim_end).unwrap_or(t);
    if at_start && (t.eq_ignore_ascii_case("exit") || t.eq_ignore_ascii_case("quit")) {
        return Ok(Some(Meta::Quit));
    }
    let (sigil, body) = match t.chars().next() {
        Some(c @ ('\\' | '.')) => (c, &t[1..]),
        _ => return Ok(None),
    };
    let (name, arg) = match body.split_once(char::is_whitespace) {
        Some((n, a)) => (n, a.trim()),
        None => (body, ""),
    };
    let arg = unquote(arg);
    let meta = match (sigil, name) {
        ('\\', "q") | ('.', "quit" | "exit") => Meta::Quit,
        ('\\', "dt") | ('.', "tables") => Meta::Tables,
        ('\\', "d") if arg.is_empty() => Meta::Tables,
        ('\\', "d") => Meta::Describe(arg.to_string()),
        ('\\', "mode") | ('.', "mode") if arg.is_empty() => Meta::Mode(None),
        ('\\', "mode") | ('.', "mode") => {
            Meta::Mode(Some(Format::parse(arg).ok_or_else(|| {
                Error::param(format!("unknown mode '{arg}'; accepted: {}", Format::NAMES))
            })?))
        }
        ('\\', "timing") | ('.', "timing") => Meta::Timing(match arg.to_ascii_lowercase().as_str() {
            "" => None,
            "on" => Some(true),
            "off" => Some(false),
            _ => return Err(Error::param(format!("\\timing takes on or off, not '{arg}'"))),
        }),
        ('\\', "o") | ('.', "output" | "o") => Meta::Output((!arg.is_empty()).then(|| PathBuf::from(arg))),
        ('\\', "i") | ('.', "read") if arg.is_empty() => {
            return Err(Error::param(format!("{sigil}{name} needs a file: {sigil}{name} FILE")));
        }
        ('\\', "i") | ('.', "read") => Meta::Include(PathBuf::from(arg)),
        ('\\', "maxrows") | ('.', "maxrows") if arg.is_empty() => Meta::MaxRows(None),
        ('\\', "maxrows") | ('.', "maxrows") => {
            Meta::MaxRows(Some(arg.parse().map_err(|_| {
                Error::param(format!("\\maxrows takes a number of rows (0: all), not '{arg}'"))
            })?))
        }
        ('\\', "?" | "h" | "help") | ('.', "help") => Meta::Help,
        // `.5 AS x` goes on a statement; `.foo` cannot start one.
        ('.', _) if !at_start => return Ok(None),
        _ => {
            return Err(Error::param(format!(
                "unknown command '{sigil}{name}'; \\? lists the commands (\\dt, \\d NAME, \\mode, \\timing, \\o, \\i, \\maxrows, \\q)"
            )));
        }
    };
    Ok(Some(meta))
}

/// `'a file'` or `"a file"` without its quotes.
fn unquote(s: &str) -> &str {
    for q in ['\'', '"'] {
        if let Some(inner) = s.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(line: &str) -> Option<Meta> {
        parse(line, true).unwrap()
    }

    #[test]
    fn commands_and_their_arguments() {
        assert_eq!(meta("\\q"), Some(Meta::Quit));
        assert_eq!(meta("  EXIT; "), Some(Meta::Quit));
        assert_eq!(meta("quit"), Some(Meta::Quit));
        assert_eq!(meta(".tables"), Some(Meta::Tables));
        assert_eq!(meta("\\dt"), Some(Meta::Tables));
        assert_eq!(meta("\\d"), Some(Meta::Tables));
        assert_eq!(meta("\\d orders"), Some(Meta::Describe("orders".into())));
        assert_eq!(meta(".mode csv"), Some(Meta::Mode(Some(Format::Csv))));
        assert_eq!(meta("\\mode LINE"), Some(Meta::Mode(Some(Format::Line))));
        assert_eq!(meta("\\mode"), Some(Meta::Mode(None)));
        assert_eq!(meta("\\timing"), Some(Meta::Timing(None)));
        assert_eq!(meta("\\timing off"), Some(Meta::Timing(Some(false))));
        assert_eq!(
            meta("\\o 'out file.csv'"),
            Some(Meta::Output(Some("out file.csv".into())))
        );
        assert_eq!(meta("\\o"), Some(Meta::Output(None)));
        assert_eq!(meta(".read x.sql"), Some(Meta::Include("x.sql".into())));
        assert_eq!(meta("\\maxrows 0"), Some(Meta::MaxRows(Some(0))));
        assert_eq!(meta("\\?"), Some(Meta::Help));
        assert_eq!(meta("select 1;"), None);
    }

    #[test]
    fn statements_are_not_commands() {
        // Mid-statement, `.5` and `exit` are SQL text; `\` lines never are.
        assert_eq!(parse(".5 AS x;", false).unwrap(), None);
        assert_eq!(parse("exit", false).unwrap(), None);
        assert_eq!(parse("\\timing", false).unwrap(), Some(Meta::Timing(None)));
        assert_eq!(parse(".mode csv", false).unwrap(), Some(Meta::Mode(Some(Format::Csv))));
    }

    #[test]
    fn bad_commands_say_what_is_accepted() {
        let e = parse("\\foo", true).unwrap_err();
        assert!(e.message().contains("unknown command '\\foo'"), "{e}");
        assert!(e.message().contains("\\?"), "{e}");
        let e = parse(".frobnicate", true).unwrap_err();
        assert!(e.message().contains("unknown command '.frobnicate'"), "{e}");
        let e = parse("\\mode xml", true).unwrap_err();
        assert!(e.message().contains("table, csv, json, ndjson, line"), "{e}");
        let e = parse("\\maxrows many", true).unwrap_err();
        assert!(e.message().contains("number of rows"), "{e}");
        let e = parse("\\i", true).unwrap_err();
        assert!(e.message().contains("needs a file"), "{e}");
        assert!(parse("\\timing maybe", true).is_err());
    }
}
