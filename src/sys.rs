//! The only module that makes syscalls, ioctls and sigaction calls.
//!
//! Every function here that the signal handlers reach is a thin wrapper over
//! one raw syscall: no allocation, no locks, errno untouched on success.
//! Failures come back as [`Errno`], built by the one helper [`check`].

use std::ffi::c_void;
use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use perf_event_open_sys::bindings as pb;

pub mod probe;
pub mod raw;

pub use pb::perf_event_attr as PerfEventAttr;

/// `si_code` of a SIGTRAP raised by a perf event with `attr.sigtrap` set
/// (include/uapi/asm-generic/siginfo.h).
pub const TRAP_PERF: i32 = 6;
/// `si_code` of a SIGTRAP the kernel raised for a debug exception it did
/// not hand to perf: TRAP_BRKPT when DR6 gave no reason, TRAP_HWBKPT for a
/// breakpoint register perf did not claim.
pub const TRAP_BRKPT: i32 = 1;
pub const TRAP_HWBKPT: i32 = 4;

/// An OS error number, as read from errno right after a failed call.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// The symbolic name of common errnos, for messages a user reads.
    pub fn name(self) -> &'static str {
        match self.0 {
            libc::EPERM => "EPERM",
            libc::ENOENT => "ENOENT",
            libc::EACCES => "EACCES",
            libc::EINVAL => "EINVAL",
            libc::ENOSPC => "ENOSPC",
            libc::EBUSY => "EBUSY",
            libc::ESRCH => "ESRCH",
            libc::EMFILE => "EMFILE",
            libc::ENODEV => "ENODEV",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            _ => "errno",
        }
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = std::io::Error::from_raw_os_error(self.0);
        write!(f, "{} ({text})", self.name())
    }
}

/// The current thread's errno. Async-signal-safe.
pub fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// Overwrites this thread's errno. Async-signal-safe; the handlers use it to
/// give the application back the errno it had when the signal arrived.
pub fn set_errno(value: i32) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = value }
}

/// Turns a raw syscall's -errno into a `Result`.
fn check_raw(ret: i64) -> Result<i64, Errno> {
    if (-4095..0).contains(&ret) {
        Err(Errno(-ret as i32))
    } else {
        Ok(ret)
    }
}

/// Turns the -1-and-errno convention into a `Result`.
fn check(ret: libc::c_long) -> Result<libc::c_long, Errno> {
    if ret < 0 {
        Err(Errno(errno()))
    } else {
        Ok(ret)
    }
}

/// The caller's kernel thread id. Async-signal-safe (a raw syscall: see
/// `raw`).
pub fn gettid() -> i32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { raw::syscall4(libc::SYS_gettid, 0, 0, 0, 0) as i32 }
}

pub fn getpid() -> i32 {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() }
}

/// Whether thread `tid` of this process still exists.
pub fn thread_alive(tid: i32) -> bool {
    // SAFETY: signal 0 only checks that the target exists.
    let ret = unsafe { libc::syscall(libc::SYS_tgkill, getpid(), tid, 0) };
    ret == 0 || errno() != libc::ESRCH
}

/// Sends `sig` to thread `tid` of this process. Async-signal-safe.
pub fn tgkill(tid: i32, sig: i32) -> Result<(), Errno> {
    // SAFETY: getpid cannot fail; tgkill with our own pid only targets
    // threads of this process.
    unsafe {
        let pid = raw::syscall4(libc::SYS_getpid, 0, 0, 0, 0);
        check_raw(raw::syscall4(
            libc::SYS_tgkill,
            pid as u64,
            tid as u64,
            sig as u64,
            0,
        ))
        .map(drop)
    }
}

/// Queues `sig` with the siginfo `info` to the calling thread
/// (rt_tgsigqueueinfo: the kernel lets a thread send itself any code).
/// Async-signal-safe.
pub fn requeue_own_signal(sig: i32, info: &libc::siginfo_t) -> Result<(), Errno> {
    // SAFETY: getpid and gettid cannot fail; the kernel copies `info` and
    // targets only this thread.
    unsafe {
        let pid = raw::syscall4(libc::SYS_getpid, 0, 0, 0, 0);
        let tid = raw::syscall4(libc::SYS_gettid, 0, 0, 0, 0);
        check_raw(raw::syscall4(
            libc::SYS_rt_tgsigqueueinfo,
            pid as u64,
            tid as u64,
            sig as u64,
            info as *const libc::siginfo_t as u64,
        ))
        .map(drop)
    }
}

