//! Shared pieces of the end-to-end tests: finding the built tracer, building
//! the C programs of `tests/programs/`, running them with and without the
//! tracer, and reading and checking what the tracer wrote.
//!
//! The tracer is the one built in this checkout: the test executable is
//! `target/<profile>/deps/NAME-HASH`, so `target/<profile>/` holds
//! `profiler-ctl` and `libbreakdance.so` after `cargo build --release --workspace`.

// Each test file uses its own part of this module.
#![allow(dead_code)]

pub mod controlled;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bench_harness::elf::ModuleMap;
use bench_harness::perfscript::{self, PerfScript};
use bench_harness::{tools, validate};

/// The built tracer.
pub struct Tracer {
    pub ctl: PathBuf,
    pub lib: PathBuf,
}

/// Finds `profiler-ctl` and `libbreakdance.so` next to the test executable's
/// profile directory; a clear failure when they are not built.
pub fn tracer() -> Tracer {
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable is target/<profile>/deps/NAME");
    let tracer = Tracer {
        ctl: profile_dir.join("profiler-ctl"),
        lib: profile_dir.join("libbreakdance.so"),
    };
    for path in [&tracer.ctl, &tracer.lib] {
        assert!(
            path.is_file(),
            "{} is missing: run `cargo build --release --workspace` before \
             `cargo test --release --workspace` (the tests use the tracer of this checkout)",
            path.display()
        );
    }
    tracer
}

/// A tool the test needs: `None` means skip (outside CI only).
pub fn tool(name: &str) -> Option<PathBuf> {
    tools::require(name)
}

/// A scratch directory removed at drop unless the test is failing (kept for
/// inspection; its path is printed).
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        Scratch(tools::scratch_dir(tag).expect("create scratch dir"))
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} for inspection", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Path of a C source in `tests/programs/`.
pub fn program_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(name)
}

/// Builds `sources` (names in `tests/programs/`) into `dir/output` with the
/// profiling flags and `extra` arguments.
pub fn build(clang: &Path, dir: &Path, output: &str, sources: &[&str], extra: &[&str]) -> PathBuf {
    let paths: Vec<PathBuf> = sources.iter().map(|s| program_source(s)).collect();
    let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    let binary = dir.join(output);
    let mut args = vec!["-Wall", "-Werror"];
    args.extend_from_slice(extra);
    tools::compile_c(clang, &refs, &binary, &args).unwrap_or_else(|e| panic!("{e}"));
    binary
}

/// Runs `program args` with `envs`, capturing its output.
pub fn run_native(program: &Path, args: &[&str], envs: &[(&str, &OsStr)]) -> Output {
    Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()))
}

/// Runs `program args` under `profiler-ctl record -q -c PERIOD -o OUT`.
pub fn record(
    tracer: &Tracer,
    out: &Path,
    period_ns: u64,
    program: &Path,
    args: &[&str],
    envs: &[(&str, &OsStr)],
) -> Output {
    record_with(tracer, out, period_ns, &[], program, args, envs)
}

/// As `record`, with more `profiler-ctl record` options (`--lookahead paper`).
pub fn record_with(
    tracer: &Tracer,
    out: &Path,
    period_ns: u64,
    options: &[&str],
    program: &Path,
    args: &[&str],
    envs: &[(&str, &OsStr)],
) -> Output {
    Command::new(&tracer.ctl)
        .args(["record", "-q", "-c", &period_ns.to_string(), "-o"])
        .arg(out)
        .args(options)
        .arg("--")
        .arg(program)
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", tracer.ctl.display()))
}

/// The profiled run printed the same and exited the same as the native one.
pub fn assert_same_behaviour(name: &str, native: &Output, profiled: &Output) {
    assert_eq!(
        native.status.code(),
        profiled.status.code(),
        "{name}: exit status differs under the tracer; profiled stderr:\n{}",
        String::from_utf8_lossy(&profiled.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&native.stdout),
        String::from_utf8_lossy(&profiled.stdout),
        "{name}: stdout differs under the tracer; profiled stderr:\n{}",
        String::from_utf8_lossy(&profiled.stderr)
    );
}

/// What one session wrote.
pub struct Recording {
    pub dir: PathBuf,
    pub script: PerfScript,
    pub summary: serde_json::Value,
}

