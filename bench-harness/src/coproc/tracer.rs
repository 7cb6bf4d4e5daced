//! `values`: the tracer's value profiles (`profiler-ctl record --values`)
//! checked against brr's exact per-load value counts, on programs both
//! can run.
//!
//! Each workload is compiled once (musl-gcc, brr's flags) into objects,
//! and the objects are linked twice: statically against musl for brr's
//! emulator, which gives the exact profile (`brr::loadvalues`), and
//! dynamically against glibc for the tracer, which is a preloaded
//! library. The two executables print the same, and their functions built
//! from those objects hold the same bytes, so a load is named in both by
//! (function, offset) — the C library's functions differ and are left
//! out. The tracer runs the same command `RUNS` times (its profile is
//! sampled; the exact one is of one run, and the runs are identical,
//! address-space randomisation off) and the values.csv histograms are
//! summed. A load whose most frequent value is an address is not judged
//! (`is_address`): the builds place their code, heap and mappings apart,
//! and between profiled runs the library's own allocations move the
//! program's later mappings, so one pointer of a run can be two values of
//! the sum. Pointers differ between the two builds (other layouts, other
//! allocators), so a load of a pointer has the same invariance in both
//! but not the same top value.
//!
//! Judged over the hot loads (those covering `HOT_COVERAGE` of the exact
//! executions, as in `coproc`), weighted by executions: how many the
//! tracer measured (at least `MIN_SAMPLES` recorded executions), the
//! distance of its top-1 invariance from the exact one's interval, the
//! share within `TOLERANCE` (capture), and the share where it names the
//! same most frequent value. Loads wider than 8 bytes (vector loads) are
//! not the tracer's loads (see `src/emulate/values.rs`) and are counted
//! apart.

use super::{distance, Subject, HOT_COVERAGE, TOLERANCE};
use crate::profiler::Tracer;
use crate::report::{fmt, Report, Table};
use crate::runner::{self, Cmd};
use crate::Options;
use anyhow::{bail, Context, Result};
use bench_harness::elf::ElfModule;
use breakdance_protocol::values::{parse_values, VALUES_FILE};
use brr::emu::syscall::Process;
use brr::loadvalues::{self, ValueProfile};
use brr::workload::{self, Compiler};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Sampling period of the tracer (task-clock ns): the workloads run for
/// milliseconds.
const PERIOD_NS: u64 = 100_000;
/// Trace length.
const LBR: &str = "128";
/// Profiled runs per workload, summed. The tracer samples CPU time, so a
/// phase of the program that this KVM guest slows (time stolen by the
/// host counts as the thread's) draws more samples. Here one run of
/// phased at 10M iterations gave its second half 0.448 to 0.572 of the
/// samples (standard deviation 0.026 over 24 runs); the sum of 24 runs
/// brings that to about 0.005. The sum of 8 runs at 2M iterations read
/// 0.553 once in CI, against a tolerance of 0.05.
const RUNS: usize = 40;
const QUICK_RUNS: usize = 24;
/// Exact values kept per hot load, to judge the tracer's top value.
const TOP_VALUES: usize = 8;
/// The tracer names a load's top value when it names a value read at
/// least this share as often as the most frequent one (a near tie is no
/// disagreement).
const TIE: f64 = 0.9;
/// The top value is compared where the exact profile's is read at least
/// this share of the time.
const DOMINANT: f64 = 0.5;

/// Whether `v` is an address in brr's process of a static musl build: in
/// the image or its brk heap (a non-PIE static executable loads at 4 MiB),
/// or in the mappings and stack brr places below 0x7fff_ff00_0000.
fn is_address(v: u64) -> bool {
    (0x40_0000..0x1000_0000).contains(&v) || v >= 0x7e00_0000_0000
}
/// A load is measured with at least this many recorded executions.
pub const MIN_SAMPLES: u64 = 20;

/// The tracer's summed histogram of one load.
#[derive(Default, Clone)]
struct Sampled {
    executions: u64,
    other: u64,
    values: HashMap<u64, u64>,
}

impl Sampled {
    /// The top-1 invariance of the summed histogram.
    fn invariance(&self) -> f64 {
        self.top().map_or(0, |t| t.1) as f64 / self.executions.max(1) as f64
    }

    fn top(&self) -> Option<(u64, u64)> {
        self.values
            .iter()
            .map(|(&v, &n)| (v, n))
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
    }
}

