//! Multiplication and division.
//!
//! mul and imul define CF and OF (the product did not fit the destination)
//! and leave SF, ZF, AF and PF undefined; div and idiv leave all six
//! undefined.

use super::{read, reg, set_sized, write, Flow};
use crate::flags::{self, mask, sext, szp};
use crate::insn::{Insn, IMM};
use crate::regs::flag::{AF, CF, OF, PF, SF, STATUS, ZF};
use crate::regs::Registers;
use crate::step::{Machine, Retired, Stop};

const PRODUCT_UNDEFINED: u64 = SF | ZF | AF | PF;

/// mul and imul r/m (`SIGNED`): ax = al * src, or rdx:rax = rax * src.
pub(crate) fn mul_wide<X: Machine, const SIGNED: bool, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let src = read::<X, S>(x, i, i.op[0], r)?;
    let acc = reg(x, 0) & mask(S);
    let bits = S * 8;
    let (lo, hi, overflow) = if SIGNED {
        let p = i128::from(sext(acc, S) as i64) * i128::from(sext(src, S) as i64);
        let lo = p as u64 & mask(S);
        (
            lo,
            (p >> bits) as u64 & mask(S),
            i128::from(sext(lo, S) as i64) != p,
        )
    } else {
        let p = u128::from(acc) * u128::from(src);
        let hi = (p >> bits) as u64 & mask(S);
        (p as u64 & mask(S), hi, hi != 0)
    };
    if S == 1 {
        set_sized::<X, 2>(x, 0, lo | hi << 8);
    } else {
        set_sized::<X, S>(x, 0, lo);
        set_sized::<X, S>(x, 2, hi);
    }
    let f = if overflow { CF | OF } else { 0 };
    flags::update(x.regs_mut(), STATUS, f | szp::<S>(lo), PRODUCT_UNDEFINED);
    Ok(())
}

/// imul r, r/m and imul r, r/m, imm: the truncated signed product.
pub(crate) fn imul<X: Machine, const S: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let (a, b) = if i.op[2] == IMM {
        (read::<X, S>(x, i, i.op[1], r)?, i.imm & mask(S))
    } else {
        (
            read::<X, S>(x, i, i.op[0], r)?,
            read::<X, S>(x, i, i.op[1], r)?,
        )
    };
    let full = i128::from(sext(a, S) as i64) * i128::from(sext(b, S) as i64);
    let res = full as u64 & mask(S);
    let overflow = i128::from(sext(res, S) as i64) != full;
    write::<X, S>(x, i, i.op[0], res, r)?;
    let f = if overflow { CF | OF } else { 0 };
    flags::update(x.regs_mut(), STATUS, f | szp::<S>(res), PRODUCT_UNDEFINED);
    Ok(())
}

/// div and idiv r/m (`SIGNED`): quotient and remainder of ah:al or
/// rdx:rax by the source; #DE on a zero divisor or a quotient that does
/// not fit.
pub(crate) fn div<X: Machine, const SIGNED: bool, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let src = read::<X, S>(x, i, i.op[0], r)?;
    if src == 0 {
        return Err(Stop::DivideError);
    }
    let bits = S * 8;
    let m = mask(S);
    let (lo, hi) = if S == 1 {
        let ax = reg(x, 0);
        (ax & 0xff, (ax >> 8) & 0xff)
    } else {
        (reg(x, 0) & m, reg(x, 2) & m)
    };
    let dividend = u128::from(hi) << bits | u128::from(lo);
    let (q, rem) = if SIGNED {
        let shift = 128 - 2 * bits;
        let n = ((dividend << shift) as i128) >> shift;
        let d = i128::from(sext(src, S) as i64);
        let q = n.checked_div(d).ok_or(Stop::DivideError)?;
        let limit = 1i128 << (bits - 1);
        if q >= limit || q < -limit {
            return Err(Stop::DivideError);
        }
        (q as u64 & m, (n % d) as u64 & m)
    } else {
        let d = u128::from(src);
        let q = dividend / d;
        if q > u128::from(m) {
            return Err(Stop::DivideError);
        }
        (q as u64, (dividend % d) as u64)
    };
    if S == 1 {
        set_sized::<X, 2>(x, 0, q | rem << 8);
    } else {
        set_sized::<X, S>(x, 0, q);
        set_sized::<X, S>(x, 2, rem);
    }
    let f = x.regs().rflags();
    flags::update(x.regs_mut(), STATUS, f, STATUS);
    Ok(())
}
