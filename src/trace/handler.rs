//! The SIGTRAP handler: sampling and breakpoint stops (the paper's
//! Algorithm 1, §2), told apart here and handed to the session's engine
//! (`engine`); stray and late signals, merged stops and abandoned handlers
//! are handled here, the same in every mode.
//!
//! Contract of everything in this file: async-signal-safe. No allocation,
//! no lock another thread or the application can hold, no formatting, no
//! logging, and no call into any code outside this library — not even
//! libc's: the breakpoint may be armed on any instruction of a traced
//! module (see `sys::raw`, which provides the syscalls, the clock and the
//! mem functions the handlers use; its raw syscalls leave errno alone, so
//! there is none to restore). The handler runs with every asynchronous
//! signal blocked (see `trace`'s module doc for why).
//! `tests/handler_alloc.rs` checks the no-allocation part with a counting
//! allocator while real signals fire.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::buffer::{AbortReason, TraceEnd};
use crate::decode::RegisterFile;
use crate::emulate::context;
use crate::sys;

use super::counters::Counters;
use super::ends::close_open_trace;
use super::engine::{Engine, StopRegisters, Ucontext};
use super::events::{arm_breakpoint, renew_breakpoint, sample_entered, set_sampling_period};
use super::{chain, Entry, Lookahead, ThreadSlot, ThreadTrace, Tracer, BREAKPOINT_TAG, SAMPLE_TAG};

/// The engine of `mode`: the one place a mode is looked at.
pub(super) fn engine_of(mode: Lookahead) -> &'static dyn Engine {
    match mode {
        Lookahead::Paper => &super::paper::Paper,
        Lookahead::Verify => &super::verify::Verify,
        Lookahead::Emulate => &super::emulate::Emulate,
    }
}

/// Set by `BREAKDANCE_FAILPOINT=sample-panic` (for tests only): the sample
/// handler panics, to check that a panic there aborts with a message.
pub(crate) static PANIC_AT_SAMPLE: AtomicBool = AtomicBool::new(false);

/// The SIGTRAP handler installed while a session runs.
pub(crate) extern "C" fn on_sigtrap(sig: i32, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let si = unsafe { &*info };
    let tag = sys::siginfo_perf_data(si);
    if si.si_code != sys::TRAP_PERF || (tag != SAMPLE_TAG && tag != BREAKPOINT_TAG) {
        // SAFETY: the ucontext is the kernel's for this delivery.
        if !is_stray_debug_trap(si, unsafe { Ucontext::of(ctx) }) {
            before_passing_on();
            chain::forward(sig, info, ctx);
        }
        return;
    }
    // Ours. Without a tracer or a ready slot this is a late signal of a
    // stopped session or a closing thread: nothing to do.
    let Some((tracer, slot)) = calling_thread_slot() else {
        return;
    };
    // When the application raised a SIGTRAP of its own that has not come,
    // it was dropped for this one: it is delivered after.
    let owed = slot.sigtrap_owed.swap(false, Ordering::AcqRel);
    on_our_sigtrap(tracer, slot, si, tag, ctx);
    if owed {
        deliver_owed_sigtrap(ctx);
    }
}

/// The tracer and the calling thread's slot in it, where it has one.
/// Async-signal-safe (gettid and a probe of the thread table).
fn calling_thread_slot() -> Option<(&'static Tracer, &'static ThreadSlot)> {
    let tracer = super::tracer()?;
    Some((tracer, tracer.slot_of(sys::gettid())?))
}

/// The application raises SIGTRAP at the calling thread (the `raise` and
/// `pthread_kill` interposers). SIGTRAP is not queued: a SIGTRAP of ours
/// waiting when the application's reaches the kernel's queue makes the
/// kernel drop the application's (results/signals). Perf raises ours at
/// the thread's next return to user space, and every system call is one.
///
/// - SIGTRAP blocked: ours may wait already, or come at the return of a
///   system call of the C library's `raise`. So the thread's slot notes
///   that the application's is owed, and `raise` goes on. The first
///   SIGTRAP the thread takes once it unblocks is then the application's,
///   whose passing on clears the note, or ours, after whose handling the
///   application's is delivered as the kernel would have
///   ([`deliver_owed_sigtrap`]). Several raised before one comes make
///   one, as they merge without us.
/// - SIGTRAP not blocked: ours never waits in user space (it is delivered
///   at the return that raised it), but the C library's `raise` blocks
///   every signal around its tgkill, and ours could come at the return
///   of that block. So the application's is sent here with a bare tgkill
///   (delivered before it returns, as raise's is); returns true then.
///
/// Returns whether it sent the signal. Async-signal-safe (a read of the
/// mask, an atomic store or tgkill).
pub fn raise_sigtrap() -> bool {
    let Some((_, slot)) = calling_thread_slot() else {
        return false;
    };
    if sys::sigtrap_blocked() {
        slot.sigtrap_owed.store(true, Ordering::Release);
        false
    } else {
        sys::tgkill(sys::gettid(), libc::SIGTRAP).is_ok()
    }
}

