//! A small binary codec for WAL records and segment tombstones: varints,
//! length-prefixed bytes, values and mutations. Decoding never panics on
//! bad input; it returns a corruption error.
//!
//! A value is a tag and its bytes: 0 integer (zig-zag varint), 1 double
//! (8 bytes), 2 string, 3 boolean, 4 binary, and 16 + e (e 0-15) a
//! double written as a zig-zag varint `m` that stands for `m / 10^e`
//! ([`put_double`], for `__cells`; the WAL writes tag 1). Invariant: a
//! decimal-coded double decodes to exactly the bits it was written from.

use crate::error::{Error, Result};
use crate::model::row::{Action, Mutation};
use crate::model::types::Value;

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn put_i64(out: &mut Vec<u8>, v: i64) {
    // zig-zag so that small negative numbers stay small
    put_varint(out, ((v << 1) ^ (v >> 63)) as u64);
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// The first tag of decimal-coded doubles: tag `DECIMAL + e` holds
/// `m / 10^e`.
const DECIMAL: u8 = 16;

/// The powers of ten of decimal-coded doubles, exact in an `f64`.
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// `d` as `(e, m)` with `m / 10^e` giving back exactly `d`'s bits, the
/// smallest such `e`; `None` when no `e` up to 15 does (irrational-looking
/// values, infinities, NaN, -0.0, magnitudes past 2^53).
fn decimal(d: f64) -> Option<(u8, i64)> {
    if !d.is_finite() {
        return None;
    }
    for (e, p) in POW10.iter().enumerate() {
        let x = (d * p).round();
        if x.abs() >= (1u64 << 53) as f64 {
            return None;
        }
        let m = x as i64;
        if (m as f64 / p).to_bits() == d.to_bits() {
            return Some((e as u8, m));
        }
    }
    None
}

/// A double value, decimal-coded where that gives it back exactly: prices
/// and measurements such as 42.37 take 3 bytes instead of 9.
pub(crate) fn put_double(out: &mut Vec<u8>, d: f64) {
    match decimal(d) {
        Some((e, m)) => {
            out.push(DECIMAL + e);
            put_i64(out, m);
        }
        None => {
            out.push(1);
            out.extend_from_slice(&d.to_le_bytes());
        }
    }
}

pub(crate) fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Integer(i) => {
            out.push(0);
            put_i64(out, *i);
        }
        Value::Double(d) => {
            out.push(1);
            out.extend_from_slice(&d.to_le_bytes());
        }
        Value::String(s) => {
            out.push(2);
            put_bytes(out, s.as_bytes());
        }
        Value::Boolean(b) => {
            out.push(3);
            out.push(*b as u8);
        }
        Value::Binary(b) => {
            out.push(4);
            put_bytes(out, b);
        }
    }
}

pub(crate) fn put_mutation(out: &mut Vec<u8>, m: &Mutation) {
    match m {
        Mutation::Put { row_ts, cells } => {
            out.push(0);
            match row_ts {
                Some(ts) => {
                    out.push(1);
                    put_i64(out, *ts);
                }
                None => out.push(0),
            }
            put_varint(out, cells.len() as u64);
            for (name, version, value) in cells {
                put_bytes(out, name.as_bytes());
                put_i64(out, *version);
                put_value(out, value);
            }
        }
        Mutation::Update { actions } => {
            out.push(1);
            put_varint(out, actions.len() as u64);
            for a in actions {
                match a {
                    Action::Put { column, version, value } => {
                        out.push(0);
                        put_bytes(out, column.as_bytes());
                        put_i64(out, *version);
                        put_value(out, value);
                    }
                    Action::DeleteVersion { column, version } => {
                        out.push(1);
                        put_bytes(out, column.as_bytes());
                        put_i64(out, *version);
                    }
                    Action::DeleteAll { column } => {
                        out.push(2);
                        put_bytes(out, column.as_bytes());
                    }
                }
            }
        }
        Mutation::Delete => out.push(2),
    }
}

