//! Runs one instruction on the CPU with every general-purpose register,
//! RFLAGS and xmm0–15 set from a state, and reads them all back.
//!
//! The instruction sits in a code region filled with int3. An assembly
//! stub loads the state (rsp included) and jumps to it; whatever happens
//! next traps: an int3 where execution landed (after a fall-through or a
//! branch), or the instruction's own fault. The signal handler copies the
//! registers out of the signal frame and resumes the stub's epilogue on
//! the host stack. Signal frames go to an alternate stack, so the guest
//! stack (inside the data region) is untouched.
//!
//! Code and data live at fixed addresses below 4 GiB, so that 32-bit
//! address-size forms and absolute addresses in the test vectors reach
//! them. One run at a time: callers hold [`lock`].

use std::sync::{Mutex, MutexGuard, Once};

/// Start of the data region (operands, stack).
pub const DATA: u64 = 0x2000_0000;
/// Its size.
pub const DATA_LEN: usize = 0x4000;
/// Start of the code region.
pub const CODE: u64 = 0x3000_0000;
/// Its size.
pub const CODE_LEN: usize = 0x4000;
/// Where the instruction under test is placed: branches of up to ±0x1f00
/// land on int3.
pub const ENTRY: u64 = CODE + 0x2000;

/// The register image the stubs load and the handler fills.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NativeState {
    pub gpr: [u64; 16],
    pub flags: u64,
    /// Puts zmm at offset 192, where the stubs read it.
    pub pad: [u64; 7],
    /// zmm0–31 (only xmm0–15 on a CPU without AVX-512).
    pub zmm: [[u64; 8]; 32],
    /// k0–7 (AVX-512 only).
    pub k: [u64; 8],
    /// An FXSAVE image: the stubs load the x87 unit and MXCSR from it
    /// (fxrstor, before the vector registers), and the handler copies the
    /// signal frame's image back.
    pub fx: [u8; 512],
}

impl Default for NativeState {
    fn default() -> Self {
        NativeState {
            gpr: [0; 16],
            flags: 0x202,
            pad: [0; 7],
            zmm: [[0; 8]; 32],
            k: [0; 8],
            fx: [0; 512],
        }
    }
}

const _: () = assert!(std::mem::offset_of!(NativeState, zmm) == 192);
const _: () = assert!(std::mem::offset_of!(NativeState, k) == 2240);
const _: () = assert!(std::mem::offset_of!(NativeState, fx) == 2304);

/// The vector registers a run loads and reads back: as far as XCR0
/// enables them (and the model has the instructions the stubs load them
/// with).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Vectors {
    /// xmm0–15.
    Sse,
    /// ymm0–15.
    Avx,
    /// zmm0–31 and k0–7.
    Avx512,
}

impl Vectors {
    /// 64-bit lanes of each of the first 16 vector registers.
    pub fn lanes(self) -> usize {
        match self {
            Vectors::Sse => 2,
            Vectors::Avx => 4,
            Vectors::Avx512 => 8,
        }
    }

    /// Vector registers.
    pub fn registers(self) -> usize {
        if self == Vectors::Avx512 {
            32
        } else {
            16
        }
    }
}

/// The model the tests emulate: this CPU, or with `X86SEM_TEST_MODEL=avx2`
/// (or `sse`) this CPU with the AVX-512 (or all VEX/EVEX) register state
/// masked out of XCR0, or (`refuse`) with no quirk measured, to exercise
/// the paths of other CPUs here.
pub fn model() -> &'static x86_sem::CpuModel {
    static MODEL: std::sync::OnceLock<x86_sem::CpuModel> = std::sync::OnceLock::new();
    MODEL.get_or_init(|| {
        use x86_sem::xcr0;
        let host = x86_sem::CpuModel::host();
        match std::env::var("X86SEM_TEST_MODEL").as_deref() {
            Err(_) | Ok("" | "host") => host,
            Ok("avx2") => host
                .with_xcr0(host.xcr0() & !(xcr0::OPMASK | xcr0::ZMM_HI256 | xcr0::HI16_ZMM))
                .with_name("host without AVX-512 state"),
            Ok("sse") => host
                .with_xcr0(host.xcr0() & (xcr0::X87 | xcr0::SSE))
                .with_name("host without AVX state"),
            Ok("refuse") => host
                .with_quirks(x86_sem::Quirks::REFUSE)
                .with_name("host with every quirk refused"),
            Ok(other) => panic!("X86SEM_TEST_MODEL={other}: expected host, avx2, sse or refuse"),
        }
    })
}

