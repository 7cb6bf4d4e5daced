//! Call stacks (`record -g`): each trace's stack, taken at its newest
//! branch, checked against the code itself, and accepted by llvm-profgen
//! as the input of a context-sensitive profile.
//!
//! tests/programs/callchains.c calls each function from one place, so the
//! right stack is known by construction. Every stack must:
//! - begin where the trace's newest branch went (0 skid);
//! - have, after each frame in the program, a return address that follows
//!   a `call rel32` to the function of the frame inside it (the program is
//!   built with frame pointers and without sibling calls, so every frame is
//!   a real call);
//! - reach main when its leaf is in the program (no frame lost), through
//!   the leaf `spin_nofp` too, which keeps no frame pointer and uses rbp as
//!   a counter.
//!
//! Each of the four chains must be seen at least `MIN_PER_CHAIN` times;
//! a machine fast enough to do the work in fewer samples runs the program
//! again (each run checked), up to `MAX_RUNS` runs.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use bench_harness::elf::ModuleMap;
use common::*;

const PERIOD_NS: u64 = 200_000;
const ITERATIONS: &str = "200000";
const MAX_RUNS: usize = 8;
/// Stacks of each known chain wanted (measured: 280 to 1,000 of each in
/// one run of about 2,400 traces on a 2-core Xeon).
const MIN_PER_CHAIN: u64 = 30;
/// The record options of the frame-pointer tests.
const G: [&str; 1] = ["-g"];
/// callchains.c's SIGPROF handler (with -DWITH_SIGNAL).
const SIGNAL_HANDLER: &str = "on_prof";
const FLAGS: [&str; 5] = [
    "-O2",
    "-g",
    "-fno-omit-frame-pointer",
    "-mno-omit-leaf-frame-pointer",
    "-fno-optimize-sibling-calls",
];

/// The chains of callchains.c, leaf first, as function names.
fn known_chains() -> Vec<Vec<&'static str>> {
    vec![
        vec!["leaf_c", "mid_b", "outer_a", "main"],
        vec!["leaf_c", "outer_d", "main"],
        vec!["leaf_c", "rec", "rec", "rec", "rec", "rec", "main"],
        vec!["spin_nofp", "via_nofp", "main"],
    ]
}

