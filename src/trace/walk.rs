//! The breakpoint-per-branch walk (the paper's Algorithm 1, §2), shared
//! by the paper and verify engines: decode ahead from the sample, record
//! direct branches, stop at the first transfer needing the CPU state,
//! evaluate it from the ucontext at the breakpoint, go on. What verify adds
//! comes in through the [`Witness`] hooks; paper's are empty.
//!
//! Sampling stays armed while a trace is open, with a watchdog period of
//! several periods (the paper's sampling is off until the trace ends; see
//! `events::set_sampling_period`). A watchdog sample that finds the trace moving
//! from stop to stop lets it go on (`samples_in_trace`); one that finds no
//! stop since the last gives it up (`breakpoint_unreached`: the thread left
//! the path by longjmp, or waits) and begins a new trace. Otherwise one
//! breakpoint the thread never reaches would end its sampling for good.
//!
//! Contract of everything here: async-signal-safe, as `handler.rs`.

use crate::buffer::{AbortReason, BranchEntry, TraceEnd};
use crate::decode::{
    BlockEnd, BranchForm, BranchKind, DecodeFailure, Memory, RegisterFile, Resolution,
};
use crate::emulate::context;
use crate::sys;

use super::counters::Counters;
use super::ends::{begin_trace, close_open_trace, end_trace, make_room};
use super::engine::{Engine, Needs, StopRegisters, Ucontext};
use super::events::{arm_breakpoint, disarm_breakpoint};
use super::{Awaiting, Pending, StackPointer, ThreadSlot, ThreadTrace, Tracer};
use crate::decode::LiveCode;

/// What an engine built on the walk sees of it: a hook at each point
/// where verify checks the emulator against the thread. Every hook is
/// called from the handler and must be async-signal-safe.
pub(super) trait Witness: Sync {
    /// What a thread of this engine needs built at registration.
    fn needs(&self) -> Needs;

    /// At the sample that begins a trace, from its exact state.
    fn at_sample(&self, _t: &mut ThreadTrace, _uc: &Ucontext) {}

    /// At a breakpoint stop where the thread is as the walk expected,
    /// before the branch is evaluated.
    fn at_stop(&self, _t: &mut ThreadTrace, _uc: &Ucontext) {}

    /// The thread's transfer at `at` went to `next`; `regs` are the
    /// registers there when a breakpoint stopped it.
    fn transfer(
        &self,
        _t: &mut ThreadTrace,
        _c: &Counters,
        _at: u64,
        _next: u64,
        _regs: Option<&Ucontext>,
    ) {
    }

    /// The stop the walk expected at `at` came elsewhere or with another
    /// stack pointer.
    fn missed_stop(&self, _t: &mut ThreadTrace, _c: &Counters, _at: u64) {}

    /// The stack pointer the stop at `at` must show, where the walk's own
    /// estimate is `walk_sp`.
    fn expected_sp(&self, _t: &ThreadTrace, _at: u64, walk_sp: StackPointer) -> StackPointer {
        walk_sp
    }
}

/// Every walk engine is an engine: its handlers are the walk's, with its
/// hooks.
impl<W: Witness> Engine for W {
    fn on_sample(&self, tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, uc: &Ucontext) {
        on_sample(self, tracer, slot, t, uc);
    }

    fn on_breakpoint(
        &self,
        tracer: &Tracer,
        slot: &ThreadSlot,
        t: &mut ThreadTrace,
        uc: &Ucontext,
    ) {
        on_breakpoint(self, tracer, slot, t, uc);
    }

    fn needs(&self) -> Needs {
        Witness::needs(self)
    }
}

/// The process's own memory, read through the fault-safe load: the words
/// a breakpoint's branch is about to read itself (its return address, its
/// jump-table slot). A word that cannot be read reads as 0, which sends
/// the trace nowhere any module names (it then ends as outside_mappings):
/// the thread itself is about to fault on it.
struct OwnMemory;

impl Memory for OwnMemory {
    fn read(&self, addr: u64, size: u8) -> u64 {
        let lo = sys::probe::load_u64(addr & !7).unwrap_or(0);
        let off = (addr & 7) as u32;
        let value = if off as u64 + size as u64 <= 8 {
            lo >> (8 * off)
        } else {
            let hi = sys::probe::load_u64((addr & !7) + 8).unwrap_or(0);
            (lo >> (8 * off)) | (hi << (64 - 8 * off))
        };
        if size >= 8 {
            value
        } else {
            value & ((1u64 << (8 * size as u32)) - 1)
        }
    }
}

