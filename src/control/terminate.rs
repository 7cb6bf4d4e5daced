//! Ending by a signal without losing the profile.
//!
//! A program recorded from start to exit (autostart) is often ended with
//! Ctrl-C or `kill`: the default action of SIGINT, SIGTERM, SIGHUP or
//! SIGQUIT ends it at once and atexit never runs. For those signals still
//! at their default action when the session starts, the library installs
//! a handler that asks the control thread, over the control socket as any
//! client would, to stop and write the profile, waits for the answer (at
//! most `WRITE_TIMEOUT`), then puts the default action back and re-raises
//! the signal: the process ends exactly as it would have, with its profile.
//!
//! The application keeps full control: a handler it installs replaces ours
//! (the `sigaction`/`signal` interposers pass it to the kernel and forget
//! ours), and while ours is installed they report the default action, as
//! the application left it. A second terminating signal while the first is
//! being handled ends the process at once.
//!
//! The handler is async-signal-safe: socket, connect, write, read, close,
//! sigaction and tgkill only, on a path prepared at start.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::sys;

/// The signals handled, and blocked while our SIGTRAP handler runs (so a
/// terminating signal never interrupts a thread holding its trace slot).
pub const TERMINATING: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// How long the handler waits for the profile to be written.
pub const WRITE_TIMEOUT_S: i64 = 20;

/// sun_path of the control socket, NUL-terminated, set once at start.
static SOCKET_PATH: std::sync::OnceLock<[u8; 108]> = std::sync::OnceLock::new();
/// Which of TERMINATING carry our handler.
static OURS: [AtomicBool; 4] = [const { AtomicBool::new(false) }; 4];
static TERMINATING_NOW: AtomicBool = AtomicBool::new(false);

fn index(sig: i32) -> Option<usize> {
    TERMINATING.iter().position(|&s| s == sig)
}

/// Records the control socket to ask, as a NUL-terminated sun_path, so
/// that asking later needs no allocation (paths that do not fit are not
/// recorded, and asking then does nothing).
pub fn set_socket(socket: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let bytes = socket.as_os_str().as_bytes();
    if bytes.len() >= 108 {
        return;
    }
    let mut path = [0u8; 108];
    path[..bytes.len()].copy_from_slice(bytes);
    let _ = SOCKET_PATH.set(path);
}

/// The control socket's path, NUL-terminated, once recorded.
pub fn socket_path_bytes() -> Option<&'static [u8]> {
    SOCKET_PATH.get().map(|p| {
        let len = p.iter().position(|&b| b == 0).unwrap_or(p.len() - 1);
        &p[..=len]
    })
}

/// Asks the control thread to stop the session and write the profile, and
/// waits for its answer (at most `WRITE_TIMEOUT_S`). Async-signal-safe: the
/// calling thread only makes system calls; the writing happens on the
/// control thread.
pub fn ask_to_stop() {
    if let Some(path) = SOCKET_PATH.get() {
        request_stop(path);
    }
}

/// Installs the handler for each terminating signal still at its default
/// action (after [`set_socket`]).
pub fn install() {
    let mut blocked: Vec<i32> = TERMINATING.to_vec();
    blocked.push(libc::SIGTRAP);
    for (i, &sig) in TERMINATING.iter().enumerate() {
        // SAFETY: plain data.
        let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: querying only.
        if unsafe { sys::real_sigaction(sig, std::ptr::null(), &mut current) }.is_err() {
            continue;
        }
        if current.sa_sigaction == libc::SIG_DFL
            && sys::install_handler(sig, on_terminate, sys::Blocked::These(&blocked), 0).is_ok()
        {
            OURS[i].store(true, Ordering::Release);
        }
    }
}

/// The interposers' path: true (and `old` filled with the default action)
/// when `sig` carries our handler; a new action from the application
/// replaces ours, so we forget it. The caller then makes the real call.
pub fn intercept(sig: i32, installs: bool, old: Option<&mut libc::sigaction>) -> bool {
    let Some(i) = index(sig) else { return false };
    if !OURS[i].load(Ordering::Acquire) {
        return false;
    }
    if let Some(old) = old {
        // SAFETY: an all-zero sigaction is SIG_DFL with an empty mask.
        *old = unsafe { std::mem::zeroed() };
    }
    if installs {
        OURS[i].store(false, Ordering::Release);
    }
    true
}

/// Asks the control socket to stop and waits for its one-line answer.
fn request_stop(path: &[u8; 108]) {
    // SAFETY: raw socket calls on a local fd and a valid sockaddr_un.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return;
        }
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr.sun_path.iter_mut().zip(path.iter()) {
            *d = *s as libc::c_char;
        }
        let timeout = libc::timeval {
            tv_sec: WRITE_TIMEOUT_S,
            tv_usec: 0,
        };
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&timeout as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        if libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len) == 0 {
            let request = b"stop\n";
            if libc::write(fd, request.as_ptr().cast(), request.len()) == request.len() as isize {
                // The answer comes once the profile is written; its content
                // does not matter here (the writer reports errors itself).
                let mut answer = [0u8; 256];
                while libc::read(fd, answer.as_mut_ptr().cast(), answer.len()) > 0 {}
            }
        }
        libc::close(fd);
    }
}

extern "C" fn on_terminate(sig: i32, _info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    let errno = sys::errno();
    if !TERMINATING_NOW.swap(true, Ordering::AcqRel) {
        ask_to_stop();
    }
    if let Some(i) = index(sig) {
        OURS[i].store(false, Ordering::Release);
    }
    sys::reraise_default(sig);
    sys::set_errno(errno);
}

/// In the child of a fork: our handlers would ask the parent's socket to
/// stop the parent's session. The signals go back to their default action
/// (the one the application left them at), with system calls only.
pub fn reset_after_fork() {
    for (i, &sig) in TERMINATING.iter().enumerate() {
        if OURS[i].swap(false, Ordering::AcqRel) {
            // SAFETY: an all-zero sigaction is SIG_DFL with an empty mask.
            let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
            let _ = sys::restore_action(sig, &dfl);
        }
    }
    TERMINATING_NOW.store(false, Ordering::Release);
}