/// Clock `id` in nanoseconds. Async-signal-safe (clock_gettime is on the
/// POSIX list; on Linux it is a vDSO call).
fn clock_ns(id: libc::clockid_t) -> u64 {
    read_clock(id).unwrap_or(0)
}

/// Clock `id` in ns; `None` where it cannot be read (another thread's CPU
/// clock once the thread is gone). Async-signal-safe.
fn read_clock(id: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    if unsafe { libc::clock_gettime(id, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// CPU time the calling thread has used, in ns.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time thread `tid` of this process has used, in ns; `None` when it
/// is gone. Async-signal-safe.
pub fn thread_cpu_ns_of(tid: i32) -> Option<u64> {
    // The kernel's clock id for a thread's CPU clock, as glibc's
    // pthread_getcpuclockid makes it: the tid inverted and shifted, with
    // CPUCLOCK_SCHED (2) and the per-thread bit (4).
    read_clock(((!tid) << 3) | 6)
}

/// How long `fd`'s event has been enabled, from a read of an event opened
/// with `PERF_FORMAT_TOTAL_TIME_ENABLED` alone: for a thread's event, the
/// thread's CPU time while the event was on (the context's clock runs only
/// while the thread does). Async-signal-safe.
pub fn perf_time_enabled(fd: RawFd) -> Option<u64> {
    let mut v = [0u64; 2];
    // SAFETY: reads at most 16 bytes into v.
    let n = unsafe { raw::syscall4(libc::SYS_read, fd as u64, v.as_mut_ptr() as u64, 16, 0) };
    (n == 16).then_some(v[1])
}

/// Whether SIGTRAP is blocked on the calling thread. Async-signal-safe
/// (a raw rt_sigprocmask that only reads the mask).
pub fn sigtrap_blocked() -> bool {
    let mut old = 0u64;
    // SAFETY: with no new set, rt_sigprocmask only writes the current
    // mask (8 bytes) into `old`.
    let ret = unsafe {
        raw::syscall4(
            libc::SYS_rt_sigprocmask,
            libc::SIG_BLOCK as u64,
            0,
            &mut old as *mut u64 as u64,
            8,
        )
    };
    ret == 0 && old & (1 << (libc::SIGTRAP - 1)) != 0
}

/// Whether a SIGTRAP waits for the calling thread (blocked, as in one of
/// its handlers). Async-signal-safe (a raw syscall: see `raw`).
pub fn sigtrap_pending() -> bool {
    let mut set = 0u64;
    // SAFETY: rt_sigpending writes the kernel's 8-byte set into `set`.
    let ret = unsafe {
        raw::syscall4(
            libc::SYS_rt_sigpending,
            &mut set as *mut u64 as u64,
            8,
            0,
            0,
        )
    };
    ret == 0 && set & (1 << (libc::SIGTRAP - 1)) != 0
}

/// A zeroed slice of `n` `T`s in an anonymous mapping of its own, its
/// start on an `align` boundary (a power of two; past 4096 the mapping is
/// padded to whole `align` regions, with one more to align within). Its
/// pages are the kernel's fresh zero pages, touched only as they are used,
/// whatever the allocator's state: calloc hands out heap memory, which it
/// clears by writing, once a free has raised glibc's mmap threshold. Never
/// unmapped: the tables made so live as long as the process. Panics if the
/// mapping fails.
///
/// # Safety
/// All-zero bytes must be a valid `T`.
pub unsafe fn zeroed_static_slice<T>(n: usize, align: usize) -> &'static [T] {
    const PAGE: usize = 4096;
    debug_assert!(align.is_power_of_two());
    let bytes = std::mem::size_of::<T>() * n;
    let (len, align) = if align > PAGE {
        (bytes.div_ceil(align) * align + align, align)
    } else {
        (bytes.div_ceil(PAGE).max(1) * PAGE, PAGE)
    };
    // SAFETY: an anonymous private mapping of fresh zero pages; the slice
    // made from it lies inside it (the start is rounded up to `align`
    // within the spare region at the end), is zeroed, which the caller
    // vouches is a valid T, and is never unmapped.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert!(
            p != libc::MAP_FAILED,
            "mapping {len} bytes for a table: {}",
            std::io::Error::last_os_error()
        );
        let at = (p as usize).div_ceil(align) * align;
        std::slice::from_raw_parts(at as *const T, n)
    }
}

