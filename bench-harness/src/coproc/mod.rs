//! `coproc`: value profiles from a profiling co-processor (Zilles and Sohi,
//! "A Programmable Co-processor for Profiling", HPCA 2001) against
//! interrupt sampling, in brr's emulator and timing model.
//!
//! Each workload runs once under the emulator. The same pass feeds the
//! timing model (the program's own cycles), the exact per-load value
//! profile (`brr::loadvalues`: the ground truth), one co-processor model
//! (`brr::coproc`) per slot count and seed, and one sampler per interval.
//! The models are host-side and do not change what the guest runs; what
//! they cost the main CPU is their interrupts, priced below and added to
//! the timing model's cycles.
//!
//! Each load's top-1 value invariance (the fraction of its executions that
//! produce its most frequent value) is estimated by every scheme and
//! compared with the exact one over the hot loads (those covering
//! [`HOT_COVERAGE`] of executed loads, weighted by executions): error,
//! capture (weight measured within [`TOLERANCE`]) and overhead.

mod summary;
pub mod tracer;

use summary::{capture_svg, summary_md, tradeoff_svg};

use crate::report::{fmt, Report, Table};
use crate::Options;
use anyhow::{bail, Context, Result};
use brr::coproc::{self, Coprocessor, Sampler};
use brr::emu::syscall::Process;
use brr::loadvalues::{self, ValueProfile};
use brr::timing;
use brr::workload::{self, Compiler};
use std::path::{Path, PathBuf};

/// Cycles the main CPU loses per interrupt: a precise interrupt drains the
/// pipeline and enters and leaves a kernel handler. Measured costs of a
/// user-visible sample on current x86 Linux are a few microseconds
/// (thousands of cycles); 1000 is a deliberately low figure, which favours
/// the sampling baseline, whose only cost this is.
pub const INTERRUPT_CYCLES: u64 = 1000;
/// Cycles per co-processor slot the handler copies out: four words read
/// from the co-processor's registers, a table update and the filter's mask
/// write, about as many instructions as the sampling handler's record.
pub const CYCLES_PER_SLOT: u64 = 20;
/// The co-processor sizes swept.
pub const SLOTS: [usize; 5] = [4, 8, 16, 32, 64];
/// Sampling intervals (every Nth executed load interrupts).
pub const INTERVALS: [u64; 11] = [
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    1 << 18,
    1 << 20,
    1 << 22,
];
/// Hot loads: the most executed loads that together cover this share of
/// all executed loads.
pub const HOT_COVERAGE: f64 = 0.99;
/// A load is captured when its estimate lies within this of the truth.
pub const TOLERANCE: f64 = 0.1;
/// Capture is also reported with only the measurements made in this
/// first share of the run: how fast a co-processor of each size measures,
/// before the hot loads run out.
pub const EARLY_SHARE: f64 = 0.5;
/// Co-processor seeds per slot count (its replacement draws are random).
const SEEDS: u64 = 3;
const QUICK_SEEDS: u64 = 2;
/// Workloads run at once.
const THREADS: usize = 2;

/// A program the experiment runs.
struct Subject {
    name: &'static str,
    sources: Vec<PathBuf>,
    args: Vec<String>,
    what: &'static str,
}

/// What one workload's run gave.
struct Run {
    name: &'static str,
    what: &'static str,
    args: String,
    status: i32,
    timing: timing::Report,
    truth: ValueProfile,
    coprocs: Vec<(usize, u64, Coprocessor)>,
    samplers: Vec<Sampler>,
}

fn subjects(opts: &Options, work: &Path) -> Result<Vec<Subject>> {
    let dir = workload::workload_dir();
    let mut v = vec![Subject {
        name: "charclass",
        sources: vec![dir.join("charclass.c")],
        args: vec!["1".into()],
        what: "small: the brr paper's microbenchmark, few static loads",
    }];
    if !opts.quick {
        let tree = workload::bzip2_source(&opts.cache.join("debian-src"))?;
        let input = work.join("bzip2-input.txt");
        let text = workload::sample_text(10_000);
        if std::fs::read(&input).ok().as_deref() != Some(&text[..]) {
            std::fs::write(&input, &text)
                .with_context(|| format!("cannot write {}", input.display()))?;
        }
        v.push(Subject {
            name: "bzip2",
            sources: workload::bzip2_sources(&tree),
            args: vec!["-c".into(), "-9".into(), input.display().to_string()],
            what: "many static loads: bzip2 1.0.8 compressing generated text",
        });
    }
    v.push(Subject {
        name: "phased",
        sources: vec![dir.join("phased.c")],
        args: vec![if opts.quick { "200000" } else { "2000000" }.into()],
        what: "phased values: five loads read value A for half the run, B after",
    });
    Ok(v)
}

