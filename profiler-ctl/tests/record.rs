//! `profiler-ctl record` run for real: option checks, exit status, signals
//! and standard streams, with programs under the real libbreakdance.so.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use breakdance_protocol::{Event, Summary};
use common::{ctl, library, run_bounded, stderr_of, wait_bounded, Scratch};

/// Runs `record ARGS -- sh -c 'touch MARKER'` and returns the error line.
fn refused(scratch: &Scratch, args: &[&str]) -> String {
    let marker = scratch.path("ran");
    let output = run_bounded(
        ctl().arg("record").args(args).args([
            "--",
            "sh",
            "-c",
            &format!("touch '{}'", marker.display()),
        ]),
        "refused options",
    );
    let stderr = stderr_of(&output);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{args:?} should be refused: {stderr}"
    );
    assert!(
        !marker.exists(),
        "{args:?}: the command ran although the options were refused"
    );
    assert_eq!(
        stderr.lines().count(),
        1,
        "{args:?}: one line expected: {stderr}"
    );
    assert!(stderr.starts_with("profiler-ctl: "), "{stderr}");
    stderr
}

#[test]
fn invalid_options_are_refused_before_the_command_runs() {
    let scratch = Scratch::new("invalid");
    let not_a_dir = scratch.path("file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let under_file = not_a_dir.join("out");
    let under_file = under_file.to_str().unwrap();
    let cases: [(&[&str], &str); 7] = [
        (
            &["-c", "0"],
            "profiler-ctl: invalid value '0' for '--period <N>': 0 is not in 1..",
        ),
        (
            &["-c", "1000", "-F", "99"],
            "profiler-ctl: the argument '--period <N>' cannot be used with '--freq <HZ>'",
        ),
        (
            &["--lbr", "0"],
            "profiler-ctl: invalid value '0' for '--lbr <N>': 0 is not in 1..=4096",
        ),
        (
            &["--lbr=4097"],
            "profiler-ctl: invalid value '4097' for '--lbr <N>': 4097 is not in 1..=4096",
        ),
        (
            &["-e", "cache-misses"],
            "profiler-ctl: invalid value 'cache-misses' for '--event <EVENT>' (known: task-clock,",
        ),
        (
            &["-o", under_file],
            "profiler-ctl: -o: cannot create output directory",
        ),
        (
            &["--lib", "/nonexistent/libbreakdance.so"],
            "profiler-ctl: --lib: /nonexistent/libbreakdance.so is not a file",
        ),
    ];
    for (args, expected) in cases {
        let message = refused(&scratch, args);
        assert!(message.starts_with(expected), "{args:?}: got {message}");
    }
    assert!(!scratch.path("breakdance-out").exists());
}

/// Whether the kernel opens a hardware branch-instructions counter for
/// this process: the machine's own answer to "is there a PMU", asked
/// without profiler-ctl's code.
fn kernel_opens_hardware_branches() -> bool {
    // perf_event_attr: type (u32), size (u32), config (u64), ..., the flag
    // bits at byte 40. 128 bytes, zero but for these: a size every kernel
    // since 5.x accepts.
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&0u32.to_ne_bytes()); // PERF_TYPE_HARDWARE
    attr[4..8].copy_from_slice(&128u32.to_ne_bytes());
    attr[8..16].copy_from_slice(&4u64.to_ne_bytes()); // PERF_COUNT_HW_BRANCH_INSTRUCTIONS
    let flags: u64 = 1 | 1 << 5 | 1 << 6; // disabled, exclude_kernel, exclude_hv
    attr[40..48].copy_from_slice(&flags.to_ne_bytes());
    // SAFETY: attr is a valid perf_event_attr of the size it declares; the
    // fd returned is closed at once.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, attr.as_ptr(), 0, -1, -1, 0) };
    if fd >= 0 {
        // SAFETY: closing the fd just opened.
        unsafe { libc::close(fd as libc::c_int) };
    }
    fd >= 0
}

