//! The SSE/SSE2 moves and packed-integer operations compilers emit for
//! integer code (string functions, vectorised loops, struct copies).
//!
//! Legacy SSE writes the low 128 bits of a vector register and keeps the
//! rest. Its 16-byte memory operands must be aligned, except for the
//! unaligned moves; a misaligned one faults (#GP), reported as
//! [`Stop::Fault`].

use super::{ea, reg, set_sized, Flow};
use crate::flags::mask;
use crate::insn::{Insn, IMM, MEM, VEC};
use crate::mem::Memory;
use crate::regs::Registers;
use crate::step::{Machine, Retired, Stop};

/// Reads operand slot `o` as a vector: a vector register's low 128 bits,
/// `N` bytes of memory, or a general-purpose register, zero-extended.
#[inline(always)]
pub(crate) fn read_v<X: Machine, const N: usize, const ALIGNED: bool>(
    x: &mut X,
    i: &Insn,
    o: u8,
    r: &mut Retired,
) -> Result<u128, Stop> {
    if o == MEM {
        let a = ea(x, i);
        r.mem_addr = a;
        if ALIGNED && a & 15 != 0 {
            return Err(Stop::Fault {
                addr: a,
                write: false,
            });
        }
        if N <= 8 {
            Ok(u128::from(x.mem().load(a, N)?))
        } else {
            let mut b = [0u8; 16];
            x.mem().load_bytes(a, &mut b)?;
            Ok(u128::from_le_bytes(b))
        }
    } else if o < 16 {
        Ok(u128::from(reg(x, usize::from(o)) & mask(N)))
    } else {
        Ok(x.regs().xmm(usize::from(o - VEC)))
    }
}

/// Writes `v` to operand slot `o`: the low 128 bits of a vector register
/// (the rest kept), `N` bytes of memory, or `N` bytes of a general-purpose
/// register.
#[inline(always)]
pub(crate) fn write_v<X: Machine, const N: usize, const ALIGNED: bool>(
    x: &mut X,
    i: &Insn,
    o: u8,
    v: u128,
    r: &mut Retired,
) -> Flow {
    if o == MEM {
        let a = ea(x, i);
        r.mem_addr = a;
        r.mem_write = true;
        if ALIGNED && a & 15 != 0 {
            return Err(Stop::Fault {
                addr: a,
                write: true,
            });
        }
        if N <= 8 {
            Ok(x.mem().store(a, N, v as u64)?)
        } else {
            Ok(x.mem().store_bytes(a, &v.to_le_bytes())?)
        }
    } else if o < 16 {
        set_sized::<X, N>(x, usize::from(o), v as u64);
        Ok(())
    } else {
        x.regs_mut().set_xmm(usize::from(o - VEC), v);
        Ok(())
    }
}

/// movdqa, movdqu, movaps, movups, movapd, movupd, lddqu.
pub(crate) fn mov128<X: Machine, const ALIGNED: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let v = read_v::<X, 16, ALIGNED>(x, i, i.op[1], r)?;
    write_v::<X, 16, ALIGNED>(x, i, i.op[0], v, r)
}

/// movd / movq (`N` = 4 / 8) between xmm, general-purpose registers and
/// memory, and movq xmm, xmm/m64: the low `N` bytes, zero-extended into an
/// xmm destination.
pub(crate) fn mov_low_n<X: Machine, const N: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let v = read_v::<X, N, false>(x, i, i.op[1], r)? & u128::from(mask(N));
    write_v::<X, N, false>(x, i, i.op[0], v, r)
}

/// movss / movsd (`N` = 4 / 8): a load zeroes the rest of the register, a
/// register move merges, a store writes the low element.
pub(crate) fn mov_scalar<X: Machine, const N: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let low = u128::from(mask(N));
    let src = read_v::<X, N, false>(x, i, i.op[1], r)? & low;
    if i.op[0] != MEM && i.op[1] != MEM {
        let old = read_v::<X, 16, false>(x, i, i.op[0], r)?;
        write_v::<X, 16, false>(x, i, i.op[0], (old & !low) | src, r)
    } else {
        write_v::<X, N, false>(x, i, i.op[0], src, r)
    }
}

const LO: u128 = u64::MAX as u128;

/// movlps/movlpd (`HIGH` false) and movhps/movhpd: one 64-bit half between
/// a register and memory.
pub(crate) fn mov_half<X: Machine, const HIGH: bool>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let sh = if HIGH { 64 } else { 0 };
    if i.op[0] == MEM {
        let v = read_v::<X, 16, false>(x, i, i.op[1], r)?;
        return write_v::<X, 8, false>(x, i, i.op[0], (v >> sh) & LO, r);
    }
    let m = read_v::<X, 8, false>(x, i, i.op[1], r)?;
    let old = read_v::<X, 16, false>(x, i, i.op[0], r)?;
    write_v::<X, 16, false>(x, i, i.op[0], (old & !(LO << sh)) | m << sh, r)
}

