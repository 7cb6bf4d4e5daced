//! The SSE/SSE2 moves and packed-integer operations compilers emit for
//! integer code (string functions, vectorised loops, struct copies).

use crate::emu::machine::{Machine, Stop};
use crate::emu::mem::Memory;
use crate::emu::regs::{RegSlot, Registers};
use iced_x86::{Instruction, Mnemonic, OpKind};

type Result = std::result::Result<(), Stop>;

fn unsupported<R: Registers, M: Memory>(m: &Machine<R, M>, ins: &Instruction) -> Stop {
    Stop::Unsupported {
        ip: m.retired.ip,
        code: ins.code(),
    }
}

/// Reads operand `n` as a vector: an xmm register, `size` bytes of memory,
/// or a general-purpose register (movd/movq), zero-extended to 128 bits.
#[inline(always)]
fn read_v<R: Registers, M: Memory>(
    m: &mut Machine<R, M>,
    ins: &Instruction,
    n: u32,
    size: usize,
) -> std::result::Result<u128, Stop> {
    match ins.op_kind(n) {
        OpKind::Register => match m.slots[ins.op_register(n) as usize] {
            RegSlot::Xmm { index } => Ok(m.regs.xmm(index as usize)),
            RegSlot::Gpr { .. } => Ok(u128::from(m.read_reg(ins.op_register(n)))),
            _ => Err(unsupported(m, ins)),
        },
        OpKind::Memory => {
            let a = m.ea(ins);
            let ip = m.retired.ip;
            m.mem.read_u128(a, size).map_err(|f| Stop::Fault {
                ip,
                addr: f.addr,
                write: false,
            })
        }
        _ => Err(unsupported(m, ins)),
    }
}

#[inline(always)]
fn write_v<R: Registers, M: Memory>(
    m: &mut Machine<R, M>,
    ins: &Instruction,
    n: u32,
    size: usize,
    v: u128,
) -> Result {
    match ins.op_kind(n) {
        OpKind::Register => match m.slots[ins.op_register(n) as usize] {
            RegSlot::Xmm { index } => {
                m.regs.set_xmm(index as usize, v);
                Ok(())
            }
            RegSlot::Gpr { .. } => {
                m.write_reg(ins.op_register(n), v as u64);
                Ok(())
            }
            _ => Err(unsupported(m, ins)),
        },
        _ => {
            let a = m.ea(ins);
            let ip = m.retired.ip;
            m.retired.mem_write = true;
            m.mem.write_u128(a, size, v).map_err(|f| Stop::Fault {
                ip,
                addr: f.addr,
                write: true,
            })
        }
    }
}

fn is_xmm<R: Registers, M: Memory>(m: &Machine<R, M>, ins: &Instruction, n: u32) -> bool {
    ins.op_kind(n) == OpKind::Register
        && matches!(m.slots[ins.op_register(n) as usize], RegSlot::Xmm { .. })
}

/// movdqa, movdqu, movaps, movups, movapd, movupd, lddqu: 128-bit moves.
pub fn mov128<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let v = read_v(m, ins, 1, 16)?;
    write_v(m, ins, 0, 16, v)
}

/// movd and movq in all their xmm/gpr/memory forms.
pub fn movd_movq<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = if ins.mnemonic() == Mnemonic::Movd {
        4
    } else {
        8
    };
    let mask = if size == 4 {
        0xffff_ffffu128
    } else {
        u64::MAX as u128
    };
    let v = read_v(m, ins, 1, size)? & mask;
    if !is_xmm(m, ins, 0) && ins.op0_kind() == OpKind::Register {
        // To a general-purpose register: write the full 32 or 64 bits.
        m.write_reg(ins.op0_register(), v as u64);
        return Ok(());
    }
    write_v(m, ins, 0, size, v)
}

/// movss/movsd (SSE data moves): a load zeroes the rest, a register move
/// merges, a store writes the low element.
pub fn movs_scalar<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = ins
        .memory_size()
        .size()
        .max(if ins.mnemonic() == Mnemonic::Movss {
            4
        } else {
            8
        });
    let mask = if size == 4 {
        0xffff_ffffu128
    } else {
        u64::MAX as u128
    };
    let src = read_v(m, ins, 1, size)? & mask;
    if ins.op1_kind() == OpKind::Register && ins.op0_kind() == OpKind::Register {
        let old = read_v(m, ins, 0, 16)?;
        write_v(m, ins, 0, 16, (old & !mask) | src)
    } else {
        write_v(m, ins, 0, size, src)
    }
}

/// movlps/movlpd/movhps/movhpd/movhlps/movlhps: 64-bit halves.
pub fn mov_half<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    const LO: u128 = u64::MAX as u128;
    let high_dst = matches!(
        ins.mnemonic(),
        Mnemonic::Movhps | Mnemonic::Movhpd | Mnemonic::Movlhps
    );
    if ins.op0_kind() == OpKind::Memory {
        let v = read_v(m, ins, 1, 16)?;
        let half = if high_dst { v >> 64 } else { v & LO };
        return write_v(m, ins, 0, 8, half);
    }
    let old = read_v(m, ins, 0, 16)?;
    let src = read_v(
        m,
        ins,
        1,
        if ins.op1_kind() == OpKind::Memory {
            8
        } else {
            16
        },
    )?;
    let half = match ins.mnemonic() {
        Mnemonic::Movhlps => src >> 64,
        _ => src & LO,
    };
    let v = if high_dst {
        (old & LO) | half << 64
    } else {
        (old & !LO) | half
    };
    write_v(m, ins, 0, 16, v)
}