/// Runs the experiment.
pub fn run(opts: &Options) -> Result<usize> {
    let slots: Vec<usize> = opts.slots.clone().unwrap_or_else(|| SLOTS.to_vec());
    if tools_missing() {
        bail!("musl-gcc is not on PATH: run scripts/install-deps.sh (musl-tools)");
    }
    let work = opts
        .cache
        .join("coproc")
        .join(if opts.quick { "quick" } else { "full" });
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let mut rep = Report::new(
        &opts.results,
        "coproc",
        "Value profiles: a profiling co-processor against interrupt sampling",
    )?;
    let seeds = if opts.quick { QUICK_SEEDS } else { SEEDS };
    let subjects = subjects(opts, &work)?;
    let config = timing::Config::default();
    let results = brr::experiment::parallel(THREADS, &subjects, |s| {
        Ok(measure(s, &work, &config, &slots, seeds))
    })?;
    let mut runs = Vec::new();
    for (s, r) in subjects.iter().zip(results) {
        match r {
            Ok(r) => runs.push(r),
            Err(e) => rep.fail(s.name, "run", &e),
        }
    }
    let analysis = analyse(&runs, &slots);
    rep.table("runs", "Every scheme on every workload", &analysis.runs)?;
    rep.table(
        "comparison",
        "Equal overhead and equal error",
        &analysis.comparison,
    )?;
    rep.table("capture", "Capture against slots", &analysis.capture)?;
    rep.table("loads", "The hot loads' exact profiles", &analysis.loads)?;
    for problem in &analysis.problems {
        rep.fail(&problem.0, "check", &anyhow::anyhow!(problem.1.clone()));
    }
    for r in &runs {
        rep.plot(
            &format!("error-{}", r.name),
            &tradeoff_svg(r.name, &analysis.runs),
        )?;
    }
    rep.plot("capture", &capture_svg(&analysis.capture))?;
    let summary = summary_md(opts, &runs, &analysis)?;
    rep.write("summary.md", &summary)?;
    rep.note("See [summary.md](summary.md) for the method, the tables and the findings.");
    rep.finish()
}

fn tools_missing() -> bool {
    bench_harness::tools::find("musl-gcc").is_none()
}

/// Builds and runs one workload, feeding every model in one pass.
fn measure(
    s: &Subject,
    work: &Path,
    config: &timing::Config,
    slots: &[usize],
    seeds: u64,
) -> Result<Run> {
    let exe = workload::build_static(work, s.name, &s.sources, Compiler::Gcc, &[])?;
    let mut argv = vec![s.name.to_string()];
    argv.extend(s.args.iter().cloned());
    let mut p = Process::load(&exe, &argv, &[], 1)
        .with_context(|| format!("cannot load {}", exe.display()))?;
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .context("cannot open /dev/null")?;
    use std::os::fd::AsRawFd;
    p.stdio[1] = null.as_raw_fd();
    let mut model = timing::Model::new(config);
    let mut truth = ValueProfile::default();
    let mut coprocs: Vec<(usize, u64, Coprocessor)> = slots
        .iter()
        .flat_map(|&n| (1..=seeds).map(move |seed| (n, seed)))
        .map(|(n, seed)| (n, seed, Coprocessor::new(coproc::Config::new(n, seed))))
        .collect();
    let mut samplers: Vec<Sampler> = INTERVALS.iter().map(|&i| Sampler::new(i)).collect();
    eprintln!("[coproc] {}: running {}", s.name, argv.join(" "));
    let mut code_writes = p.machine.code_writes;
    let (status, _) = loadvalues::run_with(&mut p, u64::MAX, |m, load| {
        model.retire_with(&m.retired, || m.decoded(m.retired.ip));
        if m.code_writes != code_writes {
            code_writes = m.code_writes;
            model.code_written(m.last_code_write.0, m.last_code_write.1);
        }
        if let Some(l) = load {
            truth.record(&l);
            for c in &mut coprocs {
                c.2.observe(&l);
            }
            for smp in &mut samplers {
                smp.observe(&l);
            }
        }
    })
    .with_context(|| format!("running {}", exe.display()))?;
    for c in &mut coprocs {
        c.2.finish();
    }

    let timing = model.report();
    eprintln!(
        "[coproc] {}: {} instructions, {} loads executed, {} static loads",
        s.name,
        timing.instructions,
        truth.executions(),
        truth.loads.len()
    );
    Ok(Run {
        name: s.name,
        what: s.what,
        args: s.args.join(" "),
        status,
        timing,
        truth,
        coprocs,
        samplers,
    })
}

