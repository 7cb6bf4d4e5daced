//! `bench-harness values --quick` end to end: the tracer's value profiles
//! (`record --values`) of charclass and the phased program against brr's
//! exact per-load counts of the same objects. The phased program's five
//! loads read one value for half the run and another after: the tracer
//! must find invariance 0.5 for them and 1.0 for its two constant loads.
//! Under CI=true a missing musl-gcc fails the test.

use bench_harness::tools;

mod common;
use common::*;

#[test]
fn quick_run_matches_the_exact_profiles() {
    if tools::require("musl-gcc").is_none() {
        return;
    }
    let (dir, _) = run_quick("values", &[]);
    let (_, failures) = read_csv(&dir.join("failures.csv"));
    assert!(failures.is_empty(), "failed steps: {failures:?}");

    let (h, rows) = read_csv(&dir.join("summary.csv"));
    for w in ["charclass", "phased"] {
        let r = rows
            .iter()
            .find(|r| r[0] == w)
            .unwrap_or_else(|| panic!("no {w} row in summary.csv: {rows:?}"));
        let v = |n: &str| num(&r[col(&h, n)]);
        assert!(v("hot loads") >= 1.0, "{w}: {r:?}");
        assert!(
            v("hot weight measured") >= 0.9,
            "{w}: the tracer missed hot loads: {r:?}"
        );
        assert!(v("mean error (measured)") <= 0.05, "{w}: {r:?}");
        assert!(v("capture within 0.1") >= 0.9, "{w}: {r:?}");
    }

    // The phased loads one by one: 0.5 or 1.0 exactly, and the tracer
    // close to it.
    let (h, loads) = read_csv(&dir.join("loads.csv"));
    let phased: Vec<&Vec<String>> = loads.iter().filter(|r| r[0] == "phased").collect();
    let (mut halves, mut ones) = (0, 0);
    for r in &phased {
        let exact = num(&r[col(&h, "exact invariance")]);
        let traced = num(&r[col(&h, "tracer invariance")]);
        assert!(num(&r[col(&h, "recorded")]) >= 1000.0, "{r:?}");
        assert!((traced - exact).abs() < 0.05, "{r:?}");
        if exact == 0.5 {
            halves += 1;
        } else if exact == 1.0 {
            ones += 1;
        }
    }
    assert_eq!((halves, ones), (5, 2), "phased's loads: {phased:?}");
}
