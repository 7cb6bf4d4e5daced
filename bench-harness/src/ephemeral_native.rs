//! `ephemeral-native`: ephemeral instrumentation (Traub, Schechter and
//! Smith) run natively by `libephemeral.so` (the `ephemeral-native`
//! crate: int3 hooks on every conditional branch, unhooked after P
//! executions, re-hooked every 10 ms of process CPU time), against the
//! tracer in emulate mode at its default settings, on the source-built
//! workloads.
//!
//! Per workload, rounds interleave (in an order that rotates from round to
//! round) a native run, one run under libephemeral.so per P and one run
//! with libbreakdance.so autostarted. Overhead is the application's CPU
//! time (user + system, from wait4) over the native run's of the same
//! round, median over rounds. Accuracy is the overlap (`overlap.rs`) of the
//! conditional-branch edge profile, the rounds' runs merged, with
//! callgrind's exact one (`edges`).
//!
//! The inputs are the harness's small ones (`Workspace { quick: true }`):
//! a hooked execution costs a trap here (microseconds), so P ≥ 1000 makes
//! the training inputs run for many minutes each.

mod edges;
mod summary;

use crate::fdo::rebuilt_kinds;
use crate::profiler::Tracer;
use crate::quality::{recorded, reference};
use crate::report::{fmt, median, Report, Table};
use crate::runner::{self, Cmd};
use crate::workloads::{self, Input, Workspace};
use crate::Options;
use anyhow::{bail, Context, Result};
use bench_harness::overlap::overlap;
use breakdance_charts::{LineChart, Series};
use edges::Edges;
use std::path::{Path, PathBuf};

pub const PERSISTENCES: [u64; 4] = [10, 100, 1000, 10000];
const QUICK_PERSISTENCES: [u64; 2] = [10, 100];
const EPOCH_MS: u64 = 10;
const ROUNDS: usize = 3;
const QUICK_ROUNDS: usize = 1;

/// What one run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Config {
    Native,
    Ephemeral(u64),
    /// The tracer at its default period, or at this one (ns).
    Tracer(Option<u64>),
}

impl Config {
    fn name(self) -> String {
        match self {
            Config::Native => "native".into(),
            Config::Ephemeral(p) => format!("ephemeral P={p}"),
            Config::Tracer(None) => "breakdance emulate".into(),
            Config::Tracer(Some(p)) => format!("breakdance emulate, {} ms", p / 1_000_000),
        }
    }
}

/// One run's figures.
struct Run {
    workload: &'static str,
    round: usize,
    config: Config,
    cpu_s: f64,
    wall_s: f64,
    /// ephemeral: hooked executions (traps), hooks, unhooks, epochs.
    traps: u64,
    hooks: u64,
    unhooks: u64,
    epochs: u64,
}

/// One configuration of one workload, over the rounds.
struct Point {
    workload: &'static str,
    config: Config,
    /// CPU time over native, per round.
    ratios: Vec<f64>,
    /// Extra CPU µs per trap, per round (ephemeral).
    us_per_trap: Vec<f64>,
    traps: Vec<f64>,
    overlap: f64,
    /// Overlap of the profile's biases at callgrind's site counts.
    bias_overlap: f64,
    /// Share of the exact conditional-branch executions the profile holds.
    coverage: f64,
}

fn library(dir: &Path) -> Result<PathBuf> {
    let lib = dir.join("libephemeral.so");
    if !lib.is_file() {
        bail!(
            "{} not found; build it with `cargo build --release -p ephemeral-native`",
            lib.display()
        );
    }
    Ok(lib)
}

