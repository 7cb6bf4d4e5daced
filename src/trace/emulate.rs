//! The `emulate` engine (the default): each trace is one or more segments
//! the emulator predicts from an exact state, each validated at one
//! checkpoint before its entries count (see `crate::emulate`).
//!
//! Per thread the engine is in one of three states (`Awaiting`): nothing
//! (no trace open), a checkpoint (a segment's entries sit in the open
//! trace after `committed`, unvalidated), or a resume (the thread is
//! running one instruction the emulator left to the CPU). Invariants:
//! - entries past `committed` are never written: a trace that ends for any
//!   reason other than a matching checkpoint is cut back to `committed`
//!   first (`ends::discard_unvalidated`), so every entry in a closed trace was
//!   validated. `ThreadTrace::committed` is set before the emulator pushes
//!   anything, so this holds even for a handler abandoned half-way (an
//!   application handler left it by longjmp: the next one takes the slot
//!   back and closes the trace through `discard_unvalidated`);
//! - sampling stays armed while a checkpoint is pending, with a watchdog
//!   period (`events::watch_trace`): a segment whose checkpoint never
//!   comes (longjmp, a blocked thread, a signal handler) is discarded at
//!   the watchdog's sample and counted `checkpoint_unreached`; a trace that
//!   ends starts a whole period from its end.
//!
//! Contract of everything here: async-signal-safe, as `handler.rs`.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::buffer::{AbortReason, TraceEnd};
use crate::decode::RegisterFile;
use crate::emulate::{context, Outcome, SegmentEnd, Validation};
use crate::sys;

use super::counters::Counters;
use super::ends::{begin_trace, close_open_trace, discard_unvalidated, end_trace, make_room};
use super::engine::{Engine, Needs, StopRegisters, Ucontext};
use super::events::{arm_breakpoint, disarm_breakpoint, rearm_sampling, top_up_breakpoint};
use super::{Awaiting, ThreadSlot, ThreadTrace, Tracer};

pub(super) struct Emulate;

/// What a sample does, for measuring a trace's parts apart
/// (`BREAKDANCE_MEASURE`, read at start-up; bench-harness only): the
/// application's CPU with samples that do nothing, against samples that
/// emulate a trace's first segment and keep nothing, gives what the
/// emulation costs the application beyond its own time (the caches it
/// leaves cold). Neither records a trace.
pub(crate) static MEASURE: AtomicU8 = AtomicU8::new(MEASURE_OFF);
/// Samples trace as usual.
pub(crate) const MEASURE_OFF: u8 = 0;
/// Samples are counted and re-armed, nothing more.
pub(crate) const MEASURE_SAMPLE_ONLY: u8 = 1;
/// Samples emulate one segment into a counting sink, and arm nothing.
pub(crate) const MEASURE_EMULATE_ONLY: u8 = 2;

/// The sink of `MEASURE_EMULATE_ONLY`: counts, keeps nothing.
struct CountingSink(usize);

impl crate::emulate::EntrySink for CountingSink {
    fn push(&mut self, _: crate::buffer::BranchEntry) -> bool {
        self.0 += 1;
        true
    }
    fn len(&self) -> usize {
        self.0
    }
    fn truncate(&mut self, len: usize) {
        self.0 = self.0.min(len);
    }
}

/// `Emulator::run`, its time, steps and decodes counted.
fn run_counted(
    emu: &mut crate::emulate::Emulator,
    sink: &mut impl crate::emulate::EntrySink,
    wanted: usize,
    resumed: bool,
    c: &Counters,
) -> crate::emulate::Outcome {
    let e0 = sys::raw::clock_ns();
    let outcome = emu.run(sink, wanted, resumed);
    Counters::add(&c.emulation_decodes, emu.take_decodes());
    let (steps, passes) = emu.take_steps_run();
    Counters::add(&c.emulated_steps_run, steps);
    Counters::add(&c.emulated_passes, passes);
    Counters::add(&c.emulation_ns, sys::raw::clock_ns().saturating_sub(e0));
    outcome
}

/// Copies the loads of the segment just validated (its first `steps`
/// steps) to the thread's buffer, with `values` on; counts what found no
/// room.
fn record_values(t: &mut ThreadTrace, c: &Counters, steps: u32) {
    let (Some(emu), Some(buffer)) = (t.emu.as_ref(), t.buffer.as_mut()) else {
        return;
    };
    let loads = emu.values_upto(steps);
    if loads.is_empty() {
        return;
    }
    let kept = buffer.push_values(loads);
    Counters::add(&c.loads_recorded, kept as u64);
    Counters::add(&c.load_buffer_full, (loads.len() - kept) as u64);
}

