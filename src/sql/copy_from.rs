//! `COPY t FROM 'file' [WITH (format csv, header true, delimiter ',')]`:
//! a file into a table through [`super::import::import_file`].
//!
//! DataFusion's parser knows only `COPY .. TO`; the `FROM` form is read
//! here, before it. Invariant: a statement is taken here only when it
//! starts `COPY name FROM`; anything else goes on to DataFusion, whose
//! errors stay its own.

use std::sync::Arc;

use datafusion::arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};

use super::import::{ImportFormat, ImportOptions, import_file};
use super::{InsertProgress, SqlSession, StatementOutput, batches_stream};
use crate::error::{Error, Result};

/// A parsed `COPY .. FROM`.
#[derive(Debug, PartialEq)]
pub(crate) struct CopyFrom {
    table: String,
    path: String,
    header: bool,
    delimiter: Option<u8>,
    format: Option<ImportFormat>,
}

/// The statement as a `COPY .. FROM`, if it is one (`Some(Err)`: it is,
/// but malformed).
pub(crate) fn parse(sql: &str) -> Option<Result<CopyFrom>> {
    let mut rest = sql.trim().trim_end_matches(';').trim_end();
    let word = |s: &mut &str, w: &str| -> bool {
        let t = s.trim_start();
        if t.len() >= w.len() && t[..w.len()].eq_ignore_ascii_case(w) && !t[w.len()..].starts_with(is_ident) {
            *s = &t[w.len()..];
            true
        } else {
            false
        }
    };
    if !word(&mut rest, "COPY") {
        return None;
    }
    let (table, after) = ident(rest.trim_start())?;
    rest = after;
    if !word(&mut rest, "FROM") {
        return None;
    }
    Some(parse_rest(table, rest))
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// A table name (plain, lower-cased, or double-quoted) and what follows.
fn ident(s: &str) -> Option<(String, &str)> {
    if let Some(q) = s.strip_prefix('"') {
        let end = q.find('"')?;
        return Some((q[..end].to_string(), &q[end + 1..]));
    }
    let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    (end > 0).then(|| (s[..end].to_lowercase(), &s[end..]))
}

/// A single-quoted string ('' inside is a quote) and what follows.
fn quoted(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.strip_prefix('\'')?.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '\'' {
            if chars.peek().is_some_and(|(_, d)| *d == '\'') {
                chars.next();
                out.push('\'');
                continue;
            }
            return Some((out, &s[i + 2..]));
        }
        out.push(c);
    }
    None
}

const USAGE: &str = "COPY table FROM 'file.csv' | 'file.parquet' | 'file.ndjson' \
                     [WITH (format csv|parquet|ndjson, header true|false, delimiter ',')]";

fn parse_rest(table: String, rest: &str) -> Result<CopyFrom> {
    let bad = |what: &str| Error::param(format!("{what}; the form is {USAGE}"));
    let (path, rest) =
        quoted(rest.trim_start()).ok_or_else(|| bad("COPY .. FROM needs a file name in single quotes"))?;
    let mut copy = CopyFrom {
        table,
        path,
        header: true,
        delimiter: None,
        format: None,
    };
    let mut rest = rest.trim();
    if rest.len() >= 4 && rest[..4].eq_ignore_ascii_case("WITH") {
        rest = rest[4..].trim_start();
    }
    if rest.is_empty() {
        return Ok(copy);
    }
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| bad(&format!("unexpected '{rest}' after the file name")))?;
    for opt in options(inner) {
        let (key, value) = opt.split_once(char::is_whitespace).unwrap_or((opt, ""));
        let value = value.trim();
        let value = value
            .strip_prefix('\'')
            .and_then(|v| v.strip_suffix('\''))
            .unwrap_or(value);
        match key.to_ascii_lowercase().as_str() {
            "header" => {
                copy.header = match value.to_ascii_lowercase().as_str() {
                    "true" | "" => true,
                    "false" => false,
                    _ => return Err(bad(&format!("header takes true or false, not '{value}'"))),
                }
            }
            "delimiter" if value.len() == 1 => copy.delimiter = Some(value.as_bytes()[0]),
            "delimiter" if value == "\\t" => copy.delimiter = Some(b'\t'),
            "delimiter" => return Err(bad(&format!("the delimiter is one character, not '{value}'"))),
            "format" => {
                copy.format = Some(
                    <ImportFormat as clap::ValueEnum>::from_str(value, true)
                        .map_err(|_| bad(&format!("unknown format '{value}'")))?,
                )
            }
            other => return Err(bad(&format!("unknown option '{other}'"))),
        }
    }
    Ok(copy)
}

