//! The per-thread tracing state machine and its signal handlers.
//!
//! State of one traced thread lives in a [`ThreadSlot`] of a fixed table,
//! found by tid. The slot's `state` word is the only synchronisation between
//! the thread's own handlers and the threads that open and close it:
//!
//! - `FREE`: no thread. A claim (serialised by the claim lock) gives it a
//!   tid and moves it to `SETUP`.
//! - `SETUP`: its events are being opened (by the thread itself, or by the
//!   control thread at start). Handlers ignore it; closers wait for it.
//! - `READY`: events open; whoever moves it to `BUSY` (a handler) or
//!   `CLOSED` (a closer) by compare-and-swap owns the slot's inner state
//!   until it stores a new state.
//! - `BUSY`: a handler of the thread is running. Only the thread's own
//!   handler sets it, and handlers of one thread never nest: the SIGTRAP
//!   handler runs with SIGTRAP and every asynchronous signal blocked. So a
//!   handler that finds its own slot `BUSY` knows the previous one never
//!   returned (an application handler, run inside ours for a fault, left
//!   it with longjmp): it takes the slot back and counts it
//!   (`handlers_abandoned`).
//! - `CLOSED`: being closed; handlers that still arrive (a signal queued
//!   before the events were closed) are ignored.
//!
//! A closer on another thread waits out a running handler for at most
//! [`CLOSE_WAIT`], then gives up and counts it (`slots_busy_at_stop`): the
//! slot is left to the thread itself, which closes it when it exits, or to
//! the sweep, which closes the slots of threads that are gone. Neither can
//! race a handler of the thread, so both may take a `BUSY` slot.

pub mod calibrate;
pub mod chain;
pub mod counters;
mod emulate;
mod ends;
mod engine;
mod events;
pub mod handler;
mod paper;
mod pools;
pub mod threads;
mod verify;
mod walk;

pub use engine::StopRegisters;
pub use pools::StatePools;

/// Keeps the pools of per-thread state the session's mode needs, and the
/// buffer pool, at their targets: a few spare plus the recent demand (the
/// worker, each pass; the control thread at start). Allocates: never from
/// a handler.
/// Returns how many states and buffers were added.
pub fn top_up_pools(tracer: &Tracer) -> usize {
    let needs = handler::engine_of(tracer.lookahead()).needs();
    pools::top_up(&tracer.states, &tracer.pool, needs)
}

/// Ends a window of the pools' demand (the worker, every
/// `pools::WINDOW_NS`).
pub fn next_pool_window(tracer: &Tracer) {
    pools::next_window(&tracer.states, &tracer.pool);
}

/// How often the worker ends a window of the pools' demand.
pub const POOL_WINDOW_NS: u64 = pools::WINDOW_NS;

/// Whether `mode`'s engine runs the x86 emulator (built before any thread
/// is traced: see `emulate::warm`).
pub fn emulates(mode: Lookahead) -> bool {
    handler::engine_of(mode).needs().emulator
}

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use iced_x86::Instruction;

use crate::buffer::{BufferPool, TraceBuffer};
use crate::decode::{BlockCache, BranchForm};
use crate::exec_map::ExecMap;
use crate::sync::SpinLock;
use crate::sys::PerfEventAttr;
use counters::Counters;

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
const SETUP: u8 = 4;

/// How long a closer on another thread waits for a running handler (or a
/// registration in progress) before it gives the slot up. A handler runs
/// for microseconds; only a preempted one on a crowded machine takes
/// milliseconds, and only an abandoned one never ends.
pub const CLOSE_WAIT: Duration = Duration::from_secs(1);

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

