//! The machine: the x86-sem core with brr's own instruction installed, the
//! guest's registers and memory, and the LFSR that decides each brr.
//!
//! `Machine::step` keeps the core's contract: it never allocates (the
//! table and the decoded-instruction cache are built in `Machine::new`) and
//! takes no locks.

use super::mem::GuestMemory;
use crate::encoding::Brr;
use crate::lfsr::Lfsr;
use iced_x86::{Code, Instruction};
use std::sync::OnceLock;
use x86_sem::{
    gpr, BranchKind, CpuModel, CpuState, DecodeCache, Insn, Registers, Retired, Stop, Table,
};

/// The CPU brr emulates: this machine's, as x86-sem measures it
/// (`CpuModel::host`: CPUID, XCR0 and the quirk probes), so that a guest
/// runs under brr as it runs natively here, and brr's differential tests
/// compare like with like. A form this CPU lacks stops the run as #UD
/// would. Measured once.
pub fn emulated_model() -> &'static CpuModel {
    static MODEL: OnceLock<CpuModel> = OnceLock::new();
    MODEL.get_or_init(CpuModel::host)
}

/// Entries of the decoded-instruction cache (a power of two).
pub const ICACHE_ENTRIES: usize = 1 << 16;

/// Length of `syscall` (0F 05).
const SYSCALL_LEN: u64 = 2;

/// What the core runs on: the guest's registers and memory, and the brr
/// outcome generator its branch-on-random handler clocks.
#[derive(Debug)]
pub struct Guest {
    pub regs: CpuState,
    pub mem: GuestMemory,
    /// Clocked once per executed brr.
    pub lfsr: Lfsr,
    /// brr instructions executed and taken.
    pub brr_executed: u64,
    pub brr_taken: u64,
}

impl x86_sem::Machine for Guest {
    type Regs = CpuState;
    type Mem = GuestMemory;
    #[inline(always)]
    fn regs(&self) -> &CpuState {
        &self.regs
    }
    #[inline(always)]
    fn regs_mut(&mut self) -> &mut CpuState {
        &mut self.regs
    }
    #[inline(always)]
    fn mem(&mut self) -> &mut GuestMemory {
        &mut self.mem
    }
}

/// Branch-on-random (see `crate::encoding`): taken when the LFSR says so.
/// Other UD1 forms trap, as on the CPU.
fn branch_on_random(g: &mut Guest, insn: &Insn, r: &mut Retired) -> Result<(), Stop> {
    let Some(brr) = Brr::from_insn(insn) else {
        return Err(Stop::Trap);
    };
    let taken = g.lfsr.brr(brr.freq);
    g.brr_executed += 1;
    g.brr_taken += u64::from(taken);
    let target = brr.target(r.ip);
    r.kind = BranchKind::Other;
    r.taken = taken;
    r.target = target;
    if taken {
        r.next_rip = target;
    }
    Ok(())
}

/// An x86-64 user-mode machine running brr binaries.
pub struct Machine {
    pub guest: Guest,
    /// What the last successful `step` retired.
    pub retired: Retired,
    /// Instructions retired so far (syscalls included).
    pub icount: u64,
    /// Instructions that read a flag the manuals leave undefined (the run
    /// goes on with the value the core computed for it).
    pub undefined_flag_reads: u64,
    /// Steps that stored into executable memory (each flushed the
    /// decoded instructions it overwrote).
    pub code_writes: u64,
    /// The bytes the last such step wrote.
    pub last_code_write: (u64, u64),
    table: Box<Table<Guest>>,
    cache: DecodeCache<Box<[Insn]>>,
}

impl Machine {
    /// Builds the table and the empty cache (all allocation happens here).
    pub fn new(regs: CpuState, mem: GuestMemory, lfsr: Lfsr) -> Self {
        let mut table = Table::boxed(emulated_model());
        table.set(Code::Ud1_r32_rm32, branch_on_random);
        let storage = vec![Insn::empty(); ICACHE_ENTRIES].into_boxed_slice();
        Machine {
            guest: Guest {
                regs,
                mem,
                lfsr,
                brr_executed: 0,
                brr_taken: 0,
            },
            retired: Retired::default(),
            icount: 0,
            undefined_flag_reads: 0,
            code_writes: 0,
            last_code_write: (0, 0),
            table,
            cache: DecodeCache::new(storage).expect("ICACHE_ENTRIES is a power of two"),
        }
    }

