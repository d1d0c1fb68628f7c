//! A bound on the segment pages mapped into this process.
//!
//! Local segment files are memory-mapped (`Segment::local_file`): reads
//! borrow their pages without a copy. Each page a read touches then counts
//! in the process's resident memory until the kernel needs it back, so a
//! scan of a 1 GB table left 1 GB resident (`RssFile`), whatever else the
//! database bounds. [`Residency`] counts the bytes reads take from the
//! maps; once they pass its limit it drops every map's resident pages
//! (`MADV_DONTNEED`) and counts again. The pages stay in the kernel's page
//! cache, so the next touch of one is a minor fault, not a disk read.
//!
//! Invariants: dropping pages never changes what a read sees (segment
//! files never change once written, and the maps are shared read-only
//! file mappings, which fault the same bytes back in); the bytes touched
//! since the last release stay below the limit plus one read; maps are
//! held weakly (a segment that goes away is not kept mapped).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

/// What one page fault on a file mapping maps (Linux's default
/// `fault_around_bytes`), aligned to its size.
const FAULT_AROUND: u64 = 64 << 10;

/// See the module docs.
pub(crate) struct Residency {
    limit: u64,
    touched: AtomicU64,
    maps: Mutex<Vec<Weak<memmap2::Mmap>>>,
    releases: AtomicU64,
}

impl Residency {
    /// Pages of the maps are dropped after every `limit` bytes reads take
    /// from them (`u64::MAX`: never).
    pub fn new(limit: u64) -> Self {
        Residency {
            limit: limit.max(1),
            touched: AtomicU64::new(0),
            maps: Mutex::new(Vec::new()),
            releases: AtomicU64::new(0),
        }
    }

    /// How many times the maps' pages were dropped.
    pub fn releases(&self) -> u64 {
        self.releases.load(Ordering::Relaxed)
    }

    /// A new map whose pages this bounds.
    pub(super) fn register(&self, map: &Arc<memmap2::Mmap>) {
        if self.limit == u64::MAX {
            return;
        }
        let mut maps = self.maps.lock();
        // Forget maps that are gone once the list has doubled since.
        if maps.len() >= 64 && maps.len().is_power_of_two() {
            maps.retain(|m| m.strong_count() > 0);
        }
        maps.push(Arc::downgrade(map));
    }

    /// A read took bytes `range` of a map. It counts as the aligned
    /// [`FAULT_AROUND`] windows it meets: a fault on a file mapping maps
    /// that much around the faulting page, so a point read of a 2 KiB page
    /// leaves 64 KiB resident. The read that crosses the limit drops the
    /// maps' pages (others go on meanwhile: their pages fault back in).
    pub(super) fn touch(&self, range: std::ops::Range<u64>) {
        if self.limit == u64::MAX || range.is_empty() {
            return;
        }
        let first = range.start / FAULT_AROUND;
        let end = range.end.div_ceil(FAULT_AROUND);
        let bytes = (end - first) * FAULT_AROUND;
        let before = self.touched.fetch_add(bytes, Ordering::Relaxed);
        if before < self.limit && before.saturating_add(bytes) >= self.limit {
            self.release();
        }
    }

    /// Maps `range` of `map` in one call, where faulting it in page by
    /// page would cost a fault per window: for the column chunks scans
    /// read whole.
    pub(super) fn populate(&self, map: &memmap2::Mmap, range: std::ops::Range<u64>) {
        if range.end - range.start >= 4 * FAULT_AROUND {
            populate(map, range);
        }
    }

    fn release(&self) {
        let maps: Vec<Arc<memmap2::Mmap>> = {
            let mut maps = self.maps.lock();
            maps.retain(|m| m.strong_count() > 0);
            maps.iter().filter_map(Weak::upgrade).collect()
        };
        self.touched.store(0, Ordering::Relaxed);
        for map in maps {
            drop_pages(&map);
        }
        self.releases.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(unix)]
fn drop_pages(map: &memmap2::Mmap) {
    // SAFETY: the map is a shared, read-only mapping of a segment file,
    // and segment files never change once written (see `Segment::local_file`):
    // after MADV_DONTNEED the next access faults in the same bytes from
    // the page cache, so a slice borrowed from the map meanwhile reads
    // exactly what it read before. Failure only leaves the pages resident.
    let _ = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
}

#[cfg(not(unix))]
fn drop_pages(_map: &memmap2::Mmap) {}

#[cfg(target_os = "linux")]
fn populate(map: &memmap2::Mmap, range: std::ops::Range<u64>) {
    // Failure (a kernel before 5.14) only leaves the pages to fault in.
    let _ = map.advise_range(
        memmap2::Advice::PopulateRead,
        range.start as usize,
        (range.end - range.start) as usize,
    );
}

#[cfg(not(target_os = "linux"))]
fn populate(_map: &memmap2::Mmap, _range: std::ops::Range<u64>) {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of `map` resident in this process (its `Rss` in
    /// /proc/self/smaps; the page cache keeps the pages either way).
    fn resident(map: &memmap2::Mmap) -> usize {
        let start = format!("{:x}-", map.as_ptr() as usize);
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
        lines.next().expect("the map is listed");
        let rss = lines.find_map(|l| l.strip_prefix("Rss:")).expect("an Rss line");
        rss.trim().trim_end_matches("kB").trim().parse::<usize>().unwrap() * 1024
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn pages_are_dropped_past_the_limit_and_read_the_same_after() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..(4u32 << 20)).map(|i| (i * 7 + i / 4096) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: the test's file is not changed while mapped.
        let map = Arc::new(unsafe { memmap2::Mmap::map(&file) }.unwrap());
        let r = Residency::new(3 << 20);
        r.register(&map);
        // Touch every page: 4 MiB resident, 2 MiB counted so far.
        assert_eq!(&map[..], &data[..]);
        r.touch(0..2 << 20);
        assert_eq!(r.releases(), 0);
        assert!(resident(&map) >= 4 << 20);
        // Small reads count as the fault-around windows they meet: 16
        // reads of 100 bytes, one a window, count 1 MiB.
        for i in 0..16u64 {
            r.touch(i * 3 * FAULT_AROUND..i * 3 * FAULT_AROUND + 100);
        }
        assert_eq!(r.releases(), 1);
        // Past the limit the pages went, and read back the same.
        assert!(resident(&map) < 1 << 20, "{}", resident(&map));
        assert_eq!(&map[..], &data[..]);
        // Counting starts again.
        r.touch(0..2 << 20);
        assert_eq!(r.releases(), 1);
        // An unbounded one never drops anything.
        let never = Residency::new(u64::MAX);
        never.register(&map);
        never.touch(0..u64::MAX / 2);
        assert_eq!(never.releases(), 0);
    }
}
