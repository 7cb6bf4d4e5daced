//! `fdo`: what breakdance's profiles are worth to the compiler (the paper's
//! Figure 7). Per source-built workload: the `-O2` baseline; AutoFDO from
//! our traces through llvm-profgen-19, recorded with the paper's look-ahead
//! and with emulate-ahead; through create_llvm_prof (emulate); AutoFDO from
//! the exact callgrind counts (what a perfect LBR would give); and
//! instrumented PGO as the upper anchor. Profiles come from the training
//! input; times from the evaluation input, interleaved rounds.

use crate::autofdo::{self, create_llvm_prof};
use crate::profiler::Tracer;
use crate::quality;
use crate::report::{fmt, geomean, median, spread, Report, Table};
use crate::runner::{self, Cmd, Timing};
use crate::workloads::{self, Input, Workload, Workspace};
use crate::Options;
use anyhow::{bail, Context, Result};
use breakdance_charts::BarChart;
use breakdance_protocol::Lookahead;
use std::path::{Path, PathBuf};

pub(crate) mod layouts;

/// Sampling period of the training runs: the fastest rate of `overhead`.
const PERIOD_NS: u64 = 1_000_000;
/// A hardware LBR's depth, the tracer's default trace length.
const LBR: u32 = 32;
/// Profiled training runs merged into one profile.
const TRAIN_RUNS: usize = 3;
const QUICK_TRAIN_RUNS: usize = 1;
const ROUNDS: usize = 7;
const QUICK_ROUNDS: usize = 3;

const VARIANTS: [&str; 8] = [
    "baseline -O2",
    "AutoFDO, ours (paper) via llvm-profgen",
    "AutoFDO, ours (emulate) via llvm-profgen",
    "AutoFDO, ours (emulate, N = 128, 3 ms) via llvm-profgen",
    "AutoFDO, ours (emulate, N = 128, 10 ms) via llvm-profgen",
    "AutoFDO, ours (emulate) via create_llvm_prof",
    "AutoFDO, exact (callgrind)",
    "instrumented PGO",
];

/// How the training runs are recorded.
#[derive(Clone, Copy)]
struct Training {
    mode: Lookahead,
    period_ns: u64,
    lbr: u32,
}

impl Training {
    const fn at_1ms(mode: Lookahead) -> Training {
        Training {
            mode,
            period_ns: PERIOD_NS,
            lbr: LBR,
        }
    }

    /// `MODE` for the defaults, `MODE-nN-pMS` otherwise.
    fn name(&self) -> String {
        if self.period_ns == PERIOD_NS && self.lbr == LBR {
            self.mode.to_string()
        } else {
            format!(
                "{}-n{}-p{}",
                self.mode,
                self.lbr,
                self.period_ns / 1_000_000
            )
        }
    }
}

/// Produces one optimised binary of a workload.
type BuildStep<'a> = Box<dyn Fn() -> Result<PathBuf> + 'a>;

