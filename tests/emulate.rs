//! Emulate mode against what can go wrong with speculation: memory another
//! thread changes under the traced one, and emulated loads that fault.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;

use bench_harness::elf::ModuleMap;
use common::*;

/// Sampling period (task-clock ns).
const PERIOD_NS: u64 = 200_000;
/// Runs at most, to gather a test's minimum.
const MAX_RUNS: usize = 8;

/// Runs `binary ARGS` natively, then recorded in emulate mode (with `extra`
/// options) into `out`: the same output and status, a summary that
/// reconciles and valid traces, or the test fails. Returns the recording.
fn record_checked(
    tracer: &Tracer,
    binary: &Path,
    args: &[&str],
    extra: &[&str],
    out: &Path,
) -> Recording {
    record_checked_env(tracer, binary, args, extra, &[], out)
}

/// As [`record_checked`], with `envs` set for the recorded run.
fn record_checked_env(
    tracer: &Tracer,
    binary: &Path,
    args: &[&str],
    extra: &[&str],
    envs: &[(&str, &OsStr)],
    out: &Path,
) -> Recording {
    let name = binary.file_name().unwrap().to_string_lossy().into_owned();
    let native = run_native(binary, args, &[]);
    assert!(native.status.success(), "{native:?}");
    let mut options = vec!["--lookahead", "emulate"];
    options.extend_from_slice(extra);
    let profiled = record_with(tracer, out, PERIOD_NS, &options, binary, args, envs);
    assert_same_behaviour(&name, &native, &profiled);
    let rec = load(out);
    check_summary(&rec);
    assert_valid_traces(&name, &rec);
    rec
}

/// values.c (a loop over volatile arrays; `thread` or `handler` as a
/// second argument make the process noisy), built into `dir`.
fn values_program(clang: &Path, dir: &Scratch) -> std::path::PathBuf {
    build(clang, &dir.0, "values", &["values.c"], &["-O2", "-pthread"])
}

/// Rounds of the flipper whose branch on the flipped word a trace shows,
/// decoded from the trace alone: (round, value the trace says it read).
fn decoded_rounds(rec: &Recording) -> Vec<(u64, u8)> {
    let (modules, _) = ModuleMap::from_mmaps(&rec.script.mmaps);
    let name_of = |address: u64| -> Option<String> {
        let (m, vaddr) = modules.resolve(address)?;
        Some(modules.modules[m].symbol_at(vaddr)?.name.clone())
    };
    let mut names: BTreeMap<u64, Option<String>> = BTreeMap::new();
    let mut rounds = Vec::new();
    for trace in &rec.script.traces {
        // The calls' targets in execution order: bit_B_V for each announced
        // bit, then flag_V.
        let mut bits: Vec<(u32, u64)> = Vec::new();
        for edge in trace.execution_order() {
            let name = names
                .entry(edge.to)
                .or_insert_with(|| name_of(edge.to))
                .clone();
            let Some(name) = name else { continue };
            if let Some(rest) = name.strip_prefix("bit_") {
                let (b, v) = rest.split_once('_').expect("bit_B_V");
                let b: u32 = b.parse().expect("bit number");
                if b == 0 {
                    bits.clear();
                }
                if bits.len() as u32 == b {
                    bits.push((b, v.parse().expect("bit value")));
                }
            } else if let Some(v) = name.strip_prefix("flag_") {
                if bits.len() == 24 {
                    let round = bits.iter().fold(0u64, |r, &(b, v)| r | v << b);
                    rounds.push((round, v.parse().expect("flag value")));
                }
                bits.clear();
            }
        }
    }
    rounds
}

/// Another thread flips the word the traced thread branches on. Segments
/// whose memory changed under them are counted and dropped, and no trace
/// contradicts the program's own record of which way each round went.
#[test]
fn flipped_memory_never_makes_a_wrong_entry() {
    flipped_memory_case("flipper", &["-pthread"], Evidence::Mismatches);
}