/// One hot load, exact and sampled.
struct Load {
    place: String,
    executions: u64,
    bounds: (f64, f64),
    /// The most frequent values, exactly counted, most frequent first.
    exact_top: Vec<(u64, u64)>,
    wide: bool,
    sampled: Option<Sampled>,
}

/// coproc's programs, with phased long enough to be sampled in quick
/// runs too (its quick 200000 iterations take under a millisecond): 10M
/// iterations, about 15 ms natively, some 100 samples at 100 µs, so that
/// a short stall of the machine hits a small part of a phase.
fn subjects(opts: &Options, work: &Path) -> Result<Vec<Subject>> {
    let mut v = super::subjects(opts, work)?;
    for s in &mut v {
        if s.name == "phased" {
            s.args = vec!["10000000".into()];
        }
    }
    Ok(v)
}
/// Runs the experiment.
pub fn run(opts: &Options) -> Result<usize> {
    if bench_harness::tools::find("musl-gcc").is_none() {
        bail!("musl-gcc is not on PATH: run scripts/install-deps.sh (musl-tools)");
    }
    let tracer = Tracer::locate()?;
    let work = opts
        .cache
        .join("values")
        .join(if opts.quick { "quick" } else { "full" });
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let mut rep = Report::new(
        &opts.results,
        "values",
        "Value profiles from the tracer against brr's exact counts",
    )?;
    let runs = if opts.quick { QUICK_RUNS } else { RUNS };
    let mut summary = Table::new(&[
        "workload",
        "static loads",
        "hot loads",
        "vector loads (hot)",
        "address loads (hot weight; not judged)",
        "runs",
        "loads recorded",
        "hot weight measured",
        "mean error (measured)",
        "capture within 0.1",
        "same top value (dominant)",
    ]);
    let mut detail = Table::new(&[
        "workload",
        "load",
        "executions",
        "exact invariance",
        "recorded",
        "tracer invariance",
        "exact top value",
        "tracer top value",
    ]);
    for s in subjects(opts, &work)? {
        match measure(&s, &work, &tracer, runs) {
            Ok((loads, static_loads, recorded)) => {
                judge(&s, &loads, static_loads, runs, recorded, &mut summary);
                for l in &loads {
                    let (inv, top, n) = match &l.sampled {
                        Some(x) => {
                            let (v, _) = x.top().unwrap_or((0, 0));
                            (fmt(x.invariance(), 3), format!("{v:#x}"), x.executions)
                        }
                        None => ("-".into(), "-".into(), 0),
                    };
                    detail.push(vec![
                        s.name.to_string(),
                        l.place.clone(),
                        l.executions.to_string(),
                        fmt(l.bounds.0, 3),
                        n.to_string(),
                        inv,
                        l.exact_top
                            .first()
                            .map_or("-".into(), |t| format!("{:#x}", t.0)),
                        top,
                    ]);
                }
                rep.note(&format!(
                    "- **{}** (`{}`): {}",
                    s.name,
                    s.args.join(" "),
                    s.what
                ));
            }
            Err(e) => rep.fail(s.name, "run", &e),
        }
    }
    rep.note(&format!(
        "Method: see `bench-harness/src/coproc/tracer.rs`. The exact profile is brr's \
         (`brr::loadvalues`) of one run of the musl build; the tracer's is `profiler-ctl record \
         --values -c {PERIOD_NS} --lbr {LBR}` summed over {runs} runs of the glibc build of the \
         same objects. Hot loads cover {:.0}% of the exact executions; a load is measured with at \
         least {MIN_SAMPLES} recorded executions; error is the distance of the tracer's top-1 \
         invariance from the exact one's interval, weighted by executions; capture is the \
         weight within {TOLERANCE}.",
        HOT_COVERAGE * 100.0
    ));
    rep.table(
        "summary",
        "The tracer's value profiles against the exact ones",
        &summary,
    )?;
    rep.table("loads", "Every hot load, exact and recorded", &detail)?;
    if !opts.quick {
        let (cost, listings) = unmodified(opts, &tracer, &mut rep);
        rep.table(
            "overhead",
            "What --values costs the application (CPU time over native, library autostarted)",
            &cost,
        )?;
        for (name, text) in listings {
            rep.write(&format!("{name}-values.txt"), &text)?;
            rep.note(&format!(
                "[{name}-values.txt]({name}-values.txt): the {LISTED} most recorded loads of {name} \
                 from `profiler-ctl record --values` (its values.txt), at the default period."
            ));
        }
    }
    rep.finish()
}