/// `len` bytes of fresh zero pages in an anonymous private mapping of
/// their own; null when the kernel refuses. The library's heap takes its
/// large blocks so (`crate::alloc`): they are zero without a write, and
/// their pages are touched only as they are used.
pub fn map_pages(len: usize) -> *mut u8 {
    // SAFETY: an anonymous mapping at an address the kernel picks; it
    // aliases nothing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

/// Resizes a mapping made by [`map_pages`], moving it when it must (its
/// contents go with it; new pages are zero). Null when the kernel refuses,
/// the old mapping then unchanged.
///
/// # Safety
/// `p` and `old_len` must be a whole mapping from [`map_pages`] (or a
/// resize of one) that nothing refers to past this call but the result.
pub unsafe fn remap_pages(p: *mut u8, old_len: usize, new_len: usize) -> *mut u8 {
    // SAFETY: the caller owns the whole mapping.
    let q = unsafe { libc::mremap(p.cast(), old_len, new_len, libc::MREMAP_MAYMOVE) };
    if q == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        q.cast()
    }
}

/// Unmaps a mapping made by [`map_pages`].
///
/// # Safety
/// As for [`remap_pages`]: nothing refers to it afterwards.
pub unsafe fn unmap_pages(p: *mut u8, len: usize) {
    // SAFETY: the caller owns the whole mapping.
    unsafe { libc::munmap(p.cast(), len) };
}

/// Monotonic time in nanoseconds. Async-signal-safe.
pub fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Whether the CPU and kernel let user code read the fs/gs bases with
/// rdfsbase/rdgsbase (AT_HWCAP2's FSGSBASE bit, Linux 5.9+): 0 unknown,
/// 1 yes, 2 no.
static FSGSBASE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
const HWCAP2_FSGSBASE: u64 = 1 << 1;

/// Finds out how to read segment bases, before any handler needs them.
pub fn warm_segment_bases() {
    // SAFETY: getauxval has no preconditions.
    let hwcap2 = unsafe { libc::getauxval(libc::AT_HWCAP2) };
    let v = if hwcap2 & HWCAP2_FSGSBASE != 0 { 1 } else { 2 };
    FSGSBASE.store(v, std::sync::atomic::Ordering::Relaxed);
}

fn arch_prctl_get(code: u64) -> u64 {
    let mut v = 0u64;
    // SAFETY: ARCH_GET_FS/GS write one u64 to the pointer given.
    unsafe { raw::syscall4(libc::SYS_arch_prctl, code, &mut v as *mut u64 as u64, 0, 0) };
    v
}

/// The calling thread's fs base (its thread pointer). Async-signal-safe:
/// one instruction, or one raw syscall on kernels without FSGSBASE.
pub fn fs_base() -> u64 {
    if FSGSBASE.load(std::sync::atomic::Ordering::Relaxed) == 1 {
        let v: u64;
        // SAFETY: AT_HWCAP2 says the kernel enabled rdfsbase for user mode.
        unsafe { std::arch::asm!("rdfsbase {}", out(reg) v, options(nomem, nostack)) };
        v
    } else {
        arch_prctl_get(0x1003) // ARCH_GET_FS
    }
}

/// The calling thread's gs base. Async-signal-safe, as [`fs_base`].
pub fn gs_base() -> u64 {
    if FSGSBASE.load(std::sync::atomic::Ordering::Relaxed) == 1 {
        let v: u64;
        // SAFETY: as in `fs_base`.
        unsafe { std::arch::asm!("rdgsbase {}", out(reg) v, options(nomem, nostack)) };
        v
    } else {
        arch_prctl_get(0x1004) // ARCH_GET_GS
    }
}