/// Checks every stack of one recording, in the frames of the modules
/// named `ours` (the program, its library); returns how often each chain
/// of such frames (leaf first, function names) was seen.
fn check_stacks(rec: &Recording, ours: &[&str]) -> BTreeMap<Vec<String>, u64> {
    let (modules, errors) = ModuleMap::from_mmaps(&rec.script.mmaps);
    assert!(errors.is_empty(), "{errors:?}");
    let indices: Vec<usize> = ours
        .iter()
        .map(|name| {
            modules
                .module_by_basename(name)
                .expect("the module's mapping")
                .0
        })
        .collect();
    // A frame in one of our modules: (module, vaddr, function).
    let frame = |address: u64| {
        let (m, vaddr) = modules.resolve(address)?;
        indices
            .contains(&m)
            .then(|| (m, vaddr, modules.modules[m].symbol_at(vaddr)))
    };
    let mut chains = BTreeMap::new();
    let mut stacked = 0u64;
    for trace in &rec.script.traces {
        let Some((&leaf, callers)) = trace.stack.split_first() else {
            continue;
        };
        stacked += trace.count;
        let newest = trace.entries_newest_first[0];
        assert_eq!(
            leaf, newest.to,
            "a stack's leaf {leaf:#x} is not where the newest branch went ({:#x})",
            newest.to
        );
        let mut names = Vec::new();
        let mut inner = frame(leaf).and_then(|(m, _, s)| Some((m, s?)));
        if let Some((_, s)) = inner {
            names.push(s.name.clone());
        }
        // Frames since the signal handler: the interrupted pc follows no
        // call, and the frame after it may skip the interrupted function's
        // caller when it was stopped in a prologue or an epilogue (as for
        // any frame-pointer unwinder).
        let mut since_signal = usize::MAX;
        // The signal interrupted code outside the program (libc's, before
        // main or at exit): the chain leaves it there.
        let mut interrupted_outside = false;
        for &ret in callers {
            let Some((m, vaddr, function)) = frame(ret) else {
                interrupted_outside = inner.is_some_and(|(_, s)| s.name == SIGNAL_HANDLER);
                break;
            };
            since_signal = since_signal.saturating_add(1);
            if inner.is_some_and(|(_, s)| s.name == SIGNAL_HANDLER) {
                since_signal = 0;
            }
            let function = function.expect("a frame inside a function");
            if since_signal == 0 {
                names.push(function.name.clone());
                inner = Some((m, function));
                continue;
            }
            let module = &modules.modules[m];
            // The instruction that ends at the return address is a call.
            let call = (2..=7)
                .filter_map(|k| module.decode_at(vaddr - k))
                .find(|i| {
                    i.next_ip() == vaddr && i.is_call_near()
                        || i.next_ip() == vaddr && i.is_call_near_indirect()
                })
                .unwrap_or_else(|| {
                    panic!(
                        "return address {ret:#x} does not follow a call (stack {:x?})",
                        trace.stack
                    )
                });
            // A direct call within the module goes to the function of
            // the frame inside it (a call into another module goes to
            // its PLT stub; an indirect call's target is not in the code).
            if let Some((_, callee)) = inner.filter(|(cm, _)| *cm == m && since_signal != 1) {
                if call.is_call_near() {
                    assert_eq!(
                        call.near_branch64(),
                        callee.address,
                        "frame at {ret:#x}: its call goes to {:#x}, not to {} at {:#x}, \
                         the frame inside it: a frame is missing (stack {:x?})",
                        call.near_branch64(),
                        callee.name,
                        callee.address,
                        trace.stack
                    );
                }
            }
            names.push(function.name.clone());
            inner = Some((m, function));
        }
        if !names.is_empty() && !interrupted_outside {
            assert_eq!(
                names.last().map(String::as_str),
                Some("main"),
                "a stack whose leaf is in the program stops before main: {names:?} \
                 (stack {:x?})",
                trace.stack
            );
            *chains.entry(names).or_insert(0) += trace.count;
        }
    }
    let c = |name: &str| counter(&rec.summary, name);
    assert_eq!(
        c("callstacks"),
        stacked,
        "callstacks ≠ the stacks in perf.script"
    );
    assert_eq!(
        c("callstacks") + c("callstacks_missing"),
        c("traces_written"),
        "callstacks + callstacks_missing ≠ traces_written: {}",
        rec.summary
    );
    chains
}

/// Stacks seen of each chain (leaf first, function names).
type Chains = BTreeMap<Vec<String>, u64>;

/// Whether each of `chains` was seen `MIN_PER_CHAIN` times.
fn each_seen<'a>(chains: &'a [Vec<&'a str>]) -> impl Fn(&Chains) -> bool + 'a {
    move |seen| {
        chains.iter().all(|chain| {
            let key: Vec<String> = chain.iter().map(|s| s.to_string()).collect();
            seen.get(&key).copied().unwrap_or(0) >= MIN_PER_CHAIN
        })
    }
}

/// Records `binary` with -g until `enough` of the chains were seen (at
/// most `MAX_RUNS` runs, each checked); returns the last recording.
fn record_chains(
    tracer: &Tracer,
    binary: &Path,
    ours: &[&str],
    enough: &dyn Fn(&Chains) -> bool,
    envs: &[(&str, &std::ffi::OsStr)],
    options: &[&str],
    iterations: &str,
) -> Recording {
    let native = run_native(binary, &[iterations], envs);
    assert!(native.status.success(), "{native:?}");
    let mut seen = Chains::new();
    let mut last = None;
    for run in 0..MAX_RUNS {
        let out = binary.with_file_name(format!("out{run}"));
        let profiled = record_with(
            tracer,
            &out,
            PERIOD_NS,
            options,
            binary,
            &[iterations],
            envs,
        );
        assert_same_behaviour("callchains -g", &native, &profiled);
        let rec = load(&out);
        check_reconciles(&rec);
        for (chain, n) in check_stacks(&rec, ours) {
            *seen.entry(chain).or_insert(0) += n;
        }
        last = Some(rec);
        if enough(&seen) {
            break;
        }
    }
    assert!(
        enough(&seen),
        "too few stacks of the wanted chains ({MIN_PER_CHAIN} each) in {MAX_RUNS} runs: {seen:#?}"
    );
    last.expect("one run")
}

#[test]
fn stacks_follow_the_calls_the_program_made() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("callstack");
    let binary = build(&clang, &dir.0, "callchains", &["callchains.c"], &FLAGS);
    let chains = known_chains();
    let rec = record_chains(
        &tracer,
        &binary,
        &["callchains"],
        &each_seen(&chains),
        &[],
        &G,
        ITERATIONS,
    );
    check_report_paths(&tracer, &rec.dir);
    if let Some(profgen) = tool("llvm-profgen-19") {
        check_profgen_contexts(&profgen, &rec.dir, &binary, &dir.path("cs.prof"));
    }
}

