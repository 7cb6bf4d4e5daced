//! General-purpose integer arithmetic, logic, shifts, multiplication, division and bit operations.

use super::flags;
use crate::emu::machine::{size_mask, Machine, Stop};
use crate::emu::mem::Memory;
use crate::emu::regs::{flag, gpr, Registers};
use iced_x86::{Instruction, Mnemonic, OpKind};

type Result = std::result::Result<(), Stop>;

#[inline(always)]
fn sext(v: u64, size: usize) -> i64 {
    let shift = 64 - 8 * size as u32;
    ((v << shift) as i64) >> shift
}

pub fn mov<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = m.op_size(ins, 0);
    let v = m.read_op(ins, 1, size)?;
    m.write_op(ins, 0, size, v)
}

pub fn movzx<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let src = m.op_size(ins, 1);
    let v = m.read_op(ins, 1, src)?;
    let dst = m.op_size(ins, 0);
    m.write_op(ins, 0, dst, v)
}

/// movsx and movsxd.
pub fn movsx<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let src = m.op_size(ins, 1);
    let v = sext(m.read_op(ins, 1, src)?, src) as u64;
    let dst = m.op_size(ins, 0);
    m.write_op(ins, 0, dst, v & size_mask(dst))
}

pub fn lea<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let a = m.ea(ins);
    m.retired.mem_addr = 0;
    let size = m.op_size(ins, 0);
    m.write_op(ins, 0, size, a & size_mask(size))
}

pub fn xchg<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = m.op_size(ins, 0);
    let a = m.read_op(ins, 0, size)?;
    let b = m.read_op(ins, 1, size)?;
    m.write_op(ins, 0, size, b)?;
    m.write_op(ins, 1, size, a)
}

pub fn cmov<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = m.op_size(ins, 0);
    let v = m.read_op(ins, 1, size)?;
    // A 32-bit cmov zero-extends its destination even when not taken.
    let v = if m.condition(ins.condition_code()) {
        v
    } else {
        m.read_op(ins, 0, size)?
    };
    m.write_op(ins, 0, size, v)
}

pub fn setcc<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let v = u64::from(m.condition(ins.condition_code()));
    m.write_op(ins, 0, 1, v)
}

/// add, adc, sub, sbb, and, or, xor, cmp, test.
pub fn alu<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = m.op_size(ins, 0);
    let a = m.read_op(ins, 0, size)?;
    let b = m.read_op(ins, 1, size)?;
    let mask = size_mask(size);
    let carry = u64::from(m.flag(flag::CF));
    let (res, f, write) = match ins.mnemonic() {
        Mnemonic::Add => {
            let r = a.wrapping_add(b) & mask;
            (r, flags::add(a, b, 0, r, size), true)
        }
        Mnemonic::Adc => {
            let r = a.wrapping_add(b).wrapping_add(carry) & mask;
            (r, flags::add(a, b, carry, r, size), true)
        }
        Mnemonic::Sub | Mnemonic::Cmp => {
            let r = a.wrapping_sub(b) & mask;
            (
                r,
                flags::sub(a, b, 0, r, size),
                ins.mnemonic() == Mnemonic::Sub,
            )
        }
        Mnemonic::Sbb => {
            let r = a.wrapping_sub(b).wrapping_sub(carry) & mask;
            (r, flags::sub(a, b, carry, r, size), true)
        }
        Mnemonic::And | Mnemonic::Test => {
            let r = a & b;
            (r, flags::logic(r, size), ins.mnemonic() == Mnemonic::And)
        }
        Mnemonic::Or => (a | b, flags::logic(a | b, size), true),
        _ => (a ^ b, flags::logic(a ^ b, size), true),
    };
    m.set_flags(flag::STATUS, f);
    if write {
        m.write_op(ins, 0, size, res)?;
    }
    Ok(())
}

/// inc, dec, neg, not.
pub fn unary<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = m.op_size(ins, 0);
    let a = m.read_op(ins, 0, size)?;
    let mask = size_mask(size);
    let res = match ins.mnemonic() {
        Mnemonic::Inc => {
            let r = a.wrapping_add(1) & mask;
            m.set_flags(flag::STATUS & !flag::CF, flags::add(a, 1, 0, r, size));
            r
        }
        Mnemonic::Dec => {
            let r = a.wrapping_sub(1) & mask;
            m.set_flags(flag::STATUS & !flag::CF, flags::sub(a, 1, 0, r, size));
            r
        }
        Mnemonic::Neg => {
            let r = 0u64.wrapping_sub(a) & mask;
            m.set_flags(flag::STATUS, flags::sub(0, a, 0, r, size));
            r
        }
        _ => !a & mask,
    };
    m.write_op(ins, 0, size, res)
}

