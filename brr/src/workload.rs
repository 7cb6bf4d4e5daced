//! Building the workloads: the paper's microbenchmark and third-party C
//! programs, compiled static against musl with gcc or clang.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A C compiler used to build workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compiler {
    /// gcc through the musl-gcc wrapper.
    Gcc,
    /// clang-19 with musl's headers, linked by musl-gcc.
    Clang,
}

impl Compiler {
    pub fn name(self) -> &'static str {
        match self {
            Compiler::Gcc => "gcc",
            Compiler::Clang => "clang",
        }
    }

    /// Command compiling C to an object or assembly with musl's headers.
    pub fn cc(self) -> Command {
        match self {
            Compiler::Gcc => Command::new("musl-gcc"),
            Compiler::Clang => {
                let mut c = Command::new("clang-19");
                c.args(["-nostdinc", "-isystem", "/usr/include/x86_64-linux-musl"]);
                c
            }
        }
    }
}

/// Flags every workload is built with.
pub const CFLAGS: &[&str] = &["-O2", "-w", "-D_FILE_OFFSET_BITS=64"];

/// Runs a command and fails with its stderr.
pub fn run(cmd: &mut Command) -> Result<std::process::Output> {
    let out = cmd.output().with_context(|| {
        format!(
            "cannot run {:?} (is it installed? see scripts/install-deps.sh)",
            cmd.get_program()
        )
    })?;
    if !out.status.success() {
        bail!(
            "{:?} failed ({}): {}",
            cmd,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

/// Links objects into a static musl executable.
pub fn link(objects: &[PathBuf], exe: &Path) -> Result<()> {
    run(Command::new("musl-gcc")
        .arg("-static")
        .args(objects)
        .arg("-o")
        .arg(exe))?;
    Ok(())
}

/// Compiles `sources` with `cc` and links a static executable `dir/name-cc`.
pub fn build_static(
    dir: &Path,
    name: &str,
    sources: &[PathBuf],
    cc: Compiler,
    extra: &[&str],
) -> Result<PathBuf> {
    let objdir = dir.join(format!("{name}-{}-objs", cc.name()));
    std::fs::create_dir_all(&objdir)
        .with_context(|| format!("cannot create {}", objdir.display()))?;
    let mut objs = Vec::new();
    for src in sources {
        let stem = src.file_stem().context("source without a name")?;
        let obj = objdir.join(stem).with_extension("o");
        run(cc
            .cc()
            .args(CFLAGS)
            .args(extra)
            .arg("-c")
            .arg(src)
            .arg("-o")
            .arg(&obj))?;
        objs.push(obj);
    }
    let exe = dir.join(format!("{name}-{}", cc.name()));
    link(&objs, &exe)?;
    Ok(exe)
}

/// Directory of the bundled workload sources.
pub fn workload_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads")
}

/// The unpacked bzip2 1.0.8 source tree from Debian bookworm, fetched once
/// with `apt-get source --download-only bzip2` into `cache`.
pub fn bzip2_source(cache: &Path) -> Result<PathBuf> {
    let tree = cache.join("bzip2-1.0.8");
    if tree.join("bzlib.c").exists() {
        return Ok(tree);
    }
    std::fs::create_dir_all(cache).with_context(|| format!("cannot create {}", cache.display()))?;
    let tarball = cache.join("bzip2_1.0.8.orig.tar.gz");
    if !tarball.exists() {
        run(Command::new("apt-get").args(["source", "--download-only", "bzip2"]).current_dir(cache))
            .context("cannot fetch bzip2 sources: add a bookworm deb-src line to the apt sources and run apt-get update")?;
    }
    run(Command::new("tar")
        .arg("xzf")
        .arg(&tarball)
        .current_dir(cache))?;
    Ok(tree)
}

/// The C files of the bzip2 program.
pub fn bzip2_sources(tree: &Path) -> Vec<PathBuf> {
    [
        "blocksort",
        "huffman",
        "crctable",
        "randtable",
        "compress",
        "decompress",
        "bzlib",
        "bzip2",
    ]
    .iter()
    .map(|f| tree.join(format!("{f}.c")))
    .collect()
}

/// Deterministic text of `words` words, a compression input.
pub fn sample_text(words: usize) -> Vec<u8> {
    let mut state = 12345u32;
    let mut out = Vec::new();
    for i in 0..words {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
        let len = 1 + (state >> 16) % 8;
        for _ in 0..len {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
            out.push(b'a' + ((state >> 16) % 10) as u8);
        }
        out.push(if i % 13 == 12 { b'\n' } else { b' ' });
    }
    out
}

/// Compiles `sources` to assembly, instruments every unit with `variant`,
/// and links them with the edge runtime into `dir/name-cc-variant`.
pub fn build_instrumented(
    dir: &Path,
    name: &str,
    sources: &[PathBuf],
    cc: Compiler,
    variant: crate::instrument::Variant,
) -> Result<PathBuf> {
    use crate::instrument::{rewrite, Variant, RUNTIME_C};
    let tag = format!("{name}-{}-{}", cc.name(), variant.label());
    let work = dir.join(format!("{tag}-work"));
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let mut objs = Vec::new();
    for src in sources {
        let unit = src
            .file_name()
            .context("source without a name")?
            .to_string_lossy()
            .into_owned();
        let asm = work.join(format!("{unit}.s"));
        run(cc.cc().args(CFLAGS).arg("-S").arg(src).arg("-o").arg(&asm))?;
        let text = std::fs::read_to_string(&asm)
            .with_context(|| format!("cannot read {}", asm.display()))?;
        let out = work.join(format!("{unit}.inst.s"));
        std::fs::write(&out, rewrite(&text, &unit, variant).text)
            .with_context(|| format!("cannot write {}", out.display()))?;
        let obj = work.join(format!("{unit}.o"));
        run(cc.cc().arg("-c").arg(&out).arg("-o").arg(&obj))?;
        objs.push(obj);
    }
    let interval = match variant {
        Variant::Counter { interval } => interval,
        _ => 1,
    };
    let rt = work.join("edge_rt.c");
    std::fs::write(&rt, RUNTIME_C).with_context(|| format!("cannot write {}", rt.display()))?;
    let rt_obj = work.join("edge_rt.o");
    run(Command::new("musl-gcc")
        .args(["-O2", "-c"])
        .arg(format!("-DBRR_INTERVAL={interval}"))
        .arg(&rt)
        .arg("-o")
        .arg(&rt_obj))?;
    objs.push(rt_obj);
    if variant == Variant::Ephemeral {
        let src = work.join("eph_rt.c");
        std::fs::write(&src, crate::instrument::EPHEMERAL_RUNTIME_C)
            .with_context(|| format!("cannot write {}", src.display()))?;
        let obj = work.join("eph_rt.o");
        run(Command::new("musl-gcc")
            .args(["-O2", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(&obj))?;
        objs.push(obj);
    }
    if let Variant::Brr { .. } = variant {
        // The SIGILL handler lets the same binary run natively.
        let sig = work.join("brr_sigill.c");
        std::fs::write(&sig, crate::instrument::sigill_runtime_c())
            .with_context(|| format!("cannot write {}", sig.display()))?;
        let sig_obj = work.join("brr_sigill.o");
        run(Command::new("musl-gcc")
            .args(["-O2", "-c"])
            .arg(&sig)
            .arg("-o")
            .arg(&sig_obj))?;
        objs.push(sig_obj);
    }
    let exe = dir.join(tag);
    link(&objs, &exe)?;
    Ok(exe)
}
