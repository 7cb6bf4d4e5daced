//! The handler's view of memory: sorted [start, end) ranges of the
//! executable file mappings (code the look-ahead may decode), of the rseq
//! critical sections (where no breakpoint may go), and of the immutable
//! module mappings (memory a proven segment may read: see
//! `emulate::Segment::proven`).
//!
//! Two copies of the tables and an index naming the current one (a double
//! buffer). A writer (the control thread at start, the worker during a
//! session; callers never run two at once, and the `writer` flag checks it)
//! sorts the new contents first, with whatever allocation that takes, then
//! waits until no reader is in the copy that is not current, fills it with
//! plain copies, and publishes it by storing the index. A reader (a
//! handler) announces itself in the current copy's reader count, checks
//! the index did not move meanwhile, reads, and leaves. It never waits for
//! a writer: when the index keeps moving under it ([`READ_TRIES`] times in
//! a row) it gives up, counted in `host::HOST.exec_map_lookups_given_up`, and the lookup answers "not
//! known" (the trace ends early, never wrong). A reader holds its count
//! for a few loads of a fixed array and cannot fault or be interrupted
//! there (the handler blocks every asynchronous signal), so the writer's
//! wait ends as soon as a preempted reader runs again.
//!
//! The generation counter invalidates the decoded code (the per-thread
//! block caches, the emulator's shared table) when the code changes: when
//! the layout's `code` identity differs from the last one, not at every
//! refresh (a heap growing changes /proc/self/maps, not the code). It moves
//! after the index, so a reader that sees a new generation also sees the
//! table it belongs to.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::sync::Doorbell;

/// Executable ranges the table holds; extra mappings are left out (their
/// code then counts as `outside_mappings`).
pub const MAX_EXEC_RANGES: usize = 1024;
/// rseq critical sections the table holds.
pub const MAX_RSEQ_RANGES: usize = 256;
/// Immutable ranges the table holds (left-out ones are simply not read).
pub const MAX_IMMUTABLE_RANGES: usize = 1024;
/// Private writable ranges the table holds (left-out ones read as
/// shared).
pub const MAX_PRIVATE_RANGES: usize = 1024;
/// Mappings (adjacent ones merged) the table holds; an address in one
/// left out reads as mapped since the table was made.
pub const MAX_MAPPED_RANGES: usize = 1024;
/// Times a reader tries to catch a copy that stays current.
pub const READ_TRIES: usize = 4;

/// What the table is made from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryLayout {
    pub exec: Vec<(u64, u64)>,
    pub rseq: Vec<(u64, u64)>,
    pub immutable: Vec<(u64, u64)>,
    /// Private writable mappings (heap, stacks, anonymous memory, a
    /// module's data): in a quiet process only the sampled thread writes
    /// them (see `quiet`). Shared mappings and the kernel's special ones
    /// are not here.
    pub private: Vec<(u64, u64)>,
    /// Some code is generated at run time: an executable mapping that is
    /// anonymous or writable (a JIT's). Code can then change under the
    /// decoded copy, so no segment is proven by quietness alone.
    pub generated_code: bool,
    /// Every mapping (adjacent ones merged): a read elsewhere that
    /// succeeds is of memory mapped since the table was made.
    pub mapped: Vec<(u64, u64)>,
    /// The code's identity: equal for two layouts whose executable
    /// mappings hold the same code (the same files at the same offsets and
    /// addresses).
    pub code: u64,
}

/// One sorted array of ranges of one copy; written only while no reader is
/// in that copy.
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

    /// Copies `sorted` in (at most N). No allocation.
    ///
    /// # Safety
    /// Only by the writer, while no reader is in this copy.
    unsafe fn store(&self, sorted: &[(u64, u64)]) {
        let n = sorted.len().min(N);
        // SAFETY: forwarded contract: nobody else touches this copy.
        unsafe { (&mut *self.ranges.get())[..n].copy_from_slice(&sorted[..n]) };
        self.len.store(n, Ordering::Relaxed);
    }

    /// # Safety
    /// Only by a reader counted in this copy while it is current.
    unsafe fn get(&self) -> &[(u64, u64)] {
        let n = self.len.load(Ordering::Relaxed).min(N);
        // SAFETY: the array is always initialised; no writer touches a
        // copy a reader is counted in.
        unsafe { &(&*self.ranges.get())[..n] }
    }
}

