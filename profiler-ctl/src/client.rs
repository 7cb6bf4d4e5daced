//! The client side of the control protocol: one request line out, one answer
//! line back over the library's Unix stream socket.
//!
//! A reply is trusted only from the right process. Before sending anything,
//! the client asks the kernel who listens at the other end (SO_PEERCRED):
//! asked about a pid, it must be that pid; given a socket path, it must run
//! under our own uid. Anyone else who took the socket's place is refused by
//! name.

use std::io::{self, BufRead, BufReader, ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

/// Longest answer accepted; a summary line is a few kilobytes.
const MAX_ANSWER: u64 = 16 << 20;

/// The library's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `ok [PAYLOAD]`: the payload, usually one JSON object, possibly empty.
    Ok(String),
    /// `error MESSAGE`.
    Error(String),
}

/// Who must be serving the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// The process asked about (`--pid`).
    Pid(u32),
    /// Any process of the caller's uid (`--socket`).
    SameUser,
}

/// The process at the other end of a connected socket, and its uid.
fn peer_cred(stream: &UnixStream) -> io::Result<(u32, u32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len are valid out-pointers of the sizes given.
    let ret = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((cred.pid as u32, cred.uid))
}

/// Refuses a peer that is not the one expected, naming the real one.
pub fn check_peer(stream: &UnixStream, socket: &Path, expected: Peer) -> Result<()> {
    let (pid, uid) = peer_cred(stream)
        .with_context(|| format!("cannot tell who serves {}", socket.display()))?;
    let me = crate::trust::euid();
    match expected {
        Peer::Pid(want) if pid != want => bail!(
            "refusing {}: it is served by pid {pid} ({}), not by pid {want}; another process              has taken the program's socket path",
            socket.display(),
            crate::trust::describe_user(uid)
        ),
        Peer::SameUser if uid != me => bail!(
            "refusing {}: it is served by pid {pid} running as {}, not as you ({}); control a              program of another user as that user, or with --pid",
            socket.display(),
            crate::trust::describe_user(uid),
            crate::trust::describe_user(me)
        ),
        _ => Ok(()),
    }
}

/// The control socket of the library-loaded process `pid`, found by the
/// library's own rule (`breakdance_protocol::socket_path`) from that
/// process's environment when we may read it (else from ours).
pub fn default_socket(pid: u32) -> PathBuf {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok();
    let get = |key: &str| -> Option<String> {
        match &environ {
            Some(bytes) => bytes
                .split(|&b| b == 0)
                .find_map(|entry| entry.strip_prefix(format!("{key}=").as_bytes()))
                .map(|v| String::from_utf8_lossy(v).into_owned()),
            None => std::env::var(key).ok(),
        }
    };
    let uid = std::fs::metadata(format!("/proc/{pid}"))
        .map(|m| m.uid())
        .unwrap_or_else(|_| crate::trust::euid());
    breakdance_protocol::socket_path::socket_place(pid as i32, uid, get).path()
}

/// Sends `request` to the control socket at `socket`, served by `peer`,
/// and reads the answer.
///
/// Connection failures are explained: which socket, the OS error, and what
/// the user should check.
pub fn request(socket: &Path, peer: Peer, request: &str, timeout: Duration) -> Result<Answer> {
    let mut stream = UnixStream::connect(socket).map_err(|e| connect_error(socket, &e))?;
    check_peer(&stream, socket, peer)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream
        .write_all(format!("{request}\n").as_bytes())
        .with_context(|| format!("cannot send '{request}' to {}", socket.display()))?;
    let mut bytes = Vec::new();
    let mut reader = BufReader::new((&stream).take(MAX_ANSWER));
    if let Err(e) = reader.read_until(b'\n', &mut bytes) {
        return Err(match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => anyhow!(
                "no answer from {} within {} s (the program may be stopped or busy; \
                 raise --timeout)",
                socket.display(),
                timeout.as_secs()
            ),
            _ => anyhow!("cannot read the answer from {}: {e}", socket.display()),
        });
    }
    let text = String::from_utf8_lossy(&bytes);
    let line = text.split('\n').next().unwrap_or("").trim_end_matches('\r');
    parse_answer(line).with_context(|| format!("from {}", socket.display()))
}

/// Parses one answer line of the control protocol.
pub fn parse_answer(line: &str) -> Result<Answer> {
    if line == "ok" {
        return Ok(Answer::Ok(String::new()));
    }
    if let Some(payload) = line.strip_prefix("ok ") {
        return Ok(Answer::Ok(payload.trim().to_owned()));
    }
    if let Some(message) = line.strip_prefix("error") {
        if message.is_empty() || message.starts_with(' ') {
            let message = message.trim();
            return Ok(Answer::Error(if message.is_empty() {
                "the program answered 'error' without a message".to_owned()
            } else {
                message.to_owned()
            }));
        }
    }
    if line.is_empty() {
        bail!("empty answer: the connection closed before an answer line");
    }
    let shown: String = line.chars().take(200).collect();
    bail!("unexpected answer '{shown}' (expected 'ok ...' or 'error ...')")
}

