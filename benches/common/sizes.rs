//! Segment sizes per column, read from the Parquet footers: shared by
//! the bench binaries and `benches/compare` (included by path).

/// Compressed bytes per top-level column over every segment file under
/// `dir` (from the Parquet footers), largest first, with the total.
#[allow(dead_code)] // not every bench binary reports sizes
pub fn column_bytes(dir: &std::path::Path) -> (Vec<(String, u64)>, u64) {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let mut by: std::collections::BTreeMap<String, u64> = Default::default();
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                files.push(p);
            }
        }
    }
    let mut total = 0;
    for f in files {
        total += std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
        let Ok(r) = SerializedFileReader::new(std::fs::File::open(&f).unwrap()) else {
            continue;
        };
        for rg in r.metadata().row_groups() {
            for c in rg.columns() {
                let top = c.column_path().parts()[0].clone();
                *by.entry(top).or_default() += c.compressed_size() as u64;
            }
        }
    }
    let mut v: Vec<_> = by.into_iter().collect();
    v.sort_by_key(|c| std::cmp::Reverse(c.1));
    (v, total)
}

/// `cols` as one line: "NAME MB, NAME MB, ..." with `decimals` places.
#[allow(dead_code)] // not every bench binary reports sizes
pub fn mb_per_column(cols: &[(String, u64)], decimals: usize) -> String {
    let parts: Vec<String> = cols
        .iter()
        .map(|(c, b)| format!("{c} {:.*}", decimals, *b as f64 / 1e6))
        .collect();
    parts.join(", ")
}
