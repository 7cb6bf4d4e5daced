//! The SIGTRAP handler: sampling and breakpoint stops (the paper's
//! Algorithm 1, §2).
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
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::buffer::{AbortReason, TraceEnd};
use crate::decode::{Gpr, RegisterFile};
use crate::emulate::context;
use crate::sys;

use super::counters::Counters;
use super::{
    chain, lookahead, speculative, Entry, Lookahead, ThreadSlot, ThreadTrace, Tracer,
    BREAKPOINT_TAG, SAMPLE_TAG,
};

/// The interrupted thread's registers, as the kernel saved them.
pub(super) struct Ucontext<'a>(pub(super) &'a libc::ucontext_t);

impl RegisterFile for Ucontext<'_> {
    fn gpr(&self, reg: Gpr) -> u64 {
        self.0.uc_mcontext.gregs[context::GREG_OF_GPR[reg as usize & 15] as usize] as u64
    }
    fn rip(&self) -> u64 {
        self.0.uc_mcontext.gregs[libc::REG_RIP as usize] as u64
    }
    fn rflags(&self) -> u64 {
        self.0.uc_mcontext.gregs[libc::REG_EFL as usize] as u64
    }
}

/// The registers at a breakpoint stop, kept to recognise a second SIGTRAP
/// for the same stop: one that arrives at the previous stop's pc with the
/// same registers (nothing ran in between) while the breakpoint is armed
/// elsewhere. Such repeats were every `pc_mismatch` on SQLite until the
/// handlers stopped calling into libc (`sys::raw`): the breakpoint, armed
/// at the first jcc of glibc's memmove, fired inside the handler's own
/// memcpy. They are dropped and counted (`duplicate_traps`), which now
/// stays 0.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct StopRegisters([u64; 18]);