    /// Forgets the decoded instructions with a byte in the executable
    /// range the last step stored into (self-modifying code).
    #[cold]
    #[inline(never)]
    fn code_written(&mut self) {
        let Some((start, end)) = self.guest.mem.take_code_write() else {
            return;
        };
        self.code_writes += 1;
        self.last_code_write = (start, end);
        self.cache.forget_range(start, end);
    }

    /// iced's full decoding of the instruction at `ip`, if it is in the
    /// cache (the one just retired always is). Decoded again from guest
    /// memory: the cache keeps only what a step reads.
    pub fn decoded(&self, ip: u64) -> Option<Instruction> {
        let len = self.cache.get(ip)?.len();
        let mut bytes = [0u8; 15];
        let n = self.guest.mem.peek_code(ip, &mut bytes).min(len);
        let mut decoder =
            iced_x86::Decoder::with_ip(64, &bytes[..n], ip, iced_x86::DecoderOptions::NONE);
        let ins = decoder.decode();
        (!ins.is_invalid()).then_some(ins)
    }

    /// Drops the decoded instructions overlapping `start..end` (after the
    /// guest's code mappings change).
    pub fn flush_code(&mut self, start: u64, end: u64) {
        self.cache.flush_range(start, end);
    }

    /// Executes one instruction. A `syscall` retires with rip past it and
    /// rcx and r11 set as the kernel sets them, then returns
    /// `Err(Stop::Syscall)` for the caller to service. Does not allocate.
    ///
    /// Always inlined: the run loop calling it once per instruction is
    /// the emulator's hot path, and the store-into-code check made it too
    /// big for the inliner's default (a call per instruction cost about
    /// a fifth of the MIPS; `cargo bench -p brr --bench mips`).
    #[inline(always)]
    pub fn step(&mut self) -> Result<(), Stop> {
        match self.execute() {
            Ok(()) => {
                self.icount += 1;
                Ok(())
            }
            Err(stop) => self.stopped(stop),
        }
    }

    /// One instruction through the core, and the decoded code its stores
    /// overwrote forgotten; `icount` is the caller's to move (what `step`
    /// and `run_until` share).
    #[inline(always)]
    fn execute(&mut self) -> Result<(), Stop> {
        x86_sem::step_into(
            &mut self.guest,
            &self.table,
            &mut self.cache,
            &mut self.retired,
        )?;
        if self.guest.mem.code_write_pending() {
            self.code_written();
        }
        Ok(())
    }

    /// Steps until `icount` reaches `end` (no step when it already has),
    /// or until a step stops: then returns what `step` returned for it. Each step is `step`'s, stores into code and all; what
    /// differs is only the loop, which keeps the count in a register and
    /// compares it with `end`, so that a run loop checks its limit and
    /// its timer per call rather than per instruction (the hot path of
    /// `Process::run`; `cargo bench -p brr --bench mips`).
    #[inline(always)]
    pub fn run_until(&mut self, end: u64) -> Result<(), Stop> {
        let mut n = self.icount;
        while n < end {
            match self.execute() {
                Ok(()) => n += 1,
                Err(stop) => {
                    self.icount = n;
                    self.stopped(stop)?;
                    n = self.icount;
                }
            }
        }
        self.icount = n;
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn stopped(&mut self, stop: Stop) -> Result<(), Stop> {
        match stop {
            Stop::Syscall => {
                let regs = &mut self.guest.regs;
                let ip = regs.rip;
                let next = ip + SYSCALL_LEN;
                regs.set_gpr(gpr::RCX, next);
                regs.set_gpr(gpr::R11, regs.rflags);
                regs.rip = next;
                self.retired = Retired {
                    ip,
                    len: SYSCALL_LEN as u8,
                    next_rip: next,
                    ..Retired::default()
                };
                self.icount += 1;
                Err(Stop::Syscall)
            }
            Stop::UnknownFlags => {
                // brr runs whole programs: there is no CPU to defer to, so
                // the value the core computed stands for the undefined
                // flag (what a program reading it gets is unspecified).
                self.undefined_flag_reads += 1;
                self.guest.regs.undefined = 0;
                self.step()
            }
            other => Err(other),
        }
    }
}
