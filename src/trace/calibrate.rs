//! The breakpoint-cost microbenchmark of the paper (§3.2, Figure 6): what it
//! costs to move a hardware breakpoint (one PERF_EVENT_IOC_MODIFY_ATTRIBUTES)
//! and what one stop costs in all (move + trigger + SIGTRAP delivery +
//! handler + return), measured on the calling thread in wall and CPU time.
//! Used by `cargo bench` and bench-harness `bpcost` (which runs it on many
//! threads at once). It installs its own SIGTRAP handler for the duration,
//! so it refuses to run during a session.
//!
//! Also the floor under every trace: what one sample costs the sampled
//! thread in CPU time when the handler does nothing (task-clock overflow,
//! SIGTRAP delivery, an empty handler, and whatever the machine adds: in a
//! KVM guest, the timer's exits to the host are charged to the running
//! task). The event runs without a limit, as the tracer's does
//! (`events::set_sampling_period`).

use std::cell::Cell;
use std::ffi::c_void;
use std::hint::black_box;
use std::os::fd::AsRawFd;
use std::time::Instant;

use perf_event_open_sys::bindings as pb;

use crate::sys::{self, Errno};

use super::events::{breakpoint_attr, sampling_attr, SamplingEvent};

thread_local! {
    /// Stops taken by the calling thread (const-initialised: no lazy
    /// allocation on first use in the handler).
    static STOPS: Cell<u64> = const { Cell::new(0) };
    /// Samples taken by the calling thread, and its sampling event when
    /// the handler re-arms it (-1 when not).
    static SAMPLES: Cell<u64> = const { Cell::new(0) };
    static REARM_FD: Cell<i32> = const { Cell::new(-1) };
}

/// `sig_data` of the calibration breakpoint ("bdca"), not the tracer's.
const CALIBRATION_TAG: u64 = 0x6264_6361;
/// `sig_data` of the calibration sampling event ("bdcs").
const CALIBRATION_SAMPLE_TAG: u64 = 0x6264_6373;

/// Functions the breakpoint is moved onto; never inlined, so a call runs
/// their first instruction.
#[inline(never)]
extern "C" fn target_a(x: u64) -> u64 {
    black_box(x).wrapping_add(1)
}

#[inline(never)]
extern "C" fn target_b(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

/// Never called: where the breakpoint waits while moves are timed.
#[inline(never)]
extern "C" fn parked_a(x: u64) -> u64 {
    black_box(x) ^ 0x55
}

#[inline(never)]
extern "C" fn parked_b(x: u64) -> u64 {
    black_box(x) ^ 0xaa
}

extern "C" fn on_calibration_trap(_sig: i32, info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    if sys::siginfo_perf_data(unsafe { &*info }) == CALIBRATION_SAMPLE_TAG {
        // What the tracer's sample handler does at the least: nothing
        // (until the fourteenth round of results/speed: re-arm its
        // one-shot event).
        SAMPLES.with(|s| s.set(s.get() + 1));
        let fd = REARM_FD.with(Cell::get);
        if fd >= 0 {
            let _ = sys::perf_refresh(fd, 1);
        }
        return;
    }
    STOPS.with(|s| s.set(s.get() + 1));
}

/// Per-operation costs on one thread, in nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct BreakpointCost {
    /// One move of the breakpoint (the ioctl alone).
    pub move_wall_ns: f64,
    pub move_cpu_ns: f64,
    /// One stop: move + trigger + signal delivery + handler + return, less
    /// the cost of the call itself.
    pub stop_wall_ns: f64,
    pub stop_cpu_ns: f64,
    /// One call of the target without a breakpoint on it.
    pub call_wall_ns: f64,
}

/// Installs the calibration handler; returns the previous action, to be
/// given back with `sys::restore_action`. Fails (EBUSY) during a session.
pub fn install_handler() -> Result<libc::sigaction, Errno> {
    if super::tracer().is_some_and(|t| t.running.load(std::sync::atomic::Ordering::Acquire)) {
        return Err(Errno(libc::EBUSY));
    }
    sys::warm_sigaction();
    sys::install_handler(
        libc::SIGTRAP,
        on_calibration_trap,
        sys::Blocked::These(&[]),
        0,
    )
}

/// [`sys::thread_cpu_ns`] as f64, for the per-operation divisions here.
fn thread_cpu_ns() -> f64 {
    sys::thread_cpu_ns() as f64
}

