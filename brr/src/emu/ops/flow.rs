//! Control transfer, stack, string and flag-register instructions.

use super::flags;
use crate::emu::machine::{size_mask, BranchKind, Machine, Stop};
use crate::emu::mem::Memory;
use crate::emu::regs::{flag, gpr, Registers};
use iced_x86::{Instruction, Mnemonic, OpKind};

type Result = std::result::Result<(), Stop>;

pub fn push<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = if ins.op_kind(0) == OpKind::Register {
        m.op_size(ins, 0)
    } else {
        8
    };
    if size != 8 {
        return Err(Stop::Unsupported {
            ip: m.retired.ip,
            code: ins.code(),
        });
    }
    let v = m.read_op(ins, 0, 8)?;
    m.push(v)
}

pub fn pop<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    if m.op_size(ins, 0) != 8 {
        return Err(Stop::Unsupported {
            ip: m.retired.ip,
            code: ins.code(),
        });
    }
    let v = m.pop()?;
    m.write_op(ins, 0, 8, v)
}

pub fn pushf<R: Registers, M: Memory>(m: &mut Machine<R, M>, _ins: &Instruction) -> Result {
    let f = m.regs.rflags() | 0x202;
    m.push(f)
}

pub fn popf<R: Registers, M: Memory>(m: &mut Machine<R, M>, _ins: &Instruction) -> Result {
    let v = m.pop()?;
    m.set_flags(flag::STATUS | flag::DF, v);
    Ok(())
}

pub fn leave<R: Registers, M: Memory>(m: &mut Machine<R, M>, _ins: &Instruction) -> Result {
    let bp = m.regs.gpr(gpr::RBP);
    m.regs.set_gpr(gpr::RSP, bp);
    let v = m.pop()?;
    m.regs.set_gpr(gpr::RBP, v);
    Ok(())
}

/// Branch target of operand 0: a near-branch immediate or a register/memory.
#[inline(always)]
fn target<R: Registers, M: Memory>(
    m: &mut Machine<R, M>,
    ins: &Instruction,
) -> std::result::Result<(u64, bool), Stop> {
    match ins.op0_kind() {
        OpKind::NearBranch64 => Ok((ins.near_branch64(), true)),
        _ => Ok((m.read_op(ins, 0, 8)?, false)),
    }
}

pub fn jmp<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let (t, direct) = target(m, ins)?;
    m.retired.kind = if direct {
        BranchKind::DirectJump
    } else {
        BranchKind::IndirectJump
    };
    m.retired.taken = true;
    m.retired.target = t;
    m.next_ip = t;
    Ok(())
}

pub fn jcc<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let t = ins.near_branch64();
    let taken = m.condition(ins.condition_code());
    m.retired.kind = BranchKind::Conditional;
    m.retired.taken = taken;
    m.retired.target = t;
    if taken {
        m.next_ip = t;
    }
    Ok(())
}

/// jrcxz/jecxz and loop/loope/loopne.
pub fn jcx<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let t = ins.near_branch64();
    let rcx = m.regs.gpr(gpr::RCX);
    let taken = match ins.mnemonic() {
        Mnemonic::Jrcxz => rcx == 0,
        Mnemonic::Jecxz => rcx & 0xffff_ffff == 0,
        mn => {
            let c = rcx.wrapping_sub(1);
            m.regs.set_gpr(gpr::RCX, c);
            let zf = m.flag(flag::ZF);
            c != 0
                && match mn {
                    Mnemonic::Loope => zf,
                    Mnemonic::Loopne => !zf,
                    _ => true,
                }
        }
    };
    m.retired.kind = BranchKind::Conditional;
    m.retired.taken = taken;
    m.retired.target = t;
    if taken {
        m.next_ip = t;
    }
    Ok(())
}

pub fn call<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let (t, direct) = target(m, ins)?;
    let ret = m.next_ip;
    m.push(ret)?;
    m.retired.kind = if direct {
        BranchKind::DirectCall
    } else {
        BranchKind::IndirectCall
    };
    m.retired.taken = true;
    m.retired.target = t;
    m.next_ip = t;
    Ok(())
}

pub fn ret<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let t = m.pop()?;
    if ins.op_count() == 1 {
        let sp = m.regs.gpr(gpr::RSP).wrapping_add(ins.immediate16() as u64);
        m.regs.set_gpr(gpr::RSP, sp);
    }
    m.retired.kind = BranchKind::Return;
    m.retired.taken = true;
    m.retired.target = t;
    m.next_ip = t;
    Ok(())
}

