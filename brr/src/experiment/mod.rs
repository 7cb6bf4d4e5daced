//! The branch-on-random experiments (`bench-harness brr`):
//!
//! (a) overhead per instrumentation site, in cycles of the timing model,
//!     of brr and counter-based sampling across intervals 2^1 … 2^16 (the
//!     paper's Figures 13 and 14);
//! (b) accuracy: overlap of each sampled edge profile with the exact one, brr
//!     vs counter, at 2^10 and 2^13, including a loop that resonates with
//!     the counter (Figures 9 and 10).
//!
//! Part (c) of the issue (the same microbenchmark under the software branch
//! tracer) needs the tracer and is not run here.
//!
//! Workloads: the paper's microbenchmark (`workloads/charclass.c`), bzip2
//! from Debian's sources, and `workloads/resonance.c`. Everything is built
//! with `musl-gcc -static -O2`. Outputs: CSV, markdown and SVG in `out_dir`.

use crate::emu::syscall::Process;
use crate::instrument::Variant;
use crate::profile::{self, EdgeProfile};
use crate::timing::{self, Config, Report};
use crate::workload::{self, Compiler};
use anyhow::{Context, Result};
use breakdance_charts::{BarChart, LineChart, Series};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// A program the experiments build and run.
struct Workload {
    name: &'static str,
    sources: Vec<PathBuf>,
    args: Vec<String>,
}

/// Seeds of the brr accuracy runs (each a different LFSR sequence).
const SEEDS_FULL: u64 = 5;
const SEEDS_QUICK: u64 = 2;
/// Jobs run at once (the machines here have two cores).
const THREADS: usize = 2;

