//! `csspgo`: what `record -g` gives the compiler. Per source-built
//! workload, every build with frame pointers (`-fno-omit-frame-pointer`,
//! what `-g` unwinds by): the `-O2` baseline; AutoFDO from plain `record`
//! and from `record -g` with its stacks ignored; context-sensitive sample
//! PGO (CSSPGO) from `record -g`, from line numbers and, on a build with
//! `-fpseudo-probe-for-profiling`, from pseudo-probes; and instrumented
//! PGO. Profiles from the training input (the runs of each recording
//! concatenated into one perf.script, one llvm-profgen-19 call), times
//! from the evaluation input in interleaved rounds.
//!
//! Also measured from the same training runs: what `-g` adds to the
//! handlers per trace, and the depth of the stacks.

use crate::fdo::{instrumented_pgo_with, rebuilt_kinds, time_variants, write, VariantTimes};
use crate::profiler::{Summary, Tracer};
use crate::report::{fmt, Report, Table};
use crate::runner::{self, Cmd};
use crate::workloads::{self, Input, Workload, Workspace};
use crate::Options;
use anyhow::{Context, Result};
use breakdance_protocol::perfscript::PerfScript;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const PERIOD_NS: u64 = 1_000_000;
const LBR: u32 = 128;
const TRAIN_RUNS: usize = 3;
const QUICK_TRAIN_RUNS: usize = 1;
const ROUNDS: usize = 7;
const QUICK_ROUNDS: usize = 3;
const FRAME_POINTERS: &str = "-fno-omit-frame-pointer";
const PROBES: &str = "-fpseudo-probe-for-profiling";

const VARIANTS: [&str; 6] = [
    "baseline -O2",
    "AutoFDO, record",
    "AutoFDO, record -g (stacks ignored)",
    "CSSPGO, record -g",
    "CSSPGO with pseudo-probes, record -g",
    "instrumented PGO",
];

/// A variant built from one recording's profile: (its index in
/// `VARIANTS`, the recording's perf.script, whether the recording and the
/// build are of the pseudo-probe binary, the profile's name, llvm-profgen's
/// options).
type ProfiledVariant<'a> = (
    usize,
    &'a Option<Result<PathBuf>>,
    bool,
    &'a str,
    &'a [&'a str],
);

/// One set of training recordings.
struct Training<'a> {
    name: &'a str,
    binary: &'a Path,
    options: &'a [&'a str],
}

