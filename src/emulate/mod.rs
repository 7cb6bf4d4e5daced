//! Emulate ahead: the speculative look-ahead (`lookahead=emulate`).
//!
//! From the exact CPU state of a sample (or of a validated checkpoint) the
//! x86 semantics core ([`x86_sem`]) runs the thread's code forward on the
//! thread's real memory — fault-safe loads, stores kept in a private
//! overlay ([`memory`]) — recording the taken branches, until the trace has
//! N of them or the emulation must stop. That stretch is a *segment*. The
//! trace layer then arms the thread's one breakpoint at the pc where the
//! segment ended; when the thread gets there (the right number of times,
//! see [`visits`]) the registers and every logged memory word are compared
//! with the prediction, and only a segment that matches is kept.
//!
//! Everything here runs in the SIGTRAP handler: no allocation (the
//! per-thread [`Emulator`] is built at registration, the dispatch table
//! once per process before any signal is armed), no locks, no formatting.

pub mod code;
pub mod context;
pub mod memory;
mod predict;
pub mod stack;
pub mod values;
pub mod visits;

pub use predict::{Prediction, Predictions, MAX_PREDICTIONS};

use std::ptr::addr_of_mut;
use std::sync::OnceLock;

use x86_sem::{BranchKind, CpuModel, CpuState, InsnSource, Machine, MemError, Stop, Table};

use crate::buffer::{AbortReason, BranchEntry, TraceBuffer};
use crate::exec_map::ExecMap;
use code::Code;
use memory::{AccessError, LiveMemory, MemoryCheck, Probe};
use stack::{CallStack, Shadow, STACK_SPAN};
use values::ValueLog;
use visits::Visits;

/// Instructions one segment may emulate (bounded by the visit table).
pub const MAX_SEGMENT_INSTRUCTIONS: u32 = 2048;
/// Steps emulated past the Nth taken branch while looking for an address
/// the segment has not visited (a checkpoint there needs one hit): in a
/// loop, the loop's exit. A stop costs about [`STOP_IN_STEPS`] steps, so
/// this search pays when it saves a few stops.
pub const EXTENSION_STEPS: u32 = 512;
/// What a breakpoint stop costs, in emulated steps: about 15 µs of CPU
/// (results/benches, the stop microbenchmark) against 60–140 ns per step
/// in the handler (results/speed). Choosing a segment's checkpoint weighs
/// stops against steps with it.
const STOP_IN_STEPS: u64 = 256;
/// The most breakpoint hits a checkpoint may wait for: a segment whose end
/// needs more is cut at the arrival at its end address that needs this
/// many. Every hit is a stop, and a long wait widens the window in which an
/// asynchronous signal or another thread changes what the segment
/// predicted (a loop run until SIGALRM longjmps out of it: 118 hits per
/// checkpoint without this bound, and every checkpoint mismatched).
const MAX_CHECKPOINT_HITS: u32 = 16;
/// Exact visit counts (scans of the visit log) a first pass may make
/// looking for an arrival that needs [`MAX_CHECKPOINT_HITS`] hits: the
/// counters that prompt them can overstate a count when addresses share
/// one.
const MAX_CUT_SCANS: u32 = 8;
/// Steps a pass may run past [`MAX_SEGMENT_INSTRUCTIONS`] while its proven
/// tail holds (see `Segment::tail_entries`): a segment whose checkpoint goes
/// before the tail needs no visit counts after it. A loop that reads only
/// registers and its own stores then costs one stop per trace however few
/// branches each iteration takes.
pub const MAX_TAIL_STEPS: u32 = 8192;
/// Iterations of a rep-prefixed string instruction per emulated step.
pub const REP_LIMIT: u64 = 256;
/// The x86-64 System V red zone: below rsp, this much still belongs to
/// the function running.
const RED_ZONE: u64 = 128;
/// How far below the red zone validation treats the stack as dead: more
/// than a signal frame with the AVX-512 state and this library's handler
/// frames. A mapping other than the stack that close below rsp would need
/// a stack without a guard page.
const DEAD_STACK: u64 = 64 * 1024;

/// Whether the code under test takes its new path: in a paired build
/// (`--features paired`, see `crate::paired`) half the timed passes; in
/// any other build never (a constant, so the old path compiles away).
#[inline(always)]
#[allow(dead_code)]
pub(crate) fn variant() -> bool {
    #[cfg(feature = "paired")]
    {
        crate::paired::variant()
    }
    #[cfg(not(feature = "paired"))]
    {
        false
    }
}

/// The thread's real memory, read through the fault-safe load.
struct RealMemory;

impl Probe for RealMemory {
    #[inline]
    fn read_qword(&self, addr: u64) -> Option<u64> {
        crate::sys::probe::load_u64(addr)
    }
}

/// Memory as the emulated code sees it: see [`memory`].
pub struct SpecMemory {
    live: Box<LiveMemory>,
    exec: &'static ExecMap,
    /// The executable range last found, and the table generation it was
    /// found in: most lookups fall in the same module.
    last_range: (u64, u64, u32),
    /// The last answers of the immutable-memory table: a step's loads
    /// alternate between a few stretches (the stack, the heap, a module's
    /// constants).
    last_immutable: Stretches,
    /// As `last_immutable`, for the private writable ranges.
    last_private: Stretches,
    /// The process was quiet when the run began (see [`crate::quiet`]):
    /// its private memory changes only by the thread's own stores.
    quiet: bool,
    /// The thread's rseq area (the kernel writes it when the thread is
    /// preempted or moved): never private in that sense.
    rseq_area: (u64, u64),
    /// The brk heap as it is now, from its start to the current break: it
    /// grows faster than the table follows /proc/self/maps.
    heap: (u64, u64),
    /// A quiet run read memory the table does not know (mapped since it
    /// was made): the worker is asked to look at the maps again.
    unmapped_read: bool,
    /// Reads the step being run made of memory another thread could
    /// change (neither the segment's own stores nor immutable memory): how
    /// many, and the first one's address. A segment proves itself only
    /// without such reads, the stack slot a pop, ret or leave reads
    /// excepted (see `Segment::proven`; that slot is checked after the
    /// step).
    step_mutable_reads: u32,
    step_mutable_addr: u64,
    /// Reads and stores the step being run made, and the value of its
    /// last read: a step with one read and no store is a load (see
    /// [`values`]).
    step_reads: u32,
    step_stores: u32,
    step_value: u64,
    /// Loads refused since the last [`Emulator::take_scratch_reads`]:
    /// they needed stack bytes a signal frame lies over (see
    /// `LiveMemory::set_scratch`).
    scratch_reads: u64,
}

impl SpecMemory {
    /// The executable range holding `addr` (see `ExecMap::range_of`),
    /// remembering the last one found.
    #[inline]
    fn exec_range(&mut self, addr: u64) -> Option<(u64, u64)> {
        let (start, end, generation) = self.last_range;
        if addr >= start && addr < end && generation == self.exec.generation() {
            return Some((start, end));
        }
        let (start, end) = self.exec.range_of(addr)?;
        self.last_range = (start, end, self.exec.generation());
        Some((start, end))
    }

    /// Whether `[addr, addr + size)` is memory nothing can change (see
    /// `ExecMap::is_immutable`), remembering the stretch last asked about.
    #[inline]
    fn is_immutable(&mut self, addr: u64, size: usize) -> bool {
        let end = addr.saturating_add(size as u64);
        in_stretch(
            &mut self.last_immutable,
            self.exec,
            addr,
            end,
            ExecMap::immutable_stretch,
        )
    }

    /// Whether `[addr, addr + size)` is memory only the thread itself can
    /// change while it runs: private writable memory of a quiet process,
    /// outside its rseq area.
    #[inline]
    fn is_unshared(&mut self, addr: u64, size: usize) -> bool {
        if !self.quiet {
            return false;
        }
        let end = addr.saturating_add(size as u64);
        let (rs, re) = self.rseq_area;
        if addr < re && rs < end {
            return false;
        }
        if addr >= self.heap.0 && end <= self.heap.1 {
            return true;
        }
        in_stretch(
            &mut self.last_private,
            self.exec,
            addr,
            end,
            ExecMap::private_stretch,
        )
    }

    /// The qword at `addr` as the segment sees it, not logged (see
    /// `LiveMemory::peek`).
    fn peek(&self, addr: u64) -> Option<u64> {
        self.live.peek(&RealMemory, addr)
    }

