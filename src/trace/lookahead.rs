//! The breakpoint-per-branch look-ahead (the paper's Algorithm 1, §2) and
//! its variant:
//!
//! - `paper`: decode ahead from the sample, record direct branches, stop at
//!   the first branch needing the CPU state, evaluate it from the ucontext
//!   at the breakpoint, go on.
//! - `verify`: `paper`, with the emulator's prediction of every transfer
//!   (made from the exact state of the last stop, on live memory) checked
//!   against what the thread did: the target of each transfer, and the
//!   registers at each breakpoint stop. Recorded entries are paper's: a
//!   verify-mode profile is exact.
//!
//! Sampling stays armed while a trace is open, with a watchdog period of
//! several periods (the paper's sampling is off until the trace ends; see
//! `handler::watch_trace`). A watchdog sample that finds the trace moving
//! from stop to stop lets it go on (`samples_in_trace`); one that finds no
//! stop since the last gives it up (`breakpoint_unreached`: the thread left
//! the path by longjmp, or waits) and begins a new trace. Otherwise one
//! breakpoint the thread never reaches would end its sampling for good.
//!
//! Contract of everything here: async-signal-safe, as `handler.rs`.

use crate::buffer::{AbortReason, BranchEntry, TraceEnd};
use crate::decode::{
    BranchForm, BranchKind, DecodeFailure, Memory, Outcome, RegisterFile, SegmentEnd,
};
use crate::emulate::context;
use crate::sys;

use super::counters::Counters;
use super::handler::{
    arm_breakpoint, close_open_trace, disarm_breakpoint, end_trace, make_room, watch_trace,
    StopRegisters, Ucontext,
};
use super::{Lookahead, Pending, StackPointer, ThreadSlot, ThreadTrace, Tracer};
use crate::decode::LiveCode;

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
    tracer: &Tracer,
    slot: &ThreadSlot,
    t: &mut ThreadTrace,
    uc: &libc::ucontext_t,
) {
    let t0 = sys::raw::clock_ns();
    let c = &slot.counters;
    Counters::bump(&c.samples);
    let regs = Ucontext(uc);
    if t.pending.is_some() {
        if t.stops_since_sample > 0 {
            // The trace moved in the watchdog's period: it goes on.
            t.stops_since_sample = 0;
            Counters::bump(&c.samples_in_trace);
            watch_trace(t);
            return;
        }
        // A whole watchdog period without a stop: the thread is not coming
        // to the breakpoint. This sample begins a new trace.
        close_open_trace(t, c, TraceEnd::Aborted(AbortReason::BreakpointUnreached));
        make_room(tracer, slot, t);
    }
    t.stops_since_sample = 0;
    if t.buffer.is_none() {
        t.buffer = tracer.pool.free.pop();
    }
    match t.buffer.as_mut() {
        Some(b) => b.open_trace(),
        None => {
            Counters::bump(&c.no_free_buffer);
            super::handler::rearm_sampling(t);
            return;
        }
    }
    Counters::bump(&c.traces_started);
    watch_trace(t);
    let (pc, sp) = (regs.rip(), regs.rsp());
    if tracer.lookahead() == Lookahead::Verify {
        if let (Some(emu), Some(preds)) = (t.emu.as_mut(), t.predictions.as_mut()) {
            context::read(uc, emu.state_mut());
            emu.predict(preds);
        }
    }
    follow(tracer, slot, t, pc, StackPointer::Exact(sp));
    Counters::add(&c.sampling_ns, sys::raw::clock_ns().saturating_sub(t0));
    if regs.rflags() & context::RF != 0 && t.pending.is_some_and(|p| p.form.at == pc) {
        // The thread resumes past a debug exception at pc (a sample raised
        // while the handler of a stop there ran): the branch at pc runs
        // without trapping, so the breakpoint just armed on it would not
        // fire until the next pass. This signal is that stop.
        Counters::bump(&c.merged_stops);
        on_breakpoint(tracer, slot, t, uc);
    }
}

