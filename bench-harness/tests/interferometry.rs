//! End to end: `bench-harness interferometry --quick --layouts 4` links
//! four layouts of bzip2 and of opmix with ld.lld-19, runs each under brr's
//! timing model with the tournament and the perfect predictor, and fits
//! CPI = m·MPKI + b. The test checks the layouts really differ, compute the
//! same thing, that the perfect predictor never mispredicts and is faster,
//! and that the fit and its files are there — never how long anything took.
//! Under CI=true a missing tool fails the test instead of skipping it.

use bench_harness::tools;
use std::collections::HashSet;

mod common;
use common::*;

#[test]
fn four_layouts_end_to_end() {
    if tools::require("ld.lld-19").is_none() || tools::require("musl-gcc").is_none() {
        return;
    }
    // The cache holds debian-src/ (bzip2's sources, shared with brr's tests).
    let (dir, stderr) = run_quick("interferometry", &["--layouts", "4"]);
    assert!(
        stderr.contains("bzip2 layout 4/4") && stderr.contains("opmix layout 4/4"),
        "no progress lines:\n{stderr}"
    );
    let (_, failures) = read_csv(&dir.join("failures.csv"));
    assert!(failures.is_empty(), "failed steps: {failures:?}");

    let (h, rows) = read_csv(&dir.join("layouts.csv"));
    for w in ["bzip2", "opmix"] {
        let rows: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == w).collect();
        assert_eq!(rows.len(), 4, "{w}: {rows:?}");
        let distinct = |name: &str| {
            rows.iter()
                .map(|r| r[col(&h, name)].clone())
                .collect::<HashSet<_>>()
                .len()
        };
        assert_eq!(distinct("layout_hash"), 4, "{w}: layouts not distinct");
        assert_eq!(
            distinct("output_hash"),
            1,
            "{w}: layouts compute differently"
        );
        assert_eq!(distinct("exit_status"), 1, "{w}");
        assert_eq!(distinct("instructions"), 1, "{w}");
        for r in &rows {
            let seed = num(&r[col(&h, "seed")]);
            if seed > 1.0 {
                assert!(
                    num(&r[col(&h, "functions_moved")]) > 0.0,
                    "{w} layout {seed} is layout 1"
                );
            }
            assert_eq!(num(&r[col(&h, "perfect_mpki")]), 0.0, "{w} {seed}");
            let (cpi, perfect) = (num(&r[col(&h, "cpi")]), num(&r[col(&h, "perfect_cpi")]));
            assert!(
                num(&r[col(&h, "mpki")]) > 0.5,
                "{w} {seed}: no mispredictions"
            );
            assert!(
                perfect > 0.1 && perfect < cpi,
                "{w} {seed}: perfect CPI {perfect} vs {cpi}"
            );
        }
    }

    let (h, fits) = read_csv(&dir.join("fit.csv"));
    assert_eq!(fits.len(), 2, "{fits:?}");
    for f in &fits {
        let v = |name: &str| num(&f[col(&h, name)]);
        assert_eq!(v("layouts"), 4.0);
        assert_eq!(v("distinct_layouts"), 4.0);
        assert!((0.0..=1.0).contains(&v("r2")), "{f:?}");
        assert!(v("m_ci_low") <= v("m") && v("m") <= v("m_ci_high"), "{f:?}");
        assert!(v("b_ci_low") <= v("b") && v("b") <= v("b_ci_high"), "{f:?}");
        assert!(v("b_pi_low") <= v("b_ci_low") && v("b_ci_high") <= v("b_pi_high"));
        assert!(v("mean_perfect_cpi") < v("mean_cpi"), "{f:?}");
        assert!(v("measured_gain") > 0.0, "{f:?}");
        let b_gap = v("b") - v("mean_perfect_cpi");
        assert!((b_gap - v("b_minus_perfect_cpi")).abs() < 1e-4, "{f:?}");
    }

    let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    for needle in ["## bzip2", "## opmix", "CPI = ", "R² = ", "27%", "measured"] {
        assert!(summary.contains(needle), "summary.md lacks '{needle}'");
    }
    for w in ["bzip2", "opmix"] {
        let svg = std::fs::read_to_string(dir.join(format!("scatter-{w}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        // 4 layout points in each panel, 4 perfect-predictor points.
        assert_eq!(svg.matches("<circle").count(), 4 * 3 + 2, "{w}");
        assert!(svg.contains("<polygon"), "{w}: no confidence band");
    }
}

#[test]
fn too_few_layouts_is_a_one_line_error() {
    // 2 is a number the option takes (fdo-layouts accepts it), refused by
    // interferometry itself; "many" by the option's parser.
    for (bad, says) in [
        (
            "2",
            "--layouts needs a whole number of at least 3 for interferometry",
        ),
        ("many", "--layouts needs a whole number of at least 2"),
    ] {
        let out = harness(&["interferometry", "--layouts", bad]);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(says)
                && stderr.contains(&format!("'{bad}'"))
                && stderr.trim_end().lines().count() == 1,
            "{stderr}"
        );
    }
}