pub fn run(opts: &Options) -> Result<usize> {
    // `fdo-layouts` keeps its section in the same README.
    let readme = opts.results.join("fdo").join("README.md");
    let layout_section = layouts::existing_section(&readme);
    let mut rep = Report::new(&opts.results, "fdo", "Feedback-directed optimisation")?;
    let ws = Workspace {
        cache: opts.cache.clone(),
        quick: opts.quick,
    };
    let rounds = if opts.quick { QUICK_ROUNDS } else { ROUNDS };
    let train_runs = if opts.quick {
        QUICK_TRAIN_RUNS
    } else {
        TRAIN_RUNS
    };
    let tracer = Tracer::locate();
    let kinds = rebuilt_kinds(opts.quick);
    let mut results: Vec<(String, VariantTimes)> = Vec::new();
    for kind in kinds {
        let name = kind.name();
        let w = match workloads::prepare(&ws, kind) {
            Ok(w) => w,
            Err(e) => {
                rep.fail(name, "prepare", &e);
                continue;
            }
        };
        let dir = ws.cache.join("runs").join("fdo").join(name);
        std::fs::create_dir_all(&dir)?;
        let mut binaries: Vec<Option<PathBuf>> = vec![Some(w.binary.clone())];
        let profgen_step = |training: Training| -> BuildStep {
            let (tracer, w, ws, dir) = (&tracer, &w, &ws, &dir);
            Box::new(move || {
                let t = tracer.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
                let prof = profgen_profile(t, w, dir, train_runs, training)?;
                sample_use_build(ws, w, &format!("afdo-profgen-{}", training.name()), &prof)
            })
        };
        let long = |period_ns| Training {
            mode: Lookahead::Emulate,
            period_ns,
            lbr: 128,
        };
        let steps: [(&str, BuildStep); 7] = [
            (
                VARIANTS[1],
                profgen_step(Training::at_1ms(Lookahead::Paper)),
            ),
            (
                VARIANTS[2],
                profgen_step(Training::at_1ms(Lookahead::Emulate)),
            ),
            (VARIANTS[3], profgen_step(long(3_000_000))),
            (VARIANTS[4], profgen_step(long(10_000_000))),
            (
                VARIANTS[5],
                Box::new(|| {
                    let t = tracer.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
                    let training = Training::at_1ms(Lookahead::Emulate);
                    let prof = clp_profile(t, &w, &dir, train_runs, training)?;
                    sample_use_build(&ws, &w, "afdo-clp", &prof)
                }),
            ),
            (
                VARIANTS[6],
                Box::new(|| {
                    let r = quality::reference(&ws, &w, Input::Train)?;
                    let prof = quality::exact_profile(&r, &w.binary, &dir)?;
                    sample_use_build(&ws, &w, "afdo-exact", &prof)
                }),
            ),
            (VARIANTS[7], Box::new(|| instrumented_pgo(&ws, &w, &dir))),
        ];
        for (label, step) in &steps {
            eprintln!("[fdo] {name}: {label}");
            match step() {
                Ok(b) => binaries.push(Some(b)),
                Err(e) => {
                    rep.fail(name, label, &e);
                    binaries.push(None);
                }
            }
        }
        let times = time_variants(&mut rep, &w, &binaries, rounds, &VARIANTS);
        results.push((name.to_string(), times));
    }
    rep.note(&format!(
        "Speedup = baseline time / variant time on the evaluation input, per round of \
         {rounds} interleaved rounds: median (min–max) over the rounds; CPU time (user + system) is the primary measure because \
         these machines are shared and wall time swings with their load. Profiles from the \
         training input, {TRAIN_RUNS} runs each ({QUICK_TRAIN_RUNS} with --quick); ours sampled with task-clock every {} ms with traces of \
         {LBR} branches unless the variant names another N and period.",
        PERIOD_NS / 1_000_000
    ));
    write(&mut rep, &results, &VARIANTS, "Figure 7")?;
    let failed = rep.finish()?;
    if let Some(section) = layout_section {
        layouts::splice_section(&readme, &section)?;
    }
    Ok(failed)
}

/// The workloads an experiment rebuilds with profiles: the source-built
/// ones; quick mode times the one that builds in seconds.
pub(crate) fn rebuilt_kinds(quick: bool) -> Vec<workloads::Kind> {
    workloads::kinds(quick)
        .into_iter()
        .filter(|k| k.source_built())
        .filter(|k| !quick || *k == workloads::Kind::Bzip2)
        .collect()
}

/// Profiled training runs on the baseline binary, recorded as `training`
/// says, into `dir/train-NAME-N/`.
fn train(
    t: &Tracer,
    w: &Workload,
    dir: &Path,
    runs: usize,
    training: Training,
) -> Result<Vec<PathBuf>> {
    let lbr = training.lbr.to_string();
    (0..runs)
        .map(|i| {
            let out = dir.join(format!("train-{}-{i}", training.name()));
            t.record_run_with(
                &w.command(Input::Train),
                training.period_ns,
                &out,
                &["--lookahead", training.mode.name(), "--lbr", &lbr],
            )?;
            Ok(out)
        })
        .collect()
}