pub(super) fn on_breakpoint(
    tracer: &Tracer,
    slot: &ThreadSlot,
    t: &mut ThreadTrace,
    uc: &libc::ucontext_t,
) {
    let t0 = sys::raw::clock_ns();
    let c = &slot.counters;
    Counters::bump(&c.breakpoints);
    t.stops_since_sample = t.stops_since_sample.saturating_add(1);
    let Some(pending) = t.pending else {
        disarm_breakpoint(t);
        return;
    };
    let regs = Ucontext(uc);
    let now = StopRegisters::of(&regs);
    if regs.rip() != pending.form.at && t.last_stop == Some(now) {
        // A second delivery of the previous stop (see StopRegisters).
        Counters::bump(&c.duplicate_traps);
        return;
    }
    t.last_stop = Some(now);
    t.pending = None;
    let form = pending.form;
    if regs.rip() != form.at || !pending.expected_sp.admits(regs.rsp()) {
        let predicted_here = t
            .predictions
            .as_ref()
            .and_then(|p| p.peek())
            .is_some_and(|p| p.at == form.at);
        if predicted_here {
            // The emulator predicted this stop, with its exact rsp: the
            // thread did not come here as it said.
            Counters::bump(&c.verify_checked);
            Counters::bump(&c.verify_mismatches);
            Counters::bump(&c.verify_mismatched_stops);
        }
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
    if tracer.lookahead() == Lookahead::Verify {
        let predictions_left = t.predictions.as_ref().is_some_and(|p| p.remaining() > 0);
        if !predictions_left {
            // Predict afresh from this exact state: the first prediction
            // is this very branch.
            if let (Some(emu), Some(preds)) = (t.emu.as_mut(), t.predictions.as_mut()) {
                context::read(uc, emu.state_mut());
                emu.predict(preds);
            }
        }
    }
    match form.evaluate(&regs, &OwnMemory) {
        Outcome::Stop => end_trace(tracer, slot, t, TraceEnd::Aborted(AbortReason::Syscall)),
        Outcome::Continue { taken, next, sp } => {
            if form.kind != BranchKind::Syscall {
                Counters::bump(&c.dynamically_evaluated);
                check_prediction(t, c, form.at, next, Some(&regs));
            }
            if taken {
                Counters::bump(&c.dynamic_taken);
                if record(tracer, slot, t, form.at, next) {
                    Counters::add(&c.breakpoint_ns, sys::raw::clock_ns().saturating_sub(t0));
                    return;
                }
            }
            follow(tracer, slot, t, next, StackPointer::Exact(sp));
        }
    }
    Counters::add(&c.breakpoint_ns, sys::raw::clock_ns().saturating_sub(t0));
}

/// Verify mode: checks the thread's transfer at `at`, which went to
/// `next`, against the emulator's next prediction (and, at a breakpoint
/// stop, the registers it predicted there). A disagreement is counted and
/// drops the rest of the prediction; the next stop predicts afresh.
fn check_prediction(
    t: &mut ThreadTrace,
    c: &Counters,
    at: u64,
    next: u64,
    regs: Option<&Ucontext>,
) {
    let Some(preds) = t.predictions.as_mut() else {
        return;
    };
    let Some(p) = preds.take_next() else {
        return;
    };
    Counters::bump(&c.verify_checked);
    let registers_differ = regs.is_some_and(|r| {
        let gpr = std::array::from_fn(|i| r.gpr(i as u8));
        !p.registers_match(&gpr, r.rflags())
    });
    // At the predicted transfer, the registers come first: a state that
    // already differs explains any target that follows from it, and a
    // wrong flag or GPR must not pass for a wrong transfer. A transfer
    // that differs with the registers equal read a different memory word
    // (or was evaluated differently): that is what verify_mismatches
    // then singles out.
    if p.at == at && registers_differ {
        Counters::bump(&c.verify_register_mismatches);
        preds.clear();
    } else if p.at != at || p.next != next {
        Counters::bump(&c.verify_mismatches);
        preds.clear();
    }
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
    tracer: &Tracer,
    slot: &ThreadSlot,
    t: &mut ThreadTrace,
    mut pc: u64,
    mut sp: StackPointer,
) {
    let c = &slot.counters;
    let mut code = LiveCode::new(&tracer.exec);
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
        let seg = cache.lookup(&mut code, pc, generation, &mut t.insn, &mut decoded);
        if decoded {
            Counters::add(&c.decode_ns, sys::raw::clock_ns().saturating_sub(d0));
            Counters::bump(&c.segments_decoded);
        } else {
            Counters::bump(&c.segments_cached);
        }
        let sp_at_end = sp.after(seg.sp_delta);
        match seg.end {
            SegmentEnd::Direct { from, to, ret_addr } => {
                Counters::bump(&c.statically_resolved);
                check_prediction(t, c, from, to, None);
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
            SegmentEnd::Dynamic(form) => {
                if tracer.exec.in_rseq(form.at) {
                    end_trace(tracer, slot, t, TraceEnd::Aborted(AbortReason::Rseq));
                    return;
                }
                // Verify: the emulator's exact rsp at this branch, when it
                // predicted it, is what the stop must show (the walk's own
                // estimate may be only near, after an alloca).
                let expected_sp = match t.predictions.as_ref().and_then(|p| p.peek()) {
                    Some(p) if p.at == form.at => StackPointer::Exact(p.gpr[4]),
                    _ => sp_at_end,
                };
                arm_or_end(tracer, slot, t, form, expected_sp);
                return;
            }
            SegmentEnd::Fail { why, .. } => {
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
        t.pending = Some(Pending { form, expected_sp });
    } else {
        end_trace(
            tracer,
            slot,
            t,
            TraceEnd::Aborted(AbortReason::BreakpointFailed),
        );
    }
}
