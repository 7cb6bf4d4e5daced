//! The interrupted thread's full register state, read from the signal
//! frame: general-purpose registers, rip and rflags from the ucontext;
//! xmm, ymm, zmm and the k mask registers from the XSAVE area the kernel
//! saved after the legacy FXSAVE image; fs and gs bases from the CPU.
//!
//! The XSAVE area of a signal frame is in the standard (non-compacted)
//! format: each state component sits at the offset CPUID leaf 0xD gives
//! for it, and a component whose bit is clear in the header's XSTATE_BV is
//! in its initial state (all zero). Offsets are read once, before any
//! handler runs ([`warm`]).
//!
//! Async-signal-safe once warmed: plain reads of the frame.

use std::sync::OnceLock;

use x86_sem::{CpuState, F80, MXCSR_UNSET, X87};

use crate::sys;

/// `magic1` of `struct _fpx_sw_bytes` (the FXSAVE image's software area at
/// byte 464): the frame has an XSAVE area after the 512-byte image.
const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;
const SW_BYTES: usize = 464;
const XSAVE_HEADER: usize = 512;
/// Where the FXSAVE image keeps xmm0–xmm15.
const FXSAVE_XMM: usize = 160;
/// Where it keeps the x87 control, status and abridged tag words, MXCSR,
/// and ST(0)–ST(7) (16 bytes each, in stack order).
const FXSAVE_FCW: usize = 0;
const FXSAVE_FSW: usize = 2;
const FXSAVE_FTW: usize = 4;
const FXSAVE_MXCSR: usize = 24;
const FXSAVE_ST: usize = 32;
/// XSTATE_BV's bit for the x87 state (clear: in its initial state).
const X87_STATE: u32 = 0;

/// XSAVE state components (Intel SDM vol. 1, 13.1).
const AVX: u32 = 2;
const OPMASK: u32 = 5;
const ZMM_HI256: u32 = 6;
const HI16_ZMM: u32 = 7;

/// Standard-format offsets of the components this reads, 0 when the CPU
/// does not have the component.
#[derive(Clone, Copy, Debug, Default)]
struct Layout {
    avx: usize,
    opmask: usize,
    zmm_hi256: usize,
    hi16_zmm: usize,
}

static LAYOUT: OnceLock<Layout> = OnceLock::new();

fn offset_of(component: u32) -> usize {
    // cpuid is available on every x86-64 CPU; leaf 0xD exists
    // wherever XSAVE does, and a missing component reports size 0.
    let r = std::arch::x86_64::__cpuid_count(0xd, component);
    if r.eax == 0 {
        0
    } else {
        r.ebx as usize
    }
}

fn layout() -> Layout {
    *LAYOUT.get_or_init(|| {
        // Leaf 0 gives the highest leaf.
        let max_leaf = std::arch::x86_64::__cpuid(0).eax;
        if max_leaf < 0xd {
            return Layout::default();
        }
        Layout {
            avx: offset_of(AVX),
            opmask: offset_of(OPMASK),
            zmm_hi256: offset_of(ZMM_HI256),
            hi16_zmm: offset_of(HI16_ZMM),
        }
    })
}

/// Reads the CPU's XSAVE layout now, so that no handler runs cpuid or
/// initialises a lazy value.
pub fn warm() {
    layout();
    sys::warm_segment_bases();
}

/// gregs index of each register in x86 encoding order (rax, rcx, rdx, rbx,
/// rsp, rbp, rsi, rdi, r8 … r15).
pub(crate) const GREG_OF_GPR: [libc::c_int; 16] = [
    libc::REG_RAX,
    libc::REG_RCX,
    libc::REG_RDX,
    libc::REG_RBX,
    libc::REG_RSP,
    libc::REG_RBP,
    libc::REG_RSI,
    libc::REG_RDI,
    libc::REG_R8,
    libc::REG_R9,
    libc::REG_R10,
    libc::REG_R11,
    libc::REG_R12,
    libc::REG_R13,
    libc::REG_R14,
    libc::REG_R15,
];

/// Resume flag: the kernel sets it in a breakpoint's signal frame so that
/// the instruction runs once without trapping again.
pub const RF: u64 = 1 << 16;

fn u64_at(area: *const u8, off: usize) -> u64 {
    // SAFETY: callers pass offsets inside the frame's FP area, whose size
    // the kernel states (FXSAVE image, or `extended_size` bytes).
    unsafe { area.add(off).cast::<u64>().read_unaligned() }
}

/// Where the kernel's signal frame holding `uc` begins: x86-64's
/// `rt_sigframe` is the restorer's address (where the handler's rsp points
/// at entry), then the ucontext, the siginfo and the FPU state, up to the
/// red zone of the interrupted rsp. The handler's own stack lies below.
pub fn frame_start(uc: &libc::ucontext_t) -> u64 {
    (uc as *const libc::ucontext_t as u64).wrapping_sub(8)
}

/// The thread's state at the signal. Async-signal-safe.
///
/// `full` also reads the vector and mask registers (the emulator needs
/// them at a sample; a checkpoint compares them too).
pub fn read(uc: &libc::ucontext_t, state: &mut CpuState) {
    let g = &uc.uc_mcontext.gregs;
    for (i, &r) in GREG_OF_GPR.iter().enumerate() {
        state.gpr[i] = g[r as usize] as u64;
    }
    state.rip = g[libc::REG_RIP as usize] as u64;
    state.rflags = g[libc::REG_EFL as usize] as u64;
    state.undefined = 0;
    state.fs_base = sys::fs_base();
    state.gs_base = sys::gs_base();
    read_vectors(uc, state);
}