/// Settings the overhead is measured at: (trace length, period in ns).
const SETTINGS: [(u32, u64); 2] = [(128, 10_000_000), (128, 3_000_000)];
/// Interleaved rounds of the overhead measurement.
const ROUNDS: usize = 5;
/// Loads listed from an unmodified program's values.txt.
const LISTED: usize = 40;

/// Value profiles of the harness's SQLite and of Debian's python3 (not
/// rebuilt): the application's CPU time natively and with the library
/// autostarted, with and without `values`, interleaved round by round;
/// and the head of each one's values.txt. A workload that fails is
/// reported and left out.
fn unmodified(opts: &Options, tracer: &Tracer, rep: &mut Report) -> (Table, Vec<(String, String)>) {
    use crate::report::{median, spread};
    use crate::workloads::{self, Input, Kind};
    let mut t = Table::new(&[
        "workload",
        "trace length",
        "period (ms)",
        "native CPU (s)",
        "without values",
        "with values",
        "with / without (per round)",
        "loads recorded per trace",
    ]);
    let mut listings = Vec::new();
    let ws = workloads::Workspace {
        cache: opts.cache.clone(),
        quick: false,
    };
    for kind in [Kind::Sqlite, Kind::Python] {
        let name = kind.name();
        let result = (|| -> Result<()> {
            let w = workloads::prepare(&ws, kind)?;
            let cmd = w.command(Input::Train);
            let dir = opts.cache.join("values").join("unmodified").join(name);
            std::fs::create_dir_all(&dir)?;
            let mut native = Vec::new();
            let mut runs: Vec<[Vec<f64>; 2]> = SETTINGS.iter().map(|_| [vec![], vec![]]).collect();
            let mut per_trace: Vec<Vec<f64>> = SETTINGS.iter().map(|_| vec![]).collect();
            for round in 0..ROUNDS {
                eprintln!("[values] {name}: overhead round {} of {ROUNDS}", round + 1);
                native.push(runner::run_timed(&cmd)?.cpu_s());
                for (i, (lbr, period)) in SETTINGS.iter().enumerate() {
                    let lbr = lbr.to_string();
                    // Which goes first alternates, round by round.
                    let order = if round % 2 == 0 {
                        [false, true]
                    } else {
                        [true, false]
                    };
                    for values in order {
                        let mut env = vec![("BREAKDANCE_LBR", lbr.as_str())];
                        if values {
                            env.push(("BREAKDANCE_VALUES", "1"));
                        }
                        let (time, sum) =
                            tracer.autostarted_run(&cmd, *period, &dir.join("out"), &env)?;
                        runs[i][usize::from(values)].push(time.cpu_s());
                        if values {
                            let traces = sum.counters.traces_started.max(1) as f64;
                            per_trace[i].push(sum.counters.loads_recorded as f64 / traces);
                        }
                    }
                }
            }
            let base = median(&native);
            for (i, (lbr, period)) in SETTINGS.iter().enumerate() {
                let ratio = |v: &[f64]| -> Vec<f64> { v.iter().map(|x| x / base).collect() };
                let paired: Vec<f64> = runs[i][1]
                    .iter()
                    .zip(&runs[i][0])
                    .map(|(a, b)| a / b)
                    .collect();
                t.push(vec![
                    name.to_string(),
                    lbr.to_string(),
                    fmt(*period as f64 / 1e6, 0),
                    fmt(base, 3),
                    spread(&ratio(&runs[i][0])),
                    spread(&ratio(&runs[i][1])),
                    spread(&paired),
                    fmt(median(&per_trace[i]), 0),
                ]);
            }
            // The listing: profiler-ctl record --values at the defaults.
            let out = dir.join("record");
            let _ = std::fs::remove_dir_all(&out);
            let record = cmd.wrapped(
                &tracer.ctl,
                &[
                    "record".into(),
                    "-q".into(),
                    "--values".into(),
                    "-o".into(),
                    out.clone().into_os_string(),
                    "--".into(),
                ],
            );
            runner::run(&record)?;
            let path = out.join("values.txt");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let head: Vec<&str> = text.lines().take(LISTED + 3).collect();
            listings.push((name.to_string(), head.join("\n") + "\n"));
            Ok(())
        })();
        if let Err(e) = result {
            rep.fail(name, "unmodified", &e);
        }
    }
    (t, listings)
}

