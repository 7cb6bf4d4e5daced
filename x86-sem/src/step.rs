//! One instruction: fetch through the cache, dispatch through the table,
//! and what came of it.

use crate::cache::InsnSource;
use crate::insn::Insn;
use crate::mem::{MemError, Memory};
use crate::regs::Registers;
use crate::table::{Handler, Table};
use iced_x86::Code;

/// What the semantics run on: registers and memory, plus whatever else
/// the owner's own handlers need (brr's LFSR, for example).
///
/// Implementations are usually a struct holding a [`crate::CpuState`] and
/// a memory; [`Cpu`] is that struct for owners with nothing more.
pub trait Machine {
    /// The register file.
    type Regs: Registers;
    /// The memory.
    type Mem: Memory;
    /// The registers.
    fn regs(&self) -> &Self::Regs;
    /// The registers, writable.
    fn regs_mut(&mut self) -> &mut Self::Regs;
    /// The memory.
    fn mem(&mut self) -> &mut Self::Mem;
    /// Most iterations one `step` of a rep-prefixed string instruction
    /// runs; when it stops early the instruction retires with `next_rip`
    /// still at itself (as after an interrupt) and the next step resumes
    /// it. A signal handler bounds its time with this.
    #[inline(always)]
    fn rep_limit(&self) -> u64 {
        u64::MAX
    }
}

/// Registers and memory with nothing else: the plain [`Machine`].
#[derive(Clone, Debug, Default)]
pub struct Cpu<R, M> {
    /// The register file.
    pub regs: R,
    /// The memory.
    pub mem: M,
}

impl<R: Registers, M: Memory> Machine for Cpu<R, M> {
    type Regs = R;
    type Mem = M;
    #[inline(always)]
    fn regs(&self) -> &R {
        &self.regs
    }
    #[inline(always)]
    fn regs_mut(&mut self) -> &mut R {
        &mut self.regs
    }
    #[inline(always)]
    fn mem(&mut self) -> &mut M {
        &mut self.mem
    }
}

/// Control-flow class of a retired instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BranchKind {
    /// Not a control transfer.
    #[default]
    None,
    /// jcc, jrcxz/jecxz, loop/loope/loopne.
    Conditional,
    /// jmp rel.
    DirectJump,
    /// jmp r/m.
    IndirectJump,
    /// call rel.
    DirectCall,
    /// call r/m.
    IndirectCall,
    /// ret.
    Return,
    /// A transfer made by an owner-installed handler (brr's branch-on-random).
    Other,
}

/// What one `step` retired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retired {
    /// Address of the instruction.
    pub ip: u64,
    /// Its length.
    pub len: u8,
    /// Where execution continues (rip after the step). Equal to `ip` when a
    /// rep string instruction stopped at the owner's `rep_limit`.
    pub next_rip: u64,
    /// Control-flow class.
    pub kind: BranchKind,
    /// Whether a branch was taken (always for unconditional ones; never
    /// when `kind` is `None`).
    pub taken: bool,
    /// Branch target, taken or not, when `kind` is a branch.
    pub target: u64,
    /// Address of the last data access, 0 if none.
    pub mem_addr: u64,
    /// Whether that access was a store.
    pub mem_write: bool,
}

/// Why `step` did not retire the instruction at rip.
///
/// Every stop leaves the architectural registers exactly as they were
/// before the instruction, rip still at it: handlers make their last
/// fallible memory access before writing any register. The one exception
/// is a rep-prefixed string instruction, whose completed iterations stay
/// done (rsi, rdi, rcx and the memory advanced), as on the CPU when an
/// iteration faults. Memory may hold a store of a multi-part access made
/// before the part that failed, when the [`Memory`] implementation
/// splits wide accesses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// A `syscall`, not executed: the owner services it, sets rcx and r11
    /// as the kernel does, and advances rip by 2.
    Syscall,
    /// An instruction whose result only the CPU knows (cpuid, rdtsc,
    /// rdrand, …), a form whose result the manuals leave undefined, or a
    /// result that differs between CPUs and the table's
    /// [`CpuModel`](crate::CpuModel) did not measure.
    Opaque,
    /// A form the core does not implement, or that the table's
    /// [`CpuModel`](crate::CpuModel) lacks (the CPU would raise #UD).
    Unsupported {
        /// Address of the instruction.
        ip: u64,
        /// Its iced `Code`.
        code: Code,
    },
    /// The instruction reads a flag that is marked undefined.
    UnknownFlags,
    /// The CPU would fault (#PF, or #GP on a misaligned aligned access).
    Fault {
        /// First byte of the access.
        addr: u64,
        /// Whether it was a store.
        write: bool,
    },
    /// The memory implementation declined an access.
    Refused {
        /// First byte of the access.
        addr: u64,
    },
    /// rip is not executable, or the bytes there are not an instruction.
    BadFetch,
    /// #DE: division by zero, or a quotient that does not fit.
    DivideError,
    /// An instruction that traps by design: int3, int n, ud0/ud1/ud2, hlt.
    Trap,
}

