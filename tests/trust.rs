//! No trust in predictable paths. A symlink planted at any temporary or
//! final output path redirects no write; an output directory of another
//! user is refused unless forced; an impostor at the default control socket
//! path, and a socket directory with the wrong owner or mode, are refused by
//! the library and by profiler-ctl. The other user is `nobody`, played
//! through setpriv (the suite runs as root).

mod common;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::controlled::*;
use common::*;

/// Bound on waiting for what happens by itself (a line, a socket): only
/// keeps a broken library from hanging the suite; not a speed check.
const PATIENCE: Duration = Duration::from_secs(60);

/// Root and setpriv, or a skip (a failure under CI=true).
fn setpriv() -> Option<PathBuf> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            !bench_harness::tools::in_ci(),
            "the trust tests play another user and need root under CI=true"
        );
        eprintln!("skipping: not root");
        return None;
    }
    tool("setpriv")
}

/// `program` run as nobody (uid and gid 65534, no groups).
fn as_nobody(setpriv: &Path, program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(setpriv);
    command
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(program);
    command
}

fn run_as_nobody(setpriv: &Path, program: &str, args: &[&OsStr]) {
    let output = as_nobody(setpriv, program).args(args).output().unwrap();
    assert!(output.status.success(), "{program} as nobody: {output:?}");
}

