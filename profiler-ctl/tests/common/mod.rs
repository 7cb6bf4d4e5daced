//! Helpers shared by the integration tests: the real profiler-ctl binary,
//! the real libbreakdance.so, scratch directories.

#![allow(dead_code)]

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const CTL: &str = env!("CARGO_BIN_EXE_profiler-ctl");

/// profiler-ctl with an environment that does not leak the caller's
/// LD_PRELOAD or BREAKDANCE_* settings into the test.
pub fn ctl() -> Command {
    let mut command = Command::new(CTL);
    for (name, _) in env::vars_os() {
        let name_text = name.to_string_lossy();
        if name_text == "LD_PRELOAD"
            || (name_text.starts_with("BREAKDANCE_") && name_text != "BREAKDANCE_LIB")
        {
            command.env_remove(&name);
        }
    }
    command
}

/// The library the tests run programs under: `$BREAKDANCE_LIB`, else the
/// one the workspace build put next to profiler-ctl (where profiler-ctl
/// itself looks). Missing: `None` with a note, or a failure under CI=true.
pub fn library() -> Option<PathBuf> {
    let candidate = env::var_os("BREAKDANCE_LIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(CTL).with_file_name("libbreakdance.so"));
    if candidate.is_file() {
        return Some(candidate);
    }
    let message = format!(
        "{} is missing: build the workspace first (cargo build --workspace, or --release for \
         the release tests) or set BREAKDANCE_LIB",
        candidate.display()
    );
    if env::var("CI").as_deref() == Ok("true") {
        panic!("{message}");
    }
    eprintln!("skipping: {message}");
    None
}

/// A directory under the system temp dir, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = env::temp_dir().join(format!("profiler-ctl-it-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub fn stderr_of(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
