//! Every recorded branch is a real taken transfer.
//!
//! Each test builds one program of `tests/programs/`, runs it natively and
//! under `profiler-ctl record`, and checks: same stdout and exit status;
//! summary.json reconciles with perf.script; every entry of every trace passes
//! the validator (real transfer instruction, encoded target for direct
//! branches, straight fall-through between consecutive entries). Each test
//! needs a minimum number of validated traces; a machine fast enough to do
//! the program's fixed work in fewer samples runs it again (every run
//! checked the same way), up to `MAX_RUNS` runs. The minima add up to
//! 11,500 traces.

mod common;

use std::collections::BTreeSet;
use std::ffi::OsStr;

use common::*;

/// Sampling period (task-clock ns): about 1,000 samples per CPU-second of
/// the program's own work.
const PERIOD_NS: u64 = 100_000;

/// Runs of one program, at most, to gather a test's minimum of traces
/// (one is enough on these machines; a CPU 8 times as fast still gets
/// there).
const MAX_RUNS: usize = 8;

/// Builds one program, then runs it natively and under the tracer and
/// checks each run, until the validated traces reach `min_traces` (at most
/// `MAX_RUNS` runs). Returns the recordings for program-specific checks.
fn check_program(
    tag: &str,
    sources: &[&str],
    build_flags: &[&str],
    args: &[&str],
    min_traces: u64,
    libs: &[(&str, &[&str])],
) -> Option<(Scratch, Vec<Recording>)> {
    let tracer = tracer();
    let clang = tool("clang-19")?;
    let dir = Scratch::new(tag);
    for (name, lib_sources) in libs {
        build(&clang, &dir.0, name, lib_sources, &["-fPIC", "-shared"]);
    }
    // "DIR" in the flags stands for the scratch directory (where libraries go).
    let dir_text = dir.0.display().to_string();
    let flags: Vec<&str> = build_flags
        .iter()
        .map(|f| if *f == "DIR" { dir_text.as_str() } else { f })
        .collect();
    let binary = build(&clang, &dir.0, tag, sources, &flags);
    let library_path = dir.0.clone().into_os_string();
    let envs: Vec<(&str, &OsStr)> = if libs.is_empty() {
        vec![]
    } else {
        vec![("LD_LIBRARY_PATH", library_path.as_os_str())]
    };
    let native = run_native(&binary, args, &envs);
    assert!(native.status.success(), "{tag} fails natively: {native:?}");
    let mut recordings = Vec::new();
    let mut traces = 0;
    while traces < min_traces {
        assert!(
            recordings.len() < MAX_RUNS,
            "{tag}: only {traces} traces recorded in {MAX_RUNS} runs, the test needs {min_traces}"
        );
        let out = dir.path(&format!("out{}", recordings.len()));
        let profiled = record(&tracer, &out, PERIOD_NS, &binary, args, &envs);
        assert_same_behaviour(tag, &native, &profiled);
        let rec = load(&out);
        check_summary(&rec);
        traces += assert_valid_traces(tag, &rec).traces;
        recordings.push(rec);
    }
    Some((dir, recordings))
}

/// Functions touched by any trace of any of the recordings.
fn functions_in_all(recordings: &[Recording]) -> BTreeSet<String> {
    recordings
        .iter()
        .flat_map(|r| functions_in_traces(&r.script))
        .collect()
}

#[test]
fn branchy_loop() {
    check_program("branchy", &["branchy.c"], &[], &["8000000"], 2500, &[]);
}

#[test]
fn indirect_calls_and_switch() {
    let Some((_dir, recs)) =
        check_program("indirect", &["indirect.c"], &[], &["25000000"], 2500, &[])
    else {
        return;
    };
    // The table's targets and the switch's jump table were traced.
    let functions = functions_in_all(&recs);
    for name in [
        "op_add", "op_mul", "op_xor", "op_rot", "op_neg", "op_sub", "dispatch",
    ] {
        assert!(
            functions.contains(name),
            "indirect: no trace touches {name}: {functions:?}"
        );
    }
}

#[test]
fn recursion() {
    check_program("recursion", &["recursion.c"], &[], &["8000"], 2500, &[]);
}

#[test]
fn pie_calling_a_shared_library() {
    let Some((_dir, recs)) = check_program(
        "pie_main",
        &["pie_main.c"],
        &["-fPIE", "-pie", "-L", "DIR", "-lwork"],
        &["5000000"],
        2000,
        &[("libwork.so", &["libwork.c"])],
    ) else {
        return;
    };
    let functions = functions_in_all(&recs);
    for name in ["lib_hot", "main_step"] {
        assert!(
            functions.contains(name),
            "pie: no trace touches {name}: {functions:?}"
        );
    }
}