/// Applies `f` to each `lane`-byte element pair.
#[inline(always)]
fn lanes(a: u128, b: u128, lane: usize, f: impl Fn(u64, u64) -> u64) -> u128 {
    let bits = lane * 8;
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let mut out = 0u128;
    for i in 0..16 / lane {
        let sh = i * bits;
        let x = (a >> sh) as u64 & mask;
        let y = (b >> sh) as u64 & mask;
        out |= u128::from(f(x, y) & mask) << sh;
    }
    out
}

#[inline(always)]
fn sx(v: u64, lane: usize) -> i64 {
    let s = 64 - lane as u32 * 8;
    ((v << s) as i64) >> s
}

/// Two-operand packed-integer and bitwise operations: dst = dst OP src.
pub fn packed<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    use Mnemonic::*;
    let a = read_v(m, ins, 0, 16)?;
    let b = read_v(m, ins, 1, 16)?;
    let all = |c: bool| if c { u64::MAX } else { 0 };
    let r = match ins.mnemonic() {
        Pxor | Xorps | Xorpd => a ^ b,
        Por | Orps | Orpd => a | b,
        Pand | Andps | Andpd => a & b,
        Pandn | Andnps | Andnpd => !a & b,
        Paddb => lanes(a, b, 1, u64::wrapping_add),
        Paddw => lanes(a, b, 2, u64::wrapping_add),
        Paddd => lanes(a, b, 4, u64::wrapping_add),
        Paddq => lanes(a, b, 8, u64::wrapping_add),
        Psubb => lanes(a, b, 1, u64::wrapping_sub),
        Psubw => lanes(a, b, 2, u64::wrapping_sub),
        Psubd => lanes(a, b, 4, u64::wrapping_sub),
        Psubq => lanes(a, b, 8, u64::wrapping_sub),
        Pcmpeqb => lanes(a, b, 1, |x, y| all(x == y)),
        Pcmpeqw => lanes(a, b, 2, |x, y| all(x == y)),
        Pcmpeqd => lanes(a, b, 4, |x, y| all(x == y)),
        Pcmpgtb => lanes(a, b, 1, |x, y| all(sx(x, 1) > sx(y, 1))),
        Pcmpgtw => lanes(a, b, 2, |x, y| all(sx(x, 2) > sx(y, 2))),
        Pcmpgtd => lanes(a, b, 4, |x, y| all(sx(x, 4) > sx(y, 4))),
        Pminub => lanes(a, b, 1, u64::min),
        Pmaxub => lanes(a, b, 1, u64::max),
        Pminsw => lanes(a, b, 2, |x, y| if sx(x, 2) < sx(y, 2) { x } else { y }),
        Pmaxsw => lanes(a, b, 2, |x, y| if sx(x, 2) > sx(y, 2) { x } else { y }),
        Pavgb => lanes(a, b, 1, |x, y| (x + y + 1) >> 1),
        Pmullw => lanes(a, b, 2, u64::wrapping_mul),
        Pmuludq => lanes(a, b, 8, |x, y| (x & 0xffff_ffff) * (y & 0xffff_ffff)),
        Punpcklbw => interleave(a, b, 1, false),
        Punpcklwd => interleave(a, b, 2, false),
        Punpckldq => interleave(a, b, 4, false),
        Punpcklqdq => interleave(a, b, 8, false),
        Punpckhbw => interleave(a, b, 1, true),
        Punpckhwd => interleave(a, b, 2, true),
        Punpckhdq => interleave(a, b, 4, true),
        Punpckhqdq => interleave(a, b, 8, true),
        Packuswb => pack(a, b, 2, 0, 255),
        Packsswb => pack(a, b, 2, -128, 127),
        Packssdw => pack(a, b, 4, -32768, 32767),
        _ => return Err(unsupported(m, ins)),
    };
    write_v(m, ins, 0, 16, r)
}

/// punpckl*/punpckh*: interleave the low (or high) halves of a and b.
fn interleave(a: u128, b: u128, lane: usize, high: bool) -> u128 {
    let bits = lane * 8;
    let n = 8 / lane;
    let mask = if bits == 64 {
        u64::MAX as u128
    } else {
        (1u128 << bits) - 1
    };
    let base = if high { 64 } else { 0 };
    let mut out = 0u128;
    for i in 0..n {
        let x = (a >> (base + i * bits)) & mask;
        let y = (b >> (base + i * bits)) & mask;
        out |= x << (2 * i * bits) | y << ((2 * i + 1) * bits);
    }
    out
}

