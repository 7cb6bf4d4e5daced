//! The control socket: three start/stop sessions in one process give three
//! complete profiles; malformed requests get an `error` reply and change
//! nothing; a peer of another uid is refused; a stop that cannot write
//! keeps the session for the next stop (over the socket and through
//! profiler-ctl).

mod common;

use std::ffi::CString;
use std::path::Path;

use common::controlled::*;
use common::*;

/// Outcome of a connection attempt made by a child running as `nobody`.
#[derive(Debug, PartialEq, Eq)]
enum ForeignPeer {
    /// connect(2) failed.
    ConnectRefused,
    /// Accepted, then closed without an answer or answered `error ...`.
    ClosedOrError,
    /// Answered `ok ...`: the check failed.
    Served,
    /// No answer in 20 s.
    Hung,
}

/// Forks a child that drops to uid/gid 65534 (nobody), connects to `socket`
/// and sends `status`.
fn connect_as_nobody(socket: &Path) -> ForeignPeer {
    use std::os::unix::ffi::OsStrExt;
    let path = CString::new(socket.as_os_str().as_bytes()).unwrap();
    // Everything the child needs is prepared before fork: after it, the child
    // of this multi-threaded process makes only raw system calls.
    // SAFETY: sockaddr_un is plain data; zero is a valid value.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_bytes_with_nul();
    assert!(
        bytes.len() <= address.sun_path.len(),
        "socket path too long"
    );
    for (d, s) in address.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let timeout = libc::timeval {
        tv_sec: 20,
        tv_usec: 0,
    };
    // SAFETY: the child only calls async-signal-safe functions and _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: raw system calls on values prepared before fork.
        unsafe {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(65534) != 0
                || libc::setuid(65534) != 0
            {
                libc::_exit(10);
            }
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            if fd < 0 {
                libc::_exit(11);
            }
            let connected = libc::connect(
                fd,
                &address as *const libc::sockaddr_un as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            );
            if connected != 0 {
                libc::_exit(0);
            }
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &timeout as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
            let request = b"status\n";
            libc::write(fd, request.as_ptr().cast(), request.len());
            let mut answer = [0u8; 8];
            let n = libc::read(fd, answer.as_mut_ptr().cast(), answer.len());
            if n < 0 {
                libc::_exit(if *libc::__errno_location() == libc::EAGAIN {
                    3
                } else {
                    1
                });
            }
            if n >= 2 && answer[0] == b'o' && answer[1] == b'k' {
                libc::_exit(2);
            }
            libc::_exit(1);
        }
    }
    let mut status = 0;
    // SAFETY: waiting for the child forked above.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(
        libc::WIFEXITED(status),
        "nobody child died: status {status}"
    );
    match libc::WEXITSTATUS(status) {
        0 => ForeignPeer::ConnectRefused,
        1 => ForeignPeer::ClosedOrError,
        2 => ForeignPeer::Served,
        3 => ForeignPeer::Hung,
        code => panic!("nobody child could not set up (exit {code})"),
    }
}

const MALFORMED: [&str; 9] = [
    "",
    "bogus",
    "start period=abc",
    "start lbr=0",
    "start lbr=5000",
    "start event=nonsense",
    "start callstack=513",
    "start callstack=16 lookahead=paper",
    "frobnicate start",
];

fn assert_refused(socket: &Path, expected_state: &str) {
    let mut requests: Vec<Vec<u8>> = MALFORMED
        .iter()
        .map(|l| format!("{l}\n").into_bytes())
        .collect();
    requests.push(b"start period=100000 colour=blue\n".to_vec());
    requests.push(b"\xff\xfe\x00status\n".to_vec());
    let mut long = vec![b'x'; 100_000];
    long.push(b'\n');
    requests.push(long);
    for request in requests {
        let shown = String::from_utf8_lossy(&request[..request.len().min(40)]).into_owned();
        let answer = request_bytes(socket, &request);
        assert!(
            answer.starts_with("error "),
            "'{shown}' was answered '{answer}', not 'error ...'"
        );
        assert_eq!(
            state(socket),
            expected_state,
            "state changed after '{shown}'"
        );
    }
}

/// Many short sessions in a row: every stop answers and writes a complete
/// profile, and the program survives them all (a SIGTRAP of a session that
/// arrives after stop must not reach the default action).
#[test]
fn many_short_sessions() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("cycles");
    let (mut program, socket, quit) = spawn_controlled(&tracer, &clang, &dir);
    for session in 0..12 {
        let out = dir.path(&format!("s{session}"));
        let line = format!("start period=50000 out={}", out.display());
        ok_json(&line, &request(&socket, &line));
        wait_for_traces(&socket, 1);
        ok_json("stop", &request(&socket, "stop"));
        let rec = load(&out);
        check_summary(&rec);
        assert_valid_traces(&format!("short session {session}"), &rec);
    }
    finish(&mut program, &quit);
}

#[test]
fn three_sessions_malformed_requests_and_foreign_uid() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("control");
    let (mut program, socket, quit) = spawn_controlled(&tracer, &clang, &dir);

    assert_eq!(state(&socket), "off");
    assert_refused(&socket, "off");

    for session in 0..3 {
        let out = dir.path(&format!("session{session}"));
        // Each session its own trace length: control.c's loop repeats one
        // path, so two sessions with the same length and trace count write
        // the same perf.script; a profile left from another session has
        // the other length.
        let lbr = 64 + 32 * session;
        let line = format!("start period=100000 lbr={lbr} out={}", out.display());
        let started = ok_json(&line, &request(&socket, &line));
        assert_eq!(started["state"], "running", "{started}");
        assert_eq!(state(&socket), "running");
        if session == 1 {
            assert_refused(&socket, "running");
        }
        if session == 2 {
            check_foreign_uid(&socket);
            assert_eq!(state(&socket), "running");
        }
        wait_for_traces(&socket, 20);
        let summary = ok_json("stop", &request(&socket, "stop"));
        assert_eq!(state(&socket), "off");
        let rec = load(&out);
        check_summary(&rec);
        check_stop_answer(&summary, &rec);
        assert_valid_traces(&format!("control session {session}"), &rec);
    }
    assert_ne!(
        std::fs::read(dir.path("session0/perf.script")).unwrap(),
        std::fs::read(dir.path("session2/perf.script")).unwrap(),
        "two sessions wrote identical profiles"
    );

    finish(&mut program, &quit);
}

