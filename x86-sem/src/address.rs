//! Memory operands and branch conditions: the rules the core computes
//! with, public so that any other reader of x86 code (the tracer's branch
//! forms) applies the same ones instead of a copy.
//!
//! - [`MemOperand::of`] reads a decoded instruction's memory operand: base
//!   and index registers, scale, displacement with RIP/EIP-relative
//!   addresses folded in, the segment, and the address size. Under the
//!   0x67 prefix the effective address is 32 bits wide: when a register of
//!   the address is 32-bit, and also for a displacement alone (iced sizes
//!   its displacement 4 instead of 8).
//! - [`MemOperand::offset`] computes base + index·scale + displacement,
//!   wrapped at 4 GiB under 0x67 (what `lea` gives; the segment base is
//!   added apart).
//! - [`condition_holds`] evaluates the sixteen Jcc/SETcc/CMOVcc
//!   conditions on RFLAGS.

use iced_x86::{Instruction, OpKind, Register};

/// The segment base added to a memory operand's offset (64-bit mode: only
/// fs and gs have one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentBase {
    /// No fs or gs override: the base is 0.
    None,
    /// fs's base (the thread pointer on x86-64 Linux).
    Fs,
    /// gs's base.
    Gs,
}

/// A memory operand as the core reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemOperand {
    /// Base register number (rax = 0 … r15 = 15); `None` with none, and
    /// for RIP/EIP-relative operands (folded into `disp`).
    pub base: Option<u8>,
    /// Index register number; `None` with none (or a vector index).
    pub index: Option<u8>,
    /// log2 of the index scale (0 to 3).
    pub scale_log2: u8,
    /// The displacement; for RIP/EIP-relative operands the absolute
    /// address (iced wraps it to 32 bits for EIP).
    pub disp: u64,
    /// 32-bit address size (the 0x67 prefix).
    pub addr32: bool,
    /// The segment whose base the address adds.
    pub segment: SegmentBase,
}

/// A general-purpose register's number (64- or 32-bit name), else `None`.
fn gpr(r: Register) -> Option<u8> {
    (r.is_gpr64() || r.is_gpr32()).then(|| r.full_register().number() as u8)
}

impl MemOperand {
    /// The memory operand of `instr`, if it has one (explicit: not the
    /// implicit rsi/rdi operands of string instructions).
    #[must_use]
    pub fn of(instr: &Instruction) -> Option<MemOperand> {
        let has_memory = (0..instr.op_count()).any(|n| instr.op_kind(n) == OpKind::Memory);
        if !has_memory {
            return None;
        }
        let base = instr.memory_base();
        let index = instr.memory_index();
        let ip_relative = base == Register::RIP || base == Register::EIP;
        Some(MemOperand {
            base: if ip_relative { None } else { gpr(base) },
            index: gpr(index),
            scale_log2: instr.memory_index_scale().trailing_zeros() as u8,
            disp: instr.memory_displacement64(),
            addr32: base.is_gpr32()
                || base == Register::EIP
                || index.is_gpr32()
                || (base == Register::None
                    && index == Register::None
                    && instr.memory_displ_size() == 4),
            segment: match instr.memory_segment() {
                Register::FS => SegmentBase::Fs,
                Register::GS => SegmentBase::Gs,
                _ => SegmentBase::None,
            },
        })
    }

    /// The effective address without the segment base, reading registers
    /// through `gpr` (by number).
    #[inline(always)]
    pub fn offset(&self, gpr: impl Fn(usize) -> u64) -> u64 {
        offset(
            self.base.unwrap_or(NO_REGISTER),
            self.index.unwrap_or(NO_REGISTER),
            self.scale_log2,
            self.disp,
            self.addr32,
            gpr,
        )
    }
}

/// A register field that names no register.
pub(crate) const NO_REGISTER: u8 = 0xff;

/// base + index·2^scale + disp, wrapped to 32 bits under `addr32`; a
/// register number of 16 or more is no register. The one rule of the
/// effective address: [`MemOperand::offset`] and the core's handlers both
/// compute it here.
#[inline(always)]
pub(crate) fn offset(
    base: u8,
    index: u8,
    scale_log2: u8,
    disp: u64,
    addr32: bool,
    gpr: impl Fn(usize) -> u64,
) -> u64 {
    let mut a = disp;
    if base < 16 {
        a = a.wrapping_add(gpr(usize::from(base)));
    }
    if index < 16 {
        a = a.wrapping_add(gpr(usize::from(index)) << scale_log2);
    }
    if addr32 {
        a &= 0xffff_ffff;
    }
    a
}

/// Whether condition `cc` (the low nibble of Jcc's opcode: o, no, b, ae,
/// e, ne, be, a, s, ns, p, np, l, ge, le, g) holds for `rflags`.
#[inline(always)]
#[must_use]
pub const fn condition_holds(cc: u8, rflags: u64) -> bool {
    crate::flags::holds(rflags, cc & 15)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    fn operand(bytes: &[u8]) -> MemOperand {
        let mut d = Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE);
        MemOperand::of(&d.decode()).expect("a memory operand")
    }

    #[test]
    fn address_size_and_ip_relative_operands() {
        let regs = |n: usize| [0xffff_ffff_0000_0010u64, 0x20][n.min(1)];
        // jmp [rax+rcx*8+0x10]
        let m = operand(&[0xff, 0x64, 0xc8, 0x10]);
        assert_eq!(
            (m.base, m.index, m.scale_log2, m.addr32),
            (Some(0), Some(1), 3, false)
        );
        assert_eq!(m.offset(regs), 0xffff_ffff_0000_0010 + 0x100 + 0x10);
        // jmp [eax+ecx*8+0x10]: the same, wrapped at 4 GiB.
        let m = operand(&[0x67, 0xff, 0x64, 0xc8, 0x10]);
        assert!(m.addr32);
        assert_eq!(m.offset(regs), 0x120);
        // jmp [disp32] under 0x67: 32-bit with no register at all.
        let m = operand(&[0x67, 0xff, 0x24, 0x25, 0x00, 0x00, 0x00, 0x80]);
        assert_eq!((m.base, m.index, m.addr32), (None, None, true));
        assert_eq!(m.offset(regs), 0x8000_0000);
        // jmp [rip+0x10]: folded into the displacement.
        let m = operand(&[0xff, 0x25, 0x10, 0x00, 0x00, 0x00]);
        assert_eq!((m.base, m.disp, m.addr32), (None, 0x1016, false));
        // jmp fs:[0x28]
        let m = operand(&[0x64, 0xff, 0x24, 0x25, 0x28, 0x00, 0x00, 0x00]);
        assert_eq!(m.segment, SegmentBase::Fs);
    }

    #[test]
    fn conditions_read_the_flags() {
        use crate::flag::{CF, OF, SF, ZF};
        assert!(condition_holds(0x4, ZF)); // e
        assert!(!condition_holds(0x5, ZF)); // ne
        assert!(condition_holds(0x6, CF)); // be
        assert!(condition_holds(0xc, SF)); // l
        assert!(!condition_holds(0xc, SF | OF));
        assert!(condition_holds(0xf, 0)); // g
    }
}