struct Tables {
    exec: RangeTable<MAX_EXEC_RANGES>,
    rseq: RangeTable<MAX_RSEQ_RANGES>,
    immutable: RangeTable<MAX_IMMUTABLE_RANGES>,
    private: RangeTable<MAX_PRIVATE_RANGES>,
    mapped: RangeTable<MAX_MAPPED_RANGES>,
}

impl Tables {
    const fn new() -> Self {
        Tables {
            exec: RangeTable::new(),
            rseq: RangeTable::new(),
            immutable: RangeTable::new(),
            private: RangeTable::new(),
            mapped: RangeTable::new(),
        }
    }
}

pub struct ExecMap {
    copies: [Tables; 2],
    readers: [AtomicU32; 2],
    current: AtomicUsize,
    generation: AtomicU32,
    /// `MemoryLayout::code` of the last update; `u64::MAX`-free: see
    /// `has_code`.
    code: AtomicU64,
    has_code: AtomicBool,
    /// Moves at every update (the generation only when the code changes).
    version: AtomicU32,
    writer: AtomicBool,
    /// `MemoryLayout::generated_code` of the last update.
    generated_code: AtomicBool,
    /// The worker's: rung with `REFRESH` when a trace ended outside the
    /// known mappings (code may have been loaded since the last refresh).
    doorbell: Doorbell,
}

// SAFETY: every field is valid as zero bytes: atomics, arrays of integers
// in UnsafeCell, the doorbell's word. Zero is `ExecMap::new()`'s value but
// for `generation`, which `ExecMap::mapped` sets.
unsafe impl bytemuck::Zeroable for ExecMap {}

// SAFETY: a copy is written only by the one writer while its reader count
// is zero and it is not current, and read only by readers counted in it
// while it is current (see the module doc).
unsafe impl Sync for ExecMap {}

/// `(inside, start, end)`: the range of the sorted `ranges` holding `addr`,
/// or the gap between two of them.
fn stretch(ranges: &[(u64, u64)], addr: u64) -> (bool, u64, u64) {
    census!(census_search(ranges, addr));
    let i = ranges.partition_point(|&(start, _)| start <= addr);
    let before = i.checked_sub(1).map(|j| ranges[j]);
    match before {
        Some((start, end)) if addr < end => (true, start, end),
        _ => {
            let lo = before.map_or(0, |(_, end)| end);
            let hi = ranges.get(i).map_or(u64::MAX, |&(start, _)| start);
            (false, lo, hi)
        }
    }
}

fn sorted(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut v = ranges.to_vec();
    v.sort_unstable();
    v
}

