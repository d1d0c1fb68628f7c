//! A key-ordered scan that uses every core as one partition: the scan's
//! key ranges cut into chunks at row-group boundaries, up to `parallelism`
//! chunks read at once, each on its own task, their batches handed on
//! chunk after chunk.
//!
//! Why one partition: a scan that projects the leading key column
//! declares its key order, and DataFusion keeps a per-partition order
//! through a hash repartition by merging the partitions' streams
//! (`RepartitionExec` with `preserve_order`, chosen because a sorted
//! aggregate can then stream). Cellar's partitions are disjoint key ranges,
//! so that merge drains the first before it takes a row of the second,
//! and the partitions run one after the other behind the merge's bounded
//! channels: `count(DISTINCT card_id)` over 2M rows took 34 ms on two
//! partitions and 27 ms on one (BENCHMARKS.md, "Ordered scans").
//! Reading chunks ahead in parallel keeps the order and both cores.
//!
//! Invariants: the chunks are disjoint key ranges in ascending order; a
//! chunk's rows come out only after every row of the chunks before it, in
//! the order its scan gives them; at most `parallelism` chunks are started
//! and not yet fully handed on; a chunk whose task fails or panics fails
//! the stream (a short result never passes for a whole one); dropping the
//! stream aborts every chunk's task.

use datafusion::arrow::array::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::{DataFusionError, Result as DfResult};
use futures::stream::{self, BoxStream, Stream, StreamExt};
use tokio::sync::mpsc;

/// A chunk being read: its batches as its task produces them, and the task.
struct Chunk {
    rx: mpsc::UnboundedReceiver<RecordBatch>,
    task: Option<SpawnedTask<DfResult<()>>>,
}

impl Chunk {
    /// Starts reading `scan` on a task of its own. The batches wait in an
    /// unbounded channel: a chunk holds a bounded number of rows (the
    /// caller cuts them shorter for wider projections), and a bounded
    /// channel would stall the chunk behind the one being handed on,
    /// which is what this module avoids.
    fn start<S>(scan: S) -> Chunk
    where
        S: Stream<Item = DfResult<RecordBatch>> + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = SpawnedTask::spawn(async move {
            let mut scan = std::pin::pin!(scan);
            while let Some(b) = scan.next().await.transpose()? {
                if tx.send(b).is_err() {
                    break; // the stream was dropped
                }
            }
            Ok(())
        });
        Chunk { rx, task: Some(task) }
    }

    /// The next batch; at the end, the task's outcome (an error ends the
    /// stream with it).
    async fn next(&mut self) -> Option<DfResult<RecordBatch>> {
        if let Some(b) = self.rx.recv().await {
            return Some(Ok(b));
        }
        let task = self.task.take()?;
        match task.join().await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(Err(e)),
            Err(e) => Some(Err(DataFusionError::External(Box::new(e)))),
        }
    }
}