/// A SIGTRAP of the application's is being passed on: whatever was owed
/// to the thread is paid ([`raise_sigtrap`]). And a thread's first sample
/// comes from an event that stops itself at its one overflow
/// (`events::sample_entered`); raised while the application's SIGTRAP
/// waited, it merged into it (SIGTRAP is not queued), and the thread
/// would never be sampled. So while the thread is in its first period,
/// an event whose enabled time no longer moves has spent its overflow
/// unseen: it is started as the first sample would have started it.
/// Async-signal-safe (reads and ioctls of the thread's own event).
fn before_passing_on() {
    let Some((_, slot)) = calling_thread_slot() else {
        return;
    };
    slot.sigtrap_owed.store(false, Ordering::Release);
    if slot.enter() != Entry::Held {
        return;
    }
    // SAFETY: enter() made this handler the slot's holder.
    let t = unsafe { slot.inner() };
    if !t.sampling_unlimited {
        let fd = t.sample_fd.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
        let stopped = fd.is_some_and(|fd| {
            let first = sys::perf_time_enabled(fd);
            first.is_some() && sys::perf_time_enabled(fd) == first
        });
        if stopped {
            sample_entered(t);
            Counters::bump(&slot.counters.first_samples_revived);
        }
    }
    slot.leave();
}

/// Delivers the application's SIGTRAP that ours made the kernel drop, as
/// `raise` sends it (SI_TKILL, this process and user), to its action.
fn deliver_owed_sigtrap(ctx: *mut c_void) {
    // SAFETY: plain data; zero is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    info.si_signo = libc::SIGTRAP;
    info.si_code = libc::SI_TKILL;
    // SAFETY: the kernel's layout of a kill's siginfo on x86-64: si_pid
    // at byte 16 and si_uid at byte 20, inside the 128-byte siginfo.
    unsafe {
        let base = (&mut info as *mut libc::siginfo_t).cast::<u8>();
        base.add(16).cast::<i32>().write(sys::getpid());
        base.add(20).cast::<u32>().write(sys::getuid());
    }
    crate::host::bump(&crate::host::HOST.application_sigtraps_delivered);
    chain::forward(libc::SIGTRAP, &mut info, ctx);
}

/// A SIGTRAP of ours, a sample or a breakpoint stop, on the thread of
/// `slot`.
fn on_our_sigtrap(
    tracer: &Tracer,
    slot: &ThreadSlot,
    si: &libc::siginfo_t,
    tag: u64,
    ctx: *mut c_void,
) {
    match slot.enter() {
        Entry::Held => {
            // SAFETY: enter() made this handler the slot's holder;
            // the ucontext is the kernel's for this delivery.
            let (t, uc) = unsafe { (slot.inner(), Ucontext::of(ctx)) };
            let began = sys::raw::clock_ns();
            let engine = engine_of(tracer.lookahead());
            let c = &slot.counters;
            let late = sys::siginfo_perf_flags(si) & sys::TRAP_PERF_FLAG_ASYNC != 0;
            if tag == SAMPLE_TAG {
                sample_entered(t);
                if late && t.bp_armed {
                    // Raised while the thread blocked SIGTRAP, with
                    // the breakpoint armed: hits meanwhile merged
                    // into this signal (SIGTRAP is not queued), and
                    // what is left of the event's limit is unknown.
                    // A fresh event, armed where the old one was:
                    // the trace may still wait there.
                    // SAFETY: bp_addr is the active field of a
                    // breakpoint attribute.
                    let at = unsafe { t.bp_attr.__bindgen_anon_3.bp_addr };
                    renew_breakpoint(slot, t);
                    arm_breakpoint(t, at);
                }
            }
            let as_sample = tag == SAMPLE_TAG && !is_merged_stop(t, uc);
            if as_sample && t.skip_sample {
                // It fell due while the last sample's handler ran
                // (see `events::set_sampling_period`).
                t.skip_sample = false;
                Counters::bump(&c.samples);
                Counters::bump(&c.samples_in_handler);
                slot.leave();
                return;
            }
            if tag == SAMPLE_TAG && !as_sample {
                Counters::bump(&c.samples);
                Counters::bump(&c.samples_in_trace);
                Counters::bump(&c.merged_stops);
                t.bp_hits_left = t.bp_hits_left.saturating_sub(1);
                engine.on_breakpoint(tracer, slot, t, uc);
            } else if tag == SAMPLE_TAG {
                if PANIC_AT_SAMPLE.load(Ordering::Relaxed) {
                    panic!("failpoint sample-panic");
                }
                engine.on_sample(tracer, slot, t, uc);
            } else {
                if late {
                    // Hit while the thread blocked SIGTRAP: how many
                    // times is unknown, maybe up to the limit.
                    renew_breakpoint(slot, t);
                } else {
                    t.bp_hits_left = t.bp_hits_left.saturating_sub(1);
                }
                engine.on_breakpoint(tracer, slot, t, uc);
            }
            // The engines time their own parts; this one is the
            // handler's too.
            let a0 = sys::raw::clock_ns();
            set_sampling_period(t, as_sample.then_some(began));
            let armed = sys::raw::clock_ns().saturating_sub(a0);
            t.trace_ns += armed;
            if as_sample {
                Counters::add(&c.sampling_ns, armed);
            } else {
                Counters::add(&c.breakpoint_ns, armed);
            }
            slot.leave();
        }
        Entry::Abandoned => {
            // SAFETY: as above: the slot is this handler's again.
            take_back(tracer, slot, unsafe { slot.inner() });
            slot.leave();
        }
        Entry::Refused => {}
    }
}

