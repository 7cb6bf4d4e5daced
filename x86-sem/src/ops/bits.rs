//! Bit tests and bit scans.

use super::{load, offset, read, segment, store, write, Flow};
use crate::flags::{self, sext};
use crate::insn::{Insn, IMM, MEM};
use crate::regs::flag::{AF, CF, OF, PF, SF, STATUS, ZF};
use crate::step::{Machine, Retired};

pub(crate) const BT: u8 = 0;
pub(crate) const BTS: u8 = 1;
pub(crate) const BTR: u8 = 2;
pub(crate) const BTC: u8 = 3;

/// bt, bts, btr, btc r/m, r/imm8: CF = the bit; OF, SF, AF and PF are
/// undefined and ZF is kept. A register bit offset on a memory operand
/// reaches outside the operand (signed, in `S`-byte steps), as on the CPU.
pub(crate) fn bit_test<X: Machine, const OP: u8, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let bits = S as u64 * 8;
    let off = read::<X, S>(x, i, i.op[1], r)?;
    let bit = off & (bits - 1);
    let (value, addr) = if i.op[0] == MEM && i.op[1] != IMM {
        let step = (sext(off, S) as i64 >> bits.trailing_zeros()) * S as i64;
        let mut o = offset(x, i).wrapping_add(step as u64);
        if i.addr32 {
            o &= 0xffff_ffff;
        }
        let a = segment(x, i, o);
        (load(x, r, a, S)?, Some(a))
    } else {
        (read::<X, S>(x, i, i.op[0], r)?, None)
    };
    let cf = (value >> bit) & 1;
    if OP != BT {
        let new = match OP {
            BTS => value | 1 << bit,
            BTR => value & !(1 << bit),
            _ => value ^ 1 << bit,
        };
        match addr {
            Some(a) => store(x, r, a, S, new)?,
            None => write::<X, S>(x, i, i.op[0], new, r)?,
        }
    }
    let undefined = OF | SF | AF | PF;
    flags::update(x.regs_mut(), CF | undefined, cf, undefined);
    Ok(())
}

pub(crate) const BSF: u8 = 0;
pub(crate) const BSR: u8 = 1;
pub(crate) const TZCNT: u8 = 2;
pub(crate) const LZCNT: u8 = 3;
pub(crate) const POPCNT: u8 = 4;

/// bsf, bsr (ZF = source zero, the rest undefined; a zero source leaves
/// the destination as it was), tzcnt, lzcnt (CF = source zero, ZF =
/// result zero) and popcnt (ZF = source zero, the rest cleared).
pub(crate) fn bit_scan<X: Machine, const OP: u8, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let bits = S as u32 * 8;
    let v = read::<X, S>(x, i, i.op[1], r)?;
    let zero = u64::from(v == 0);
    match OP {
        BSF | BSR => {
            if v != 0 {
                let n = if OP == BSF {
                    v.trailing_zeros()
                } else {
                    63 - v.leading_zeros()
                };
                write::<X, S>(x, i, i.op[0], u64::from(n), r)?;
            }
            flags::update(x.regs_mut(), STATUS, zero << 6, STATUS & !ZF);
        }
        TZCNT | LZCNT => {
            let n = if v == 0 {
                bits
            } else if OP == TZCNT {
                v.trailing_zeros()
            } else {
                v.leading_zeros() - (64 - bits)
            };
            write::<X, S>(x, i, i.op[0], u64::from(n), r)?;
            let f = zero | u64::from(n == 0) << 6;
            flags::update(x.regs_mut(), STATUS, f, OF | SF | AF | PF);
        }
        _ => {
            write::<X, S>(x, i, i.op[0], u64::from(v.count_ones()), r)?;
            flags::update(x.regs_mut(), STATUS, zero << 6, 0);
        }
    }
    Ok(())
}
