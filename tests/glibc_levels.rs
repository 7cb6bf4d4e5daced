//! Every x86-64 ISA level of glibc's string functions, end to end.
//!
//! glibc picks its string and memory functions by the CPU's features
//! (sse2, sse4/ssse3, avx2, evex): the machines without an LBR mostly run
//! the older variants. `GLIBC_TUNABLES=glibc.cpu.hwcaps=-…` makes glibc on
//! this machine pick what an x86-64-v3, -v2 or baseline CPU would, and an
//! interpreter-style workload (`interp.c`, a bytecode loop whose
//! operations are those functions) is recorded at each level:
//! - verify mode: every transfer the emulator predicts is the CPU's;
//! - emulate mode: segments per trace within 25% of the unrestricted run,
//!   and at most one instruction left to the CPU per 100 traces.
//!
//! A level the CPU itself does not reach (v3 on a CPU without AVX2) is the
//! unrestricted run already and is not repeated.

mod common;

use std::process::Command;

use common::*;

const PERIOD_NS: u64 = 200_000;
/// About 0.3 s of CPU here: over a thousand traces per run.
const ROUNDS: &str = "50000";

/// A level: its name, the features glibc is told to ignore, and a feature
/// the level must not have (checked in ld.so's diagnostics, so that a
/// tunable glibc ignored fails the test instead of testing nothing).
struct Level {
    name: &'static str,
    masked: &'static str,
    absent: Option<Feature>,
}

/// A CPUID feature bit in ld.so's `--list-diagnostics`:
/// `x86.cpu_features.features[INDEX].active[REG]`, glibc's cpuid index
/// (0: leaf 1, 1: leaf 7) and register (0 eax, 1 ebx, 2 ecx, 3 edx).
#[derive(Clone, Copy)]
struct Feature {
    name: &'static str,
    index: u32,
    register: u32,
    bit: u32,
}

const AVX512F: Feature = Feature {
    name: "AVX512F",
    index: 1,
    register: 1,
    bit: 16,
};
const AVX2: Feature = Feature {
    name: "AVX2",
    index: 1,
    register: 1,
    bit: 5,
};
const SSE4_2: Feature = Feature {
    name: "SSE4_2",
    index: 0,
    register: 2,
    bit: 20,
};

const V3_MASK: &str = "-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD";
const V2_MASK: &str = "-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,\
                       -AVX2,-AVX,-BMI1,-BMI2,-LZCNT,-MOVBE,-FMA,-F16C";
const V1_MASK: &str = "-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,\
                       -AVX2,-AVX,-BMI1,-BMI2,-LZCNT,-MOVBE,-FMA,-F16C,\
                       -SSE4_2,-SSE4_1,-SSSE3,-POPCNT";

const LEVELS: [Level; 3] = [
    Level {
        name: "x86-64-v3",
        masked: V3_MASK,
        absent: Some(AVX512F),
    },
    Level {
        name: "x86-64-v2",
        masked: V2_MASK,
        absent: Some(AVX2),
    },
    Level {
        name: "x86-64",
        masked: V1_MASK,
        absent: Some(SSE4_2),
    },
];

/// The active CPUID words glibc's dynamic loader reports under `tunables`.
fn active(tunables: &str, feature: Feature) -> bool {
    let out = Command::new("ld.so")
        .arg("--list-diagnostics")
        .env("GLIBC_TUNABLES", tunables)
        .output()
        .expect("ld.so --list-diagnostics (package libc-bin)");
    let key = format!(
        "x86.cpu_features.features[{:#x}].active[{:#x}]=",
        feature.index, feature.register
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let word = text
        .lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| panic!("ld.so --list-diagnostics has no {key}"));
    word >> feature.bit & 1 == 1
}

fn per_trace(rec: &Recording, key: &str) -> f64 {
    counter(&rec.summary, key) as f64 / counter(&rec.summary, "traces_started").max(1) as f64
}

#[test]
fn every_glibc_level_emulates_and_verifies() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("glibc-levels");
    let program = build(&clang, &scratch.0, "interp", &["interp.c"], &[]);
    let native = run_native(&program, &[ROUNDS], &[]);
    assert!(native.status.success(), "{native:?}");

    let record = |level: &str, tunables: &str, mode: &str| {
        let out = scratch.path(&format!("{level}-{mode}"));
        let profiled = record_with(
            &tracer,
            &out,
            PERIOD_NS,
            &["--lookahead", mode],
            &program,
            &[ROUNDS],
            &[("GLIBC_TUNABLES", tunables.as_ref())],
        );
        let name = format!("interp {level} {mode}");
        assert_same_behaviour(&name, &native, &profiled);
        let rec = load(&out);
        check_summary(&rec);
        assert_valid_traces(&name, &rec);
        rec
    };

    let host = record("host", "", "emulate");
    let host_segments = per_trace(&host, "segments");
    eprintln!(
        "host: {:.2} segments, {:.2} stops, {:.3} step-overs per trace",
        host_segments,
        per_trace(&host, "breakpoints"),
        per_trace(&host, "step_overs")
    );
    let mut levels = 0;
    for level in &LEVELS {
        let tunables = format!("glibc.cpu.hwcaps={}", level.masked);
        if let Some(feature) = level.absent {
            if !active("", feature) {
                eprintln!(
                    "{}: this CPU has no {} already: the unrestricted run covers it",
                    level.name, feature.name
                );
                continue;
            }
            assert!(
                !active(&tunables, feature),
                "{}: glibc ignored GLIBC_TUNABLES={tunables}: {} is still active",
                level.name,
                feature.name
            );
        }
        levels += 1;
        let verify = record(level.name, &tunables, "verify");
        for key in ["verify_mismatches", "verify_register_mismatches"] {
            assert_eq!(
                counter(&verify.summary, key),
                0,
                "{}: verify found {key}: {}",
                level.name,
                verify.summary
            );
        }
        let checked = counter(&verify.summary, "verify_checked");
        assert!(checked > 0, "{}: verify checked nothing", level.name);

        let rec = record(level.name, &tunables, "emulate");
        let traces = counter(&rec.summary, "traces_started");
        let segments = per_trace(&rec, "segments");
        let step_overs = counter(&rec.summary, "step_overs");
        eprintln!(
            "{}: {:.2} segments, {:.2} stops, {:.3} step-overs per trace over {traces} traces; \
             verify checked {checked} predictions",
            level.name,
            segments,
            per_trace(&rec, "breakpoints"),
            step_overs as f64 / traces.max(1) as f64
        );
        assert!(traces >= 200, "{}: only {traces} traces", level.name);
        assert!(
            segments <= host_segments * 1.25,
            "{}: {segments:.2} segments per trace, over 125% of the unrestricted run's \
             {host_segments:.2}: the core lacks forms of this level's string functions",
            level.name
        );
        assert!(
            step_overs * 100 <= traces,
            "{}: {step_overs} instructions left to the CPU in {traces} traces (at most 1 per 100)",
            level.name
        );
    }
    assert!(levels > 0, "no glibc level below this CPU's to test");
}