/// `-e branches` on this machine: where the kernel has a PMU it records a
/// real run; where it has none (these VMs), `record` and `start` refuse it
/// with one line naming the option, before anything runs. Whichever branch
/// the machine takes runs: under CI=true neither is skipped.
#[test]
fn the_branches_event_records_with_a_pmu_and_is_refused_without() {
    let scratch = Scratch::new("pmu");
    if kernel_opens_hardware_branches() {
        let Some(_lib) = library() else { return };
        let out = scratch.path("out");
        let output = record(
            &scratch,
            &["-q", "-e", "branches", "-c", "100003"],
            &["awk", AWK_WORK],
        );
        assert!(output.status.success(), "{}", stderr_of(&output));
        assert_eq!(String::from_utf8_lossy(&output.stdout), "899997\n");
        let summary = Summary::load(&out).unwrap().expect("summary.json");
        assert_eq!(summary.config.event, Event::Branches, "{summary:?}");
        assert!(
            summary.counters.traces_completed > 0,
            "no trace sampled on branches: {summary:?}"
        );
        return;
    }
    let message = refused(
        &scratch,
        &[
            "-e",
            "branches",
            "-o",
            scratch.path("out").to_str().unwrap(),
        ],
    );
    assert!(
        message.starts_with("profiler-ctl: --event: 'branches' is a hardware event"),
        "{message}"
    );
    // `start` refuses it before it looks for the program.
    let output = run_bounded(
        ctl().args(["start", "--pid", "1", "-e", "branches"]),
        "start -e branches",
    );
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line expected: {stderr}");
    assert!(
        stderr.starts_with("profiler-ctl: --event: 'branches' is a hardware event"),
        "{stderr}"
    );
}

/// `profiler-ctl record OPTIONS -o SCRATCH/out -- COMMAND`, bounded.
fn record(scratch: &Scratch, options: &[&str], command: &[&str]) -> std::process::Output {
    run_bounded(
        ctl()
            .arg("record")
            .args(options)
            .arg("-o")
            .arg(scratch.path("out"))
            .arg("--")
            .args(command),
        &format!("record {options:?} -- {command:?}"),
    )
}

#[test]
fn a_command_that_cannot_be_found_exits_127() {
    let Some(_lib) = library() else { return };
    let scratch = Scratch::new("notfound");
    let output = record(&scratch, &["-q"], &["no-such-program-for-profiler-ctl"]);
    assert_eq!(output.status.code(), Some(127), "{}", stderr_of(&output));
    assert!(stderr_of(&output)
        .starts_with("profiler-ctl: cannot run 'no-such-program-for-profiler-ctl': "));
}

#[test]
fn the_exit_code_passes_through() {
    let Some(_lib) = library() else { return };
    let scratch = Scratch::new("exit7");
    let output = record(&scratch, &["-q"], &["sh", "-c", "exit 7"]);
    assert_eq!(output.status.code(), Some(7), "{}", stderr_of(&output));
    assert!(
        output.stderr.is_empty(),
        "-q prints nothing: {}",
        stderr_of(&output)
    );
}

#[test]
fn death_by_a_signal_passes_through() {
    let Some(_lib) = library() else { return };
    let scratch = Scratch::new("sigterm");
    let output = record(&scratch, &["-q"], &["sh", "-c", "kill -TERM $$"]);
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGTERM),
        "{:?} {}",
        output.status,
        stderr_of(&output)
    );
}

#[test]
fn a_missing_summary_is_reported_after_sigkill() {
    let Some(_lib) = library() else { return };
    let scratch = Scratch::new("sigkill");
    let output = record(&scratch, &[], &["sh", "-c", "kill -KILL $$"]);
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGKILL),
        "{:?}",
        output.status
    );
    let stderr = stderr_of(&output);
    assert!(stderr.contains("summary.json was not written;"), "{stderr}");
    assert!(stderr.contains("was killed by SIGKILL"), "{stderr}");
}

#[test]
fn standard_streams_pass_through() {
    let Some(_lib) = library() else { return };
    let scratch = Scratch::new("stdio");
    let mut child = ctl()
        .args(["record", "-o"])
        .arg(scratch.path("out"))
        .args(["--", "sh", "-c", "cat; echo to-stderr >&2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hi\n").unwrap();
    let output = wait_bounded(child, "stdio");
    assert!(output.status.success(), "{}", stderr_of(&output));
    // The summary goes to stderr, never into the program's stdout.
    assert_eq!(String::from_utf8_lossy(&output.stdout), "hi\n");
    assert!(
        stderr_of(&output).starts_with("to-stderr\n"),
        "{}",
        stderr_of(&output)
    );
}

#[test]
fn echo_piped_through_cat() {
    let Some(_lib) = library() else { return };
    let scratch = Scratch::new("cat");
    let command = format!(
        "echo hi | '{}' record -q -o '{}' -- cat",
        common::CTL,
        scratch.path("out").display()
    );
    let output = run_bounded(
        Command::new("sh")
            .args(["-c", &command])
            .env_remove("LD_PRELOAD"),
        "echo | cat",
    );
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "hi\n");
}