pub fn run(opts: &Options) -> Result<usize> {
    let mut rep = Report::new(
        &opts.results,
        "ephemeral-native",
        "Ephemeral instrumentation, natively, against the tracer",
    )?;
    let ws = Workspace {
        cache: opts.cache.clone(),
        quick: true,
    };
    let (ps, rounds): (&[u64], usize) = if opts.quick {
        (&QUICK_PERSISTENCES, QUICK_ROUNDS)
    } else {
        (&PERSISTENCES, ROUNDS)
    };
    // The defaults, and (full runs) a ten times higher sampling rate, the
    // tracer's other end of the trade-off.
    let tracers: &[Option<u64>] = if opts.quick {
        &[None]
    } else {
        &[None, Some(1_000_000)]
    };
    let tracer = Tracer::locate()?;
    let eph = library(&runner::build_dir()?)?;
    let work = opts.cache.join("runs").join("ephemeral-native");
    let mut runs = Vec::new();
    let mut points = Vec::new();
    for kind in rebuilt_kinds(opts.quick) {
        let name = kind.name();
        let result = (|| -> Result<()> {
            let w = workloads::prepare(&ws, kind)?;
            let r = reference(&ws, &w, Input::Train)?;
            let cmd = w.command(Input::Train);
            let wdir = work.join(name);
            let mut configs = vec![Config::Native];
            configs.extend(ps.iter().map(|&p| Config::Ephemeral(p)));
            configs.extend(tracers.iter().map(|&t| Config::Tracer(t)));
            let mut merged: Vec<(Config, Edges)> = Vec::new();
            let mut rows = None;
            let mut scripts: Vec<(Config, PathBuf)> = Vec::new();
            let first_run = runs.len();
            for round in 0..rounds {
                let mut order = configs.clone();
                order.rotate_left(round % configs.len());
                for &config in &order {
                    eprintln!(
                        "[ephemeral-native] {name}: round {} of {rounds}, {}",
                        round + 1,
                        config.name()
                    );
                    let (run, got) = one_run(&cmd, config, &eph, &tracer, &wdir, round)?;
                    run_into(&mut runs, name, round, config, run);
                    match got {
                        Got::Nothing => {}
                        Got::Ephemeral(site_rows, summary) => {
                            let last = runs.last_mut().expect("just pushed");
                            let n = |k: &str| summary[k].as_u64().unwrap_or(0);
                            (last.traps, last.hooks, last.unhooks, last.epochs) = (
                                n("hooked_executions"),
                                n("hooks"),
                                n("unhooks"),
                                n("epochs"),
                            );
                            let e = edges::ephemeral_edges(&site_rows);
                            match merged.iter_mut().find(|(c, _)| *c == config) {
                                Some((_, m)) => edges::merge(m, &e),
                                None => merged.push((config, e)),
                            }
                            rows.get_or_insert(site_rows);
                        }
                        Got::Script(s) => scripts.push((config, s)),
                    }
                }
            }
            let rows = rows.context("no ephemeral run")?;
            let exact = edges::exact_edges(&rows, &r.counts);
            for &t in tracers {
                let mine: Vec<PathBuf> = scripts
                    .iter()
                    .filter(|(c, _)| *c == Config::Tracer(t))
                    .map(|(_, s)| s.clone())
                    .collect();
                let rec = recorded(&mine, &r.module)?;
                merged.push((
                    Config::Tracer(t),
                    edges::traced_edges(&rows, &rec.edges, &rec.ranges),
                ));
            }
            let exact_total: u64 = exact.values().sum();
            for (config, e) in &merged {
                let mine = &runs[first_run..];
                let ratio_of = |run: &Run| {
                    let native = mine
                        .iter()
                        .find(|n| n.round == run.round && n.config == Config::Native)
                        .map_or(f64::NAN, |n| n.cpu_s);
                    run.cpu_s / native
                };
                let of_config: Vec<&Run> = mine.iter().filter(|x| x.config == *config).collect();
                // Extra CPU over the round's native run, per trap.
                let us_per_trap = of_config
                    .iter()
                    .map(|x| x.cpu_s * (1.0 - 1.0 / ratio_of(x)) * 1e6 / x.traps as f64)
                    .collect();
                let total: u64 = e.values().sum();
                points.push(Point {
                    workload: name,
                    config: *config,
                    ratios: of_config.iter().map(|x| ratio_of(x)).collect(),
                    us_per_trap,
                    traps: of_config.iter().map(|x| x.traps as f64).collect(),
                    overlap: overlap(e, &exact),
                    bias_overlap: overlap(&edges::rescaled(&rows, e, &exact), &exact),
                    coverage: total as f64 / (exact_total as f64 * rounds as f64),
                });
            }
            Ok(())
        })();
        if let Err(e) = result {
            rep.fail(name, "measure", &e);
        }
    }
    write(&mut rep, &runs, &points, rounds, opts.quick)?;
    rep.finish()
}

/// What a run left to score.
enum Got {
    Nothing,
    Ephemeral(Vec<edges::SiteRow>, serde_json::Value),
    Script(PathBuf),
}

