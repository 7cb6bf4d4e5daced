//! SSE/SSE2 floating point: scalar and packed single and double
//! arithmetic, comparisons and conversions, through [`crate::float`].
//!
//! MXCSR is honoured whole: its rounding control, flush-to-zero and
//! denormals-are-zero; masked exceptions set its sticky flags; an
//! exception whose mask is clear would trap (#XM), which the core
//! reports as [`Stop::Opaque`] before writing anything, as it does while
//! MXCSR is unset ([`crate::MXCSR_UNSET`]). A NaN result is
//! the first NaN operand, quieted, as the manuals' table of NaN results
//! gives for SSE (Intel SDM vol. 1, table 4-7).

use super::sse::{read_v, write_v};
use super::{set_sized, Flow};
use crate::float::{self, Env, Format, Num, Order, Out, F32, F64, RZ};
use crate::insn::Insn;
use crate::regs::flag::{CF, PF, STATUS, ZF};
use crate::regs::Registers;
use crate::step::{Machine, Retired, Stop};

/// The rounding environment MXCSR sets.
#[inline]
pub(super) fn env(mxcsr: u32) -> Env {
    Env {
        ftz: mxcsr & 0x8000 != 0,
        daz: mxcsr & 0x40 != 0,
        ..Env::new((mxcsr >> 13) as u8 & 3)
    }
}

/// MXCSR, or a stop while the owner has not filled it.
#[inline]
pub(super) fn mxcsr<X: Machine>(x: &X) -> Result<u32, Stop> {
    let m = x.regs().mxcsr();
    if m > 0xffff {
        return Err(Stop::Opaque);
    }
    Ok(m)
}

/// Stops when an exception `e` raised is unmasked, or `e` met a case the
/// soft float does not cover; otherwise the MXCSR with the flags set.
#[inline]
pub(super) fn checked(mxcsr: u32, e: &Env) -> Result<u32, Stop> {
    let masks = (mxcsr >> 7) as u8 & 0x3f;
    if e.opaque || e.raised() & !masks != 0 {
        return Err(Stop::Opaque);
    }
    Ok(mxcsr | u32::from(e.flags))
}

pub(super) const fn format(w: usize) -> Format {
    if w == 4 {
        F32
    } else {
        F64
    }
}

/// Operations, named by their mnemonic stem.
pub(crate) const ADD: u8 = 0;
pub(crate) const SUB: u8 = 1;
pub(crate) const MUL: u8 = 2;
pub(crate) const DIV: u8 = 3;
pub(crate) const MIN: u8 = 4;
pub(crate) const MAX: u8 = 5;
pub(crate) const SQRT: u8 = 6;

/// One element of `OP`: `a` the destination's, `b` the source's.
#[inline]
pub(super) fn element<const OP: u8>(e: &mut Env, fmt: Format, a: u128, b: u128) -> u128 {
    let x = float::unpack(fmt, a, e.daz);
    let y = float::unpack(fmt, b, e.daz);
    let out = match OP {
        ADD => float::add(e, fmt, x, y, false),
        SUB => float::add(e, fmt, x, y, true),
        MUL => float::mul(e, fmt, x, y),
        DIV => float::div(e, fmt, x, y),
        SQRT => float::sqrt(e, fmt, y),
        _ => {
            // min/max: the source unless the destination is strictly
            // smaller (larger); NaNs and equal zeros give the source.
            let o = float::compare(e, x, y, true);
            let dst = if OP == MIN {
                o == Order::Less
            } else {
                o == Order::Greater
            };
            let pick = if dst { x } else { y };
            return match pick {
                Num::Fin { .. } => {
                    if dst {
                        a
                    } else {
                        b
                    }
                }
                _ => float::pack_special(fmt, pick),
            };
        }
    };
    match out {
        Out::Bits(v) => v,
        Out::PropagateNaN => {
            let first = if OP != SQRT && x.is_nan() { x } else { y };
            float::pack_special(fmt, first.quiet())
        }
    }
}

/// `W`-byte elements (4 or 8) of a 128-bit value.
pub(super) const fn lane(v: u128, w: usize, k: usize) -> u128 {
    (v >> (k * w * 8)) & ((1u128 << (w * 8)) - 1)
}

