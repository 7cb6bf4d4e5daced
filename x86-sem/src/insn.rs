//! A decoded instruction with its operands resolved once, at decode time,
//! into the few bytes the handlers read on every execution.

use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register,
};

use crate::address::MemOperand;

/// Operand slot values (`Insn::op`): 0–15 a general-purpose register,
/// [`HIGH8`]+0..3 ah/ch/dh/bh, [`VEC`]+n a vector register, [`KREG`]+n a
/// mask register, [`ST`]+i the x87 register ST(i), [`MEM`] the memory operand, [`IMM`] the immediate (or
/// branch target), [`NONE`] anything else.
pub(crate) const HIGH8: u8 = 0x10;
pub(crate) const VEC: u8 = 0x20;
pub(crate) const KREG: u8 = 0x40;
pub(crate) const ST: u8 = 0x50;
pub(crate) const MEM: u8 = 0x80;
pub(crate) const IMM: u8 = 0x81;
pub(crate) const NONE: u8 = 0xff;

/// Segment base added to a memory operand's address.
pub(crate) const SEG_NONE: u8 = 0;
pub(crate) const SEG_FS: u8 = 1;
pub(crate) const SEG_GS: u8 = 2;

/// A decoded instruction: what a step reads, in 40 bytes.
///
/// Compact on purpose: a signal handler runs the core after the
/// application has evicted its data from the CPU's caches, so each step
/// pays for the cache lines its instruction occupies. iced's full
/// decoding is not kept; what owners need of it is resolved here
/// ([`Insn::falls_through`], [`Insn::implicit_stack_slot`], the prefix
/// tests).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Insn {
    /// Address of the instruction; [`Insn::EMPTY_IP`] in an empty entry.
    pub(crate) ip: u64,
    /// Memory displacement, with RIP/EIP-relative addresses already folded
    /// in (the base is then [`NONE`]).
    pub(crate) disp: u64,
    /// The immediate (as iced extends it) or the near-branch target.
    pub(crate) imm: u64,
    /// Operand slots, see [`MEM`] and friends.
    pub(crate) op: [u8; 4],
    /// The iced `Code`, indexing the dispatch table.
    pub(crate) code: Code,
    pub(crate) len: u8,
    /// Base and index register numbers, or [`NONE`].
    pub(crate) base: u8,
    pub(crate) index: u8,
    /// log2 of the index scale.
    pub(crate) scale: u8,
    /// [`SEG_NONE`], [`SEG_FS`] or [`SEG_GS`].
    pub(crate) seg: u8,
    /// 32-bit address size (the 0x67 prefix): the effective address wraps
    /// at 4 GiB, and string instructions use esi/edi/ecx.
    pub(crate) addr32: bool,
    /// The EVEX writemask register (1–7), or 0 for none.
    pub(crate) kmask: u8,
    /// [`ZEROING`], [`BROADCAST`], [`SAE`], and the EVEX static rounding
    /// control in bits 3–5 (see [`Insn::static_rounding`]).
    pub(crate) vflags: u8,
    /// [`REP`], [`REPNE`], [`LOCK`], [`SEGMENT_PREFIX`], [`RIP_RELATIVE`].
    pub(crate) prefixes: u8,
    /// [`FALLS_THROUGH`], [`READS_RSP_SLOT`], [`READS_RBP_SLOT`].
    pub(crate) traits: u8,
}

/// `Insn::prefixes`: an F3 prefix (rep/repe).
pub(crate) const REP: u8 = 1;
/// An F2 prefix (repne).
pub(crate) const REPNE: u8 = 2;
/// An F0 prefix.
pub(crate) const LOCK: u8 = 4;
/// Any segment-override prefix (cs, ds, es, ss, fs, gs).
pub(crate) const SEGMENT_PREFIX: u8 = 8;
/// The memory operand is RIP- or EIP-relative (its address is folded into
/// `disp`).
pub(crate) const RIP_RELATIVE: u8 = 16;

/// `Insn::traits`: control goes on to the next instruction.
const FALLS_THROUGH: u8 = 1;
/// pop, ret, popf: reads the stack slot at rsp.
const READS_RSP_SLOT: u8 = 2;
/// leave: reads the stack slot at rbp.
const READS_RBP_SLOT: u8 = 4;

/// EVEX {z}: elements the writemask disables are zeroed, not kept.
pub(crate) const ZEROING: u8 = 1;
/// EVEX {1toN}: the memory operand is one element, repeated.
pub(crate) const BROADCAST: u8 = 2;
/// EVEX {sae}, or a static rounding control (which implies it): floating
/// point exceptions are neither flagged nor raised.
pub(crate) const SAE: u8 = 4;
const RC_SHIFT: u8 = 3;

