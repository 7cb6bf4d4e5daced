//! The cases where the tracer must stop short or refuse, for real: an rseq
//! critical section, and a thread whose debug registers are all taken.

mod common;

use common::controlled::{ctl, text, Preloaded};
use common::*;

#[test]
fn no_stop_inside_an_rseq_critical_section() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("rseq");
    let program = build(&clang, &scratch.0, "rseq_section", &["rseq_section.c"], &[]);
    let out = scratch.path("out");
    let run = record(&tracer, &out, 500_000, &program, &["3000"], &[]);
    assert!(
        run.status.success(),
        "rseq_section failed under the tracer: {}",
        text(&run.stderr)
    );
    let stderr = text(&run.stderr);
    let bounds: Vec<u64> = stderr
        .lines()
        .find_map(|l| l.strip_prefix("rseq section "))
        .unwrap_or_else(|| panic!("the program printed no bounds: {stderr}"))
        .split(' ')
        .map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).expect("hex address"))
        .collect();
    let (start, end) = (bounds[0], bounds[1]);
    // In emulate mode (the default) and in the paper's algorithm, traces
    // end at the section: no branch inside it is
    // recorded, and each end is counted.
    let off_out = scratch.path("out-off");
    let off = record_with(
        &tracer,
        &off_out,
        500_000,
        &["--lookahead", "paper"],
        &program,
        &["3000"],
        &[],
    );
    assert!(off.status.success(), "{}", text(&off.stderr));
    for dir in [&out, &off_out] {
        let rec = load(dir);
        // Every trace may end at the section: none need complete.
        check_reconciles(&rec);
        assert!(
            counter(&rec.summary, "aborts.rseq") > 0,
            "no trace ended at the rseq section: {}",
            rec.summary
        );
        let inside: Vec<_> = rec
            .script
            .traces
            .iter()
            .flat_map(|t| t.entries_newest_first.iter())
            .filter(|e| e.from >= start && e.from < end)
            .collect();
        assert!(
            inside.is_empty(),
            "{}: branches recorded inside the rseq section: {:x?}",
            dir.display(),
            &inside[..inside.len().min(5)]
        );
    }
}

#[test]
fn a_thread_without_a_free_breakpoint_slot_is_refused_and_runs_on() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("bphog");
    let program = build(&clang, &scratch.0, "bp_hog", &["bp_hog.c"], &[]);
    let native_stop = scratch.path("native-stop");
    std::fs::write(&native_stop, b"").unwrap();
    let native = run_native(&program, &[native_stop.to_str().unwrap()], &[]);
    assert_eq!(
        text(&native.stdout),
        "held 4\ndone 1\n",
        "the machine must give a thread four breakpoints"
    );

    let p = Preloaded::start(&tracer, &program, &scratch.0);
    let out = scratch.path("out");
    let start = ctl(
        &tracer,
        &[
            "start",
            "--socket",
            p.socket(),
            "-c",
            "1000000",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(
        start.status.code(),
        Some(1),
        "start must fail: {}",
        text(&start.stdout)
    );
    let message = text(&start.stderr);
    assert!(
        message.contains("ENOSPC") && message.contains("breakpoint"),
        "the refusal names the cause: {message}"
    );
    assert_eq!(message.trim_end().lines().count(), 1, "one line: {message}");
    let status = ctl(&tracer, &["status", "--socket", p.socket()]);
    assert!(status.status.success());
    assert!(
        text(&status.stdout).contains("off"),
        "status after a refused start: {}",
        text(&status.stdout)
    );
    let finished = p.finish();
    assert!(finished.status.success(), "{}", text(&finished.stderr));
    assert_eq!(text(&finished.stdout), "held 4\ndone 1\n");
}
