//! `bench-harness ephemeral`: ephemeral instrumentation (Traub, Schechter
//! and Smith, "Ephemeral instrumentation for lightweight program
//! profiling") against counter-based and branch-on-random sampling, in brr's
//! emulator and timing model.
//!
//! Every conditional branch of a workload is hooked (`brr-instrument
//! --variant ephemeral`): a jmp to a per-site stub that counts the edge and,
//! after P executions, writes the branch back. A timer signal every `epoch`
//! emulated instructions re-hooks every unhooked site. The counts give each
//! branch's bias; `brr::markov` turns the biases into edge weights through
//! each procedure's Markov chain. The same workloads built with the counter
//! and brr variants at several intervals give curves of overhead (cycles per
//! site execution in the timing model) against accuracy (overlap with the
//! exact edge profile), and each ephemeral P is compared with them at equal
//! overhead and at equal accuracy.
//!
//! Workloads: the brr paper's microbenchmark (charclass), bzip2 from
//! Debian's sources, and `brr/workloads/flip.c`, whose one branch of
//! interest flips its bias halfway through the run, run with and without
//! re-hooking.

pub mod smc;
pub mod superblock;

use crate::overlap;
use anyhow::{bail, Context, Result};
use breakdance_charts::{LineChart, Series};
use brr::emu::syscall::Process;
use brr::instrument::Variant;
use brr::profile::{self, EdgeProfile};
use brr::timing;
use brr::workload::{self, Compiler};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The paper's persistences.
pub const PERSISTENCES: [u64; 4] = [10, 100, 1000, 10000];
/// Sampling intervals of the counter and brr curves.
pub const INTERVALS: [u32; 6] = [2, 16, 128, 1024, 8192, 65536];
/// Epoch in emulated instructions (see `summary.md` for why this value).
pub const DEFAULT_EPOCH: u64 = 100_000;

/// The paper's overheads (percent of run time) at P = 10, 100, 1000, 10000
/// for compress, and its largest (vortex at 10000).
const PAPER_COMPRESS: [f64; 4] = [0.7, 0.9, 0.9, 3.9];
const PAPER_VORTEX_10000: f64 = 58.3;
const PAPER_WC_SUPERBLOCK: f64 = 72.3;

/// A program the experiment builds and runs.
#[derive(Clone, Debug)]
pub struct Workload {
    pub name: String,
    pub sources: Vec<PathBuf>,
    pub args: Vec<String>,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Builds and intermediate files.
    pub work: PathBuf,
    pub workloads: Vec<Workload>,
    pub persistences: Vec<u64>,
    pub intervals: Vec<u32>,
    pub epoch: u64,
    pub timing: timing::Config,
    /// `smc_penalty` values (cycles per store into code) under which the
    /// uninstrumented and the re-hooked ephemeral runs are repeated: the
    /// sensitivity sweep (`smc.rs`). Empty: no sweep.
    pub smc_penalties: Vec<u32>,
}

/// How a run was instrumented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Ephemeral { persist: u64, rehook: bool },
    Counter(u32),
    Brr(u32),
}

impl Scheme {
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Ephemeral { rehook: true, .. } => "ephemeral",
            Scheme::Ephemeral { rehook: false, .. } => "ephemeral-no-rehook",
            Scheme::Counter(_) => "counter",
            Scheme::Brr(_) => "brr",
        }
    }
    /// P for ephemeral, the interval for the samplers.
    pub fn parameter(self) -> u64 {
        match self {
            Scheme::Ephemeral { persist, .. } => persist,
            Scheme::Counter(i) | Scheme::Brr(i) => u64::from(i),
        }
    }
}

/// One instrumented run.
#[derive(Clone, Debug)]
pub struct Run {
    pub scheme: Scheme,
    /// Timing-model cycles (None: a functional run, for accuracy only).
    pub cycles: Option<u64>,
    pub instructions: u64,
    /// (cycles − uninstrumented cycles) / conditional-branch executions.
    pub cycles_per_site: Option<f64>,
    /// Edge counts recorded (samples).
    pub samples: u64,
    /// Overlap with the exact profile of the counts as recorded.
    pub overlap_raw: f64,
    /// Ephemeral: overlap of the Markov-chain edge weights, each
    /// procedure scaled to the counts recorded in it.
    pub overlap_markov: Option<f64>,
    /// Ephemeral: the same with each procedure scaled to its exact share
    /// (measures the within-procedure shape alone).
    pub overlap_markov_exact_scale: Option<f64>,
    /// Ephemeral runtime's counters.
    pub hooks: u64,
    pub unhooks: u64,
    pub ticks: u64,
    /// Steps of the emulator that stored into executable memory.
    pub code_stores: u64,
    pub signals: u64,
    /// Recorded taken fraction of the workload's flipping branch (flip only).
    pub flip_bias: Option<f64>,
}

