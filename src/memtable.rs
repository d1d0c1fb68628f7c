//! The memtable: recent writes of one table, ordered by encoded key.
//!
//! It keeps each key's mutations with their sequence numbers rather than a
//! folded state, so that a reader holding a snapshot sequence can ignore
//! writes made after it: that is what makes a scan consistent while writers
//! go on. Writes come only from the committer thread, in sequence order.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::RwLock;

use crate::error::Result;
use crate::key::KeyRange;
use crate::row::{Action, Mutation, RowState};
use crate::segment::format::TypeSet;

type Ops = Vec<(u64, Mutation)>;

/// Per-key bytes besides the key and its mutations: the key and op-list
/// headers in a B-tree slot, plus slack of partly filled nodes.
const KEY_OVERHEAD: usize = (std::mem::size_of::<Vec<u8>>() + std::mem::size_of::<Ops>()) * 3 / 2 + 16;

#[derive(Default)]
pub(crate) struct Memtable {
    map: RwLock<BTreeMap<Vec<u8>, Ops>>,
    approx_bytes: AtomicUsize,
    /// Smallest / largest sequence inserted (0 = none yet).
    min_seq: AtomicU64,
    max_seq: AtomicU64,
    /// Values written per attribute column and type (`ValueType::index`).
    value_counts: parking_lot::Mutex<BTreeMap<String, [u64; 5]>>,
    /// Scans' overlays of this memtable over segments, by segment path
    /// (see [`crate::engine::overlay`]); dropped with the memtable.
    overlays: parking_lot::Mutex<std::collections::HashMap<String, Arc<OverlaySlot>>>,
}

/// What a flush writes for one key (see [`Memtable::for_each_key`]).
pub(crate) enum KeyWrites<'a> {
    /// The key's newest write, a PutRow (cells as written).
    Put {
        seq: u64,
        row_ts: Option<i64>,
        cells: &'a [(String, i64, crate::types::Value)],
    },
    /// Every write of the key, folded.
    Folded(&'a RowState),
}

impl KeyWrites<'_> {
    /// The writes folded into an owned state.
    pub fn to_state(&self) -> RowState {
        match self {
            KeyWrites::Put { seq, row_ts, cells } => {
                let mut st = RowState::default();
                st.apply(
                    *seq,
                    &Mutation::Put {
                        row_ts: *row_ts,
                        cells: cells.to_vec(),
                    },
                );
                st
            }
            KeyWrites::Folded(st) => (*st).clone(),
        }
    }
}

/// One segment's overlay, built by one scan while the others wait for it.
pub(crate) type OverlaySlot = tokio::sync::Mutex<Option<Arc<crate::engine::overlay::Overlay>>>;

