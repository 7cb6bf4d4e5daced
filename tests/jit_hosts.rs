//! JIT hosts and interpreters under `record`: node (V8, with a thread of
//! 32 KiB of stack), python3 and a JVM (HotSpot, which takes SIGSEGV for
//! its own null checks and safepoints) print and exit exactly as they do
//! natively, every recorded entry is a real transfer of their modules, and
//! the counters reconcile. Code the JIT generates is in no module: traces
//! that reach it end (counted as outside_mappings), never record it.

mod common;

use std::path::Path;

use common::*;

/// Records `program args` with `options` and compares it with the native run.
fn check_host(name: &str, program: &Path, args: &[&str], options: &[&str]) {
    let tracer = tracer();
    let scratch = Scratch::new(&format!("jit-{name}"));
    let native = run_native(program, args, &[]);
    assert!(
        native.status.code().is_some(),
        "{name}: the native run did not exit: {native:?}"
    );
    let out = scratch.path("out");
    let profiled = record_with(&tracer, &out, 1_000_000, options, program, args, &[]);
    assert_same_behaviour(name, &native, &profiled);
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces(name, &rec);
    assert!(
        counter(&rec.summary, "threads") >= 2,
        "{name}: only the main thread was traced: {}",
        rec.summary
    );
}

fn program(name: &str) -> String {
    program_source(name).display().to_string()
}

/// node in every look-ahead mode: the modes that emulate used to build
/// their emulator on the stack, and node died with SIGSEGV in each.
#[test]
fn node_runs_as_natively_in_every_mode() {
    let Some(node) = tool("node") else {
        return;
    };
    let script = program("jit_host.js");
    for mode in ["emulate", "verify", "paper"] {
        check_host(
            &format!("node {mode}"),
            &node,
            &[&script],
            &["--lookahead", mode],
        );
    }
}

#[test]
fn python3_runs_as_natively() {
    let Some(python) = tool("python3") else {
        return;
    };
    check_host("python3", &python, &[&program("jit_host.py")], &[]);
}

/// The JVM in the default mode and in paper mode (HotSpot's SIGSEGV
/// handler chains through ours in emulate mode only).
#[test]
fn java_runs_as_natively() {
    let Some(java) = tool("java") else {
        return;
    };
    // Source-file mode compiles JitHost.java in the JVM itself: no javac.
    let source = program("JitHost.java");
    for mode in ["emulate", "paper"] {
        check_host(
            &format!("java {mode}"),
            &java,
            &["-Xshare:auto", &source],
            &["--lookahead", mode],
        );
    }
}