/// The same memory flipped by a SIGALRM handler (every millisecond of
/// wall time) in a process of one thread: with the handler wrapped, the
/// process is quiet and its segments need no checkpoint, but one during
/// which the handler ran is dropped (`signal_handler`). An alarm that
/// comes while the tracer's handler runs is delivered as it returns, right
/// where the trace's segment begins: without that check, such traces show
/// the branch on the old value.
#[test]
fn memory_flipped_by_a_signal_handler_never_makes_a_wrong_entry() {
    flipped_memory_case(
        "flipper-handler",
        &["-DHANDLER_FLIPS"],
        Evidence::HandlerRuns,
    );
}

/// What shows that a run of the flipper met the flips it must survive.
#[derive(Clone, Copy)]
enum Evidence {
    /// Checkpoints that found the flipped word changed.
    Mismatches,
    /// Traces dropped because the flipping handler ran in them, in a
    /// process that stayed quiet (segments settled without a checkpoint).
    HandlerRuns,
}

/// The same with the flipper thread started by C11's thrd_create, which
/// glibc runs without the pthread_create the library interposes: the
/// process must still not be taken as quiet (its thread count is read at
/// every trace), or segments would be proven over memory the flipper
/// changes.
#[test]
fn flipped_memory_from_a_c11_thread_never_makes_a_wrong_entry() {
    flipped_memory_case(
        "flipper-c11",
        &["-pthread", "-DC11_THREADS"],
        Evidence::Mismatches,
    );
}

fn flipped_memory_case(name: &str, cflags: &[&str], evidence: Evidence) {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new(name);
    let binary = build(&clang, &dir.0, name, &["flipper.c"], cflags);
    let rounds = "4000000";
    let mut checked = 0usize;
    let mut mismatches = 0;
    for run in 0..MAX_RUNS {
        let out = dir.path(&format!("out{run}"));
        let record_file = dir.path(&format!("record{run}"));
        let record_arg = record_file.display().to_string();
        let profiled = record_with(
            &tracer,
            &out,
            PERIOD_NS,
            &["--lookahead", "emulate", "--lbr", "64"],
            &binary,
            &[rounds, &record_arg],
            &[],
        );
        assert!(
            profiled.status.success(),
            "flipper fails under the tracer: {profiled:?}"
        );
        let rec = load(&out);
        check_summary(&rec);
        assert_valid_traces("flipper", &rec);
        let record = std::fs::read(&record_file).expect("the program's record");
        for (round, seen) in decoded_rounds(&rec) {
            let truth = record[round as usize];
            assert_eq!(
                seen, truth,
                "a trace shows round {round} calling flag_{seen}; the program took flag_{truth}"
            );
            checked += 1;
        }
        let s = &rec.summary;
        mismatches += match evidence {
            Evidence::Mismatches => {
                counter(s, "speculation_mismatch_memory")
                    + counter(s, "speculation_mismatch_registers")
            }
            Evidence::HandlerRuns => {
                assert!(
                    counter(s, "segments_settled") > 0,
                    "{name}: the process with a wrapped handler was not quiet: {s}"
                );
                counter(s, "aborts.signal_handler")
            }
        };
        eprintln!("{name} run {run}: {checked} rounds checked, {mismatches} flips met");
        if checked >= 200 && mismatches > 0 {
            return;
        }
    }
    panic!(
        "{MAX_RUNS} runs checked {checked} rounds against the program's record (need 200) \
         and met {mismatches} flips (speculation mismatches or traces a handler ran in; need some)"
    );
}

/// A program that reads an unmapped page on purpose and recovers in its
/// own SIGSEGV handler: the emulator's load there faults safely and ends
/// the segment, the program's handler still sees every fault, and its
/// output is unchanged.
#[test]
fn faulting_loads_end_segments_and_the_program_keeps_its_faults() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("wild");
    let binary = build(&clang, &dir.0, "wild_load", &["wild_load.c"], &[]);
    let args = ["300000"];
    let native = run_native(&binary, &args, &[]);
    assert!(native.status.success(), "wild_load natively: {native:?}");
    let mut faults = 0;
    for run in 0..MAX_RUNS {
        let out = dir.path(&format!("out{run}"));
        let profiled = record_with(
            &tracer,
            &out,
            PERIOD_NS,
            &["--lookahead", "emulate"],
            &binary,
            &args,
            &[],
        );
        assert_same_behaviour("wild_load", &native, &profiled);
        let rec = load(&out);
        check_reconciles(&rec);
        assert_valid_traces("wild_load", &rec);
        faults += counter(&rec.summary, "aborts.emulation_fault");
        if faults > 0 {
            return;
        }
    }
    panic!("{MAX_RUNS} runs and no emulated load reached the unmapped page");
}