/// The batches of `scans` in order, at most `parallelism` of them read at
/// once, and no more than `limit` rows.
pub(super) fn ordered_stream<S>(
    scans: impl Iterator<Item = S> + Send + 'static,
    parallelism: usize,
    limit: Option<usize>,
) -> BoxStream<'static, DfResult<RecordBatch>>
where
    S: Stream<Item = DfResult<RecordBatch>> + Send + 'static,
{
    // `buffered` starts a chunk when it pulls it: `parallelism` at first,
    // then one more each time the chunk being handed on is finished.
    let chunks: BoxStream<'static, Chunk> = stream::iter(scans)
        .map(|scan| futures::future::ready(Chunk::start(scan)))
        .buffered(parallelism.max(1))
        .boxed();
    let state = (chunks, None::<Chunk>, limit.unwrap_or(usize::MAX));
    stream::unfold(state, |(mut chunks, mut current, remaining)| async move {
        if remaining == 0 {
            return None;
        }
        loop {
            let chunk = match current.as_mut() {
                Some(c) => c,
                None => current.insert(chunks.next().await?),
            };
            match chunk.next().await {
                Some(Ok(b)) => {
                    let b = if b.num_rows() > remaining {
                        b.slice(0, remaining)
                    } else {
                        b
                    };
                    let left = remaining - b.num_rows();
                    return Some((Ok(b), (chunks, current, left)));
                }
                // An error ends the stream: no later chunk is handed on.
                Some(Err(e)) => return Some((Err(e), (chunks, None, 0))),
                None => current = None,
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::Int64Type;

    use super::*;

    fn batch(values: std::ops::Range<i64>) -> RecordBatch {
        RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from_iter_values(values)) as _)]).unwrap()
    }

    /// Chunk `c` of `n` gives values c*100.. in batches of 10, after a
    /// delay that makes later chunks finish first.
    fn chunk(c: i64, n: i64, fail_at: Option<(i64, i64)>) -> BoxStream<'static, DfResult<RecordBatch>> {
        stream::iter(0..10)
            .then(move |b| async move {
                tokio::time::sleep(Duration::from_millis(((n - c) * 3 + b) as u64 % 7)).await;
                if fail_at == Some((c, b)) {
                    return Err(DataFusionError::Execution(format!("chunk {c} failed")));
                }
                let lo = c * 100 + b * 10;
                Ok(batch(lo..lo + 10))
            })
            .boxed()
    }

    async fn collect(s: BoxStream<'static, DfResult<RecordBatch>>) -> (Vec<i64>, Option<String>) {
        let mut s = s;
        let mut out = Vec::new();
        while let Some(b) = s.next().await {
            match b {
                Ok(b) => out.extend(b.column(0).as_primitive::<Int64Type>().values().iter().copied()),
                Err(e) => return (out, Some(e.to_string())),
            }
        }
        (out, None)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn chunks_come_out_in_order_whatever_finishes_first() {
        for parallelism in [1, 2, 3, 8, 20] {
            let s = ordered_stream((0..12).map(|c| chunk(c, 12, None)), parallelism, None);
            let (got, err) = collect(s).await;
            assert_eq!(err, None);
            let want: Vec<i64> = (0..12).flat_map(|c| c * 100..c * 100 + 100).collect();
            assert_eq!(got, want, "parallelism {parallelism}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_chunk_fails_the_stream_after_the_chunks_before_it() {
        let s = ordered_stream((0..12).map(|c| chunk(c, 12, Some((5, 3)))), 3, None);
        let (got, err) = collect(s).await;
        // Every row of chunks 0-4 and chunk 5's first three batches, then
        // the error; nothing of the chunks after it.
        let want: Vec<i64> = (0..5).flat_map(|c| c * 100..c * 100 + 100).chain(500..530).collect();
        assert_eq!(got, want);
        assert!(err.unwrap().contains("chunk 5 failed"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_chunk_is_an_error_not_a_short_result() {
        let chunks = (0..4).map(|c| {
            if c == 2 {
                stream::once(async { panic!("boom") }).boxed()
            } else {
                chunk(c, 4, None)
            }
        });
        let (got, err) = collect(ordered_stream(chunks, 2, None)).await;
        assert_eq!(got.len(), 200);
        assert!(err.is_some(), "a panic passed for the end of a chunk");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn limits_cut_and_only_parallelism_chunks_start_ahead() {
        let started = Arc::new(AtomicUsize::new(0));
        let chunks = {
            let started = started.clone();
            (0..50).map(move |c| {
                let started = started.clone();
                stream::once(async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    Ok(batch(c * 100..c * 100 + 100))
                })
                .boxed()
            })
        };
        let (got, err) = collect(ordered_stream(chunks, 2, Some(250))).await;
        assert_eq!(err, None);
        assert_eq!(got, (0..200).chain(200..250).collect::<Vec<i64>>());
        // Chunks 0-2 handed on, and at most two more begun.
        assert!(
            started.load(Ordering::SeqCst) <= 5,
            "{}",
            started.load(Ordering::SeqCst)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropping_the_stream_stops_its_chunks() {
        let polled = Arc::new(AtomicUsize::new(0));
        let chunks = {
            let polled = polled.clone();
            (0..4).map(move |_| {
                let polled = polled.clone();
                stream::unfold((), move |()| {
                    let polled = polled.clone();
                    async move {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        polled.fetch_add(1, Ordering::SeqCst);
                        Some((Ok(batch(0..1)), ()))
                    }
                })
                .boxed()
            })
        };
        let mut s = ordered_stream(chunks, 2, None);
        s.next().await.unwrap().unwrap();
        drop(s);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let then = polled.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            polled.load(Ordering::SeqCst),
            then,
            "chunks went on after the stream was dropped"
        );
    }
}
