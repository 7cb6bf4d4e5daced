//! `levels`: emulate mode with glibc at each x86-64 ISA level.
//!
//! glibc picks its string and memory functions by CPU feature (sse2,
//! sse4/ssse3, avx2, evex). The machines without an LBR mostly run the
//! older variants, so a core that covered only the newest would end a
//! segment at every string function there. `GLIBC_TUNABLES` makes glibc on
//! this machine pick what an x86-64-v3, -v2 or baseline CPU would; the
//! native and the profiled runs of a round get the same tunables.
//!
//! Per workload (SQLite speedtest1, and `strings_mt`, four threads of
//! qsort, snprintf and string searches) and level, and for SQLite compiled
//! with `-march=x86-64-v3` and `-v4` (glibc unrestricted), rounds interleave one
//! native run with one run with the library preloaded and autostarted
//! (emulate mode, 128-branch traces, task-clock every 3 ms): the
//! application's own CPU, not `record`'s. Reported: segments, breakpoint
//! stops and instructions left to the CPU per trace, and CPU overhead
//! (median profiled over median native).

use crate::forms;
use crate::profiler::{Summary, Tracer};
use crate::report::{fmt, median, Report, Table};
use crate::runner::{self, Cmd};
use crate::workloads::{self, Input, Kind};
use crate::Options;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

const PERIOD_NS: u64 = 3_000_000;
const LBR: u32 = 128;
const ROUNDS: usize = 5;
const QUICK_ROUNDS: usize = 1;

/// A glibc level: its name and the `glibc.cpu.hwcaps` mask that makes
/// glibc on a newer CPU pick that level's functions ("" for the CPU's own).
const LEVELS: [(&str, &str); 4] = [
    ("unrestricted", ""),
    (
        "x86-64-v3",
        "-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD",
    ),
    (
        "x86-64-v2",
        "-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,-AVX2,-AVX,-BMI1,-BMI2,-LZCNT,-MOVBE,-FMA,-F16C",
    ),
    (
        "x86-64",
        "-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,-AVX2,-AVX,-BMI1,-BMI2,-LZCNT,-MOVBE,-FMA,-F16C,-SSE4_2,-SSE4_1,-SSSE3,-POPCNT",
    ),
];

struct Row {
    workload: String,
    level: &'static str,
    traces: u64,
    segments: f64,
    stops: f64,
    step_overs: f64,
    overhead: f64,
}

fn strings_mt(dir: &Path) -> Result<PathBuf> {
    let clang = runner::require_tool("clang-19", "clang-19")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let binary = dir.join("strings_mt");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/strings_mt.c");
    runner::run(
        &Cmd::new(clang)
            .args(["-O2", "-gdwarf-4", "-pthread", "-o"])
            .arg(binary.as_os_str())
            .arg(source.as_os_str()),
    )?;
    Ok(binary)
}

