//! The thread's two perf events, as the engines drive them: the hardware
//! breakpoint (moved to the next stop, topped up, renewed) and the sampling
//! event (limited to one overflow until the thread's first sample, then
//! without a limit, its period lengthened to the watchdog's while a trace
//! waits at a stop), and their attributes.
//! Async-signal-safe: each is one or two ioctls, or a close and a
//! perf_event_open.

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
/// (when the count is unknown) replaces the event ([`renew_breakpoint`]),
/// as does a sample delivered late with the breakpoint armed: hits meanwhile
/// merged into its SIGTRAP. A count left too high is worse than a dead
/// event: enabled again with its limit spent, the event has no limit at
/// all, and traps at every pass while SIGTRAP stays blocked
/// (ARCHITECTURE.md, "A breakpoint hit can merge into a waiting sample").
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

/// A trace's watchdog, in sampling periods (see [`set_sampling_period`]).
const WATCHDOG_PERIODS: u64 = 4;

/// How the sampling event runs. From the thread's first sample on
/// ([`sample_entered`]) it has no limit of overflows, and it keeps
/// counting the thread's CPU time, the handlers' included, as perf's own
/// sampling does: a handler never arms it. A one-shot event (a limit
/// of one overflow, renewed by `PERF_EVENT_IOC_REFRESH` in every handler,
/// as the paper's sampling is) cost 11–14 µs more of a sample's handler on the AMD
/// Zen 5 guest (results/speed, fourteenth round): the ioctl, which starts
/// the event's timer again, and the kernel's disabling of the event at the
/// overflow; and a path that forgot to renew it took the thread's
/// sampling away for good.
///
/// As a handler of ours returns, the period is set to what the thread's
/// trace needs now, where it changes (`event_period` keeps the one the
/// event counts; the thread's first is drawn at random, see
/// `threads::register`, and replaced at its first sample,
/// [`sample_entered`]):
///
/// - no trace waits at a stop (none is open, it ended, or its last segment
///   waits for the next sample to settle it): the sampling period. Set
///   after a trace that waited, which restarts the count: a whole period
///   from the trace's end.
/// - a trace waits at a stop (a checkpoint, an instruction left to the
///   CPU, the paper's next branch): [`WATCHDOG_PERIODS`] periods from the
///   handler that left it waiting. A trace that moves ends long before;
///   one whose stop the thread never reaches (a longjmp away from it, a
///   thread that waits) is given up at the watchdog's sample.
///
/// So a trace that ends in its sample's handler (most of emulate mode's:
/// one proven segment) costs no ioctl at all. A sample's handler that ran
/// an eighth of a period or more (`sample_began`, when it began; a
/// thread's first traces, a long segment, a short period) restarts the
/// count as it returns, so that the application runs at least seven
/// eighths of a period of its own between samples; a sample that fell due
/// while it ran waits (SIGTRAP is blocked in the handler) and is dropped
/// as it arrives (`skip_sample`; counted `samples_in_handler`): traced, it
/// would begin where this one did, and with handlers that outlast the
/// period the thread would run nothing else. With a frequency, which sets
/// its own periods, only that drop. Async-signal-safe.
pub(super) fn set_sampling_period(t: &mut ThreadTrace, sample_began: Option<u64>) {
    let Some(fd) = t.sample_fd.as_ref().map(AsRawFd::as_raw_fd) else {
        return;
    };
    let want = match (t.period, t.awaiting.is_some()) {
        (0, _) => 0,
        (period, true) => period * WATCHDOG_PERIODS,
        (period, false) => period,
    };
    let long = sample_began.is_some_and(|began| {
        let eighth = if t.period != 0 {
            t.period / 8
        } else {
            LONG_HANDLER_NS
        };
        sys::raw::clock_ns().saturating_sub(began) >= eighth
    });
    if want != 0 && (want != t.event_period || long) && sys::perf_set_period(fd, want).is_ok() {
        t.event_period = want;
    }
    if long && sys::sigtrap_pending() {
        t.skip_sample = true;
    }
}

/// At a sample's SIGTRAP, before anything else: the thread's first sample
/// sets the period and takes the limit off. A thread's first period is
/// drawn at random (`threads::register`), so its event opens with a limit
/// of one overflow: without one, a short first period went on after the
/// first overflow until a handler set the period, every 10 µs (the
/// kernel's least) through the whole first handler (measured on the churn
/// of 1,000 short threads: 15–25 ms of handler time for 3–13 samples,
/// against under 1 ms), and for good in a thread that keeps SIGTRAP
/// blocked and so never runs a handler. Two ioctls, once per thread; a
/// thread whose first sample never comes (it blocks SIGTRAP) costs one
/// overflow. With a frequency, which draws no first period, the event
/// opens without a limit. Async-signal-safe.
pub(super) fn sample_entered(t: &mut ThreadTrace) {
    if t.sampling_unlimited {
        return;
    }
    let Some(fd) = t.sample_fd.as_ref().map(AsRawFd::as_raw_fd) else {
        return;
    };
    if t.period != 0 && sys::perf_set_period(fd, t.period).is_ok() {
        t.event_period = t.period;
    }
    // The overflow used the limit, which disabled the event: enabled
    // again, its limit is none.
    if sys::perf_enable(fd).is_ok() {
        t.sampling_unlimited = true;
    }
}

/// With a frequency (no fixed period): a sample's handler this long may
/// have outlasted the kernel's period (see [`set_sampling_period`]).
const LONG_HANDLER_NS: u64 = 250_000;
