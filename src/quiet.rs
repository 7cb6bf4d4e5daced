//! Whether the process is *quiet*: one application thread, and no
//! application handler for a signal that can arrive at any instant but
//! those the library wraps ([`wrap`]). In a quiet process nothing but the
//! sampled thread itself writes its private memory while it runs: no other
//! thread exists to, and a handler that runs in between its instructions
//! is counted, so that the segments it may have run inside are dropped.
//! So a segment's reads of private memory cannot be changed under it
//! unseen, and need no checkpoint (see ARCHITECTURE.md, "Quiet
//! processes").
//!
//! Both conditions are sticky: once a second application thread or an
//! unwrapped handler has been seen, the process stays noisy for good (a
//! later survey never makes it quiet again). They are noted synchronously
//! where the library can (the `pthread_create` interposer before the
//! thread exists; `sigaction` and `signal`, which wrap the handlers they
//! install), and by a survey of every signal's action at session start and
//! every worker look (handlers installed by a raw system call).
//! Threads the interposer cannot see (C11 `thrd_create`, the C library's
//! timer and AIO helpers, a raw `clone`) are counted at each run instead:
//! [`is_quiet_now`] reads the process's thread count and takes away the
//! library's own. The count is the link count of /proc/self/task less 2
//! (one `fstat` of the directory, kept open: 0.2 µs on the 2-core guest,
//! where a `pread` of /proc/self/stat, which formats 52 fields, takes
//! 2.4 µs); where a kernel's link count does not match /proc/self/stat's
//! num_threads at start, /proc/self/stat it is.
//!
//! Async-signal-safe: atomics and one system call.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

pub mod wrap;

/// A second application thread was seen.
const THREADS: u32 = 1;
/// An application handler for an asynchronous signal was seen.
const HANDLERS: u32 = 2;

static NOISE: AtomicU32 = AtomicU32::new(0);
/// The library is starting one of its own threads (from an application
/// thread: the control thread, at load).
static OWN_SPAWNS: AtomicU32 = AtomicU32::new(0);

/// What [`is_quiet_now`] counts threads with, open while a session may
/// (-1: not open): /proc/self/task, or /proc/self/stat where the task
/// directory's link count is not the thread count (`BY_STAT`).
static COUNT_FD: AtomicI32 = AtomicI32::new(-1);
static BY_STAT: AtomicBool = AtomicBool::new(false);
/// The library's own threads alive (the control thread, the worker).
static OWN_THREADS: AtomicU32 = AtomicU32::new(0);

/// Whether nothing has made the process noisy so far (see the module
/// doc): a cheap test before [`is_quiet_now`].
#[inline]
pub fn is_quiet() -> bool {
    NOISE.load(Ordering::Acquire) == 0
}

/// Whether the process is quiet at this instant: nothing made it noisy,
/// and it has no thread but the caller and the library's own. From a
/// handler, on the sampled thread: a thread made since would have needed
/// a system call of this one (which ends every segment) or of another
/// thread (then counted).
pub fn is_quiet_now() -> bool {
    if !is_quiet() {
        return false;
    }
    let Some(threads) = thread_count() else {
        return false;
    };
    if threads > 1 + u64::from(OWN_THREADS.load(Ordering::Acquire)) {
        NOISE.fetch_or(THREADS, Ordering::AcqRel);
        return false;
    }
    true
}

/// Opens what [`is_quiet_now`] counts threads with (at session start, on
/// the control thread; kept open, close-on-exec): /proc/self/task, when its
/// link count less 2 is the num_threads of /proc/self/stat (tried a few
/// times: a thread may start or end between the two reads).
pub fn open_thread_count() {
    if COUNT_FD.load(Ordering::Acquire) >= 0 {
        return;
    }
    let open = |path: &std::ffi::CStr, flags| {
        // SAFETY: a NUL-terminated path; the result is checked.
        unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC | flags) }
    };
    let task = open(c"/proc/self/task", libc::O_DIRECTORY);
    let agrees = task >= 0
        && (0..3).any(|_| {
            let by_stat = std::fs::read("/proc/self/stat")
                .ok()
                .and_then(|s| stat_field(&s, 20));
            by_stat.is_some() && by_stat == count_by_links(task)
        });
    let (fd, by_stat) = if agrees {
        (task, false)
    } else {
        if task >= 0 {
            // SAFETY: our own descriptor, never shared.
            unsafe { libc::close(task) };
        }
        (open(c"/proc/self/stat", 0), true)
    };
    if fd < 0 {
        return;
    }
    BY_STAT.store(by_stat, Ordering::Release);
    if COUNT_FD
        .compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // SAFETY: our own descriptor, never shared.
        unsafe { libc::close(fd) };
    }
}

/// In a fork child: the descriptor names the parent's stat, and the
/// library's threads are not here.
pub fn reset_after_fork() {
    wrap::reset_after_fork();
    let fd = COUNT_FD.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: our own descriptor; the child has one thread.
        unsafe { libc::close(fd) };
    }
    OWN_THREADS.store(0, Ordering::Release);
}

