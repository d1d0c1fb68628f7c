//! Files into a table: `COPY t FROM 'file'` and `cellar import`, for CSV,
//! Parquet and NDJSON.
//!
//! Invariants: rows are written as INSERT writes them (a PutRow each,
//! batches queued in file order, so a later row of a key wins; the import
//! returns once every row is durable); values are typed by the table's key
//! and declared columns (other columns: a number, a boolean or a string by
//! what the value is); a line that cannot become a row (a missing or
//! unconvertible key, a value of the wrong type, a write the table
//! refuses) is rejected alone, with its line number, and the rest go on.
//! Line numbers count the file's lines (a CSV header is line 1; a quoted
//! field spanning lines counts once) or, for Parquet, rows from 1.

use std::path::Path;
use std::time::Instant;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use futures::StreamExt;
use futures::stream::FuturesOrdered;

use crate::db::{Database, Writer};
use crate::error::{Error, Result};
use crate::model::api::{PutRow, RowWrite};
use crate::model::schema::{MAX_BATCH_WRITE_ROWS, TableSchema};
use crate::model::types::{PkType, PkValue, PrimaryKey, Value, ValueType};

/// The file formats [`import_file`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ImportFormat {
    /// Comma-separated values (or another delimiter), a header line first
    Csv,
    /// Apache Parquet
    Parquet,
    /// One JSON object per line
    Ndjson,
}

impl ImportFormat {
    /// The format a file name's extension says (`.csv`, `.tsv`,
    /// `.parquet`, `.ndjson`, `.jsonl`, `.json`).
    pub fn of_path(path: &Path) -> Option<ImportFormat> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "csv" | "tsv" | "txt" => ImportFormat::Csv,
            "parquet" | "pq" => ImportFormat::Parquet,
            "ndjson" | "jsonl" | "json" => ImportFormat::Ndjson,
            _ => return None,
        })
    }
}

/// How [`import_file`] reads its file.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// `None`: by the file name's extension.
    pub format: Option<ImportFormat>,
    /// CSV: the first line names the columns (default). Without it, the
    /// columns are the table's key columns, then its declared ones.
    pub header: bool,
    /// CSV: the field delimiter (default `,`; a `.tsv` file: tab).
    pub delimiter: Option<u8>,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            format: None,
            header: true,
            delimiter: None,
        }
    }
}

/// A rejected line: its number and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// Its line number (1 is the first line; for Parquet, the row).
    pub line: u64,
    /// Why it was not written.
    pub reason: String,
}

/// What an import did.
#[derive(Debug, Clone, Default)]
pub struct ImportReport {
    /// Rows written (durable).
    pub rows: u64,
    /// Lines rejected.
    pub rejected: u64,
    /// The first [`MAX_REPORTED_REJECTS`] rejected lines.
    pub rejects: Vec<Rejected>,
    /// Seconds the import took.
    pub seconds: f64,
}

/// Rejected lines an [`ImportReport`] lists one by one.
pub const MAX_REPORTED_REJECTS: usize = 100;

/// Writes in flight at once (each a batch of up to 200 rows).
const IN_FLIGHT: usize = 16;

/// What a column of the file becomes.
#[derive(Clone, Copy)]
enum Target {
    Key(usize, PkType),
    Declared(ValueType),
    Free,
}