/// Writes all of `bytes` to stderr with write(2), no buffering, no locks.
pub fn write_stderr(bytes: &[u8]) {
    let mut rest = bytes;
    while !rest.is_empty() {
        // SAFETY: rest is a valid readable slice.
        let n = unsafe { libc::write(2, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            return;
        }
        rest = &rest[n as usize..];
    }
}

/// A blank attribute of the running kernel's size.
pub fn blank_attr() -> PerfEventAttr {
    // SAFETY: perf_event_attr is plain data; all-zero is its documented default.
    let mut attr: PerfEventAttr = unsafe { std::mem::zeroed() };
    attr.size = std::mem::size_of::<PerfEventAttr>() as u32;
    attr
}

/// Opens a perf event on thread `tid` (0: the caller) of this process.
/// Async-signal-safe (a raw syscall: a handler renews its breakpoint
/// event with it).
pub fn perf_event_open(attr: &mut PerfEventAttr, tid: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: attr is a valid, fully initialised attribute of the size it
    // declares; cpu -1 and no group; the flags ask for a close-on-exec fd
    // we take ownership of.
    let fd = check_raw(unsafe {
        raw::syscall5(
            libc::SYS_perf_event_open,
            attr as *mut PerfEventAttr as u64,
            tid as i64 as u64,
            -1i64 as u64,
            -1i64 as u64,
            pb::PERF_FLAG_FD_CLOEXEC as u64,
        )
    })?;
    // SAFETY: the kernel just returned this fd to us and nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Closes `fd` with a raw syscall. Async-signal-safe (dropping an
/// `OwnedFd` calls libc's close, which a handler must not run).
pub fn close_owned(fd: OwnedFd) {
    use std::os::fd::IntoRawFd;
    close_raw(fd.into_raw_fd());
}

/// `PERF_EVENT_IOC_REFRESH`: enable `fd` for `overflows` more overflows, then
/// let the kernel disable it again. Async-signal-safe.
pub fn perf_refresh(fd: RawFd, overflows: i32) -> Result<(), Errno> {
    ioctl(fd, pb::REFRESH as u64, overflows as u64)
}

/// A perf ioctl as a raw syscall (see `raw`). Async-signal-safe.
fn ioctl(fd: RawFd, request: u64, arg: u64) -> Result<(), Errno> {
    // SAFETY: perf ioctls on a perf fd; `arg` is a value or a pointer the
    // caller keeps valid; a wrong fd only yields EBADF/ENOTTY.
    check_raw(unsafe { raw::syscall4(libc::SYS_ioctl, fd as u64, request, arg, 0) }).map(drop)
}

/// `PERF_EVENT_IOC_PERIOD`: a new sample period, from the next one on.
/// Async-signal-safe.
pub fn perf_set_period(fd: RawFd, period: u64) -> Result<(), Errno> {
    // The kernel reads the new period through a pointer (_IOW of a u64);
    // perf-event-open-sys types the argument as the u64 itself, so the
    // pointer goes in its place.
    ioctl(fd, pb::PERIOD as u64, &period as *const u64 as u64)
}

/// `PERF_EVENT_IOC_DISABLE`. Async-signal-safe.
pub fn perf_disable(fd: RawFd) -> Result<(), Errno> {
    ioctl(fd, pb::DISABLE as u64, 0)
}

/// `PERF_EVENT_IOC_ENABLE`. Async-signal-safe.
pub fn perf_enable(fd: RawFd) -> Result<(), Errno> {
    ioctl(fd, pb::ENABLE as u64, 0)
}

/// `PERF_EVENT_IOC_MODIFY_ATTRIBUTES` for a breakpoint event: the kernel
/// accepts a change of `bp_addr`, `bp_type`, `bp_len` and `disabled` only, so
/// `attr` must be the attribute the event was opened with, edited in those
/// fields. With `disabled == 0` the moved breakpoint is also enabled (one
/// syscall per move). Async-signal-safe.
pub fn perf_modify_attributes(fd: RawFd, attr: &mut PerfEventAttr) -> Result<(), Errno> {
    ioctl(
        fd,
        pb::MODIFY_ATTRIBUTES as u64,
        attr as *mut PerfEventAttr as u64,
    )
}

/// A signal handler taking siginfo and ucontext.
pub type SigactionFn = extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void);

/// The C library's `sigaction` as found behind ours: the library exports its
/// own `sigaction` so that the application's SIGTRAP handler is chained rather
/// than installed over ours, and must itself call the real one.
type RealSigaction = unsafe extern "C" fn(i32, *const libc::sigaction, *mut libc::sigaction) -> i32;

static REAL_SIGACTION: std::sync::OnceLock<RealSigaction> = std::sync::OnceLock::new();

fn real_sigaction_fn() -> RealSigaction {
    *REAL_SIGACTION.get_or_init(|| {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name; the symbol
        // is libc's sigaction, whose type is RealSigaction.
        unsafe {
            let sym = libc::dlsym(libc::RTLD_NEXT, c"sigaction".as_ptr());
            if sym.is_null() {
                crate::fatal(b"breakdance: cannot find the C library's sigaction\n");
            }
            std::mem::transmute::<*mut c_void, RealSigaction>(sym)
        }
    })
}

/// Resolves the real sigaction now, so that no later caller (a handler among
/// them) runs dlsym.
pub fn warm_sigaction() {
    real_sigaction_fn();
}

/// Calls the C library's sigaction, bypassing the library's interposer.
///
/// # Safety
/// `act` and `old` must be null or valid; installing a handler is the
/// caller's responsibility to make sound.
pub unsafe fn real_sigaction(
    sig: i32,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> Result<(), Errno> {
    // SAFETY: forwarded contract.
    check(unsafe { real_sigaction_fn()(sig, act, old) } as libc::c_long).map(drop)
}

/// The signals a handler blocks while it runs (besides its own signal,
/// which the kernel blocks unless SA_NODEFER).
#[derive(Clone, Copy, Debug)]
pub enum Blocked<'a> {
    /// These signals only.
    These(&'a [i32]),
    /// Every signal but those a fault raises (SIGSEGV, SIGBUS, SIGILL,
    /// SIGFPE, SIGSYS): a fault with its signal blocked kills the process,
    /// so those stay deliverable.
    AllButFaults,
}

/// Signals a fault raises synchronously.
pub const FAULT_SIGNALS: [i32; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGSYS,
];

impl Blocked<'_> {
    pub fn mask(self) -> libc::sigset_t {
        // SAFETY: sigset_t is plain data; sigemptyset/sigfillset initialise it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset for all the calls below.
        unsafe {
            match self {
                Blocked::These(signals) => {
                    libc::sigemptyset(&mut set);
                    for &s in signals {
                        libc::sigaddset(&mut set, s);
                    }
                }
                Blocked::AllButFaults => {
                    libc::sigfillset(&mut set);
                    for s in FAULT_SIGNALS {
                        libc::sigdelset(&mut set, s);
                    }
                    // glibc's sigfillset leaves out its two internal
                    // signals (32: thread cancellation, 33: set*id), and
                    // its sigaddset refuses them; asynchronous cancellation
                    // must not unwind a thread out of the handler either.
                    // The kernel's mask is the first 64 bits.
                    let bits = (&mut set as *mut libc::sigset_t).cast::<u64>();
                    *bits |= (1u64 << (32 - 1)) | (1u64 << (33 - 1));
                }
            }
        }
        set
    }
}

/// Installs `handler` for `sig` with SA_SIGINFO | SA_RESTART and `flags`,
/// blocking `blocked` while it runs, and returns the previous action.
pub fn install_handler(
    sig: i32,
    handler: SigactionFn,
    blocked: Blocked,
    flags: i32,
) -> Result<libc::sigaction, Errno> {
    // SAFETY: sigaction structs are plain data; zero is a valid empty mask.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler as usize;
    act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | flags;
    act.sa_mask = blocked.mask();
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: act and old are valid; the handler is async-signal-safe.
    unsafe { real_sigaction(sig, &act, &mut old)? };
    Ok(old)
}

/// Calls a handler the application installed (`sa_sigaction`, with its
/// `sa_flags`) as the kernel would have: an SA_SIGINFO handler with the
/// siginfo and context, a plain one with the signal alone.
///
/// # Safety
/// `handler` is a function the application installed for `sig` with
/// `flags`; `info` and `ctx` are the kernel's for this delivery.
pub unsafe fn call_handler(
    handler: libc::sighandler_t,
    flags: i32,
    sig: i32,
    info: *mut libc::siginfo_t,
    ctx: *mut c_void,
) {
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the caller vouches it is an SA_SIGINFO handler.
        let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the caller vouches it is a plain handler.
        let f: extern "C" fn(i32) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
}

/// Replaces the calling thread's signal mask, returning the old one (the
/// raw rt_sigprocmask: async-signal-safe, no libc bookkeeping).
pub fn set_signal_mask(mask: &libc::sigset_t) -> libc::sigset_t {
    // SAFETY: plain data.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigsets of the kernel's size (8 bytes on x86-64).
    unsafe {
        raw::syscall4(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as u64,
            mask as *const libc::sigset_t as u64,
            &mut old as *mut libc::sigset_t as u64,
            8,
        )
    };
    old
}

/// The kernel's part of a sigset (signals 1 to 64, bit n - 1 for signal n).
fn kernel_bits(set: &mut libc::sigset_t) -> &mut u64 {
    // SAFETY: sigset_t is at least 8 bytes and 8-aligned on x86-64; its
    // first 8 bytes are what the kernel reads.
    unsafe { &mut *(set as *mut libc::sigset_t).cast::<u64>() }
}

/// Adds `sig` to `set` without calling libc. Async-signal-safe.
pub fn sigset_add(set: &mut libc::sigset_t, sig: i32) {
    *kernel_bits(set) |= 1u64 << ((sig - 1) & 63);
}

/// Whether `sig` is in `set`, without calling libc. Async-signal-safe.
pub fn sigset_has(set: &libc::sigset_t, sig: i32) -> bool {
    let mut s = *set;
    *kernel_bits(&mut s) & (1u64 << ((sig - 1) & 63)) != 0
}

/// Adds every signal of `other` to `set`. Async-signal-safe.
pub fn sigset_union(set: &mut libc::sigset_t, other: &libc::sigset_t) {
    let mut o = *other;
    *kernel_bits(set) |= *kernel_bits(&mut o);
}

/// Ends the process at once with `status`: the exit_group system call,
/// which is what the C library's `_exit` is. Async-signal-safe; nothing to
/// resolve, no lock, no memory.
pub fn exit_group(status: i32) -> ! {
    // SAFETY: exit_group does not return.
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
    // Unreachable; keeps the type honest if the call ever returned.
    std::process::abort()
}

/// Closes a raw descriptor the library owns but holds no owned handle for
/// (the child of a fork closing its copies). Async-signal-safe.
pub fn close_raw(fd: RawFd) {
    // SAFETY: closing a descriptor number; the caller says it is ours.
    unsafe { raw::syscall4(libc::SYS_close, fd as u64, 0, 0, 0) };
}

/// Removes a file named by a NUL-terminated path. Async-signal-safe.
pub fn unlink_raw(path: &[u8]) {
    if path.last() == Some(&0) {
        // SAFETY: a NUL-terminated path.
        unsafe { libc::unlink(path.as_ptr().cast()) };
    }
}

/// The C library's running totals of objects loaded and unloaded (dlopen,
/// dlclose): when either changed, the mappings of code changed. Not for
/// handlers (dl_iterate_phdr takes the loader's lock).
pub fn loaded_object_changes() -> (u64, u64) {
    extern "C" fn first(info: *mut libc::dl_phdr_info, size: usize, out: *mut c_void) -> i32 {
        let enough =
            std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + std::mem::size_of::<u64>();
        if size >= enough {
            // SAFETY: the C library passes a valid info of `size` bytes and
            // our out-pointer.
            unsafe {
                let info = &*info;
                *out.cast::<(u64, u64)>() = (info.dlpi_adds, info.dlpi_subs);
            }
        }
        1 // the counts are the same in every entry: stop at the first
    }
    let mut counts = (0u64, 0u64);
    // SAFETY: a valid callback and out-pointer for the duration of the call.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut counts as *mut (u64, u64)).cast()) };
    counts
}

/// Sleeps until `word` is woken by [`futex_wake`] (or no longer holds
/// `expected`), at most `timeout`.
pub fn futex_wait(
    word: &std::sync::atomic::AtomicU32,
    expected: u32,
    timeout: std::time::Duration,
) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a futex wait on a valid, aligned u32 of this process.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
        )
    };
}

