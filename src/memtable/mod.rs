//! The memtable: recent writes of one table, ordered by encoded key.
//!
//! It keeps each key's mutations with their sequence numbers rather than a
//! folded state, so that a reader holding a snapshot sequence can ignore
//! writes made after it: that is what makes a scan consistent while writers
//! go on. Writes come only from the committer thread, in sequence order.
//!
//! Invariants: a key's writes ascend by sequence number; a reader at
//! snapshot `s` sees exactly the writes with sequence <= `s`; a frozen
//! memtable never changes again. The memtable knows nothing of segments or
//! readers: what readers keep beside it (scan overlays) is held as opaque
//! [`Memtable::attachment`]s. See `docs/architecture.md`.

mod key;
mod packed;

use self::key::{Key, KeyRef, MemKey};
use self::packed::{Names, Packed, Unpack, pack, unpack};
use std::any::{Any, TypeId};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::RwLock;

use crate::error::Result;
use crate::model::key::KeyRange;
use crate::model::row::{KeyWrites, Mutation, PutCells, RowState};
use crate::model::types::TypeSet;
use crate::model::types::ValueRef;

/// A key's writes, in sequence order. Most keys of a load get one PutRow:
/// it is kept packed (see [`pack`]; in the slot itself when short), a third of the
/// memory of the `Mutation` with its per-cell names and values, so a
/// memtable of a given budget holds about three times the rows and flushes
/// fewer, larger runs (less for compaction to merge). A second write of
/// the key unpacks it.
enum Ops {
    Put(u64, Packed),
    Many(Vec<(u64, Mutation)>),
}

/// Per-key bytes besides the key and its writes: the key and op-list
/// headers in a B-tree slot, plus slack of partly filled nodes.
const KEY_OVERHEAD: usize = (std::mem::size_of::<MemKey>() + std::mem::size_of::<Ops>()) * 3 / 2 + 16;

/// The map and the attribute column names that packed rows refer to.
#[derive(Default)]
struct Inner {
    keys: BTreeMap<MemKey, Ops>,
    names: Names,
    /// Where [`pack`] writes a row before it is placed.
    scratch: Vec<u8>,
}

impl Inner {
    /// The writes of `key`, searched without an owned key.
    fn get(&self, key: &[u8]) -> Option<&Ops> {
        self.keys.get(&KeyRef::new(key) as &dyn Key)
    }
}

#[derive(Default)]
pub(crate) struct Memtable {
    map: RwLock<Inner>,
    approx_bytes: AtomicUsize,
    /// Smallest / largest sequence inserted (0 = none yet).
    min_seq: AtomicU64,
    max_seq: AtomicU64,
    /// Caches that readers keep beside this memtable, one per (type, name):
    /// the read path's overlays of this memtable over a segment, by segment
    /// path. The memtable only holds them; they are dropped with it.
    attachments: parking_lot::Mutex<std::collections::HashMap<(TypeId, String), Arc<dyn Any + Send + Sync>>>,
}

/// What a flush reads for one key (see [`Memtable::for_each_changed`]).
pub(crate) type MemWrites<'a> = KeyWrites<'a, MemCells<'a>>;

/// The cells of a PutRow as a flush reads them: the write's own cells, or
/// a packed row's.
#[derive(Clone, Copy)]
pub(crate) enum MemCells<'a> {
    Owned(&'a [(String, i64, crate::model::types::Value)]),
    Packed(Unpack<'a>),
}

impl<'a> PutCells<'a> for MemCells<'a> {
    fn sorted(self) -> bool {
        match self {
            MemCells::Owned(cells) => cells.sorted(),
            MemCells::Packed(u) => u.sorted,
        }
    }

    fn iter(self) -> impl Iterator<Item = (&'a str, i64, ValueRef<'a>)> {
        let (owned, packed) = match self {
            MemCells::Owned(cells) => (Some(PutCells::iter(cells)), None),
            MemCells::Packed(u) => (None, Some(u)),
        };
        owned.into_iter().flatten().chain(packed.into_iter().flatten())
    }
}

