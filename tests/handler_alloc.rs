//! The handler path allocates nothing: a counting global allocator records
//! every allocation made on the traced thread while a real session samples
//! it and real breakpoints stop it. The thread itself runs a loop that does
//! not allocate, so any allocation counted came from a handler.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use breakdance::control::config::Options;
use breakdance::control::session;
use breakdance::sys;

struct Counting;

static WATCHED_TID: AtomicI32 = AtomicI32::new(0);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

fn note() {
    let watched = WATCHED_TID.load(Ordering::Relaxed);
    if watched != 0 && sys::gettid() == watched {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator, only counting.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

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
    ALLOCATIONS.store(0, Ordering::SeqCst);
    WATCHED_TID.store(sys::gettid(), Ordering::SeqCst);
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
    WATCHED_TID.store(0, Ordering::SeqCst);
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
    let n = ALLOCATIONS.load(Ordering::SeqCst);
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
