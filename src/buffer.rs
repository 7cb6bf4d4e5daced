//! Preallocated per-thread trace buffers and the lock-free queues that move
//! them between the traced threads and the worker.
//!
//! A traced thread owns one buffer at a time and appends to it from its
//! signal handlers. At the end of each trace it checks that a whole trace
//! still fits (the paper's free-space check when sampling is re-armed); if
//! not, it pushes the buffer to the `full` queue and pops an empty one from
//! `free`. Both queues are bounded `ArrayQueue`s: push and pop are lock-free
//! and never allocate. When `free` is empty the thread keeps no buffer and
//! the samples that find it so are dropped and counted (`no_free_buffer`).

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_queue::ArrayQueue;

/// Entries per buffer: 16384 × 16 bytes = 256 KiB, 512 traces of 32.
pub const BUFFER_ENTRIES: usize = 16_384;
/// Trace records per buffer.
pub const BUFFER_TRACES: usize = 4_096;
/// Call-stack words per buffer (`callstack`): 65536 × 8 bytes = 512 KiB
/// (frames, or 63 stack snapshots with `unwind=dwarf`),
/// zeroed by the allocator and never touched without call stacks, so
/// they cost no resident memory then.
pub const BUFFER_FRAMES: usize = 65_536;
/// Load values per buffer (`values`): 65536 × 16 bytes = 1 MiB, zeroed by
/// the allocator and never touched without `values`, so they cost no
/// resident memory then.
pub const BUFFER_VALUES: usize = 65_536;
/// Room for load values a buffer must have left to take another trace
/// with `values`: one segment's worth at most (a pass runs at most
/// `emulate::MAX_TAIL_STEPS` steps, one load each at most). A trace of
/// several long segments can still fill it; the loads that find no room
/// are counted (`load_buffer_full`).
pub const VALUES_PER_TRACE: usize = 8_192;
/// Buffers made in all, for the life of the process (about 320 KiB each, so
/// at most 320 MiB). A thread takes one at its first sample; the worker
/// keeps a few spare plus the recent demand (`top_up`); samples that find
/// none are counted.
pub const MAX_BUFFERS: usize = 1_024;

/// Spare buffers the worker keeps free whatever the demand.
pub const MIN_SPARE_BUFFERS: usize = 4;

/// One taken branch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, bytemuck::Zeroable)]
pub struct BranchEntry {
    pub from: u64,
    pub to: u64,
}

/// One executed load of a validated segment (`values`): the load
/// instruction's address and the value it read, zero-extended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Zeroable)]
pub struct LoadValue {
    pub pc: u64,
    pub value: u64,
}

/// Why a trace ended early: declared with its summary.json counter in the
/// protocol crate.
pub use breakdance_protocol::AbortReason;

/// How a trace ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceEnd {
    /// N taken branches recorded.
    Complete,
    Aborted(AbortReason),
}

#[derive(Clone, Copy, Debug)]
struct TraceRecord {
    start: u32,
    len: u32,
    end: TraceEnd,
    /// The trace's call stack in `frames` (empty: none).
    frames_start: u32,
    frames_len: u32,
}

/// A buffer of traces: entries in execution order (oldest first), and one
/// record per closed trace.
pub struct TraceBuffer {
    entries: Box<[BranchEntry]>,
    /// Written in order; the first `n_traces` are initialised.
    traces: Box<[MaybeUninit<TraceRecord>]>,
    /// Call-stack frames of the closed traces, leaf first each.
    frames: Box<[u64]>,
    /// Loads of validated segments with their values (`values`), in the
    /// order they were validated; not tied to traces.
    values: Box<[LoadValue]>,
    n_values: usize,
    n_entries: usize,
    n_traces: usize,
    n_frames: usize,
    /// Start of the open trace, if any.
    open: Option<usize>,
    /// The open trace's call stack in `frames`, as (start, len).
    open_stack: (u32, u32),
}

impl TraceBuffer {
    /// An empty buffer whose pages are not touched yet: the handlers touch
    /// them as they fill it (one page fault per 256 entries: every second
    /// trace of 128 branches), and a spare buffer never used costs no
    /// memory. Touching every page in advance cost each process about 1.4
    /// MB of RSS and 1 ms of CPU at start for its four spares
    /// (results/tails).
    pub fn new() -> Box<TraceBuffer> {
        Box::new(TraceBuffer {
            // Zeroed by the allocator (fresh pages, above its mmap
            // threshold), left untouched.
            entries: bytemuck::zeroed_slice_box(BUFFER_ENTRIES),
            traces: Box::new_uninit_slice(BUFFER_TRACES),
            // Zeroed pages from the allocator, left untouched (see
            // BUFFER_FRAMES).
            frames: vec![0u64; BUFFER_FRAMES].into_boxed_slice(),
            // Zeroed pages, untouched without `values`.
            values: bytemuck::zeroed_slice_box(BUFFER_VALUES),
            n_values: 0,
            n_entries: 0,
            n_traces: 0,
            n_frames: 0,
            open: None,
            open_stack: (0, 0),
        })
    }

