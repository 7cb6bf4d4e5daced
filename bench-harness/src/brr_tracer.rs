//! Part (c) of the branch-on-random experiment: the paper's microbenchmark
//! (brr/workloads/charclass.c) run natively, uninstrumented, under the
//! software branch tracer, so that one table sets both sampling approaches
//! side by side on the same measure of accuracy.
//!
//! Accuracy is the overlap (Σ min of normalised counts) of the conditional
//! edge profile — for every jcc, how often it went each way — with the exact
//! one. For brr and counter sampling the exact profile is the emulator's
//! (brr::experiment); for the tracer it is callgrind's `jcnd` counts on the
//! same binary. The tracer's edge profile comes from its traces: a jcc that
//! is a trace entry's source was taken; a jcc inside a fall-through range
//! (between an entry's target and the next entry's source) was not.
//!
//! Overhead: brr and counter sampling in simulated cycles (the emulator's
//! timing model), the tracer in measured CPU time (native vs profiled,
//! median of interleaved runs). Both are relative to the uninstrumented
//! program, so the percentages compare, with that caveat stated in the table.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use bench_harness::callgrind;
use bench_harness::elf::{ElfModule, ModuleMap};
use bench_harness::overlap::overlap;
use bench_harness::perfscript;
use iced_x86::FlowControl;

use crate::profiler::Tracer;
use crate::report::{fmt, median, Table};
use crate::runner::{self, Cmd};
use crate::Options;

/// (jcc address, taken?) → count, link-time addresses.
type EdgeProfile = BTreeMap<(u64, bool), u64>;

fn source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../brr/workloads/charclass.c")
}

/// Builds the uninstrumented microbenchmark, dynamically linked (the tracer
/// is preloaded), with the flags of the source-built workloads.
fn build(dir: &Path) -> Result<PathBuf> {
    let clang = runner::require_tool("clang-19", "clang-19")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let binary = dir.join("charclass");
    let cmd = Cmd::new(clang)
        .args(["-O2", "-gdwarf-4", "-fdebug-info-for-profiling", "-o"])
        .arg(binary.as_os_str())
        .arg(source().as_os_str());
    runner::run(&cmd)?;
    Ok(binary)
}

/// The exact conditional edge profile from callgrind.
fn exact_profile(binary: &Path, args: &[String], dir: &Path) -> Result<EdgeProfile> {
    let valgrind = runner::require_tool("valgrind", "valgrind")?;
    let out = dir.join("callgrind.out");
    let cmd = Cmd::new(valgrind)
        .args(callgrind::valgrind_args(&out))
        .arg(binary.as_os_str())
        .args(args);
    runner::run(&cmd)?;
    let profile = callgrind::parse_file(&out).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (_, object) = profile
        .object_by_basename("charclass")
        .context("callgrind recorded nothing for charclass")?;
    let mut edges = EdgeProfile::new();
    for (edge, count) in &object.conditional {
        *edges.entry((edge.from, true)).or_default() += count.taken;
        *edges.entry((edge.from, false)).or_default() += count.executed - count.taken;
    }
    Ok(edges)
}

fn is_jcc(module: &ElfModule, vaddr: u64) -> bool {
    let index = module.instructions();
    index
        .position(vaddr)
        .is_some_and(|i| index.flows[i] == FlowControl::ConditionalBranch)
}

