//! The machine-independent branch form (DESIGN.md, "Look ahead").
//!
//! Each control transfer the look-ahead cannot resolve statically becomes a
//! [`BranchForm`] at decode time. The breakpoint handler evaluates the form
//! against the register file it finds in the ucontext and never decodes the
//! instruction again. Evaluation is async-signal-safe: no allocation, reads
//! only registers and the memory the instruction itself is about to read.

/// A general-purpose register, numbered as x86-64 encodes them
/// (rax = 0 … r15 = 15).
pub type Gpr = u8;

/// What a register file must provide to evaluate a form: the handler reads a
/// ucontext; tests use a plain array.
pub trait RegisterFile {
    fn gpr(&self, reg: Gpr) -> u64;
    fn rip(&self) -> u64;
    fn rsp(&self) -> u64 {
        self.gpr(RSP)
    }
    fn rflags(&self) -> u64;
}

/// Memory reads the evaluation needs (the return address at rsp, a jump
/// table slot).
pub trait Memory {
    /// Reads `size` (1, 2, 4 or 8) bytes little-endian at `addr`.
    fn read(&self, addr: u64, size: u8) -> u64;
}

pub const RCX: Gpr = 1;
pub const RSP: Gpr = 4;

/// The x86 condition codes, in encoding order (the low nibble of Jcc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Condition {
    O = 0,
    No,
    B,
    Ae,
    E,
    Ne,
    Be,
    A,
    S,
    Ns,
    P,
    Np,
    L,
    Ge,
    Le,
    G,
}

impl Condition {
    /// Whether the condition holds for `flags`: x86-sem's rule
    /// (`x86_sem::condition_holds`), the one the emulator runs.
    pub fn holds(self, flags: u64) -> bool {
        x86_sem::condition_holds(self as u8, flags)
    }

    pub fn from_code(code: u8) -> Condition {
        const ALL: [Condition; 16] = [
            Condition::O,
            Condition::No,
            Condition::B,
            Condition::Ae,
            Condition::E,
            Condition::Ne,
            Condition::Be,
            Condition::A,
            Condition::S,
            Condition::Ns,
            Condition::P,
            Condition::Np,
            Condition::L,
            Condition::Ge,
            Condition::Le,
            Condition::G,
        ];
        ALL[code as usize & 15]
    }
}

/// Where an indirect transfer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Known at decode time.
    Const(u64),
    /// The value of a register.
    Reg(Gpr),
    /// A load of `size` bytes from the memory operand, whose address
    /// x86-sem computes (`MemOperand::offset`: base + index·scale + disp,
    /// RIP-relative addresses folded in, 32 bits wide under 0x67). Never
    /// one with an fs or gs base: the ucontext does not hold them.
    Load {
        operand: x86_sem::MemOperand,
        size: u8,
    },
}

/// The kind of transfer, with what the kind needs to be evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BranchKind {
    /// Jcc: taken when the condition holds.
    Jcc(Condition),
    /// jrcxz / jecxz: taken when rcx (or ecx when `ecx`) is zero.
    Jrcxz { ecx: bool },
    /// loop / loope / loopne: rcx is decremented first, then taken when it
    /// is non-zero and, for loope / loopne, ZF is set / clear.
    Loop { zf: Option<bool>, ecx: bool },
    /// Indirect jmp.
    Jmp,
    /// Indirect call: always taken, pushes the return address.
    Call,
    /// Near return, popping 8 + `pop` bytes.
    Ret { pop: u16 },
    /// A `syscall`: not a branch, but it may never return here (exit,
    /// sigreturn, exec), so the trace stops at it; see `evaluate`.
    Syscall,
}

/// A transfer the breakpoint handler resolves from the CPU state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BranchForm {
    /// Address of the transfer instruction (where the breakpoint goes).
    pub at: u64,
    /// Address of the next instruction.
    pub fall_through: u64,
    pub kind: BranchKind,
    /// Taken target; for Ret it is the load from rsp, for Jcc a constant.
    pub target: Target,
}

/// The outcome of evaluating a form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Control goes to `next`; `taken` says whether that is a taken branch.
    /// `sp` is the stack pointer once the instruction has executed.
    Continue { taken: bool, next: u64, sp: u64 },
    /// The trace must end here (a syscall that may not return).
    Stop,
}

