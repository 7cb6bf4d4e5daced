//! `overhead`: wall and CPU time of each workload native, with the library
//! loaded but idle, and profiled at several task-clock periods in each
//! look-ahead mode (paper, emulate) side by side (the paper's
//! Table 1); the tracer's own cost breakdown, emulation included (Figure 3);
//! the cost of a trace in each mode (stops, time, emulation rates); and the
//! branch factors t, s and t/(1−s) of the paper's algorithm (Figure 4, §3.1).

use crate::profiler::{Summary, Tracer};
use crate::report::{fmt, geomean, median, spread, Report, Table};
use crate::runner::{self, Cmd, Timing};
use crate::workloads::{self, Input, Workload, Workspace};
use crate::Options;
use anyhow::Result;
use breakdance_charts::{BarChart, LineChart, Series};
use breakdance_protocol::Lookahead;

/// Task-clock periods (ns) of the full run: 1 ms to 30 ms, a 30× span.
const PERIODS: [u64; 4] = [1_000_000, 3_000_000, 10_000_000, 30_000_000];
const QUICK_PERIODS: [u64; 1] = [1_000_000];
/// The modes measured side by side (verify is a check, not a way to run).
const MODES: [Lookahead; 2] = [Lookahead::Paper, Lookahead::Emulate];
const RUNS: usize = 5;
const QUICK_RUNS: usize = 3;

/// One column of the experiment: how a workload is run.
#[derive(Clone, Copy, PartialEq)]
enum Config {
    Native,
    LoadedIdle,
    Profiled(u64, Lookahead),
}

impl Config {
    fn label(self) -> String {
        match self {
            Config::Native => "native".into(),
            Config::LoadedIdle => "loaded, off".into(),
            Config::Profiled(p, m) => format!("{} ms {m}", fmt(p as f64 / 1e6, 0)),
        }
    }
}

/// Measurements of one workload.
struct Measured {
    name: String,
    /// runs[config index] = times of each round.
    runs: Vec<Vec<Timing>>,
    /// Summaries per profiled config index (sum over rounds).
    summaries: Vec<Option<Summary>>,
}