/// One of the library's threads started running (or ended: `false`).
pub fn own_thread(started: bool) {
    if started {
        OWN_THREADS.fetch_add(1, Ordering::AcqRel);
    } else {
        let _ = OWN_THREADS.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

/// The process's threads, read with no allocation.
fn thread_count() -> Option<u64> {
    let fd = COUNT_FD.load(Ordering::Acquire);
    if fd < 0 {
        return None;
    }
    if !BY_STAT.load(Ordering::Acquire) {
        return count_by_links(fd);
    }
    // The fields up to num_threads fit: pid, a command of at most 16
    // bytes, and 17 numbers.
    let mut buf = [0u8; 320];
    // SAFETY: pread into a buffer of that length.
    let n = unsafe {
        crate::sys::raw::syscall4(
            libc::SYS_pread64,
            fd as u64,
            buf.as_mut_ptr() as u64,
            buf.len() as u64,
            0,
        )
    };
    let text = buf.get(..usize::try_from(n).ok()?)?;
    stat_field(text, 20)
}

/// The link count of the /proc/self/task directory open as `fd`, less its
/// `.` and its entry in /proc/self: one link per thread (the kernel adds
/// the thread count to a task directory's links).
fn count_by_links(fd: i32) -> Option<u64> {
    // SAFETY: plain data, all-zero is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a buffer of the kernel's struct stat.
    let r = unsafe {
        crate::sys::raw::syscall4(
            libc::SYS_fstat,
            fd as u64,
            &mut st as *mut libc::stat as u64,
            0,
            0,
        )
    };
    (r == 0).then_some(st.st_nlink as u64)?.checked_sub(2)
}

/// Numeric field `n` (1-based, as proc(5) numbers them; 3 or later) of the
/// text of a /proc stat file, read with no allocation.
pub fn stat_field(stat: &[u8], n: usize) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    // The command (field 2) may hold spaces and parentheses: fields count
    // from after its closing one, state (field 3) first.
    let field = stat
        .get(close + 2..)?
        .split(|&b| b == b' ')
        .nth(n.checked_sub(3)?)?;
    let mut value = 0u64;
    for &d in field {
        if !d.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    (!field.is_empty()).then_some(value)
}

/// Runs `spawn`, which starts one of the library's own threads: the
/// `pthread_create` it makes is not an application thread.
pub fn spawning_own<T>(spawn: impl FnOnce() -> T) -> T {
    OWN_SPAWNS.fetch_add(1, Ordering::AcqRel);
    let out = spawn();
    OWN_SPAWNS.fetch_sub(1, Ordering::AcqRel);
    out
}

/// An application thread is about to create a thread (called before it
/// exists).
pub fn thread_created() {
    if OWN_SPAWNS.load(Ordering::Acquire) == 0 {
        NOISE.fetch_or(THREADS, Ordering::AcqRel);
    }
}

/// Whether `sig` arrives only as the result of the instruction the thread
/// is running (a fault, a trap, a bad system call): its handler runs only
/// where the emulated path itself would have stopped.
pub fn synchronous(sig: i32) -> bool {
    matches!(
        sig,
        libc::SIGSEGV | libc::SIGBUS | libc::SIGFPE | libc::SIGILL | libc::SIGTRAP | libc::SIGSYS
    )
}

/// The application installs `handler` (a `sa_sigaction` value) for `sig`,
/// or a survey found it there.
pub fn handler_installed(sig: i32, handler: libc::sighandler_t) {
    if handler != libc::SIG_DFL && handler != libc::SIG_IGN && !synchronous(sig) {
        NOISE.fetch_or(HANDLERS, Ordering::AcqRel);
    }
}

/// What made the process noisy, for the summary: (a second thread, a
/// handler).
pub fn noise() -> (bool, bool) {
    let n = NOISE.load(Ordering::Acquire);
    (n & THREADS != 0, n & HANDLERS != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_count_is_read_from_a_stat_line() {
        let line = b"4242 (my prog) x) R 1 4242 4242 0 -1 4194304 100 0 0 0 5 1 0 0 20 0 3 0 12345 1000000 200";
        assert_eq!(stat_field(line, 20), Some(3));
        assert_eq!(stat_field(line, 4), Some(1));
        assert_eq!(stat_field(b"4242 (p) R 1 2", 20), None);
        let own = std::fs::read("/proc/self/stat").unwrap();
        let tasks = std::fs::read_dir("/proc/self/task").unwrap().count() as u64;
        assert!(
            stat_field(&own, 20).is_some_and(|n| n >= 1 && n <= tasks + 8),
            "{own:?}"
        );
    }

    #[test]
    fn the_task_directory_links_count_the_threads() {
        // SAFETY: a NUL-terminated path; checked.
        let fd = unsafe {
            libc::open(
                c"/proc/self/task".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY,
            )
        };
        assert!(fd >= 0);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        let parked: Vec<_> = (0..3)
            .map(|_| {
                let rx = std::sync::Arc::clone(&rx);
                std::thread::spawn(move || {
                    let _ = rx.lock().unwrap().recv();
                })
            })
            .collect();
        // The test harness's other threads come and go: two reads that
        // agree, at some try, are the check.
        let agreed = (0..1000).any(|_| {
            let listed = std::fs::read_dir("/proc/self/task").unwrap().count() as u64;
            count_by_links(fd) == Some(listed) && listed >= 4
        });
        drop(tx);
        for t in parked {
            t.join().unwrap();
        }
        // SAFETY: our own descriptor.
        unsafe { libc::close(fd) };
        assert!(agreed);
    }

    #[test]
    fn faults_are_synchronous_and_timers_are_not() {
        assert!(synchronous(libc::SIGSEGV));
        assert!(synchronous(libc::SIGTRAP));
        assert!(!synchronous(libc::SIGALRM));
        assert!(!synchronous(libc::SIGINT));
        assert!(!synchronous(libc::SIGRTMIN()));
    }
}
