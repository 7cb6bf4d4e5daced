//! The `brr` assembler macro emits exactly the bytes of the Rust encoder, in
//! GNU as and in clang's integrated assembler.

use brr::encoding::{Brr, ASM_MACRO, BRR_LEN};
use std::path::Path;
use std::process::Command;

mod common;

fn text_bytes(assembler: &str, args: &[&str], dir: &Path) -> Vec<u8> {
    let src = dir.join("t.s");
    let mut text = format!("{ASM_MACRO}\n.text\nstart:\n");
    // Every frequency, backward and forward targets.
    for freq in 0..16 {
        text.push_str(&format!("brr {freq}, start\nbrr {freq}, end\n"));
    }
    text.push_str("end: ret\n");
    std::fs::write(&src, text).unwrap();
    let obj = dir.join(format!("{assembler}.o"));
    let bin = dir.join(format!("{assembler}.bin"));
    common::run(
        Command::new(assembler)
            .args(args)
            .arg(&src)
            .arg("-o")
            .arg(&obj),
    );
    common::run(
        Command::new("objcopy")
            .args(["-O", "binary", "-j", ".text"])
            .arg(&obj)
            .arg(&bin),
    );
    std::fs::read(bin).unwrap()
}

#[test]
fn gnu_as_and_clang_emit_the_encoding() {
    let dir = common::scratch_dir("asm_macro");
    let end = 32 * BRR_LEN as i64;
    let mut expected = Vec::new();
    for freq in 0..16u8 {
        for target in [0, end] {
            let here = expected.len() as i64;
            let rel32 = (target - here - BRR_LEN as i64) as i32;
            expected.extend_from_slice(&Brr { freq, rel32 }.encode());
        }
    }
    expected.push(0xc3);
    for (assembler, args) in [
        ("as", &[][..]),
        ("clang-19", &["-c", "-x", "assembler"][..]),
    ] {
        if !common::have_tool(assembler) {
            continue;
        }
        assert_eq!(text_bytes(assembler, args, &dir), expected, "{assembler}");
    }
}

#[test]
fn out_of_range_frequency_is_rejected_by_the_assembler() {
    if !common::have_tool("as") {
        return;
    }
    let dir = common::scratch_dir("asm_macro_bad");
    let src = dir.join("bad.s");
    std::fs::write(&src, format!("{ASM_MACRO}\nx: brr 16, x\n")).unwrap();
    let out = Command::new("as")
        .arg(&src)
        .arg("-o")
        .arg(dir.join("bad.o"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("frequency must be in 0..15"));
}
