//! `tracelen`: longer traces against the sample floor.
//!
//! Every trace starts with a sample, and on a machine like this one (a KVM
//! guest) one bare sample costs the program 40–80 µs of CPU (`cargo bench
//! --bench tracer`, "the sample floor"), more than the 32 branches after
//! it. Emulate mode can follow a trace further than a hardware LBR holds
//! for little more: `--lbr N` with N above 32. This experiment asks whether
//! that buys a better profile for the same overhead.
//!
//! Per workload, rounds interleave one native run with one profiled run
//! per (trace length N, sampling period) on the training input; a
//! profiled run preloads the library and autostarts it, so its CPU time is
//! the application's own. Per
//! configuration it reports the CPU overhead (median over rounds), the
//! cost per 32 recorded branches, and the quality of the merged profile
//! against callgrind, scored as `quality` scores it. Points of equal
//! overhead can then be compared across N: a plot per workload puts
//! instruction overlap against CPU overhead, one line per N.

use crate::autofdo::tracer_afdo;
use crate::profiler::Tracer;
use crate::quality::{exact_profile, recorded, reference, score, similarity_to_exact};
use crate::report::{fmt, median, Report, Table};
use crate::runner;
use crate::workloads::{self, Input};
use crate::Options;
use anyhow::Result;
use breakdance_charts::{LineChart, Series};
use std::path::PathBuf;

const LENGTHS: [u32; 5] = [32, 64, 128, 256, 512];
const PERIODS: [u64; 3] = [1_000_000, 3_000_000, 10_000_000];
const ROUNDS: usize = 5;
const QUICK_LENGTHS: [u32; 2] = [32, 128];
const QUICK_PERIODS: [u64; 1] = [1_000_000];
const QUICK_ROUNDS: usize = 1;

/// One (trace length, period) of one workload, over the rounds.
struct Config {
    lbr: u32,
    period: u64,
    cpu_s: Vec<f64>,
    scripts: Vec<PathBuf>,
    afdo_files: Vec<PathBuf>,
    traces: u64,
    entries: u64,
    breakpoints: u64,
}

struct Row {
    workload: String,
    lbr: u32,
    period: u64,
    overhead: f64,
    traces_per_run: f64,
    us_per_32: f64,
    stops_per_trace: f64,
    instruction_overlap: f64,
    edge_overlap: f64,
    function_similarity: f64,
    invalid: u64,
}

pub fn run(opts: &Options) -> Result<usize> {
    let mut rep = Report::new(
        &opts.results,
        "tracelen",
        "Longer traces against the sample floor",
    )?;
    let ws = workloads::Workspace {
        cache: opts.cache.clone(),
        quick: opts.quick,
    };
    let (lengths, periods, rounds): (&[u32], &[u64], usize) = if opts.quick {
        (&QUICK_LENGTHS, &QUICK_PERIODS, QUICK_ROUNDS)
    } else {
        (&LENGTHS, &PERIODS, ROUNDS)
    };
    let tracer = Tracer::locate()?;
    let work = ws.cache.join("runs").join("tracelen");
    let mut rows = Vec::new();
    for kind in workloads::kinds(opts.quick) {
        let name = kind.name();
        let result = (|| -> Result<Vec<Row>> {
            let w = workloads::prepare(&ws, kind)?;
            let r = reference(&ws, &w, Input::Train)?;
            let wdir = work.join(name);
            std::fs::create_dir_all(&wdir)?;
            let exact_prof = if kind.source_built() {
                Some(exact_profile(&r, &w.hot_module, &wdir)?)
            } else {
                None
            };
            let cmd = w.command(Input::Train);
            let mut configs: Vec<Config> = lengths
                .iter()
                .flat_map(|&lbr| {
                    periods.iter().map(move |&period| Config {
                        lbr,
                        period,
                        cpu_s: Vec::new(),
                        scripts: Vec::new(),
                        afdo_files: Vec::new(),
                        traces: 0,
                        entries: 0,
                        breakpoints: 0,
                    })
                })
                .collect();
            let mut native = Vec::new();
            for round in 0..rounds {
                eprintln!("[tracelen] {name}: round {} of {rounds}", round + 1);
                native.push(runner::run_timed(&cmd)?.cpu_s());
                for c in configs.iter_mut() {
                    let out = wdir.join(format!("n{}-p{}-{round}", c.lbr, c.period));
                    let lbr = c.lbr.to_string();
                    // The application's own CPU: the library preloaded and
                    // autostarted, no profiler-ctl around it.
                    let env = [
                        ("BREAKDANCE_LBR", lbr.as_str()),
                        ("BREAKDANCE_LOOKAHEAD", "emulate"),
                    ];
                    let (t, s) = tracer.autostarted_run(&cmd, c.period, &out, &env)?;
                    c.cpu_s.push(t.cpu_s());
                    c.traces += s.counters.traces_started;
                    c.entries += s.counters.entries_recorded;
                    c.breakpoints += s.counters.breakpoints;
                    c.scripts.push(out.join("perf.script"));
                    if let Ok(f) = tracer_afdo(&out, &r.module) {
                        c.afdo_files.push(f);
                    }
                }
            }
            let native = median(&native);
            let mut out = Vec::new();
            for c in &configs {
                let rec = recorded(&c.scripts, &r.module)?;
                let scores = score(&r, &rec);
                let function_similarity = match &exact_prof {
                    Some(exact) => similarity_to_exact(
                        &c.afdo_files,
                        &w.hot_module,
                        exact,
                        &wdir.join(format!("n{}-p{}", c.lbr, c.period)),
                    )?,
                    None => f64::NAN,
                };
                let profiled = median(&c.cpu_s);
                let per_run = |n: u64| n as f64 / rounds as f64;
                out.push(Row {
                    workload: name.to_string(),
                    lbr: c.lbr,
                    period: c.period,
                    overhead: profiled / native,
                    traces_per_run: per_run(c.traces),
                    us_per_32: (profiled - native) * 1e6 / per_run(c.entries).max(1.0) * 32.0,
                    stops_per_trace: c.breakpoints as f64 / c.traces.max(1) as f64,
                    instruction_overlap: scores.instruction_overlap,
                    edge_overlap: scores.edge_overlap,
                    function_similarity,
                    invalid: scores.invalid,
                });
            }
            Ok(out)
        })();
        match result {
            Ok(r) => rows.extend(r),
            Err(e) => rep.fail(name, "trace lengths", &e),
        }
    }
    write(&mut rep, &rows, rounds)?;
    rep.finish()
}