/// One workload's measurements.
#[derive(Clone, Debug)]
pub struct Measured {
    pub name: String,
    pub sites: usize,
    pub site_executions: u64,
    pub cycles_none: u64,
    pub instructions_none: u64,
    /// The flipping branch's exact taken fraction over the whole run (flip
    /// only).
    pub flip_exact_bias: Option<f64>,
    /// The exact edge profile (sanitised unit, site) → (taken, fall-through).
    pub exact: EdgeProfile,
    pub runs: Vec<Run>,
    /// Stores into code of the uninstrumented run (expected 0).
    pub code_stores_none: u64,
    /// The re-hooked ephemeral runs under each of `Plan::smc_penalties`.
    pub smc: Vec<smc::Point>,
}

fn progress(msg: &str) {
    eprintln!("[ephemeral] {msg}");
}

/// The default workloads: charclass and flip, and bzip2 unless `quick`.
pub fn default_workloads(cache: &Path, quick: bool) -> Result<Vec<Workload>> {
    let dir = workload::workload_dir();
    let mut v = vec![Workload {
        name: "charclass".into(),
        sources: vec![dir.join("charclass.c")],
        args: vec!["1".into()],
    }];
    if !quick {
        let tree = workload::bzip2_source(&cache.join("debian-src"))?;
        let input = cache.join("ephemeral-bzip2-input.txt");
        std::fs::create_dir_all(cache)?;
        std::fs::write(&input, workload::sample_text(20_000))
            .with_context(|| format!("cannot write {}", input.display()))?;
        v.push(Workload {
            name: "bzip2".into(),
            sources: workload::bzip2_sources(&tree),
            args: vec!["-c".into(), "-k".into(), input.display().to_string()],
        });
    }
    v.push(Workload {
        name: "flip".into(),
        sources: vec![dir.join("flip.c")],
        args: vec![if quick { "200000" } else { "1000000" }.into()],
    });
    Ok(v)
}

/// What a guest run returned.
struct GuestRun {
    report: Option<timing::Report>,
    instructions: u64,
    code_stores: u64,
    signals: u64,
}

fn run_guest(
    exe: &Path,
    args: &[String],
    env: &[String],
    epoch: u64,
    timing_config: Option<&timing::Config>,
) -> Result<GuestRun> {
    let mut argv = vec![exe.display().to_string()];
    argv.extend(args.iter().cloned());
    let mut p = Process::load(exe, &argv, env, 1)?;
    p.epoch = Some(epoch);
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .context("cannot open /dev/null")?;
    use std::os::fd::AsRawFd;
    p.stdio[1] = null.as_raw_fd();
    let (status, report) = match timing_config {
        Some(c) => {
            let (s, r) = timing::run(&mut p, c, u64::MAX)
                .with_context(|| format!("timing run of {}", exe.display()))?;
            (s, Some(r))
        }
        None => (
            p.run(u64::MAX)
                .with_context(|| format!("emulated run of {}", exe.display()))?,
            None,
        ),
    };
    if status != 0 {
        bail!("{} exited with status {status}", exe.display());
    }
    Ok(GuestRun {
        report,
        instructions: p.machine.icount,
        code_stores: p.machine.code_writes,
        signals: p.signals_delivered,
    })
}

type Keyed = BTreeMap<(String, usize, bool), u64>;

fn keyed(p: &EdgeProfile) -> Keyed {
    let mut m = Keyed::new();
    for ((u, s), &(t, f)) in p {
        m.insert((u.clone(), *s, true), t);
        m.insert((u.clone(), *s, false), f);
    }
    m
}

