//! Every look-ahead mode on real programs. In `verify` every transfer the
//! emulator predicts is checked by a real stop and must be the CPU's every
//! time (target and registers); `paper` uses no emulation; `emulate`
//! needs a fraction of `paper`'s breakpoints, and records only entries a
//! checkpoint validated or a proof covers. Every recorded branch is a real
//! one in each mode.

mod common;

use common::*;

const PERIOD_NS: u64 = 200_000;

/// (program, argument) pairs: branchy arithmetic, indirect calls and a
/// switch, recursion.
const PROGRAMS: [(&str, &str); 3] = [
    ("branchy", "3000000"),
    ("indirect", "8000000"),
    ("recursion", "3000"),
];

fn per_trace(rec: &Recording, key: &str) -> f64 {
    counter(&rec.summary, key) as f64 / counter(&rec.summary, "traces_started").max(1) as f64
}

/// Least number of predictions checked by stops over all programs; verify
/// runs are repeated (each checked in full) until there are this many, at
/// most `MAX_VERIFY_ROUNDS` rounds of the three programs.
const MIN_VERIFIED: u64 = 1_000;
const MAX_VERIFY_ROUNDS: usize = 8;

/// Records `binary arg` with `--lookahead MODE` into `out` and checks the run:
/// same behaviour as native, counters reconcile, every trace valid.
fn run_mode(
    tracer: &Tracer,
    binary: &std::path::Path,
    arg: &str,
    native: &std::process::Output,
    mode: &str,
    out: std::path::PathBuf,
) -> Recording {
    let name = binary.file_name().unwrap().to_string_lossy();
    // Every mode at a hardware LBR's depth (emulate's default is longer),
    // so that breakpoints per trace compare the modes alone.
    let profiled = record_with(
        tracer,
        &out,
        PERIOD_NS,
        &["--lookahead", mode, "--lbr", "32"],
        binary,
        &[arg],
        &[],
    );
    assert_same_behaviour(&format!("{name} ({mode})"), native, &profiled);
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces(&format!("{name} ({mode})"), &rec);
    if mode == "verify" {
        assert_eq!(
            counter(&rec.summary, "verify_mismatches"),
            0,
            "{name}: the emulator predicted a transfer the CPU did not make: {}",
            rec.summary
        );
        assert_eq!(
            counter(&rec.summary, "verify_register_mismatches"),
            0,
            "{name}: the emulator predicted registers the CPU did not have: {}",
            rec.summary
        );
    }
    if mode == "verify" || mode == "paper" {
        // Every entry comes from the decoding walk and its stops: none from
        // an emulated segment.
        for key in ["segments", "validated_entries", "proven_entries"] {
            assert_eq!(
                counter(&rec.summary, key),
                0,
                "{name} ({mode}): {key} in a stop-per-branch mode: {}",
                rec.summary
            );
        }
    }
    rec
}

#[test]
fn every_mode_is_right_and_emulate_saves_stops_over_paper() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("lookahead");
    let mut verified_total = 0;
    let mut programs = Vec::new();
    for (name, arg) in PROGRAMS {
        let binary = build(&clang, &dir.0, name, &[&format!("{name}.c")], &[]);
        let native = run_native(&binary, &[arg], &[]);
        let mut recs = Vec::new();
        for mode in ["verify", "paper", "emulate"] {
            let out = dir.path(&format!("{name}-{mode}"));
            recs.push(run_mode(&tracer, &binary, arg, &native, mode, out));
        }
        let (verify, paper, emulate) = (&recs[0], &recs[1], &recs[2]);
        verified_total += counter(&verify.summary, "verify_checked");
        let (bp_paper, bp_emu) = (
            per_trace(paper, "breakpoints"),
            per_trace(emulate, "breakpoints"),
        );
        eprintln!("{name}: breakpoints per trace {bp_paper:.1} paper, {bp_emu:.1} emulate");
        // Paper mode stops at every branch (about N per trace). Emulate
        // stops at checkpoints, and in a loop may take a checkpoint several
        // hits away rather than re-emulate (a stop costs about 256 steps:
        // emulate::STOP_IN_STEPS), so branchy's figure varies from run to
        // run (4 to 9 stops here); a fallback to stepping would be near N.
        assert!(
            bp_emu * 2.5 < bp_paper,
            "{name}: emulate saved few breakpoints ({bp_paper:.1} paper, {bp_emu:.1} emulate)"
        );
        assert!(
            counter(&emulate.summary, "validated_entries")
                + counter(&emulate.summary, "proven_entries")
                == counter(&emulate.summary, "entries_recorded"),
            "{name}: emulate recorded entries no checkpoint validated: {}",
            emulate.summary
        );
        programs.push((binary, arg, native));
    }
    // A fast machine does the fixed work in fewer samples: verify again
    // until enough predictions were checked.
    for round in 1.. {
        if verified_total >= MIN_VERIFIED {
            break;
        }
        assert!(
            round < MAX_VERIFY_ROUNDS,
            "too few predictions checked: {verified_total} in {MAX_VERIFY_ROUNDS} rounds"
        );
        for (binary, arg, native) in &programs {
            let name = binary.file_name().unwrap().to_string_lossy();
            let out = dir.path(&format!("{name}-verify{round}"));
            let rec = run_mode(&tracer, binary, arg, native, "verify", out);
            verified_total += counter(&rec.summary, "verify_checked");
        }
    }
}

/// A program that reads stack it never wrote, below the red zone at a
/// sample (tests/programs/dead_stack.c), and branches on the sum: the
/// sample's signal frame and its handler lie there. Verify mode's
/// predictions made from the sample must not guess those bytes (they read
/// the handler's stack, the thread reads what the handler left: about 690
/// stops with other registers than predicted per run before), and emulate
/// mode ends its segments before such a load, where the thread's exact
/// state starts the next one.
#[test]
fn stack_under_a_signal_frame_is_never_guessed() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("dead-stack");
    let binary = build(&clang, &dir.0, "dead_stack", &["dead_stack.c"], &[]);
    let arg = "3000000";
    let native = run_native(&binary, &[arg], &[]);
    let verify = run_mode(&tracer, &binary, arg, &native, "verify", dir.path("verify"));
    assert!(
        counter(&verify.summary, "verify_checked") > 0,
        "no prediction checked: {}",
        verify.summary
    );
    let emulate = run_mode(
        &tracer,
        &binary,
        arg,
        &native,
        "emulate",
        dir.path("emulate"),
    );
    // Nearly every trace that starts in main's loop meets the loads.
    assert!(
        counter(&emulate.summary, "indeterminate_loads") > 0,
        "no load of the stack under the sample's frame was refused: {}",
        emulate.summary
    );
    assert_eq!(
        counter(&emulate.summary, "speculation_mismatch_registers"),
        0,
        "{}",
        emulate.summary
    );
}