/// The same chains in a build without frame pointers, unwound by the
/// worker with the program's CFI (`--unwind dwarf`): the frame-pointer
/// walk loses the callers there (see `check_names_a_build_without_frame_pointers`).
#[test]
fn dwarf_unwinding_needs_no_frame_pointers() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("callstack-dwarf");
    let flags = [
        "-O2",
        "-g",
        "-fomit-frame-pointer",
        "-fno-optimize-sibling-calls",
    ];
    let binary = build(&clang, &dir.0, "callchains", &["callchains.c"], &flags);
    let chains = known_chains();
    record_chains(
        &tracer,
        &binary,
        &["callchains"],
        &each_seen(&chains),
        &[],
        &["-g", "--unwind", "dwarf"],
        ITERATIONS,
    );
}

/// A chain through a shared library (built with frame pointers), back
/// into the program through a function pointer.
#[test]
fn stacks_cross_a_shared_library() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("callstack-lib");
    let mut lib_flags = FLAGS.to_vec();
    lib_flags.extend(["-fPIC", "-shared"]);
    build(&clang, &dir.0, "libchain.so", &["libchain.c"], &lib_flags);
    let lib_dir = dir.0.display().to_string();
    let mut flags = FLAGS.to_vec();
    flags.extend(["-DWITH_LIB", "-L", lib_dir.as_str(), "-lchain"]);
    let binary = build(&clang, &dir.0, "callchains", &["callchains.c"], &flags);
    let envs = [("LD_LIBRARY_PATH", dir.0.as_os_str())];
    let chains = vec![vec!["leaf_c", "lib_mid", "outer_lib", "main"]];
    record_chains(
        &tracer,
        &binary,
        &["callchains", "libchain.so"],
        &each_seen(&chains),
        &envs,
        &G,
        ITERATIONS,
    );
}

/// A stack taken in a signal handler goes on through the kernel's signal
/// frame into the code the signal interrupted, down to main.
#[test]
fn stacks_go_through_a_signal_frame() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("callstack-signal");
    let mut flags = FLAGS.to_vec();
    flags.push("-DWITH_SIGNAL");
    let binary = build(&clang, &dir.0, "callchains", &["callchains.c"], &flags);
    let through_handler = |seen: &Chains| {
        let n: u64 = seen
            .iter()
            .filter(|(chain, _)| chain.len() > 3 && chain[..2] == ["sig_leaf", SIGNAL_HANDLER])
            .map(|(_, n)| n)
            .sum();
        n >= MIN_PER_CHAIN
    };
    // A tenth of the work gives enough stacks through the handler. (Its
    // loop, unrolled by clang, took about 75 stops per trace before
    // proven tails, and the program ran 50 times slower; now it takes
    // one stop in ten traces: ARCHITECTURE.md, "Proven tails".)
    record_chains(
        &tracer,
        &binary,
        &["callchains"],
        &through_handler,
        &[],
        &G,
        "20000",
    );
}

/// llvm-profgen reads the hybrid samples as stacks (no truncation
/// warning) and writes the known contexts. The preinliner and nested
/// output are off, so that every context it unwound is a line of its own.
fn check_profgen_contexts(profgen: &Path, dir: &Path, binary: &Path, output: &Path) {
    let out = run_tool(
        Command::new(profgen)
            .arg(format!(
                "--perfscript={}",
                dir.join("perf.script").display()
            ))
            .arg(format!("--binary={}", binary.display()))
            .arg(format!("--output={}", output.display()))
            .args([
                "--format=text",
                "--csspgo-preinliner=0",
                "--gen-cs-nested-profile=0",
            ]),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("truncated stack samples"),
        "llvm-profgen truncated stacks: {stderr}"
    );
    let profile = std::fs::read_to_string(output).expect("the profile");
    let contexts: Vec<&str> = profile.lines().filter(|l| l.starts_with('[')).collect();
    for wanted in [
        " @ outer_a:",
        " @ mid_b:",
        " @ outer_d:",
        " @ rec:",
        " @ leaf_c]",
    ] {
        assert!(
            contexts
                .iter()
                .any(|c| c.starts_with("[main:") && c.contains(wanted)),
            "no context with '{wanted}' in llvm-profgen's profile: {contexts:?}"
        );
    }
}