fn keyed_f64(w: &BTreeMap<(String, usize, bool), f64>) -> Keyed {
    let total: f64 = w.values().sum();
    let scale = if total > 0.0 { 1e12 / total } else { 0.0 };
    w.iter()
        .map(|(k, &v)| (k.clone(), (v * scale).round() as u64))
        .collect()
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Each unit's procedures (from the compiler output the ephemeral build
/// kept) as lists of sites, keyed by sanitised unit name.
fn unit_procedures(
    work: &Path,
    w: &Workload,
) -> Result<Vec<(String, Vec<brr::markov::Procedure>)>> {
    let dir = work.join(format!("{}-gcc-ephemeral-work", w.name));
    let mut out = Vec::new();
    for src in &w.sources {
        let unit = src
            .file_name()
            .context("source without a name")?
            .to_string_lossy()
            .into_owned();
        let asm = dir.join(format!("{unit}.s"));
        let text = std::fs::read_to_string(&asm)
            .with_context(|| format!("cannot read {}", asm.display()))?;
        out.push((sanitize(&unit), brr::markov::procedures(&text)));
    }
    Ok(out)
}

/// Pseudo-count added to both edges of a site before its bias is taken
/// (Jeffreys' prior): a site never recorded counts as 1/2, and a branch
/// recorded n times one way only gets 1 − 1/(2n + 2). A loop whose exit
/// was never recorded therefore gets a trip count of about 2n: the
/// recorded biases cannot tell a loop of 2n iterations from one of 10^6,
/// which is the main error of the Markov weights on hot loops. (A prior
/// of 0.01 was tried on charclass: worse at P = 1000 and 10000, 0.55 and
/// 0.52 against 0.95 and 0.81, the same at 10 and 100.)
const PSEUDO_COUNT: f64 = 0.5;

/// Edge weights from an ephemeral profile's biases through each
/// procedure's Markov chain; each procedure's total is `scale(unit, sites)`.
fn markov_weights(
    procs: &[(String, Vec<brr::markov::Procedure>)],
    recorded: &EdgeProfile,
    scale: impl Fn(&str, &[usize]) -> f64,
) -> BTreeMap<(String, usize, bool), f64> {
    let mut w = BTreeMap::new();
    for (unit, list) in procs {
        let bias: HashMap<usize, f64> = recorded
            .iter()
            .filter(|((u, _), _)| u == unit)
            .map(|((_, s), &(t, f))| {
                (
                    *s,
                    (t as f64 + PSEUDO_COUNT) / ((t + f) as f64 + 2.0 * PSEUDO_COUNT),
                )
            })
            .collect();
        for p in list {
            let flows = brr::markov::edge_flows(p, &bias);
            let sites: Vec<usize> = flows.iter().map(|f| f.0).collect();
            let total: f64 = flows.iter().map(|f| f.1 + f.2).sum();
            let target = scale(unit, &sites);
            let k = if total > 0.0 { target / total } else { 0.0 };
            for (s, t, f) in flows {
                w.insert((unit.clone(), s, true), t * k);
                w.insert((unit.clone(), s, false), f * k);
            }
        }
    }
    w
}

fn site_sum(p: &EdgeProfile, unit: &str, sites: &[usize]) -> f64 {
    sites
        .iter()
        .filter_map(|&s| p.get(&(unit.to_string(), s)))
        .map(|&(t, f)| (t + f) as f64)
        .sum()
}

fn read_stats(path: &Path) -> Result<(u64, u64, u64)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let f: Vec<&str> = text.split_whitespace().collect();
    let get = |key: &str| -> Result<u64> {
        let i = f
            .iter()
            .position(|w| *w == key)
            .with_context(|| format!("{}: no '{key}'", path.display()))?;
        f.get(i + 1)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("{}: bad value for '{key}'", path.display()))
    };
    Ok((get("hooks")?, get("unhooks")?, get("ticks")?))
}

/// Measures every workload of `plan`.
pub fn measure(plan: &Plan) -> Result<Vec<Measured>> {
    std::fs::create_dir_all(&plan.work)
        .with_context(|| format!("cannot create {}", plan.work.display()))?;
    let mut out = Vec::new();
    for w in &plan.workloads {
        out.push(measure_one(plan, w).with_context(|| format!("workload {}", w.name))?);
    }
    Ok(out)
}