/// What [`model`] lets a run load.
pub fn vectors() -> Vectors {
    use iced_x86::CpuidFeature as F;
    use x86_sem::xcr0;
    let m = model();
    if m.enables(xcr0::AVX512_STATE) && m.has(F::AVX512F) && m.has(F::AVX512BW) {
        Vectors::Avx512
    } else if m.enables(xcr0::AVX_STATE) && m.has(F::AVX) {
        Vectors::Avx
    } else {
        Vectors::Sse
    }
}

/// How the run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Execution reached an int3 at this address (the instruction retired
    /// and continued there).
    Landed(u64),
    /// A signal at `rip`: the instruction's own (rip at it), or a fetch
    /// fault where a branch went.
    Signal { signo: i32, addr: u64, rip: u64 },
}

// Three entry stubs (SSE, AVX and AVX-512) that load the state, rsp last but
// rdi, and jump to the instruction; the handler returns to
// x86sem_native_resume on the host stack.
std::arch::global_asm!(
    ".data",
    ".balign 8",
    ".globl x86sem_native_host_rsp",
    "x86sem_native_host_rsp: .quad 0",
    ".globl x86sem_native_target",
    "x86sem_native_target: .quad 0",
    ".text",
    ".globl x86sem_native_enter_sse",
    "x86sem_native_enter_sse:",
    "push rbx",
    "push rbp",
    "push r12",
    "push r13",
    "push r14",
    "push r15",
    "mov [rip + x86sem_native_host_rsp], rsp",
    "fxrstor64 [rdi + 2304]",
    "movdqu xmm0, [rdi + 192]",
    "movdqu xmm1, [rdi + 256]",
    "movdqu xmm2, [rdi + 320]",
    "movdqu xmm3, [rdi + 384]",
    "movdqu xmm4, [rdi + 448]",
    "movdqu xmm5, [rdi + 512]",
    "movdqu xmm6, [rdi + 576]",
    "movdqu xmm7, [rdi + 640]",
    "movdqu xmm8, [rdi + 704]",
    "movdqu xmm9, [rdi + 768]",
    "movdqu xmm10, [rdi + 832]",
    "movdqu xmm11, [rdi + 896]",
    "movdqu xmm12, [rdi + 960]",
    "movdqu xmm13, [rdi + 1024]",
    "movdqu xmm14, [rdi + 1088]",
    "movdqu xmm15, [rdi + 1152]",
    "push qword ptr [rdi + 128]",
    "popfq",
    "mov rax, [rdi + 0]",
    "mov rcx, [rdi + 8]",
    "mov rdx, [rdi + 16]",
    "mov rbx, [rdi + 24]",
    "mov rsp, [rdi + 32]",
    "mov rbp, [rdi + 40]",
    "mov rsi, [rdi + 48]",
    "mov r8, [rdi + 64]",
    "mov r9, [rdi + 72]",
    "mov r10, [rdi + 80]",
    "mov r11, [rdi + 88]",
    "mov r12, [rdi + 96]",
    "mov r13, [rdi + 104]",
    "mov r14, [rdi + 112]",
    "mov r15, [rdi + 120]",
    "mov rdi, [rdi + 56]",
    "jmp qword ptr [rip + x86sem_native_target]",
    ".globl x86sem_native_enter_avx",
    "x86sem_native_enter_avx:",
    "push rbx",
    "push rbp",
    "push r12",
    "push r13",
    "push r14",
    "push r15",
    "mov [rip + x86sem_native_host_rsp], rsp",
    "fxrstor64 [rdi + 2304]",
    "vmovdqu ymm0, [rdi + 192]",
    "vmovdqu ymm1, [rdi + 256]",
    "vmovdqu ymm2, [rdi + 320]",
    "vmovdqu ymm3, [rdi + 384]",
    "vmovdqu ymm4, [rdi + 448]",
    "vmovdqu ymm5, [rdi + 512]",
    "vmovdqu ymm6, [rdi + 576]",
    "vmovdqu ymm7, [rdi + 640]",
    "vmovdqu ymm8, [rdi + 704]",
    "vmovdqu ymm9, [rdi + 768]",
    "vmovdqu ymm10, [rdi + 832]",
    "vmovdqu ymm11, [rdi + 896]",
    "vmovdqu ymm12, [rdi + 960]",
    "vmovdqu ymm13, [rdi + 1024]",
    "vmovdqu ymm14, [rdi + 1088]",
    "vmovdqu ymm15, [rdi + 1152]",
    "push qword ptr [rdi + 128]",
    "popfq",
    "mov rax, [rdi + 0]",
    "mov rcx, [rdi + 8]",
    "mov rdx, [rdi + 16]",
    "mov rbx, [rdi + 24]",
    "mov rsp, [rdi + 32]",
    "mov rbp, [rdi + 40]",
    "mov rsi, [rdi + 48]",
    "mov r8, [rdi + 64]",
    "mov r9, [rdi + 72]",
    "mov r10, [rdi + 80]",
    "mov r11, [rdi + 88]",
    "mov r12, [rdi + 96]",
    "mov r13, [rdi + 104]",
    "mov r14, [rdi + 112]",
    "mov r15, [rdi + 120]",
    "mov rdi, [rdi + 56]",
    "jmp qword ptr [rip + x86sem_native_target]",
    ".globl x86sem_native_enter_avx512",
    "x86sem_native_enter_avx512:",
    "push rbx",
    "push rbp",
    "push r12",
    "push r13",
    "push r14",
    "push r15",
    "mov [rip + x86sem_native_host_rsp], rsp",
    "fxrstor64 [rdi + 2304]",
    "vmovdqu64 zmm0, [rdi + 192]",
    "vmovdqu64 zmm1, [rdi + 256]",
    "vmovdqu64 zmm2, [rdi + 320]",
    "vmovdqu64 zmm3, [rdi + 384]",
    "vmovdqu64 zmm4, [rdi + 448]",
    "vmovdqu64 zmm5, [rdi + 512]",
    "vmovdqu64 zmm6, [rdi + 576]",
    "vmovdqu64 zmm7, [rdi + 640]",
    "vmovdqu64 zmm8, [rdi + 704]",
    "vmovdqu64 zmm9, [rdi + 768]",
    "vmovdqu64 zmm10, [rdi + 832]",
    "vmovdqu64 zmm11, [rdi + 896]",
    "vmovdqu64 zmm12, [rdi + 960]",
    "vmovdqu64 zmm13, [rdi + 1024]",
    "vmovdqu64 zmm14, [rdi + 1088]",
    "vmovdqu64 zmm15, [rdi + 1152]",
    "vmovdqu64 zmm16, [rdi + 1216]",
    "vmovdqu64 zmm17, [rdi + 1280]",
    "vmovdqu64 zmm18, [rdi + 1344]",
    "vmovdqu64 zmm19, [rdi + 1408]",
    "vmovdqu64 zmm20, [rdi + 1472]",
    "vmovdqu64 zmm21, [rdi + 1536]",
    "vmovdqu64 zmm22, [rdi + 1600]",
    "vmovdqu64 zmm23, [rdi + 1664]",
    "vmovdqu64 zmm24, [rdi + 1728]",
    "vmovdqu64 zmm25, [rdi + 1792]",
    "vmovdqu64 zmm26, [rdi + 1856]",
    "vmovdqu64 zmm27, [rdi + 1920]",
    "vmovdqu64 zmm28, [rdi + 1984]",
    "vmovdqu64 zmm29, [rdi + 2048]",
    "vmovdqu64 zmm30, [rdi + 2112]",
    "vmovdqu64 zmm31, [rdi + 2176]",
    "kmovq k0, [rdi + 2240]",
    "kmovq k1, [rdi + 2248]",
    "kmovq k2, [rdi + 2256]",
    "kmovq k3, [rdi + 2264]",
    "kmovq k4, [rdi + 2272]",
    "kmovq k5, [rdi + 2280]",
    "kmovq k6, [rdi + 2288]",
    "kmovq k7, [rdi + 2296]",
    "push qword ptr [rdi + 128]",
    "popfq",
    "mov rax, [rdi + 0]",
    "mov rcx, [rdi + 8]",
    "mov rdx, [rdi + 16]",
    "mov rbx, [rdi + 24]",
    "mov rsp, [rdi + 32]",
    "mov rbp, [rdi + 40]",
    "mov rsi, [rdi + 48]",
    "mov r8, [rdi + 64]",
    "mov r9, [rdi + 72]",
    "mov r10, [rdi + 80]",
    "mov r11, [rdi + 88]",
    "mov r12, [rdi + 96]",
    "mov r13, [rdi + 104]",
    "mov r14, [rdi + 112]",
    "mov r15, [rdi + 120]",
    "mov rdi, [rdi + 56]",
    "jmp qword ptr [rip + x86sem_native_target]",
    ".globl x86sem_native_resume",
    "x86sem_native_resume:",
    "pop r15",
    "pop r14",
    "pop r13",
    "pop r12",
    "pop rbp",
    "pop rbx",
    "ret",
);