    /// Whether a whole trace of `n` entries, with a call stack of `frames`
    /// frames and `values` load values, fits. Async-signal-safe.
    pub fn has_room(&self, n: usize, frames: usize, values: usize) -> bool {
        self.open.is_none()
            && self.n_entries + n <= self.entries.len()
            && self.n_traces < self.traces.len()
            && self.n_frames + frames <= self.frames.len()
            && self.n_values + values <= self.values.len()
    }

    /// Appends the loads of a validated segment, as many as fit; returns
    /// how many did. Async-signal-safe.
    pub fn push_values(&mut self, loads: &[LoadValue]) -> usize {
        let n = loads.len().min(self.values.len() - self.n_values);
        self.values[self.n_values..self.n_values + n].copy_from_slice(&loads[..n]);
        self.n_values += n;
        n
    }

    /// The loads recorded with their values, oldest first.
    pub fn values(&self) -> &[LoadValue] {
        &self.values[..self.n_values]
    }

    /// Opens a trace. Async-signal-safe.
    pub fn open_trace(&mut self) {
        self.open = Some(self.n_entries);
        self.open_stack = (self.n_frames as u32, 0);
    }

    /// Gives the open trace its call stack (leaf first); false when there
    /// is no open trace or no room for it. Async-signal-safe.
    pub fn set_stack(&mut self, frames: &[u64]) -> bool {
        let start = self.open_stack.0 as usize;
        if self.open.is_none() || start + frames.len() > self.frames.len() {
            return false;
        }
        self.frames[start..start + frames.len()].copy_from_slice(frames);
        self.open_stack.1 = frames.len() as u32;
        self.n_frames = start + frames.len();
        true
    }

    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// Entries in the open trace.
    pub fn open_len(&self) -> usize {
        self.open.map_or(0, |start| self.n_entries - start)
    }

    /// Appends to the open trace; false when the buffer is full (cannot
    /// happen after `has_room(n)` for a trace of at most n). Async-signal-safe.
    pub fn push(&mut self, entry: BranchEntry) -> bool {
        if self.open.is_none() || self.n_entries == self.entries.len() {
            return false;
        }
        self.entries[self.n_entries] = entry;
        census!(crate::census::touch(
            &self.entries[self.n_entries],
            crate::census::Part::Buffer
        ));
        self.n_entries += 1;
        true
    }

    /// Cuts the open trace back to its first `len` entries; returns how many
    /// were removed. Async-signal-safe.
    pub fn truncate_open(&mut self, len: usize) -> usize {
        let Some(start) = self.open else { return 0 };
        let keep = (start + len).min(self.n_entries);
        let removed = self.n_entries - keep;
        self.n_entries = keep;
        removed
    }

    /// Closes the open trace; returns whether it was kept (a trace without
    /// entries is not). Async-signal-safe.
    pub fn close_trace(&mut self, end: TraceEnd) -> bool {
        let Some(start) = self.open.take() else {
            return false;
        };
        let len = self.n_entries - start;
        let (frames_start, frames_len) = std::mem::take(&mut self.open_stack);
        if len == 0 {
            self.n_frames = frames_start as usize;
            return false;
        }
        self.traces[self.n_traces].write(TraceRecord {
            start: start as u32,
            len: len as u32,
            end,
            frames_start,
            frames_len,
        });
        self.n_traces += 1;
        true
    }

    /// No closed trace and no load value.
    pub fn is_empty(&self) -> bool {
        self.n_traces == 0 && self.n_values == 0
    }

    /// Closed traces, oldest first, each oldest branch first, with how it
    /// ended and its call stack (leaf first; empty when it has none).
    pub fn traces(&self) -> impl Iterator<Item = (&[BranchEntry], TraceEnd, &[u64])> {
        self.traces[..self.n_traces].iter().map(|t| {
            // SAFETY: the first `n_traces` records were written (close_trace
            // writes record n before it counts it).
            let t = unsafe { t.assume_init_ref() };
            let frames = t.frames_start as usize..(t.frames_start + t.frames_len) as usize;
            (
                &self.entries[t.start as usize..(t.start + t.len) as usize],
                t.end,
                &self.frames[frames],
            )
        })
    }

    /// Empties the buffer for reuse.
    pub fn clear(&mut self) {
        self.n_entries = 0;
        self.n_traces = 0;
        self.n_frames = 0;
        self.n_values = 0;
        self.open = None;
        self.open_stack = (0, 0);
    }
}