/// What the thread's breakpoint waits for: one thing at a time, set by
/// the session's engine (see `engine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Awaiting {
    /// Paper and verify: the next transfer that needs the CPU state.
    Branch(Pending),
    /// Emulate: a segment's checkpoint. The `hits`th execution of `at` is
    /// where the prediction holds; the open trace's entries after
    /// `committed` are the segment's, the last `tail` of them a proven
    /// tail (`emulate::Segment::tail_entries`).
    Checkpoint {
        at: u64,
        hits: u32,
        committed: usize,
        tail: usize,
        end: crate::emulate::SegmentEnd,
        /// The segment's steps: its loads are the emulator's up to here
        /// (`values`).
        steps: u32,
        /// `quiet::wrap::runs()` when the segment began, if it took the
        /// process's quietness for granted with handlers wrapped: a
        /// handler run before the checkpoint voids it.
        runs: Option<u64>,
    },
    /// Emulate: the thread runs one instruction the emulator cannot; at
    /// `at` the state is exact again.
    Resume { at: u64 },
}

impl Awaiting {
    /// Where the breakpoint is.
    pub fn at(self) -> u64 {
        match self {
            Awaiting::Branch(p) => p.form.at,
            Awaiting::Checkpoint { at, .. } | Awaiting::Resume { at } => at,
        }
    }
}

/// A transfer the thread's breakpoint waits at, in paper and verify mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    pub form: BranchForm,
    /// The stack pointer the thread must have there.
    pub expected_sp: StackPointer,
}

pub use breakdance_protocol::Lookahead;

/// What a traced thread's handlers work on. Owned by whoever holds the
/// slot (see the module doc).
pub struct ThreadTrace {
    pub sample_fd: Option<OwnedFd>,
    pub bp_fd: Option<OwnedFd>,
    /// The breakpoint's attribute as opened, edited in bp_addr/disabled
    /// for every move.
    pub bp_attr: PerfEventAttr,
    pub bp_armed: bool,
    /// The sampling period (0 with a frequency: the kernel picks periods).
    /// The event opens with a random part of it as its first period, so
    /// that threads shorter than a period are sampled in proportion to
    /// their CPU time instead of never (each thread's event counts from
    /// zero); the first sample sets it (see `events::sample_entered`).
    pub period: u64,
    /// The sample period the sampling event counts now: the thread's
    /// first, then `period`, or the watchdog's while a trace waits at a
    /// stop (see `events::set_sampling_period`).
    pub event_period: u64,
    /// A sample fell due while the last sample's handler ran: it is
    /// dropped as it arrives (see `events::set_sampling_period`).
    pub skip_sample: bool,
    /// Whether the sampling event runs without a limit of overflows: from
    /// the thread's first sample on (`events::sample_entered`).
    pub sampling_unlimited: bool,
    /// Hits the breakpoint event's limit still allows before the kernel
    /// stops it (see `events::arm_breakpoint`).
    pub bp_hits_left: u32,
    pub buffer: Option<Box<TraceBuffer>>,
    /// What the breakpoint waits for (see [`Awaiting`]).
    pub awaiting: Option<Awaiting>,
    /// Breakpoint stops since the last sample: whether the open trace of a
    /// stop-per-branch mode moved in the last period (see
    /// `walk::on_sample`).
    pub stops_since_sample: u32,
    /// Paper and verify: the decoded-block cache, from the pool at the
    /// thread's first sample.
    pub cache: Option<Box<BlockCache>>,
    pub insn: Instruction,
    /// The registers at the last breakpoint stop (see
    /// `engine::StopRegisters`).
    pub last_stop: Option<StopRegisters>,
    /// The thread's emulator in emulate and verify mode, from the pool at
    /// the thread's first sample (see `pools`).
    pub emu: Option<Box<crate::emulate::Emulator>>,
    /// Verify mode: the emulator's predictions, checked as the thread goes.
    pub predictions: Option<Box<crate::emulate::Predictions>>,
    /// Emulate mode: the open trace's length before the entries not yet
    /// validated (see `emulate`; `ends::discard_unvalidated` cuts them).
    pub committed: Option<usize>,
    /// Emulate mode: the handlers' CPU time on the open trace so far, the
    /// running one's excepted (see `emulate::over_budget`).
    pub trace_ns: u64,
    /// Emulate mode: the open trace's last segment, proven by the process
    /// being quiet, waits for the thread's next sample to show that no
    /// wrapped application handler ran meanwhile (`emulate::settle`).
    pub unsettled: Option<Unsettled>,
    /// Emulate mode: `quiet::wrap::runs()` at the thread's last sample,
    /// and whether a wrapped handler ran in the period before the open
    /// trace's sample: then handlers run often (a timer's), a segment
    /// proven by quietness would likely be dropped, and the trace is
    /// checked at checkpoints as in a noisy process.
    pub runs_at_sample: u64,
    pub handlers_recent: bool,
    /// The thread's CPU clock when its sampling was first armed (see
    /// `threads::close`, `sampling_off_ns`).
    pub cpu_at_register: Option<u64>,
}