extern "C" {
    fn x86sem_native_enter_sse(state: *mut NativeState);
    fn x86sem_native_enter_avx(state: *mut NativeState);
    fn x86sem_native_enter_avx512(state: *mut NativeState);
    fn x86sem_native_resume();
    static mut x86sem_native_host_rsp: u64;
    static mut x86sem_native_target: u64;
}

/// What the signal handler saw; valid while [`RUNNING`] is set.
struct Capture {
    state: NativeState,
    rip: u64,
    signo: i32,
    addr: u64,
}

static mut CAPTURE: Capture = Capture {
    state: NativeState {
        gpr: [0; 16],
        flags: 0,
        pad: [0; 7],
        zmm: [[0; 8]; 32],
        k: [0; 8],
        fx: [0; 512],
    },
    rip: 0,
    signo: 0,
    addr: 0,
};
static RUNNING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static RUN_LOCK: Mutex<()> = Mutex::new(());
static SETUP: Once = Once::new();

/// The alternate signal stack (one native run at a time uses it).
static mut ALT_STACK: [u8; 1 << 16] = [0; 1 << 16];

/// Serialises native runs and every use of the fixed regions.
pub fn lock() -> MutexGuard<'static, ()> {
    setup();
    RUN_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn setup() {
    SETUP.call_once(|| {
        XSTATE.get_or_init(xstate_offsets);
        map_fixed(DATA, DATA_LEN, libc::PROT_READ | libc::PROT_WRITE);
        map_fixed(
            CODE,
            CODE_LEN,
            libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
        );
        for sig in [
            libc::SIGTRAP,
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
        ] {
            // SAFETY: installing a handler with a valid sigaction; the
            // handler only touches the capture statics while RUNNING.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = handler as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut sa.sa_mask);
                assert_eq!(libc::sigaction(sig, &sa, std::ptr::null_mut()), 0);
            }
        }
    });
}

