//! Third-party workloads: Debian source packages built with clang-19 (SQLite's
//! speedtest1, the Lua 5.4 interpreter, bzip2) and unmodified Debian binaries
//! (python3, xz), each with a training and a different evaluation input.
//!
//! Everything is cached under one directory (default `target/workloads/`):
//! `src/` holds downloaded and extracted source packages, `build/<workload>/
//! <variant>/` the binaries, `inputs/` generated inputs and scripts.

use crate::runner::{self, Cmd};
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Flags every source-built variant gets (the build recipe).
pub const BASE_CFLAGS: [&str; 4] = ["-O2", "-gdwarf-4", "-fdebug-info-for-profiling", "-w"];
const CLANG: &str = "clang-19";
const SOURCES_LIST: &str = "/etc/apt/sources.list.d/breakdance-src.list";
const DEB_SRC_LINE: &str = "deb-src http://deb.debian.org/debian bookworm main";
const LUA_SCRIPT: &str = include_str!("scripts/bench.lua");
const PYTHON_SCRIPT: &str = include_str!("scripts/bench.py");

/// The workloads, in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Lua,
    Bzip2,
    Python,
    Xz,
}

impl Kind {
    pub const ALL: [Kind; 5] = [Kind::Sqlite, Kind::Lua, Kind::Bzip2, Kind::Python, Kind::Xz];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Sqlite => "sqlite",
            Kind::Lua => "lua",
            Kind::Bzip2 => "bzip2",
            Kind::Python => "python3",
            Kind::Xz => "xz",
        }
    }

    /// Debian source package, for the source-built workloads.
    pub fn package(self) -> Option<&'static str> {
        match self {
            Kind::Sqlite => Some("sqlite3"),
            Kind::Lua => Some("lua5.4"),
            Kind::Bzip2 => Some("bzip2"),
            Kind::Python | Kind::Xz => None,
        }
    }

    pub fn source_built(self) -> bool {
        self.package().is_some()
    }
}

/// Which input a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    Train,
    Eval,
}

/// A workload ready to run: its binary and the two command lines.
#[derive(Clone, Debug)]
pub struct Workload {
    pub kind: Kind,
    /// The program executed (for source-built workloads, the baseline build).
    pub binary: PathBuf,
    /// Module where the work is done, for per-module analysis (the binary,
    /// or liblzma for xz).
    pub hot_module: PathBuf,
    quick: bool,
    inputs: PathBuf,
}

impl Workload {
    pub fn name(&self) -> &'static str {
        self.kind.name()
    }

    /// The command running `binary` (a build variant of this workload, or
    /// its own binary) on the given input.
    pub fn command_with(&self, binary: &Path, input: Input) -> Cmd {
        let q = self.quick;
        let i = &self.inputs;
        let pick = |train: &str, eval: &str| match input {
            Input::Train => train.to_string(),
            Input::Eval => eval.to_string(),
        };
        let cmd = Cmd::new(binary);
        match self.kind {
            Kind::Sqlite => {
                let size = if q { pick("4", "6") } else { pick("40", "70") };
                let mut c = cmd
                    .args(["--memdb", "--testset", "main", "--size"])
                    .arg(size);
                if input == Input::Eval {
                    c = c.arg("--primarykey");
                }
                c
            }
            Kind::Lua => {
                let scale = if q { pick("2", "1") } else { pick("10", "7") };
                cmd.arg(i.join("bench.lua"))
                    .arg(pick("train", "eval"))
                    .arg(scale)
            }
            Kind::Python => {
                let scale = if q { "0.25" } else { &pick("3", "4") };
                // Fixed hash seed: the same path under callgrind and the tracer.
                cmd.env("PYTHONHASHSEED", "0")
                    .arg(i.join("bench.py"))
                    .arg(pick("train", "eval"))
                    .arg(scale)
            }
            Kind::Bzip2 => cmd
                .args(["-c", "-9"])
                .arg(i.join(pick("text-train.txt", "text-eval.txt"))),
            Kind::Xz => cmd
                .args(["-c", "-6", "-T1"])
                .arg(i.join(pick("data-train.txt", "data-eval.txt"))),
        }
    }

    pub fn command(&self, input: Input) -> Cmd {
        self.command_with(&self.binary, input)
    }

    /// Builds a variant of a source-built workload into
    /// `build/<name>/<variant>/` with extra compiler flags, returning the
    /// binary. An existing binary is reused only for the baseline.
    pub fn build_variant(
        &self,
        ws: &Workspace,
        variant: &str,
        extra: &[String],
    ) -> Result<PathBuf> {
        build(ws, self.kind, variant, extra)
    }
}

