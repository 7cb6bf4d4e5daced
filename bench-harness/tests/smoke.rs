//! Smoke test of every experiment in `--quick` mode: the real workloads
//! (Debian sources built with clang-19, python3, xz), the real tracer, the
//! real valgrind/create_llvm_prof/llvm-profgen. It checks that each pipeline
//! runs without a failed step and that the numbers are sane (fractions in
//! [0, 1], no invented branches, positive times) — never how fast anything is.
//!
//! The experiments share one workload cache and run one at a time.

use bench_harness::tools;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

fn cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("workloads")
}

/// The tools the experiments need; `None` when one is missing outside CI
/// (under `CI=true` a missing tool panics).
fn tools_present() -> Option<()> {
    for t in [
        "clang-19",
        "valgrind",
        "create_llvm_prof",
        "llvm-profgen-19",
        "llvm-profdata-19",
        "dpkg-source",
        "tclsh",
    ] {
        tools::require(t)?;
    }
    Some(())
}

/// Runs `bench-harness EXPERIMENT --quick` into a fresh results directory
/// and returns it; panics with the harness's stderr when it fails.
fn run(experiment: &str) -> PathBuf {
    let results = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("smoke-results")
        .join(experiment);
    let _ = std::fs::remove_dir_all(&results);
    let out = Command::new(env!("CARGO_BIN_EXE_bench-harness"))
        .arg(experiment)
        .arg("--quick")
        .arg("--cache")
        .arg(cache())
        .arg("--results")
        .arg(&results)
        .output()
        .expect("bench-harness runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench-harness {experiment} --quick failed ({}):\n{stderr}",
        out.status
    );
    let dir = results.join(experiment);
    let failures = read_csv(&dir.join("failures.csv"));
    assert!(failures.len() == 1, "failed steps: {failures:?}");
    assert!(dir.join("README.md").is_file());
    dir
}

/// A minimal CSV reader (quoted cells may hold commas and doubled quotes).
fn read_csv(path: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rows = Vec::new();
    for line in text.lines() {
        let mut cells = Vec::new();
        let mut cell = String::new();
        let mut quoted = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    cell.push('"');
                    chars.next();
                }
                ('"', _) => quoted = !quoted,
                (',', false) => cells.push(std::mem::take(&mut cell)),
                _ => cell.push(c),
            }
        }
        cells.push(cell);
        rows.push(cells);
    }
    rows
}

/// The leading number of a cell such as `1.023 (0.98–1.10)`.
fn num(cell: &str) -> f64 {
    cell.split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a number: {cell:?}"))
}

fn column(rows: &[Vec<String>], name: &str) -> usize {
    rows[0]
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name:?} in {:?}", rows[0]))
}

fn svg_ok(path: &Path) {
    let s = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        s.starts_with("<svg") && s.trim_end().ends_with("</svg>"),
        "{}",
        path.display()
    );
}

#[test]
fn workloads_build_and_run() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if tools_present().is_none() {
        return;
    }
    let dir = run("workloads");
    let rows = read_csv(&dir.join("workloads.csv"));
    let names: Vec<&str> = rows[1..].iter().map(|r| r[0].as_str()).collect();
    assert_eq!(names, ["lua", "bzip2", "python3", "xz"]);
    for r in &rows[1..] {
        assert!(num(&r[5]) > 0.0 && num(&r[6]) > 0.0, "{r:?}");
        assert_ne!(r[3], r[4], "train and eval inputs must differ");
    }
}