/// movhlps (`HL`, low half of the destination = high half of the source)
/// and movlhps (high half of the destination = low half of the source).
pub(crate) fn mov_cross<X: Machine, const HL: bool>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let src = read_v::<X, 16, false>(x, i, i.op[1], r)?;
    let old = read_v::<X, 16, false>(x, i, i.op[0], r)?;
    let v = if HL {
        (old & !LO) | src >> 64
    } else {
        (old & LO) | src << 64
    };
    write_v::<X, 16, false>(x, i, i.op[0], v, r)
}

/// Applies `f` to each `lane`-byte element pair.
#[inline(always)]
fn lanes(a: u128, b: u128, lane: usize, f: impl Fn(u64, u64) -> u64) -> u128 {
    let bits = lane * 8;
    let m = mask(lane);
    let mut out = 0u128;
    for k in 0..16 / lane {
        let sh = k * bits;
        let y = f((a >> sh) as u64 & m, (b >> sh) as u64 & m) & m;
        out |= u128::from(y) << sh;
    }
    out
}

#[inline(always)]
fn sx(v: u64, lane: usize) -> i64 {
    crate::flags::sext(v, lane) as i64
}

/// Packed operations, named by their mnemonic.
pub(crate) mod op {
    pub(crate) const PXOR: u8 = 0;
    pub(crate) const POR: u8 = 1;
    pub(crate) const PAND: u8 = 2;
    pub(crate) const PANDN: u8 = 3;
    pub(crate) const PADDB: u8 = 4;
    pub(crate) const PADDW: u8 = 5;
    pub(crate) const PADDD: u8 = 6;
    pub(crate) const PADDQ: u8 = 7;
    pub(crate) const PSUBB: u8 = 8;
    pub(crate) const PSUBW: u8 = 9;
    pub(crate) const PSUBD: u8 = 10;
    pub(crate) const PSUBQ: u8 = 11;
    pub(crate) const PCMPEQB: u8 = 12;
    pub(crate) const PCMPEQW: u8 = 13;
    pub(crate) const PCMPEQD: u8 = 14;
    pub(crate) const PCMPGTB: u8 = 15;
    pub(crate) const PCMPGTW: u8 = 16;
    pub(crate) const PCMPGTD: u8 = 17;
    pub(crate) const PMINUB: u8 = 18;
    pub(crate) const PMAXUB: u8 = 19;
    pub(crate) const PMINSW: u8 = 20;
    pub(crate) const PMAXSW: u8 = 21;
    pub(crate) const PAVGB: u8 = 22;
    pub(crate) const PMULLW: u8 = 23;
    pub(crate) const PMULUDQ: u8 = 24;
    pub(crate) const PUNPCKLBW: u8 = 25;
    pub(crate) const PUNPCKLWD: u8 = 26;
    pub(crate) const PUNPCKLDQ: u8 = 27;
    pub(crate) const PUNPCKLQDQ: u8 = 28;
    pub(crate) const PUNPCKHBW: u8 = 29;
    pub(crate) const PUNPCKHWD: u8 = 30;
    pub(crate) const PUNPCKHDQ: u8 = 31;
    pub(crate) const PUNPCKHQDQ: u8 = 32;
    pub(crate) const PACKUSWB: u8 = 33;
    pub(crate) const PACKSSWB: u8 = 34;
    pub(crate) const PACKSSDW: u8 = 35;
    /// SSE4.1.
    pub(crate) const PMINUD: u8 = 36;
    pub(crate) const PMINSB: u8 = 37;
    pub(crate) const PMINSD: u8 = 38;
    /// SSE2.
    pub(crate) const PMULHW: u8 = 39;
}

