//! The output side of a compaction: merged rows cut into segments that
//! stream to the object store.
//!
//! Invariants: an output becomes visible only through the manifest commit
//! that follows; every output written is listed as soon as it is complete,
//! so a failed or cancelled compaction can delete what it wrote. Every row
//! of an output holds the same `__seq` (the newest of its inputs): nothing
//! reads a row's sequence number from a segment, whose place in the
//! manifest orders it, so compacted files spend no bytes on them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow::array::{ArrayRef, RecordBatch, UInt64Array};

use super::merge::ColumnarMerge;
use crate::error::Result;
use crate::model::types::TypeSet;
use crate::segment::format;
use crate::segment::{SegmentBuilder, SegmentMeta};
use crate::state::TableInner;
use crate::storage::{Storage, UploadSink};

/// The output being written, with its reserved id, path and run.
type OpenOutput = (SegmentBuilder<UploadSink>, (u64, String, u64));

/// Cuts merged rows into output segments and stores them.
pub(super) struct OutputWriter {
    pub table: Arc<TableInner>,
    pub storage: Storage,
    pub columns: Vec<(String, TypeSet)>,
    pub expected_keys: usize,
    pub output_bytes: usize,
    /// The run the outputs join.
    pub run: u64,
    pub seq_range: (u64, u64),
    pub cancel: Option<Arc<AtomicBool>>,
}

impl OutputWriter {
    /// Writes every output segment; each is listed in `written` before its
    /// file is stored, so a failure can delete it. False: cancelled.
    pub fn run(
        &self,
        merger: ColumnarMerge,
        rt: &tokio::runtime::Handle,
        written: &mut Vec<SegmentMeta>,
    ) -> Result<bool> {
        let mut builder = None;
        let result = self.write_outputs(merger, rt, written, &mut builder);
        if !matches!(result, Ok(true))
            && let Some((b, _)) = builder.as_mut()
        {
            // Failed or cancelled with an output half written.
            if let Some(sink) = b.sink_mut() {
                sink.abort();
            }
        }
        result
    }

    fn write_outputs(
        &self,
        mut merger: ColumnarMerge,
        rt: &tokio::runtime::Handle,
        written: &mut Vec<SegmentMeta>,
        builder: &mut Option<OpenOutput>,
    ) -> Result<bool> {
        loop {
            if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Acquire))
                || self.table.dropped.load(Ordering::Acquire)
            {
                return Ok(false);
            }
            let batch = merger.next_batch(rt)?;
            let done = batch.is_none();
            if let Some(batch) = batch {
                let (b, _) = match builder {
                    Some(b) => b,
                    None => {
                        // Reserve an id: the next manifest version records
                        // the counter; a crash before that leaves an orphan
                        // that the next open deletes.
                        let id = rt.block_on(self.table.reserve_segment_id());
                        let path = format!("tables/{}/segments/{:020}.parquet", self.table.id, id);
                        // The file streams to the store as it is encoded:
                        // an output is never held whole in memory.
                        let sink = UploadSink::start(&self.storage, &path, rt)?;
                        let b = SegmentBuilder::with_sink(
                            sink,
                            &self.table.schema,
                            self.columns.clone(),
                            self.storage.compaction_options(),
                            self.expected_keys,
                        )?;
                        builder.insert((b, (id, path, self.run)))
                    }
                };
                b.push_batch(&one_seq(batch, self.seq_range.1)?)?;
            }
            if builder
                .as_ref()
                .is_some_and(|(b, _)| done || b.approx_bytes() >= self.output_bytes)
            {
                let (b, (id, path, run)) = builder.take().expect("checked above");
                let (sink, meta) = b.finish_into(self.seq_range)?;
                // Listed before the upload completes, so that a failure
                // from here on deletes the file.
                written.push(SegmentMeta {
                    id,
                    path,
                    run: Some(run),
                    ..meta
                });
                let size = sink.finish(&self.storage)?;
                written.last_mut().expect("pushed above").size_bytes = size;
                self.table.stats.compaction_bytes.fetch_add(size, Ordering::Relaxed);
            }
            if done {
                return Ok(true);
            }
        }
    }
}

/// `batch` with `seq` as every row's `__seq`: a constant column encodes
/// to a few bytes per page, where distinct sequence numbers took 4-5 bytes
/// a row (43 of 938 MB in a 10M-row table).
fn one_seq(batch: RecordBatch, seq: u64) -> Result<RecordBatch> {
    let Ok(i) = batch.schema().index_of(format::SEQ) else {
        return Ok(batch);
    };
    let mut columns = batch.columns().to_vec();
    columns[i] = Arc::new(UInt64Array::from_value(seq, batch.num_rows())) as ArrayRef;
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}
