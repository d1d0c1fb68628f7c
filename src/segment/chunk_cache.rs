//! A bounded in-memory cache of column chunks read from remote segments,
//! shared by every archived segment of a database, so that a repeated scan
//! of an archived table does not fetch the same chunks again.
//!
//! Invariants: only bytes that matched their block checksums are cached;
//! the cached bytes never exceed the capacity (least recently used chunks
//! go first); an entry is keyed by a segment's process-unique id and the
//! chunk's byte range, and segment files never change, so an entry is never
//! stale.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

/// A chunk: the segment's cache id and the byte range.
type Key = (u64, u64, u64);

/// The cache; see the module docs.
pub(crate) struct ChunkCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Chunk -> (bytes, last use).
    entries: HashMap<Key, (Bytes, u64)>,
    /// Last use -> chunk, oldest first.
    order: BTreeMap<u64, Key>,
    bytes: usize,
    tick: u64,
}

/// Ids for segments that use the cache, unique in the process.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A new segment id for the cache.
pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

impl ChunkCache {
    /// A cache of at most `capacity` bytes (0: caches nothing).
    pub fn new(capacity: usize) -> Self {
        ChunkCache {
            capacity,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The chunk, if cached (it becomes the most recently used).
    pub fn get(&self, segment: u64, range: &Range<u64>) -> Option<Bytes> {
        let mut g = self.inner.lock();
        let inner = &mut *g;
        inner.tick += 1;
        let key = (segment, range.start, range.end);
        let (bytes, used) = inner.entries.get_mut(&key)?;
        inner.order.remove(used);
        *used = inner.tick;
        inner.order.insert(inner.tick, key);
        Some(bytes.clone())
    }

    /// Caches a checked chunk (copied, so that it does not hold a larger
    /// fetched buffer alive), evicting the least recently used ones.
    pub fn put(&self, segment: u64, range: &Range<u64>, bytes: &Bytes) {
        if bytes.len() > self.capacity / 4 {
            return;
        }
        let bytes = Bytes::copy_from_slice(bytes);
        let mut g = self.inner.lock();
        let inner = &mut *g;
        inner.tick += 1;
        let key = (segment, range.start, range.end);
        if let Some((old, used)) = inner.entries.insert(key, (bytes.clone(), inner.tick)) {
            inner.order.remove(&used);
            inner.bytes -= old.len();
        }
        inner.order.insert(inner.tick, key);
        inner.bytes += bytes.len();
        while inner.bytes > self.capacity {
            let Some((_, oldest)) = inner.order.pop_first() else {
                break;
            };
            if let Some((b, _)) = inner.entries.remove(&oldest) {
                inner.bytes -= b.len();
            }
        }
    }

    /// Forgets a segment's chunks (it is gone).
    pub fn forget(&self, segment: u64) {
        let mut g = self.inner.lock();
        let inner = &mut *g;
        let gone: Vec<(Key, u64)> = inner
            .entries
            .iter()
            .filter(|(k, _)| k.0 == segment)
            .map(|(k, (_, used))| (*k, *used))
            .collect();
        for (k, used) in gone {
            inner.order.remove(&used);
            if let Some((b, _)) = inner.entries.remove(&k) {
                inner.bytes -= b.len();
            }
        }
    }

    /// Bytes cached now.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_used_chunks_go_first_and_the_capacity_holds() {
        let c = ChunkCache::new(400);
        let b = |n: usize| Bytes::from(vec![7u8; n]);
        c.put(1, &(0..100), &b(100));
        c.put(1, &(100..200), &b(100));
        c.put(2, &(0..100), &b(100));
        assert!(c.get(1, &(0..100)).is_some());
        c.put(2, &(100..200), &b(100));
        c.put(2, &(200..300), &b(100));
        assert_eq!(c.bytes(), 400);
        // (1, 100..200) was the least recently used.
        assert!(c.get(1, &(100..200)).is_none());
        assert!(c.get(1, &(0..100)).is_some());
        c.forget(2);
        assert_eq!(c.bytes(), 100);
        assert!(c.get(2, &(0..100)).is_none());
        // Too big for the cache: not kept.
        c.put(3, &(0..300), &b(300));
        assert!(c.get(3, &(0..300)).is_none());
    }
}
