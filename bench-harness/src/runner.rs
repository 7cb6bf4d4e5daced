//! Running external commands: timed runs (wall and CPU time from `wait4`),
//! plain runs that must succeed, and errors that name the command and quote
//! its stderr.

use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// How many bytes of a failed command's stderr an error quotes (the tail).
const STDERR_TAIL: usize = 1500;

/// A command line with its environment and redirections.
#[derive(Clone, Debug)]
pub struct Cmd {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Vec<(String, OsString)>,
    pub cwd: Option<PathBuf>,
    /// Standard input from this file (else /dev/null).
    pub stdin: Option<PathBuf>,
    /// Standard output into this file (else discarded).
    pub stdout: Option<PathBuf>,
}

impl Cmd {
    pub fn new(program: impl Into<PathBuf>) -> Cmd {
        Cmd {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            stdin: None,
            stdout: None,
        }
    }

    pub fn arg(mut self, a: impl Into<OsString>) -> Cmd {
        self.args.push(a.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, k: &str, v: impl Into<OsString>) -> Cmd {
        self.env.push((k.to_string(), v.into()));
        self
    }

    pub fn cwd(mut self, dir: &Path) -> Cmd {
        self.cwd = Some(dir.to_path_buf());
        self
    }

    pub fn stdout_to(mut self, file: &Path) -> Cmd {
        self.stdout = Some(file.to_path_buf());
        self
    }

    /// The command as a shell would show it, for messages.
    pub fn display(&self) -> String {
        let mut parts: Vec<String> = self
            .env
            .iter()
            .map(|(k, v)| format!("{k}={}", v.to_string_lossy()))
            .collect();
        parts.push(self.program.display().to_string());
        parts.extend(self.args.iter().map(|a| {
            let s = a.to_string_lossy();
            if s.contains(' ') {
                format!("'{s}'")
            } else {
                s.into_owned()
            }
        }));
        let mut line = parts.join(" ");
        if let Some(f) = &self.stdout {
            line += &format!(" > {}", f.display());
        }
        line
    }

    /// Prefixes the command line with `program args...` (a wrapper such as
    /// valgrind or profiler-ctl).
    pub fn wrapped(&self, program: &Path, args: &[OsString]) -> Cmd {
        let mut c = self.clone();
        c.program = program.to_path_buf();
        c.args = args.to_vec();
        c.args.push(self.program.clone().into_os_string());
        c.args.extend(self.args.iter().cloned());
        c
    }
}

/// Wall and CPU time of one finished run.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub wall_s: f64,
    pub user_s: f64,
    pub sys_s: f64,
}

impl Timing {
    pub fn cpu_s(&self) -> f64 {
        self.user_s + self.sys_s
    }
}

fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_TAIL);
    let text = String::from_utf8_lossy(&bytes[start..]);
    let text = text.trim();
    if text.is_empty() {
        "(no stderr)".to_string()
    } else {
        text.replace('\n', " | ")
    }
}

/// Runs `cmd` to completion and returns its times; fails naming the command
/// and quoting its stderr when it cannot start or exits unsuccessfully.
///
/// CPU time comes from `wait4`, so it counts the process and the children it
/// waited for (profiler-ctl and the program it runs).
pub fn run_timed(cmd: &Cmd) -> Result<Timing> {
    let stderr_file = tempfile_path("stderr");
    let result = run_inner(cmd, &stderr_file);
    let _ = std::fs::remove_file(&stderr_file);
    result
}

/// Runs `cmd` to completion, discarding the times.
pub fn run(cmd: &Cmd) -> Result<()> {
    run_timed(cmd).map(|_| ())
}