/// Wakes a thread sleeping in [`futex_wait`] on `word`. Async-signal-safe
/// (one system call).
pub fn futex_wake(word: &std::sync::atomic::AtomicU32) {
    // SAFETY: a futex wake on a valid, aligned u32 of this process (raw:
    // a handler calls this).
    unsafe {
        raw::syscall4(
            libc::SYS_futex,
            word.as_ptr() as u64,
            (libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG) as u64,
            1,
            0,
        )
    };
}

/// Puts back the default action of `sig` and sends `sig` to the calling
/// thread: once the current handler returns, the process ends the way it
/// would have without us. Async-signal-safe.
pub fn reraise_default(sig: i32) {
    set_default_action(sig);
    let _ = tgkill(gettid(), sig);
}

/// Puts back the default action of `sig` (a fault handler then returns and
/// the faulting instruction runs again under it). Async-signal-safe.
pub fn set_default_action(sig: i32) {
    // The kernel's struct sigaction: handler, flags, restorer, mask. SIG_DFL
    // needs no restorer.
    let dfl = [0u64; 4];
    // SAFETY: a valid kernel sigaction of SIG_DFL; 8 is the kernel's
    // sigset size.
    unsafe {
        raw::syscall4(
            libc::SYS_rt_sigaction,
            sig as u64,
            dfl.as_ptr() as u64,
            0,
            8,
        )
    };
}