impl ExecMap {
    /// An empty map in a mapping of its own, made there: it is 139 KiB
    /// (two copies of fixed tables), too much for the stack of the thread
    /// that starts a session (the main thread under autostart, whose stack
    /// limit may be small: `ulimit -s 128` crashed a program at start).
    /// Its pages are fresh zero pages, touched only as tables fill, also
    /// when the session starts after the application freed a large block
    /// (`sys::zeroed_static_slice`). Lives as long as the process.
    pub fn mapped() -> &'static ExecMap {
        // SAFETY: ExecMap is Zeroable (above).
        let map = &unsafe { crate::sys::zeroed_static_slice::<ExecMap>(1, 64) }[0];
        map.generation.store(1, Ordering::Relaxed);
        map
    }

    pub fn new() -> ExecMap {
        ExecMap {
            copies: [Tables::new(), Tables::new()],
            readers: [AtomicU32::new(0), AtomicU32::new(0)],
            current: AtomicUsize::new(0),
            generation: AtomicU32::new(1),
            code: AtomicU64::new(0),
            has_code: AtomicBool::new(false),
            version: AtomicU32::new(0),
            writer: AtomicBool::new(false),
            generated_code: AtomicBool::new(false),
            doorbell: Doorbell::new(),
        }
    }

    /// Replaces the contents (never from a handler). Returns how many
    /// ranges did not fit.
    pub fn update(&self, layout: &MemoryLayout) -> usize {
        // Sorting and its allocation happen before any copy is touched.
        let exec = sorted(&layout.exec);
        let rseq = sorted(&layout.rseq);
        let immutable = sorted(&layout.immutable);
        let private = sorted(&layout.private);
        let mapped = sorted(&layout.mapped);
        let left_out = exec.len().saturating_sub(MAX_EXEC_RANGES)
            + rseq.len().saturating_sub(MAX_RSEQ_RANGES)
            + immutable.len().saturating_sub(MAX_IMMUTABLE_RANGES)
            + private.len().saturating_sub(MAX_PRIVATE_RANGES)
            + mapped.len().saturating_sub(MAX_MAPPED_RANGES);
        while self
            .writer
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            // Callers do not overlap writers; this only keeps it true.
            std::thread::yield_now();
        }
        let next = 1 - self.current.load(Ordering::SeqCst);
        // Readers that found `next` current before the last publication
        // may still be in it: wait them out (they only read a few words).
        let mut spins = 0u32;
        while self.readers[next].load(Ordering::SeqCst) != 0 {
            spins += 1;
            if spins < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        }
        let copy = &self.copies[next];
        // SAFETY: `next` is not current and no reader is counted in it; a
        // reader that arrives now sees the index unchanged and backs out.
        unsafe {
            copy.exec.store(&exec);
            copy.rseq.store(&rseq);
            copy.immutable.store(&immutable);
            copy.private.store(&private);
            copy.mapped.store(&mapped);
        }
        self.current.store(next, Ordering::SeqCst);
        let same_code = self.has_code.load(Ordering::Relaxed)
            && self.code.load(Ordering::Relaxed) == layout.code;
        if !same_code {
            self.code.store(layout.code, Ordering::Relaxed);
            self.has_code.store(true, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
        self.generated_code
            .store(layout.generated_code, Ordering::SeqCst);
        self.version.fetch_add(1, Ordering::SeqCst);
        self.writer.store(false, Ordering::Release);
        left_out
    }

    /// Runs `f` on the current copy; None when the copy kept changing.
    /// Async-signal-safe: bounded, no lock, no allocation.
    fn read<R>(&self, f: impl Fn(&Tables) -> R) -> Option<R> {
        for _ in 0..READ_TRIES {
            let i = self.current.load(Ordering::SeqCst);
            self.readers[i].fetch_add(1, Ordering::SeqCst);
            if self.current.load(Ordering::SeqCst) == i {
                let r = f(&self.copies[i]);
                self.readers[i].fetch_sub(1, Ordering::Release);
                return Some(r);
            }
            self.readers[i].fetch_sub(1, Ordering::Release);
        }
        crate::host::bump(&crate::host::HOST.exec_map_lookups_given_up);
        None
    }

    /// The executable range holding `addr`. Async-signal-safe.
    pub fn range_of(&self, addr: u64) -> Option<(u64, u64)> {
        // SAFETY: inside `read`, counted in the current copy.
        self.read(|m| find(unsafe { m.exec.get() }, addr)).flatten()
    }

    /// Whether `addr` is inside an rseq critical section (or the table
    /// could not be read: no breakpoint goes where that is unknown).
    /// Async-signal-safe.
    pub fn in_rseq(&self, addr: u64) -> bool {
        // SAFETY: inside `read`, counted in the current copy.
        self.read(|m| {
            unsafe { m.rseq.get() }
                .iter()
                .any(|&(s, e)| s <= addr && addr < e)
        })
        .unwrap_or(true)
    }

    /// Whether the process runs code generated at run time (see
    /// `MemoryLayout::generated_code`). Async-signal-safe.
    pub fn has_generated_code(&self) -> bool {
        self.generated_code.load(Ordering::Acquire)
    }

    /// Whether the table holds any rseq critical section (most processes
    /// have none). Async-signal-safe.
    pub fn has_rseq(&self) -> bool {
        // SAFETY: inside `read`, counted in the current copy.
        self.read(|m| !unsafe { m.rseq.get() }.is_empty())
            .unwrap_or(true)
    }

    /// Whether [addr, addr + len) lies in one immutable mapping.
    /// Async-signal-safe.
    pub fn is_immutable(&self, addr: u64, len: u64) -> bool {
        // SAFETY: inside `read`, counted in the current copy.
        self.read(|m| {
            find(unsafe { m.immutable.get() }, addr)
                .is_some_and(|(_, end)| addr.saturating_add(len) <= end)
        })
        .unwrap_or(false)
    }

    /// The stretch around `addr` over which [`ExecMap::is_immutable`]
    /// gives one answer: `(immutable, start, end)` with `addr` in
    /// `start..end`, valid while [`ExecMap::version`] stays. `None` when the
    /// table kept changing.
    pub fn immutable_stretch(&self, addr: u64) -> Option<(bool, u64, u64)> {
        // SAFETY: inside `read`, counted in the current copy.
        self.read(|m| stretch(unsafe { m.immutable.get() }, addr))
    }

    /// Whether `addr` lies in a mapping the table knows (None when the
    /// table kept changing). Async-signal-safe.
    pub fn is_mapped(&self, addr: u64) -> Option<bool> {
        // SAFETY: inside `read`, counted in the current copy.
        self.read(|m| stretch(unsafe { m.mapped.get() }, addr).0)
    }

    /// As [`ExecMap::immutable_stretch`], for the private writable ranges.
    pub fn private_stretch(&self, addr: u64) -> Option<(bool, u64, u64)> {
        // SAFETY: inside `read`, counted in the current copy.
        self.read(|m| stretch(unsafe { m.private.get() }, addr))
    }

    /// Moves at every update of the table.
    pub fn version(&self) -> u32 {
        self.version.load(Ordering::Acquire)
    }

    pub fn generation(&self) -> u32 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Asks the worker to look for new code now. Async-signal-safe.
    pub fn request_refresh(&self) {
        self.doorbell.ring(Doorbell::REFRESH);
    }

    /// The worker's doorbell (kept here: the emulator, which has only this
    /// table, rings it for a refresh).
    pub fn doorbell(&self) -> &Doorbell {
        &self.doorbell
    }

    /// Copies the code at `addr` (in a range the table lists; `out` no
    /// longer than what is left of it) through fault-safe loads; returns
    /// how many bytes were read. None at all means the mapping is gone (a
    /// dlclose, munmap or mprotect since the last refresh): that is counted
    /// in `host::HOST.code_unreadable`, and the worker is asked to refresh the table.
    /// Async-signal-safe, for the handlers of a session (the fault handler
    /// that makes the loads safe is installed then).
    pub fn read_code(&self, addr: u64, out: &mut [u8]) -> usize {
        let got = crate::sys::probe::read_bytes(addr, out);
        if got == 0 && !out.is_empty() {
            crate::host::bump(&crate::host::HOST.code_unreadable);
            self.request_refresh();
        }
        got
    }

    /// In a fork child: a writer of the parent (the worker) may have held
    /// the flag, and readers that were counted are gone with their threads.
    pub fn reset_after_fork(&self) {
        self.writer.store(false, Ordering::Release);
        for r in &self.readers {
            r.store(0, Ordering::Release);
        }
    }
}