/// Imports `path` into table or series `name`; `progress` hears the rows
/// written so far.
pub async fn import_file(
    db: &Database,
    name: &str,
    path: &Path,
    opts: &ImportOptions,
    progress: Option<&(dyn Fn(u64) + Sync)>,
) -> Result<ImportReport> {
    let started = Instant::now();
    let writer = match db.series(name) {
        Ok(s) => Writer::Series(s),
        Err(_) => Writer::Table(db.table(name)?),
    };
    if writer_is_archived(&writer) {
        return Err(Error::new(
            crate::ErrorKind::ReadOnly,
            format!("table '{name}' is archived and read-only; `cellar restore {name}` makes it writable"),
        ));
    }
    let format = match opts.format.or_else(|| ImportFormat::of_path(path)) {
        Some(f) => f,
        None => {
            return Err(Error::param(format!(
                "cannot tell the format of {} from its name; give one: csv, parquet or ndjson",
                path.display()
            )));
        }
    };
    let file = std::fs::File::open(path).map_err(|e| Error::io(format!("open {}", path.display()), e))?;
    let declared = declared_columns(&writer);
    let schema = writer.schema().clone();
    let mut sink = Sink::new(writer, progress);
    let target = |col: &str| target_of(&schema, &declared, col);
    match format {
        ImportFormat::Ndjson => {
            let reader = std::io::BufReader::new(file);
            for (i, line) in std::io::BufRead::lines(reader).enumerate() {
                let line = line.map_err(|e| Error::io(format!("read {}", path.display()), e))?;
                if line.trim().is_empty() {
                    continue;
                }
                let row = ndjson_row(&schema, &line, &target);
                sink.push(i as u64 + 1, row).await?;
            }
        }
        ImportFormat::Csv => {
            let tsv = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("tsv"));
            let delimiter = opts.delimiter.unwrap_or(if tsv { b'\t' } else { b',' });
            let mut file = file;
            let names = csv_names(&mut file, opts.header, delimiter, &schema, &declared, path)?;
            let fields: Vec<Field> = names.iter().map(|n| Field::new(n, DataType::Utf8, true)).collect();
            let reader = datafusion::arrow::csv::ReaderBuilder::new(std::sync::Arc::new(Schema::new(fields)))
                .with_header(opts.header)
                .with_delimiter(delimiter)
                .with_batch_size(8192)
                .build(file)
                .map_err(|e| Error::param(format!("read {} as CSV: {e}", path.display())))?;
            let targets: Vec<Target> = names.iter().map(|n| target(n)).collect();
            let mut line = u64::from(opts.header);
            for batch in reader {
                let batch = batch.map_err(|e| Error::param(format!("{}: {e}", path.display())))?;
                for r in 0..batch.num_rows() {
                    line += 1;
                    let row = text_row(&schema, &names, &targets, &batch, r);
                    sink.push(line, row).await?;
                }
            }
        }
        ImportFormat::Parquet => {
            let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                .and_then(|b| b.with_batch_size(8192).build())
                .map_err(|e| Error::param(format!("read {} as Parquet: {e}", path.display())))?;
            let mut line = 0u64;
            for batch in reader {
                let batch = batch.map_err(|e| Error::param(format!("{}: {e}", path.display())))?;
                let names: Vec<String> = batch.schema().fields().iter().map(|f| f.name().clone()).collect();
                let targets: Vec<Target> = names.iter().map(|n| target(n)).collect();
                let cols: Vec<ArrayRef> = batch.columns().iter().map(normalized).collect();
                for r in 0..batch.num_rows() {
                    line += 1;
                    let row = typed_row(&schema, &names, &targets, &cols, r);
                    sink.push(line, row).await?;
                }
            }
        }
    }
    let mut report = sink.finish().await?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

fn writer_is_archived(w: &Writer) -> bool {
    match w {
        Writer::Table(t) => t.inner().is_archived(),
        Writer::Series(_) => false,
    }
}

fn declared_columns(w: &Writer) -> Vec<crate::model::schema::ColumnDef> {
    match w {
        Writer::Table(t) => t.declared_columns(),
        Writer::Series(s) => s.schema().columns.clone(),
    }
}

fn target_of(schema: &TableSchema, declared: &[crate::model::schema::ColumnDef], col: &str) -> Target {
    if let Some(i) = schema.primary_key.iter().position(|c| c.name == col) {
        return Target::Key(i, schema.primary_key[i].pk_type);
    }
    match declared.iter().find(|c| c.name == col) {
        Some(c) => Target::Declared(c.value_type),
        None => Target::Free,
    }
}

/// The CSV's column names: its header, or the table's key then declared
/// columns. Leaves the file at its start.
fn csv_names(
    file: &mut std::fs::File,
    header: bool,
    delimiter: u8,
    schema: &TableSchema,
    declared: &[crate::model::schema::ColumnDef],
    path: &Path,
) -> Result<Vec<String>> {
    use std::io::Seek;
    if !header {
        let mut names: Vec<String> = schema.primary_key.iter().map(|c| c.name.clone()).collect();
        names.extend(declared.iter().map(|c| c.name.clone()));
        return Ok(names);
    }
    let (inferred, _) = datafusion::arrow::csv::reader::Format::default()
        .with_header(true)
        .with_delimiter(delimiter)
        .infer_schema(&mut *file, Some(1))
        .map_err(|e| Error::param(format!("read the header of {}: {e}", path.display())))?;
    file.rewind()
        .map_err(|e| Error::io(format!("read {}", path.display()), e))?;
    Ok(inferred.fields().iter().map(|f| f.name().clone()).collect())
}