/// The cache directory and the mode of the run.
pub struct Workspace {
    pub cache: PathBuf,
    pub quick: bool,
}

impl Workspace {
    fn src(&self) -> PathBuf {
        self.cache.join("src")
    }

    fn inputs(&self) -> PathBuf {
        self.cache
            .join(if self.quick { "inputs-quick" } else { "inputs" })
    }
}

/// The workloads of a run: all five, or (quick) the ones that build in
/// seconds. Each failure is reported and the others go on.
pub fn kinds(quick: bool) -> Vec<Kind> {
    if quick {
        vec![Kind::Lua, Kind::Bzip2, Kind::Python, Kind::Xz]
    } else {
        Kind::ALL.to_vec()
    }
}

/// Fetches, builds and prepares one workload (cached: a second call only
/// checks the files are there).
pub fn prepare(ws: &Workspace, kind: Kind) -> Result<Workload> {
    let inputs = ws.inputs();
    std::fs::create_dir_all(&inputs)
        .with_context(|| format!("cannot create {}", inputs.display()))?;
    write_inputs(&inputs, kind, ws.quick)?;
    let (binary, hot_module) = match kind {
        Kind::Python => {
            let p = PathBuf::from("/usr/bin/python3");
            if !p.exists() {
                bail!("/usr/bin/python3 not found; install it with `apt-get install python3`");
            }
            let real = std::fs::canonicalize(&p)?;
            (p, real)
        }
        Kind::Xz => {
            let p = runner::require_tool("/usr/bin/xz", "xz-utils")?;
            let lib = PathBuf::from("/lib/x86_64-linux-gnu/liblzma.so.5");
            let hot = std::fs::canonicalize(&lib).unwrap_or(lib);
            (p, hot)
        }
        _ => {
            let b = build(ws, kind, "baseline", &[])?;
            (b.clone(), b)
        }
    };
    Ok(Workload {
        kind,
        binary,
        hot_module,
        quick: ws.quick,
        inputs,
    })
}

/// Ensures a deb-src entry exists (adding one for bookworm main, and saying
/// so), then runs `apt-get update` once per process.
fn ensure_deb_src() -> Result<()> {
    use std::sync::OnceLock;
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| ensure_deb_src_once().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn ensure_deb_src_once() -> Result<()> {
    let mut have = false;
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(rd) = std::fs::read_dir("/etc/apt/sources.list.d") {
        files.extend(rd.flatten().map(|e| e.path()));
    }
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let is_list = f.extension().is_some_and(|e| e == "list") || f.ends_with("sources.list");
        let is_deb822 = f.extension().is_some_and(|e| e == "sources");
        have |= text.lines().any(|l| {
            let l = l.trim();
            (is_list && l.starts_with("deb-src "))
                || (is_deb822 && l.starts_with("Types:") && l.contains("deb-src"))
        });
    }
    if !have {
        eprintln!("[workloads] no deb-src entry in the apt sources: adding `{DEB_SRC_LINE}` to {SOURCES_LIST}");
        std::fs::write(SOURCES_LIST, format!("{DEB_SRC_LINE}\n")).with_context(|| {
            format!("cannot write {SOURCES_LIST} (run as root, or add a deb-src line yourself)")
        })?;
    }
    eprintln!("[workloads] apt-get update");
    runner::run(&Cmd::new("apt-get").args(["update", "-qq"]))
}

/// Downloads and extracts a Debian source package into `src/<package>/`.
fn fetch_source(ws: &Workspace, package: &str) -> Result<PathBuf> {
    let src = ws.src();
    let tree = src.join(package);
    if tree.join("debian").is_dir() {
        return Ok(tree);
    }
    std::fs::create_dir_all(&src).with_context(|| format!("cannot create {}", src.display()))?;
    let dsc = find_dsc(&src, package);
    let dsc = match dsc {
        Some(d) => d,
        None => {
            ensure_deb_src()?;
            runner::require_tool("dpkg-source", "dpkg-dev")?;
            eprintln!("[workloads] apt-get source --download-only {package}");
            runner::run(
                &Cmd::new("apt-get")
                    .args(["source", "--download-only", package])
                    .cwd(&src),
            )?;
            find_dsc(&src, package).with_context(|| {
                format!("apt-get source {package} left no .dsc in {}", src.display())
            })?
        }
    };
    let _ = std::fs::remove_dir_all(&tree);
    eprintln!("[workloads] dpkg-source -x {}", dsc.display());
    runner::run(
        &Cmd::new("dpkg-source")
            .arg("--no-check")
            .arg("-x")
            .arg(&dsc)
            .arg(&tree)
            .cwd(&src),
    )?;
    Ok(tree)
}

