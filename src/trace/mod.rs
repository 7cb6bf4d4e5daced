//! The per-thread tracing state machine and its signal handlers.
//!
//! State of one traced thread lives in a [`ThreadSlot`] of a fixed table,
//! found by tid. The slot's `state` word is the only synchronisation between
//! the thread's own handlers and the control thread:
//!
//! - `READY`: events open; whoever moves it to `BUSY` (a handler) or
//!   `CLOSED` (the control thread) by compare-and-swap owns the slot's
//!   inner state until it stores a new state.
//! - `BUSY`: a handler of the thread is running. The control thread waits
//!   (it never interrupts the thread, so the wait is short).
//! - `CLOSED` / `FREE`: no events; handlers that still arrive (a signal
//!   queued before the events were disabled) are ignored.

pub mod calibrate;
pub mod chain;
pub mod counters;
pub mod exec_map;
pub mod handler;
pub mod speculative;
pub mod threads;

use std::cell::UnsafeCell;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use iced_x86::Instruction;

use crate::buffer::{BufferPool, TraceBuffer};
use crate::decode::{BlockCache, BranchForm};
use crate::sys::PerfEventAttr;
use counters::Counters;
use exec_map::ExecMap;

/// Traced threads at once; a thread beyond it runs untraced and is counted
/// (`thread_table_full`).
pub const MAX_THREADS: usize = 1024;

/// `sig_data` of the sampling event's SIGTRAP ("bdsm").
pub const SAMPLE_TAG: u64 = 0x6264_736d;
/// `sig_data` of the breakpoint's SIGTRAP ("bdbp").
pub const BREAKPOINT_TAG: u64 = 0x6264_6270;

const FREE: u8 = 0;
const READY: u8 = 1;
const BUSY: u8 = 2;
const CLOSED: u8 = 3;

const TID_NONE: i32 = 0;
const TID_TOMBSTONE: i32 = -1;

/// What the look-ahead knows of the stack pointer at an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackPointer {
    /// Exactly this value: every rsp change on the way was a constant.
    Exact(u64),
    /// Near this value (the last exact one): an instruction on the way set
    /// rsp in a way decoding cannot follow (leave, and rsp, mov rsp).
    Near(u64),
}

/// How far below the last exact rsp an unfollowed change may move it. A
/// signal frame (red zone, siginfo, ucontext, xsave area) is larger, so a
/// breakpoint reached from a signal handler on the same stack still fails
/// the check; a larger alloca makes the trace end early, never wrong.
pub const SP_SLACK_BELOW: u64 = 512;
/// How far above it may move (`leave` restores a frame pointer that far up).
pub const SP_SLACK_ABOVE: u64 = 1 << 20;

impl StackPointer {
    /// Whether the rsp found at the breakpoint is consistent with what the
    /// look-ahead expected. Async-signal-safe.
    pub fn admits(self, rsp: u64) -> bool {
        match self {
            StackPointer::Exact(sp) => sp == rsp,
            StackPointer::Near(sp) => {
                rsp >= sp.wrapping_sub(SP_SLACK_BELOW) && rsp <= sp.wrapping_add(SP_SLACK_ABOVE)
            }
        }
    }

    /// After a segment whose rsp change is `delta` (None: not followed).
    pub fn after(self, delta: Option<i32>) -> StackPointer {
        match (self, delta) {
            (StackPointer::Exact(sp), Some(d)) => {
                StackPointer::Exact(sp.wrapping_add(d as i64 as u64))
            }
            (StackPointer::Exact(sp), None) => StackPointer::Near(sp),
            (near, _) => near,
        }
    }

    /// After a direct call pushed its return address.
    pub fn after_call(self) -> StackPointer {
        match self {
            StackPointer::Exact(sp) => StackPointer::Exact(sp.wrapping_sub(8)),
            near => near,
        }
    }
}

/// A breakpoint the thread is waiting for.
#[derive(Clone, Copy)]
pub struct Pending {
    pub form: BranchForm,
    /// The stack pointer the thread must have there.
    pub expected_sp: StackPointer,
    /// Where the data-flow model said the transfer goes (verify mode).
    pub predicted: Option<u64>,
}

/// How the look-ahead uses the data-flow model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum DataflowMode {
    /// Breakpoints only, as in the paper.
    Off = 0,
    /// Resolve what the model decides without a breakpoint.
    On = 1,
    /// Predict with the model, and still stop at every predicted transfer
    /// to check the prediction (`dataflow_verified`, `dataflow_mismatches`
    /// in summary.json); for testing.
    Verify = 2,
    /// Emulate each trace ahead from its sample and validate it at one
    /// checkpoint per segment (`crate::emulate`).
    Emulate = 3,
}

