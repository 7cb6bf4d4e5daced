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

/// As `record`, with more `profiler-ctl record` options (`--dataflow off`).
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

pub const ABORT_KINDS: [&str; 8] = [
    "rseq",
    "sp_mismatch",
    "pc_mismatch",
    "unsupported_instruction",
    "outside_mappings",
    "lookahead_limit",
    "thread_exit",
    "session_stop",
];
pub const DROP_KINDS: [&str; 3] = ["no_free_buffer", "thread_table_full", "trace_table_full"];

/// summary.json agrees with perf.script: traces were completed, every entry
/// counted as written is in perf.script (repeat counts included), and every
/// abort and drop counter is present.
pub fn check_summary(rec: &Recording) {
    let s = &rec.summary;
    let completed = counter(s, "traces_completed");
    assert!(completed > 0, "no trace completed: {s}");
    assert_eq!(
        counter(s, "entries_written"),
        rec.script.entry_count(),
        "summary.json entries_written differs from the entries in {}/perf.script",
        rec.dir.display()
    );
    assert!(
        rec.script.trace_count() <= counter(s, "traces_started"),
        "perf.script holds {} traces, more than the {} started",
        rec.script.trace_count(),
        counter(s, "traces_started")
    );
    for kind in ABORT_KINDS {
        counter(s, &format!("aborts.{kind}"));
    }
    for kind in DROP_KINDS {
        counter(s, &format!("drops.{kind}"));
    }
    assert!(
        !rec.script.mmaps.is_empty(),
        "perf.script has no MMAP2 lines"
    );
    if let Some(written) = s.get("traces_written").and_then(|w| w.as_u64()) {
        assert_eq!(
            written,
            rec.script.trace_count(),
            "summary.json traces_written vs perf.script"
        );
    }
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
pub fn module_edges(script: &PerfScript, basename: &str) -> BTreeMap<bench_harness::Edge, u64> {
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
                *edges.entry(bench_harness::Edge { from, to }).or_insert(0) += count;
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

/// The function with the most samples.
pub fn hottest(totals: &BTreeMap<String, u64>) -> Option<&str> {
    totals
        .iter()
        .max_by_key(|(_, &t)| t)
        .map(|(n, _)| n.as_str())
}

/// create_llvm_prof 0.19 sometimes writes inlined-callee records whose name
/// is a dangling string (random bytes; google/autofdo issue 95), which
/// llvm-profdata then refuses. This drops such records with everything nested
/// under them, and call-target tokens with such names, and returns how many
/// were dropped. Records with sound names are kept byte for byte.
pub fn drop_corrupt_llvm_text_records(text: &[u8]) -> (Vec<u8>, usize) {
    fn sound_name(name: &[u8]) -> bool {
        !name.is_empty()
            && (name[0].is_ascii_alphabetic() || name[0] == b'_' || name[0] == b'.')
            && name
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b"_.$".contains(&b))
    }
    let mut out = Vec::with_capacity(text.len());
    let mut dropped = 0;
    let mut skip_deeper_than: Option<usize> = None;
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let indent = line.iter().take_while(|&&b| b == b' ').count();
        if let Some(depth) = skip_deeper_than {
            if indent > depth {
                continue;
            }
            skip_deeper_than = None;
        }
        let body = &line[indent..];
        // Top level: NAME:TOTAL:HEAD. Nested: LOC: COUNT [NAME:COUNT ...]
        // or LOC: NAME:TOTAL (an inlined callee's record).
        let (keep, rewritten) = match body.windows(2).position(|w| w == b": ") {
            Some(at) if indent > 0 => {
                let rest = &body[at + 2..];
                if rest.first().is_some_and(u8::is_ascii_digit) {
                    let mut kept = line[..indent + at + 2].to_vec();
                    for (i, token) in rest.split(|&b| b == b' ').enumerate() {
                        let name = token.rsplitn(2, |&b| b == b':').nth(1).unwrap_or(b"");
                        if i == 0 || sound_name(name) {
                            if i > 0 {
                                kept.push(b' ');
                            }
                            kept.extend_from_slice(token);
                        }
                    }
                    (true, Some(kept))
                } else {
                    let name = rest.rsplitn(2, |&b| b == b':').nth(1).unwrap_or(b"");
                    (sound_name(name), None)
                }
            }
            _ => (
                sound_name(body.split(|&b| b == b':').next().unwrap_or(b"")),
                None,
            ),
        };
        if keep {
            out.extend_from_slice(rewritten.as_deref().unwrap_or(line));
            out.push(b'\n');
        } else {
            dropped += 1;
            skip_deeper_than = Some(indent);
        }
    }
    (out, dropped)
}
