//! The SIGTRAP handler in emulate mode: each trace is one or more segments
//! the emulator predicts from an exact state, each validated at one
//! checkpoint before its entries count (see `crate::emulate`).
//!
//! Per thread the handler is in one of three states ([`Awaiting`]):
//! nothing (no trace open), a checkpoint (a segment's entries sit in the
//! open trace after `committed`, unvalidated), or a resume (the thread is
//! running one instruction the emulator left to the CPU). Invariants:
//! - entries past `committed` are never written: a trace that ends for any
//!   reason other than a matching checkpoint is cut back to `committed`
//!   first (`discard_segment`), so every entry in a closed trace was
//!   validated. `ThreadTrace::committed` is set before the emulator pushes
//!   anything, so this holds even for a handler abandoned half-way (an
//!   application handler left it by longjmp: the next one takes the slot
//!   back and closes the trace through `discard_segment`);
//! - sampling stays armed while a checkpoint is pending, with a watchdog
//!   period (`handler::watch_trace`): a segment whose checkpoint never
//!   comes (longjmp, a blocked thread, a signal handler) is discarded at
//!   the watchdog's sample and counted `checkpoint_unreached`; a trace that
//!   ends starts a whole period from its end.
//!
//! Contract of everything here: async-signal-safe, as `handler.rs`.

use std::os::fd::AsRawFd;

use crate::buffer::{AbortReason, TraceEnd};
use crate::emulate::{context, Outcome, SegmentEnd, Validation};
use crate::sys;

use super::counters::Counters;
use super::handler::{self, StopRegisters, Ucontext};
use super::{ThreadSlot, ThreadTrace, Tracer};

/// What an emulate-mode thread waits for at its breakpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Awaiting {
    /// A segment's checkpoint: the `hits`th execution of `at` is where the
    /// prediction holds; the open trace's entries after `committed` are the
    /// segment's.
    Checkpoint {
        at: u64,
        hits: u32,
        committed: usize,
        end: SegmentEnd,
    },
    /// The thread runs one instruction the emulator cannot; at `at` the
    /// state is exact again.
    Resume { at: u64 },
}

impl Awaiting {
    pub(super) fn at(self) -> u64 {
        match self {
            Awaiting::Checkpoint { at, .. } | Awaiting::Resume { at } => at,
        }
    }
}

/// Forgets what the thread was waiting for; a pending segment's entries
/// leave the open trace. Returns whether anything was pending. Also called
/// by the control thread (holding the slot) when it closes a thread.
pub(super) fn discard_segment(t: &mut ThreadTrace) -> bool {
    if let Some(committed) = t.committed.take() {
        if let Some(b) = t.buffer.as_mut() {
            b.truncate_open(committed);
        }
    }
    t.awaiting.take().is_some()
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
    if t.awaiting.is_some() {
        // The thread never reached the checkpoint (or the end of the
        // instruction it was left to run) in the watchdog's period.
        discard_segment(t);
        Counters::bump(&c.checkpoint_unreached);
        handler::close_open_trace(t, c, TraceEnd::Aborted(AbortReason::CheckpointUnreached));
        handler::make_room(tracer, slot, t);
    }
    if t.buffer.is_none() {
        t.buffer = tracer.pool.free.pop();
    }
    match t.buffer.as_mut() {
        Some(b) => b.open_trace(),
        None => {
            Counters::bump(&c.no_free_buffer);
            handler::rearm_sampling(t);
            return;
        }
    }
    Counters::bump(&c.traces_started);
    // Sampling stays armed for the whole trace (see the module doc).
    handler::watch_trace(t);
    let Some(emu) = t.emu.as_mut() else {
        end(
            tracer,
            slot,
            t,
            TraceEnd::Aborted(AbortReason::UnsupportedInstruction),
        );
        return;
    };
    context::read(uc, emu.state_mut());
    let resumed = emu.state_mut().rflags & context::RF != 0;
    advance(tracer, slot, t, resumed);
    Counters::add(&c.sampling_ns, sys::raw::clock_ns().saturating_sub(t0));
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
    let Some(awaiting) = t.awaiting else {
        handler::disarm_breakpoint(t);
        return;
    };
    let regs = Ucontext(uc);
    let now = StopRegisters::of(&regs);
    let pc = uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64;
    if pc != awaiting.at() && t.last_stop == Some(now) {
        // A second delivery of the previous stop (see StopRegisters).
        Counters::bump(&c.duplicate_traps);
        return;
    }
    t.last_stop = Some(now);
    if pc != awaiting.at() {
        discard_segment(t);
        end(tracer, slot, t, TraceEnd::Aborted(AbortReason::PcMismatch));
        Counters::add(&c.breakpoint_ns, sys::raw::clock_ns().saturating_sub(t0));
        return;
    }
    match awaiting {
        Awaiting::Resume { .. } => {
            t.awaiting = None;
            if let Some(emu) = t.emu.as_mut() {
                context::read(uc, emu.state_mut());
            }
            advance(tracer, slot, t, true);
        }
        Awaiting::Checkpoint { hits, .. } if hits > 1 => {
            // An earlier pass of the loop the segment went round. The
            // breakpoint stays; its hit limit must not run out there.
            Counters::bump(&c.checkpoint_extra_hits);
            if let Some(Awaiting::Checkpoint { hits: h, .. }) = t.awaiting.as_mut() {
                *h = hits - 1;
            }
            let fd = t.bp_fd.as_ref().map(|f| f.as_raw_fd());
            if let Some(fd) = fd {
                if !handler::top_up_breakpoint(t, fd) {
                    discard_segment(t);
                    end(
                        tracer,
                        slot,
                        t,
                        TraceEnd::Aborted(AbortReason::BreakpointFailed),
                    );
                }
            }
        }
        Awaiting::Checkpoint {
            committed,
            end: segment_end,
            ..
        } => {
            Counters::bump(&c.checkpoints);
            let verdict = match t.emu.as_mut() {
                Some(emu) => {
                    context::read(uc, emu.state_mut());
                    emu.validate_current()
                }
                None => Validation::Registers,
            };
            match verdict {
                Validation::Match => {
                    t.awaiting = None;
                    t.committed = None;
                    let open = t.buffer.as_ref().map_or(0, |b| b.open_len());
                    Counters::add(&c.entries_recorded, (open - committed) as u64);
                    Counters::add(&c.validated_entries, (open - committed) as u64);
                    match segment_end {
                        SegmentEnd::Complete => end(tracer, slot, t, TraceEnd::Complete),
                        SegmentEnd::Continue => advance(tracer, slot, t, true),
                        SegmentEnd::End(reason) => end(tracer, slot, t, TraceEnd::Aborted(reason)),
                    }
                }
                Validation::Registers | Validation::Memory => {
                    if verdict == Validation::Registers {
                        Counters::bump(&c.speculation_mismatch_registers);
                    } else {
                        Counters::bump(&c.speculation_mismatch_memory);
                    }
                    discard_segment(t);
                    end(
                        tracer,
                        slot,
                        t,
                        TraceEnd::Aborted(AbortReason::SpeculationMismatch),
                    );
                }
            }
        }
    }
    Counters::add(&c.breakpoint_ns, sys::raw::clock_ns().saturating_sub(t0));
}