/// A trace's last segment, proven by quietness (wholly, or its tail past
/// the checkpoint) in a process with wrapped handlers (`quiet::wrap`),
/// held in the open trace after `committed` until the thread's next
/// sample.
#[derive(Clone, Copy, Debug)]
pub struct Unsettled {
    /// `quiet::wrap::runs()` when the segment began.
    pub runs: u64,
    /// Its entries validated at its checkpoint, and proven (all of a
    /// proven segment's; a tail's), counted once it is settled.
    pub validated: usize,
    pub proven: usize,
    /// Its steps (`values`).
    pub steps: u32,
    /// A proven tail (`proven_tails`), not a proven segment.
    pub tail: bool,
    /// How the trace ends once the segment is settled.
    pub end: crate::buffer::TraceEnd,
    /// The thread's registers where the segment (or its tail) begins: a
    /// sample that finds them unchanged came before the thread ran it.
    pub from: engine::StopRegisters,
    /// A sample found the thread there already.
    pub deferred: bool,
}

impl ThreadTrace {
    fn empty() -> ThreadTrace {
        ThreadTrace {
            sample_fd: None,
            bp_fd: None,
            bp_attr: crate::sys::blank_attr(),
            bp_armed: false,
            bp_hits_left: 0,
            period: 0,
            event_period: 0,
            skip_sample: false,
            sampling_unlimited: false,
            buffer: None,
            stops_since_sample: 0,
            cache: None,
            insn: Instruction::default(),
            last_stop: None,
            emu: None,
            predictions: None,
            awaiting: None,
            committed: None,
            trace_ns: 0,
            unsettled: None,
            runs_at_sample: 0,
            handlers_recent: false,
            cpu_at_register: None,
        }
    }
}

pub struct ThreadSlot {
    tid: AtomicI32,
    state: AtomicU8,
    /// Written when the slot is first claimed (`Tracer::claim`): the table
    /// is allocated zeroed, and a slot no thread ever had is left untouched
    /// (`ThreadSlot::zeroed_table`).
    inner: UnsafeCell<MaybeUninit<ThreadTrace>>,
    pub counters: Counters,
    /// Handler entries so far (every SIGTRAP of ours the thread took):
    /// registration tells by it whether a sample came, and was refused,
    /// before the slot was ready (`threads::register`).
    entries: AtomicU32,
    /// The application raised SIGTRAP at this thread, and no SIGTRAP of
    /// the application's has been delivered since
    /// (`handler::raise_sigtrap`).
    pub(crate) sigtrap_owed: AtomicBool,
}

// SAFETY: `inner` is only touched by the holder of the slot, as the state
// protocol in the module doc establishes.
unsafe impl Sync for ThreadSlot {}

// SAFETY: zero bytes are a free slot that no thread ever had: tid
// `TID_NONE`, state `FREE`, atomics 0, and `inner` a MaybeUninit, written
// at the slot's first claim (`Tracer::claim`).
unsafe impl bytemuck::Zeroable for ThreadSlot {}

impl ThreadSlot {
    #[cfg(test)]
    fn new() -> ThreadSlot {
        ThreadSlot {
            tid: AtomicI32::new(TID_NONE),
            state: AtomicU8::new(FREE),
            inner: UnsafeCell::new(MaybeUninit::new(ThreadTrace::empty())),
            counters: Counters::default(),
            entries: AtomicU32::new(0),
            sigtrap_owed: AtomicBool::new(false),
        }
    }

    pub fn tid(&self) -> i32 {
        self.tid.load(Ordering::Acquire)
    }

