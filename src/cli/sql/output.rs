//! Printing a statement's result: the five formats, streamed.
//!
//! Invariants: the csv, json and ndjson formats are a public interface and
//! print every row, batch by batch as they come; the table and line
//! formats print every row too, except where a row limit is given (the
//! REPL's `\maxrows`), and then say how many rows there were. No format
//! holds more than [`TABLE_BLOCK_ROWS`] rows (or the limit) at a time: a
//! longer table is printed in blocks, each with its header.

use std::io::Write;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::json::writer::{JsonArray, LineDelimited};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;

use crate::error::{Error, Result};
use crate::sql::StatementOutput;

/// How result sets are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned table with borders
    Table,
    /// Header line, then one line per row; NULL is an empty field
    Csv,
    /// One JSON array of objects
    Json,
    /// One JSON object per line
    Ndjson,
    /// One `column = value` line per column, a blank line between rows
    Line,
}

impl Format {
    /// The names `--format` and `\mode` accept.
    pub(super) const NAMES: &'static str = "table, csv, json, ndjson, line";

    pub(super) fn parse(s: &str) -> Option<Format> {
        <Format as clap::ValueEnum>::from_str(s, true).ok()
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Format::Table => "table",
            Format::Csv => "csv",
            Format::Json => "json",
            Format::Ndjson => "ndjson",
            Format::Line => "line",
        }
    }
}

/// Rows a streamed table is printed in blocks of (each with its header).
pub(super) const TABLE_BLOCK_ROWS: usize = 10_000;

fn io(e: std::io::Error) -> Error {
    Error::io("write the result", e)
}

/// Prints one statement's output to `w`; returns its row count for result
/// sets. `max_rows`: in the table and line formats, print only the first
/// this many rows and say how many there were.
pub(crate) async fn print_output(
    out: StatementOutput,
    format: Format,
    max_rows: Option<usize>,
    w: &mut dyn Write,
) -> Result<Option<usize>> {
    match out {
        StatementOutput::Done(msg) => {
            if matches!(format, Format::Table | Format::Line) {
                writeln!(w, "{msg}").map_err(io)?;
            }
            Ok(None)
        }
        StatementOutput::Rows(mut stream) => {
            let rows = match format {
                Format::Table | Format::Line => print_rows(&mut stream, format, max_rows, w).await?,
                Format::Csv => write_csv(&mut stream, w).await?,
                Format::Json => {
                    let n = write_json::<JsonArray>(&mut stream, w).await?;
                    writeln!(w).map_err(io)?;
                    n
                }
                Format::Ndjson => write_json::<LineDelimited>(&mut stream, w).await?,
            };
            w.flush().map_err(io)?;
            Ok(Some(rows))
        }
    }
}

/// The table and line formats: blocks of at most [`TABLE_BLOCK_ROWS`]
/// rows, or the first `max_rows` rows and a count of the rest.
async fn print_rows(
    stream: &mut SendableRecordBatchStream,
    format: Format,
    max_rows: Option<usize>,
    w: &mut dyn Write,
) -> Result<usize> {
    let schema: SchemaRef = stream.schema();
    let max_rows = max_rows.filter(|&m| m > 0);
    let keep = max_rows.unwrap_or(TABLE_BLOCK_ROWS);
    // Invariant: `in_block` (the rows of `block`) <= `keep`.
    let mut block: Vec<RecordBatch> = Vec::new();
    let mut in_block = 0;
    let mut total = 0;
    let mut printed_any = false;
    while let Some(b) = stream.next().await {
        let mut b = b.map_err(super::sql_err)?;
        total += b.num_rows();
        loop {
            let take = b.num_rows().min(keep - in_block);
            if take > 0 {
                block.push(printable(&b.slice(0, take))?);
                in_block += take;
            }
            if max_rows.is_some() || take == b.num_rows() {
                // With a limit, rows past it are counted, not kept.
                break;
            }
            // A full block: printed, and the batch's rest goes on.
            render(&block, format, printed_any, w)?;
            printed_any = true;
            block.clear();
            in_block = 0;
            b = b.slice(take, b.num_rows() - take);
        }
    }
    if !block.is_empty() || !printed_any {
        if block.is_empty() && format == Format::Table {
            block.push(printable(&RecordBatch::new_empty(schema))?);
        }
        render(&block, format, printed_any, w)?;
    }
    if let Some(max) = max_rows
        && total > max
    {
        writeln!(
            w,
            "({total} rows, the first {max} shown; \\maxrows N to show more, 0 for all)"
        )
        .map_err(io)?;
    }
    Ok(total)
}

fn render(batches: &[RecordBatch], format: Format, after_rows: bool, w: &mut dyn Write) -> Result<()> {
    match format {
        Format::Line => write_lines(batches, after_rows, w),
        _ => {
            let table = pretty_format_batches(batches).map_err(Error::from)?;
            writeln!(w, "{table}").map_err(io)
        }
    }
}