/// packuswb/packsswb/packssdw: narrow signed `lane`-byte elements of a then
/// b to half width, saturating to `lo..=hi`.
fn pack(a: u128, b: u128, lane: usize, lo: i64, hi: i64) -> u128 {
    let n = 16 / lane;
    let bits = lane * 8;
    let half = bits / 2;
    let mut out = 0u128;
    for (k, v) in [a, b].into_iter().enumerate() {
        for i in 0..n {
            let x = sx((v >> (i * bits)) as u64 & ((1u64 << bits) - 1), lane).clamp(lo, hi);
            let w = (x as u64 & ((1u64 << half) - 1)) as u128;
            out |= w << ((k * n + i) * half);
        }
    }
    out
}

pub fn pmovmskb<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let v = read_v(m, ins, 1, 16)?;
    let mut mask = 0u64;
    for i in 0..16 {
        mask |= (((v >> (i * 8 + 7)) & 1) as u64) << i;
    }
    m.write_reg(ins.op0_register(), mask);
    Ok(())
}

pub fn movmskps<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let v = read_v(m, ins, 1, 16)?;
    let lane = if ins.mnemonic() == Mnemonic::Movmskps {
        4
    } else {
        8
    };
    let mut mask = 0u64;
    for i in 0..16 / lane {
        mask |= (((v >> (i * lane * 8 + lane * 8 - 1)) & 1) as u64) << i;
    }
    m.write_reg(ins.op0_register(), mask);
    Ok(())
}

/// pshufd, pshuflw, pshufhw, shufps.
pub fn shuffle<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let imm = ins.immediate(2) as u32;
    let src = read_v(m, ins, 1, 16)?;
    let pick = |v: u128, lane: usize, i: u32| {
        (v >> (lane * 8 * i as usize)) & if lane == 4 { 0xffff_ffff } else { 0xffff }
    };
    let r = match ins.mnemonic() {
        Mnemonic::Pshufd => (0..4).fold(0u128, |acc, i| {
            acc | pick(src, 4, (imm >> (2 * i)) & 3) << (32 * i)
        }),
        Mnemonic::Pshuflw => {
            let lo = (0..4).fold(0u128, |acc, i| {
                acc | pick(src, 2, (imm >> (2 * i)) & 3) << (16 * i)
            });
            (src & !(u64::MAX as u128)) | lo
        }
        Mnemonic::Pshufhw => {
            let hi = src >> 64;
            let h = (0..4).fold(0u128, |acc, i| {
                acc | pick(hi, 2, (imm >> (2 * i)) & 3) << (16 * i)
            });
            (src & u64::MAX as u128) | h << 64
        }
        _ => {
            let dst = read_v(m, ins, 0, 16)?;
            let lo = pick(dst, 4, imm & 3) | pick(dst, 4, (imm >> 2) & 3) << 32;
            let hi = pick(src, 4, (imm >> 4) & 3) | pick(src, 4, (imm >> 6) & 3) << 32;
            lo | hi << 64
        }
    };
    write_v(m, ins, 0, 16, r)
}

/// psllw/d/q, psrlw/d/q, psraw/d by immediate or xmm count; pslldq/psrldq.
pub fn packed_shift<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    use Mnemonic::*;
    let a = read_v(m, ins, 0, 16)?;
    let count = if ins.op1_kind() == OpKind::Immediate8 {
        ins.immediate8() as u64
    } else {
        read_v(m, ins, 1, 16)? as u64
    };
    let r = match ins.mnemonic() {
        Pslldq => {
            if count > 15 {
                0
            } else {
                a << (count * 8)
            }
        }
        Psrldq => {
            if count > 15 {
                0
            } else {
                a >> (count * 8)
            }
        }
        mn => {
            let lane = match mn {
                Psllw | Psrlw | Psraw => 2,
                Pslld | Psrld | Psrad => 4,
                _ => 8,
            };
            let bits = lane as u64 * 8;
            match mn {
                Psllw | Pslld | Psllq => {
                    lanes(
                        a,
                        0,
                        lane,
                        |x, _| if count >= bits { 0 } else { x << count },
                    )
                }
                Psrlw | Psrld | Psrlq => {
                    lanes(
                        a,
                        0,
                        lane,
                        |x, _| if count >= bits { 0 } else { x >> count },
                    )
                }
                _ => lanes(a, 0, lane, |x, _| {
                    (sx(x, lane) >> count.min(bits - 1)) as u64
                }),
            }
        }
    };
    write_v(m, ins, 0, 16, r)
}

/// pextrw r32, xmm, imm8 and pinsrw xmm, r32/m16, imm8.
pub fn word_insert_extract<R: Registers, M: Memory>(
    m: &mut Machine<R, M>,
    ins: &Instruction,
) -> Result {
    let sel = (ins.immediate(2) & 7) as usize * 16;
    if ins.mnemonic() == Mnemonic::Pextrw {
        let v = read_v(m, ins, 1, 16)?;
        m.write_reg(ins.op0_register(), ((v >> sel) & 0xffff) as u64);
        Ok(())
    } else {
        let old = read_v(m, ins, 0, 16)?;
        let w = read_v(m, ins, 1, 2)? & 0xffff;
        write_v(m, ins, 0, 16, (old & !(0xffffu128 << sel)) | w << sel)
    }
}
