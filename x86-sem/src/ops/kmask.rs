//! AVX-512 mask-register instructions. A write to a mask register of a
//! `BITS`-bit operation zeroes the bits above `BITS`.

use super::{reg, set_reg, Flow};
use crate::flags::{self, low_bits};
use crate::insn::{Insn, KREG};
use crate::regs::flag::{CF, STATUS, ZF};
use crate::regs::Registers;
use crate::step::{Machine, Retired};

#[inline(always)]
fn k<X: Machine>(x: &X, o: u8) -> u64 {
    x.regs().k(usize::from(o - KREG))
}

/// kmovd/kmovq k, r32/r64.
pub(crate) fn from_gpr<X: Machine, const BITS: u32>(x: &mut X, i: &Insn, _r: &mut Retired) -> Flow {
    let v = reg(x, usize::from(i.op[1])) & low_bits(BITS as usize);
    x.regs_mut().set_k(usize::from(i.op[0] - KREG), v);
    Ok(())
}

/// kmovd/kmovq r32/r64, k (the register is written whole, zero-extended).
pub(crate) fn to_gpr<X: Machine, const BITS: u32>(x: &mut X, i: &Insn, _r: &mut Retired) -> Flow {
    let v = k(x, i.op[1]) & low_bits(BITS as usize);
    set_reg(x, usize::from(i.op[0]), v);
    Ok(())
}

pub(crate) const KOR: u8 = 0;
pub(crate) const KXNOR: u8 = 1;

/// knotw/knotd k1, k2.
pub(crate) fn knot<X: Machine, const BITS: u32>(x: &mut X, i: &Insn, _r: &mut Retired) -> Flow {
    let v = !k(x, i.op[1]) & low_bits(BITS as usize);
    x.regs_mut().set_k(usize::from(i.op[0] - KREG), v);
    Ok(())
}

/// kor, kxnor k1, k2, k3.
pub(crate) fn logic<X: Machine, const OP: u8, const BITS: u32>(
    x: &mut X,
    i: &Insn,
    _r: &mut Retired,
) -> Flow {
    let (a, b) = (k(x, i.op[1]), k(x, i.op[2]));
    let v = if OP == KOR { a | b } else { !(a ^ b) };
    x.regs_mut()
        .set_k(usize::from(i.op[0] - KREG), v & low_bits(BITS as usize));
    Ok(())
}

/// kunpckbw/wd/dq k1, k2, k3: the low `HALF` bits of k3, with the low
/// `HALF` bits of k2 above them.
pub(crate) fn unpack<X: Machine, const HALF: u32>(x: &mut X, i: &Insn, _r: &mut Retired) -> Flow {
    let m = low_bits(HALF as usize);
    let v = (k(x, i.op[1]) & m) << HALF | (k(x, i.op[2]) & m);
    x.regs_mut().set_k(usize::from(i.op[0] - KREG), v);
    Ok(())
}

/// kortestd/q: ZF when k1 OR k2 is all zeros, CF when all ones; OF, SF,
/// AF and PF cleared.
pub(crate) fn kortest<X: Machine, const BITS: u32>(x: &mut X, i: &Insn, _r: &mut Retired) -> Flow {
    let m = low_bits(BITS as usize);
    let v = (k(x, i.op[0]) | k(x, i.op[1])) & m;
    let f = (u64::from(v == 0) * ZF) | (u64::from(v == m) * CF);
    flags::update(x.regs_mut(), STATUS, f, 0);
    Ok(())
}

/// ktestd/q: ZF when k1 AND k2 is zero, CF when (NOT k1) AND k2 is zero;
/// OF, SF, AF and PF cleared.
pub(crate) fn ktest<X: Machine, const BITS: u32>(x: &mut X, i: &Insn, _r: &mut Retired) -> Flow {
    let m = low_bits(BITS as usize);
    let (a, b) = (k(x, i.op[0]), k(x, i.op[1]));
    let f = (u64::from(a & b & m == 0) * ZF) | (u64::from(!a & b & m == 0) * CF);
    flags::update(x.regs_mut(), STATUS, f, 0);
    Ok(())
}