    /// The thread table, `MAX_THREADS` free slots, in a mapping of its
    /// own: fresh zero pages, written only as slots are claimed. Built
    /// slot by slot it wrote all of its 1.3 MB at the start of every
    /// process, which stayed in its RSS; from calloc, a session started
    /// after the application had freed a large block got heap memory,
    /// cleared by writing all of it (`sys::zeroed_static_slice`).
    fn zeroed_table() -> &'static [ThreadSlot] {
        // SAFETY: a zeroed slot is a free one (atomics and counters zero,
        // `inner` uninitialised until claimed).
        unsafe { crate::sys::zeroed_static_slice::<ThreadSlot>(MAX_THREADS, 64) }
    }

    /// Handler entry (see the module doc). Async-signal-safe.
    fn enter(&self) -> Entry {
        self.entries.fetch_add(1, Ordering::Relaxed);
        match self
            .state
            .compare_exchange(READY, BUSY, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Entry::Held,
            // Our own thread's handler never returned: it is ours again.
            Err(BUSY) => Entry::Abandoned,
            Err(_) => Entry::Refused,
        }
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
        // SAFETY: forwarded contract: the holder is the only accessor, and
        // a slot with a holder was claimed, whose first claim wrote it.
        unsafe { (*self.inner.get()).assume_init_mut() }
    }

    /// Takes the slot to close it (see the module doc).
    fn take_for_close(&self, closer: Closer) -> Closing {
        let t0 = std::time::Instant::now();
        let mut spins = 0u32;
        loop {
            match self
                .state
                .compare_exchange(READY, CLOSED, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Closing::Taken,
                Err(BUSY)
                    if closer == Closer::Owner
                        && self
                            .state
                            .compare_exchange(BUSY, CLOSED, Ordering::Acquire, Ordering::Relaxed)
                            .is_ok() =>
                {
                    return Closing::Taken
                }
                Err(BUSY | SETUP) => {
                    if t0.elapsed() > CLOSE_WAIT {
                        return Closing::Stuck;
                    }
                    spins += 1;
                    if spins < 100 {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
                Err(_) => return Closing::NotOpen,
            }
        }
    }
}

/// What a handler's entry found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// The slot was ready and is now held.
    Held,
    /// The previous handler of this thread never returned; the slot is
    /// held again.
    Abandoned,
    /// Not open (setting up, closing, free): the signal is ignored.
    Refused,
}

/// Who closes a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closer {
    /// A thread other than the slot's, while the slot's thread may run: a
    /// running handler is waited out, for at most [`CLOSE_WAIT`].
    Other,
    /// The slot's own thread outside any handler, or anyone once that
    /// thread is gone: no handler of it can be running, so `BUSY` means
    /// abandoned and the slot is taken.
    Owner,
}

/// The outcome of taking a slot to close it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closing {
    Taken,
    /// Free, or closed by someone else.
    NotOpen,
    /// Still busy after [`CLOSE_WAIT`]: left as it is.
    Stuck,
}

/// The process-wide tracer, created at the first session and kept for the
/// life of the process (handlers may run late, after a session ended).
pub struct Tracer {
    pub slots: &'static [ThreadSlot],
    /// One bit per slot of `slots`, set at the slot's first claim and never
    /// cleared: the scans of the table (stop, the worker's sweep, totals,
    /// a fork child) visit these slots only. Reading every slot's tid
    /// mapped the zero page under all 1.3 MB of the table, 325 page faults
    /// in every process the library started in.
    claimed: [AtomicU64; MAX_THREADS / 64],
    pub exec: &'static ExecMap,
    pub pool: Arc<BufferPool>,
    /// The heavy per-thread state, taken at a thread's first sample and
    /// given back when its slot closes.
    pub states: StatePools,
    /// Trace length N of the running session.
    pub lbr: AtomicUsize,
    /// The session's `Lookahead`.
    pub lookahead: AtomicU8,
    /// Frames per call stack of the running session (0: none).
    pub callstack: AtomicUsize,
    /// Call stacks are stack snapshots for the worker's DWARF unwinder
    /// (`unwind=dwarf`), not frame-pointer walks.
    pub unwind_dwarf: AtomicBool,
    /// Loads of validated segments are recorded with their values
    /// (`values`).
    pub values: AtomicBool,
    /// Every segment is validated at a checkpoint, even in a quiet process
    /// (`always_check`).
    pub always_check: AtomicBool,
    /// Sessions accept new threads only while this is set.
    pub running: AtomicBool,
    /// Counters of threads retired during the session.
    pub retired: Counters,
    /// Threads that found the table full.
    pub table_full: std::sync::atomic::AtomicU64,
    /// Threads traced during the session (at start and created later).
    pub threads_registered: std::sync::atomic::AtomicU64,
    /// Incremented at every start and stop: a thread registering itself
    /// checks it did so within one session.
    pub epoch: AtomicU64,
    /// Serialises claims of slots (a probe and a store: held for
    /// microseconds, never in a handler).
    claim_lock: SpinLock<()>,
}

