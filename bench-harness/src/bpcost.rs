//! `bpcost`: the paper's §3.2 microbenchmark (Figure 6). Each thread owns a
//! hardware execute breakpoint on itself and measures (a) the cost to move it
//! with PERF_EVENT_IOC_MODIFY_ATTRIBUTES, and (b) the total cost of one stop:
//! move it onto a function, call the function (the breakpoint fires, the
//! kernel delivers a synchronous SIGTRAP, the handler returns) — per thread
//! count 1, 2, 4, … up to 4× the cores.
//!
//! This module has its own minimal perf_event_open layer (breakpoint events
//! only) so the benchmark measures the kernel, independent of the tracer.

use crate::report::{fmt, median, Report, Table};
use crate::svg::{LineChart, Series};
use crate::Options;
use anyhow::{bail, Context, Result};
use perf_event_open_sys as sys;
use std::hint::black_box;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

const MOVES: usize = 20_000;
const STOPS: usize = 5_000;
const QUICK_MOVES: usize = 2_000;
const QUICK_STOPS: usize = 500;
/// Marks our breakpoint's SIGTRAPs (`si_perf_data`).
const SIG_DATA: u64 = 0xB9EA_C057;

/// SIGTRAPs from our breakpoints, counted by the handler.
static TRAPS: AtomicU64 = AtomicU64::new(0);

/// Functions the breakpoint is moved onto; never inlined, so a call
/// executes their first instruction.
#[inline(never)]
extern "C" fn target_a(x: u64) -> u64 {
    black_box(x).wrapping_add(1)
}

