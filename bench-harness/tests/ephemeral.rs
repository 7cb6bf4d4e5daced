//! `bench-harness ephemeral` end to end, small: the flip workload under the
//! ephemeral instrumentation at three persistences, with and without
//! re-hooking, in the emulator and the timing model. Needs musl-gcc (under
//! CI=true a missing one fails the test).

use bench_harness::ephemeral::{self, Plan, Scheme, Workload};
use bench_harness::tools;

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
    // The outputs are written.
    let out = work.join("results");
    ephemeral::write(&plan, &results, &out, true).unwrap();
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("## flip") && summary.contains("flip bias"));
    assert!(out.join("tradeoff-flip.svg").exists());
    assert!(std::fs::read_to_string(out.join("runs.csv"))
        .unwrap()
        .contains("flip,ephemeral-no-rehook,10,"));
    std::fs::remove_dir_all(&work).unwrap();
}