/// The hot loads: (id, executions), most executed first.
fn hot_loads(truth: &ValueProfile) -> Vec<(usize, u64)> {
    let mut v: Vec<(usize, u64)> = truth
        .loads
        .iter()
        .enumerate()
        .map(|(i, h)| (i, h.total))
        .collect();
    v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let all: u64 = v.iter().map(|x| x.1).sum();
    let mut covered = 0;
    let mut hot = Vec::new();
    for (i, n) in v {
        if covered as f64 >= HOT_COVERAGE * all as f64 {
            break;
        }
        covered += n;
        hot.push((i, n));
    }
    hot
}

/// How well one scheme's estimates match the truth on the hot loads.
#[derive(Clone, Copy, Debug, Default)]
struct Score {
    measured: usize,
    /// Share of hot executions whose load was measured.
    measured_weight: f64,
    capture: f64,
    /// Execution-weighted mean |estimate − truth|; an unmeasured load
    /// counts as estimate 0 (nothing known, so not worth specialising).
    error: f64,
    /// The same over the measured loads only.
    error_measured: f64,
}

/// Distance from `est` to the interval the true invariance lies in.
fn distance(est: f64, (lo, hi): (f64, f64)) -> f64 {
    if est < lo {
        lo - est
    } else if est > hi {
        est - hi
    } else {
        0.0
    }
}

fn score(truth: &ValueProfile, hot: &[(usize, u64)], est: impl Fn(usize) -> Option<f64>) -> Score {
    let all: f64 = hot.iter().map(|h| h.1 as f64).sum();
    let mut s = Score::default();
    let mut measured_err = 0.0;
    for &(id, n) in hot {
        let w = n as f64 / all;
        let bounds = truth.loads[id].invariance_bounds();
        match est(id) {
            Some(e) => {
                let d = distance(e, bounds);
                s.measured += 1;
                s.measured_weight += w;
                s.error += w * d;
                measured_err += w * d;
                if d <= TOLERANCE {
                    s.capture += w;
                }
            }
            None => s.error += w * distance(0.0, bounds),
        }
    }
    s.error_measured = if s.measured_weight > 0.0 {
        measured_err / s.measured_weight
    } else {
        f64::NAN
    };
    s
}

/// One scheme's point: overhead and score.
#[derive(Clone, Debug)]
struct Point {
    overhead_pct: f64,
    score: Score,
}

