//! The BOLT pre-aggregated profile is accepted by the real llvm-bolt-19 and
//! matches the binary's code (no trace that disagrees with the disassembly).

mod common;

use std::process::Command;

use common::*;

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
    check_summary(&load(&out));
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
    let result = Command::new(bolt)
        .arg(&binary)
        .arg("-o")
        .arg(&bolted)
        .args(["-pa", "-p"])
        .arg(&fdata)
        .output()
        .expect("llvm-bolt-19 runs");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    assert!(
        result.status.success(),
        "llvm-bolt-19 refused the profile:\n{log}"
    );
    assert!(
        log.contains("traces mismatching disassembled function contents: 0"),
        "BOLT found traces that disagree with the code:\n{log}"
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
