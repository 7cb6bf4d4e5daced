//! Differential tests: every workload's output and exit status under the
//! emulator are byte-identical to a native run, for gcc and clang builds.

mod common;

use common::Cc;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn run_with_input(cmd: &mut Command, input: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// Runs `exe args` natively and under brr-run and compares.
fn same_as_native(exe: &Path, args: &[&str], input: &[u8]) {
    let native = run_with_input(Command::new(exe).args(args), input);
    let emulated = run_with_input(
        Command::new(env!("CARGO_BIN_EXE_brr-run"))
            .arg(exe)
            .args(args),
        input,
    );
    assert!(
        emulated.stderr.is_empty(),
        "{} {args:?} under the emulator: {}",
        exe.display(),
        String::from_utf8_lossy(&emulated.stderr)
    );
    assert_eq!(
        native.status.code(),
        emulated.status.code(),
        "{} {args:?}: exit status",
        exe.display()
    );
    assert!(
        native.stdout == emulated.stdout,
        "{} {args:?}: stdout differs",
        exe.display()
    );
    assert!(!native.stdout.is_empty());
}

#[test]
fn charclass_microbenchmark() {
    let src = common::workloads().join("charclass.c");
    for cc in [Cc::Gcc, Cc::Clang] {
        let Some(exe) = common::build_static("charclass", std::slice::from_ref(&src), cc, &[])
        else {
            continue;
        };
        same_as_native(&exe, &["1"], b"");
        same_as_native(&exe, &["2", "777"], b"");
    }
}

#[test]
fn opmix_integer_sse_and_libc() {
    let src = common::workloads().join("opmix.c");
    for cc in [Cc::Gcc, Cc::Clang] {
        let Some(exe) = common::build_static("opmix", std::slice::from_ref(&src), cc, &[]) else {
            continue;
        };
        same_as_native(&exe, &["argument"], b"");
    }
}

#[test]
fn floats_sse_x87_and_libm() {
    let src = common::workloads().join("floats.c");
    for cc in [Cc::Gcc, Cc::Clang] {
        let Some(exe) = common::build_static("floats", std::slice::from_ref(&src), cc, &["-lm"])
        else {
            continue;
        };
        same_as_native(&exe, &["20000"], b"");
    }
}

#[test]
fn resonance_loop() {
    let src = common::workloads().join("resonance.c");
    for cc in [Cc::Gcc, Cc::Clang] {
        let Some(exe) = common::build_static("resonance", std::slice::from_ref(&src), cc, &[])
        else {
            continue;
        };
        same_as_native(&exe, &["100001"], b"");
    }
}

#[test]
fn bzip2_from_debian_sources() {
    let Some(tree) = common::bzip2_source() else {
        return;
    };
    let input = common::sample_text(20_000);
    for cc in [Cc::Gcc, Cc::Clang] {
        let Some(exe) = common::build_static("bzip2", &common::bzip2_sources(&tree), cc, &[])
        else {
            continue;
        };
        same_as_native(&exe, &["-c"], &input);
        let compressed = run_with_input(Command::new(&exe).arg("-c"), &input).stdout;
        same_as_native(&exe, &["-dc"], &compressed);
        // A damaged stream: the error path and its exit status.
        let mut damaged = compressed.clone();
        let mid = damaged.len() / 2;
        damaged[mid] ^= 0x55;
        let native = run_with_input(Command::new(&exe).arg("-dc"), &damaged);
        let emulated = run_with_input(
            Command::new(env!("CARGO_BIN_EXE_brr-run"))
                .arg(&exe)
                .arg("-dc"),
            &damaged,
        );
        assert_ne!(native.status.code(), Some(0));
        assert_eq!(native.status.code(), emulated.status.code());
        assert!(native.stdout == emulated.stdout);
    }
}