impl Memtable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one write. Sequences must arrive in increasing order.
    pub fn insert(&self, key: Vec<u8>, seq: u64, m: Mutation) {
        let mut bytes = std::mem::size_of::<u64>();
        {
            let mut map = self.map.write();
            let Inner { keys, names, scratch } = &mut *map;
            match keys.entry(MemKey::new(key)) {
                std::collections::btree_map::Entry::Occupied(mut e) => {
                    names.count_values(&m);
                    bytes += m.approx_bytes();
                    match e.get_mut() {
                        Ops::Many(ops) => ops.push((seq, m)),
                        Ops::Put(first, packed) => {
                            // A second write: unpack the first (its packed
                            // bytes stay counted until the flush).
                            let first = (*first, unpack(packed, &names.columns));
                            bytes += first.1.approx_bytes() + std::mem::size_of::<u64>();
                            e.insert(Ops::Many(vec![first, (seq, m)]));
                        }
                    }
                }
                std::collections::btree_map::Entry::Vacant(e) => {
                    // The key, its writes, and its share of a B-tree node
                    // (11 slots, about two thirds full).
                    bytes += crate::model::row::heap_block(e.key().bytes().len()) + KEY_OVERHEAD;
                    let ops = match &m {
                        Mutation::Put { row_ts, cells } => {
                            let packed = pack(*row_ts, cells, names, scratch);
                            bytes += packed.heap_bytes();
                            Ops::Put(seq, packed)
                        }
                        _ => {
                            names.count_values(&m);
                            bytes += m.approx_bytes();
                            Ops::Many(vec![(seq, m)])
                        }
                    };
                    e.insert(ops);
                }
            }
        }
        self.approx_bytes.fetch_add(bytes, Ordering::Relaxed);
        // Writes arrive in sequence order, except those `copy_from` brings
        // (in key order).
        let min = self.min_seq.load(Ordering::Relaxed);
        if min == 0 || seq < min {
            let _ = self.min_seq.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                (m == 0 || seq < m).then_some(seq)
            });
        }
        self.max_seq.fetch_max(seq, Ordering::Relaxed);
    }

    /// Adds every write `src` holds for a key in `range`, with its
    /// sequence (a split hands a partition's unflushed writes to the
    /// halves). Call before any other insert: each key's writes must stay
    /// in sequence order.
    pub fn copy_from(&self, src: &Memtable, range: &KeyRange) {
        type KeyOps = (Vec<u8>, Vec<(u64, Mutation)>);
        let writes: Vec<KeyOps> = {
            let map = src.map.read();
            let Some(bounds) = range_bounds(range, None) else {
                return;
            };
            keys_within(&map.keys, bounds)
                .map(|(k, ops)| {
                    let ops = match ops {
                        Ops::Put(seq, packed) => vec![(*seq, unpack(packed, &map.names.columns))],
                        Ops::Many(ops) => ops.clone(),
                    };
                    (k.bytes().to_vec(), ops)
                })
                .collect()
        };
        for (k, ops) in writes {
            for (seq, m) in ops {
                self.insert(k.clone(), seq, m);
            }
        }
    }

    /// Values written per attribute column and type (`ValueType::index`
    /// order), kept as writes arrive.
    pub fn value_counts(&self) -> BTreeMap<String, [u64; 5]> {
        self.map.read().names.columns.iter().cloned().collect()
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
            Some(ops) => apply_ops(ops, &map.names.columns, snapshot, state),
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
        let keys = keys_within(&map.keys, bounds);
        let keys: Box<dyn Iterator<Item = (&MemKey, &Ops)>> =
            if backward { Box::new(keys.rev()) } else { Box::new(keys) };
        let mut out = Vec::new();
        for (k, ops) in keys {
            let mut st = RowState::default();
            if apply_ops(ops, &map.names.columns, snapshot, &mut st) {
                out.push((k.bytes().to_vec(), st));
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
        keys_within(&map.keys, bounds)
            .filter(|(_, ops)| changed(ops, after, snapshot))
            .map(|(k, _)| k.bytes().to_vec())
            .collect()
    }

    /// The attachment of type `T` named `name`, created with its default
    /// on first use.
    pub fn attachment<T: Default + Send + Sync + 'static>(&self, name: &str) -> Arc<T> {
        let entry = self
            .attachments
            .lock()
            .entry((TypeId::of::<T>(), name.to_string()))
            .or_insert_with(|| Arc::new(T::default()))
            .clone();
        // Keyed by `TypeId::of::<T>()`, so the downcast cannot fail.
        entry
            .downcast::<T>()
            .unwrap_or_else(|_| unreachable!("attachment keyed by its type"))
    }

    /// Every attachment of type `T` (any name).
    pub fn attachments<T: Send + Sync + 'static>(&self) -> Vec<Arc<T>> {
        self.attachments
            .lock()
            .iter()
            .filter(|((t, _), _)| *t == TypeId::of::<T>())
            .filter_map(|(_, a)| a.clone().downcast::<T>().ok())
            .collect()
    }

    /// The attribute columns written here with the value types written
    /// (a superset of what the folded states hold).
    pub fn columns(&self) -> Vec<(String, TypeSet)> {
        self.value_counts()
            .into_iter()
            .map(|(n, c)| (n, TypeSet::from_counts(&c)))
            .collect()
    }

    /// Calls `f` for every key in order that [`Memtable::keys_changed`]
    /// lists, strictly after `resume` when given, with their writes up to
    /// `snapshot`, without copying the memtable (a flush: the whole range,
    /// no snapshot limit). A key whose newest write is a PutRow is handed
    /// over as that write (it alone decides the row); any other is folded
    /// into a [`RowState`]. `f` returns false to stop after the key it was given;
    /// returns that key (`None` when every key was visited). The memtable
    /// is read-locked while `f` runs, so callers stop now and then to let
    /// writers in.
    pub fn for_each_changed(
        &self,
        range: &KeyRange,
        resume: Option<&[u8]>,
        after: u64,
        snapshot: u64,
        mut f: impl FnMut(&[u8], MemWrites<'_>) -> Result<bool>,
    ) -> Result<Option<Vec<u8>>> {
        let map = self.map.read();
        let Some(bounds) = range_bounds(range, resume) else {
            return Ok(None);
        };
        for (k, ops) in keys_within(&map.keys, bounds) {
            let k = k.bytes();
            match newest_seq(ops, snapshot) {
                Some(seq) if seq > after => {}
                _ => continue,
            }
            let go_on = match ops {
                Ops::Put(seq, packed) => {
                    let (row_ts, cells) = Unpack::new(packed, &map.names.columns);
                    f(
                        k,
                        KeyWrites::Put {
                            seq: *seq,
                            row_ts,
                            cells: MemCells::Packed(cells),
                        },
                    )?
                }
                Ops::Many(ops) => match visible(ops, snapshot).last() {
                    Some((seq, Mutation::Put { row_ts, cells })) => f(
                        k,
                        KeyWrites::Put {
                            seq: *seq,
                            row_ts: *row_ts,
                            cells: MemCells::Owned(cells),
                        },
                    )?,
                    _ => {
                        let mut st = RowState::default();
                        apply_many(ops, snapshot, &mut st);
                        f(k, KeyWrites::Folded(&st))?
                    }
                },
            };
            if !go_on {
                return Ok(Some(k.to_vec()));
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
        keys_within(&map.keys, (Bound::Included(lo), Bound::Included(hi)))
            .next()
            .is_some()
    }

    /// True when some key lies in `range` (any sequence).
    pub fn has_key_in(&self, range: &KeyRange) -> bool {
        self.key_count_in(range, 1) > 0
    }

    /// The keys in `range` (any sequence), counted up to `cap`.
    pub fn key_count_in(&self, range: &KeyRange, cap: usize) -> usize {
        let Some(bounds) = range_bounds(range, None) else {
            return 0;
        };
        let map = self.map.read();
        // The range holds every key (a flush of an unsplit table): the
        // map's count, without walking a million keys to learn it.
        let first = map.keys.first_key_value().map(|(k, _)| k.bytes());
        let last = map.keys.last_key_value().map(|(k, _)| k.bytes());
        if let (Some(first), Some(last)) = (first, last)
            && range.contains(first)
            && range.contains(last)
        {
            return map.keys.len().min(cap);
        }
        keys_within(&map.keys, bounds).take(cap).count()
    }

    #[cfg(test)]
    pub fn key_count(&self) -> usize {
        self.map.read().keys.len()
    }

    /// The key `n` keys after the smallest in `range` (`None` past its last).
    pub fn nth_key_in(&self, range: &KeyRange, n: usize) -> Option<Vec<u8>> {
        let bounds = range_bounds(range, None)?;
        keys_within(&self.map.read().keys, bounds)
            .nth(n)
            .map(|(k, _)| k.bytes().to_vec())
    }
}

/// Whether a key's newest write at or before `snapshot` came after
/// sequence `after` (sequences ascend within a key's writes).
fn changed(ops: &Ops, after: u64, snapshot: u64) -> bool {
    newest_seq(ops, snapshot).is_some_and(|s| s > after)
}

/// The sequence of a key's newest write at or before `snapshot`.
fn newest_seq(ops: &Ops, snapshot: u64) -> Option<u64> {
    match ops {
        Ops::Put(seq, _) => (*seq <= snapshot).then_some(*seq),
        Ops::Many(ops) => visible(ops, snapshot).last().map(|(s, _)| *s),
    }
}

/// A key's writes at or before `snapshot`.
fn visible(ops: &[(u64, Mutation)], snapshot: u64) -> &[(u64, Mutation)] {
    &ops[..ops.partition_point(|(s, _)| *s <= snapshot)]
}

/// Bounds of a range of keys in the B-tree.
type KeyBounds<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// The B-tree's keys within `bounds` (which [`bounds_ordered`] accepts).
fn keys_within<'m, V>(
    keys: &'m BTreeMap<MemKey, V>,
    (lo, hi): KeyBounds<'_>,
) -> std::collections::btree_map::Range<'m, MemKey, V> {
    let (lo, hi) = (lo.map(KeyRef::new), hi.map(KeyRef::new));
    keys.range::<dyn Key, _>((lo.as_ref().map(|k| k as &dyn Key), hi.as_ref().map(|k| k as &dyn Key)))
}

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

