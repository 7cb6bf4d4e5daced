//! The quick experiment run end to end: every output is written and the
//! headline effects are there (brr cheaper per site than counter sampling
//! above small intervals; counter sampling blind to an edge of the
//! resonating loop while brr is not).

mod common;

use std::path::Path;

fn csv(path: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

#[test]
fn quick_run_writes_results_with_the_expected_shape() {
    if !common::have_tool("musl-gcc") {
        return;
    }
    let out = common::scratch_dir("experiment_quick");
    std::env::set_var(
        "BRR_WORK_DIR",
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("experiment-work"),
    );
    brr::experiment::run(&out, true).unwrap();
    for f in [
        "overhead.csv",
        "accuracy.csv",
        "summary.md",
        "overhead-charclass.svg",
        "accuracy.svg",
    ] {
        let p = out.join(f);
        assert!(
            p.metadata().map(|m| m.len() > 100).unwrap_or(false),
            "{} missing or empty",
            p.display()
        );
    }
    assert!(std::fs::read_to_string(out.join("accuracy.svg"))
        .unwrap()
        .starts_with("<svg"));

    let overhead = csv(&out.join("overhead.csv"));
    let width = &brr::timing::Config::default().fetch_width.to_string();
    let cost = |variant: &str, interval: &str| -> f64 {
        overhead
            .iter()
            .find(|r| r[0] == "charclass" && r[1] == variant && r[2] == interval && r[3] == *width)
            .unwrap_or_else(|| panic!("no {variant} {interval} row"))[8]
            .parse()
            .unwrap()
    };
    let (b, c) = (cost("brr", "1024"), cost("counter", "1024"));
    assert!(
        b > 0.0 && b * 3.0 < c,
        "brr {b} vs counter {c} cycles per site at 2^10"
    );

    let accuracy = csv(&out.join("accuracy.csv"));
    let overlap = |scheme: &str| -> f64 {
        let rows: Vec<f64> = accuracy
            .iter()
            .filter(|r| r[0] == "resonance" && r[1] == scheme && r[2] == "1024")
            .map(|r| r[5].parse().unwrap())
            .collect();
        rows.iter().sum::<f64>() / rows.len() as f64
    };
    assert!(
        overlap("counter") < 0.6,
        "counter overlap {}",
        overlap("counter")
    );
    assert!(overlap("brr") > 0.85, "brr overlap {}", overlap("brr"));
}