fn map_fixed(addr: u64, len: usize, prot: i32) {
    // SAFETY: a fresh private anonymous mapping at an address nothing else
    // uses (MAP_FIXED_NOREPLACE fails rather than replace a mapping).
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    assert_eq!(p as u64, addr, "cannot map the test region at {addr:#x}");
}

extern "C" fn handler(signo: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    if !RUNNING.load(std::sync::atomic::Ordering::SeqCst) {
        // Not ours: let the default action happen when the fault repeats.
        // SAFETY: resetting a signal disposition.
        unsafe { libc::signal(signo, libc::SIG_DFL) };
        return;
    }
    // SAFETY: the kernel passes a valid ucontext and siginfo; CAPTURE is
    // only read after the stub returns, on this thread, under RUN_LOCK.
    unsafe {
        let uc = &mut *(ctx as *mut libc::ucontext_t);
        let g = &mut uc.uc_mcontext.gregs;
        let c = &mut *std::ptr::addr_of_mut!(CAPTURE);
        use libc::*;
        let order = [
            REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP, REG_RSI, REG_RDI, REG_R8, REG_R9,
            REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15,
        ];
        for (n, r) in order.iter().enumerate() {
            c.state.gpr[n] = g[*r as usize] as u64;
        }
        c.state.flags = g[REG_EFL as usize] as u64;
        c.rip = g[REG_RIP as usize] as u64;
        let fp = uc.uc_mcontext.fpregs;
        for n in 0..16 {
            let e = (*fp)._xmm[n].element;
            c.state.zmm[n][0] = u64::from(e[0]) | u64::from(e[1]) << 32;
            c.state.zmm[n][1] = u64::from(e[2]) | u64::from(e[3]) << 32;
        }
        read_xstate(fp as *const u8, &mut c.state);
        read_fpu(fp as *mut u8, &mut c.state);
        c.signo = signo;
        c.addr = (*info).si_addr() as u64;
        g[REG_RIP as usize] = x86sem_native_resume as *const () as usize as i64;
        g[REG_RSP as usize] = x86sem_native_host_rsp as i64;
        g[REG_EFL as usize] = 0x202;
    }
}