/// Whether a sample found the thread at its breakpoint (the open trace's
/// next stop, or emulate mode's checkpoint) with RF set,
/// past the debug exception (the breakpoint will not fire when the thread
/// resumes), and not where the last stop left it. Either the stop's SIGTRAP
/// merged into this one (SIGTRAP is not queued: one raised while another
/// pends is lost, and the breakpoint's and the sample's are raised on the
/// same return to user space when the timer fires during the debug
/// exception), or another fault at `at` set RF. Either way this signal is
/// the stop.
///
/// A sample raised while the handler of the stop at `at` ran comes right
/// after it, at `at` with RF set and the very registers of that stop: the
/// thread has not moved, and that stop was taken. When a loop brings the
/// next breakpoint back to the same address, this is the only difference.
fn is_merged_stop(t: &ThreadTrace, regs: &Ucontext) -> bool {
    let Some(at) = t.awaiting.map(|a| a.at()) else {
        return false;
    };
    regs.rip() == at
        && regs.rflags() & context::RF != 0
        && t.last_stop != Some(StopRegisters::of(regs))
}

/// Whether a SIGTRAP that perf did not raise is a stray one of the
/// tracer's breakpoint: a debug exception the kernel could not attribute
/// (no reason in DR6, so it took it for an icebp: `TRAP_BRKPT`; or a
/// breakpoint register perf did not claim: `TRAP_HWBKPT`), at the very
/// address of the thread's breakpoint. Seen under heavy load in this KVM
/// guest, at the loop branch a traced thread passed thousands of times; the
/// application's default action would have killed the process. Such a
/// trap is dropped and counted (`stray_debug_traps`); the application's
/// own traps (int3 is `SI_KERNEL`, and its instructions are not where the
/// tracer's breakpoints go) are passed on as before.
fn is_stray_debug_trap(si: &libc::siginfo_t, uc: &Ucontext) -> bool {
    if si.si_code != sys::TRAP_BRKPT && si.si_code != sys::TRAP_HWBKPT {
        return false;
    }
    let Some((tracer, slot)) = calling_thread_slot() else {
        return false;
    };
    match slot.enter() {
        Entry::Held => {
            // SAFETY: enter() made this handler the slot's holder.
            let t = unsafe { slot.inner() };
            // SAFETY: bp_addr is the active field of a breakpoint attribute.
            let at = unsafe { t.bp_attr.__bindgen_anon_3.bp_addr };
            let stray = t.bp_fd.is_some() && uc.rip() == at;
            if stray {
                Counters::bump(&slot.counters.stray_debug_traps);
            }
            slot.leave();
            stray
        }
        Entry::Abandoned => {
            // SAFETY: as above: the slot is this handler's again.
            take_back(tracer, slot, unsafe { slot.inner() });
            slot.leave();
            false
        }
        Entry::Refused => false,
    }
}

/// The previous handler of this thread never returned (see the module doc
/// of `trace`): whatever it was doing is dropped. The open trace ends as
/// `handler_abandoned`, the breakpoint is disarmed, and sampling is armed
/// again, unless the session stopped meanwhile. This signal itself is
/// not used: the state it was raised for is gone.
fn take_back(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace) {
    let c = &slot.counters;
    Counters::bump(&c.handlers_abandoned);
    close_open_trace(t, c, TraceEnd::Aborted(AbortReason::HandlerAbandoned));
    // What is left of the breakpoint's limit is unknown.
    renew_breakpoint(slot, t);
    if tracer.running.load(Ordering::Acquire) {
        set_sampling_period(t, None);
    }
}