/// What a traced thread's handlers work on. Owned by whoever holds the
/// slot (see the module doc).
pub struct ThreadTrace {
    pub sample_fd: Option<OwnedFd>,
    pub bp_fd: Option<OwnedFd>,
    /// The breakpoint's attribute as opened, edited in bp_addr/disabled
    /// for every move.
    pub bp_attr: PerfEventAttr,
    pub bp_armed: bool,
    pub buffer: Option<Box<TraceBuffer>>,
    pub pending: Option<Pending>,
    pub cache: Option<Box<BlockCache>>,
    pub insn: Instruction,
    /// The registers at the last breakpoint stop (see
    /// `handler::StopRegisters`).
    pub last_stop: Option<handler::StopRegisters>,
    /// Transfers the data-flow model resolved since the last stop, which
    /// the thread has yet to run (capacity `handler::MAX_CHAIN`, reserved
    /// at registration: pushing never allocates).
    pub chain: Vec<ChainStep>,
    /// Emulate mode: the thread's emulator (built at registration in that
    /// mode) and what its breakpoint waits for.
    pub emu: Option<Box<crate::emulate::Emulator>>,
    pub awaiting: Option<speculative::Awaiting>,
}

/// One transfer the data-flow model resolved.
#[derive(Clone, Copy, Debug)]
pub struct ChainStep {
    pub at: u64,
    pub form: BranchForm,
    /// rsp at the transfer.
    pub sp: u64,
    pub next: u64,
    pub taken: bool,
    /// Entries in the open trace before this step.
    pub entries_before: usize,
}

impl ThreadTrace {
    fn empty() -> ThreadTrace {
        ThreadTrace {
            sample_fd: None,
            bp_fd: None,
            bp_attr: crate::sys::blank_attr(),
            bp_armed: false,
            buffer: None,
            pending: None,
            cache: None,
            insn: Instruction::default(),
            last_stop: None,
            chain: Vec::new(),
            emu: None,
            awaiting: None,
        }
    }
}

pub struct ThreadSlot {
    tid: AtomicI32,
    state: AtomicU8,
    inner: UnsafeCell<ThreadTrace>,
    pub counters: Counters,
}

// SAFETY: `inner` is only touched by the holder of the slot, as the state
// protocol in the module doc establishes.
unsafe impl Sync for ThreadSlot {}

impl ThreadSlot {
    fn new() -> ThreadSlot {
        ThreadSlot {
            tid: AtomicI32::new(TID_NONE),
            state: AtomicU8::new(FREE),
            inner: UnsafeCell::new(ThreadTrace::empty()),
            counters: Counters::default(),
        }
    }

    pub fn tid(&self) -> i32 {
        self.tid.load(Ordering::Acquire)
    }

    /// Handler entry: takes the slot if it is ready. Async-signal-safe.
    fn enter(&self) -> bool {
        self.state
            .compare_exchange(READY, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    fn leave(&self) {
        self.state.store(READY, Ordering::Release);
    }

    /// The holder's access to the inner state.
    ///
    /// # Safety
    /// The caller must hold the slot (a successful `enter`, or `close`, or
    /// the setup before the slot was first made ready).
    #[allow(clippy::mut_from_ref)]
    unsafe fn inner(&self) -> &mut ThreadTrace {
        // SAFETY: forwarded contract: the holder is the only accessor.
        unsafe { &mut *self.inner.get() }
    }

    /// Control side: waits out a running handler and closes the slot.
    /// Returns false if the slot was not ready (already closed or free).
    fn close(&self) -> bool {
        loop {
            match self
                .state
                .compare_exchange(READY, CLOSED, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(BUSY) => std::thread::yield_now(),
                Err(_) => return false,
            }
        }
    }
}

/// The process-wide tracer, created at the first session and kept for the
/// life of the process (handlers may run late, after a session ended).
pub struct Tracer {
    pub slots: Box<[ThreadSlot]>,
    pub exec: ExecMap,
    pub pool: Arc<BufferPool>,
    /// Trace length N of the running session.
    pub lbr: AtomicUsize,
    /// A `DataflowMode`.
    pub dataflow: AtomicU8,
    /// Sessions accept new threads only while this is set.
    pub running: AtomicBool,
    /// Counters of threads retired during the session.
    pub retired: Counters,
    /// Threads that found the table full.
    pub table_full: std::sync::atomic::AtomicU64,
    /// Threads traced during the session (at start and created later).
    pub threads_registered: std::sync::atomic::AtomicU64,
}

static TRACER: OnceLock<Tracer> = OnceLock::new();

/// The tracer, if one was ever created. Async-signal-safe (an atomic load).
pub fn tracer() -> Option<&'static Tracer> {
    TRACER.get()
}

pub fn tracer_or_init() -> &'static Tracer {
    TRACER.get_or_init(|| Tracer {
        slots: (0..MAX_THREADS).map(|_| ThreadSlot::new()).collect(),
        exec: ExecMap::new(),
        pool: Arc::new(BufferPool::new()),
        lbr: AtomicUsize::new(32),
        dataflow: AtomicU8::new(DataflowMode::On as u8),
        running: AtomicBool::new(false),
        retired: Counters::default(),
        table_full: Default::default(),
        threads_registered: Default::default(),
    })
}

