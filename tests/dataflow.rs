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

#[test]
fn the_model_agrees_with_the_cpu_and_saves_breakpoints() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("dataflow");
    let mut verified_total = 0;
    for (name, arg) in PROGRAMS {
        let binary = build(&clang, &dir.0, name, &[&format!("{name}.c")], &[]);
        let native = run_native(&binary, &[arg], &[]);
        let mut recs = Vec::new();
        for mode in ["verify", "off", "on"] {
            let out = dir.path(&format!("{name}-{mode}"));
            let profiled = record_with(
                &tracer,
                &out,
                PERIOD_NS,
                &["--dataflow", mode],
                &binary,
                &[arg],
                &[],
            );
            assert_same_behaviour(&format!("{name} ({mode})"), &native, &profiled);
            let rec = load(&out);
            check_summary(&rec);
            assert_valid_traces(&format!("{name} ({mode})"), &rec);
            recs.push(rec);
        }
        let (verify, off, on) = (&recs[0], &recs[1], &recs[2]);
        assert_eq!(
            counter(&verify.summary, "dataflow_mismatches"),
            0,
            "{name}: the data-flow model mispredicted: {}",
            verify.summary
        );
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
    }
    assert!(
        verified_total > 1_000,
        "too few predictions checked: {verified_total}"
    );
}