static TRACER: OnceLock<Tracer> = OnceLock::new();

/// The tracer, if one was ever created. Async-signal-safe (an atomic load).
pub fn tracer() -> Option<&'static Tracer> {
    TRACER.get()
}

pub fn tracer_or_init() -> &'static Tracer {
    TRACER.get_or_init(Tracer::new)
}

impl Tracer {
    fn new() -> Tracer {
        Tracer {
            slots: ThreadSlot::zeroed_table(),
            claimed: [const { AtomicU64::new(0) }; MAX_THREADS / 64],
            exec: ExecMap::mapped(),
            pool: Arc::new(BufferPool::new()),
            states: StatePools::new(),
            lbr: AtomicUsize::new(32),
            lookahead: AtomicU8::new(Lookahead::Emulate as u8),
            callstack: AtomicUsize::new(0),
            unwind_dwarf: AtomicBool::new(false),
            values: AtomicBool::new(false),
            always_check: AtomicBool::new(false),
            running: AtomicBool::new(false),
            retired: Counters::default(),
            table_full: Default::default(),
            threads_registered: Default::default(),
            epoch: AtomicU64::new(0),
            claim_lock: SpinLock::new(()),
        }
    }

    /// Words of the buffer's frame store one trace's call stack may take:
    /// the depth asked for, or a stack snapshot (0 without call stacks).
    /// Async-signal-safe.
    pub fn stack_words(&self) -> usize {
        match self.callstack.load(Ordering::Relaxed) {
            0 => 0,
            _ if self.unwind_dwarf.load(Ordering::Relaxed) => crate::emulate::stack::SNAPSHOT_LEN,
            depth => depth,
        }
    }