/// A directory anyone may create entries in, as /tmp (mode 1777).
fn shared_dir(scratch: &Scratch, name: &str) -> PathBuf {
    let dir = scratch.path(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    dir
}

fn private_dir(scratch: &Scratch, name: &str) -> PathBuf {
    let dir = scratch.path(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

const PRECIOUS: &[u8] = b"precious: must never be written by the profiler\n";

/// Files a write must never reach.
struct Victims(PathBuf);

impl Victims {
    fn new(scratch: &Scratch) -> Victims {
        let dir = scratch.path("victims");
        std::fs::create_dir(&dir).unwrap();
        Victims(dir)
    }

    fn make(&self, name: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, PRECIOUS).unwrap();
        path
    }

    fn assert_intact(&self) {
        for entry in std::fs::read_dir(&self.0).unwrap() {
            let path = entry.unwrap().path();
            assert_eq!(
                std::fs::read(&path).unwrap(),
                PRECIOUS,
                "{} was written through a planted symlink",
                path.display()
            );
        }
    }
}

/// Waits until a session has completed `n` traces.
fn wait_for_traces(socket: &Path, n: u64) {
    let since = Instant::now();
    loop {
        let status = ok_json("status", &request(socket, "status"));
        if status["traces_completed"].as_u64().unwrap_or(0) >= n {
            return;
        }
        assert!(since.elapsed() < PATIENCE, "no traces: {status}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// profiler-ctl with a clean environment plus `envs`.
fn ctl(tracer: &Tracer, args: &[&OsStr], envs: &[(&str, &OsStr)]) -> Output {
    Command::new(&tracer.ctl)
        .args(args)
        .env_remove("LD_PRELOAD")
        .env_remove("BREAKDANCE_SOCKET")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("TMPDIR")
        .envs(envs.iter().copied())
        .output()
        .unwrap()
}

fn stderr_line(output: &Output) -> String {
    let text = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(text.lines().count(), 1, "not one line: {text:?}");
    text.trim_end().to_string()
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// The highest pid the kernel hands out.
fn pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The library's old temporary names were `.NAME.tmp<PID>` and
/// `.breakdance-probe.<PID>`, profiler-ctl's `.profiler-ctl-probe.<PID>`:
/// names anyone could predict. Symlinks planted at all of them, for the
/// program's pid and for every pid profiler-ctl may get, reach no victim.
#[test]
fn symlinks_at_temporary_paths_redirect_nothing() {
    let tracer = tracer();
    let (Some(clang), Some(_)) = (tool("clang-19"), setpriv()) else {
        return;
    };
    let dir = Scratch::new("trust-tmp");
    let (mut program, socket, quit) = spawn_controlled(&tracer, &clang, &dir);
    let pid = program.child().id();
    let victims = Victims::new(&dir);
    let out = private_dir(&dir, "out");
    let mut planted = vec![format!(".breakdance-probe.{pid}")];
    for file in [
        "perf.script",
        "summary.json",
        "control.afdo.txt",
        "control.bolt.fdata",
        "libc.so.6.afdo.txt",
        "libc.so.6.bolt.fdata",
    ] {
        planted.push(format!(".{file}.tmp{pid}"));
    }
    for name in &planted {
        std::os::unix::fs::symlink(victims.make(name), out.join(name)).unwrap();
    }
    let shared = victims.make("profiler-ctl-probe");
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for p in (last + 1..last + 3000).filter(|&p| p <= pid_max()) {
        std::os::unix::fs::symlink(&shared, out.join(format!(".profiler-ctl-probe.{p}"))).unwrap();
    }

    let started = ctl(
        &tracer,
        &[
            os("start"),
            os("--socket"),
            socket.as_os_str(),
            os("-c"),
            os("100000"),
            os("-o"),
            out.as_os_str(),
        ],
        &[],
    );
    assert!(started.status.success(), "{started:?}");
    victims.assert_intact();
    wait_for_traces(&socket, 20);
    let stopped = ctl(
        &tracer,
        &[os("stop"), os("--socket"), socket.as_os_str()],
        &[],
    );
    assert!(stopped.status.success(), "{stopped:?}");
    victims.assert_intact();
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces("planted temporaries", &rec);
    finish(&mut program, &quit);
}

/// A symlink at a final output name is refused before anything is written,
/// naming the path; the session's data is kept and a later stop writes it
/// elsewhere.
#[test]
fn symlinks_at_final_paths_are_refused_and_the_data_written_elsewhere() {
    let tracer = tracer();
    let (Some(clang), Some(_)) = (tool("clang-19"), setpriv()) else {
        return;
    };
    let dir = Scratch::new("trust-final");
    let (mut program, socket, quit) = spawn_controlled(&tracer, &clang, &dir);
    let victims = Victims::new(&dir);
    let victim = victims.make("final");
    let out = dir.path("out");
    let line = format!("start period=100000 out={}", out.display());
    ok_json(&line, &request(&socket, &line));
    wait_for_traces(&socket, 20);
    for name in [
        "perf.script",
        "summary.json",
        "control.afdo.txt",
        "control.bolt.fdata",
    ] {
        let link = out.join(name);
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let answer = request(&socket, "stop");
        assert!(
            answer.starts_with("error ")
                && answer.contains(&format!("{}: it is a symlink", link.display())),
            "stop with a symlink at {} was answered '{answer}'",
            link.display()
        );
        victims.assert_intact();
        let written: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(written, [OsStr::new(name)], "a refused stop wrote files");
        std::fs::remove_file(&link).unwrap();
    }
    assert_eq!(state(&socket), "off");
    let elsewhere = dir.path("elsewhere");
    let stopped = ctl(
        &tracer,
        &[
            os("stop"),
            os("--socket"),
            socket.as_os_str(),
            os("-o"),
            elsewhere.as_os_str(),
        ],
        &[],
    );
    assert!(stopped.status.success(), "{stopped:?}");
    let rec = load(&elsewhere);
    check_summary(&rec);
    assert!(rec.script.trace_count() > 0);
    assert_eq!(
        rec.summary["output_dir"].as_str(),
        elsewhere.to_str(),
        "{}",
        rec.summary
    );
    assert_valid_traces("written elsewhere", &rec);
    victims.assert_intact();
    finish(&mut program, &quit);
}

/// An output directory, or a symlink naming one, that belongs to another
/// user is refused (the library, profiler-ctl start and record) with a line
/// naming it and its owner; `force_dir` / `--force-dir` accept it; a new
/// directory is made mode 0700.
#[test]
fn an_output_directory_of_another_user_is_refused() {
    let tracer = tracer();
    let (Some(clang), Some(setpriv)) = (tool("clang-19"), setpriv()) else {
        return;
    };
    let dir = Scratch::new("trust-owner");
    let (mut program, socket, quit) = spawn_controlled(&tracer, &clang, &dir);
    let shared = shared_dir(&dir, "shared");
    let foreign = shared.join("foreign");
    run_as_nobody(&setpriv, "mkdir", &[foreign.as_os_str()]);

    let answer = request(&socket, &format!("start out={}", foreign.display()));
    let refusal = format!(
        "error output directory {} belongs to nobody (uid 65534), not to root (uid 0)",
        foreign.display()
    );
    assert!(answer.starts_with(&refusal), "{answer}");
    assert_eq!(state(&socket), "off");
    let started = ctl(
        &tracer,
        &[
            os("start"),
            os("--socket"),
            socket.as_os_str(),
            os("-o"),
            foreign.as_os_str(),
        ],
        &[],
    );
    assert_eq!(started.status.code(), Some(2), "{started:?}");
    let line = stderr_line(&started);
    assert!(
        line.contains(&*foreign.to_string_lossy()) && line.contains("nobody (uid 65534)"),
        "{line}"
    );
    assert_eq!(state(&socket), "off");

    let ours = private_dir(&dir, "ours");
    let link = shared.join("link");
    run_as_nobody(
        &setpriv,
        "ln",
        &[os("-s"), ours.as_os_str(), link.as_os_str()],
    );
    let answer = request(&socket, &format!("start out={}", link.display()));
    assert!(
        answer.starts_with(&format!(
            "error output directory {} is a symlink owned by nobody (uid 65534)",
            link.display()
        )),
        "{answer}"
    );
    assert_eq!(state(&socket), "off");

    let line = format!("start period=100000 out={} force_dir=1", foreign.display());
    ok_json(&line, &request(&socket, &line));
    wait_for_traces(&socket, 5);
    ok_json("stop", &request(&socket, "stop"));
    check_summary(&load(&foreign));

    let fresh = dir.path("fresh/sub");
    let line = format!("start period=100000 out={}", fresh.display());
    ok_json(&line, &request(&socket, &line));
    assert_eq!(mode(&fresh), 0o700);
    assert_eq!(mode(fresh.parent().unwrap()), 0o700);
    ok_json("stop", &request(&socket, "stop"));
    finish(&mut program, &quit);

    let marker = dir.path("ran");
    let refused = ctl(
        &tracer,
        &[
            os("record"),
            os("-o"),
            foreign.as_os_str(),
            os("--"),
            os("touch"),
            marker.as_os_str(),
        ],
        &[],
    );
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let line = stderr_line(&refused);
    assert!(
        line.contains(&*foreign.to_string_lossy()) && line.contains("nobody (uid 65534)"),
        "{line}"
    );
    assert!(!marker.exists(), "record ran the command anyway");

    let binary = dir.path("control");
    std::fs::write(&quit, b"").unwrap();
    let forced = shared.join("forced");
    run_as_nobody(&setpriv, "mkdir", &[forced.as_os_str()]);
    let recorded = ctl(
        &tracer,
        &[
            os("record"),
            os("-q"),
            os("--force-dir"),
            os("-o"),
            forced.as_os_str(),
            os("--"),
            binary.as_os_str(),
            quit.as_os_str(),
        ],
        &[],
    );
    assert!(recorded.status.success(), "{recorded:?}");
    assert!(forced.join("summary.json").is_file(), "{recorded:?}");
    let fresh = dir.path("fresh-record");
    let recorded = ctl(
        &tracer,
        &[
            os("record"),
            os("-q"),
            os("-o"),
            fresh.as_os_str(),
            os("--"),
            binary.as_os_str(),
            quit.as_os_str(),
        ],
        &[],
    );
    assert!(recorded.status.success(), "{recorded:?}");
    assert_eq!(mode(&fresh), 0o700);
}

/// control.c, started under the library only when the test says so: its
/// pid is known before the library runs, so that an impostor can take the
/// socket path first. Its stderr comes line by line.
struct Gated {
    program: Program,
    pid: u32,
    gate: Option<ChildStdin>,
    stderr: mpsc::Receiver<String>,
}

impl Gated {
    fn spawn(tracer: &Tracer, binary: &Path, quit: &Path, envs: &[(&str, &Path)]) -> Gated {
        let mut child = Command::new("sh")
            .args([
                "-c",
                r#"read go && exec env LD_PRELOAD="$BD_TEST_LIB" "$0" "$1""#,
            ])
            .arg(binary)
            .arg(quit)
            .env("BD_TEST_LIB", &tracer.lib)
            .env_remove("LD_PRELOAD")
            .env_remove("BREAKDANCE_SOCKET")
            .env_remove("BREAKDANCE_AUTOSTART")
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("TMPDIR")
            .envs(envs.iter().map(|(k, v)| (*k, v.as_os_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let gate = child.stdin.take();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Gated {
            program: Program(Some(child)),
            pid,
            gate,
            stderr: rx,
        }
    }

    /// Lets the program start under the library.
    fn go(&mut self) {
        let mut gate = self.gate.take().expect("go once");
        gate.write_all(b"go\n").unwrap();
    }

    fn stderr_line(&self) -> String {
        self.stderr
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("the program wrote no line on stderr"))
    }

    /// Waits for the library's socket at `path`.
    fn wait_for_socket(&mut self, path: &Path) {
        let since = Instant::now();
        while !path.exists() {
            assert!(
                since.elapsed() < PATIENCE,
                "{} never appeared",
                path.display()
            );
            assert!(
                self.program.child().try_wait().unwrap().is_none(),
                "the program exited before serving"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A socket served by nobody that answers every request with one line.
struct Impostor(Child);

impl Impostor {
    fn start(setpriv: &Path, binary: &Path, path: &Path, reply: &str) -> Impostor {
        let mut child = as_nobody(setpriv, binary)
            .arg(path)
            .arg(reply)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "listening\n", "the impostor did not start");
        Impostor(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Impostor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Another user binds the program's default socket path first. The library
/// refuses that directory and says why; profiler-ctl, asked about the pid
/// or given the path, refuses the impostor, naming it. With a private
/// runtime directory the library serves safely beside the impostor.
#[test]
fn an_impostor_at_the_default_socket_path_is_refused() {
    let tracer = tracer();
    let (Some(clang), Some(setpriv)) = (tool("clang-19"), setpriv()) else {
        return;
    };
    let dir = Scratch::new("trust-impostor");
    let binary = build(&clang, &dir.0, "control", &["control.c"], &[]);
    let impostor_binary = build(&clang, &dir.0, "impostor", &["impostor.c"], &[]);
    let tmp = shared_dir(&dir, "tmp");
    let user_dir = tmp.join("breakdance-0");
    let fake_state = r#"ok {"state":"running","samples":999999}"#;

    let quit = dir.path("quit");
    let mut gated = Gated::spawn(&tracer, &binary, &quit, &[("TMPDIR", &tmp)]);
    let pid = gated.pid;
    let fake = user_dir.join(format!("breakdance.{pid}.sock"));
    let impostor = Impostor::start(&setpriv, &impostor_binary, &fake, fake_state);
    gated.go();
    let line = gated.stderr_line();
    assert!(
        line.starts_with(&format!(
            "breakdance: no control socket: control socket directory {} belongs to nobody \
             (uid 65534), not to root (uid 0)",
            user_dir.display()
        )),
        "{line}"
    );
    let status = ctl(
        &tracer,
        &[os("status"), os("--pid"), os(&pid.to_string())],
        &[("TMPDIR", tmp.as_os_str())],
    );
    assert_eq!(status.status.code(), Some(1), "{status:?}");
    assert!(status.stdout.is_empty(), "{status:?}");
    let line = stderr_line(&status);
    assert!(
        line.starts_with(&format!(
            "profiler-ctl: refusing {}: it is served by pid {} (nobody (uid 65534)), not by pid {pid}",
            fake.display(),
            impostor.pid()
        )),
        "{line}"
    );
    let status = ctl(
        &tracer,
        &[os("status"), os("--socket"), fake.as_os_str()],
        &[],
    );
    assert_eq!(status.status.code(), Some(1), "{status:?}");
    let line = stderr_line(&status);
    assert!(
        line.contains(&format!(
            "served by pid {} running as nobody (uid 65534), not as you (root (uid 0))",
            impostor.pid()
        )),
        "{line}"
    );
    drop(gated);
    drop(impostor);

    let runtime = private_dir(&dir, "runtime");
    let quit = dir.path("quit-2");
    let mut gated = Gated::spawn(
        &tracer,
        &binary,
        &quit,
        &[("TMPDIR", &tmp), ("XDG_RUNTIME_DIR", &runtime)],
    );
    let pid = gated.pid;
    let fake = user_dir.join(format!("breakdance.{pid}.sock"));
    let _impostor = Impostor::start(&setpriv, &impostor_binary, &fake, fake_state);
    gated.go();
    gated.wait_for_socket(&runtime.join(format!("breakdance.{pid}.sock")));
    let pid_text = pid.to_string();
    let out = dir.path("out");
    let tmp_env = [("TMPDIR", tmp.as_os_str())];
    let started = ctl(
        &tracer,
        &[
            os("start"),
            os("--pid"),
            os(&pid_text),
            os("-c"),
            os("100000"),
            os("-o"),
            out.as_os_str(),
        ],
        &tmp_env,
    );
    assert!(started.status.success(), "{started:?}");
    wait_for_traces(&runtime.join(format!("breakdance.{pid}.sock")), 5);
    let stopped = ctl(&tracer, &[os("stop"), os("--pid"), os(&pid_text)], &tmp_env);
    assert!(stopped.status.success(), "{stopped:?}");
    check_summary(&load(&out));
    finish(&mut gated.program, &quit);
}

/// A default socket directory that is not a private directory of ours is
/// refused with a line naming it and what is wrong, and no socket is made.
#[test]
fn a_socket_directory_with_the_wrong_owner_or_mode_is_refused() {
    let tracer = tracer();
    let (Some(clang), Some(setpriv)) = (tool("clang-19"), setpriv()) else {
        return;
    };
    let dir = Scratch::new("trust-sockdir");
    let binary = build(&clang, &dir.0, "control", &["control.c"], &[]);

    let loose_tmp = shared_dir(&dir, "loose-tmp");
    let loose = loose_tmp.join("breakdance-0");
    std::fs::create_dir(&loose).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o755)).unwrap();

    let open_runtime = dir.path("open-runtime");
    std::fs::create_dir(&open_runtime).unwrap();
    std::fs::set_permissions(&open_runtime, std::fs::Permissions::from_mode(0o777)).unwrap();

    let foreign_tmp = shared_dir(&dir, "foreign-tmp");
    let foreign_runtime = foreign_tmp.join("runtime");
    run_as_nobody(
        &setpriv,
        "mkdir",
        &[os("-m"), os("700"), foreign_runtime.as_os_str()],
    );

    let linked_tmp = shared_dir(&dir, "linked-tmp");
    let linked = linked_tmp.join("breakdance-0");
    let ours = private_dir(&dir, "ours");
    run_as_nobody(
        &setpriv,
        "ln",
        &[os("-s"), ours.as_os_str(), linked.as_os_str()],
    );

    let cases: [(&str, &Path, &Path, &str); 4] = [
        (
            "TMPDIR",
            &loose_tmp,
            &loose,
            "has mode 755, which lets others in",
        ),
        (
            "XDG_RUNTIME_DIR",
            &open_runtime,
            &open_runtime,
            "has mode 777, which lets others in",
        ),
        (
            "XDG_RUNTIME_DIR",
            &foreign_runtime,
            &foreign_runtime,
            "belongs to nobody (uid 65534), not to root (uid 0)",
        ),
        (
            "TMPDIR",
            &linked_tmp,
            &linked,
            "is a symlink or not a directory",
        ),
    ];
    for (i, (var, value, socket_dir, reason)) in cases.into_iter().enumerate() {
        let quit = dir.path(&format!("quit-{i}"));
        let mut gated = Gated::spawn(&tracer, &binary, &quit, &[(var, value)]);
        gated.go();
        let line = gated.stderr_line();
        assert_eq!(
            line,
            format!(
                "breakdance: no control socket: control socket directory {} {reason}{}",
                socket_dir.display(),
                match reason.starts_with("has mode") {
                    true => ": chmod 700 it",
                    false if reason.starts_with("belongs") =>
                        ": remove it, or set XDG_RUNTIME_DIR or BREAKDANCE_SOCKET",
                    false => ": remove it, or set BREAKDANCE_SOCKET",
                }
            ),
            "{var}={}",
            value.display()
        );
        let socket = socket_dir.join(format!("breakdance.{}.sock", gated.pid));
        assert!(!socket.exists(), "{} was made", socket.display());
        finish(&mut gated.program, &quit);
    }
    assert!(
        std::fs::read_dir(&ours).unwrap().next().is_none(),
        "a socket was made through the symlink"
    );
}
