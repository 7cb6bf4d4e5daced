//! The Stop contract, for every form in `forms.txt`: when the n-th memory
//! access of an instruction faults (or is refused), `step` stops with that
//! error and leaves every register and every byte of memory as they were.
//! rep-prefixed string instructions are the documented exception: their
//! finished iterations stay done. For them the state must be exactly that
//! of those whole iterations: rip still at the instruction, rcx counting
//! the rest, and every other register and every byte of memory as the
//! same instruction leaves them when it runs that many iterations to the
//! end (with rcx set to that number).

mod harness;

use harness::native::{self, CODE, DATA, ENTRY};
use harness::{make_case, RegionMemory, Rng};
use iced_x86::Mnemonic;
use x86_sem::{Cpu, CpuModel, CpuState, DecodeCache, Insn, MemError, Memory, Stop, Table};

/// The harness memory, except that access number `fail_at` (counting from
/// 1) faults, or is refused.
#[derive(Debug, Default)]
struct FailingMemory {
    inner: RegionMemory,
    fail_at: usize,
    count: usize,
    refuse: bool,
}

impl FailingMemory {
    fn next(&mut self, addr: u64, write: bool) -> Result<(), MemError> {
        self.count += 1;
        if self.count != self.fail_at {
            Ok(())
        } else if self.refuse {
            Err(MemError::Refused { addr })
        } else {
            Err(MemError::Fault { addr, write })
        }
    }
}

impl Memory for FailingMemory {
    fn load(&mut self, addr: u64, size: usize) -> Result<u64, MemError> {
        self.next(addr, false)?;
        self.inner.load(addr, size)
    }
    fn store(&mut self, addr: u64, size: usize, value: u64) -> Result<(), MemError> {
        self.next(addr, true)?;
        self.inner.store(addr, size, value)
    }
    fn load_bytes(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.next(addr, false)?;
        self.inner.load_bytes(addr, buf)
    }
    fn store_bytes(&mut self, addr: u64, buf: &[u8]) -> Result<(), MemError> {
        self.next(addr, true)?;
        self.inner.store_bytes(addr, buf)
    }
    fn fetch(&mut self, addr: u64, buf: &mut [u8; 15]) -> usize {
        self.inner.fetch(addr, buf)
    }
}

type FailingCpu = Cpu<CpuState, FailingMemory>;

fn is_rep_string(i: &iced_x86::Instruction) -> bool {
    (i.has_rep_prefix() || i.has_repne_prefix()) && i.is_string_instruction()
}

/// Whether the state `stopped` that a rep string instruction stopped in
/// (at a failed access) is the state of its whole iterations so far: `k`
/// of them, by the count rcx went down by. The reference runs the same
/// instruction from the case's state with rcx = k and no failing access,
/// to its end; `stopped` must then differ from it only in rip (still at
/// the instruction) and rcx (counting what is left).
fn rep_progress(
    instr: &iced_x86::Instruction,
    case: &harness::Case,
    stopped: &CpuState,
    table: &Table<FailingCpu>,
    cache: &mut DecodeCache<Vec<Insn>>,
) -> Option<String> {
    // ecx counts under 0x67 (esi/edi operands), rcx otherwise.
    let mask = if matches!(
        instr.op_kind(0),
        iced_x86::OpKind::MemorySegESI | iced_x86::OpKind::MemoryESEDI
    ) || matches!(
        instr.op_kind(instr.op_count().saturating_sub(1)),
        iced_x86::OpKind::MemorySegESI | iced_x86::OpKind::MemoryESEDI
    ) {
        0xffff_ffff
    } else {
        u64::MAX
    };
    let done = case.state.gpr[1].wrapping_sub(stopped.gpr[1]) & mask;
    let memory_after_stop = native::data().to_vec();
    native::data().copy_from_slice(&case.data);
    cache.flush();
    let mut start = case.state;
    start.gpr[1] = (start.gpr[1] & !mask) | done;
    let mut reference = FailingCpu {
        regs: start,
        mem: FailingMemory::default(),
    };
    // A step may leave a long rep instruction part-way (its iteration
    // limit); it resumes at the next.
    for _ in 0..1_000_000 {
        if reference.regs.rip != ENTRY {
            break;
        }
        if let Err(stop) = x86_sem::step(&mut reference, table, cache) {
            return Some(format!(
                "the reference run of {done} iterations stopped: {stop:?}"
            ));
        }
    }
    let mut expected = reference.regs;
    expected.rip = ENTRY;
    expected.gpr[1] = stopped.gpr[1];
    if *stopped != expected {
        return Some(format!(
            "after {done} iterations the registers are not those of {done} whole ones:\n  {expected:x?}\n  {stopped:x?}"
        ));
    }
    if native::data() != &memory_after_stop[..] {
        return harness::first_byte_difference(DATA, native::data(), &memory_after_stop).map(|d| {
            format!("after {done} iterations memory is not that of {done} whole ones: {d}")
        });
    }
    None
}

#[test]
fn a_failed_access_changes_nothing() {
    let vectors = harness::vectors::load("forms.txt");
    let _lock = native::lock();
    let fs = native::fs_base();
    let table = Table::<FailingCpu>::boxed(&CpuModel::every_feature());
    let mut cache = DecodeCache::new(vec![Insn::empty(); 16]).unwrap();
    let mut failures = Vec::new();
    let mut stops = 0;
    for (k, v) in vectors.iter().enumerate() {
        if v.instr.mnemonic() == Mnemonic::Syscall {
            continue;
        }
        let mut rng = Rng(0x5851_f42d_4c95_7f2d ^ (k as u64 + 1).wrapping_mul(0x9e37_79b9));
        'cases: for n in 0..40 {
            let case = make_case(&v.instr, &mut rng, fs);
            for fail_at in 1..=4 {
                native::load_code(&v.bytes);
                native::data().copy_from_slice(&case.data);
                let code_before = native::code().to_vec();
                cache.flush();
                let mut cpu = FailingCpu {
                    regs: case.state,
                    mem: FailingMemory {
                        fail_at,
                        refuse: n % 2 == 1,
                        ..FailingMemory::default()
                    },
                };
                let result = x86_sem::step(&mut cpu, &table, &mut cache);
                let failed = cpu.mem.count >= fail_at;
                // A stop may also come from a fault of the harness memory
                // itself, or a misaligned vector access: the same contract.
                let problem = match result {
                    Err(Stop::Fault { .. } | Stop::Refused { .. }) => {
                        stops += 1;
                        if cpu.regs.rip != ENTRY {
                            Some(format!("rip moved to {:#x}", cpu.regs.rip))
                        } else if is_rep_string(&v.instr) {
                            rep_progress(&v.instr, &case, &cpu.regs, &table, &mut cache)
                        } else if cpu.regs != case.state {
                            Some(format!(
                                "registers changed:\n  {:x?}\n  {:x?}",
                                case.state, cpu.regs
                            ))
                        } else if native::data() != &case.data[..] {
                            harness::first_byte_difference(DATA, &case.data, native::data())
                        } else {
                            harness::first_byte_difference(CODE, &code_before, native::code())
                        }
                    }
                    Ok(_) if failed => Some("retired although an access failed".to_string()),
                    _ => None,
                };
                if let Some(p) = problem {
                    failures.push(format!(
                        "`{}` case {n}, access {fail_at} failing: {p}",
                        v.text
                    ));
                    break 'cases;
                }
                if !failed {
                    break;
                }
            }
        }
    }
    assert!(stops > 1000, "only {stops} stops were exercised");
    assert!(
        failures.is_empty(),
        "{} lines break the contract:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