fn find_dsc(dir: &Path, package: &str) -> Option<PathBuf> {
    let prefix = format!("{package}_");
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".dsc"))
        })
}

/// Generates SQLite's amalgamation (sqlite3.c) from the source tree.
fn sqlite_amalgamation(ws: &Workspace, tree: &Path) -> Result<PathBuf> {
    let dir = ws.cache.join("build").join("sqlite-amalgamation");
    if dir.join("sqlite3.c").is_file() && dir.join("sqlite3.h").is_file() {
        return Ok(dir);
    }
    runner::require_tool("tclsh", "tcl")?;
    std::fs::create_dir_all(&dir)?;
    eprintln!("[workloads] sqlite: configure && make sqlite3.c");
    runner::run(
        &Cmd::new(tree.join("configure"))
            .args(["--disable-tcl", "--disable-readline"])
            .env("CC", "cc")
            .cwd(&dir),
    )?;
    runner::run(&Cmd::new("make").args(["sqlite3.c"]).cwd(&dir))?;
    Ok(dir)
}

/// Compiles a source-built workload with the base flags plus `extra`.
fn build(ws: &Workspace, kind: Kind, variant: &str, extra: &[String]) -> Result<PathBuf> {
    let package = kind
        .package()
        .with_context(|| format!("{} is not built from source", kind.name()))?;
    let out_dir = ws.cache.join("build").join(kind.name()).join(variant);
    let bin_name = match kind {
        Kind::Sqlite => "speedtest1",
        Kind::Lua => "lua",
        _ => "bzip2",
    };
    let out = out_dir.join(bin_name);
    runner::require_tool(CLANG, "clang-19")?;
    let tree = fetch_source(ws, package)?;
    std::fs::create_dir_all(&out_dir)?;
    let mut cmd = Cmd::new(CLANG).args(BASE_CFLAGS).args(extra);
    match kind {
        Kind::Sqlite => {
            let amal = sqlite_amalgamation(ws, &tree)?;
            cmd = cmd
                .args([
                    "-DSQLITE_THREADSAFE=0",
                    "-DSQLITE_OMIT_LOAD_EXTENSION",
                    "-I",
                ])
                .arg(&amal)
                .arg(tree.join("test/speedtest1.c"))
                .arg(amal.join("sqlite3.c"))
                .args(["-lm", "-o"])
                .arg(&out);
        }
        Kind::Lua => {
            // Debian's patched luaconf.h includes a header its rules generate.
            std::fs::write(
                out_dir.join("lua5.4-deb-multiarch.h"),
                "#define DEB_HOST_MULTIARCH \"x86_64-linux-gnu\"\n",
            )?;
            cmd = cmd
                // A fixed string-hash seed (lstate.c lets the build choose
                // it): Lua otherwise seeds from the clock and addresses, and
                // runs under callgrind and the tracer would take different
                // paths through its tables.
                .args([
                    "-DLUA_COMPAT_5_3",
                    "-DLUA_USE_LINUX",
                    "-Dluai_makeseed(L)=0x2545F491u",
                    "-I",
                ])
                .arg(&out_dir)
                .args(c_files(&tree.join("src"), &["luac.c"])?)
                .args(["-lm", "-ldl", "-o"])
                .arg(&out);
        }
        _ => {
            let files = [
                "blocksort.c",
                "huffman.c",
                "crctable.c",
                "randtable.c",
                "compress.c",
                "decompress.c",
                "bzlib.c",
                "bzip2.c",
            ];
            cmd = cmd
                .args(["-D_FILE_OFFSET_BITS=64"])
                .args(files.iter().map(|f| tree.join(f)))
                .arg("-o")
                .arg(&out);
        }
    }
    // The baseline is reused while its exact compiler command is unchanged;
    // variants depend on fresh profiles and are always rebuilt.
    let stamp = out_dir.join("build-command.txt");
    let line = cmd.display();
    if variant == "baseline"
        && out.is_file()
        && std::fs::read_to_string(&stamp).is_ok_and(|s| s == line)
    {
        return Ok(out);
    }
    eprintln!("[workloads] building {} ({variant})", kind.name());
    let _ = std::fs::remove_file(&stamp);
    runner::run(&cmd)?;
    std::fs::write(&stamp, &line)?;
    Ok(out)
}