/// The options of `( .. )`, split at commas outside single quotes.
fn options(inner: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut quoted = false;
    for (i, c) in inner.char_indices() {
        match c {
            '\'' => quoted = !quoted,
            ',' if !quoted => {
                out.push(inner[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(inner[start..].trim());
    out.retain(|o| !o.is_empty());
    out
}

/// Runs a parsed `COPY .. FROM`: one row of `rows`, `rejected`,
/// `seconds`, `rows_per_second` and `rejects` (the first rejected lines,
/// `line N: why`, one a line).
pub(crate) async fn execute(sess: &SqlSession, copy: CopyFrom) -> Result<StatementOutput> {
    let opts = ImportOptions {
        format: copy.format,
        header: copy.header,
        delimiter: copy.delimiter,
    };
    let progress = sess.context().state().config().get_extension::<InsertProgress>();
    let report_progress = |n: u64| {
        if let Some(p) = &progress {
            (p.0)(n)
        }
    };
    let report = import_file(
        sess.database(),
        &copy.table,
        std::path::Path::new(&copy.path),
        &opts,
        Some(&report_progress),
    )
    .await?;
    let rejects: Vec<String> = report
        .rejects
        .iter()
        .map(|r| format!("line {}: {}", r.line, r.reason))
        .collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("rows", DataType::Int64, false),
        Field::new("rejected", DataType::Int64, false),
        Field::new("seconds", DataType::Float64, false),
        Field::new("rows_per_second", DataType::Float64, false),
        Field::new("rejects", DataType::Utf8, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(vec![report.rows as i64])),
            Arc::new(Int64Array::from(vec![report.rejected as i64])),
            Arc::new(Float64Array::from(vec![(report.seconds * 1000.0).round() / 1000.0])),
            Arc::new(Float64Array::from(vec![
                (report.rows as f64 / report.seconds.max(1e-9)).round(),
            ])),
            Arc::new(StringArray::from(vec![rejects.join("\n")])),
        ],
    )?;
    Ok(StatementOutput::Rows(batches_stream(schema, vec![batch])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_from_statements_are_read() {
        let c = parse("copy Orders FROM '/tmp/o''s.csv';").unwrap().unwrap();
        assert_eq!(
            (c.table.as_str(), c.path.as_str(), c.header),
            ("orders", "/tmp/o's.csv", true)
        );
        let c = parse("COPY \"Big\" FROM 'x.tsv' WITH (header false, delimiter '|', format csv)")
            .unwrap()
            .unwrap();
        assert_eq!(
            c,
            CopyFrom {
                table: "Big".into(),
                path: "x.tsv".into(),
                header: false,
                delimiter: Some(b'|'),
                format: Some(ImportFormat::Csv),
            }
        );
        let c = parse("COPY t FROM 'x.csv' (delimiter ',', header true)")
            .unwrap()
            .unwrap();
        assert_eq!(c.delimiter, Some(b','));
        // DataFusion's COPY .. TO is not taken.
        assert!(parse("COPY (SELECT 1) TO 'x.parquet'").is_none());
        assert!(parse("COPY t TO 'x.parquet'").is_none());
        assert!(parse("COPYRIGHT").is_none());
        for bad in [
            "COPY t FROM x.csv",
            "COPY t FROM 'x' WITH (colour red)",
            "COPY t FROM 'x' (header maybe)",
        ] {
            let e = parse(bad).unwrap().unwrap_err();
            assert!(e.message().contains("the form is COPY table FROM"), "{bad}: {e}");
        }
    }
}
