//! `bpcost`: the paper's §3.2 microbenchmark (Figure 6). Each thread owns a
//! hardware execute breakpoint on itself and measures (a) the cost to move it
//! with PERF_EVENT_IOC_MODIFY_ATTRIBUTES, and (b) the total cost of one stop:
//! move it onto a function, call the function (the breakpoint fires, the
//! kernel delivers a synchronous SIGTRAP, the handler returns) — per thread
//! count 1, 2, 4, … up to 4× the cores.
//!
//! The measurement itself is the tracer's (`breakdance::trace::calibrate`):
//! the same breakpoint attributes, ioctl and signal path it uses.

use crate::report::{fmt, median, Report, Table};
use crate::Options;
use anyhow::{Context, Result};
use breakdance::trace::calibrate;
use breakdance_charts::{LineChart, Series};
use std::sync::{Arc, Barrier};

const MOVES: usize = 20_000;
const STOPS: usize = 5_000;
const QUICK_MOVES: usize = 2_000;
const QUICK_STOPS: usize = 500;

/// Per-operation costs measured by one thread, in ns.
#[derive(Clone, Copy, Debug)]
struct ThreadCost {
    move_wall: f64,
    move_cpu: f64,
    stop_wall: f64,
    stop_cpu: f64,
    call_wall: f64,
}

/// One thread's measurement, by the tracer's own calibration (the same
/// breakpoint attributes and ioctl the tracer uses), started with the
/// others at the barrier.
fn measure_thread(moves: usize, stops: usize, start: &Barrier) -> Result<ThreadCost> {
    start.wait();
    let c = calibrate::measure_on_this_thread(moves, stops)
        .map_err(|e| anyhow::anyhow!("breakpoint calibration: {e}"))?;
    Ok(ThreadCost {
        move_wall: c.move_wall_ns,
        move_cpu: c.move_cpu_ns,
        stop_wall: c.stop_wall_ns + c.call_wall_ns,
        stop_cpu: c.stop_cpu_ns,
        call_wall: c.call_wall_ns,
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

/// Gives SIGTRAP back its previous action when the experiment ends.
struct RestoreSigtrap(libc::sigaction);

impl Drop for RestoreSigtrap {
    fn drop(&mut self) {
        let _ = breakdance::sys::restore_action(libc::SIGTRAP, &self.0);
    }
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
    let previous = calibrate::install_handler()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("installing the SIGTRAP handler")?;
    let _restore = RestoreSigtrap(previous);
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
