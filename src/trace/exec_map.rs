//! The handler's view of executable memory: sorted [start, end) ranges of
//! executable file mappings and the rseq critical sections, behind a
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

pub struct ExecMap {
    seq: AtomicU32,
    generation: AtomicU32,
    n_exec: AtomicUsize,
    n_rseq: AtomicUsize,
    exec: UnsafeCell<[(u64, u64); MAX_EXEC_RANGES]>,
    rseq: UnsafeCell<[(u64, u64); MAX_RSEQ_RANGES]>,
}

// SAFETY: the arrays are written only inside the seqlock's odd phase by one
// writer at a time (callers serialise writers), and readers validate every
// read against the sequence number.
unsafe impl Sync for ExecMap {}

impl ExecMap {
    pub fn new() -> ExecMap {
        ExecMap {
            seq: AtomicU32::new(0),
            generation: AtomicU32::new(1),
            n_exec: AtomicUsize::new(0),
            n_rseq: AtomicUsize::new(0),
            exec: UnsafeCell::new([(0, 0); MAX_EXEC_RANGES]),
            rseq: UnsafeCell::new([(0, 0); MAX_RSEQ_RANGES]),
        }
    }

    /// Replaces the contents. Callers serialise writers. Returns how many
    /// ranges did not fit.
    pub fn update(&self, exec: &[(u64, u64)], rseq: &[(u64, u64)]) -> usize {
        let mut exec_sorted: Vec<(u64, u64)> = exec.to_vec();
        exec_sorted.sort_unstable();
        let mut rseq_sorted: Vec<(u64, u64)> = rseq.to_vec();
        rseq_sorted.sort_unstable();
        let ne = exec_sorted.len().min(MAX_EXEC_RANGES);
        let nr = rseq_sorted.len().min(MAX_RSEQ_RANGES);
        self.seq.fetch_add(1, Ordering::AcqRel);
        fence(Ordering::Release);
        // SAFETY: single writer in the odd phase; readers retry.
        unsafe {
            (&mut *self.exec.get())[..ne].copy_from_slice(&exec_sorted[..ne]);
            (&mut *self.rseq.get())[..nr].copy_from_slice(&rseq_sorted[..nr]);
        }
        self.n_exec.store(ne, Ordering::Relaxed);
        self.n_rseq.store(nr, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::Relaxed);
        self.seq.fetch_add(1, Ordering::Release);
        exec_sorted.len() - ne + rseq_sorted.len() - nr
    }

    /// Runs `f` on a consistent snapshot. Async-signal-safe.
    fn read<R>(&self, f: impl Fn(&[(u64, u64)], &[(u64, u64)]) -> R) -> R {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let ne = self.n_exec.load(Ordering::Relaxed).min(MAX_EXEC_RANGES);
            let nr = self.n_rseq.load(Ordering::Relaxed).min(MAX_RSEQ_RANGES);
            // SAFETY: the arrays are always initialised; a torn read is
            // detected by the sequence check below and discarded.
            let r = unsafe { f(&(&*self.exec.get())[..ne], &(&*self.rseq.get())[..nr]) };
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return r;
            }
        }
    }

    /// The executable range holding `addr`. Async-signal-safe.
    pub fn range_of(&self, addr: u64) -> Option<(u64, u64)> {
        self.read(|exec, _| find(exec, addr))
    }

    /// Whether `addr` is inside an rseq critical section. Async-signal-safe.
    pub fn in_rseq(&self, addr: u64) -> bool {
        self.read(|_, rseq| rseq.iter().any(|&(s, e)| s <= addr && addr < e))
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

    #[test]
    fn lookups_find_the_holding_range() {
        let map = ExecMap::new();
        let g = map.generation();
        map.update(&[(0x3000, 0x4000), (0x1000, 0x2000)], &[(0x1100, 0x1110)]);
        assert_ne!(map.generation(), g);
        assert_eq!(map.range_of(0x1000), Some((0x1000, 0x2000)));
        assert_eq!(map.range_of(0x1fff), Some((0x1000, 0x2000)));
        assert_eq!(map.range_of(0x2000), None);
        assert_eq!(map.range_of(0x3500), Some((0x3000, 0x4000)));
        assert_eq!(map.range_of(0x10), None);
        assert!(map.in_rseq(0x1105));
        assert!(!map.in_rseq(0x1110));
    }

    #[test]
    fn concurrent_updates_never_tear() {
        let map = std::sync::Arc::new(ExecMap::new());
        map.update(&[(0x1000, 0x2000)], &[]);
        let writer = {
            let map = map.clone();
            std::thread::spawn(move || {
                for i in 0..2000u64 {
                    let base = 0x1000 + (i % 2) * 0x10000;
                    map.update(&[(base, base + 0x1000)], &[]);
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