/// A cursor over encoded bytes.
pub(crate) struct Decoder<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Decoder { buf, what }
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    fn bad(&self, detail: &str) -> Error {
        Error::corruption(format!("{}: {detail}", self.what))
    }

    pub fn u8(&mut self) -> Result<u8> {
        let (&b, rest) = self.buf.split_first().ok_or_else(|| self.bad("truncated"))?;
        self.buf = rest;
        Ok(b)
    }

    pub fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7F) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(self.bad("varint too long"))
    }

    pub fn i64(&mut self) -> Result<i64> {
        let v = self.varint()?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    pub fn len(&mut self) -> Result<usize> {
        let n = self.varint()?;
        if n > self.buf.len() as u64 {
            return Err(self.bad("length past the end"));
        }
        Ok(n as usize)
    }

    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.len()?;
        let (b, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(b)
    }

    pub fn string(&mut self) -> Result<String> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| self.bad("string is not UTF-8"))
    }

    pub fn value(&mut self) -> Result<Value> {
        Ok(match self.u8()? {
            0 => Value::Integer(self.i64()?),
            1 => {
                if self.buf.len() < 8 {
                    return Err(self.bad("truncated double"));
                }
                let (b, rest) = self.buf.split_at(8);
                self.buf = rest;
                Value::Double(f64::from_le_bytes(b.try_into().map_err(|_| self.bad("double"))?))
            }
            2 => Value::String(self.string()?),
            3 => Value::Boolean(self.u8()? != 0),
            4 => Value::Binary(self.bytes()?.to_vec()),
            t @ DECIMAL..=31 => Value::Double(self.i64()? as f64 / POW10[(t - DECIMAL) as usize]),
            t => return Err(self.bad(&format!("unknown value tag {t}"))),
        })
    }

    /// Steps over one value without building it.
    pub fn skip_value(&mut self) -> Result<()> {
        match self.u8()? {
            0 | DECIMAL..=31 => {
                self.varint()?;
            }
            1 => {
                if self.buf.len() < 8 {
                    return Err(self.bad("truncated double"));
                }
                self.buf = &self.buf[8..];
            }
            2 | 4 => {
                self.bytes()?;
            }
            3 => {
                self.u8()?;
            }
            t => return Err(self.bad(&format!("unknown value tag {t}"))),
        }
        Ok(())
    }

    pub fn mutation(&mut self) -> Result<Mutation> {
        Ok(match self.u8()? {
            0 => {
                let row_ts = match self.u8()? {
                    0 => None,
                    _ => Some(self.i64()?),
                };
                let n = self.varint()?;
                let mut cells = Vec::with_capacity(n.min(1024) as usize);
                for _ in 0..n {
                    let name = self.string()?;
                    let version = self.i64()?;
                    cells.push((name, version, self.value()?));
                }
                Mutation::Put { row_ts, cells }
            }
            1 => {
                let n = self.varint()?;
                let mut actions = Vec::with_capacity(n.min(1024) as usize);
                for _ in 0..n {
                    actions.push(match self.u8()? {
                        0 => {
                            let column = self.string()?;
                            let version = self.i64()?;
                            Action::Put {
                                column,
                                version,
                                value: self.value()?,
                            }
                        }
                        1 => Action::DeleteVersion {
                            column: self.string()?,
                            version: self.i64()?,
                        },
                        2 => Action::DeleteAll { column: self.string()? },
                        t => return Err(self.bad(&format!("unknown action tag {t}"))),
                    });
                }
                Mutation::Update { actions }
            }
            2 => Mutation::Delete,
            t => return Err(self.bad(&format!("unknown mutation tag {t}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Doubles come back bit for bit; decimals take their short form,
    /// everything else the 8-byte one.
    #[test]
    fn doubles_round_trip_exactly() {
        let short = [
            0.0,
            1.0,
            -1.0,
            42.37,
            -42.37,
            0.1,
            0.3,
            1e-15,
            123456.789,
            9007199254740991.0,
            1e15,
        ];
        let long = [
            -0.0,
            f64::NAN,
            -f64::NAN,
            f64::from_bits(0x7ff8_dead_beef_0001),
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
            1.0 / 3.0,
            0.1 + 0.2,
            9007199254740993.0 * 4.0,
            1e-16,
        ];
        for (d, want_short) in short.iter().map(|d| (*d, true)).chain(long.iter().map(|d| (*d, false))) {
            let mut out = Vec::new();
            put_double(&mut out, d);
            assert_eq!(out[0] >= DECIMAL, want_short, "{d:?} as {out:?}");
            if want_short {
                assert!(out.len() <= 9, "{d:?} took {} bytes", out.len());
            }
            let mut dec = Decoder::new(&out, "test");
            match dec.value().unwrap() {
                Value::Double(got) => assert_eq!(got.to_bits(), d.to_bits(), "{d:?}"),
                other => panic!("{other:?}"),
            }
            assert!(dec.is_empty());
            let mut dec = Decoder::new(&out, "test");
            dec.skip_value().unwrap();
            assert!(dec.is_empty(), "{d:?}");
        }
        let mut out = Vec::new();
        put_double(&mut out, 42.37);
        assert_eq!(out.len(), 3, "42.37 as {out:?}");
        // Every cent amount up to a million is short and exact.
        for c in (-100_000_000i64..100_000_000).step_by(9973) {
            let d = c as f64 / 100.0;
            let mut out = Vec::new();
            put_double(&mut out, d);
            assert!(out[0] >= DECIMAL, "{d}");
            let Value::Double(got) = Decoder::new(&out, "test").value().unwrap() else {
                panic!()
            };
            assert_eq!(got.to_bits(), d.to_bits());
        }
    }

    #[test]
    fn mutations_round_trip() {
        let muts = vec![
            Mutation::Put {
                row_ts: Some(-5),
                cells: vec![
                    ("a".into(), 17, Value::Double(1.5)),
                    ("b".into(), i64::MAX, Value::Binary(vec![0, 1])),
                ],
            },
            Mutation::Update {
                actions: vec![
                    Action::Put {
                        column: "x".into(),
                        version: i64::MIN,
                        value: Value::Boolean(true),
                    },
                    Action::DeleteVersion {
                        column: "y".into(),
                        version: 3,
                    },
                    Action::DeleteAll { column: "z".into() },
                ],
            },
            Mutation::Delete,
        ];
        let mut buf = Vec::new();
        for m in &muts {
            put_mutation(&mut buf, m);
        }
        let mut r = Decoder::new(&buf, "test");
        for m in &muts {
            assert_eq!(&r.mutation().unwrap(), m);
        }
        assert!(r.is_empty());
        // every truncation is an error, never a panic
        for cut in 0..buf.len() {
            let mut r = Decoder::new(&buf[..cut], "test");
            let ok = (0..3).all(|_| r.mutation().is_ok());
            assert!(!ok, "cut at {cut}");
        }
    }

    /// Skipping a value moves past exactly the bytes reading it takes.
    #[test]
    fn skip_value_steps_over_what_value_reads() {
        let values = [
            Value::Integer(i64::MIN),
            Value::Double(f64::NAN),
            Value::String("héllo".into()),
            Value::Boolean(true),
            Value::Binary(vec![0; 300]),
        ];
        let mut buf = Vec::new();
        for v in &values {
            put_value(&mut buf, v);
        }
        buf.push(0xAA);
        let (mut read, mut skip) = (Decoder::new(&buf, "t"), Decoder::new(&buf, "t"));
        for _ in &values {
            read.value().unwrap();
            skip.skip_value().unwrap();
            assert_eq!(read.buf.len(), skip.buf.len());
        }
        assert_eq!(skip.u8().unwrap(), 0xAA);
        for cut in 0..buf.len() - 1 {
            let mut r = Decoder::new(&buf[..cut], "t");
            assert!((0..values.len()).any(|_| r.skip_value().is_err()), "cut at {cut}");
        }
    }
}
