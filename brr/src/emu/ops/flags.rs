//! RFLAGS computation for the integer instructions, computed eagerly.

use crate::emu::machine::{size_mask, Machine};
use crate::emu::mem::Memory;
use crate::emu::regs::{flag, Registers};
use iced_x86::ConditionCode;

#[inline(always)]
fn sign_bit(size: usize) -> u64 {
    1u64 << (size * 8 - 1)
}

/// ZF, SF and PF of a result.
#[inline(always)]
pub fn szp(res: u64, size: usize) -> u64 {
    let r = res & size_mask(size);
    let mut f = 0;
    if r == 0 {
        f |= flag::ZF;
    }
    if r & sign_bit(size) != 0 {
        f |= flag::SF;
    }
    if (r as u8).count_ones() % 2 == 0 {
        f |= flag::PF;
    }
    f
}

/// Flags of `a + b + carry_in` = `res` (masked).
#[inline(always)]
pub fn add(a: u64, b: u64, carry_in: u64, res: u64, size: usize) -> u64 {
    let m = size_mask(size);
    let wide = (a & m) as u128 + (b & m) as u128 + carry_in as u128;
    let mut f = szp(res, size);
    if wide > m as u128 {
        f |= flag::CF;
    }
    if (a ^ res) & (b ^ res) & sign_bit(size) != 0 {
        f |= flag::OF;
    }
    if (a ^ b ^ res) & 0x10 != 0 {
        f |= flag::AF;
    }
    f
}

/// Flags of `a - b - borrow_in` = `res` (masked).
#[inline(always)]
pub fn sub(a: u64, b: u64, borrow_in: u64, res: u64, size: usize) -> u64 {
    let m = size_mask(size);
    let mut f = szp(res, size);
    if ((a & m) as u128) < (b & m) as u128 + borrow_in as u128 {
        f |= flag::CF;
    }
    if (a ^ b) & (a ^ res) & sign_bit(size) != 0 {
        f |= flag::OF;
    }
    if (a ^ b ^ res) & 0x10 != 0 {
        f |= flag::AF;
    }
    f
}

/// Flags of a logical operation (CF = OF = 0).
#[inline(always)]
pub fn logic(res: u64, size: usize) -> u64 {
    szp(res, size)
}

impl<R: Registers, M: Memory> Machine<R, M> {
    /// Replaces the bits of `mask` in RFLAGS with those of `value`.
    #[inline(always)]
    pub fn set_flags(&mut self, mask: u64, value: u64) {
        let f = self.regs.rflags();
        self.regs.set_rflags((f & !mask) | (value & mask));
    }

    #[inline(always)]
    pub fn flag(&self, f: u64) -> bool {
        self.regs.rflags() & f != 0
    }

    /// Evaluates a condition code against RFLAGS.
    #[inline(always)]
    pub fn condition(&self, cc: ConditionCode) -> bool {
        let f = self.regs.rflags();
        let cf = f & flag::CF != 0;
        let zf = f & flag::ZF != 0;
        let sf = f & flag::SF != 0;
        let of = f & flag::OF != 0;
        let pf = f & flag::PF != 0;
        match cc {
            ConditionCode::o => of,
            ConditionCode::no => !of,
            ConditionCode::b => cf,
            ConditionCode::ae => !cf,
            ConditionCode::e => zf,
            ConditionCode::ne => !zf,
            ConditionCode::be => cf || zf,
            ConditionCode::a => !cf && !zf,
            ConditionCode::s => sf,
            ConditionCode::ns => !sf,
            ConditionCode::p => pf,
            ConditionCode::np => !pf,
            ConditionCode::l => sf != of,
            ConditionCode::ge => sf == of,
            ConditionCode::le => zf || sf != of,
            ConditionCode::g => !zf && sf == of,
            ConditionCode::None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_and_sub_flags_match_the_manual() {
        // 0x7f + 1 in 8 bits: signed overflow, no carry, AF.
        let f = add(0x7f, 1, 0, 0x80, 1);
        assert_eq!(f, flag::OF | flag::SF | flag::AF);
        // 0xff + 1: carry, zero.
        let f = add(0xff, 1, 0, 0, 1);
        assert_eq!(f & (flag::CF | flag::ZF | flag::OF), flag::CF | flag::ZF);
        // 0 - 1 in 32 bits: borrow, sign, no overflow.
        let f = sub(0, 1, 0, 0xffff_ffff, 4);
        assert_eq!(f & (flag::CF | flag::SF | flag::OF), flag::CF | flag::SF);
        // 0x80000000 - 1: overflow.
        assert_ne!(sub(0x8000_0000, 1, 0, 0x7fff_ffff, 4) & flag::OF, 0);
        // PF counts the low byte only.
        assert_ne!(szp(0x0300, 2) & flag::PF, 0);
        assert_eq!(szp(0x01, 1) & flag::PF, 0);
    }
}
