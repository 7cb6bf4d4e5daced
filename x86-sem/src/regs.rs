//! Architectural registers: the [`Registers`] trait the semantics run on,
//! and [`CpuState`], the plain register file that implements it.

/// General-purpose register numbers, in x86 encoding order.
pub mod gpr {
    /// rax
    pub const RAX: usize = 0;
    /// rcx
    pub const RCX: usize = 1;
    /// rdx
    pub const RDX: usize = 2;
    /// rbx
    pub const RBX: usize = 3;
    /// rsp
    pub const RSP: usize = 4;
    /// rbp
    pub const RBP: usize = 5;
    /// rsi
    pub const RSI: usize = 6;
    /// rdi
    pub const RDI: usize = 7;
    /// r8
    pub const R8: usize = 8;
    /// r9
    pub const R9: usize = 9;
    /// r10
    pub const R10: usize = 10;
    /// r11
    pub const R11: usize = 11;
}

/// RFLAGS bits.
pub mod flag {
    /// Carry.
    pub const CF: u64 = 1 << 0;
    /// Bit 1 reads as one.
    pub const RESERVED1: u64 = 1 << 1;
    /// Parity of the low byte of a result.
    pub const PF: u64 = 1 << 2;
    /// Auxiliary carry (out of bit 3).
    pub const AF: u64 = 1 << 4;
    /// Zero.
    pub const ZF: u64 = 1 << 6;
    /// Sign.
    pub const SF: u64 = 1 << 7;
    /// Trap (single step).
    pub const TF: u64 = 1 << 8;
    /// Interrupt enable (always set in user mode).
    pub const IF: u64 = 1 << 9;
    /// Direction of string instructions.
    pub const DF: u64 = 1 << 10;
    /// Signed overflow.
    pub const OF: u64 = 1 << 11;
    /// Nested task.
    pub const NT: u64 = 1 << 14;
    /// Resume flag (set in a signal frame, never pushed).
    pub const RF: u64 = 1 << 16;
    /// Alignment check.
    pub const AC: u64 = 1 << 18;
    /// CPUID available (software-toggled).
    pub const ID: u64 = 1 << 21;
    /// The six arithmetic status flags; the undefined mask only ever holds
    /// these.
    pub const STATUS: u64 = CF | PF | AF | ZF | SF | OF;
}

/// The architectural state one instruction reads and writes.
///
/// The step function calls these from a signal-handler-safe path:
/// implementations must not allocate, lock or block.
pub trait Registers {
    /// Full 64-bit value of general-purpose register `i` (0 = rax … 15 = r15).
    fn gpr(&self, i: usize) -> u64;
    /// Sets general-purpose register `i` to the full 64-bit `value`.
    fn set_gpr(&mut self, i: usize, value: u64);
    /// Address of the next instruction to execute.
    fn rip(&self) -> u64;
    /// Sets the instruction pointer.
    fn set_rip(&mut self, value: u64);
    /// RFLAGS; bits marked in [`Registers::undefined`] hold no meaning.
    fn rflags(&self) -> u64;
    /// Sets RFLAGS.
    fn set_rflags(&mut self, value: u64);
    /// Status-flag bits ([`flag::STATUS`]) whose value is not known: an
    /// instruction left them architecturally undefined. An instruction
    /// that reads one stops with [`crate::Stop::UnknownFlags`].
    fn undefined(&self) -> u64;
    /// Sets the undefined-flag mask.
    fn set_undefined(&mut self, value: u64);
    /// Vector register `i` (zmm0–zmm31) as eight 64-bit lanes, lane 0
    /// lowest; xmm `i` is lanes 0–1, ymm `i` lanes 0–3.
    fn vec(&self, i: usize) -> &[u64; 8];
    /// Vector register `i`, writable.
    fn vec_mut(&mut self, i: usize) -> &mut [u64; 8];
    /// Mask register k0–k7.
    fn k(&self, i: usize) -> u64;
    /// Sets a mask register.
    fn set_k(&mut self, i: usize, value: u64);
    /// The fs segment base (thread pointer on Linux).
    fn fs_base(&self) -> u64;
    /// Sets the fs segment base.
    fn set_fs_base(&mut self, value: u64);
    /// The gs segment base.
    fn gs_base(&self) -> u64;
    /// Sets the gs segment base.
    fn set_gs_base(&mut self, value: u64);
    /// MXCSR: SSE rounding control, exception masks and sticky exception
    /// flags.
    fn mxcsr(&self) -> u32;
    /// Sets MXCSR.
    fn set_mxcsr(&mut self, value: u32);
    /// The x87 floating-point unit.
    fn x87(&self) -> &X87;
    /// The x87 floating-point unit, writable.
    fn x87_mut(&mut self) -> &mut X87;