/// Reinstalls a previously saved action.
pub fn restore_action(sig: i32, action: &libc::sigaction) -> Result<(), Errno> {
    // SAFETY: the action was obtained from the kernel earlier.
    unsafe { real_sigaction(sig, action, std::ptr::null_mut()) }
}

/// The perf `sig_data` of a SIGTRAP raised by a perf event (si_perf_data,
/// the unsigned long right after si_addr in the fault layout of siginfo).
pub fn siginfo_perf_data(info: &libc::siginfo_t) -> u64 {
    // SAFETY: siginfo_t is 128 bytes; _sigfault._perf._data sits at byte 24
    // on x86-64 (signo, errno, code, padding, then si_addr at 16).
    unsafe {
        *((info as *const libc::siginfo_t)
            .cast::<u8>()
            .add(24)
            .cast::<u64>())
    }
}

/// `si_perf_flags` of a SIGTRAP raised by a perf event (the u32 after
/// si_perf_type), and its bit saying the signal was raised while the
/// thread blocked it (so delivered late). Linux 6.0 and later; 0 before.
pub const TRAP_PERF_FLAG_ASYNC: u32 = 1;

pub fn siginfo_perf_flags(info: &libc::siginfo_t) -> u32 {
    // SAFETY: siginfo_t is 128 bytes; _sigfault._perf is si_perf_data (u64
    // at 24), si_perf_type (u32 at 32), si_perf_flags (u32 at 36).
    unsafe {
        *((info as *const libc::siginfo_t)
            .cast::<u8>()
            .add(36)
            .cast::<u32>())
    }
}

