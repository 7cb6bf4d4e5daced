//! Every signal and process syscall of profiler-ctl: blocking and waiting
//! for signals, sending them, reaping the child, and dying by a signal.
//!
//! `record` blocks the signals it forwards (and SIGCHLD) before it starts the
//! child and takes them synchronously with `sigtimedwait`, so no handler runs
//! and nothing races with the main loop. The process is single-threaded, so
//! the thread mask is the process mask.

use std::io;
use std::mem::MaybeUninit;
use std::ptr;
use std::time::Duration;

use libc::c_int;

/// Signals passed on to the child.
pub const FORWARDED: [c_int; 8] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
    libc::SIGCONT,
];

/// Signals that end the child by default: its profile is asked for first.
pub fn is_terminating(signal: c_int) -> bool {
    matches!(
        signal,
        libc::SIGINT | libc::SIGTERM | libc::SIGHUP | libc::SIGQUIT
    )
}

/// The name of a signal for messages (`SIGTERM`), or its number.
pub fn name(signal: c_int) -> String {
    let known = [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
    ];
    known.iter().find(|(n, _)| *n == signal).map_or_else(
        || format!("signal {signal}"),
        |(_, name)| (*name).to_owned(),
    )
}

fn check(ret: c_int) -> io::Result<c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The signal state before [`block`], needed to give the child the
/// original one.
#[derive(Clone, Copy)]
pub struct Blocked {
    waited: libc::sigset_t,
    original_mask: libc::sigset_t,
    sigchld_was_ignored: bool,
}

/// Blocks [`FORWARDED`] and SIGCHLD so that [`Blocked::wait`] receives them.
///
/// An inherited `SIGCHLD = SIG_IGN` would make the kernel reap the child
/// unseen, so it is set back to the default here (and restored for the child
/// by [`Blocked::restore_in_child`]).
pub fn block() -> io::Result<Blocked> {
    let mut waited = MaybeUninit::<libc::sigset_t>::uninit();
    let mut original_mask = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set it is given; sigaddset takes
    // valid signal numbers; pthread_sigmask writes the old mask into
    // `original_mask`, which it fully initialises on success.
    let (waited, original_mask) = unsafe {
        check(libc::sigemptyset(waited.as_mut_ptr()))?;
        for signal in FORWARDED.iter().chain(&[libc::SIGCHLD]) {
            check(libc::sigaddset(waited.as_mut_ptr(), *signal))?;
        }
        let waited = waited.assume_init();
        let err = libc::pthread_sigmask(libc::SIG_BLOCK, &waited, original_mask.as_mut_ptr());
        if err != 0 {
            return Err(io::Error::from_raw_os_error(err));
        }
        (waited, original_mask.assume_init())
    };
    // SAFETY: signal() with SIG_DFL installs no handler; the previous
    // disposition it returns is only compared.
    let previous = unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    Ok(Blocked {
        waited,
        original_mask,
        sigchld_was_ignored: previous == libc::SIG_IGN,
    })
}

impl Blocked {
    /// Gives the child the signal mask and SIGCHLD disposition profiler-ctl
    /// was started with. Runs between fork and exec: only async-signal-safe
    /// calls, no allocation.
    pub fn restore_in_child(&self) -> io::Result<()> {
        // SAFETY: both calls are async-signal-safe and take valid arguments.
        unsafe {
            if self.sigchld_was_ignored {
                libc::signal(libc::SIGCHLD, libc::SIG_IGN);
            }
            let err =
                libc::pthread_sigmask(libc::SIG_SETMASK, &self.original_mask, ptr::null_mut());
            if err != 0 {
                return Err(io::Error::from_raw_os_error(err));
            }
        }
        Ok(())
    }

    /// Waits up to `timeout` for one of the blocked signals; `None` on timeout.
    pub fn wait(&self, timeout: Duration) -> io::Result<Option<c_int>> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `waited` is an initialised set; a null siginfo is allowed.
        let ret = unsafe { libc::sigtimedwait(&self.waited, ptr::null_mut(), &ts) };
        if ret == -1 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(ret))
    }
}

/// Sends `signal` to `pid`.
pub fn send(pid: u32, signal: c_int) -> io::Result<()> {
    // SAFETY: kill has no memory-safety preconditions.
    check(unsafe { libc::kill(pid as libc::pid_t, signal) }).map(drop)
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(c_int),
}

/// How a child ended and the CPU time it (and the children it waited for)
/// used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    pub exit: Exit,
    pub user: Duration,
    pub system: Duration,
}

fn duration_of(tv: libc::timeval) -> Duration {
    Duration::from_secs(tv.tv_sec.max(0) as u64) + Duration::from_micros(tv.tv_usec.max(0) as u64)
}

/// Reaps `pid` if it has ended; `None` while it runs (or is only stopped).
pub fn try_reap(pid: u32) -> io::Result<Option<Reaped>> {
    let mut status: c_int = 0;
    loop {
        // SAFETY: rusage is plain data, all-zero is valid.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `status` and `usage` are valid out pointers.
        let ret =
            unsafe { libc::wait4(pid as libc::pid_t, &mut status, libc::WNOHANG, &mut usage) };
        let exit = match ret {
            0 => return Ok(None),
            -1 => {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            _ if libc::WIFEXITED(status) => Exit::Code(libc::WEXITSTATUS(status)),
            _ if libc::WIFSIGNALED(status) => Exit::Signal(libc::WTERMSIG(status)),
            _ => return Ok(None),
        };
        return Ok(Some(Reaped {
            exit,
            user: duration_of(usage.ru_utime),
            system: duration_of(usage.ru_stime),
        }));
    }
}

/// Ends this process by `signal` with its default action, as the child
/// ended, so a shell sees the same status. No core file is written for
/// profiler-ctl itself. Falls back to exit status 128 + signal.
pub fn die_by(signal: c_int) -> ! {
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls with valid arguments; the set is initialised by
    // sigemptyset before use.
    unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::signal(signal, libc::SIG_DFL);
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), signal);
        libc::raise(signal);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, set.as_ptr(), ptr::null_mut());
    }
    std::process::exit(128 + signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminating_signals_are_the_four_that_end_a_program() {
        let terminating: Vec<c_int> = FORWARDED
            .iter()
            .copied()
            .filter(|s| is_terminating(*s))
            .collect();
        assert_eq!(
            terminating,
            vec![libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT]
        );
        assert_eq!(name(libc::SIGTERM), "SIGTERM");
        assert_eq!(name(64), "signal 64");
    }
}
