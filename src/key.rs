//! Memcomparable primary-key encoding.
//!
//! A primary key is encoded once into a byte string whose bytewise order is
//! the PK order; memtables, segment sort order, range bounds and pruning all
//! use it. Per column:
//! - INTEGER: the big-endian bytes with the sign bit flipped, so that
//!   `-1 < 0 < 1` holds bytewise.
//! - STRING / BINARY: every `0x00` is escaped as `0x00 0xFF` and the value is
//!   terminated by `0x00 0x01`, so that a prefix sorts before its extensions
//!   (`"ab" < "ab\0" < "abc"`).
//!
//! Every column encoding is self-delimiting, so full keys are prefix-free:
//! no key lies strictly between `k` and `k ++ [0x00]`. Range bounds use that
//! to turn inclusive / exclusive and INF_MIN / INF_MAX into one half-open
//! byte range `[lo, hi)`.

use crate::error::{Error, Result};
use crate::types::PkType;
use crate::types::PkValue;

/// Appends the encoding of one PK column value.
pub(crate) fn encode_value(out: &mut Vec<u8>, v: &PkValue) {
    match v {
        PkValue::Integer(i) => out.extend_from_slice(&((*i as u64) ^ (1 << 63)).to_be_bytes()),
        PkValue::String(s) => encode_bytes(out, s.as_bytes()),
        PkValue::Binary(b) => encode_bytes(out, b),
    }
}

fn encode_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.reserve(b.len() + 2);
    for &byte in b {
        out.push(byte);
        if byte == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

/// Encodes a full key given its values in PK order.
#[cfg(test)]
pub(crate) fn encode_key<'a>(values: impl IntoIterator<Item = &'a PkValue>) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    for v in values {
        encode_value(&mut out, v);
    }
    out
}

/// Decodes a full key of the given column types.
pub(crate) fn decode_key(mut bytes: &[u8], types: &[PkType]) -> Result<Vec<PkValue>> {
    let mut out = Vec::with_capacity(types.len());
    for ty in types {
        let (v, rest) = decode_value(bytes, *ty)?;
        out.push(v);
        bytes = rest;
    }
    if !bytes.is_empty() {
        return Err(Error::corruption("encoded primary key has trailing bytes"));
    }
    Ok(out)
}

fn decode_value(bytes: &[u8], ty: PkType) -> Result<(PkValue, &[u8])> {
    match ty {
        PkType::Integer => {
            if bytes.len() < 8 {
                return Err(Error::corruption("encoded primary key is truncated"));
            }
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[..8]);
            let v = (u64::from_be_bytes(b) ^ (1 << 63)) as i64;
            Ok((PkValue::Integer(v), &bytes[8..]))
        }
        PkType::String | PkType::Binary => {
            let mut out = Vec::new();
            let mut i = 0;
            loop {
                match bytes.get(i) {
                    None => return Err(Error::corruption("encoded primary key is truncated")),
                    Some(0) => match bytes.get(i + 1) {
                        Some(0xFF) => {
                            out.push(0);
                            i += 2;
                        }
                        Some(0x01) => {
                            i += 2;
                            break;
                        }
                        _ => return Err(Error::corruption("bad escape in encoded primary key")),
                    },
                    Some(&b) => {
                        out.push(b);
                        i += 1;
                    }
                }
            }
            let v = if ty == PkType::String {
                PkValue::String(
                    String::from_utf8(out).map_err(|_| Error::corruption("primary key string is not UTF-8"))?,
                )
            } else {
                PkValue::Binary(out)
            };
            Ok((v, &bytes[i..]))
        }
    }
}

/// The smallest byte string greater than every string that starts with
/// `prefix`, or `None` when no such string exists (all `0xFF` or empty).
pub(crate) fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last != 0xFF {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

/// The position right after a full key: the smallest string greater than it.
pub(crate) fn key_successor(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.extend_from_slice(key);
    k.push(0);
    k
}

/// A half-open range of encoded keys, `lo <= key < hi` (`hi = None`: no end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyRange {
    pub lo: Vec<u8>,
    pub hi: Option<Vec<u8>>,
}

impl KeyRange {
    pub fn all() -> Self {
        KeyRange {
            lo: Vec::new(),
            hi: None,
        }
    }

    pub fn empty() -> Self {
        KeyRange {
            lo: Vec::new(),
            hi: Some(Vec::new()),
        }
    }

    pub fn point(key: &[u8]) -> Self {
        KeyRange {
            lo: key.to_vec(),
            hi: Some(key_successor(key)),
        }
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.lo.as_slice() && self.hi.as_deref().is_none_or(|h| key < h)
    }

    pub fn is_empty(&self) -> bool {
        self.hi.as_deref().is_some_and(|h| h <= self.lo.as_slice())
    }

    /// True when `[min, max]` (inclusive key bounds) overlaps this range.
    pub fn overlaps(&self, min: &[u8], max: &[u8]) -> bool {
        max >= self.lo.as_slice() && self.hi.as_deref().is_none_or(|h| min < h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: &[PkValue]) -> Vec<u8> {
        encode_key(v.iter())
    }

    #[test]
    fn integer_order_matches_numeric_order() {
        let vals = [i64::MIN, -1000, -1, 0, 1, 7, 1 << 40, i64::MAX];
        for w in vals.windows(2) {
            assert!(enc(&[w[0].into()]) < enc(&[w[1].into()]), "{w:?}");
        }
    }

    #[test]
    fn strings_with_shared_prefixes_and_zero_bytes() {
        let vals: Vec<&[u8]> = vec![b"", b"\0", b"\0\0", b"\0\x01", b"a", b"a\0", b"a\0b", b"ab", b"b"];
        for w in vals.windows(2) {
            let a = enc(&[PkValue::Binary(w[0].to_vec())]);
            let b = enc(&[PkValue::Binary(w[1].to_vec())]);
            assert!(a < b, "{:?} < {:?}", w[0], w[1]);
        }
    }

    #[test]
    fn multi_column_round_trip() {
        let types = [PkType::String, PkType::Integer, PkType::Binary];
        let key = vec![
            PkValue::String("x\0y".into()),
            PkValue::Integer(-5),
            PkValue::Binary(vec![0, 255, 0]),
        ];
        let e = enc(&key);
        assert_eq!(decode_key(&e, &types).unwrap(), key);
        assert!(decode_key(&e[..e.len() - 1], &types).is_err());
    }

    #[test]
    fn composite_order_is_column_by_column() {
        let a = enc(&["a".into(), 5.into()]);
        let b = enc(&["a".into(), 6.into()]);
        let c = enc(&["ab".into(), i64::MIN.into()]);
        assert!(a < b && b < c);
    }

    #[test]
    fn successors() {
        assert_eq!(prefix_successor(&[1, 2, 0xFF]), Some(vec![1, 3]));
        assert_eq!(prefix_successor(&[0xFF, 0xFF]), None);
        let r = KeyRange::point(&[5, 6]);
        assert!(r.contains(&[5, 6]) && !r.contains(&[5, 6, 0]) && !r.contains(&[5, 5]));
    }
}