/// `report` lists the known chains among the hottest call paths, root
/// first, the recursion folded.
fn check_report_paths(tracer: &Tracer, dir: &Path) {
    let out = ctl_output(
        tracer,
        &[
            "report",
            "--format",
            "json",
            "--top",
            "20",
            dir.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let paths: Vec<&str> = report["call_paths"]
        .as_array()
        .expect("call_paths")
        .iter()
        .filter_map(|p| p["path"].as_str())
        .collect();
    for wanted in [
        "main → outer_a → mid_b → leaf_c",
        "main → outer_d → leaf_c",
        "main → rec ×5 → leaf_c",
        "main → via_nofp → spin_nofp",
    ] {
        assert!(
            paths.iter().any(|p| p.ends_with(wanted)),
            "report's call paths lack '{wanted}': {paths:?}"
        );
    }
}

#[test]
fn stacks_stop_at_the_depth_asked_for() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("callstack-depth");
    let binary = build(&clang, &dir.0, "callchains", &["callchains.c"], &FLAGS);
    let out = dir.path("out");
    let profiled = record_with(
        &tracer,
        &out,
        PERIOD_NS,
        &["-g", "--stack-depth", "3"],
        &binary,
        &["20000"],
        &[],
    );
    assert!(profiled.status.success(), "{profiled:?}");
    let rec = load(&out);
    let deepest = rec.script.traces.iter().map(|t| t.stack.len()).max();
    assert_eq!(deepest, Some(3), "stacks of at most 3 frames, some of 3");
    // The rec chain alone has 7 frames in the program.
    assert!(
        counter(&rec.summary, "callstacks_truncated") > 0,
        "no stack counted as truncated: {}",
        rec.summary
    );
}

/// `check` tells a -g recording of a build without frame pointers, and
/// says nothing of it for a build with them.
#[test]
fn check_names_a_build_without_frame_pointers() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("callstack-check");
    for (name, flags) in [
        ("with_fp", FLAGS.to_vec()),
        ("without_fp", vec!["-O2", "-g", "-fomit-frame-pointer"]),
    ] {
        let binary = build(&clang, &dir.0, name, &["callchains.c"], &flags);
        let out = dir.path(&format!("out-{name}"));
        let profiled = record_with(&tracer, &out, PERIOD_NS, &["-g"], &binary, &["2000"], &[]);
        assert!(profiled.status.success(), "{profiled:?}");
        let check = ctl_output(
            &tracer,
            &["check", binary.to_str().unwrap(), out.to_str().unwrap()],
        );
        let said = String::from_utf8_lossy(&check.stdout).to_string()
            + &String::from_utf8_lossy(&check.stderr);
        assert_eq!(
            said.contains("-fno-omit-frame-pointer"),
            name == "without_fp",
            "{name}: {said}"
        );
    }
}

#[test]
fn call_stacks_need_the_emulate_mode() {
    let tracer = tracer();
    let out = ctl_output(
        &tracer,
        &["record", "-g", "--lookahead", "paper", "--", "true"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("callstack needs lookahead emulate") && stderr.lines().count() == 1,
        "{stderr}"
    );
    let out = ctl_output(&tracer, &["record", "--stack-depth", "8", "--", "true"]);
    assert!(!out.status.success());
    let out = ctl_output(
        &tracer,
        &["record", "-g", "--stack-depth", "0", "--", "true"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--stack-depth"), "{stderr}");
}

fn ctl_output(tracer: &Tracer, args: &[&str]) -> std::process::Output {
    Command::new(&tracer.ctl)
        .args(args)
        .output()
        .expect("run profiler-ctl")
}