struct Analysis {
    runs: Table,
    comparison: Table,
    capture: Table,
    loads: Table,
    /// (workload, problem) for failures.csv.
    problems: Vec<(String, String)>,
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Linear interpolation of y at `x` over points sorted by x, in log x;
/// None outside the points' range.
fn interpolate_log_x(points: &[(f64, f64)], x: f64) -> Option<f64> {
    points.windows(2).find_map(|w| {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        if x0 <= x && x <= x1 && x0 > 0.0 {
            if x1 == x0 {
                return Some(y0);
            }
            let t = (x.ln() - x0.ln()) / (x1.ln() - x0.ln());
            Some(y0 + t * (y1 - y0))
        } else {
            None
        }
    })
}

/// The overhead at which the sampling curve (sorted by overhead) first
/// reaches `error` or lower, interpolated in log overhead; None when it
/// never does.
fn overhead_at_error(points: &[(f64, f64)], error: f64) -> Option<f64> {
    // Walk from the cheapest point up: the first segment that crosses.
    points.windows(2).find_map(|w| {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        if y0 > error && y1 <= error && x0 > 0.0 {
            let t = (y0 - error) / (y0 - y1);
            Some((x0.ln() + t * (x1.ln() - x0.ln())).exp())
        } else {
            None
        }
    })
}

fn analyse(runs: &[Run], slots: &[usize]) -> Analysis {
    let mut t_runs = Table::new(&[
        "workload",
        "scheme",
        "slots",
        "interval",
        "seed",
        "interrupts",
        "harvest_interrupts",
        "thrash_interrupts",
        "timeout_interrupts",
        "slots_copied",
        "overhead_cycles",
        "base_cycles",
        "overhead_pct",
        "hot_loads",
        "measured_hot",
        "measured_weight",
        "capture",
        "error",
        "error_measured",
    ]);
    let mut comparison = Table::new(&[
        "workload",
        "static_loads",
        "hot_loads",
        "slots",
        "coproc_overhead_pct",
        "coproc_error",
        "coproc_capture",
        "sampling_error_at_equal_overhead",
        "sampling_capture_at_equal_overhead",
        "sampling_overhead_pct_at_equal_error",
        "overhead_ratio_at_equal_error",
        "best_sampling_error",
    ]);
    let mut capture = Table::new(&[
        "workload",
        "slots",
        "capture_mean",
        "capture_min",
        "capture_max",
        "measured_hot_mean",
        "hot_loads",
        "early_capture_mean",
        "early_measured_hot_mean",
    ]);
    let mut loads = Table::new(&[
        "workload",
        "pc",
        "executions",
        "distinct_values",
        "top1_value",
        "top1_count",
        "top2_value",
        "top2_count",
        "invariance_top1",
        "invariance_top2",
        "invariance_top4",
        "exact",
    ]);
    let mut problems = Vec::new();
    for r in runs {
        let hot = hot_loads(&r.truth);
        let base = r.timing.cycles;
        for &(id, n) in &hot {
            let h = &r.truth.loads[id];
            let top = h.top(2);
            let cell = |k: usize, f: fn(&(u64, u64)) -> u64| {
                top.get(k).map_or(String::new(), |t| f(t).to_string())
            };
            loads.push(vec![
                r.name.to_string(),
                format!("{:#x}", r.truth.pcs[id]),
                n.to_string(),
                if h.other > 0 {
                    format!(">{}", h.counts.len())
                } else {
                    h.counts.len().to_string()
                },
                cell(0, |t| t.0),
                cell(0, |t| t.1),
                cell(1, |t| t.0),
                cell(1, |t| t.1),
                fmt(h.invariance(1), 4),
                fmt(h.invariance(2), 4),
                fmt(h.invariance(4), 4),
                h.exact_top().to_string(),
            ]);
        }
        let inexact = hot
            .iter()
            .filter(|(id, _)| !r.truth.loads[*id].exact_top())
            .count();
        if inexact > 0 {
            eprintln!(
                "[coproc] {}: {inexact} hot loads have a bounded, not exact, top-1 count",
                r.name
            );
        }
        let pct = |cycles: u64| cycles as f64 / base.max(1) as f64 * 100.0;
        let mut row = |scheme: &str,
                       slots: String,
                       interval: String,
                       seed: String,
                       counts: [u64; 5],
                       cycles: u64,
                       sc: &Score| {
            t_runs.push(vec![
                r.name.to_string(),
                scheme.to_string(),
                slots,
                interval,
                seed,
                counts[0].to_string(),
                counts[1].to_string(),
                counts[2].to_string(),
                counts[3].to_string(),
                counts[4].to_string(),
                cycles.to_string(),
                base.to_string(),
                fmt(pct(cycles), 5),
                hot.len().to_string(),
                sc.measured.to_string(),
                fmt(sc.measured_weight, 4),
                fmt(sc.capture, 4),
                fmt(sc.error, 4),
                fmt(sc.error_measured, 4),
            ]);
        };
        let mut sampling = Vec::new();
        for smp in &r.samplers {
            let sc = score(&r.truth, &hot, |id| {
                smp.estimate(id as u32).map(|(inv, _)| inv)
            });
            let cycles = smp.interrupts * INTERRUPT_CYCLES;
            row(
                "sampling",
                String::new(),
                smp.interval.to_string(),
                String::new(),
                [smp.interrupts, 0, 0, 0, 0],
                cycles,
                &sc,
            );
            sampling.push(Point {
                overhead_pct: pct(cycles),
                score: sc,
            });
        }
        sampling.sort_by(|a, b| a.overhead_pct.total_cmp(&b.overhead_pct));
        let curve: Vec<(f64, f64)> = sampling
            .iter()
            .map(|p| (p.overhead_pct, p.score.error))
            .collect();
        let capture_curve: Vec<(f64, f64)> = sampling
            .iter()
            .map(|p| (p.overhead_pct, p.score.capture))
            .collect();
        let best_sampling = curve.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        for &n in slots {
            let mut points = Vec::new();
            let mut early = Vec::new();
            for (_, seed, c) in r.coprocs.iter().filter(|c| c.0 == n) {
                let cut = (c.loads as f64 * EARLY_SHARE) as u64;
                early.push(score(&r.truth, &hot, |id| {
                    c.measured
                        .get(&(id as u64))
                        .filter(|m| m.at <= cut)
                        .map(|m| m.invariance())
                }));
                let sc = score(&r.truth, &hot, |id| {
                    c.measured.get(&(id as u64)).map(|m| m.invariance())
                });
                let k = &c.counters;
                let cycles = k.interrupts() * INTERRUPT_CYCLES + k.slots_copied * CYCLES_PER_SLOT;
                row(
                    "coproc",
                    n.to_string(),
                    String::new(),
                    seed.to_string(),
                    [
                        k.interrupts(),
                        k.harvest,
                        k.thrash,
                        k.timeout,
                        k.slots_copied,
                    ],
                    cycles,
                    &sc,
                );
                points.push(Point {
                    overhead_pct: pct(cycles),
                    score: sc,
                });
            }
            let o = mean(&points.iter().map(|p| p.overhead_pct).collect::<Vec<_>>());
            let e = mean(&points.iter().map(|p| p.score.error).collect::<Vec<_>>());
            let caps: Vec<f64> = points.iter().map(|p| p.score.capture).collect();
            let cap = mean(&caps);
            let s_err = interpolate_log_x(&curve, o);
            let s_cap = interpolate_log_x(&capture_curve, o);
            let s_over = overhead_at_error(&curve, e);
            comparison.push(vec![
                r.name.to_string(),
                r.truth.loads.len().to_string(),
                hot.len().to_string(),
                n.to_string(),
                fmt(o, 5),
                fmt(e, 4),
                fmt(cap, 4),
                s_err.map_or("below range".into(), |v| fmt(v, 4)),
                s_cap.map_or("below range".into(), |v| fmt(v, 4)),
                s_over.map_or("not reached".into(), |v| fmt(v, 5)),
                s_over.map_or("n/a".into(), |v| fmt(v / o, 1)),
                fmt(best_sampling, 4),
            ]);
            capture.push(vec![
                r.name.to_string(),
                n.to_string(),
                fmt(cap, 4),
                fmt(caps.iter().copied().fold(f64::INFINITY, f64::min), 4),
                fmt(caps.iter().copied().fold(f64::NEG_INFINITY, f64::max), 4),
                fmt(
                    mean(
                        &points
                            .iter()
                            .map(|p| p.score.measured as f64)
                            .collect::<Vec<_>>(),
                    ),
                    1,
                ),
                hot.len().to_string(),
                fmt(
                    mean(&early.iter().map(|e| e.capture).collect::<Vec<_>>()),
                    4,
                ),
                fmt(
                    mean(&early.iter().map(|e| e.measured as f64).collect::<Vec<_>>()),
                    1,
                ),
            ]);
        }
        if r.status != 0 {
            problems.push((r.name.to_string(), format!("exit status {}", r.status)));
        }
    }
    Analysis {
        runs: t_runs,
        comparison,
        capture,
        loads,
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolation_in_log_overhead() {
        let curve = [(0.01, 0.5), (0.1, 0.3), (1.0, 0.1)];
        assert_eq!(interpolate_log_x(&curve, 0.1), Some(0.3));
        let mid = interpolate_log_x(&curve, 10f64.powf(-1.5)).unwrap();
        assert!((mid - 0.4).abs() < 1e-9);
        assert_eq!(interpolate_log_x(&curve, 0.001), None);
        let o = overhead_at_error(&curve, 0.2).unwrap();
        assert!((o - 10f64.powf(-0.5)).abs() < 1e-9, "{o}");
        assert_eq!(overhead_at_error(&curve, 0.05), None);
    }

    #[test]
    fn distance_to_the_truth_interval() {
        assert_eq!(distance(0.5, (0.5, 0.5)), 0.0);
        assert!((distance(0.2, (0.5, 0.7)) - 0.3).abs() < 1e-12);
        assert!((distance(0.9, (0.5, 0.7)) - 0.2).abs() < 1e-12);
        assert_eq!(distance(0.6, (0.5, 0.7)), 0.0);
    }
}
