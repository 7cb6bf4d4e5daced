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

/// A loop whose common case (a byte of 16 or more, 15 times in 16) gcc is
/// told (`__builtin_expect`) is the rarest of three, so gcc lays it out of
/// line: a taken jcc out and a jmp back on nearly every iteration. Usage:
/// skewed ROUNDS SEED; prints three checksums.
const SKEWED_C: &str = r#"#include <stdio.h>
#include <stdlib.h>
static unsigned long state;
static unsigned char buf[4096];
static unsigned rnd(void)
{
	state = state * 6364136223846793005UL + 1442695040888963407UL;
	return (unsigned)(state >> 33);
}
int main(int argc, char **argv)
{
	long n = atol(argv[1]);
	state = strtoul(argv[2], 0, 10);
	for (int i = 0; i < 4096; i++)
		buf[i] = rnd();
	unsigned long a = 0, b = 0, d = 0;
	for (long r = 0; r < n; r++)
		for (int i = 0; i < 4096; i++) {
			unsigned c = buf[i];
			if (__builtin_expect(c < 8, 1))
				a += c * 5;
			else if (__builtin_expect(c < 16, 1))
				b ^= c << 3;
			else
				d += c;
		}
	printf("%lu %lu %lu\n", a, b, d);
	return 0;
}
"#;

/// `bench-harness ephemeral-superblock`'s measurement on a program built
/// to benefit from layout: every layout prints the same bytes; the
/// exact-profile layout takes fewer cycles than the compiler's order; a
/// profile with every branch's edges swapped gains much less (here it
/// keeps the bad order or makes it worse); ephemeral's profile gets most of
/// the exact profile's gain.
#[test]
fn superblock_layout_by_the_exact_profile_beats_the_baseline_and_a_wrong_one() {
    use bench_harness::ephemeral::superblock::{self, Case};
    if tools::require("musl-gcc").is_none() {
        return;
    }
    let work = tools::scratch_dir("ephemeral-superblock").unwrap();
    let src = work.join("skewed.c");
    std::fs::write(&src, SKEWED_C).unwrap();
    let plan = superblock::Plan {
        work: work.clone(),
        cases: vec![Case {
            workload: Workload {
                name: "skewed".into(),
                sources: vec![src],
                args: vec!["60".into(), "7".into()],
            },
            train_args: vec!["20".into(), "99".into()],
            train_note: "another seed, a third of the rounds".into(),
        }],
        persistences: vec![1000],
        counter_interval: 1024,
        brr_interval: 16,
        epoch: 50_000,
        timing: brr::timing::Config::default(),
    };
    let results = superblock::measure(&plan).expect("the experiment runs");
    eprintln!("{}", superblock::section(&plan, &results, true));
    let m = &results[0];
    // Every build printed the same bytes (measure() checks it too).
    let outputs: Vec<Vec<u8>> = (0..m.points.len())
        .map(|k| std::fs::read(work.join(format!("skewed-sb/{k:02}/stdout"))).unwrap())
        .collect();
    assert!(!outputs[0].is_empty());
    assert!(outputs.iter().all(|o| *o == outputs[0]));
    let base = m.baseline();
    let exact = m.point("exact").unwrap();
    let wrong = m.point("exact, inverted").unwrap();
    let eph = m.point("ephemeral P=1000").unwrap();
    assert!(exact.stats.inverted > 0, "{exact:?}");
    // The layout removes the taken jcc and the jmp back from the loop.
    assert!(
        exact.taken_jumps + exact.taken_conditional
            < base.taken_jumps + base.taken_conditional - 200_000,
        "{base:?}\n{exact:?}"
    );
    let gain = m.speedup(exact);
    assert!(gain > 3.0, "exact-profile layout: {gain:.2} % faster");
    assert!(m.speedup_perfect(exact) > 3.0, "{exact:?}");
    assert!(
        m.speedup(wrong) < gain / 2.0,
        "wrong profile {:.2} % against exact {gain:.2} %",
        m.speedup(wrong)
    );
    let share = m.share_of_exact(eph).unwrap();
    assert!(share > 0.8, "ephemeral gets {share:.2} of the exact gain");
    // The section and the CSV are written.
    let out = work.join("results");
    superblock::write(&plan, &results, &out, true).unwrap();
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains(superblock::HEADING) && md.contains("| skewed |"));
    assert!(std::fs::read_to_string(out.join("superblock.csv"))
        .unwrap()
        .contains("\nskewed,exact,1.0000,"));
    std::fs::remove_dir_all(&work).unwrap();
}