/// A row from text fields (CSV): empty fields are not written.
fn text_row(
    schema: &TableSchema,
    names: &[String],
    targets: &[Target],
    batch: &RecordBatch,
    r: usize,
) -> std::result::Result<RowWrite, String> {
    let mut keys: Vec<Option<PkValue>> = vec![None; schema.primary_key.len()];
    let mut put = PutRow::new(PrimaryKey::new());
    for ((name, target), col) in names.iter().zip(targets).zip(batch.columns()) {
        let col = col.as_string::<i32>();
        if col.is_null(r) || col.value(r).is_empty() {
            continue;
        }
        let text = col.value(r);
        match *target {
            Target::Key(i, t) => keys[i] = Some(key_from_text(name, t, text)?),
            Target::Declared(t) => put = put.column(name.clone(), value_from_text(name, t, text)?),
            Target::Free => put = put.column(name.clone(), guess(text)),
        }
    }
    with_key(schema, keys, put)
}

/// A row from typed Arrow columns (Parquet): NULLs are not written.
fn typed_row(
    schema: &TableSchema,
    names: &[String],
    targets: &[Target],
    cols: &[ArrayRef],
    r: usize,
) -> std::result::Result<RowWrite, String> {
    let mut keys: Vec<Option<PkValue>> = vec![None; schema.primary_key.len()];
    let mut put = PutRow::new(PrimaryKey::new());
    for ((name, target), col) in names.iter().zip(targets).zip(cols) {
        let Some(v) = super::insert::cell(col, r) else { continue };
        match *target {
            Target::Key(i, t) => keys[i] = Some(key_from_value(name, t, v)?),
            Target::Declared(t) => put = put.column(name.clone(), convert(name, t, v)?),
            Target::Free => put = put.column(name.clone(), v),
        }
    }
    with_key(schema, keys, put)
}

/// A row from one NDJSON line: JSON null is not written.
fn ndjson_row(
    schema: &TableSchema,
    line: &str,
    target: &dyn Fn(&str) -> Target,
) -> std::result::Result<RowWrite, String> {
    let obj: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(line).map_err(|e| format!("not a JSON object: {e}"))?;
    let mut keys: Vec<Option<PkValue>> = vec![None; schema.primary_key.len()];
    let mut put = PutRow::new(PrimaryKey::new());
    for (name, j) in obj {
        let v = match j {
            serde_json::Value::Null => continue,
            serde_json::Value::Bool(b) => Value::Boolean(b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Integer(i),
                None => Value::Double(
                    n.as_f64()
                        .ok_or_else(|| format!("column '{name}': {n} is out of range"))?,
                ),
            },
            serde_json::Value::String(s) => Value::String(s),
            other => {
                return Err(format!("column '{name}': {other} is not a number, string or boolean"));
            }
        };
        match target(&name) {
            Target::Key(i, t) => keys[i] = Some(key_from_value(&name, t, v)?),
            Target::Declared(t) => {
                let v = convert_json(&name, t, v)?;
                put = put.column(name, v);
            }
            Target::Free => put = put.column(name, v),
        }
    }
    with_key(schema, keys, put)
}

fn with_key(
    schema: &TableSchema,
    keys: Vec<Option<PkValue>>,
    mut put: PutRow,
) -> std::result::Result<RowWrite, String> {
    let mut pk = PrimaryKey::new();
    for (c, v) in schema.primary_key.iter().zip(keys) {
        let v = match v {
            Some(v) => v,
            None if c.auto_increment => PkValue::AutoIncrement,
            None => return Err(format!("primary-key column '{}' is missing or empty", c.name)),
        };
        pk = pk.with(c.name.clone(), v);
    }
    put.primary_key = pk;
    Ok(RowWrite::Put(put))
}