/// Instructions that meet the store overlay full part-way
/// (full_overlay.c): the pass ends before them, with nothing of them
/// predicted. `rep`: a rep movsb whose first emulated step stops after a
/// few iterations, which it keeps; the checkpoint must not predict rcx
/// part-way down where the CPU traps at the copy's start. Before, 4,907 of
/// 4,955 traces ended in a register mismatch (32 branches, 200 µs) and none
/// completed; SQLite met it about once in 30-70 runs, at glibc's
/// `__memmove_avx512_unaligned_erms`. `vector`: a 16-byte store whose
/// first half fits and second does not; the first half must not stay in
/// the overlay. Before, 469 memory mismatches in 1,091 traces; SQLite's
/// checkpoints in that memmove mismatched one time in five.
#[test]
fn an_instruction_that_overflows_the_overlay_is_checked_before_it() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("full-overlay");
    let binary = build(
        &clang,
        &dir.0,
        "full_overlay",
        &["full_overlay.c"],
        &["-O2"],
    );
    for mode in ["rep", "vector"] {
        let rec = record_checked(
            &tracer,
            &binary,
            &[mode, "5000000"],
            &["--lbr", "32"],
            &dir.path(mode),
        );
        let s = &rec.summary;
        let traces = counter(s, "traces_started");
        assert!(traces >= 20, "{mode}: too few traces to judge: {s}");
        for kind in ["registers", "memory"] {
            assert_eq!(
                counter(s, &format!("speculation_mismatch_{kind}")),
                0,
                "{mode}: a checkpoint found other {kind} than predicted: {s}"
            );
        }
        assert!(
            counter(s, "traces_completed") * 2 >= traces,
            "{mode}: fewer than half the traces completed: {s}"
        );
    }
}

/// Checkpoints in a recursion have hits at several depths: threads_work.c
/// (results/speed's qsort workload, built from there) sorts with glibc's
/// merge sort on a thread of a process that is never quiet. At each hit
/// before the last the kernel writes the handler's signal frame below the
/// stack pointer, over slots the recursion stored and left; deeper again,
/// the program need not store them before the last hit. They are not the
/// program's to rely on, and validation must leave them aside. Before, 15
/// memory mismatches in 1,069 traces (1 thread, 128 branches, 1 ms) and
/// 46-54 in 2,770-2,833 on 16 threads at 3 ms.
#[test]
fn stack_under_an_earlier_hits_signal_frame_is_not_checked() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("threads-work");
    let source = "../../results/speed/threads_work.c";
    let binary = build(
        &clang,
        &dir.0,
        "threads_work",
        &[source],
        &["-O2", "-pthread"],
    );
    let rec = record_checked(
        &tracer,
        &binary,
        &["1", "1500"],
        &["--lbr", "128"],
        &dir.path("out"),
    );
    let s = &rec.summary;
    let traces = counter(s, "traces_started");
    assert!(traces >= 200, "too few traces to judge: {s}");
    assert!(
        counter(s, "checkpoint_extra_hits") > 0,
        "no checkpoint had hits before its last: {s}"
    );
    assert_eq!(
        counter(s, "speculation_mismatch_registers") + counter(s, "speculation_mismatch_memory"),
        0,
        "a checkpoint mismatched in a program whose threads share nothing: {s}"
    );
}