/// Offsets of the XSAVE components in the standard (signal frame) layout:
/// YMM_Hi128, opmask, ZMM_Hi256, Hi16_ZMM (CPUID leaf 0xD); 0 for a
/// component the run does not read back ([`vectors`]).
fn xstate_offsets() -> [usize; 4] {
    let v = vectors();
    [2, 5, 6, 7].map(|c| {
        let wanted = if c == 2 {
            v >= Vectors::Avx
        } else {
            v == Vectors::Avx512
        };
        if wanted {
            std::arch::x86_64::__cpuid_count(0xd, c).ebx as usize
        } else {
            0
        }
    })
}

static XSTATE: std::sync::OnceLock<[usize; 4]> = std::sync::OnceLock::new();

/// Reads the upper halves of ymm/zmm0–15, zmm16–31 and k0–7 from the XSAVE
/// area after the legacy region `fp` points to, as far as [`vectors`]
/// loads them (the rest of `s` is left as it was); a component whose
/// XSTATE_BV bit is clear is in its initial state (zero).
///
/// # Safety
/// `fp` is the fpregs pointer of a signal frame of this process.
unsafe fn read_xstate(fp: *const u8, s: &mut NativeState) {
    let Some(&[ymm, opmask, zmm_hi, hi16]) = XSTATE.get() else {
        return;
    };
    // SAFETY: the kernel writes the XSAVE header after the 512-byte legacy
    // area and the enabled components at their standard offsets.
    unsafe {
        let bv = std::ptr::read_unaligned(fp.add(512) as *const u64);
        let q = |off: usize| std::ptr::read_unaligned(fp.add(off) as *const u64);
        if ymm == 0 {
            return;
        }
        for n in 0..16 {
            for l in 0..2 {
                s.zmm[n][2 + l] = if bv & (1 << 2) != 0 {
                    q(ymm + 16 * n + 8 * l)
                } else {
                    0
                };
            }
        }
        if zmm_hi == 0 {
            return;
        }
        for n in 0..16 {
            for l in 0..4 {
                s.zmm[n][4 + l] = if bv & (1 << 6) != 0 {
                    q(zmm_hi + 32 * n + 8 * l)
                } else {
                    0
                };
            }
        }
        for n in 0..16 {
            for l in 0..8 {
                s.zmm[16 + n][l] = if bv & (1 << 7) != 0 {
                    q(hi16 + 64 * n + 8 * l)
                } else {
                    0
                };
            }
        }
        for n in 0..8 {
            s.k[n] = if bv & (1 << 5) != 0 {
                q(opmask + 8 * n)
            } else {
                0
            };
        }
    }
}