impl Insn {
    /// The tag of an empty cache entry (no instruction starts there and
    /// still fits before the end of the address space).
    pub const EMPTY_IP: u64 = u64::MAX;

    /// An empty cache entry, to fill the storage a cache is built on.
    #[must_use]
    pub fn empty() -> Insn {
        Insn {
            ip: Self::EMPTY_IP,
            disp: 0,
            imm: 0,
            op: [NONE; 4],
            code: Code::INVALID,
            len: 0,
            base: NONE,
            index: NONE,
            scale: 0,
            seg: SEG_NONE,
            addr32: false,
            kmask: 0,
            vflags: 0,
            prefixes: 0,
            traits: 0,
        }
    }

    /// Decodes the instruction at `ip` from `bytes` (as many as are
    /// executable there); `None` when they do not hold a whole valid
    /// instruction.
    #[must_use]
    pub fn decode(ip: u64, bytes: &[u8]) -> Option<Insn> {
        crate::quick::decode(ip, bytes).or_else(|| Insn::decode_with_iced(ip, bytes))
    }

    /// [`Insn::decode`] by the common forms' decoder alone: `None` for
    /// what it leaves to iced, or before [`crate::warm_decoder`]. For
    /// tests that compare the two.
    #[doc(hidden)]
    #[must_use]
    pub fn decode_quick(ip: u64, bytes: &[u8]) -> Option<Insn> {
        crate::quick::decode(ip, bytes)
    }

    /// Whether two decodings are the same, field for field (tests).
    #[doc(hidden)]
    #[must_use]
    pub fn identical(&self, other: &Insn) -> bool {
        crate::quick::same(self, other)
    }

    /// [`Insn::decode`] by iced alone (the common forms' quicker decoder,
    /// `quick`, is checked against it).
    #[must_use]
    pub fn decode_with_iced(ip: u64, bytes: &[u8]) -> Option<Insn> {
        let mut decoder = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
        let mut instr = Instruction::default();
        decoder.decode_out(&mut instr);
        if instr.is_invalid() {
            return None;
        }
        Some(Insn::resolve(instr))
    }

    /// Decodes the instructions that follow one another from `ip` in
    /// `bytes` into `out`: the one at `ip`, then the next, up to and
    /// including the first that does not fall through (a branch, call,
    /// return or interrupt), the first the bytes do not hold whole and
    /// valid (not included), or `out`'s length. Returns how many were
    /// decoded: 0 when `bytes` does not start with a valid instruction.
    ///
    /// A run of a block is what a caller that met a new instruction is
    /// about to execute, barring a fault: decoding it at once reads the
    /// code and sets up the decoder once.
    #[must_use]
    pub fn decode_run(ip: u64, bytes: &[u8], out: &mut [Insn]) -> usize {
        Insn::run_by(ip, bytes, out, Insn::decode)
    }

    /// [`Insn::decode_run`] by iced alone (`benches/decode.rs` compares
    /// the two).
    #[doc(hidden)]
    #[must_use]
    pub fn decode_run_with_iced(ip: u64, bytes: &[u8], out: &mut [Insn]) -> usize {
        Insn::run_by(ip, bytes, out, Insn::decode_with_iced)
    }

    #[inline(always)]
    fn run_by(
        ip: u64,
        bytes: &[u8],
        out: &mut [Insn],
        decode: fn(u64, &[u8]) -> Option<Insn>,
    ) -> usize {
        let mut at = 0;
        let mut n = 0;
        while n < out.len() && at < bytes.len() {
            let here = ip.wrapping_add(at as u64);
            let Some(insn) = decode(here, &bytes[at..]) else {
                break;
            };
            out[n] = insn;
            n += 1;
            at += insn.len();
            if !insn.falls_through() {
                break;
            }
        }
        n
    }

    /// Reads the instruction at `ip` from `mem` (through
    /// [`Memory::fetch`](crate::Memory::fetch)) and decodes it.
    ///
    /// # Errors
    /// [`Stop::BadFetch`](crate::Stop::BadFetch) when `ip` is not
    /// executable or the bytes there are not an instruction.
    pub fn fetch<M: crate::Memory>(ip: u64, mem: &mut M) -> Result<Insn, crate::Stop> {
        let mut bytes = [0u8; 15];
        let n = mem.fetch(ip, &mut bytes).min(15);
        if n == 0 {
            return Err(crate::Stop::BadFetch);
        }
        Insn::decode(ip, &bytes[..n]).ok_or(crate::Stop::BadFetch)
    }

