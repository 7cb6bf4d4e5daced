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
    breakdance_testkit::present_or_skip(false, &message);
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

/// How long a test waits for profiler-ctl before it declares a hang. Not a
/// speed check: it only keeps a stuck run from blocking CI for its whole
/// budget.
pub const HANG_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Every descendant of `pid`, deepest last.
fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut queue = vec![pid];
    while let Some(p) = queue.pop() {
        let Ok(tasks) = fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.filter_map(|t| t.ok()) {
            let children = fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                found.push(child);
                queue.push(child);
            }
        }
    }
    found
}

/// Waits for `child` (a profiler-ctl), killing it and everything it
/// started if it has not ended after [`HANG_LIMIT`], then failing.
pub fn wait_bounded(mut child: std::process::Child, what: &str) -> std::process::Output {
    let since = std::time::Instant::now();
    loop {
        if child.try_wait().expect("wait for profiler-ctl").is_some() {
            return child.wait_with_output().expect("collect output");
        }
        if since.elapsed() > HANG_LIMIT {
            let stuck = descendants(child.id());
            for pid in stuck.iter().rev() {
                // SAFETY: kill with a pid and a valid signal.
                unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
            }
            let _ = child.kill();
            let output = child.wait_with_output().expect("collect output");
            panic!(
                "{what}: profiler-ctl did not end within {} s (killed it and pids {stuck:?}); stderr: {}",
                HANG_LIMIT.as_secs(),
                stderr_of(&output)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Runs `command` with captured output, bounded by [`wait_bounded`].
pub fn run_bounded(command: &mut Command, what: &str) -> std::process::Output {
    let child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start profiler-ctl");
    wait_bounded(child, what)
}

/// `program` found on PATH, without symlinks (as profiler-ctl names it).
pub fn resolve(program: &str) -> PathBuf {
    bench_harness::tools::find(program)
        .and_then(|p| fs::canonicalize(p).ok())
        .unwrap_or_else(|| panic!("{program} is not on PATH"))
}