    /// Where the return address lies when the code at `pc` has no frame
    /// set up (see `stack::unframed_return_slot`), rsp being `rsp`.
    fn unframed_return_slot(&mut self, pc: u64, rsp: u64) -> Option<u64> {
        self.exec_range(pc)?;
        let mut code = [0u8; 3];
        let n = self.exec.read_code(pc, &mut code);
        stack::unframed_return_slot(&code[..n], rsp)
    }

    /// Whether `ret` is a signal return trampoline (`stack::SIGRETURN`), in
    /// an executable mapping.
    fn is_sigreturn(&mut self, ret: u64) -> bool {
        if self.exec_range(ret).is_none() {
            return false;
        }
        let mut code = [0u8; stack::SIGRETURN.len()];
        self.exec.read_code(ret, &mut code) == code.len() && code == stack::SIGRETURN
    }

    /// Whether `ret` can be a return address: in an executable mapping,
    /// right after a call instruction (`stack::follows_call`).
    fn is_return_address(&mut self, ret: u64) -> bool {
        let Some((start, _)) = self.exec_range(ret) else {
            return false;
        };
        if ret.saturating_sub(start) < 7 {
            return false;
        }
        let mut before = [0u8; 7];
        self.exec.read_code(ret - 7, &mut before) == 7 && stack::follows_call(&before)
    }
}

impl x86_sem::Memory for SpecMemory {
    #[inline]
    fn load(&mut self, addr: u64, size: usize) -> Result<u64, MemError> {
        // Memory nothing else can change needs no log: the checkpoint has
        // nothing to check there, and a second read finds the same bytes.
        let stable = self.is_immutable(addr, size) || self.is_unshared(addr, size);
        let (value, real) = self
            .live
            .load_noting(&RealMemory, addr, size, !stable)
            .map_err(|e| match e {
                AccessError::Fault(_) => MemError::Fault { addr, write: false },
                AccessError::LogFull => MemError::Refused { addr },
                AccessError::Indeterminate(_) => {
                    self.scratch_reads += 1;
                    MemError::Refused { addr }
                }
            })?;
        self.step_reads += 1;
        self.step_value = value;
        census!(if real {
            crate::census::touch_addr(addr, size, crate::census::Part::App);
        });
        if real && !stable {
            if self.quiet && !self.unmapped_read && self.exec.is_mapped(addr) == Some(false) {
                self.unmapped_read = true;
            }
            if self.step_mutable_reads == 0 {
                self.step_mutable_addr = addr;
            }
            self.step_mutable_reads += 1;
        }
        Ok(value)
    }

    #[inline]
    fn store(&mut self, addr: u64, size: usize, value: u64) -> Result<(), MemError> {
        self.step_stores += 1;
        self.live
            .store(addr, size, value)
            .map_err(|_| MemError::Refused { addr })
    }

    /// One store of a vector or x87 operand, whole or not at all (see
    /// [`LiveMemory::store_bytes`]).
    #[inline]
    fn store_bytes(&mut self, addr: u64, buf: &[u8]) -> Result<(), MemError> {
        self.step_stores += 1;
        self.live
            .store_bytes(addr, buf)
            .map_err(|_| MemError::Refused { addr })
    }

    fn fetch(&mut self, addr: u64, buf: &mut [u8; 15]) -> usize {
        self.fetch_run(addr, buf)
    }

    fn fetch_run(&mut self, addr: u64, buf: &mut [u8]) -> usize {
        let Some((_, end)) = self.exec_range(addr) else {
            return 0;
        };
        let n = ((end - addr) as usize).min(buf.len());
        // Code is read through the fault-safe load too: a module unmapped
        // since the table was refreshed reads as not executable.
        self.exec.read_code(addr, &mut buf[..n])
    }
}

/// An `ExecMap` table's answer for an address: (inside a range, start,
/// end) of the range or gap holding it.
type StretchLookup = fn(&ExecMap, u64) -> Option<(bool, u64, u64)>;

/// Stretches of the address space a table of the [`ExecMap`] answered
/// for, as (inside a range, start, end), valid for the table's version
/// `version`: a small cache, direct-mapped by the address's 2 MiB region.
/// A segment's loads alternate between a few stretches (the stack, the
/// heap, a module's constants): with only the last stretch remembered,
/// each change of stretch cost a binary search of the table.
#[derive(Clone, Copy)]
struct Stretches {
    found: [(bool, u64, u64); STRETCHES],
    version: u32,
}

/// Entries of a [`Stretches`] cache.
const STRETCHES: usize = 8;

impl Stretches {
    /// Nothing remembered (start and end 0 hold no address).
    const EMPTY: Stretches = Stretches {
        found: [(false, 0, 0); STRETCHES],
        version: u32::MAX,
    };

    /// The entry `addr` goes in.
    #[inline(always)]
    fn slot(addr: u64) -> usize {
        ((addr >> 21) ^ (addr >> 33)) as usize % STRETCHES
    }
}

/// Whether `[addr, end)` lies in one range of a table of `exec` that
/// `lookup` reads, answered from `cache` where its entry for `addr` holds
/// it.
#[inline]
fn in_stretch(
    cache: &mut Stretches,
    exec: &ExecMap,
    addr: u64,
    end: u64,
    lookup: StretchLookup,
) -> bool {
    let current = exec.version();
    let i = Stretches::slot(addr);
    if cache.version == current {
        let (inside, start, stretch_end) = cache.found[i];
        if addr >= start && addr < stretch_end {
            return inside && end <= stretch_end;
        }
    } else {
        *cache = Stretches {
            version: current,
            ..Stretches::EMPTY
        };
    }
    let Some((inside, start, stretch_end)) = lookup(exec, addr) else {
        return false;
    };
    cache.found[i] = (inside, start, stretch_end);
    inside && end <= stretch_end
}

/// The machine the core runs in the handler.
pub struct SpecCpu {
    pub regs: CpuState,
    pub mem: SpecMemory,
}

impl Machine for SpecCpu {
    type Regs = CpuState;
    type Mem = SpecMemory;
    #[inline(always)]
    fn regs(&self) -> &CpuState {
        &self.regs
    }
    #[inline(always)]
    fn regs_mut(&mut self) -> &mut CpuState {
        &mut self.regs
    }
    #[inline(always)]
    fn mem(&mut self) -> &mut SpecMemory {
        &mut self.mem
    }
    #[inline(always)]
    fn rep_limit(&self) -> u64 {
        REP_LIMIT
    }
}

static TABLE: OnceLock<Box<Table<SpecCpu>>> = OnceLock::new();

/// The dispatch table, built on first use (in [`warm`], before any signal
/// is armed) for this CPU's model: `CpuModel::host` reads CPUID and XCR0
/// and probes the quirks once. The table (about 40 KiB) is built in place
/// on the heap, never on an application thread's stack.
///
/// The model refuses what it cannot know: a form this CPU lacks, or a
/// result that differs between CPUs and no probe settled, is a
/// [`Stop`], so a segment ends there. Segments, speculative or proven,
/// therefore never rest on a refused (guessed) result: every value they use is one the core computed as this CPU does.
fn table() -> &'static Table<SpecCpu> {
    TABLE.get_or_init(|| Table::boxed(&CpuModel::host()))
}

/// The C library's registered rseq area, as (offset from the thread
/// pointer, size); size 0 when it registered none (or is not glibc 2.35 or
/// later). Read once, in [`warm`].
fn rseq_area() -> (u64, u64) {
    static AREA: OnceLock<(u64, u64)> = OnceLock::new();
    *AREA.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name; the symbols, when
        // present, are glibc's `ptrdiff_t __rseq_offset` and `unsigned int
        // __rseq_size`, constant after startup.
        unsafe {
            let offset = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr());
            let size = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr());
            if offset.is_null() || size.is_null() {
                return (0, 0);
            }
            let size = u64::from(*size.cast::<u32>());
            if size == 0 {
                return (0, 0);
            }
            // The kernel's struct rseq is at least 32 bytes, whatever size
            // the library announces.
            (*offset.cast::<isize>() as u64, size.max(32))
        }
    })
}

/// Where the process's brk heap begins (`start_brk`, field 47 of
/// /proc/self/stat), read once in [`warm`]; None if unreadable.
fn heap_start() -> Option<u64> {
    static START: OnceLock<Option<u64>> = OnceLock::new();
    *START.get_or_init(|| crate::quiet::stat_field(&std::fs::read("/proc/self/stat").ok()?, 47))
}

/// Builds everything lazy the handlers will touch (the dispatch table, the
/// XSAVE layout, the shared decoded-code table, the rseq area's place, the
/// heap's start), before any signal is armed.
pub fn warm() {
    table();
    rseq_area();
    heap_start();
    context::warm();
    code::warm();
}