/// Reads `dir/perf.script` and `dir/summary.json`.
pub fn load(dir: &Path) -> Recording {
    let script = perfscript::parse_file(&dir.join("perf.script")).unwrap_or_else(|e| panic!("{e}"));
    let summary_path = dir.join("summary.json");
    let text = std::fs::read_to_string(&summary_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", summary_path.display()));
    let summary = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", summary_path.display()));
    Recording {
        dir: dir.to_path_buf(),
        script,
        summary,
    }
}

/// A counter of summary.json by its dotted path (`aborts.rseq`).
pub fn counter(summary: &serde_json::Value, path: &str) -> u64 {
    let mut value = summary;
    for key in path.split('.') {
        value = value
            .get(key)
            .unwrap_or_else(|| panic!("summary.json lacks {path}: {summary}"));
    }
    value
        .as_u64()
        .unwrap_or_else(|| panic!("summary.json {path} is not a count: {value}"))
}

pub const ABORT_KINDS: [&str; 17] = [
    "rseq",
    "sp_mismatch",
    "pc_mismatch",
    "unsupported_instruction",
    "outside_mappings",
    "lookahead_limit",
    "syscall",
    "thread_exit",
    "session_stop",
    "breakpoint_failed",
    "speculation_mismatch",
    "checkpoint_unreached",
    "breakpoint_unreached",
    "emulation_fault",
    "handler_abandoned",
    "handler_budget",
    "signal_handler",
];
pub const DROP_KINDS: [&str; 8] = [
    "no_free_buffer",
    "no_free_state",
    "thread_table_full",
    "trace_table_full",
    "trace_table_full_entries",
    "buffer_overflow_entries",
    "load_buffer_full",
    "load_table_full",
];

/// Traces (repeat counts included) and entries in a perf.script text,
/// counted from its lines alone, without the harness's parser: a line that
/// is only a decimal number is the repeat count of the sample line after
/// it; a sample line is a hex ip followed by `0xFROM/0xTO/...` entries, or
/// (a hybrid sample, with call stacks) the entries alone after indented
/// lines of one hex frame each.
pub fn raw_script_counts(path: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let (mut traces, mut entries, mut repeat) = (0u64, 0u64, 1u64);
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with("PERF_RECORD_") {
            continue;
        }
        if raw.starts_with('\t') && !line.contains(' ') && !line.contains('/') {
            // A call-stack frame.
            continue;
        }
        if line.bytes().all(|b| b.is_ascii_digit()) {
            repeat = line.parse().expect("repeat count");
            continue;
        }
        let has_ip = !line.split(' ').next().unwrap_or_default().contains('/');
        let n = line
            .split(' ')
            .skip(usize::from(has_ip))
            .filter(|w| w.starts_with("0x") && w.matches('/').count() == 5)
            .count() as u64;
        assert!(
            n > 0,
            "{}: a sample line without entries: {line}",
            path.display()
        );
        traces += repeat;
        entries += repeat * n;
        repeat = 1;
    }
    (traces, entries)
}