fn one_run(
    cmd: &Cmd,
    config: Config,
    eph: &Path,
    tracer: &Tracer,
    wdir: &Path,
    round: usize,
) -> Result<(runner::Timing, Got)> {
    match config {
        Config::Native => Ok((runner::run_timed(cmd)?, Got::Nothing)),
        Config::Ephemeral(p) => {
            let out = wdir.join(format!("eph-p{p}-r{round}"));
            let _ = std::fs::remove_dir_all(&out);
            let c = cmd
                .clone()
                .env("LD_PRELOAD", eph.as_os_str())
                .env("EPHEMERAL_OUTPUT", out.as_os_str())
                .env("EPHEMERAL_P", p.to_string())
                .env("EPHEMERAL_EPOCH_MS", EPOCH_MS.to_string());
            let t = runner::run_timed(&c)?;
            let (rows, summary) = edges::read_run(&out)?;
            Ok((t, Got::Ephemeral(rows, summary)))
        }
        Config::Tracer(period) => {
            let out = wdir.join(format!(
                "tracer-{}-r{round}",
                period.map_or("default".into(), |p| p.to_string())
            ));
            let _ = std::fs::remove_dir_all(&out);
            // Emulate mode at its defaults: the library's own period and
            // trace length; only the event is named (task-clock, as on a
            // machine without a PMU).
            let mut c = tracer
                .loaded_idle(cmd)
                .env("BREAKDANCE_AUTOSTART", "1")
                .env("BREAKDANCE_EVENT", "task-clock")
                .env("BREAKDANCE_LOOKAHEAD", "emulate")
                .env("BREAKDANCE_OUTPUT", out.as_os_str());
            if let Some(p) = period {
                c = c.env("BREAKDANCE_PERIOD", p.to_string());
            }
            let t = runner::run_timed(&c)?;
            let script = out.join("perf.script");
            if !script.is_file() {
                bail!("the tracer wrote no {}", script.display());
            }
            Ok((t, Got::Script(script)))
        }
    }
}

fn run_into(
    runs: &mut Vec<Run>,
    workload: &'static str,
    round: usize,
    config: Config,
    t: runner::Timing,
) {
    runs.push(Run {
        workload,
        round,
        config,
        cpu_s: t.cpu_s(),
        wall_s: t.wall_s,
        traps: 0,
        hooks: 0,
        unhooks: 0,
        epochs: 0,
    });
}

fn p_of(c: Config) -> String {
    match c {
        Config::Ephemeral(p) => p.to_string(),
        _ => String::new(),
    }
}

fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{}–{}", fmt(lo, 2), fmt(hi, 2))
}

fn write(
    rep: &mut Report,
    runs: &[Run],
    points: &[Point],
    rounds: usize,
    quick: bool,
) -> Result<()> {
    let mut t = Table::new(&[
        "workload", "round", "config", "P", "cpu_s", "wall_s", "traps", "hooks", "unhooks",
        "epochs",
    ]);
    for r in runs {
        t.push(vec![
            r.workload.into(),
            r.round.to_string(),
            r.config.name(),
            p_of(r.config),
            fmt(r.cpu_s, 3),
            fmt(r.wall_s, 3),
            r.traps.to_string(),
            r.hooks.to_string(),
            r.unhooks.to_string(),
            r.epochs.to_string(),
        ]);
    }
    rep.write("runs.csv", &t.to_csv())?;
    let mut s = Table::new(&[
        "workload",
        "config",
        "P",
        "CPU over native (median)",
        "range",
        "overlap with callgrind",
        "bias overlap (callgrind's site counts)",
        "executions in profile / exact",
        "traps per run (median)",
        "µs per trap (median)",
    ]);
    for p in points {
        let is_eph = matches!(p.config, Config::Ephemeral(_));
        s.push(vec![
            p.workload.into(),
            p.config.name(),
            p_of(p.config),
            fmt(median(&p.ratios), 3),
            range(&p.ratios),
            fmt(p.overlap, 3),
            fmt(p.bias_overlap, 3),
            fmt(p.coverage, 4),
            if is_eph {
                fmt(median(&p.traps), 0)
            } else {
                String::new()
            },
            if is_eph {
                fmt(median(&p.us_per_trap), 2)
            } else {
                String::new()
            },
        ]);
    }
    rep.table("summary", "Overhead and accuracy per configuration", &s)?;
    let mut names: Vec<&str> = points.iter().map(|p| p.workload).collect();
    names.dedup();
    for name in &names {
        let of = |f: &dyn Fn(Config) -> bool| -> Vec<(f64, f64)> {
            points
                .iter()
                .filter(|p| p.workload == *name && f(p.config))
                .map(|p| (median(&p.ratios), p.overlap))
                .collect()
        };
        let chart = LineChart {
            title: format!("{name}: overlap with callgrind against CPU overhead"),
            x_label: "CPU time over native (median of rounds)".into(),
            y_label: "conditional-edge overlap".into(),
            x_log: true,
            y_log: false,
            y_from_zero: true,
            y_reference: Some(1.0),
            series: vec![
                Series {
                    name: "ephemeral, P = 10 … 10000".into(),
                    points: of(&|c| matches!(c, Config::Ephemeral(_))),
                },
                Series {
                    name: "breakdance emulate, default period and 1 ms".into(),
                    points: of(&|c| matches!(c, Config::Tracer(_))),
                },
            ],
        };
        rep.plot(&format!("tradeoff-{name}"), &chart.render())?;
    }
    rep.write(
        "summary.md",
        &summary::markdown(points, runs, rounds, quick, &names),
    )?;
    Ok(())
}