/// A sample under `MEASURE` (not off): see there.
fn measure_sample(
    tracer: &Tracer,
    slot: &ThreadSlot,
    t: &mut ThreadTrace,
    uc: &Ucontext,
    needs: Needs,
) {
    let t0 = sys::raw::clock_ns();
    let c = &slot.counters;
    Counters::bump(&c.samples);
    if MEASURE.load(Ordering::Relaxed) == MEASURE_EMULATE_ONLY
        && super::pools::take(&tracer.states, t, needs)
    {
        if let Some(emu) = t.emu.as_mut() {
            context::read(uc.raw(), emu.state_mut());
            emu.begin_trace();
            let resumed = emu.state_mut().rflags & context::RF != 0;
            let lbr = tracer.lbr.load(Ordering::Relaxed);
            let _ = run_counted(emu, &mut CountingSink(0), lbr, resumed, c);
        }
    }
    rearm_sampling(t);
    Counters::add(&c.sampling_ns, sys::raw::clock_ns().saturating_sub(t0));
}

impl Engine for Emulate {
    fn on_sample(&self, tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, uc: &Ucontext) {
        on_sample(tracer, slot, t, uc, self.needs());
    }

    fn on_breakpoint(
        &self,
        tracer: &Tracer,
        slot: &ThreadSlot,
        t: &mut ThreadTrace,
        uc: &Ucontext,
    ) {
        on_breakpoint(tracer, slot, t, uc);
    }

    fn needs(&self) -> Needs {
        Needs {
            block_cache: false,
            emulator: true,
            predictions: false,
        }
    }
}

fn on_sample(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, uc: &Ucontext, needs: Needs) {
    if MEASURE.load(Ordering::Relaxed) != MEASURE_OFF {
        measure_sample(tracer, slot, t, uc, needs);
        return;
    }
    let t0 = sys::raw::clock_ns();
    let c = &slot.counters;
    Counters::bump(&c.samples);
    if t.awaiting.is_some() {
        // The thread never reached the checkpoint (or the end of the
        // instruction it was left to run) in the watchdog's period.
        discard_unvalidated(t);
        Counters::bump(&c.checkpoint_unreached);
        close_open_trace(t, c, TraceEnd::Aborted(AbortReason::CheckpointUnreached));
        make_room(tracer, slot, t);
    }
    census!(crate::census::begin());
    t.trace_ns = 0;
    // Sampling stays armed for the whole trace (see the module doc).
    if !begin_trace(tracer, slot, t, needs) {
        return;
    }
    let Some(emu) = t.emu.as_mut() else {
        end_trace(
            tracer,
            slot,
            t,
            TraceEnd::Aborted(AbortReason::UnsupportedInstruction),
        );
        return;
    };
    context::read(uc.raw(), emu.state_mut());
    emu.begin_trace();
    let resumed = emu.state_mut().rflags & context::RF != 0;
    advance(tracer, slot, t, resumed, t0);
    let spent = sys::raw::clock_ns().saturating_sub(t0);
    t.trace_ns += spent;
    Counters::add(&c.sampling_ns, spent);
}