/// Where the taken branches of a segment go (the open trace).
pub trait EntrySink {
    /// Appends one; false when it cannot (the caller then stops).
    fn push(&mut self, entry: BranchEntry) -> bool;
    /// Entries so far.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Drops the entries after the first `len`.
    fn truncate(&mut self, len: usize);
}

/// The handlers' sink: the buffer's open trace.
impl EntrySink for TraceBuffer {
    fn push(&mut self, entry: BranchEntry) -> bool {
        TraceBuffer::push(self, entry)
    }
    fn len(&self) -> usize {
        self.open_len()
    }
    fn truncate(&mut self, len: usize) {
        self.truncate_open(len);
    }
}

/// Why a segment ended, and what follows a checkpoint that matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentEnd {
    /// The trace has its N taken branches.
    Complete,
    /// The emulation stopped at an instruction it could not take further
    /// (instruction budget, full log, a syscall, an instruction the core
    /// leaves to the CPU, a flag it does not know): a new segment starts
    /// from the checkpoint's exact state.
    Continue,
    /// The trace ends once the segment is validated.
    End(AbortReason),
}

/// A segment's prediction: where the thread will be, after how many hits
/// of that address, in what state.
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    /// Address of the checkpoint.
    pub at: u64,
    /// Breakpoint hits at `at` until the one the prediction is for (>= 1).
    pub hits: u32,
    /// Taken branches the segment pushed to the sink.
    pub entries: usize,
    /// Steps emulated (a rep string instruction takes one per
    /// `REP_LIMIT` iterations).
    pub steps: u32,
    pub end: SegmentEnd,
    /// The trace ends with this segment (complete, or at the step limit
    /// short of its Nth branch: `end` says which) and every read of the
    /// segment was of memory no other thread can change (immutable memory,
    /// the segment's own stores, and the stack slot a pop, ret or leave
    /// reads: saved registers and return addresses): the prediction is
    /// exact without a checkpoint.
    pub proven: bool,
    /// Entries after the checkpoint (a proven tail): the last ones, which
    /// the checkpoint's state and memory no other thread can change
    /// determine. The thread reaches the checkpoint before them, and every
    /// read after it was of the segment's own stores, immutable memory, or
    /// a pop, ret or leave slot, as for `proven`. Zero for a segment that
    /// ends at its checkpoint.
    pub tail_entries: usize,
}

/// What one call to [`Emulator::run`] produced.
#[derive(Clone, Copy, Debug)]
pub enum Outcome {
    /// A segment to validate at a checkpoint (the predicted state is in
    /// [`Emulator::predicted`]).
    Segment(Segment),
    /// The very first instruction cannot be emulated, but the thread can
    /// run it: wait for it at `next` (one breakpoint), then go on.
    StepOver { next: u64 },
    /// The very first instruction ends the trace.
    End(AbortReason),
}

/// One pass of the emulation loop.
struct Pass {
    end: SegmentEnd,
    entries: usize,
    steps: u32,
    /// The pass must be redone to stop after this many steps: the first
    /// one stopped inside an rseq critical section, or in the middle of a
    /// rep string instruction, where no checkpoint can go.
    redo: Option<(u32, SegmentEnd)>,
    /// The first step stopped.
    first: Option<Stop>,
    /// The last address the pass reached for the first time, as (steps
    /// before it, entries before it): the latest point a checkpoint with
    /// one hit can prove.
    fresh: (u32, usize),
    /// Where the Nth taken branch went, if the pass got that far.
    nth: Option<Nth>,
    /// The search for a fresh address past the Nth branch gave up.
    exhausted: bool,
    /// Every read so far was of memory no other thread can change.
    safe: bool,
    /// The pass reached the Nth branch with a proven tail: (steps, entries)
    /// before its first point, a fresh address after the last read of
    /// memory another thread could change.
    tail: Option<(u32, usize)>,
    /// A split pass (`Plan::split`): where it sealed the logs, as (address,
    /// visits before, entries before).
    split: Option<(u64, u32, usize)>,
    /// A first pass sealed the logs at the Nth branch and took the state
    /// there (`Emulator::predicted`): a checkpoint there needs no pass
    /// again.
    nth_sealed: bool,
    /// A first pass sealed the logs and took the state at an arrival that
    /// needs [`MAX_CHECKPOINT_HITS`] hits, and they are still sealed there:
    /// (address, steps before, entries before). A segment that would be cut
    /// for needing more hits ends there without a pass again.
    cut: Option<(u64, u32, usize)>,
}

/// What a pass runs to.
#[derive(Clone, Copy)]
struct Plan {
    /// Steps, and the end reported when they run out.
    limit: u32,
    at_limit: SegmentEnd,
    /// (address, n): stop on arriving at the address for the nth time.
    cut: Option<(u64, u32)>,
    /// Go on past `limit`, up to [`MAX_TAIL_STEPS`], while a proven tail
    /// holds (a first pass).
    overrun: bool,
    /// Seal the logs and take the predicted state after this many steps,
    /// then run the proven tail to the Nth branch.
    split: Option<u32>,
}

impl Plan {
    fn to(limit: u32, at_limit: SegmentEnd) -> Plan {
        Plan {
            limit,
            at_limit,
            cut: None,
            overrun: false,
            split: None,
        }
    }
}

/// The point right after the Nth taken branch.
#[derive(Clone, Copy)]
struct Nth {
    steps: u32,
    target: u64,
    /// Visits to `target` before that arrival.
    prior: u32,
}

/// One traced thread's emulator: its machine, its access to the decoded
/// code ([`code`]) and the segment's visit counts. Built at registration.
pub struct Emulator {
    cpu: SpecCpu,
    /// The run's first state, for a pass redone, when it did not come from
    /// a signal's context (see [`Emulator::run_from`]).
    start: CpuState,
    /// Where the run began: rip and rax (see [`Emulator::first_instruction`]).
    start_rip: u64,
    start_rax: u64,
    visits: Box<Visits>,
    code: Code,
    /// Steps run in every pass, kept or redone (see [`Emulator::take_steps_run`]).
    steps_run: u64,
    /// Passes run, kept or redone.
    passes_run: u64,
    /// Frames of call stack to take at the Nth branch (0: none; see
    /// [`stack`]).
    callstack_depth: usize,
    /// Take stack snapshots instead of walking frame pointers.
    snapshot_stacks: bool,
    /// The pass's calls not yet returned.
    shadow: Box<Shadow>,
    /// The stack taken at the Nth branch of the last pass.
    stack: Box<CallStack>,
    /// The state predicted at the checkpoint of the last segment.
    pub predicted: CpuState,
    /// The last pass's loads and their values (`values`).
    values: ValueLog,
    /// The run's first instruction will not trap (see [`Emulator::run`]).
    resumed: bool,
    /// See [`Emulator::set_trust_quiet`].
    trust_quiet: bool,
    /// Stack the kernel's signal frames may have written since the last
    /// segment was predicted, at the hits of its checkpoint before the
    /// last (see [`Emulator::note_trap`]): (low, high), empty when equal.
    trapped: (u64, u64),
}

impl Emulator {
    /// Builds a thread's emulator in place on the heap. Registration runs
    /// on the thread itself, whose stack may be as small as
    /// `PTHREAD_STACK_MIN` (16 KiB): the emulator (three register files of
    /// about 2.4 KiB each) and its logs are never built on the stack and
    /// moved (see ARCHITECTURE.md, "Stack budget").
    pub fn new(exec: &'static ExecMap) -> Box<Emulator> {
        /// The register file every state starts as, written from a constant.
        const INITIAL: CpuState = CpuState::new();
        let code = Code::new();
        let mut emulator = Box::<Emulator>::new_uninit();
        let p = emulator.as_mut_ptr();
        // SAFETY: `p` points to an allocation for one Emulator; every field
        // is written exactly once below before `assume_init`, through raw
        // field pointers, so no reference to uninitialised memory is made.
        unsafe {
            addr_of_mut!((*p).cpu.regs).write(INITIAL);
            addr_of_mut!((*p).cpu.mem).write(SpecMemory {
                live: LiveMemory::new(),
                exec,
                last_range: (0, 0, 0),
                last_immutable: Stretches::EMPTY,
                last_private: Stretches::EMPTY,
                quiet: false,
                rseq_area: (0, 0),
                heap: (0, 0),
                unmapped_read: false,
                step_mutable_reads: 0,
                step_mutable_addr: 0,
                step_reads: 0,
                step_stores: 0,
                step_value: 0,
                scratch_reads: 0,
            });
            addr_of_mut!((*p).start).write(INITIAL);
            addr_of_mut!((*p).start_rip).write(0);
            addr_of_mut!((*p).start_rax).write(0);
            addr_of_mut!((*p).visits).write(Visits::new());
            addr_of_mut!((*p).code).write(code);
            addr_of_mut!((*p).steps_run).write(0);
            addr_of_mut!((*p).passes_run).write(0);
            addr_of_mut!((*p).callstack_depth).write(0);
            addr_of_mut!((*p).snapshot_stacks).write(false);
            addr_of_mut!((*p).shadow).write(bytemuck::zeroed_box());
            addr_of_mut!((*p).stack).write(bytemuck::zeroed_box());
            addr_of_mut!((*p).predicted).write(INITIAL);
            addr_of_mut!((*p).values).write(ValueLog::new());
            addr_of_mut!((*p).resumed).write(false);
            addr_of_mut!((*p).trust_quiet).write(true);
            addr_of_mut!((*p).trapped).write((0, 0));
            emulator.assume_init()
        }
    }

