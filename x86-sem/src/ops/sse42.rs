//! pcmpistri (SSE4.2), and pshufb and palignr (SSSE3), as glibc's
//! strcspn, strspn, strpbrk and wcscpy use them.

use super::{ea, set_sized, Flow};
use crate::flags;
use crate::insn::{Insn, MEM, VEC};
use crate::mem::Memory;
use crate::regs::flag::{CF, OF, SF, STATUS, ZF};
use crate::regs::{gpr, Registers};
use crate::step::{Machine, Retired, Stop};

/// An xmm register or 16 bytes of memory (aligned if `ALIGNED`).
fn read128<X: Machine, const ALIGNED: bool>(
    x: &mut X,
    i: &Insn,
    o: u8,
    r: &mut Retired,
) -> Result<[u8; 16], Stop> {
    if o == MEM {
        let a = ea(x, i);
        r.mem_addr = a;
        if ALIGNED && a & 15 != 0 {
            return Err(Stop::Fault {
                addr: a,
                write: false,
            });
        }
        let mut b = [0u8; 16];
        x.mem().load_bytes(a, &mut b)?;
        Ok(b)
    } else {
        Ok(x.regs().xmm(usize::from(o - VEC)).to_le_bytes())
    }
}

/// pshufb xmm, xmm/m128: byte j of the result is byte (b[j] & 15) of the
/// destination, or zero when bit 7 of b[j] is set.
pub(crate) fn pshufb<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let b = read128::<X, true>(x, i, i.op[1], r)?;
    let a = read128::<X, false>(x, i, i.op[0], r)?;
    let out: [u8; 16] = core::array::from_fn(|j| {
        if b[j] & 0x80 != 0 {
            0
        } else {
            a[usize::from(b[j] & 15)]
        }
    });
    x.regs_mut()
        .set_xmm(usize::from(i.op[0] - VEC), u128::from_le_bytes(out));
    Ok(())
}

/// palignr xmm1, xmm2/m128, imm8: the 32 bytes xmm1:xmm2 (xmm1 high)
/// shifted right by imm8 bytes, low 16 kept; zero from imm8 = 32 on.
pub(crate) fn palignr<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let b = read128::<X, true>(x, i, i.op[1], r)?;
    let a = read128::<X, false>(x, i, i.op[0], r)?;
    let shift = (i.imm & 0xff) as usize;
    let out: [u8; 16] = core::array::from_fn(|j| match j + shift {
        k @ 0..=15 => b[k],
        k @ 16..=31 => a[k - 16],
        _ => 0,
    });
    x.regs_mut()
        .set_xmm(usize::from(i.op[0] - VEC), u128::from_le_bytes(out));
    Ok(())
}

/// pcmpistri xmm1, xmm2/m128, imm8 (SDM vol. 2, "Packed Compare Implicit
/// Length Strings, Return Index", and section 4.1): compares the
/// null-terminated strings in the two operands as imm8 says, and returns
/// an index in ecx. CF: some result bit set; ZF: xmm2/m128 holds a null;
/// SF: xmm1 holds a null; OF: result bit 0; AF, PF cleared.
pub(crate) fn pcmpistri<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let b = read128::<X, false>(x, i, i.op[1], r)?;
    let a = read128::<X, false>(x, i, i.op[0], r)?;
    let imm = i.imm as u8;
    let words = imm & 1 != 0;
    let signed = imm & 2 != 0;
    let n = if words { 8 } else { 16 };
    let get = |s: &[u8; 16], k: usize| -> i32 {
        if words {
            let w = u16::from_le_bytes([s[2 * k], s[2 * k + 1]]);
            if signed {
                i32::from(w as i16)
            } else {
                i32::from(w)
            }
        } else if signed {
            i32::from(s[k] as i8)
        } else {
            i32::from(s[k])
        }
    };
    let len = |s: &[u8; 16]| (0..n).find(|&k| get(s, k) == 0).unwrap_or(n);
    let (la, lb) = (len(&a), len(&b));
    // BoolRes[p][q] for element p of xmm1 and q of xmm2, with the
    // manual's overrides for invalid (past the terminator) elements.
    let aggregation = (imm >> 2) & 3;
    let pair = |p: usize, q: usize, cmp: fn(i32, i32) -> bool| -> bool {
        match (p < la, q < lb) {
            (true, true) => cmp(get(&a, p), get(&b, q)),
            (false, false) => aggregation >= 2,
            (false, true) => aggregation == 3,
            (true, false) => false,
        }
    };
    let mut res1 = 0u32;
    for q in 0..n {
        let bit = match aggregation {
            0 => (0..n).any(|p| pair(p, q, |u, v| u == v)),
            1 => (0..n)
                .step_by(2)
                .any(|p| pair(p, q, |u, v| u <= v) && pair(p + 1, q, |u, v| v <= u)),
            2 => pair(q, q, |u, v| u == v),
            _ => (0..n - q).all(|k| pair(k, q + k, |u, v| u == v)),
        };
        res1 |= u32::from(bit) << q;
    }
    let all = (1u32 << n) - 1;
    let valid = (1u32 << lb) - 1;
    let res2 = match (imm >> 4) & 3 {
        1 => !res1 & all,
        3 => (res1 ^ valid) & all,
        _ => res1,
    };
    let index = if res2 == 0 {
        n as u32
    } else if imm & 0x40 != 0 {
        31 - res2.leading_zeros()
    } else {
        res2.trailing_zeros()
    };
    set_sized::<X, 4>(x, gpr::RCX, u64::from(index));
    let f = (u64::from(res2 != 0) * CF)
        | (u64::from(lb < n) * ZF)
        | (u64::from(la < n) * SF)
        | (u64::from(res2 & 1) * OF);
    flags::update(x.regs_mut(), STATUS, f, 0);
    Ok(())
}
