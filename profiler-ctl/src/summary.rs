//! Reading `summary.json` and the control answers, and printing them for a
//! person.
//!
//! The JSON is read as a `serde_json::Value` and every field is optional, so
//! a library that adds counters, or leaves one out, still gets a summary.

use std::fmt::Write as _;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use serde_json::Value;

/// At most this many child-process subdirectories are named one by one.
const MAX_CHILDREN_SHOWN: usize = 8;

/// Reads `DIR/summary.json`; `Ok(None)` when there is none.
pub fn load(dir: &Path) -> Result<Option<Value>> {
    let path = dir.join("summary.json");
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", path.display()))?;
    Ok(Some(value))
}

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

fn u64_at(v: &Value, path: &[&str]) -> Option<u64> {
    path.iter().try_fold(v, |v, key| v.get(key))?.as_u64()
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key)?.as_str()
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

/// `name value` pairs of the entries of an object that are not zero.
fn nonzero(v: &Value, key: &str) -> Vec<String> {
    let Some(map) = v.get(key).and_then(Value::as_object) else {
        return Vec::new();
    };
    map.iter()
        .filter_map(|(name, n)| n.as_u64().filter(|&n| n > 0).map(|n| format!("{name} {n}")))
        .collect()
}

/// The module the next command should profile: the traced binary when it
/// has samples, else the module with the most branches (not the tracer).
/// Returns its path and its AutoFDO text file.
fn main_module<'a>(
    summary: &'a Value,
    binary: Option<&Path>,
) -> Option<(&'a str, Option<&'a str>)> {
    let modules = summary.get("modules")?.as_array()?;
    let entry = |m: &'a Value| Some((str_at(m, "path")?, str_at(m, "afdo")));
    if let Some(binary) = binary {
        if let Some(found) = modules
            .iter()
            .find(|m| str_at(m, "path").map(Path::new) == Some(binary))
        {
            return entry(found);
        }
    }
    modules
        .iter()
        .filter(|m| {
            let path = str_at(m, "path").unwrap_or("");
            !Path::new(path)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libbreakdance"))
        })
        .max_by_key(|m| u64_at(m, &["branches"]).unwrap_or(0))
        .and_then(entry)
}