    /// Names every field of [`Emulator`] and [`SpecCpu`] once, so that a
    /// field added to either without a write in [`Emulator::new`] is
    /// noticed here: the pattern stops compiling.
    #[allow(dead_code)]
    fn every_field_is_written_by_new(self) {
        let Emulator {
            cpu: SpecCpu { regs: _, mem: _ },
            start: _,
            start_rip: _,
            start_rax: _,
            visits: _,
            code: _,
            steps_run: _,
            passes_run: _,
            callstack_depth: _,
            snapshot_stacks: _,
            shadow: _,
            stack: _,
            predicted: _,
            values: _,
            resumed: _,
            trust_quiet: _,
            trapped: _,
        } = self;
    }

    /// The state the next [`Emulator::run`] starts from (fill it from the
    /// signal frame).
    pub fn state_mut(&mut self) -> &mut CpuState {
        &mut self.cpu.regs
    }

    /// The state the next run starts from, as read.
    pub fn state(&self) -> &CpuState {
        &self.cpu.regs
    }

    /// Frames of call stack the next runs take at the Nth branch (0: none),
    /// or (`snapshot`) a copy of the stack for the worker's DWARF
    /// unwinder.
    pub fn set_callstack(&mut self, depth: usize, snapshot: bool) {
        self.callstack_depth = depth.min(stack::MAX_FRAMES);
        self.snapshot_stacks = snapshot;
    }

    /// Whether the next runs take a quiet process's private memory as the
    /// thread's own (see [`crate::quiet`]); off, every segment that reads
    /// memory is validated at a checkpoint.
    pub fn set_trust_quiet(&mut self, on: bool) {
        self.trust_quiet = on;
    }

    /// Whether the next runs log their loads and values (see [`values`]).
    pub fn set_values(&mut self, on: bool) {
        self.values.on = on;
    }

    /// The loads, with their values, of the first `steps` steps of the
    /// last run's segment (its `Segment::steps`): empty unless
    /// [`Emulator::set_values`] turned logging on.
    pub fn values_upto(&self, steps: u32) -> &[crate::buffer::LoadValue] {
        self.values.upto(steps)
    }

    /// A new trace begins: its calls so far are not known.
    pub fn begin_trace(&mut self) {
        self.shadow.clear();
        self.stack.clear();
    }

    /// The call stack taken at the Nth branch of the last pass, if it got
    /// there with call stacks on.
    pub fn callstack(&self) -> Option<&CallStack> {
        self.stack.taken.then_some(&*self.stack)
    }

    /// Takes the call stack where the Nth branch went (`leaf`), from the
    /// predicted state: the pass's own calls, then the frame-pointer chain
    /// above them (see [`stack`]).
    fn take_stack(&mut self, leaf: u64) {
        let depth = self.callstack_depth;
        let st = &mut *self.stack;
        st.clear();
        st.taken = true;
        if self.snapshot_stacks {
            // The stack as the segment sees it at the Nth branch (its
            // stores over real memory), unwound later by the worker.
            let (rsp, rbp) = (self.cpu.regs.gpr[4], self.cpu.regs.gpr[5]);
            let mem = &self.cpu.mem;
            st.snapshot(leaf, rsp, rbp, |addr, words| {
                let n = crate::sys::probe::read_own(addr, words);
                mem.live.overlay_onto(addr, &mut words[..n]);
                n
            });
            return;
        }
        st.push(leaf, depth);
        let rsp = self.cpu.regs.gpr[4];
        // Frames of the chain count only above the last slot known; the
        // chain starts from the rbp of the outermost call known.
        let mut outer = rsp;
        let mut rbp = self.cpu.regs.gpr[5];
        for (ret, slot, rbp_at_call) in self.shadow.innermost_first() {
            if !st.push(ret, depth) {
                return;
            }
            outer = slot;
            rbp = rbp_at_call;
        }
        let (mut floor, mut top) = (rsp, rsp.saturating_add(STACK_SPAN));
        while rbp & 7 == 0 && rbp >= floor && rbp < top {
            let mem = &mut self.cpu.mem;
            let (Some(saved), Some(ret)) = (mem.peek(rbp), mem.peek(rbp + 8)) else {
                break;
            };
            if rbp + 8 > outer {
                if mem.is_sigreturn(ret) {
                    // A signal handler's frame: the kernel's signal frame
                    // begins at the return-address slot, and its
                    // ucontext holds the interrupted state. The
                    // interrupted pc is the next frame, and the walk goes
                    // on from its rbp, on its stack (maybe not this one,
                    // with sigaltstack).
                    let gregs = rbp + 8 + stack::UCONTEXT_IN_SIGFRAME + stack::GREGS_IN_UCONTEXT;
                    let greg = |mem: &SpecMemory, i: u64| mem.peek(gregs + 8 * i);
                    let (Some(i_rbp), Some(i_rsp), Some(i_rip)) = (
                        greg(mem, stack::REG_RBP),
                        greg(mem, stack::REG_RSP),
                        greg(mem, stack::REG_RIP),
                    ) else {
                        break;
                    };
                    if !st.push(i_rip, depth) {
                        break;
                    }
                    (floor, top) = (i_rsp, i_rsp.saturating_add(STACK_SPAN));
                    outer = i_rsp.saturating_sub(8);
                    rbp = i_rbp;
                    // Interrupted where its frame is not set up (at its
                    // entry, before `mov rbp, rsp`, or at its `ret`): rbp is
                    // still, or again, the caller's, and the return address
                    // lies at rsp.
                    if let Some(slot) = mem.unframed_return_slot(i_rip, i_rsp) {
                        let Some(ret) = mem.peek(slot) else {
                            break;
                        };
                        if !mem.is_return_address(ret) || !st.push(ret, depth) {
                            break;
                        }
                        outer = slot;
                    }
                    continue;
                }
                if !mem.is_return_address(ret) || !st.push(ret, depth) {
                    break;
                }
                outer = rbp + 8;
            }
            if saved <= rbp {
                break;
            }
            rbp = saved;
        }
    }

    /// A hit of the checkpoint before its last, with the thread's stack
    /// pointer `rsp`: the kernel wrote this handler's signal frame below
    /// `rsp`'s red zone, over stack the program had left. A stack slot the
    /// segment stored before and did not store again may have been
    /// overwritten there; if the program calls deeper again before the
    /// last hit, the slot is live at the checkpoint without the program
    /// having written it (recursion: qsort's msort on a thread's stack).
    /// Validation leaves such stack aside, as it does the stack below the
    /// last hit's red zone.
    pub fn note_trap(&mut self, rsp: u64) {
        let (low, high) = (rsp.saturating_sub(DEAD_STACK), rsp.saturating_sub(RED_ZONE));
        self.trapped = if self.trapped.0 == self.trapped.1 {
            (low, high)
        } else {
            (self.trapped.0.min(low), self.trapped.1.max(high))
        };
    }