#[test]
fn overhead_table_breakdown_and_factors() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if tools_present().is_none() {
        return;
    }
    let dir = run("overhead");
    let t1 = read_csv(&dir.join("table1.csv"));
    assert_eq!(t1.len(), 1 + 4 + 1, "4 workloads and a geomean row: {t1:?}");
    assert_eq!(t1.last().unwrap()[0], "geomean");
    for r in &t1[1..t1.len() - 1] {
        assert!(num(&r[1]) > 0.0, "{r:?}");
        for cell in &r[2..] {
            let ratio = num(cell);
            assert!(ratio.is_finite() && ratio > 0.0, "{r:?}");
        }
    }
    let f = read_csv(&dir.join("factors.csv"));
    assert_eq!(f.len(), 5, "{f:?}");
    let (tc, sc) = (
        column(&f, "t (taken fraction)"),
        column(&f, "s (static fraction)"),
    );
    for r in &f[1..] {
        let (t, s) = (num(&r[tc]), num(&r[sc]));
        assert!((0.0..=1.0).contains(&t) && (0.0..1.0).contains(&s), "{r:?}");
        assert!(num(&r[column(&f, "dynamically evaluated")]) > 0.0, "{r:?}");
    }
    let b = read_csv(&dir.join("breakdown.csv"));
    assert!(b.len() > 1);
    let mut sampled = std::collections::BTreeSet::new();
    for r in &b[1..] {
        // The components and the (negative or zero) noise add up to 100%
        // (emulation is a part of the handlers' time, not a component).
        let noise = column(&b, "noise (negative residual) %");
        let parts: f64 = [
            "application %",
            "kernel traps, signals, other %",
            "breakpoint handler %",
            "sampling handler %",
            "worker thread %",
            "start and stop %",
        ]
        .iter()
        .map(|c| num(&r[column(&b, c)]))
        .sum::<f64>()
            + num(&r[noise]);
        assert!((parts - 100.0).abs() < 0.5, "{r:?}");
        assert!(
            num(&r[column(&b, "noise (negative residual) %")]) <= 0.0,
            "{r:?}"
        );
        assert!(
            num(&r[column(&b, "kernel traps, signals, other %")]) >= 0.0,
            "{r:?}"
        );
        // Decoding and emulation happen inside the handlers.
        let handlers =
            num(&r[column(&b, "breakpoint handler %")]) + num(&r[column(&b, "sampling handler %")]);
        for within in [
            "of the handlers, emulation %",
            "of the handlers, decoding %",
        ] {
            assert!(num(&r[column(&b, within)]) <= handlers + 0.01, "{r:?}");
        }
        if num(&r[column(&b, "samples/run")]) > 0.0 {
            // A profiled run started a session and wrote its outputs.
            assert!(num(&r[column(&b, "start and stop %")]) > 0.0, "{r:?}");
            sampled.insert(r[0].clone());
        }
    }
    assert_eq!(
        sampled.len(),
        4,
        "every workload sampled at some rate: {b:?}"
    );
    for p in ["overhead_vs_rate.svg", "breakdown.svg", "factors.svg"] {
        svg_ok(&dir.join(p));
    }
    // Each mode's cost of a trace, per workload: emulate stops least.
    let c = read_csv(&dir.join("trace_cost.csv"));
    let (stops, mode) = (column(&c, "stops/trace"), column(&c, "mode"));
    for w in ["lua", "bzip2", "python3", "xz"] {
        let of = |m: &str| {
            c[1..]
                .iter()
                .find(|r| r[0] == w && r[mode] == m)
                .map(|r| num(&r[stops]))
                .unwrap_or_else(|| panic!("no {m} row for {w}: {c:?}"))
        };
        assert!(
            of("emulate") < of("paper"),
            "{w}: emulate {} stops per trace, paper {}",
            of("emulate"),
            of("paper")
        );
    }
    // Emulation decodes the code it meets first; decoding is a part of it.
    let (decodes, decoding) = (
        column(&c, "decodes/100 instructions"),
        column(&c, "decoding % of emulation"),
    );
    // Issue 17's rate: recorded branches per µs of the handlers' time.
    let rate = column(&c, "branches/µs of handler time");
    for r in c[1..].iter().filter(|r| r[mode] == "emulate") {
        assert!(num(&r[decodes]) > 0.0, "{r:?}");
        let share = num(&r[decoding]);
        assert!(share > 0.0 && share < 100.0, "{r:?}");
        let per_us = num(&r[rate]);
        assert!(per_us > 0.0 && per_us.is_finite(), "{r:?}");
    }
}

