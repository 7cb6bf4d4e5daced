//! The data-flow look-ahead (`lookahead=dataflow`): the core steps ahead on
//! memory no other thread can change, and whatever it resolves needs no
//! checkpoint; where it must stop, the decoding walk goes on from its exact
//! state.

use x86_sem::BranchKind;

use super::{table, Emulator, EntrySink, ReadPolicy, MAX_SEGMENT_INSTRUCTIONS};
use crate::buffer::BranchEntry;

/// What a data-flow run did.
#[derive(Clone, Copy, Debug)]
pub struct DataflowRun {
    /// Taken branches pushed.
    pub entries: usize,
    /// Transfers resolved (taken or not).
    pub transfers: u32,
    pub steps: u32,
    pub end: DataflowEnd,
}

/// Why a data-flow run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataflowEnd {
    /// It could go no further: the caller decodes on from the state.
    Stopped,
    /// The trace has its N branches.
    Complete,
    /// The taken branch at `from` goes to code no module names.
    OutsideMappings { from: u64 },
}

impl Emulator {
    /// The data-flow look-ahead (`lookahead=dataflow`): from the exact
    /// state in [`Emulator::state_mut`], steps the core on memory it may
    /// trust without a checkpoint ([`ReadPolicy::Dataflow`]), pushing the
    /// taken branches to `sink` (at most `wanted`), until it must stop.
    /// With `first_live`, the first instruction (the branch a breakpoint
    /// stopped at, about to run) reads real memory: the thread itself is
    /// about to read the same words.
    ///
    /// The state afterwards (in [`Emulator::state_mut`]) is exact: the
    /// caller goes on from its rip by decoding alone. A breakpoint placed at
    /// an address this run went through fires there first: `hits_at`
    /// counts those visits.
    pub fn dataflow(
        &mut self,
        sink: &mut impl EntrySink,
        wanted: usize,
        first_live: bool,
        resumed: bool,
    ) -> DataflowRun {
        self.begin();
        let exec = self.cpu.mem.exec;
        self.start = self.cpu.regs;
        self.resumed = resumed;
        self.cpu.mem.live.reset();
        self.visits.reset();
        let table = table();
        let has_rseq = exec.has_rseq();
        let mut run = DataflowRun {
            entries: 0,
            transfers: 0,
            steps: 0,
            end: DataflowEnd::Stopped,
        };
        let mut r = x86_sem::Retired::default();
        while run.steps < MAX_SEGMENT_INSTRUCTIONS {
            let pc = self.cpu.regs.rip;
            if has_rseq && exec.in_rseq(pc) {
                break;
            }
            let (stack_slot, rep_string) = self.inspect(pc);
            self.cpu.mem.policy = if first_live && run.steps == 0 {
                ReadPolicy::Live
            } else {
                ReadPolicy::Dataflow { stack_slot }
            };
            // A rep string instruction the step leaves half-done goes back
            // to its start: the thread runs it whole, and only its start is
            // a point the decoding walk can go on from.
            // What a string instruction changes of the registers; only
            // that is kept (on the application's stack: the whole register
            // file is 2.4 KiB).
            let before_rep = rep_string.then(|| {
                let regs = &self.cpu.regs;
                (regs.gpr, regs.rip, regs.rflags, regs.undefined)
            });
            let stepped = x86_sem::step_into(&mut self.cpu, table, &mut self.cache, &mut r);
            self.cpu.mem.policy = ReadPolicy::Live;
            if stepped.is_err() || r.next_rip == r.ip {
                if let Some((gpr, rip, rflags, undefined)) = before_rep {
                    let regs = &mut self.cpu.regs;
                    (regs.gpr, regs.rip, regs.rflags, regs.undefined) =
                        (gpr, rip, rflags, undefined);
                }
                break;
            }
            self.visits.visit(pc);
            run.steps += 1;
            if r.kind == BranchKind::None {
                continue;
            }
            run.transfers += 1;
            if r.taken {
                if self.cpu.mem.exec_range(r.next_rip).is_none() {
                    run.end = DataflowEnd::OutsideMappings { from: r.ip };
                    break;
                }
                if !sink.push(BranchEntry {
                    from: r.ip,
                    to: r.next_rip,
                }) {
                    run.end = DataflowEnd::Complete;
                    break;
                }
                run.entries += 1;
                if run.entries == wanted {
                    run.end = DataflowEnd::Complete;
                    break;
                }
            }
        }
        run
    }

    /// What the data-flow run needs to know of the instruction at `pc`
    /// before stepping it: the stack slot it reads implicitly (pop, ret,
    /// leave), and whether it is a rep string instruction.
    fn inspect(&mut self, pc: u64) -> (Option<u64>, bool) {
        use x86_sem::iced_x86::Mnemonic;
        let Ok(insn) = self.cache.lookup(pc, &mut self.cpu.mem) else {
            return (None, false);
        };
        let i = insn.instruction();
        let slot = match i.mnemonic() {
            Mnemonic::Pop | Mnemonic::Ret | Mnemonic::Popfq => Some(self.cpu.regs.gpr[4]),
            Mnemonic::Leave => Some(self.cpu.regs.gpr[5]),
            _ => None,
        };
        let rep = (i.has_rep_prefix() || i.has_repne_prefix()) && i.is_string_instruction();
        (slot, rep)
    }

    /// Breakpoint hits at `at` until the thread gets there past the last
    /// run (see [`Emulator::dataflow`]).
    pub fn dataflow_hits(&self, at: u64) -> u32 {
        self.hits_at(at, self.resumed)
    }
}