/// The packed operation `OP` on two 128-bit values.
#[inline(always)]
fn packed_value<const OP: u8>(a: u128, b: u128) -> u128 {
    use op::*;
    let all = |c: bool| if c { u64::MAX } else { 0 };
    match OP {
        PXOR => a ^ b,
        POR => a | b,
        PAND => a & b,
        PANDN => !a & b,
        PADDB => lanes(a, b, 1, u64::wrapping_add),
        PADDW => lanes(a, b, 2, u64::wrapping_add),
        PADDD => lanes(a, b, 4, u64::wrapping_add),
        PADDQ => lanes(a, b, 8, u64::wrapping_add),
        PSUBB => lanes(a, b, 1, u64::wrapping_sub),
        PSUBW => lanes(a, b, 2, u64::wrapping_sub),
        PSUBD => lanes(a, b, 4, u64::wrapping_sub),
        PSUBQ => lanes(a, b, 8, u64::wrapping_sub),
        PCMPEQB => lanes(a, b, 1, |p, q| all(p == q)),
        PCMPEQW => lanes(a, b, 2, |p, q| all(p == q)),
        PCMPEQD => lanes(a, b, 4, |p, q| all(p == q)),
        PCMPGTB => lanes(a, b, 1, |p, q| all(sx(p, 1) > sx(q, 1))),
        PCMPGTW => lanes(a, b, 2, |p, q| all(sx(p, 2) > sx(q, 2))),
        PCMPGTD => lanes(a, b, 4, |p, q| all(sx(p, 4) > sx(q, 4))),
        PMINUB => lanes(a, b, 1, u64::min),
        PMAXUB => lanes(a, b, 1, u64::max),
        PMINUD => lanes(a, b, 4, u64::min),
        PMINSB => lanes(a, b, 1, |p, q| if sx(p, 1) < sx(q, 1) { p } else { q }),
        PMINSD => lanes(a, b, 4, |p, q| if sx(p, 4) < sx(q, 4) { p } else { q }),
        PMULHW => lanes(a, b, 2, |p, q| ((sx(p, 2) * sx(q, 2)) >> 16) as u64),
        PMINSW => lanes(a, b, 2, |p, q| if sx(p, 2) < sx(q, 2) { p } else { q }),
        PMAXSW => lanes(a, b, 2, |p, q| if sx(p, 2) > sx(q, 2) { p } else { q }),
        PAVGB => lanes(a, b, 1, |p, q| (p + q + 1) >> 1),
        PMULLW => lanes(a, b, 2, u64::wrapping_mul),
        PMULUDQ => lanes(a, b, 8, |p, q| (p & 0xffff_ffff) * (q & 0xffff_ffff)),
        PUNPCKLBW => interleave(a, b, 1, false),
        PUNPCKLWD => interleave(a, b, 2, false),
        PUNPCKLDQ => interleave(a, b, 4, false),
        PUNPCKLQDQ => interleave(a, b, 8, false),
        PUNPCKHBW => interleave(a, b, 1, true),
        PUNPCKHWD => interleave(a, b, 2, true),
        PUNPCKHDQ => interleave(a, b, 4, true),
        PUNPCKHQDQ => interleave(a, b, 8, true),
        PACKUSWB => pack(a, b, 2, 0, 255),
        PACKSSWB => pack(a, b, 2, -128, 127),
        _ => pack(a, b, 4, -32768, 32767),
    }
}

/// dst = dst OP src, src an xmm register or an aligned m128.
pub(crate) fn packed<X: Machine, const OP: u8>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let b = read_v::<X, 16, true>(x, i, i.op[1], r)?;
    let a = read_v::<X, 16, false>(x, i, i.op[0], r)?;
    write_v::<X, 16, false>(x, i, i.op[0], packed_value::<OP>(a, b), r)
}

/// punpckl*/punpckh*: interleave the low (or high) halves of a and b.
fn interleave(a: u128, b: u128, lane: usize, high: bool) -> u128 {
    let bits = lane * 8;
    let m = u128::from(mask(lane));
    let base = if high { 64 } else { 0 };
    let mut out = 0u128;
    for k in 0..8 / lane {
        let p = (a >> (base + k * bits)) & m;
        let q = (b >> (base + k * bits)) & m;
        out |= p << (2 * k * bits) | q << ((2 * k + 1) * bits);
    }
    out
}

/// packuswb/packsswb/packssdw: narrow the signed `lane`-byte elements of a,
/// then b, to half width, saturating to `lo..=hi`.
fn pack(a: u128, b: u128, lane: usize, lo: i64, hi: i64) -> u128 {
    let n = 16 / lane;
    let bits = lane * 8;
    let half = bits / 2;
    let mut out = 0u128;
    for (k, v) in [a, b].into_iter().enumerate() {
        for e in 0..n {
            let y = sx((v >> (e * bits)) as u64 & mask(lane), lane).clamp(lo, hi);
            out |= u128::from(y as u64 & mask(lane / 2)) << ((k * n + e) * half);
        }
    }
    out
}

/// pmovmskb r32/r64, xmm: the byte sign bits.
pub(crate) fn pmovmskb<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let v = read_v::<X, 16, false>(x, i, i.op[1], r)?;
    let m = (0..16).fold(0u64, |m, k| m | (((v >> (k * 8 + 7)) & 1) as u64) << k);
    super::set_reg(x, usize::from(i.op[0]), m);
    Ok(())
}

