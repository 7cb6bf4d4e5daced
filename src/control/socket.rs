//! The control socket: a Unix stream socket, mode 0600, answering peers of
//! our own uid only. One request line in, one reply line out:
//! `start [key=value…]`, `stop [out=DIR] [force_dir=1]`, `status`; replies
//! are `ok <json>` or `error <message>`.
//!
//! Nobody can block it. The control thread serves up to [`MAX_CLIENTS`]
//! connections at once from one `poll` loop, each with a deadline
//! ([`REQUEST_DEADLINE`]) for its request line; a client that sends
//! nothing holds one slot until its deadline, never the thread. When every
//! slot is taken, the oldest connection is closed to make room. A request
//! counts only once its newline has arrived: input that ends without one
//! (a half-close, a dropped client) is answered with an error and does
//! nothing. After an error the rest of the input is read and dropped, up
//! to [`DRAIN_LIMIT`] bytes, so the client reads the error line and a clean
//! end of file rather than a connection reset.

use std::io::Read;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

use crate::sys;

use breakdance_protocol::Request;

use super::session;

/// Longest request line accepted, newline included.
pub const MAX_REQUEST: usize = 4096;
/// Connections served at once; one more closes the oldest.
pub const MAX_CLIENTS: usize = 64;
/// Time from accept to a complete request line.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Time a client has to take its reply and close, once answered.
const LINGER: Duration = Duration::from_secs(2);
/// Input read and dropped after a reply, at most, before closing anyway.
const DRAIN_LIMIT: usize = 16 << 20;

/// Answers one request line. Never panics on input.
pub fn handle_request(line: &str) -> String {
    let reply = match Request::parse(line) {
        Ok(Request::Start(o)) => session::start(&o).map_err(|e| e.to_string()),
        Ok(Request::Stop(o)) => session::stop_into(&o).map_err(|e| e.to_string()),
        Ok(Request::Status) => Ok(session::status()),
        Err(e) => Err(e.to_string()),
    };
    match reply {
        Ok(json) => format!("ok {json}\n"),
        Err(msg) => error_line(&msg),
    }
}

fn error_line(msg: &str) -> String {
    format!("error {}\n", msg.replace('\n', " "))
}