/// Copies the legacy FXSAVE image of the frame (x87 unit and MXCSR), in
/// the x87 initial state when XSTATE_BV says the component is, then puts
/// the frame's x87 unit and MXCSR back to their defaults, so that the
/// test code resumes with round-to-nearest and every exception masked.
///
/// # Safety
/// `fp` is the fpregs pointer of a signal frame of this process.
unsafe fn read_fpu(fp: *mut u8, s: &mut NativeState) {
    // SAFETY: the frame's FP area starts with the 512-byte FXSAVE image,
    // followed by the XSAVE header.
    unsafe {
        std::ptr::copy_nonoverlapping(fp, s.fx.as_mut_ptr(), 512);
        let bv = std::ptr::read_unaligned(fp.add(512) as *const u64);
        if bv & 1 == 0 {
            s.fx[..4].copy_from_slice(&[0x7f, 0x03, 0, 0]);
            s.fx[4] = 0;
            s.fx[32..160].fill(0);
        }
        std::ptr::write_unaligned(fp as *mut u16, 0x37f);
        std::ptr::write_unaligned(fp.add(2) as *mut u16, 0);
        *fp.add(4) = 0;
        std::ptr::write_unaligned(fp.add(24) as *mut u32, 0x1f80);
    }
}

/// Places `code` at [`ENTRY`] in a region of int3.
pub fn load_code(code: &[u8]) {
    // SAFETY: the region is ours (mapped in setup) and the caller holds
    // the lock.
    unsafe {
        std::ptr::write_bytes(CODE as *mut u8, 0xcc, CODE_LEN);
        std::ptr::copy_nonoverlapping(code.as_ptr(), ENTRY as *mut u8, code.len());
    }
}

/// The data region, mutable (the caller holds the lock).
pub fn data() -> &'static mut [u8] {
    // SAFETY: mapped in setup, exclusive under the lock.
    unsafe { std::slice::from_raw_parts_mut(DATA as *mut u8, DATA_LEN) }
}

/// The code region, mutable (the caller holds the lock).
pub fn code() -> &'static mut [u8] {
    // SAFETY: mapped in setup, exclusive under the lock.
    unsafe { std::slice::from_raw_parts_mut(CODE as *mut u8, CODE_LEN) }
}

/// The thread's fs base (the emulation needs it for fs-relative forms).
pub fn fs_base() -> u64 {
    let mut v = 0u64;
    // SAFETY: ARCH_GET_FS writes one u64.
    let rc = unsafe { libc::syscall(libc::SYS_arch_prctl, 0x1003, &mut v as *mut u64) };
    assert_eq!(rc, 0);
    v
}

/// Runs the `len`-byte instruction at [`ENTRY`] from `state`, with gs
/// based at [`DATA`]. The caller holds the lock and has placed code and
/// data.
pub fn run(state: &NativeState, len: usize) -> (NativeState, Ending) {
    // SAFETY: gs is unused by Rust on x86-64 Linux; the alternate stack is
    // static and used by one run at a time (the lock); the stub keeps the
    // callee-saved registers and returns on the host stack.
    unsafe {
        assert_eq!(libc::syscall(libc::SYS_arch_prctl, 0x1001, DATA), 0);
        let ss = libc::stack_t {
            ss_sp: std::ptr::addr_of_mut!(ALT_STACK) as *mut libc::c_void,
            ss_flags: 0,
            ss_size: 1 << 16,
        };
        assert_eq!(libc::sigaltstack(&ss, std::ptr::null_mut()), 0);
        x86sem_native_target = ENTRY;
        let mut s = *state;
        RUNNING.store(true, std::sync::atomic::Ordering::SeqCst);
        match vectors() {
            Vectors::Avx512 => x86sem_native_enter_avx512(&mut s),
            Vectors::Avx => x86sem_native_enter_avx(&mut s),
            Vectors::Sse => x86sem_native_enter_sse(&mut s),
        }
        RUNNING.store(false, std::sync::atomic::Ordering::SeqCst);
        let c = &*std::ptr::addr_of!(CAPTURE);
        let at = c.rip.wrapping_sub(1);
        let ending = if c.signo == libc::SIGTRAP
            && (CODE..CODE + CODE_LEN as u64).contains(&at)
            && !(ENTRY..ENTRY + len as u64).contains(&at)
            && *(at as *const u8) == 0xcc
        {
            Ending::Landed(at)
        } else {
            Ending::Signal {
                signo: c.signo,
                addr: c.addr,
                rip: c.rip,
            }
        };
        (c.state, ending)
    }
}