/// Builds, runs under brr and under the tracer; returns the hot loads, the
/// static loads in the workload's own code, and the loads the tracer
/// recorded in all.
fn measure(
    s: &Subject,
    work: &Path,
    tracer: &Tracer,
    runs: usize,
) -> Result<(Vec<Load>, usize, u64)> {
    let musl = workload::build_static(work, s.name, &s.sources, Compiler::Gcc, &[])?;
    let objdir = work.join(format!("{}-{}-objs", s.name, Compiler::Gcc.name()));
    let mut objects: Vec<PathBuf> = std::fs::read_dir(&objdir)
        .with_context(|| format!("cannot read {}", objdir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "o"))
        .collect();
    objects.sort();
    let glibc = work.join(format!("{}-glibc", s.name));
    workload::run(Command::new("gcc").args(&objects).arg("-o").arg(&glibc))?;

    // Same output from both builds, natively.
    let native = |exe: &Path| -> Result<Vec<u8>> {
        Ok(workload::run(Command::new(exe).args(&s.args))?.stdout)
    };
    if native(&musl)? != native(&glibc)? {
        bail!(
            "the musl and glibc builds of {} print different output",
            s.name
        );
    }

    // The exact profile.
    let mut argv = vec![s.name.to_string()];
    argv.extend(s.args.iter().cloned());
    let mut p = Process::load(&musl, &argv, &[], 1)
        .with_context(|| format!("cannot load {}", musl.display()))?;
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .context("cannot open /dev/null")?;
    use std::os::fd::AsRawFd;
    p.stdio[1] = null.as_raw_fd();
    eprintln!("[values] {}: exact profile under brr", s.name);
    let (_, truth) = loadvalues::run(&mut p, u64::MAX)
        .with_context(|| format!("running {} under brr", musl.display()))?;

    // The tracer's, summed over the runs. Without address-space
    // randomisation (`setarch -R`), so that a load of a pointer reads the
    // same value in every run, as in brr's one run.
    let setarch = runner::require_tool("setarch", "util-linux")?;
    let mut sampled: HashMap<u64, Sampled> = HashMap::new();
    let mut recorded = 0;
    for i in 0..runs {
        eprintln!("[values] {}: profiled run {}/{runs}", s.name, i + 1);
        let out = work.join(format!("{}-out", s.name));
        let _ = std::fs::remove_dir_all(&out);
        let cmd = Cmd::new(&glibc)
            .args(&s.args)
            .stdout_to(&work.join("stdout"));
        let record = tracer.record_with(&cmd, PERIOD_NS, &out, &["--values", "--lbr", LBR]);
        runner::run(&record.wrapped(&setarch, &["-R".into()]))?;
        let path = out.join(VALUES_FILE);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let rows = parse_values(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        for r in rows {
            recorded += r.executions;
            if r.module != glibc {
                continue;
            }
            let x = sampled.entry(r.vaddr).or_default();
            x.executions += r.executions;
            x.other += r.other;
            for (v, n) in r.values {
                *x.values.entry(v).or_default() += n;
            }
        }
    }

    // Name loads by (function, offset) in both builds, for the functions
    // the workload's objects define (the same code in both, but for the
    // relocated addresses).
    let own = defined_functions(&objects)?;
    let m = ElfModule::load(&musl).map_err(|e| anyhow::anyhow!("{e}"))?;
    let g = ElfModule::load(&glibc).map_err(|e| anyhow::anyhow!("{e}"))?;
    let same = |name: &str| -> Option<(u64, u64)> {
        let (a, b) = (m.symbol(name)?, g.symbol(name)?);
        (own.contains(name) && a.size == b.size && a.size > 0).then_some((a.address, b.address))
    };
    Ok((
        hot(&truth, &m, &g, &same, &sampled),
        own_loads(&truth, &m, &same),
        recorded,
    ))
}

/// The functions the objects define, by name.
fn defined_functions(objects: &[PathBuf]) -> Result<std::collections::HashSet<String>> {
    use object::{Object, ObjectSymbol, SymbolKind};
    let mut names = std::collections::HashSet::new();
    for o in objects {
        let data = std::fs::read(o).with_context(|| format!("cannot read {}", o.display()))?;
        let file = object::File::parse(&*data)
            .with_context(|| format!("{} is not an object file", o.display()))?;
        for sym in file.symbols() {
            if sym.kind() == SymbolKind::Text && sym.is_definition() {
                if let Ok(name) = sym.name() {
                    names.insert(name.to_string());
                }
            }
        }
    }
    Ok(names)
}

/// Static loads of the exact profile in the workload's own functions.
fn own_loads(
    truth: &ValueProfile,
    m: &ElfModule,
    same: &impl Fn(&str) -> Option<(u64, u64)>,
) -> usize {
    truth
        .pcs
        .iter()
        .filter(|&&pc| m.symbol_at(pc).is_some_and(|f| same(&f.name).is_some()))
        .count()
}

/// The hot loads of the workload's own functions, with the tracer's
/// histogram at the same place in the glibc build.
fn hot(
    truth: &ValueProfile,
    m: &ElfModule,
    g: &ElfModule,
    same: &impl Fn(&str) -> Option<(u64, u64)>,
    sampled: &HashMap<u64, Sampled>,
) -> Vec<Load> {
    let mut own: Vec<(u64, usize, String)> = Vec::new();
    for (i, &pc) in truth.pcs.iter().enumerate() {
        let Some(f) = m.symbol_at(pc) else { continue };
        let Some((ma, ga)) = same(&f.name) else {
            continue;
        };
        let offset = pc - ma;
        own.push((ga + offset, i, format!("{}+{offset:#x}", f.name)));
    }
    own.sort_by_key(|o| std::cmp::Reverse(truth.loads[o.1].total));
    let total: u64 = own.iter().map(|o| truth.loads[o.1].total).sum();
    let mut covered = 0;
    let mut loads = Vec::new();
    for (gpc, i, place) in own {
        if covered as f64 >= HOT_COVERAGE * total as f64 {
            break;
        }
        let h = &truth.loads[i];
        covered += h.total;
        let wide = g
            .decode_at(gpc)
            .is_some_and(|ins| ins.memory_size().size() > 8);
        loads.push(Load {
            place,
            executions: h.total,
            bounds: h.invariance_bounds(),
            exact_top: h.top(TOP_VALUES),
            wide,
            sampled: sampled.get(&gpc).cloned(),
        });
    }
    loads
}

/// Whether `value` is the exact top value, or one read nearly as often
/// (see [`TIE`]).
fn names_top(exact: &[(u64, u64)], value: u64) -> bool {
    let Some(&(_, top)) = exact.first() else {
        return false;
    };
    exact
        .iter()
        .any(|&(v, n)| v == value && n as f64 >= TIE * top as f64)
}

/// The workload's row of the summary.
fn judge(
    s: &Subject,
    loads: &[Load],
    static_loads: usize,
    runs: usize,
    recorded: u64,
    t: &mut Table,
) {
    let address = |l: &Load| l.exact_top.first().is_some_and(|t| is_address(t.0));
    let all: u64 = loads.iter().map(|l| l.executions).sum();
    let pointers: u64 = loads
        .iter()
        .filter(|l| address(l))
        .map(|l| l.executions)
        .sum();
    let narrow: Vec<&Load> = loads.iter().filter(|l| !l.wide && !address(l)).collect();
    let weight: u64 = narrow.iter().map(|l| l.executions).sum();
    let measured: Vec<(&Load, &Sampled)> = narrow
        .iter()
        .filter_map(|l| {
            l.sampled
                .as_ref()
                .filter(|x| x.executions >= MIN_SAMPLES)
                .map(|x| (*l, x))
        })
        .collect();
    let mw: u64 = measured.iter().map(|(l, _)| l.executions).sum();
    let (mut err, mut captured, mut same_top, mut dominant) = (0.0, 0u64, 0u64, 0u64);
    for (l, x) in &measured {
        let (top, _) = x.top().unwrap_or((0, 0));
        let d = distance(x.invariance(), l.bounds);
        err += d * l.executions as f64;
        if d <= TOLERANCE {
            captured += l.executions;
        }
        if l.bounds.0 >= DOMINANT {
            dominant += l.executions;
            if names_top(&l.exact_top, top) {
                same_top += l.executions;
            }
        }
    }
    let share = |w: u64, of: u64| {
        if of == 0 {
            "-".to_string()
        } else {
            fmt(w as f64 / of as f64, 3)
        }
    };
    t.push(vec![
        s.name.to_string(),
        static_loads.to_string(),
        loads.len().to_string(),
        loads.iter().filter(|l| l.wide).count().to_string(),
        share(pointers, all),
        runs.to_string(),
        recorded.to_string(),
        share(mw, weight),
        if mw == 0 {
            "-".into()
        } else {
            fmt(err / mw as f64, 4)
        },
        share(captured, mw),
        share(same_top, dominant),
    ]);
}
