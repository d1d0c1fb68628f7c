//! Memtable keys: the encoded key, with its first eight bytes also kept
//! inline as a number.
//!
//! A B-tree node holds its keys side by side, but a `Vec<u8>` key's bytes
//! live elsewhere on the heap: each comparison of a search loaded a cache
//! line of its own, and a memtable of a few hundred thousand keys missed
//! the cache on most of them (memtable inserts and the point reads of
//! writes to indexed tables spent most of their time there). With the
//! head inline, a comparison reads the heap bytes only when the heads are
//! equal.
//!
//! Invariant: keys order exactly as their bytes do. The head is the first
//! eight bytes big-endian, zero-padded, so when two heads differ they
//! order the keys as the bytes would; when they are equal the bytes
//! decide.

use std::borrow::Borrow;
use std::cmp::Ordering;

/// The first eight bytes of `key`, big-endian, zero-padded.
fn head(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// A key as the memtable's B-tree stores it.
#[derive(PartialEq, Eq)]
pub(super) struct MemKey {
    head: u64,
    bytes: Vec<u8>,
}

impl MemKey {
    pub fn new(bytes: Vec<u8>) -> Self {
        MemKey {
            head: head(&bytes),
            bytes,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// A borrowed key to search the B-tree with.
pub(super) struct KeyRef<'a> {
    head: u64,
    bytes: &'a [u8],
}

impl<'a> KeyRef<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        KeyRef {
            head: head(bytes),
            bytes,
        }
    }
}

/// What both forms compare by: the B-tree searches with `&dyn Key`
/// (which a stored [`MemKey`] borrows as), so a lookup needs no owned key.
pub(super) trait Key {
    fn head(&self) -> u64;
    fn bytes(&self) -> &[u8];
}

impl Key for MemKey {
    fn head(&self) -> u64 {
        self.head
    }
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Key for KeyRef<'_> {
    fn head(&self) -> u64 {
        self.head
    }
    fn bytes(&self) -> &[u8] {
        self.bytes
    }
}

impl Ord for dyn Key + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.head()
            .cmp(&other.head())
            .then_with(|| self.bytes().cmp(other.bytes()))
    }
}

impl PartialOrd for dyn Key + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for dyn Key + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.head() == other.head() && self.bytes() == other.bytes()
    }
}

impl Eq for dyn Key + '_ {}

impl<'a> Borrow<dyn Key + 'a> for MemKey {
    fn borrow(&self) -> &(dyn Key + 'a) {
        self
    }
}

impl Ord for MemKey {
    fn cmp(&self, other: &Self) -> Ordering {
        (self as &dyn Key).cmp(other as &dyn Key)
    }
}

impl PartialOrd for MemKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Keys order as their bytes, equal heads or not (short keys,
        /// trailing zero bytes and shared prefixes included).
        #[test]
        fn keys_order_as_their_bytes(
            a in proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(255u8), any::<u8>()], 0..12),
            b in proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(255u8), any::<u8>()], 0..12),
        ) {
            let want = a.cmp(&b);
            let (ka, kb) = (MemKey::new(a.clone()), MemKey::new(b.clone()));
            prop_assert_eq!(ka.cmp(&kb), want);
            prop_assert_eq!((&KeyRef::new(&a) as &dyn Key).cmp(&kb as &dyn Key), want);
            prop_assert_eq!(ka == kb, a == b);
        }
    }
}