    /// The low 128 bits of vector register `i`.
    #[inline(always)]
    fn xmm(&self, i: usize) -> u128 {
        let v = self.vec(i);
        u128::from(v[0]) | u128::from(v[1]) << 64
    }

    /// Writes the low 128 bits of vector register `i` and keeps the rest,
    /// as legacy SSE instructions do.
    #[inline(always)]
    fn set_xmm(&mut self, i: usize, value: u128) {
        let v = self.vec_mut(i);
        v[0] = value as u64;
        v[1] = (value >> 64) as u64;
    }
}

/// MXCSR after reset and at process start: every exception masked,
/// round to nearest, no flags.
pub const MXCSR_DEFAULT: u32 = 0x1f80;

/// An MXCSR no processor holds (bits 16–31 are reserved and always
/// zero): the owner has not filled it. SSE floating-point instructions
/// stop with [`crate::Stop::Opaque`] while it is set.
pub const MXCSR_UNSET: u32 = u32::MAX;

/// One x87 register: the 80-bit double extended format, as FXSAVE stores
/// it (bytes 0–7 the significand with its explicit integer bit, bytes 8–9
/// the sign and the 15-bit biased exponent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct F80 {
    /// The 64-bit significand; bit 63 is the integer bit.
    pub mantissa: u64,
    /// Bit 15 the sign, bits 0–14 the exponent (bias 16383).
    pub sign_exponent: u16,
}

/// The x87 floating-point unit, laid out as the FXSAVE image of a signal
/// frame holds it, so that an owner copies it field by field:
///
/// | FXSAVE bytes | field |
/// |---|---|
/// | 0–1 | `fcw` |
/// | 2–3 | `fsw` (TOP is bits 11–13) |
/// | 4 | `ftw` (the abridged tag byte) |
/// | 32 + 16·i, 10 bytes | `st[i]`: bytes 0–7 `mantissa`, 8–9 `sign_exponent` |
///
/// `st` is in stack order (`st[0]` is ST(0), the register TOP names), as
/// FXSAVE stores it; `ftw` is in physical order (bit n set: physical
/// register n, which is ST((n − TOP) mod 8), holds a value). An empty
/// register keeps its last contents. The last instruction and data
/// pointers and the opcode (FXSAVE bytes 6–23) are not modelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct X87 {
    /// ST(0)–ST(7).
    pub st: [F80; 8],
    /// Control word: exception masks (bits 0–5), precision control (8–9),
    /// rounding control (10–11).
    pub fcw: u16,
    /// Status word: exception flags (0–5), stack fault (6), error summary
    /// (7), condition codes C0–C2 (8–10), TOP (11–13), C3 (14), busy (15).
    pub fsw: u16,
    /// Abridged tag word, one bit per physical register.
    pub ftw: u8,
    /// Condition-code bits of `fsw` (C0 0x100, C1 0x200, C2 0x400, C3
    /// 0x4000) whose value is unknown: the last instruction left them
    /// undefined. Reading one (fnstsw) stops with
    /// [`crate::Stop::UnknownFlags`]; an owner filling the state from a
    /// signal frame sets this to 0.
    pub undefined: u16,
}

impl X87 {
    /// The state after finit and at process start: control word 0x37f
    /// (every exception masked, 64-bit precision, round to nearest), an
    /// empty stack.
    pub const INIT: X87 = X87 {
        st: [F80 {
            mantissa: 0,
            sign_exponent: 0,
        }; 8],
        fcw: 0x37f,
        fsw: 0,
        ftw: 0,
        undefined: 0,
    };