/// The summary printed after `record` and `stop`.
///
/// `binary` is the traced executable when known (record); `children` are
/// the child-process subdirectories found in the output directory; `cpu` is
/// the user and system CPU time the program used (record).
pub fn render(
    summary: &Value,
    binary: Option<&Path>,
    children: &[String],
    cpu: Option<(Duration, Duration)>,
) -> String {
    let mut out = String::new();
    let dir = str_at(summary, "output_dir").map(|d| shown_path(Path::new(d)));
    let dir_text = dir.as_ref().map_or("the output directory".to_owned(), |d| {
        d.display().to_string()
    });
    let command = str_at(summary, "command").unwrap_or("?");
    let pid = u64_at(summary, &["pid"]).map_or(String::new(), |p| format!(" (pid {p})"));
    let duration = u64_at(summary, &["duration_ns"]);
    let threads = u64_at(summary, &["threads"]).unwrap_or(0);
    let ran = duration.map_or(String::new(), |d| format!(" for {}", format_ns(d)));
    let _ = writeln!(
        out,
        "breakdance: profiled `{command}`{pid}{ran}, {threads} thread{}; outputs in {dir_text}",
        if threads == 1 { "" } else { "s" }
    );

    if let Some(config) = summary.get("config") {
        let event = str_at(config, "event").unwrap_or("?");
        let rate = match (u64_at(config, &["period"]), u64_at(config, &["freq"])) {
            (Some(p), _) => format!("period {p}"),
            (None, Some(f)) => format!("{f} Hz"),
            (None, None) => "default rate".to_owned(),
        };
        let lbr = u64_at(config, &["lbr"]).map_or("?".to_owned(), |n| n.to_string());
        let _ = writeln!(out, "  event {event}, {rate}, trace length {lbr}");
    }

    let get = |key: &str| u64_at(summary, &[key]).unwrap_or(0);
    let _ = writeln!(
        out,
        "  traces: {} completed of {} started; {} branches written; {} samples",
        get("traces_completed"),
        get("traces_started"),
        get("entries_written"),
        get("samples")
    );
    let (resolved, evaluated) = (get("statically_resolved"), get("dynamically_evaluated"));
    if resolved + evaluated > 0 {
        let s = resolved as f64 / (resolved + evaluated) as f64;
        let t = if evaluated > 0 {
            get("dynamic_taken") as f64 / evaluated as f64
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "  look-ahead: {} breakpoints; s = {s:.2} of branches resolved statically, \
             t = {t:.2} of the rest taken",
            get("breakpoints")
        );
    }
    for key in ["aborts", "drops"] {
        let list = nonzero(summary, key);
        if !list.is_empty() {
            let _ = writeln!(out, "  {key}: {}", list.join(", "));
        }
    }
    if let Some(handler) = summary.get("handler_ns").and_then(Value::as_object) {
        let total: u64 = handler.values().filter_map(Value::as_u64).sum();
        // The library's three handlers in the order a trace meets them,
        // then anything newer in key order.
        let known = ["sampling", "breakpoint", "decode"];
        let names = known
            .iter()
            .copied()
            .filter(|k| handler.contains_key(*k))
            .chain(
                handler
                    .keys()
                    .map(String::as_str)
                    .filter(|k| !known.contains(k)),
            );
        let parts: Vec<String> = names
            .filter_map(|name| Some(format!("{} {name}", format_ns(handler[name].as_u64()?))))
            .collect();
        let share = match duration {
            Some(d) if d > 0 => format!(
                " = {:.1}% of the run's wall time",
                100.0 * total as f64 / d as f64
            ),
            _ => String::new(),
        };
        let _ = writeln!(out, "  handler time: {}{share}", parts.join(", "));
    }
    if let Some((user, system)) = cpu {
        // Breakpoint and sample signals are kernel work: the system time
        // shows their cost, which the handler times above do not include.
        let _ = writeln!(
            out,
            "  program CPU time: {} user, {} system",
            format_ns(user.as_nanos() as u64),
            format_ns(system.as_nanos() as u64)
        );
    }
    if let Some(files) = summary.get("files").and_then(Value::as_array) {
        let names: Vec<&str> = files.iter().filter_map(Value::as_str).collect();
        let _ = writeln!(out, "  files: {}", names.join(", "));
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

    if get("traces_completed") == 0 {
        let _ = writeln!(
            out,
            "no trace was completed: the run may be shorter than the sampling period; \
             lower -c or raise -F"
        );
        return out;
    }
    let module = main_module(summary, binary);
    let binary_text = binary
        .map(|b| b.display().to_string())
        .or_else(|| module.map(|(path, _)| path.to_owned()))
        .unwrap_or_else(|| "BINARY".to_owned());
    let dir_prefix = dir.map_or(String::new(), |d| format!("{}/", d.display()));
    let _ = writeln!(out, "next: turn the traces into an AutoFDO profile:");
    let _ = writeln!(
        out,
        "  llvm-profgen-19 --perfscript={dir_prefix}perf.script --binary={binary_text} --output=prof.afdo"
    );
    if let Some((_, Some(afdo))) = module {
        let _ = writeln!(
            out,
            "  or: create_llvm_prof --profiler=text --profile={dir_prefix}{afdo} --binary={binary_text} --out=prof.gcov"
        );
    }
    out
}

/// A control answer's JSON object as aligned `name  value` lines; nested
/// objects become `outer.inner`, and `*_ns` counters are shown as durations.
pub fn render_fields(payload: &Value) -> String {
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
    use serde_json::json;

    fn example() -> Value {
        json!({
            "pid": 4242, "command": "./demo", "output_dir": "/nonexistent/out",
            "config": {"event": "task-clock", "period": 1000000, "freq": null, "lbr": 32},
            "duration_ns": 2_000_000_000u64, "threads": 1, "samples": 1500,
            "traces_started": 1300, "traces_completed": 1234,
            "entries_recorded": 40000, "entries_written": 39488,
            "breakpoints": 20000, "statically_resolved": 60, "dynamically_evaluated": 40,
            "dynamic_taken": 10, "buffer_swaps": 3,
            "handler_ns": {"sampling": 12_300_000, "breakpoint": 45_600_000, "decode": 2_100_000},
            "aborts": {"rseq": 0, "sp_mismatch": 3, "pc_mismatch": 0, "unsupported_instruction": 0,
                       "outside_mappings": 0, "lookahead_limit": 0, "thread_exit": 2, "session_stop": 0},
            "drops": {"no_free_buffer": 0, "thread_table_full": 0, "trace_table_full": 0},
            "modules": [
                {"path": "/usr/lib/x86_64-linux-gnu/libc.so.6", "afdo": "libc.so.6.afdo.txt", "branches": 900},
                {"path": "/work/demo", "afdo": "demo.afdo.txt", "branches": 500}
            ],
            "files": ["perf.script", "demo.afdo.txt", "libc.so.6.afdo.txt", "summary.json"]
        })
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
  event task-clock, period 1000000, trace length 32
  traces: 1234 completed of 1300 started; 39488 branches written; 1500 samples
  look-ahead: 20000 breakpoints; s = 0.60 of branches resolved statically, t = 0.25 of the rest taken
  aborts: sp_mismatch 3, thread_exit 2
  handler time: 12.3 ms sampling, 45.6 ms breakpoint, 2.1 ms decode = 3.0% of the run's wall time
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
        summary["traces_completed"] = json!(0);
        summary["drops"]["no_free_buffer"] = json!(7);
        let text = render(&summary, None, &[], None);
        assert!(text.contains("  drops: no_free_buffer 7\n"), "{text}");
        assert!(text.contains("no trace was completed"), "{text}");
        assert!(!text.contains("llvm-profgen"), "{text}");
    }

    #[test]
    fn missing_fields_do_not_break_the_summary() {
        let text = render(&json!({"traces_completed": 1}), None, &[], None);
        assert!(
            text.starts_with(
                "breakdance: profiled `?`, 0 threads; outputs in the output directory\n"
            ),
            "{text}"
        );
        assert!(text.contains("--binary=BINARY"), "{text}");
    }

    #[test]
    fn status_fields_are_flattened_and_aligned() {
        let text = render_fields(
            &json!({"state": "running", "samples": 12, "handler_ns": {"sampling": 1500}}),
        );
        assert_eq!(text, "  state                running\n  handler_ns.sampling  1.5 µs\n  samples              12\n");
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

    #[test]
    fn summary_json_is_loaded_or_reported_missing() {
        let dir = std::env::temp_dir().join(format!("profiler-ctl-load-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        assert!(load(&dir).unwrap().is_none());
        fs::write(dir.join("summary.json"), b"{\"pid\": 5}").unwrap();
        assert_eq!(load(&dir).unwrap().unwrap()["pid"], 5);
        fs::write(dir.join("summary.json"), b"{").unwrap();
        assert!(load(&dir)
            .unwrap_err()
            .to_string()
            .ends_with("summary.json is not valid JSON"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
