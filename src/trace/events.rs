//! The thread's two perf events, as the engines drive them: the hardware
//! breakpoint (moved to the next stop, topped up, renewed) and the sampling
//! event (armed for one sample, kept armed with a watchdog period while a
//! trace is open), and their attributes. Async-signal-safe: each is one or
//! two ioctls, or a close and a perf_event_open.

use std::os::fd::AsRawFd;

use crate::sys;

use perf_event_open_sys::bindings as pb;

use super::counters::Counters;
use super::{ThreadSlot, ThreadTrace, BREAKPOINT_TAG, SAMPLE_TAG};

/// The sampling event of a session, as perf_event_open takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplingEvent {
    pub type_: u32,
    pub config: u64,
    /// Period in event units, or frequency in Hz when `freq`.
    pub period: u64,
    pub freq: bool,
}

/// Where a disabled breakpoint waits: an address in this library that no
/// application thread executes while the breakpoint is disabled.
extern "C" fn breakpoint_parking() {}

fn common_flags(attr: &mut sys::PerfEventAttr, tag: u64) {
    attr.set_disabled(1);
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    // sigtrap delivers a synchronous SIGTRAP to the thread that hit the
    // event, with si_perf_data = sig_data; the kernel requires
    // remove_on_exec with it (DESIGN.md, measured facts).
    attr.set_sigtrap(1);
    attr.set_remove_on_exec(1);
    attr.sig_data = tag;
}

pub fn breakpoint_attr() -> sys::PerfEventAttr {
    let mut attr = sys::blank_attr();
    attr.type_ = pb::PERF_TYPE_BREAKPOINT;
    attr.bp_type = pb::HW_BREAKPOINT_X;
    attr.__bindgen_anon_3.bp_addr = breakpoint_parking as *const () as usize as u64;
    attr.__bindgen_anon_4.bp_len = std::mem::size_of::<libc::c_long>() as u64;
    attr.__bindgen_anon_1.sample_period = 1;
    common_flags(&mut attr, BREAKPOINT_TAG);
    attr
}

pub fn sampling_attr(event: &SamplingEvent) -> sys::PerfEventAttr {
    let mut attr = sys::blank_attr();
    attr.type_ = event.type_;
    attr.config = event.config;
    if event.freq {
        attr.set_freq(1);
        attr.__bindgen_anon_1.sample_freq = event.period;
    } else {
        attr.__bindgen_anon_1.sample_period = event.period;
    }
    // Read at the thread's close: how long sampling was on (see
    // `sampling_off_ns`).
    attr.read_format = u64::from(pb::PERF_FORMAT_TOTAL_TIME_ENABLED);
    common_flags(&mut attr, SAMPLE_TAG);
    attr
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
pub(super) fn renew_breakpoint(slot: &ThreadSlot, t: &mut ThreadTrace) {
    if let Some(old) = t.bp_fd.take() {
        sys::close_owned(old);
    }
    t.bp_armed = false;
    t.bp_hits_left = 0;
    let mut attr = breakpoint_attr();
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

/// After a breakpoint's SIGTRAP that came late (raised while the thread
/// had SIGTRAP blocked): a sample raised while it waited was merged into it
/// (a pending SIGTRAP absorbs the next one; they are not queued) and spent
/// the sampling event's one overflow, so the event stays off and the thread
/// is never sampled again. An event that is on has its enabled time advance
/// between two reads (the thread is running this handler); one that is off
/// does not. Off: armed again and counted (`samples_merged`), unless a
/// SIGTRAP waits (a sample that fell due while this handler ran: its own
/// handler arms the next, and arming here too would leave the event one
/// overflow ahead for good). Measured with
/// tests/programs/blocked_sigtrap_faults.c in emulate mode: without this,
/// about one run in ten lost its sampling for most of the run.
/// Async-signal-safe.
pub(super) fn revive_sampling(slot: &ThreadSlot, t: &mut ThreadTrace) {
    let Some(fd) = t.sample_fd.as_ref() else {
        return;
    };
    let raw = fd.as_raw_fd();
    let (Some(before), Some(after)) = (sys::perf_time_enabled(raw), sys::perf_time_enabled(raw))
    else {
        return;
    };
    if before == after && !sys::sigtrap_pending() {
        let _ = sys::perf_refresh(raw, 1);
        Counters::bump(&slot.counters.samples_merged);
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