fn run_inner(cmd: &Cmd, stderr_file: &Path) -> Result<Timing> {
    let mut c = Command::new(&cmd.program);
    c.args(&cmd.args);
    for (k, v) in &cmd.env {
        c.env(k, v);
    }
    if let Some(d) = &cmd.cwd {
        c.current_dir(d);
    }
    let stdin = match &cmd.stdin {
        Some(f) => Stdio::from(
            std::fs::File::open(f).with_context(|| format!("cannot open {}", f.display()))?,
        ),
        None => Stdio::null(),
    };
    let stdout = match &cmd.stdout {
        Some(f) => Stdio::from(
            std::fs::File::create(f).with_context(|| format!("cannot create {}", f.display()))?,
        ),
        None => Stdio::null(),
    };
    let errf = std::fs::File::create(stderr_file)
        .with_context(|| format!("cannot create {}", stderr_file.display()))?;
    c.stdin(stdin).stdout(stdout).stderr(Stdio::from(errf));
    let start = Instant::now();
    let child = c
        .spawn()
        .with_context(|| format!("cannot start `{}`", cmd.display()))?;
    let (status, usage) = wait4(child.id() as libc::pid_t)
        .with_context(|| format!("waiting for `{}`", cmd.display()))?;
    let wall_s = start.elapsed().as_secs_f64();
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        let how = if libc::WIFEXITED(status) {
            format!("exit status {}", libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            format!("killed by signal {}", libc::WTERMSIG(status))
        } else {
            format!("wait status {status:#x}")
        };
        let err = std::fs::read(stderr_file).unwrap_or_default();
        bail!("`{}` failed ({how}): {}", cmd.display(), tail(&err));
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Ok(Timing {
        wall_s,
        user_s: tv(usage.ru_utime),
        sys_s: tv(usage.ru_stime),
    })
}

fn wait4(pid: libc::pid_t) -> std::io::Result<(i32, libc::rusage)> {
    let mut status = 0;
    // SAFETY: rusage is plain old data; an all-zero value is valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is our own un-reaped child (std's Child is never
        // waited on after this); both out-pointers are valid for writes.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            return Ok((status, usage));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// A fresh path in the temp dir (not created), unique within this process.
pub fn tempfile_path(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("bench-harness.{}.{n}.{tag}", std::process::id()))
}

/// Finds an executable by name on PATH (or checks a path).
pub fn find_tool(name: &str) -> Option<PathBuf> {
    bench_harness::tools::find(name)
}

/// Like [`find_tool`], but an error naming the tool and the package to install.
pub fn require_tool(name: &str, package: &str) -> Result<PathBuf> {
    find_tool(name).with_context(|| {
        format!("`{name}` not found on PATH; install it with `apt-get install {package}` (or scripts/install-deps.sh)")
    })
}

/// The directory holding this executable (target/<profile>/), where
/// profiler-ctl and libbreakdance.so are built.
pub fn build_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot locate the bench-harness executable")?;
    let dir = exe
        .parent()
        .context("bench-harness executable has no parent directory")?;
    // Under `cargo test` the executable may sit in target/<profile>/deps.
    if dir.file_name().is_some_and(|n| n == "deps") {
        return Ok(dir.parent().unwrap_or(dir).to_path_buf());
    }
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_command_error_names_command_and_stderr() {
        let cmd = Cmd::new("/bin/sh").args(["-c", "echo oops >&2; exit 3"]);
        let err = run(&cmd).unwrap_err().to_string();
        assert!(err.contains("/bin/sh -c"), "{err}");
        assert!(err.contains("exit status 3"), "{err}");
        assert!(err.contains("oops"), "{err}");
    }

    #[test]
    fn timed_run_reports_cpu_time_of_a_busy_child() {
        let cmd =
            Cmd::new("/bin/sh").args(["-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"]);
        let t = run_timed(&cmd).unwrap();
        assert!(t.wall_s > 0.0 && t.cpu_s() > 0.0, "{t:?}");
    }

    #[test]
    fn missing_program_is_named() {
        let err = run(&Cmd::new("/nonexistent/prog")).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/prog"), "{err}");
    }
}
