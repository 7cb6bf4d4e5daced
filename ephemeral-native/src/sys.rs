//! Every system call and C-library signal call of the library.
//!
//! The library exports its own `sigaction`, `signal`, `sigprocmask` and
//! `pthread_sigmask` (see `interpose`), so a call to those names from this
//! crate would reach the interposers: the C library's are looked up with
//! `dlsym(RTLD_NEXT)` once, at start-up, and the signal masks are changed
//! with the raw `rt_sigprocmask` system call.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A signal set in the kernel's layout: bit `n - 1` is signal `n`.
pub type Mask = u64;

pub fn bit(sig: i32) -> Mask {
    1 << (sig - 1)
}

/// The calling thread's errno, saved by each handler and restored on return.
pub fn errno() -> i32 {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

pub fn set_errno(value: i32) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = value };
}

/// `-1 with errno` as an error naming the call.
fn check(ret: i64, what: &str) -> Result<i64, String> {
    if ret == -1 {
        Err(format!(
            "{what}: {}",
            std::io::Error::from_raw_os_error(errno())
        ))
    } else {
        Ok(ret)
    }
}

type SigactionFn = unsafe extern "C" fn(i32, *const libc::sigaction, *mut libc::sigaction) -> i32;
type SignalFn = unsafe extern "C" fn(i32, libc::sighandler_t) -> libc::sighandler_t;
type SigmaskFn = unsafe extern "C" fn(i32, *const libc::sigset_t, *mut libc::sigset_t) -> i32;

static REAL_SIGACTION: AtomicUsize = AtomicUsize::new(0);
static REAL_SIGNAL: AtomicUsize = AtomicUsize::new(0);
static REAL_SIGPROCMASK: AtomicUsize = AtomicUsize::new(0);
static REAL_PTHREAD_SIGMASK: AtomicUsize = AtomicUsize::new(0);

/// The next definition of `name` after this library (the C library's).
/// Not async-signal-safe: [`resolve_all`] runs it before any handler is
/// installed; a lookup later happens only when an interposer is called
/// before the constructor (another preloaded library's constructor).
fn next(slot: &AtomicUsize, name: &CStr) -> usize {
    let v = slot.load(Ordering::Acquire);
    if v != 0 {
        return v;
    }
    // SAFETY: RTLD_NEXT and a NUL-terminated name.
    let sym = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    if sym == 0 {
        fatal(b"ephemeral: a C library signal function is missing\n");
    }
    slot.store(sym, Ordering::Release);
    sym
}

/// Looks every wrapped C-library function up now, before signals are armed.
pub fn resolve_all() {
    next(&REAL_SIGACTION, c"sigaction");
    next(&REAL_SIGNAL, c"signal");
    next(&REAL_SIGPROCMASK, c"sigprocmask");
    next(&REAL_PTHREAD_SIGMASK, c"pthread_sigmask");
}

/// The C library's sigaction.
///
/// # Safety
/// As sigaction(2): null or valid pointers.
pub unsafe fn real_sigaction(
    sig: i32,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> i32 {
    // SAFETY: the symbol is the C library's sigaction.
    let f: SigactionFn = unsafe { std::mem::transmute(next(&REAL_SIGACTION, c"sigaction")) };
    // SAFETY: forwarded contract.
    unsafe { f(sig, act, old) }
}

/// The C library's signal.
///
/// # Safety
/// As signal(2).
pub unsafe fn real_signal(sig: i32, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: the symbol is the C library's signal.
    let f: SignalFn = unsafe { std::mem::transmute(next(&REAL_SIGNAL, c"signal")) };
    // SAFETY: forwarded contract.
    unsafe { f(sig, handler) }
}

/// The C library's sigprocmask (`pthread = false`) or pthread_sigmask.
///
/// # Safety
/// As sigprocmask(2): null or valid pointers.
pub unsafe fn real_sigmask(
    pthread: bool,
    how: i32,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> i32 {
    let sym = if pthread {
        next(&REAL_PTHREAD_SIGMASK, c"pthread_sigmask")
    } else {
        next(&REAL_SIGPROCMASK, c"sigprocmask")
    };
    // SAFETY: the symbol is the C library's function of that type.
    let f: SigmaskFn = unsafe { std::mem::transmute(sym) };
    // SAFETY: forwarded contract.
    unsafe { f(how, set, old) }
}

/// rt_sigprocmask on the calling thread, in the kernel's 8-byte layout;
/// returns the previous mask. Async-signal-safe (one system call).
pub fn thread_mask(how: i32, set: Mask) -> Mask {
    let mut old: Mask = 0;
    // SAFETY: valid pointers to 8-byte sets, the size the kernel expects.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            how,
            &set as *const Mask,
            &mut old as *mut Mask,
            8usize,
        )
    };
    old
}

