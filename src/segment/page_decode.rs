//! Decoding one data page of a flat byte-array leaf without Parquet's
//! column reader: where each row's PLAIN value starts, its definition
//! levels, and a ZSTD page's decompression with a context kept per
//! thread. Point and range reads (`pages.rs`) decode `__pk` and `__cells`
//! pages this way.
//!
//! Invariants: every offset handed out lies in its page with its whole
//! value (lengths are checked, never trusted); a decompressed page has
//! exactly the size its frame states, and no frame is trusted with more
//! than [`MAX_PAGE_BYTES`].

use bytes::Bytes;

/// A row without a value in a page's offsets.
pub(super) const NULL: u32 = u32::MAX;

/// Where each of the `rows` rows' value starts in a PLAIN byte-array data
/// page of a flat leaf with definition level `max_def` (0 or 1), the
/// definition levels RLE-encoded; `Ok(None)` for a page of another shape
/// (decoded by Parquet's column reader instead). Every offset and length
/// is checked to lie in the page.
pub(super) fn plain_offsets(
    page: &parquet::column::page::Page,
    max_def: i16,
    rows: usize,
) -> std::result::Result<Option<Vec<u32>>, String> {
    use parquet::basic::Encoding;
    use parquet::column::page::Page as P;
    let buf = page.buffer();
    if buf.len() >= NULL as usize || max_def > 1 {
        return Ok(None);
    }
    // (where the definition levels are, where the values start)
    let (levels, values) = match page {
        P::DataPage {
            encoding: Encoding::PLAIN,
            num_values,
            def_level_encoding,
            ..
        } => {
            if *num_values as usize != rows {
                return Err(format!(
                    "a page holds {num_values} values where its offset index says {rows} rows"
                ));
            }
            match max_def {
                0 => (0..0, 0),
                _ if *def_level_encoding != Encoding::RLE => return Ok(None),
                _ => {
                    let len = buf.get(..4).ok_or("a page ends inside its level length")?;
                    let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
                    (4..4 + len, 4 + len)
                }
            }
        }
        P::DataPageV2 {
            encoding: Encoding::PLAIN,
            num_rows,
            def_levels_byte_len,
            rep_levels_byte_len: 0,
            ..
        } => {
            if *num_rows as usize != rows {
                return Err(format!(
                    "a page holds {num_rows} rows where its offset index says {rows}"
                ));
            }
            let len = *def_levels_byte_len as usize;
            (0..len, len)
        }
        _ => return Ok(None),
    };
    let present = if max_def == 0 {
        vec![true; rows]
    } else {
        let levels = buf.get(levels).ok_or("a page ends inside its levels")?;
        bit_levels(levels, rows)?
    };
    let mut at = Vec::with_capacity(rows);
    let mut pos = values;
    for p in present {
        if !p {
            at.push(NULL);
            continue;
        }
        let len = buf.get(pos..pos + 4).ok_or("a page ends inside a value's length")?;
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        if pos + 4 + len > buf.len() {
            return Err("a value runs past the end of its page".into());
        }
        at.push(pos as u32);
        pos += 4 + len;
    }
    Ok(Some(at))
}

thread_local! {
    /// This thread's ZSTD decompression context, made on first use.
    static UNZSTD: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { std::cell::RefCell::new(None) };
}

/// A largest decompressed page: far past what Cellar writes (a few KiB),
/// so that a frame header claiming more is refused, not allocated.
const MAX_PAGE_BYTES: u64 = 256 << 20;

/// A data page read as stored from a ZSTD chunk, decompressed: its levels
/// and values of a V1 page, its values of a compressed V2 page.
pub(super) fn unzstd(
    mut page: parquet::column::page::Page,
) -> std::result::Result<parquet::column::page::Page, String> {
    use parquet::column::page::Page as P;
    match &mut page {
        P::DataPage { buf, .. } => *buf = unzstd_after(buf, 0)?,
        P::DataPageV2 {
            buf,
            def_levels_byte_len,
            rep_levels_byte_len,
            is_compressed,
            ..
        } => {
            if *is_compressed {
                *buf = unzstd_after(buf, (*def_levels_byte_len + *rep_levels_byte_len) as usize)?;
                *is_compressed = false;
            }
        }
        P::DictionaryPage { .. } => return Err("a dictionary page where a data page was expected".into()),
    }
    Ok(page)
}

/// `buf`'s first `keep` bytes as they are, then the ZSTD frame after them
/// decompressed.
fn unzstd_after(buf: &Bytes, keep: usize) -> std::result::Result<Bytes, String> {
    let (head, frame) = buf.split_at_checked(keep).ok_or("a page ends inside its levels")?;
    let size = match zstd::zstd_safe::get_frame_content_size(frame) {
        Ok(Some(size)) if size <= MAX_PAGE_BYTES => size as usize,
        Ok(Some(size)) => return Err(format!("a ZSTD page claims {size} bytes decompressed")),
        Ok(None) | Err(_) => return Err("a ZSTD page without its decompressed size".into()),
    };
    let mut out = std::io::Cursor::new(Vec::with_capacity(keep + size));
    out.get_mut().extend_from_slice(head);
    out.set_position(keep as u64);
    let n = UNZSTD.with(|cell| {
        let mut cell = cell.borrow_mut();
        let d = match &mut *cell {
            Some(d) => d,
            None => cell.insert(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?),
        };
        d.decompress_to_buffer(frame, &mut out)
            .map_err(|e| format!("ZSTD page: {e}"))
    })?;
    let out = out.into_inner();
    if n != size || out.len() != keep + size {
        return Err(format!("a ZSTD page gave {n} bytes where its frame said {size}"));
    }
    Ok(Bytes::from(out))
}

/// `rows` levels of bit width 1 from Parquet's RLE / bit-packed hybrid
/// encoding (`true`: defined).
fn bit_levels(mut data: &[u8], rows: usize) -> std::result::Result<Vec<bool>, String> {
    let mut out = Vec::with_capacity(rows);
    while out.len() < rows {
        let mut header = 0u64;
        let mut shift = 0;
        loop {
            let (&b, rest) = data.split_first().ok_or("definition levels end early")?;
            data = rest;
            header |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return Err("a definition level run header is too long".into());
            }
        }
        let count = (header >> 1) as usize;
        if header & 1 == 0 {
            // A run: `count` copies of a value stored in one byte.
            let (&v, rest) = data.split_first().ok_or("definition levels end early")?;
            data = rest;
            if v > 1 {
                return Err(format!("definition level {v} where at most 1 is possible"));
            }
            out.extend(std::iter::repeat_n(v == 1, count.min(rows - out.len())));
        } else {
            // `count` groups of 8 bit-packed values: one byte each.
            let bytes = data.get(..count).ok_or("definition levels end early")?;
            data = &data[count..];
            for &b in bytes {
                for bit in 0..8 {
                    if out.len() < rows {
                        out.push(b >> bit & 1 == 1);
                    }
                }
            }
        }
        if count == 0 {
            return Err("an empty definition level run".into());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_decode_runs_and_bit_packed_groups() {
        // A run of 5 ones, then one group of 8 bit-packed values.
        let data = [5 << 1, 1, (1 << 1) | 1, 0b1010_0110];
        let got = bit_levels(&data, 12).unwrap();
        let want = [1, 1, 1, 1, 1, 0, 1, 1, 0, 0, 1, 0].map(|b| b == 1);
        assert_eq!(got, want);
        assert!(bit_levels(&data[..2], 12).is_err(), "levels cut short");
        assert!(bit_levels(&[2 << 1, 2], 2).is_err(), "a level above 1");
    }
}