/// The counters of summary.json reconcile with each other and with what
/// perf.script holds, counted independently of the writer:
///
/// - samples = traces_started + drops.no_free_buffer +
///   drops.no_free_state + samples_in_trace (a sample starts a trace
///   unless no buffer or no pooled per-thread state is free, or the
///   thread's trace is still moving);
/// - traces_started = traces_completed + Σ aborts by reason, and
///   traces_aborted = Σ aborts;
/// - traces_written = traces_completed + traces_aborted − traces_empty −
///   drops.trace_table_full = the traces in perf.script;
/// - entries_recorded = entries_written + drops.trace_table_full_entries,
///   and entries_written = the entries in perf.script.
pub fn check_reconciles(rec: &Recording) {
    let s = &rec.summary;
    let c = |path: &str| counter(s, path);
    let aborted: u64 = ABORT_KINDS.iter().map(|k| c(&format!("aborts.{k}"))).sum();
    let listed = s["aborts"].as_object().map_or(0, |o| o.len());
    assert_eq!(
        listed,
        ABORT_KINDS.len(),
        "summary.json aborts has reasons the tests do not know: {s}"
    );
    for kind in DROP_KINDS {
        c(&format!("drops.{kind}"));
    }
    assert_eq!(
        c("samples"),
        c("traces_started")
            + c("drops.no_free_buffer")
            + c("drops.no_free_state")
            + c("samples_in_trace")
            + c("samples_in_handler"),
        "samples ≠ traces_started + no_free_buffer + no_free_state + samples_in_trace \
         + samples_in_handler: {s}"
    );
    assert_eq!(
        c("traces_aborted"),
        aborted,
        "traces_aborted ≠ Σ aborts: {s}"
    );
    assert_eq!(
        c("traces_started"),
        c("traces_completed") + aborted,
        "traces_started ≠ completed + aborted by reason: {s}"
    );
    assert_eq!(
        c("traces_written"),
        c("traces_completed") + aborted - c("traces_empty") - c("drops.trace_table_full"),
        "traces_written ≠ completed + aborted − empty − trace_table_full: {s}"
    );
    assert_eq!(
        c("entries_recorded"),
        c("entries_written") + c("drops.trace_table_full_entries"),
        "entries_recorded ≠ entries_written + trace_table_full_entries: {s}"
    );
    if s["config"]["lookahead"] == "emulate" {
        assert_eq!(
            c("entries_recorded"),
            c("validated_entries") + c("proven_entries"),
            "emulate: entries_recorded ≠ validated_entries + proven_entries: {s}"
        );
    }
    if s["config"]["values"] == true {
        let path = rec.dir.join(breakdance_protocol::values::VALUES_FILE);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let rows = breakdance_protocol::values::parse_values(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let listed: u64 = rows.iter().map(|r| r.executions).sum();
        assert_eq!(
            c("loads_recorded"),
            listed + c("drops.load_table_full"),
            "loads_recorded ≠ Σ executions in values.csv ({listed}) + load_table_full: {s}"
        );
        assert!(
            c("loads_recorded") + c("drops.load_buffer_full") <= c("emulated_steps"),
            "more loads recorded than steps emulated (one load per step at most): {s}"
        );
        for r in &rows {
            let counted: u64 = r.values.iter().map(|v| v.1).sum();
            assert_eq!(
                counted + r.other,
                r.executions,
                "a values.csv row's values and other do not add up to its executions: {r:?}"
            );
        }
    }
    let (traces, entries) = raw_script_counts(&rec.dir.join("perf.script"));
    assert_eq!(
        (traces, entries),
        (c("traces_written"), c("entries_written")),
        "{}/perf.script holds {traces} traces and {entries} entries; summary.json says \
         traces_written {} and entries_written {}",
        rec.dir.display(),
        c("traces_written"),
        c("entries_written")
    );
    assert_eq!(
        (rec.script.trace_count(), rec.script.entry_count()),
        (traces, entries),
        "the harness's perf.script parser and the line count disagree"
    );
}

/// summary.json reconciles (see [`check_reconciles`]), at least one trace
/// completed, each module's branch count is the perf.script entries inside
/// it, and every file it lists exists.
pub fn check_summary(rec: &Recording) {
    let s = &rec.summary;
    let completed = counter(s, "traces_completed");
    assert!(completed > 0, "no trace completed: {s}");
    // The worker drained the buffers these traces came in: it ran.
    assert!(
        counter(s, "worker_ns") > 0,
        "the worker's CPU time is missing: {s}"
    );
    // The session was started and its outputs written: that took time.
    assert!(
        counter(s, "start_stop_ns") > 0,
        "the start and stop's CPU time is missing: {s}"
    );
    // Emulation runs inside the handlers, and decoding inside emulation
    // (emulate mode) or the walk (paper and verify modes).
    let (emulation, decode) = (counter(s, "emulation_ns"), counter(s, "decode_ns"));
    let handlers = counter(s, "sampling_ns") + counter(s, "breakpoint_ns");
    assert!(
        emulation <= handlers && decode <= handlers,
        "emulation or decoding outlasts the handlers: {s}"
    );
    if emulation > 0 {
        assert!(decode <= emulation, "decoding outlasts emulation: {s}");
    }
    if counter(s, "emulation_decodes") > 0 {
        assert!(decode > 0, "the emulation decoded, in no time: {s}");
    }
    // A thread's sampling event runs from its registration to its close
    // (`events::set_sampling_period`); when each sample took it off until a
    // handler armed it again, a path that forgot left it off for good
    // (results/speed, ninth round). Judged once the threads ran 20 ms.
    let (ran, off) = (counter(s, "threads_cpu_ns"), counter(s, "sampling_off_ns"));
    assert!(off <= ran, "sampling off longer than the threads ran: {s}");
    if ran >= 20_000_000 {
        assert!(
            off * 2 <= ran,
            "sampling was off for {off} ns of the threads' {ran} ns of CPU: {s}"
        );
    }
    check_reconciles(rec);
    assert!(
        !rec.script.mmaps.is_empty(),
        "perf.script has no MMAP2 lines"
    );
    // Each module's branch count is the entries with both ends in it.
    let modules = s["modules"]
        .as_array()
        .unwrap_or_else(|| panic!("summary.json lacks modules: {s}"));
    for module in modules {
        let path = module["path"].as_str().unwrap_or_default();
        let basename = Path::new(path)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let branches = counter(module, "branches");
        let in_script: u64 = module_edges(&rec.script, basename).values().sum();
        assert_eq!(
            branches, in_script,
            "summary.json says {path} has {branches} branches, perf.script has {in_script}"
        );
    }
    let files = s["files"]
        .as_array()
        .unwrap_or_else(|| panic!("summary.json lacks files: {s}"));
    for file in files {
        let name = file
            .as_str()
            .unwrap_or_else(|| panic!("summary.json files holds {file}"));
        assert!(
            rec.dir.join(name).is_file(),
            "summary.json lists {name}, which is not in {}",
            rec.dir.display()
        );
    }
}

/// Every entry of every trace is a real taken transfer: zero violations.
pub fn assert_valid_traces(name: &str, rec: &Recording) -> validate::Report {
    let report = validate::validate_script(&rec.script);
    eprintln!("{name}: {report}");
    assert_eq!(
        report.total_violations(),
        0,
        "{name}: invalid trace entries: {report}"
    );
    report
}

/// Names of the functions touched by any entry (from or to), over all modules.
pub fn functions_in_traces(script: &PerfScript) -> BTreeSet<String> {
    let (modules, _) = ModuleMap::from_mmaps(&script.mmaps);
    let mut names = BTreeSet::new();
    for trace in &script.traces {
        for edge in &trace.entries_newest_first {
            for address in [edge.from, edge.to] {
                if let Some((m, vaddr)) = modules.resolve(address) {
                    if let Some(symbol) = modules.modules[m].symbol_at(vaddr) {
                        names.insert(symbol.name.clone());
                    }
                }
            }
        }
    }
    names
}

/// Taken-branch counts of the module named `basename`, as link-time
/// addresses, keeping only entries whose both ends lie in that module.
pub fn module_edges(script: &PerfScript, basename: &str) -> BTreeMap<bench_harness::Branch, u64> {
    let (modules, _) = ModuleMap::from_mmaps(&script.mmaps);
    let (index, _) = modules
        .module_by_basename(basename)
        .unwrap_or_else(|| panic!("perf.script has no MMAP2 line for {basename}"));
    let mut edges = BTreeMap::new();
    for (edge, count) in script.edge_counts() {
        if let (Some((mf, from)), Some((mt, to))) =
            (modules.resolve(edge.from), modules.resolve(edge.to))
        {
            if mf == index && mt == index {
                *edges.entry(bench_harness::Branch { from, to }).or_insert(0) += count;
            }
        }
    }
    edges
}

/// Runs a command, failing with its stderr when it does not succeed.
pub fn run_tool(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Per-function total sample counts of a sample profile, read with
/// `llvm-profdata-19 show --sample`.
pub fn function_totals(profdata: &Path, profile: &Path) -> BTreeMap<String, u64> {
    let output = run_tool(
        Command::new(profdata)
            .args(["show", "--sample"])
            .arg(profile),
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let mut totals = BTreeMap::new();
    for line in text.lines() {
        // "Function: NAME: TOTAL, HEAD, N sampled lines"
        let Some(rest) = line.strip_prefix("Function: ") else {
            continue;
        };
        let Some((name, counts)) = rest.rsplit_once(": ") else {
            continue;
        };
        let total = counts.split(',').next().and_then(|t| t.trim().parse().ok());
        if let Some(total) = total {
            totals.insert(name.to_string(), total);
        }
    }
    totals
}

/// The per-function totals of the profile llvm-profgen-19 makes from
/// `dir/perf.script` for `binary` (the executable or one of its shared
/// libraries), written under `work`. Fails when llvm-profgen finds no
/// MMAP2 line for the binary: it would then assume link-time addresses.
pub fn profgen_totals(dir: &Path, binary: &Path, work: &Path) -> BTreeMap<String, u64> {
    let profgen = tool("llvm-profgen-19").expect("llvm-profgen-19");
    let profdata = tool("llvm-profdata-19").expect("llvm-profdata-19");
    let name = binary.file_name().unwrap().to_string_lossy();
    let out = work.join(format!("{name}.profgen.prof"));
    let output = run_tool(
        Command::new(&profgen)
            .arg(format!(
                "--perfscript={}",
                dir.join("perf.script").display()
            ))
            .arg(format!("--binary={}", binary.display()))
            .arg(format!("--output={}", out.display())),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("No relevant mmap event"),
        "llvm-profgen found no MMAP2 line for {name}: {stderr}"
    );
    function_totals(&profdata, &out)
}

/// The per-function totals of the profile create_llvm_prof makes from the
/// AutoFDO text `dir/NAME.afdo.txt` of `binary` (NAME its file name),
/// written under `work`. Fails when the text is missing or the profile
/// comes out empty (what addresses that miss the code give).
pub fn create_llvm_prof_totals(dir: &Path, binary: &Path, work: &Path) -> BTreeMap<String, u64> {
    let create = tool("create_llvm_prof").expect("create_llvm_prof");
    let profdata = tool("llvm-profdata-19").expect("llvm-profdata-19");
    let name = binary.file_name().unwrap().to_string_lossy();
    let afdo_text = dir.join(format!("{name}.afdo.txt"));
    assert!(
        afdo_text.is_file(),
        "{} was not written",
        afdo_text.display()
    );
    let out = work.join(format!("{name}.afdo.prof"));
    run_tool(
        Command::new(&create)
            .arg("--profiler=text")
            .arg(format!("--profile={}", afdo_text.display()))
            .arg(format!("--binary={}", binary.display()))
            .arg(format!("--out={}", out.display()))
            // create_llvm_prof 0.19's binary writer fails on every input here
            // ("Truncated function name table"); its text output works, once
            // records with corrupt names are dropped (below).
            .arg("--format=text"),
    );
    let written = std::fs::read(&out).unwrap_or_default();
    assert!(
        !written.is_empty(),
        "create_llvm_prof wrote an empty profile for {name} from {}",
        afdo_text.display()
    );
    let (sound, dropped) = bench_harness::llvm_text::sanitize_llvm_text(&written);
    if dropped > 0 {
        eprintln!("{name}: dropped {dropped} create_llvm_prof records with corrupt names");
    }
    let sound_out = work.join(format!("{name}.afdo.sound.prof"));
    std::fs::write(&sound_out, sound).unwrap();
    function_totals(&profdata, &sound_out)
}

/// The function with the most samples.
pub fn hottest(totals: &BTreeMap<String, u64>) -> Option<&str> {
    totals
        .iter()
        .max_by_key(|(_, &t)| t)
        .map(|(n, _)| n.as_str())
}

/// How long a test waits for something that happens by itself (a socket
/// appearing, the first traces). Not a speed check: it only keeps a broken
/// library from hanging the suite.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// The `status` reply of the library listening on `socket`, as JSON.
pub fn status_of(socket: &Path) -> serde_json::Value {
    use std::io::{Read, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(socket)
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", socket.display()));
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(b"status\n").unwrap();
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .unwrap_or_else(|e| panic!("no status answer on {}: {e}", socket.display()));
    let json = answer
        .trim_end()
        .strip_prefix("ok ")
        .unwrap_or_else(|| panic!("status was answered {answer:?}"));
    serde_json::from_str(json).unwrap_or_else(|e| panic!("status reply is not JSON ({e}): {json}"))
}

/// Waits until the session on `socket` has completed at least `min`
/// traces: the readiness a test needs before it stops or signals a session
/// (rather than a fixed sleep, which a slow machine would not honour).
pub fn wait_for_traces(socket: &Path, min: u64) {
    let since = std::time::Instant::now();
    loop {
        let status = status_of(socket);
        if status["traces_completed"].as_u64().unwrap_or(0) >= min {
            return;
        }
        assert!(
            since.elapsed() < PATIENCE,
            "fewer than {min} traces completed after {} s: {status}",
            PATIENCE.as_secs()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The first child process of `pid` (the program `profiler-ctl record`
/// started), waiting for it to exist.
pub fn child_of(pid: u32) -> u32 {
    let since = std::time::Instant::now();
    loop {
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(child) = children.split_whitespace().next() {
            return child.parse().expect("pid");
        }
        assert!(since.elapsed() < PATIENCE, "{pid} started no child");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The control socket a preloaded process listens on by default, for a
/// process that inherited this test's environment (the library's own rule).
pub fn default_socket(pid: u32) -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    breakdance_protocol::socket_path::socket_place(pid as i32, uid, |k| std::env::var(k).ok())
        .path()
}

/// Waits for `socket` to exist.
pub fn wait_for_socket(socket: &Path) {
    let since = std::time::Instant::now();
    while !socket.exists() {
        assert!(
            since.elapsed() < PATIENCE,
            "{} never appeared",
            socket.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
