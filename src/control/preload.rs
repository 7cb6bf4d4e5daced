//! What LD_PRELOAD exposes: the load-time constructor (control thread,
//! autostart), the exit and fork hooks, and the interposed `pthread_create`
//! (threads created during a session are traced from their first
//! instruction, and close their slot as they end, however they end),
//! `sigaction` and `signal` (the application's SIGTRAP handler is chained
//! behind ours, never installed over it) and `_exit`.
//!
//! A forked child (without exec) is left as it would be without the
//! library: the fork hook closes the library's copies of descriptors and
//! starts nothing, so the child has the threads and descriptors it has
//! natively (a process must be single-threaded to enter a new user
//! namespace, for one). It is not profiled and has no control socket; a
//! child that execs loads the library afresh.
//!
//! Nothing here runs when the library is linked as an rlib (tests, tools):
//! the constructor acts only when the library is really preloaded.

use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

use crate::quiet::wrap;
use crate::sys;
use crate::trace::{chain, threads};

use super::config::Options;
use super::socket_path::{self, BindError, SocketDirError, SocketPlace};
use super::{session, socket, terminate};

static SOCKET_PATH: OnceLock<PathBuf> = OnceLock::new();
/// Pid that created the socket file (the exit hook of a fork child must
/// not remove its parent's socket).
static SOCKET_OWNER: AtomicI32 = AtomicI32::new(0);
/// Pid of the process whose session was autostarted (0: none). A vfork
/// child shares our memory but not our pid: it must not stop our session.
static AUTOSTARTED: AtomicI32 = AtomicI32::new(0);
/// The control socket's listening descriptor (-1: none): a fork child
/// closes its copy.
static LISTENER_FD: AtomicI32 = AtomicI32::new(-1);

fn env(key: &str) -> Option<String> {
    std::env::var(key).ok()
}

fn preloaded() -> bool {
    env("LD_PRELOAD").is_some_and(|p| p.contains("libbreakdance"))
}

/// Where the control socket goes: BREAKDANCE_SOCKET, else a per-pid path
/// in a private directory (see `breakdance_protocol::socket_path`).
fn socket_place() -> SocketPlace {
    breakdance_protocol::socket_path::socket_place(sys::getpid(), sys::geteuid(), env)
}

fn start_control_thread() {
    let place = socket_place();
    let path = place.path();
    let explicit = matches!(place, SocketPlace::Explicit(_));
    match socket_path::bind(&place) {
        Ok(listener) => {
            SOCKET_OWNER.store(sys::getpid(), Ordering::Release);
            LISTENER_FD.store(listener.as_raw_fd(), Ordering::Release);
            terminate::set_socket(&path);
            let _ = SOCKET_PATH.set(path);
            // The thread marks itself as the library's before `start` can
            // enumerate threads: wait for that, so it is never traced.
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let spawned = sys::with_signals_blocked(|| {
                crate::quiet::spawning_own(|| {
                    std::thread::Builder::new()
                        .name("breakdance-ctl".into())
                        .stack_size(256 * 1024)
                        .spawn(move || {
                            threads::mark_own_thread();
                            let _ = ready_tx.send(());
                            socket::serve(listener)
                        })
                })
            });
            match spawned {
                Ok(_) => {
                    let _ = ready_rx.recv();
                }
                Err(_) => sys::write_stderr(b"breakdance: cannot start the control thread\n"),
            }
        }
        // The default path is printed nowhere unless asked; a path the user
        // chose that cannot be bound is worth a line, and so is a default
        // directory refused as unsafe (someone else may have made it).
        Err(BindError::Dir(e)) if !matches!(e, SocketDirError::Io { .. }) => {
            sys::write_stderr(format!("breakdance: no control socket: {e}\n").as_bytes());
        }
        Err(e) if explicit => {
            sys::write_stderr(
                format!("breakdance: control socket {}: {e}\n", path.display()).as_bytes(),
            );
        }
        Err(_) => {}
    }
}

/// For autostart: the output directory of this process. The first process
/// of a `record` writes into BREAKDANCE_OUTPUT; every descendant that loads
/// the library again (fork+exec) writes into a subdirectory named after
/// its command and pid.
fn autostart_options() -> Result<Options, String> {
    let mut o = Options::from_env(env).map_err(|e| e.to_string())?;
    let pid = sys::getpid();
    let base = o
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(super::config::DEFAULT_OUTPUT));
    match env("BREAKDANCE_ROOT_PID").and_then(|p| p.parse::<i32>().ok()) {
        Some(root) if root != pid => {
            let comm = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
            let comm: String = comm
                .trim()
                .chars()
                .map(|c| if c == '/' { '_' } else { c })
                .collect();
            o.output = Some(base.join(format!("{comm}.{pid}")));
        }
        Some(_) => o.output = Some(base),
        None => {
            // SAFETY: the constructor runs before main, with this thread
            // the only one that touches the environment.
            unsafe { std::env::set_var("BREAKDANCE_ROOT_PID", pid.to_string()) };
            o.output = Some(base);
        }
    }
    Ok(o)
}