pub fn run(opts: &Options) -> Result<usize> {
    let mut rep = Report::new(
        &opts.results,
        "levels",
        "Emulate mode with glibc at each x86-64 ISA level",
    )?;
    let rounds = if opts.quick { QUICK_ROUNDS } else { ROUNDS };
    let tracer = Tracer::locate()?;
    let ws = workloads::Workspace {
        cache: opts.cache.clone(),
        quick: opts.quick,
    };
    let work = ws.cache.join("runs").join("levels");
    // Workloads run at every glibc level, and compiled variants run with
    // glibc unrestricted.
    let mut commands: Vec<(String, Cmd)> = Vec::new();
    let mut compiled: Vec<(String, Cmd)> = Vec::new();
    let rounds_arg = if opts.quick { "1000" } else { "10000" };
    match strings_mt(&work.join("bin")) {
        Ok(b) => commands.push(("strings_mt".into(), Cmd::new(b).args(["4", rounds_arg]))),
        Err(e) => rep.fail("strings_mt", "build", &e),
    }
    if !opts.quick {
        match workloads::prepare(&ws, Kind::Sqlite) {
            Ok(w) => {
                commands.push(("sqlite".into(), w.command(Input::Train)));
                // The program itself compiled for a modern ISA level (RHEL
                // 10's baseline is v3): its own code, not glibc's, then
                // holds the VEX and EVEX forms. Only where this CPU runs it.
                for (march, runs_here) in [
                    ("x86-64-v3", std::arch::is_x86_feature_detected!("avx2")),
                    ("x86-64-v4", std::arch::is_x86_feature_detected!("avx512bw")),
                ] {
                    let name = format!("sqlite -march={march}");
                    if !runs_here {
                        eprintln!("[levels] {name}: this CPU cannot run it; left out");
                        continue;
                    }
                    match w.build_variant(&ws, march, &[format!("-march={march}")]) {
                        Ok(b) => compiled.push((name, w.command_with(&b, Input::Train))),
                        Err(e) => rep.fail(&name, "build", &e),
                    }
                }
            }
            Err(e) => rep.fail("sqlite", "prepare", &e),
        }
    }
    let mut rows = Vec::new();
    let runs = commands
        .iter()
        .map(|c| (c, &LEVELS[..]))
        .chain(compiled.iter().map(|c| (c, &LEVELS[..1])));
    for ((name, cmd), levels) in runs {
        let result = (|| -> Result<Vec<Row>> {
            let mut native: Vec<Vec<f64>> = vec![Vec::new(); levels.len()];
            let mut profiled: Vec<Vec<f64>> = vec![Vec::new(); levels.len()];
            let mut totals: Vec<Summary> = vec![Summary::default(); levels.len()];
            for round in 0..rounds {
                eprintln!("[levels] {name}: round {} of {rounds}", round + 1);
                for (i, (level, mask)) in levels.iter().enumerate() {
                    let cmd = if mask.is_empty() {
                        cmd.clone()
                    } else {
                        cmd.clone()
                            .env("GLIBC_TUNABLES", format!("glibc.cpu.hwcaps={mask}"))
                    };
                    native[i].push(runner::run_timed(&cmd)?.cpu_s());
                    let out = work.join(format!("{}-{level}-{round}", name.replace(' ', "")));
                    let (t, s) = tracer.autostarted_run(
                        &cmd,
                        PERIOD_NS,
                        &out,
                        &[("BREAKDANCE_LBR", &LBR.to_string())],
                    )?;
                    profiled[i].push(t.cpu_s());
                    totals[i].add(&s);
                }
            }
            Ok(levels
                .iter()
                .enumerate()
                .map(|(i, (level, _))| {
                    let c = &totals[i].counters;
                    let per_trace = |n: u64| n as f64 / c.traces_started.max(1) as f64;
                    Row {
                        workload: name.clone(),
                        level,
                        traces: c.traces_started / rounds as u64,
                        segments: per_trace(c.segments),
                        stops: per_trace(c.breakpoints),
                        step_overs: per_trace(c.step_overs),
                        overhead: median(&profiled[i]) / median(&native[i]),
                    }
                })
                .collect())
        })();
        match result {
            Ok(r) => rows.extend(r),
            Err(e) => rep.fail(name, "levels", &e),
        }
    }
    let mut t = Table::new(&[
        "workload",
        "glibc level",
        "traces per run",
        "segments per trace",
        "stops per trace",
        "step-overs per trace",
        "CPU overhead",
    ]);
    for r in &rows {
        t.push(vec![
            r.workload.clone(),
            r.level.to_string(),
            r.traces.to_string(),
            fmt(r.segments, 2),
            fmt(r.stops, 2),
            fmt(r.step_overs, 3),
            fmt(r.overhead, 3),
        ]);
    }
    // The forms each binary's code holds that the core lacks: libc.so.6
    // holds every ifunc variant of glibc's string functions, whichever
    // this CPU selects.
    let mut f = Table::new(&["binary", "forms the core lacks (static instruction count)"]);
    let libc = PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6");
    let binaries = std::iter::once(("libc.so.6".to_string(), libc)).chain(
        commands
            .iter()
            .chain(compiled.iter())
            .map(|(name, cmd)| (name.clone(), cmd.program.clone())),
    );
    for (name, binary) in binaries {
        match forms::missing_forms(&binary) {
            Ok(missing) => f.push(vec![name, forms::describe(&missing, 6)]),
            Err(e) => rep.fail(&name, "forms", &e),
        }
    }
    rep.note(&format!(
        "Emulate mode, {LBR}-branch traces, task-clock every {} ms, the library preloaded and \
         autostarted (the application's own CPU time: user + system). {rounds} interleaved \
         rounds, each one native and one profiled run per level, both with the level's \
         GLIBC_TUNABLES; overhead is the median profiled CPU over the median native one. \
         Step-overs are instructions left to the CPU (a syscall, or a form the core lacks).",
        PERIOD_NS / 1_000_000
    ));
    rep.table("levels", "Per glibc level", &t)?;
    rep.table(
        "forms",
        "Forms the core lacks in each binary's executable sections (a linear sweep, every feature)",
        &f,
    )?;
    rep.finish()
}
