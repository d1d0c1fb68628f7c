//! Read-ahead for scans of a segment in a remote store: the column chunks
//! of the next row groups are fetched while the current one is decoded.
//!
//! A scan of a remote segment would otherwise wait for one ranged GET per
//! row group, one after another: the round trips, not the bytes, set its
//! speed. The prefetcher knows, when the scan starts, which row groups and
//! which column chunks it will read, keeps [`DEPTH`] row groups' fetches in
//! flight, and serves the Parquet reader's requests from them.
//!
//! Chunks fetched go to the database's [`ChunkCache`], and row groups
//! whose chunks are all cached are served from it without a fetch.
//!
//! Invariants: every byte served was checked against the segment's block
//! checksums (cached bytes were, before they were cached); a request
//! outside what was fetched is read directly; fetches still in flight are
//! aborted when the scan is dropped.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use object_store::ObjectStore;
use object_store::path::Path;

use super::checksum::BlockChecks;
use super::chunk_cache::ChunkCache;
use crate::error::Error;

/// Row groups fetched ahead of the one being decoded.
const DEPTH: usize = 8;

type Fetched = parquet::errors::Result<Vec<Bytes>>;

/// The fetches of a scan, in row-group order.
pub(crate) struct Prefetch {
    store: Arc<dyn ObjectStore>,
    path: Path,
    checks: Option<Arc<BlockChecks>>,
    /// Per row group still to fetch: its column chunks' byte ranges.
    todo: VecDeque<Vec<Range<u64>>>,
    /// Fetches under way (or chunks found cached), oldest first.
    in_flight: VecDeque<(Vec<Range<u64>>, Fetch)>,
    /// The database's chunk cache and the segment's id in it.
    cache: Option<(Arc<ChunkCache>, u64)>,
    /// The row group being decoded: its chunks and their bytes.
    current: Option<(Vec<Range<u64>>, Vec<Bytes>)>,
}

/// A row group's chunks: cached already, or being fetched.
enum Fetch {
    Cached(Vec<Bytes>),
    Pending(tokio::task::JoinHandle<Fetched>),
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        for (_, f) in &self.in_flight {
            if let Fetch::Pending(h) = f {
                h.abort();
            }
        }
    }
}

/// Reads `ranges` of `path`, each widened to whole checksum blocks,
/// checked and cut back.
pub(super) async fn fetch_checked(
    store: &dyn ObjectStore,
    path: &Path,
    checks: Option<&BlockChecks>,
    ranges: &[Range<u64>],
) -> Fetched {
    let Some(c) = checks else {
        return store.get_ranges(path, ranges).await.map_err(to_parquet_err);
    };
    let wide: Vec<_> = ranges.iter().map(|r| c.whole_blocks(r)).collect();
    let fetched = store.get_ranges(path, &wide).await.map_err(to_parquet_err)?;
    let mut out = Vec::with_capacity(ranges.len());
    for ((r, w), b) in ranges.iter().zip(&wide).zip(fetched) {
        c.check_fetched(w, &b).map_err(checksum_err)?;
        out.push(b.slice((r.start - w.start) as usize..(r.end - w.start) as usize));
    }
    Ok(out)
}

pub(super) fn to_parquet_err(e: object_store::Error) -> parquet::errors::ParquetError {
    parquet::errors::ParquetError::External(Box::new(e))
}

pub(super) fn checksum_err(e: Error) -> parquet::errors::ParquetError {
    parquet::errors::ParquetError::External(Box::new(e))
}

impl Prefetch {
    /// A prefetcher of `groups` (per row group in read order, the byte
    /// ranges of the column chunks the scan reads).
    pub fn new(
        store: Arc<dyn ObjectStore>,
        path: Path,
        checks: Option<Arc<BlockChecks>>,
        cache: Option<(Arc<ChunkCache>, u64)>,
        groups: Vec<Vec<Range<u64>>>,
    ) -> Self {
        Prefetch {
            store,
            path,
            checks,
            todo: groups.into(),
            in_flight: VecDeque::new(),
            cache,
            current: None,
        }
    }

    fn top_up(&mut self) {
        while self.in_flight.len() < DEPTH {
            let Some(chunks) = self.todo.pop_front() else { break };
            let cached: Option<Vec<Bytes>> = self
                .cache
                .as_ref()
                .and_then(|(c, id)| chunks.iter().map(|r| c.get(*id, r)).collect());
            let fetch = match cached {
                Some(b) => Fetch::Cached(b),
                None => {
                    let (store, path, checks) = (self.store.clone(), self.path.clone(), self.checks.clone());
                    let want = chunks.clone();
                    Fetch::Pending(tokio::spawn(async move {
                        // One GET per chunk: the store would merge chunks
                        // less than 1 MiB apart into one GET of every
                        // column between them.
                        let gets = want
                            .iter()
                            .map(|r| fetch_checked(&*store, &path, checks.as_deref(), std::slice::from_ref(r)));
                        let parts = futures::future::try_join_all(gets).await?;
                        Ok(parts.into_iter().flatten().collect())
                    }))
                }
            };
            self.in_flight.push_back((chunks, fetch));
        }
    }

    /// `ranges` from the fetched chunks, or `None` when they are not all
    /// inside the chunks of the row group being read or the next ones.
    pub async fn serve(&mut self, ranges: &[Range<u64>]) -> Option<Fetched> {
        self.top_up();
        loop {
            if let Some((chunks, bytes)) = &self.current
                && let Some(out) = slices(chunks, bytes, ranges)
            {
                return Some(Ok(out));
            }
            // Only a request for a later row group moves the read on.
            let next = self.in_flight.front()?;
            if !ranges
                .iter()
                .all(|r| next.0.iter().any(|c| c.start <= r.start && r.end <= c.end))
            {
                return None;
            }
            let (chunks, fetch) = self.in_flight.pop_front()?;
            self.top_up();
            let bytes = match fetch {
                Fetch::Cached(b) => b,
                Fetch::Pending(h) => match h.await {
                    Ok(Ok(b)) => {
                        if let Some((c, id)) = &self.cache {
                            chunks.iter().zip(&b).for_each(|(r, b)| c.put(*id, r, b));
                        }
                        b
                    }
                    Ok(Err(e)) => return Some(Err(e)),
                    Err(e) => return Some(Err(parquet::errors::ParquetError::General(format!("prefetch: {e}")))),
                },
            };
            self.current = Some((chunks, bytes));
        }
    }
}

/// `ranges` cut out of `chunks` (with their `bytes`), if each lies in one.
fn slices(chunks: &[Range<u64>], bytes: &[Bytes], ranges: &[Range<u64>]) -> Option<Vec<Bytes>> {
    ranges
        .iter()
        .map(|r| {
            let (c, b) = chunks
                .iter()
                .zip(bytes)
                .find(|(c, _)| c.start <= r.start && r.end <= c.end)?;
            Some(b.slice((r.start - c.start) as usize..(r.end - c.start) as usize))
        })
        .collect()
}