pub(super) fn on_sample(
    w: &impl Witness,
    tracer: &Tracer,
    slot: &ThreadSlot,
    t: &mut ThreadTrace,
    regs: &Ucontext,
) {
    let t0 = sys::raw::clock_ns();
    let c = &slot.counters;
    Counters::bump(&c.samples);
    if t.awaiting.is_some() {
        if t.stops_since_sample > 0 {
            // The trace moved in the watchdog's period: it goes on, with
            // a watchdog's period from here (`events::set_sampling_period`).
            t.stops_since_sample = 0;
            Counters::bump(&c.samples_in_trace);
            return;
        }
        // A whole watchdog period without a stop: the thread is not coming
        // to the breakpoint. This sample begins a new trace.
        close_open_trace(t, c, TraceEnd::Aborted(AbortReason::BreakpointUnreached));
        make_room(tracer, slot, t);
    }
    t.stops_since_sample = 0;
    if !begin_trace(tracer, slot, t, w.needs()) {
        return;
    }
    let (pc, sp) = (regs.rip(), regs.rsp());
    w.at_sample(t, regs);
    follow(w, tracer, slot, t, pc, StackPointer::Exact(sp));
    Counters::add(&c.sampling_ns, sys::raw::clock_ns().saturating_sub(t0));
    if regs.rflags() & context::RF != 0 && t.awaiting.is_some_and(|a| a.at() == pc) {
        // The thread resumes past a debug exception at pc (a sample raised
        // while the handler of a stop there ran): the branch at pc runs
        // without trapping, so the breakpoint just armed on it would not
        // fire until the next pass. This signal is that stop.
        Counters::bump(&c.merged_stops);
        on_breakpoint(w, tracer, slot, t, regs);
    }
}

pub(super) fn on_breakpoint(
    w: &impl Witness,
    tracer: &Tracer,
    slot: &ThreadSlot,
    t: &mut ThreadTrace,
    regs: &Ucontext,
) {
    let t0 = sys::raw::clock_ns();
    let c = &slot.counters;
    Counters::bump(&c.breakpoints);
    t.stops_since_sample = t.stops_since_sample.saturating_add(1);
    let Some(Awaiting::Branch(pending)) = t.awaiting else {
        disarm_breakpoint(t);
        return;
    };
    if StopRegisters::of(regs).repeats_last(t, regs.rip(), pending.form.at) {
        // A second delivery of the previous stop (see StopRegisters).
        Counters::bump(&c.duplicate_traps);
        return;
    }
    t.awaiting = None;
    let form = pending.form;
    if regs.rip() != form.at || !pending.expected_sp.admits(regs.rsp()) {
        w.missed_stop(t, c, form.at);
        let reason = if regs.rip() != form.at {
            AbortReason::PcMismatch
        } else {
            AbortReason::SpMismatch
        };
        end_trace(tracer, slot, t, TraceEnd::Aborted(reason));
        Counters::add(&c.breakpoint_ns, sys::raw::clock_ns().saturating_sub(t0));
        return;
    }
    if matches!(pending.expected_sp, StackPointer::Near(_)) {
        Counters::bump(&c.sp_windowed);
    }
    w.at_stop(t, regs);
    match form.evaluate(regs, &OwnMemory) {
        Resolution::Stop => end_trace(tracer, slot, t, TraceEnd::Aborted(AbortReason::Syscall)),
        Resolution::Continue { taken, next, sp } => {
            if form.kind != BranchKind::Syscall {
                Counters::bump(&c.dynamically_evaluated);
                w.transfer(t, c, form.at, next, Some(regs));
            }
            if taken {
                Counters::bump(&c.dynamic_taken);
                if record(tracer, slot, t, form.at, next) {
                    Counters::add(&c.breakpoint_ns, sys::raw::clock_ns().saturating_sub(t0));
                    return;
                }
            }
            follow(w, tracer, slot, t, next, StackPointer::Exact(sp));
        }
    }
    Counters::add(&c.breakpoint_ns, sys::raw::clock_ns().saturating_sub(t0));
}

