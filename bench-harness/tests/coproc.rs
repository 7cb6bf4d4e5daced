//! `bench-harness coproc --quick` end to end: charclass and the phased
//! workload under brr's emulator, with the exact value profile, the
//! co-processor at 4 … 64 slots and interrupt sampling at every interval.
//! Checks the exact counts against the phased program's known loads, the
//! cost and sampling arithmetic in runs.csv, that the co-processor is worse
//! than sampling on phased values, and the files; and that a bad --slots is
//! a one-line error. Under CI=true a missing musl-gcc fails the test.

use bench_harness::tools;
use std::collections::BTreeSet;

mod common;
use common::*;

#[test]
fn quick_run_end_to_end() {
    if tools::require("musl-gcc").is_none() {
        return;
    }
    let (dir, _) = run_quick("coproc", &[]);
    for f in [
        "runs.csv",
        "comparison.csv",
        "capture.csv",
        "loads.csv",
        "summary.md",
        "capture.svg",
        "error-charclass.svg",
        "error-phased.svg",
    ] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    let (_, failures) = read_csv(&dir.join("failures.csv"));
    assert!(failures.is_empty(), "failed steps: {failures:?}");

    // The phased program with 200000 iterations: five loads read A then B,
    // 100000 times each; two read 1 and 2 every time.
    let (h, loads) = read_csv(&dir.join("loads.csv"));
    let phased: Vec<&Vec<String>> = loads
        .iter()
        .filter(|r| r[0] == "phased" && r[col(&h, "executions")] == "200000")
        .collect();
    let mut pairs = BTreeSet::new();
    let mut constant = BTreeSet::new();
    for r in &phased {
        let c = |n: &str| r[col(&h, n)].clone();
        if c("top1_count") == "100000" {
            assert_eq!(c("top2_count"), "100000", "{r:?}");
            assert_eq!(c("distinct_values"), "2", "{r:?}");
            assert_eq!(c("invariance_top1"), "0.5000", "{r:?}");
            assert_eq!(c("invariance_top2"), "1.0000", "{r:?}");
            let mut p = [num(&c("top1_value")) as u64, num(&c("top2_value")) as u64];
            p.sort_unstable();
            pairs.insert(p);
        } else {
            assert_eq!(c("top1_count"), "200000", "{r:?}");
            constant.insert(c("top1_value"));
        }
    }
    let expected: BTreeSet<[u64; 2]> = [[3, 5], [17, 29], [127, 255], [2, 3], [0, 1]].into();
    assert_eq!(pairs, expected, "the phased loads' values");
    assert_eq!(
        constant,
        ["1".to_string(), "2".to_string()].into(),
        "the loads of `unit` and `two`"
    );

    let (h, runs) = read_csv(&dir.join("runs.csv"));
    for w in ["charclass", "phased"] {
        let rows: Vec<&Vec<String>> = runs.iter().filter(|r| r[0] == w).collect();
        let v = |r: &Vec<String>, n: &str| num(&r[col(&h, n)]);
        let sampling: Vec<&&Vec<String>> = rows
            .iter()
            .filter(|r| r[col(&h, "scheme")] == "sampling")
            .collect();
        assert_eq!(sampling.len(), 11, "{w}");
        // Every Nth load: floor(L/4) samples at 4 gives floor(L/N) at 4k.
        let at4 = v(sampling[0], "interrupts") as u64;
        assert_eq!(v(sampling[0], "interval"), 4.0);
        for r in &sampling {
            let n = v(r, "interval") as u64;
            assert_eq!(v(r, "interrupts") as u64, at4 / (n / 4), "{w} every {n}th");
            assert_eq!(v(r, "overhead_cycles"), v(r, "interrupts") * 1000.0);
        }
        let coprocs: Vec<&&Vec<String>> = rows
            .iter()
            .filter(|r| r[col(&h, "scheme")] == "coproc")
            .collect();
        assert_eq!(coprocs.len(), 5 * 2, "{w}: 5 sizes, 2 seeds");
        for r in &coprocs {
            let (i, copied, slots) = (v(r, "interrupts"), v(r, "slots_copied"), v(r, "slots"));
            assert_eq!(copied, i * slots, "{w}: every interrupt copies every slot");
            assert_eq!(v(r, "overhead_cycles"), i * 1000.0 + copied * 20.0);
            assert!(v(r, "measured_hot") > 0.0, "{w}: nothing measured {r:?}");
        }
        if w == "phased" {
            // A slot sees one phase: it measures ~1.0 where the truth is 0.5.
            let best_sampling = sampling
                .iter()
                .map(|r| v(r, "error"))
                .fold(f64::INFINITY, f64::min);
            for r in &coprocs {
                assert!(v(r, "error") > 0.3, "{r:?}");
                assert!(v(r, "error") > best_sampling, "{r:?} vs {best_sampling}");
            }
        }
    }
    let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    for needle in [
        "## Method",
        "## Findings",
        "## Against the paper",
        "Worse on phased",
    ] {
        assert!(summary.contains(needle), "summary.md lacks '{needle}'");
    }
    let svg = std::fs::read_to_string(dir.join("error-phased.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
}

#[test]
fn bad_slots_is_a_one_line_error() {
    for bad in ["0", "4,x", ""] {
        let out = harness(&["coproc", "--slots", bad]);
        assert!(!out.status.success(), "--slots '{bad}' accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("--slots") && stderr.contains(&format!("'{bad}'")),
            "{stderr}"
        );
    }
}