/// The `stop` answer's counts are what perf.script holds, counted from its
/// lines (not summary.json, which is the answer's own text).
fn check_stop_answer(answer: &serde_json::Value, rec: &Recording) {
    let (traces, entries) = raw_script_counts(&rec.dir.join("perf.script"));
    assert!(
        traces > 0,
        "{}: no traces in perf.script",
        rec.dir.display()
    );
    assert_eq!(
        (
            counter(answer, "traces_written"),
            counter(answer, "entries_written")
        ),
        (traces, entries),
        "stop answered {answer}, but {}/perf.script holds {traces} traces and {entries} entries",
        rec.dir.display()
    );
}

/// A peer of another uid is refused both by the socket's mode and, with the
/// mode opened up, by the library's own peer check.
fn check_foreign_uid(socket: &Path) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            !bench_harness::tools::in_ci(),
            "the foreign-uid check needs root under CI=true"
        );
        eprintln!("skipping the foreign-uid check: not root");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "socket mode is {mode:o}, not 600");
    let outcome = connect_as_nobody(socket);
    assert!(
        matches!(
            outcome,
            ForeignPeer::ConnectRefused | ForeignPeer::ClosedOrError
        ),
        "a nobody peer got {outcome:?} through the 0600 socket"
    );
    // Open the mode so the connection reaches the library: its peer check
    // must refuse it.
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let dir = socket.parent().unwrap();
    let dir_mode = std::fs::metadata(dir).unwrap().permissions().mode();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(dir_mode | 0o711)).unwrap();
    let outcome = connect_as_nobody(socket);
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        outcome,
        ForeignPeer::ClosedOrError,
        "the library served a peer of another uid"
    );
}

/// A stop whose output directory cannot be written answers `error` naming
/// the path, keeps the data, and a later stop writes it.
#[test]
fn failed_write_is_retried_by_the_next_stop() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("retry");
    let (mut program, socket, quit) = spawn_controlled(&tracer, &clang, &dir);
    let out = dir.path("out");
    let line = format!("start period=100000 out={}", out.display());
    ok_json(&line, &request(&socket, &line));
    // While the session runs, a regular file takes the output directory's
    // place (root ignores permission bits, so a read-only directory would
    // not stop the write).
    std::fs::remove_dir_all(&out).unwrap();
    std::fs::write(&out, b"").unwrap();
    wait_for_traces(&socket, 1);
    let answer = request(&socket, "stop");
    assert!(
        answer.starts_with("error ") && answer.contains(&*out.to_string_lossy()),
        "stop into an unwritable directory was answered '{answer}'"
    );
    std::fs::remove_file(&out).unwrap();
    std::fs::create_dir(&out).unwrap();
    let summary = ok_json("stop", &request(&socket, "stop"));
    let rec = load(&out);
    check_summary(&rec);
    check_stop_answer(&summary, &rec);
    assert_valid_traces("retried stop", &rec);
    finish(&mut program, &quit);
}

/// The same through profiler-ctl: the stop that cannot write exits 1
/// naming the path and saying the data is kept; the next writes it; a
/// third has nothing to write.
#[test]
fn a_failed_write_is_reported_and_the_data_kept_for_a_retry() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let scratch = Scratch::new("retry");
    let program = build(&clang, &scratch.0, "control", &["control.c"], &[]);
    let p = Preloaded::start(&tracer, &program, &scratch.0);
    let out = scratch.path("out");
    let out_arg = out.to_str().unwrap();
    let start = ctl(
        &tracer,
        &[
            "start",
            "--socket",
            p.socket(),
            "-c",
            "500000",
            "-o",
            out_arg,
        ],
    );
    assert!(start.status.success(), "{}", text(&start.stderr));
    wait_for_traces(&p.socket, 1);
    // The directory becomes a plain file: nothing can be written under it.
    std::fs::remove_dir_all(&out).unwrap();
    std::fs::write(&out, b"in the way").unwrap();
    let failed = ctl(&tracer, &["stop", "--socket", p.socket()]);
    assert_eq!(failed.status.code(), Some(1));
    let message = text(&failed.stderr);
    assert!(
        message.contains(out_arg),
        "the error names the path: {message}"
    );
    assert!(
        message.contains("retry"),
        "the error says the data is kept: {message}"
    );
    // Fixed, a second stop writes the same session.
    std::fs::remove_file(&out).unwrap();
    let retried = ctl(&tracer, &["stop", "--socket", p.socket()]);
    assert!(retried.status.success(), "{}", text(&retried.stderr));
    let rec = load(&out);
    check_summary(&rec);
    // Nothing more to write: a third stop says so.
    let third = ctl(&tracer, &["stop", "--socket", p.socket()]);
    assert_eq!(third.status.code(), Some(1));
    assert!(text(&third.stderr).contains("no session is running"));
    let finished = p.finish();
    assert!(finished.status.success());
    assert_eq!(text(&finished.stdout), "control done\n");
}