/// Runs the experiments and writes their results into `out_dir`. `quick`
/// runs a small subset (a smoke test of the whole pipeline, about a minute).
/// Intermediate builds go to $BRR_WORK_DIR (default: the system temp dir).
pub fn run(out_dir: &Path, quick: bool) -> Result<()> {
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let work = std::env::var_os("BRR_WORK_DIR").map_or_else(
        || std::env::temp_dir().join("brr-experiment"),
        PathBuf::from,
    );
    let work = work.join(if quick { "quick" } else { "full" });
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let config = Config::default();
    let workloads = workloads(&work, quick)?;
    let overhead_intervals: Vec<u32> = if quick {
        vec![2, 64, 1024]
    } else {
        (1..=16).map(|k| 1u32 << k).collect()
    };
    let accuracy_intervals = [1u32 << 10, 1 << 13];
    let seeds = if quick { SEEDS_QUICK } else { SEEDS_FULL };

    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Branch-on-random experiments{}\n",
        if quick { " (quick run)" } else { "" }
    );
    let _ = writeln!(md, "{}", METHOD);
    let _ = writeln!(
        md,
        "Emulated CPU model: {}.\n",
        crate::emu::emulated_model()
    );

    let mut overhead_csv = String::from("workload,variant,interval,fetch_width,site_executions,instructions,cycles,cycles_none,cycles_per_site,instructions_per_site,mispredictions\n");
    let mut accuracy_csv = String::from("workload,scheme,interval,seed,samples,overlap\n");
    let mut acc_rows: Vec<(String, String, u32, f64, f64, f64, u64)> = Vec::new();
    for w in &workloads {
        let none =
            workload::build_instrumented(&work, w.name, &w.sources, Compiler::Gcc, Variant::None)?;
        let mut argv = vec![none.display().to_string()];
        argv.extend(w.args.iter().cloned());
        let (exact, _) = profile::exact_edges_quiet(&none, &argv, &[])?;
        let site_execs = profile::total(&exact);
        anyhow::ensure!(site_execs > 0, "{}: no conditional branch executed", w.name);

        // (a) overhead: every variant under the timing model.
        let overhead_run = w.name != "resonance";
        let mut variants = vec![Variant::None];
        if overhead_run {
            variants.push(Variant::Full);
            for &i in &overhead_intervals {
                variants.push(Variant::Counter { interval: i });
                variants.push(Variant::Brr { interval: i });
            }
        }
        for &i in &accuracy_intervals {
            variants.push(Variant::Counter { interval: i });
            variants.push(Variant::Brr { interval: i });
        }
        variants.dedup();
        let builds: Vec<(Variant, PathBuf)> = parallel(THREADS, &variants, |&v| {
            let exe = workload::build_instrumented(&work, w.name, &w.sources, Compiler::Gcc, v)?;
            Ok((v, exe))
        })?;
        let exe_of = |v: Variant| {
            builds
                .iter()
                .find(|b| b.0 == v)
                .map(|b| b.1.clone())
                .unwrap()
        };
        if overhead_run {
            let timed_variants: Vec<Variant> = variants
                .iter()
                .copied()
                .filter(|v| match v {
                    Variant::Counter { interval } | Variant::Brr { interval } => {
                        overhead_intervals.contains(interval)
                    }
                    _ => true,
                })
                .collect();
            // The main configuration, plus a fetch-width sensitivity point:
            // brr's asymptotic cost is its fetch slot.
            let max = *overhead_intervals.last().unwrap();
            let alt_width = if config.fetch_width == 4 { 3 } else { 4 };
            let mut jobs: Vec<(Variant, u32)> = timed_variants
                .iter()
                .map(|&v| (v, config.fetch_width))
                .collect();
            for v in [
                Variant::None,
                Variant::Counter { interval: max },
                Variant::Brr { interval: max },
            ] {
                jobs.push((v, alt_width));
            }
            let all: Vec<(Variant, u32, Report)> = parallel(THREADS, &jobs, |&(v, width)| {
                let exe = exe_of(v);
                let edges = work.join(format!("{}-{}-f{width}.timed.edges", w.name, v.label()));
                let c = Config {
                    fetch_width: width,
                    ..config.clone()
                };
                Ok((v, width, timed_run(&exe, &w.args, &edges, &c)?))
            })?;
            let cycles_of = |v: Variant, width: u32| {
                all.iter()
                    .find(|r| r.0 == v && r.1 == width)
                    .map(|r| r.2.cycles as f64)
            };
            for (v, width, r) in &all {
                let (kind, interval) = split(*v);
                let none = cycles_of(Variant::None, *width).unwrap();
                let none_instr = all
                    .iter()
                    .find(|x| x.0 == Variant::None && x.1 == *width)
                    .unwrap()
                    .2
                    .instructions;
                let _ = writeln!(
                    overhead_csv,
                    "{},{kind},{interval},{width},{site_execs},{},{},{none},{:.4},{:.4},{}",
                    w.name,
                    r.instructions,
                    r.cycles,
                    (r.cycles as f64 - none) / site_execs as f64,
                    (r.instructions as f64 - none_instr as f64) / site_execs as f64,
                    r.mispredictions()
                );
            }
            let reports: Vec<(Variant, Report)> = all
                .iter()
                .filter(|r| r.1 == config.fetch_width)
                .map(|r| (r.0, r.2.clone()))
                .collect();
            let base = reports
                .iter()
                .find(|r| r.0 == Variant::None)
                .unwrap()
                .1
                .clone();
            let per_site = |r: &Report| (r.cycles as f64 - base.cycles as f64) / site_execs as f64;
            let alt = |v: Variant| {
                (cycles_of(v, alt_width).unwrap() - cycles_of(Variant::None, alt_width).unwrap())
                    / site_execs as f64
            };
            let (alt_c, alt_b) = (
                alt(Variant::Counter { interval: max }),
                alt(Variant::Brr { interval: max }),
            );
            let find = |v: Variant| reports.iter().find(|r| r.0 == v).map(|r| per_site(&r.1));
            let _ = writeln!(md, "## Overhead per site: {}\n", w.name);
            let _ = writeln!(
                md,
                "Uninstrumented: {} instructions, {} cycles (CPI {:.3}, {:.2} MPKI); {} conditional-branch sites executed. \
                 Full edge profiling costs {:.3} cycles per site.\n",
                base.instructions,
                base.cycles,
                base.cpi(),
                base.mpki(),
                site_execs,
                find(Variant::Full).unwrap_or(f64::NAN)
            );
            let _ = writeln!(md, "| interval | counter cycles/site | brr cycles/site | counter / brr |\n|---:|---:|---:|---:|");
            let mut series = [Vec::new(), Vec::new()];
            for &i in &overhead_intervals {
                let c = find(Variant::Counter { interval: i }).unwrap_or(f64::NAN);
                let b = find(Variant::Brr { interval: i }).unwrap_or(f64::NAN);
                let _ = writeln!(
                    md,
                    "| 2^{} | {c:.3} | {b:.3} | {:.1} |",
                    i.trailing_zeros(),
                    c / b
                );
                series[0].push((f64::from(i), c));
                series[1].push((f64::from(i), b));
            }
            let _ = writeln!(
                md,
                "\nSensitivity: fetching {alt_width} instead of {} instructions per cycle, at 2^{} counter sampling costs \
                 {alt_c:.3} and brr {alt_b:.3} cycles per site (ratio {:.1}).\n",
                config.fetch_width,
                max.trailing_zeros(),
                alt_c / alt_b
            );
            let [counter_pts, brr_pts] = series;
            let chart = LineChart {
                title: format!("{}: instrumentation overhead per site", w.name),
                x_label: "sampling interval".into(),
                y_label: "cycles per site execution".into(),
                x_log: true,
                y_log: true,
                series: vec![
                    Series {
                        name: "counter-based".into(),
                        points: counter_pts,
                    },
                    Series {
                        name: "brr".into(),
                        points: brr_pts,
                    },
                ],
                ..LineChart::default()
            }
            .render();
            write(out_dir, &format!("overhead-{}.svg", w.name), &chart)?;
        }

        // (b) accuracy: counter natively (deterministic), brr under the
        // emulator with several seeds (the same outcomes as native runs
        // under the SIGILL handler, as the tests check).
        let mut jobs = Vec::new();
        for &i in &accuracy_intervals {
            jobs.push((Variant::Counter { interval: i }, 0u64));
            for seed in 1..=seeds {
                jobs.push((Variant::Brr { interval: i }, seed));
            }
        }
        let results: Vec<(Variant, u64, EdgeProfile)> = parallel(THREADS, &jobs, |&(v, seed)| {
            let exe = exe_of(v);
            let edges = work.join(format!("{}-{}-{seed}.edges", w.name, v.label()));
            let p = match v {
                Variant::Brr { .. } => emulated_edges(&exe, &w.args, &edges, seed)?,
                _ => native_edges(&exe, &w.args, &edges)?,
            };
            Ok((v, seed, p))
        })?;
        for &i in &accuracy_intervals {
            for scheme in ["counter", "brr"] {
                let overlaps: Vec<(u64, f64, u64)> = results
                    .iter()
                    .filter(|(v, _, _)| split(*v) == (scheme, i))
                    .map(|(_, seed, p)| (*seed, profile::overlap(&exact, p), profile::total(p)))
                    .collect();
                for (seed, o, n) in &overlaps {
                    let _ = writeln!(accuracy_csv, "{},{scheme},{i},{seed},{n},{o:.4}", w.name);
                }
                let vals: Vec<f64> = overlaps.iter().map(|o| o.1).collect();
                let mean = vals.iter().sum::<f64>() / vals.len() as f64;
                let min = vals.iter().copied().fold(f64::MAX, f64::min);
                let max = vals.iter().copied().fold(f64::MIN, f64::max);
                let samples =
                    overlaps.iter().map(|o| o.2).sum::<u64>() / overlaps.len().max(1) as u64;
                acc_rows.push((
                    w.name.to_string(),
                    scheme.to_string(),
                    i,
                    mean,
                    min,
                    max,
                    samples,
                ));
            }
        }
    }
    // Accuracy table and chart.
    let _ = writeln!(md, "## Accuracy (overlap with the exact edge profile)\n");
    let _ = writeln!(
        md,
        "Overlap = Σ min(f_exact(e), f_sampled(e)) over normalised edge counts (1 = same shape). \
         Counter sampling is deterministic (one run); brr is shown as mean [min, max] over {seeds} LFSR seeds.\n"
    );
    let _ = writeln!(md, "| workload | interval | counter overlap | counter samples | brr overlap | brr samples |\n|---|---:|---:|---:|---:|---:|");
    let mut categories = Vec::new();
    let mut bars: Vec<(String, Vec<Option<f64>>)> = Vec::new();
    for &i in &accuracy_intervals {
        for scheme in ["counter", "brr"] {
            bars.push((format!("{scheme} 2^{}", i.trailing_zeros()), Vec::new()));
        }
    }
    for w in &workloads {
        categories.push(w.name.to_string());
        for (k, &i) in accuracy_intervals.iter().enumerate() {
            let row = |scheme: &str| {
                acc_rows
                    .iter()
                    .find(|r| r.0 == w.name && r.1 == scheme && r.2 == i)
                    .unwrap()
            };
            let c = row("counter");
            let b = row("brr");
            let _ = writeln!(
                md,
                "| {} | 2^{} | {:.3} | {} | {:.3} [{:.3}, {:.3}] | {} |",
                w.name,
                i.trailing_zeros(),
                c.3,
                c.6,
                b.3,
                b.4,
                b.5,
                b.6
            );
            bars[2 * k].1.push(Some(c.3));
            bars[2 * k + 1].1.push(Some(b.3));
        }
    }
    md.push('\n');
    write(
        out_dir,
        "accuracy.svg",
        &BarChart {
            title: "Edge-profile overlap with the exact profile".into(),
            y_label: "overlap".into(),
            categories,
            series: bars,
            ..BarChart::default()
        }
        .render(),
    )?;
    md.push_str(&lfsr_section());
    md.push_str(NOT_DONE);
    write(out_dir, "overhead.csv", &overhead_csv)?;
    write(out_dir, "accuracy.csv", &accuracy_csv)?;
    write(out_dir, "summary.md", &md)?;
    Ok(())
}