/// shl/sal, shr, sar, rol, ror.
pub fn shift<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = m.op_size(ins, 0);
    let bits = size as u32 * 8;
    let a = m.read_op(ins, 0, size)?;
    let count_mask = if size == 8 { 63 } else { 31 };
    let count = (m.read_op(ins, 1, 1)? & count_mask) as u32;
    if count == 0 {
        // Flags are unchanged, but a 32-bit destination is still written
        // (and so zero-extended), as on hardware.
        return m.write_op(ins, 0, size, a);
    }
    let mask = size_mask(size);
    let msb = |v: u64| (v >> (bits - 1)) & 1;
    let (res, cf, of) = match ins.mnemonic() {
        Mnemonic::Shl | Mnemonic::Sal => {
            let r = if count >= 64 { 0 } else { (a << count) & mask };
            let cf = if count > bits {
                0
            } else {
                (a >> (bits - count)) & 1
            };
            (r, cf, msb(r) ^ cf)
        }
        Mnemonic::Shr => {
            let r = if count >= 64 { 0 } else { a >> count };
            let cf = if count > bits {
                0
            } else {
                (a >> (count - 1)) & 1
            };
            (r, cf, msb(a))
        }
        Mnemonic::Sar => {
            let s = sext(a, size);
            let r = (s >> count.min(63)) as u64 & mask;
            let cf = ((s >> (count - 1).min(63)) & 1) as u64;
            (r, cf, 0)
        }
        Mnemonic::Rol => {
            let c = count % bits;
            let r = if c == 0 {
                a
            } else {
                ((a << c) | (a >> (bits - c))) & mask
            };
            let cf = r & 1;
            (r, cf, msb(r) ^ cf)
        }
        _ => {
            let c = count % bits;
            let r = if c == 0 {
                a
            } else {
                ((a >> c) | (a << (bits - c))) & mask
            };
            let cf = msb(r);
            (r, cf, msb(r) ^ ((r >> (bits - 2)) & 1))
        }
    };
    let mut f = (cf * flag::CF) | (of * flag::OF);
    let rotate = matches!(ins.mnemonic(), Mnemonic::Rol | Mnemonic::Ror);
    if rotate {
        m.set_flags(flag::CF | flag::OF, f);
    } else {
        f |= flags::szp(res, size);
        m.set_flags(flag::STATUS, f);
    }
    m.write_op(ins, 0, size, res)
}

/// shld, shrd.
pub fn shift_double<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = m.op_size(ins, 0);
    let bits = size as u32 * 8;
    let a = m.read_op(ins, 0, size)?;
    let b = m.read_op(ins, 1, size)?;
    let count = (m.read_op(ins, 2, 1)? & if size == 8 { 63 } else { 31 }) as u32;
    if count == 0 {
        return m.write_op(ins, 0, size, a);
    }
    let mask = size_mask(size);
    let wide_a = a as u128;
    let wide_b = b as u128;
    let (res, cf) = if ins.mnemonic() == Mnemonic::Shld {
        let cat = (wide_a << bits) | wide_b;
        (
            ((cat << count) >> bits) as u64 & mask,
            ((a >> (bits - count)) & 1),
        )
    } else {
        let cat = (wide_b << bits) | wide_a;
        ((cat >> count) as u64 & mask, (a >> (count - 1)) & 1)
    };
    // OF is defined for 1-bit shifts only: set when the sign changed.
    let of = ((res ^ a) >> (bits - 1)) & 1;
    let f = flags::szp(res, size) | (cf * flag::CF) | (of * flag::OF);
    m.set_flags(flag::STATUS, f);
    m.write_op(ins, 0, size, res)
}

/// imul with two or three operands.
pub fn imul_n<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = m.op_size(ins, 0);
    let (a, b) = if ins.op_count() == 3 {
        (m.read_op(ins, 1, size)?, m.read_op(ins, 2, size)?)
    } else {
        (m.read_op(ins, 0, size)?, m.read_op(ins, 1, size)?)
    };
    let full = sext(a, size) as i128 * sext(b, size) as i128;
    let res = full as u64 & size_mask(size);
    let overflow = sext(res, size) as i128 != full;
    let f = if overflow { flag::CF | flag::OF } else { 0 } | flags::szp(res, size);
    m.set_flags(flag::STATUS, f);
    m.write_op(ins, 0, size, res)
}