/// A loop of many instructions per taken branch that reads only its own
/// stores (unrolled.c's `spin`): each trace's checkpoint goes before the
/// loop's last iterations, which are proven (a proven tail), instead of
/// waiting for one breakpoint hit per iteration. Before proven tails a
/// trace here took 73 stops; every entry is still right: no checkpoint
/// mismatches, valid traces, and eight back edges between two of the
/// loop's `jz` entries, as the program runs.
#[test]
fn a_loop_that_reads_only_its_own_stores_costs_one_stop_per_trace() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("unrolled");
    let binary = build(
        &clang,
        &dir.0,
        "unrolled",
        &["unrolled.c"],
        &["-O2", "-pthread"],
    );
    // A second thread, so that the tail, not quietness, proves the loop.
    let rec = record_checked(&tracer, &binary, &["60", "thread"], &[], &dir.path("out"));
    let s = &rec.summary;
    let traces = counter(s, "traces_started");
    assert!(traces >= 20, "too few traces to judge: {s}");
    assert!(
        counter(s, "proven_tails") * 2 >= traces,
        "fewer than half the traces ended in a proven tail: {s}"
    );
    let stops = counter(s, "breakpoints");
    assert!(
        stops <= 2 * traces,
        "{stops} breakpoint stops for {traces} traces (at most 2 per trace wanted): {s}"
    );
    assert_eq!(
        counter(s, "speculation_mismatch_registers") + counter(s, "speculation_mismatch_memory"),
        0,
        "a checkpoint mismatched in a single-threaded program that reads only its own stores: {s}"
    );
    // The loop's own pattern, in every trace that shows two of its jz.
    let module = bench_harness::elf::ElfModule::load(&binary).expect("reading unrolled");
    let (modules, _) = ModuleMap::from_mmaps(&rec.script.mmaps);
    let spin = module.symbol("spin").expect("spin in unrolled");
    let (mut jz, mut back, mut at) = (None, None, spin.address);
    while at < spin.address + spin.size {
        let insn = module.decode_at(at).expect("spin decodes");
        match insn.mnemonic() {
            iced_x86::Mnemonic::Je => jz = Some(at),
            iced_x86::Mnemonic::Jb => back = Some(at),
            _ => {}
        }
        at += insn.len() as u64;
    }
    let (jz, back) = (jz.expect("spin's jz"), back.expect("spin's jb"));
    let eighth = module.symbol("eighth").expect("eighth in unrolled");
    let in_loop = |vaddr: u64| {
        (spin.address..spin.address + spin.size).contains(&vaddr)
            || (eighth.address..eighth.address + eighth.size).contains(&vaddr)
    };
    let mut checked = 0;
    for trace in &rec.script.traces {
        let mut since_jz: Option<u32> = None;
        for edge in trace.execution_order() {
            let here = |address| {
                modules
                    .resolve(address)
                    .filter(|&(m, _)| modules.modules[m].basename() == "unrolled")
                    .map(|(_, vaddr)| vaddr)
            };
            let (Some(vaddr), Some(to)) = (here(edge.from), here(edge.to)) else {
                since_jz = None;
                continue;
            };
            if !in_loop(vaddr) || !in_loop(to) {
                // spin returned (its last iteration's back edge is not
                // taken) or was called again.
                since_jz = None;
            } else if vaddr == jz {
                if let Some(n) = since_jz {
                    assert_eq!(n, 8, "{n} back edges between two jz entries in a trace");
                    checked += 1;
                }
                since_jz = Some(0);
            } else if vaddr == back {
                since_jz = since_jz.map(|n| n + 1);
            }
        }
    }
    // perf.script holds each distinct trace once, and this loop repeats.
    assert!(
        checked >= 20,
        "only {checked} stretches between two jz entries checked"
    );
}