const METHOD: &str = "\
Method. Each workload is compiled with `musl-gcc -S -O2`, instrumented at every conditional branch \
by `brr-instrument` (variants none, full, counter, brr; see brr/src/instrument), assembled and \
linked static with the edge runtime. Overhead: every variant runs under the emulator's timing model \
(brr/timing.conf: 3 instructions fetched per cycle, fetch ending at predicted-taken branches, 4-wide retire, tournament predictor, BTB, RAS, \
11-cycle misprediction penalty, brr and direct jumps resolved in decode, dataflow back end with an \
80-entry ROB and store forwarding, 32 KB L1s, 1 MB L2); cost per site = (cycles of the variant − \
cycles of the uninstrumented build) / conditional-branch executions. Accuracy: the exact edge profile \
comes from running the uninstrumented build under the emulator and counting each jcc's outcomes; \
counter builds run natively, brr builds under the emulator.
";

const NOT_DONE: &str = "\
## Not in this run\n\n\
Part (c) of the issue — the same microbenchmark under the software branch tracer, so one table \
compares both approaches — needs the tracer (libbreakdance.so) and is not produced here.\n";

fn lfsr_section() -> String {
    let n = 1u64 << 22;
    let mut s = String::from("## LFSR model\n\n");
    let _ = writeln!(
        s,
        "64-bit Galois LFSR (x^64+x^4+x^3+x+1), {n} executions per frequency from seed 1; z = (taken − n·p)/σ.\n"
    );
    s.push_str("| freq | p | taken | expected | z |\n|---:|---:|---:|---:|---:|\n");
    for freq in 0..16u8 {
        let mut l = crate::lfsr::Lfsr::new(1);
        let taken = (0..n).filter(|_| l.brr(freq)).count() as f64;
        let p = 0.5f64.powi(i32::from(freq) + 1);
        let mean = n as f64 * p;
        let z = (taken - mean) / (mean * (1.0 - p)).sqrt();
        let _ = writeln!(
            s,
            "| {freq} | 2^-{} | {taken} | {mean:.1} | {z:+.2} |",
            freq + 1
        );
    }
    s.push('\n');
    s
}

