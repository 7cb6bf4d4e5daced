//! From a recording to the compiler, for real: `check` on binaries built
//! at test time to have each fault, `record --profgen` read back by clang,
//! and `report` checked against callgrind's exact counts.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bench_harness::{callgrind, elf::ElfModule, tools};
use common::{ctl, library, run_bounded, stderr_of, Scratch};

const HOTPATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/hotpath.c");

/// Work for a recorded run of hotpath: some tenths of a second.
const RECORD_ROUNDS: &str = "3000";

fn clang() -> Option<PathBuf> {
    tools::require("clang-19")
}

/// Builds hotpath.c into `output` with exactly `flags`.
fn build(clang: &Path, source: &Path, output: &Path, flags: &[&str]) {
    let result = Command::new(clang)
        .args(flags)
        .arg(source)
        .arg("-o")
        .arg(output)
        .output()
        .expect("run clang-19");
    assert!(
        result.status.success(),
        "clang-19 {flags:?}: {}",
        stderr_of(&result)
    );
}

fn check(binary: &Path, dir: Option<&Path>) -> (Option<i32>, String) {
    let mut command = ctl();
    command.arg("check").arg(binary);
    if let Some(dir) = dir {
        command.arg(dir);
    }
    let output = run_bounded(&mut command, "check");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// The one finding `check` prints for `binary`, which must name `cause`
/// and `fix`.
fn assert_one_finding(binary: &Path, dir: Option<&Path>, cause: &str, fix: &str) {
    let (code, text) = check(binary, dir);
    assert_eq!(code, Some(1), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one finding expected: {text}");
    let (found_cause, found_fix) = lines[0].split_once("; fix: ").expect("cause; fix: FIX");
    assert!(
        found_cause.contains(cause),
        "cause '{cause}' not in: {text}"
    );
    assert!(found_fix.contains(fix), "fix '{fix}' not in: {text}");
}

fn record(dir: &Path, options: &[&str], binary: &Path, args: &[&str]) -> Output {
    let output = run_bounded(
        ctl()
            .arg("record")
            .args(options)
            .arg("-o")
            .arg(dir)
            .arg("--")
            .arg(binary)
            .args(args),
        "record",
    );
    assert!(output.status.success(), "{}", stderr_of(&output));
    output
}

const PROFILE_FLAGS: [&str; 3] = ["-O2", "-gdwarf-4", "-fdebug-info-for-profiling"];

#[test]
fn a_binary_built_for_profiling_has_no_finding() {
    let Some(clang) = clang() else { return };
    let scratch = Scratch::new("check-good");
    let good = scratch.path("good");
    build(&clang, Path::new(HOTPATH), &good, &PROFILE_FLAGS);
    let (code, text) = check(&good, None);
    assert_eq!(
        (code, text.trim_end()),
        (
            Some(0),
            &*format!("check: {}: ready for AutoFDO", good.display())
        )
    );
}

#[test]
fn each_build_fault_is_diagnosed_with_its_fix() {
    let Some(clang) = clang() else { return };
    let scratch = Scratch::new("check-faults");
    let source = Path::new(HOTPATH);
    let cases: [(&str, &[&str], &str, &str); 4] = [
        (
            "stripped",
            &["-O2", "-gdwarf-4", "-fdebug-info-for-profiling", "-s"],
            "stripped: no symbol table and no debug info",
            "build without -s and do not strip it",
        ),
        (
            "nodebug",
            &["-O2"],
            "no debug info: built without -g",
            "rebuild with -g: clang-19 -O2 -gdwarf-4 -fdebug-info-for-profiling",
        ),
        (
            "nodiscriminators",
            &["-O2", "-gdwarf-4"],
            "no discriminators: built without -fdebug-info-for-profiling",
            "rebuild with -fdebug-info-for-profiling",
        ),
        (
            "dwarf5",
            &["-O2", "-gdwarf-5", "-fdebug-info-for-profiling"],
            "DWARF 5: create_llvm_prof 0.19 reads DWARF 4 only",
            "rebuild with -gdwarf-4",
        ),
    ];
    for (name, flags, cause, fix) in cases {
        let binary = scratch.path(name);
        build(&clang, source, &binary, flags);
        assert_one_finding(&binary, None, cause, fix);
    }
}

#[test]
fn a_rebuilt_binary_does_not_match_its_recording() {
    let Some(clang) = clang() else { return };
    let Some(_lib) = library() else { return };
    let scratch = Scratch::new("check-rebuilt");
    let binary = scratch.path("hotpath");
    let out = scratch.path("out");
    build(&clang, Path::new(HOTPATH), &binary, &PROFILE_FLAGS);
    record(&out, &["-q", "-c", "1000000"], &binary, &["300"]);
    let (code, text) = check(&binary, Some(&out));
    assert_eq!(code, Some(0), "the recorded build matches: {text}");

    let mut flags = PROFILE_FLAGS.to_vec();
    flags.push("-DVARIANT=1");
    build(&clang, Path::new(HOTPATH), &binary, &flags);
    assert_one_finding(
        &binary,
        Some(&out),
        "build-id mismatch:",
        &format!(
            "record this build again: profiler-ctl record -o {}",
            out.display()
        ),
    );
}

/// C source of one function with `statements` distinct blocks, run in a
/// loop: a lot of code for the samples to cover.
fn big_program(statements: usize) -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stdlib.h>\n__attribute__((noinline)) unsigned big(unsigned x) {\n",
    );
    for i in 0..statements {
        c.push_str(&format!(
            "  x = x * {}u + {i}u; if (x & {}u) x ^= x >> {};\n",
            2 * i + 3,
            1u32 << (i % 20),
            1 + i % 7
        ));
    }
    c.push_str(
        "  return x;\n}\nint main(int c, char **v) {\n  unsigned n = c > 1 ? strtoul(v[1], 0, 10) : 100, x = 1;\n  \
         for (unsigned i = 0; i < n; i++) x = big(x);\n  printf(\"%u\\n\", x);\n  return 0;\n}\n",
    );
    c
}

#[test]
fn too_few_samples_for_the_code_size_are_diagnosed() {
    let Some(clang) = clang() else { return };
    let Some(_lib) = library() else { return };
    if tools::require("llvm-profgen-19").is_none() {
        return;
    }
    let scratch = Scratch::new("check-samples");
    let source = scratch.path("big.c");
    std::fs::write(&source, big_program(1500)).unwrap();
    let binary = scratch.path("big");
    build(&clang, &source, &binary, &PROFILE_FLAGS);
    // Two-branch traces at the default period: a few dozen one-range
    // samples over 40 KB of hot code, two orders of magnitude below what
    // llvm-profgen asks for, on a fast machine or a slow one.
    let out = scratch.path("out");
    let recorded = record(&out, &["--lbr", "2"], &binary, &["40000"]);
    assert_one_finding(
        &binary,
        Some(&out),
        "too few samples: llvm-profgen estimates the profile needs",
        "sample more often or run longer: profiler-ctl record -c",
    );
    // record ran the same checks when the program ended.
    let stderr = stderr_of(&recorded);
    assert!(
        stderr.contains(&format!("check: {}: too few samples", binary.display())),
        "{stderr}"
    );
}

/// `llvm-profdata-19 show --sample --topn=1`'s hottest function.
fn hottest_in_profile(profile: &Path) -> String {
    let output = Command::new("llvm-profdata-19")
        .args(["show", "--sample", "--topn=1"])
        .arg(profile)
        .output()
        .expect("run llvm-profdata-19");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{text}{}", stderr_of(&output));
    // "... Function name" header, then "  <count>  <max>  <total>  <name>".
    let mut lines = text
        .lines()
        .skip_while(|l| !l.trim_end().ends_with("Function name"));
    lines.next();
    lines
        .next()
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or_else(|| panic!("no hot function in: {text}"))
        .to_string()
}

#[test]
fn profgen_output_is_accepted_by_clang_and_names_the_hottest_function() {
    let Some(clang) = clang() else { return };
    let Some(_lib) = library() else { return };
    if tools::require("llvm-profgen-19").is_none() || tools::require("llvm-profdata-19").is_none() {
        return;
    }
    let scratch = Scratch::new("profgen");
    let binary = scratch.path("hotpath");
    build(&clang, Path::new(HOTPATH), &binary, &PROFILE_FLAGS);
    let out = scratch.path("out");
    let recorded = record(
        &out,
        &["-c", "200000", "--profgen"],
        &binary,
        &[RECORD_ROUNDS],
    );
    let stderr = stderr_of(&recorded);
    let profile = out.join("hotpath.prof");
    assert!(
        stderr.contains(&format!(
            "profgen: {} -> {}",
            binary.display(),
            profile.display()
        )),
        "{stderr}"
    );
    assert!(profile.is_file(), "{stderr}");
    assert_eq!(hottest_in_profile(&profile), "hot");

    let rebuilt = scratch.path("hotpath.fdo");
    let mut flags = PROFILE_FLAGS.to_vec();
    let use_profile = format!("-fprofile-sample-use={}", profile.display());
    flags.extend([use_profile.as_str(), "-Werror"]);
    build(&clang, Path::new(HOTPATH), &rebuilt, &flags);
    let expected = Command::new(&binary).arg("7").output().unwrap();
    let got = Command::new(&rebuilt).arg("7").output().unwrap();
    assert_eq!(got.stdout, expected.stdout);
}

#[test]
fn a_module_without_debug_info_gets_no_profile_and_a_reason() {
    let Some(clang) = clang() else { return };
    let Some(_lib) = library() else { return };
    let scratch = Scratch::new("profgen-nodebug");
    let binary = scratch.path("hotpath");
    build(&clang, Path::new(HOTPATH), &binary, &["-O2"]);
    let out = scratch.path("out");
    let recorded = record(&out, &["-c", "1000000", "--profgen"], &binary, &["300"]);
    let stderr = stderr_of(&recorded);
    assert!(
        stderr.contains(&format!(
            "profgen: no profile for {}: it has no debug info (built without -g)",
            binary.display()
        )),
        "{stderr}"
    );
    assert!(!out.join("hotpath.prof").exists());
    // And record's closing checks say what to do about it.
    assert!(
        stderr.contains(&format!("check: {}: no debug info", binary.display())),
        "{stderr}"
    );
}

/// `name+0xoff` of a link-time address, as report names it.
fn symbolised(module: &ElfModule, address: u64) -> String {
    let symbol = module.symbol_at(address).expect("a function symbol");
    format!("{}+{:#x}", symbol.name, address - symbol.address)
}

#[test]
fn report_names_the_hottest_function_and_edge_that_callgrind_counts() {
    let Some(clang) = clang() else { return };
    let Some(_lib) = library() else { return };
    let Some(valgrind) = tools::require("valgrind") else {
        return;
    };
    let scratch = Scratch::new("report");
    let binary = scratch.path("hotpath");
    build(&clang, Path::new(HOTPATH), &binary, &PROFILE_FLAGS);

    // The exact reference.
    let callgrind_out = scratch.path("callgrind.out");
    let run = Command::new(&valgrind)
        .args(callgrind::valgrind_args(&callgrind_out))
        .arg(&binary)
        .arg("100")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", stderr_of(&run));
    let profile = callgrind::parse_file(&callgrind_out).unwrap_or_else(|e| panic!("{e}"));
    let (_, object) = profile
        .object_by_basename("hotpath")
        .expect("hotpath in callgrind");
    let module = ElfModule::load(&binary).unwrap();
    let mut by_function: HashMap<String, u64> = HashMap::new();
    for (&address, &count) in &object.instructions {
        if let Some(symbol) = module.symbol_at(address) {
            *by_function.entry(symbol.name.clone()).or_default() += count;
        }
    }
    let (exact_function, _) = by_function.iter().max_by_key(|(_, n)| **n).unwrap();
    let (exact_edge, _) = object
        .taken_edges()
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .unwrap();
    let exact_edge = (
        symbolised(&module, exact_edge.from),
        symbolised(&module, exact_edge.to),
    );

    let out = scratch.path("out");
    record(&out, &["-q", "-c", "200000"], &binary, &[RECORD_ROUNDS]);
    let svg = scratch.path("hot.svg");
    let output = run_bounded(
        ctl()
            .arg("report")
            .arg(&out)
            .args(["--format", "json", "--svg"])
            .arg(&svg),
        "report",
    );
    assert!(output.status.success(), "{}", stderr_of(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let top = &report["by_instructions"][0];
    assert_eq!(top["function"], exact_function.as_str(), "{report:#}");
    assert_eq!(top["module"], "hotpath");
    let edge = &report["edges"][0];
    assert_eq!(
        (edge["from"].as_str().unwrap(), edge["to"].as_str().unwrap()),
        (exact_edge.0.as_str(), exact_edge.1.as_str()),
        "{report:#}"
    );
    assert!(edge["source_line"]
        .as_str()
        .unwrap()
        .starts_with("hotpath.c:"));
    let hotpath = report["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["path"] == binary.to_str().unwrap())
        .expect("hotpath's module row");
    assert!(hotpath["instructions"].as_u64().unwrap() > 0, "{report:#}");
    assert!(hotpath["unusable"].is_null(), "{report:#}");
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawn.contains("<svg") && drawn.contains(">hot ("),
        "{drawn:.400}"
    );

    // The text form names them too.
    let text = run_bounded(ctl().arg("report").arg(&out), "report text");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("{} → {}", exact_edge.0, exact_edge.1)),
        "{text}"
    );
}

#[test]
fn completions_are_printed_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let output = run_bounded(ctl().args(["completions", shell]), "completions");
        assert!(output.status.success(), "{}", stderr_of(&output));
        let script = String::from_utf8_lossy(&output.stdout);
        for word in ["profiler-ctl", "record", "profgen", "report", "check"] {
            assert!(script.contains(word), "{shell}: {word} missing");
        }
    }
    let output = run_bounded(ctl().args(["completions", "cmd.exe"]), "completions");
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr_of(&output).starts_with("profiler-ctl: invalid value 'cmd.exe' for '<SHELL>'"));
}