/// The tracer's conditional edge profile of `charclass` from perf.script.
fn traced_profile(out: &Path) -> Result<EdgeProfile> {
    let script =
        perfscript::parse_file(&out.join("perf.script")).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (map, _) = ModuleMap::from_mmaps(&script.mmaps);
    let (main, module) = map
        .module_by_basename("charclass")
        .context("perf.script has no charclass mapping")?;
    let index = module.instructions();
    let mut edges = EdgeProfile::new();
    for trace in &script.traces {
        let entries: Vec<_> = trace.execution_order().collect();
        for (i, e) in entries.iter().enumerate() {
            if let Some((m, from)) = map.resolve(e.from) {
                if m == main && is_jcc(module, from) {
                    *edges.entry((from, true)).or_default() += trace.count;
                }
            }
            // The fall-through range to the next entry's source: every jcc
            // strictly before that source went its not-taken way.
            let Some(next) = entries.get(i + 1) else {
                continue;
            };
            let (Some((m1, begin)), Some((m2, end))) = (map.resolve(e.to), map.resolve(next.from))
            else {
                continue;
            };
            if m1 != main || m2 != main || begin > end {
                continue;
            }
            let first = index.starts.partition_point(|&a| a < begin);
            for k in first..index.starts.len() {
                let a = index.starts[k];
                if a >= end {
                    break;
                }
                if index.flows[k] == FlowControl::ConditionalBranch {
                    *edges.entry((a, false)).or_default() += trace.count;
                }
            }
        }
    }
    Ok(edges)
}

/// brr::experiment's numbers for charclass at `interval`: (scheme,
/// overhead fraction, mean overlap).
fn brr_rows(brr_dir: &Path, interval: u64) -> Result<Vec<(String, f64, Option<f64>)>> {
    let overhead = std::fs::read_to_string(brr_dir.join("overhead.csv"))
        .context("results/brr/overhead.csv")?;
    let accuracy = std::fs::read_to_string(brr_dir.join("accuracy.csv"))
        .context("results/brr/accuracy.csv")?;
    let header = |text: &str| -> Vec<String> {
        text.lines()
            .next()
            .unwrap_or_default()
            .split(',')
            .map(str::to_string)
            .collect()
    };
    let col = |h: &[String], name: &str| {
        h.iter()
            .position(|c| c == name)
            .with_context(|| format!("no column {name}"))
    };
    let oh = header(&overhead);
    let (w, v, iv, cy, cn) = (
        col(&oh, "workload")?,
        col(&oh, "variant")?,
        col(&oh, "interval")?,
        col(&oh, "cycles")?,
        col(&oh, "cycles_none")?,
    );
    let fw = oh.iter().position(|c| c == "fetch_width");
    let ah = header(&accuracy);
    let (aw, asch, aiv, aov) = (
        col(&ah, "workload")?,
        col(&ah, "scheme")?,
        col(&ah, "interval")?,
        col(&ah, "overlap")?,
    );
    let mut rows = Vec::new();
    for (scheme, want_interval) in [("full", 0), ("counter", interval), ("brr", interval)] {
        let cost = overhead
            .lines()
            .skip(1)
            .map(|l| l.split(',').collect::<Vec<_>>())
            .find(|f| {
                f.get(w) == Some(&"charclass")
                    && f.get(v) == Some(&scheme)
                    && f.get(iv).and_then(|x| x.parse::<u64>().ok()) == Some(want_interval)
                    && fw.is_none_or(|i| f.get(i) == Some(&"3"))
            });
        let Some(f) = cost else { continue };
        let (cycles, none): (f64, f64) = (f[cy].parse()?, f[cn].parse()?);
        let overlaps: Vec<f64> = accuracy
            .lines()
            .skip(1)
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|a| {
                a.get(aw) == Some(&"charclass")
                    && a.get(asch) == Some(&scheme)
                    && a.get(aiv).and_then(|x| x.parse::<u64>().ok()) == Some(interval)
            })
            .filter_map(|a| a.get(aov).and_then(|x| x.parse().ok()))
            .collect();
        let acc = if scheme == "full" {
            Some(1.0)
        } else if overlaps.is_empty() {
            None
        } else {
            Some(overlaps.iter().sum::<f64>() / overlaps.len() as f64)
        };
        rows.push((scheme.to_string(), cycles / none - 1.0, acc));
    }
    Ok(rows)
}

