//! start/stop/status against a real program running under libbreakdance.so.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{ctl, library, stderr_of, Scratch};

/// Waiting bound for things that happen by themselves (a socket appearing,
/// the first trace); generous because the machine is shared.
const PATIENCE: Duration = Duration::from_secs(60);

/// A shell busy-looping under the library, without autostart; killed on drop.
struct Traced {
    child: Child,
}

impl Traced {
    fn start(lib: &Path) -> Traced {
        let mut child = Command::new("sh")
            .args(["-c", "echo ready; i=0; while :; do i=$((i+1)); done"])
            .env("LD_PRELOAD", lib)
            .env_remove("BREAKDANCE_AUTOSTART")
            .env_remove("BREAKDANCE_SOCKET")
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("TMPDIR")
            .stdout(Stdio::piped())
            .spawn()
            .expect("start sh");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n");
        let traced = Traced { child };
        let socket = traced.socket();
        let since = Instant::now();
        while !socket.exists() {
            assert!(
                since.elapsed() < PATIENCE,
                "{} never appeared",
                socket.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        traced
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// The default place without XDG_RUNTIME_DIR or TMPDIR: the user's
    /// private directory under /tmp.
    fn socket(&self) -> PathBuf {
        // SAFETY: geteuid cannot fail.
        let uid = unsafe { libc::geteuid() };
        PathBuf::from(format!(
            "/tmp/breakdance-{uid}/breakdance.{}.sock",
            self.child.id()
        ))
    }

    fn ctl(&self, subcommand: &str, extra: &[&str]) -> Output {
        ctl()
            .args([subcommand, "--pid", &self.pid()])
            .args(extra)
            .output()
            .unwrap()
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn stdout_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The value after `name` in status output (`  name   12`).
fn field(status: &str, name: &str) -> Option<String> {
    status.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some(name)).then(|| words.next().map(str::to_owned))?
    })
}

fn counter(status: &str, name: &str) -> u64 {
    field(status, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_session_is_started_watched_and_stopped() {
    let Some(lib) = library() else { return };
    let scratch = Scratch::new("session");
    let out = scratch.path("out");
    let mut traced = Traced::start(&lib);

    let status = traced.ctl("status", &[]);
    assert!(status.status.success(), "{}", stderr_of(&status));
    assert_eq!(
        field(&stdout_of(&status), "state").as_deref(),
        Some("off"),
        "{}",
        stdout_of(&status)
    );

    let started = traced.ctl(
        "start",
        &[
            "-e",
            "task-clock",
            "-c",
            "200000",
            "--lbr",
            "16",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert!(started.status.success(), "{}", stderr_of(&started));
    assert!(
        stdout_of(&started).starts_with("profiling started"),
        "{}",
        stdout_of(&started)
    );

    let since = Instant::now();
    loop {
        let status = traced.ctl("status", &[]);
        assert!(status.status.success(), "{}", stderr_of(&status));
        let text = stdout_of(&status);
        assert_eq!(field(&text, "state").as_deref(), Some("running"), "{text}");
        if counter(&text, "traces_completed") > 0 {
            break;
        }
        assert!(since.elapsed() < PATIENCE, "no trace completed: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }

    let stopped = traced.ctl("stop", &["--profgen"]);
    if !stopped.status.success() {
        std::thread::sleep(Duration::from_millis(200));
        let program = traced.child.try_wait().unwrap();
        panic!(
            "stop failed ({}); the traced program: {program:?}",
            stderr_of(&stopped)
        );
    }
    let text = stdout_of(&stopped);
    assert!(text.starts_with("breakdance: profiled"), "{text}");
    assert!(
        text.contains(&format!("outputs in {}", out.display())),
        "{text}"
    );
    assert!(text.contains("llvm-profgen-19 --perfscript="), "{text}");
    // The shell is stripped: --profgen lists it with the reason.
    assert!(
        text.contains("profgen: no profile for ") && text.contains(": it is stripped"),
        "{text}"
    );
    assert!(out.join("perf.script").is_file());
    let summary = breakdance_protocol::Summary::load(&out)
        .unwrap()
        .expect("summary.json");
    assert_eq!(summary.pid, traced.child.id());
    assert_eq!(summary.config.lbr, 16);

    let status = traced.ctl("status", &[]);
    assert_eq!(
        field(&stdout_of(&status), "state").as_deref(),
        Some("off"),
        "{}",
        stdout_of(&status)
    );
}

#[test]
fn an_error_answer_is_printed_and_exits_1() {
    let Some(lib) = library() else { return };
    let traced = Traced::start(&lib);
    // No session is running, so there is nothing to stop.
    let output = traced.ctl("stop", &[]);
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("profiler-ctl: ") && stderr.lines().count() == 1,
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

#[test]
fn a_program_without_the_library_is_explained() {
    let output = ctl()
        .args(["status", "--pid", "999999999"])
        .output()
        .unwrap();
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("profiler-ctl: cannot connect to ")
            && stderr.contains("/breakdance.999999999.sock: No such file or directory"),
        "{stderr}"
    );
    assert!(stderr.contains("LD_PRELOAD="), "{stderr}");
}