impl Tracer {
    /// Async-signal-safe.
    pub fn dataflow_mode(&self) -> DataflowMode {
        match self.dataflow.load(Ordering::Relaxed) {
            0 => DataflowMode::Off,
            2 => DataflowMode::Verify,
            3 => DataflowMode::Emulate,
            _ => DataflowMode::On,
        }
    }

    fn home(tid: i32) -> usize {
        (tid as u32 as usize).wrapping_mul(0x9E37_79B9) % MAX_THREADS
    }

    /// The slot of `tid`. Async-signal-safe: a bounded linear probe over
    /// atomics.
    pub fn slot_of(&self, tid: i32) -> Option<&ThreadSlot> {
        let home = Self::home(tid);
        for i in 0..MAX_THREADS {
            let slot = &self.slots[(home + i) % MAX_THREADS];
            match slot.tid.load(Ordering::Acquire) {
                t if t == tid => return Some(slot),
                TID_NONE => return None,
                _ => {}
            }
        }
        None
    }

    /// Claims a slot for `tid` (control or registering thread, serialised
    /// by the registry lock).
    fn claim(&self, tid: i32) -> Option<&ThreadSlot> {
        let home = Self::home(tid);
        for i in 0..MAX_THREADS {
            let slot = &self.slots[(home + i) % MAX_THREADS];
            let t = slot.tid.load(Ordering::Acquire);
            if (t == TID_NONE || t == TID_TOMBSTONE) && slot.state.load(Ordering::Acquire) == FREE {
                slot.counters.reset();
                slot.tid.store(tid, Ordering::Release);
                return Some(slot);
            }
        }
        None
    }

    /// Slots in use (held tids), for the control thread.
    pub fn live_slots(&self) -> impl Iterator<Item = &ThreadSlot> {
        self.slots.iter().filter(|s| s.tid() > 0)
    }

    /// Counters of the session so far: retired threads plus live ones.
    pub fn totals(&self) -> counters::CounterValues {
        let mut v = self.retired.values();
        for s in self.live_slots() {
            v += s.counters.values();
        }
        v
    }
}

/// In the child of a fork: the slots describe the parent's threads and
/// their events. Closes the child's copies of the fds and empties every
/// buffer (the parent's traces are the parent's), leaving the table free.
pub fn forget_parent_threads(tracer: &Tracer) {
    for slot in tracer.slots.iter() {
        if slot.tid() <= 0 {
            continue;
        }
        slot.state.store(CLOSED, Ordering::Release);
        // SAFETY: the child has one thread and no events: nobody else
        // holds any slot.
        let t = unsafe { slot.inner() };
        t.sample_fd = None;
        t.bp_fd = None;
        t.pending = None;
        t.awaiting = None;
        t.bp_armed = false;
        if let Some(mut b) = t.buffer.take() {
            b.clear();
            let _ = tracer.pool.free.push(b);
        }
        slot.counters.reset();
        slot.tid.store(TID_TOMBSTONE, Ordering::Release);
        slot.state.store(FREE, Ordering::Release);
    }
    while let Some(mut b) = tracer.pool.full.pop() {
        b.clear();
        let _ = tracer.pool.free.push(b);
    }
    tracer.retired.reset();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_pointer_checks_are_exact_or_windowed() {
        let exact = StackPointer::Exact(0x7000).after(Some(-16)).after_call();
        assert_eq!(exact, StackPointer::Exact(0x7000 - 24));
        assert!(exact.admits(0x7000 - 24));
        assert!(!exact.admits(0x7000 - 32));
        let near = StackPointer::Exact(0x7000)
            .after(None)
            .after(Some(8))
            .after_call();
        assert_eq!(near, StackPointer::Near(0x7000));
        assert!(near.admits(0x7000 + 0x100)); // leave restored a frame above
        assert!(near.admits(0x7000 - 32)); // and rsp, -32
        assert!(!near.admits(0x7000 - 4096)); // a signal frame below
    }
}
