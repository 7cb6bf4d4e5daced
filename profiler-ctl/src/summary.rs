//! Printing summary.json and the control answers for a person.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use breakdance_protocol::{AbortReason, ModuleSummary, StatusReply, Summary};
use serde_json::Value;

/// At most this many child-process subdirectories are named one by one.
const MAX_CHILDREN_SHOWN: usize = 8;

/// Subdirectories `<comm>.<pid>` of `dir` holding a child process's
/// profile (its summary.json), sorted; with `since`, only those changed at
/// or after that time (so the leftovers of an earlier run into the same
/// directory are not counted). A process that exec'd again or never wrote
/// leaves an empty directory, which is not a profile.
pub fn child_dirs(dir: &Path, since: Option<SystemTime>) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    // Directory times come from a coarse kernel clock; allow it to lag.
    let since = since.map(|t| t - Duration::from_secs(1));
    let mut found: Vec<String> = entries
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let (comm, pid) = name.rsplit_once('.')?;
            let is_child = !comm.is_empty()
                && !pid.is_empty()
                && pid.bytes().all(|b| b.is_ascii_digit())
                && entry.path().join("summary.json").is_file();
            let fresh = match since {
                None => true,
                Some(t) => entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|m| m >= t),
            };
            (is_child && fresh).then_some(name)
        })
        .collect();
    found.sort();
    found
}

/// A duration in ns as a person reads it: `850 ns`, `12.3 µs`, `4.56 ms`, `2.01 s`.
pub fn format_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.1} ms", f / 1e6)
    } else {
        format!("{:.2} s", f / 1e9)
    }
}

/// Shows `path` relative to the working directory when it lies under it.
fn shown_path(path: &Path) -> PathBuf {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf))
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| path.to_path_buf())
}

/// `name value` for the pairs whose value is not zero.
fn nonzero<'a>(pairs: impl IntoIterator<Item = (&'a str, u64)>) -> Vec<String> {
    pairs
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| format!("{name} {n}"))
        .collect()
}

/// The module the next command should profile: the traced binary when it
/// has samples, else the module with the most branches (not the tracer).
fn main_module<'a>(summary: &'a Summary, binary: Option<&Path>) -> Option<&'a ModuleSummary> {
    if let Some(binary) = binary {
        if let Some(found) = summary.modules.iter().find(|m| m.path == binary) {
            return Some(found);
        }
    }
    summary
        .modules
        .iter()
        .filter(|m| {
            !m.path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libbreakdance"))
        })
        .max_by_key(|m| m.branches)
}

/// Past this share of the threads' CPU time with sampling off, samples
/// were lost: a warning. Healthy runs stay under 1% at millisecond
/// periods, 7% at 20 µs (results/speed, ninth round).
const SAMPLING_OFF_WARNING: f64 = 0.25;

/// How much of the traced threads' CPU time their sampling was on, and a
/// warning when much of it was off (a thread whose sampling nothing armed
/// again takes no sample for the rest of its run).
fn sampling_coverage(threads_cpu_ns: u64, off_ns: u64) -> Option<String> {
    if threads_cpu_ns == 0 {
        return None;
    }
    let off = off_ns.min(threads_cpu_ns) as f64 / threads_cpu_ns as f64;
    let mut line = format!(
        "  sampling: on for {:.1}% of the traced threads' {} of CPU",
        100.0 * (1.0 - off),
        format_ns(threads_cpu_ns)
    );
    if off > SAMPLING_OFF_WARNING {
        line.push_str(&format!(
            "\nwarning: sampling was off for {} of it: samples were lost, and the profile \
             under-represents that time (a thread that blocks every signal for long does \
             this; otherwise it is a bug in breakdance: please report it)",
            format_ns(off_ns)
        ));
    }
    Some(line)
}

