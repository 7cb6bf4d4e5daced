//! What the signal handlers may execute: nothing outside this library.
//!
//! The tracer's breakpoint can be armed on any instruction of a traced
//! module, libc included. If a handler called into libc (a syscall
//! wrapper, `__errno_location`, or a `memcpy` the compiler emitted for a
//! struct copy) while the breakpoint sat on that code, the breakpoint would
//! fire inside the handler, with SIGTRAP blocked; the trap would be
//! delivered as soon as the handler returned, at the application's pc,
//! with the application's registers — a stop the thread never made. (On
//! SQLite this was every `pc_mismatch` of the paper-mode runs: the first
//! jcc of glibc's AVX-512 memmove and memset, reached from the handler's
//! own struct copies.) So:
//!
//! - syscalls on the handler path are made here, with the `syscall`
//!   instruction (they return -errno and never touch errno, so the handler
//!   has no errno to save);
//! - `memcpy`, `memmove`, `memset`, `memcmp` and `bcmp` are defined here
//!   with hidden visibility: every call the library (and the Rust code
//!   linked into it) makes binds to these at link time, never to libc's,
//!   and nothing is exported to the application;
//! - time on the handler path is the TSC ([`ticks`]), not clock_gettime.

use std::arch::global_asm;

/// Raw syscall with up to four arguments: the result, or -errno.
///
/// # Safety
/// The caller upholds the syscall's own contract for its arguments.
#[inline(always)]
pub unsafe fn syscall4(nr: i64, a1: u64, a2: u64, a3: u64, a4: u64) -> i64 {
    // SAFETY: forwarded contract; a syscall of four arguments ignores r8.
    unsafe { syscall5(nr, a1, a2, a3, a4, 0) }
}

/// Raw syscall with six arguments: the result, or -errno.
///
/// # Safety
/// The caller upholds the syscall's own contract for its arguments.
#[inline(always)]
pub unsafe fn syscall6(nr: i64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64, a6: u64) -> i64 {
    let ret: i64;
    // SAFETY: as syscall5, with r9 the sixth argument.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr => ret,
            in("rdi") a1,
            in("rsi") a2,
            in("rdx") a3,
            in("r10") a4,
            in("r8") a5,
            in("r9") a6,
            out("rcx") _,
            out("r11") _,
            options(nostack),
        );
    }
    ret
}

/// Raw syscall with five arguments: the result, or -errno.
///
/// # Safety
/// The caller upholds the syscall's own contract for its arguments.
#[inline(always)]
pub unsafe fn syscall5(nr: i64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64) -> i64 {
    // SAFETY: forwarded contract; a syscall of five arguments ignores r9.
    unsafe { syscall6(nr, a1, a2, a3, a4, a5, 0) }
}