#[test]
fn quality_against_callgrind() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if tools_present().is_none() {
        return;
    }
    let dir = run("quality");
    let q = read_csv(&dir.join("quality.csv"));
    assert_eq!(q.len(), 1 + 4 * 2, "4 workloads x 2 periods: {q:?}");
    for r in &q[1..] {
        for name in [
            "instruction overlap",
            "function overlap",
            "taken-edge overlap",
        ] {
            let v = num(&r[column(&q, name)]);
            assert!(v > 0.0 && v <= 1.0, "{name} {r:?}");
        }
        // The tracer must never invent a branch: every entry is a real
        // transfer of the binary and one callgrind saw taken on the same
        // input, except on branches that decide on a pointer's high bits
        // (CPython's obmalloc radix tree), whose way depends on the address
        // layout: ASLR natively, valgrind's own under callgrind. Those are
        // counted apart; everything else is an exact 0.
        assert_eq!(num(&r[column(&q, "invalid entries")]), 0.0, "{r:?}");
        let unseen = num(&r[column(&q, "edges not taken in reference")]);
        let layout = num(&r[column(&q, "of which pointer-range tests")]);
        let compared = num(&r[column(&q, "entries compared with reference edges")]);
        assert!(compared > 0.0, "{r:?}");
        assert!(layout <= unseen, "{r:?}");
        assert_eq!(
            unseen - layout,
            0.0,
            "entries on edges callgrind never took, outside pointer-range tests: {r:?}"
        );
        let sim = &r[column(&q, "function similarity (AutoFDO)")];
        if r[0] == "lua" || r[0] == "bzip2" {
            let v = num(sim);
            assert!((0.0..=1.0).contains(&v), "{r:?}");
        }
    }
    // At the fastest rate every workload's profile resembles the truth.
    for r in q[1..].iter().filter(|r| r[1] == "1") {
        let v = num(&r[column(&q, "function overlap")]);
        assert!(
            v > 0.0,
            "nothing of the profile overlaps the reference: {r:?}"
        );
    }
    svg_ok(&dir.join("instruction_overlap.svg"));
}

#[test]
fn fdo_variants_build_and_time() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if tools_present().is_none() {
        return;
    }
    let dir = run("fdo");
    let s = read_csv(&dir.join("speedup.csv"));
    assert_eq!(s[1][0], "bzip2");
    for cell in &s[1][1..] {
        let v = num(cell);
        assert!(v.is_finite() && v > 0.0, "{:?}", s[1]);
    }
    svg_ok(&dir.join("speedup.svg"));
}

/// `csspgo --quick`: every variant of bzip2 builds and runs, the -g
/// recordings carry stacks (none cut, none missing beyond a few), and the
/// depth table is written.
#[test]
fn csspgo_variants_build_and_time() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if tools_present().is_none() {
        return;
    }
    let dir = run("csspgo");
    let s = read_csv(&dir.join("speedup.csv"));
    assert_eq!(s[1][0], "bzip2");
    for cell in &s[1][1..] {
        let v = num(cell);
        assert!(v.is_finite() && v > 0.0, "a variant failed: {:?}", s[1]);
    }
    let cost = read_csv(&dir.join("cost.csv"));
    let (recording, traces, stacks) = (
        column(&cost, "recording"),
        column(&cost, "traces"),
        column(&cost, "stacks"),
    );
    for row in &cost[1..] {
        let with_g = row[recording].contains("-g");
        let (t, n) = (num(&row[traces]), num(&row[stacks]));
        assert!(t > 0.0, "{row:?}");
        assert_eq!(n > 0.0, with_g, "stacks only, and always, with -g: {row:?}");
    }
    assert!(
        read_csv(&dir.join("depth.csv")).len() > 1,
        "no stack depths"
    );
    svg_ok(&dir.join("speedup.svg"));
}

/// `verify --quick`: every workload run with each of the emulator's
/// predictions checked at a real stop: none may be wrong.
#[test]
fn verify_reports_mismatches_per_workload() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if tools_present().is_none() {
        return;
    }
    let dir = run("verify");
    let v = read_csv(&dir.join("verify.csv"));
    let names: Vec<&str> = v[1..].iter().map(|r| r[0].as_str()).collect();
    assert_eq!(names, ["lua", "bzip2", "python3", "xz"], "{v:?}");
    let (checked, mismatches) = (column(&v, "predictions checked"), column(&v, "mismatches"));
    for r in &v[1..] {
        assert_eq!(r.len(), v[0].len(), "{r:?} under {:?}", v[0]);
        assert!(num(&r[checked]) > 0.0, "no prediction checked: {r:?}");
        assert!(num(&r[mismatches]) <= num(&r[checked]), "{r:?}");
        // Every prediction the emulator made is what the thread did:
        // target, stop (pc and exact rsp) and registers.
        assert_eq!(
            num(&r[mismatches]),
            0.0,
            "the emulator predicted a transfer or stop the thread did not make: {r:?}"
        );
        assert_eq!(
            num(&r[column(&v, "stops with other registers than predicted")]),
            0.0,
            "the emulator predicted registers the thread did not have: {r:?}"
        );
        eprintln!(
            "verify --quick: {}: {} mismatches in {} predictions",
            r[0], r[mismatches], r[checked]
        );
    }
}