/// One-operand mul and imul: rdx:rax = rax * src.
pub fn mul1<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = m.op_size(ins, 0);
    let src = m.read_op(ins, 0, size)?;
    let acc = m.regs.gpr(gpr::RAX) & size_mask(size);
    let bits = size as u32 * 8;
    let (lo, hi, overflow) = if ins.mnemonic() == Mnemonic::Mul {
        let p = acc as u128 * src as u128;
        let lo = p as u64 & size_mask(size);
        let hi = (p >> bits) as u64 & size_mask(size);
        (lo, hi, hi != 0)
    } else {
        let p = sext(acc, size) as i128 * sext(src, size) as i128;
        let lo = p as u64 & size_mask(size);
        let hi = (p >> bits) as u64 & size_mask(size);
        (lo, hi, sext(lo, size) as i128 != p)
    };
    if size == 1 {
        m.write_reg(iced_x86::Register::AX, lo | hi << 8);
    } else {
        let (ra, rd) = match size {
            2 => (iced_x86::Register::AX, iced_x86::Register::DX),
            4 => (iced_x86::Register::EAX, iced_x86::Register::EDX),
            _ => (iced_x86::Register::RAX, iced_x86::Register::RDX),
        };
        m.write_reg(ra, lo);
        m.write_reg(rd, hi);
    }
    let f = if overflow { flag::CF | flag::OF } else { 0 } | flags::szp(lo, size);
    m.set_flags(flag::STATUS, f);
    Ok(())
}

/// div and idiv: rax, rdx = rdx:rax / src, rdx:rax % src.
pub fn div<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    use iced_x86::Register as Reg;
    let size = m.op_size(ins, 0);
    let bits = size as u32 * 8;
    let ip = m.retired.ip;
    let src = m.read_op(ins, 0, size)?;
    if src == 0 {
        return Err(Stop::DivideError { ip });
    }
    let mask = size_mask(size) as u128;
    let (lo, hi) = if size == 1 {
        let ax = m.read_reg(Reg::AX);
        (ax & 0xff, ax >> 8)
    } else {
        let (ra, rd) = match size {
            2 => (Reg::AX, Reg::DX),
            4 => (Reg::EAX, Reg::EDX),
            _ => (Reg::RAX, Reg::RDX),
        };
        (m.read_reg(ra), m.read_reg(rd))
    };
    let dividend = (hi as u128) << bits | lo as u128;
    let (q, r) = if ins.mnemonic() == Mnemonic::Div {
        let q = dividend / src as u128;
        if q > mask {
            return Err(Stop::DivideError { ip });
        }
        (q as u64, (dividend % src as u128) as u64)
    } else {
        let shift = 128 - 2 * bits;
        let n = ((dividend << shift) as i128) >> shift;
        let d = sext(src, size) as i128;
        let q = n / d;
        let limit = 1i128 << (bits - 1);
        if q >= limit || q < -limit {
            return Err(Stop::DivideError { ip });
        }
        (q as u64 & mask as u64, (n % d) as u64 & mask as u64)
    };
    if size == 1 {
        m.write_reg(Reg::AX, q | r << 8);
    } else {
        let (ra, rd) = match size {
            2 => (Reg::AX, Reg::DX),
            4 => (Reg::EAX, Reg::EDX),
            _ => (Reg::RAX, Reg::RDX),
        };
        m.write_reg(ra, q);
        m.write_reg(rd, r);
    }
    Ok(())
}

/// cbw, cwde, cdqe: sign-extend the low half of the accumulator.
pub fn extend_acc<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    use iced_x86::Register as Reg;
    let (src, dst, size) = match ins.mnemonic() {
        Mnemonic::Cbw => (Reg::AL, Reg::AX, 2),
        Mnemonic::Cwde => (Reg::AX, Reg::EAX, 4),
        _ => (Reg::EAX, Reg::RAX, 8),
    };
    let v = sext(m.read_reg(src), size / 2) as u64 & size_mask(size);
    m.write_reg(dst, v);
    Ok(())
}

