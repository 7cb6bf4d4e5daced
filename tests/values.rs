//! Value profiles (`record --values`): the loads of validated segments
//! with the values they read, against a program whose loads read known
//! values.

mod common;

use std::collections::BTreeMap;

use bench_harness::elf::ElfModule;
use breakdance_protocol::values::{parse_values, LoadRow, VALUES_FILE};
use common::*;

/// Sampling period (task-clock ns).
const PERIOD_NS: u64 = 500_000;

/// Which of values.c's loads a row is, from its values alone (the three
/// sets are disjoint: see the program's comment); `None` for a value no
/// load of `work` reads.
fn kind_of(value: u64) -> Option<&'static str> {
    match value {
        7 => Some("table"),
        v if (1000..1000 + 4096).contains(&v) && (v - 1000) % 16 == 0 => Some("table"),
        100..=103 => Some("kinds"),
        42 => Some("constant"),
        _ => None,
    }
}

#[test]
fn a_value_profile_finds_each_loads_values_and_their_shares() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("values");
    let binary = build(&clang, &dir.0, "values", &["values.c"], &["-O2", "-g"]);
    let args = ["60000"];
    let native = run_native(&binary, &args, &[]);
    assert!(native.status.success(), "{native:?}");
    let out = dir.path("out");
    let profiled = record_with(&tracer, &out, PERIOD_NS, &["--values"], &binary, &args, &[]);
    assert_same_behaviour("values", &native, &profiled);
    let rec = load(&out);
    // Also: loads_recorded = Σ executions in values.csv + load_table_full.
    check_summary(&rec);
    assert_valid_traces("values", &rec);
    let s = &rec.summary;
    assert_eq!(counter(s, "drops.load_buffer_full"), 0, "{s}");
    let text = std::fs::read_to_string(out.join(VALUES_FILE)).expect("values.csv");
    let rows = parse_values(&text).unwrap_or_else(|e| panic!("{e}"));

    // Every load recorded in `work` reads one of the values the program
    // put there; each kind's values in the shares the program gives them,
    // whatever the unrolling.
    let module = ElfModule::load(&binary).expect("reading values");
    let work = module.symbol("work").expect("work in values");
    let in_work: Vec<&LoadRow> = rows
        .iter()
        .filter(|r| {
            r.module == binary && (work.address..work.address + work.size).contains(&r.vaddr)
        })
        .collect();
    // The values counted exactly, per kind, and each kind's executions
    // (with those whose value the library counted only as `other`: a
    // table load reads 257 values).
    let mut kinds: BTreeMap<&str, BTreeMap<u64, u64>> = BTreeMap::new();
    let mut executions: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &in_work {
        let first = kind_of(r.values[0].0).unwrap_or("none");
        *executions.entry(first).or_default() += r.executions;
        for &(value, n) in &r.values {
            let kind = kind_of(value).unwrap_or_else(|| {
                panic!("a load of work read {value:#x}, which the program never stores: {r:?}")
            });
            *kinds.entry(kind).or_default().entry(value).or_default() += n;
        }
        assert!(
            r.values.iter().all(|v| kind_of(v.0) == Some(first)),
            "one load read values of two kinds: {r:?}"
        );
    }
    let total = |k: &str| executions.get(k).copied().unwrap_or(0);
    for k in ["table", "kinds", "constant"] {
        assert!(
            total(k) >= 5_000,
            "too few {k} loads recorded to judge: {kinds:?}"
        );
    }
    let share = |k: &str, v: u64| kinds[k].get(&v).copied().unwrap_or(0) as f64 / total(k) as f64;
    let sevens = share("table", 7);
    assert!(
        (sevens - 15.0 / 16.0).abs() < 0.03,
        "table reads 7 in 15 of 16 slots; the profile says {sevens:.3}"
    );
    for v in 100..=103 {
        let q = share("kinds", v);
        assert!(
            (q - 0.25).abs() < 0.05,
            "kinds reads {v} in a quarter of its slots; the profile says {q:.3}"
        );
    }
    assert_eq!(
        kinds["constant"].len(),
        1,
        "constant always reads 42: {kinds:?}"
    );

    // values.txt names the loads by function and source line.
    let listing = std::fs::read_to_string(out.join("values.txt")).expect("values.txt");
    assert!(
        listing
            .lines()
            .any(|l| l.contains("work+0x") && l.contains("values.c:")),
        "values.txt does not place the loads in work at a line of values.c:\n{listing}"
    );
}

#[test]
fn values_are_refused_outside_emulate_mode() {
    let tracer = tracer();
    let dir = Scratch::new("values-refused");
    let out = dir.path("out");
    let refused = record_with(
        &tracer,
        &out,
        PERIOD_NS,
        &["--values", "--lookahead", "paper"],
        std::path::Path::new("/bin/true"),
        &[],
        &[],
    );
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "paper mode took --values: {err}");
    assert!(err.contains("values needs lookahead emulate"), "{err}");
}