/// Syscalls after which execution may not reach the next instruction of
/// this thread with the same stack: exit, exit_group, rt_sigreturn,
/// execve(at), and the clones (their child runs without our events).
pub(crate) const DIVERGING_SYSCALLS: [u64; 9] = [
    libc::SYS_rt_sigreturn as u64,
    libc::SYS_exit as u64,
    libc::SYS_exit_group as u64,
    libc::SYS_execve as u64,
    libc::SYS_execveat as u64,
    libc::SYS_clone as u64,
    libc::SYS_clone3 as u64,
    libc::SYS_fork as u64,
    libc::SYS_vfork as u64,
];

impl Target {
    /// The address a `Load` target reads, for `regs`.
    pub fn load_address(&self, regs: &impl RegisterFile) -> Option<(u64, u8)> {
        let Target::Load { operand, size } = *self else {
            return None;
        };
        Some((operand.offset(|n| regs.gpr(n as Gpr)), size))
    }
}

fn target_value(target: Target, regs: &impl RegisterFile, mem: &impl Memory) -> u64 {
    match target {
        Target::Const(addr) => addr,
        Target::Reg(reg) => regs.gpr(reg),
        Target::Load { .. } => {
            let (addr, size) = target.load_address(regs).unwrap_or_default();
            mem.read(addr, size)
        }
    }
}