/// The summary printed after `record` and `stop`.
///
/// `binary` is the traced executable when known (record); `children` are
/// the child-process subdirectories found in the output directory; `cpu` is
/// the user and system CPU time the program used (record).
pub fn render(
    summary: &Summary,
    binary: Option<&Path>,
    children: &[String],
    cpu: Option<(Duration, Duration)>,
) -> String {
    let mut out = String::new();
    let dir = shown_path(&summary.output_dir);
    let c = &summary.counters;
    let threads = summary.threads;
    let _ = writeln!(
        out,
        "breakdance: profiled `{}` (pid {}) for {}, {threads} thread{}; outputs in {}",
        summary.command,
        summary.pid,
        format_ns(summary.duration_ns),
        if threads == 1 { "" } else { "s" },
        dir.display()
    );
    let config = &summary.config;
    let rate = match (config.period, config.freq) {
        (Some(p), _) => format!("period {p}"),
        (None, Some(f)) => format!("{f} Hz"),
        (None, None) => "default rate".to_owned(),
    };
    let _ = writeln!(
        out,
        "  event {}, {rate}, trace length {}, look-ahead {}",
        config.event, config.lbr, config.lookahead
    );
    let _ = writeln!(
        out,
        "  traces: {} completed of {} started; {} branches written; {} samples",
        c.traces_completed, c.traces_started, summary.entries_written, c.samples
    );
    if let Some(line) = sampling_coverage(c.threads_cpu_ns, c.sampling_off_ns) {
        let _ = writeln!(out, "{line}");
    }
    if config.callstack > 0 && config.unwind == breakdance_protocol::Unwind::Dwarf {
        let _ = writeln!(
            out,
            "  call stacks: {} stack copies taken, unwound with DWARF CFI (at most {} frames), \
             {} traces without one (ended early)",
            c.callstacks, config.callstack, c.callstacks_missing
        );
    } else if config.callstack > 0 {
        let mean = c.callstack_frames as f64 / c.callstacks.max(1) as f64;
        let _ = writeln!(
            out,
            "  call stacks: {} taken (mean depth {mean:.1}, {} cut at {} frames), {} traces \
             without one (ended early)",
            c.callstacks, c.callstacks_truncated, config.callstack, c.callstacks_missing
        );
    }
    if config.values {
        let _ = writeln!(
            out,
            "  values: {} loads recorded with their values; {} found the buffer full, {} the \
             table of load instructions full",
            c.loads_recorded,
            summary.counters.drops.load_buffer_full,
            summary.counters.drops.load_table_full
        );
    }
    let (resolved, evaluated) = (c.statically_resolved, c.dynamically_evaluated);
    if c.segments > 0 {
        let per_trace = if c.traces_started > 0 {
            format!(
                " ({:.1} per trace)",
                c.breakpoints as f64 / c.traces_started as f64
            )
        } else {
            String::new()
        };
        let mismatched = c.speculation_mismatch_registers + c.speculation_mismatch_memory;
        let _ = writeln!(
            out,
            "  look-ahead: {} breakpoints{per_trace}; {} segments emulated, {} proven without \
             a checkpoint, {} with a proven tail; {} checkpoints, {mismatched} mismatched, {} \
             unreached; {} instructions left to the CPU",
            c.breakpoints,
            c.segments,
            c.segments_proven,
            c.proven_tails,
            c.checkpoints,
            c.checkpoint_unreached,
            c.step_overs
        );
        let dropped = c.aborts.get(AbortReason::SignalHandler);
        if c.segments_settled + c.segments_unsettled + dropped > 0 {
            let _ = writeln!(
                out,
                "  signal handlers (wrapped): {} proven segments kept once no handler had run, \
                 {dropped} traces cut where one had, {} never settled",
                c.segments_settled, c.segments_unsettled
            );
        }
    } else if resolved + evaluated > 0 {
        let s = resolved as f64 / (resolved + evaluated) as f64;
        let t = if evaluated > 0 {
            c.dynamic_taken as f64 / evaluated as f64
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "  look-ahead: {} breakpoints; s = {s:.2} of branches resolved statically, \
             t = {t:.2} of the rest taken",
            c.breakpoints
        );
    }
    let aborts = nonzero(c.aborts.iter().map(|(r, n)| (r.name(), n)));
    if !aborts.is_empty() {
        let _ = writeln!(out, "  aborts: {}", aborts.join(", "));
    }
    let drops = nonzero(summary.drops());
    if !drops.is_empty() {
        let _ = writeln!(out, "  drops: {}", drops.join(", "));
    }
    let times = summary.time_counters();
    // Emulation and decoding are time inside the handlers, not parts
    // beside them.
    let (within, apart): (Vec<_>, Vec<_>) = times
        .iter()
        .partition(|(name, _)| matches!(*name, "emulation_ns" | "decode_ns"));
    let total: u64 = apart.iter().map(|(_, n)| n).sum();
    if total > 0 {
        let parts: Vec<String> = apart
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(name, n)| {
                let name = name
                    .trim_end_matches("_ns")
                    .replace("start_stop", "start and stop");
                format!("{} {name}", format_ns(*n))
            })
            .collect();
        let time_of = |want: &str| {
            within
                .iter()
                .find(|(name, n)| *name == want && *n > 0)
                .map(|(_, n)| format_ns(*n))
        };
        // Emulate mode decodes while it emulates; paper mode while it walks.
        let emulating = match (time_of("emulation_ns"), time_of("decode_ns")) {
            (Some(e), Some(d)) => {
                format!("; of the handlers' time, {e} emulating ({d} of it decoding)")
            }
            (Some(e), None) => format!("; of the handlers' time, {e} emulating"),
            (None, Some(d)) => format!("; of the handlers' time, {d} decoding"),
            (None, None) => String::new(),
        };
        let share = if summary.duration_ns > 0 {
            format!(
                " = {:.1}% of the run's wall time",
                100.0 * total as f64 / summary.duration_ns as f64
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  library time: {}{share}{emulating}",
            parts.join(", ")
        );
    }
    if let Some((user, system)) = cpu {
        // Breakpoint and sample signals are kernel work: the system time
        // shows their cost, which the library times above do not include.
        let _ = writeln!(
            out,
            "  program CPU time: {} user, {} system",
            format_ns(user.as_nanos() as u64),
            format_ns(system.as_nanos() as u64)
        );
    }
    if !summary.files.is_empty() {
        let _ = writeln!(out, "  files: {}", summary.files.join(", "));
    }
    if !children.is_empty() {
        let mut shown: Vec<String> = children
            .iter()
            .take(MAX_CHILDREN_SHOWN)
            .map(|c| format!("{c}/"))
            .collect();
        if children.len() > MAX_CHILDREN_SHOWN {
            shown.push(format!("and {} more", children.len() - MAX_CHILDREN_SHOWN));
        }
        let _ = writeln!(
            out,
            "  child processes were profiled too, each into its own subdirectory: {}",
            shown.join(", ")
        );
    }

    if c.traces_completed == 0 {
        let _ = writeln!(
            out,
            "no trace was completed: the run may be shorter than the sampling period; \
             lower -c or raise -F"
        );
        return out;
    }
    let module = main_module(summary, binary);
    let binary_text = binary
        .or(module.map(|m| m.path.as_path()))
        .map_or("BINARY".to_owned(), |b| b.display().to_string());
    let dir_prefix = format!("{}/", dir.display());
    let _ = writeln!(out, "next: turn the traces into an AutoFDO profile:");
    let _ = writeln!(
        out,
        "  llvm-profgen-19 --perfscript={dir_prefix}perf.script --binary={binary_text} --output=prof.afdo"
    );
    if let Some(m) = module {
        let _ = writeln!(
            out,
            "  or: create_llvm_prof --profiler=text --profile={dir_prefix}{} --binary={binary_text} --out=prof.gcov",
            m.afdo
        );
    }
    out
}