    /// Resolves the operands of a decoded instruction.
    #[must_use]
    pub fn resolve(instr: Instruction) -> Insn {
        let mut insn = Insn::empty();
        insn.ip = instr.ip();
        insn.len = instr.len() as u8;
        insn.code = instr.code();
        for n in 0..instr.op_count().min(4) {
            insn.op[n as usize] = match instr.op_kind(n) {
                OpKind::Register => register_slot(instr.op_register(n)),
                OpKind::Memory => MEM,
                OpKind::NearBranch64 => {
                    insn.imm = instr.near_branch64();
                    IMM
                }
                OpKind::Immediate8
                | OpKind::Immediate16
                | OpKind::Immediate32
                | OpKind::Immediate64
                | OpKind::Immediate8to16
                | OpKind::Immediate8to32
                | OpKind::Immediate8to64
                | OpKind::Immediate32to64 => {
                    insn.imm = instr.immediate(n);
                    IMM
                }
                OpKind::MemorySegESI | OpKind::MemorySegEDI | OpKind::MemoryESEDI => {
                    insn.addr32 = true;
                    NONE
                }
                _ => NONE,
            };
        }
        if insn.op.contains(&MEM) {
            // The one reading of a memory operand (crate::address).
            if let Some(m) = MemOperand::of(&instr) {
                insn.base = m.base.unwrap_or(NONE);
                insn.index = m.index.unwrap_or(NONE);
                insn.scale = m.scale_log2;
                insn.disp = m.disp;
                insn.addr32 = m.addr32;
            }
        }
        if instr.op_mask() != Register::None {
            insn.kmask = instr.op_mask().number() as u8;
        }
        // iced's RoundingControl: None, then nearest, down, up, toward
        // zero, the MXCSR encodings plus one.
        let rc = instr.rounding_control() as u8;
        insn.vflags = (u8::from(instr.zeroing_masking()) * ZEROING)
            | (u8::from(instr.is_broadcast()) * BROADCAST)
            | (u8::from(instr.suppress_all_exceptions() || rc != 0) * SAE)
            | rc << RC_SHIFT;
        insn.seg = match instr.memory_segment() {
            Register::FS => SEG_FS,
            Register::GS => SEG_GS,
            _ => SEG_NONE,
        };
        insn.prefixes = (u8::from(instr.has_rep_prefix()) * REP)
            | (u8::from(instr.has_repne_prefix()) * REPNE)
            | (u8::from(instr.has_lock_prefix()) * LOCK)
            | (u8::from(instr.segment_prefix() != Register::None) * SEGMENT_PREFIX)
            | (u8::from(instr.is_ip_rel_memory_operand()) * RIP_RELATIVE);
        insn.traits = (u8::from(instr.flow_control() == FlowControl::Next) * FALLS_THROUGH)
            | match instr.mnemonic() {
                Mnemonic::Pop | Mnemonic::Ret | Mnemonic::Popfq => READS_RSP_SLOT,
                Mnemonic::Leave => READS_RBP_SLOT,
                _ => 0,
            };
        insn
    }

    /// Address of the instruction.
    #[must_use]
    #[inline]
    pub fn ip(&self) -> u64 {
        self.ip
    }

    /// Where the address lies in an `Insn` (the first field, 8 bytes): an
    /// owner that publishes decoded instructions to other threads may use
    /// it as the record's tag, written last with an atomic store.
    pub const IP_OFFSET: usize = core::mem::offset_of!(Insn, ip);