/// movmskps / movmskpd (`LANE` = 4 / 8) r32/r64, xmm: the element sign
/// bits.
pub(crate) fn movmsk<X: Machine, const LANE: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let v = read_v::<X, 16, false>(x, i, i.op[1], r)?;
    let m = (0..16 / LANE).fold(0u64, |m, k| {
        m | (((v >> (k * LANE * 8 + LANE * 8 - 1)) & 1) as u64) << k
    });
    super::set_reg(x, usize::from(i.op[0]), m);
    Ok(())
}

pub(crate) const PSHUFD: u8 = 0;
pub(crate) const PSHUFLW: u8 = 1;
pub(crate) const PSHUFHW: u8 = 2;
pub(crate) const SHUFPS: u8 = 3;

/// pshufd, pshuflw, pshufhw, shufps xmm, xmm/m128, imm8.
pub(crate) fn shuffle<X: Machine, const OP: u8>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let imm = i.imm as u32;
    let src = read_v::<X, 16, true>(x, i, i.op[1], r)?;
    let pick =
        |v: u128, lane: usize, k: u32| (v >> (lane * 8 * k as usize)) & u128::from(mask(lane));
    let v = match OP {
        PSHUFD => (0..4).fold(0u128, |acc, k| {
            acc | pick(src, 4, (imm >> (2 * k)) & 3) << (32 * k)
        }),
        PSHUFLW => {
            let lo = (0..4).fold(0u128, |acc, k| {
                acc | pick(src, 2, (imm >> (2 * k)) & 3) << (16 * k)
            });
            (src & !LO) | lo
        }
        PSHUFHW => {
            let hi = src >> 64;
            let h = (0..4).fold(0u128, |acc, k| {
                acc | pick(hi, 2, (imm >> (2 * k)) & 3) << (16 * k)
            });
            (src & LO) | h << 64
        }
        _ => {
            let dst = read_v::<X, 16, false>(x, i, i.op[0], r)?;
            let lo = pick(dst, 4, imm & 3) | pick(dst, 4, (imm >> 2) & 3) << 32;
            let hi = pick(src, 4, (imm >> 4) & 3) | pick(src, 4, (imm >> 6) & 3) << 32;
            lo | hi << 64
        }
    };
    write_v::<X, 16, false>(x, i, i.op[0], v, r)
}

pub(crate) const PSLL: u8 = 0;
pub(crate) const PSRL: u8 = 1;
pub(crate) const PSRA: u8 = 2;
pub(crate) const PSLLDQ: u8 = 3;
pub(crate) const PSRLDQ: u8 = 4;

/// psll/psrl/psra on `LANE`-byte elements by imm8 or by the low 64 bits
/// of an xmm/m128 count, and pslldq/psrldq (bytes, imm8).
pub(crate) fn packed_shift<X: Machine, const OP: u8, const LANE: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let count = if i.op[1] == IMM {
        i.imm & 0xff
    } else {
        read_v::<X, 16, true>(x, i, i.op[1], r)? as u64
    };
    let a = read_v::<X, 16, false>(x, i, i.op[0], r)?;
    let bits = LANE as u64 * 8;
    let v = match OP {
        PSLLDQ => {
            if count > 15 {
                0
            } else {
                a << (count * 8)
            }
        }
        PSRLDQ => {
            if count > 15 {
                0
            } else {
                a >> (count * 8)
            }
        }
        PSLL => lanes(
            a,
            0,
            LANE,
            |p, _| if count >= bits { 0 } else { p << count },
        ),
        PSRL => lanes(
            a,
            0,
            LANE,
            |p, _| if count >= bits { 0 } else { p >> count },
        ),
        _ => lanes(a, 0, LANE, |p, _| {
            (sx(p, LANE) >> count.min(bits - 1)) as u64
        }),
    };
    write_v::<X, 16, false>(x, i, i.op[0], v, r)
}

/// pextrw r32, xmm, imm8.
pub(crate) fn pextrw<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let sel = (i.imm & 7) as usize * 16;
    let v = read_v::<X, 16, false>(x, i, i.op[1], r)?;
    super::set_reg(x, usize::from(i.op[0]), ((v >> sel) & 0xffff) as u64);
    Ok(())
}

/// pinsrw xmm, r32/m16, imm8.
pub(crate) fn pinsrw<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let sel = (i.imm & 7) as usize * 16;
    let w = read_v::<X, 2, false>(x, i, i.op[1], r)? & 0xffff;
    let old = read_v::<X, 16, false>(x, i, i.op[0], r)?;
    write_v::<X, 16, false>(x, i, i.op[0], (old & !(0xffff << sel)) | w << sel, r)
}
