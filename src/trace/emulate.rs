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
//!   period (`events::set_sampling_period`): a segment whose checkpoint never
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
use crate::quiet::wrap;
use crate::sys;

use super::counters::Counters;
use super::ends::{begin_trace, close_open_trace, discard_unvalidated, end_trace, make_room};
use super::engine::{Engine, Needs, StopRegisters, Ucontext};
use super::events::{arm_breakpoint, disarm_breakpoint, top_up_breakpoint};
use super::{Awaiting, ThreadSlot, ThreadTrace, Tracer, Unsettled};

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
/// Samples are counted, nothing more.
pub(crate) const MEASURE_SAMPLE_ONLY: u8 = 1;
/// Samples emulate one segment into a counting sink, and arm nothing.
pub(crate) const MEASURE_EMULATE_ONLY: u8 = 2;
/// A paired build (`--features paired`): samples emulate one segment four
/// times, the two versions of the code under test cold and warm
/// (`crate::paired`), and arm nothing.
#[cfg(feature = "paired")]
pub(crate) const MEASURE_EMULATE_PAIRED: u8 = 3;

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

/// `Emulator::run_from` the handler's context `uc` (which the emulator's
/// state was read from), its time, steps and decodes counted.
fn run_counted(
    emu: &mut crate::emulate::Emulator,
    sink: &mut impl crate::emulate::EntrySink,
    wanted: usize,
    resumed: bool,
    uc: &Ucontext,
    c: &Counters,
) -> crate::emulate::Outcome {
    let e0 = sys::raw::clock_ns();
    let outcome = emu.run_from(sink, wanted, resumed, uc.raw());
    let (decodes, decode_ns) = emu.take_decodes();
    Counters::add(&c.emulation_decodes, decodes);
    Counters::add(&c.indeterminate_loads, emu.take_scratch_reads());
    Counters::add(&c.decode_ns, decode_ns);
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
            let resumed = emu.state().rflags & context::RF != 0;
            let lbr = tracer.lbr.load(Ordering::Relaxed);
            let _ = run_counted(emu, &mut CountingSink(0), lbr, resumed, uc, c);
        }
    }
    #[cfg(feature = "paired")]
    if MEASURE.load(Ordering::Relaxed) == MEASURE_EMULATE_PAIRED
        && super::pools::take(&tracer.states, t, needs)
    {
        if let Some(emu) = t.emu.as_mut() {
            let lbr = tracer.lbr.load(Ordering::Relaxed);
            crate::paired::sample(|| {
                context::read(uc.raw(), emu.state_mut());
                emu.begin_trace();
                let resumed = emu.state().rflags & context::RF != 0;
                let e0 = sys::raw::clock_ns();
                let _ = emu.run_from(&mut CountingSink(0), lbr, resumed, uc.raw());
                let ns = sys::raw::clock_ns().saturating_sub(e0);
                let _ = emu.take_decodes();
                (ns, emu.take_steps_run().0)
            });
        }
    }
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
    if let Some(u) = t.unsettled.take() {
        let unmoved = StopRegisters::of(uc).same_place(&u.from);
        if unmoved && !u.deferred {
            // The sample came as the handler that proved the segment
            // returned (it fell due while that handler ran): the thread
            // has run none of the segment yet, and a handler pending with
            // it would run next. Settled at the next sample, a whole
            // period away (`events::set_sampling_period`).
            t.unsettled = Some(Unsettled {
                deferred: true,
                ..u
            });
            Counters::bump(&c.samples_in_trace);
            Counters::add(&c.sampling_ns, sys::raw::clock_ns().saturating_sub(t0));
            return;
        }
        settle(tracer, slot, t, u, unmoved, uc.rip());
    }
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
    let runs = wrap::runs();
    t.handlers_recent = runs != t.runs_at_sample;
    t.runs_at_sample = runs;
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
    let resumed = emu.state().rflags & context::RF != 0;
    advance(tracer, slot, t, resumed, t0, uc);
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
            advance(tracer, slot, t, true, t0, uc);
        }
        Awaiting::Checkpoint { hits, .. } if hits > 1 => {
            // An earlier pass of the loop the segment went round. The
            // breakpoint stays; its hit limit must not run out there.
            Counters::bump(&c.checkpoint_extra_hits);
            if let Some(Awaiting::Checkpoint { hits: h, .. }) = t.awaiting.as_mut() {
                *h = hits - 1;
            }
            if let Some(emu) = t.emu.as_mut() {
                emu.note_trap(uc.gpr(crate::decode::form::RSP));
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
            runs,
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
            // The segment read memory as the thread's own, and a handler
            // ran in between: nothing proves those reads.
            let handler_ran = runs.is_some_and(|r| r != wrap::runs());
            match verdict {
                _ if handler_ran => {
                    discard_unvalidated(t);
                    end_trace(
                        tracer,
                        slot,
                        t,
                        TraceEnd::Aborted(AbortReason::SignalHandler),
                    );
                }
                Validation::Match => {
                    t.awaiting = None;
                    let open = t.buffer.as_ref().map_or(0, |b| b.open_len());
                    let tail = tail.min(open - committed);
                    if let (Some(r), true) = (runs, tail > 0) {
                        // Its tail runs on past the checkpoint, proven by
                        // quietness: settled at the next sample. (Only a
                        // segment that completes the trace has a tail.)
                        debug_assert_eq!(segment_end, SegmentEnd::Complete);
                        hold_unsettled(
                            t,
                            Unsettled {
                                runs: r,
                                validated: open - committed - tail,
                                proven: tail,
                                steps,
                                tail: true,
                                end: TraceEnd::Complete,
                                from: StopRegisters::of(uc),
                                deferred: false,
                            },
                        );
                    } else {
                        keep_segment(t, c, open - committed - tail, tail, tail > 0, steps);
                        match segment_end {
                            SegmentEnd::Complete => end_trace(tracer, slot, t, TraceEnd::Complete),
                            SegmentEnd::Continue => advance(tracer, slot, t, true, t0, uc),
                            SegmentEnd::End(reason) => {
                                end_trace(tracer, slot, t, TraceEnd::Aborted(reason))
                            }
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

/// Makes the entries after `committed` the trace's: `validated` at a
/// checkpoint, then `proven` (a proven segment's, or a proven `tail`'s),
/// counted, with the loads of the segment's `steps` (`values`).
fn keep_segment(
    t: &mut ThreadTrace,
    c: &Counters,
    validated: usize,
    proven: usize,
    tail: bool,
    steps: u32,
) {
    t.committed = None;
    Counters::add(&c.entries_recorded, (validated + proven) as u64);
    Counters::add(&c.validated_entries, validated as u64);
    Counters::add(&c.proven_entries, proven as u64);
    if tail {
        Counters::bump(&c.proven_tails);
    }
    record_values(t, c, steps);
}

/// How a trace whose last segment is proven ends: complete, or at the
/// step limit short of its Nth branch (`Segment::proven`).
fn proven_end(end: SegmentEnd) -> TraceEnd {
    match end {
        SegmentEnd::End(reason) => TraceEnd::Aborted(reason),
        SegmentEnd::Complete | SegmentEnd::Continue => TraceEnd::Complete,
    }
}

/// Leaves the open trace's last segment in it, after `committed`, until
/// the thread's next sample settles it ([`settle`]): no breakpoint, and
/// the next sample a whole period away.
fn hold_unsettled(t: &mut ThreadTrace, u: Unsettled) {
    t.unsettled = Some(u);
    disarm_breakpoint(t);
    if SLOW_HANDLER.load(Ordering::Relaxed) && t.period != 0 {
        let until = sys::thread_cpu_ns().saturating_add(10 * t.period);
        while !sys::sigtrap_pending() && sys::thread_cpu_ns() < until {
            std::hint::spin_loop();
        }
    }
}

/// Set by `BREAKDANCE_FAILPOINT=slow-handler` (for tests only): a handler
/// that leaves a segment to be settled then spins until the next sample
/// falls due (ten sampling periods of the thread's CPU at most), so that
/// the sample comes as it returns, as it does under load or on a slow
/// machine.
pub(crate) static SLOW_HANDLER: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Settles the open trace's last segment, proven (wholly or past its
/// checkpoint) by the process being quiet (see [`Unsettled`]), at the
/// thread's next sample: the thread is past it (a segment holds no system
/// call and a few thousand instructions at most; the sample comes a period
/// of the thread's CPU after the segment began, a millisecond or so, and
/// one that comes before the thread ran any of it is told apart in
/// `on_sample`). A wrapped handler that ran since the segment began may
/// have run inside it. The trace closes with the segment's entries if none
/// ran, without them (`signal_handler`) if one did; a segment the thread
/// has still not begun at a second sample is dropped (`segments_unsettled`,
/// the trace ending `checkpoint_unreached`).
/// `unmoved`: the sample finds the registers of `u.from`; `pc`, where it
/// interrupted the thread.
fn settle(
    tracer: &Tracer,
    slot: &ThreadSlot,
    t: &mut ThreadTrace,
    u: Unsettled,
    unmoved: bool,
    pc: u64,
) {
    let c = &slot.counters;
    if unmoved {
        discard_unvalidated(t);
        Counters::bump(&c.segments_unsettled);
        close_open_trace(t, c, TraceEnd::Aborted(AbortReason::CheckpointUnreached));
    } else {
        // A handler ran, or the sample came as one was entered: the
        // kernel had set its frame up over the thread's state, and it
        // would run next.
        let handler = u.runs != wrap::runs() || wrap::is_entering(pc);
        close_settled(t, c, u, handler);
    }
    make_room(tracer, slot, t);
}

/// Closes the open trace with its unsettled segment `u`, which the thread
/// is past: without its entries (`signal_handler`) if a wrapped handler
/// may have run inside it, else with them, as the segment ended it.
fn close_settled(t: &mut ThreadTrace, c: &Counters, u: Unsettled, handler: bool) {
    if handler {
        discard_unvalidated(t);
        close_open_trace(t, c, TraceEnd::Aborted(AbortReason::SignalHandler));
    } else {
        Counters::bump(&c.segments_settled);
        keep_segment(t, c, u.validated, u.proven, u.tail, u.steps);
        close_open_trace(t, c, u.end);
    }
}

/// Settles the open trace's unsettled last segment (if any) when the
/// thread is known to be past it without a sample: it is gone (it ended
/// by its own exit system call, and a segment holds none), or it is the
/// thread calling here, outside any handler of ours (the library's code
/// is in no traced module, so a segment ends before it). The segment's
/// entries are kept unless a wrapped handler ran since it began; the trace
/// closes as the segment ended it. The caller then closes the slot.
pub(super) fn settle_passed(t: &mut ThreadTrace, c: &Counters) {
    if let Some(u) = t.unsettled.take() {
        close_settled(t, c, u, u.runs != wrap::runs());
    }
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
/// ends the trace. `started` is when the running handler began; `uc`, its
/// context, which the emulator's state was read from: the thread's
/// registers where the segment begins.
fn advance(
    tracer: &Tracer,
    slot: &ThreadSlot,
    t: &mut ThreadTrace,
    resumed: bool,
    started: u64,
    uc: &Ucontext,
) {
    let from = StopRegisters::of(uc);
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
    emu.set_trust_quiet(!tracer.always_check.load(Ordering::Relaxed) && !t.handlers_recent);
    // Before the first push: whatever happens to this handler, the entries
    // after `committed` are not the trace's until validated.
    t.committed = Some(committed);
    // No application handler runs while this one does (they are blocked):
    // one that runs from here on runs within the segment.
    let runs = wrap::runs();
    let outcome = run_counted(emu, &mut **buffer, wanted, resumed, uc, c);
    // A segment that took the process's quietness for granted, while
    // wrapped handlers could have run in it, holds only if none did.
    let runs = (emu.ran_quiet() && wrap::any_wrapped()).then_some(runs);
    let (at, awaiting) = match outcome {
        Outcome::Segment(seg) if seg.proven => {
            // Exact without a check (see `Segment::proven`): the trace
            // ends, with no breakpoint at all; where wrapped handlers
            // could have run in it, once the thread's next sample settles
            // it (`settle`).
            Counters::bump(&c.segments);
            Counters::bump(&c.segments_proven);
            Counters::add(&c.emulated_steps, seg.steps as u64);
            let end = proven_end(seg.end);
            match runs {
                Some(runs) => hold_unsettled(
                    t,
                    Unsettled {
                        runs,
                        validated: 0,
                        proven: seg.entries,
                        steps: seg.steps,
                        tail: false,
                        end,
                        from,
                        deferred: false,
                    },
                ),
                None => {
                    keep_segment(t, c, 0, seg.entries, false, seg.steps);
                    end_trace(tracer, slot, t, end);
                }
            }
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
                    runs,
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
