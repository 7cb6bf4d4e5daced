//! Control transfers and the stack.

use super::{defined, ea, load, push, read, reg, set_reg, set_sized, store, transfer, write, Flow};
use crate::flags;
use crate::insn::{Insn, IMM, MEM};
use crate::regs::flag::{self, DF, STATUS, ZF};
use crate::regs::{gpr, Registers};
use crate::step::{BranchKind, Machine, Retired, Stop};

/// push r64 / r/m64 / imm (sign-extended).
pub(crate) fn push_op<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let v = read::<X, 8>(x, i, i.op[0], r)?;
    push(x, r, v)
}

/// pop r64 / r/m64. A memory destination's address is computed with rsp
/// already incremented, as the CPU does.
pub(crate) fn pop_op<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let sp = reg(x, gpr::RSP);
    let v = load(x, r, sp, 8)?;
    if i.op[0] == MEM {
        set_reg(x, gpr::RSP, sp.wrapping_add(8));
        let a = ea(x, i);
        set_reg(x, gpr::RSP, sp);
        store(x, r, a, 8, v)?;
        set_reg(x, gpr::RSP, sp.wrapping_add(8));
        Ok(())
    } else {
        set_reg(x, gpr::RSP, sp.wrapping_add(8));
        write::<X, 8>(x, i, i.op[0], v, r)
    }
}

/// pushfq: every status flag is read, so all must be defined. RF and VM
/// are never pushed.
pub(crate) fn pushf<X: Machine>(x: &mut X, _i: &Insn, r: &mut Retired) -> Flow {
    defined(x, STATUS)?;
    let f = x.regs().rflags() & !(flag::RF | 1 << 17);
    push(x, r, f)
}

/// What popfq may change in user mode (IF and IOPL stay).
const POPF_WRITABLE: u64 = STATUS | flag::TF | DF | flag::NT | flag::AC | flag::ID;

/// popfq. Setting TF would single-step the thread: [`Stop::Opaque`].
pub(crate) fn popf<X: Machine>(x: &mut X, _i: &Insn, r: &mut Retired) -> Flow {
    let sp = reg(x, gpr::RSP);
    let v = load(x, r, sp, 8)?;
    if v & flag::TF != 0 {
        return Err(Stop::Opaque);
    }
    set_reg(x, gpr::RSP, sp.wrapping_add(8));
    let regs = x.regs_mut();
    let f = regs.rflags();
    regs.set_rflags((f & !POPF_WRITABLE) | (v & POPF_WRITABLE));
    regs.set_undefined(0);
    Ok(())
}

/// leave: rsp = rbp, then pop rbp.
pub(crate) fn leave<X: Machine>(x: &mut X, _i: &Insn, r: &mut Retired) -> Flow {
    let bp = reg(x, gpr::RBP);
    let v = load(x, r, bp, 8)?;
    set_reg(x, gpr::RSP, bp.wrapping_add(8));
    set_reg(x, gpr::RBP, v);
    Ok(())
}

/// jmp rel8/rel32.
pub(crate) fn jmp<X: Machine>(_x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    transfer(r, BranchKind::DirectJump, true, i.imm);
    Ok(())
}

/// jmp r/m64.
pub(crate) fn jmp_indirect<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let t = read::<X, 8>(x, i, i.op[0], r)?;
    transfer(r, BranchKind::IndirectJump, true, t);
    Ok(())
}

/// jcc rel8/rel32.
pub(crate) fn jcc<X: Machine, const CC: u8>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    defined(x, flags::reads(CC))?;
    let taken = flags::holds(x.regs().rflags(), CC);
    transfer(r, BranchKind::Conditional, taken, i.imm);
    Ok(())
}

/// jrcxz (`A32` false) and jecxz.
pub(crate) fn jrcxz<X: Machine, const A32: bool>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let c = reg(x, gpr::RCX);
    let c = if A32 { c & 0xffff_ffff } else { c };
    transfer(r, BranchKind::Conditional, c == 0, i.imm);
    Ok(())
}

pub(crate) const LOOP: u8 = 0;
pub(crate) const LOOPE: u8 = 1;
pub(crate) const LOOPNE: u8 = 2;

/// loop, loope, loopne: decrement rcx (ecx under 0x67, `A32`), and branch
/// while it is not zero (and ZF agrees).
pub(crate) fn loop_<X: Machine, const KIND: u8, const A32: bool>(
    x: &mut X,
    i: &Insn,
    r: &mut Retired,
) -> Flow {
    if KIND != LOOP {
        defined(x, ZF)?;
    }
    let c = reg(x, gpr::RCX).wrapping_sub(1);
    let c = if A32 { c & 0xffff_ffff } else { c };
    let zf = x.regs().rflags() & ZF != 0;
    let taken = c != 0
        && match KIND {
            LOOPE => zf,
            LOOPNE => !zf,
            _ => true,
        };
    if A32 {
        set_sized::<X, 4>(x, gpr::RCX, c);
    } else {
        set_reg(x, gpr::RCX, c);
    }
    transfer(r, BranchKind::Conditional, taken, i.imm);
    Ok(())
}

/// call rel32.
pub(crate) fn call<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    push(x, r, r.next_rip)?;
    transfer(r, BranchKind::DirectCall, true, i.imm);
    Ok(())
}

/// call r/m64: the target is read (with the old rsp) before the push.
pub(crate) fn call_indirect<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let t = read::<X, 8>(x, i, i.op[0], r)?;
    push(x, r, r.next_rip)?;
    transfer(r, BranchKind::IndirectCall, true, t);
    Ok(())
}

/// ret and ret imm16.
pub(crate) fn ret<X: Machine>(x: &mut X, i: &Insn, r: &mut Retired) -> Flow {
    let sp = reg(x, gpr::RSP);
    let t = load(x, r, sp, 8)?;
    let extra = if i.op[0] == IMM { i.imm & 0xffff } else { 0 };
    set_reg(x, gpr::RSP, sp.wrapping_add(8).wrapping_add(extra));
    transfer(r, BranchKind::Return, true, t);
    Ok(())
}
