//! The handler's view of memory: sorted [start, end) ranges of the
//! executable file mappings (code the look-ahead may decode), of the rseq
//! critical sections (where no breakpoint may go), and of the immutable
//! module mappings (memory the data-flow model may read), behind one
//! sequence lock.
//!
//! Writers (the control and worker threads, never a traced thread) are
//! serialised by the caller; readers (the handlers) retry while a write is
//! in progress. A reader never blocks a writer and holds no lock, so a
//! handler interrupting anything cannot deadlock on it. The generation
//! counter invalidates the per-thread block caches when the code changes.

use std::cell::UnsafeCell;
use std::sync::atomic::{fence, AtomicU32, AtomicUsize, Ordering};

use crate::decode::CodeSource;

/// Executable ranges the table holds; extra mappings are left out (their
/// code then counts as `outside_mappings`).
pub const MAX_EXEC_RANGES: usize = 1024;
/// rseq critical sections the table holds.
pub const MAX_RSEQ_RANGES: usize = 256;
/// Immutable ranges the table holds (left-out ones are simply not read).
pub const MAX_IMMUTABLE_RANGES: usize = 1024;

/// What the table is made from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryLayout {
    pub exec: Vec<(u64, u64)>,
    pub rseq: Vec<(u64, u64)>,
    pub immutable: Vec<(u64, u64)>,
}

/// One sorted array of ranges; written only inside the seqlock's odd phase.
struct RangeTable<const N: usize> {
    len: AtomicUsize,
    ranges: UnsafeCell<[(u64, u64); N]>,
}

impl<const N: usize> RangeTable<N> {
    const fn new() -> Self {
        RangeTable {
            len: AtomicUsize::new(0),
            ranges: UnsafeCell::new([(0, 0); N]),
        }
    }

    /// Returns how many ranges did not fit.
    ///
    /// # Safety
    /// Only in the writer's odd phase of the owning map's seqlock.
    unsafe fn store(&self, ranges: &[(u64, u64)]) -> usize {
        let mut sorted = ranges.to_vec();
        sorted.sort_unstable();
        let n = sorted.len().min(N);
        // SAFETY: forwarded contract: no other writer; readers retry.
        unsafe { (&mut *self.ranges.get())[..n].copy_from_slice(&sorted[..n]) };
        self.len.store(n, Ordering::Relaxed);
        sorted.len() - n
    }

    /// # Safety
    /// Inside a reader's sequence check (a torn read is discarded).
    unsafe fn get(&self) -> &[(u64, u64)] {
        let n = self.len.load(Ordering::Relaxed).min(N);
        // SAFETY: the array is always initialised.
        unsafe { &(&*self.ranges.get())[..n] }
    }
}

pub struct ExecMap {
    seq: AtomicU32,
    generation: AtomicU32,
    exec: RangeTable<MAX_EXEC_RANGES>,
    rseq: RangeTable<MAX_RSEQ_RANGES>,
    immutable: RangeTable<MAX_IMMUTABLE_RANGES>,
}

// SAFETY: the tables are written only inside the seqlock's odd phase by one
// writer at a time (callers serialise writers), and readers validate every
// read against the sequence number.
unsafe impl Sync for ExecMap {}

impl ExecMap {
    pub fn new() -> ExecMap {
        ExecMap {
            seq: AtomicU32::new(0),
            generation: AtomicU32::new(1),
            exec: RangeTable::new(),
            rseq: RangeTable::new(),
            immutable: RangeTable::new(),
        }
    }

    /// Replaces the contents. Callers serialise writers. Returns how many
    /// ranges did not fit.
    pub fn update(&self, layout: &MemoryLayout) -> usize {
        self.seq.fetch_add(1, Ordering::AcqRel);
        fence(Ordering::Release);
        // SAFETY: single writer in the odd phase; readers retry.
        let left_out = unsafe {
            self.exec.store(&layout.exec)
                + self.rseq.store(&layout.rseq)
                + self.immutable.store(&layout.immutable)
        };
        self.generation.fetch_add(1, Ordering::Relaxed);
        self.seq.fetch_add(1, Ordering::Release);
        left_out
    }