#[inline(never)]
extern "C" fn target_b(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

/// Never called: places to park the breakpoint while measuring moves.
#[inline(never)]
extern "C" fn parked_a(x: u64) -> u64 {
    black_box(x) ^ 0x55
}

#[inline(never)]
extern "C" fn parked_b(x: u64) -> u64 {
    black_box(x) ^ 0xAA
}

/// SIGTRAP handler. Async-signal-safe: one atomic increment, no allocation.
extern "C" fn on_sigtrap(_sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    TRAPS.fetch_add(1, Ordering::Relaxed);
}

fn install_handler() -> Result<()> {
    // SAFETY: sigaction is plain old data; all-zero is a valid start value.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_sigtrap as *const () as usize;
    sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: the handler only touches an atomic (async-signal-safe); sa is
    // fully initialised; the old action is not needed.
    let r = unsafe { libc::sigaction(libc::SIGTRAP, &sa, std::ptr::null_mut()) };
    if r != 0 {
        bail!("sigaction(SIGTRAP): {}", std::io::Error::last_os_error());
    }
    Ok(())
}

fn breakpoint_attr(addr: u64) -> sys::bindings::perf_event_attr {
    let mut a = sys::bindings::perf_event_attr {
        type_: sys::bindings::PERF_TYPE_BREAKPOINT,
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        bp_type: sys::bindings::HW_BREAKPOINT_X,
        sig_data: SIG_DATA,
        ..Default::default()
    };
    a.bp_addr = addr;
    a.bp_len = u64::from(sys::bindings::HW_BREAKPOINT_LEN_8);
    a.sample_period = 1;
    a.set_exclude_kernel(1);
    a.set_exclude_hv(1);
    a.set_sigtrap(1);
    // The kernel refuses sigtrap without remove_on_exec (EINVAL).
    a.set_remove_on_exec(1);
    a
}

/// A hardware execute breakpoint on the calling thread.
struct Breakpoint {
    fd: OwnedFd,
    attr: sys::bindings::perf_event_attr,
}

impl Breakpoint {
    fn open(addr: u64) -> Result<Breakpoint> {
        let mut attr = breakpoint_attr(addr);
        // SAFETY: attr is a valid, fully initialised perf_event_attr whose
        // size field matches the struct; pid 0 / cpu -1 is this thread.
        let fd = unsafe {
            sys::perf_event_open(
                &mut attr,
                0,
                -1,
                -1,
                sys::bindings::PERF_FLAG_FD_CLOEXEC as u64,
            )
        };
        if fd < 0 {
            bail!(
                "perf_event_open(breakpoint at {addr:#x}): {}",
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Breakpoint { fd, attr })
    }

    /// Moves the breakpoint to `addr` (PERF_EVENT_IOC_MODIFY_ATTRIBUTES).
    fn move_to(&mut self, addr: u64) -> Result<()> {
        self.attr.bp_addr = addr;
        // SAFETY: the fd is a live breakpoint event; attr is valid for reads
        // and describes the same event type.
        let r = unsafe { sys::ioctls::MODIFY_ATTRIBUTES(self.fd.as_raw_fd(), &mut self.attr) };
        if r < 0 {
            bail!(
                "PERF_EVENT_IOC_MODIFY_ATTRIBUTES to {addr:#x}: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(())
    }
}

fn thread_cpu_ns() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is valid for writes; CLOCK_THREAD_CPUTIME_ID always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

/// Per-operation costs measured by one thread, in ns.
#[derive(Clone, Copy, Debug)]
struct ThreadCost {
    move_wall: f64,
    move_cpu: f64,
    stop_wall: f64,
    stop_cpu: f64,
    call_wall: f64,
}

fn measure_thread(moves: usize, stops: usize, start: &Barrier) -> Result<ThreadCost> {
    let parked = [parked_a as *const () as u64, parked_b as *const () as u64];
    let targets: [(u64, extern "C" fn(u64) -> u64); 2] = [
        (target_a as *const () as u64, target_a),
        (target_b as *const () as u64, target_b),
    ];
    let mut bp = Breakpoint::open(parked[0]);
    start.wait();
    let bp = bp.as_mut().map_err(|e| anyhow::anyhow!("{e:#}"))?;
    // Calls without a breakpoint on them: the loop's own cost.
    let t0 = Instant::now();
    let mut acc = 0u64;
    for i in 0..stops {
        acc = acc.wrapping_add((targets[i & 1].1)(i as u64));
    }
    let call_wall = t0.elapsed().as_nanos() as f64 / stops as f64;

    let (w0, c0) = (Instant::now(), thread_cpu_ns());
    for i in 0..moves {
        bp.move_to(parked[i & 1])?;
    }
    let move_wall = w0.elapsed().as_nanos() as f64 / moves as f64;
    let move_cpu = (thread_cpu_ns() - c0) / moves as f64;

    let traps_before = TRAPS.load(Ordering::Relaxed);
    let (w0, c0) = (Instant::now(), thread_cpu_ns());
    for i in 0..stops {
        let (addr, f) = targets[i & 1];
        bp.move_to(addr)?;
        acc = acc.wrapping_add(f(i as u64));
    }
    let stop_wall = w0.elapsed().as_nanos() as f64 / stops as f64;
    let stop_cpu = (thread_cpu_ns() - c0) / stops as f64;
    black_box(acc);
    // Other threads count into the same counter, so only a lower bound on
    // our own traps can be checked: at least one per stop must have fired.
    let traps = TRAPS.load(Ordering::Relaxed) - traps_before;
    if traps < stops as u64 {
        bail!("only {traps} SIGTRAPs for {stops} breakpoint stops: the breakpoint did not fire");
    }
    Ok(ThreadCost {
        move_wall,
        move_cpu,
        stop_wall,
        stop_cpu,
        call_wall,
    })
}

fn measure(threads: usize, moves: usize, stops: usize) -> Result<Vec<ThreadCost>> {
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let b = Arc::clone(&barrier);
            std::thread::spawn(move || measure_thread(moves, stops, &b))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("a benchmark thread panicked"))?
        })
        .collect()
}

pub fn run(opts: &Options) -> Result<usize> {
    let mut rep = Report::new(&opts.results, "bpcost", "Hardware breakpoint cost")?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let max = if opts.quick { 2 } else { 4 * cores };
    let (moves, stops) = if opts.quick {
        (QUICK_MOVES, QUICK_STOPS)
    } else {
        (MOVES, STOPS)
    };
    install_handler().context("installing the SIGTRAP handler")?;
    let mut t = Table::new(&[
        "threads",
        "move wall (µs)",
        "move CPU (µs)",
        "stop wall (µs)",
        "stop CPU (µs)",
        "trigger+handler wall (µs)",
        "plain call (ns)",
    ]);
    let mut points: Vec<Vec<(f64, f64)>> = vec![Vec::new(); 4];
    let mut threads = 1;
    while threads <= max {
        eprintln!("[bpcost] {threads} thread(s)");
        match measure(threads, moves, stops) {
            Ok(costs) => {
                let m = |f: fn(&ThreadCost) -> f64| {
                    median(&costs.iter().map(f).collect::<Vec<_>>()) / 1000.0
                };
                let (mw, mc, sw, sc) = (
                    m(|c| c.move_wall),
                    m(|c| c.move_cpu),
                    m(|c| c.stop_wall),
                    m(|c| c.stop_cpu),
                );
                let call = m(|c| c.call_wall) * 1000.0;
                t.push(vec![
                    threads.to_string(),
                    fmt(mw, 2),
                    fmt(mc, 2),
                    fmt(sw, 2),
                    fmt(sc, 2),
                    fmt(sw - mw, 2),
                    fmt(call, 1),
                ]);
                for (k, v) in [mw, mc, sw, sc].into_iter().enumerate() {
                    points[k].push((threads as f64, v));
                }
            }
            Err(e) => rep.fail(&format!("{threads} threads"), "breakpoint benchmark", &e),
        }
        threads *= 2;
    }
    rep.note(&format!(
        "Each thread: {moves} moves between two parked addresses, then {stops} stops \
         (move onto a function + call it: #DB, SIGTRAP with si_perf_data, handler, return). \
         Median over threads of the per-thread mean; {cores} cores. \
         Wall time includes waiting for a core when threads outnumber cores."
    ));
    rep.table("bpcost", "Breakpoint cost per thread count (Figure 6)", &t)?;
    let names = [
        "move (wall)",
        "move (CPU)",
        "move+trigger+handler (wall)",
        "move+trigger+handler (CPU)",
    ];
    let chart = LineChart {
        title: "Hardware breakpoint cost vs threads".into(),
        x_label: "threads".into(),
        y_label: "µs per operation".into(),
        x_log: true,
        y_log: true,
        y_from_zero: false,
        y_reference: None,
        series: names
            .iter()
            .zip(points)
            .map(|(n, p)| Series {
                name: n.to_string(),
                points: p,
            })
            .collect(),
    };
    rep.plot("bpcost", &chart.render())?;
    rep.finish()
}
