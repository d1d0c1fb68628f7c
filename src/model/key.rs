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
//!
//! Invariant: `encode(a) < encode(b)` bytewise exactly when `a < b` in key
//! order, and decoding gives back the values encoded.

use crate::error::{Error, Result};
use crate::model::types::PkType;
use crate::model::types::PkValue;

/// Appends the encoding of one PK column value.
pub(crate) fn encode_value(out: &mut Vec<u8>, v: &PkValue) {
    match v {
        PkValue::Integer(i) => out.extend_from_slice(&encode_integer(*i)),
        // 8 bytes the committer replaces with the assigned value.
        PkValue::AutoIncrement => out.extend_from_slice(&[0; 8]),
        PkValue::String(s) => encode_bytes(out, s.as_bytes()),
        PkValue::Binary(b) => encode_bytes(out, b),
    }
}

/// The encoding of an INTEGER key value.
pub(crate) fn encode_integer(i: i64) -> [u8; 8] {
    ((i as u64) ^ (1 << 63)).to_be_bytes()
}

pub(crate) fn encode_bytes(out: &mut Vec<u8>, b: &[u8]) {
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

/// The bytes of an encoded key that hold its first (partition key)
/// column; the whole key when it cannot be decoded.
pub(crate) fn partition_prefix(key: &[u8], ty: PkType) -> &[u8] {
    match decode_value_ref(key, ty) {
        Ok((_, rest)) => &key[..key.len() - rest.len()],
        Err(_) => key,
    }
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
    let (v, rest) = decode_value_ref(bytes, ty)?;
    let v = match v {
        PkRef::Integer(i) => PkValue::Integer(i),
        PkRef::Bytes(b) if ty == PkType::String => PkValue::String(
            String::from_utf8(b.into_owned()).map_err(|_| Error::corruption("primary key string is not UTF-8"))?,
        ),
        PkRef::Bytes(b) => PkValue::Binary(b.into_owned()),
    };
    Ok((v, rest))
}

/// One decoded PK column value, borrowing the encoded key where it can
/// (a string or binary value without zero bytes needs no unescaping).
pub(crate) enum PkRef<'a> {
    Integer(i64),
    /// A string's UTF-8 bytes (not validated here) or a binary value.
    Bytes(std::borrow::Cow<'a, [u8]>),
}

/// Calls `f` with each column value of a full key, in PK order, without
/// allocating for values that need no unescaping.
pub(crate) fn for_each_value<'a>(
    mut bytes: &'a [u8],
    types: impl IntoIterator<Item = PkType>,
    mut f: impl FnMut(PkRef<'a>) -> Result<()>,
) -> Result<()> {
    for ty in types {
        let (v, rest) = decode_value_ref(bytes, ty)?;
        f(v)?;
        bytes = rest;
    }
    if !bytes.is_empty() {
        return Err(Error::corruption("encoded primary key has trailing bytes"));
    }
    Ok(())
}

fn decode_value_ref(bytes: &[u8], ty: PkType) -> Result<(PkRef<'_>, &[u8])> {
    let truncated = || Error::corruption("encoded primary key is truncated");
    match ty {
        PkType::Integer => {
            let mut b = [0u8; 8];
            b.copy_from_slice(bytes.get(..8).ok_or_else(truncated)?);
            let v = (u64::from_be_bytes(b) ^ (1 << 63)) as i64;
            Ok((PkRef::Integer(v), &bytes[8..]))
        }
        PkType::String | PkType::Binary => {
            // The first zero byte either ends the value (`00 01`) or starts
            // an escaped zero (`00 FF`); only the latter needs a copy.
            let z = bytes.iter().position(|&b| b == 0).ok_or_else(truncated)?;
            match bytes.get(z + 1) {
                Some(0x01) => return Ok((PkRef::Bytes(bytes[..z].into()), &bytes[z + 2..])),
                Some(0xFF) => {}
                None => return Err(truncated()),
                _ => return Err(Error::corruption("bad escape in encoded primary key")),
            }
            let mut out = bytes[..z].to_vec();
            let mut i = z;
            loop {
                match bytes.get(i) {
                    None => return Err(truncated()),
                    Some(0) => match bytes.get(i + 1) {
                        Some(0xFF) => {
                            out.push(0);
                            i += 2;
                        }
                        Some(0x01) => {
                            i += 2;
                            break;
                        }
                        None => return Err(truncated()),
                        _ => return Err(Error::corruption("bad escape in encoded primary key")),
                    },
                    Some(&b) => {
                        out.push(b);
                        i += 1;
                    }
                }
            }
            Ok((PkRef::Bytes(out.into()), &bytes[i..]))
        }
    }
}

/// How many bytes the encoding of one `ty` value at the start of `bytes`
/// takes (`None`: truncated or malformed).
pub(crate) fn encoded_len(bytes: &[u8], ty: PkType) -> Option<usize> {
    match ty {
        PkType::Integer => (bytes.len() >= 8).then_some(8),
        PkType::String | PkType::Binary => {
            let mut i = 0;
            loop {
                let z = i + bytes[i..].iter().position(|&b| b == 0)?;
                match bytes.get(z + 1)? {
                    0x01 => return Some(z + 2),
                    0xFF => i = z + 2,
                    _ => return None,
                }
            }
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

    /// The keys that start with `prefix` (a whole encoded first column:
    /// one partition key value).
    pub fn prefixed(prefix: &[u8]) -> Self {
        let mut hi = prefix.to_vec();
        while hi.last() == Some(&0xFF) {
            hi.pop();
        }
        let hi = match hi.last_mut() {
            Some(b) => {
                *b += 1;
                Some(hi)
            }
            None => None,
        };
        KeyRange {
            lo: prefix.to_vec(),
            hi,
        }
    }

    /// The keys in both ranges.
    pub fn intersect(&self, o: &KeyRange) -> KeyRange {
        let lo = self.lo.clone().max(o.lo.clone());
        let hi = match (&self.hi, &o.hi) {
            (Some(a), Some(b)) => Some(a.clone().min(b.clone())),
            (Some(a), None) | (None, Some(a)) => Some(a.clone()),
            (None, None) => None,
        };
        KeyRange { lo, hi }
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
    fn values_decode_by_reference_borrowing_unescaped_ones() {
        use std::borrow::Cow;
        let types = [PkType::String, PkType::Integer, PkType::Binary, PkType::String];
        let key = vec![
            PkValue::String("plain".into()),
            PkValue::Integer(i64::MIN),
            PkValue::Binary(vec![0, 1, 0xFF, 0]),
            PkValue::String(String::new()),
        ];
        let e = enc(&key);
        let mut got = Vec::new();
        for_each_value(&e, types, |v| {
            got.push(match v {
                PkRef::Integer(i) => (None, Some(i)),
                PkRef::Bytes(b) => (Some((matches!(b, Cow::Borrowed(_)), b.into_owned())), None),
            });
            Ok(())
        })
        .unwrap();
        assert_eq!(
            got,
            vec![
                (Some((true, b"plain".to_vec())), None),
                (None, Some(i64::MIN)),
                (Some((false, vec![0, 1, 0xFF, 0])), None),
                (Some((true, Vec::new())), None),
            ]
        );
        // Every cut of the key is refused, never misread.
        for cut in 0..e.len() {
            assert!(for_each_value(&e[..cut], types, |_| Ok(())).is_err(), "cut at {cut}");
        }
        let mut longer = e.clone();
        longer.push(7);
        assert!(for_each_value(&longer, types, |_| Ok(())).is_err());
        assert!(for_each_value(&[b'a', 0, 0x02], [PkType::String], |_| Ok(())).is_err());
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
