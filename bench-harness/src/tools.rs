//! Finding the external tools the tests and experiments run (clang-19,
//! valgrind, llvm-profgen-19, …), with the CI rule: under `CI=true` a missing
//! tool is a failure, never a silent skip.

use std::path::PathBuf;

/// True when the environment says this is a CI run (`CI=true`): the
/// workspace's one rule (breakdance-testkit).
pub use breakdance_testkit::in_ci;

/// The full path of the executable `name` (searched on `PATH` unless it
/// is a path itself), if there is one.
pub fn find(name: &str) -> Option<PathBuf> {
    which::which(name).ok()
}

/// The path of `name` for a test: `None` (after saying so on stderr) when it is
/// missing outside CI so the caller can skip; a panic naming the tool and the
/// install script under `CI=true`.
pub fn require(name: &str) -> Option<PathBuf> {
    match find(name) {
        Some(p) => Some(p),
        None if in_ci() => {
            panic!("{name} is not on PATH and CI=true: run scripts/install-deps.sh")
        }
        None => {
            eprintln!("skipping: {name} is not on PATH (scripts/install-deps.sh installs it)");
            None
        }
    }
}

/// A fresh empty directory under the system temp dir, named after `tag` and
/// this process; the caller removes it when done.
pub fn scratch_dir(tag: &str) -> std::io::Result<PathBuf> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("bd-{tag}-{}-{n}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The flags every test program is built with: optimised, with the DWARF 4
/// discriminators create_llvm_prof and llvm-profgen need.
pub const PROFILE_CFLAGS: &[&str] = &["-O2", "-gdwarf-4", "-fdebug-info-for-profiling"];

/// Compiles C `sources` with `clang` (a path from [`require`]) into `output`,
/// with [`PROFILE_CFLAGS`] and `extra` arguments; the error holds clang's stderr.
pub fn compile_c(
    clang: &std::path::Path,
    sources: &[&std::path::Path],
    output: &std::path::Path,
    extra: &[&str],
) -> Result<(), String> {
    let result = std::process::Command::new(clang)
        .args(PROFILE_CFLAGS)
        .args(extra)
        .args(sources)
        .arg("-o")
        .arg(output)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", clang.display()))?;
    if !result.status.success() {
        return Err(format!(
            "{} failed building {}: {}",
            clang.display(),
            output.display(),
            String::from_utf8_lossy(&result.stderr)
        ));
    }
    Ok(())
}