/// movs, stos, lods, cmps, scas with optional rep/repe/repne.
pub fn string<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let size = ins.memory_size().size();
    let step = if m.flag(flag::DF) {
        (size as u64).wrapping_neg()
    } else {
        size as u64
    };
    let rep = ins.has_rep_prefix() || ins.has_repne_prefix();
    let mn = ins.mnemonic();
    let compares = matches!(
        mn,
        Mnemonic::Cmpsb
            | Mnemonic::Cmpsw
            | Mnemonic::Cmpsd
            | Mnemonic::Cmpsq
            | Mnemonic::Scasb
            | Mnemonic::Scasw
            | Mnemonic::Scasd
            | Mnemonic::Scasq
    );
    loop {
        if rep && m.regs.gpr(gpr::RCX) == 0 {
            return Ok(());
        }
        let (si, di) = (m.regs.gpr(gpr::RSI), m.regs.gpr(gpr::RDI));
        let acc = m.regs.gpr(gpr::RAX) & size_mask(size);
        match mn {
            Mnemonic::Movsb | Mnemonic::Movsw | Mnemonic::Movsd | Mnemonic::Movsq => {
                let v = m.load(si, size)?;
                m.store(di, size, v)?;
                m.regs.set_gpr(gpr::RSI, si.wrapping_add(step));
                m.regs.set_gpr(gpr::RDI, di.wrapping_add(step));
            }
            Mnemonic::Stosb | Mnemonic::Stosw | Mnemonic::Stosd | Mnemonic::Stosq => {
                m.store(di, size, acc)?;
                m.regs.set_gpr(gpr::RDI, di.wrapping_add(step));
            }
            Mnemonic::Lodsb | Mnemonic::Lodsw | Mnemonic::Lodsd | Mnemonic::Lodsq => {
                let v = m.load(si, size)?;
                let reg = [
                    iced_x86::Register::AL,
                    iced_x86::Register::AX,
                    iced_x86::Register::EAX,
                    iced_x86::Register::RAX,
                ][size.trailing_zeros() as usize];
                m.write_reg(reg, v);
                m.regs.set_gpr(gpr::RSI, si.wrapping_add(step));
            }
            Mnemonic::Cmpsb | Mnemonic::Cmpsw | Mnemonic::Cmpsd | Mnemonic::Cmpsq => {
                let a = m.load(si, size)?;
                let b = m.load(di, size)?;
                let r = a.wrapping_sub(b) & size_mask(size);
                m.set_flags(flag::STATUS, flags::sub(a, b, 0, r, size));
                m.regs.set_gpr(gpr::RSI, si.wrapping_add(step));
                m.regs.set_gpr(gpr::RDI, di.wrapping_add(step));
            }
            _ => {
                let b = m.load(di, size)?;
                let r = acc.wrapping_sub(b) & size_mask(size);
                m.set_flags(flag::STATUS, flags::sub(acc, b, 0, r, size));
                m.regs.set_gpr(gpr::RDI, di.wrapping_add(step));
            }
        }
        if !rep {
            return Ok(());
        }
        let c = m.regs.gpr(gpr::RCX).wrapping_sub(1);
        m.regs.set_gpr(gpr::RCX, c);
        if compares {
            let zf = m.flag(flag::ZF);
            if (ins.has_repe_prefix() && !zf) || (ins.has_repne_prefix() && zf) {
                return Ok(());
            }
        }
    }
}

pub fn nop<R: Registers, M: Memory>(_m: &mut Machine<R, M>, _ins: &Instruction) -> Result {
    Ok(())
}

pub fn cld_std<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let v = if ins.mnemonic() == Mnemonic::Std {
        flag::DF
    } else {
        0
    };
    m.set_flags(flag::DF, v);
    Ok(())
}

pub fn carry_flag<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    let v = match ins.mnemonic() {
        Mnemonic::Stc => flag::CF,
        Mnemonic::Clc => 0,
        _ => (m.regs.rflags() ^ flag::CF) & flag::CF,
    };
    m.set_flags(flag::CF, v);
    Ok(())
}

pub fn syscall<R: Registers, M: Memory>(_m: &mut Machine<R, M>, _ins: &Instruction) -> Result {
    Err(Stop::Syscall)
}

pub fn trap<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result {
    Err(Stop::Trap {
        ip: m.retired.ip,
        code: ins.code(),
    })
}
