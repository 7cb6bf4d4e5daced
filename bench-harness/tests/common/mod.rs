//! What the experiment tests share: the harness binary, and reading the
//! CSV tables it writes.
#![allow(dead_code)] // each test uses its own part

use std::path::{Path, PathBuf};
use std::process::Command;

/// A CSV table: its header and rows, split on commas (the tables these
/// tests read have no quoted cells).
pub fn read_csv(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut lines = text
        .lines()
        .map(|l| l.split(',').map(str::to_string).collect());
    let header: Vec<String> = lines.next().expect("a header line");
    (header, lines.collect())
}

/// The index of the column `name`.
pub fn col(header: &[String], name: &str) -> usize {
    header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
}

pub fn num(cell: &str) -> f64 {
    cell.parse()
        .unwrap_or_else(|_| panic!("'{cell}' is not a number"))
}

/// Runs `bench-harness ARGS`.
pub fn harness(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bench-harness"))
        .args(args)
        .output()
        .expect("bench-harness runs")
}

/// Runs `bench-harness EXPERIMENT --quick EXTRA...` with the cache in the
/// tests' temporary directory (shared with brr's tests: bzip2's sources)
/// and fresh results beside it; fails on an unsuccessful run. Returns the
/// experiment's results directory and what the run printed on stderr.
pub fn run_quick(experiment: &str, extra: &[&str]) -> (PathBuf, String) {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let results = tmp.join(format!("{experiment}-results"));
    let _ = std::fs::remove_dir_all(&results);
    let mut args = vec![experiment, "--quick"];
    args.extend_from_slice(extra);
    args.extend([
        "--cache",
        tmp.to_str().unwrap(),
        "--results",
        results.to_str().unwrap(),
    ]);
    let out = harness(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{experiment} failed:\n{stderr}");
    (results.join(experiment), stderr)
}
