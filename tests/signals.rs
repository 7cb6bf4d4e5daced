//! The host program's own signal use and fork keep working under the tracer.

mod common;

use common::*;

const PERIOD_NS: u64 = 100_000;

/// A SIGTRAP handler installed by the program after the session started sees
/// exactly the SIGTRAPs the program raised (none of the tracer's own).
#[test]
fn application_sigtrap_handler_keeps_working() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("sigtrap");
    let binary = build(&clang, &dir.0, "sigtrap", &["sigtrap.c"], &[]);
    let args = ["3000"];
    let native = run_native(&binary, &args, &[]);
    assert!(
        String::from_utf8_lossy(&native.stdout).starts_with("sigtrap own=3000 foreign=0 "),
        "native run: {native:?}"
    );
    let out = dir.path("out");
    let profiled = record(&tracer, &out, PERIOD_NS, &binary, &args, &[]);
    assert_same_behaviour("sigtrap", &native, &profiled);
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces("sigtrap", &rec);
}

/// fork without exec: the child keeps running under the inherited library
/// state and exits normally through exit(); the parent's profile is sound.
#[test]
fn fork_without_exec() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("fork");
    let binary = build(&clang, &dir.0, "forker", &["forker.c"], &[]);
    let args = ["30000000"];
    let native = run_native(&binary, &args, &[]);
    assert!(
        String::from_utf8_lossy(&native.stdout).contains("child-exit=0 signaled=0"),
        "native run: {native:?}"
    );
    let out = dir.path("out");
    let profiled = record(&tracer, &out, PERIOD_NS, &binary, &args, &[]);
    assert_same_behaviour("forker", &native, &profiled);
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces("forker", &rec);
}

/// Ctrl-C at a terminal sends SIGINT to the whole foreground process group:
/// profiler-ctl and the program alike. The program still dies by SIGINT, as
/// it would unprofiled, but only after its profile is written.
#[test]
fn ctrl_c_to_the_process_group_keeps_the_profile() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("ctrlc");
    let binary = build(&clang, &dir.0, "control", &["control.c"], &[]);
    let out = dir.path("out");
    let never = dir.path("never-created");
    let mut command = std::process::Command::new(&tracer.ctl);
    command
        .args(["record", "-q", "-c", "1000000", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&binary)
        .arg(&never)
        .process_group(0);
    // As at a terminal, SIGINT is at its default action: a test run from a
    // background job (whose shell ignores SIGINT in it, as POSIX asks)
    // would otherwise pass the ignored disposition on and wait forever.
    // SAFETY: signal(2) is async-signal-safe, as pre_exec requires.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = command.spawn().expect("profiler-ctl runs");
    // Once the session has collected a few traces, the signal comes.
    let program = child_of(child.id());
    let socket = default_socket(program);
    wait_for_socket(&socket);
    wait_for_traces(&socket, 5);
    // SAFETY: signals the process group made above.
    let sent = unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) };
    assert_eq!(sent, 0, "kill(-pgid, SIGINT)");
    let status = child.wait().expect("profiler-ctl ends");
    assert_eq!(
        status.signal(),
        Some(libc::SIGINT),
        "record ends by SIGINT like the program: {status:?}"
    );
    let rec = load(&out);
    assert!(
        counter(&rec.summary, "traces_completed") > 0,
        "{}",
        rec.summary
    );
    check_summary(&rec);
}