impl From<MemError> for Stop {
    #[inline(always)]
    fn from(e: MemError) -> Stop {
        match e {
            MemError::Fault { addr, write } => Stop::Fault { addr, write },
            MemError::Refused { addr } => Stop::Refused { addr },
        }
    }
}

/// Executes the instruction at rip.
///
/// Does not allocate, lock or format: it may run in a signal handler once
/// the table and the cache exist (build them, and so warm iced's lazily
/// initialised decoder tables, before arming any signal). A hot loop
/// should prefer [`step_into`], which fills the caller's [`Retired`] in
/// place instead of returning a copy.
///
/// # Errors
/// A [`Stop`], with the registers as before the instruction.
#[inline]
pub fn step<X: Machine, C: InsnSource + ?Sized>(
    x: &mut X,
    table: &Table<X>,
    cache: &mut C,
) -> Result<Retired, Stop> {
    let mut r = Retired::default();
    step_into(x, table, cache, &mut r)?;
    Ok(r)
}

/// [`step`], writing what retired into `r` (unspecified after a stop).
///
/// # Errors
/// A [`Stop`], with the registers as before the instruction.
#[inline(always)]
pub fn step_into<X: Machine, C: InsnSource + ?Sized>(
    x: &mut X,
    table: &Table<X>,
    cache: &mut C,
    r: &mut Retired,
) -> Result<(), Stop> {
    let ip = x.regs().rip();
    let insn = cache.lookup(ip, x.mem())?;
    run(x, ip, insn, table.handler(insn.code as u16), r)
}

/// Runs `insn`, at `ip`, through `handler`, and moves rip on.
#[inline(always)]
fn run<X: Machine>(
    x: &mut X,
    ip: u64,
    insn: &Insn,
    handler: Handler<X>,
    r: &mut Retired,
) -> Result<(), Stop> {
    *r = Retired {
        ip,
        len: insn.len,
        next_rip: ip.wrapping_add(u64::from(insn.len)),
        ..Retired::default()
    };
    handler(x, insn, r)?;
    x.regs_mut().set_rip(r.next_rip);
    Ok(())
}

/// A source of decoded instructions that also keeps each one's handler,
/// so that a step need not read the dispatch table (8 bytes a form, 39 KiB
/// in all: on a cold cache, a line of it for each form a run meets).
pub trait HandlerSource<X: Machine> {
    /// The instruction at `ip`, as [`InsnSource::lookup`] finds it, and
    /// its handler in `table` (the same `table` at every call).
    ///
    /// # Errors
    /// As [`InsnSource::lookup`].
    fn lookup_handler(
        &mut self,
        ip: u64,
        mem: &mut X::Mem,
        table: &Table<X>,
    ) -> Result<(&Insn, Handler<X>), Stop>;
}

/// [`step_into`], with the handler from the source (see
/// [`HandlerSource`]).
///
/// # Errors
/// A [`Stop`], with the registers as before the instruction.
#[inline(always)]
pub fn step_handled<X: Machine, C: HandlerSource<X> + ?Sized>(
    x: &mut X,
    table: &Table<X>,
    cache: &mut C,
    r: &mut Retired,
) -> Result<(), Stop> {
    let ip = x.regs().rip();
    let (insn, handler) = cache.lookup_handler(ip, x.mem(), table)?;
    run(x, ip, insn, handler, r)
}
