//! BMI1/BMI2 general-purpose instructions glibc's string functions use, and
//! movbe.

use super::{read, set_sized, write, Flow};
use crate::flags::{self, mask, sext, szp};
use crate::insn::Insn;
use crate::regs::flag::{AF, CF, PF, STATUS};
use crate::step::{Machine, Retired};

/// bzhi r, r/m, r: the source with the bits from index (bits 7:0 of the
/// third operand) up cleared. CF when the index is past the operand; ZF
/// and SF from the result; OF cleared; AF and PF undefined.
pub(crate) fn bzhi<X: Machine, const S: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let bits = S as u64 * 8;
    let src = read::<X, S>(x, i, i.op[1], r)?;
    let n = read::<X, S>(x, i, i.op[2], r)? & 0xff;
    let v = if n < bits {
        src & ((1u64 << n) - 1)
    } else {
        src
    };
    write::<X, S>(x, i, i.op[0], v, r)?;
    let f = (u64::from(n > bits - 1) * CF) | szp::<S>(v);
    flags::update(x.regs_mut(), STATUS, f, AF | PF);
    Ok(())
}

/// andn r, r, r/m: the second source AND NOT the first. SF and ZF from
/// the result; CF and OF cleared; AF and PF undefined.
pub(crate) fn andn<X: Machine, const S: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let b = read::<X, S>(x, i, i.op[2], r)?;
    let a = read::<X, S>(x, i, i.op[1], r)?;
    let v = !a & b & mask(S);
    write::<X, S>(x, i, i.op[0], v, r)?;
    // szp also gives PF, which is undefined here: harmless.
    flags::update(x.regs_mut(), STATUS, szp::<S>(v), AF | PF);
    Ok(())
}

pub(crate) const BLSMSK: u8 = 0;
pub(crate) const BLSR: u8 = 1;

/// blsmsk (mask up to the lowest set bit) and blsr (clear the lowest set
/// bit): CF when the source is zero; SF (and for blsr ZF) from the result,
/// ZF cleared for blsmsk; OF cleared; AF and PF undefined.
pub(crate) fn lowest_bit<X: Machine, const OP: u8, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let src = read::<X, S>(x, i, i.op[1], r)?;
    let below = src.wrapping_sub(1) & mask(S);
    let v = if OP == BLSMSK {
        src ^ below
    } else {
        src & below
    };
    write::<X, S>(x, i, i.op[0], v, r)?;
    // PF is undefined: computing it with ZF and SF is harmless.
    let zs = szp::<S>(v);
    let f = (u64::from(src == 0) * CF) | zs;
    flags::update(x.regs_mut(), STATUS, f, AF | PF);
    Ok(())
}

pub(crate) const SARX: u8 = 0;
pub(crate) const SHLX: u8 = 1;
pub(crate) const SHRX: u8 = 2;

/// sarx, shlx, shrx r, r/m, r: shifts by the third operand (masked to 5
/// or 6 bits) that touch no flag.
pub(crate) fn shift_x<X: Machine, const OP: u8, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let src = read::<X, S>(x, i, i.op[1], r)?;
    let count = read::<X, S>(x, i, i.op[2], r)? & if S == 8 { 63 } else { 31 };
    let v = match OP {
        SARX => ((sext(src, S) as i64) >> count) as u64,
        SHLX => src << count,
        _ => src >> count,
    };
    write::<X, S>(x, i, i.op[0], v & mask(S), r)
}

/// movbe r, m and movbe m, r: a move with the bytes reversed.
pub(crate) fn movbe<X: Machine, const S: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let v = read::<X, S>(x, i, i.op[1], r)?;
    let swapped = v.swap_bytes() >> (64 - 8 * S);
    if i.op[0] < 16 {
        set_sized::<X, S>(x, usize::from(i.op[0]), swapped);
        Ok(())
    } else {
        write::<X, S>(x, i, i.op[0], swapped, r)
    }
}