fn apply_ops(ops: &Ops, names: &[(String, [u64; 5])], snapshot: u64, state: &mut RowState) -> bool {
    match ops {
        Ops::Put(seq, packed) if *seq <= snapshot => {
            state.apply(*seq, &unpack(packed, names));
            true
        }
        Ops::Put(..) => false,
        Ops::Many(ops) => apply_many(ops, snapshot, state),
    }
}

fn apply_many(ops: &[(u64, Mutation)], snapshot: u64, state: &mut RowState) -> bool {
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
    /// Applies this memtable's writes of `key` with sequence above `after`
    /// onto `state`, in sequence order: `state` as of `after` becomes the
    /// row as of this memtable's newest write. Returns false when it has
    /// none.
    pub fn apply_after(&self, key: &[u8], after: u64, state: &mut RowState) -> bool {
        if self.max_seq() <= after {
            return false;
        }
        let map = self.map.read();
        match map.get(key) {
            Some(Ops::Put(seq, packed)) if *seq > after => {
                state.apply(*seq, &unpack(packed, &map.names.columns));
                true
            }
            Some(Ops::Many(ops)) => {
                let newer = &ops[ops.partition_point(|(s, _)| *s <= after)..];
                for (seq, m) in newer {
                    state.apply(*seq, m);
                }
                !newer.is_empty()
            }
            _ => false,
        }
    }

    /// Whether `key` has a write here with a sequence above `after`.
    pub fn written_after(&self, key: &[u8], after: u64) -> bool {
        if self.max_seq() <= after {
            return false;
        }
        let map = self.map.read();
        map.get(key).is_some_and(|ops| match ops {
            Ops::Put(seq, _) => *seq > after,
            Ops::Many(ops) => ops.last().is_some_and(|(s, _)| *s > after),
        })
    }

    /// What this memtable holds of `key` at `snapshot`, in one B-tree
    /// search: a point read of a key no memtable has (a write to a table
    /// with an index reads one) then searches each memtable once.
    pub fn probe(&self, key: &[u8], snapshot: u64) -> Probe {
        let map = self.map.read();
        match map.get(key) {
            Some(Ops::Put(seq, _)) if *seq <= snapshot => Probe::Hides,
            Some(Ops::Many(ops)) => {
                let ops = visible(ops, snapshot);
                if ops
                    .iter()
                    .any(|(_, m)| matches!(m, Mutation::Put { .. } | Mutation::Delete))
                {
                    Probe::Hides
                } else if ops.is_empty() {
                    Probe::Absent
                } else {
                    Probe::Present
                }
            }
            _ => Probe::Absent,
        }
    }
}