    /// Async-signal-safe.
    pub fn lookahead(&self) -> Lookahead {
        match self.lookahead.load(Ordering::Relaxed) {
            0 => Lookahead::Paper,
            2 => Lookahead::Verify,
            _ => Lookahead::Emulate,
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

    /// Claims a slot for `tid`, leaving it in `SETUP`; None if `tid`
    /// already has one (`Err(true)`) or the table is full (`Err(false)`).
    fn claim(&self, tid: i32) -> Result<&ThreadSlot, bool> {
        self.claim_lock.with(|_| {
            if self.slot_of(tid).is_some() {
                return Err(true);
            }
            let home = Self::home(tid);
            for i in 0..MAX_THREADS {
                let slot = &self.slots[(home + i) % MAX_THREADS];
                let t = slot.tid.load(Ordering::Acquire);
                if (t == TID_NONE || t == TID_TOMBSTONE)
                    && slot
                        .state
                        .compare_exchange(FREE, SETUP, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    if t == TID_NONE {
                        // SeqCst, before the tid: a stop that clears
                        // `running` and then scans either finds the bit or
                        // is seen by the registering thread's check of
                        // `running` (see `threads::register_current_thread`).
                        let n = (home + i) % MAX_THREADS;
                        self.claimed[n / 64].fetch_or(1 << (n % 64), Ordering::SeqCst);
                        // Never claimed: its state is the zeroed table's
                        // (`ThreadSlot::zeroed_table`). SAFETY: the slot is
                        // ours (SETUP), and nothing read its state before.
                        unsafe { (*slot.inner.get()).write(ThreadTrace::empty()) };
                    }
                    slot.counters.reset();
                    slot.sigtrap_owed.store(false, Ordering::Relaxed);
                    slot.tid.store(tid, Ordering::Release);
                    return Ok(slot);
                }
            }
            Err(false)
        })
    }

    /// Gives the locks a fork child inherited held by threads it does not
    /// have back.
    pub fn reset_locks(&self) {
        self.claim_lock.force_unlock();
    }

    /// Every slot ever claimed, in table order: the only ones that can
    /// hold a tid. Never in a handler.
    pub fn claimed_slots(&self) -> impl Iterator<Item = &ThreadSlot> {
        self.claimed.iter().enumerate().flat_map(move |(w, word)| {
            let mut bits = word.load(Ordering::SeqCst);
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    &self.slots[w * 64 + b]
                })
            })
        })
    }

    /// Slots in use (held tids), for the control thread.
    pub fn live_slots(&self) -> impl Iterator<Item = &ThreadSlot> {
        self.claimed_slots().filter(|s| s.tid() > 0)
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
    tracer.reset_locks();
    for slot in tracer.claimed_slots() {
        if slot.tid() <= 0 {
            continue;
        }
        slot.state.store(CLOSED, Ordering::Release);
        // SAFETY: the child has one thread, not in a handler, and no
        // events: nobody else holds any slot, whatever its state said.
        let t = unsafe { slot.inner() };
        t.sample_fd = None;
        t.bp_fd = None;
        t.awaiting = None;
        t.committed = None;
        t.unsettled = None;
        t.bp_armed = false;
        t.bp_hits_left = 0;
        if let Some(mut b) = t.buffer.take() {
            b.clear();
            let _ = tracer.pool.free.push(b);
        }
        pools::give_back(&tracer.states, t);
        slot.counters.reset();
        slot.tid.store(TID_TOMBSTONE, Ordering::Release);
        slot.state.store(FREE, Ordering::Release);
    }
    while let Some(mut b) = tracer.pool.full.pop() {
        b.clear();
        let _ = tracer.pool.free.push(b);
    }
    tracer.retired.reset();
    crate::host::HOST.reset();
}

/// Sets what samples do from `BREAKDANCE_MEASURE` (bench-harness only; see
/// `emulate::MEASURE`): `sample-only`, `emulate-only`, `emulate-paired` in
/// a paired build (`crate::paired`), or anything else for tracing as usual.
/// Emulate mode only.
pub(crate) fn set_measure(value: Option<&str>) {
    let m = match value {
        Some("sample-only") => emulate::MEASURE_SAMPLE_ONLY,
        Some("emulate-only") => emulate::MEASURE_EMULATE_ONLY,
        #[cfg(feature = "paired")]
        Some("emulate-paired") => emulate::MEASURE_EMULATE_PAIRED,
        _ => emulate::MEASURE_OFF,
    };
    emulate::MEASURE.store(m, std::sync::atomic::Ordering::Relaxed);
}