#[test]
fn breakpoint_cost() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = run("bpcost");
    let b = read_csv(&dir.join("bpcost.csv"));
    assert_eq!(b.len(), 3, "1 and 2 threads: {b:?}");
    for r in &b[1..] {
        for c in 1..5 {
            assert!(num(&r[c]) > 0.0, "{r:?}");
        }
    }
    svg_ok(&dir.join("bpcost.svg"));
}

/// `brr --quick`: the brr crate's experiment, then the same microbenchmark
/// under the software tracer, in one comparison table.
#[test]
fn brr_and_the_tracer_compared() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if tools_present().is_none() || tools::require("musl-gcc").is_none() {
        return;
    }
    let results = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("smoke-results")
        .join("brr");
    let _ = std::fs::remove_dir_all(&results);
    let out = Command::new(env!("CARGO_BIN_EXE_bench-harness"))
        .args(["brr", "--quick", "--cache"])
        .arg(cache())
        .arg("--results")
        .arg(&results)
        .output()
        .expect("bench-harness runs");
    assert!(
        out.status.success(),
        "bench-harness brr --quick failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = read_csv(&results.join("brr").join("comparison.csv"));
    let method = column(&rows, "method");
    let overlap = column(&rows, "edge-profile overlap");
    let tracer: Vec<_> = rows[1..]
        .iter()
        .filter(|r| r[method] == "software branch tracer")
        .collect();
    assert!(!tracer.is_empty(), "no tracer row: {rows:?}");
    for r in &tracer {
        let o = num(&r[overlap]);
        assert!(o > 0.5 && o <= 1.0, "tracer overlap out of range: {r:?}");
    }
    assert!(
        rows[1..].iter().any(|r| r[method] == "branch-on-random"),
        "no brr row: {rows:?}"
    );
}

#[test]
fn bad_arguments_are_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_bench-harness"))
        .arg("nonsense")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown experiment 'nonsense'"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_bench-harness"))
        .args(["overhead", "--cache"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cache needs a directory"));
}

/// `tracelen --quick`: traces of 32 and 128 branches on every quick
/// workload; every entry valid, every score a fraction, the cost per 32
/// branches a number (never how large: that depends on the machine).
#[test]
fn tracelen_scores_each_trace_length() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if tools_present().is_none() {
        return;
    }
    let dir = run("tracelen");
    let t = read_csv(&dir.join("tracelen.csv"));
    assert_eq!(t.len(), 1 + 4 * 2, "4 workloads x 2 trace lengths: {t:?}");
    for r in &t[1..] {
        assert_eq!(num(&r[column(&t, "invalid entries")]), 0.0, "{r:?}");
        for name in ["instruction overlap", "taken-edge overlap"] {
            let v = num(&r[column(&t, name)]);
            assert!(v > 0.0 && v <= 1.0, "{name} {r:?}");
        }
        assert!(num(&r[column(&t, "CPU overhead")]) > 0.0, "{r:?}");
        assert!(num(&r[column(&t, "traces per run")]) > 0.0, "{r:?}");
        assert!(
            num(&r[column(&t, "extra µs per 32 branches")]).is_finite(),
            "{r:?}"
        );
    }
    svg_ok(&dir.join("lua_overlap_vs_overhead.svg"));
}

/// `levels --quick`: the multi-threaded string workload at each glibc
/// level, each with traces and segments, and every per-trace figure a
/// number (never how large: the forms a level needs are
/// tests/glibc_levels.rs's business). Not a segment for every trace: a
/// trace whose sample lands on an instruction the core steps over, and
/// that ends before a segment (its resume point unreached, the handler's
/// budget), has none, and a quick run takes about 20 traces (0.95 was
/// seen on an AMD Zen 5 machine).
#[test]
fn levels_measures_each_glibc_level() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if tools_present().is_none() {
        return;
    }
    let dir = run("levels");
    let t = read_csv(&dir.join("levels.csv"));
    assert_eq!(t.len(), 1 + 4, "strings_mt x 4 levels: {t:?}");
    for r in &t[1..] {
        assert!(num(&r[column(&t, "traces per run")]) > 0.0, "{r:?}");
        assert!(num(&r[column(&t, "segments per trace")]) > 0.0, "{r:?}");
        for name in ["stops per trace", "step-overs per trace"] {
            assert!(num(&r[column(&t, name)]).is_finite(), "{name} {r:?}");
        }
        assert!(num(&r[column(&t, "CPU overhead")]) > 0.0, "{r:?}");
    }
}

