//! The client side of the control protocol: one request line out, one answer
//! line back over the library's Unix stream socket.

use std::io::{self, BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
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

/// Sends `request` to the control socket at `socket` and reads the answer.
///
/// Connection failures are explained: which socket, the OS error, and what
/// the user should check.
pub fn request(socket: &Path, request: &str, timeout: Duration) -> Result<Answer> {
    let mut stream = UnixStream::connect(socket).map_err(|e| connect_error(socket, &e))?;
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
    let lib = crate::record::find_library(None)
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
        let answer = request(&path, "status", Duration::from_secs(30)).unwrap();
        assert_eq!(answer, Answer::Ok("{\"state\":\"off\"}".into()));
        assert_eq!(server.join().unwrap(), "status");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_missing_socket_is_explained() {
        let path = temp_socket("missing");
        let message = request(&path, "status", Duration::from_secs(1))
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
        let message = request(&path, "stop", Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(message.contains("Connection refused"), "{message}");
        assert!(message.contains("left over"), "{message}");
        std::fs::remove_file(&path).unwrap();
    }
}