fn measure_one(plan: &Plan, w: &Workload) -> Result<Measured> {
    let work = &plan.work;
    let build = |v: Variant| {
        progress(&format!("{}: building {}", w.name, v.label()));
        workload::build_instrumented(work, &w.name, &w.sources, Compiler::Gcc, v)
    };
    let none = build(Variant::None)?;
    let mut argv = vec![none.display().to_string()];
    argv.extend(w.args.iter().cloned());
    progress(&format!("{}: exact edge profile", w.name));
    let (exact, status) = profile::exact_edges_quiet(&none, &argv, &[])?;
    if status != 0 {
        bail!("{} exited with status {status}", none.display());
    }
    let site_execs = profile::total(&exact);
    if site_execs == 0 {
        bail!("{}: no conditional branch executed", w.name);
    }
    let exact_keyed = keyed(&exact);
    progress(&format!(
        "{}: {} sites, {site_execs} conditional-branch executions",
        w.name,
        exact.len()
    ));
    // The flipping branch: the most executed site whose exact bias is
    // between 30% and 70%.
    let flip_site = (w.name == "flip")
        .then(|| {
            exact
                .iter()
                .filter(|(_, &(t, f))| {
                    let b = t as f64 / (t + f).max(1) as f64;
                    (0.3..=0.7).contains(&b)
                })
                .max_by_key(|(_, &(t, f))| t + f)
                .map(|(k, &(t, f))| (k.clone(), t as f64 / (t + f) as f64))
        })
        .flatten();
    if w.name == "flip" && flip_site.is_none() {
        bail!("flip: no branch with a bias between 30% and 70%");
    }
    let edges_env = |tag: &str| work.join(format!("{}-{tag}.edges", w.name));
    progress(&format!("{}: uninstrumented timing run", w.name));
    let base = run_guest(
        &none,
        &w.args,
        &[format!("BRR_EDGES={}", edges_env("none").display())],
        plan.epoch,
        Some(&plan.timing),
    )?;
    let cycles_none = base.report.as_ref().map_or(0, |r| r.cycles);

    let eph = build(Variant::Ephemeral)?;
    let procs = unit_procedures(work, w)?;
    let mut runs = Vec::new();
    let mut schemes = Vec::new();
    for &p in &plan.persistences {
        schemes.push(Scheme::Ephemeral {
            persist: p,
            rehook: true,
        });
        schemes.push(Scheme::Ephemeral {
            persist: p,
            rehook: false,
        });
    }
    for &i in &plan.intervals {
        schemes.push(Scheme::Counter(i));
        schemes.push(Scheme::Brr(i));
    }
    // One instrumented run of `scheme`, timed (when timed at all) under
    // `timing`; `tag` names its files and `cycles_none` is the
    // uninstrumented run's cycles under the same `timing`.
    let run_scheme =
        |scheme: Scheme, tag: &str, timing: &timing::Config, cycles_none: u64| -> Result<Run> {
            let edges = edges_env(tag);
            let stats = work.join(format!("{}-{tag}.stats", w.name));
            let _ = std::fs::remove_file(&edges);
            let _ = std::fs::remove_file(&stats);
            let mut env = vec![format!("BRR_EDGES={}", edges.display())];
            let (exe, timed) = match scheme {
                Scheme::Ephemeral { persist, rehook } => {
                    env.push(format!("BRR_EPH_P={persist}"));
                    env.push(format!("BRR_EPH_STATS={}", stats.display()));
                    if !rehook {
                        env.push("BRR_EPH_REHOOK=0".into());
                    }
                    (eph.clone(), rehook)
                }
                Scheme::Counter(i) => (build(Variant::Counter { interval: i })?, true),
                Scheme::Brr(i) => (build(Variant::Brr { interval: i })?, true),
            };
            let g = run_guest(&exe, &w.args, &env, plan.epoch, timed.then_some(timing))?;
            let recorded = profile::sanitise_units(&profile::read_edges(&edges)?);
            let overlap_raw = overlap::overlap(&exact_keyed, &keyed(&recorded));
            let cycles = g.report.as_ref().map(|r| r.cycles);
            let mut run = Run {
                scheme,
                cycles,
                instructions: g.instructions,
                cycles_per_site: cycles
                    .map(|c| (c as f64 - cycles_none as f64) / site_execs as f64),
                samples: profile::total(&recorded),
                overlap_raw,
                overlap_markov: None,
                overlap_markov_exact_scale: None,
                hooks: 0,
                unhooks: 0,
                ticks: 0,
                code_stores: g.code_stores,
                signals: g.signals,
                flip_bias: None,
            };
            if let Scheme::Ephemeral { .. } = scheme {
                let (h, u, t) = read_stats(&stats)?;
                run.hooks = h;
                run.unhooks = u;
                run.ticks = t;
                let own = markov_weights(&procs, &recorded, |u, s| site_sum(&recorded, u, s));
                let oracle = markov_weights(&procs, &recorded, |u, s| site_sum(&exact, u, s));
                run.overlap_markov = Some(overlap::overlap(&exact_keyed, &keyed_f64(&own)));
                run.overlap_markov_exact_scale =
                    Some(overlap::overlap(&exact_keyed, &keyed_f64(&oracle)));
            }
            if let Some((key, _)) = &flip_site {
                let &(t, f) = recorded.get(key).unwrap_or(&(0, 0));
                run.flip_bias = Some(t as f64 / (t + f).max(1) as f64);
            }
            Ok(run)
        };
    let total = schemes.len();
    for (n, &scheme) in schemes.iter().enumerate() {
        let tag = format!("{}-{}", scheme.name(), scheme.parameter());
        progress(&format!("{}: {tag} ({}/{total})", w.name, n + 1));
        runs.push(run_scheme(scheme, &tag, &plan.timing, cycles_none)?);
    }
    // The sensitivity sweep: the uninstrumented run and the re-hooked
    // ephemeral runs again under each other `smc_penalty`. The no-rehook
    // runs are functional only and the samplers store nothing into code
    // (`code_stores` = 0, checked in smc.rs), so neither depends on it.
    let mut smc = Vec::new();
    for &penalty in &plan.smc_penalties {
        let timing = timing::Config {
            smc_penalty: penalty,
            ..plan.timing.clone()
        };
        progress(&format!(
            "{}: smc_penalty {penalty}: uninstrumented",
            w.name
        ));
        let base = run_guest(
            &none,
            &w.args,
            &[format!("BRR_EDGES={}", edges_env("none").display())],
            plan.epoch,
            Some(&timing),
        )?;
        let cycles_none = base.report.as_ref().map_or(0, |r| r.cycles);
        let mut runs = Vec::new();
        for &persist in &plan.persistences {
            let scheme = Scheme::Ephemeral {
                persist,
                rehook: true,
            };
            // The same tag, hence the same file names, as the main run:
            // the paths are in the guest's environment, and a longer
            // environment moves its stack and changes the cycles.
            let tag = format!("{}-{persist}", scheme.name());
            progress(&format!("{}: {tag}, smc_penalty {penalty}", w.name));
            runs.push(run_scheme(scheme, &tag, &timing, cycles_none)?);
        }
        smc.push(smc::Point {
            penalty,
            cycles_none,
            code_stores_none: base.code_stores,
            runs,
        });
    }
    Ok(Measured {
        name: w.name.clone(),
        sites: exact.len(),
        site_executions: site_execs,
        cycles_none,
        instructions_none: base.instructions,
        flip_exact_bias: flip_site.map(|f| f.1),
        exact,
        runs,
        code_stores_none: base.code_stores,
        smc,
    })
}