pub fn run(opts: &Options) -> Result<usize> {
    let mut rep = Report::new(
        &opts.results,
        "csspgo",
        "Context-sensitive sample PGO from record -g",
    )?;
    let ws = Workspace {
        cache: opts.cache.clone(),
        quick: opts.quick,
    };
    let rounds = if opts.quick { QUICK_ROUNDS } else { ROUNDS };
    let runs = if opts.quick {
        QUICK_TRAIN_RUNS
    } else {
        TRAIN_RUNS
    };
    let tracer = Tracer::locate();
    let kinds = rebuilt_kinds(opts.quick);
    let mut results: Vec<(String, VariantTimes)> = Vec::new();
    let mut cost = Table::new(&[
        "workload",
        "recording",
        "traces",
        "handler us per trace",
        "stacks",
        "mean depth",
        "truncated",
        "missing",
    ]);
    let mut depths: BTreeMap<(String, usize), u64> = BTreeMap::new();
    for kind in kinds {
        let name = kind.name();
        let w = match workloads::prepare(&ws, kind) {
            Ok(w) => w,
            Err(e) => {
                rep.fail(name, "prepare", &e);
                continue;
            }
        };
        let dir = ws.cache.join("runs").join("csspgo").join(name);
        std::fs::create_dir_all(&dir)?;
        let fp = vec![FRAME_POINTERS.to_string()];
        let fp_probes = vec![FRAME_POINTERS.to_string(), PROBES.to_string()];
        let mut binaries: Vec<Option<PathBuf>> = Vec::new();
        let base = w.build_variant(&ws, "fp", &fp);
        let probed = w.build_variant(&ws, "fp-probes", &fp_probes);
        binaries.push(base.as_ref().ok().cloned());
        let mut step = |label: &str, f: &mut dyn FnMut() -> Result<PathBuf>| {
            eprintln!("[csspgo] {name}: {label}");
            match f() {
                Ok(b) => binaries.push(Some(b)),
                Err(e) => {
                    rep.fail(name, label, &e);
                    binaries.push(None);
                }
            }
        };
        let t = tracer.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"));
        let mut recorded = |training: Training| -> Result<PathBuf> {
            let t = t.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
            let (script, summaries) = train(t, &w, &dir, runs, &training)?;
            cost.push(cost_row(name, training.name, &summaries));
            let parsed = PerfScript::parse(&std::fs::read_to_string(&script)?)
                .map_err(|e| anyhow::anyhow!("{}: {e}", script.display()))?;
            for trace in &parsed.traces {
                if !trace.stack.is_empty() {
                    *depths
                        .entry((format!("{name} {}", training.name), trace.stack.len()))
                        .or_insert(0) += trace.count;
                }
            }
            Ok(script)
        };
        let base_path = base.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"));
        let probed_path = probed.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"));
        let plain = base_path.as_ref().ok().map(|b| {
            recorded(Training {
                name: "record",
                binary: b,
                options: &[],
            })
        });
        let with_g = base_path.as_ref().ok().map(|b| {
            recorded(Training {
                name: "record -g",
                binary: b,
                options: &["-g"],
            })
        });
        let probes_g = probed_path.as_ref().ok().map(|b| {
            recorded(Training {
                name: "record -g, pseudo-probes",
                binary: b,
                options: &["-g"],
            })
        });
        let script_of = |s: &Option<Result<PathBuf>>| -> Result<PathBuf> {
            match s {
                Some(Ok(p)) => Ok(p.clone()),
                Some(Err(e)) => Err(anyhow::anyhow!("training: {e:#}")),
                None => Err(anyhow::anyhow!("the training binary did not build")),
            }
        };
        let base_bin = || -> Result<PathBuf> {
            base_path
                .as_ref()
                .map(|p| p.to_path_buf())
                .map_err(|e| anyhow::anyhow!("{e:#}"))
        };
        let probed_bin = || -> Result<PathBuf> {
            probed_path
                .as_ref()
                .map(|p| p.to_path_buf())
                .map_err(|e| anyhow::anyhow!("{e:#}"))
        };
        let profiled: [ProfiledVariant; 4] = [
            (1, &plain, false, "afdo-record", &[]),
            (
                2,
                &with_g,
                false,
                "afdo-record-g",
                &["--ignore-stack-samples"],
            ),
            (3, &with_g, false, "csspgo", &[]),
            (4, &probes_g, true, "csspgo-probes", &[]),
        ];
        for (variant, script, on_probed, name, extra) in profiled {
            step(VARIANTS[variant], &mut || {
                let (binary, flags) = if on_probed {
                    (probed_bin()?, &fp_probes)
                } else {
                    (base_bin()?, &fp)
                };
                let prof = profgen(
                    &script_of(script)?,
                    &binary,
                    &dir.join(format!("{name}.prof")),
                    extra,
                )?;
                use_profile(&ws, &w, &format!("cs-{name}"), &prof, flags)
            });
        }
        step(VARIANTS[5], &mut || {
            instrumented_pgo_with(&ws, &w, &dir, &fp, "-fp")
        });
        let times = time_variants(&mut rep, &w, &binaries, rounds, &VARIANTS);
        results.push((name.to_string(), times));
    }
    rep.note(&format!(
        "Every build with {FRAME_POINTERS}; the pseudo-probe variant's training binary and \
         final build with {PROBES} too. Training: {TRAIN_RUNS} runs ({QUICK_TRAIN_RUNS} with \
         --quick) of the training input under profiler-ctl record (-g where named), \
         task-clock every {} ms, traces of {LBR} branches; the runs' perf.script files \
         concatenated and given to llvm-profgen-19 once (its defaults: a CSSPGO profile \
         from hybrid samples, with its preinliner; --ignore-stack-samples for the plain \
         profile of a -g recording); built with -fprofile-sample-use. Speedup = baseline \
         time / variant time on the evaluation input, per round of {ROUNDS} interleaved \
         rounds ({QUICK_ROUNDS} with --quick): median (min–max).",
        PERIOD_NS / 1_000_000
    ));
    write(&mut rep, &results, &VARIANTS, "CSSPGO")?;
    rep.table(
        "cost",
        "What -g adds per trace (training runs, summed over the runs)",
        &cost,
    )?;
    let mut depth = Table::new(&["recording", "depth", "stacks"]);
    for ((recording, d), n) in &depths {
        depth.push(vec![recording.clone(), d.to_string(), n.to_string()]);
    }
    rep.write("depth.csv", &depth.to_csv())?;
    rep.finish()
}

