//! Helpers shared by the integration tests: tools, scratch dirs, C builds.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// True if `tool` runs. Under `CI=true` a missing tool fails the test instead
/// of letting it skip.
pub fn have_tool(tool: &str) -> bool {
    let found = Command::new(tool).arg("--version").output().is_ok();
    if !found && std::env::var("CI").as_deref() == Ok("true") {
        panic!("{tool} is not installed (run scripts/install-deps.sh)");
    }
    if !found {
        eprintln!("skipping: {tool} is not installed");
    }
    found
}

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
