//! Every linker's layout: a program linked by bfd, gold or lld, with its
//! code on pages of its own or sharing them with read-only data, as a PIE,
//! a non-PIE executable or a shared library, gets profiles that every
//! consumer reads the same way.
//!
//! Why: lld puts text at an address that differs from its file offset (text
//! at vaddr 0x16a0, file offset 0x6a0), and so does gold's `--rosegment`
//! for the read-only data after the text; bfd keeps the two equal. A load
//! bias or profile-offset rule that confuses offset and address passes on
//! bfd alone, and its failure is silent (an empty create_llvm_prof profile,
//! `[unknown in …]` in `report`).
//!
//! For each of the 18 builds (3 linkers × code separated or not × PIE,
//! non-PIE, shared library), one short recording, then:
//! - create_llvm_prof (the AutoFDO text), llvm-profgen-19 (perf.script) and
//!   llvm-bolt-19 (the BOLT profile) each name the function that is hottest
//!   by construction;
//! - `profiler-ctl report` names it first, by name;
//! - `profiler-ctl check` has nothing to say about the module's addresses.
//!
//! gold has no `-z separate-code`: its way to keep code off the pages of
//! read-only data is `--rosegment`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use bench_harness::elf::ElfModule;
use common::*;

/// Sampling period: a few hundred traces in a recording.
const PERIOD_NS: u64 = 100_000;
/// Iterations of branchy.c and pie_main.c: about 0.2 s natively each.
const BRANCHY_ITERATIONS: &str = "1000000";
const SHARED_ITERATIONS: &str = "700000";
/// The functions of branchy.c, pie_main.c and libwork.c.
const OWN_FUNCTIONS: [&str; 8] = [
    "main",
    "next_random",
    "hottest",
    "warm",
    "cold",
    "main_step",
    "lib_hot",
    "lib_light",
];
/// Combinations run at once (the machines have 2 cores).
const WORKERS: usize = 2;

#[derive(Clone, Copy, Debug)]
enum Linker {
    Bfd,
    Gold,
    Lld,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Pie,
    NonPie,
    Shared,
}

#[derive(Clone, Copy, Debug)]
struct Layout {
    linker: Linker,
    /// Code on pages of its own (`-z separate-code`; gold: `--rosegment`).
    separate: bool,
    kind: Kind,
}

impl Layout {
    fn all() -> Vec<Layout> {
        let mut all = Vec::new();
        for linker in [Linker::Bfd, Linker::Gold, Linker::Lld] {
            for separate in [false, true] {
                for kind in [Kind::Pie, Kind::NonPie, Kind::Shared] {
                    all.push(Layout {
                        linker,
                        separate,
                        kind,
                    });
                }
            }
        }
        all
    }

    fn name(&self) -> String {
        format!(
            "{:?}-{}-{:?}",
            self.linker,
            if self.separate {
                "separate"
            } else {
                "shared-pages"
            },
            self.kind
        )
        .to_lowercase()
    }

    /// The link flags (BOLT needs the relocations kept).
    fn link_flags(&self) -> Vec<&'static str> {
        let mut flags = vec!["-Wl,--emit-relocs"];
        flags.extend_from_slice(match (self.linker, self.separate) {
            (Linker::Bfd, false) => &["-fuse-ld=bfd", "-Wl,-z,noseparate-code"][..],
            (Linker::Bfd, true) => &["-fuse-ld=bfd", "-Wl,-z,separate-code"],
            (Linker::Gold, false) => &["-fuse-ld=gold", "-Wl,--no-rosegment"],
            (Linker::Gold, true) => &["-fuse-ld=gold", "-Wl,--rosegment"],
            (Linker::Lld, false) => &["-fuse-ld=lld", "-Wl,-z,noseparate-code"],
            (Linker::Lld, true) => &["-fuse-ld=lld", "-Wl,-z,separate-code"],
        });
        flags
    }
}

/// What one combination builds and runs, and what must come out hottest.
struct Built {
    program: PathBuf,
    args: &'static [&'static str],
    /// The module whose profiles are checked.
    module: PathBuf,
    hottest: &'static str,
}