    /// Length in bytes.
    #[must_use]
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// False for a real instruction (an empty entry has length 0).
    #[must_use]
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether control goes on to the next instruction (iced's
    /// `FlowControl::Next`): not a branch, call, return, interrupt or
    /// exception.
    #[must_use]
    #[inline]
    pub fn falls_through(&self) -> bool {
        self.traits & FALLS_THROUGH != 0
    }

    /// The register (4, rsp; 5, rbp) whose stack slot the instruction
    /// reads implicitly: pop, ret and popf read [rsp], leave reads [rbp].
    #[must_use]
    #[inline]
    pub fn implicit_stack_slot(&self) -> Option<u8> {
        if self.traits & READS_RSP_SLOT != 0 {
            Some(4)
        } else if self.traits & READS_RBP_SLOT != 0 {
            Some(5)
        } else {
            None
        }
    }

    /// Whether one of the operands is an explicit memory operand (base,
    /// index, scale, displacement): not the implicit stack slot of push,
    /// pop, call and ret, nor a string instruction's [rsi] or [rdi]. A
    /// `lea` has one too, though it reads no memory.
    #[must_use]
    #[inline]
    pub fn has_memory_operand(&self) -> bool {
        self.op.contains(&MEM)
    }

    /// Operand `n`'s general-purpose register number (0–15), if it is one.
    #[must_use]
    #[inline]
    pub fn gpr_operand(&self, n: usize) -> Option<u8> {
        self.op.get(n).copied().filter(|&slot| slot < HIGH8)
    }

    /// The address of a RIP-relative memory operand (computed from the end
    /// of the instruction), or `None` when the operand is not RIP-relative.
    #[must_use]
    #[inline]
    pub fn rip_relative_address(&self) -> Option<u64> {
        (self.prefixes & RIP_RELATIVE != 0).then_some(self.disp)
    }

    /// Whether any of the lock, rep, repne or segment-override prefixes is
    /// present.
    #[must_use]
    #[inline]
    pub fn has_lock_rep_or_segment_prefix(&self) -> bool {
        self.prefixes & (REP | REPNE | LOCK | SEGMENT_PREFIX) != 0
    }

    /// An F3 (rep/repe) prefix.
    #[must_use]
    #[inline]
    pub(crate) fn has_rep(&self) -> bool {
        self.prefixes & REP != 0
    }

    /// An F2 (repne) prefix.
    #[must_use]
    #[inline]
    pub(crate) fn has_repne(&self) -> bool {
        self.prefixes & REPNE != 0
    }

    /// The EVEX static rounding control ({rn-sae} … {rz-sae}) in MXCSR's
    /// encoding, or `None` when the instruction follows MXCSR.
    #[must_use]
    #[inline]
    pub(crate) fn static_rounding(&self) -> Option<u8> {
        match self.vflags >> RC_SHIFT {
            0 => None,
            rc => Some(rc - 1),
        }
    }

    /// The instruction's iced `Code`.
    #[must_use]
    #[inline]
    pub fn code(&self) -> Code {
        self.code
    }
}

/// The slot of a register operand.
fn register_slot(r: Register) -> u8 {
    match r {
        Register::AH | Register::CH | Register::DH | Register::BH => {
            HIGH8 + (r as u8 - Register::AH as u8)
        }
        _ if r.is_gpr() => r.full_register().number() as u8,
        _ if r.is_xmm() || r.is_ymm() || r.is_zmm() => VEC + r.number() as u8,
        _ if r.is_k() => KREG + r.number() as u8,
        _ if r.is_st() => ST + r.number() as u8,
        _ => NONE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(bytes: &[u8], ip: u64) -> Insn {
        Insn::decode(ip, bytes).expect("valid")
    }

    #[test]
    fn address_size_follows_the_0x67_prefix() {
        // mov eax, [rbx + rcx*4 + 8]
        let i = resolve(&[0x8b, 0x44, 0x8b, 0x08], 0x1000);
        assert_eq!(
            (i.base, i.index, i.scale, i.disp, i.addr32),
            (3, 1, 2, 8, false)
        );
        // mov eax, [ecx*4 - 16]: no base, 32-bit index.
        let i = resolve(&[0x67, 0x8b, 0x04, 0x8d, 0xf0, 0xff, 0xff, 0xff], 0x1000);
        assert_eq!(
            (i.base, i.index, i.disp, i.addr32),
            (NONE, 1, 0xffff_fff0, true)
        );
        // mov eax, [0x80000000] with and without 0x67.
        let i = resolve(&[0x67, 0x8b, 0x04, 0x25, 0, 0, 0, 0x80], 0x1000);
        assert_eq!((i.disp, i.addr32), (0x8000_0000, true));
        let i = resolve(&[0x8b, 0x04, 0x25, 0, 0, 0, 0x80], 0x1000);
        assert_eq!((i.disp, i.addr32), (0xffff_ffff_8000_0000, false));
        // mov eax, [eip + 0x10] high in the address space wraps to 32 bits.
        let i = resolve(&[0x67, 0x8b, 0x05, 0x10, 0, 0, 0], 0x7_0000_1000);
        assert_eq!((i.base, i.disp, i.addr32), (NONE, 0x1017, true));
        // mov eax, fs:[0x28]
        let i = resolve(&[0x64, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0], 0);
        assert_eq!((i.seg, i.disp), (SEG_FS, 0x28));
        // movsb with 0x67 uses esi/edi.
        assert!(resolve(&[0x67, 0xa4], 0).addr32);
        assert!(!resolve(&[0xa4], 0).addr32);
    }

    #[test]
    fn an_instruction_is_forty_bytes() {
        assert_eq!(size_of::<Insn>(), 40);
        assert_eq!(align_of::<Insn>(), 8);
    }

    #[test]
    fn traits_and_prefixes_resolve() {
        // pop rbx; ret; leave; mov eax, ebx; jmp $; call rel32
        assert_eq!(resolve(&[0x5b], 0).implicit_stack_slot(), Some(4));
        assert_eq!(resolve(&[0xc3], 0).implicit_stack_slot(), Some(4));
        assert_eq!(resolve(&[0xc9], 0).implicit_stack_slot(), Some(5));
        assert_eq!(resolve(&[0x89, 0xd8], 0).implicit_stack_slot(), None);
        assert!(resolve(&[0x89, 0xd8], 0).falls_through());
        assert!(!resolve(&[0xeb, 0xfe], 0).falls_through());
        assert!(!resolve(&[0xe8, 0, 0, 0, 0], 0).falls_through());
        // rep movsb, repne scasb, lock add [rax], ecx, fs: mov eax, [rax]
        assert!(resolve(&[0xf3, 0xa4], 0).has_rep());
        assert!(resolve(&[0xf2, 0xae], 0).has_repne());
        assert!(resolve(&[0xf0, 0x01, 0x08], 0).has_lock_rep_or_segment_prefix());
        assert!(resolve(&[0x64, 0x8b, 0x00], 0).has_lock_rep_or_segment_prefix());
        assert!(!resolve(&[0x8b, 0x00], 0).has_lock_rep_or_segment_prefix());
        // mov eax, [rip + 0x10] at 0x1000 (6 bytes): 0x1016; [rax + 0x10] is not.
        let i = resolve(&[0x8b, 0x05, 0x10, 0, 0, 0], 0x1000);
        assert_eq!(i.rip_relative_address(), Some(0x1016));
        assert_eq!(resolve(&[0x8b, 0x40, 0x10], 0).rip_relative_address(), None);
        assert_eq!(i.gpr_operand(0), Some(0));
        assert_eq!(i.gpr_operand(1), None);
    }

    #[test]
    fn a_run_ends_after_its_block_or_its_bytes() {
        // mov eax, ebx; inc eax; jmp $; nop: three, ending at the jmp.
        let code = [0x89, 0xd8, 0xff, 0xc0, 0xeb, 0xfe, 0x90];
        let mut out = [Insn::empty(); 8];
        assert_eq!(Insn::decode_run(0x1000, &code, &mut out), 3);
        assert_eq!(
            [out[0].ip(), out[1].ip(), out[2].ip()],
            [0x1000, 0x1002, 0x1004]
        );
        assert!(!out[2].falls_through());
        // Bytes that end inside an instruction: the whole ones only.
        assert_eq!(Insn::decode_run(0x1000, &code[..5], &mut out), 2);
        // Room for two: two.
        assert_eq!(Insn::decode_run(0x1000, &code, &mut out[..2]), 2);
        // An invalid instruction (ud0 without its ModRM) stops the run
        // before it; at the start, nothing.
        assert_eq!(Insn::decode_run(0x1000, &[0x90, 0x0f, 0xff], &mut out), 1);
        assert_eq!(Insn::decode_run(0x1000, &[0x0f, 0xff], &mut out), 0);
        // A call ends a run: what follows it may be data.
        assert_eq!(
            Insn::decode_run(0, &[0x90, 0xe8, 0, 0, 0, 0, 0x90], &mut out),
            2
        );
    }

    #[test]
    fn registers_resolve_to_slots() {
        // add ah, bh
        let i = resolve(&[0x00, 0xfc], 0);
        assert_eq!(i.op[..2], [HIGH8, HIGH8 + 3]);
        // add r9w, 5
        let i = resolve(&[0x66, 0x41, 0x83, 0xc1, 0x05], 0);
        assert_eq!((i.op[0], i.op[1], i.imm), (9, IMM, 5));
        // pxor xmm13, xmm2
        let i = resolve(&[0x66, 0x44, 0x0f, 0xef, 0xea], 0);
        assert_eq!(i.op[..2], [VEC + 13, VEC + 2]);
    }
}
