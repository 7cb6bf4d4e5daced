//! The breakpoint-cost microbenchmark of the paper (§3.2, Figure 6): what it
//! costs to move a hardware breakpoint (one PERF_EVENT_IOC_MODIFY_ATTRIBUTES)
//! and what one stop costs in all (move + trigger + SIGTRAP delivery +
//! handler + return). Used by `cargo bench` and bench-harness `bpcost`; it
//! installs its own SIGTRAP handler for the duration, so it refuses to run
//! during a session.

use std::cell::Cell;
use std::ffi::c_void;
use std::hint::black_box;
use std::os::fd::AsRawFd;
use std::time::Instant;

use crate::sys::{self, Errno};

use super::threads::breakpoint_attr;

thread_local! {
    /// The calling thread's breakpoint fd and attribute address, for the
    /// handler (const-initialised: no lazy allocation on first use).
    static BP_FD: Cell<i32> = const { Cell::new(-1) };
    static BP_ATTR: Cell<*mut sys::PerfEventAttr> = const { Cell::new(std::ptr::null_mut()) };
    static STOPS: Cell<u64> = const { Cell::new(0) };
}

/// The instruction the breakpoint is set on.
#[inline(never)]
extern "C" fn stop_here(x: u64) -> u64 {
    black_box(x.wrapping_add(1))
}

extern "C" fn on_calibration_trap(_sig: i32, _info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    let errno = sys::errno();
    let fd = BP_FD.with(|f| f.get());
    let attr = BP_ATTR.with(|a| a.get());
    if fd >= 0 && !attr.is_null() {
        // The move a tracer makes at every stop (here: to the same place).
        // SAFETY: attr points to the calibrating thread's live attribute.
        let _ = sys::perf_modify_attributes(fd, unsafe { &mut *attr });
    }
    STOPS.with(|s| s.set(s.get() + 1));
    sys::set_errno(errno);
}

/// Medians over rounds, in nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct BreakpointCost {
    /// One move of the breakpoint (the ioctl alone).
    pub move_ns: f64,
    /// One stop: move + trigger + signal delivery + handler + return.
    pub stop_ns: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Installs the calibration handler; returns the previous action, to be
/// given back with `sys::restore_action`. Fails during a session.
pub fn install_handler() -> Result<libc::sigaction, Errno> {
    if super::tracer().is_some_and(|t| t.running.load(std::sync::atomic::Ordering::Acquire)) {
        return Err(Errno(libc::EBUSY));
    }
    sys::warm_sigaction();
    sys::install_handler(libc::SIGTRAP, on_calibration_trap, &[])
}

/// Measures on the calling thread, with the handler installed by
/// [`install_handler`] (once per process, shared by threads measuring at
/// the same time). `rounds` rounds of `stops` stops each.
pub fn measure_on_this_thread(rounds: usize, stops: usize) -> Result<BreakpointCost, Errno> {
    let mut attr = breakpoint_attr();
    attr.sig_data = 0x6264_6361; // "bdca": not the tracer's tags
    attr.__bindgen_anon_3.bp_addr = stop_here as *const () as usize as u64;
    let fd = sys::perf_event_open(&mut attr, 0)?;
    let raw = fd.as_raw_fd();
    attr.set_disabled(0);
    BP_FD.with(|f| f.set(raw));
    BP_ATTR.with(|a| a.set(&mut attr));
    let mut moves = Vec::with_capacity(rounds);
    let mut stops_ns = Vec::with_capacity(rounds);
    let mut result = Ok(());
    for _ in 0..rounds {
        // The ioctl alone.
        let t = Instant::now();
        for _ in 0..stops {
            if let Err(e) = sys::perf_modify_attributes(raw, &mut attr) {
                result = Err(e);
            }
        }
        moves.push(t.elapsed().as_nanos() as f64 / stops as f64);
        sys::perf_disable(raw)?;
        // Baseline: the same calls with the breakpoint off.
        let t = Instant::now();
        let mut x = 0;
        for _ in 0..stops {
            x = stop_here(x);
        }
        let base = t.elapsed().as_nanos() as f64;
        // Armed: every call stops once.
        sys::perf_modify_attributes(raw, &mut attr)?;
        let before = STOPS.with(|s| s.get());
        let t = Instant::now();
        for _ in 0..stops {
            x = stop_here(x);
        }
        let armed = t.elapsed().as_nanos() as f64;
        sys::perf_disable(raw)?;
        black_box(x);
        let stopped = STOPS.with(|s| s.get()) - before;
        if stopped < stops as u64 {
            result = Err(Errno(libc::EIO));
        }
        stops_ns.push((armed - base) / stops as f64);
    }
    BP_FD.with(|f| f.set(-1));
    BP_ATTR.with(|a| a.set(std::ptr::null_mut()));
    drop(fd);
    result.map(|()| BreakpointCost {
        move_ns: median(moves),
        stop_ns: median(stops_ns),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_armed_call_stops_and_costs_something() {
        let old = install_handler().expect("installing the calibration handler");
        let cost = measure_on_this_thread(3, 200);
        sys::restore_action(libc::SIGTRAP, &old).unwrap();
        let cost = cost.expect("hardware breakpoints work on this machine");
        assert!(cost.move_ns > 0.0 && cost.stop_ns > 0.0, "{cost:?}");
    }
}
