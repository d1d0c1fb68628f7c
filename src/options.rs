//! Database options: plain data with documented defaults.
//!
//! Invariant: every option has a default that is safe for a production
//! database (`Durability::Sync`, checksums verified).

use std::sync::Arc;

use object_store::ObjectStore;

use crate::clock::{Clock, SystemClock};
use crate::wal::{Durability, OsWalOpener, WalOpener};

/// How a database is opened. Every field documents its default.
///
/// Memory is set in one figure with [`DbOptions::memory_budget`] (512 MiB
/// by default), which sizes the memtables, the mapped segment pages and
/// the archive cache; the fields it sets can be changed afterwards one by
/// one.
#[derive(Debug, Clone)]
pub struct DbOptions {
    /// When acknowledged writes reach stable storage. Defaults to
    /// [`Durability::Sync`].
    pub durability: Durability,
    /// A table's active memtable is frozen and flushed to a segment past
    /// this size. Defaults to 64 MiB, an eighth of the memory budget (a key
    /// written once by a PutRow of 5 short columns takes ~200 bytes of it:
    /// ~340k such rows a flush).
    pub memtable_bytes: usize,
    /// Writers stall while all unflushed memtables together exceed this.
    /// Defaults to 256 MiB (half the memory budget).
    pub write_buffer_bytes: usize,
    /// A WAL file is sealed past this size. Defaults to 64 MiB.
    pub wal_file_bytes: u64,
    /// Rows per segment row group. Defaults to 16384.
    pub row_group_rows: usize,
    /// Rows handed to the Parquet writer at a time; where values are
    /// sometimes null, a page may run up to this many rows past
    /// `page_bytes`. Defaults to 256.
    pub page_rows: usize,
    /// Segment data pages end once they hold this many encoded bytes: 256
    /// plain 8-byte values, a few hundred prefix-compressed keys, thousands
    /// of dictionary codes, runs or booleans. A point get decompresses about
    /// this much per column it reads and a scan pays per page, so columns
    /// that encode small get long pages. Defaults to 2 KiB.
    pub page_bytes: usize,
    /// Integer and double values of a row group are dictionary-encoded while
    /// their distinct values fit in this many bytes (then integers as
    /// deltas, doubles plain); 0 turns it off. Point reads of segments
    /// with `__cells` never read these dictionaries; point reads of
    /// segments without read them whole. Defaults to 64 KiB (8192
    /// distinct values; 8 KiB before 2026-11-26: amounts in cents
    /// took twice the bytes, BENCHMARKS.md "Sizes").
    pub numeric_dictionary_bytes: usize,
    /// Segments written from now on carry `__cells`, each key's whole state
    /// in one row-oriented value, so that a point read or a short range read
    /// decodes two small pages instead of a page of every column (see
    /// `docs/format.md`). Off saves its space (for tables only ever
    /// scanned); reads then decode the columns. Defaults to true.
    pub row_cells: bool,
    /// Segments written from now on store each cell's version as its
    /// distance from the key's newest version (`__max_ts`), which cells
    /// written together share: 13% less disk in `benches/compare`
    /// (`docs/format.md`, "Segments"). Cellar reads either form. Off writes
    /// versions as they are, as earlier releases did, for other Parquet
    /// readers of the segment files that want them. Defaults to true.
    pub relative_versions: bool,
    /// Segments written from now on with `__cells` also keep a row per
    /// older version of a key in the columns (rank 1, 2, ...), as earlier
    /// releases did. Off (the default), older versions live only in
    /// `__cells`: the columns hold one row per key, its newest version of
    /// each column, so a SQL scan of the latest rows reads no `__rank` and
    /// filters nothing out, and the file is smaller (`docs/format.md`,
    /// "Segments"). Cellar reads either form; without `row_cells` the
    /// version rows are always written.
    pub older_version_rows: bool,
    /// How segments compress their value and system columns (every column
    /// but the key, `__pk` and `__cells`, which stay LZ4). Those columns are
    /// already dictionary-, run- or delta-encoded, and SQL scans decode
    /// them whole: without a codec on top, quiet scans ran 1.2-1.4x and
    /// scans over fresh writes 1.3-1.5x faster in `benches/compare`, for
    /// 11% more disk; on repetitive values (`benches/sql`) scans were as
    /// fast either way and LZ4 saved a third of the disk
    /// (BENCHMARKS.md, "Value columns uncompressed").
    /// Point reads do not read them. Defaults to
    /// [`ValueCompression::None`].
    pub value_compression: ValueCompression,
    /// Compaction outputs compress their value and system columns (every
    /// column but the key, `__pk` and `__cells`) with ZSTD at this level
    /// (1-22), in pages of `compacted_page_bytes`, as RocksDB's
    /// bottommost compression does. Point reads, which decode only the key
    /// and `__cells`, keep their speed; SQL scans of compacted data pay
    /// the decompression (1.2-1.9x slower in `benches/compare`) for 10-16%
    /// less disk overall, several times less in columns of repeated values
    /// (BENCHMARKS.md, "ZSTD for compaction outputs"). For cold tables
    /// scanned rarely. Defaults to `None`: as `value_compression` says.
    pub compaction_zstd_level: Option<i32>,
    /// Compaction outputs compress `__pk` and `__cells`, the encoded key
    /// and the row copy that point and short range reads decode, with ZSTD
    /// at this level (1-22) instead of LZ4: over half of a table's bytes,
    /// stored 19-31% smaller (the 10M-row compare table: 794 -> 696 MB on
    /// disk), but a read that misses the page cache decompresses ZSTD
    /// pages (point gets 1.4-1.7x slower there). For cold tables read
    /// rarely, such as months before archiving. Flushes keep LZ4.
    /// Defaults to `None`: LZ4.
    pub compaction_point_zstd_level: Option<i32>,
    /// Page size of the ZSTD-compressed columns of compaction outputs (see
    /// `compaction_zstd_level`). Defaults to 64 KiB.
    pub compacted_page_bytes: usize,
    /// Output segments of a compaction are cut past this many bytes (they
    /// stream to the store as they are written, so this costs no memory).
    /// Defaults to 128 MiB.
    pub compaction_segment_bytes: usize,
    /// Compact in the background without being asked. Defaults to true.
    pub auto_compaction: bool,
    /// A table is compacted in the background once this many sorted runs
    /// of similar size (within 2x) have piled up at its newest end (each
    /// flush adds one run): they are merged into one, so each byte is
    /// rewritten about log_n(table size / flush size) times. Defaults to 4.
    pub compaction_trigger_runs: usize,
    /// Writers stall while a table has more runs than this (background
    /// compaction has fallen behind); they wait at most 30 s per write
    /// group, so a slow compaction slows writes but never stops them, and
    /// not at all while the table's last compaction failed (see
    /// `TableStats::last_compaction_error`). Only with `auto_compaction`.
    /// Defaults to 24.
    pub compaction_stall_runs: usize,
    /// Background compactions running at once, over all tables. Defaults
    /// to 1.
    pub max_background_compactions: usize,
    /// How often tables with a TTL are checked for segments whose data has
    /// all expired (then compacted away). Defaults to 60 s.
    pub compaction_check_interval: std::time::Duration,
    /// While a table that SQL scans read whole (in the last 10 minutes) is
    /// written, the memtable overlays such scans use (each memtable key
    /// placed among a segment's rows, see `docs/decisions.md`, "Memtable
    /// overlays") are brought up to the newest write this often in the
    /// background, so a query extends them by about this long's writes
    /// (after a build of d ms the next waits 3d, so that keeping up takes
    /// at most about a quarter of a core). `None`: scans build them when
    /// they need them. Defaults to 100 ms.
    pub background_overlays: Option<std::time::Duration>,
    /// The time source. Defaults to the system clock.
    pub clock: Arc<dyn Clock>,
    /// Where catalog, manifests and segments live. Defaults to `None`: a
    /// local file system rooted at the data directory (then new files are
    /// fsynced and segments are memory-mapped for reads). The WAL and the
    /// lock always stay in the data directory.
    pub object_store: Option<Arc<dyn ObjectStore>>,
    /// Creates WAL files. Defaults to [`OsWalOpener`] (the file system);
    /// tests inject failing files here.
    pub wal_opener: Arc<dyn WalOpener>,
    /// Check segment bytes against their checksums before decoding them
    /// (see `docs/reliability.md`; a damaged block is then an error, not
    /// other data). Defaults to true; off, damage may be served as data.
    pub verify_checksums: bool,
    /// Decode segments written before segment checksums (read unchecked:
    /// damage in them reaches Parquet's decoders). Off by default: reading
    /// such a segment fails and names it. A full compaction with this on
    /// rewrites a table's old segments with checksums.
    pub legacy_segments: bool,
    /// Bytes scans may read from memory-mapped segment files before this
    /// process lets go of the maps' pages (`MADV_DONTNEED`): a page a read
    /// touches counts in the process's resident memory until then, so
    /// without a bound a scan of a large table leaves the whole table
    /// resident. Point and range reads do not use the maps (see
    /// `page_cache_bytes`). The pages stay in the OS page cache: the next
    /// read of one costs a minor fault, not a disk read. `u64::MAX`: no
    /// bound. Defaults to 64 MiB (an eighth of the memory budget).
    pub mapped_segment_bytes: u64,
    /// Bytes of decoded `__pk` and `__cells` pages that point and range
    /// reads (GetRow, GetRange, BatchGetRow, conditions) keep for the
    /// reads after them, least recently used first out; they read pages
    /// with `pread`, not through the maps, so this bounds what they hold.
    /// 0: pages are decoded for each read. Defaults to 64 MiB (an eighth
    /// of the memory budget).
    pub page_cache_bytes: u64,
    /// Bytes of column chunks read from archived tables kept in memory,
    /// so that a repeated scan does not fetch them again (least recently
    /// used first out; 0: none). Defaults to 64 MiB (an eighth of the
    /// memory budget).
    pub archive_cache_bytes: usize,
}