/// The time-stamp counter: the handlers' clock (constant-rate on the
/// machines this runs on; it is the kernel's clocksource here). Converted
/// to nanoseconds against CLOCK_MONOTONIC by the control thread.
#[inline(always)]
pub fn ticks() -> u64 {
    // SAFETY: rdtsc has no preconditions in user mode on Linux.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Nanoseconds per tick, as a 32.32 fixed-point number (0 until
/// [`calibrate_clock`] ran).
static NS_PER_TICK_Q32: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Measures the TSC against CLOCK_MONOTONIC once per process, before any
/// handler runs: about 200 µs of spinning between two pairs of readings.
/// It slept 5 ms, which an autostarted program waited for before its
/// `main`. CLOCK_MONOTONIC (the vDSO, nanoseconds) is read on both sides
/// of each rdtsc, and a side is retried when more than 500 ns separate its
/// two readings (the thread was preempted between them): each end is then
/// known to 250 ns, 0.25% of the span at worst and some 20 ns typically.
pub fn calibrate_clock() {
    if NS_PER_TICK_Q32.load(std::sync::atomic::Ordering::Relaxed) != 0 {
        return;
    }
    let (n0, t0) = clock_pair();
    while super::now_ns() - n0 < CALIBRATION_NS {
        core::hint::spin_loop();
    }
    let (n1, t1) = clock_pair();
    NS_PER_TICK_Q32.store(
        ns_per_tick_q32(n1 - n0, t1.saturating_sub(t0)),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// How long [`calibrate_clock`] measures over.
const CALIBRATION_NS: u64 = 200_000;

/// (ns, ticks) read together: the TSC between two CLOCK_MONOTONIC readings
/// at most 500 ns apart (ten tries), and their midpoint.
fn clock_pair() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..10 {
        let a = super::now_ns();
        let t = ticks();
        let b = super::now_ns();
        if b - a < best.0 {
            best = (b - a, a + (b - a) / 2, t);
        }
        if b - a <= 500 {
            break;
        }
    }
    (best.1, best.2)
}

/// `ns / ticks` as 32.32 fixed point, at least 1 (a zero rate would make
/// every duration 0).
fn ns_per_tick_q32(ns: u64, ticks: u64) -> u64 {
    ((u128::from(ns) << 32) / u128::from(ticks.max(1))).max(1) as u64
}

/// The handlers' monotonic clock in nanoseconds (the TSC scaled by the
/// calibration). Async-signal-safe: one rdtsc, no call.
#[inline]
pub fn clock_ns() -> u64 {
    let q = NS_PER_TICK_Q32.load(std::sync::atomic::Ordering::Relaxed) as u128;
    ((ticks() as u128 * q) >> 32) as u64
}

// The mem* functions the compiler calls for copies, fills and comparisons,
// hidden so that they never leave the library (see the module doc).
// Forward rep movsb / rep stosb are fast on every CPU with ERMS/FSRM, which
// the machines this runs on have; a backward move and memcmp go a qword at
// a time (the aggregate's BTreeMap inserts shift nodes backward, and its
// trace table compares 2 KiB keys).
global_asm!(
    ".pushsection .text.breakdance_mem,\"ax\",@progbits",
    ".globl memcpy",
    ".hidden memcpy",
    ".type memcpy,@function",
    ".p2align 4",
    "memcpy:",
    "mov rax, rdi",
    "mov rcx, rdx",
    "rep movsb",
    "ret",
    ".size memcpy, . - memcpy",
    ".globl memmove",
    ".hidden memmove",
    ".type memmove,@function",
    ".p2align 4",
    "memmove:",
    "mov rax, rdi",
    "mov rcx, rdx",
    // Forward unless the destination starts inside the source.
    "mov r8, rdi",
    "sub r8, rsi",
    "cmp r8, rdx",
    "jb 2f",
    "rep movsb",
    "ret",
    // Backward, a qword at a time from the end, then the bytes left at
    // the start: `std; rep movsb` takes the microcoded slow path, about a
    // byte a cycle, and BTreeMap inserts shift their nodes this way.
    "2:",
    "cmp rcx, 8",
    "jb 6f",
    "5:",
    "mov r8, [rsi + rcx - 8]",
    "mov [rdi + rcx - 8], r8",
    "sub rcx, 8",
    "cmp rcx, 8",
    "jae 5b",
    "6:",
    "test rcx, rcx",
    "jz 7f",
    "8:",
    "movzx r8d, byte ptr [rsi + rcx - 1]",
    "mov [rdi + rcx - 1], r8b",
    "dec rcx",
    "jnz 8b",
    "7:",
    "ret",
    ".size memmove, . - memmove",
    ".globl memset",
    ".hidden memset",
    ".type memset,@function",
    ".p2align 4",
    "memset:",
    "mov r8, rdi",
    "mov eax, esi",
    "mov rcx, rdx",
    "rep stosb",
    "mov rax, r8",
    "ret",
    ".size memset, . - memset",
    ".globl memcmp",
    ".hidden memcmp",
    ".type memcmp,@function",
    ".globl bcmp",
    ".hidden bcmp",
    ".type bcmp,@function",
    ".p2align 4",
    "memcmp:",
    "bcmp:",
    "xor eax, eax",
    // A qword at a time while 8 bytes are left (the aggregate compares
    // whole traces, 2 KiB keys); the first differing qword, and the tail,
    // byte by byte.
    "cmp rdx, 8",
    "jb 3f",
    "9:",
    "mov r8, [rdi]",
    "cmp r8, [rsi]",
    "jne 10f",
    "add rdi, 8",
    "add rsi, 8",
    "sub rdx, 8",
    "cmp rdx, 8",
    "jae 9b",
    "3:",
    "test rdx, rdx",
    "jz 4f",
    "11:",
    "movzx eax, byte ptr [rdi]",
    "movzx ecx, byte ptr [rsi]",
    "sub eax, ecx",
    "jnz 4f",
    "inc rdi",
    "inc rsi",
    "dec rdx",
    "jnz 11b",
    "4:",
    "ret",
    "10:",
    "mov edx, 8",
    "jmp 11b",
    ".size memcmp, . - memcmp",
    ".size bcmp, . - bcmp",
    ".popsection",
);

#[cfg(test)]
mod tests {
    use super::{calibrate_clock, clock_ns, ns_per_tick_q32};

    // The library's own mem functions, called through the symbols the
    // compiler uses.
    extern "C" {
        fn memcpy(d: *mut u8, s: *const u8, n: usize) -> *mut u8;
        fn memmove(d: *mut u8, s: *const u8, n: usize) -> *mut u8;
        fn memset(d: *mut u8, c: i32, n: usize) -> *mut u8;
        fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32;
    }

    /// The calibration, over a fraction of a millisecond, agrees with
    /// CLOCK_MONOTONIC over a span 250 times longer.
    #[test]
    fn the_handlers_clock_follows_the_monotonic_clock() {
        assert_eq!(ns_per_tick_q32(1_000_000, 2_500_000), (4u64 << 32) / 10);
        assert_eq!(ns_per_tick_q32(0, 0), 1);
        calibrate_clock();
        let (n0, c0) = (super::super::now_ns(), clock_ns());
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (n1, c1) = (super::super::now_ns(), clock_ns());
        let ratio = (c1 - c0) as f64 / (n1 - n0) as f64;
        assert!((0.95..1.05).contains(&ratio), "{ratio}");
    }

    /// memmove in both directions and memcmp, at every length to 40 and
    /// every overlap, against slices' own copy and comparison.
    #[test]
    fn mem_functions_agree_with_slices_at_every_length_and_overlap() {
        for n in 0..40usize {
            for shift in 0..12usize {
                for backward in [false, true] {
                    let mut buf: Vec<u8> = (0..64u8).collect();
                    let mut want = buf.clone();
                    let (src, dst) = if backward {
                        (2, 2 + shift)
                    } else {
                        (2 + shift, 2)
                    };
                    want.copy_within(src..src + n, dst);
                    // SAFETY: both ranges lie inside `buf` (64 bytes).
                    unsafe { memmove(buf.as_mut_ptr().add(dst), buf.as_ptr().add(src), n) };
                    assert_eq!(buf, want, "n {n} shift {shift} backward {backward}");
                }
            }
            for at in 0..n {
                let a: Vec<u8> = (0..n as u8).collect();
                for delta in [1u8, 0x80] {
                    let mut b = a.clone();
                    b[at] = b[at].wrapping_add(delta);
                    // SAFETY: two buffers of n bytes.
                    let got = unsafe { memcmp(a.as_ptr(), b.as_ptr(), n) };
                    let want = a.cmp(&b);
                    assert_eq!(got.cmp(&0), want, "n {n} at {at} delta {delta}");
                    // SAFETY: as above.
                    assert_eq!(unsafe { memcmp(b.as_ptr(), b.as_ptr(), n) }, 0);
                }
            }
        }
    }

    #[test]
    fn mem_functions_copy_fill_and_compare() {
        let src: Vec<u8> = (0..200u8).collect();
        let mut dst = vec![0u8; 200];
        // SAFETY: valid, non-overlapping buffers of the lengths given.
        unsafe {
            assert_eq!(
                memcpy(dst.as_mut_ptr(), src.as_ptr(), 200),
                dst.as_mut_ptr()
            );
            assert_eq!(dst, src);
            assert_eq!(memcmp(dst.as_ptr(), src.as_ptr(), 200), 0);
            dst[150] = 0;
            assert!(memcmp(dst.as_ptr(), src.as_ptr(), 200) < 0);
            assert!(memcmp(src.as_ptr(), dst.as_ptr(), 200) > 0);
            assert_eq!(memset(dst.as_mut_ptr(), 0x5a, 100), dst.as_mut_ptr());
        }
        assert!(dst[..100].iter().all(|&b| b == 0x5a));
        // Overlapping moves in both directions.
        let mut buf: Vec<u8> = (0..100u8).collect();
        // SAFETY: both ranges lie inside `buf`.
        unsafe { memmove(buf.as_mut_ptr().add(10), buf.as_ptr(), 50) };
        assert_eq!(&buf[10..60], &(0..50u8).collect::<Vec<_>>()[..]);
        let mut buf: Vec<u8> = (0..100u8).collect();
        // SAFETY: as above.
        unsafe { memmove(buf.as_mut_ptr(), buf.as_ptr().add(10), 50) };
        assert_eq!(&buf[..50], &(10..60u8).collect::<Vec<_>>()[..]);
    }
}