/// The body the lane-wise forms share: `W`-byte elements of the source,
/// all of them when `PACKED` (else the low one), and of the destination go
/// to `f` pair by pair under MXCSR; the results replace the destination's
/// lanes (the rest kept), and MXCSR takes the flags raised, unless an
/// unmasked exception faults first.
fn lanewise<X: Machine, const W: usize, const PACKED: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
    mut f: impl FnMut(&mut Env, u128, u128) -> u128,
) -> Flow {
    let src = if PACKED {
        read_v::<X, 16, true>(x, i, i.op[1], r)?
    } else {
        read_v::<X, W, false>(x, i, i.op[1], r)?
    };
    let dst = read_v::<X, 16, false>(x, i, i.op[0], r)?;
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    let n = if PACKED { 16 / W } else { 1 };
    let mut v = dst;
    for k in 0..n {
        let y = f(&mut e, lane(dst, W, k), lane(src, W, k));
        v = (v & !(((1u128 << (W * 8)) - 1) << (k * W * 8))) | y << (k * W * 8);
    }
    let m = checked(mxcsr, &e)?;
    write_v::<X, 16, false>(x, i, i.op[0], v, r)?;
    x.regs_mut().set_mxcsr(m);
    Ok(())
}

/// addss/sd/ps/pd, subs…, muls…, divs…, mins…, maxs…, sqrts…: `W`-byte
/// elements, all four (two) of them when `PACKED`, else the low one with
/// the rest of the destination kept.
pub(crate) fn arith<X: Machine, const OP: u8, const W: usize, const PACKED: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    lanewise::<X, W, PACKED>(x, i, r, |e, a, b| element::<OP>(e, format(W), a, b))
}

/// cmpss/sd/ps/pd xmm, xmm/m, imm8: all ones where the predicate holds.
pub(crate) fn cmp<X: Machine, const W: usize, const PACKED: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let pred = i.imm & 7;
    lanewise::<X, W, PACKED>(x, i, r, |e, a, b| {
        let a = float::unpack(format(W), a, e.daz);
        let b = float::unpack(format(W), b, e.daz);
        // LT, LE, NLT and NLE signal on any NaN; the others on SNaN only.
        let o = float::compare(e, a, b, matches!(pred, 1 | 2 | 5 | 6));
        let t = match pred {
            0 => o == Order::Equal,
            1 => o == Order::Less,
            2 => matches!(o, Order::Less | Order::Equal),
            3 => o == Order::Unordered,
            4 => o != Order::Equal,
            5 => o != Order::Less,
            6 => !matches!(o, Order::Less | Order::Equal),
            _ => o != Order::Unordered,
        };
        if t {
            (1u128 << (W * 8)) - 1
        } else {
            0
        }
    })
}

/// ucomiss/sd (`SIGNALLING` false) and comiss/sd: ZF, PF, CF from the
/// comparison, OF, SF, AF cleared.
pub(crate) fn comi<X: Machine, const W: usize, const SIGNALLING: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let src = read_v::<X, W, false>(x, i, i.op[1], r)?;
    let dst = read_v::<X, 16, false>(x, i, i.op[0], r)?;
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    let a = float::unpack(format(W), lane(dst, W, 0), e.daz);
    let b = float::unpack(format(W), lane(src, W, 0), e.daz);
    let f = match float::compare(&mut e, a, b, SIGNALLING) {
        Order::Unordered => ZF | PF | CF,
        Order::Less => CF,
        Order::Equal => ZF,
        Order::Greater => 0,
    };
    let m = checked(mxcsr, &e)?;
    let regs = x.regs_mut();
    regs.set_rflags((regs.rflags() & !STATUS) | f);
    regs.set_undefined(regs.undefined() & !STATUS);
    regs.set_mxcsr(m);
    Ok(())
}

/// cvtsi2ss/sd xmm, r/m32 or r/m64 (`S` bytes): the low element.
pub(crate) fn from_int<X: Machine, const W: usize, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let v = read_v::<X, S, false>(x, i, i.op[1], r)? as u64;
    let v = if S == 4 {
        v as u32 as i32 as i64
    } else {
        v as i64
    };
    let dst = read_v::<X, 16, false>(x, i, i.op[0], r)?;
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    let y = float::from_int(&mut e, format(W), v);
    let m = checked(mxcsr, &e)?;
    let low = (1u128 << (W * 8)) - 1;
    write_v::<X, 16, false>(x, i, i.op[0], (dst & !low) | y, r)?;
    x.regs_mut().set_mxcsr(m);
    Ok(())
}

/// cvt(t)ss2si / cvt(t)sd2si r32 or r64 (`S` bytes), xmm/m: rounded under
/// MXCSR, or truncated when `TRUNC`.
pub(crate) fn to_int<X: Machine, const W: usize, const S: usize, const TRUNC: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let src = read_v::<X, W, false>(x, i, i.op[1], r)?;
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    if TRUNC {
        e.rc = RZ;
    }
    let a = float::unpack(format(W), lane(src, W, 0), e.daz);
    let v = float::to_int(&mut e, a, S as u32 * 8);
    let m = checked(mxcsr, &e)?;
    set_sized::<X, S>(x, usize::from(i.op[0]), v);
    x.regs_mut().set_mxcsr(m);
    Ok(())
}

