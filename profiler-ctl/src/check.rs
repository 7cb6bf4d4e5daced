//! `profiler-ctl check BINARY [DIR]`: the mistakes that leave an AutoFDO
//! profile empty or useless without a word, each found from the file
//! itself (and the recording in DIR), each told with its fix.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use breakdance_protocol::{ModuleSummary, Summary, PERF_SCRIPT_FILE};

use crate::elf::{Binary, Facts};
use crate::profgen;

/// One problem: what is wrong and why it matters, and the exact flag or
/// command that fixes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub cause: String,
    pub fix: String,
}

fn finding(cause: impl Into<String>, fix: impl Into<String>) -> Finding {
    Finding {
        cause: cause.into(),
        fix: fix.into(),
    }
}

/// The build flags every fix starts from.
const PROFILE_FLAGS: &str = "-gdwarf-4 -fdebug-info-for-profiling";

/// What the file alone says.
fn file_findings(binary: &Path, facts: &Facts) -> Vec<Finding> {
    let shown = binary.display();
    let mut found = Vec::new();
    if !facts.has_debug_info {
        let separate = facts.debuglink.as_ref().map(|name| {
            format!(
                "; its debug info went to {name}: pass that file to \
                 llvm-profgen-19 --debug-binary=PATH/{name}"
            )
        });
        if !facts.has_symtab {
            found.push(finding(
                "stripped: no symbol table and no debug info, so no profile can name a function",
                format!(
                    "build without -s and do not strip it (keep a debug copy with \
                     `objcopy --only-keep-debug {shown} {shown}.debug` if you ship it stripped){}",
                    separate.unwrap_or_default()
                ),
            ));
        } else {
            found.push(finding(
                "no debug info: built without -g, so llvm-profgen and create_llvm_prof \
                 cannot map samples to source lines",
                format!(
                    "rebuild with -g: clang-19 -O2 {PROFILE_FLAGS}{}",
                    separate.unwrap_or_default()
                ),
            ));
        }
        return found;
    }
    if !facts.has_discriminators && facts.split_lines > 0 {
        found.push(finding(
            format!(
                "no discriminators: built without -fdebug-info-for-profiling, so the profile \
                 cannot tell apart the blocks of the {} source lines whose code is split",
                facts.split_lines
            ),
            "rebuild with -fdebug-info-for-profiling",
        ));
    }
    if let Some((_, highest)) = facts.dwarf_versions {
        if highest >= 5 {
            found.push(finding(
                format!(
                    "DWARF {highest}: create_llvm_prof 0.19 reads DWARF 4 only and writes an \
                     empty profile (llvm-profgen-19 reads it)"
                ),
                "rebuild with -gdwarf-4",
            ));
        }
    }
    found
}