/// A codec for segments' value and system columns
/// (`DbOptions::value_compression`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ValueCompression {
    /// Pages stored as encoded (dictionary, run-length, delta).
    #[default]
    None,
    /// LZ4 (raw blocks) over the encoded pages.
    Lz4,
}

impl Default for DbOptions {
    fn default() -> Self {
        let options = DbOptions {
            durability: Durability::Sync,
            // The four memory sizes are set by `memory_budget` below.
            memtable_bytes: 0,
            write_buffer_bytes: 0,
            wal_file_bytes: 64 << 20,
            row_group_rows: 16 * 1024,
            page_rows: 256,
            page_bytes: 2 << 10,
            numeric_dictionary_bytes: 64 << 10,
            row_cells: true,
            relative_versions: true,
            older_version_rows: false,
            value_compression: ValueCompression::None,
            compaction_zstd_level: None,
            compaction_point_zstd_level: None,
            compacted_page_bytes: 64 << 10,
            compaction_segment_bytes: 128 << 20,
            auto_compaction: true,
            compaction_trigger_runs: 4,
            compaction_stall_runs: 24,
            max_background_compactions: 1,
            compaction_check_interval: std::time::Duration::from_secs(60),
            background_overlays: Some(std::time::Duration::from_millis(100)),
            verify_checksums: true,
            legacy_segments: false,
            archive_cache_bytes: 0,
            mapped_segment_bytes: 0,
            page_cache_bytes: 0,
            clock: Arc::new(SystemClock),
            object_store: None,
            wal_opener: Arc::new(OsWalOpener),
        };
        options.memory_budget(DEFAULT_MEMORY_BUDGET)
    }
}