/// Runs `f` (which spawns a thread) with every signal blocked in the
/// calling thread, so that the new thread starts with all signals blocked
/// and never takes a signal meant for the application's threads.
pub fn with_signals_blocked<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: sigset_t is plain data; sigfillset initialises it.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigset pointers; pthread_sigmask only changes this
    // thread's mask, and the old mask is put back below.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
    }
    let r = f();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    r
}

/// The thread ids of this process.
pub fn thread_ids() -> std::io::Result<Vec<i32>> {
    let mut tids = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")? {
        if let Some(tid) = entry?.file_name().to_str().and_then(|s| s.parse().ok()) {
            tids.push(tid);
        }
    }
    Ok(tids)
}

/// `kernel.perf_event_paranoid`, for error messages.
pub fn perf_event_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Who is at the other end of a connected Unix socket (SO_PEERCRED): the
/// process that connected, or for a client, the one that listened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
}

/// The credentials of the peer of a connected Unix socket.
pub fn peer_cred(fd: &impl AsRawFd) -> Result<PeerCred, Errno> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len are valid out-pointers of the sizes given.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    check(ret as libc::c_long)?;
    Ok(PeerCred {
        pid: cred.pid,
        uid: cred.uid,
    })
}

pub fn getuid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// The effective uid: the owner of the files and sockets this process
/// creates, and the uid SO_PEERCRED reports for it.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Creates a listening Unix stream socket at `path` whose file is mode 0600
/// from the moment it exists, and which listens from the moment it appears
/// at `path`.
///
/// The socket inode's mode is set before bind, which creates the file with
/// that mode (less the umask): a chmod after bind would leave a window in
/// which others could connect. And the socket is bound under a temporary
/// name beside `path`, made to listen, and only then renamed to `path`
/// (refusing to replace a file another process put there meanwhile): a
/// client that finds the path always finds a listener, where a bind at
/// `path` itself would refuse connections (ECONNREFUSED) until `listen`.
/// Where the temporary name would not fit in `sun_path`, or the file
/// system cannot rename without replacing, it binds at `path` directly.
pub fn bind_private_unix(
    path: &std::path::Path,
) -> std::io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::ffi::OsStrExt;
    use std::sync::atomic::{AtomicU32, Ordering};
    static SERIAL: AtomicU32 = AtomicU32::new(0);
    let limit = std::mem::size_of::<libc::sockaddr_un>() - std::mem::size_of::<libc::sa_family_t>();
    if path.as_os_str().len() >= limit || path.as_os_str().as_bytes().contains(&0) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a socket path must be shorter than {limit} bytes and hold no NUL"),
        ));
    }
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    let temporary = path
        .parent()
        .map(|dir| dir.join(format!(".bd-{}-{serial}.tmp", std::process::id())));
    let Some(temporary) = temporary.filter(|t| t.as_os_str().len() < limit) else {
        return listen_unix_at(path);
    };
    let _ = std::fs::remove_file(&temporary);
    let listener = listen_unix_at(&temporary)?;
    let c_path = |p: &std::path::Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes()).expect("no NUL: checked above")
    };
    let (from, to) = (c_path(&temporary), c_path(path));
    // SAFETY: both are NUL-terminated paths that live across the call.
    let renamed = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if renamed == 0 {
        return Ok(listener);
    }
    let e = std::io::Error::last_os_error();
    let _ = std::fs::remove_file(&temporary);
    match e.raw_os_error() {
        Some(libc::EEXIST) => Err(std::io::Error::from_raw_os_error(libc::EADDRINUSE)),
        Some(libc::EINVAL | libc::ENOSYS) => {
            drop(listener);
            listen_unix_at(path)
        }
        _ => Err(e),
    }
}

