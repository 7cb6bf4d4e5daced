//! The emulator on hand-written programs: brr outcomes equal the LFSR model,
//! the real CPU rejects brr with SIGILL, and unsupported input is named.

mod common;

use brr::encoding::ASM_MACRO;
use brr::lfsr::Lfsr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Assembles and links a -nostdlib static program from AT&T source.
fn assemble(dir: &Path, name: &str, body: &str) -> Option<PathBuf> {
    if !common::have_tool("as") || !common::have_tool("ld") {
        return None;
    }
    let src = dir.join(format!("{name}.s"));
    std::fs::write(&src, format!("{ASM_MACRO}\n{body}")).unwrap();
    let obj = dir.join(format!("{name}.o"));
    let exe = dir.join(name);
    common::run(Command::new("as").arg(&src).arg("-o").arg(&obj));
    common::run(
        Command::new("ld")
            .args(["-static", "-o"])
            .arg(&exe)
            .arg(&obj),
    );
    Some(exe)
}

/// A loop of `count` brr FREQ that writes the number taken (8 bytes) to stdout.
fn brr_counter(freq: u8, count: u32) -> String {
    format!(
        r#"
    .text
    .globl _start
_start:
    mov ${count}, %ecx
    xor %ebx, %ebx
1:  brr {freq}, 2f
    jmp 3f
2:  inc %rbx
3:  dec %ecx
    jnz 1b
    mov %rbx, buf(%rip)
    mov $1, %eax
    mov $1, %edi
    lea buf(%rip), %rsi
    mov $8, %edx
    syscall
    mov $60, %eax
    xor %edi, %edi
    syscall
    .bss
buf: .quad 0
"#
    )
}

#[test]
fn brr_outcomes_follow_the_lfsr_model() {
    let dir = common::scratch_dir("emu_brr");
    let count = 100_000u32;
    for freq in [0u8, 3, 9, 15] {
        let Some(exe) = assemble(&dir, &format!("brr{freq}"), &brr_counter(freq, count)) else {
            return;
        };
        for seed in [1u64, 99] {
            let out = common::run(
                Command::new(env!("CARGO_BIN_EXE_brr-run"))
                    .args(["--seed", &seed.to_string()])
                    .arg(&exe),
            );
            let taken = u64::from_le_bytes(out.stdout[..8].try_into().unwrap());
            let mut model = Lfsr::new(seed);
            let expected = (0..count).filter(|_| model.brr(freq)).count() as u64;
            assert_eq!(taken, expected, "freq {freq} seed {seed}");
        }
    }
}

#[test]
fn the_real_cpu_rejects_brr_with_sigill() {
    let dir = common::scratch_dir("emu_sigill");
    let Some(exe) = assemble(&dir, "brr_native", &brr_counter(0, 10)) else {
        return;
    };
    let status = Command::new(&exe).status().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGILL), "{status:?}");
}

/// Runs a one-instruction program under brr-run; returns the address of
/// the instruction and the error line.
fn run_one(dir: &Path, name: &str, instruction: &str) -> Option<(u64, String)> {
    let body = format!(
        "    .text\n    .globl _start\n_start:\n    nop\nhere:\n    {instruction}\n    mov $60, %eax\n    syscall\n"
    );
    let exe = assemble(dir, name, &body)?;
    let nm = common::run(Command::new("nm").arg(&exe));
    let nm = String::from_utf8_lossy(&nm.stdout);
    let here = nm
        .lines()
        .find(|l| l.ends_with(" here"))
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    let here = u64::from_str_radix(here, 16).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_brr-run"))
        .arg(&exe)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    Some((here, String::from_utf8_lossy(&out.stderr).into_owned()))
}

#[test]
fn an_unsupported_instruction_is_named_with_its_address() {
    let dir = common::scratch_dir("emu_unsupported");
    let Some((here, err)) = run_one(&dir, "fldpi", "fldpi") else {
        return;
    };
    assert!(err.contains("unsupported instruction `fldpi`"), "{err}");
    assert!(err.contains(&format!("at {here:#x}")), "{err}");
    // cpuid is known, but its result is the CPU's own.
    let (here, err) = run_one(&dir, "cpuid", "cpuid").unwrap();
    assert!(
        err.contains(&format!(
            "`cpuid` at {here:#x} has a result only the CPU knows"
        )),
        "{err}"
    );
}

#[test]
fn bad_programs_get_one_line_errors() {
    let dir = common::scratch_dir("emu_bad");
    let text = dir.join("text");
    std::fs::write(&text, "not an elf\n").unwrap();
    let cases = [
        (text.clone(), "not an ELF file"),
        (dir.join("missing"), "cannot read"),
        (PathBuf::from("/bin/sh"), "dynamically linked"),
    ];
    for (path, want) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_brr-run"))
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(
            err.contains(want) && err.lines().count() == 1,
            "{}: {err}",
            path.display()
        );
    }
}