/// Answers one complete request line (without its newline), as bytes: what
/// is wrong with bytes that are not a request is named before any command
/// is looked at.
pub fn handle_line(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if let Some(at) = line.iter().position(|&b| b == 0) {
        return error_line(&format!("request holds a NUL byte at offset {at}"));
    }
    if let Some(at) = line
        .iter()
        .position(|&b| b < 0x20 && b != b'\t' || b == 0x7f)
    {
        return error_line(&format!(
            "request holds control byte {:#04x} at offset {at}",
            line[at]
        ));
    }
    let text = match std::str::from_utf8(line) {
        Ok(t) => t,
        Err(e) => {
            return error_line(&format!(
                "request is not UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ))
        }
    };
    crate::panic::catching_panics(|| handle_request(text))
        .unwrap_or_else(|_| error_line("internal error (see stderr)"))
}

/// Where a connection is in its one exchange.
enum Phase {
    /// Collecting the request line.
    Reading,
    /// Sending `reply[sent..]`.
    Writing { reply: Vec<u8>, sent: usize },
    /// Answered and shut down for writing: dropping what the client still
    /// sends until it closes.
    Draining { dropped: usize },
}

struct Client {
    stream: UnixStream,
    /// (device, inode) of the socket: the descriptor number is ours only
    /// while it still names this object.
    identity: (u64, u64),
    accepted_ns: u64,
    deadline_ns: u64,
    input: Vec<u8>,
    phase: Phase,
}

/// What to do with a client after it was served an event.
#[derive(PartialEq, Eq)]
enum Next {
    Keep,
    Close,
    /// Its descriptor number now names something of the application's:
    /// give it up without closing it.
    Forget,
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

impl Client {
    fn new(stream: UnixStream, now: u64) -> Option<Client> {
        stream.set_nonblocking(true).ok()?;
        let identity = sys::fd_identity(stream.as_raw_fd())?;
        Some(Client {
            stream,
            identity,
            accepted_ns: now,
            deadline_ns: now + nanos(REQUEST_DEADLINE),
            input: Vec::new(),
            phase: Phase::Reading,
        })
    }

    fn still_ours(&self) -> bool {
        sys::fd_identity(self.stream.as_raw_fd()) == Some(self.identity)
    }

    fn answer(&mut self, reply: String, now: u64) {
        self.phase = Phase::Writing {
            reply: reply.into_bytes(),
            sent: 0,
        };
        self.deadline_ns = now + nanos(LINGER);
    }

    /// Reads what is there; answers once a line is complete, too long, or
    /// ended without a newline.
    fn read_request(&mut self, now: u64) -> Next {
        let mut chunk = [0u8; 4096];
        loop {
            let room = MAX_REQUEST - self.input.len();
            let want = room.min(chunk.len());
            match (&self.stream).read(&mut chunk[..want]) {
                Ok(0) => {
                    let reply = if self.input.is_empty() {
                        "no request before the end of input"
                    } else {
                        "the request ended without a newline; nothing was done"
                    };
                    self.answer(error_line(reply), now);
                    return Next::Keep;
                }
                Ok(n) => {
                    let start = self.input.len();
                    self.input.extend_from_slice(&chunk[..n]);
                    if let Some(at) = self.input[start..].iter().position(|&b| b == b'\n') {
                        let reply = handle_line(&self.input[..start + at]);
                        self.answer(reply, sys::now_ns());
                        return Next::Keep;
                    }
                    if self.input.len() >= MAX_REQUEST {
                        let reply = error_line(&format!("request longer than {MAX_REQUEST} bytes"));
                        self.answer(reply, now);
                        return Next::Keep;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Next::Keep,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return Next::Close,
            }
        }
    }

    fn write_reply(&mut self) -> Next {
        let Phase::Writing { reply, sent } = &mut self.phase else {
            return Next::Keep;
        };
        while *sent < reply.len() {
            match sys::send_nonblocking(&self.stream, &reply[*sent..]) {
                Ok(n) => *sent += n,
                Err(e) if e.0 == libc::EAGAIN => return Next::Keep,
                Err(e) if e.0 == libc::EINTR => continue,
                Err(_) => return Next::Close,
            }
        }
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        self.phase = Phase::Draining { dropped: 0 };
        Next::Keep
    }

    fn drain(&mut self) -> Next {
        let Phase::Draining { dropped } = &mut self.phase else {
            return Next::Keep;
        };
        let mut chunk = [0u8; 16384];
        loop {
            match (&self.stream).read(&mut chunk) {
                Ok(0) => return Next::Close,
                Ok(n) => {
                    *dropped += n;
                    if *dropped > DRAIN_LIMIT {
                        return Next::Close;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Next::Keep,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return Next::Close,
            }
        }
    }

    /// Serves whatever `revents` says is ready, moving on through the
    /// phases as far as the socket allows: an answer made now goes out at
    /// once (most fit the socket buffer, and the client is waiting).
    fn serve(&mut self, revents: i16, now: u64) -> Next {
        if revents & libc::POLLNVAL != 0 || !self.still_ours() {
            return Next::Forget;
        }
        if let Phase::Reading = self.phase {
            let next = self.read_request(now);
            if next != Next::Keep {
                return next;
            }
        }
        if let Phase::Writing { .. } = self.phase {
            let next = self.write_reply();
            if next != Next::Keep {
                return next;
            }
        }
        if let Phase::Draining { .. } = self.phase {
            return self.drain();
        }
        Next::Keep
    }

    /// At the deadline: a request still incomplete is answered with an
    /// error; an answer the client does not take is given up.
    fn expire(&mut self, now: u64) -> Next {
        if now < self.deadline_ns {
            return Next::Keep;
        }
        match self.phase {
            Phase::Reading => {
                let reply = error_line(&format!(
                    "no complete request line within {} s",
                    REQUEST_DEADLINE.as_secs()
                ));
                self.answer(reply, now);
                self.write_reply()
            }
            Phase::Writing { .. } | Phase::Draining { .. } => Next::Close,
        }
    }

    fn events(&self) -> i16 {
        match self.phase {
            Phase::Writing { .. } => libc::POLLOUT,
            _ => libc::POLLIN,
        }
    }
}

fn finish(client: Client, next: Next) {
    if next == Next::Forget {
        // The number is the application's now: closing it would close
        // something of theirs.
        let _ = client.stream.into_raw_fd();
    }
}

/// Checks the peer's uid; a stranger gets an error line and nothing else.
fn admit(stream: &UnixStream) -> Result<(), String> {
    let uid = sys::geteuid();
    match sys::peer_cred(stream) {
        Ok(peer) if peer.uid == uid => Ok(()),
        Ok(peer) => Err(error_line(&format!(
            "permission denied: peer uid {} is not uid {uid}",
            peer.uid
        ))),
        Err(e) => Err(error_line(&format!("cannot check the peer's uid: {e}"))),
    }
}

/// Accepts what is waiting, closing the oldest connection when all slots
/// are taken. Returns false when the listener is gone.
fn accept_all(listener: &UnixListener, clients: &mut Vec<Client>) -> bool {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                let now = sys::now_ns();
                if clients.len() >= MAX_CLIENTS {
                    let oldest = (0..clients.len())
                        .min_by_key(|&i| clients[i].accepted_ns)
                        .expect("MAX_CLIENTS > 0");
                    let evicted = clients.swap_remove(oldest);
                    if evicted.still_ours() {
                        let _ = sys::send_nonblocking(
                            &evicted.stream,
                            error_line("closed to make room for other clients").as_bytes(),
                        );
                        finish(evicted, Next::Close);
                    } else {
                        finish(evicted, Next::Forget);
                    }
                }
                let Some(mut client) = Client::new(stream, now) else {
                    continue;
                };
                if let Err(reply) = admit(&client.stream) {
                    client.answer(reply, now);
                }
                // Most clients have sent their line by now: serve it at once.
                match client.serve(libc::POLLIN, now) {
                    Next::Keep => clients.push(client),
                    next => finish(client, next),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // The application closed our descriptor (daemons close every
            // fd above 2): the socket is gone, so is the control thread.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EBADF | libc::ENOTSOCK | libc::EINVAL)
                ) =>
            {
                return false
            }
            // Out of descriptors or memory for a moment: try again later.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                return true;
            }
        }
    }
}

/// The control thread's loop: waits in poll for new connections and for
/// the ones being served. The caller has marked the thread as the
/// library's own. Returns when the application has closed the listener.
pub fn serve(listener: UnixListener) {
    let Some(identity) = sys::fd_identity(listener.as_raw_fd()) else {
        let _ = listener.into_raw_fd();
        return;
    };
    if listener.set_nonblocking(true).is_err() {
        let _ = listener.into_raw_fd();
        return;
    }
    let mut clients: Vec<Client> = Vec::with_capacity(MAX_CLIENTS);
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(MAX_CLIENTS + 1);
    loop {
        let now = sys::now_ns();
        let timeout_ms = clients
            .iter()
            .map(|c| c.deadline_ns.saturating_sub(now).div_ceil(1_000_000))
            .min()
            .map_or(-1, |ms| ms.min(i32::MAX as u64) as i32);
        fds.clear();
        fds.push(libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        fds.extend(clients.iter().map(|c| libc::pollfd {
            fd: c.stream.as_raw_fd(),
            events: c.events(),
            revents: 0,
        }));
        if sys::poll(&mut fds, timeout_ms).is_err() {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let listener_gone = fds[0].revents & libc::POLLNVAL != 0
            || sys::fd_identity(listener.as_raw_fd()) != Some(identity);
        if listener_gone {
            // The number is not ours any more (or names nothing): leave it.
            let _ = listener.into_raw_fd();
            for c in clients.drain(..) {
                let next = if c.still_ours() {
                    Next::Close
                } else {
                    Next::Forget
                };
                finish(c, next);
            }
            return;
        }
        // Ready connections first, then deadlines: a line that arrived in
        // time is read before its connection could expire.
        let now = sys::now_ns();
        let mut i = 0;
        let mut polled = fds[1..].iter().map(|f| f.revents).collect::<Vec<_>>();
        while i < clients.len() {
            let revents = polled[i];
            let mut next = if revents != 0 {
                clients[i].serve(revents, now)
            } else {
                Next::Keep
            };
            if next == Next::Keep {
                next = clients[i].expire(sys::now_ns());
            }
            if next == Next::Keep {
                i += 1;
            } else {
                finish(clients.swap_remove(i), next);
                polled.swap_remove(i);
            }
        }
        // Any event on the listener means accept: an error there ends the loop.
        if fds[0].revents != 0 && !accept_all(&listener, &mut clients) {
            let _ = listener.into_raw_fd();
            return;
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
            ("stop lbr=3", "error 'stop' takes only out=DIR"),
        ] {
            let reply = handle_request(req);
            assert!(reply.starts_with(want), "{req:?} -> {reply:?}");
            assert_eq!(reply.matches('\n').count(), 1);
        }
        assert!(handle_request("status").starts_with("ok {\"state\":\"off\""));
        assert!(handle_request("stop").starts_with("error no session is running"));
    }

    #[test]
    fn bytes_that_are_no_request_are_named() {
        for (line, want) in [
            (
                &b"sta\0tus"[..],
                "error request holds a NUL byte at offset 3",
            ),
            (
                b"\x01status",
                "error request holds control byte 0x01 at offset 0",
            ),
            (
                b"status \xff",
                "error request is not UTF-8 (invalid byte at offset 7)",
            ),
            (b"status\r", "ok "),
        ] {
            let reply = handle_line(line);
            assert!(reply.starts_with(want), "{line:?} -> {reply:?}");
        }
    }
}