impl BranchForm {
    /// Resolves the form against the state the CPU has at `self.at`, before
    /// the instruction executes. Async-signal-safe.
    pub fn evaluate(&self, regs: &impl RegisterFile, mem: &impl Memory) -> Resolution {
        let sp = regs.rsp();
        let flags = regs.rflags();
        let cond = |taken: bool| {
            let next = if taken {
                target_value(self.target, regs, mem)
            } else {
                self.fall_through
            };
            Resolution::Continue { taken, next, sp }
        };
        match self.kind {
            BranchKind::Jcc(c) => cond(c.holds(flags)),
            BranchKind::Jrcxz { ecx } => {
                let rcx = regs.gpr(RCX);
                cond(if ecx { rcx as u32 == 0 } else { rcx == 0 })
            }
            BranchKind::Loop { zf, ecx } => {
                let rcx = regs.gpr(RCX).wrapping_sub(1);
                let nonzero = if ecx { rcx as u32 != 0 } else { rcx != 0 };
                let zf_ok = zf.is_none_or(|want| (flags & x86_sem::flag::ZF != 0) == want);
                cond(nonzero && zf_ok)
            }
            BranchKind::Jmp => Resolution::Continue {
                taken: true,
                next: target_value(self.target, regs, mem),
                sp,
            },
            BranchKind::Call => Resolution::Continue {
                taken: true,
                next: target_value(self.target, regs, mem),
                sp: sp.wrapping_sub(8),
            },
            BranchKind::Ret { pop } => Resolution::Continue {
                taken: true,
                next: mem.read(sp, 8),
                sp: sp.wrapping_add(8 + pop as u64),
            },
            BranchKind::Syscall => {
                if DIVERGING_SYSCALLS.contains(&regs.gpr(0)) {
                    Resolution::Stop
                } else {
                    Resolution::Continue {
                        taken: false,
                        next: self.fall_through,
                        sp,
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use x86_sem::flag::{CF, OF, PF, SF, ZF};

    struct Regs {
        gpr: [u64; 16],
        flags: u64,
    }

    impl RegisterFile for Regs {
        fn gpr(&self, reg: Gpr) -> u64 {
            self.gpr[reg as usize]
        }
        fn rip(&self) -> u64 {
            0
        }
        fn rflags(&self) -> u64 {
            self.flags
        }
    }

    struct Mem(Vec<(u64, u64)>);

    impl Memory for Mem {
        fn read(&self, addr: u64, _size: u8) -> u64 {
            self.0
                .iter()
                .find(|(a, _)| *a == addr)
                .map_or(0xdead, |(_, v)| *v)
        }
    }

    fn regs(flags: u64) -> Regs {
        Regs {
            gpr: [0; 16],
            flags,
        }
    }

    #[test]
    fn conditions_follow_the_flags() {
        // (condition, flags, expected)
        let vectors = [
            (Condition::E, ZF, true),
            (Condition::Ne, ZF, false),
            (Condition::B, CF, true),
            (Condition::Ae, CF, false),
            (Condition::Be, ZF, true),
            (Condition::A, 0, true),
            (Condition::A, CF, false),
            (Condition::L, SF, true),
            (Condition::L, SF | OF, false),
            (Condition::Ge, SF | OF, true),
            (Condition::Le, ZF, true),
            (Condition::G, 0, true),
            (Condition::G, OF, false),
            (Condition::S, SF, true),
            (Condition::Ns, SF, false),
            (Condition::P, PF, true),
            (Condition::Np, PF, false),
            (Condition::O, OF, true),
            (Condition::No, 0, true),
        ];
        for (c, flags, want) in vectors {
            assert_eq!(c.holds(flags), want, "{c:?} with flags {flags:#x}");
            assert_eq!(Condition::from_code(c as u8), c);
        }
    }

    #[test]
    fn jcc_goes_to_target_or_falls_through() {
        let form = BranchForm {
            at: 0x1000,
            fall_through: 0x1002,
            kind: BranchKind::Jcc(Condition::Ne),
            target: Target::Const(0x2000),
        };
        let mem = Mem(vec![]);
        assert_eq!(
            form.evaluate(&regs(0), &mem),
            Resolution::Continue {
                taken: true,
                next: 0x2000,
                sp: 0
            }
        );
        assert_eq!(
            form.evaluate(&regs(ZF), &mem),
            Resolution::Continue {
                taken: false,
                next: 0x1002,
                sp: 0
            }
        );
    }

    #[test]
    fn indirect_forms_read_registers_and_memory() {
        let mut r = regs(0);
        r.gpr[0] = 0x5000; // rax: table base
        r.gpr[1] = 3; // rcx: index
        r.gpr[RSP as usize] = 0x7ff0;
        let mem = Mem(vec![(0x5000 + 3 * 8 + 0x10, 0x4242), (0x7ff0, 0x1234)]);
        let table = BranchForm {
            at: 0x1000,
            fall_through: 0x1007,
            kind: BranchKind::Jmp,
            target: Target::Load {
                operand: x86_sem::MemOperand {
                    base: Some(0),
                    index: Some(1),
                    scale_log2: 3,
                    disp: 0x10,
                    addr32: false,
                    segment: x86_sem::SegmentBase::None,
                },
                size: 8,
            },
        };
        assert_eq!(
            table.evaluate(&r, &mem),
            Resolution::Continue {
                taken: true,
                next: 0x4242,
                sp: 0x7ff0
            }
        );
        let ret = BranchForm {
            kind: BranchKind::Ret { pop: 16 },
            target: Target::Const(0),
            ..table
        };
        assert_eq!(
            ret.evaluate(&r, &mem),
            Resolution::Continue {
                taken: true,
                next: 0x1234,
                sp: 0x7ff0 + 24
            }
        );
        let call = BranchForm {
            kind: BranchKind::Call,
            target: Target::Reg(0),
            ..table
        };
        assert_eq!(
            call.evaluate(&r, &mem),
            Resolution::Continue {
                taken: true,
                next: 0x5000,
                sp: 0x7ff0 - 8
            }
        );
    }

    #[test]
    fn loop_decrements_before_testing() {
        let form = BranchForm {
            at: 0x1000,
            fall_through: 0x1002,
            kind: BranchKind::Loop {
                zf: None,
                ecx: false,
            },
            target: Target::Const(0x900),
        };
        let mem = Mem(vec![]);
        let mut r = regs(0);
        r.gpr[1] = 1;
        assert!(matches!(
            form.evaluate(&r, &mem),
            Resolution::Continue { taken: false, .. }
        ));
        r.gpr[1] = 2;
        assert!(matches!(
            form.evaluate(&r, &mem),
            Resolution::Continue { taken: true, .. }
        ));
        let loope = BranchForm {
            kind: BranchKind::Loop {
                zf: Some(true),
                ecx: false,
            },
            ..form
        };
        assert!(matches!(
            loope.evaluate(&r, &mem),
            Resolution::Continue { taken: false, .. }
        ));
        r.flags = ZF;
        assert!(matches!(
            loope.evaluate(&r, &mem),
            Resolution::Continue { taken: true, .. }
        ));
    }

    #[test]
    fn diverging_syscalls_stop_the_trace() {
        let form = BranchForm {
            at: 0x1000,
            fall_through: 0x1002,
            kind: BranchKind::Syscall,
            target: Target::Const(0),
        };
        let mem = Mem(vec![]);
        let mut r = regs(0);
        r.gpr[0] = libc::SYS_write as u64;
        assert!(matches!(
            form.evaluate(&r, &mem),
            Resolution::Continue {
                taken: false,
                next: 0x1002,
                ..
            }
        ));
        r.gpr[0] = libc::SYS_exit_group as u64;
        assert_eq!(form.evaluate(&r, &mem), Resolution::Stop);
    }
}
