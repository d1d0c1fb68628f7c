//! The packed form of a memtable PutRow: at most one allocation per row
//! (none for a short one), a third of the memory of a `Mutation`, and the
//! column names it refers to by id.
//!
//! Invariant: unpacking gives back exactly the cells packed (names,
//! versions and values bit for bit), in the order written.

use crate::model::row::{Action, Mutation};
use crate::model::types::ValueRef;

/// The attribute columns written to a memtable, by id.
#[derive(Default)]
pub(super) struct Names {
    /// Name and values written per type (`ValueType::index` order).
    pub(super) columns: Vec<(String, [u64; 5])>,
    pub(super) ids: std::collections::HashMap<String, u32>,
    /// The ids of the last PutRow's cells, in order: the rows of a load
    /// name the same columns, so most lookups are one comparison here
    /// instead of hashing the name (15% of the committer's time).
    pub(super) recent: Vec<u32>,
}

impl Names {
    /// The id of a column name (added on first use).
    pub(super) fn id(&mut self, name: &str) -> u32 {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = self.columns.len() as u32;
        self.columns.push((name.to_string(), [0; 5]));
        self.ids.insert(name.to_string(), id);
        id
    }

    /// The id of the `i`-th cell's column of a PutRow, tried against the
    /// last PutRow's first.
    pub(super) fn cell_id(&mut self, i: usize, name: &str) -> u32 {
        match self.recent.get(i) {
            Some(&id) if self.columns.get(id as usize).is_some_and(|(n, _)| n == name) => id,
            _ => {
                let id = self.id(name);
                self.recent.truncate(i);
                self.recent.push(id);
                id
            }
        }
    }

    /// Counts a value written to column `id`.
    pub(super) fn count(&mut self, id: u32, v: &crate::model::types::Value) {
        if let Some((_, counts)) = self.columns.get_mut(id as usize) {
            counts[v.value_type().index()] += 1;
        }
    }

    /// Counts the values of a write that is not packed.
    pub(super) fn count_values(&mut self, m: &Mutation) {
        match m {
            Mutation::Put { cells, .. } => {
                for (i, (name, _, v)) in cells.iter().enumerate() {
                    let id = self.cell_id(i, name);
                    self.count(id, v);
                }
            }
            Mutation::Update { actions } => {
                for a in actions {
                    if let Action::Put { column, value, .. } = a {
                        let id = self.id(column);
                        self.count(id, value);
                    }
                }
            }
            Mutation::Delete => {}
        }
    }
}

/// Packs a PutRow into one allocation: a flags byte (1: row marker, 2:
/// cells name each column once, ascending, as the write path sorts them),
/// the marker's version (8 bytes), the cell count, then per cell the
/// column's id (see [`Names`]), its version as a zigzag varint delta
/// from the previous cell's (the cells of a write usually share one),
/// and a tagged value (integers as zigzag varints, doubles as 8 bytes,
/// strings and binaries length-prefixed, booleans in the tag). Counts the
/// values per column as it goes.
/// `out` is scratch space, reused from row to row.
pub(super) fn pack(
    row_ts: Option<i64>,
    cells: &[(String, i64, crate::model::types::Value)],
    names: &mut Names,
    out: &mut Vec<u8>,
) -> Packed {
    use crate::model::types::Value;
    out.clear();
    let sorted = cells.windows(2).all(|w| w[0].0 < w[1].0);
    out.push(if row_ts.is_some() { FLAG_ROW_TS } else { 0 } | if sorted { FLAG_SORTED } else { 0 });
    if let Some(ts) = row_ts {
        out.extend_from_slice(&ts.to_le_bytes());
    }
    put_varint(out, cells.len() as u64);
    let mut prev = 0i64;
    for (i, (name, ts, v)) in cells.iter().enumerate() {
        let id = names.cell_id(i, name);
        names.count(id, v);
        put_varint(out, u64::from(id));
        put_varint(out, zigzag(ts.wrapping_sub(prev)));
        prev = *ts;
        match v {
            Value::Integer(x) => {
                out.push(TAG_INT);
                put_varint(out, zigzag(*x));
            }
            Value::Double(x) => {
                out.push(TAG_DOUBLE);
                out.extend_from_slice(&x.to_le_bytes());
            }
            Value::String(x) => {
                out.push(TAG_STRING);
                put_varint(out, x.len() as u64);
                out.extend_from_slice(x.as_bytes());
            }
            Value::Boolean(x) => out.push(if *x { TAG_TRUE } else { TAG_FALSE }),
            Value::Binary(x) => {
                out.push(TAG_BINARY);
                put_varint(out, x.len() as u64);
                out.extend_from_slice(x);
            }
        }
    }
    Packed::of(out)
}

