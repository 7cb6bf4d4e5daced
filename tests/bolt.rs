//! The BOLT pre-aggregated profile is accepted by the real llvm-bolt-19 and
//! matches the binary's code (no trace that disagrees with the disassembly).

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use object::{Object, ObjectSymbol, SymbolKind};

/// The functions branchy.c defines.
const OWN: [&str; 5] = ["main", "next_random", "hottest", "warm", "cold"];

/// The address ranges of `names` in `binary`'s symbol table.
fn function_ranges(binary: &Path, names: &[&str]) -> Vec<(u64, u64)> {
    let data = std::fs::read(binary).unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
    let file = object::File::parse(&*data).unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
    let ranges: Vec<(u64, u64)> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && names.contains(&s.name().unwrap_or("")))
        .map(|s| (s.address(), s.address() + s.size()))
        .collect();
    assert_eq!(
        ranges.len(),
        names.len(),
        "{names:?} in {}",
        binary.display()
    );
    ranges
}

/// Runs llvm-bolt-19 on `binary` with the pre-aggregated profile `fdata`;
/// its status and log.
fn bolt_with(bolt: &Path, binary: &Path, out: &Path, fdata: &Path) -> (bool, String) {
    let result = Command::new(bolt)
        .arg(binary)
        .arg("-o")
        .arg(out)
        .args(["-pa", "-p"])
        .arg(fdata)
        .output()
        .expect("llvm-bolt-19 runs");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    (result.status.success(), log)
}

#[test]
fn llvm_bolt_accepts_the_preaggregated_profile() {
    let tracer = tracer();
    let (Some(clang), Some(bolt)) = (tool("clang-19"), tool("llvm-bolt-19")) else {
        return;
    };
    let dir = Scratch::new("bolt");
    // BOLT rewrites binaries linked with their relocations kept.
    // -fno-plt: BOLT does not disassemble .plt as functions, so a trace
    // through a lazily bound PLT stub (a first call of a libc function,
    // caught when a sample lands before it) shows as fall-throughs it
    // counts as "mismatching": real branches, but not ones this test can
    // tell from wrong ones (seen once in CI: the three fall-throughs of
    // the lazy-binding path, F 1020 1026, F 1040 1040, F 1046 104b).
    let binary = build(
        &clang,
        &dir.0,
        "branchy",
        &["branchy.c"],
        &["-Wl,--emit-relocs", "-fno-plt"],
    );
    let out = dir.path("out");
    let run = record(&tracer, &out, 200_000, &binary, &["3000000"], &[]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let rec = load(&out);
    check_summary(&rec);
    // Every trace, startup and exit code included, agrees with the code
    // (the project's own check, against the disassembly).
    assert_valid_traces("branchy", &rec);
    let fdata = out.join("branchy.bolt.fdata");
    let text =
        std::fs::read_to_string(&fdata).unwrap_or_else(|e| panic!("{}: {e}", fdata.display()));
    assert!(
        text.lines().any(|l| l.starts_with("B ")),
        "no branch records in {}",
        fdata.display()
    );
    assert!(
        text.lines().any(|l| l.starts_with("F ")),
        "no fall-through records in {}",
        fdata.display()
    );
    let bolted = dir.path("branchy.bolt");
    let (ok, log) = bolt_with(&bolt, &binary, &bolted, &fdata);
    assert!(ok, "llvm-bolt-19 refused the profile:\n{log}");
    // BOLT counts as "mismatching" real traces through code it cannot
    // analyse: a PLT stub, or a function whose indirect jump it cannot
    // resolve (crt's deregister_tm_clones, met when a sample falls in the
    // exit handlers: F 1030 1030, F 1070 1081, F 1098 1098 once in CI).
    // The assertion above checks those; BOLT's own count must be 0 on the
    // program's functions.
    let own = function_ranges(&binary, &OWN);
    let inside = |a: &str| {
        u64::from_str_radix(a, 16).is_ok_and(|a| own.iter().any(|&(s, e)| (s..e).contains(&a)))
    };
    let own_records: String = text
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 3 && inside(f[1]) && inside(f[2])
        })
        .map(|l| format!("{l}\n"))
        .collect();
    // The check below covers nearly all of the profile: the branches
    // outside branchy.c's functions are the few of startup and exit.
    let weight = |records: &str| -> u64 {
        records
            .lines()
            .filter_map(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
            .sum()
    };
    assert!(
        weight(&own_records) * 100 >= weight(&text) * 99,
        "fewer than 99% of the profile's counts in branchy.c's functions:\n{text}"
    );
    let own_fdata = dir.path("own.fdata");
    std::fs::write(&own_fdata, &own_records).expect("writing own.fdata");
    let (ok, own_log) = bolt_with(&bolt, &binary, &dir.path("own.bolt"), &own_fdata);
    assert!(ok, "llvm-bolt-19 refused the profile:\n{own_log}");
    assert!(
        own_log.contains("traces mismatching disassembled function contents: 0"),
        "BOLT found traces in branchy.c's functions that disagree with the code:\n{own_log}"
    );
    assert!(
        log.contains("have non-empty execution profile"),
        "BOLT used no profile:\n{log}"
    );
    // The optimised binary still computes the same thing.
    let native = run_native(&binary, &["300000"], &[]);
    let optimised = run_native(&bolted, &["300000"], &[]);
    assert_eq!(native.stdout, optimised.stdout);
}