/// Runs part (c) and writes `comparison.csv` and `comparison.md` into
/// `brr_dir` (where brr::experiment wrote its results).
pub fn run(opts: &Options, brr_dir: &Path) -> Result<usize> {
    let tracer = Tracer::locate()?;
    let dir = opts.cache.join("brr-tracer");
    let binary = build(&dir)?;
    // Repeats of the 500K-character pass: about a second natively.
    let repeats = if opts.quick { "20" } else { "1000" };
    let args = vec![repeats.to_string()];
    let periods: &[u64] = if opts.quick {
        &[1_000_000]
    } else {
        &[1_000_000, 10_000_000]
    };
    let rounds = if opts.quick { 1 } else { 5 };
    eprintln!("[brr] tracer comparison: callgrind reference for charclass {repeats}");
    let exact = exact_profile(&binary, &args, &dir)?;
    if exact.is_empty() {
        bail!("callgrind found no conditional branch in charclass");
    }
    let native_cmd = Cmd::new(&binary).args(args.iter());
    let mut native = Vec::new();
    let mut traced: Vec<Vec<f64>> = vec![Vec::new(); periods.len()];
    let mut accuracy: Vec<Vec<f64>> = vec![Vec::new(); periods.len()];
    let mut traces: Vec<Vec<f64>> = vec![Vec::new(); periods.len()];
    for round in 0..rounds {
        eprintln!("[brr] tracer comparison: round {}/{rounds}", round + 1);
        native.push(runner::run_timed(&native_cmd)?.cpu_s());
        for (p, &period) in periods.iter().enumerate() {
            let out = dir.join(format!("out-{period}"));
            let (timing, summary) = tracer.record_run(&native_cmd, period, &out)?;
            traced[p].push(timing.cpu_s());
            traces[p].push(summary.counters.traces_completed as f64);
            accuracy[p].push(overlap(&exact, &traced_profile(&out)?));
        }
    }
    let native_cpu = median(&native);

    let mut table = Table::new(&[
        "method",
        "setting",
        "overhead",
        "overhead measured as",
        "edge-profile overlap",
        "samples",
    ]);
    for interval in [1024u64, 8192] {
        for (scheme, cost, acc) in brr_rows(brr_dir, interval).unwrap_or_default() {
            if scheme == "full" && interval != 1024 {
                continue;
            }
            let setting = if scheme == "full" {
                "every site".to_string()
            } else {
                format!("interval 2^{}", interval.trailing_zeros())
            };
            let method = match scheme.as_str() {
                "full" => "full edge instrumentation",
                "counter" => "counter-based sampling",
                _ => "branch-on-random",
            };
            table.push(vec![
                method.to_string(),
                setting,
                format!("{:.1}%", cost * 100.0),
                "simulated cycles".to_string(),
                acc.map_or("n/a".to_string(), |a| fmt(a, 3)),
                String::new(),
            ]);
        }
    }
    for (p, &period) in periods.iter().enumerate() {
        let cost = median(&traced[p]) / native_cpu - 1.0;
        table.push(vec![
            "software branch tracer".to_string(),
            format!("task-clock {} ms, N=32", period / 1_000_000),
            format!("{:.1}%", cost * 100.0),
            "CPU time".to_string(),
            fmt(median(&accuracy[p]), 3),
            format!("{:.0} traces", median(&traces[p])),
        ]);
    }
    std::fs::write(brr_dir.join("comparison.csv"), table.to_csv())
        .context("writing comparison.csv")?;
    let text = format!(
        "# Sampling approaches on the brr microbenchmark (charclass)\n\n\
         Overhead relative to the uninstrumented program; brr and counter \
         sampling from the emulator's timing model (instrumented builds), the \
         tracer from measured CPU time of the unmodified binary (median of {rounds} \
         interleaved runs). Branch-profile overlap: Σ min of normalised \
         per-jcc taken/not-taken counts against the exact profile (the \
         emulator's for brr and counters, callgrind's for the tracer).\n\n{}",
        table.to_markdown()
    );
    std::fs::write(brr_dir.join("comparison.md"), text).context("writing comparison.md")?;
    eprintln!("[brr] wrote {}", brr_dir.join("comparison.md").display());
    Ok(0)
}