pub fn run(opts: &Options) -> Result<usize> {
    let mut rep = Report::new(&opts.results, "overhead", "Profiler overhead")?;
    let ws = Workspace {
        cache: opts.cache.clone(),
        quick: opts.quick,
    };
    let periods: &[u64] = if opts.quick { &QUICK_PERIODS } else { &PERIODS };
    let rounds = if opts.quick { QUICK_RUNS } else { RUNS };
    let tracer = Tracer::locate();
    if let Err(e) = &tracer {
        rep.fail("all", "locate tracer", e);
    }
    let mut configs = vec![Config::Native];
    if tracer.is_ok() {
        configs.push(Config::LoadedIdle);
        for &p in periods {
            configs.extend(MODES.iter().map(|&m| Config::Profiled(p, m)));
        }
    }
    let mut all = Vec::new();
    for kind in workloads::kinds(opts.quick) {
        let w = match workloads::prepare(&ws, kind) {
            Ok(w) => w,
            Err(e) => {
                rep.fail(kind.name(), "prepare", &e);
                continue;
            }
        };
        all.push(measure(
            &mut rep,
            &w,
            tracer.as_ref().ok(),
            &configs,
            rounds,
        ));
    }
    write_raw(&mut rep, &all, &configs)?;
    write_table1(&mut rep, &all, &configs)?;
    write_breakdown(&mut rep, &all, &configs)?;
    write_trace_cost(&mut rep, &all, &configs)?;
    write_factors(&mut rep, &all, &configs)?;
    rep.note(&format!(
        "Interleaved rounds: {rounds}; sampling event task-clock, periods {} ms, \
         look-ahead modes paper and emulate. \
         Ratios are per-round profiled/native wall (and CPU) times: median (min–max).",
        periods
            .iter()
            .map(|p| fmt(*p as f64 / 1e6, 0))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    rep.finish()
}

/// Runs every config once per round, interleaved, so drifts in machine
/// speed hit all configs alike.
fn measure(
    rep: &mut Report,
    w: &Workload,
    tracer: Option<&Tracer>,
    configs: &[Config],
    rounds: usize,
) -> Measured {
    let base = w.command(Input::Eval);
    let mut runs: Vec<Vec<Timing>> = vec![Vec::new(); configs.len()];
    let mut summaries: Vec<Option<Summary>> = vec![None; configs.len()];
    let mut broken = vec![false; configs.len()];
    let out = runner::tempfile_path(&format!("overhead-{}", w.name()));
    for round in 0..rounds {
        eprintln!("[overhead] {} round {}/{rounds}", w.name(), round + 1);
        for (ci, &config) in configs.iter().enumerate() {
            if broken[ci] {
                continue;
            }
            let result = run_config(&base, config, tracer, &out);
            match result {
                Ok((t, s)) => {
                    runs[ci].push(t);
                    if let Some(s) = s {
                        summaries[ci].get_or_insert_with(Summary::default).add(&s);
                    }
                }
                Err(e) => {
                    rep.fail(w.name(), &config.label(), &e);
                    broken[ci] = true;
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    Measured {
        name: w.name().to_string(),
        runs,
        summaries,
    }
}

fn run_config(
    base: &Cmd,
    config: Config,
    tracer: Option<&Tracer>,
    out: &std::path::Path,
) -> Result<(Timing, Option<Summary>)> {
    match (config, tracer) {
        (Config::Native, _) => Ok((runner::run_timed(base)?, None)),
        (Config::LoadedIdle, Some(t)) => Ok((runner::run_timed(&t.loaded_idle(base))?, None)),
        (Config::Profiled(p, m), Some(t)) => {
            let (timing, s) = t.record_run_with(base, p, out, &["--lookahead", m.name()])?;
            Ok((timing, Some(s)))
        }
        _ => anyhow::bail!("tracer not built"),
    }
}

/// Per-round ratios of config `ci` to native, by `f` (wall or CPU).
fn ratios(m: &Measured, ci: usize, f: fn(&Timing) -> f64) -> Vec<f64> {
    m.runs[0]
        .iter()
        .zip(&m.runs[ci])
        .map(|(n, p)| f(p) / f(n))
        .collect()
}

fn write_raw(rep: &mut Report, all: &[Measured], configs: &[Config]) -> Result<()> {
    let mut t = Table::new(&["workload", "config", "round", "wall_s", "cpu_s"]);
    for m in all {
        for (ci, c) in configs.iter().enumerate() {
            for (r, timing) in m.runs[ci].iter().enumerate() {
                t.push(vec![
                    m.name.clone(),
                    c.label(),
                    r.to_string(),
                    fmt(timing.wall_s, 4),
                    fmt(timing.cpu_s(), 4),
                ]);
            }
        }
    }
    rep.write("runs.csv", &t.to_csv())
}

/// Table 1: median wall-time ratio (spread) per config, geomean row.
fn write_table1(rep: &mut Report, all: &[Measured], configs: &[Config]) -> Result<()> {
    let mut headers = vec!["workload".to_string(), "native wall (s)".to_string()];
    headers.extend(configs[1..].iter().map(|c| format!("{} wall", c.label())));
    headers.extend(configs[1..].iter().map(|c| format!("{} CPU", c.label())));
    let mut t = Table {
        headers,
        rows: Vec::new(),
    };
    let n = configs.len() - 1;
    let mut medians: Vec<Vec<f64>> = vec![Vec::new(); 2 * n];
    for m in all {
        let mut row = vec![m.name.clone(), fmt(median(&walls(&m.runs[0])), 3)];
        let mut cpu_cells = Vec::new();
        for ci in 1..configs.len() {
            let w = ratios(m, ci, |t| t.wall_s);
            let c = ratios(m, ci, Timing::cpu_s);
            medians[ci - 1].push(median(&w));
            medians[n + ci - 1].push(median(&c));
            row.push(spread(&w));
            cpu_cells.push(spread(&c));
        }
        row.extend(cpu_cells);
        t.push(row);
    }
    let mut geo = vec!["geomean".to_string(), String::new()];
    geo.extend(medians.iter().map(|v| fmt(geomean(v), 3)));
    t.push(geo);
    rep.table("table1", "Overhead: profiled / native time (Table 1)", &t)?;
    type Measure = (&'static str, &'static str, fn(&Timing) -> f64);
    let kinds: [Measure; 2] = [
        ("overhead_vs_rate", "wall time", |t| t.wall_s),
        ("overhead_cpu_vs_rate", "CPU time", Timing::cpu_s),
    ];
    for (file, what, f) in kinds {
        // One line per mode: the geomean over workloads of the median ratio.
        let series = MODES
            .iter()
            .map(|&mode| Series {
                name: format!("{mode} (geomean)"),
                points: configs
                    .iter()
                    .enumerate()
                    .filter_map(|(ci, c)| match c {
                        Config::Profiled(p, m) if *m == mode => {
                            let per_workload: Vec<f64> =
                                all.iter().map(|w| median(&ratios(w, ci, f))).collect();
                            Some((1e9 / *p as f64, geomean(&per_workload)))
                        }
                        _ => None,
                    })
                    .collect(),
            })
            .collect();
        let chart = LineChart {
            title: format!("Overhead vs sampling rate ({what})"),
            x_label: "samples per second of CPU time (task-clock)".into(),
            y_label: format!("{what}, profiled / native"),
            x_log: true,
            y_log: false,
            y_from_zero: false,
            y_reference: Some(1.0),
            series,
        };
        rep.plot(file, &chart.render())?;
    }
    Ok(())
}

fn walls(v: &[Timing]) -> Vec<f64> {
    v.iter().map(|t| t.wall_s).collect()
}

/// Figure 3: where profiled CPU time goes. The application's share is the
/// native run's CPU time; the handlers' shares come from the tracer's own
/// counters (time inside its signal handlers); what remains of the extra
/// CPU time is the kernel's: debug traps, timer samples, signal delivery
/// and return, breakpoint moves, the library's loading and control thread.
/// The worker thread and the session's start and stop (which writes the
/// outputs) have their own counters and columns. A negative remainder is
/// measurement noise and has its own column. Emulating and decoding are
/// shown as shares too, but they are time spent inside the handlers, so
/// they are not added to the parts.
fn write_breakdown(rep: &mut Report, all: &[Measured], configs: &[Config]) -> Result<()> {
    let mut t = Table::new(&[
        "workload",
        "period",
        "profiled CPU/run (s)",
        "native CPU/run (s)",
        "application %",
        "kernel traps, signals, other %",
        "breakpoint handler %",
        "sampling handler %",
        "worker thread %",
        "start and stop %",
        "of the handlers, emulation %",
        "of the handlers, decoding %",
        "noise (negative residual) %",
        "samples/run",
        "breakpoints/run",
        "traces/run",
        "extra CPU per breakpoint (µs)",
    ]);
    let names = [
        "application",
        "kernel: traps, signals, other",
        "breakpoint handler",
        "sampling handler",
        "worker thread",
        "start and stop",
    ];
    let mut cats = Vec::new();
    let mut segs: Vec<Vec<Option<f64>>> = vec![Vec::new(); names.len()];
    let fastest_period = configs.iter().find_map(|c| match c {
        Config::Profiled(p, _) => Some(*p),
        _ => None,
    });
    for m in all {
        let native = median(&m.runs[0].iter().map(Timing::cpu_s).collect::<Vec<_>>());
        for (ci, c) in configs.iter().enumerate() {
            let (Config::Profiled(period, mode), Some(s)) = (c, &m.summaries[ci]) else {
                continue;
            };
            let n = m.runs[ci].len().max(1) as f64;
            let profiled = m.runs[ci].iter().map(Timing::cpu_s).sum::<f64>() / n;
            let counts = &s.counters;
            // Decoding and emulation are time inside the handlers: columns
            // of their own, not parts beside them.
            let counted = [
                counts.breakpoint_ns,
                counts.sampling_ns,
                counts.worker_ns,
                counts.start_stop_ns,
            ]
            .map(|x| x as f64 / n / 1e9);
            // What the native run and the handlers do not explain. When
            // timing noise makes it negative (profiled < native + handlers,
            // as happens at long periods), it is not a cost of the kernel:
            // it is reported as noise, and the kernel's share as 0.
            let residual = profiled - native - counted.iter().sum::<f64>();
            let (kernel, noise) = if residual >= 0.0 {
                (residual, 0.0)
            } else {
                (0.0, residual)
            };
            let parts = [
                native, kernel, counted[0], counted[1], counted[2], counted[3],
            ];
            // Shares of the profiled CPU time: with the noise column they
            // add up to 100.
            let pct = |x: f64| 100.0 * x / profiled;
            let per_bp = (profiled - native) / (counts.breakpoints as f64 / n) * 1e6;
            let mut row = vec![m.name.clone(), c.label(), fmt(profiled, 3), fmt(native, 3)];
            row.extend(parts.iter().map(|&x| fmt(pct(x), 2)));
            row.push(fmt(pct(counts.emulation_ns as f64 / n / 1e9), 2));
            row.push(fmt(pct(counts.decode_ns as f64 / n / 1e9), 2));
            row.push(fmt(pct(noise), 2));
            row.extend([
                fmt(counts.samples as f64 / n, 0),
                fmt(counts.breakpoints as f64 / n, 0),
                fmt(counts.traces_completed as f64 / n, 0),
                fmt(per_bp, 1),
            ]);
            t.push(row);
            if Some(*period) == fastest_period {
                cats.push(format!("{} {mode}", m.name));
                // Bars in % of native CPU time: their height is the overhead.
                for (k, x) in parts.iter().enumerate() {
                    segs[k].push(Some(100.0 * x / native));
                }
            }
        }
    }
    rep.table("breakdown", "Profiled CPU time by component (Figure 3)", &t)?;
    let label = fastest_period.map_or(String::new(), |p| format!("{} ms", fmt(p as f64 / 1e6, 0)));
    let chart = BarChart {
        title: format!("Profiled CPU time by component, period {label}"),
        y_label: "% of native CPU time".into(),
        categories: cats,
        series: names.iter().map(|s| s.to_string()).zip(segs).collect(),
        stacked: true,
        y_reference: Some(100.0),
    };
    rep.plot("breakdown", &chart.render())
}

/// What a trace costs in each mode: breakpoint stops per trace, extra CPU
/// per trace (the profiled run's CPU time beyond the native one, over its
/// traces: median over rounds), and for emulate mode the emulator's rates:
/// nanoseconds per emulated instruction, decodes per 100 instructions run
/// and decoding's share of the emulation time, segments and checkpoints
/// per trace, the share of checkpoints that did not match or were never
/// reached, and the recorded branches per µs of profiler CPU: of the
/// handlers' own time (`sampling_ns + breakpoint_ns`, by their clock), and
/// of the extra CPU per trace (which adds the kernel's signal deliveries,
/// the worker and the start and stop, but moves with the machine's noise).
fn write_trace_cost(rep: &mut Report, all: &[Measured], configs: &[Config]) -> Result<()> {
    let mut t = Table::new(&[
        "workload",
        "period",
        "mode",
        "traces/run",
        "stops/trace",
        "extra CPU/trace (µs), median (min–max)",
        "emulated ns/instruction",
        "decodes/100 instructions",
        "decoding % of emulation",
        "instructions/segment",
        "segments/trace",
        "mismatched checkpoints %",
        "unreached segments %",
        "entries/trace",
        "branches/µs of handler time",
        "branches/µs of extra CPU",
    ]);
    for m in all {
        let native: Vec<f64> = m.runs[0].iter().map(Timing::cpu_s).collect();
        for (ci, c) in configs.iter().enumerate() {
            let (Config::Profiled(period, mode), Some(s)) = (c, &m.summaries[ci]) else {
                continue;
            };
            let k = &s.counters;
            let n = m.runs[ci].len().max(1) as f64;
            let traces = k.traces_started as f64 / n;
            // Per round: (profiled − native) CPU over that run's share of traces.
            let per_trace: Vec<f64> = m.runs[ci]
                .iter()
                .zip(&native)
                .map(|(p, nat)| (p.cpu_s() - nat) / traces.max(1.0) * 1e6)
                .collect();
            let ratio = |a: u64, b: u64| {
                if b == 0 {
                    String::new()
                } else {
                    fmt(a as f64 / b as f64, 2)
                }
            };
            let pct = |a: u64, b: u64| {
                if b == 0 {
                    String::new()
                } else {
                    fmt(100.0 * a as f64 / b as f64, 2)
                }
            };
            t.push(vec![
                m.name.clone(),
                format!("{} ms", fmt(*period as f64 / 1e6, 0)),
                mode.to_string(),
                fmt(traces, 0),
                ratio(k.breakpoints, k.traces_started),
                spread(&per_trace),
                ratio(k.emulation_ns, k.emulated_steps),
                pct(k.emulation_decodes, k.emulated_steps_run),
                pct(k.decode_ns, k.emulation_ns),
                ratio(k.emulated_steps, k.segments),
                ratio(k.segments, k.traces_started),
                pct(
                    k.speculation_mismatch_registers + k.speculation_mismatch_memory,
                    k.checkpoints,
                ),
                pct(k.checkpoint_unreached, k.segments),
                ratio(k.entries_recorded, k.traces_started),
                ratio(k.entries_recorded * 1000, k.sampling_ns + k.breakpoint_ns),
                per_extra_us(k.entries_recorded as f64 / traces.max(1.0), &per_trace),
            ]);
        }
    }
    rep.table("trace_cost", "What a trace costs, by look-ahead mode", &t)
}

/// Recorded branches per µs of the extra CPU a trace cost (the rounds'
/// median); empty when that median is not above zero (the profiled run
/// was no slower than the native one, within the machine's noise).
fn per_extra_us(entries_per_trace: f64, extra_us: &[f64]) -> String {
    let m = median(extra_us);
    if m > 0.0 {
        fmt(entries_per_trace / m, 2)
    } else {
        String::new()
    }
}

/// Figure 4: t, s and the breakpoint usefulness factor t/(1−s).
fn write_factors(rep: &mut Report, all: &[Measured], configs: &[Config]) -> Result<()> {
    let mut t = Table::new(&[
        "workload",
        "dynamically evaluated",
        "statically resolved",
        "t (taken fraction)",
        "s (static fraction)",
        "t/(1-s)",
    ]);
    let mut cats = Vec::new();
    let mut vals: Vec<Vec<Option<f64>>> = vec![Vec::new(); 3];
    for m in all {
        let mut total = Summary::default();
        let mut any = false;
        for (ci, c) in configs.iter().enumerate() {
            // t and s describe the paper's walk.
            if let (Config::Profiled(_, Lookahead::Paper), Some(s)) = (c, &m.summaries[ci]) {
                total.add(s);
                any = true;
            }
        }
        if !any {
            continue;
        }
        t.push(vec![
            m.name.clone(),
            fmt(total.counters.dynamically_evaluated as f64, 0),
            fmt(total.counters.statically_resolved as f64, 0),
            fmt(total.taken_fraction(), 3),
            fmt(total.static_fraction(), 3),
            fmt(total.usefulness(), 3),
        ]);
        cats.push(m.name.clone());
        vals[0].push(Some(total.taken_fraction()));
        vals[1].push(Some(total.static_fraction()));
        vals[2].push(Some(total.usefulness()));
    }
    rep.table(
        "factors",
        "Branch factors and breakpoint usefulness (Figure 4; SPEC2006 in the paper: 0.6)",
        &t,
    )?;
    let chart = BarChart {
        title: "Branch factors per workload".into(),
        y_label: "fraction".into(),
        categories: cats,
        series: ["t", "s", "t/(1-s)"]
            .iter()
            .map(|s| s.to_string())
            .zip(vals)
            .collect(),
        stacked: false,
        y_reference: None,
    };
    rep.plot("factors", &chart.render())
}