    /// A unit the owner has not filled: control word 0, whose bit 6 the
    /// hardware always reads as one. x87 instructions stop with
    /// [`crate::Stop::Opaque`] on it.
    pub const UNSET: X87 = X87 {
        fcw: 0,
        ..X87::INIT
    };

    /// Whether the unit holds a real state (not [`X87::UNSET`]).
    #[must_use]
    #[inline]
    pub fn is_set(&self) -> bool {
        self.fcw & 0x40 != 0
    }

    /// TOP, the physical number of ST(0).
    #[must_use]
    #[inline]
    pub fn top(&self) -> u32 {
        u32::from(self.fsw >> 11) & 7
    }

    /// Whether ST(`i`) holds a value (its tag is not empty).
    #[must_use]
    #[inline]
    pub fn valid(&self, i: u32) -> bool {
        self.ftw >> ((self.top() + i) & 7) & 1 != 0
    }
}

/// A plain register file: what the tracer fills from a signal's ucontext
/// and compares at a checkpoint, and what brr's machine runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuState {
    /// rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8 … r15.
    pub gpr: [u64; 16],
    /// Instruction pointer.
    pub rip: u64,
    /// RFLAGS.
    pub rflags: u64,
    /// Status flags whose value is unknown (see [`Registers::undefined`]).
    pub undefined: u64,
    /// zmm0–zmm31, eight 64-bit lanes each (xmm = lanes 0–1).
    pub vec: [[u64; 8]; 32],
    /// k0–k7.
    pub k: [u64; 8],
    /// fs segment base.
    pub fs_base: u64,
    /// gs segment base.
    pub gs_base: u64,
    /// MXCSR (FXSAVE bytes 24–27).
    pub mxcsr: u32,
    /// The x87 unit.
    pub x87: X87,
}

/// Which part of two register states differs first (see
/// [`CpuState::first_difference`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Difference {
    /// General-purpose register `n`.
    Gpr(usize),
    /// The instruction pointer.
    Rip,
    /// A status flag the prediction defines (the bits that differ).
    Flags(u64),
    /// DF or another control flag.
    ControlFlags(u64),
    /// Vector register `n`.
    Vec(usize),
    /// Mask register `n`.
    K(usize),
    /// fs or gs base.
    SegmentBase,
    /// MXCSR.
    Mxcsr,
    /// x87 register ST(`n`) (a value or its tag).
    X87Register(usize),
    /// The x87 control word, or a defined bit of the status word.
    X87Control,
}

/// The general-purpose registers and status flags of a predicted state:
/// what a prediction of one transfer keeps (the tracer's verify mode), and
/// the first part [`CpuState::first_difference`] compares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GprsAndFlags {
    /// rax … r15.
    pub gpr: [u64; 16],
    /// RFLAGS.
    pub rflags: u64,
    /// Status flags the prediction leaves undefined (not compared).
    pub undefined: u64,
}

impl GprsAndFlags {
    /// The first general register, then the status flags the prediction
    /// defines, in which `actual` differs; `None` when they agree.
    #[must_use]
    pub fn first_difference(&self, gpr: &[u64; 16], rflags: u64) -> Option<Difference> {
        if let Some(n) = (0..16).find(|&n| self.gpr[n] != gpr[n]) {
            return Some(Difference::Gpr(n));
        }
        let status = (self.rflags ^ rflags) & flag::STATUS & !self.undefined;
        (status != 0).then_some(Difference::Flags(status))
    }
}

impl CpuState {
    /// A state with every register zero, RFLAGS at its reset value (bit 1
    /// and IF set), and MXCSR and the x87 unit unset ([`MXCSR_UNSET`],
    /// [`X87::UNSET`]): fill them from a signal frame, or with
    /// [`MXCSR_DEFAULT`] and [`X87::INIT`] for a process at its start;
    /// until then floating-point instructions stop with
    /// [`crate::Stop::Opaque`] instead of computing from a made-up state.
    #[must_use]
    pub const fn new() -> CpuState {
        CpuState {
            gpr: [0; 16],
            rip: 0,
            rflags: flag::RESERVED1 | flag::IF,
            undefined: 0,
            vec: [[0; 8]; 32],
            k: [0; 8],
            fs_base: 0,
            gs_base: 0,
            mxcsr: MXCSR_UNSET,
            x87: X87::UNSET,
        }
    }