/// What a memtable holds of one key at a snapshot ([`Memtable::probe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// No write of the key at or before the snapshot.
    Absent,
    /// Writes of the key, none a PutRow or DeleteRow: older sources count.
    Present,
    /// Its newest visible write is a PutRow or DeleteRow: it hides every
    /// older source.
    Hides,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::row::Action;
    use crate::model::types::Value;

    #[test]
    fn packed_rows_round_trip() {
        let cells = vec![
            ("a".to_string(), 1_700_000_000_123, Value::Integer(-5)),
            ("b".to_string(), 1_700_000_000_123, Value::Double(2.5)),
            ("c".to_string(), 1_700_000_000_100, Value::String("seller_7".into())),
            ("d".to_string(), -3, Value::Boolean(true)),
            ("e".to_string(), i64::MAX, Value::Boolean(false)),
            ("f".to_string(), i64::MIN, Value::Binary(vec![0, 255, 7])),
            ("g".to_string(), 0, Value::Integer(i64::MIN)),
            ("h".to_string(), 0, Value::String(String::new())),
        ];
        for row_ts in [None, Some(42), Some(i64::MIN)] {
            let mut names = Names::default();
            names.id("z");
            let packed = pack(row_ts, &cells, &mut names, &mut Vec::new());
            let m = unpack(&packed, &names.columns);
            assert_eq!(
                m,
                Mutation::Put {
                    row_ts,
                    cells: cells.clone()
                }
            );
            assert_eq!(names.columns[names.ids["c"] as usize].1, [0, 0, 1, 0, 0]);
            // Every value is counted once per pack.
            assert_eq!(names.columns.len(), 9);
            assert!(Unpack::new(&packed, &names.columns).1.sorted);
        }
        // Cells out of order (or a column twice) are marked, so that a
        // flush folds them instead of encoding them as they are.
        let mut names = Names::default();
        for bad in [[1, 0], [0, 0]] {
            let cells: Vec<_> = bad.iter().map(|&i| cells[i].clone()).collect();
            let packed = pack(None, &cells, &mut names, &mut Vec::new());
            assert!(!Unpack::new(&packed, &names.columns).1.sorted);
        }
    }

    #[test]
    fn short_rows_pack_in_their_slot_and_unpack_the_same() {
        // A row marker alone (an index row), then one string cell whose
        // packed length crosses the inline limit, byte by byte.
        let mut names = Names::default();
        let mut scratch = Vec::new();
        let mut inline = 0;
        for n in 0..24 {
            for row_ts in [None, Some(i64::MIN), Some(7)] {
                let cells = if n == 0 {
                    Vec::new()
                } else {
                    vec![("s".to_string(), -1, Value::String("x".repeat(n - 1)))]
                };
                let packed = pack(row_ts, &cells, &mut names, &mut scratch);
                assert_eq!(&packed[..], &scratch[..]);
                match &packed {
                    Packed::Inline { .. } => {
                        inline += 1;
                        assert_eq!(packed.heap_bytes(), 0);
                    }
                    Packed::Heap(_) => assert!(packed.len() > 22 && packed.heap_bytes() >= packed.len()),
                }
                assert_eq!(unpack(&packed, &names.columns), Mutation::Put { row_ts, cells });
            }
        }
        assert!(inline > 20, "short rows are inline ({inline})");
        assert_eq!(std::mem::size_of::<Ops>(), 32, "a slot no larger than with a box");
    }

    #[test]
    fn key_counts_agree_with_a_walk() {
        let mem = Memtable::new();
        assert_eq!(mem.key_count_in(&KeyRange::all(), usize::MAX), 0);
        for k in 10u8..40 {
            mem.insert(vec![k], u64::from(k), Mutation::Delete);
        }
        let r = |lo: u8, hi: Option<u8>| KeyRange {
            lo: vec![lo],
            hi: hi.map(|h| vec![h]),
        };
        for (range, n) in [
            (KeyRange::all(), 30),
            (r(10, Some(40)), 30),
            (r(0, None), 30),
            (r(10, Some(39)), 29),
            (r(11, None), 29),
            (r(20, Some(25)), 5),
            (r(40, None), 0),
        ] {
            assert_eq!(mem.key_count_in(&range, usize::MAX), n, "{range:?}");
            assert_eq!(mem.key_count_in(&range, 3), n.min(3), "{range:?} capped");
        }
    }

    #[test]
    fn a_second_write_unpacks_the_first() {
        let mem = Memtable::new();
        let put = |v: i64| Mutation::Put {
            row_ts: None,
            cells: vec![("x".to_string(), 10, Value::Integer(v))],
        };
        mem.insert(b"k".to_vec(), 1, put(1));
        mem.insert(
            b"k".to_vec(),
            2,
            Mutation::Update {
                actions: vec![Action::Put {
                    column: "y".into(),
                    version: 11,
                    value: Value::String("s".into()),
                }],
            },
        );
        let mut st = RowState::default();
        assert!(mem.apply_to(b"k", 1, &mut st));
        assert_eq!(st.columns["x"].versions, vec![(10, Value::Integer(1))]);
        assert!(!st.columns.contains_key("y"));
        let mut st = RowState::default();
        assert!(mem.apply_to(b"k", 2, &mut st));
        assert_eq!(st.columns["y"].versions, vec![(11, Value::String("s".into()))]);
        assert_eq!(mem.value_counts()["x"], [1, 0, 0, 0, 0]);
        assert_eq!(mem.value_counts()["y"], [0, 0, 1, 0, 0]);
        // A packed PutRow at or below the snapshot hides older sources.
        mem.insert(b"p".to_vec(), 3, put(3));
        assert_eq!(mem.probe(b"p", 3), Probe::Hides);
        assert_eq!(mem.probe(b"p", 2), Probe::Absent);
        // A PutRow followed by an UpdateRow still hides older sources;
        // writes that are not PutRow / DeleteRow leave them in.
        assert_eq!(mem.probe(b"k", 2), Probe::Hides);
        mem.insert(
            b"u".to_vec(),
            4,
            Mutation::Update {
                actions: vec![Action::DeleteAll { column: "x".into() }],
            },
        );
        assert_eq!(mem.probe(b"u", 4), Probe::Present);
        assert_eq!(mem.probe(b"u", 3), Probe::Absent);
        assert_eq!(mem.probe(b"none", 9), Probe::Absent);
    }
}