fn split(v: Variant) -> (&'static str, u32) {
    match v {
        Variant::None => ("none", 0),
        Variant::Full => ("full", 0),
        Variant::Counter { interval } => ("counter", interval),
        Variant::Brr { interval } => ("brr", interval),
        Variant::Ephemeral => ("ephemeral", 0),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> Result<()> {
    let p = dir.join(name);
    std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))
}

fn workloads(work: &Path, quick: bool) -> Result<Vec<Workload>> {
    let dir = workload::workload_dir();
    let mut v = vec![Workload {
        name: "charclass",
        sources: vec![dir.join("charclass.c")],
        args: vec!["1".into()],
    }];
    if !quick {
        let tree = workload::bzip2_source(&work.join("debian-src"))?;
        let input = work.join("bzip2-input.txt");
        std::fs::write(&input, workload::sample_text(20_000))
            .with_context(|| format!("cannot write {}", input.display()))?;
        v.push(Workload {
            name: "bzip2",
            sources: workload::bzip2_sources(&tree),
            args: vec!["-c".into(), "-k".into(), input.display().to_string()],
        });
    }
    v.push(Workload {
        name: "resonance",
        sources: vec![dir.join("resonance.c")],
        args: vec![if quick { "200000" } else { "1000000" }.into()],
    });
    Ok(v)
}