    /// Runs `f` on a consistent snapshot. Async-signal-safe.
    fn read<R>(&self, f: impl Fn(&Self) -> R) -> R {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let r = f(self);
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return r;
            }
        }
    }

    /// The executable range holding `addr`. Async-signal-safe.
    pub fn range_of(&self, addr: u64) -> Option<(u64, u64)> {
        // SAFETY: inside `read`'s sequence check.
        self.read(|m| find(unsafe { m.exec.get() }, addr))
    }

    /// Whether `addr` is inside an rseq critical section. Async-signal-safe.
    pub fn in_rseq(&self, addr: u64) -> bool {
        // SAFETY: inside `read`'s sequence check.
        self.read(|m| {
            unsafe { m.rseq.get() }
                .iter()
                .any(|&(s, e)| s <= addr && addr < e)
        })
    }

    /// Whether the table holds any rseq critical section (most processes
    /// have none). Async-signal-safe.
    pub fn has_rseq(&self) -> bool {
        self.rseq.len.load(Ordering::Relaxed) != 0
    }

    /// Whether [addr, addr + len) lies in one immutable mapping.
    /// Async-signal-safe.
    pub fn is_immutable(&self, addr: u64, len: u64) -> bool {
        // SAFETY: inside `read`'s sequence check.
        self.read(|m| {
            find(unsafe { m.immutable.get() }, addr)
                .is_some_and(|(_, end)| addr.saturating_add(len) <= end)
        })
    }

    pub fn generation(&self) -> u32 {
        self.generation.load(Ordering::Relaxed)
    }
}

impl Default for ExecMap {
    fn default() -> Self {
        Self::new()
    }
}

fn find(sorted: &[(u64, u64)], addr: u64) -> Option<(u64, u64)> {
    let i = sorted.partition_point(|&(start, _)| start <= addr);
    let (start, end) = *sorted.get(i.checked_sub(1)?)?;
    (addr < end).then_some((start, end))
}

/// Code read straight from this process's memory, bounded by the table.
pub struct LiveCode<'a>(pub &'a ExecMap);

impl CodeSource for LiveCode<'_> {
    fn code_at(&self, addr: u64) -> Option<&[u8]> {
        let (_, end) = self.0.range_of(addr)?;
        // SAFETY: [addr, end) lies in an executable file mapping of this
        // process that was mapped when the table was last refreshed. A
        // module unmapped since (dlclose within the refresh interval) is
        // the one window the table cannot close.
        Some(unsafe { std::slice::from_raw_parts(addr as *const u8, (end - addr) as usize) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(exec: &[(u64, u64)], rseq: &[(u64, u64)], immutable: &[(u64, u64)]) -> MemoryLayout {
        MemoryLayout {
            exec: exec.to_vec(),
            rseq: rseq.to_vec(),
            immutable: immutable.to_vec(),
        }
    }

    #[test]
    fn lookups_find_the_holding_range() {
        let map = ExecMap::new();
        let g = map.generation();
        map.update(&layout(
            &[(0x3000, 0x4000), (0x1000, 0x2000)],
            &[(0x1100, 0x1110)],
            &[(0x5000, 0x6000)],
        ));
        assert_ne!(map.generation(), g);
        assert_eq!(map.range_of(0x1000), Some((0x1000, 0x2000)));
        assert_eq!(map.range_of(0x1fff), Some((0x1000, 0x2000)));
        assert_eq!(map.range_of(0x2000), None);
        assert_eq!(map.range_of(0x3500), Some((0x3000, 0x4000)));
        assert_eq!(map.range_of(0x10), None);
        assert!(map.in_rseq(0x1105));
        assert!(!map.in_rseq(0x1110));
        assert!(map.is_immutable(0x5ff8, 8));
        assert!(!map.is_immutable(0x5ffc, 8));
        assert!(!map.is_immutable(0x1000, 8));
    }

    #[test]
    fn concurrent_updates_never_tear() {
        let map = std::sync::Arc::new(ExecMap::new());
        map.update(&layout(&[(0x1000, 0x2000)], &[], &[]));
        let writer = {
            let map = map.clone();
            std::thread::spawn(move || {
                for i in 0..2000u64 {
                    let base = 0x1000 + (i % 2) * 0x10000;
                    map.update(&layout(&[(base, base + 0x1000)], &[], &[]));
                }
            })
        };
        for _ in 0..20000 {
            let hit = map.range_of(0x1800).or(map.range_of(0x11800));
            if let Some((s, e)) = hit {
                assert_eq!(e - s, 0x1000);
            }
        }
        writer.join().unwrap();
    }
}