/// Bytes of a packed row kept in its slot rather than on the heap: an
/// index row (a row marker alone: 10 bytes) or a PutRow of a cell or two
/// of small values then costs no allocation, and none to free when its
/// memtable goes.
const INLINE_BYTES: usize = 22;

/// A packed row (see [`pack`]): in the slot when short, else in one heap
/// allocation of its exact length. Either way 24 bytes, so a memtable's
/// per-key slot is no larger than with a box alone.
pub(super) enum Packed {
    Inline { len: u8, bytes: [u8; INLINE_BYTES] },
    Heap(Box<[u8]>),
}

impl Packed {
    fn of(bytes: &[u8]) -> Self {
        if bytes.len() <= INLINE_BYTES {
            let mut inline = [0u8; INLINE_BYTES];
            inline[..bytes.len()].copy_from_slice(bytes);
            Packed::Inline {
                len: bytes.len() as u8,
                bytes: inline,
            }
        } else {
            Packed::Heap(bytes.into())
        }
    }

    /// The heap bytes it holds (0 inline).
    pub(super) fn heap_bytes(&self) -> usize {
        match self {
            Packed::Inline { .. } => 0,
            Packed::Heap(b) => crate::model::row::heap_block(b.len()),
        }
    }
}

impl std::ops::Deref for Packed {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Packed::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Packed::Heap(b) => b,
        }
    }
}

const FLAG_ROW_TS: u8 = 1;
const FLAG_SORTED: u8 = 2;
const TAG_INT: u8 = 0;
const TAG_DOUBLE: u8 = 1;
const TAG_STRING: u8 = 2;
const TAG_FALSE: u8 = 3;
const TAG_TRUE: u8 = 4;
const TAG_BINARY: u8 = 5;

pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(super) fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// The PutRow a packed row holds, owned.
pub(super) fn unpack(packed: &[u8], names: &[(String, [u64; 5])]) -> Mutation {
    let (row_ts, cells) = Unpack::new(packed, names);
    Mutation::Put {
        row_ts,
        cells: cells.map(|(n, v, x)| (n.to_string(), v, x.to_value())).collect(),
    }
}

/// Reads the cells of a packed row (see [`pack`]) without allocating.
#[derive(Clone, Copy)]
pub(crate) struct Unpack<'a> {
    buf: &'a [u8],
    pos: usize,
    left: u64,
    prev_ts: i64,
    names: &'a [(String, [u64; 5])],
    /// The cells name each column once, in ascending order.
    pub sorted: bool,
}

impl<'a> Unpack<'a> {
    /// The row marker version and the cells.
    pub(super) fn new(buf: &'a [u8], names: &'a [(String, [u64; 5])]) -> (Option<i64>, Self) {
        let mut u = Unpack {
            buf,
            pos: 1,
            left: 0,
            prev_ts: 0,
            names,
            sorted: buf.first().is_some_and(|f| f & FLAG_SORTED != 0),
        };
        let row_ts = match buf.first() {
            Some(f) if f & FLAG_ROW_TS != 0 => u.bytes(8).map(|b| i64::from_le_bytes(b.try_into().unwrap_or_default())),
            _ => None,
        };
        u.left = u.varint().unwrap_or(0);
        (row_ts, u)
    }

    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let b = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(b)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    fn cell(&mut self) -> Option<(&'a str, i64, ValueRef<'a>)> {
        let name = self.names.get(usize::try_from(self.varint()?).ok()?)?.0.as_str();
        let ts = self.prev_ts.wrapping_add(unzigzag(self.varint()?));
        self.prev_ts = ts;
        let tag = *self.buf.get(self.pos)?;
        self.pos += 1;
        let value = match tag {
            TAG_INT => ValueRef::Integer(unzigzag(self.varint()?)),
            TAG_DOUBLE => ValueRef::Double(f64::from_le_bytes(self.bytes(8)?.try_into().ok()?)),
            TAG_STRING => {
                let n = usize::try_from(self.varint()?).ok()?;
                ValueRef::String(std::str::from_utf8(self.bytes(n)?).ok()?)
            }
            TAG_FALSE => ValueRef::Boolean(false),
            TAG_TRUE => ValueRef::Boolean(true),
            TAG_BINARY => {
                let n = usize::try_from(self.varint()?).ok()?;
                ValueRef::Binary(self.bytes(n)?)
            }
            _ => return None,
        };
        Some((name, ts, value))
    }
}

impl<'a> Iterator for Unpack<'a> {
    type Item = (&'a str, i64, ValueRef<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let cell = self.cell();
        // Packed rows are written by `pack` only; a malformed one is a bug.
        debug_assert!(cell.is_some(), "malformed packed memtable row");
        if cell.is_none() {
            self.left = 0;
        }
        cell
    }
}