impl Memtable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one write. Sequences must arrive in increasing order.
    pub fn insert(&self, key: Vec<u8>, seq: u64, m: Mutation) {
        let mut bytes = m.approx_bytes() + std::mem::size_of::<u64>();
        self.count_values(&m);
        {
            let mut map = self.map.write();
            match map.entry(key) {
                std::collections::btree_map::Entry::Occupied(mut e) => e.get_mut().push((seq, m)),
                std::collections::btree_map::Entry::Vacant(e) => {
                    // The key, its op list, and its share of a B-tree node
                    // (11 slots, about two thirds full).
                    bytes += crate::row::heap_block(e.key().len()) + KEY_OVERHEAD;
                    e.insert(vec![(seq, m)]);
                }
            }
        }
        self.approx_bytes.fetch_add(bytes, Ordering::Relaxed);
        let _ = self
            .min_seq
            .compare_exchange(0, seq, Ordering::Relaxed, Ordering::Relaxed);
        self.max_seq.fetch_max(seq, Ordering::Relaxed);
    }

    fn count_values(&self, m: &Mutation) {
        let mut counts = self.value_counts.lock();
        let mut add = |name: &str, v: &crate::types::Value| {
            let i = v.value_type().index();
            match counts.get_mut(name) {
                Some(c) => c[i] += 1,
                None => {
                    let mut c = [0; 5];
                    c[i] = 1;
                    counts.insert(name.to_string(), c);
                }
            }
        };
        match m {
            Mutation::Put { cells, .. } => cells.iter().for_each(|(n, _, v)| add(n, v)),
            Mutation::Update { actions } => {
                for a in actions {
                    if let Action::Put { column, value, .. } = a {
                        add(column, value);
                    }
                }
            }
            Mutation::Delete => {}
        }
    }

    /// Values written per attribute column and type (`ValueType::index`
    /// order), kept as writes arrive.
    pub fn value_counts(&self) -> BTreeMap<String, [u64; 5]> {
        self.value_counts.lock().clone()
    }

    pub fn approx_bytes(&self) -> usize {
        self.approx_bytes.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.min_seq.load(Ordering::Relaxed) == 0
    }

    pub fn min_seq(&self) -> Option<u64> {
        match self.min_seq.load(Ordering::Relaxed) {
            0 => None,
            s => Some(s),
        }
    }

    pub fn max_seq(&self) -> u64 {
        self.max_seq.load(Ordering::Relaxed)
    }

    /// Applies this memtable's writes of `key` with sequence <= `snapshot`
    /// onto `state`. Returns false when it has none.
    pub fn apply_to(&self, key: &[u8], snapshot: u64, state: &mut RowState) -> bool {
        let map = self.map.read();
        match map.get(key) {
            Some(ops) => apply_ops(ops, snapshot, state),
            None => false,
        }
    }

    /// Up to `max_keys` keys of `range` in the given direction, strictly
    /// after `resume` when given, each with its folded state at `snapshot`
    /// (keys with no write at or before the snapshot are skipped).
    pub fn scan_chunk(
        &self,
        range: &KeyRange,
        resume: Option<&[u8]>,
        backward: bool,
        snapshot: u64,
        max_keys: usize,
    ) -> Vec<(Vec<u8>, RowState)> {
        let map = self.map.read();
        let bounds = if backward {
            let hi = match (resume, &range.hi) {
                (Some(r), _) => Bound::Excluded(r),
                (None, Some(h)) => Bound::Excluded(h.as_slice()),
                (None, None) => Bound::Unbounded,
            };
            (Bound::Included(range.lo.as_slice()), hi)
        } else {
            match range_bounds(range, resume) {
                Some(bounds) => bounds,
                None => return Vec::new(),
            }
        };
        if !bounds_ordered(bounds.0, bounds.1) {
            return Vec::new();
        }
        let keys = map.range::<[u8], _>(bounds);
        let keys: Box<dyn Iterator<Item = (&Vec<u8>, &Ops)>> =
            if backward { Box::new(keys.rev()) } else { Box::new(keys) };
        let mut out = Vec::new();
        for (k, ops) in keys {
            let mut st = RowState::default();
            if apply_ops(ops, snapshot, &mut st) {
                out.push((k.clone(), st));
                if out.len() == max_keys {
                    break;
                }
            }
        }
        out
    }

    /// The keys of `range` whose newest write at or before `snapshot` came
    /// after sequence `after` (0: every key with a write by then),
    /// ascending.
    pub fn keys_changed(&self, range: &KeyRange, after: u64, snapshot: u64) -> Vec<Vec<u8>> {
        let map = self.map.read();
        let Some(bounds) = range_bounds(range, None) else {
            return Vec::new();
        };
        map.range::<[u8], _>(bounds)
            .filter(|(_, ops)| changed(ops, after, snapshot))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The overlay slot of a segment (created empty on first use).
    pub fn overlay_slot(&self, segment: &str) -> Arc<OverlaySlot> {
        self.overlays.lock().entry(segment.to_string()).or_default().clone()
    }

    /// The attribute columns written here with the value types written
    /// (a superset of what the folded states hold).
    pub fn columns(&self) -> Vec<(String, TypeSet)> {
        self.value_counts
            .lock()
            .iter()
            .map(|(n, c)| {
                let mut t = TypeSet::default();
                for (i, (bit, _, _)) in crate::segment::format::VALUE_CHILDREN.iter().enumerate() {
                    if c[i] > 0 {
                        t.0 |= bit;
                    }
                }
                (n.clone(), t)
            })
            .collect()
    }

    /// Calls `f` for every key in order with what a flush writes for it (no
    /// snapshot limit), without copying the memtable. A key whose newest
    /// write is a PutRow is handed over as that write (it alone decides the
    /// row); any other is folded into a [`RowState`].
    pub fn for_each_key(&self, mut f: impl FnMut(&[u8], KeyWrites<'_>) -> Result<()>) -> Result<()> {
        self.for_each_changed(&KeyRange::all(), None, 0, u64::MAX, |k, w| f(k, w).map(|()| true))
            .map(|_| ())
    }

    /// [`Memtable::for_each_key`] over the keys [`Memtable::keys_changed`]
    /// lists, strictly after `resume` when given, with their writes up to
    /// `snapshot`. `f` returns false to stop after the key it was given;
    /// returns that key (`None` when every key was visited). The memtable
    /// is read-locked while `f` runs, so callers stop now and then to let
    /// writers in.
    pub fn for_each_changed(
        &self,
        range: &KeyRange,
        resume: Option<&[u8]>,
        after: u64,
        snapshot: u64,
        mut f: impl FnMut(&[u8], KeyWrites<'_>) -> Result<bool>,
    ) -> Result<Option<Vec<u8>>> {
        let map = self.map.read();
        let Some(bounds) = range_bounds(range, resume) else {
            return Ok(None);
        };
        for (k, ops) in map.range::<[u8], _>(bounds) {
            let visible = visible(ops, snapshot);
            let go_on = match visible.last() {
                Some((seq, _)) if *seq <= after => continue,
                None => continue,
                Some((seq, Mutation::Put { row_ts, cells })) => f(
                    k,
                    KeyWrites::Put {
                        seq: *seq,
                        row_ts: *row_ts,
                        cells,
                    },
                )?,
                _ => {
                    let mut st = RowState::default();
                    apply_ops(ops, snapshot, &mut st);
                    f(k, KeyWrites::Folded(&st))?
                }
            };
            if !go_on {
                return Ok(Some(k.clone()));
            }
        }
        Ok(None)
    }

    /// True when some key lies in `[lo, hi]` (inclusive; any sequence).
    pub fn has_key_between(&self, lo: &[u8], hi: &[u8]) -> bool {
        if lo > hi {
            return false;
        }
        let map = self.map.read();
        map.range::<[u8], _>((Bound::Included(lo), Bound::Included(hi)))
            .next()
            .is_some()
    }

    /// True when some key lies in `range` (any sequence).
    pub fn has_key_in(&self, range: &KeyRange) -> bool {
        if range.is_empty() {
            return false;
        }
        let map = self.map.read();
        let hi = match &range.hi {
            Some(h) => Bound::Excluded(h.as_slice()),
            None => Bound::Unbounded,
        };
        map.range::<[u8], _>((Bound::Included(range.lo.as_slice()), hi))
            .next()
            .is_some()
    }

    pub fn key_count(&self) -> usize {
        self.map.read().len()
    }
}

/// Whether a key's newest write at or before `snapshot` came after
/// sequence `after` (sequences ascend within a key's writes).
fn changed(ops: &Ops, after: u64, snapshot: u64) -> bool {
    visible(ops, snapshot).last().is_some_and(|(s, _)| *s > after)
}

/// A key's writes at or before `snapshot`.
fn visible(ops: &Ops, snapshot: u64) -> &[(u64, Mutation)] {
    &ops[..ops.partition_point(|(s, _)| *s <= snapshot)]
}

/// Bounds of a range of keys in the B-tree.
type KeyBounds<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// `range` as B-tree bounds, starting strictly after `resume` when given;
/// `None` when empty.
fn range_bounds<'a>(range: &'a KeyRange, resume: Option<&'a [u8]>) -> Option<KeyBounds<'a>> {
    let lo = match resume {
        Some(r) => Bound::Excluded(r),
        None => Bound::Included(range.lo.as_slice()),
    };
    let hi = match &range.hi {
        Some(h) => Bound::Excluded(h.as_slice()),
        None => Bound::Unbounded,
    };
    bounds_ordered(lo, hi).then_some((lo, hi))
}

fn apply_ops(ops: &Ops, snapshot: u64, state: &mut RowState) -> bool {
    // Start from the last PutRow / DeleteRow at or before the snapshot: it
    // hides everything before it.
    let ops = visible(ops, snapshot);
    if ops.is_empty() {
        return false;
    }
    let start = ops
        .iter()
        .rposition(|(_, m)| matches!(m, Mutation::Put { .. } | Mutation::Delete))
        .unwrap_or(0);
    for (seq, m) in &ops[start..] {
        state.apply(*seq, m);
    }
    true
}

/// False when `BTreeMap::range` would panic or the range is empty.
fn bounds_ordered(lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    match (lo, hi) {
        (Bound::Included(l), Bound::Excluded(h)) | (Bound::Excluded(l), Bound::Excluded(h)) => l < h,
        _ => true,
    }
}

impl Memtable {
    /// True when the newest write of `key` at or before `snapshot` here is
    /// a PutRow or DeleteRow, which hides every older source.
    pub fn hides_older(&self, key: &[u8], snapshot: u64) -> bool {
        let map = self.map.read();
        map.get(key).is_some_and(|ops| {
            visible(ops, snapshot)
                .iter()
                .any(|(_, m)| matches!(m, Mutation::Put { .. } | Mutation::Delete))
        })
    }
}