    /// Compares a predicted state (`self`) with an observed one, ignoring
    /// status flags the prediction marks undefined and RF (the kernel sets
    /// it in signal frames). `None` when they agree.
    #[must_use]
    pub fn first_difference(&self, actual: &CpuState) -> Option<Difference> {
        let core = GprsAndFlags {
            gpr: self.gpr,
            rflags: self.rflags,
            undefined: self.undefined,
        };
        if let Some(d) = core.first_difference(&actual.gpr, actual.rflags) {
            return Some(d);
        }
        if self.rip != actual.rip {
            return Some(Difference::Rip);
        }
        let control = (self.rflags ^ actual.rflags) & !flag::STATUS & !flag::RF;
        if control != 0 {
            return Some(Difference::ControlFlags(control));
        }
        if let Some(n) = (0..32).find(|&n| self.vec[n] != actual.vec[n]) {
            return Some(Difference::Vec(n));
        }
        if let Some(n) = (0..8).find(|&n| self.k[n] != actual.k[n]) {
            return Some(Difference::K(n));
        }
        if self.fs_base != actual.fs_base || self.gs_base != actual.gs_base {
            return Some(Difference::SegmentBase);
        }
        if self.mxcsr != actual.mxcsr {
            return Some(Difference::Mxcsr);
        }
        let (p, a) = (&self.x87, &actual.x87);
        if p.fcw != a.fcw || (p.fsw ^ a.fsw) & !p.undefined != 0 {
            return Some(Difference::X87Control);
        }
        if let Some(n) =
            (0..8).find(|&n| p.st[n] != a.st[n] || p.valid(n as u32) != a.valid(n as u32))
        {
            return Some(Difference::X87Register(n));
        }
        None
    }
}

impl Registers for CpuState {
    #[inline(always)]
    fn gpr(&self, i: usize) -> u64 {
        self.gpr[i & 15]
    }
    #[inline(always)]
    fn set_gpr(&mut self, i: usize, value: u64) {
        self.gpr[i & 15] = value;
    }
    #[inline(always)]
    fn rip(&self) -> u64 {
        self.rip
    }
    #[inline(always)]
    fn set_rip(&mut self, value: u64) {
        self.rip = value;
    }
    #[inline(always)]
    fn rflags(&self) -> u64 {
        self.rflags
    }
    #[inline(always)]
    fn set_rflags(&mut self, value: u64) {
        self.rflags = value;
    }
    #[inline(always)]
    fn undefined(&self) -> u64 {
        self.undefined
    }
    #[inline(always)]
    fn set_undefined(&mut self, value: u64) {
        self.undefined = value;
    }
    #[inline(always)]
    fn vec(&self, i: usize) -> &[u64; 8] {
        &self.vec[i & 31]
    }
    #[inline(always)]
    fn vec_mut(&mut self, i: usize) -> &mut [u64; 8] {
        &mut self.vec[i & 31]
    }
    #[inline(always)]
    fn k(&self, i: usize) -> u64 {
        self.k[i & 7]
    }
    #[inline(always)]
    fn set_k(&mut self, i: usize, value: u64) {
        self.k[i & 7] = value;
    }
    #[inline(always)]
    fn fs_base(&self) -> u64 {
        self.fs_base
    }
    #[inline(always)]
    fn set_fs_base(&mut self, value: u64) {
        self.fs_base = value;
    }
    #[inline(always)]
    fn gs_base(&self) -> u64 {
        self.gs_base
    }
    #[inline(always)]
    fn set_gs_base(&mut self, value: u64) {
        self.gs_base = value;
    }
    #[inline(always)]
    fn mxcsr(&self) -> u32 {
        self.mxcsr
    }
    #[inline(always)]
    fn set_mxcsr(&mut self, value: u32) {
        self.mxcsr = value;
    }
    #[inline(always)]
    fn x87(&self) -> &X87 {
        &self.x87
    }
    #[inline(always)]
    fn x87_mut(&mut self) -> &mut X87 {
        &mut self.x87
    }
}

impl Default for CpuState {
    fn default() -> Self {
        CpuState::new()
    }
}