/// Signals 1..=64 of a C-library set as a kernel mask.
pub fn mask_of(set: &libc::sigset_t) -> Mask {
    (1..=64)
        // SAFETY: a valid set and a signal number in range.
        .filter(|&s| unsafe { libc::sigismember(set, s) } == 1)
        .fold(0, |m, s| m | bit(s))
}

/// Sends `sig` to the calling thread. Async-signal-safe.
pub fn raise_here(sig: i32) {
    // SAFETY: plain system calls on this process and thread.
    unsafe {
        let pid = libc::syscall(libc::SYS_getpid);
        let tid = libc::syscall(libc::SYS_gettid);
        libc::syscall(libc::SYS_tgkill, pid, tid, sig);
    }
}

pub fn gettid() -> i32 {
    // SAFETY: no arguments.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

pub fn getpid() -> i32 {
    // SAFETY: no arguments.
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

/// Makes `[start, end)` readable, writable and executable.
///
/// # Safety
/// The range must be whole pages of mappings this process owns; adding
/// write permission to code is the caller's decision (see `hooks`).
pub unsafe fn make_writable_code(start: u64, end: u64) -> Result<(), String> {
    // SAFETY: forwarded contract.
    let ret = unsafe {
        libc::mprotect(
            start as *mut c_void,
            (end - start) as usize,
            libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
        )
    };
    check(i64::from(ret), "mprotect of the executable's code to RWX").map(|_| ())
}

/// Writes one byte of code: a single aligned-by-nature store, which other
/// threads see whole (the way debuggers and the kernel's text_poke place
/// an int3). Async-signal-safe.
///
/// # Safety
/// `at` must be a writable byte of code whose both values (the original
/// byte and int3) leave the instruction stream valid.
pub unsafe fn write_code_byte(at: u64, value: u8) {
    // SAFETY: forwarded contract; an AtomicU8 has the layout of a u8.
    let cell = unsafe { &*(at as *const std::sync::atomic::AtomicU8) };
    cell.store(value, Ordering::SeqCst);
}

/// A CPU-time timer of the whole process that signals the thread `tid`
/// with `sig` every `period_ns`.
pub fn process_cpu_timer(sig: i32, tid: i32, period_ns: u64) -> Result<libc::timer_t, String> {
    // SAFETY: plain data, all-zero is valid.
    let mut ev: libc::sigevent = unsafe { std::mem::zeroed() };
    ev.sigev_notify = libc::SIGEV_THREAD_ID;
    ev.sigev_signo = sig;
    ev.sigev_notify_thread_id = tid;
    let mut timer: libc::timer_t = std::ptr::null_mut();
    // SAFETY: valid pointers.
    let ret = unsafe { libc::timer_create(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ev, &mut timer) };
    check(i64::from(ret), "timer_create(CLOCK_PROCESS_CPUTIME_ID)")?;
    let ts = libc::timespec {
        tv_sec: (period_ns / 1_000_000_000) as i64,
        tv_nsec: (period_ns % 1_000_000_000) as i64,
    };
    let spec = libc::itimerspec {
        it_interval: ts,
        it_value: ts,
    };
    // SAFETY: a timer just created and a valid spec.
    let ret = unsafe { libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) };
    check(i64::from(ret), "timer_settime")?;
    Ok(timer)
}

/// Waits for `sig` (blocked in the caller); returns its si_code.
pub fn wait_signal(sig: i32) -> i32 {
    // SAFETY: a valid set built in place and a valid out-pointer.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        let mut info: libc::siginfo_t = std::mem::zeroed();
        loop {
            if libc::sigwaitinfo(&set, &mut info) == sig {
                return info.si_code;
            }
        }
    }
}

/// Writes `msg` to stderr with write(2) and aborts: for what cannot go on.
pub fn fatal(msg: &[u8]) -> ! {
    // SAFETY: a valid buffer; abort never returns.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort()
    }
}
