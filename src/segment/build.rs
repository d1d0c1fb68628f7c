//! Writing resolved key states into a segment file.
//!
//! Invariants: keys are pushed in ascending order (others are refused);
//! nothing is visible until the file is finished and stored; every byte
//! written is covered by the file's checksums.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::array::{Array, AsArray};
use arrow::datatypes::{Int64Type, Schema, UInt8Type, UInt16Type};
use parquet::arrow::ArrowWriter;

use super::checksum::{self, ChecksumWriter};
use super::encode::BatchBuilder;
use super::format::{self, ROW_DELETED, VALUE_D};
use super::props::{self, SegmentWriteOptions};
use super::{SegmentMeta, hex_encode};
use crate::error::{Error, Result};
use crate::model::row::{KeyWrites, PutCells};
use crate::model::schema::TableSchema;
use crate::model::types::TypeSet;

const BATCH_ROWS: usize = 8192;

/// Builds one segment file from key states pushed in key order, into `W`:
/// a `Vec<u8>` (a flush, then one put) or a streaming upload (compaction
/// outputs, which would otherwise be held whole in memory).
pub(crate) struct SegmentBuilder<W: std::io::Write + Send = Vec<u8>> {
    table: TableSchema,
    opts: SegmentWriteOptions,
    columns: Vec<(String, TypeSet)>,
    schema: Arc<Schema>,
    /// `schema` and `__cells`: what the file holds.
    file_schema: Arc<Schema>,
    /// The Parquet writer, opened on the first batch (see [`Output`]),
    /// over the sink through the file's checksums.
    out: Output<ChecksumWriter<W>>,
    /// Sizes the `__pk` bloom filter.
    expected_keys: usize,
    batch: BatchBuilder,
    num_rows: u64,
    num_keys: u64,
    min_key: Option<Vec<u8>>,
    max_key: Vec<u8>,
    /// What `push_batch` rows add to the metadata the row builder keeps.
    copied: CopiedStats,
    /// Attribute columns with a NaN among their doubles (see
    /// [`format::NAN_COLUMNS`]).
    nan_columns: std::collections::BTreeSet<String>,
}

/// Metadata of rows added by [`SegmentBuilder::push_batch`].
struct CopiedStats {
    counts: Vec<[u64; 5]>,
    dead_keys: u64,
    newest_ts: i64,
}

#[cfg(test)]
impl SegmentBuilder<Vec<u8>> {
    /// A segment built in memory. `columns`: every attribute column the
    /// states may hold, with the value types that may occur (sorted by
    /// name); `expected_keys` sizes the bloom filter.
    pub fn new(
        table: &TableSchema,
        columns: Vec<(String, TypeSet)>,
        opts: SegmentWriteOptions,
        expected_keys: usize,
    ) -> Result<Self> {
        SegmentBuilder::with_sink(Vec::new(), table, columns, opts, expected_keys)
    }

    /// The file bytes and metadata (`id` and `path` left for the caller).
    pub fn finish(self, seq_range: (u64, u64)) -> Result<(Vec<u8>, SegmentMeta)> {
        let (bytes, mut meta) = self.finish_into(seq_range)?;
        meta.size_bytes = bytes.len() as u64;
        Ok((bytes, meta))
    }
}

impl<W: std::io::Write + Send> SegmentBuilder<W> {
    /// A segment written to `sink` as it is built.
    pub fn with_sink(
        sink: W,
        table: &TableSchema,
        columns: Vec<(String, TypeSet)>,
        opts: SegmentWriteOptions,
        expected_keys: usize,
    ) -> Result<Self> {
        let schema = format::arrow_schema(table, &columns);
        let file_schema = if opts.cells {
            format::file_schema(&schema)
        } else {
            schema.clone()
        };
        let batch = BatchBuilder::new(table, &columns);
        let copied = CopiedStats {
            counts: vec![[0; 5]; columns.len()],
            dead_keys: 0,
            newest_ts: i64::MIN,
        };
        Ok(SegmentBuilder {
            table: table.clone(),
            opts,
            columns,
            schema,
            file_schema,
            out: Output::Pending(Some(ChecksumWriter::new(sink))),
            expected_keys,
            batch,
            num_rows: 0,
            num_keys: 0,
            min_key: None,
            max_key: Vec::new(),
            copied,
            nan_columns: Default::default(),
        })
    }

