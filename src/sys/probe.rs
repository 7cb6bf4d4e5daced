//! Fault-safe loads: reading an address the tracer cannot prove is mapped.
//!
//! The emulator reads the thread's real memory from inside the SIGTRAP
//! handler, at addresses the emulated code computes. A wrong-path address
//! (a pointer the thread will never dereference, a guard page) must not
//! crash the application, so every such read goes through [`load_u64`]:
//! one `mov` at a known address. If it faults, the library's SIGSEGV/SIGBUS
//! handler ([`fixup`]) sees the fault at exactly that address, moves the pc
//! to the routine's recovery point, and the routine returns "faulted". Any
//! other fault is not ours and goes to the application's own action (the
//! technique of async-profiler's SafeAccess and of the kernel's exception
//! tables, written here from their description).
//!
//! Everything here is async-signal-safe: no allocation, no locks.

use std::ffi::c_void;

// rdi: the address (8-byte aligned), rsi: where the value goes.
// Returns 1 with the value stored, or 0 (from the recovery point) when the
// load faulted. The load instruction and the recovery point are exported
// (hidden) so that the fault handler can recognise them.
std::arch::global_asm!(
    ".pushsection .text.breakdance_probe,\"ax\",@progbits",
    ".p2align 4",
    ".globl breakdance_probe_u64",
    ".hidden breakdance_probe_u64",
    ".type breakdance_probe_u64,@function",
    "breakdance_probe_u64:",
    ".globl breakdance_probe_u64_load",
    ".hidden breakdance_probe_u64_load",
    "breakdance_probe_u64_load:",
    "mov rax, qword ptr [rdi]",
    "mov qword ptr [rsi], rax",
    "mov eax, 1",
    "ret",
    ".globl breakdance_probe_u64_recover",
    ".hidden breakdance_probe_u64_recover",
    "breakdance_probe_u64_recover:",
    "xor eax, eax",
    "ret",
    ".size breakdance_probe_u64, . - breakdance_probe_u64",
    ".popsection",
);

extern "C" {
    fn breakdance_probe_u64(addr: u64, out: *mut u64) -> u32;
    static breakdance_probe_u64_load: u8;
    static breakdance_probe_u64_recover: u8;
}

// Only the labels' addresses are taken, never their contents.
fn load_site() -> u64 {
    std::ptr::addr_of!(breakdance_probe_u64_load) as u64
}

fn recover_site() -> u64 {
    std::ptr::addr_of!(breakdance_probe_u64_recover) as u64
}

/// Reads the 8 bytes at `addr` (which must be 8-byte aligned, so the read
/// never straddles two pages), or `None` when they are not readable.
/// Async-signal-safe.
///
/// Only sound to call while [`fixup`] is the process's SIGSEGV and SIGBUS
/// handler (the session installs it before any handler emulates); without
/// it a fault kills the process, as any bad load would.
#[inline]
pub fn load_u64(addr: u64) -> Option<u64> {
    debug_assert_eq!(addr & 7, 0);
    let mut value = 0u64;
    // SAFETY: the routine reads `addr` with one mov whose fault the fault
    // handler turns into a return of 0; it writes only `value`.
    let ok = unsafe { breakdance_probe_u64(addr & !7, &mut value) };
    (ok != 0).then_some(value)
}

/// Copies the bytes from `addr` into `out` with [`load_u64`]'s aligned
/// loads, stopping at the first unreadable qword; returns how many were
/// copied. The aligned loads read nothing past the page that holds the
/// last byte wanted. Async-signal-safe, under the same condition as
/// [`load_u64`].
pub fn read_bytes(addr: u64, out: &mut [u8]) -> usize {
    let mut got = 0;
    while got < out.len() {
        let at = addr + got as u64;
        let Some(word) = load_u64(at & !7) else {
            break;
        };
        let skip = (at & 7) as usize;
        let n = (8 - skip).min(out.len() - got);
        out[got..got + n].copy_from_slice(&word.to_le_bytes()[skip..skip + n]);
        got += n;
    }
    got
}

