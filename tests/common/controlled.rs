//! A program run under the library with its control socket, and the
//! requests the tests send it: shared by the control-socket tests.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{build, wait_for_socket, Scratch, Tracer};

/// Sends one request line and returns the one-line answer.
pub fn request(socket: &Path, line: &str) -> String {
    request_bytes(socket, format!("{line}\n").as_bytes())
}

/// Sends raw request bytes and returns the one-line answer. The answer is
/// read up to end of file or a connection reset: a server that refuses an
/// over-long request answers and closes with the rest of it unread.
pub fn request_bytes(socket: &Path, request: &[u8]) -> String {
    let shown = String::from_utf8_lossy(&request[..request.len().min(40)]).into_owned();
    // The library's socket listens from the moment its path appears
    // (bound under a temporary name and renamed): a refusal is a failure.
    let mut stream = UnixStream::connect(socket)
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", socket.display()));
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    // A refused over-long request may be closed before it is all written.
    let _ = stream.write_all(request);
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            // A signal to the test process (seen once in CI): read again.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("no answer to '{shown}': {e}"),
        }
    }
    let answer = String::from_utf8(answer)
        .unwrap_or_else(|e| panic!("answer to '{shown}' is not UTF-8: {e}"));
    assert!(
        answer.ends_with('\n') && answer.trim_end().lines().count() == 1,
        "answer to '{shown}' is not one line: {answer:?}"
    );
    answer.trim_end().to_string()
}

/// The JSON object after `ok `.
pub fn ok_json(line: &str, answer: &str) -> serde_json::Value {
    let json = answer
        .strip_prefix("ok ")
        .unwrap_or_else(|| panic!("'{line}' was answered '{answer}', not 'ok {{...}}'"));
    serde_json::from_str(json)
        .unwrap_or_else(|e| panic!("answer to '{line}' is not JSON ({e}): {json}"))
}

pub fn state(socket: &Path) -> String {
    let answer = request(socket, "status");
    ok_json("status", &answer)["state"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The program under control; killed if the test fails before it ends.
pub struct Program(pub Option<Child>);

impl Program {
    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("program still running")
    }
}

impl Drop for Program {
    /// Ends the program; when the test is failing, says whether it had died
    /// and what it wrote to stderr (the library's messages).
    fn drop(&mut self) {
        let Some(child) = self.0.as_mut() else { return };
        if std::thread::panicking() {
            // A program killed by a signal closes its sockets before it can
            // be waited for: give a dying one a moment to become a zombie.
            let mut status = None;
            for _ in 0..50 {
                status = child.try_wait().ok().flatten();
                if status.is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            match status {
                Some(status) => eprintln!("the controlled program had exited: {status}"),
                None => eprintln!("the controlled program was still running"),
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        if std::thread::panicking() {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr);
            }
            eprintln!("its stderr:\n{stderr}");
        }
    }
}

/// Builds control.c and starts it with the library preloaded (no autostart)
/// and its control socket in `dir`; returns once the socket exists.
pub fn spawn_controlled(
    tracer: &Tracer,
    clang: &Path,
    dir: &Scratch,
) -> (Program, PathBuf, PathBuf) {
    let binary = build(clang, &dir.0, "control", &["control.c"], &[]);
    let socket = dir.path("ctl.sock");
    let quit = dir.path("quit");
    let child = Command::new(&binary)
        .arg(&quit)
        .env("LD_PRELOAD", &tracer.lib)
        .env("BREAKDANCE_SOCKET", &socket)
        .env_remove("BREAKDANCE_AUTOSTART")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut program = Program(Some(child));
    // Waiting for the library to create its socket (not a timed assertion:
    // the limit only keeps a broken library from hanging the suite).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            socket.display()
        );
        assert!(
            program.child().try_wait().unwrap().is_none(),
            "the program exited before serving"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (program, socket, quit)
}

/// Tells the program to finish and checks it ends normally.
pub fn finish(program: &mut Program, quit: &Path) {
    std::fs::write(quit, b"").unwrap();
    let output = program.0.take().unwrap().wait_with_output().unwrap();
    assert!(output.status.success(), "program failed: {output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "control done\n");
}

/// Runs `profiler-ctl ARGS`.
pub fn ctl(tracer: &Tracer, args: &[&str]) -> Output {
    Command::new(&tracer.ctl)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", tracer.ctl.display()))
}

/// A program started with the library preloaded and its own socket;
/// killed if the test fails first.
pub struct Preloaded {
    child: Option<Child>,
    pub socket: PathBuf,
    stop_file: PathBuf,
}

impl Preloaded {
    pub fn start(tracer: &Tracer, program: &Path, dir: &Path) -> Preloaded {
        let socket = dir.join("ctl.sock");
        let stop_file = dir.join("stop-now");
        let child = Command::new(program)
            .arg(&stop_file)
            .env("LD_PRELOAD", &tracer.lib)
            .env("BREAKDANCE_SOCKET", &socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        wait_for_socket(&socket);
        Preloaded {
            child: Some(child),
            socket,
            stop_file,
        }
    }

    pub fn socket(&self) -> &str {
        self.socket.to_str().expect("UTF-8 path")
    }

    /// Lets the program finish and returns its output.
    pub fn finish(mut self) -> Output {
        std::fs::write(&self.stop_file, b"").unwrap();
        self.child.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Preloaded {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