/// Binds a Unix stream socket at `path` (mode 0600 from the start) and
/// makes it listen. `path` fits `sun_path` and holds no NUL.
fn listen_unix_at(path: &std::path::Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket takes no pointers; the fd is owned at once.
    let fd = check(
        unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) }
            as libc::c_long,
    )
    .map_err(|e| std::io::Error::from_raw_os_error(e.0))?;
    // SAFETY: fd was just returned by socket and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let io = |ret: libc::c_int| {
        check(ret as libc::c_long)
            .map(drop)
            .map_err(|e| std::io::Error::from_raw_os_error(e.0))
    };
    // SAFETY: fchmod on our own socket fd changes its inode's mode only.
    io(unsafe { libc::fchmod(fd.as_raw_fd(), 0o600) })?;
    let len = (std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    // SAFETY: addr is a valid sockaddr_un of at least `len` bytes.
    io(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    })?;
    // SAFETY: listen on our own bound socket.
    io(unsafe { libc::listen(fd.as_raw_fd(), 128) })?;
    Ok(std::os::unix::net::UnixListener::from(fd))
}

/// Waits for events on `fds` for at most `timeout_ms` (-1: no limit).
/// Returns how many entries have events; EINTR counts as none.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> Result<usize, Errno> {
    // SAFETY: fds is a valid slice of pollfd of the length given.
    let ret = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    match check(ret as libc::c_long) {
        Ok(n) => Ok(n as usize),
        Err(Errno(libc::EINTR)) => Ok(0),
        Err(e) => Err(e),
    }
}

/// Sends bytes on a connected socket without blocking and without raising
/// SIGPIPE when the peer has gone. Returns how many were sent.
pub fn send_nonblocking(fd: &impl AsRawFd, bytes: &[u8]) -> Result<usize, Errno> {
    // SAFETY: bytes is a valid readable slice.
    let ret = unsafe {
        libc::send(
            fd.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    check(ret as libc::c_long).map(|n| n as usize)
}

/// The (device, inode) of an open descriptor: tells whether a descriptor
/// number still names the object it named before (an application that
/// closes every fd may have reused the number).
pub fn fd_identity(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: stat is plain data; zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid out-pointer; fstat only reads the fd.
    let ret = unsafe { libc::fstat(fd, &mut st) };
    (ret == 0).then_some((st.st_dev, st.st_ino))
}

/// Registers fork handlers (pthread_atfork).
pub fn at_fork(prepare: extern "C" fn(), parent: extern "C" fn(), child: extern "C" fn()) {
    // SAFETY: the handlers are plain extern "C" functions living as long as
    // the library (which is never unloaded: it is preloaded).
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}

/// Registers an exit handler (atexit).
pub fn at_exit(handler: extern "C" fn()) {
    // SAFETY: as in `at_fork`.
    unsafe { libc::atexit(handler) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_layout_matches_kernel_abi() {
        // PERF_ATTR_SIZE_VER8 is 136 bytes; sig_data sits at byte 120.
        assert!(std::mem::size_of::<PerfEventAttr>() >= 136);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, sig_data), 120);
        assert_eq!(std::mem::size_of::<libc::siginfo_t>(), 128);
    }

    #[test]
    fn the_handler_mask_blocks_all_but_faults() {
        let mask = Blocked::AllButFaults.mask();
        // SAFETY: a valid sigset.
        let has = |s| unsafe { libc::sigismember(&mask, s) } == 1;
        for s in [
            libc::SIGALRM,
            libc::SIGPROF,
            libc::SIGINT,
            libc::SIGTRAP,
            libc::SIGCHLD,
        ] {
            assert!(has(s), "signal {s} not blocked");
        }
        for s in FAULT_SIGNALS {
            assert!(!has(s), "fault signal {s} blocked");
        }
        // SAFETY: the first 64 bits are the kernel's mask.
        let bits = unsafe { *(&mask as *const libc::sigset_t).cast::<u64>() };
        assert_eq!(
            bits & (3 << 31),
            3 << 31,
            "glibc's internal signals 32 and 33"
        );
    }

    #[test]
    fn errno_display_names_it() {
        assert_eq!(
            format!("{}", Errno(libc::ENOENT)).split(' ').next(),
            Some("ENOENT")
        );
    }
}