/// cvtss2sd (`W` = 4) and cvtsd2ss (`W` = 8): the low element into the
/// other format, the rest of the destination kept.
pub(crate) fn convert_scalar<X: Machine, const W: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let src = read_v::<X, W, false>(x, i, i.op[1], r)?;
    let dst = read_v::<X, 16, false>(x, i, i.op[0], r)?;
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    let to = if W == 4 { 8 } else { 4 };
    let y = convert(&mut e, format(W), format(to), lane(src, W, 0));
    let m = checked(mxcsr, &e)?;
    let low = (1u128 << (to * 8)) - 1;
    write_v::<X, 16, false>(x, i, i.op[0], (dst & !low) | y, r)?;
    x.regs_mut().set_mxcsr(m);
    Ok(())
}

/// One value from `from` to `to`; a NaN keeps its sign and the high bits
/// of its payload, quieted.
pub(super) fn convert(e: &mut Env, from: Format, to: Format, bits: u128) -> u128 {
    let a = float::unpack(from, bits, e.daz);
    match float::convert(e, to, a) {
        Out::Bits(v) => v,
        Out::PropagateNaN => float::pack_special(to, a.quiet()),
    }
}

/// Packed conversions, named by their mnemonic.
pub(crate) const PS2PD: u8 = 0;
pub(crate) const PD2PS: u8 = 1;
pub(crate) const DQ2PD: u8 = 2;
pub(crate) const DQ2PS: u8 = 3;
pub(crate) const PD2DQ: u8 = 4;
pub(crate) const TPD2DQ: u8 = 5;
pub(crate) const PS2DQ: u8 = 6;
pub(crate) const TPS2DQ: u8 = 7;

/// cvtps2pd, cvtpd2ps, cvtdq2pd, cvtdq2ps, cvt(t)pd2dq, cvt(t)ps2dq.
/// The sources of cvtps2pd and cvtdq2pd are 64 bits (any alignment); the
/// narrowing forms zero the destination's high half.
pub(crate) fn convert_packed<X: Machine, const OP: u8>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let src = if matches!(OP, PS2PD | DQ2PD) {
        read_v::<X, 8, false>(x, i, i.op[1], r)?
    } else {
        read_v::<X, 16, true>(x, i, i.op[1], r)?
    };
    let mxcsr = mxcsr(x)?;
    let mut e = env(mxcsr);
    if matches!(OP, TPD2DQ | TPS2DQ) {
        e.rc = RZ;
    }
    let mut v = 0u128;
    match OP {
        PS2PD => {
            for k in 0..2 {
                v |= convert(&mut e, F32, F64, lane(src, 4, k)) << (64 * k);
            }
        }
        PD2PS => {
            for k in 0..2 {
                v |= convert(&mut e, F64, F32, lane(src, 8, k)) << (32 * k);
            }
        }
        DQ2PD | DQ2PS => {
            let (fmt, w) = if OP == DQ2PD { (F64, 8) } else { (F32, 4) };
            for k in 0..16 / w {
                let n = lane(src, 4, k) as u32 as i32;
                v |= float::from_int(&mut e, fmt, i64::from(n)) << (w * 8 * k);
            }
        }
        _ => {
            let (fmt, w) = if matches!(OP, PD2DQ | TPD2DQ) {
                (F64, 8)
            } else {
                (F32, 4)
            };
            for k in 0..16 / w {
                let a = float::unpack(fmt, lane(src, w, k), e.daz);
                v |= u128::from(float::to_int(&mut e, a, 32) as u32) << (32 * k);
            }
        }
    }
    let m = checked(mxcsr, &e)?;
    write_v::<X, 16, false>(x, i, i.op[0], v, r)?;
    x.regs_mut().set_mxcsr(m);
    Ok(())
}

/// shufpd xmm, xmm/m128, imm8: the low element from the destination, the
/// high one from the source, each picked by one bit.
pub(crate) fn shufpd<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let src = read_v::<X, 16, true>(x, i, i.op[1], r)?;
    let dst = read_v::<X, 16, false>(x, i, i.op[0], r)?;
    let lo = lane(dst, 8, (i.imm & 1) as usize);
    let hi = lane(src, 8, (i.imm >> 1 & 1) as usize);
    write_v::<X, 16, false>(x, i, i.op[0], lo | hi << 64, r)
}