/// cwd, cdq, cqo: fill rdx with the accumulator's sign.
pub fn sign_to_rdx<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    use iced_x86::Register as Reg;
    let (src, dst, size) = match ins.mnemonic() {
        Mnemonic::Cwd => (Reg::AX, Reg::DX, 2),
        Mnemonic::Cdq => (Reg::EAX, Reg::EDX, 4),
        _ => (Reg::RAX, Reg::RDX, 8),
    };
    let neg = sext(m.read_reg(src), size) < 0;
    m.write_reg(dst, if neg { size_mask(size) } else { 0 });
    Ok(())
}

/// bt, bts, btr, btc. A register bit offset on a memory operand addresses
/// beyond the operand, as on hardware.
pub fn bit_test<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = m.op_size(ins, 0);
    let bits = size as u64 * 8;
    let offset = m.read_op(ins, 1, size)?;
    let (value, bit, addr) =
        if ins.op0_kind() == OpKind::Memory && ins.op1_kind() == OpKind::Register {
            let disp = (sext(offset, size) >> bits.trailing_zeros()) * size as i64;
            let a = m.ea(ins).wrapping_add(disp as u64);
            (m.load(a, size)?, offset % bits, Some(a))
        } else {
            (m.read_op(ins, 0, size)?, offset % bits, None)
        };
    let cf = (value >> bit) & 1;
    m.set_flags(flag::CF, cf * flag::CF);
    let new = match ins.mnemonic() {
        Mnemonic::Bts => value | 1 << bit,
        Mnemonic::Btr => value & !(1 << bit),
        Mnemonic::Btc => value ^ 1 << bit,
        _ => return Ok(()),
    };
    match addr {
        Some(a) => m.store(a, size, new),
        None => m.write_op(ins, 0, size, new),
    }
}

/// bsf, bsr, tzcnt, lzcnt, popcnt.
pub fn bit_scan<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = m.op_size(ins, 0);
    let bits = size as u32 * 8;
    let v = m.read_op(ins, 1, size)?;
    let zf = if v == 0 { flag::ZF } else { 0 };
    match ins.mnemonic() {
        Mnemonic::Bsf | Mnemonic::Bsr => {
            m.set_flags(flag::ZF, zf);
            if v != 0 {
                let r = if ins.mnemonic() == Mnemonic::Bsf {
                    v.trailing_zeros()
                } else {
                    63 - v.leading_zeros()
                };
                m.write_op(ins, 0, size, u64::from(r))?;
            }
        }
        Mnemonic::Tzcnt | Mnemonic::Lzcnt => {
            let r = if v == 0 {
                bits
            } else if ins.mnemonic() == Mnemonic::Tzcnt {
                v.trailing_zeros()
            } else {
                v.leading_zeros() - (64 - bits)
            };
            let cf = if v == 0 { flag::CF } else { 0 };
            m.set_flags(flag::CF | flag::ZF, cf | if r == 0 { flag::ZF } else { 0 });
            m.write_op(ins, 0, size, u64::from(r))?;
        }
        _ => {
            m.set_flags(flag::STATUS, zf);
            m.write_op(ins, 0, size, u64::from(v.count_ones()))?;
        }
    }
    Ok(())
}

pub fn bswap<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = m.op_size(ins, 0);
    let v = m.read_op(ins, 0, size)?;
    let r = if size == 8 {
        v.swap_bytes()
    } else {
        u64::from((v as u32).swap_bytes())
    };
    m.write_op(ins, 0, size, r)
}

/// cmpxchg (the guest is single-threaded; lock is a no-op).
pub fn cmpxchg<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = m.op_size(ins, 0);
    let mask = size_mask(size);
    let acc = m.regs.gpr(gpr::RAX) & mask;
    let dest = m.read_op(ins, 0, size)?;
    let r = acc.wrapping_sub(dest) & mask;
    m.set_flags(flag::STATUS, flags::sub(acc, dest, 0, r, size));
    if acc == dest {
        let src = m.read_op(ins, 1, size)?;
        m.write_op(ins, 0, size, src)
    } else {
        let reg = match size {
            1 => iced_x86::Register::AL,
            2 => iced_x86::Register::AX,
            4 => iced_x86::Register::EAX,
            _ => iced_x86::Register::RAX,
        };
        m.write_reg(reg, dest);
        Ok(())
    }
}

pub fn xadd<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = m.op_size(ins, 0);
    let a = m.read_op(ins, 0, size)?;
    let b = m.read_op(ins, 1, size)?;
    let r = a.wrapping_add(b) & size_mask(size);
    m.set_flags(flag::STATUS, flags::add(a, b, 0, r, size));
    m.write_op(ins, 1, size, a)?;
    m.write_op(ins, 0, size, r)
}
