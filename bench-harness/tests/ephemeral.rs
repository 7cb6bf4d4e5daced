//! `bench-harness ephemeral` end to end, small: the flip workload under the
//! ephemeral instrumentation at three persistences, with and without
//! re-hooking, in the emulator and the timing model, and again under
//! `smc_penalty` 0 and 1000 (the sensitivity sweep). Needs musl-gcc (under
//! CI=true a missing one fails the test). The `--smc-penalty` option's
//! refusals need nothing.

use bench_harness::ephemeral::{self, Plan, Scheme, Workload};
use bench_harness::tools;
use std::process::Command;

#[test]
fn ephemeral_hooks_unhook_rehook_and_follow_the_flip() {
    if tools::require("musl-gcc").is_none() {
        return;
    }
    let work = tools::scratch_dir("ephemeral").unwrap();
    let epoch = 50_000;
    let persistences = vec![10, 100, 1000];
    let plan = Plan {
        work: work.clone(),
        workloads: vec![Workload {
            name: "flip".into(),
            sources: vec![brr::workload::workload_dir().join("flip.c")],
            args: vec!["200000".into()],
        }],
        persistences: persistences.clone(),
        intervals: vec![1024],
        epoch,
        timing: brr::timing::Config::default(),
        smc_penalties: vec![0, 1000],
    };
    let results = ephemeral::measure(&plan).expect("the experiment runs");
    let m = &results[0];
    let run = |p: u64, rehook: bool| {
        m.runs
            .iter()
            .find(|r| r.scheme == Scheme::Ephemeral { persist: p, rehook })
            .unwrap()
    };
    let sites = m.exact.len() as u64;
    for &p in &persistences {
        for rehook in [true, false] {
            let r = run(p, rehook);
            // Every patch the runtime reports is a store the emulator saw
            // into executable memory: one per hook, two per unhook.
            assert_eq!(
                r.code_stores,
                r.hooks + 2 * r.unhooks,
                "P = {p}, rehook {rehook}: {r:?}"
            );
        }
        // Without re-hooking every site is hooked once and records exactly
        // its first P executions: it unhooked after P.
        let n = run(p, false);
        assert_eq!(n.hooks, sites, "P = {p}");
        assert_eq!(n.ticks, 0);
        let expected: u64 = m.exact.values().map(|&(t, f)| (t + f).min(p)).sum();
        assert_eq!(
            n.samples, expected,
            "P = {p}: samples = Σ min(executions, P)"
        );
        let unhooked = m.exact.values().filter(|&&(t, f)| t + f >= p).count() as u64;
        assert_eq!(n.unhooks, unhooked, "P = {p}");
        // With re-hooking the timer fires once per epoch and re-hooks.
        let r = run(p, true);
        let epochs = r.instructions / epoch;
        assert!(
            r.signals + 1 >= epochs && r.signals <= epochs,
            "P = {p}: {} signals in {} instructions, epoch {epoch}",
            r.signals,
            r.instructions
        );
        // The runtime's handler ran once per signal (it stops the timer
        // before writing its counts at exit).
        assert_eq!(r.ticks, r.signals, "{r:?}");
        assert!(r.hooks > sites + r.ticks, "P = {p}: {r:?}");
        assert!(r.samples > n.samples, "P = {p}");
        // The flipping branch: ~0.5 over the run. Re-hooking samples both
        // halves; without it only the first P executions (~0.9) are seen.
        let exact = m.flip_exact_bias.unwrap();
        assert!((exact - 0.5).abs() < 0.05, "exact bias {exact}");
        let with = r.flip_bias.unwrap();
        let without = n.flip_bias.unwrap();
        assert!((with - exact).abs() < 0.1, "P = {p}: re-hooked bias {with}");
        assert!(without > 0.75, "P = {p}: bias without re-hooking {without}");
        assert!(
            r.overlap_markov.unwrap() > n.overlap_markov.unwrap() + 0.1,
            "P = {p}: {r:?} vs {n:?}"
        );
    }
    // Overhead falls as P falls.
    let cost: Vec<f64> = persistences
        .iter()
        .map(|&p| run(p, true).cycles_per_site.unwrap())
        .collect();
    assert!(
        cost.windows(2).all(|w| w[0] < w[1]),
        "cycles per site at P = {persistences:?}: {cost:?}"
    );
    // The smc_penalty sweep. The recorded profile cannot depend on the
    // penalty (the epoch counts instructions), and neither can the
    // uninstrumented run (no store into code); the overhead at each P is
    // non-decreasing in the penalty (0, the default 100, 1000) and strictly
    // greater at 1000 than at 0, since every run stored into code.
    let (lo, hi) = (&m.smc[0], &m.smc[1]);
    assert_eq!((lo.penalty, hi.penalty), (0, 1000));
    assert_eq!(m.code_stores_none, 0);
    assert_eq!(
        (lo.cycles_none, hi.cycles_none),
        (m.cycles_none, m.cycles_none)
    );
    for (i, &p) in persistences.iter().enumerate() {
        let default = run(p, true);
        let (at0, at1000) = (&lo.runs[i], &hi.runs[i]);
        assert_eq!(at0.samples, default.samples, "P = {p}");
        assert_eq!(at1000.samples, default.samples, "P = {p}");
        assert!(default.code_stores > 0, "P = {p}");
        let costs = [at0, default, at1000].map(|r| r.cycles_per_site.unwrap());
        assert!(
            costs[0] <= costs[1] && costs[1] <= costs[2] && costs[0] < costs[2],
            "P = {p}: cycles per site at smc_penalty 0, 100, 1000: {costs:?}"
        );
    }
    // The outputs are written.
    let out = work.join("results");
    ephemeral::write(&plan, &results, &out, true).unwrap();
    ephemeral::smc::write(&plan, &results, &out.join("smc"), true).unwrap();
    let sweep = std::fs::read_to_string(out.join("smc/summary.md")).unwrap();
    assert!(sweep.contains("| P | penalty 0 | penalty 1000 |") && sweep.contains("## Findings"));
    assert!(std::fs::read_to_string(out.join("smc/sweep.csv"))
        .unwrap()
        .contains("\nflip,1000,10,"));
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("## flip") && summary.contains("flip bias"));
    assert!(summary.contains("How much this depends on `smc_penalty`"));
    assert!(out.join("tradeoff-flip.svg").exists());
    assert!(std::fs::read_to_string(out.join("runs.csv"))
        .unwrap()
        .contains("flip,ephemeral-no-rehook,10,"));
    std::fs::remove_dir_all(&work).unwrap();
}

/// A bad `--smc-penalty` list is refused before anything runs, in one line
/// that names the option and the value, with a nonzero exit status.
#[test]
fn a_bad_smc_penalty_is_refused_in_one_line() {
    for bad in ["0,x", "100001", "", "10,,20", "-1"] {
        // The unknown option after it: were the value wrongly accepted,
        // parsing stops there (with the usage text, several lines) instead
        // of running the experiment.
        let out = Command::new(env!("CARGO_BIN_EXE_bench-harness"))
            .args(["ephemeral", "--smc-penalty", bad, "--not-an-option"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "'{bad}' accepted: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "'{bad}': {stderr}");
        assert!(
            stderr.contains("--smc-penalty") && stderr.contains(&format!("'{bad}'")),
            "'{bad}': {stderr}"
        );
    }
}