    /// Checks the thread's state at the checkpoint, read into
    /// [`Emulator::state_mut`], against the prediction: registers first,
    /// then every logged memory word.
    pub fn validate_current(&self) -> Validation {
        if self.predicted.first_difference(&self.cpu.regs).is_some() {
            return Validation::Registers;
        }
        // Below the red zone the stack is dead: the kernel put this
        // checkpoint's signal frame there, over whatever the segment's
        // callees left.
        let rsp = self.cpu.regs.gpr[4];
        let mut dead = rsp.saturating_sub(DEAD_STACK)..rsp.saturating_sub(RED_ZONE);
        let (low, high) = self.trapped;
        if low != high && low <= dead.end && dead.start <= high {
            // Earlier hits' frames (`note_trap`), on the same stack: one
            // range with this one's. (On another stack, as after a switch
            // of stacks, they are left checked.)
            dead = dead.start.min(low)..dead.end.max(high);
        }
        match self.cpu.mem.live.validate(&RealMemory, dead) {
            MemoryCheck::Match => Validation::Match,
            MemoryCheck::Differs { .. } => Validation::Memory,
        }
    }

    /// Readies the state from [`Emulator::state_mut`] for a run: enters
    /// the decoded code of the current code mappings (see [`code`]), and
    /// clears what the signal frame's flags do not say (no flag is
    /// undefined at a stop; RF is the kernel's, not the program's).
    ///
    /// `frame` is where the signal frame the state was read from begins
    /// (`context::frame_start`), when the caller knows it.
    fn begin(&mut self, frame: Option<u64>) {
        self.code.enter(self.cpu.mem.exec.generation());
        // A module with rseq critical sections may read an rseq area of
        // its own, which the kernel writes; code generated at run time may
        // change under its decoded copy: in either, no memory is taken as
        // private.
        let mem = &mut self.cpu.mem;
        mem.quiet = self.trust_quiet
            && !mem.exec.has_rseq()
            && !mem.exec.has_generated_code()
            && crate::quiet::is_quiet_now();
        // What `is_unshared` reads: only a quiet run asks.
        (mem.rseq_area, mem.heap) = ((0, 0), (0, 0));
        if mem.quiet {
            let (offset, size) = rseq_area();
            if size != 0 {
                let start = self.cpu.regs.fs_base.wrapping_add(offset);
                mem.rseq_area = (start, start.saturating_add(size));
            }
            if let Some(start) = heap_start() {
                // SAFETY: brk(0) changes nothing and returns the current
                // break.
                let brk = unsafe { crate::sys::raw::syscall4(libc::SYS_brk, 0, 0, 0, 0) };
                mem.heap = (start, u64::try_from(brk).unwrap_or(0).max(start));
            }
        }
        self.settle_start();
        let rsp = self.cpu.regs.gpr[4];
        let (low, high) = (rsp.saturating_sub(DEAD_STACK), rsp.saturating_sub(RED_ZONE));
        // Below the red zone lie the kernel's signal frame for this
        // handler, which stays as the kernel wrote it until the thread
        // resumes (no handler here writes its frame), and below the frame
        // the handler's own stack, which changes under the emulation. A
        // frame on another stack (sigaltstack) leaves this one alone.
        let scratch = match frame {
            None => (low, high),
            Some(f) if f > low && f <= high => (low, f),
            Some(_) => (0, 0),
        };
        self.cpu.mem.live.set_scratch(scratch.0, scratch.1);
    }

    /// The start's registers as a pass reads them: no flag unknown, and RF
    /// (the signal frame's resume flag, see `resumed`) not an emulated bit.
    fn settle_start(&mut self) {
        self.cpu.regs.undefined = 0;
        self.cpu.regs.rflags &= !context::RF;
    }

    /// Emulates one segment from the state in [`Emulator::state_mut`],
    /// pushing its taken branches to `sink` (at most `wanted`, at least 1).
    /// `resumed` is the RF bit of the signal frame: the first instruction
    /// will run once without trapping.
    ///
    /// A pass redone starts again from a copy of that state, 2.4 KiB taken
    /// at every run; [`Emulator::run_from`] reads the signal's context
    /// again instead.
    pub fn run(&mut self, sink: &mut impl EntrySink, wanted: usize, resumed: bool) -> Outcome {
        self.start = self.cpu.regs;
        census!(crate::census::touch(
            &self.start,
            crate::census::Part::State
        ));
        self.run_with(sink, wanted, resumed, None, |e| e.cpu.regs = e.start)
    }

    /// [`Emulator::run`], from the state `context::read` made of `uc` in
    /// [`Emulator::state_mut`] (unchanged since: a handler's own context,
    /// which stays as it is while the handler runs). A pass redone reads
    /// the context again: the register file is not copied at each run,
    /// which wrote 2.4 KiB (38 lines) a trace, for the few runs that redo
    /// a pass.
    pub fn run_from(
        &mut self,
        sink: &mut impl EntrySink,
        wanted: usize,
        resumed: bool,
        uc: &libc::ucontext_t,
    ) -> Outcome {
        let frame = Some(context::frame_start(uc));
        self.run_with(sink, wanted, resumed, frame, |e| {
            context::read(uc, &mut e.cpu.regs)
        })
    }

    /// A run; `restart` puts the registers back as the run was given them
    /// (then settled again, as `begin` settles them).
    fn run_with(
        &mut self,
        sink: &mut impl EntrySink,
        wanted: usize,
        resumed: bool,
        frame: Option<u64>,
        restart: impl Fn(&mut Emulator),
    ) -> Outcome {
        self.resumed = resumed;
        self.trapped = (0, 0);
        self.begin(frame);
        let outcome = self.run_entered(sink, wanted, restart);
        self.code.leave();
        if std::mem::take(&mut self.cpu.mem.unmapped_read) {
            // Private memory mapped since the worker's last look (a large
            // allocation) would prove the segments that read it.
            self.cpu.mem.exec.request_refresh();
        }
        outcome
    }