impl StopRegisters {
    pub(super) fn of(regs: &impl RegisterFile) -> StopRegisters {
        let mut r = [0u64; 18];
        for (i, v) in r.iter_mut().take(16).enumerate() {
            *v = regs.gpr(i as Gpr);
        }
        r[16] = regs.rip();
        r[17] = regs.rflags();
        StopRegisters(r)
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
        if !is_stray_debug_trap(si, unsafe { &*(ctx as *const libc::ucontext_t) }) {
            chain::forward(sig, info, ctx);
        }
        return;
    }
    // Ours. Without a tracer or a ready slot this is a late signal of a
    // stopped session or a closing thread: nothing to do.
    if let Some(tracer) = super::tracer() {
        if let Some(slot) = tracer.slot_of(sys::gettid()) {
            match slot.enter() {
                Entry::Held => {
                    // SAFETY: enter() made this handler the slot's holder;
                    // the ucontext is the kernel's for this delivery.
                    let (t, uc) = unsafe { (slot.inner(), &*(ctx as *const libc::ucontext_t)) };
                    if tag == SAMPLE_TAG && is_merged_stop(t, &Ucontext(uc)) {
                        let c = &slot.counters;
                        Counters::bump(&c.samples);
                        Counters::bump(&c.samples_in_trace);
                        Counters::bump(&c.merged_stops);
                        watch_trace(t);
                        t.bp_hits_left = t.bp_hits_left.saturating_sub(1);
                        on_breakpoint(tracer, slot, t, uc);
                    } else if tag == SAMPLE_TAG {
                        if PANIC_AT_SAMPLE.load(Ordering::Relaxed) {
                            panic!("failpoint sample-panic");
                        }
                        if tracer.lookahead() == Lookahead::Emulate {
                            speculative::on_sample(tracer, slot, t, uc);
                        } else {
                            lookahead::on_sample(tracer, slot, t, uc);
                        }
                    } else {
                        if sys::siginfo_perf_flags(si) & sys::TRAP_PERF_FLAG_ASYNC != 0 {
                            // Hit while the thread blocked SIGTRAP: how many
                            // times is unknown, maybe up to the limit.
                            renew_breakpoint(slot, t);
                        } else {
                            t.bp_hits_left = t.bp_hits_left.saturating_sub(1);
                        }
                        on_breakpoint(tracer, slot, t, uc);
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
    let Some(at) = t.pending.map(|p| p.form.at).or(t.awaiting.map(|a| a.at())) else {
        return false;
    };
    regs.rip() == at
        && regs.rflags() & context::RF != 0
        && t.last_stop != Some(StopRegisters::of(regs))
}

/// A breakpoint stop, in the session's look-ahead mode.
fn on_breakpoint(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, uc: &libc::ucontext_t) {
    if tracer.lookahead() == Lookahead::Emulate {
        speculative::on_breakpoint(tracer, slot, t, uc);
    } else {
        lookahead::on_breakpoint(tracer, slot, t, uc);
    }
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
fn is_stray_debug_trap(si: &libc::siginfo_t, uc: &libc::ucontext_t) -> bool {
    if si.si_code != sys::TRAP_BRKPT && si.si_code != sys::TRAP_HWBKPT {
        return false;
    }
    let Some(tracer) = super::tracer() else {
        return false;
    };
    let Some(slot) = tracer.slot_of(sys::gettid()) else {
        return false;
    };
    match slot.enter() {
        Entry::Held => {
            // SAFETY: enter() made this handler the slot's holder.
            let t = unsafe { slot.inner() };
            // SAFETY: bp_addr is the active field of a breakpoint attribute.
            let at = unsafe { t.bp_attr.__bindgen_anon_3.bp_addr };
            let stray = t.bp_fd.is_some() && Ucontext(uc).rip() == at;
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
        rearm_sampling(t);
    }
}

/// Hits the breakpoint event may take before the kernel stops it; the
/// limit is topped up to this when fewer than two are left.
const BREAKPOINT_HIT_BUDGET: u32 = 8;

/// Moves the thread's breakpoint to `addr` and enables it (one ioctl; two
/// when the event's limit is topped up, once every few stops).
///
/// The breakpoint event has a limit of hits (as the sampling event has a
/// limit of one sample): a hit whose SIGTRAP cannot be delivered, because
/// the thread runs with SIGTRAP blocked (in one of its own signal handlers,
/// or a section that blocks every signal) and passes the address again
/// and again, traps a few times and then no more, instead of at every
/// pass until the signal is unblocked. A delivered hit must never use the
/// last of the limit: on this kernel a hardware breakpoint event that its
/// limit stopped never fires again (measured; sampling events restart), so
/// the limit is topped up while two are left, and a hit delivered late
/// (when the count is unknown) replaces the event ([`renew_breakpoint`]).
pub(super) fn arm_breakpoint(t: &mut ThreadTrace, addr: u64) -> bool {
    let Some(fd) = t.bp_fd.as_ref().map(|f| f.as_raw_fd()) else {
        return false;
    };
    // Enables the event where it was parked (an address this handler does
    // not run) before it moves.
    if !top_up_breakpoint(t, fd) {
        return false;
    }
    t.bp_attr.__bindgen_anon_3.bp_addr = addr;
    t.bp_attr.set_disabled(0);
    let ok = sys::perf_modify_attributes(fd, &mut t.bp_attr).is_ok();
    t.bp_armed = ok;
    ok
}

/// Tops the breakpoint event's limit up when fewer than two hits are left
/// (see [`arm_breakpoint`]). Also for a breakpoint left where it is across
/// several hits (an emulate-mode checkpoint in a loop). Async-signal-safe.
pub(super) fn top_up_breakpoint(t: &mut ThreadTrace, fd: std::os::fd::RawFd) -> bool {
    if t.bp_hits_left < 2 {
        let add = BREAKPOINT_HIT_BUDGET - t.bp_hits_left;
        if sys::perf_refresh(fd, add as i32).is_err() {
            t.bp_armed = false;
            return false;
        }
        t.bp_hits_left = BREAKPOINT_HIT_BUDGET;
    }
    true
}

/// Replaces the thread's breakpoint event by a fresh one, when what is
/// left of its limit is unknown (a hit delivered late, an abandoned
/// handler). Async-signal-safe: close and perf_event_open are system calls
/// and the attribute is built on the stack. Without a new event the
/// thread's next traces end as `breakpoint_failed`.
fn renew_breakpoint(slot: &ThreadSlot, t: &mut ThreadTrace) {
    if let Some(old) = t.bp_fd.take() {
        sys::close_owned(old);
    }
    t.bp_armed = false;
    t.bp_hits_left = 0;
    let mut attr = super::threads::breakpoint_attr();
    if let Ok(fd) = sys::perf_event_open(&mut attr, 0) {
        t.bp_attr = attr;
        t.bp_fd = Some(fd);
        Counters::bump(&slot.counters.breakpoints_renewed);
    }
}

pub(super) fn disarm_breakpoint(t: &mut ThreadTrace) {
    if t.bp_armed {
        if let Some(fd) = t.bp_fd.as_ref() {
            let _ = sys::perf_disable(fd.as_raw_fd());
        }
        t.bp_armed = false;
    }
}

/// A trace's watchdog, in sampling periods (see [`watch_trace`]).
const WATCHDOG_PERIODS: u64 = 4;

/// Sampling when no trace is open: the next sample a whole period from
/// now. (Each sample disables the event: it allows one overflow.)
pub(super) fn rearm_sampling(t: &mut ThreadTrace) {
    if let Some(fd) = t.sample_fd.as_ref() {
        if t.period != 0 {
            let _ = sys::perf_set_period(fd.as_raw_fd(), t.period);
        }
        let _ = sys::perf_refresh(fd.as_raw_fd(), 1);
    }
}

/// At the sample that begins a trace, or finds one still open: sampling
/// stays armed through the trace, with a period of [`WATCHDOG_PERIODS`]
/// periods. A trace that moves ends long before (then [`resume_sampling`]
/// starts a whole period from its end, so a trace's own time does not count
/// towards the next sample, as with the paper's one-shot sampling); one
/// whose breakpoint the thread never reaches (a longjmp away from it, a
/// thread that waits) is given up at the watchdog's sample, where the
/// paper's sampling would stay off for good. With a frequency, which sets
/// its own periods, sampling simply stays armed.
pub(super) fn watch_trace(t: &mut ThreadTrace) {
    if let Some(fd) = t.sample_fd.as_ref() {
        if t.period != 0 {
            let _ = sys::perf_set_period(fd.as_raw_fd(), t.period * WATCHDOG_PERIODS);
        }
        let _ = sys::perf_refresh(fd.as_raw_fd(), 1);
    }
}

/// At a trace's end: the next sample a whole period from now (setting the
/// period restarts the count). The event is armed already (`watch_trace`).
pub(super) fn resume_sampling(t: &mut ThreadTrace) {
    if let (Some(fd), true) = (t.sample_fd.as_ref(), t.period != 0) {
        let _ = sys::perf_set_period(fd.as_raw_fd(), t.period);
    }
}

/// Closes the open trace, makes sure the buffer has room for the next one
/// (swapping it for an empty one if not: the paper's free-space check) and
/// starts the next sampling period.
pub(super) fn end_trace(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace, end: TraceEnd) {
    close_open_trace(t, &slot.counters, end);
    make_room(tracer, slot, t);
    resume_sampling(t);
}

/// Makes sure the buffer has room for a whole trace, swapping it for an
/// empty one if not (the paper's free-space check).
pub(super) fn make_room(tracer: &Tracer, slot: &ThreadSlot, t: &mut ThreadTrace) {
    let c = &slot.counters;
    let lbr = tracer.lbr.load(Ordering::Relaxed);
    let needs_swap = t.buffer.as_ref().is_some_and(|b| !b.has_room(lbr));
    if needs_swap {
        if let Some(full) = t.buffer.take() {
            // The queue holds every buffer the pool ever made: no overflow.
            let _ = tracer.pool.full.push(full);
            Counters::bump(&c.buffer_swaps);
        }
        t.buffer = tracer.pool.free.pop();
    }
}

/// Closes the open trace (if any) with `end` and disarms the breakpoint.
/// Shared by the handlers and the control thread (which holds the slot
/// when it calls this).
pub(super) fn close_open_trace(t: &mut ThreadTrace, c: &Counters, end: TraceEnd) {
    t.pending = None;
    if speculative::discard_segment(t) {
        Counters::bump(&c.checkpoint_unreached);
    }
    disarm_breakpoint(t);
    if end == TraceEnd::Aborted(AbortReason::OutsideMappings) {
        // Code the table does not know: maybe a library dlopen'ed since
        // the worker last looked. It looks now.
        if let Some(tracer) = super::tracer() {
            tracer.exec.request_refresh();
        }
    }
    if let Some(b) = t.buffer.as_mut() {
        if b.is_open() {
            if !b.close_trace(end) {
                // Ended before its first entry: counted by how it ended,
                // and here, since no buffer holds it.
                Counters::bump(&c.traces_empty);
            }
            match end {
                TraceEnd::Complete => Counters::bump(&c.traces_completed),
                TraceEnd::Aborted(r) => c.abort(r),
            }
        }
    }
}