extern "C" fn at_exit() {
    if AUTOSTARTED.load(Ordering::Acquire) == sys::getpid() && session::session_running() {
        if let Err(e) = session::stop() {
            sys::write_stderr(format!("breakdance: writing the profile failed: {e}\n").as_bytes());
        }
    }
    if SOCKET_OWNER.load(Ordering::Acquire) == sys::getpid() {
        if let Some(p) = SOCKET_PATH.get() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The guard first, then the heap: a holder of the guard may allocate,
/// and the heap's holders never take the guard.
extern "C" fn before_fork() {
    crate::sync::before_fork();
    crate::alloc::before_fork();
}

extern "C" fn after_fork_in_parent() {
    crate::alloc::after_fork();
    crate::sync::after_fork_in_parent();
}

/// The fork hook, in the child: forget the parent's session, close the
/// library's copies of the parent's descriptors, start nothing (see the
/// module doc).
extern "C" fn after_fork_in_child() {
    crate::alloc::after_fork();
    crate::quiet::reset_after_fork();
    session::reset_after_fork();
    terminate::reset_after_fork();
    crate::emulate::code::reset_after_fork();
    AUTOSTARTED.store(0, Ordering::Release);
    let listener = LISTENER_FD.swap(-1, Ordering::AcqRel);
    if listener >= 0 {
        sys::close_raw(listener);
    }
}

extern "C" fn init() {
    if !preloaded() || super::mark_preloaded() {
        return;
    }
    crate::panic::install_hook();
    match env("BREAKDANCE_FAILPOINT").as_deref() {
        Some("sample-panic") => {
            crate::trace::handler::PANIC_AT_SAMPLE.store(true, Ordering::Relaxed);
        }
        Some("slow-handler") => crate::trace::set_slow_handler(),
        _ => {}
    }
    crate::trace::set_measure(env("BREAKDANCE_MEASURE").as_deref());
    sys::warm_sigaction();
    // Resolved now, so that no interposer looks a symbol up later, in
    // whatever context the application calls it.
    real_pthread_create();
    real_signal();
    real_raise();
    real_pthread_kill();
    thread_exit_key();
    sys::at_fork(before_fork, after_fork_in_parent, after_fork_in_child);
    sys::at_exit(at_exit);
    start_control_thread();
    if env("BREAKDANCE_AUTOSTART").as_deref() == Some("1") {
        let started =
            autostart_options().and_then(|o| session::start(&o).map_err(|e| e.to_string()));
        match started {
            Ok(_) => {
                AUTOSTARTED.store(sys::getpid(), Ordering::Release);
                if SOCKET_PATH.get().is_some() {
                    terminate::install();
                }
            }
            Err(e) => sys::write_stderr(format!("breakdance: not profiling: {e}\n").as_bytes()),
        }
    }
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

type StartRoutine = extern "C" fn(*mut c_void) -> *mut c_void;
type RealPthreadCreate = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    StartRoutine,
    *mut c_void,
) -> i32;

fn next_symbol(name: &std::ffi::CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
    let sym = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if sym.is_null() {
        crate::fatal(b"breakdance: a C library symbol it wraps is missing\n");
    }
    sym
}

/// Defines `fn $name() -> $ty`: the C library's `$symbol` (the definition
/// after this library's), looked up once.
macro_rules! real_fn {
    ($name:ident, $ty:ty, $symbol:literal) => {
        fn $name() -> $ty {
            static REAL: OnceLock<usize> = OnceLock::new();
            let sym = *REAL.get_or_init(|| next_symbol($symbol) as usize);
            // SAFETY: the symbol is the C library's function of that name,
            // whose type `$ty` is.
            unsafe { std::mem::transmute::<usize, $ty>(sym) }
        }
    };
}

real_fn!(real_pthread_create, RealPthreadCreate, c"pthread_create");

type UnwindingStartRoutine = extern "C-unwind" fn(*mut c_void) -> *mut c_void;

struct Start {
    routine: StartRoutine,
    arg: *mut c_void,
}

/// The key whose destructor closes a traced thread's slot as it ends: the
/// C library runs it for every end of a thread it created (return from the
/// start routine, pthread_exit, cancellation).
fn thread_exit_key() -> libc::pthread_key_t {
    static KEY: OnceLock<libc::pthread_key_t> = OnceLock::new();
    *KEY.get_or_init(|| {
        let mut key = 0;
        // SAFETY: a valid out-pointer and a destructor that lives as long
        // as the library (which is never unloaded: it is preloaded).
        if unsafe { libc::pthread_key_create(&mut key, Some(thread_ending)) } != 0 {
            crate::fatal(b"breakdance: cannot create a thread-specific key\n");
        }
        key
    })
}

unsafe extern "C" fn thread_ending(_value: *mut c_void) {
    threads::unregister_current_thread();
}

/// The start routine of a traced thread: registers it, arms its exit hook
/// and runs the application's routine.
///
/// pthread_exit and cancellation end the thread by unwinding through this
/// frame, so it is "C-unwind" and holds nothing to drop when the
/// application's routine runs (a plain old frame): the box is consumed
/// before, and the slot is closed by the key's destructor, not here.
extern "C-unwind" fn traced_thread(start: *mut c_void) -> *mut c_void {
    // SAFETY: made by Box::into_raw in pthread_create below, used once;
    // moving out of it frees it at the end of this statement.
    let Start { routine, arg } = *unsafe { Box::from_raw(start.cast::<Start>()) };
    if threads::register_current_thread() {
        // SAFETY: a key made by thread_exit_key; any non-null value arms
        // the destructor.
        unsafe { libc::pthread_setspecific(thread_exit_key(), std::ptr::dangling::<c_void>()) };
    }
    // SAFETY: the same function, called with the C ABI it was given as; C
    // code may leave it by forced unwinding, which "C-unwind" allows.
    let routine: UnwindingStartRoutine = unsafe { std::mem::transmute(routine) };
    routine(arg)
}

/// Interposed pthread_create: while a session runs, the new thread
/// registers itself before running the application's start routine.
///
/// # Safety
/// As pthread_create(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    routine: StartRoutine,
    arg: *mut c_void,
) -> i32 {
    let real = real_pthread_create();
    let own = threads::is_own_thread(sys::gettid());
    if !own {
        crate::quiet::thread_created();
    }
    if !session::session_running() || own {
        // SAFETY: forwarded contract.
        return unsafe { real(thread, attr, routine, arg) };
    }
    let start = Box::into_raw(Box::new(Start { routine, arg }));
    // SAFETY: the same ABI but for unwinding, which C allows through it.
    let wrapper: StartRoutine =
        unsafe { std::mem::transmute(traced_thread as UnwindingStartRoutine) };
    // SAFETY: forwarded contract; traced_thread takes ownership of start.
    let ret = unsafe { real(thread, attr, wrapper, start.cast()) };
    if ret != 0 {
        // SAFETY: the thread was not created; the box is still ours.
        drop(unsafe { Box::from_raw(start) });
    }
    ret
}

type RealRaise = unsafe extern "C" fn(i32) -> i32;
type RealPthreadKill = unsafe extern "C" fn(libc::pthread_t, i32) -> i32;

real_fn!(real_raise, RealRaise, c"raise");

real_fn!(real_pthread_kill, RealPthreadKill, c"pthread_kill");

/// Interposed raise: a SIGTRAP the application raises at itself could be
/// dropped by the kernel for one of the tracer's raised just before
/// (`handler::raise_sigtrap` sends it, or notes it as owed).
/// Async-signal-safe, as raise is: system calls and atomics only.
///
/// # Safety
/// As raise(3).
#[no_mangle]
pub unsafe extern "C" fn raise(sig: i32) -> i32 {
    if sig == libc::SIGTRAP && session::session_running() && crate::trace::handler::raise_sigtrap()
    {
        return 0;
    }
    // SAFETY: forwarded contract.
    unsafe { real_raise()(sig) }
}

/// Interposed pthread_kill: as `raise`, for a SIGTRAP the calling thread
/// sends itself.
///
/// # Safety
/// As pthread_kill(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_kill(thread: libc::pthread_t, sig: i32) -> i32 {
    // SAFETY: pthread_self cannot fail.
    if sig == libc::SIGTRAP
        && session::session_running()
        && thread == unsafe { libc::pthread_self() }
        && crate::trace::handler::raise_sigtrap()
    {
        return 0;
    }
    // SAFETY: forwarded contract.
    unsafe { real_pthread_kill()(thread, sig) }
}