fn build_layout(clang: &Path, dir: &Path, layout: &Layout) -> Built {
    let mut flags = layout.link_flags();
    match layout.kind {
        Kind::Pie | Kind::NonPie => {
            flags.extend_from_slice(match layout.kind {
                Kind::Pie => &["-fPIE", "-pie"],
                _ => &["-fno-pie", "-no-pie"],
            });
            let program = build(clang, dir, "branchy", &["branchy.c"], &flags);
            Built {
                module: program.clone(),
                program,
                args: &[BRANCHY_ITERATIONS],
                hottest: "hottest",
            }
        }
        Kind::Shared => {
            let mut lib_flags = flags.clone();
            lib_flags.extend_from_slice(&["-fPIC", "-shared"]);
            let library = build(clang, dir, "libwork.so", &["libwork.c"], &lib_flags);
            let search = format!("-L{}", dir.display());
            let rpath = format!("-Wl,-rpath,{}", dir.display());
            flags.extend_from_slice(&[&search, "-lwork", &rpath]);
            let program = build(clang, dir, "pie_main", &["pie_main.c"], &flags);
            Built {
                program,
                args: &[SHARED_ITERATIONS],
                module: library,
                hottest: "lib_hot",
            }
        }
    }
}

/// The function llvm-bolt-19 ranks first by executed instructions after
/// reading the BOLT profile of `built.module`.
fn bolt_hottest(bolt: &Path, built: &Built, out: &Path, work: &Path) -> Result<String, String> {
    let name = built.module.file_name().unwrap().to_string_lossy();
    let fdata = out.join(format!("{name}.bolt.fdata"));
    let result = Command::new(bolt)
        .arg(&built.module)
        .arg("-o")
        .arg(work.join(format!("{name}.bolt")))
        .args(["-pa", "-p"])
        .arg(&fdata)
        .arg("-print-sorted-by=executed-instructions")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bolt.display()))?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    if !result.status.success() {
        return Err(format!("llvm-bolt-19 refused the profile:\n{log}"));
    }
    // "PERF2BOLT: traces mismatching disassembled function contents: 3 (0.0%)".
    // BOLT follows no fall-through inside PLT stubs (a lazy binding's
    // `jmp *GOT` to the next `push`) nor in some start-up code (`_init`,
    // `register_tm_clones`), which a sample early in the run can reach:
    // those traces may count as mismatching, never one in the program's
    // own functions.
    let mismatching: u64 = log
        .lines()
        .find_map(|l| l.split_once("traces mismatching disassembled function contents: "))
        .and_then(|(_, n)| n.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("BOLT did not count mismatching traces:\n{log}"))?;
    let elf = ElfModule::load(&built.module).map_err(|e| e.to_string())?;
    let own: Vec<(u64, u64)> = elf
        .symbols
        .iter()
        .filter(|s| OWN_FUNCTIONS.contains(&s.name.as_str()))
        .map(|s| (s.address, s.address + s.size))
        .collect();
    let elsewhere: u64 = std::fs::read_to_string(&fdata)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            ["F", start, _, count] => Some((u64::from_str_radix(start, 16).ok()?, count)),
            _ => None,
        })
        .filter(|(start, _)| !own.iter().any(|&(b, e)| (b..e).contains(start)))
        .filter_map(|(_, count)| count.parse::<u64>().ok())
        .sum();
    if mismatching > elsewhere {
        return Err(format!(
            "BOLT found {mismatching} traces that disagree with the code, only {elsewhere} \
             outside the program's own functions:\n{log}"
        ));
    }
    // "BOLT-INFO: top functions sorted by (executed instructions) are:"
    // then "  hottest/1(*2) (executed-instructions=747056)", most first.
    let first = log
        .lines()
        .skip_while(|l| !l.contains("top functions sorted by"))
        .nth(1)
        .filter(|l| l.starts_with("  "))
        .ok_or_else(|| format!("BOLT ranks no function by executed instructions:\n{log}"))?;
    let function = first
        .trim()
        .split(['/', ' ', '('])
        .next()
        .unwrap_or_default();
    Ok(function.to_string())
}

/// The first function of `report`'s "by instructions covered" table.
fn report_hottest(text: &str) -> Option<&str> {
    let row = text
        .lines()
        .skip_while(|l| !l.starts_with("Hottest functions by instructions covered"))
        .nth(2)?;
    // "   71.3%   943    0.4%   94  NAME (MODULE)"
    let fields: Vec<&str> = row.split_whitespace().collect();
    (fields.len() >= 6).then(|| {
        let start = row.find(fields[4]).unwrap_or(0);
        row[start..].trim()
    })
}

/// `profiler-ctl check MODULE DIR`'s findings (it exits 1 when it has any).
fn check_output(tracer: &Tracer, module: &Path, out: &Path) -> String {
    let check = Command::new(&tracer.ctl)
        .arg("check")
        .arg(module)
        .arg(out)
        .output()
        .expect("profiler-ctl check runs");
    String::from_utf8_lossy(&check.stdout).into_owned()
}