fn c_files(dir: &Path, skip: &[&str]) -> Result<Vec<OsString>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .filter(|p| !skip.iter().any(|s| p.file_name().is_some_and(|n| n == *s)))
        .collect();
    files.sort();
    Ok(files.into_iter().map(PathBuf::into_os_string).collect())
}

/// Writes the scripts and generated data files a workload reads.
fn write_inputs(dir: &Path, kind: Kind, quick: bool) -> Result<()> {
    let write = |name: &str, data: &[u8]| -> Result<()> {
        let p = dir.join(name);
        if std::fs::read(&p).ok().as_deref() != Some(data) {
            std::fs::write(&p, data).with_context(|| format!("cannot write {}", p.display()))?;
        }
        Ok(())
    };
    let kib = |full: usize, q: usize| if quick { q } else { full } * 1024;
    match kind {
        Kind::Lua => write("bench.lua", LUA_SCRIPT.as_bytes()),
        Kind::Python => write("bench.py", PYTHON_SCRIPT.as_bytes()),
        Kind::Bzip2 => {
            write("text-train.txt", &generate_text(1, kib(6144, 512), false))?;
            write("text-eval.txt", &generate_text(2, kib(9216, 768), true))
        }
        Kind::Xz => {
            write("data-train.txt", &generate_text(3, kib(1536, 192), true))?;
            write("data-eval.txt", &generate_text(4, kib(2560, 256), false))
        }
        Kind::Sqlite => Ok(()),
    }
}

/// Deterministic text-like data: words drawn with a skewed (roughly Zipf)
/// distribution from a generated vocabulary, in lines of prose; `records`
/// mixes in CSV-like numeric records so the two inputs differ in kind, not
/// just in seed.
pub fn generate_text(seed: u64, len: usize, records: bool) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let vocab: Vec<String> = (0..2000)
        .map(|_| {
            let n = 2 + (next() % 9) as usize;
            (0..n)
                .map(|_| {
                    char::from(
                        b"etaoinshrdlucmfwypvbgkjqxz"
                            [(next() % 26) as usize % (6 + (next() % 21) as usize)],
                    )
                })
                .collect()
        })
        .collect();
    let mut out = Vec::with_capacity(len + 128);
    let mut line = 0u64;
    while out.len() < len {
        line += 1;
        if records && line % 3 == 0 {
            let r = next();
            out.extend_from_slice(
                format!(
                    "{line},{},{}.{:02},{}\n",
                    r % 100_000,
                    (r >> 20) % 1000,
                    (r >> 40) % 100,
                    vocab[(r % 50) as usize]
                )
                .as_bytes(),
            );
            continue;
        }
        let words = 6 + next() % 10;
        for w in 0..words {
            // Squaring a uniform variate skews picks towards low indices.
            let u = (next() % 10_000) as f64 / 10_000.0;
            let idx = ((u * u * u) * vocab.len() as f64) as usize;
            if w > 0 {
                out.push(b' ');
            }
            out.extend_from_slice(vocab[idx.min(vocab.len() - 1)].as_bytes());
        }
        out.extend_from_slice(b".\n");
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_text_is_deterministic_and_differs_by_seed() {
        let a = generate_text(1, 4096, false);
        assert_eq!(a.len(), 4096);
        assert_eq!(a, generate_text(1, 4096, false));
        assert_ne!(a, generate_text(2, 4096, false));
        assert!(a.iter().all(|b| b.is_ascii()));
    }

    #[test]
    fn train_and_eval_commands_differ() {
        for kind in Kind::ALL {
            let w = Workload {
                kind,
                binary: PathBuf::from("/bin/true"),
                hot_module: PathBuf::from("/bin/true"),
                quick: false,
                inputs: PathBuf::from("/tmp"),
            };
            assert_ne!(
                w.command(Input::Train).display(),
                w.command(Input::Eval).display(),
                "{}",
                kind.name()
            );
        }
    }
}