/// The memory budget of [`DbOptions::default`]: 512 MiB.
pub const DEFAULT_MEMORY_BUDGET: usize = 512 << 20;

/// The smallest memory budget [`parse_memory_size`] accepts: 16 MiB.
pub const MIN_MEMORY_BUDGET: usize = 16 << 20;

/// A memory budget as people write one, DuckDB's way: a number of bytes
/// with an optional unit, `B`, `KB`/`MB`/`GB`/`TB` (powers of 1000) or
/// `KiB`/`MiB`/`GiB`/`TiB` (powers of 1024), any case, a space allowed:
/// `512MiB`, `2 GB`, `1073741824`. At least [`MIN_MEMORY_BUDGET`].
pub fn parse_memory_size(s: &str) -> crate::error::Result<usize> {
    let bad = |why: &str| {
        crate::error::Error::param(format!(
            "memory size '{s}' {why}: give a number with a unit, as 512MiB, 2GiB or 1GB (KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB of 1024, no unit is bytes), at least {}MiB",
            MIN_MEMORY_BUDGET >> 20
        ))
    };
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| bad("does not start with a number"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad("has an unknown unit")),
    };
    let bytes = n * scale;
    if !bytes.is_finite() || bytes >= usize::MAX as f64 {
        return Err(bad("is too large"));
    }
    let bytes = bytes as usize;
    if bytes < MIN_MEMORY_BUDGET {
        return Err(bad("is too small"));
    }
    Ok(bytes)
}