/// The function symbols of an executable, by address: the layout.
fn function_order(exe: &Path) -> Vec<String> {
    use object::{Object, ObjectSymbol, SymbolKind};
    let data = std::fs::read(exe).unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
    let file = object::File::parse(&*data).unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
    let mut syms: Vec<(u64, String)> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
        .filter_map(|s| Some((s.address(), s.name().ok()?.to_string())))
        .collect();
    syms.sort();
    syms.into_iter().map(|(_, n)| n).collect()
}

/// `fdo-layouts --quick`: each variant's shuffled layouts put the same
/// functions in other orders (read here from the binaries, not from the
/// harness's own check), print byte for byte what every other build of
/// bzip2 prints, and the summary has its columns and a sane speedup.
#[test]
fn fdo_layouts_shuffle_functions_not_results() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if tools_present().is_none() || tools::require("ld.lld-19").is_none() {
        return;
    }
    let results = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("smoke-results")
        .join("fdo-layouts");
    let _ = std::fs::remove_dir_all(&results);
    let out = Command::new(env!("CARGO_BIN_EXE_bench-harness"))
        .args(["fdo-layouts", "--quick", "--cache"])
        .arg(cache())
        .arg("--results")
        .arg(&results)
        .output()
        .expect("bench-harness runs");
    assert!(
        out.status.success(),
        "bench-harness fdo-layouts --quick failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = results.join("fdo");
    let failures = read_csv(&dir.join("layouts_failures.csv"));
    assert!(failures.len() == 1, "failed steps: {failures:?}");

    let bins = read_csv(&dir.join("layouts_binaries.csv"));
    let (v, l, b) = (
        column(&bins, "variant"),
        column(&bins, "layout"),
        column(&bins, "binary"),
    );
    let input = cache().join("inputs-quick").join("text-eval.txt");
    let run_bzip2 = |exe: &Path| {
        let o = Command::new(exe)
            .args(["-c", "-9"])
            .arg(&input)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", exe.display());
        o.stdout
    };
    let mut expected: Option<Vec<u8>> = None;
    let variants = [
        "baseline -O2",
        "AutoFDO, ours (emulate) via llvm-profgen",
        "instrumented PGO",
    ];
    for variant in variants {
        let rows: Vec<&Vec<String>> = bins[1..].iter().filter(|r| r[v] == variant).collect();
        let path = |layout: &str| {
            let r = rows
                .iter()
                .find(|r| r[l] == layout)
                .unwrap_or_else(|| panic!("{variant}: no {layout} in {bins:?}"));
            cache().join(&r[b])
        };
        let orders: Vec<Vec<String>> = ["lld, unshuffled", "seed 1", "seed 2"]
            .iter()
            .map(|layout| function_order(&path(layout)))
            .collect();
        let sorted = |o: &Vec<String>| {
            let mut s = o.clone();
            s.sort();
            s
        };
        assert_eq!(
            sorted(&orders[0]),
            sorted(&orders[1]),
            "{variant}: other functions"
        );
        assert_ne!(orders[0], orders[1], "{variant}: seed 1 is not shuffled");
        assert_ne!(
            orders[1], orders[2],
            "{variant}: seeds 1 and 2 give one layout"
        );
        for layout in ["lld, unshuffled", "seed 1", "seed 2"] {
            let printed = run_bzip2(&path(layout));
            assert!(!printed.is_empty());
            match &expected {
                None => expected = Some(printed),
                Some(e) => assert!(*e == printed, "{variant} {layout}: other output"),
            }
        }
    }

    let s = read_csv(&dir.join("layouts_summary.csv"));
    for name in [
        "speedup",
        "speedup 95% CI",
        "single-layout 95% range",
        "layout CV (%)",
        "run-to-run CV (%)",
        "exceeds layout noise",
    ] {
        column(&s, name);
    }
    assert_eq!(s.len(), 1 + variants.len(), "{s:?}");
    for r in &s[1..] {
        assert_eq!(r[0], "bzip2");
        assert_eq!(num(&r[column(&s, "layouts")]), 2.0, "{r:?}");
        let x = num(&r[column(&s, "speedup")]);
        assert!(x.is_finite() && x > 0.5 && x < 2.0, "{r:?}");
    }
    let raw = read_csv(&dir.join("layouts.csv"));
    let seeded = raw[1..]
        .iter()
        .filter(|r| !r[column(&raw, "seed")].is_empty())
        .count();
    assert_eq!(
        seeded,
        2 * variants.len(),
        "one timed run per layout: {raw:?}"
    );
    svg_ok(&dir.join("layouts.svg"));
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(readme.contains("## Layout noise"), "{readme}");
}
