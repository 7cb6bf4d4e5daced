//! Helpers shared by the integration tests: tools, scratch dirs, C builds.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use breakdance_testkit::have_tool;

/// A fresh directory under the target dir for one test.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs a command, panicking with its stderr if it fails.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub use brr::workload::Compiler as Cc;

use breakdance_testkit::in_ci;

/// Builds a static musl executable from C `sources` with `cc` at -O2;
/// None when a compiler is missing outside CI.
pub fn build_static(name: &str, sources: &[PathBuf], cc: Cc, extra: &[&str]) -> Option<PathBuf> {
    let tool = if cc == Cc::Gcc {
        "musl-gcc"
    } else {
        "clang-19"
    };
    if !have_tool(tool) || !have_tool("musl-gcc") {
        return None;
    }
    // One directory per test binary, so binaries run in parallel (nextest)
    // never build the same file at once.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("builds")
        .join(env!("CARGO_CRATE_NAME"));
    std::fs::create_dir_all(&dir).unwrap();
    Some(
        brr::workload::build_static(&dir, name, sources, cc, extra)
            .unwrap_or_else(|e| panic!("{e:#}")),
    )
}

/// Directory of the workload sources.
pub fn workloads() -> PathBuf {
    brr::workload::workload_dir()
}

/// The bzip2 source tree (fetched once into the target dir); None outside CI
/// when it cannot be fetched.
pub fn bzip2_source() -> Option<PathBuf> {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("debian-src");
    match brr::workload::bzip2_source(&cache) {
        Ok(tree) => Some(tree),
        Err(e) if !in_ci() => {
            eprintln!("skipping: {e:#}");
            None
        }
        Err(e) => panic!("{e:#}"),
    }
}

#[allow(unused_imports)]
pub use brr::workload::{bzip2_sources, sample_text};
