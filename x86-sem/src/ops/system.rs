//! Flag-register instructions, no-ops, and the instructions the core
//! hands back to its owner (syscall, opaque ones, traps).

use super::{defined, reg, set_reg, Flow};
use crate::flags;
use crate::insn::Insn;
use crate::regs::flag::{AF, CF, DF, PF, SF, STATUS, ZF};
use crate::regs::Registers;
use crate::step::{Machine, Retired, Stop};

/// nop, endbr64, pause, fences, prefetches (which never fault).
pub(crate) fn nop<X: Machine>(_x: &mut X, _i: &Insn, _r: &mut Retired) -> Flow {
    Ok(())
}

/// cld (`SET` false) and std.
pub(crate) fn direction<X: Machine, const SET: bool>(
    x: &mut X,
    _i: &Insn,
    _r: &mut Retired,
) -> Flow {
    let regs = x.regs_mut();
    let f = regs.rflags() & !DF;
    regs.set_rflags(if SET { f | DF } else { f });
    Ok(())
}

/// clc (`SET` false) and stc.
pub(crate) fn carry<X: Machine, const SET: bool>(x: &mut X, _i: &Insn, _r: &mut Retired) -> Flow {
    flags::update(x.regs_mut(), CF, if SET { CF } else { 0 }, 0);
    Ok(())
}

/// cmc: an undefined CF stays undefined.
pub(crate) fn cmc<X: Machine>(x: &mut X, _i: &Insn, _r: &mut Retired) -> Flow {
    let regs = x.regs_mut();
    let f = regs.rflags();
    regs.set_rflags(f ^ CF);
    Ok(())
}

const AH_FLAGS: u64 = SF | ZF | AF | PF | CF;

/// lahf: ah = SF ZF 0 AF 0 PF 1 CF.
pub(crate) fn lahf<X: Machine>(x: &mut X, _i: &Insn, _r: &mut Retired) -> Flow {
    defined(x, AH_FLAGS)?;
    let ah = (x.regs().rflags() & AH_FLAGS) | 2;
    let rax = reg(x, 0);
    set_reg(x, 0, (rax & !0xff00) | ah << 8);
    Ok(())
}

/// sahf: SF ZF AF PF CF from ah.
pub(crate) fn sahf<X: Machine>(x: &mut X, _i: &Insn, _r: &mut Retired) -> Flow {
    let ah = (reg(x, 0) >> 8) & 0xff;
    flags::update(x.regs_mut(), AH_FLAGS, ah, 0);
    Ok(())
}

/// xtest (RTM): ZF set, as outside a transaction; CF, OF, SF, AF and PF
/// cleared. The core never runs inside one: a transaction aborts when the
/// signal that starts emulation arrives, and xbegin is not implemented.
pub(crate) fn xtest<X: Machine>(x: &mut X, _i: &Insn, _r: &mut Retired) -> Flow {
    flags::update(x.regs_mut(), STATUS, ZF, 0);
    Ok(())
}

/// syscall: handed to the owner.
pub(crate) fn syscall<X: Machine>(_x: &mut X, _i: &Insn, _r: &mut Retired) -> Flow {
    Err(Stop::Syscall)
}

/// cpuid, rdtsc, rdrand and the like.
pub(crate) fn opaque<X: Machine>(_x: &mut X, _i: &Insn, _r: &mut Retired) -> Flow {
    Err(Stop::Opaque)
}

/// int3, int n, ud0/ud1/ud2, hlt.
pub(crate) fn trap<X: Machine>(_x: &mut X, _i: &Insn, _r: &mut Retired) -> Flow {
    Err(Stop::Trap)
}
