//! The control socket: a Unix stream socket, mode 0600, answering peers of
//! our own uid only. One request line in, one reply line out:
//! `start [key=value…]`, `stop`, `status`; replies are `ok <json>` or
//! `error <message>`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

use crate::sys;

use super::config::Options;
use super::session;

/// Longest request accepted.
const MAX_REQUEST: usize = 4096;

/// Answers one request line. Never panics on input.
pub fn handle_request(line: &str) -> String {
    let line = line.trim();
    let (cmd, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let reply = match cmd {
        "start" => match Options::parse_words(rest) {
            Ok(o) => session::start(&o).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        },
        "stop" if rest.trim().is_empty() => session::stop().map_err(|e| e.to_string()),
        "status" if rest.trim().is_empty() => Ok(session::status()),
        "stop" | "status" => Err(format!("'{cmd}' takes no arguments")),
        "" => Err("empty request (commands: start, stop, status)".to_string()),
        _ => Err(format!(
            "unknown command '{}' (commands: start, stop, status)",
            truncate(cmd, 40)
        )),
    };
    match reply {
        Ok(json) => format!("ok {json}\n"),
        Err(msg) => format!("error {}\n", msg.replace('\n', " ")),
    }
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).filter(|c| !c.is_control()).collect()
}

fn serve_one(mut stream: UnixStream) {
    let uid = sys::geteuid();
    match sys::peer_cred(&stream).map(|p| p.uid) {
        Ok(peer) if peer == uid => {}
        Ok(peer) => {
            let _ = stream.write_all(
                format!("error permission denied: peer uid {peer} is not uid {uid}\n").as_bytes(),
            );
            return;
        }
        Err(e) => {
            let _ =
                stream.write_all(format!("error cannot check the peer's uid: {e}\n").as_bytes());
            return;
        }
    }
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut line = String::new();
    let mut reader = BufReader::new((&stream).take_limited(MAX_REQUEST));
    let reply = match reader.read_line(&mut line) {
        Ok(_) if line.len() >= MAX_REQUEST && !line.ends_with('\n') => {
            format!("error request longer than {MAX_REQUEST} bytes\n")
        }
        Ok(_) => {
            let outcome = std::panic::catch_unwind(|| handle_request(&line));
            outcome.unwrap_or_else(|_| "error internal error (see stderr)\n".to_string())
        }
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            "error request is not UTF-8\n".to_string()
        }
        Err(e) => format!("error reading the request: {e}\n"),
    };
    let _ = stream.write_all(reply.as_bytes());
}

trait TakeLimited: Sized {
    fn take_limited(self, n: usize) -> std::io::Take<Self>;
}

impl<R: std::io::Read> TakeLimited for R {
    fn take_limited(self, n: usize) -> std::io::Take<Self> {
        std::io::Read::take(self, n as u64)
    }
}

/// The control thread's loop: blocked in accept between requests. The
/// caller has marked the thread as the library's own.
pub fn serve(listener: UnixListener) {
    for stream in listener.incoming() {
        match stream {
            Ok(s) => serve_one(s),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            // The application closed our descriptor (daemons close every
            // fd above 2): the socket is gone, so is the control thread.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EBADF | libc::ENOTSOCK | libc::EINVAL)
                ) =>
            {
                return
            }
            // Out of descriptors or memory for a moment: try again later.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_requests_get_one_line_errors() {
        for (req, want) in [
            ("", "error empty request"),
            ("frobnicate", "error unknown command 'frobnicate'"),
            ("start lbr=0", "error lbr must be between 1 and 4096"),
            (
                "start period=abc",
                "error period must be a positive integer",
            ),
            ("start event=bogus", "error unknown event 'bogus'"),
            ("start nonsense", "error unknown option 'nonsense'"),
            ("status now", "error 'status' takes no arguments"),
        ] {
            let reply = handle_request(req);
            assert!(reply.starts_with(want), "{req:?} -> {reply:?}");
            assert_eq!(reply.matches('\n').count(), 1);
        }
        assert!(handle_request("status").starts_with("ok {\"state\":\"off\""));
        assert!(handle_request("stop").starts_with("error no session is running"));
    }
}