    /// [`Emulator::run`] between entering and leaving the decoded code.
    fn run_entered(
        &mut self,
        sink: &mut impl EntrySink,
        wanted: usize,
        restart: impl Fn(&mut Emulator),
    ) -> Outcome {
        (self.start_rip, self.start_rax) = (self.cpu.regs.rip, self.cpu.regs.gpr[0]);
        let shadow = self.shadow.mark();
        let before = sink.len();
        let mut pass = self.pass(
            sink,
            wanted,
            Plan {
                overrun: true,
                ..Plan::to(MAX_SEGMENT_INSTRUCTIONS, SegmentEnd::Continue)
            },
        );
        let mut cut = None;
        let mut split = None;
        // A pass proven to its end: the trace's Nth branch, or the tail's
        // step limit short of it (see `pass`).
        let proven = pass.safe
            && matches!(
                pass.end,
                SegmentEnd::Complete | SegmentEnd::End(AbortReason::LookaheadLimit)
            )
            && pass.redo.is_none();
        if pass.redo.is_none() && pass.first.is_none() && !proven {
            // A checkpoint where the path ended may need several hits (a
            // loop); the last first-visited point needs one but proves
            // fewer entries. Take the cheaper in stops per entry. When the
            // search for a fresh address past the Nth branch failed, the
            // end is the Nth branch's target, as visited then.
            let (hits, nth_steps, end_at) = match pass.nth.filter(|_| pass.exhausted) {
                Some(nth) => (
                    self.hits_after(nth.target, nth.prior),
                    Some(nth.steps),
                    nth.target,
                ),
                None => (self.hits_at(self.cpu.regs.rip), None, self.cpu.regs.rip),
            };
            // Stops and steps per entry: the end costs its hits; the
            // fresh point one stop, this pass's steps (thrown away and
            // partly redone) and fewer entries.
            let (f_steps, f_entries) = pass.fresh;
            let end_cost = u64::from(hits) * STOP_IN_STEPS * f_entries as u64;
            let fresh_cost = (STOP_IN_STEPS + u64::from(pass.steps)) * pass.entries as u64;
            // Back at the Nth branch (sealed there) costs its extra hits;
            // a proven tail, a pass again.
            let at_nth = nth_steps.is_some() && pass.nth_sealed && hits <= MAX_CHECKPOINT_HITS;
            let tail_pays = !at_nth || u64::from(pass.steps) < u64::from(hits - 1) * STOP_IN_STEPS;
            if let Some((t_steps, _)) = pass
                .tail
                .filter(|_| (hits > 1 && tail_pays) || pass.steps > MAX_SEGMENT_INSTRUCTIONS)
            {
                // One stop, before the tail, proves every entry: the pass
                // is run again, sealing the logs there.
                split = Some(t_steps);
                pass.redo = Some((MAX_TAIL_STEPS, SegmentEnd::Complete));
            } else if hits > 1 && f_entries > 0 && fresh_cost < end_cost {
                pass.redo = Some((f_steps, SegmentEnd::Continue));
            } else if let Some((at, steps, entries)) =
                pass.cut.filter(|_| hits > MAX_CHECKPOINT_HITS)
            {
                // The pass sealed the logs where some address needed the
                // most hits allowed: the checkpoint goes there, with no
                // pass again.
                self.cpu.mem.live.rewind_to_seal();
                sink.truncate(before + entries);
                return Outcome::Segment(Segment {
                    at,
                    hits: MAX_CHECKPOINT_HITS,
                    entries,
                    steps,
                    end: SegmentEnd::Continue,
                    proven: false,
                    tail_entries: 0,
                });
            } else if hits > MAX_CHECKPOINT_HITS {
                // Cut the segment at the arrival at its end address that
                // needs the most hits allowed (one more arrival when the
                // first, at the start, does not trap).
                cut = Some((end_at, MAX_CHECKPOINT_HITS + self.free_arrivals(end_at)));
                pass.redo = Some((MAX_SEGMENT_INSTRUCTIONS, SegmentEnd::Continue));
            } else if at_nth {
                // The predicted state is the one taken at the Nth branch;
                // the logs go back to what the pass had read and stored
                // by then.
                self.cpu.mem.live.rewind_to_seal();
                return Outcome::Segment(Segment {
                    at: end_at,
                    hits,
                    entries: pass.entries,
                    steps: nth_steps.unwrap_or(pass.steps),
                    end: SegmentEnd::Complete,
                    proven: false,
                    tail_entries: 0,
                });
            } else if let Some(steps) = nth_steps {
                pass.redo = Some((steps, SegmentEnd::Complete));
            }
        }
        // At most two passes more: a split pass whose path differs from the
        // first's (memory changed between them) ends at its split point.
        for _ in 0..2 {
            let Some((steps, end)) = pass.redo else {
                break;
            };
            restart(self);
            self.settle_start();
            self.shadow.restore(shadow);
            sink.truncate(before);
            let plan = Plan {
                cut: cut.take(),
                split: split.take(),
                ..Plan::to(steps, end)
            };
            pass = self.pass(sink, wanted, plan);
        }
        if let Some(stop) = pass.first {
            return self.first_instruction(stop);
        }
        if pass.steps == 0 {
            // Redone to zero steps: the start itself is where the pass
            // cannot go on.
            return match pass.end {
                SegmentEnd::End(reason) => Outcome::End(reason),
                _ => self.first_instruction(Stop::Refused { addr: 0 }),
            };
        }
        if let Some((at, visits, entries)) = pass.split.filter(|_| pass.redo.is_none()) {
            // The checkpoint goes where the logs were sealed, with the
            // state taken there (`Emulator::predicted`).
            self.cpu.mem.live.rewind_to_seal();
            return Outcome::Segment(Segment {
                at,
                hits: self.hits_after(at, visits),
                entries: pass.entries,
                steps: pass.steps,
                end: SegmentEnd::Complete,
                proven: false,
                tail_entries: pass.entries - entries,
            });
        }
        if pass.entries >= wanted && pass.end == SegmentEnd::Continue {
            // Ended past the Nth branch (the search for a fresh address
            // met the budget or an instruction it cannot run): the trace is
            // complete, and the branches after the Nth are not the trace's.
            pass.end = SegmentEnd::Complete;
        }
        // A checkpoint where the pass ended checks everything it read and
        // stored (a seal at the Nth branch no longer matters).
        self.cpu.mem.live.unseal();
        let at = self.cpu.regs.rip;
        if !proven && pass.steps > MAX_SEGMENT_INSTRUCTIONS && !self.visits.surely_new(at) {
            // Past the visit log (a pass redone to end past its limit whose
            // path changed since): the hits there cannot be counted. (A
            // proven segment arms no checkpoint.)
            return Outcome::End(AbortReason::LookaheadLimit);
        }
        let hits = self.hits_at(at);
        if !proven {
            // Only a checkpoint reads it: a proven segment arms none, and
            // the register file is 2.4 KiB (zmm0–31) to write.
            self.predicted = self.cpu.regs;
            census!(crate::census::touch(
                &self.predicted,
                crate::census::Part::State
            ));
        }
        Outcome::Segment(Segment {
            at,
            hits,
            entries: pass.entries,
            steps: pass.steps,
            end: pass.end,
            proven,
            tail_entries: 0,
        })
    }

    /// Notes for the census every field of the emulator a pass reads but
    /// its register files, which are noted where they are copied
    /// (`start`, `predicted`) or, for the state being run, by the pass.
    #[cfg(feature = "census")]
    fn census_fields(&self) {
        use crate::census::{touch, Part::State};
        let Emulator {
            cpu: SpecCpu { regs: _, mem },
            start: _,
            start_rip,
            start_rax,
            visits,
            code,
            steps_run,
            passes_run,
            callstack_depth,
            snapshot_stacks,
            shadow,
            stack,
            predicted: _,
            values,
            resumed,
            trust_quiet,
            trapped,
        } = self;
        touch(mem, State);
        touch(start_rip, State);
        touch(start_rax, State);
        touch(visits, State);
        touch(code, State);
        touch(steps_run, State);
        touch(passes_run, State);
        touch(callstack_depth, State);
        touch(snapshot_stacks, State);
        touch(shadow, State);
        touch(stack, State);
        touch(values, State);
        touch(resumed, State);
        touch(trust_quiet, State);
        touch(trapped, State);
    }

    /// Breakpoint hits at `at` until the thread is where the pass ended: one
    /// per visit of the pass, and the last (see [`Emulator::hits_after`]).
    fn hits_at(&self, at: u64) -> u32 {
        self.hits_after(at, self.visits.count(at))
    }

    /// Breakpoint hits at `at` until the arrival after `prior` visits of the
    /// run's passes: one per arrival that traps.
    fn hits_after(&self, at: u64, prior: u32) -> u32 {
        (prior + 1 - self.free_arrivals(at)).max(1)
    }

    /// Arrivals at `at` that do not trap: the run's first instruction, when
    /// the thread resumes with RF set (`Emulator::run`'s `resumed`).
    fn free_arrivals(&self, at: u64) -> u32 {
        u32::from(self.resumed && at == self.start_rip)
    }