#[test]
fn sixteen_threads_some_started_late() {
    let Some((_dir, recs)) = check_program(
        "threads",
        &["threads.c"],
        &["-pthread"],
        &["1000000"],
        2000,
        &[],
    ) else {
        return;
    };
    for rec in &recs {
        let threads = counter(&rec.summary, "threads");
        assert!(
            threads >= 17,
            "summary.json threads is {threads}, the program ran 17"
        );
    }
    let functions = functions_in_all(&recs);
    let missing: Vec<String> = (0..16)
        .map(|n| format!("work_{n}"))
        .chain(["main_work".to_string()])
        .filter(|f| !functions.contains(f))
        .collect();
    assert!(
        missing.is_empty(),
        "threads: no trace from {missing:?} (late threads are 8..15)"
    );
}

/// Traces far longer than hardware LBR's 32 entries: every one is valid and
/// none is longer than asked.
#[test]
fn long_traces() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("long");
    let binary = build(&clang, &dir.0, "recursion", &["recursion.c"], &[]);
    let args = ["4000"];
    let native = run_native(&binary, &args, &[]);
    // Runs until one trace reaches 512 entries (a trace can end early, so a
    // run on a fast machine may complete none).
    let mut longest = 0;
    for run in 0..MAX_RUNS {
        let out = dir.path(&format!("out{run}"));
        let profiled = record_with(
            &tracer,
            &out,
            1_000_000,
            &["--lbr", "512"],
            &binary,
            &args,
            &[],
        );
        assert_same_behaviour("recursion --lbr 512", &native, &profiled);
        let rec = load(&out);
        check_reconciles(&rec);
        assert_eq!(rec.summary["config"]["lbr"], 512, "{}", rec.summary);
        assert_valid_traces("recursion --lbr 512", &rec);
        let run_longest = rec
            .script
            .traces
            .iter()
            .map(|t| t.entries_newest_first.len())
            .max()
            .unwrap_or(0);
        assert!(run_longest <= 512, "a trace of {run_longest} entries");
        longest = longest.max(run_longest);
        if longest == 512 {
            return;
        }
    }
    panic!("no trace reached 512 entries in {MAX_RUNS} runs (longest {longest})");
}

/// Programs a recorded shell execs write their own profiles into
/// OUTPUT/<comm>.<pid>/, each complete and valid.
#[test]
fn exec_children_write_their_own_profiles() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("exec");
    let branchy = build(&clang, &dir.0, "branchy", &["branchy.c"], &[]);
    let recursion = build(&clang, &dir.0, "recursion", &["recursion.c"], &[]);
    let script = format!(
        "{} 3000000 && {} 3000",
        branchy.display(),
        recursion.display()
    );
    let sh = std::path::Path::new("/bin/sh");
    let native = run_native(sh, &["-c", &script], &[]);
    let out = dir.path("out");
    let profiled = record(&tracer, &out, PERIOD_NS, sh, &["-c", &script], &[]);
    assert_same_behaviour("sh -c branchy && recursion", &native, &profiled);
    for comm in ["branchy", "recursion"] {
        let children: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.is_dir()
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(&format!("{comm}.")))
            })
            .collect();
        assert_eq!(
            children.len(),
            1,
            "{comm}: expected one {comm}.<pid>/ in {}: {children:?}",
            out.display()
        );
        let rec = load(&children[0]);
        check_summary(&rec);
        assert_valid_traces(comm, &rec);
        assert!(
            functions_in_traces(&rec.script).contains(if comm == "branchy" {
                "hottest"
            } else {
                "fib"
            }),
            "{comm}: its own hot function is not in its traces"
        );
    }
}

/// Code no file maps (a JIT's output) cannot be traced: a sample there
/// ends its trace before the first entry. Such traces are counted
/// (`traces_empty`), so traces_written still reconciles with the traces
/// started (check_summary asserts it).
#[test]
fn samples_in_anonymous_code_are_counted() {
    let Some((_dir, recs)) = check_program("jit", &["jit.c"], &[], &["400"], 200, &[]) else {
        return;
    };
    let empty: u64 = recs
        .iter()
        .map(|r| counter(&r.summary, "traces_empty"))
        .sum();
    let outside: u64 = recs
        .iter()
        .map(|r| counter(&r.summary, "aborts.outside_mappings"))
        .sum();
    // Not outside >= empty: a trace can also end empty for another reason
    // (one given up at a checkpoint its first segment never reached).
    assert!(
        empty > 0 && outside > 0,
        "no sample in the anonymous page was counted: {}",
        recs[0].summary
    );
}