fn on_breakpoint(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, uc: &Ucontext) {
    let t0 = sys::raw::clock_ns();
    let c = &slot.counters;
    Counters::bump(&c.breakpoints);
    census!(crate::census::resume());
    let Some(awaiting) = t.awaiting else {
        disarm_breakpoint(t);
        return;
    };
    let pc = uc.rip();
    if StopRegisters::of(uc).repeats_last(t, pc, awaiting.at()) {
        // A second delivery of the previous stop (see StopRegisters).
        Counters::bump(&c.duplicate_traps);
        return;
    }
    if pc != awaiting.at() {
        discard_unvalidated(t);
        end_trace(tracer, slot, t, TraceEnd::Aborted(AbortReason::PcMismatch));
        Counters::add(&c.breakpoint_ns, sys::raw::clock_ns().saturating_sub(t0));
        return;
    }
    match awaiting {
        Awaiting::Branch(_) => {
            // Not this engine's: a session's mode does not change while
            // its threads are traced.
            discard_unvalidated(t);
            end_trace(tracer, slot, t, TraceEnd::Aborted(AbortReason::PcMismatch));
        }
        Awaiting::Resume { .. } => {
            t.awaiting = None;
            if let Some(emu) = t.emu.as_mut() {
                context::read(uc.raw(), emu.state_mut());
            }
            advance(tracer, slot, t, true, t0);
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
                if !top_up_breakpoint(t, fd) {
                    discard_unvalidated(t);
                    end_trace(
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
            tail,
            end: segment_end,
            steps,
            ..
        } => {
            Counters::bump(&c.checkpoints);
            let verdict = match t.emu.as_mut() {
                Some(emu) => {
                    context::read(uc.raw(), emu.state_mut());
                    emu.validate_current()
                }
                None => Validation::Registers,
            };
            match verdict {
                Validation::Match => {
                    t.awaiting = None;
                    t.committed = None;
                    let open = t.buffer.as_ref().map_or(0, |b| b.open_len());
                    let tail = tail.min(open - committed);
                    Counters::add(&c.entries_recorded, (open - committed) as u64);
                    Counters::add(&c.validated_entries, (open - committed - tail) as u64);
                    Counters::add(&c.proven_entries, tail as u64);
                    if tail > 0 {
                        Counters::bump(&c.proven_tails);
                    }
                    record_values(t, c, steps);
                    match segment_end {
                        SegmentEnd::Complete => end_trace(tracer, slot, t, TraceEnd::Complete),
                        SegmentEnd::Continue => advance(tracer, slot, t, true, t0),
                        SegmentEnd::End(reason) => {
                            end_trace(tracer, slot, t, TraceEnd::Aborted(reason))
                        }
                    }
                }
                Validation::Registers | Validation::Memory => {
                    if verdict == Validation::Registers {
                        Counters::bump(&c.speculation_mismatch_registers);
                    } else {
                        Counters::bump(&c.speculation_mismatch_memory);
                    }
                    discard_unvalidated(t);
                    end_trace(
                        tracer,
                        slot,
                        t,
                        TraceEnd::Aborted(AbortReason::SpeculationMismatch),
                    );
                }
            }
        }
    }
    let spent = sys::raw::clock_ns().saturating_sub(t0);
    t.trace_ns += spent;
    Counters::add(&c.breakpoint_ns, spent);
}

/// Whether the handlers have spent more CPU on the open trace than it may
/// cost: half the sampling period, and at least [`MIN_TRACE_BUDGET_NS`]
/// (5 ms with a frequency, which sets no period). A trace costs a few
/// hundred µs at most where the emulation follows the code well; where it
/// follows a loop a few steps per stop, segment after segment, a trace
/// could cost more than the period itself, and the program would spend
/// most of its time in the handler.
/// `started` is when the running handler began (`sys::raw::clock_ns`).
fn over_budget(t: &ThreadTrace, started: u64) -> bool {
    let budget = if t.period != 0 {
        (t.period / 2).max(MIN_TRACE_BUDGET_NS)
    } else {
        5_000_000
    };
    let running = sys::raw::clock_ns().saturating_sub(started);
    t.trace_ns + running > budget
}

/// The least CPU a trace's handlers may spend on it (see [`over_budget`]):
/// with short periods, half a period would end traces that follow the
/// code well (128 branches of SQLite cost about 120 µs here).
const MIN_TRACE_BUDGET_NS: u64 = 1_000_000;

/// Emulates the next segment from the exact state in the emulator and
/// arms its checkpoint (or the end of the instruction left to the CPU), or
/// ends the trace. `started` is when the running handler began.
fn advance(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, resumed: bool, started: u64) {
    let c = &slot.counters;
    let lbr = tracer.lbr.load(Ordering::Relaxed);
    let over = over_budget(t, started);
    let (Some(emu), Some(buffer)) = (t.emu.as_mut(), t.buffer.as_mut()) else {
        end_trace(
            tracer,
            slot,
            t,
            TraceEnd::Aborted(AbortReason::UnsupportedInstruction),
        );
        return;
    };
    let committed = buffer.open_len();
    if committed >= lbr {
        end_trace(tracer, slot, t, TraceEnd::Complete);
        return;
    }
    if over {
        end_trace(
            tracer,
            slot,
            t,
            TraceEnd::Aborted(AbortReason::HandlerBudget),
        );
        return;
    }
    let wanted = lbr - committed;
    emu.set_callstack(
        tracer.callstack.load(Ordering::Relaxed),
        tracer.unwind_dwarf.load(Ordering::Relaxed),
    );
    emu.set_values(tracer.values.load(Ordering::Relaxed));
    emu.set_trust_quiet(!tracer.always_check.load(Ordering::Relaxed));
    // Before the first push: whatever happens to this handler, the entries
    // after `committed` are not the trace's until validated.
    t.committed = Some(committed);
    let outcome = run_counted(emu, &mut **buffer, wanted, resumed, c);
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
            record_values(t, c, seg.steps);
            end_trace(tracer, slot, t, TraceEnd::Complete);
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
                    tail: seg.tail_entries,
                    end: seg.end,
                    steps: seg.steps,
                },
            )
        }
        Outcome::StepOver { next } => {
            Counters::bump(&c.step_overs);
            (next, Awaiting::Resume { at: next })
        }
        Outcome::End(reason) => {
            end_trace(tracer, slot, t, TraceEnd::Aborted(reason));
            return;
        }
    };
    if arm_breakpoint(t, at) {
        t.awaiting = Some(awaiting);
    } else {
        t.awaiting = Some(awaiting);
        discard_unvalidated(t);
        end_trace(
            tracer,
            slot,
            t,
            TraceEnd::Aborted(AbortReason::BreakpointFailed),
        );
    }
}
