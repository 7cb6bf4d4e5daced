//! Thread stacks: the tracer fits beside any thread's stack.
//!
//! Registration runs on the new thread itself, and every handler runs on
//! the interrupted thread's stack, which may be as small as
//! `PTHREAD_STACK_MIN` (16 KiB with glibc; node has a thread with 32 KiB).
//! The stack budget (README and ARCHITECTURE.md, "Stack budget"): beyond
//! the kernel's own signal frame, registration and the handlers together
//! use at most `HANDLER_STACK_BUDGET` bytes of the thread's stack.

mod common;

use common::*;

/// Bytes of a thread's stack that registration and the handlers may use
/// beyond the kernel's signal frame (AT_MINSIGSTKSZ).
const HANDLER_STACK_BUDGET: u64 = 4096;

/// Each look-ahead mode, emulate with call stacks taken each way, and
/// emulate recording load values.
const MODES: [(&str, &[&str]); 6] = [
    ("paper", &["--lookahead", "paper"]),
    ("emulate", &["--lookahead", "emulate"]),
    ("verify", &["--lookahead", "verify"]),
    ("emulate -g", &["-g"]),
    ("emulate -g dwarf", &["-g", "--unwind", "dwarf"]),
    ("emulate --values", &["--values"]),
];

/// Rounds of work per thread: about 0.15 s of CPU each here, so that a
/// 200 µs period takes hundreds of samples in each thread.
const ROUNDS: &str = "100000";

/// `high_water=N min_sigstack=N` from the program's STACK_REPORT file.
fn stack_report(path: &std::path::Path) -> (u64, u64) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let field = |name: &str| -> u64 {
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{}: no {name} in {text:?}", path.display()))
    };
    (field("high_water"), field("min_sigstack"))
}

/// Four threads on `PTHREAD_STACK_MIN` stacks and one on a canary-filled
/// stack run string functions, qsort and snprintf under every look-ahead
/// mode, sampled every 200 µs: the program's output and exit status are
/// as native, every trace is valid, the threads were traced, and the
/// canary thread's high-water mark exceeds the native one by no more than
/// the kernel's signal frame plus the budget.
///
/// Fails on a per-thread structure built on the stack (the emulator's
/// logs were about 50 KiB: SIGSEGV on the small stacks, and a high-water
/// mark far over the budget on the measured one) and on a handler frame
/// that holds a register file (2.4 KiB) or more.
#[test]
fn small_stacks_in_every_mode_and_the_handler_stack_budget() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("stacks");
    let program = build(
        &clang,
        &scratch.0,
        "small_stacks",
        &["small_stacks.c"],
        &["-pthread"],
    );
    let native_report = scratch.path("native.stack");
    let native = run_native(
        &program,
        &[ROUNDS],
        &[("STACK_REPORT", native_report.as_os_str())],
    );
    assert!(native.status.success(), "native run failed: {native:?}");
    let (native_high, min_sigstack) = stack_report(&native_report);
    assert!(min_sigstack > 0, "the kernel gives no AT_MINSIGSTKSZ");
    for (mode, options) in MODES {
        let tag = mode.replace(' ', "-");
        let out = scratch.path(&format!("out-{tag}"));
        let report = scratch.path(&format!("{tag}.stack"));
        let profiled = record_with(
            &tracer,
            &out,
            200_000,
            options,
            &program,
            &[ROUNDS],
            &[("STACK_REPORT", report.as_os_str())],
        );
        assert_same_behaviour(&format!("small_stacks {mode}"), &native, &profiled);
        let rec = load(&out);
        check_summary(&rec);
        assert_valid_traces(&format!("small_stacks {mode}"), &rec);
        // Main, the four small threads and the canary thread.
        assert!(
            counter(&rec.summary, "threads") >= 6,
            "{mode}: not every thread was traced: {}",
            rec.summary
        );
        let samples = counter(&rec.summary, "samples");
        assert!(
            samples >= 100,
            "{mode}: {samples} samples: too few to reach the deep points"
        );
        let (high, _) = stack_report(&report);
        let added = high.saturating_sub(native_high);
        let handlers = added.saturating_sub(min_sigstack);
        eprintln!(
            "{mode}: stack high-water {high} B (native {native_high} B): the tracer added {added} B, \
             {handlers} B beyond the kernel's {min_sigstack} B signal frame; {samples} samples"
        );
        assert!(
            handlers <= HANDLER_STACK_BUDGET,
            "{mode}: registration and handlers used {handlers} B of the thread's stack beyond \
             the kernel's signal frame, over the {HANDLER_STACK_BUDGET} B budget"
        );
    }
}

/// A program run with a small limit on its main thread's stack
/// (`ulimit -s 64`, as a container or a careful parent may set): the
/// session starts on that thread under autostart, and the library must
/// fit in it. The rlimit is set for `profiler-ctl record`, which passes it
/// on to the program.
///
/// Fails when a large structure is built on the starting thread's stack:
/// the executable-mapping table (139 KiB) was, and the program died of
/// SIGSEGV before main at any limit under about 150 KiB.
#[test]
fn a_small_main_thread_stack_limit() {
    use std::os::unix::process::CommandExt;
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("stack-limit");
    let program = build(&clang, &scratch.0, "branchy", &["branchy.c"], &["-O2"]);
    let limited = |command: &mut std::process::Command| -> std::process::Output {
        // SAFETY: setrlimit(2) is async-signal-safe, as pre_exec requires.
        unsafe {
            command.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: 64 * 1024,
                    rlim_max: libc::RLIM_INFINITY,
                };
                if libc::setrlimit(libc::RLIMIT_STACK, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        command.output().expect("runs")
    };
    let native = limited(std::process::Command::new(&program).arg("5000000"));
    assert!(
        native.status.success(),
        "native run with a 64 KiB stack limit: {native:?}"
    );
    let out = scratch.path("out");
    let profiled = limited(
        std::process::Command::new(&tracer.ctl)
            .args(["record", "-q", "-c", "1000000", "-o"])
            .arg(&out)
            .arg("--")
            .arg(&program)
            .arg("5000000"),
    );
    assert_same_behaviour("branchy with a 64 KiB stack limit", &native, &profiled);
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces("branchy with a 64 KiB stack limit", &rec);
    assert!(
        counter(&rec.summary, "traces_completed") > 0,
        "no trace: {}",
        rec.summary
    );
}