/// llvm-profgen-19 per training run, merged with llvm-profdata.
fn profgen_profile(
    t: &Tracer,
    w: &Workload,
    dir: &Path,
    runs: usize,
    training: Training,
) -> Result<PathBuf> {
    let profgen = runner::require_tool("llvm-profgen-19", "llvm-19")?;
    let profdata = runner::require_tool("llvm-profdata-19", "llvm-19")?;
    let mut parts = Vec::new();
    for out in train(t, w, dir, runs, training)? {
        let prof = out.join("profgen.prof");
        runner::run(
            &Cmd::new(&profgen)
                .arg(format!("--binary={}", w.binary.display()))
                .arg(format!(
                    "--perfscript={}",
                    out.join("perf.script").display()
                ))
                .arg(format!("--output={}", prof.display())),
        )?;
        parts.push(prof);
    }
    let merged = dir.join(format!("profgen-{}.prof", training.name()));
    runner::run(
        &Cmd::new(profdata)
            .args(["merge", "--sample", "-o"])
            .arg(&merged)
            .args(&parts),
    )?;
    Ok(merged)
}

/// The tracer's AutoFDO text of each training run, merged, through
/// create_llvm_prof.
fn clp_profile(
    t: &Tracer,
    w: &Workload,
    dir: &Path,
    runs: usize,
    training: Training,
) -> Result<PathBuf> {
    let module =
        bench_harness::elf::ElfModule::load(&w.binary).map_err(|e| anyhow::anyhow!("{e}"))?;
    let files = train(t, w, dir, runs, training)?
        .iter()
        .map(|out| autofdo::tracer_afdo(out, &module))
        .collect::<Result<Vec<_>>>()?;
    let merged = autofdo::merge_afdo(&files)?;
    let txt = dir.join("ours.afdo.txt");
    std::fs::write(&txt, merged.to_text())?;
    let prof = dir.join("ours-clp.prof");
    create_llvm_prof(&txt, &w.binary, &prof, true)?;
    Ok(prof)
}

fn sample_use_build(ws: &Workspace, w: &Workload, variant: &str, prof: &Path) -> Result<PathBuf> {
    w.build_variant(
        ws,
        variant,
        &[format!("-fprofile-sample-use={}", prof.display())],
    )
}

/// -fprofile-instr-generate build, training run, merge, -fprofile-instr-use build.
fn instrumented_pgo(ws: &Workspace, w: &Workload, dir: &Path) -> Result<PathBuf> {
    instrumented_pgo_with(ws, w, dir, &[], "")
}

/// [`instrumented_pgo`] with `extra` flags in both builds, whose variant
/// names end with `tag`.
pub(crate) fn instrumented_pgo_with(
    ws: &Workspace,
    w: &Workload,
    dir: &Path,
    extra: &[String],
    tag: &str,
) -> Result<PathBuf> {
    let profdata = runner::require_tool("llvm-profdata-19", "llvm-19")?;
    let mut gen_flags = extra.to_vec();
    gen_flags.push("-fprofile-instr-generate".to_string());
    let gen = w.build_variant(ws, &format!("pgo-gen{tag}"), &gen_flags)?;
    let raw_dir = dir.join("profraw");
    let _ = std::fs::remove_dir_all(&raw_dir);
    std::fs::create_dir_all(&raw_dir)?;
    runner::run(
        &w.command_with(&gen, Input::Train)
            .env("LLVM_PROFILE_FILE", raw_dir.join("%p.profraw")),
    )?;
    let raws: Vec<PathBuf> = std::fs::read_dir(&raw_dir)?
        .flatten()
        .map(|e| e.path())
        .collect();
    if raws.is_empty() {
        bail!(
            "the instrumented training run wrote no .profraw in {}",
            raw_dir.display()
        );
    }
    let merged = dir.join(format!("instr{tag}.profdata"));
    runner::run(
        &Cmd::new(profdata)
            .args(["merge", "-o"])
            .arg(&merged)
            .args(&raws),
    )?;
    let mut use_flags = extra.to_vec();
    use_flags.push(format!("-fprofile-instr-use={}", merged.display()));
    w.build_variant(ws, &format!("pgo-use{tag}"), &use_flags)
}

