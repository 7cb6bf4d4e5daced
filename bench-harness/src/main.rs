//! `bench-harness EXPERIMENT [--quick] [--cache DIR] [--results DIR]`:
//! measures breakdance the way the Break Dancing paper does, on third-party
//! programs, and writes tables and SVG plots under `results/<experiment>/`.

mod autofdo;
mod bpcost;
mod brr_tracer;
mod coproc;
mod csspgo;
mod ephemeral_native;
mod fdo;
mod forms;
mod interferometry;
mod levels;
mod overhead;
mod profiler;
mod quality;
mod report;
mod runner;
mod threads;
mod tracelen;
mod verify;
mod workloads;

use anyhow::{bail, Context, Result};
use std::path::PathBuf;

const USAGE: &str =
    "usage: bench-harness EXPERIMENT [--quick] [--cache DIR] [--results DIR] [--layouts N] [--epoch N]
                    [--reuse-builds] [--smc-penalty N,N,...] [--baseline LIB] [--slots N,N,...]

experiments:
  workloads  fetch and build the third-party workloads, time them natively
  overhead   profiler overhead per sampling rate, cost breakdown, t/s factors
  bpcost     cost to move and to trigger a hardware breakpoint per thread count
  quality    profile accuracy against exact callgrind ground truth
  fdo        AutoFDO / instrumented PGO speedups on the source-built workloads
  fdo-layouts
             the fdo speedups with layout-noise error bars: -O2, AutoFDO
             (ours, emulate; N = 128, 3 ms), AutoFDO exact and instrumented
             PGO, each compiled once with -ffunction-sections and linked N
             times by lld --shuffle-sections, timed in 3 interleaved rounds
             (--quick: bzip2, 2 layouts, 1 round); adds results/fdo/layouts*
             and a section of results/fdo/README.md
  brr        the branch-on-random experiment (brr crate), then brr-tracer
  brr-tracer the brr microbenchmark under the software tracer, compared with
             the brr results already in results/brr
  verify     the emulator's predictions checked at a stop on every
             workload: mismatches per workload
  csspgo     what record -g gives the compiler: CSSPGO (line-based and with
             pseudo-probes) against AutoFDO from record and record -g and
             instrumented PGO, all with frame pointers; what -g costs per
             trace and how deep the stacks are
  tracelen   traces longer than 32 branches: cost per branch and profile
             quality against CPU overhead, per trace length
  threads    what a registered thread costs: 1000 short-lived threads natively
             and under the autostarted library (paper, emulate), max RSS and
             system time per thread
  levels     emulate mode with glibc's string functions at each x86-64 ISA
             level (GLIBC_TUNABLES): segments, stops, step-overs, overhead
  interferometry
             program interferometry (Wang and Jimenez) in brr's timing model:
             N code layouts of bzip2 and opmix (lld --shuffle-sections), CPI
             and MPKI of each, the fit CPI = m*MPKI + b with 95% intervals,
             and b checked against the CPI a perfect predictor measures
  interferometry-findings
             regenerate the Findings section of results/interferometry/
             summary.md from its fit.csv, without rerunning the layouts
  ephemeral  ephemeral instrumentation (Traub, Schechter and Smith) in brr's
             emulator and timing model: hooks that unhook after P executions
             and are re-hooked every epoch, P = 10, 100, 1000, 10000, against
             counter and brr sampling at equal overhead and equal accuracy,
             on charclass, bzip2 and flip (a branch whose bias flips halfway)
  ephemeral-superblock
             the same workloads laid out (trace layout) by exact, ephemeral,
             counter, brr and deliberately wrong profiles from a training
             input, timed on the evaluation input: a section of
             results/ephemeral/summary.md and results/ephemeral/superblock.csv
  coproc     value profiles from a profiling co-processor (Zilles and Sohi)
             against interrupt sampling in brr's emulator and timing model:
             per-load invariance error, capture and overhead, 4..64 slots
             against every Nth load, on charclass, bzip2 and phased (values
             that change halfway)
  values     the tracer's value profiles (record --values) against brr's
             exact per-load counts, on charclass, phased and bzip2 built
             once and linked for both (musl for brr, glibc for the tracer)
  ephemeral-native
             ephemeral instrumentation run natively (libephemeral.so: int3
             hooks, P = 10, 100, 1000, 10000, 10 ms epochs of CPU time)
             against the tracer's emulate mode on sqlite, lua and bzip2:
             CPU overhead and conditional-edge overlap with callgrind
  all        every experiment above, in order