/// The sampler's accuracy at the ephemeral run's overhead, and its
/// overhead at the ephemeral run's accuracy, by linear interpolation
/// between its measured intervals (None outside the measured range).
fn interpolate(points: &[(f64, f64)], x: f64) -> Option<f64> {
    let mut pts: Vec<(f64, f64)> = points.to_vec();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts.windows(2).find_map(|w| {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        (x0 <= x && x <= x1).then(|| {
            if x1 == x0 {
                y0
            } else {
                y0 + (y1 - y0) * (x - x0) / (x1 - x0)
            }
        })
    })
}

/// The "Findings" section, generated from the measurements.
fn findings(plan: &Plan, results: &[Measured]) -> String {
    let mut s = String::from("## Findings (generated from the runs above)\n\n");
    for m in results {
        let eph: Vec<&Run> = plan
            .persistences
            .iter()
            .filter_map(|&p| {
                m.runs.iter().find(|r| {
                    r.scheme
                        == Scheme::Ephemeral {
                            persist: p,
                            rehook: true,
                        }
                })
            })
            .collect();
        let pct = |r: &Run| {
            r.cycles
                .map(|c| (c as f64 / m.cycles_none.max(1) as f64 - 1.0) * 100.0)
        };
        let list = |f: &dyn Fn(&Run) -> Option<f64>, d: usize| {
            eph.iter()
                .map(|r| opt(f(r), d))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let ps = eph
            .iter()
            .map(|r| r.scheme.parameter().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            s,
            "- **{}** (P = {ps}): overhead {} % of the uninstrumented cycles ({} cycles per \
             site); overlap of the Markov weights {} (raw counts {}); stores into code {}.",
            m.name,
            list(&|r| pct(r), 1),
            list(&|r| r.cycles_per_site, 3),
            list(&|r| r.overlap_markov, 3),
            list(&|r| Some(r.overlap_raw), 3),
            eph.iter()
                .map(|r| r.code_stores.to_string())
                .collect::<Vec<_>>()
                .join(" / "),
        );
        let increasing = eph
            .windows(2)
            .all(|w| w[0].cycles_per_site < w[1].cycles_per_site);
        let within = eph
            .iter()
            .filter(|r| r.scheme.parameter() <= 1000)
            .filter_map(|r| pct(r))
            .filter(|v| (0.7..=4.0).contains(v))
            .count();
        let _ = writeln!(
            s,
            "  Overhead {} with P; {within} of the runs at P ≤ 1000 lie within the paper's \
             0.7–4.0 % range.",
            if increasing {
                "rises monotonically"
            } else {
                "does not rise monotonically"
            }
        );
        if let Some(b) = m.flip_exact_bias {
            let worst = |rehook: bool| {
                plan.persistences
                    .iter()
                    .filter_map(|&p| {
                        m.runs
                            .iter()
                            .find(|r| r.scheme == Scheme::Ephemeral { persist: p, rehook })
                    })
                    .filter_map(|r| r.flip_bias.map(|x| (x - b).abs()))
                    .fold(0.0f64, f64::max)
            };
            let _ = writeln!(
                s,
                "  The flipping branch (exact bias {b:.3}): the re-hooked profiles are at most \
                 {:.3} from it at every P, the profiles without re-hooking up to {:.3} (they \
                 see only the first half's bias).",
                worst(true),
                worst(false)
            );
        }
    }
    s.push('\n');
    s
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

/// Writes `runs.csv`, `comparison.csv`, one SVG per workload and
/// `summary.md` into `out`.
pub fn write(plan: &Plan, results: &[Measured], out: &Path, quick: bool) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut csv = String::from(
        "workload,scheme,parameter,instructions,cycles,cycles_none,site_executions,cycles_per_site,\
         samples,overlap_raw,overlap_markov,overlap_markov_exact_scale,hooks,unhooks,ticks,\
         code_stores,signals,flip_bias\n",
    );
    let mut cmp = String::from(
        "workload,persistence,ephemeral_cycles_per_site,ephemeral_overlap,\
         counter_overlap_at_equal_overhead,brr_overlap_at_equal_overhead,\
         counter_cycles_per_site_at_equal_accuracy,brr_cycles_per_site_at_equal_accuracy\n",
    );
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Ephemeral instrumentation in brr's emulator and timing model{}\n",
        if quick { " (quick run)" } else { "" }
    );
    let _ = writeln!(
        md,
        "Method (after Traub, Schechter and Smith, \"Ephemeral instrumentation for lightweight \
         program profiling\"). Each workload is compiled with `musl-gcc -S -O2` and every \
         conditional branch is instrumented by `brr-instrument --variant ephemeral`: the jcc \
         is emitted in its 6-byte rel32 form; at start-up the runtime (`brr/runtime/eph_rt.c`) \
         makes the code writable with mprotect and hooks every site (a 5-byte `jmp` to the \
         site's stub, one 8-byte store); the stub re-executes the branch, counts the edge, and \
         after P executions writes the original bytes back (two stores: unhooking). A \
         `setitimer` signal, delivered by the emulator every {} emulated instructions (the \
         epoch), re-hooks every unhooked site. The emulator forgets the decoded instructions a \
         store overwrites; the timing model (`brr/timing.conf`) forgets its per-address state \
         there and charges `smc_penalty` = {} cycles per store into code. Edge weights come \
         from the recorded biases through each procedure's Markov chain (`brr::markov`: the \
         CFG recovered from the assembly, exit→entry edge, expected executions per \
         invocation by a dense solve); each procedure is scaled to the counts recorded in it \
         (\"markov\") or, to isolate the shape within procedures, to its exact share \
         (\"markov, exact scale\"). Counter and brr builds of the same workloads at intervals \
         {} give the curves ephemeral is compared with. Overhead = (cycles − uninstrumented \
         cycles) / conditional-branch executions; accuracy = overlap with the exact edge \
         profile (Σ min of normalised edge counts, `bench-harness/src/overlap.rs`). The model \
         is deterministic: one run per point.\n",
        plan.epoch,
        plan.timing.smc_penalty,
        plan.intervals
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let ticks: Vec<u64> = results
        .iter()
        .flat_map(|m| m.runs.iter())
        .filter(|r| matches!(r.scheme, Scheme::Ephemeral { rehook: true, .. }))
        .map(|r| r.ticks)
        .collect();
    let _ = writeln!(
        md,
        "The epoch: the paper used 10 ms on a 21164, millions of instructions, over runs of \
         billions; the runs here are 10^7–10^8 instructions, so the epoch is scaled down to \
         {} instructions, which gives {}–{} epochs per run here.\n",
        plan.epoch,
        ticks.iter().min().unwrap_or(&0),
        ticks.iter().max().unwrap_or(&0)
    );
    for m in results {
        for r in &m.runs {
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{},{},{},{:.4},{},{},{},{},{},{},{},{}",
                m.name,
                r.scheme.name(),
                r.scheme.parameter(),
                r.instructions,
                r.cycles.map_or_else(String::new, |c| c.to_string()),
                m.cycles_none,
                m.site_executions,
                r.cycles_per_site
                    .map_or_else(String::new, |c| format!("{c:.4}")),
                r.samples,
                r.overlap_raw,
                r.overlap_markov
                    .map_or_else(String::new, |c| format!("{c:.4}")),
                r.overlap_markov_exact_scale
                    .map_or_else(String::new, |c| format!("{c:.4}")),
                r.hooks,
                r.unhooks,
                r.ticks,
                r.code_stores,
                r.signals,
                r.flip_bias.map_or_else(String::new, |c| format!("{c:.4}")),
            );
        }
        let _ = writeln!(md, "## {}\n", m.name);
        let _ = writeln!(
            md,
            "Uninstrumented: {} instructions, {} cycles; {} sites, {} conditional-branch \
             executions.\n",
            m.instructions_none, m.cycles_none, m.sites, m.site_executions
        );
        let _ = writeln!(
            md,
            "| P | cycles/site | overhead % | samples | overlap raw | overlap markov | markov, \
             exact scale | no re-hook: overlap markov | hooks | unhooks | epochs | stores \
             into code |{}\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|{}",
            if m.flip_exact_bias.is_some() {
                " flip bias | no re-hook: flip bias |"
            } else {
                ""
            },
            if m.flip_exact_bias.is_some() {
                "---:|---:|"
            } else {
                ""
            }
        );
        let series_of = |name: &str| -> Vec<(f64, f64, u64)> {
            m.runs
                .iter()
                .filter(|r| r.scheme.name() == name)
                .filter_map(|r| {
                    let acc = r.overlap_markov.unwrap_or(r.overlap_raw);
                    r.cycles_per_site.map(|c| (c, acc, r.scheme.parameter()))
                })
                .collect()
        };
        for &p in &plan.persistences {
            let find = |rehook: bool| {
                m.runs
                    .iter()
                    .find(|r| r.scheme == Scheme::Ephemeral { persist: p, rehook })
            };
            let (Some(e), Some(n)) = (find(true), find(false)) else {
                continue;
            };
            let overhead_pct = e
                .cycles
                .map(|c| (c as f64 / m.cycles_none as f64 - 1.0) * 100.0);
            let flip = if m.flip_exact_bias.is_some() {
                format!(" {} | {} |", opt(e.flip_bias, 3), opt(n.flip_bias, 3))
            } else {
                String::new()
            };
            let _ = writeln!(
                md,
                "| {p} | {} | {} | {} | {:.3} | {} | {} | {} | {} | {} | {} | {} |{flip}",
                opt(e.cycles_per_site, 3),
                opt(overhead_pct, 1),
                e.samples,
                e.overlap_raw,
                opt(e.overlap_markov, 3),
                opt(e.overlap_markov_exact_scale, 3),
                opt(n.overlap_markov, 3),
                e.hooks,
                e.unhooks,
                e.ticks,
                e.code_stores
            );
            // Equal overhead / equal accuracy against the samplers.
            let (Some(ec), Some(ea)) = (e.cycles_per_site, e.overlap_markov) else {
                continue;
            };
            let at = |name: &str, by_overhead: bool| {
                let pts: Vec<(f64, f64)> = series_of(name)
                    .iter()
                    .map(|&(c, a, _)| if by_overhead { (c, a) } else { (a, c) })
                    .collect();
                interpolate(&pts, if by_overhead { ec } else { ea })
            };
            let _ = writeln!(
                cmp,
                "{},{p},{ec:.4},{ea:.4},{},{},{},{}",
                m.name,
                opt(at("counter", true), 4),
                opt(at("brr", true), 4),
                opt(at("counter", false), 4),
                opt(at("brr", false), 4)
            );
        }
        if let Some(b) = m.flip_exact_bias {
            let _ = writeln!(
                md,
                "\nThe flipping branch is taken {:.3} of the time over the whole run (about 0.9 \
                 in the first half, 0.1 in the second). \"flip bias\" is the fraction the \
                 ephemeral counts give, with and without re-hooking.",
                b
            );
        }
        let _ = writeln!(md, "\nThe samplers (accuracy = overlap of their counts):\n");
        let _ = writeln!(
            md,
            "| interval | counter cycles/site | counter overlap | brr cycles/site | brr overlap |\n|---:|---:|---:|---:|---:|"
        );
        for &i in &plan.intervals {
            let f = |s: Scheme| m.runs.iter().find(|r| r.scheme == s);
            if let (Some(c), Some(b)) = (f(Scheme::Counter(i)), f(Scheme::Brr(i))) {
                let _ = writeln!(
                    md,
                    "| {i} | {} | {:.3} | {} | {:.3} |",
                    opt(c.cycles_per_site, 3),
                    c.overlap_raw,
                    opt(b.cycles_per_site, 3),
                    b.overlap_raw
                );
            }
        }
        md.push('\n');
        let rows: Vec<&str> = cmp
            .lines()
            .filter(|l| l.starts_with(&format!("{},", m.name)))
            .collect();
        if !rows.is_empty() {
            let _ = writeln!(
                md,
                "At equal overhead (the samplers' overlap interpolated at ephemeral's cycles per \
                 site) and at equal accuracy (their cycles per site interpolated at ephemeral's \
                 markov overlap); \"-\" where ephemeral lies outside the measured range:\n"
            );
            let _ = writeln!(md, "| P | ephemeral cycles/site | ephemeral overlap | counter overlap, same cost | brr overlap, same cost | counter cycles/site, same overlap | brr cycles/site, same overlap |\n|---:|---:|---:|---:|---:|---:|---:|");
            for l in rows {
                let c: Vec<&str> = l.split(',').collect();
                let _ = writeln!(md, "| {} |", c[1..].join(" | "));
            }
            md.push('\n');
        }
        let mut series = Vec::new();
        for (label, name) in [
            ("counter (intervals)", "counter"),
            ("brr (intervals)", "brr"),
            ("ephemeral, markov (P)", "ephemeral"),
        ] {
            let mut pts: Vec<(f64, f64)> = series_of(name)
                .iter()
                .filter(|p| p.0 > 0.0)
                .map(|p| (p.0, p.1))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            series.push(Series {
                name: label.into(),
                points: pts,
            });
        }
        let svg = LineChart {
            title: format!("{}: accuracy against overhead", m.name),
            x_label: "cycles per site execution".into(),
            y_label: "overlap with the exact edge profile".into(),
            x_log: true,
            y_log: false,
            y_from_zero: true,
            series,
            ..LineChart::default()
        }
        .render();
        let name = format!("tradeoff-{}.svg", m.name);
        std::fs::write(out.join(&name), svg)
            .with_context(|| format!("cannot write {}", out.join(&name).display()))?;
        let _ = writeln!(md, "![{}]({name})\n", m.name);
    }
    md.push_str(&findings(plan, results));
    let _ = writeln!(
        md,
        "## Against the paper\n\n\
         The paper (Alpha 21164, epoch 10 ms, SPEC95 and other programs) reports overheads of \
         0.7–4.0% of run time at P ≤ 1000 (compress: {} % at P = 10, 100, 1000, 10000), the \
         largest at P = 10000 ({} % for vortex), and that superblock scheduling from \
         ephemeral profiles did about as well as from complete ones (wc: {} % in both). Here \
         the \"overhead %\" column is the same ratio in the timing model's cycles. Differences \
         to bear in mind: the paper's hooks were patched by its own runtime on real hardware, \
         here a store into code costs the configured `smc_penalty`; the epoch is scaled to the \
         shorter runs; the paper compared the profiles through the scheduler's speedups, this \
         experiment through the overlap of edge profiles (and, in the superblock section \
         when `bench-harness ephemeral-superblock` has run, through the speedups of a \
         profile-driven trace layout, not a full superblock scheduler).\n",
        PAPER_COMPRESS
            .iter()
            .map(|v| format!("{v}"))
            .collect::<Vec<_>>()
            .join(" / "),
        PAPER_VORTEX_10000,
        PAPER_WC_SUPERBLOCK
    );
    if let Some(note) = smc::closing_note(plan, results) {
        let _ = writeln!(md, "{note}");
    }
    let write_file = |name: &str, text: &str| {
        let p = out.join(name);
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))
    };
    write_file("runs.csv", &csv)?;
    write_file("comparison.csv", &cmp)?;
    // The superblock section (`bench-harness ephemeral-superblock`) is kept.
    if let Some(sb) = std::fs::read_to_string(out.join("summary.md"))
        .ok()
        .and_then(|old| superblock::existing_section(&old))
    {
        md = superblock::splice(&md, &sb);
    }
    write_file("summary.md", &md)?;
    Ok(())
}