/// Measures `moves` moves and `stops` stops on the calling thread, with the
/// handler installed by [`install_handler`] (once per process, shared by
/// threads measuring at the same time). EIO if a stop did not trap.
pub fn measure_on_this_thread(moves: usize, stops: usize) -> Result<BreakpointCost, Errno> {
    let parked = [parked_a as *const () as u64, parked_b as *const () as u64];
    let targets: [(u64, extern "C" fn(u64) -> u64); 2] = [
        (target_a as *const () as u64, target_a),
        (target_b as *const () as u64, target_b),
    ];
    let mut attr = breakpoint_attr();
    attr.sig_data = CALIBRATION_TAG;
    attr.__bindgen_anon_3.bp_addr = parked[0];
    let fd = sys::perf_event_open(&mut attr, 0)?;
    let raw = fd.as_raw_fd();
    attr.set_disabled(0);
    let mut move_to = |addr: u64| {
        attr.__bindgen_anon_3.bp_addr = addr;
        sys::perf_modify_attributes(raw, &mut attr)
    };
    let (moves, stops) = (moves.max(1), stops.max(1));

    // The loop's own cost: calls without a breakpoint on them.
    let t = Instant::now();
    let mut acc = 0u64;
    for i in 0..stops {
        acc = acc.wrapping_add((targets[i & 1].1)(i as u64));
    }
    let call_wall_ns = t.elapsed().as_nanos() as f64 / stops as f64;

    let (t, c) = (Instant::now(), thread_cpu_ns());
    for i in 0..moves {
        move_to(parked[i & 1])?;
    }
    let move_wall_ns = t.elapsed().as_nanos() as f64 / moves as f64;
    let move_cpu_ns = (thread_cpu_ns() - c) / moves as f64;

    let before = STOPS.with(|s| s.get());
    let (t, c) = (Instant::now(), thread_cpu_ns());
    for i in 0..stops {
        let (addr, f) = targets[i & 1];
        move_to(addr)?;
        acc = acc.wrapping_add(f(i as u64));
    }
    let stop_wall_ns = t.elapsed().as_nanos() as f64 / stops as f64 - call_wall_ns;
    let stop_cpu_ns = (thread_cpu_ns() - c) / stops as f64;
    black_box(acc);
    drop(fd);
    if STOPS.with(|s| s.get()) - before < stops as u64 {
        return Err(Errno(libc::EIO));
    }
    Ok(BreakpointCost {
        move_wall_ns,
        move_cpu_ns,
        stop_wall_ns,
        stop_cpu_ns,
        call_wall_ns,
    })
}

/// What sampling costs the sampled thread, from one run of a workload
/// without sampling and one with.
#[derive(Clone, Copy, Debug)]
pub struct SampleCost {
    /// Thread CPU time of the workload alone.
    pub native_cpu_ns: f64,
    /// Thread CPU time of the workload sampled.
    pub sampled_cpu_ns: f64,
    pub samples: u64,
}

impl SampleCost {
    /// CPU time each sample added.
    pub fn per_sample_ns(&self) -> f64 {
        (self.sampled_cpu_ns - self.native_cpu_ns) / self.samples.max(1) as f64
    }
}

/// Runs `work` once plain and once under a task-clock sampling event of
/// `period_ns` whose handler does nothing, on the calling thread, with the
/// handler installed by [`install_handler`]: an event without a limit of
/// overflows (the tracer's), or with `one_shot` a limit of one that the
/// handler renews (`PERF_EVENT_IOC_REFRESH`), as the tracer's was until
/// the fourteenth round of results/speed. EIO if no sample arrived.
pub fn measure_sampling_on_this_thread(
    period_ns: u64,
    one_shot: bool,
    work: &mut dyn FnMut(),
) -> Result<SampleCost, Errno> {
    let c = thread_cpu_ns();
    work();
    let native_cpu_ns = thread_cpu_ns() - c;

    let mut attr = sampling_attr(&SamplingEvent {
        type_: pb::PERF_TYPE_SOFTWARE,
        config: pb::PERF_COUNT_SW_TASK_CLOCK as u64,
        period: period_ns,
        freq: false,
    });
    attr.sig_data = CALIBRATION_SAMPLE_TAG;
    let fd = sys::perf_event_open(&mut attr, 0)?;
    let raw = fd.as_raw_fd();
    let before = SAMPLES.with(Cell::get);
    let c = thread_cpu_ns();
    if one_shot {
        REARM_FD.with(|f| f.set(raw));
        sys::perf_refresh(raw, 1)?;
    } else {
        sys::perf_enable(raw)?;
    }
    work();
    let _ = sys::perf_disable(raw);
    let sampled_cpu_ns = thread_cpu_ns() - c;
    REARM_FD.with(|f| f.set(-1));
    drop(fd);
    let samples = SAMPLES.with(Cell::get) - before;
    if samples == 0 {
        return Err(Errno(libc::EIO));
    }
    Ok(SampleCost {
        native_cpu_ns,
        sampled_cpu_ns,
        samples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests here replace the process's SIGTRAP action in turn.
    static SIGTRAP_ACTION: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn every_armed_call_stops_and_costs_something() {
        let _g = SIGTRAP_ACTION.lock().unwrap_or_else(|e| e.into_inner());
        let old = install_handler().expect("installing the calibration handler");
        let cost = measure_on_this_thread(200, 200);
        sys::restore_action(libc::SIGTRAP, &old).unwrap();
        let cost = cost.expect("hardware breakpoints work on this machine");
        assert!(
            cost.move_wall_ns > 0.0 && cost.stop_wall_ns > 0.0 && cost.stop_cpu_ns > 0.0,
            "{cost:?}"
        );
    }

    #[test]
    fn sampling_delivers_samples_that_cost_cpu() {
        let _g = SIGTRAP_ACTION.lock().unwrap_or_else(|e| e.into_inner());
        let old = install_handler().expect("installing the calibration handler");
        // Computes in user mode until the thread has used 50 ms of CPU:
        // about 50 samples at 1 ms however fast the machine is. (The clock
        // is read rarely: reading it is a system call, and the sampling
        // event excludes kernel time, so a loop of clock reads is seldom
        // sampled.)
        let mut work = || {
            let t = thread_cpu_ns();
            let mut x = 1u64;
            while thread_cpu_ns() - t < 50e6 {
                for _ in 0..100_000 {
                    x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
            black_box(x);
        };
        for one_shot in [false, true] {
            let cost = measure_sampling_on_this_thread(1_000_000, one_shot, &mut work);
            let cost = cost.expect("task-clock sampling works on this machine");
            assert!(
                cost.samples >= 25,
                "about 50 samples expected (one-shot: {one_shot}): {cost:?}"
            );
        }
        sys::restore_action(libc::SIGTRAP, &old).unwrap();
    }
}
