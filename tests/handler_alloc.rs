//! The handler path allocates nothing: every allocation made on the traced
//! thread while a real session samples it and real breakpoints stop it is
//! counted, by the library's own heap (`breakdance::alloc`, the global
//! allocator of every program that links the library). The thread itself
//! runs a loop that does not allocate, so any allocation counted came from
//! a handler.

use std::hint::black_box;

use breakdance::alloc;
use breakdance::control::config::Options;
use breakdance::control::session;
use breakdance::sys;

/// Branchy work the compiler cannot fold: a jcc per iteration, calls
/// through a table, returns.
#[inline(never)]
fn work(n: u64) -> u64 {
    let steps: [fn(u64) -> u64; 3] = [|x| x.wrapping_mul(3) + 1, |x| x / 2, |x| x ^ 0x55];
    let mut x = 7u64;
    let mut acc = 0u64;
    for i in 0..n {
        let f = black_box(steps[(x % 3) as usize]);
        x = f(x) ^ i;
        if x & 4 == 0 {
            acc = acc.wrapping_add(x);
        }
    }
    acc
}

/// What one mode must show to prove anything: enough samples, and enough
/// handler work at breakpoints (paper and verify stop at every
/// branch they cannot resolve; emulate stops at most about once a trace,
/// and not at all when a trace reads no memory another thread could
/// change, so its emulated segments count instead).
fn enough(mode: &str, samples: u64, breakpoints: u64, segments: u64) -> bool {
    match mode {
        "emulate" => samples > 200 && segments > 200,
        _ => samples > 50 && breakpoints > 2_000,
    }
}

/// Runs one session in `mode` (with `more` options) on this thread while
/// it does allocation-free work, and returns the allocations counted on
/// the thread meanwhile.
fn allocations_in(mode: &str, more: &str) -> u64 {
    let dir = std::env::temp_dir().join(format!("bd-alloc-{}-{mode}", std::process::id()));
    let options = Options::parse_words(&format!(
        "event=task-clock period=200000 lbr=32 lookahead={mode} {more} out={}",
        dir.display()
    ))
    .expect("valid options");
    if let Err(e) = session::start(&options) {
        panic!("the session must start on this machine (hardware breakpoints and task-clock): {e}");
    }
    let tracer = breakdance::trace::tracer().expect("a tracer after start");
    let before = tracer.totals();
    alloc::watch_thread(sys::gettid());
    let mut acc = 0;
    // Run until enough real stops happened: bounded by the work done, not
    // by time, so that a slow or loaded machine just takes longer, and a
    // broken tracer fails the assertion below instead of hanging.
    for _ in 0..20_000 {
        acc ^= work(black_box(2_000_000));
        let now = tracer.totals();
        if enough(
            mode,
            now.samples - before.samples,
            now.breakpoints - before.breakpoints,
            now.segments - before.segments,
        ) {
            break;
        }
    }
    let n = alloc::watched_allocations();
    alloc::watch_thread(0);
    black_box(acc);
    let after = tracer.totals();
    let summary = session::stop().expect("stop writes the profile");
    let _ = std::fs::remove_dir_all(&dir);

    let samples = after.samples - before.samples;
    let breakpoints = after.breakpoints - before.breakpoints;
    let segments = after.segments - before.segments;
    assert!(
        enough(mode, samples, breakpoints, segments),
        "{mode}: too little handler work to prove anything: {samples} samples, \
         {breakpoints} breakpoints, {segments} emulated segments"
    );
    assert!(summary.contains("\"traces_completed\""));
    if more.contains("values") {
        let loads = after.loads_recorded - before.loads_recorded;
        assert!(loads > 1000, "{mode} {more}: only {loads} loads recorded");
    }
    if more.contains("callstack") {
        let stacks = after.callstacks - before.callstacks;
        assert!(
            stacks > 100,
            "{mode} {more}: only {stacks} call stacks taken"
        );
    }
    eprintln!(
        "{mode}: {samples} samples, {breakpoints} breakpoints, {segments} segments, {n} allocations"
    );
    n
}

/// Every look-ahead mode, one after the other (one session at a time in a
/// process): the handlers of each allocate nothing.
#[test]
fn handlers_allocate_nothing_while_real_signals_fire() {
    for (mode, more) in [
        ("paper", ""),
        ("emulate", ""),
        ("verify", ""),
        ("emulate", "callstack=128"),
        ("emulate", "callstack=128 unwind=dwarf"),
        ("emulate", "values=1"),
    ] {
        assert_eq!(
            allocations_in(mode, more),
            0,
            "{mode} {more}: the handler path allocated"
        );
    }
}