fn u16_at(area: *const u8, off: usize) -> u16 {
    // SAFETY: as in `u64_at`.
    unsafe { area.add(off).cast::<u16>().read_unaligned() }
}

/// The x87 unit and MXCSR from the FXSAVE image.
fn read_float_state(area: *const u8, state: &mut CpuState) {
    // SAFETY: MXCSR lies in the 512-byte FXSAVE image.
    state.mxcsr = unsafe { area.add(FXSAVE_MXCSR).cast::<u32>().read_unaligned() };
    let mut x87 = X87 {
        st: [F80 {
            mantissa: 0,
            sign_exponent: 0,
        }; 8],
        fcw: u16_at(area, FXSAVE_FCW),
        fsw: u16_at(area, FXSAVE_FSW),
        // SAFETY: as above.
        ftw: unsafe { *area.add(FXSAVE_FTW) },
        undefined: 0,
    };
    for (i, st) in x87.st.iter_mut().enumerate() {
        st.mantissa = u64_at(area, FXSAVE_ST + 16 * i);
        st.sign_exponent = u16_at(area, FXSAVE_ST + 16 * i + 8);
    }
    state.x87 = x87;
}

fn read_vectors(uc: &libc::ucontext_t, state: &mut CpuState) {
    state.vec = [[0; 8]; 32];
    state.k = [0; 8];
    state.mxcsr = MXCSR_UNSET;
    state.x87 = X87::UNSET;
    let area = uc.uc_mcontext.fpregs as *const u8;
    if area.is_null() {
        return;
    }
    read_float_state(area, state);
    for (i, v) in state.vec.iter_mut().take(16).enumerate() {
        v[0] = u64_at(area, FXSAVE_XMM + 16 * i);
        v[1] = u64_at(area, FXSAVE_XMM + 16 * i + 8);
    }
    // SAFETY: the software area is part of the 512-byte FXSAVE image.
    let magic = unsafe { area.add(SW_BYTES).cast::<u32>().read_unaligned() };
    if magic != FP_XSTATE_MAGIC1 {
        return;
    }
    // SAFETY: as above (`extended_size` follows `magic1`).
    let extended = unsafe { area.add(SW_BYTES + 4).cast::<u32>().read_unaligned() } as usize;
    let xstate_bv = u64_at(area, XSAVE_HEADER);
    if xstate_bv & (1 << X87_STATE) == 0 {
        // The x87 unit is in its initial state; the image's bytes for it
        // need not have been written.
        state.x87 = X87::INIT;
    }
    let l = layout();
    let present = |component: u32, off: usize, len: usize| {
        off != 0 && xstate_bv & (1 << component) != 0 && off + len <= extended
    };
    if present(AVX, l.avx, 256) {
        for (i, v) in state.vec.iter_mut().take(16).enumerate() {
            v[2] = u64_at(area, l.avx + 16 * i);
            v[3] = u64_at(area, l.avx + 16 * i + 8);
        }
    }
    if present(ZMM_HI256, l.zmm_hi256, 512) {
        for (i, v) in state.vec.iter_mut().take(16).enumerate() {
            for lane in 0..4 {
                v[4 + lane] = u64_at(area, l.zmm_hi256 + 32 * i + 8 * lane);
            }
        }
    }
    if present(HI16_ZMM, l.hi16_zmm, 1024) {
        for (i, v) in state.vec.iter_mut().skip(16).enumerate() {
            for (lane, x) in v.iter_mut().enumerate() {
                *x = u64_at(area, l.hi16_zmm + 64 * i + 8 * lane);
            }
        }
    }
    if present(OPMASK, l.opmask, 64) {
        for (i, k) in state.k.iter_mut().enumerate() {
            *k = u64_at(area, l.opmask + 8 * i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Raises a signal with known registers and reads them back from its
    /// ucontext: the same frame the tracer's handler sees.
    #[test]
    fn registers_come_back_from_a_real_signal_frame() {
        use std::sync::atomic::{AtomicPtr, Ordering};
        static OUT: AtomicPtr<CpuState> = AtomicPtr::new(std::ptr::null_mut());
        extern "C" fn on_usr2(_: i32, _: *mut libc::siginfo_t, ctx: *mut std::ffi::c_void) {
            // SAFETY: the kernel's ucontext; OUT points at a live state.
            unsafe {
                read(
                    &*(ctx as *const libc::ucontext_t),
                    &mut *OUT.load(Ordering::SeqCst),
                )
            };
        }
        warm();
        let mut state = CpuState::new();
        OUT.store(&mut state, Ordering::SeqCst);
        let old =
            sys::install_handler(libc::SIGUSR2, on_usr2, sys::Blocked::These(&[]), 0).unwrap();
        let marker: u64 = 0x1234_5678_9abc_def0;
        // SAFETY: loads xmm7 and r12 with known values, then raises a
        // signal on this thread; the handler only reads the frame.
        unsafe {
            std::arch::asm!(
                "movq xmm7, {m}",
                "mov r12, {m}",
                "mov edi, {tid:e}",
                "mov esi, {sig}",
                "mov eax, {nr}",
                "syscall",
                m = in(reg) marker,
                tid = in(reg) sys::gettid(),
                sig = const libc::SIGUSR2,
                nr = const libc::SYS_tkill,
                out("rax") _, out("rdi") _, out("rsi") _, out("rcx") _, out("r11") _,
                out("r12") _, out("xmm7") _,
            );
        }
        sys::restore_action(libc::SIGUSR2, &old).unwrap();
        assert_eq!(state.gpr[12], marker);
        assert_eq!(state.vec[7][0], marker);
        assert_eq!(state.vec[7][1], 0);
        assert_eq!(state.fs_base, sys::fs_base());
        assert_ne!(state.fs_base, 0);
    }
}