/// How many of a pool's items threads take, per pass of the worker: the
/// peak over the current and the previous window of passes. The pools are
/// sized by it, so by how many threads are sampled, not how many exist.
/// Handlers count (a relaxed add); the worker folds and reads.
#[derive(Default)]
pub struct Demand {
    since_pass: AtomicUsize,
    peak: AtomicUsize,
    last_peak: AtomicUsize,
}

impl Demand {
    pub const fn new() -> Demand {
        Demand {
            since_pass: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            last_peak: AtomicUsize::new(0),
        }
    }

    /// One take (or one that found the pool empty). Async-signal-safe.
    pub fn count(&self) {
        self.since_pass.fetch_add(1, Ordering::Relaxed);
    }

    /// The worker's pass: the takes since the last pass join the window's
    /// peak.
    pub fn pass(&self) {
        let d = self.since_pass.swap(0, Ordering::Relaxed);
        self.peak.fetch_max(d, Ordering::Relaxed);
    }

    /// Ends a window of passes.
    pub fn next_window(&self) {
        let p = self.peak.swap(0, Ordering::Relaxed);
        self.last_peak.store(p, Ordering::Relaxed);
    }

    /// The most taken in one pass lately (this window, the last, and since
    /// the last pass).
    pub fn peak(&self) -> usize {
        self.since_pass
            .load(Ordering::Relaxed)
            .max(self.peak.load(Ordering::Relaxed))
            .max(self.last_peak.load(Ordering::Relaxed))
    }
}

/// The free items a pool keeps for a demand: `spare` plus the peak takes
/// per pass; above twice that the worker frees the excess.
pub fn pool_target(demand: &Demand, spare: usize) -> usize {
    spare + demand.peak()
}

/// The two queues of a session, and how many buffers exist in all.
///
/// Invariant: at most `MAX_BUFFERS` buffers are ever made and each queue
/// holds `MAX_BUFFERS`, so a push of a buffer the pool made never fails:
/// a handler never has to drop (and so free) one.
pub struct BufferPool {
    pub free: ArrayQueue<Box<TraceBuffer>>,
    pub full: ArrayQueue<Box<TraceBuffer>>,
    made: AtomicUsize,
    /// Buffers taken from `free` (or asked for when it was empty).
    pub demand: Demand,
}

impl BufferPool {
    pub fn new() -> BufferPool {
        BufferPool {
            free: ArrayQueue::new(MAX_BUFFERS),
            full: ArrayQueue::new(MAX_BUFFERS),
            made: AtomicUsize::new(0),
            demand: Demand::new(),
        }
    }

    /// A free buffer for a thread, if any, counted as demand.
    /// Async-signal-safe (a lock-free pop).
    pub fn take(&self) -> Option<Box<TraceBuffer>> {
        self.demand.count();
        self.free.pop()
    }

    /// The worker's pass (the control thread's at start): grows `free` to
    /// the target ([`pool_target`]), never past `MAX_BUFFERS` made, or
    /// frees what is above twice the target (buffers come back as threads
    /// end). Returns how many were added. Allocates: never from a handler.
    pub fn top_up(&self) -> usize {
        self.demand.pass();
        let target = pool_target(&self.demand, MIN_SPARE_BUFFERS);
        let free = self.free.len();
        if free > 2 * target {
            for _ in target..free {
                match self.free.pop() {
                    Some(b) => {
                        drop(b);
                        self.made.fetch_sub(1, Ordering::AcqRel);
                    }
                    None => break,
                }
            }
            return 0;
        }
        self.grow(target.saturating_sub(free))
    }

    /// Adds up to `n` new buffers to the free queue, never past
    /// `MAX_BUFFERS` in all (not from a handler: it allocates). Returns how
    /// many were added.
    pub fn grow(&self, n: usize) -> usize {
        let mut added = 0;
        for _ in 0..n {
            let claimed = self
                .made
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| {
                    (m < MAX_BUFFERS).then_some(m + 1)
                });
            if claimed.is_err() {
                break;
            }
            // Cannot fail: the queue holds every buffer that can exist.
            let _ = self.free.push(TraceBuffer::new());
            added += 1;
        }
        added
    }

    pub fn made(&self) -> usize {
        self.made.load(Ordering::Acquire)
    }
}