/// Interposed sigaction: the actions of the signals the tracer handles
/// (SIGTRAP, and the fault signals of `chain::FAULTS`) are kept for chaining
/// while our handler is installed; the application's handlers for
/// asynchronous signals are wrapped (`quiet::wrap`).
///
/// # Safety
/// As sigaction(2).
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: i32,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> i32 {
    // SAFETY: the caller passes null or valid pointers.
    let (new, mut old_out) = unsafe { (act.as_ref(), old.as_mut()) };
    let wrapping = super::is_preloaded();
    if let Some(a) = new {
        note_handler(wrapping, sig, a.sa_sigaction);
    }
    if chain::intercept(sig, new, old_out.as_deref_mut()) {
        return 0;
    }
    if terminate::intercept(sig, new.is_some(), old_out.as_deref_mut()) {
        // Our terminate handler stood for the default action (reported
        // as the old one); the application's new action replaces it.
        if new.is_none() {
            return 0;
        }
        old_out = None;
    }
    let wrapped = if wrapping {
        wrap::sigaction(sig, new, old_out.as_deref_mut())
    } else {
        None
    };
    // SAFETY: forwarded contract.
    let result = wrapped.unwrap_or_else(|| unsafe {
        sys::real_sigaction(
            sig,
            act,
            old_out.map_or(std::ptr::null_mut(), |o| o as *mut libc::sigaction),
        )
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            sys::set_errno(e.0);
            -1
        }
    }
}