/// A loop that reads memory another thread could change, every iteration
/// (values.c's volatile arrays, with a second thread alive), and never
/// leaves within a pass: each segment's end would need a breakpoint hit
/// per iteration, so it is cut where a loop head needs the most hits
/// allowed. The first pass seals its logs there, so the cut takes no second
/// pass: one pass per segment (two, before: the whole pass was run again
/// to stop at the cut). Every entry is still validated, and the program's
/// output is unchanged.
#[test]
fn a_loop_reading_shared_memory_is_cut_without_a_second_pass() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("cut");
    let binary = values_program(&clang, &dir);
    let rec = record_checked(
        &tracer,
        &binary,
        &["3000", "thread"],
        &["--lbr", "128"],
        &dir.path("out"),
    );
    let s = &rec.summary;
    let segments = counter(s, "segments");
    assert!(segments >= 40, "too few segments to judge: {s}");
    // Before main started the second thread the process was quiet: a
    // sample then may prove its entries.
    assert!(
        counter(s, "proven_entries") * 10 <= counter(s, "validated_entries"),
        "a process with two threads was taken as quiet: {s}"
    );
    // Most segments are cut (a pass reaches its 128th branch inside the
    // loop, 16 hits at most per checkpoint).
    let stops = counter(s, "breakpoints");
    assert!(
        stops >= 8 * segments,
        "{stops} stops for {segments} segments: the loop's checkpoints were not cut at many hits: {s}"
    );
    let passes = counter(s, "emulated_passes");
    assert!(
        passes * 10 <= segments * 11,
        "{passes} passes for {segments} segments: cut segments were emulated twice: {s}"
    );
}

/// The same loop in a quiet process (one thread, and no handler for an
/// asynchronous signal but those the library wraps: nothing but the
/// thread itself can change its private memory while it runs): its reads
/// need no checkpoint, so a trace costs no breakpoint stop at all, where a
/// noisy process takes a stop per iteration.
///
/// - `quiet`: no handler; segments are proven at once (none waits to be
///   settled).
/// - `handler`: a SIGUSR1 handler installed with `signal` (never sent) is
///   wrapped: the process stays quiet, and each proven segment is settled
///   at the thread's next sample (`quiet::wrap`).
/// - `thread`: a second thread (sleeping) makes the process noisy: no
///   entry is taken without a checkpoint.
#[test]
fn a_quiet_process_needs_no_checkpoint_for_its_private_memory() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("quiet");
    let binary = values_program(&clang, &dir);
    for mode in ["quiet", "handler", "thread"] {
        let args: &[&str] = if mode == "quiet" {
            &["3000"]
        } else {
            &["3000", mode]
        };
        let rec = record_checked(&tracer, &binary, args, &["--lbr", "128"], &dir.path(mode));
        let s = &rec.summary;
        let traces = counter(s, "traces_started");
        assert!(traces >= 20, "{mode}: too few traces to judge: {s}");
        let (proven, validated) = (
            counter(s, "proven_entries"),
            counter(s, "validated_entries"),
        );
        let stops = counter(s, "breakpoints");
        let settled = counter(s, "segments_settled");
        if mode == "thread" {
            // Quiet until main started the thread: a sample before may
            // prove its entries.
            assert!(
                proven * 10 <= validated,
                "{mode}: {proven} entries taken without a checkpoint, {validated} with: {s}"
            );
            assert!(
                stops >= 8 * traces,
                "{mode}: {stops} stops for {traces} traces, where a checkpoint per iteration is due: {s}"
            );
            continue;
        }
        assert!(
            proven >= 9 * validated,
            "{mode}: {proven} entries proven, {validated} validated at a checkpoint: {s}"
        );
        assert!(
            stops * 4 <= traces,
            "{mode}: {stops} breakpoint stops for {traces} traces: {s}"
        );
        if mode == "quiet" {
            assert_eq!(settled, 0, "{mode}: segments settled with no handler: {s}");
        } else {
            // Every trace but the few before main installed the handler.
            assert!(
                settled * 10 >= traces * 8,
                "{mode}: {settled} segments settled for {traces} traces: {s}"
            );
            // The last one's sample never comes: the session stops on the
            // thread itself as it exits, past the segment, and settles it.
            assert_eq!(
                counter(s, "segments_unsettled"),
                0,
                "{mode}: a segment left unsettled: {s}"
            );
        }
    }
}