/// Guest stdout goes to /dev/null; the edge file to `edges`.
fn guest(exe: &Path, args: &[String], edges: &Path, seed: u64) -> Result<Process> {
    let mut argv = vec![exe.display().to_string()];
    argv.extend(args.iter().cloned());
    let env = vec![format!("BRR_EDGES={}", edges.display())];
    let mut p = Process::load(exe, &argv, &env, seed)?;
    use std::os::fd::IntoRawFd;
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .context("cannot open /dev/null")?;
    p.stdio[1] = null.into_raw_fd();
    Ok(p)
}

fn close_stdout(p: &Process) {
    // SAFETY: closes the /dev/null descriptor `guest` opened for this run.
    unsafe { libc::close(p.stdio[1]) };
}

fn timed_run(exe: &Path, args: &[String], edges: &Path, config: &Config) -> Result<Report> {
    let mut p = guest(exe, args, edges, 1)?;
    let r = timing::run(&mut p, config, u64::MAX);
    close_stdout(&p);
    let (status, report) = r.with_context(|| format!("timing run of {}", exe.display()))?;
    anyhow::ensure!(status == 0, "{} exited with {status}", exe.display());
    Ok(report)
}

fn emulated_edges(exe: &Path, args: &[String], edges: &Path, seed: u64) -> Result<EdgeProfile> {
    let mut p = guest(exe, args, edges, seed)?;
    let r = p.run(u64::MAX);
    close_stdout(&p);
    let status = r.with_context(|| format!("emulated run of {}", exe.display()))?;
    anyhow::ensure!(status == 0, "{} exited with {status}", exe.display());
    Ok(profile::sanitise_units(&profile::read_edges(edges)?))
}

fn native_edges(exe: &Path, args: &[String], edges: &Path) -> Result<EdgeProfile> {
    let out = Command::new(exe)
        .args(args)
        .env("BRR_EDGES", edges)
        .stdout(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "{} failed: {}",
        exe.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(profile::sanitise_units(&profile::read_edges(edges)?))
}

/// Maps `f` over `items` on `threads` threads, keeping the order. The
/// first error (in the items' order) is returned, and once a job fails no
/// new one starts. Shared by the experiments here and bench-harness's.
pub fn parallel<T: Sync, R: Send>(
    threads: usize,
    items: &[T],
    f: impl Fn(&T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<R>>>> =
        Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else {
                    break;
                };
                let r = f(item);
                let failed = r.is_err();
                results.lock().unwrap()[i] = Some(r);
                if failed {
                    // Stop handing out work; the error is returned below.
                    next.store(items.len(), Ordering::Relaxed);
                }
            });
        }
    });
    // Every job before a failed one ran (jobs start in order): the first
    // error in order is met before any job that never started.
    let mut out = Vec::with_capacity(items.len());
    for r in results.into_inner().unwrap().into_iter().flatten() {
        out.push(r?);
    }
    Ok(out)
}