/// What the recording in `dir` says about this build of the file.
/// `estimate`: llvm-profgen's more-samples factor when a run of it for
/// this file and recording already gave it.
fn recording_findings(
    binary: &Binary,
    facts: &Facts,
    dir: &Path,
    estimate: Option<Option<f64>>,
) -> Result<Vec<Finding>> {
    let shown = binary.path.display();
    let record_again = format!(
        "profiler-ctl record -o {} -- {shown} ARGS...",
        dir.display()
    );
    let Some(summary) = Summary::load(dir)? else {
        return Ok(vec![finding(
            format!(
                "{} has no summary.json: it is not a finished recording",
                dir.display()
            ),
            record_again,
        )]);
    };
    let Some(build_id) = &facts.build_id else {
        return Ok(vec![finding(
            "no build id: nothing can tell whether the recording is of this build",
            "link with -Wl,--build-id",
        )]);
    };
    let Some(module) = summary.module_by_build_id(build_id) else {
        let name = binary.path.file_name();
        let same_name = summary.modules.iter().find(|m| m.path.file_name() == name);
        return Ok(vec![match same_name {
            Some(m) => finding(
                format!(
                    "build-id mismatch: {} recorded {} with build id {}, this file has {build_id} \
                     (rebuilt since?), so its addresses do not match the recording",
                    dir.display(),
                    m.path.display(),
                    m.build_id.as_deref().unwrap_or("none")
                ),
                format!("record this build again: {record_again}"),
            ),
            None => finding(
                format!(
                    "{} holds no samples in this file (build id {build_id}); it has samples in: {}",
                    dir.display(),
                    summary
                        .modules
                        .iter()
                        .map(|m| m.path.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                record_again,
            ),
        }]);
    };
    let mut found = profile_address_findings(binary, dir, module);
    if summary.config.callstack > 0 {
        found.extend(frame_pointer_finding(binary));
    }
    if !facts.has_debug_info {
        return Ok(found);
    }
    // llvm-profgen's own estimate of whether the samples are enough for
    // the code they cover.
    let estimate = match estimate {
        Some(known) => Ok(known),
        None => {
            let scratch = std::env::temp_dir()
                .join(format!("profiler-ctl-check-{}.prof", std::process::id()));
            let generated = profgen::generate(&dir.join(PERF_SCRIPT_FILE), &binary.path, &scratch);
            let _ = std::fs::remove_file(&scratch);
            generated.map(|g| g.more_samples)
        }
    };
    found.extend(match estimate {
        Ok(more_samples) => more_samples
            .map(|factor| {
                finding(
                    format!(
                        "too few samples: llvm-profgen estimates the profile needs {factor}x more \
                         for {} bytes of code ({} branches recorded in it, {} traces in all)",
                        facts.code_size, module.branches, summary.counters.traces_completed
                    ),
                    more_samples_fix(&summary.config, factor, dir, &shown),
                )
            })
            .into_iter()
            .collect(),
        Err(e) => vec![finding(
            format!("cannot estimate whether the samples suffice: {e:#}"),
            "apt-get install llvm-19 (or scripts/install-deps.sh)",
        )],
    });
    Ok(found)
}

/// A recording with call stacks of a build that mostly keeps no frame
/// pointers: the stacks lose the callers of every such function.
fn frame_pointer_finding(binary: &Binary) -> Option<Finding> {
    let (kept, total) = binary.frame_pointer_functions().ok()?;
    (total > 0 && kept * 2 < total).then(|| {
        finding(
            format!(
                "recorded with -g, but {} of {total} functions set up no frame pointer: the \
                 stacks miss the caller of each such function when the trace did not see the \
                 call, so contexts are cut short or joined wrongly",
                total - kept
            ),
            "rebuild with -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer",
        )
    })
}

/// Every address of the module's AutoFDO text (ranges, sample addresses,
/// branches) and BOLT profile (`B`/`F` records), in the order written:
/// what the profile says ran.
fn profile_addresses(text: &str, bolt: bool) -> Vec<u64> {
    let hex = |w: &str| u64::from_str_radix(w, 16).ok();
    let mut out = Vec::new();
    for line in text.lines() {
        if bolt {
            // `B FROM TO COUNT MISPRED`, `F START END COUNT`.
            let words: Vec<&str> = line.split_whitespace().collect();
            if let ["B" | "F", a, b, ..] = words[..] {
                out.extend(hex(a).into_iter().chain(hex(b)));
            }
        } else if let Some((record, _count)) = line.rsplit_once(':') {
            // `BEGIN-END`, `ADDR`, `FROM->TO`; the section counts have no `:`.
            for w in record.split("->").flat_map(|w| w.split('-')) {
                out.extend(hex(w));
            }
        }
    }
    out
}

/// The module's profiles name addresses in its code: an address outside
/// every executable segment means a load bias or offset rule went wrong
/// (create_llvm_prof then writes an empty profile, silently), and a profile
/// with no address at all cannot help either.
fn profile_address_findings(binary: &Binary, dir: &Path, module: &ModuleSummary) -> Vec<Finding> {
    let shown = binary.path.display();
    let Some(layout) = binary.layout() else {
        return Vec::new();
    };
    let bug = format!(
        "a breakdance bug: report it with `readelf -lW {shown}` and the recording in {}",
        dir.display()
    );
    let mut found = Vec::new();
    // AutoFDO text holds offsets from the first PT_LOAD; BOLT holds ELF
    // virtual addresses (protocol::elf_layout).
    for (name, bolt) in [(&module.afdo, false), (&module.bolt, true)] {
        let path = dir.join(name);
        let Ok(text) = std::fs::read_to_string(&path) else {
            found.push(finding(
                format!("{} is missing: the recording lists it", path.display()),
                format!(
                    "record again: profiler-ctl record -o {} -- {shown} ARGS...",
                    dir.display()
                ),
            ));
            continue;
        };
        let addresses = profile_addresses(&text, bolt);
        let vaddr = |a: u64| {
            if bolt {
                a
            } else {
                layout.vaddr_of_profile_offset(a)
            }
        };
        let outside: Vec<u64> = addresses
            .iter()
            .copied()
            .filter(|&a| !layout.is_code(vaddr(a)))
            .collect();
        if addresses.is_empty() {
            found.push(finding(
                format!(
                    "empty profile: {} holds no address in {shown}",
                    path.display()
                ),
                bug.clone(),
            ));
        } else if let Some(first) = outside.first() {
            let code: Vec<String> = layout
                .loads()
                .iter()
                .filter(|s| s.executable)
                .map(|s| format!("{:#x}-{:#x}", s.vaddr, s.vaddr + s.memsz))
                .collect();
            found.push(finding(
                format!(
                    "profile addresses outside the code: {} of the {} addresses in {} (first \
                     {first:#x}) fall outside the executable segments of {shown} ({}), so the \
                     profile {} its code",
                    outside.len(),
                    addresses.len(),
                    path.display(),
                    code.join(", "),
                    if outside.len() == addresses.len() {
                        "would be empty: it misses all of"
                    } else {
                        "misses part of"
                    }
                ),
                bug.clone(),
            ));
        }
    }
    found
}

/// The shortest clock period `check` suggests for traces of `lbr`
/// branches: a trace should end well before the next sample, and
/// 128-branch traces want 3 ms (results/tracelen); a hardware LBR's 32, 1 ms.
fn shortest_clock_period_ns(lbr: u32) -> u64 {
    if lbr <= breakdance_protocol::DEFAULT_LBR {
        1_000_000
    } else {
        3_000_000
    }
}

/// How to get `factor` times more samples than the recording `config`
/// had: a period `factor` times shorter, but for the clock events none
/// shorter than [`shortest_clock_period_ns`] (or than the one used), the
/// rest from running longer.
fn more_samples_fix(
    config: &breakdance_protocol::SessionConfig,
    factor: f64,
    dir: &Path,
    shown: &dyn std::fmt::Display,
) -> String {
    let period = config.period.unwrap_or(config.event.default_period());
    let wanted = (period as f64 / factor.max(1.0)).ceil() as u64;
    let shortest = shortest_clock_period_ns(config.lbr);
    let suggested = if config.event.is_clock() {
        wanted.max(period.min(shortest))
    } else {
        wanted
    };
    let mut fix = format!(
        "sample more often or run longer: profiler-ctl record -c {suggested} -o {} -- {shown} ARGS...",
        dir.display()
    );
    if suggested > wanted {
        let longer = factor * suggested as f64 / period as f64;
        let _ = write!(
            fix,
            ", on about {longer:.0}x more work (periods under {} ms let traces of {} branches \
             run into the next sample)",
            shortest as f64 / 1e6,
            config.lbr
        );
    }
    fix
}

/// Every finding for `binary`, with the recording `dir` when given.
pub fn run(binary: &Path, dir: Option<&Path>) -> Result<Vec<Finding>> {
    run_knowing(binary, dir, None)
}

/// [`run`], with llvm-profgen's estimate for `binary` and `dir` when a run
/// of it already gave one (`record --profgen`), so it is not run twice.
pub fn run_knowing(
    binary: &Path,
    dir: Option<&Path>,
    estimate: Option<Option<f64>>,
) -> Result<Vec<Finding>> {
    let file = Binary::open(binary)?;
    let facts = file.facts()?;
    let mut found = file_findings(binary, &facts);
    if let Some(dir) = dir {
        found.extend(recording_findings(&file, &facts, dir, estimate)?);
    }
    Ok(found)
}

/// One line per finding: `check: BINARY: CAUSE; fix: FIX`.
pub fn render(binary: &Path, findings: &[Finding]) -> String {
    let mut out = String::new();
    if findings.is_empty() {
        let _ = writeln!(out, "check: {}: ready for AutoFDO", binary.display());
    }
    for f in findings {
        let _ = writeln!(
            out,
            "check: {}: {}; fix: {}",
            binary.display(),
            f.cause,
            f.fix
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use breakdance_protocol::{Event, SessionConfig};

    fn config(event: Event, period: u64, lbr: u32) -> SessionConfig {
        SessionConfig {
            event,
            period: Some(period),
            lbr,
            ..SessionConfig::default()
        }
    }

    #[test]
    fn profile_addresses_are_read_from_every_record() {
        let afdo = "2\n16a0-16b0:3\n17c0-17c8:1\n1\n17c8:4\n1\n16b0->17c0:3\n";
        assert_eq!(
            profile_addresses(afdo, false),
            [0x16a0, 0x16b0, 0x17c0, 0x17c8, 0x17c8, 0x16b0, 0x17c0]
        );
        assert!(profile_addresses("0\n0\n0\n", false).is_empty());
        let bolt = "B 4016b0 4017c0 3 0\nF 4017c0 4017c8 1\n";
        assert_eq!(
            profile_addresses(bolt, true),
            [0x4016b0, 0x4017c0, 0x4017c0, 0x4017c8]
        );
    }

    #[test]
    fn more_samples_never_means_a_period_a_trace_outlasts() {
        let dir = Path::new("/out");
        // Within reach by a shorter period alone.
        assert_eq!(
            more_samples_fix(&config(Event::TaskClock, 10_000_000, 32), 5.0, dir, &"./p"),
            "sample more often or run longer: profiler-ctl record -c 2000000 -o /out -- ./p ARGS..."
        );
        // 285x at 10 ms with 128-branch traces: 3 ms, and the rest from
        // running longer.
        let fix = more_samples_fix(
            &config(Event::TaskClock, 10_000_000, 128),
            284.6,
            dir,
            &"./p",
        );
        assert!(
            fix.starts_with("sample more often or run longer: profiler-ctl record -c 3000000 ")
                && fix.contains("on about 85x more work")
                && fix.contains("traces of 128 branches"),
            "{fix}"
        );
        // Already sampling faster than that: keep the period, run longer.
        let fix = more_samples_fix(&config(Event::TaskClock, 500_000, 32), 4.0, dir, &"./p");
        assert!(
            fix.contains("-c 500000 ") && fix.contains("on about 4x more work"),
            "{fix}"
        );
        // Hardware events count events, not time: the period is divided.
        assert!(
            more_samples_fix(&config(Event::Branches, 1_000_003, 32), 10.0, dir, &"./p")
                .contains("-c 100001 ")
        );
    }
}
