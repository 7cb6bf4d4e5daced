//! AVX-512 lane-crossing forms gcc emits for vectorised loops at
//! `-march=x86-64-v4`: extracts and inserts of 128- and 256-bit parts,
//! valignd/q, and the two-table permutes vpermi2/vpermt2. Every one works
//! under an EVEX writemask of its element size. The extracts and inserts
//! are exception class E6NF: no memory fault suppression, so a disabled
//! element's memory is still accessed (measured: a masked-off element on
//! an unmapped page faults).

use super::avx::{cut, elem, read, set_elem, store_masked, write_reg, writemask};
use super::{ea, Flow};
use crate::insn::{Insn, MEM, VEC};
use crate::regs::Registers;
use crate::step::{Machine, Retired};

/// vextract{i,f}{32x4,64x2,32x8,64x4} xmm/ymm/m, ymm/zmm, imm8: part
/// imm8 (of `PART` bytes) of the source, in `E`-byte elements under the
/// writemask; a register destination is zeroed above `PART` bytes. A
/// memory destination is accessed whole: its disabled elements are read
/// and written back unchanged.
pub(crate) fn extract<X: Machine, const E: usize, const PART: usize, const N: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let m = writemask(x, i);
    let v = *x.regs().vec(usize::from(i.op[1] - VEC));
    let first = (i.imm as usize & (N / PART - 1)) * PART / 8;
    let mut out = [0u64; 8];
    out[..PART / 8].copy_from_slice(&v[first..first + PART / 8]);
    if i.op[0] == MEM {
        let a = ea(x, i);
        r.mem_addr = a;
        r.mem_write = true;
        let old = read::<X, PART, false>(x, i, i.op[0], r, E, u64::MAX)?;
        for k in (0..PART / E).filter(|k| m >> k & 1 == 0) {
            set_elem(&mut out, k, E, elem(&old, k, E));
        }
        r.mem_write = true;
        return store_masked(x, a, &out, PART, E, u64::MAX);
    }
    write_reg(x, i, i.op[0], &out, PART, E, m);
    Ok(())
}

/// vinsert{i,f}{32x4,64x2,32x8,64x4} ymm/zmm, ymm/zmm, xmm/ymm/m, imm8:
/// the first source with part imm8 (of `PART` bytes) replaced by the
/// second (read whole), under the writemask.
pub(crate) fn insert<X: Machine, const E: usize, const PART: usize, const N: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let m = writemask(x, i);
    let part = (i.imm as usize & (N / PART - 1)) * PART / 8;
    let b = read::<X, PART, false>(x, i, i.op[2], r, E, u64::MAX)?;
    let mut out = read::<X, N, false>(x, i, i.op[1], r, E, u64::MAX)?;
    out[part..part + PART / 8].copy_from_slice(&b[..PART / 8]);
    write_reg(x, i, i.op[0], &out, N, E, m);
    Ok(())
}

/// valignd/q (`E` = 4/8): the first source above the second, shifted
/// right by imm8 elements (modulo the element count), the low `N` bytes.
pub(crate) fn valign<X: Machine, const E: usize, const N: usize>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let m = writemask(x, i);
    let count = N / E;
    let b = read::<X, N, false>(x, i, i.op[2], r, E, u64::MAX)?;
    let a = read::<X, N, false>(x, i, i.op[1], r, E, u64::MAX)?;
    let shift = i.imm as usize & (count - 1);
    let mut out = [0u64; 8];
    for k in 0..count {
        let j = k + shift;
        let v = if j < count {
            elem(&b, j, E)
        } else {
            elem(&a, j - count, E)
        };
        set_elem(&mut out, k, E, v);
    }
    write_reg(x, i, i.op[0], &out, N, E, m);
    Ok(())
}

/// vpermt2* (`INDEX_IN_DEST` false: the destination is the first table,
/// the second operand the indices) and vpermi2* (the destination holds the
/// indices, the second operand is the first table); the third operand is
/// the second table. Element k is element (index & (2n − 1)) of the two
/// tables side by side; a disabled element keeps the destination's.
pub(crate) fn permute2<X: Machine, const E: usize, const N: usize, const INDEX_IN_DEST: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    let m = writemask(x, i);
    let second = read::<X, N, false>(x, i, i.op[2], r, E, u64::MAX)?;
    let dest = cut(*x.regs().vec(usize::from(i.op[0] - VEC)), N);
    let other = cut(*x.regs().vec(usize::from(i.op[1] - VEC)), N);
    let (first, index) = if INDEX_IN_DEST {
        (other, dest)
    } else {
        (dest, other)
    };
    let count = N / E;
    let mut out = [0u64; 8];
    for k in 0..count {
        let j = elem(&index, k, E) as usize & (2 * count - 1);
        let v = if j < count {
            elem(&first, j, E)
        } else {
            elem(&second, j - count, E)
        };
        set_elem(&mut out, k, E, v);
    }
    write_reg(x, i, i.op[0], &out, N, E, m);
    Ok(())
}

/// vpermd/vpermps (EVEX) of `N` bytes: doubleword k is doubleword
/// (index[k] mod n) of the third operand, under the writemask.
pub(crate) fn permd<X: Machine, const N: usize>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let m = writemask(x, i);
    let table = read::<X, N, false>(x, i, i.op[2], r, 4, u64::MAX)?;
    let index = read::<X, N, false>(x, i, i.op[1], r, 4, u64::MAX)?;
    let mut out = [0u64; 8];
    for k in 0..N / 4 {
        let j = elem(&index, k, 4) as usize & (N / 4 - 1);
        set_elem(&mut out, k, 4, elem(&table, j, 4));
    }
    write_reg(x, i, i.op[0], &out, N, 4, m);
    Ok(())
}