/// Tells `quiet` of a handler about to be installed, unless it will be
/// wrapped (`wrapping`: the library is preloaded, and wraps what
/// `wrap::wraps` takes).
fn note_handler(wrapping: bool, sig: i32, handler: libc::sighandler_t) {
    if !(wrapping && wrap::wraps(sig, handler)) {
        crate::quiet::handler_installed(sig, handler);
    }
}

type RealSignal = unsafe extern "C" fn(i32, libc::sighandler_t) -> libc::sighandler_t;

/// Interposed signal: as sigaction, for the older interface (glibc's
/// `signal` does not go through the exported `sigaction`). The action is
/// glibc's: SA_RESTART, with the signal blocked while its handler runs
/// (a signal `siginterrupt` made interrupting is not told apart).
///
/// # Safety
/// As signal(2).
#[no_mangle]
pub unsafe extern "C" fn signal(sig: i32, handler: libc::sighandler_t) -> libc::sighandler_t {
    let wrapping = super::is_preloaded();
    note_handler(wrapping, sig, handler);
    // SAFETY: plain data, all-zero is valid.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = libc::SA_RESTART;
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    if chain::CHAINED.contains(&sig) && chain::intercept(sig, Some(&act), Some(&mut old)) {
        return old.sa_sigaction;
    }
    if sig > 0 && sig <= 64 {
        sys::sigset_add(&mut act.sa_mask, sig);
    }
    let ours = terminate::intercept(sig, true, None);
    let wrapped = if wrapping {
        wrap::sigaction(sig, Some(&act), Some(&mut old))
    } else {
        None
    };
    let result = match (wrapped, ours) {
        (Some(r), _) => r.map(|()| old.sa_sigaction),
        // SAFETY: a valid action.
        (None, true) => {
            unsafe { sys::real_sigaction(sig, &act, std::ptr::null_mut()) }.map(|()| libc::SIG_DFL)
        }
        // SAFETY: the C library's signal, forwarded contract.
        (None, false) => return unsafe { real_signal()(sig, handler) },
    };
    match result {
        // Our terminate handler stood for the default action.
        Ok(_) if ours => libc::SIG_DFL,
        Ok(previous) => previous,
        Err(e) => {
            sys::set_errno(e.0);
            libc::SIG_ERR
        }
    }
}

real_fn!(real_signal, RealSignal, c"signal");

/// Interposed `_exit`: programs that leave through `_exit` (shells do)
/// skip atexit handlers, so an autostarted session would lose its profile.
///
/// `_exit` is called from anywhere: signal handlers, forked and vforked
/// children, a thread interrupted while it held a lock. So this does only
/// what is safe in every one of them, with system calls alone (no lock,
/// allocation, file write or symbol lookup here):
///
/// - in the process whose session was autostarted, while it runs: ask the
///   control thread over the control socket to stop and write the profile,
///   and wait for its answer, at most `terminate::WRITE_TIMEOUT_S` (the
///   writing happens on the control thread, in its own context; should it
///   block, on a lock the caller holds, the wait ends and the process
///   exits without the profile);
/// - in that process, remove the control socket it created;
/// - then exit_group, which is what the C library's `_exit` does.
///
/// A fork or vfork child (another pid) does nothing but exit: the session
/// and the socket are its parent's.
///
/// # Safety
/// As _exit(2).
#[no_mangle]
pub unsafe extern "C" fn _exit(status: i32) -> ! {
    let pid = sys::getpid();
    if AUTOSTARTED.load(Ordering::Acquire) == pid && session::session_running() {
        terminate::ask_to_stop();
    }
    if SOCKET_OWNER.load(Ordering::Acquire) == pid {
        if let Some(path) = terminate::socket_path_bytes() {
            sys::unlink_raw(path);
        }
    }
    sys::exit_group(status)
}
