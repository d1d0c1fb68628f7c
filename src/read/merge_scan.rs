//! Range scans: a k-way merge of memtables and segments by key.
//!
//! Each source yields `(key, state)` in scan order, a chunk at a time. For
//! each next key the states of every source that has it are laid over each
//! other, oldest source first, then visibility decides what is returned.
//!
//! Invariant: keys come out once each, strictly ascending (descending
//! backward), each with the state folding every source's writes up to the
//! snapshot's sequence.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::error::Result;
use crate::memtable::Memtable;
use crate::model::key::KeyRange;
use crate::model::row::RowState;
use crate::segment::SegmentCursor;
use crate::state::Snapshot;

const MEM_CHUNK_KEYS: usize = 512;

enum Feed {
    Mem {
        mem: Arc<Memtable>,
        resume: Option<Vec<u8>>,
    },
    Seg(Box<SegmentCursor>),
}

struct Source {
    /// Larger = newer.
    age: usize,
    buf: VecDeque<(Vec<u8>, RowState)>,
    feed: Feed,
    done: bool,
    /// For a segment not read yet: the earliest key (in scan order) it can
    /// hold. It is left unread while every buffered key comes before that,
    /// so a short scan over non-overlapping segments reads only one.
    unread_from: Option<Vec<u8>>,
}

/// Streams merged key states of a snapshot over a key range.
pub(crate) struct MergeScan {
    sources: Vec<Source>,
    backward: bool,
    snapshot_seq: u64,
    range: KeyRange,
}

impl MergeScan {
    /// A scan of `range` on `snap`, kept to the snapshot's partition.
    pub fn new(snap: &Snapshot, range: KeyRange, backward: bool, columns: Option<&[String]>) -> Self {
        let range = range.intersect(&snap.range);
        let mut sources = Vec::new();
        let mut age = 0;
        for seg in snap.segments.iter() {
            age += 1;
            if range.is_empty() || !range.overlaps(&seg.min_key, &seg.max_key) {
                continue;
            }
            let from = if backward { &seg.max_key } else { &seg.min_key };
            sources.push(Source {
                age,
                buf: VecDeque::new(),
                feed: Feed::Seg(Box::new(SegmentCursor::new(
                    seg.clone(),
                    range.clone(),
                    backward,
                    columns,
                ))),
                done: false,
                unread_from: Some(from.clone()),
            });
        }
        for mem in &snap.memtables {
            age += 1;
            if mem.is_empty() || range.is_empty() {
                continue;
            }
            sources.push(Source {
                age,
                buf: VecDeque::new(),
                feed: Feed::Mem {
                    mem: mem.clone(),
                    resume: None,
                },
                done: false,
                unread_from: None,
            });
        }
        MergeScan {
            sources,
            backward,
            snapshot_seq: snap.seq,
            range,
        }
    }

    /// True when key `a` comes strictly before `b` in scan order.
    fn before(&self, a: &[u8], b: &[u8]) -> bool {
        if self.backward { a > b } else { a < b }
    }

    /// Refills every source that may hold the next key in scan order.
    async fn fill(&mut self) -> Result<()> {
        for i in 0..self.sources.len() {
            if self.sources[i].unread_from.is_none() {
                self.fill_source(i).await?;
            }
        }
        // Start unread segments whose first possible key is not after the
        // best buffered key (or, with nothing buffered, the earliest one).
        loop {
            let best = self
                .sources
                .iter()
                .filter_map(|s| s.buf.front().map(|(k, _)| k.as_slice()))
                .reduce(|a, b| if self.before(b, a) { b } else { a })
                .map(|b| b.to_vec());
            let next = self
                .sources
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.unread_from.as_deref().map(|f| (i, f)))
                .filter(|(_, f)| best.as_deref().is_none_or(|b| !self.before(b, f)))
                .reduce(|a, b| if self.before(b.1, a.1) { b } else { a })
                .map(|(i, _)| i);
            let Some(i) = next else { return Ok(()) };
            self.sources[i].unread_from = None;
            self.fill_source(i).await?;
        }
    }

    async fn fill_source(&mut self, i: usize) -> Result<()> {
        let s = &mut self.sources[i];
        while s.buf.is_empty() && !s.done {
            match &mut s.feed {
                Feed::Mem { mem, resume } => {
                    let chunk = mem.scan_chunk(
                        &self.range,
                        resume.as_deref(),
                        self.backward,
                        self.snapshot_seq,
                        MEM_CHUNK_KEYS,
                    );
                    if chunk.len() < MEM_CHUNK_KEYS {
                        s.done = true;
                    }
                    if let Some((k, _)) = chunk.last() {
                        *resume = Some(k.clone());
                    }
                    s.buf.extend(chunk);
                }
                Feed::Seg(cursor) => match cursor.next_chunk().await? {
                    Some(chunk) => s.buf.extend(chunk),
                    None => s.done = true,
                },
            }
        }
        Ok(())
    }

    /// The next key in scan order with its merged state.
    pub async fn next(&mut self) -> Result<Option<(Vec<u8>, RowState)>> {
        self.fill().await?;
        let mut best: Option<&[u8]> = None;
        for s in &self.sources {
            if let Some((k, _)) = s.buf.front() {
                let better = match best {
                    None => true,
                    Some(b) => (k.as_slice() < b) != self.backward && k.as_slice() != b,
                };
                if better {
                    best = Some(k);
                }
            }
        }
        let Some(best) = best.map(|b| b.to_vec()) else {
            return Ok(None);
        };
        // Sources are ordered oldest first, so layering goes oldest to newest.
        let mut state: Option<RowState> = None;
        for s in &mut self.sources {
            if s.buf.front().is_some_and(|(k, _)| *k == best) {
                let (_, st) = s.buf.pop_front().unwrap_or_default();
                state = Some(match state {
                    Some(older) => st.merge_over(older),
                    None => st,
                });
            }
        }
        debug_assert!(self.sources.windows(2).all(|w| w[0].age < w[1].age));
        Ok(state.map(|st| (best, st)))
    }
}