    /// Adds rows already in this segment's layout: whole keys
    /// (every rank), ascending, after every key pushed before. A compaction
    /// copies canonical rows this way without decoding them.
    pub fn push_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        if batch.schema() != self.schema {
            return Err(Error::corruption("rows copied into a segment do not match its layout"));
        }
        if self.batch.rows > 0 {
            self.write_batch()?;
        }
        let pk = batch.column(0).as_binary::<i32>();
        let rank = batch
            .column(self.table.primary_key.len() + 2)
            .as_primitive::<UInt16Type>();
        let row = batch
            .column(self.table.primary_key.len() + 3)
            .as_primitive::<UInt8Type>();
        let max_ts = batch
            .column(self.table.primary_key.len() + 6)
            .as_primitive::<Int64Type>();
        if rank.value(0) != 0 {
            return Err(Error::corruption("rows copied into a segment start inside a key"));
        }
        // Keys ascend across batches and within: a merge that got them out
        // of order must fail here rather than store a segment that point
        // gets and scans would misread.
        let out_of_order = || Error::corruption("rows copied into a segment are not in key order");
        if !self.after_last(pk.value(0)) {
            return Err(out_of_order());
        }
        for r in 0..n {
            if rank.value(r) != 0 {
                if pk.value(r) != pk.value(r - 1) {
                    return Err(Error::corruption("rows copied into a segment split a key's versions"));
                }
                continue;
            }
            if r > 0 && pk.value(r) <= pk.value(r - 1) {
                return Err(out_of_order());
            }
            self.num_keys += 1;
            if row.value(r) == ROW_DELETED || max_ts.is_null(r) {
                self.copied.dead_keys += 1;
            } else {
                self.copied.newest_ts = self.copied.newest_ts.max(max_ts.value(r));
            }
        }
        let first_attr = self.table.primary_key.len() + 7;
        for (counts, col) in self.copied.counts.iter_mut().zip(&batch.columns()[first_attr..]) {
            let st = col.as_struct();
            for (field, child) in st.fields().iter().zip(st.columns()) {
                if let Some(i) = format::VALUE_CHILDREN
                    .iter()
                    .position(|(_, name, _)| name == field.name())
                {
                    counts[i] += (child.len() - child.null_count()) as u64;
                }
            }
        }
        if self.min_key.is_none() {
            self.min_key = Some(pk.value(0).to_vec());
        }
        self.max_key.clear();
        self.max_key.extend_from_slice(pk.value(n - 1));
        // Row groups end at key boundaries, as in `push`.
        let mut start = 0;
        while start < n {
            let room = self.opts.row_group_rows.saturating_sub(self.in_progress_rows()).max(1);
            let mut cut = (start + room).min(n);
            while cut < n && rank.value(cut) != 0 {
                cut += 1;
            }
            self.write_rows(&batch.slice(start, cut - start))?;
            if self.in_progress_rows() >= self.opts.row_group_rows {
                self.writer(batch)?.flush()?;
            }
            start = cut;
        }
        Ok(())
    }

    /// Adds the next key (greater than every key pushed before) from a
    /// memtable's writes. A PutRow whose columns are sorted and distinct
    /// (the write path sorts them) is encoded straight from its cells;
    /// anything else through a [`RowState`].
    pub fn push_writes<'a, C: PutCells<'a>>(&mut self, key: &[u8], writes: KeyWrites<'a, C>) -> Result<()> {
        if !self.after_last(key) {
            return Err(Error::corruption(
                "keys pushed into a segment are not in ascending order",
            ));
        }
        match writes {
            KeyWrites::Put { seq, row_ts, cells } if self.batch.push_put(&self.table, key, seq, row_ts, cells)? => {}
            put @ KeyWrites::Put { .. } => self.batch.push_key(&self.table, key, &put.to_state())?,
            KeyWrites::Folded(st) => self.batch.push_key(&self.table, key, st)?,
        }
        self.pushed(key)
    }

    /// Whether `key` sorts after every key pushed so far.
    fn after_last(&self, key: &[u8]) -> bool {
        self.min_key.is_none() || key > self.max_key.as_slice()
    }

    /// Bookkeeping after a key was added to the batch.
    fn pushed(&mut self, key: &[u8]) -> Result<()> {
        if self.min_key.is_none() {
            self.min_key = Some(key.to_vec());
        }
        self.max_key.clear();
        self.max_key.extend_from_slice(key);
        self.num_keys += 1;
        // Row groups end at key boundaries: a key's ranks never straddle two.
        let group_full = self.in_progress_rows() + self.batch.rows >= self.opts.row_group_rows;
        if self.batch.rows >= BATCH_ROWS || group_full {
            let batch = self.write_batch()?;
            if group_full {
                self.writer(&batch)?.flush()?;
            }
        }
        Ok(())
    }

    fn write_batch(&mut self) -> Result<RecordBatch> {
        let batch = self.batch.finish(&self.schema)?;
        self.write_rows(&batch)?;
        Ok(batch)
    }

    /// Writes whole keys in the layout, with their `__cells` added.
    fn write_rows(&mut self, batch: &RecordBatch) -> Result<()> {
        self.note_nans(batch);
        // Versions relative to their key's newest (`versions`), once
        // `__cells` is computed from the batch as the layout has it.
        let stored = if self.opts.relative_versions {
            super::versions::to_relative(batch)?
        } else {
            batch.clone()
        };
        if !self.opts.cells {
            self.num_rows += stored.num_rows() as u64;
            self.writer(&stored)?.write(&stored)?;
            return Ok(());
        }
        let cells = super::cells::encode_cells(batch)?;
        let mut columns = stored.columns().to_vec();
        columns.push(cells);
        let mut file = RecordBatch::try_new(self.file_schema.clone(), columns)?;
        if self.opts.newest_rows {
            // Older versions stay in `__cells` alone (`newest`).
            file = super::newest::keep_newest(&file)?;
        }
        self.num_rows += file.num_rows() as u64;
        self.writer(&stored)?.write(&file)?;
        Ok(())
    }

    /// Records the attribute columns of `batch` whose doubles hold a NaN:
    /// Parquet leaves NaN out of min/max statistics, while SQL orders it
    /// above every number (-NaN below), so pruning must not trust those
    /// columns' bounds.
    fn note_nans(&mut self, batch: &RecordBatch) {
        for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
            if self.nan_columns.contains(field.name()) {
                continue;
            }
            let Some(d) = column
                .as_struct_opt()
                .and_then(|st| st.column_by_name(VALUE_D))
                .and_then(|d| d.as_primitive_opt::<arrow::datatypes::Float64Type>())
            else {
                continue;
            };
            // Nulls hold 0.0 in the buffer: only the values are looked at.
            if d.values().iter().any(|v| v.is_nan()) {
                self.nan_columns.insert(field.name().clone());
            }
        }
    }

    /// The Parquet writer; opened on the first batch, `first`, whose key
    /// columns choose their encoding (see [`plain_key_columns`]).
    fn writer(&mut self, first: &RecordBatch) -> Result<&mut ArrowWriter<ChecksumWriter<W>>> {
        if let Output::Pending(sink) = &mut self.out {
            let sink = sink
                .take()
                .ok_or_else(|| Error::corruption("a segment writer failed to open earlier"))?;
            let plain = props::plain_key_columns(&self.table, first);
            let numbers = props::numbers_without_dictionary(first);
            let props = props::writer_properties(
                &self.table,
                &self.columns,
                self.opts,
                self.expected_keys,
                &plain,
                &numbers,
            );
            self.out = Output::Open(Box::new(ArrowWriter::try_new(
                sink,
                self.file_schema.clone(),
                Some(props),
            )?));
        }
        match &mut self.out {
            Output::Open(w) => Ok(w),
            Output::Pending(_) => Err(Error::corruption("a segment writer failed to open")),
        }
    }

    fn in_progress_rows(&self) -> usize {
        match &self.out {
            Output::Open(w) => w.in_progress_rows(),
            Output::Pending(_) => 0,
        }
    }

    /// Bytes of the file so far, including rows not yet encoded (roughly).
    pub fn approx_bytes(&self) -> usize {
        let written = match &self.out {
            Output::Open(w) => w.bytes_written() + w.in_progress_size(),
            Output::Pending(_) => 0,
        };
        written + self.batch.rows * 64
    }

    /// The sink the file is written to (`None` only after the Parquet
    /// writer failed to open over it).
    pub fn sink_mut(&mut self) -> Option<&mut W> {
        match &mut self.out {
            Output::Open(w) => Some(w.inner_mut().get_mut()),
            Output::Pending(sink) => sink.as_mut().map(ChecksumWriter::get_mut),
        }
    }

    /// Completes the file in the sink and returns it with the segment's
    /// metadata (`id`, `path` and `size_bytes` left for the caller).
    pub fn finish_into(mut self, seq_range: (u64, u64)) -> Result<(W, SegmentMeta)> {
        if self.batch.rows > 0 || matches!(self.out, Output::Pending(_)) {
            self.write_batch()?;
        }
        let Output::Open(mut writer) = self.out else {
            return Err(Error::corruption("a segment writer failed to open"));
        };
        // The data region ends with the last row group; the block table
        // goes into the footer, which the tail checksum covers.
        writer.flush()?;
        writer.sync().map_err(|e| Error::io("write a segment", e))?;
        let table = writer.inner_mut().end_data();
        writer.append_key_value_metadata(parquet::file::metadata::KeyValue::new(checksum::KEY.to_string(), table));
        if self.opts.relative_versions {
            writer.append_key_value_metadata(parquet::file::metadata::KeyValue::new(
                super::versions::KEY.to_string(),
                super::versions::FROM_MAX_TS.to_string(),
            ));
        }
        if self.opts.cells && self.opts.newest_rows {
            writer.append_key_value_metadata(parquet::file::metadata::KeyValue::new(
                format::ROWS_KEY.to_string(),
                format::ROWS_NEWEST.to_string(),
            ));
        }
        let nans: Vec<&String> = self.nan_columns.iter().collect();
        writer.append_key_value_metadata(parquet::file::metadata::KeyValue::new(
            format::NAN_COLUMNS.to_string(),
            serde_json::to_string(&nans).map_err(|e| Error::corruption(format!("segment metadata: {e}")))?,
        ));
        let (bytes, checksum) = writer.into_inner()?.finish();
        let meta = SegmentMeta {
            id: 0,
            path: String::new(),
            size_bytes: 0,
            min_key: self.min_key.as_deref().map(hex_encode).unwrap_or_default(),
            max_key: hex_encode(&self.max_key),
            num_keys: self.num_keys,
            num_rows: self.num_rows,
            min_seq: seq_range.0,
            max_seq: seq_range.1,
            columns: self.columns,
            value_counts: self
                .batch
                .attrs
                .iter()
                .zip(&self.copied.counts)
                .map(|(a, c)| std::array::from_fn(|i| a.counts[i] + c[i]))
                .collect(),
            dead_keys: Some(self.batch.dead_keys + self.copied.dead_keys),
            max_ts: Some(self.batch.newest_ts.max(self.copied.newest_ts)),
            run: None,
            checksum,
        };
        Ok((bytes, meta))
    }
}