options:
  --quick        small inputs and few runs (a smoke test; under 3 minutes)
  --cache DIR    where sources, builds and inputs are kept (default target/workloads)
  --results DIR  where results go (default results)
  --layouts N    interferometry: layouts per workload (default 100, --quick 6;
                 at least 3); fdo-layouts: layouts per variant (default 10,
                 --quick 2; at least 2)
  --reuse-builds fdo-layouts: time the variants a previous run built (same
                 cache) instead of retraining and recompiling them
  --epoch N      ephemeral: re-hook every N emulated instructions (default
                 100000; another value writes to results/ephemeral/epoch-N)
  --smc-penalty LIST
                 ephemeral: also rerun the ephemeral runs with each of these
                 cycles per store into code, comma-separated (e.g. 0,100,1000;
                 each 0..=100000), into results/ephemeral/smc
  --slots LIST   coproc: co-processor sizes, comma-separated (default
                 4,8,16,32,64; each 1..=4096)
  --baseline LIB threads: also run this build of libbreakdance.so (an earlier
                 commit's) in the same rounds, for a before/after comparison";

/// Options shared by every experiment.
pub struct Options {
    pub quick: bool,
    pub cache: PathBuf,
    pub results: PathBuf,
    /// `--layouts N` (interferometry and fdo-layouts).
    pub layouts: Option<usize>,
    /// `--reuse-builds` (fdo-layouts only).
    pub reuse_builds: bool,
    /// `--epoch N` (ephemeral only).
    pub epoch: Option<u64>,
    /// `--smc-penalty LIST` (ephemeral only).
    pub smc_penalties: Option<Vec<u32>>,
    /// `--baseline LIB` (threads only).
    pub baseline: Option<PathBuf>,
    /// `--slots LIST` (coproc only).
    pub slots: Option<Vec<usize>>,
}

fn parse(args: &[String]) -> Result<(String, Options)> {
    let mut experiment = None;
    let mut opts = Options {
        quick: false,
        cache: PathBuf::from("target/workloads"),
        results: PathBuf::from("results"),
        layouts: None,
        reuse_builds: false,
        epoch: None,
        smc_penalties: None,
        baseline: None,
        slots: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => opts.quick = true,
            "--reuse-builds" => opts.reuse_builds = true,
            "--layouts" => {
                let v = it
                    .next()
                    .context("option --layouts needs a number of layouts")?;
                let n: usize = v.parse().ok().filter(|n| *n >= 2).with_context(|| {
                    format!("--layouts needs a whole number of at least 2, got '{v}'")
                })?;
                opts.layouts = Some(n);
            }
            "--epoch" => {
                let v = it
                    .next()
                    .context("option --epoch needs a number of instructions")?;
                let n: u64 = v.parse().ok().filter(|n| *n > 0).with_context(|| {
                    format!("--epoch needs a positive whole number of instructions, got '{v}'")
                })?;
                opts.epoch = Some(n);
            }
            "--smc-penalty" => {
                let v = it.next().context(
                    "option --smc-penalty needs a comma-separated list of cycles per store into code",
                )?;
                let mut n: Vec<u32> = v
                    .split(',')
                    .map(|x| x.parse().ok().filter(|n| *n <= 100_000))
                    .collect::<Option<_>>()
                    .with_context(|| {
                        format!(
                            "--smc-penalty needs cycles per store into code from 0 to 100000, \
                             comma-separated, got '{v}'"
                        )
                    })?;
                // A set, in order: the findings compare the lowest and
                // the highest.
                n.sort_unstable();
                n.dedup();
                opts.smc_penalties = Some(n);
            }
            "--slots" => {
                let v = it
                    .next()
                    .context("option --slots needs a comma-separated list of slot counts")?;
                let n: Vec<usize> = v
                    .split(',')
                    .map(|x| x.parse().ok().filter(|n| (1..=4096).contains(n)))
                    .collect::<Option<_>>()
                    .with_context(|| {
                        format!(
                            "--slots needs slot counts from 1 to 4096, comma-separated, got '{v}'"
                        )
                    })?;
                opts.slots = Some(n);
            }
            "--baseline" => {
                let v = it
                    .next()
                    .context("option --baseline needs a library path")?;
                opts.baseline = Some(PathBuf::from(v));
            }
            "--cache" | "--results" => {
                let v = it
                    .next()
                    .with_context(|| format!("option {a} needs a directory argument"))?;
                let v = PathBuf::from(v);
                if a == "--cache" {
                    opts.cache = v;
                } else {
                    opts.results = v;
                }
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            s if s.starts_with('-') => bail!("unknown option '{s}'\n{USAGE}"),
            s => {
                if experiment.replace(s.to_string()).is_some() {
                    bail!("only one experiment at a time (got '{s}' too)\n{USAGE}");
                }
            }
        }
    }
    let experiment = experiment.with_context(|| format!("no experiment given\n{USAGE}"))?;
    // Absolute paths, because workloads run in other directories.
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    opts.cache = cwd.join(&opts.cache);
    opts.results = cwd.join(&opts.results);
    opts.baseline = opts.baseline.map(|b| cwd.join(b));
    Ok((experiment, opts))
}

/// `bench-harness ephemeral`: builds, measures and writes results/ephemeral.
fn ephemeral_experiment(opts: &Options) -> Result<usize> {
    use bench_harness::ephemeral;
    if bench_harness::tools::find("musl-gcc").is_none() {
        bail!("musl-gcc is not on PATH: run scripts/install-deps.sh (musl-tools)");
    }
    let work = opts
        .cache
        .join("ephemeral")
        .join(if opts.quick { "quick" } else { "full" });
    let plan = ephemeral::Plan {
        workloads: ephemeral::default_workloads(&opts.cache, opts.quick)?,
        work,
        persistences: ephemeral::PERSISTENCES.to_vec(),
        intervals: if opts.quick {
            vec![2, 128, 8192]
        } else {
            ephemeral::INTERVALS.to_vec()
        },
        epoch: opts.epoch.unwrap_or(ephemeral::DEFAULT_EPOCH),
        timing: brr::timing::Config::default(),
        smc_penalties: opts.smc_penalties.clone().unwrap_or_default(),
    };
    let results = ephemeral::measure(&plan)?;
    // A non-default epoch goes to a subdirectory, beside the default run.
    let mut out = opts.results.join("ephemeral");
    if plan.epoch != ephemeral::DEFAULT_EPOCH {
        out = out.join(format!("epoch-{}", plan.epoch));
    }
    ephemeral::write(&plan, &results, &out, opts.quick)?;
    eprintln!("[ephemeral] results in {}", out.display());
    if !plan.smc_penalties.is_empty() {
        let smc = out.join("smc");
        ephemeral::smc::write(&plan, &results, &smc, opts.quick)?;
        eprintln!("[ephemeral] smc_penalty sweep in {}", smc.display());
    }
    Ok(0)
}

/// `bench-harness ephemeral-superblock`: layouts by each profile, timed.
fn ephemeral_superblock(opts: &Options) -> Result<usize> {
    use bench_harness::ephemeral::{self, superblock};
    if bench_harness::tools::find("musl-gcc").is_none() {
        bail!("musl-gcc is not on PATH: run scripts/install-deps.sh (musl-tools)");
    }
    let plan = superblock::Plan {
        work: opts
            .cache
            .join("ephemeral")
            .join(if opts.quick { "sb-quick" } else { "sb-full" }),
        cases: superblock::default_cases(&opts.cache, opts.quick)?,
        persistences: if opts.quick {
            vec![1000]
        } else {
            vec![100, 1000]
        },
        counter_interval: 1024,
        brr_interval: 16,
        epoch: opts.epoch.unwrap_or(ephemeral::DEFAULT_EPOCH),
        timing: brr::timing::Config::default(),
    };
    let results = superblock::measure(&plan)?;
    let out = opts.results.join("ephemeral");
    superblock::write(&plan, &results, &out, opts.quick)?;
    eprintln!("[ephemeral-superblock] results in {}", out.display());
    Ok(0)
}

/// Runs one experiment; returns how many steps failed.
fn run(experiment: &str, opts: &Options) -> Result<usize> {
    match experiment {
        "workloads" => workloads_experiment(opts),
        "overhead" => overhead::run(opts),
        "bpcost" => bpcost::run(opts),
        "quality" => quality::run(opts),
        "fdo" => fdo::run(opts),
        "fdo-layouts" => fdo::layouts::run(opts),
        "csspgo" => csspgo::run(opts),
        "verify" => verify::run(opts),
        "tracelen" => tracelen::run(opts),
        "threads" => threads::run(opts),
        "levels" => levels::run(opts),
        "interferometry" => interferometry::run(opts),
        "interferometry-findings" => interferometry::refresh_findings(opts),
        "ephemeral" => ephemeral_experiment(opts),
        "coproc" => coproc::run(opts),
        "values" => coproc::tracer::run(opts),
        "ephemeral-native" => ephemeral_native::run(opts),
        "ephemeral-superblock" => ephemeral_superblock(opts),
        "brr" => {
            let dir = opts.results.join("brr");
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            eprintln!("[brr] running brr::experiment into {}", dir.display());
            brr::experiment::run(&dir, opts.quick)?;
            brr_tracer::run(opts, &dir)
        }
        "brr-tracer" => brr_tracer::run(opts, &opts.results.join("brr")),
        "all" => {
            let mut failed = 0;
            for e in [
                "workloads",
                "overhead",
                "bpcost",
                "quality",
                "fdo",
                "csspgo",
                "brr",
                "verify",
                "tracelen",
                "levels",
                "interferometry",
            ] {
                match run(e, opts) {
                    Ok(n) => failed += n,
                    Err(err) => {
                        eprintln!("[{e}] FAILED: {err:#}");
                        failed += 1;
                    }
                }
            }
            Ok(failed)
        }
        other => bail!("unknown experiment '{other}'\n{USAGE}"),
    }
}

/// `workloads`: prepares every workload and times one native run of each
/// input, so a user sees what the other experiments will run.
fn workloads_experiment(opts: &Options) -> Result<usize> {
    use report::{fmt, Report, Table};
    let ws = workloads::Workspace {
        cache: opts.cache.clone(),
        quick: opts.quick,
    };
    let mut rep = Report::new(&opts.results, "workloads", "Workloads")?;
    let mut table = Table::new(&[
        "workload",
        "origin",
        "binary",
        "train command",
        "eval command",
        "train wall (s)",
        "eval wall (s)",
    ]);
    for kind in workloads::kinds(opts.quick) {
        eprintln!("[workloads] preparing {}", kind.name());
        let w = match workloads::prepare(&ws, kind) {
            Ok(w) => w,
            Err(e) => {
                rep.fail(kind.name(), "prepare", &e);
                continue;
            }
        };
        let mut times = Vec::new();
        for input in [workloads::Input::Train, workloads::Input::Eval] {
            let cmd = w.command(input);
            match runner::run_timed(&cmd) {
                Ok(t) => times.push(fmt(t.wall_s, 3)),
                Err(e) => {
                    rep.fail(kind.name(), &format!("{input:?} run"), &e);
                    times.push("failed".into());
                }
            }
        }
        let origin = match kind.package() {
            Some(p) => format!("Debian source `{p}`, clang-19"),
            None => "Debian binary".to_string(),
        };
        table.push(vec![
            kind.name().to_string(),
            origin,
            w.binary.display().to_string(),
            w.command(workloads::Input::Train).display(),
            w.command(workloads::Input::Eval).display(),
            times[0].clone(),
            times[1].clone(),
        ]);
    }
    rep.note(&format!(
        "Source-built workloads use `clang-19 {}`. Cache: `{}`.",
        workloads::BASE_CFLAGS.join(" "),
        opts.cache.display()
    ));
    rep.table("workloads", "Workloads and their inputs", &table)?;
    rep.finish()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = parse(&args).and_then(|(experiment, opts)| run(&experiment, &opts));
    match result {
        Ok(0) => {}
        Ok(n) => {
            eprintln!("bench-harness: {n} step(s) failed; see failures.csv in the results");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("bench-harness: {e:#}");
            std::process::exit(2);
        }
    }
}