/// The line format: each row's columns as `name = value`, names aligned
/// right, NULL as `NULL`, a blank line between rows.
fn write_lines(batches: &[RecordBatch], after_rows: bool, w: &mut dyn Write) -> Result<()> {
    let opts = FormatOptions::default().with_null("NULL");
    let mut first = !after_rows;
    for b in batches {
        let schema = b.schema();
        let width = schema
            .fields()
            .iter()
            .map(|f| f.name().chars().count())
            .max()
            .unwrap_or(0);
        let cols = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for row in 0..b.num_rows() {
            if !first {
                writeln!(w).map_err(io)?;
            }
            first = false;
            for (f, c) in schema.fields().iter().zip(&cols) {
                writeln!(w, "{:>width$} = {}", f.name(), c.value(row)).map_err(io)?;
            }
        }
    }
    Ok(())
}

async fn write_csv(stream: &mut SendableRecordBatchStream, w: &mut dyn Write) -> Result<usize> {
    let header: Vec<String> = stream.schema().fields().iter().map(|f| csv_field(f.name())).collect();
    writeln!(w, "{}", header.join(",")).map_err(io)?;
    let mut csv = datafusion::arrow::csv::WriterBuilder::new().with_header(false).build(w);
    let mut rows = 0;
    while let Some(b) = stream.next().await {
        let b = b.map_err(super::sql_err)?;
        rows += b.num_rows();
        csv.write(&printable(&b)?).map_err(Error::from)?;
    }
    Ok(rows)
}

/// Streams result batches through Arrow's JSON writer (explicit nulls).
async fn write_json<F: datafusion::arrow::json::writer::JsonFormat>(
    stream: &mut SendableRecordBatchStream,
    out: &mut dyn Write,
) -> Result<usize> {
    let mut w = datafusion::arrow::json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, F>(out);
    let mut rows = 0;
    while let Some(b) = stream.next().await {
        let b = b.map_err(super::sql_err)?;
        rows += b.num_rows();
        w.write(&printable(&b)?).map_err(Error::from)?;
    }
    w.finish().map_err(Error::from)?;
    Ok(rows)
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Binary values print as hex in every format.
fn printable(batch: &RecordBatch) -> Result<RecordBatch> {
    if !batch.schema().fields().iter().any(|f| is_binary(f.data_type())) {
        return Ok(batch.clone());
    }
    let mut fields = Vec::new();
    let mut cols: Vec<ArrayRef> = Vec::new();
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        if is_binary(f.data_type()) {
            let c = datafusion::arrow::compute::cast(c, &DataType::Binary).map_err(Error::from)?;
            let b = c.as_binary::<i32>();
            let hex: StringArray = b
                .iter()
                .map(|v| v.map(|v| v.iter().map(|x| format!("{x:02x}")).collect::<String>()))
                .collect();
            fields.push(Field::new(f.name(), DataType::Utf8, f.is_nullable()));
            cols.push(Arc::new(hex));
        } else {
            fields.push(f.as_ref().clone());
            cols.push(c.clone());
        }
    }
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)?)
}

fn is_binary(t: &DataType) -> bool {
    matches!(t, DataType::Binary | DataType::LargeBinary | DataType::BinaryView)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;

    fn batches(rows: &[i64], per_batch: usize) -> StatementOutput {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
        let bs: Vec<RecordBatch> = rows
            .chunks(per_batch)
            .map(|c| RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(c.to_vec()))]).unwrap())
            .collect();
        StatementOutput::Rows(crate::sql::batches_stream(schema, bs))
    }

    async fn printed(out: StatementOutput, format: Format, max: Option<usize>) -> (String, Option<usize>) {
        let mut buf = Vec::new();
        let n = print_output(out, format, max, &mut buf).await.unwrap();
        (String::from_utf8(buf).unwrap(), n)
    }

    #[tokio::test]
    async fn a_row_limit_shows_the_first_rows_and_counts_the_rest() {
        let rows: Vec<i64> = (0..100).collect();
        let (text, n) = printed(batches(&rows, 7), Format::Table, Some(10)).await;
        assert_eq!(n, Some(100));
        assert!(text.contains("| 9 "), "{text}");
        assert!(!text.contains("| 10 "), "{text}");
        assert!(
            text.ends_with("(100 rows, the first 10 shown; \\maxrows N to show more, 0 for all)\n"),
            "{text}"
        );
        // Within the limit: no footer.
        let (text, _) = printed(batches(&rows[..5], 2), Format::Table, Some(10)).await;
        assert!(!text.contains("rows,"), "{text}");
    }

    #[tokio::test]
    async fn long_tables_are_printed_in_blocks_with_every_row() {
        let rows: Vec<i64> = (0..(TABLE_BLOCK_ROWS as i64 * 2 + 5)).collect();
        let (text, n) = printed(batches(&rows, 999), Format::Table, None).await;
        assert_eq!(n, Some(rows.len()));
        let values: Vec<i64> = text
            .lines()
            .filter_map(|l| l.strip_prefix("| ")?.trim_end_matches('|').trim().parse().ok())
            .collect();
        assert_eq!(values, rows);
        assert_eq!(text.matches("| n ").count(), 3, "a header per block");
    }

    #[tokio::test]
    async fn line_format_names_each_value() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("long_name", DataType::Int64, true),
        ]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(Int64Array::from(vec![Some(10), None])),
            ],
        )
        .unwrap();
        let out = StatementOutput::Rows(crate::sql::batches_stream(schema, vec![b]));
        let (text, _) = printed(out, Format::Line, None).await;
        assert_eq!(
            text,
            "       id = 1\nlong_name = 10\n\n       id = 2\nlong_name = NULL\n"
        );
    }
}