/// `runs` recordings of the training input of `training.binary` into
/// `dir/train-NAME-i/`, their perf.script files concatenated into
/// `dir/NAME.perf.script` (returned with the runs' summaries).
fn train(
    t: &Tracer,
    w: &Workload,
    dir: &Path,
    runs: usize,
    training: &Training,
) -> Result<(PathBuf, Vec<Summary>)> {
    let lbr = LBR.to_string();
    let slug = training.name.replace([' ', ','], "-");
    let mut options = vec!["--lbr", lbr.as_str()];
    options.extend_from_slice(training.options);
    let mut text = String::new();
    let mut summaries = Vec::new();
    for i in 0..runs {
        let out = dir.join(format!("train-{slug}-{i}"));
        let (_, summary) = t.record_run_with(
            &w.command_with(training.binary, Input::Train),
            PERIOD_NS,
            &out,
            &options,
        )?;
        summaries.push(summary);
        let script = out.join("perf.script");
        text.push_str(
            &std::fs::read_to_string(&script)
                .with_context(|| format!("reading {}", script.display()))?,
        );
    }
    let all = dir.join(format!("{slug}.perf.script"));
    std::fs::write(&all, text)?;
    Ok((all, summaries))
}

/// The handlers' time per trace and the stacks of a set of training runs.
fn cost_row(workload: &str, recording: &str, runs: &[Summary]) -> Vec<String> {
    let sum = |f: fn(&Summary) -> u64| runs.iter().map(f).sum::<u64>();
    let traces = sum(|s| s.counters.traces_started);
    let handler_ns = sum(|s| s.counters.sampling_ns + s.counters.breakpoint_ns);
    let stacks = sum(|s| s.counters.callstacks);
    let frames = sum(|s| s.counters.callstack_frames);
    vec![
        workload.to_string(),
        recording.to_string(),
        traces.to_string(),
        fmt(handler_ns as f64 / traces.max(1) as f64 / 1000.0, 1),
        stacks.to_string(),
        fmt(frames as f64 / stacks.max(1) as f64, 1),
        sum(|s| s.counters.callstacks_truncated).to_string(),
        sum(|s| s.counters.callstacks_missing).to_string(),
    ]
}

/// llvm-profgen-19 on one perf.script.
fn profgen(script: &Path, binary: &Path, output: &Path, extra: &[&str]) -> Result<PathBuf> {
    let profgen = runner::require_tool("llvm-profgen-19", "llvm-19")?;
    runner::run(
        &Cmd::new(profgen)
            .arg(format!("--binary={}", binary.display()))
            .arg(format!("--perfscript={}", script.display()))
            .arg(format!("--output={}", output.display()))
            .args(extra),
    )?;
    Ok(output.to_path_buf())
}

fn use_profile(
    ws: &Workspace,
    w: &Workload,
    variant: &str,
    prof: &Path,
    flags: &[String],
) -> Result<PathBuf> {
    let mut all = flags.to_vec();
    all.push(format!("-fprofile-sample-use={}", prof.display()));
    w.build_variant(ws, variant, &all)
}