/// The part of a SIGSEGV/SIGBUS handler that recognises a fault of
/// [`load_u64`]: when the fault is at its load instruction, moves the pc to
/// the recovery point and returns true (the handler then returns, and the
/// load reports the fault). False for every other fault. Async-signal-safe.
///
/// # Safety
/// `ctx` must be the ucontext the kernel passed to the handler.
pub unsafe fn fixup(ctx: *mut c_void) -> bool {
    let uc = ctx.cast::<libc::ucontext_t>();
    // SAFETY: forwarded contract: a valid, writable ucontext.
    let gregs = unsafe { &mut (*uc).uc_mcontext.gregs };
    if gregs[libc::REG_RIP as usize] as u64 != load_site() {
        return false;
    }
    gregs[libc::REG_RIP as usize] = recover_site() as i64;
    true
}

/// Copies this process's memory from `addr` into `out`, up to the first
/// byte that cannot be read, without a load that could fault (a fault's
/// signal frame would take another 3.6 KiB of the thread's stack, and a
/// stack's top may border an unreadable guard page): process_vm_readv on
/// the process itself. Returns the whole qwords copied. Async-signal-safe;
/// errno untouched.
pub fn read_own(addr: u64, out: &mut [u64]) -> usize {
    #[repr(C)]
    struct Iovec {
        base: u64,
        len: u64,
    }
    let bytes = std::mem::size_of_val(out) as u64;
    let local = Iovec {
        base: out.as_mut_ptr() as u64,
        len: bytes,
    };
    let remote = Iovec {
        base: addr,
        len: bytes,
    };
    // SAFETY: getpid has no arguments; process_vm_readv writes at most
    // `bytes` into `out` and reads the remote range without faulting.
    let n = unsafe {
        let pid = super::raw::syscall4(libc::SYS_getpid, 0, 0, 0, 0);
        super::raw::syscall6(
            libc::SYS_process_vm_readv,
            pid as u64,
            std::ptr::addr_of!(local) as u64,
            1,
            std::ptr::addr_of!(remote) as u64,
            1,
            0,
        )
    };
    if n <= 0 {
        0
    } else {
        n as usize / 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_memory_is_read() {
        let word: u64 = 0x1122_3344_5566_7788;
        assert_eq!(load_u64(&word as *const u64 as u64), Some(word));
    }

    extern "C" fn on_segv(_sig: i32, _info: *mut libc::siginfo_t, ctx: *mut c_void) {
        // SAFETY: the kernel's ucontext.
        if !unsafe { fixup(ctx) } {
            crate::sys::set_default_action(libc::SIGSEGV);
        }
    }

    #[test]
    fn unmapped_memory_reports_a_fault() {
        // SAFETY: two anonymous pages, the second unmapped again: it is
        // known to be unreadable afterwards, and the first to hold what
        // is written here.
        let page = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            libc::munmap(p.cast::<u8>().add(4096).cast(), 4096);
            std::ptr::copy_nonoverlapping(b"abcdef".as_ptr(), p.cast::<u8>().add(4090), 6);
            p as u64
        };
        let gone = page + 4096;
        let old = crate::sys::install_handler(
            libc::SIGSEGV,
            on_segv,
            crate::sys::Blocked::These(&[]),
            libc::SA_NODEFER,
        )
        .expect("install");
        assert_eq!(load_u64(gone + 8), None);
        assert_eq!(load_u64(0), None);
        let word = 5u64;
        assert_eq!(load_u64(&word as *const u64 as u64), Some(5));
        // An unaligned start, and a copy that stops where the mapping ends.
        let mut out = [0u8; 16];
        assert_eq!(read_bytes(page + 4090, &mut out), 6);
        assert_eq!(&out[..6], b"abcdef");
        assert_eq!(read_bytes(gone, &mut out), 0);
        crate::sys::restore_action(libc::SIGSEGV, &old).unwrap();
        // SAFETY: the first page, mapped above and used no more.
        unsafe { libc::munmap(page as *mut c_void, 4096) };
    }
}