/// Appends {from, to} to the open trace; returns true when the trace
/// ended (complete, or stopped at a target outside the known code).
fn record(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, from: u64, to: u64) -> bool {
    // A branch into code the profile cannot name (the vDSO, this library's
    // interposers, memory that is not a file) ends the trace unrecorded:
    // every recorded target lies in a module perf.script lists.
    if tracer.exec.range_of(to).is_none() {
        end_trace(
            tracer,
            slot,
            t,
            TraceEnd::Aborted(AbortReason::OutsideMappings),
        );
        return true;
    }
    let Some(buffer) = t.buffer.as_mut() else {
        return true;
    };
    if !buffer.push(BranchEntry { from, to }) {
        // Cannot happen after the room check; counted, never silent.
        Counters::bump(&slot.counters.buffer_overflow_entries);
        end_trace(tracer, slot, t, TraceEnd::Complete);
        return true;
    }
    Counters::bump(&slot.counters.entries_recorded);
    if buffer.open_len() >= tracer.lbr.load(std::sync::atomic::Ordering::Relaxed) {
        end_trace(tracer, slot, t, TraceEnd::Complete);
        return true;
    }
    false
}

/// Look ahead from `pc` (FindNextUnresolvedBranch): record direct branches,
/// stop at the first transfer needing the CPU state and set the breakpoint
/// on it, or end the trace.
fn follow(
    w: &impl Witness,
    tracer: &Tracer,
    slot: &ThreadSlot,
    t: &mut ThreadTrace,
    mut pc: u64,
    mut sp: StackPointer,
) {
    let c = &slot.counters;
    let mut code = LiveCode::new(tracer.exec);
    let generation = tracer.exec.generation();
    loop {
        let Some(cache) = t.cache.as_mut() else {
            end_trace(
                tracer,
                slot,
                t,
                TraceEnd::Aborted(AbortReason::UnsupportedInstruction),
            );
            return;
        };
        let mut decoded = false;
        let d0 = sys::raw::clock_ns();
        let block = cache.lookup(&mut code, pc, generation, &mut t.insn, &mut decoded);
        if decoded {
            Counters::add(&c.decode_ns, sys::raw::clock_ns().saturating_sub(d0));
            Counters::bump(&c.blocks_decoded);
        } else {
            Counters::bump(&c.blocks_cached);
        }
        let sp_at_end = sp.after(block.sp_delta);
        match block.end {
            BlockEnd::Direct { from, to, ret_addr } => {
                Counters::bump(&c.statically_resolved);
                w.transfer(t, c, from, to, None);
                if record(tracer, slot, t, from, to) {
                    return;
                }
                sp = if ret_addr.is_some() {
                    sp_at_end.after_call()
                } else {
                    sp_at_end
                };
                pc = to;
            }
            BlockEnd::Dynamic(form) => {
                if tracer.exec.in_rseq(form.at) {
                    end_trace(tracer, slot, t, TraceEnd::Aborted(AbortReason::Rseq));
                    return;
                }
                let expected_sp = w.expected_sp(t, form.at, sp_at_end);
                arm_or_end(tracer, slot, t, form, expected_sp);
                return;
            }
            BlockEnd::Fail { why, .. } => {
                let reason = match why {
                    DecodeFailure::OutsideMappings => AbortReason::OutsideMappings,
                    DecodeFailure::Unsupported => AbortReason::UnsupportedInstruction,
                    DecodeFailure::LookaheadLimit => AbortReason::LookaheadLimit,
                };
                end_trace(tracer, slot, t, TraceEnd::Aborted(reason));
                return;
            }
        }
    }
}

/// Sets the breakpoint for `form` and leaves it pending, or ends the trace
/// when the breakpoint cannot be set.
fn arm_or_end(
    tracer: &Tracer,
    slot: &ThreadSlot,
    t: &mut ThreadTrace,
    form: BranchForm,
    expected_sp: StackPointer,
) {
    if arm_breakpoint(t, form.at) {
        t.awaiting = Some(Awaiting::Branch(Pending { form, expected_sp }));
    } else {
        end_trace(
            tracer,
            slot,
            t,
            TraceEnd::Aborted(AbortReason::BreakpointFailed),
        );
    }
}