/// Starts `record OPTIONS -- COMMAND`, whose program prints `ready` once
/// its traps are set, sends `signal` to profiler-ctl, and returns how it
/// ended.
fn signal_record(
    scratch: &Scratch,
    options: &[&str],
    command: &[&str],
    signal: libc::c_int,
) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let mut ctl = ctl();
    // SAFETY: signal() is async-signal-safe, as pre_exec requires. The
    // default action, whatever this test inherited: under nohup SIGHUP is
    // ignored, an ignored disposition survives exec, and the program
    // would outlive the signal it is sent.
    unsafe {
        ctl.pre_exec(move || {
            libc::signal(signal, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = ctl
        .arg("record")
        .args(options)
        .arg("-o")
        .arg(scratch.path("out"))
        .arg("--")
        .args(command)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    // SAFETY: kill with a valid pid and signal.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
    wait_bounded(child, &format!("signal {signal} to record -- {command:?}"))
}

#[test]
fn signals_are_forwarded_to_the_command() {
    let Some(_lib) = library() else { return };
    // The program dies by each of these signals' default action whichever
    // of its threads the kernel hands the signal to, so how profiler-ctl
    // ends shows that the signal reached it. No core files.
    let idle = ["sh", "-c", "ulimit -c 0; echo ready; exec sleep 1000"];
    let signals = [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ];
    for signal in signals {
        let scratch = Scratch::new(&format!("forward-{signal}"));
        let output = signal_record(&scratch, &["-q"], &idle, signal);
        assert_eq!(
            output.status.signal(),
            Some(signal),
            "{:?} {}",
            output.status,
            stderr_of(&output)
        );
    }
}

#[test]
fn forwarded_signals_reach_the_programs_handlers() {
    let Some(_lib) = library() else { return };
    for (trap, signal, code) in [("USR1", libc::SIGUSR1, 42), ("TERM", libc::SIGTERM, 43)] {
        let scratch = Scratch::new(&format!("trap-{signal}"));
        let script = format!("trap 'exit {code}' {trap}; echo ready; while :; do sleep 0.05; done");
        let output = signal_record(&scratch, &["-q"], &["sh", "-c", &script], signal);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{trap}: {}",
            stderr_of(&output)
        );
    }
}

/// A C-library program that does some work, starts a child process that
/// does the same, and ends with exit(3) (the library writes its profile at
/// exit; a shell such as dash ends with _exit and never would).
const AWK_WORK: &str = r#"BEGIN { for (i = 0; i < 300000; i++) s += i % 7; system("awk \"BEGIN { for (i = 0; i < 300000; i++) s += i % 7 }\""); print s }"#;

#[test]
fn a_recorded_run_leaves_a_profile_and_a_summary() {
    let Some(_lib) = library() else { return };
    let scratch = Scratch::new("profile");
    let out = scratch.path("out");
    let output = record(
        &scratch,
        &["-e", "task-clock", "-c", "200000", "--lbr", "16"],
        &["awk", AWK_WORK],
    );
    let stderr = stderr_of(&output);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "899997\n");
    let summary = Summary::load(&out).unwrap().expect("summary.json");
    assert_eq!(summary.config.event, Event::TaskClock);
    assert_eq!(summary.config.period, Some(200000));
    assert_eq!(summary.config.lbr, 16);
    assert!(summary.counters.traces_completed > 0, "{summary:?}");
    assert!(out.join("perf.script").is_file());

    assert!(
        stderr.starts_with("breakdance: profiled `awk BEGIN"),
        "{stderr}"
    );
    assert!(
        stderr.contains("  event task-clock, period 200000, trace length 16, look-ahead emulate\n"),
        "{stderr}"
    );
    assert!(stderr.contains("\n  files: perf.script"), "{stderr}");
    let children: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("awk.") && out.join(name).join("summary.json").is_file())
        .collect();
    assert_eq!(
        children.len(),
        1,
        "the child awk profiled into its own subdirectory: {children:?}"
    );
    let line = format!(
        "child processes were profiled too, each into its own subdirectory: {}/",
        children[0]
    );
    assert!(stderr.contains(&line), "{stderr}");
    let awk = common::resolve("awk");
    let next = format!(
        "  llvm-profgen-19 --perfscript={}/perf.script --binary={} --output=prof.afdo\n",
        out.display(),
        awk.display()
    );
    assert!(stderr.contains(&next), "{stderr}");
}

#[test]
fn a_terminating_signal_first_has_the_profile_written() {
    let Some(_lib) = library() else { return };
    let scratch = Scratch::new("stop-first");
    // The shell itself stays the traced process (no exec), so its control
    // socket is up before it prints `ready`.
    let idle = ["sh", "-c", "echo ready; while :; do sleep 0.05; done"];
    let output = signal_record(&scratch, &["-c", "200000"], &idle, libc::SIGTERM);
    let stderr = stderr_of(&output);
    assert_eq!(output.status.signal(), Some(libc::SIGTERM), "{stderr}");
    assert!(
        scratch.path("out").join("summary.json").is_file(),
        "{stderr}"
    );
    assert!(stderr.starts_with("breakdance: profiled"), "{stderr}");
    assert!(
        stderr.contains("was killed by SIGTERM after its profile was written"),
        "{stderr}"
    );
}