/// Wall times per variant (named `variants`) on the evaluation input,
/// interleaved rounds.
pub(crate) fn time_variants(
    rep: &mut Report,
    w: &Workload,
    binaries: &[Option<PathBuf>],
    rounds: usize,
    variants: &[&str],
) -> Vec<Option<Vec<Timing>>> {
    let mut times: Vec<Option<Vec<Timing>>> = binaries
        .iter()
        .map(|b| b.as_ref().map(|_| Vec::new()))
        .collect();
    for round in 0..rounds {
        eprintln!("[fdo] {}: timing round {}/{rounds}", w.name(), round + 1);
        for (i, b) in binaries.iter().enumerate() {
            let Some(b) = b else { continue };
            if times[i].is_none() {
                continue;
            }
            match runner::run_timed(&w.command_with(b, Input::Eval)) {
                Ok(t) => {
                    if let Some(v) = times[i].as_mut() {
                        v.push(t);
                    }
                }
                Err(e) => {
                    rep.fail(w.name(), &format!("timing {}", variants[i]), &e);
                    times[i] = None;
                }
            }
        }
    }
    times
}

/// Timings of every variant of one workload (`None`: the variant failed).
pub(crate) type VariantTimes = Vec<Option<Vec<Timing>>>;

/// runs.csv, and the speedup tables and plots over the first of
/// `variants` (the baseline); `figure` names what they reproduce.
pub(crate) fn write(
    rep: &mut Report,
    results: &[(String, VariantTimes)],
    variants: &[&str],
    figure: &str,
) -> Result<()> {
    let mut raw = Table::new(&["workload", "variant", "round", "wall_s", "cpu_s"]);
    for (name, times) in results {
        for (i, v) in times.iter().enumerate() {
            for (r, t) in v.iter().flatten().enumerate() {
                raw.push(vec![
                    name.clone(),
                    variants[i].into(),
                    r.to_string(),
                    fmt(t.wall_s, 4),
                    fmt(t.cpu_s(), 4),
                ]);
            }
        }
    }
    rep.write("runs.csv", &raw.to_csv())?;
    type Measure = (&'static str, &'static str, fn(&Timing) -> f64);
    let measures: [Measure; 2] = [
        ("speedup", "CPU time", Timing::cpu_s),
        ("speedup_wall", "wall time", |t| t.wall_s),
    ];
    for (file, what, f) in measures {
        let mut headers = vec!["workload".to_string(), format!("baseline {what} (s)")];
        headers.extend(variants[1..].iter().map(|v| v.to_string()));
        let mut t = Table {
            headers,
            rows: Vec::new(),
        };
        let mut series: Vec<(String, Vec<Option<f64>>)> = variants[1..]
            .iter()
            .map(|v| (v.to_string(), Vec::new()))
            .collect();
        let mut per_variant: Vec<Vec<f64>> = vec![Vec::new(); variants.len() - 1];
        for (name, times) in results {
            let of = |i: usize| times.get(i).and_then(|v| v.as_deref()).unwrap_or(&[]);
            let base = of(0);
            let mut row = vec![
                name.clone(),
                fmt(median(&base.iter().map(f).collect::<Vec<_>>()), 3),
            ];
            for i in 1..variants.len() {
                // Per round: the baseline's time over the variant's, both
                // from the same round of the interleaving.
                let ratios: Vec<f64> = base.iter().zip(of(i)).map(|(b, v)| f(b) / f(v)).collect();
                let speedup = median(&ratios);
                row.push(spread(&ratios));
                series[i - 1].1.push(speedup.is_finite().then_some(speedup));
                per_variant[i - 1].push(speedup);
            }
            t.push(row);
        }
        let mut geo = vec!["geomean".to_string(), String::new()];
        geo.extend(per_variant.iter().map(|v| fmt(geomean(v), 3)));
        t.push(geo);
        rep.table(
            file,
            &format!("Speedup over the baseline, {what} ({figure})"),
            &t,
        )?;
        let chart = BarChart {
            title: format!("Speedup over clang-19 -O2 ({what})"),
            y_label: format!("baseline {what} / variant {what}"),
            categories: results.iter().map(|(n, _)| n.clone()).collect(),
            series,
            stacked: false,
            y_reference: Some(1.0),
        };
        rep.plot(file, &chart.render())
            .with_context(|| format!("writing the {file} plot"))?;
    }
    Ok(())
}
