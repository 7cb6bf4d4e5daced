//! The control socket nobody can block: idle and slow clients do not keep
//! `status` or `stop` from others; random bytes, a 1 MB line, a NUL byte
//! and an unterminated `start` each get one error line and a clean end of
//! file (never a reset) and change nothing; after all of it a normal
//! session writes a complete profile.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use common::controlled::*;
use common::*;

/// Random requests sent by the fuzz; `BREAKDANCE_FUZZ_REQUESTS` raises it
/// for a longer run.
const FUZZ_REQUESTS: usize = 100_000;

/// Bound on a read, so a broken library fails the test instead of hanging
/// it; not a speed check.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// What came back for one request, read strictly: the whole request must be
/// taken and the answer must end with end of file, not a reset.
fn exchange(socket: &Path, request: &[u8], half_close: bool) -> Result<String, String> {
    let mut stream = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
    stream
        .write_all(request)
        .map_err(|e| format!("the request was not all taken: {e}"))?;
    if half_close {
        stream.shutdown(Shutdown::Write).unwrap();
    }
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .map_err(|e| format!("reading the answer: {e} (after {answer:?})"))?;
    let text = String::from_utf8(answer).map_err(|e| format!("answer not UTF-8: {e}"))?;
    if !text.ends_with('\n') || text.matches('\n').count() != 1 {
        return Err(format!("not one line: {text:?}"));
    }
    Ok(text.trim_end().to_string())
}

fn error_for(socket: &Path, request: &[u8], half_close: bool) -> String {
    let shown = String::from_utf8_lossy(&request[..request.len().min(40)]).into_owned();
    let answer =
        exchange(socket, request, half_close).unwrap_or_else(|e| panic!("request {shown:?}: {e}"));
    assert!(
        answer.starts_with("error "),
        "request {shown:?} was answered '{answer}'"
    );
    answer
}

/// xorshift64*: random bytes without a crate, the same on every run.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Connections that never send a whole line: `partial` bytes each.
fn idle_clients(socket: &Path, n: usize, partial: &[u8]) -> Vec<UnixStream> {
    (0..n)
        .map(|_| {
            let mut s = UnixStream::connect(socket).unwrap();
            s.write_all(partial).unwrap();
            s
        })
        .collect()
}

/// True while the server has neither answered nor closed `stream`.
fn still_waiting(stream: &UnixStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let waiting = matches!((&*stream).read(&mut byte), Err(e) if e.kind() == ErrorKind::WouldBlock);
    stream.set_nonblocking(false).unwrap();
    waiting
}

/// 50 clients that send nothing and 10 that send half a line stay
/// connected while `status`, `start` and `stop` are served; a slow client's
/// line, sent after those, is answered; 100 more idle clients push out the
/// oldest and still block nobody.
#[test]
fn idle_and_slow_clients_block_nobody() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("hostile-idle");
    let (mut program, socket, quit) = spawn_controlled(&tracer, &clang, &dir);
    let idle = idle_clients(&socket, 50, b"");
    let mut slow = idle_clients(&socket, 10, b"sta");

    assert_eq!(state(&socket), "off");
    let out = dir.path("out");
    let line = format!("start period=100000 out={}", out.display());
    ok_json(&line, &request(&socket, &line));
    assert_eq!(state(&socket), "running");
    std::thread::sleep(Duration::from_millis(300));
    ok_json("stop", &request(&socket, "stop"));
    // The idle ones were neither answered nor closed meanwhile: nothing
    // waited for them.
    assert!(idle.iter().chain(&slow).all(still_waiting));
    for s in &mut slow {
        s.write_all(b"tus\n").unwrap();
        let mut answer = String::new();
        s.set_read_timeout(Some(HANG_GUARD)).unwrap();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("ok {\"state\":\"off\""), "{answer}");
    }
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces("with idle clients", &rec);

    let crowd = idle_clients(&socket, 100, b"st");
    assert_eq!(state(&socket), "off");
    assert!(
        crowd.iter().rev().take(10).all(still_waiting),
        "the newest idle clients were closed"
    );
    let pushed_out = crowd.iter().filter(|s| !still_waiting(s)).count();
    assert!(pushed_out > 0, "more clients than slots, none closed");
    drop((idle, crowd));
    finish(&mut program, &quit);
}

/// Random bytes, a 1 MB line, NUL bytes and an unterminated start: one
/// error line each, the input taken whole, a clean end of file, and no
/// change; then a normal session writes a complete profile.
#[test]
fn hostile_requests_get_one_error_line_and_change_nothing() {
    let tracer = tracer();
    let Some(clang) = tool("clang-19") else {
        return;
    };
    let dir = Scratch::new("hostile-bytes");
    let (mut program, socket, quit) = spawn_controlled(&tracer, &clang, &dir);

    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let requests = std::env::var("BREAKDANCE_FUZZ_REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(FUZZ_REQUESTS);
    for i in 0..requests {
        let len = 1 + (random.next() % 600) as usize;
        let mut bytes = random.bytes(len);
        // Most end with a newline (if they have none before); the others
        // end without one and the client half-closes, so they end at once.
        let terminated = i % 4 != 0;
        if terminated {
            bytes.push(b'\n');
        }
        error_for(&socket, &bytes, !terminated || i % 8 == 1);
    }
    assert_eq!(state(&socket), "off", "random bytes changed the state");

    let mut huge = vec![b'x'; 1 << 20];
    huge.push(b'\n');
    let answer = error_for(&socket, &huge, false);
    assert!(
        answer.starts_with("error request longer than 4096 bytes"),
        "{answer}"
    );

    for (request, offset) in [(&b"status\0\n"[..], 6), (b"\0\n", 0), (b"st\0art\n", 2)] {
        let answer = error_for(&socket, request, true);
        assert!(
            answer.starts_with(&format!(
                "error request holds a NUL byte at offset {offset}"
            )),
            "{request:?}: {answer}"
        );
    }

    let out = dir.path("unterminated");
    let unterminated = format!("start period=100000 out={}", out.display());
    let answer = error_for(&socket, unterminated.as_bytes(), true);
    assert!(answer.contains("ended without a newline"), "{answer}");
    assert_eq!(state(&socket), "off", "an unterminated start started");

    let out = dir.path("out");
    let line = format!("start period=100000 out={}", out.display());
    ok_json(&line, &request(&socket, &line));
    std::thread::sleep(Duration::from_millis(300));
    ok_json("stop", &request(&socket, "stop"));
    let rec = load(&out);
    check_summary(&rec);
    assert_valid_traces("after the fuzz", &rec);
    finish(&mut program, &quit);
}
