//! Capacity units (CU): what every read and write reports it consumed.
//!
//! 1 CU is 4 KiB of row data, rounded up per operation, at least 1. Row
//! data is, per primary-key and attribute value: the column name's bytes
//! plus the value's (INTEGER and DOUBLE 8, BOOLEAN 1, STRING its UTF-8
//! length, BINARY its length). A read of a missing row costs 1 read CU; a
//! write with a condition or an increment also costs 1 read CU (more when
//! the row it read is larger). In batches each row is counted on its own.
//!
//! Invariant: every successful operation consumes at least 1 CU of the kind
//! it is (read or write); a failed one reports none.

use crate::model::types::{Cell, PrimaryKey};

/// Bytes of row data one capacity unit covers.
pub const CU_BYTES: usize = 4096;

/// Capacity units consumed by one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CapacityUnit {
    /// Read capacity units.
    pub read: u64,
    /// Write capacity units.
    pub write: u64,
}

impl CapacityUnit {
    /// The units `bytes` of row data take: rounded up, at least 1.
    pub fn units(bytes: usize) -> u64 {
        bytes.div_ceil(CU_BYTES).max(1) as u64
    }

    /// A read of `bytes` of row data.
    pub fn read(bytes: usize) -> Self {
        CapacityUnit {
            read: Self::units(bytes),
            write: 0,
        }
    }

    /// A write of `bytes` of row data.
    pub fn write(bytes: usize) -> Self {
        CapacityUnit {
            read: 0,
            write: Self::units(bytes),
        }
    }
}

impl std::ops::Add for CapacityUnit {
    type Output = CapacityUnit;
    fn add(self, o: CapacityUnit) -> CapacityUnit {
        CapacityUnit {
            read: self.read + o.read,
            write: self.write + o.write,
        }
    }
}

impl std::ops::AddAssign for CapacityUnit {
    fn add_assign(&mut self, o: CapacityUnit) {
        *self = *self + o;
    }
}

impl std::iter::Sum for CapacityUnit {
    fn sum<I: Iterator<Item = CapacityUnit>>(iter: I) -> Self {
        iter.fold(CapacityUnit::default(), |a, b| a + b)
    }
}

/// Row data of a primary key.
pub(crate) fn pk_bytes(pk: &PrimaryKey) -> usize {
    pk.columns.iter().map(|(n, v)| n.len() + v.data_len()).sum()
}

/// Row data of returned or scanned cells.
pub(crate) fn cells_bytes(cells: &[(String, Vec<Cell>)]) -> usize {
    cells
        .iter()
        .map(|(n, c)| c.iter().map(|c| n.len() + c.value.data_len()).sum::<usize>())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_round_up_with_a_minimum_of_one() {
        assert_eq!(CapacityUnit::units(0), 1);
        assert_eq!(CapacityUnit::units(1), 1);
        assert_eq!(CapacityUnit::units(4096), 1);
        assert_eq!(CapacityUnit::units(4097), 2);
        assert_eq!(
            pk_bytes(&PrimaryKey::new().with("id", 1i64).with("s", "abc")),
            2 + 8 + 1 + 3
        );
    }
}