fn key_from_text(name: &str, t: PkType, text: &str) -> std::result::Result<PkValue, String> {
    match t {
        PkType::Integer => text
            .trim()
            .parse()
            .map(PkValue::Integer)
            .map_err(|_| format!("primary-key column '{name}': '{text}' is not an integer")),
        PkType::String => Ok(PkValue::String(text.to_string())),
        PkType::Binary => hex(text)
            .map(PkValue::Binary)
            .ok_or_else(|| format!("primary-key column '{name}': '{text}' is not hex bytes")),
    }
}

fn key_from_value(name: &str, t: PkType, v: Value) -> std::result::Result<PkValue, String> {
    match (t, v) {
        (PkType::Integer, Value::Integer(i)) => Ok(PkValue::Integer(i)),
        (PkType::String, Value::String(s)) => Ok(PkValue::String(s)),
        (PkType::Binary, Value::Binary(b)) => Ok(PkValue::Binary(b)),
        (PkType::Integer, Value::String(s)) | (PkType::Binary, Value::String(s)) => key_from_text(name, t, &s),
        (t, v) => Err(format!(
            "primary-key column '{name}' is {}, not {}",
            v.value_type().as_str().to_uppercase(),
            t.as_str().to_uppercase()
        )),
    }
}

fn value_from_text(name: &str, t: ValueType, text: &str) -> std::result::Result<Value, String> {
    let bad = |what: &str| format!("column '{name}': '{text}' is not {what}");
    Ok(match t {
        ValueType::Integer => Value::Integer(text.trim().parse().map_err(|_| bad("an integer"))?),
        ValueType::Double => Value::Double(text.trim().parse().map_err(|_| bad("a number"))?),
        ValueType::Boolean => Value::Boolean(match text.trim().to_ascii_lowercase().as_str() {
            "true" | "t" | "1" => true,
            "false" | "f" | "0" => false,
            _ => return Err(bad("true or false")),
        }),
        ValueType::String => Value::String(text.to_string()),
        ValueType::Binary => Value::Binary(hex(text).ok_or_else(|| bad("hex bytes"))?),
    })
}

/// A typed value to a declared column's type (numbers widen; text is
/// parsed).
fn convert(name: &str, t: ValueType, v: Value) -> std::result::Result<Value, String> {
    match (t, v) {
        (ValueType::Double, Value::Integer(i)) => Ok(Value::Double(i as f64)),
        (t, Value::String(s)) if t != ValueType::String => value_from_text(name, t, &s),
        (t, v) if v.value_type() == t => Ok(v),
        (t, v) => Err(format!(
            "column '{name}' is declared {}, and this value is {}",
            t.as_str().to_uppercase(),
            v.value_type().as_str().to_uppercase()
        )),
    }
}

/// As [`convert`], except that a JSON string stays text where the column
/// is not a string one (`"42"` is not 42 in JSON).
fn convert_json(name: &str, t: ValueType, v: Value) -> std::result::Result<Value, String> {
    if let (false, Value::String(s)) = (matches!(t, ValueType::String | ValueType::Binary), &v) {
        return Err(format!(
            "column '{name}' is declared {}, and \"{s}\" is a string",
            t.as_str().to_uppercase()
        ));
    }
    convert(name, t, v)
}

/// An undeclared column's text: an integer, a number, a boolean, else text.
fn guess(text: &str) -> Value {
    let t = text.trim();
    if let Ok(i) = t.parse::<i64>() {
        Value::Integer(i)
    } else if let Ok(d) = t.parse::<f64>()
        && d.is_finite()
    {
        Value::Double(d)
    } else if t.eq_ignore_ascii_case("true") {
        Value::Boolean(true)
    } else if t.eq_ignore_ascii_case("false") {
        Value::Boolean(false)
    } else {
        Value::String(text.to_string())
    }
}

fn hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    let s = s.strip_prefix("0x").or_else(|| s.strip_prefix("\\x")).unwrap_or(s);
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A Parquet column in the Arrow types Cellar's values come from (cast
/// once per batch): integers of every width as Int64, floats as Float64,
/// large strings and binaries as plain ones, timestamps and dates as
/// millisecond timestamps. A cell that does not convert reads as NULL (not
/// written); a column of another type is left as it is (its cells read as
/// NULL).
fn normalized(a: &ArrayRef) -> ArrayRef {
    use datafusion::arrow::datatypes::TimeUnit;
    let target = match a.data_type() {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => DataType::Int64,
        DataType::Float16 | DataType::Float32 => DataType::Float64,
        DataType::LargeUtf8 => DataType::Utf8,
        DataType::LargeBinary | DataType::FixedSizeBinary(_) => DataType::Binary,
        DataType::Timestamp(_, tz) => DataType::Timestamp(TimeUnit::Millisecond, tz.clone()),
        DataType::Date32 | DataType::Date64 => DataType::Timestamp(TimeUnit::Millisecond, None),
        other => other.clone(),
    };
    if *a.data_type() == target {
        return a.clone();
    }
    datafusion::arrow::compute::cast(a, &target).unwrap_or_else(|_| a.clone())
}

