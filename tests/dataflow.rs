//! The data-flow look-ahead on real programs: in `verify` mode every
//! transfer the model decides is still stopped at, and the model's answer
//! must be the CPU's every time; with the model `off` (the paper's
//! algorithm) every recorded branch is still a real one, and the model
//! saves breakpoints when on.

mod common;

use common::*;

const PERIOD_NS: u64 = 200_000;

/// (program, argument) pairs: branchy arithmetic, indirect calls and a
/// switch, recursion.
const PROGRAMS: [(&str, &str); 3] = [
    ("branchy", "3000000"),
    ("indirect", "8000000"),
    ("recursion", "3000"),
];

fn per_trace(rec: &Recording, key: &str) -> f64 {
    counter(&rec.summary, key) as f64 / counter(&rec.summary, "traces_started").max(1) as f64
}

/// Least number of predictions checked by stops over all programs; verify
/// runs are repeated (each checked in full) until there are this many, at
/// most `MAX_VERIFY_ROUNDS` rounds of the three programs.
const MIN_VERIFIED: u64 = 1_000;
const MAX_VERIFY_ROUNDS: usize = 8;

/// Records `binary arg` with `--dataflow MODE` into `out` and checks the run:
/// same behaviour as native, counters reconcile, every trace valid.
fn run_mode(
    tracer: &Tracer,
    binary: &std::path::Path,
    arg: &str,
    native: &std::process::Output,
    mode: &str,
    out: std::path::PathBuf,
) -> Recording {
    let name = binary.file_name().unwrap().to_string_lossy();
    let profiled = record_with(
        tracer,
        &out,
        PERIOD_NS,
        &["--dataflow", mode],
        binary,
        &[arg],
        &[],
    );
    assert_same_behaviour(&format!("{name} ({mode})"), native, &profiled);
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces(&format!("{name} ({mode})"), &rec);
    if mode == "verify" {
        assert_eq!(
            counter(&rec.summary, "dataflow_mismatches"),
            0,
            "{name}: the data-flow model disagreed with the CPU: {}",
            rec.summary
        );
        // Every prediction is checked at a stop: none is taken on trust.
        assert_eq!(
            counter(&rec.summary, "dataflow_resolved"),
            0,
            "{name}: verify resolved transfers without stopping: {}",
            rec.summary
        );
    }
    rec
}

#[test]
fn the_model_agrees_with_the_cpu_and_saves_breakpoints() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("dataflow");
    let mut verified_total = 0;
    let mut programs = Vec::new();
    for (name, arg) in PROGRAMS {
        let binary = build(&clang, &dir.0, name, &[&format!("{name}.c")], &[]);
        let native = run_native(&binary, &[arg], &[]);
        let mut recs = Vec::new();
        for mode in ["verify", "off", "on"] {
            let out = dir.path(&format!("{name}-{mode}"));
            recs.push(run_mode(&tracer, &binary, arg, &native, mode, out));
        }
        let (verify, off, on) = (&recs[0], &recs[1], &recs[2]);
        verified_total += counter(&verify.summary, "dataflow_verified");
        assert_eq!(
            counter(&off.summary, "dataflow_resolved"),
            0,
            "{name}: off must not use the model"
        );
        assert!(
            counter(&on.summary, "dataflow_resolved") > 0,
            "{name}: the model resolved nothing: {}",
            on.summary
        );
        let (bp_off, bp_on) = (per_trace(off, "breakpoints"), per_trace(on, "breakpoints"));
        eprintln!("{name}: breakpoints per trace {bp_off:.1} off, {bp_on:.1} on");
        assert!(
            bp_on < bp_off,
            "{name}: the model saved no breakpoints ({bp_off:.1} off, {bp_on:.1} on)"
        );
        programs.push((binary, arg, native));
    }
    // A fast machine does the fixed work in fewer samples: verify again
    // until enough predictions were checked.
    for round in 1.. {
        if verified_total >= MIN_VERIFIED {
            break;
        }
        assert!(
            round < MAX_VERIFY_ROUNDS,
            "too few predictions checked: {verified_total} in {MAX_VERIFY_ROUNDS} rounds"
        );
        for (binary, arg, native) in &programs {
            let name = binary.file_name().unwrap().to_string_lossy();
            let out = dir.path(&format!("{name}-verify{round}"));
            let rec = run_mode(&tracer, binary, arg, native, "verify", out);
            verified_total += counter(&rec.summary, "dataflow_verified");
        }
    }
}