    /// Emulates the steps `plan` allows from the current state.
    fn pass(&mut self, sink: &mut impl EntrySink, wanted: usize, plan: Plan) -> Pass {
        census!(crate::census::touch(
            &self.cpu.regs,
            crate::census::Part::State
        ));
        census!(self.census_fields());
        self.passes_run += 1;
        let mut arrivals = 0u32;
        self.cpu.mem.live.reset();
        self.visits.reset();
        self.values.clear();
        let log_values = self.values.on;
        let callstacks = self.callstack_depth > 0;
        if callstacks {
            self.stack.clear();
        }
        let exec = self.cpu.mem.exec;
        let has_rseq = exec.has_rseq();
        let table = table();
        let mut limit = plan.limit;
        let mut entries = 0usize;
        let mut steps = 0u32;
        let mut extension = 0u32;
        let mut fresh = (0u32, 0usize);
        let mut nth: Option<Nth> = None;
        let mut safe = true;
        // The proven tail so far: its first point, a fresh address after
        // the last read another thread could change; and as it was at the
        // Nth branch.
        let mut tail: Option<(u32, usize)> = None;
        let mut tail_at_nth: Option<(u32, usize)> = None;
        let mut nth_sealed = false;
        // A first pass: where it sealed the logs at an arrival that needs
        // the most hits allowed, and the exact counts made to find it.
        let mut cut: Option<(u64, u32, usize)> = None;
        let mut cut_scans = 0u32;
        let watch_cut = plan.overrun && !callstacks;
        let mut after_taken = false;
        // A first pass past its limit: the steps it is redone to if what
        // let it go on breaks.
        let mut overran: Option<u32> = None;
        // A split pass: where it sealed the logs.
        let mut sealed: Option<(u64, u32, usize)> = None;
        // Step count at which the rep string instruction now running began.
        let mut rep_start: Option<u32> = None;
        let done = |end, entries, steps, fresh| Pass {
            end,
            entries,
            steps,
            redo: None,
            first: None,
            fresh,
            nth: None,
            exhausted: false,
            safe: false,
            tail: None,
            split: None,
            nth_sealed: false,
            cut: None,
        };
        // What each step retired: written whole by every step that
        // retires (`x86_sem::step_handled`), read only after one did.
        let mut retired = x86_sem::Retired::default();
        let mut result = 'run: loop {
            let pc = self.cpu.regs.rip;
            if plan.split == Some(steps) && sealed.is_none() && rep_start.is_none() {
                // The checkpoint's state: the tail from here is proven.
                self.seal_checkpoint(false);
                sealed = Some((pc, self.visits.count(pc), entries));
            }
            if steps == limit {
                if plan.overrun
                    && overran.is_none()
                    && rep_start.is_none()
                    && (safe || tail.is_some())
                {
                    // Where the pass ends if the tail (or, for a pass that
                    // read nothing another thread could change, the proof)
                    // breaks past here: the tail's start, or the last fresh
                    // address.
                    overran = match (tail, fresh.0) {
                        (Some((s, _)), _) => Some(s),
                        (None, 0) => Some(limit),
                        (None, s) => Some(s),
                    };
                    limit = MAX_TAIL_STEPS;
                } else if overran.is_some() && safe && rep_start.is_none() {
                    // Proven all the way to the tail's limit, short of the
                    // Nth branch (code with few taken branches: bzip2's
                    // unrolled compares, 80 steps a branch): every entry so
                    // far is exact, and the trace ends with them. Redone to
                    // its last fresh address, the pass kept a loop's first
                    // iteration of 8192 steps, and the next segment met the
                    // same loop.
                    break 'run Pass {
                        safe,
                        ..done(
                            SegmentEnd::End(AbortReason::LookaheadLimit),
                            entries,
                            steps,
                            fresh,
                        )
                    };
                } else {
                    break 'run match rep_start {
                        Some(s) => Pass {
                            redo: Some((s, plan.at_limit)),
                            ..done(plan.at_limit, entries, steps, fresh)
                        },
                        None => done(plan.at_limit, entries, steps, fresh),
                    };
                }
            }
            if has_rseq && rep_start.is_none() && exec.in_rseq(pc) {
                // A breakpoint inside the critical section would make the
                // kernel abort it: the checkpoint goes before it.
                let end = SegmentEnd::End(AbortReason::Rseq);
                break 'run Pass {
                    redo: Some((steps.saturating_sub(1), end)),
                    ..done(end, entries, steps, fresh)
                };
            }
            if let Some((at, n)) = plan.cut {
                if pc == at && rep_start.is_none() {
                    arrivals += 1;
                    if arrivals == n {
                        break 'run done(SegmentEnd::Continue, entries, steps, fresh);
                    }
                }
            }
            if entries == wanted && rep_start.is_none() {
                if sealed.is_some() {
                    break 'run Pass {
                        split: sealed,
                        ..done(SegmentEnd::Complete, entries, steps, fresh)
                    };
                }
                if safe {
                    // Nothing to check: no checkpoint, no need of a
                    // fresh address.
                    break 'run Pass {
                        safe,
                        ..done(SegmentEnd::Complete, entries, steps, fresh)
                    };
                }
                if overran.is_some() {
                    break 'run Pass {
                        tail,
                        ..done(SegmentEnd::Complete, entries, steps, fresh)
                    };
                }
                // Past the Nth branch: stop at the first fresh address.
                if self.visits.surely_new(pc) || extension == EXTENSION_STEPS {
                    break 'run Pass {
                        nth,
                        exhausted: extension == EXTENSION_STEPS,
                        ..done(SegmentEnd::Complete, entries, steps, fresh)
                    };
                }
                extension += 1;
            }
            if watch_cut && after_taken && nth.is_none() && rep_start.is_none() {
                // An arrival at a branch target (a loop's head) that needs
                // MAX_CHECKPOINT_HITS hits: should the segment need more at
                // its end, the checkpoint goes at the last such arrival
                // (see `Pass::cut`). The counters bound the visits from
                // above; a few exact counts confirm.
                let prior = MAX_CHECKPOINT_HITS - 1 + self.free_arrivals(pc);
                if self.visits.complete()
                    && cut_scans < MAX_CUT_SCANS
                    && self.visits.at_least(pc, prior)
                {
                    cut_scans += 1;
                    if self.visits.count(pc) == prior {
                        self.seal_checkpoint(true);
                        cut = Some((pc, steps, entries));
                    }
                }
            }
            let (rcx, rsp, rbp) = (
                self.cpu.regs.gpr[1],
                self.cpu.regs.gpr[4],
                self.cpu.regs.gpr[5],
            );
            self.cpu.mem.step_mutable_reads = 0;
            self.cpu.mem.step_reads = 0;
            self.cpu.mem.step_stores = 0;
            let stepped = x86_sem::step_handled(&mut self.cpu, table, &mut self.code, &mut retired);
            census!(crate::census::stack());
            self.steps_run += 1;
            // A read another thread could change ends the tail, and a pass
            // that relies on one (split, or past its limit) ends at its
            // start (below).
            let reads = self.cpu.mem.step_mutable_reads > 0;
            let unsafe_step = reads
                && (!(safe || tail.is_some() || sealed.is_some())
                    || !self.implicit_stack_read(pc, rsp, rbp));
            if unsafe_step {
                safe = false;
                tail = None;
                if overran.is_some()
                    && sealed.is_none()
                    && rep_start.is_none()
                    && self.visits.surely_new(pc)
                {
                    // Past the limit, at an address the pass had not been:
                    // a checkpoint right before it needs one hit (counted by
                    // the filter, exact when it says new) and proves all.
                    break 'run Pass {
                        redo: Some((steps, SegmentEnd::Continue)),
                        ..done(SegmentEnd::Continue, entries, steps, fresh)
                    };
                }
                if sealed.is_some() || overran.is_some() {
                    break 'run done(SegmentEnd::Continue, entries, steps, fresh);
                }
            }
            match stepped {
                Ok(()) => {
                    let r = &retired;
                    if log_values
                        && self.cpu.mem.step_reads == 1
                        && self.cpu.mem.step_stores == 0
                        && self.code.get(pc).is_some_and(|i| i.has_memory_operand())
                    {
                        self.values.push(steps, pc, self.cpu.mem.step_value);
                    }
                    if rep_start.is_none() {
                        // A rep string instruction traps once, however
                        // many steps it takes. A fresh point past the Nth
                        // branch is no place to end a segment that goes on:
                        // the branches between would be lost.
                        if self.visits.visit(pc) && entries < wanted {
                            fresh = (steps, entries);
                            if tail.is_none() && !safe && !unsafe_step && plan.split.is_none() {
                                tail = Some((steps, entries));
                            }
                        }
                    }
                    steps += 1;
                    // Only a branch is taken (x86_sem's `transfer`), and
                    // a rep string instruction that goes on again is the
                    // one step that retires at its own address untaken.
                    debug_assert!(!r.taken || r.kind != BranchKind::None);
                    after_taken = r.taken;
                    if r.next_rip == r.ip && !r.taken {
                        rep_start.get_or_insert(steps - 1);
                        continue;
                    }
                    rep_start = None;
                    if r.taken && entries < wanted {
                        if self.cpu.mem.exec_range(r.next_rip).is_none() {
                            // A branch into code no module names ends the
                            // trace unrecorded; the checkpoint at its
                            // target still proves the entries before it.
                            break 'run done(
                                SegmentEnd::End(AbortReason::OutsideMappings),
                                entries,
                                steps,
                                fresh,
                            );
                        }
                        if watch_cut {
                            self.visits.arrive(r.next_rip);
                        }
                        if !sink.push(BranchEntry {
                            from: r.ip,
                            to: r.next_rip,
                        }) {
                            break 'run done(SegmentEnd::Complete, entries, steps, fresh);
                        }
                        if callstacks {
                            match r.kind {
                                BranchKind::DirectCall | BranchKind::IndirectCall => {
                                    let regs = &self.cpu.regs;
                                    let ret = r.ip + u64::from(r.len);
                                    self.shadow.call(ret, regs.gpr[4], regs.gpr[5]);
                                }
                                BranchKind::Return => self.shadow.returned(self.cpu.regs.gpr[4]),
                                _ => {}
                            }
                        }
                        entries += 1;
                        if entries == wanted {
                            let prior = self.visits.count(r.next_rip);
                            nth = Some(Nth {
                                steps,
                                target: r.next_rip,
                                prior,
                            });
                            tail_at_nth = tail;
                            if callstacks {
                                self.take_stack(r.next_rip);
                            }
                            // A checkpoint back here would need more hits
                            // than allowed: should the search below fail,
                            // the cut's seal serves instead.
                            let too_many = self.hits_after(r.next_rip, prior) > MAX_CHECKPOINT_HITS;
                            if plan.overrun
                                && !safe
                                && overran.is_none()
                                && !(too_many && cut.is_some())
                            {
                                // The search for a fresh address goes on
                                // from here; if it fails, the checkpoint
                                // comes back here, with the logs as now.
                                self.seal_checkpoint(false);
                                nth_sealed = true;
                                cut = None;
                            }
                        }
                    }
                }
                Err(stop) => {
                    // A rep string instruction that stops keeps the
                    // iterations it finished (x86_sem's contract), and
                    // only it changes a register before a stop: when its
                    // first step did, rcx has gone down. That state is no
                    // arrival a breakpoint can meet (the CPU traps at the
                    // instruction's start, with the whole count), so the
                    // pass ends before the instruction, as for a rep that
                    // stops in a later step.
                    let partial = steps > 0 && self.cpu.regs.gpr[1] != rcx;
                    if let Some(s) = rep_start.or(partial.then_some(steps)) {
                        break 'run Pass {
                            redo: Some((s, SegmentEnd::Continue)),
                            ..done(SegmentEnd::Continue, entries, steps, fresh)
                        };
                    }
                    if steps == 0 {
                        break 'run Pass {
                            first: Some(stop),
                            ..done(SegmentEnd::Continue, 0, 0, fresh)
                        };
                    }
                    break 'run done(SegmentEnd::Continue, entries, steps, fresh);
                }
            }
        };
        if result.split.is_none() && result.redo.is_none() {
            // A pass that relied on a tail and did not finish it ends where
            // the tail began: one hit, counted exactly (it is within the
            // visit log), and a plain pass gets there again.
            let fallback = match (plan.split, overran) {
                (Some(s), _) => Some(s),
                (None, Some(s)) if result.tail.is_none() && !result.safe => Some(s),
                _ => None,
            };
            if let Some(s) = fallback {
                return Pass {
                    redo: Some((s, SegmentEnd::Continue)),
                    ..done(SegmentEnd::Continue, result.entries, result.steps, fresh)
                };
            }
            if result.entries >= wanted && result.tail.is_none() && !result.safe {
                result.tail = tail_at_nth;
            }
        }
        result.nth_sealed = nth_sealed && result.redo.is_none();
        result.cut = cut.filter(|_| result.redo.is_none() && self.cpu.mem.live.is_sealed());
        if result.nth_sealed && result.nth.is_none() {
            // Past the Nth branch the pass met its limit or an instruction
            // it cannot run before a fresh address: the search failed.
            result.nth = nth;
            result.exhausted = true;
        }
        result
    }

    /// Takes the state now as the checkpoint's prediction and seals the
    /// logs there (softly: see `LiveMemory::seal_soft`). The thread will
    /// stop here, its signal frame below this red zone: what the segment
    /// stored there, in callees that have returned, is the program's no
    /// longer, and the emulation past the checkpoint does not read it.
    fn seal_checkpoint(&mut self, soft: bool) {
        self.predicted = self.cpu.regs;
        census!(crate::census::touch(
            &self.predicted,
            crate::census::Part::State
        ));
        let live = &mut self.cpu.mem.live;
        if soft {
            live.seal_soft();
        } else {
            live.seal();
        }
        let rsp = self.cpu.regs.gpr[4];
        live.note_signal_frame(rsp.saturating_sub(DEAD_STACK), rsp.saturating_sub(RED_ZONE));
    }

    /// Whether the real reads the step at `pc` made (rsp and rbp as before
    /// it) were only the stack slot a pop, ret or leave reads (see
    /// `Segment::proven`).
    fn implicit_stack_read(&self, pc: u64, rsp: u64, rbp: u64) -> bool {
        let mem = &self.cpu.mem;
        if mem.step_mutable_reads != 1 {
            return false;
        }
        let Some(insn) = self.code.get(pc) else {
            return false;
        };
        let slot = match insn.implicit_stack_slot() {
            Some(4) => rsp,
            Some(5) => rbp,
            _ => return false,
        };
        mem.step_mutable_addr == slot
    }

    /// What to do when the first instruction of a segment stops the
    /// emulation (the state is exact here: nothing was predicted).
    fn first_instruction(&mut self, stop: Stop) -> Outcome {
        let pc = self.start_rip;
        match stop {
            Stop::Syscall => {
                if crate::decode::form::DIVERGING_SYSCALLS.contains(&self.start_rax) {
                    Outcome::End(AbortReason::Syscall)
                } else {
                    Outcome::StepOver { next: pc + 2 }
                }
            }
            Stop::Opaque | Stop::Unsupported { .. } | Stop::Refused { .. } | Stop::UnknownFlags => {
                // The CPU runs it; if it does not transfer control, the
                // next instruction is where the state is exact again.
                match self.code.lookup(pc, &mut self.cpu.mem) {
                    Ok(insn) if insn.falls_through() => Outcome::StepOver {
                        next: pc + insn.len() as u64,
                    },
                    _ => Outcome::End(AbortReason::UnsupportedInstruction),
                }
            }
            Stop::BadFetch => Outcome::End(AbortReason::OutsideMappings),
            Stop::Fault { .. } => Outcome::End(AbortReason::EmulationFault),
            Stop::Trap | Stop::DivideError => Outcome::End(AbortReason::UnsupportedInstruction),
        }
    }

    /// Whether the last run took the process's quietness for granted (its
    /// reads of private memory were the thread's own: see
    /// [`crate::quiet`]).
    pub fn ran_quiet(&self) -> bool {
        self.cpu.mem.quiet
    }

    /// Instructions decoded since the last call (the decoded code had no
    /// record of them), and the time decoding them took, for the counters.
    pub fn take_decodes(&mut self) -> (u64, u64) {
        self.code.take_decodes()
    }

    /// Loads refused since the last call because they needed stack bytes
    /// under a signal frame (see `LiveMemory::set_scratch`): each ended a
    /// pass before its instruction, where the next segment starts from the
    /// thread's exact state.
    pub fn take_scratch_reads(&mut self) -> u64 {
        std::mem::take(&mut self.cpu.mem.scratch_reads)
    }

    /// Steps emulated since the last call, in every pass, and the passes:
    /// a segment's `steps` count only the pass it kept, and a pass redone
    /// to end at an earlier checkpoint (or at an rseq section, or before a
    /// rep string instruction) ran the steps it drops too.
    pub fn take_steps_run(&mut self) -> (u64, u64) {
        (
            std::mem::take(&mut self.steps_run),
            std::mem::take(&mut self.passes_run),
        )
    }

    /// Real qwords read and qwords stored by the last segment.
    pub fn logged(&self) -> (usize, usize) {
        self.cpu.mem.live.logged()
    }
}