/// The library's own threads never touch the C library's malloc state,
/// which a quiet process's emulation reads as private memory
/// (`src/alloc.rs`). `malloc_owners.c`, one thread allocating and freeing
/// for the whole run, interposes malloc and counts every call made on
/// another thread (the tracer's control thread and worker) that touched
/// the main arena or went to glibc's own mmap path. With the library's
/// allocations served by glibc's malloc the worker made 4 and 8 of them
/// in each run, among about 1,000 calls.
#[test]
fn the_librarys_threads_leave_the_c_librarys_malloc_alone() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("malloc-owners");
    let binary = build(
        &clang,
        &dir.0,
        "malloc_owners",
        &["malloc_owners.c"],
        &["-O2"],
    );
    // Preloaded and autostarted rather than under `record`, so that the
    // program's report (written by its destructor, after the session
    // stopped at exit: the worker's whole life is in it) is all its stderr.
    let native = run_native(&binary, &["3000"], &[]);
    let out = dir.path("out");
    let profiled = run_native(
        &binary,
        &["3000"],
        &[
            ("LD_PRELOAD", tracer.lib.as_os_str()),
            ("BREAKDANCE_AUTOSTART", OsStr::new("1")),
            ("BREAKDANCE_OUTPUT", out.as_os_str()),
            ("BREAKDANCE_PERIOD", OsStr::new("200000")),
            ("BREAKDANCE_LBR", OsStr::new("128")),
        ],
    );
    assert_same_behaviour("malloc_owners", &native, &profiled);
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces("malloc_owners", &rec);
    let s = &rec.summary;
    assert!(
        counter(s, "traces_written") >= 20,
        "too few traces to judge: {s}"
    );
    assert!(
        counter(s, "segments_proven") > 0,
        "no segment was proven: the process was not taken as quiet: {s}"
    );
    let report = String::from_utf8_lossy(&profiled.stderr);
    let field = |name: &str| -> u64 {
        report
            .split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name}= in the program's report: {report}"))
    };
    eprintln!("malloc calls on the library's threads: {report}");
    assert_eq!(
        (field("main_arena"), field("mmapped")),
        (0, 0),
        "the library's threads changed the main arena or glibc's mmap counts: {report}"
    );
}

/// A sample that falls due while the handler that proved a segment runs
/// (under load, or on a slow machine; here the test-only failpoint
/// `slow-handler` makes each such handler spin until one does) comes as
/// the handler returns, the thread still where the segment begins. It is
/// dropped (`samples_in_handler`), and the segment is settled at the next
/// sample, which must come. When each sample took the sampling event off
/// until a handler armed it again, nothing armed it after such a sample,
/// and sampling stopped for good: Lua, quiet with its SIGINT handler
/// wrapped, took 2 to 44 samples in some runs where it takes about 1,000
/// (results/speed, ninth round).
#[test]
fn sampling_goes_on_after_a_sample_that_fell_due_in_the_handler() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("deferred");
    let binary = values_program(&clang, &dir);
    let rec = record_checked_env(
        &tracer,
        &binary,
        &["20000", "handler"],
        &["--lbr", "128"],
        &[("BREAKDANCE_FAILPOINT", OsStr::new("slow-handler"))],
        &dir.path("rec"),
    );
    let s = &rec.summary;
    let (in_handler, settled) = (
        counter(s, "samples_in_handler"),
        counter(s, "segments_settled"),
    );
    // Each such handler outlasts its period, so nearly every segment is
    // settled at the second sample after it; a run takes dozens.
    assert!(
        in_handler >= 10 && settled >= 10,
        "{in_handler} samples fell due in a handler and {settled} segments were settled: \
         sampling stopped early: {s}"
    );
}

