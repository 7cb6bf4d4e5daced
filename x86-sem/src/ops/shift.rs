//! Shifts and rotates.
//!
//! The count is masked to 5 bits (6 for 64-bit operands). A masked count of
//! zero changes no flag (and no undefined mark). Otherwise, per the SDM
//! and the APM: OF is defined only for a count of one; AF is undefined
//! after any shift; SHL and SHR leave CF undefined when the count reaches
//! the operand width; rotates touch only CF and OF.

use super::{defined, read, write, Flow};
use crate::flags::{self, mask, sext, szp};
use crate::insn::Insn;
use crate::regs::flag::{AF, CF, OF, STATUS};
use crate::regs::Registers;
use crate::step::{Machine, Retired, Stop};

/// The group-2 operations in their /digit order.
pub(crate) const ROL: u8 = 0;
pub(crate) const ROR: u8 = 1;
pub(crate) const RCL: u8 = 2;
pub(crate) const RCR: u8 = 3;
pub(crate) const SHL: u8 = 4;
pub(crate) const SHR: u8 = 5;
pub(crate) const SAR: u8 = 7;

#[inline(always)]
const fn count_mask(size: usize) -> u64 {
    if size == 8 {
        63
    } else {
        31
    }
}

/// rol, ror, rcl, rcr, shl, shr, sar by 1, imm8 or cl.
pub(crate) fn shift<X: Machine, const OP: u8, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let bits = S as u32 * 8;
    let count = (read::<X, 1>(x, i, i.op[1], r)? & count_mask(S)) as u32;
    if (OP == RCL || OP == RCR) && count != 0 {
        defined(x, CF)?;
    }
    let a = read::<X, S>(x, i, i.op[0], r)?;
    if count == 0 {
        // Flags unchanged; the destination is still written, so a 32-bit
        // register is zero-extended.
        return write::<X, S>(x, i, i.op[0], a, r);
    }
    let m = mask(S);
    let msb = |v: u64| (v >> (bits - 1)) & 1;
    let over = if count > 1 { OF } else { 0 };
    let (res, written, value, undefined) = match OP {
        SHL => {
            let res = (a << count) & m;
            let cf = if count <= bits {
                (a >> (bits - count)) & 1
            } else {
                0
            };
            let cf_undefined = if count >= bits { CF } else { 0 };
            let of = msb(res) ^ cf;
            (
                res,
                STATUS,
                cf | of << 11 | szp::<S>(res),
                AF | over | cf_undefined,
            )
        }
        SHR => {
            let res = a >> count;
            let cf = (a >> (count - 1)) & 1;
            let cf_undefined = if count >= bits { CF } else { 0 };
            (
                res,
                STATUS,
                cf | msb(a) << 11 | szp::<S>(res),
                AF | over | cf_undefined,
            )
        }
        SAR => {
            let s = sext(a, S) as i64;
            let res = (s >> count) as u64 & m;
            let cf = ((s >> (count - 1)) & 1) as u64;
            (res, STATUS, cf | szp::<S>(res), AF | over)
        }
        ROL => {
            let c = count % bits;
            let res = if c == 0 {
                a
            } else {
                ((a << c) | (a >> (bits - c))) & m
            };
            let cf = res & 1;
            (res, CF | OF, cf | (msb(res) ^ cf) << 11, over)
        }
        ROR => {
            let c = count % bits;
            let res = if c == 0 {
                a
            } else {
                ((a >> c) | (a << (bits - c))) & m
            };
            let of = msb(res) ^ ((res >> (bits - 2)) & 1);
            (res, CF | OF, msb(res) | of << 11, over)
        }
        _ => {
            // rcl, rcr: a rotate of the (bits + 1)-bit value CF:dest; 8-
            // and 16-bit counts wrap at 9 and 17.
            let width = bits + 1;
            let c = if S <= 2 { count % width } else { count };
            let cin = x.regs().rflags() & CF;
            let wide = u128::from(cin) << bits | u128::from(a);
            let wmask = (1u128 << width) - 1;
            let rot = if OP == RCL {
                ((wide << c) | (wide >> (width - c))) & wmask
            } else {
                ((wide >> c) | (wide << (width - c))) & wmask
            };
            let res = rot as u64 & m;
            let cf = (rot >> bits) as u64 & 1;
            let of = if OP == RCL {
                msb(res) ^ cf
            } else {
                msb(a) ^ cin
            };
            (res, CF | OF, cf | of << 11, over)
        }
    };
    write::<X, S>(x, i, i.op[0], res, r)?;
    flags::update(x.regs_mut(), written, value, undefined);
    Ok(())
}

/// shld (`LEFT`) and shrd r/m, r, imm8/cl. A 16-bit shift by more than 16
/// has an undefined result: [`Stop::Opaque`].
pub(crate) fn shift_double<X: Machine, const LEFT: bool, const S: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let bits = S as u32 * 8;
    let count = (read::<X, 1>(x, i, i.op[2], r)? & count_mask(S)) as u32;
    if count > bits {
        return Err(Stop::Opaque);
    }
    let a = read::<X, S>(x, i, i.op[0], r)?;
    if count == 0 {
        return write::<X, S>(x, i, i.op[0], a, r);
    }
    let b = read::<X, S>(x, i, i.op[1], r)?;
    let m = mask(S);
    let (res, cf) = if LEFT {
        let res = ((a << count) | (b >> (bits - count))) & m;
        (res, (a >> (bits - count)) & 1)
    } else {
        let res = ((a >> count) | (b << (bits - count))) & m;
        (res, (a >> (count - 1)) & 1)
    };
    // OF (defined for one-bit shifts only): the sign changed.
    let of = ((res ^ a) >> (bits - 1)) & 1;
    let over = if count > 1 { OF } else { 0 };
    write::<X, S>(x, i, i.op[0], res, r)?;
    flags::update(
        x.regs_mut(),
        STATUS,
        cf | of << 11 | szp::<S>(res),
        AF | over,
    );
    Ok(())
}