impl DbOptions {
    /// Sizes the buffers and caches the database keeps from one budget of
    /// `bytes`:
    /// - a table's memtable is flushed past an eighth (`memtable_bytes`),
    /// - writers stall while unflushed memtables pass half
    ///   (`write_buffer_bytes`),
    /// - the pages scans take from mapped segments are let go past an
    ///   eighth (`mapped_segment_bytes`),
    /// - point and range reads cache decoded pages up to an eighth
    ///   (`page_cache_bytes`),
    /// - archived chunks are cached up to an eighth (`archive_cache_bytes`).
    ///
    /// Not bounded by it yet: the work under way (a flush or compaction
    /// output holds the row group it builds and up to 24 MiB of upload
    /// parts, a compaction up to 32k decoded rows across its inputs, a
    /// query its own state), segment footers and page indexes, memtable
    /// overlays and the allocator's slack (BENCHMARKS.md, "Memory" and
    /// "Where a load's memory goes").
    pub fn memory_budget(mut self, bytes: usize) -> Self {
        self.memtable_bytes = (bytes / 8).max(1);
        self.write_buffer_bytes = (bytes / 2).max(1);
        self.mapped_segment_bytes = (bytes / 8).max(1) as u64;
        self.page_cache_bytes = (bytes / 8) as u64;
        self.archive_cache_bytes = bytes / 8;
        self
    }
}

impl DbOptions {
    /// Sets when writes are fsynced.
    pub fn durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }

    /// Sets the size at which a table's memtable is frozen and flushed.
    pub fn memtable_bytes(mut self, n: usize) -> Self {
        self.memtable_bytes = n;
        self
    }

    /// Sets the clock (a [`crate::ManualClock`] in tests).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the object store that holds the catalog, manifests and segments.
    pub fn object_store(mut self, store: Arc<dyn ObjectStore>) -> Self {
        self.object_store = Some(store);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes_parse_with_decimal_and_binary_units() {
        assert_eq!(parse_memory_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_memory_size("2 gib").unwrap(), 2 << 30);
        assert_eq!(parse_memory_size("1GB").unwrap(), 1_000_000_000);
        assert_eq!(parse_memory_size("0.5GiB").unwrap(), 512 << 20);
        assert_eq!(parse_memory_size("16777216").unwrap(), 16 << 20);
        for bad in ["", "MiB", "12 parsecs", "1MiB", "-5GiB", "1e400GB"] {
            let e = parse_memory_size(bad).unwrap_err();
            assert!(e.message().contains(&format!("memory size '{bad}'")), "{e}");
        }
    }

    #[test]
    fn the_budget_sizes_every_memory_option() {
        let o = DbOptions::default();
        assert_eq!(o.memtable_bytes, 64 << 20);
        assert_eq!(o.write_buffer_bytes, 256 << 20);
        assert_eq!(o.mapped_segment_bytes, 64 << 20);
        assert_eq!(o.page_cache_bytes, 64 << 20);
        assert_eq!(o.archive_cache_bytes, 64 << 20);
        let o = DbOptions::default().memory_budget(2 << 30);
        assert_eq!(o.memtable_bytes, 256 << 20);
        assert_eq!(o.mapped_segment_bytes, 256 << 20);
        assert_eq!(o.page_cache_bytes, 256 << 20);
    }
}