fn connect_error(socket: &Path, e: &io::Error) -> anyhow::Error {
    let path = socket.display();
    let lib = crate::library::find_library(None)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "/path/to/libbreakdance.so".to_owned());
    let advice = match e.kind() {
        ErrorKind::NotFound => format!(
            "no traced program listens there; is the program running with \
             LD_PRELOAD={lib}? (`profiler-ctl record -- CMD` runs one that way)"
        ),
        ErrorKind::ConnectionRefused => "the socket is left over from a program that has exited; \
             check the pid, then remove the stale socket"
            .to_owned(),
        ErrorKind::PermissionDenied => {
            "the socket belongs to another user; run profiler-ctl as the program's user".to_owned()
        }
        _ => format!(
            "is the program running with LD_PRELOAD={lib}? (`profiler-ctl record -- CMD` \
             runs one that way)"
        ),
    };
    anyhow!("cannot connect to {path}: {e}; {advice}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::thread;

    #[test]
    fn answers_are_parsed() {
        assert_eq!(parse_answer("ok").unwrap(), Answer::Ok(String::new()));
        assert_eq!(
            parse_answer("ok {\"a\":1}").unwrap(),
            Answer::Ok("{\"a\":1}".into())
        );
        assert_eq!(
            parse_answer("error no session running").unwrap(),
            Answer::Error("no session running".into())
        );
        assert!(parse_answer("okay").is_err());
        assert!(parse_answer("errors").is_err());
        assert!(parse_answer("").is_err());
    }

    fn temp_socket(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("profiler-ctl-{name}-{}.sock", std::process::id()))
    }

    #[test]
    fn one_line_goes_out_and_one_comes_back() {
        let path = temp_socket("echo");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let server = thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut got = Vec::new();
            let mut byte = [0u8; 1];
            while conn.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
                got.push(byte[0]);
            }
            conn.write_all(b"ok {\"state\":\"off\"}\n").unwrap();
            String::from_utf8(got).unwrap()
        });
        let answer = request(&path, Peer::SameUser, "status", Duration::from_secs(30)).unwrap();
        assert_eq!(answer, Answer::Ok("{\"state\":\"off\"}".into()));
        assert_eq!(server.join().unwrap(), "status");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_peer_that_is_not_the_pid_asked_about_is_refused() {
        let path = temp_socket("impostor");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let server = thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut rest = Vec::new();
            let _ = conn.read_to_end(&mut rest);
            rest
        });
        let other = std::process::id() + 1;
        let message = request(&path, Peer::Pid(other), "stop", Duration::from_secs(30))
            .unwrap_err()
            .to_string();
        let me = std::process::id();
        assert!(
            message.starts_with(&format!(
                "refusing {}: it is served by pid {me} (",
                path.display()
            )) && message.contains(&format!("not by pid {other}")),
            "{message}"
        );
        assert!(server.join().unwrap().is_empty(), "the request was sent");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn the_socket_is_found_in_the_programs_environment() {
        let child = std::process::Command::new("sleep")
            .arg("30")
            .env("BREAKDANCE_SOCKET", "")
            .env("XDG_RUNTIME_DIR", "/run/user/test")
            .spawn()
            .unwrap();
        let mut child = child;
        // The environment is the child's own once it has exec'd: wait for it.
        let pid = child.id();
        for _ in 0..2000 {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            if environ.windows(15).any(|w| w == b"XDG_RUNTIME_DIR") {
                break;
            }
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            default_socket(pid),
            PathBuf::from(format!("/run/user/test/breakdance.{pid}.sock"))
        );
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn a_missing_socket_is_explained() {
        let path = temp_socket("missing");
        let message = request(&path, Peer::SameUser, "status", Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with(&format!("cannot connect to {}: ", path.display())),
            "{message}"
        );
        assert!(message.contains("os error 2"), "{message}");
        assert!(message.contains("LD_PRELOAD="), "{message}");
    }

    #[test]
    fn a_stale_socket_is_explained() {
        let path = temp_socket("stale");
        let _ = std::fs::remove_file(&path);
        drop(UnixListener::bind(&path).unwrap());
        let message = request(&path, Peer::SameUser, "stop", Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(message.contains("Connection refused"), "{message}");
        assert!(message.contains("left over"), "{message}");
        std::fs::remove_file(&path).unwrap();
    }
}
