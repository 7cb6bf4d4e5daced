//! RFLAGS arithmetic, computed eagerly, and condition codes.
//!
//! Each flag-writing instruction replaces the bits it writes and marks in
//! the undefined mask those the manuals (Intel SDM vol. 2, AMD APM vol. 3)
//! leave undefined for that form; the values stored there are whatever was
//! cheapest to compute.

use crate::regs::flag::{AF, CF, OF, PF, SF, ZF};
use crate::regs::Registers;

/// All-ones mask of `size` bytes (1, 2, 4 or 8).
#[inline(always)]
pub(crate) const fn mask(size: usize) -> u64 {
    if size >= 8 {
        u64::MAX
    } else {
        (1u64 << (size * 8)) - 1
    }
}

/// The `n` lowest bits set (all 64 for `n` ≥ 64).
#[inline(always)]
pub(crate) const fn low_bits(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1 << n) - 1
    }
}

/// Sign-extends the low `size` bytes of `v`.
#[inline(always)]
pub(crate) const fn sext(v: u64, size: usize) -> u64 {
    let shift = 64 - 8 * size as u32;
    (((v << shift) as i64) >> shift) as u64
}

/// PF: set when the low byte of `res` has an even number of ones.
#[inline(always)]
pub(crate) const fn parity(res: u64) -> u64 {
    let x = res ^ (res >> 4);
    // Bit i of 0x9669 is set when the 4-bit value i has even parity.
    ((0x9669 >> (x & 15)) & 1) << 2
}

/// ZF, SF and PF of a result already masked to `S` bytes.
#[inline(always)]
pub(crate) const fn szp<const S: usize>(res: u64) -> u64 {
    let zf = ((res == 0) as u64) << 6;
    let sf = ((res >> (S * 8 - 1)) & 1) << 7;
    zf | sf | parity(res)
}

/// All six flags of `a + b + c` = `res` (inputs and result masked to `S`
/// bytes, `c` 0 or 1).
#[inline(always)]
pub(crate) const fn add<const S: usize>(a: u64, b: u64, c: u64, res: u64) -> u64 {
    let bits = S as u32 * 8;
    let cf = if S == 8 {
        let (r, c1) = a.overflowing_add(b);
        let c2 = r.overflowing_add(c).1;
        (c1 | c2) as u64
    } else {
        ((a + b + c) >> bits) & 1
    };
    let of = (((a ^ res) & (b ^ res)) >> (bits - 1)) & 1;
    cf | (of << 11) | ((a ^ b ^ res) & AF) | szp::<S>(res)
}

/// All six flags of `a - b - c` = `res` (masked to `S` bytes).
#[inline(always)]
pub(crate) const fn sub<const S: usize>(a: u64, b: u64, c: u64, res: u64) -> u64 {
    let bits = S as u32 * 8;
    let cf = if S == 8 {
        ((a as u128) < (b as u128) + (c as u128)) as u64
    } else {
        (a.wrapping_sub(b).wrapping_sub(c) >> bits) & 1
    };
    let of = (((a ^ b) & (a ^ res)) >> (bits - 1)) & 1;
    cf | (of << 11) | ((a ^ b ^ res) & AF) | szp::<S>(res)
}

/// Replaces the `written` status bits with `value` and records which of
/// them are `undefined` (a subset of `written`).
#[inline(always)]
pub(crate) fn update<R: Registers>(r: &mut R, written: u64, value: u64, undefined: u64) {
    let f = r.rflags();
    r.set_rflags((f & !written) | (value & written));
    let u = r.undefined();
    r.set_undefined((u & !written) | undefined);
}

/// Condition codes in encoding order (the low nibble of jcc/setcc/cmovcc).
pub(crate) mod cc {
    pub(crate) const O: u8 = 0;
    pub(crate) const NO: u8 = 1;
    pub(crate) const B: u8 = 2;
    pub(crate) const AE: u8 = 3;
    pub(crate) const E: u8 = 4;
    pub(crate) const NE: u8 = 5;
    pub(crate) const BE: u8 = 6;
    pub(crate) const A: u8 = 7;
    pub(crate) const S: u8 = 8;
    pub(crate) const NS: u8 = 9;
    pub(crate) const P: u8 = 10;
    pub(crate) const NP: u8 = 11;
    pub(crate) const L: u8 = 12;
    pub(crate) const GE: u8 = 13;
    pub(crate) const LE: u8 = 14;
    pub(crate) const G: u8 = 15;
}

/// The flags condition `cc` reads.
#[inline(always)]
pub(crate) const fn reads(cc: u8) -> u64 {
    match cc >> 1 {
        0 => OF,
        1 => CF,
        2 => ZF,
        3 => CF | ZF,
        4 => SF,
        5 => PF,
        6 => SF | OF,
        _ => ZF | SF | OF,
    }
}

/// Whether condition `cc` holds for `f` (const-folded when `cc` is).
#[inline(always)]
pub(crate) const fn holds(f: u64, cc: u8) -> bool {
    let cf = f & CF != 0;
    let zf = f & ZF != 0;
    let sf = f & SF != 0;
    let of = f & OF != 0;
    let pf = f & PF != 0;
    let v = match cc >> 1 {
        0 => of,
        1 => cf,
        2 => zf,
        3 => cf || zf,
        4 => sf,
        5 => pf,
        6 => sf != of,
        _ => zf || sf != of,
    };
    v != (cc & 1 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_and_sub_flags_follow_the_manual() {
        assert_eq!(add::<1>(0x7f, 1, 0, 0x80), OF | SF | AF);
        assert_eq!(add::<1>(0xff, 1, 0, 0) & (CF | ZF | OF), CF | ZF);
        assert_eq!(add::<8>(u64::MAX, 0, 1, 0) & CF, CF);
        assert_eq!(sub::<4>(0, 1, 0, 0xffff_ffff) & (CF | SF | OF), CF | SF);
        assert_ne!(sub::<4>(0x8000_0000, 1, 0, 0x7fff_ffff) & OF, 0);
        assert_eq!(sub::<8>(5, 5, 1, u64::MAX) & CF, CF);
        assert_ne!(szp::<2>(0x0300) & PF, 0);
        assert_eq!(szp::<1>(0x01) & PF, 0);
    }

    #[test]
    fn parity_matches_a_bit_count() {
        for v in 0..=255u64 {
            let even = v.count_ones() % 2 == 0;
            assert_eq!(parity(v | 0x1234_5600) != 0, even, "{v:#x}");
        }
    }

    #[test]
    fn conditions_pair_up_as_negations() {
        for f in 0..64u64 {
            let bit = |n: u32, flag: u64| ((f >> n) & 1) * flag;
            let flags = bit(0, CF) | bit(1, PF) | bit(2, ZF) | bit(3, SF) | bit(4, OF);
            for c in (0..16).step_by(2) {
                assert_ne!(holds(flags, c), holds(flags, c + 1));
            }
            assert_eq!(holds(flags, cc::L), (flags & SF != 0) != (flags & OF != 0));
            assert_eq!(holds(flags, cc::A), flags & (CF | ZF) == 0);
        }
    }
}
