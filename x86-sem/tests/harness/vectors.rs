//! Test vectors: instruction lines in GNU as Intel syntax, assembled at test
//! time and split back into one encoding per line.

use iced_x86::{Decoder, DecoderOptions, Instruction};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// One assembled test line.
#[derive(Clone, Debug)]
pub struct Vector {
    /// The source line (without its comment).
    pub text: String,
    /// Its encoding.
    pub bytes: Vec<u8>,
    /// Its decoding at the harness entry address.
    pub instr: Instruction,
}

/// The vectors of `name` (next to this crate's tests), assembled once per
/// test process.
///
/// Lines are instructions; `#` starts a comment. Every line must assemble
/// to exactly one instruction.
pub fn load(name: &'static str) -> Vec<Vector> {
    static CACHE: Mutex<Vec<(&'static str, Vec<Vector>)>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, v)) = cache.iter().find(|(n, _)| *n == name) {
        return v.clone();
    }
    let v = assemble(name);
    cache.push((name, v.clone()));
    v
}

fn assemble(name: &str) -> Vec<Vector> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let text = std::fs::read_to_string(dir.join(name)).expect("read the vectors");
    let lines: Vec<String> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    let work = scratch(name);
    let src = work.join("vectors.s");
    let mut asm = String::from(".intel_syntax noprefix\n.text\n");
    for l in &lines {
        asm.push_str(l);
        asm.push('\n');
    }
    std::fs::write(&src, asm).unwrap();
    let obj = work.join("vectors.o");
    let bin = work.join("vectors.bin");
    run(Command::new("as").arg("--64").arg(&src).arg("-o").arg(&obj));
    run(Command::new("objcopy")
        .args(["-O", "binary", "--only-section=.text"])
        .arg(&obj)
        .arg(&bin));
    let code = std::fs::read(&bin).unwrap();
    let mut decoder = Decoder::with_ip(64, &code, 0, DecoderOptions::NONE);
    let mut out = Vec::new();
    for l in lines {
        assert!(
            decoder.can_decode(),
            "`{l}`: the assembled code ended early"
        );
        let start = decoder.position();
        let i = decoder.decode();
        assert!(!i.is_invalid(), "`{l}` does not decode");
        let bytes = code[start..decoder.position()].to_vec();
        let mut d = Decoder::with_ip(
            64,
            &bytes,
            crate::harness::native::ENTRY,
            DecoderOptions::NONE,
        );
        let instr = d.decode();
        out.push(Vector {
            text: l,
            bytes,
            instr,
        });
    }
    assert!(
        !decoder.can_decode(),
        "{name}: more instructions than lines (a line assembled to two)"
    );
    out
}

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("x86-sem-{name}"));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("{cmd:?}: {e} (binutils must be installed: scripts/install-deps.sh)")
    });
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