fn write(rep: &mut Report, rows: &[Row], rounds: usize) -> Result<()> {
    let mut t = Table::new(&[
        "workload",
        "N",
        "period (ms)",
        "CPU overhead",
        "traces per run",
        "extra µs per 32 branches",
        "stops per trace",
        "instruction overlap",
        "taken-edge overlap",
        "function similarity (AutoFDO)",
        "invalid entries",
    ]);
    for r in rows {
        t.push(vec![
            r.workload.clone(),
            r.lbr.to_string(),
            fmt(r.period as f64 / 1e6, 0),
            fmt(r.overhead, 3),
            fmt(r.traces_per_run, 0),
            fmt(r.us_per_32, 1),
            fmt(r.stops_per_trace, 2),
            fmt(r.instruction_overlap, 3),
            fmt(r.edge_overlap, 3),
            fmt(r.function_similarity, 3),
            r.invalid.to_string(),
        ]);
    }
    rep.note(&format!(
        "Training input, emulate mode, task-clock sampling. {rounds} interleaved rounds, each one \
         native run and one profiled run per configuration (the library preloaded and \
         autostarted: the application's CPU, without profiler-ctl); CPU overhead is the median \
         profiled CPU time (user + system) over the median native one. \"Extra µs per 32 branches\" \
         divides the median extra CPU by the entries recorded per run, times 32: what a \
         hardware-LBR-sized piece of profile costs. Quality is scored as in `quality`: the \
         rounds' profiles merged, against callgrind on the same input; invalid entries must be 0."
    ));
    rep.table("tracelen", "Trace length, cost and quality", &t)?;
    let mut names: Vec<&str> = rows.iter().map(|r| r.workload.as_str()).collect();
    names.dedup();
    for name in names {
        let mut lengths: Vec<u32> = rows
            .iter()
            .filter(|r| r.workload == name)
            .map(|r| r.lbr)
            .collect();
        lengths.dedup();
        let series = lengths
            .iter()
            .map(|&n| Series {
                name: format!("N = {n}"),
                points: rows
                    .iter()
                    .filter(|r| r.workload == name && r.lbr == n)
                    .map(|r| ((r.overhead - 1.0) * 100.0, r.instruction_overlap))
                    .collect(),
            })
            .collect();
        let chart = LineChart {
            title: format!("{name}: instruction overlap against CPU overhead, per trace length"),
            x_label: "CPU overhead (%)".into(),
            y_label: "instruction-weight overlap with callgrind".into(),
            x_log: false,
            y_log: false,
            y_from_zero: false,
            y_reference: Some(1.0),
            series,
        };
        rep.plot(&format!("{name}_overlap_vs_overhead"), &chart.render())?;
    }
    Ok(())
}