/// Emulates the next segment from the exact state in the emulator and
/// arms its checkpoint (or the end of the instruction left to the CPU), or
/// ends the trace.
fn advance(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, resumed: bool) {
    let c = &slot.counters;
    let lbr = tracer.lbr.load(std::sync::atomic::Ordering::Relaxed);
    let (Some(emu), Some(buffer)) = (t.emu.as_mut(), t.buffer.as_mut()) else {
        end(
            tracer,
            slot,
            t,
            TraceEnd::Aborted(AbortReason::UnsupportedInstruction),
        );
        return;
    };
    let committed = buffer.open_len();
    if committed >= lbr {
        end(tracer, slot, t, TraceEnd::Complete);
        return;
    }
    let wanted = lbr - committed;
    // Before the first push: whatever happens to this handler, the entries
    // after `committed` are not the trace's until validated.
    t.committed = Some(committed);
    let e0 = sys::raw::clock_ns();
    let outcome = emu.run(&mut **buffer, wanted, resumed);
    Counters::add(&c.emulation_decodes, emu.take_decodes());
    Counters::add(&c.emulation_ns, sys::raw::clock_ns().saturating_sub(e0));
    let (at, awaiting) = match outcome {
        Outcome::Segment(seg) if seg.proven => {
            // Exact without a check (see `Segment::proven`): the trace is
            // complete, with no breakpoint at all.
            Counters::bump(&c.segments);
            Counters::bump(&c.segments_proven);
            Counters::add(&c.emulated_steps, seg.steps as u64);
            Counters::add(&c.entries_recorded, seg.entries as u64);
            Counters::add(&c.proven_entries, seg.entries as u64);
            t.committed = None;
            end(tracer, slot, t, TraceEnd::Complete);
            return;
        }
        Outcome::Segment(seg) => {
            Counters::bump(&c.segments);
            Counters::add(&c.emulated_steps, seg.steps as u64);
            (
                seg.at,
                Awaiting::Checkpoint {
                    at: seg.at,
                    hits: seg.hits,
                    committed,
                    end: seg.end,
                },
            )
        }
        Outcome::StepOver { next } => {
            Counters::bump(&c.step_overs);
            (next, Awaiting::Resume { at: next })
        }
        Outcome::End(reason) => {
            end(tracer, slot, t, TraceEnd::Aborted(reason));
            return;
        }
    };
    if handler::arm_breakpoint(t, at) {
        t.awaiting = Some(awaiting);
    } else {
        t.awaiting = Some(awaiting);
        discard_segment(t);
        end(
            tracer,
            slot,
            t,
            TraceEnd::Aborted(AbortReason::BreakpointFailed),
        );
    }
}

/// Ends the open trace (sampling is already armed in this mode).
fn end(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, how: TraceEnd) {
    handler::close_open_trace(t, &slot.counters, how);
    handler::make_room(tracer, slot, t);
    handler::resume_sampling(t);
}
