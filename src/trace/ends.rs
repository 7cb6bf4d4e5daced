//! How a trace begins and ends, in every mode. It begins in a buffer from
//! the pool. It ends: the open trace is closed in its buffer with how it
//! ended (its unvalidated entries dropped first), the breakpoint is
//! disarmed, and the buffer is swapped when it has no room for another
//! trace. The sampling event follows as the handler returns
//! (`events::set_sampling_period`): the watchdog's period while a trace waits at a
//! stop, else a whole period from the trace's end. Async-signal-safe;
//! `close_open_trace` is also the control thread's, holding the slot.

use std::sync::atomic::Ordering;

use crate::buffer::{AbortReason, TraceEnd};
use crate::sync::Doorbell;

use super::counters::Counters;
use super::engine::Needs;
use super::events::disarm_breakpoint;
use super::{Awaiting, ThreadSlot, ThreadTrace, Tracer};

/// Opens a trace at a sample: in the thread's buffer (a free one from the
/// pool if it has none), counted. A thread's first sample takes what its
/// mode needs from the pools too (see `pools`). False, with the next
/// sample a whole period away, when a pool is empty (counted
/// `no_free_state` or `no_free_buffer`). `needs` is the calling engine's
/// (`Engine::needs`).
pub(super) fn begin_trace(
    tracer: &Tracer,
    slot: &ThreadSlot,
    t: &mut ThreadTrace,
    needs: Needs,
) -> bool {
    let c = &slot.counters;
    let drawing = t.buffer.is_none()
        || (needs.block_cache && t.cache.is_none())
        || (needs.emulator && t.emu.is_none())
        || (needs.predictions && t.predictions.is_none());
    if drawing {
        // The worker tops the pools up at its next pass, which is some
        // way off while the process is idle: it comes now.
        tracer.exec.doorbell().ring(Doorbell::WORK);
    }
    if !super::pools::take(&tracer.states, t, needs) {
        Counters::bump(&c.no_free_state);
        return false;
    }
    if t.buffer.is_none() {
        t.buffer = tracer.pool.take();
    }
    match t.buffer.as_mut() {
        Some(b) => b.open_trace(),
        None => {
            Counters::bump(&c.no_free_buffer);
            return false;
        }
    }
    Counters::bump(&c.traces_started);
    true
}

/// Closes the open trace and makes sure the buffer has room for the next
/// one (swapping it for an empty one if not: the paper's free-space
/// check); the next sampling period starts as the handler returns.
pub(super) fn end_trace(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, end: TraceEnd) {
    close_open_trace(t, &slot.counters, end);
    make_room(tracer, slot, t);
}

/// Makes sure the buffer has room for a whole trace, swapping it for an
/// empty one if not (the paper's free-space check).
pub(super) fn make_room(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace) {
    let c = &slot.counters;
    let lbr = tracer.lbr.load(Ordering::Relaxed);
    let frames = tracer.stack_words();
    let values = if tracer.values.load(Ordering::Relaxed) {
        crate::buffer::VALUES_PER_TRACE
    } else {
        0
    };
    let needs_swap = t
        .buffer
        .as_ref()
        .is_some_and(|b| !b.has_room(lbr, frames, values));
    if needs_swap {
        if let Some(full) = t.buffer.take() {
            // The queue holds every buffer the pool ever made: no overflow.
            let _ = tracer.pool.full.push(full);
            Counters::bump(&c.buffer_swaps);
            tracer.exec.doorbell().ring(Doorbell::WORK);
        }
        t.buffer = tracer.pool.take();
    }
}

/// Closes the open trace (if any) with `end` and disarms the breakpoint.
/// Shared by the handlers and the control thread (which holds the slot
/// when it calls this).
pub(super) fn close_open_trace(t: &mut ThreadTrace, c: &Counters, end: TraceEnd) {
    census!(crate::census::end());
    if let Some(Awaiting::Checkpoint { .. } | Awaiting::Resume { .. }) = discard_unvalidated(t) {
        Counters::bump(&c.checkpoint_unreached);
    }
    if t.unsettled.take().is_some() {
        // Its settling sample never came (`emulate::settle`); dropped by
        // `discard_unvalidated` above.
        Counters::bump(&c.segments_unsettled);
    }
    disarm_breakpoint(t);
    if end == TraceEnd::Aborted(AbortReason::OutsideMappings) {
        // Code the table does not know: maybe a library dlopen'ed since
        // the worker last looked. It looks now.
        if let Some(tracer) = super::tracer() {
            tracer.exec.request_refresh();
        }
    }
    let callstacks = super::tracer().is_some_and(|tr| tr.callstack.load(Ordering::Relaxed) > 0);
    if let Some(b) = t.buffer.as_mut() {
        if b.is_open() {
            // The stack the emulator took at the Nth branch is this
            // trace's only when the trace has its N branches: one that
            // ended early ends at an older branch.
            let stack = match end {
                TraceEnd::Complete if callstacks => t.emu.as_ref().and_then(|e| e.callstack()),
                _ => None,
            };
            let stacked = stack.is_some_and(|s| b.set_stack(s.frames()));
            if !b.close_trace(end) {
                // Ended before its first entry: counted by how it ended,
                // and here, since no buffer holds it.
                Counters::bump(&c.traces_empty);
            } else if callstacks {
                match stack.filter(|_| stacked) {
                    Some(s) => {
                        Counters::bump(&c.callstacks);
                        if !s.is_snapshot() {
                            Counters::add(&c.callstack_frames, s.frames().len() as u64);
                        }
                        if s.truncated {
                            Counters::bump(&c.callstacks_truncated);
                        }
                    }
                    None => Counters::bump(&c.callstacks_missing),
                }
            }
            match end {
                TraceEnd::Complete => Counters::bump(&c.traces_completed),
                TraceEnd::Aborted(r) => c.abort(r),
            }
        }
    }
}

/// Forgets what the thread's breakpoint waited for (returned), and cuts
/// the open trace back to its last validated entry: entries past
/// `committed` (an emulated segment not yet validated at its checkpoint)
/// never reach a closed trace.
pub(super) fn discard_unvalidated(t: &mut ThreadTrace) -> Option<Awaiting> {
    if let Some(committed) = t.committed.take() {
        if let Some(b) = t.buffer.as_mut() {
            b.truncate_open(committed);
        }
    }
    t.awaiting.take()
}