impl Default for ExecMap {
    fn default() -> Self {
        Self::new()
    }
}

/// Notes the entries a binary search of `ranges` for `addr` reads, and
/// the ones either side of where it lands (census builds).
#[cfg(feature = "census")]
fn census_search(ranges: &[(u64, u64)], addr: u64) {
    let (mut lo, mut hi) = (0, ranges.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        crate::census::touch(&ranges[mid], crate::census::Part::Tables);
        if ranges[mid].0 <= addr {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    for r in ranges
        .get(lo.saturating_sub(1)..(lo + 1).min(ranges.len()))
        .unwrap_or(&[])
    {
        crate::census::touch(r, crate::census::Part::Tables);
    }
}

fn find(sorted: &[(u64, u64)], addr: u64) -> Option<(u64, u64)> {
    census!(census_search(sorted, addr));
    let i = sorted.partition_point(|&(start, _)| start <= addr);
    let (start, end) = *sorted.get(i.checked_sub(1)?)?;
    (addr < end).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(exec: &[(u64, u64)], rseq: &[(u64, u64)], immutable: &[(u64, u64)]) -> MemoryLayout {
        MemoryLayout {
            exec: exec.to_vec(),
            rseq: rseq.to_vec(),
            immutable: immutable.to_vec(),
            private: vec![(0x9000, 0xa000)],
            generated_code: false,
            mapped: vec![(0x1000, 0xa000)],
            code: exec.iter().fold(7, |h, &(a, b)| h * 31 + a * 17 + b),
        }
    }

    #[test]
    fn the_generation_moves_only_when_the_code_does() {
        let map = ExecMap::new();
        let code = layout(&[(0x1000, 0x2000)], &[], &[]);
        map.update(&code);
        let g = map.generation();
        // A refresh for another reason (the heap grew): same code.
        map.update(&layout(&[(0x1000, 0x2000)], &[], &[(0x5000, 0x6000)]));
        assert_eq!(map.generation(), g);
        // Another file mapped over the same range: another identity.
        map.update(&MemoryLayout {
            code: code.code + 1,
            ..code.clone()
        });
        assert_ne!(map.generation(), g);
        assert_eq!(map.range_of(0x1800), Some((0x1000, 0x2000)));
    }

    /// The map made in a mapping is the map `new` makes: the same
    /// generation, nothing in it, and it fills the same.
    #[test]
    fn a_mapped_map_is_a_new_one() {
        let (boxed, new) = (ExecMap::mapped(), ExecMap::new());
        assert_eq!(boxed.generation(), new.generation());
        assert_eq!(boxed.range_of(0x1800), None);
        let code = layout(
            &[(0x1000, 0x2000)],
            &[(0x1100, 0x1110)],
            &[(0x5000, 0x6000)],
        );
        boxed.update(&code);
        new.update(&code);
        assert_eq!(boxed.generation(), new.generation());
        for addr in [0x1000, 0x1105, 0x1800, 0x2000, 0x5800] {
            assert_eq!(boxed.range_of(addr), new.range_of(addr));
            assert_eq!(boxed.in_rseq(addr), new.in_rseq(addr));
            assert_eq!(boxed.is_immutable(addr, 8), new.is_immutable(addr, 8));
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
        assert_eq!(map.immutable_stretch(0x5800), Some((true, 0x5000, 0x6000)));
        assert_eq!(
            map.immutable_stretch(0x6000),
            Some((false, 0x6000, u64::MAX))
        );
        assert_eq!(map.immutable_stretch(0x10), Some((false, 0, 0x5000)));
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
        // Every answer is one of the two ranges whole, and most lookups get
        // one: a table that answered nothing would pass the first check.
        let mut found = 0u32;
        for _ in 0..20000 {
            let hit = map.range_of(0x1800).or(map.range_of(0x11800));
            if let Some(range) = hit {
                assert!(
                    range == (0x1000, 0x2000) || range == (0x11000, 0x12000),
                    "a torn range: {range:x?}"
                );
                found += 1;
            }
        }
        writer.join().unwrap();
        assert!(
            found >= 10_000,
            "only {found} of 20000 lookups found a range"
        );
        // The writer's last table (i = 1999: base 0x11000) is the one read.
        assert_eq!(map.range_of(0x11800), Some((0x11000, 0x12000)));
        assert_eq!(map.range_of(0x1800), None);
    }
}