/// The checkpoint's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validation {
    Match,
    Registers,
    Memory,
}

#[cfg(test)]
mod stretch_tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        static LOOKUPS: Cell<u32> = const { Cell::new(0) };
    }

    /// A table of stretches of 1 MiB, every other one inside; counts the
    /// lookups.
    fn lookup(_: &ExecMap, addr: u64) -> Option<(bool, u64, u64)> {
        LOOKUPS.with(|n| n.set(n.get() + 1));
        let start = addr & !((1 << 20) - 1);
        Some((inside(addr), start, start + (1 << 20)))
    }

    fn inside(addr: u64) -> bool {
        (addr >> 20) % 2 == 0
    }

    #[test]
    fn stretches_in_turn_are_looked_up_once_each() {
        let exec = ExecMap::new();
        let mut cache = Stretches::EMPTY;
        // The stack, the heap and a module's constants, in turn, as a
        // loop's loads go (regions whose slots differ).
        let at = [0x7ffc_0000_0000u64, 0x5555_5570_0000, 0x7f00_1240_0000];
        assert_eq!(
            at.iter()
                .map(|&a| Stretches::slot(a))
                .collect::<std::collections::HashSet<_>>()
                .len(),
            3
        );
        for round in 0..10u64 {
            for &a in &at {
                let addr = a + 8 * round;
                assert_eq!(
                    in_stretch(&mut cache, &exec, addr, addr + 8, lookup),
                    inside(addr)
                );
                // Past the stretch's end: never inside.
                let end = (addr | ((1 << 20) - 1)) + 1;
                assert!(!in_stretch(&mut cache, &exec, end - 4, end + 4, lookup));
            }
        }
        assert_eq!(LOOKUPS.with(Cell::get), 3);
        // A new version of the table: looked up again.
        exec.update(&crate::exec_map::MemoryLayout::default());
        assert_eq!(
            in_stretch(&mut cache, &exec, at[0], at[0] + 8, lookup),
            inside(at[0])
        );
        assert_eq!(LOOKUPS.with(Cell::get), 4);
    }
}
