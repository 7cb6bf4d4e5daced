//! Compiled C runs on the core at every x86-64 ISA level a distribution or
//! a user may build for: `tests/isa/loops.c` (string scans, vectorisable
//! loops, copies, hashing, an interpreter, floating point) compiled by
//! clang-19 and gcc at `-O2` and `-O3` with `-march=x86-64-v2`, `-v3`
//! (AVX2, BMI, FMA) and `-v4` (AVX-512), and every instruction form in its
//! code is implemented, or named in [`NOT_YET`] with the reason.

use iced_x86::{Code, Decoder, DecoderOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use x86_sem::{Cpu, CpuModel, CpuState, NoMemory, Table};

const LEVELS: &[&str] = &["x86-64-v2", "x86-64-v3", "x86-64-v4"];
const OPTIMISATIONS: &[&str] = &["-O2", "-O3"];
const COMPILERS: &[&str] = &["clang-19", "gcc"];

/// Forms compilers emit for `loops.c` that the core does not implement
/// yet, each with why. Emulation stops (`Unsupported`) at them.
const NOT_YET: &[(Code, &str)] = &[(
    Code::EVEX_Vpgatherdd_ymm_k1_vm32y,
    "VSIB addressing (a vector of indices, one address per element) is not \
     modelled by Insn's base + index × scale, and the native harness cannot \
     aim eight addresses into its data region",
)];

/// Whether `compiler` runs; under CI=true a missing one fails the test.
fn available(compiler: &str) -> bool {
    let ok = Command::new(compiler)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    breakdance_testkit::present_or_skip(
        ok,
        &format!("{compiler} is needed (scripts/install-deps.sh installs it)"),
    )
}

/// Compiles `loops.c` with `compiler` at `opt` for `level` into an object
/// file.
fn compile(compiler: &str, opt: &str, level: &str, dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/isa/loops.c");
    let obj = dir.join(format!("loops-{compiler}{opt}-{level}.o"));
    let out = Command::new(compiler)
        .args([opt, "-c", "-fno-asynchronous-unwind-tables"])
        .arg(format!("-march={level}"))
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .output()
        .unwrap_or_else(|e| panic!("run {compiler}: {e}"));
    assert!(
        out.status.success(),
        "{compiler} {opt} -march={level} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    obj
}

fn u16_at(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn u64_at(b: &[u8], at: usize) -> usize {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w) as usize
}

/// The contents of every executable section (.text, .text.unlikely,
/// .text.startup, …) of a little-endian ELF64 object.
fn code_sections(elf: &[u8]) -> Vec<&[u8]> {
    const SHF_EXECINSTR: usize = 4;
    assert_eq!(&elf[..5], b"\x7fELF\x02", "not an ELF64 object");
    let (shoff, shentsize, shnum) = (u64_at(elf, 0x28), u16_at(elf, 0x3a), u16_at(elf, 0x3c));
    (0..shnum)
        .map(|n| &elf[shoff + n * shentsize..][..shentsize])
        .filter(|sh| u64_at(sh, 8) & SHF_EXECINSTR != 0)
        .map(|sh| {
            let (offset, size) = (u64_at(sh, 0x18), u64_at(sh, 0x20));
            &elf[offset..offset + size]
        })
        .collect()
}

#[test]
fn compiled_c_at_every_isa_level_runs_on_the_core() {
    // The core's coverage, not this CPU's: a -v4 build must be covered on
    // a machine without AVX-512 too.
    let table = Table::<Cpu<CpuState, NoMemory>>::boxed(&CpuModel::every_feature());
    let allowed: BTreeSet<Code> = NOT_YET.iter().map(|&(c, _)| c).collect();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("isa_levels");
    std::fs::create_dir_all(&dir).unwrap();
    // Form -> (static count, where it was seen).
    let mut missing: BTreeMap<Code, (usize, BTreeSet<String>)> = BTreeMap::new();
    let mut seen_forms = BTreeSet::new();
    let mut builds = 0;
    for compiler in COMPILERS.iter().filter(|c| available(c)) {
        for (opt, level) in OPTIMISATIONS
            .iter()
            .flat_map(|o| LEVELS.iter().map(move |l| (o, l)))
        {
            let elf = std::fs::read(compile(compiler, opt, level, &dir)).unwrap();
            let build = format!("{compiler} {opt} {level}");
            builds += 1;
            for code in code_sections(&elf) {
                let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
                for i in &mut decoder {
                    assert!(!i.is_invalid(), "{build}: undecodable code");
                    seen_forms.insert(i.code());
                    if !table.implements(i.code()) && !allowed.contains(&i.code()) {
                        let e = missing.entry(i.code()).or_default();
                        e.0 += 1;
                        e.1.insert(build.clone());
                    }
                }
            }
        }
    }
    if builds == 0 {
        eprintln!("skipped: neither clang-19 nor gcc runs here");
        return;
    }
    // The test proves something only if the compilers vectorised:
    // AVX-512 code (v4) has EVEX forms, AVX2 code (v3) VEX ymm ones.
    assert!(
        seen_forms
            .iter()
            .any(|c| format!("{c:?}").starts_with("EVEX_")),
        "no EVEX form in the -march=x86-64-v4 builds"
    );
    let stale: Vec<&Code> = allowed
        .iter()
        .filter(|c| table.implements(**c) || !seen_forms.contains(c))
        .collect();
    assert!(
        stale.is_empty(),
        "NOT_YET names forms that are implemented or no longer emitted: {stale:?}"
    );
    let report: Vec<String> = missing
        .iter()
        .map(|(code, (n, at))| {
            let at: Vec<&str> = at.iter().map(String::as_str).collect();
            format!("{code:?} ×{n} ({})", at.join(", "))
        })
        .collect();
    assert!(
        report.is_empty(),
        "{} forms in compiled loops.c the core lacks:\n{}",
        report.len(),
        report.join("\n")
    );
}