impl Default for BufferPool {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_come_back_in_order_with_their_ends() {
        let mut b = TraceBuffer::new();
        assert!(b.has_room(32, 0, 0));
        b.open_trace();
        assert!(b.push(BranchEntry { from: 1, to: 2 }));
        assert!(b.push(BranchEntry { from: 3, to: 4 }));
        assert!(b.close_trace(TraceEnd::Complete));
        b.open_trace();
        assert!(!b.close_trace(TraceEnd::Aborted(AbortReason::Rseq))); // empty: not kept
        b.open_trace();
        b.push(BranchEntry { from: 5, to: 6 });
        b.close_trace(TraceEnd::Aborted(AbortReason::SpMismatch));
        let got: Vec<_> = b.traces().map(|(e, end, _)| (e.to_vec(), end)).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0].0,
            vec![
                BranchEntry { from: 1, to: 2 },
                BranchEntry { from: 3, to: 4 }
            ]
        );
        assert_eq!(got[1].1, TraceEnd::Aborted(AbortReason::SpMismatch));
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn call_stacks_go_with_their_traces() {
        let mut b = TraceBuffer::new();
        assert!(!b.set_stack(&[1]), "no open trace");
        b.open_trace();
        b.push(BranchEntry { from: 1, to: 2 });
        assert!(b.set_stack(&[0x20, 0x30, 0x40]));
        b.close_trace(TraceEnd::Complete);
        // An empty trace's stack is given back.
        b.open_trace();
        assert!(b.set_stack(&[0x99; 5]));
        assert!(!b.close_trace(TraceEnd::Complete));
        b.open_trace();
        b.push(BranchEntry { from: 3, to: 4 });
        b.close_trace(TraceEnd::Aborted(AbortReason::SpMismatch));
        b.open_trace();
        b.push(BranchEntry { from: 5, to: 6 });
        assert!(b.set_stack(&[0x60]));
        b.close_trace(TraceEnd::Complete);
        let stacks: Vec<Vec<u64>> = b.traces().map(|(_, _, s)| s.to_vec()).collect();
        assert_eq!(stacks, [vec![0x20, 0x30, 0x40], vec![], vec![0x60]]);
        // The frame store bounds the room for a trace with a stack.
        assert!(b.has_room(1, BUFFER_FRAMES - 4, 0));
        assert!(!b.has_room(1, BUFFER_FRAMES - 3, 0));
        b.open_trace();
        assert!(!b.set_stack(&vec![7; BUFFER_FRAMES - 3]));
    }

    #[test]
    fn load_values_fill_their_store_and_go_with_clear() {
        let mut b = TraceBuffer::new();
        assert!(b.is_empty());
        let loads: Vec<LoadValue> = (0..3)
            .map(|i| LoadValue {
                pc: 0x1000 + i,
                value: i * 7,
            })
            .collect();
        assert_eq!(b.push_values(&loads), 3);
        // Values alone make the buffer worth draining.
        assert!(!b.is_empty());
        assert_eq!(b.values(), &loads[..]);
        assert!(b.has_room(1, 0, BUFFER_VALUES - 3));
        assert!(!b.has_room(1, 0, BUFFER_VALUES - 2));
        // What does not fit is refused, and the caller told how much fit.
        let many = vec![LoadValue { pc: 1, value: 2 }; BUFFER_VALUES];
        assert_eq!(b.push_values(&many), BUFFER_VALUES - 3);
        assert_eq!(b.push_values(&loads), 0);
        assert_eq!(b.values().len(), BUFFER_VALUES);
        b.clear();
        assert!(b.is_empty() && b.values().is_empty());
    }

    #[test]
    fn room_check_reserves_a_whole_trace() {
        let mut b = TraceBuffer::new();
        let n = 1000;
        let mut traces = 0;
        while b.has_room(n, 0, 0) {
            b.open_trace();
            for i in 0..n {
                assert!(b.push(BranchEntry {
                    from: i as u64,
                    to: 0
                }));
            }
            b.close_trace(TraceEnd::Complete);
            traces += 1;
        }
        assert_eq!(traces, BUFFER_ENTRIES / n);
    }

    #[test]
    fn pool_is_bounded() {
        let pool = BufferPool::new();
        assert_eq!(pool.grow(3), 3);
        assert_eq!(pool.free.len(), 3);
        assert_eq!(pool.top_up(), MIN_SPARE_BUFFERS - 3);
        let taken = [pool.take(), pool.take()].map(|b| b.expect("a spare buffer"));
        assert_eq!(pool.top_up(), 4); // two spare taken, two more asked for
        for b in taken {
            let _ = pool.free.push(b);
        }
        // Twice the target and more free: the excess is freed.
        pool.demand.next_window();
        pool.demand.next_window();
        assert_eq!(pool.grow(2), 2);
        assert_eq!(pool.free.len(), 10);
        assert_eq!(pool.top_up(), 0);
        assert_eq!(pool.free.len(), MIN_SPARE_BUFFERS);
        assert_eq!(pool.made(), MIN_SPARE_BUFFERS);
        while pool.grow(100) > 0 {}
        assert_eq!(pool.made(), MAX_BUFFERS);
        assert_eq!(pool.free.len(), MAX_BUFFERS);
    }
}