/// The `start` and `status` answers as aligned `name  value` lines.
pub fn render_status(reply: &StatusReply) -> String {
    let value = serde_json::to_value(reply).unwrap_or(Value::Null);
    render_fields(&value)
}

/// A control answer's JSON object as aligned `name  value` lines; nested
/// objects become `outer.inner`, and `*_ns` counters are shown as durations.
fn render_fields(payload: &Value) -> String {
    let mut rows = Vec::new();
    flatten("", payload, &mut rows);
    // serde_json keeps keys sorted; the state reads best first.
    if let Some(at) = rows.iter().position(|(k, _)| k == "state") {
        let state = rows.remove(at);
        rows.insert(0, state);
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (key, value) in rows {
        let _ = writeln!(out, "  {key:<width$}  {value}");
    }
    out
}

fn flatten(prefix: &str, value: &Value, rows: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let name = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                if inner.is_object() {
                    flatten(&name, inner, rows);
                } else {
                    let is_ns = name.ends_with("_ns") || prefix.ends_with("_ns");
                    let text = match inner {
                        Value::Number(n) if is_ns && n.is_u64() => {
                            format_ns(n.as_u64().unwrap_or(0))
                        }
                        Value::String(s) => s.clone(),
                        Value::Null => "-".to_owned(),
                        other => other.to_string(),
                    };
                    rows.push((name, text));
                }
            }
        }
        other => rows.push((prefix.to_owned(), other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use breakdance_protocol::{Event, Lookahead, SessionConfig, SCHEMA_VERSION};

    fn module(path: &str, afdo: &str, branches: u64) -> ModuleSummary {
        ModuleSummary {
            path: path.into(),
            afdo: afdo.into(),
            branches,
            ..Default::default()
        }
    }

    fn example() -> Summary {
        let mut s = Summary {
            schema: SCHEMA_VERSION,
            pid: 4242,
            command: "./demo".into(),
            output_dir: "/nonexistent/out".into(),
            config: SessionConfig {
                event: Event::TaskClock,
                period: Some(1000000),
                freq: None,
                lbr: 32,
                lookahead: Lookahead::Paper,
                callstack: 0,
                unwind: breakdance_protocol::Unwind::Fp,
                values: false,
            },
            duration_ns: 2_000_000_000,
            threads: 1,
            entries_written: 39488,
            modules: vec![
                module(
                    "/usr/lib/x86_64-linux-gnu/libc.so.6",
                    "libc.so.6.afdo.txt",
                    900,
                ),
                module("/work/demo", "demo.afdo.txt", 500),
            ],
            files: [
                "perf.script",
                "demo.afdo.txt",
                "libc.so.6.afdo.txt",
                "summary.json",
            ]
            .map(String::from)
            .to_vec(),
            ..Default::default()
        };
        let c = &mut s.counters;
        (c.samples, c.traces_started, c.traces_completed) = (1500, 1300, 1234);
        (
            c.breakpoints,
            c.statically_resolved,
            c.dynamically_evaluated,
        ) = (20000, 60, 40);
        c.dynamic_taken = 10;
        (c.sampling_ns, c.breakpoint_ns, c.decode_ns) = (12_300_000, 45_600_000, 2_100_000);
        *c.aborts.get_mut(AbortReason::SpMismatch) = 3;
        *c.aborts.get_mut(AbortReason::ThreadExit) = 2;
        s
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_ns(850), "850 ns");
        assert_eq!(format_ns(12_345), "12.3 µs");
        assert_eq!(format_ns(45_600_000), "45.6 ms");
        assert_eq!(format_ns(2_012_000_000), "2.01 s");
    }

    #[test]
    fn summary_names_counters_files_children_and_the_next_step() {
        let text = render(
            &example(),
            Some(Path::new("/work/demo")),
            &["sh.77".into(), "cat.78".into()],
            Some((Duration::from_millis(2_100), Duration::from_millis(350))),
        );
        let expected = "\
breakdance: profiled `./demo` (pid 4242) for 2.00 s, 1 thread; outputs in /nonexistent/out
  event task-clock, period 1000000, trace length 32, look-ahead paper
  traces: 1234 completed of 1300 started; 39488 branches written; 1500 samples
  look-ahead: 20000 breakpoints; s = 0.60 of branches resolved statically, t = 0.25 of the rest taken
  aborts: sp_mismatch 3, thread_exit 2
  library time: 12.3 ms sampling, 45.6 ms breakpoint = 2.9% of the run's wall time; of the handlers' time, 2.1 ms decoding
  program CPU time: 2.10 s user, 350.0 ms system
  files: perf.script, demo.afdo.txt, libc.so.6.afdo.txt, summary.json
  child processes were profiled too, each into its own subdirectory: sh.77/, cat.78/
next: turn the traces into an AutoFDO profile:
  llvm-profgen-19 --perfscript=/nonexistent/out/perf.script --binary=/work/demo --output=prof.afdo
  or: create_llvm_prof --profiler=text --profile=/nonexistent/out/demo.afdo.txt --binary=/work/demo --out=prof.gcov
";
        assert_eq!(text, expected);
    }

    #[test]
    fn sampling_coverage_is_shown_and_a_long_gap_warned_of() {
        assert_eq!(sampling_coverage(0, 0), None);
        let fine = sampling_coverage(2_000_000_000, 8_000_000).expect("a line");
        assert!(
            fine.contains("on for 99.6% of the traced threads' 2.00 s of CPU"),
            "{fine}"
        );
        assert!(!fine.contains("warning"), "{fine}");
        let lost = sampling_coverage(1_000_000_000, 980_000_000).expect("a line");
        assert!(lost.contains("on for 2.0%"), "{lost}");
        assert!(
            lost.contains("\nwarning: sampling was off for 980.0 ms"),
            "{lost}"
        );
    }

    #[test]
    fn emulate_mode_reports_segments_and_checkpoints() {
        let mut s = example();
        s.config.lookahead = Lookahead::Emulate;
        let c = &mut s.counters;
        (
            c.statically_resolved,
            c.dynamically_evaluated,
            c.dynamic_taken,
        ) = (0, 0, 0);
        (c.breakpoints, c.segments, c.segments_proven) = (1950, 1400, 100);
        c.proven_tails = 40;
        (c.checkpoints, c.checkpoint_unreached, c.step_overs) = (1290, 8, 2);
        (
            c.speculation_mismatch_registers,
            c.speculation_mismatch_memory,
        ) = (1, 1);
        (c.decode_ns, c.emulation_ns) = (4_000_000, 30_000_000);
        let text = render(&s, Some(Path::new("/work/demo")), &[], None);
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(prefix))
                .unwrap_or_else(|| panic!("no {prefix} line in\n{text}"))
                .trim()
                .to_string()
        };
        assert_eq!(
            line("look-ahead:"),
            "look-ahead: 1950 breakpoints (1.5 per trace); 1400 segments emulated, 100 proven \
             without a checkpoint, 40 with a proven tail; 1290 checkpoints, 2 mismatched, 8 \
             unreached; 2 instructions left to the CPU"
        );
        assert!(!text.contains("signal handlers"), "{text}");
        let c = &mut s.counters;
        (c.segments_settled, c.segments_unsettled) = (90, 1);
        *c.aborts.get_mut(AbortReason::SignalHandler) = 3;
        let text = render(&s, Some(Path::new("/work/demo")), &[], None);
        assert!(
            text.contains(
                "signal handlers (wrapped): 90 proven segments kept once no handler had run, 3 \
                 traces cut where one had, 1 never settled"
            ),
            "{text}"
        );
        assert_eq!(
            line("library time:"),
            "library time: 12.3 ms sampling, 45.6 ms breakpoint = 2.9% of the run's wall time; \
             of the handlers' time, 30.0 ms emulating (4.0 ms of it decoding)"
        );
    }

    #[test]
    fn without_a_binary_the_busiest_module_is_suggested() {
        let text = render(&example(), None, &[], None);
        assert!(
            text.contains("--binary=/usr/lib/x86_64-linux-gnu/libc.so.6 --output"),
            "{text}"
        );
        assert!(
            text.contains("--profile=/nonexistent/out/libc.so.6.afdo.txt"),
            "{text}"
        );
        assert!(!text.contains("child processes"), "{text}");
    }

    #[test]
    fn an_empty_profile_says_why_there_is_no_next_step() {
        let mut summary = example();
        summary.counters.traces_completed = 0;
        summary.counters.drops.no_free_buffer = 7;
        summary.counters.drops.trace_table_full = 2;
        let text = render(&summary, None, &[], None);
        assert!(
            text.contains("  drops: no_free_buffer 7, trace_table_full 2\n"),
            "{text}"
        );
        assert!(text.contains("no trace was completed"), "{text}");
        assert!(!text.contains("llvm-profgen"), "{text}");
    }

    #[test]
    fn status_fields_are_flattened_and_aligned() {
        let text = render_status(&StatusReply::Off {
            unwritten_session: true,
        });
        assert_eq!(
            text,
            "  state              off\n  unwritten_session  true\n"
        );
        let running = StatusReply::Running {
            event: Event::TaskClock,
            lbr: 32,
            output_dir: "/o".into(),
            elapsed_ns: 1500,
            threads: 2,
            counters: Default::default(),
        };
        let text = render_status(&running);
        assert!(text.starts_with("  state "), "{text}");
        assert!(text.contains("  elapsed_ns "), "{text}");
        assert!(text.contains(" 1.5 µs\n"), "{text}");
        assert!(text.contains("  aborts.rseq "), "{text}");
    }

    #[test]
    fn child_directories_are_found_by_their_name() {
        let dir =
            std::env::temp_dir().join(format!("profiler-ctl-children-{}", std::process::id()));
        for sub in ["sh.12", "cat.3", "notes", "x.y", ".5", "empty.4"] {
            fs::create_dir_all(dir.join(sub)).unwrap();
            if sub != "empty.4" {
                fs::write(dir.join(sub).join("summary.json"), b"{}").unwrap();
            }
        }
        fs::write(dir.join("file.9"), b"").unwrap();
        assert_eq!(
            child_dirs(&dir, None),
            vec!["cat.3".to_owned(), "sh.12".to_owned()]
        );
        let later = SystemTime::now() + Duration::from_secs(60);
        assert!(child_dirs(&dir, Some(later)).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }
}
