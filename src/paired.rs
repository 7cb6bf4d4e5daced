//! Paired timing of the emulation (`--features paired`: measurement builds
//! only, never shipped; see results/speed, "Paired timing").
//!
//! On this project's machines a whole run's CPU time moves by a third from
//! one run to the next, so a change of a few per cent to the core's speed
//! cannot be read from runs of two builds. A paired build times both
//! versions on the same traces instead: code under test asks
//! [`variant`] (always false in other builds, see `emulate::variant`) and
//! takes the new path when it is true. With `BREAKDANCE_MEASURE=
//! emulate-paired`, each sample emulates the trace from the sample's
//! registers four times, keeping nothing:
//!
//! - twice on cold caches, after a write sweep of [`SWEEP_BYTES`] and a
//!   run through 1 MiB of code that evict the handler's data and code
//!   lines as the application does between samples:
//!   once with `variant` false (A), once true (B), in an order that
//!   alternates from sample to sample;
//! - then twice again, A and B, on the caches the first two left (warm).
//!
//! `paired.txt` in the output directory gives the totals and the ratios
//! B / A, cold and warm, over all traces, with the median of the
//! per-trace ratios. A build where nothing asks `variant` is an A/A test:
//! its ratios show the method's own spread.
//!
//! One set of totals for the process: meant for single-threaded programs.
//! The statics are zero pages until used, so the handler allocates nothing.

use std::cell::UnsafeCell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

/// The sweep that stands for the application between samples: twice this
/// machine's L2 (2 MiB a core on the Xeon here).
pub const SWEEP_BYTES: usize = 4 << 20;
/// Traces whose ratios are kept for the medians.
const TRACES: usize = 1 << 16;

static VARIANT: AtomicBool = AtomicBool::new(false);

/// Whether the code under test takes its new path (B).
#[inline(always)]
pub fn variant() -> bool {
    VARIANT.load(Ordering::Relaxed)
}

struct Totals {
    sweep: [u64; SWEEP_BYTES / 8],
    /// Cold A, cold B, warm A, warm B (ns), and steps, summed.
    ns: [u64; 4],
    steps: u64,
    traces: usize,
    /// Steps that differed between A and B (the code under test changed
    /// what the emulation did: a defect, or a change of behaviour).
    step_mismatches: u64,
    /// Per-trace B / A, cold and warm.
    cold: [f32; TRACES],
    warm: [f32; TRACES],
    first_b: bool,
}

struct Cell(UnsafeCell<Totals>);
// SAFETY: written by one handler at a time (the measurement runs on
// single-threaded programs; see the module doc), read at the session's end.
unsafe impl Sync for Cell {}

static TOTALS: Cell = Cell(UnsafeCell::new(Totals {
    sweep: [0; SWEEP_BYTES / 8],
    ns: [0; 4],
    steps: 0,
    traces: 0,
    step_mismatches: 0,
    cold: [0.0; TRACES],
    warm: [0.0; TRACES],
    first_b: false,
}));

#[allow(clippy::mut_from_ref)]
fn totals() -> &'static mut Totals {
    // SAFETY: see `Cell`.
    unsafe { &mut *TOTALS.0.get() }
}

// The code half of the sweep: 256 pages of code (1 MiB), each
// run through 2 KiB of no-ops and then a jump to the next page, so that
// the handler's instructions leave the L1i cache (32 KiB here) and its
// pages the first-level iTLB, as the application's code makes them between
// two samples. A data sweep alone leaves both as the last pass had them.
std::arch::global_asm!(
    ".pushsection .text.breakdance_paired_code_sweep,\"ax\",@progbits",
    ".p2align 12",
    ".globl breakdance_paired_code_sweep",
    ".hidden breakdance_paired_code_sweep",
    "breakdance_paired_code_sweep:",
    ".rept 256",
    ".nops 2048",
    "jmp 1f",
    ".p2align 12",
    "1:",
    ".endr",
    "ret",
    ".popsection",
);

extern "C" {
    fn breakdance_paired_code_sweep();
}

/// Evicts the handler's lines: its data (a write sweep of
/// [`SWEEP_BYTES`]) and its code (see `breakdance_paired_code_sweep`).
fn sweep(t: &mut Totals) {
    // SAFETY: straight-line no-ops and jumps within the function, then a
    // return: no register but rip changes, no memory is touched.
    unsafe { breakdance_paired_code_sweep() };
    for (i, w) in t.sweep.iter_mut().enumerate().step_by(8) {
        // SAFETY: a valid, aligned word of the static.
        unsafe { std::ptr::write_volatile(w, i as u64) };
    }
}

/// One sample's four passes: `run(b)` emulates the trace afresh (from the
/// sample's registers) with `variant() == b` and returns (ns, steps).
pub fn sample(mut run: impl FnMut() -> (u64, u64)) {
    let t = totals();
    let first = t.first_b;
    t.first_b = !first;
    let mut ns = [0u64; 4];
    let mut steps = [0u64; 2];
    for (k, b) in [first, !first, first, !first].into_iter().enumerate() {
        if k < 2 {
            sweep(t);
        }
        VARIANT.store(b, Ordering::Relaxed);
        let (n, s) = run();
        ns[usize::from(b) + if k < 2 { 0 } else { 2 }] = n;
        steps[usize::from(b)] = s;
    }
    VARIANT.store(false, Ordering::Relaxed);
    for (sum, n) in t.ns.iter_mut().zip(ns) {
        *sum += n;
    }
    t.steps += steps[0];
    t.step_mismatches += u64::from(steps[0] != steps[1]);
    if t.traces < TRACES && ns[0] > 0 && ns[2] > 0 {
        t.cold[t.traces] = ns[1] as f32 / ns[0] as f32;
        t.warm[t.traces] = ns[3] as f32 / ns[2] as f32;
    }
    t.traces += 1;
}

fn median(v: &mut [f32]) -> f32 {
    if v.is_empty() {
        return f32::NAN;
    }
    v.sort_by(f32::total_cmp);
    v[v.len() / 2]
}

/// The session's totals, as `key value` lines (see the module doc).
pub fn report() -> String {
    let t = totals();
    let kept = t.traces.min(TRACES);
    let steps = t.steps.max(1) as f64;
    let per = |i: usize| t.ns[i] as f64 / steps;
    let mut s = String::new();
    let _ = writeln!(s, "traces {}", t.traces);
    let _ = writeln!(s, "steps {}", t.steps);
    let _ = writeln!(s, "traces_whose_steps_differed {}", t.step_mismatches);
    let _ = writeln!(s, "cold_ns_per_step_a {:.1}", per(0));
    let _ = writeln!(s, "cold_ns_per_step_b {:.1}", per(1));
    let _ = writeln!(s, "warm_ns_per_step_a {:.1}", per(2));
    let _ = writeln!(s, "warm_ns_per_step_b {:.1}", per(3));
    let _ = writeln!(s, "cold_b_over_a {:.4}", per(1) / per(0));
    let _ = writeln!(s, "warm_b_over_a {:.4}", per(3) / per(2));
    let _ = writeln!(
        s,
        "cold_b_over_a_median_trace {:.4}",
        median(&mut t.cold[..kept])
    );
    let _ = writeln!(
        s,
        "warm_b_over_a_median_trace {:.4}",
        median(&mut t.warm[..kept])
    );
    s
}