/// Where the file's writer stands: the sink alone until the first batch
/// arrives, then the Parquet writer over it.
enum Output<W: std::io::Write + Send> {
    /// `None` once taken to open the writer (and that failed).
    Pending(Option<W>),
    Open(Box<ArrowWriter<W>>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::row::RowState;
    use crate::model::types::PkType;

    /// Keys pushed out of order are refused, not written.
    #[test]
    fn keys_out_of_order_are_refused() {
        let table = TableSchema::new("t").pk("k", PkType::String);
        let mut b = SegmentBuilder::new(&table, Vec::new(), SegmentWriteOptions::default(), 2).unwrap();
        let st = RowState {
            seq: 1,
            replace: true,
            ..Default::default()
        };
        let key = |k: &str| crate::model::key::encode_key(&[crate::model::types::PkValue::String(k.to_string())]);
        type Writes<'a> = KeyWrites<'a, &'a [(String, i64, crate::model::types::Value)]>;
        let writes = Writes::Folded(&st);
        b.push_writes(&key("b"), Writes::Folded(&st)).unwrap();
        let err = b.push_writes(&key("a"), writes).unwrap_err();
        assert!(err.to_string().contains("not in ascending order"), "{err}");
        let err = b.push_writes(&key("b"), Writes::Folded(&st)).unwrap_err();
        assert!(err.to_string().contains("not in ascending order"), "{err}");
    }

    /// The Parquet writer opens on the first batch; a segment given no key
    /// still finishes as a valid, empty file.
    #[test]
    fn a_segment_with_no_keys_finishes_empty() {
        let table = TableSchema::new("t").pk("k", PkType::String);
        let cols = vec![("x".to_string(), TypeSet(1))];
        let b = SegmentBuilder::new(&table, cols, SegmentWriteOptions::default(), 0).unwrap();
        let (bytes, meta) = b.finish((0, 0)).unwrap();
        assert_eq!((meta.num_rows, meta.num_keys), (0, 0));
        let reader = parquet::file::reader::SerializedFileReader::new(bytes::Bytes::from(bytes)).unwrap();
        use parquet::file::reader::FileReader;
        assert_eq!(reader.metadata().file_metadata().num_rows(), 0);
    }
}