/// A batch in flight: its rows' line numbers, and their results once
/// durable.
type InFlight = futures::future::BoxFuture<'static, (Vec<u64>, Result<Vec<Result<crate::WriteResult>>>)>;

/// Queues rows in file order, a batch at a time, and collects each row's
/// result once durable.
struct Sink<'a> {
    writer: Writer,
    progress: Option<&'a (dyn Fn(u64) + Sync)>,
    lines: Vec<u64>,
    pending: Vec<RowWrite>,
    in_flight: FuturesOrdered<InFlight>,
    report: ImportReport,
}

impl<'a> Sink<'a> {
    fn new(writer: Writer, progress: Option<&'a (dyn Fn(u64) + Sync)>) -> Self {
        Sink {
            writer,
            progress,
            lines: Vec::new(),
            pending: Vec::new(),
            in_flight: FuturesOrdered::new(),
            report: ImportReport::default(),
        }
    }

    fn reject(&mut self, line: u64, reason: String) {
        self.report.rejected += 1;
        if self.report.rejects.len() < MAX_REPORTED_REJECTS {
            self.report.rejects.push(Rejected { line, reason });
        }
    }

    async fn push(&mut self, line: u64, row: std::result::Result<RowWrite, String>) -> Result<()> {
        match row {
            Err(reason) => self.reject(line, reason),
            Ok(w) => {
                self.lines.push(line);
                self.pending.push(w);
                if self.pending.len() >= MAX_BATCH_WRITE_ROWS {
                    self.send().await?;
                }
            }
        }
        Ok(())
    }

    async fn send(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let lines = std::mem::take(&mut self.lines);
        // Queued here, in file order; only the waits overlap.
        let queued = self.writer.enqueue_batch(std::mem::take(&mut self.pending)).await?;
        self.in_flight
            .push_back(Box::pin(async move { (lines, queued.durable().await) }));
        while self.in_flight.len() >= IN_FLIGHT {
            self.settle_one().await?;
        }
        Ok(())
    }

    async fn settle_one(&mut self) -> Result<()> {
        let Some((lines, results)) = self.in_flight.next().await else {
            return Ok(());
        };
        // A batch the database could not take at all (I/O, closed) ends
        // the import; a row it refused is that row's reject.
        for (line, r) in lines.into_iter().zip(results?) {
            match r {
                Ok(_) => self.report.rows += 1,
                Err(e) => self.reject(line, e.to_string()),
            }
        }
        if let Some(p) = self.progress {
            p(self.report.rows);
        }
        Ok(())
    }

    async fn finish(mut self) -> Result<ImportReport> {
        self.send().await?;
        while !self.in_flight.is_empty() {
            self.settle_one().await?;
        }
        Ok(self.report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_typed_by_what_it_holds() {
        assert_eq!(guess("42"), Value::Integer(42));
        assert_eq!(guess("2.5"), Value::Double(2.5));
        assert_eq!(guess("TRUE"), Value::Boolean(true));
        assert_eq!(guess("nan-ish"), Value::String("nan-ish".into()));
        assert_eq!(guess("inf"), Value::String("inf".into()));
        assert_eq!(hex("0x0aff"), Some(vec![10, 255]));
        assert_eq!(hex("abc"), None);
        assert!(value_from_text("n", ValueType::Integer, "4.5").is_err());
        assert_eq!(value_from_text("b", ValueType::Boolean, "f"), Ok(Value::Boolean(false)));
        assert_eq!(
            convert("d", ValueType::Double, Value::Integer(3)),
            Ok(Value::Double(3.0))
        );
        assert!(convert_json("d", ValueType::Double, Value::String("3".into())).is_err());
    }
}