/// `BREAKDANCE_FAILPOINT=slow-handler` (tests only; see
/// `emulate::SLOW_HANDLER`).
pub(crate) fn set_slow_handler() {
    emulate::SLOW_HANDLER.store(true, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread table is a mapping of zero pages, not written at start:
    /// a process that never has many threads never touches most of its
    /// 1.3 MB (mincore finds none of its pages resident), and a zeroed slot
    /// is a free one that no thread had. So too when the application has
    /// freed a large block first, after which calloc would hand out the
    /// block's written pages and clear them by writing.
    #[test]
    fn the_thread_table_is_untouched_until_its_slots_are_claimed() {
        // Freeing a mapped 4 MiB block raises glibc's mmap threshold past
        // the table's size; a written 2 MiB block then comes from the
        // heap, and is free (the byte after it keeps it from the top).
        drop(std::hint::black_box(vec![1u8; 4 << 20]));
        let written = std::hint::black_box(vec![1u8; 2 << 20]);
        let after = std::hint::black_box(vec![1u8; 64]);
        drop(written);
        let slots = ThreadSlot::zeroed_table();
        drop(after);
        assert_eq!(slots.len(), MAX_THREADS);
        let (resident, pages) = resident_pages(slots);
        assert!(
            resident <= 2,
            "{resident} of the table's {pages} pages resident at start"
        );
        let last = &slots[MAX_THREADS - 1];
        assert_eq!(last.tid(), TID_NONE);
        assert_eq!(last.state.load(Ordering::Relaxed), FREE);
    }

    /// Pages of `slots` resident (mincore).
    fn resident_pages(slots: &[ThreadSlot]) -> (usize, usize) {
        let page = 4096;
        let start = slots.as_ptr() as usize / page * page;
        let end = slots.as_ptr() as usize + std::mem::size_of_val(slots);
        let pages = (end - start).div_ceil(page);
        let mut vec = vec![0u8; pages];
        // SAFETY: a range of this process's allocation and a vector of one
        // byte per page.
        let rc =
            unsafe { libc::mincore(start as *mut libc::c_void, end - start, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        (vec.iter().filter(|&&b| b & 1 != 0).count(), pages)
    }

    /// The scans of the table (stop, sweep, totals: all go through
    /// `claimed_slots`) visit the claimed slots only: reading a tid in every slot mapped the zero page under
    /// the whole table, a page fault per 4 KiB in every process.
    #[test]
    fn scans_visit_claimed_slots_only() {
        let tracer: &Tracer = Box::leak(Box::new(Tracer::new()));
        let tids = [0x7ffe_0001, 0x7ffe_0002, 0x7ffe_0003];
        for tid in tids {
            tracer.claim(tid).expect("a free slot");
        }
        let mut seen: Vec<i32> = tracer.live_slots().map(ThreadSlot::tid).collect();
        seen.sort_unstable();
        assert_eq!(seen, tids);
        let _ = tracer.totals();
        let (resident, pages) = resident_pages(tracer.slots);
        assert!(
            resident <= 2 * tids.len(),
            "{resident} of the table's {pages} pages resident after the scans"
        );
    }

    fn ready_slot() -> ThreadSlot {
        let slot = ThreadSlot::new();
        slot.tid.store(42, Ordering::Relaxed);
        slot.state.store(READY, Ordering::Relaxed);
        slot
    }

    #[test]
    fn a_handler_that_never_left_is_taken_back_by_the_next() {
        let slot = ready_slot();
        assert_eq!(slot.enter(), Entry::Held);
        // No leave: the handler was left by longjmp.
        assert_eq!(slot.enter(), Entry::Abandoned);
        slot.leave();
        assert_eq!(slot.enter(), Entry::Held);
        slot.leave();
        slot.state.store(SETUP, Ordering::Relaxed);
        assert_eq!(slot.enter(), Entry::Refused);
        assert_eq!(slot.entries.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn closers_wait_a_bounded_time_and_owners_take_busy_slots() {
        let slot = ready_slot();
        assert_eq!(slot.enter(), Entry::Held);
        let t0 = std::time::Instant::now();
        assert_eq!(slot.take_for_close(Closer::Other), Closing::Stuck);
        assert!(t0.elapsed() >= CLOSE_WAIT);
        assert_eq!(slot.take_for_close(Closer::Owner), Closing::Taken);
        assert_eq!(slot.state.load(Ordering::Relaxed), CLOSED);
        slot.state.store(FREE, Ordering::Relaxed);
        assert_eq!(slot.take_for_close(Closer::Other), Closing::NotOpen);
        let ready = ready_slot();
        assert_eq!(ready.take_for_close(Closer::Other), Closing::Taken);
    }

    #[test]
    fn a_tid_claims_one_slot_only() {
        let tracer = tracer_or_init();
        let tid = 0x7fff_0001;
        let slot = tracer.claim(tid).expect("a free slot");
        assert_eq!(slot.state.load(Ordering::Relaxed), SETUP);
        assert!(matches!(tracer.claim(tid), Err(true)));
        slot.tid.store(TID_TOMBSTONE, Ordering::Release);
        slot.state.store(FREE, Ordering::Release);
    }

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