/// An AutoFDO text with every address `delta` lower (wrapping).
fn shift_afdo_text(text: &str, delta: u64) -> String {
    let shift = |w: &str| {
        format!(
            "{:x}",
            u64::from_str_radix(w, 16).unwrap().wrapping_sub(delta)
        )
    };
    let mut out = String::new();
    for line in text.lines() {
        match line.rsplit_once(':') {
            Some((record, count)) => {
                let record = match record.split_once("->") {
                    Some((from, to)) => format!("{}->{}", shift(from), shift(to)),
                    None => record.split('-').map(shift).collect::<Vec<_>>().join("-"),
                };
                out.push_str(&format!("{record}:{count}\n"));
            }
            None => out.push_str(&format!("{line}\n")),
        }
    }
    out
}

/// Builds, records and checks one combination; the problems found.
fn check_layout(
    tracer: &Tracer,
    clang: &Path,
    bolt: &Path,
    root: &Path,
    layout: &Layout,
) -> Vec<String> {
    let dir = root.join(layout.name());
    std::fs::create_dir_all(&dir).unwrap();
    let built = build_layout(clang, &dir, layout);
    let out = dir.join("out");
    let run = record(tracer, &out, PERIOD_NS, &built.program, built.args, &[]);
    if !run.status.success() {
        return vec![format!(
            "record failed: {}",
            String::from_utf8_lossy(&run.stderr)
        )];
    }
    let want = built.hottest;
    let mut problems = Vec::new();
    let mut expect = |what: &str, got: Option<&str>, detail: &dyn std::fmt::Debug| {
        if got != Some(want) {
            problems.push(format!(
                "{what} names {got:?} hottest, not {want}: {detail:?}"
            ));
        }
    };

    let totals = create_llvm_prof_totals(&out, &built.module, &dir);
    expect("create_llvm_prof (AutoFDO text)", hottest(&totals), &totals);
    let totals = profgen_totals(&out, &built.module, &dir);
    expect("llvm-profgen-19 (perf.script)", hottest(&totals), &totals);
    match bolt_hottest(bolt, &built, &out, &dir) {
        Ok(function) => expect("llvm-bolt-19 (BOLT profile)", Some(&function), &""),
        Err(e) => problems.push(e),
    }

    let report = run_tool(Command::new(&tracer.ctl).arg("report").arg(&out));
    let report = String::from_utf8_lossy(&report.stdout);
    let first = report_hottest(&report).unwrap_or_default();
    let module_name = built.module.file_name().unwrap().to_string_lossy();
    if first != format!("{want} ({module_name})")
        || report.contains(&format!("[unknown in {module_name}]"))
    {
        problems.push(format!(
            "report does not put {want} ({module_name}) first by name:\n{report}"
        ));
    }

    // `check` has nothing to say about the addresses; shifted by a page
    // (the old lld error), it says so, naming the module.
    let outside = "profile addresses outside the code";
    let check = check_output(tracer, &built.module, &out);
    if check.contains(outside) || check.contains("empty profile") {
        problems.push(format!("check finds fault with the addresses: {check}"));
    }
    let afdo = out.join(format!("{module_name}.afdo.txt"));
    let text = std::fs::read_to_string(&afdo).unwrap();
    std::fs::write(&afdo, shift_afdo_text(&text, 0x1000)).unwrap();
    let check = check_output(tracer, &built.module, &out);
    if !check
        .lines()
        .any(|l| l.contains(outside) && l.contains(&*afdo.to_string_lossy()))
    {
        problems.push(format!(
            "check is silent about AutoFDO addresses a page off: {check}"
        ));
    }
    problems
}

#[test]
fn every_linker_layout_gives_profiles_all_consumers_agree_on() {
    let tracer = tracer();
    let tools = [
        "clang-19",
        "create_llvm_prof",
        "llvm-profgen-19",
        "llvm-profdata-19",
        "llvm-bolt-19",
        // What clang-19's -fuse-ld=gold and -fuse-ld=lld run.
        "ld.gold",
        "ld.lld-19",
    ];
    let found: Vec<Option<PathBuf>> = tools.iter().map(|t| tool(t)).collect();
    if found.iter().any(Option::is_none) {
        return;
    }
    let (clang, bolt) = (found[0].clone().unwrap(), found[4].clone().unwrap());
    let root = Scratch::new("linkers");
    let layouts = Layout::all();
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(layout) = layouts.get(i) else {
                    break;
                };
                let started = std::time::Instant::now();
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    check_layout(&tracer, &clang, &bolt, &root.0, layout)
                }));
                let problems = result.unwrap_or_else(|panic| {
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    vec![message]
                });
                eprintln!(
                    "{}: {} ({:.1} s)",
                    layout.name(),
                    if problems.is_empty() { "ok" } else { "FAILED" },
                    started.elapsed().as_secs_f64()
                );
                for p in problems {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("{}: {p}", layout.name()));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