/// slow_trace.c run with `args` under the tracer (emulate mode, `lbr`
/// branches, 1 ms), after a native run: the same behaviour, counters that
/// reconcile and valid traces. None without clang.
fn slow_trace(lbr: &str, args: &[&str]) -> Option<Recording> {
    let tracer = tracer();
    let clang = tool("clang-19")?;
    let dir = Scratch::new(&format!("slow_trace-{}", args.join("-")));
    let binary = build(
        &clang,
        &dir.0,
        "slow_trace",
        &["slow_trace.c"],
        &["-O2", "-pthread"],
    );
    let native = run_native(&binary, args, &[]);
    assert!(native.status.success(), "{native:?}");
    let out = dir.path("out");
    let profiled = record_with(
        &tracer,
        &out,
        1_000_000,
        &["--lookahead", "emulate", "--lbr", lbr],
        &binary,
        args,
        &[],
    );
    let name = format!("slow_trace {}", args.join(" "));
    assert_same_behaviour(&name, &native, &profiled);
    let rec = load(&out);
    check_reconciles(&rec);
    assert_valid_traces(&name, &rec);
    Some(rec)
}

/// slow_trace.c in a quiet process: its loop reads only the thread's own
/// memory, so a segment is proven however long it runs, but 8192 steps (a
/// segment's longest) hold under 512 taken branches. Such a pass used to be
/// redone to its last fresh address, a loop's first iteration: the trace
/// kept 26 entries for 71 steps run per step kept and 9 stops, and every
/// trace ended by the handlers' budget. Now the trace ends at the step
/// limit with every entry it proved (`lookahead_limit`), with no stop.
#[test]
fn a_proven_stretch_short_of_its_branches_is_kept_whole() {
    let Some(rec) = slow_trace("512", &["200", "quiet"]) else {
        return;
    };
    let s = &rec.summary;
    let traces = counter(s, "traces_started");
    assert!(traces >= 20, "too few traces to judge: {s}");
    let at_limit = counter(s, "aborts.lookahead_limit");
    assert!(
        at_limit * 2 >= traces,
        "only {at_limit} of {traces} traces ended at the step limit: {s}"
    );
    let stops = counter(s, "breakpoints");
    assert!(
        stops * 4 <= traces,
        "{stops} stops for {traces} traces: {s}"
    );
    let (run, kept) = (
        counter(s, "emulated_steps_run"),
        counter(s, "emulated_steps"),
    );
    assert!(
        run * 10 <= kept * 12,
        "{run} steps run for {kept} kept: passes were redone: {s}"
    );
    let (proven, validated) = (
        counter(s, "proven_entries"),
        counter(s, "validated_entries"),
    );
    assert!(
        proven >= 9 * validated,
        "{proven} entries proven, {validated} validated: {s}"
    );
}

/// slow_trace.c: a loop the emulation follows only a little at a time in a
/// noisy process (a run of register-only steps past a segment's step
/// limit, then a read of memory another thread could change). Each segment
/// keeps one iteration of the few it ran, with a stop, and 4096 branches
/// take several times more CPU than a trace may cost. Before the cap, the loop of an
/// earlier version of the program ran more than 100 times slower (over 2
/// minutes for a 0.2 s run), the watchdog giving up nearly every trace.
/// It runs for 200 ms of its CPU, so that the traces taken do not depend
/// on how fast the machine is. The handlers' CPU per trace is capped
/// (`handler_budget`): the program runs, and its traces end by the cap
/// (none does without it).
#[test]
fn a_trace_that_advances_slowly_is_ended_by_its_budget() {
    // No trace gets its 4096 branches here: each ends by the cap, with the
    // entries validated so far. (On the 2-core guest a trace gets 350–640
    // of them in the 1 ms it may cost: the cap ends them on a machine
    // several times faster too.)
    let Some(rec) = slow_trace("4096", &["200"]) else {
        return;
    };
    let s = &rec.summary;
    assert!(counter(s, "entries_written") > 0, "no entry recorded: {s}");
    let traces = counter(s, "traces_started");
    assert!(traces >= 20, "too few traces to judge: {s}");
    // Without the cap almost every trace ended at its watchdog sample.
    let unreached = counter(s, "aborts.checkpoint_unreached");
    assert!(
        unreached * 10 <= traces,
        "{unreached} of {traces} traces given up at the watchdog: {s}"
    );
    // The loop is the slow kind still (a quiet process would not be).
    let capped = counter(s, "aborts.handler_budget");
    assert!(
        capped * 2 >= traces,
        "only {capped} of {traces} traces ended by the cap: {s}"
    );
}
