//! A cycle model fed by the emulator's retired-instruction stream.
//!
//! First-order model of the paper's out-of-order core (Lee and Zilles §5):
//! - front end: fetch blocks of `fetch_width` instructions (3) that end at
//!   a predicted-taken branch; L1 I-cache misses stall fetch;
//! - branches: a direction predictor for jcc (`predictor` in the config:
//!   tournament by default, or gshare, bimodal, perfect), BTB for targets,
//!   RAS for returns. A wrong direction or target costs `mispredict_penalty` cycles
//!   after the branch executes. Direct jumps/calls and brr are resolved in
//!   decode: a BTB miss or a taken brr costs `decode_redirect_penalty`. brr
//!   is always predicted not-taken and never touches predictor state. The
//!   perfect predictor also knows indirect targets and return addresses, so
//!   it never mispredicts; BTB misses of direct transfers still redirect;
//! - back end: dataflow. An instruction issues when it is fetched, its ROB
//!   slot is free and its register/flag inputs are ready; loads take the L1,
//!   L2 or memory latency, or the forwarding latency from an older store to
//!   the same word; retirement is in order, `retire_width` per cycle.
//!   Wrong-path instructions are not simulated.
//!
//! The dataflow part matters for this paper: counter-based sampling makes
//! every instrumentation site load, decrement and store one global counter,
//! a chain through memory the out-of-order core cannot overlap.

mod config;
mod parts;

pub use config::{Config, PredictorKind};

use crate::emu::{BranchKind, Retired};
use iced_x86::{Instruction, InstructionInfoFactory, Mnemonic, OpAccess, Register};
use parts::{Cache, Predictor, Ras, SetAssoc};
use std::collections::HashMap;

/// Register-like resources tracked for dependences: 16 GPRs, 16 XMMs, flags.
const FLAGS: usize = 32;
const STORE_TABLE: usize = 4096;

#[derive(Clone, Copy)]
struct Static {
    src: u64,
    dst: u64,
    load: bool,
    store: bool,
    latency: u32,
}

/// Counts for one kind of control transfer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindCounts {
    pub executed: u64,
    pub taken: u64,
    pub mispredicted: u64,
    /// Decode-stage redirects (BTB misses of direct transfers, taken brr).
    pub redirects: u64,
}

/// What a timed run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Name of the direction predictor the run used.
    pub predictor: &'static str,
    pub instructions: u64,
    pub cycles: u64,
    pub kinds: Vec<(&'static str, KindCounts)>,
    pub l1i: (u64, u64),
    pub l1d: (u64, u64),
    pub l2: (u64, u64),
    /// BTB (lookups, misses): every direct or indirect transfer and every
    /// conditional branch predicted taken looks its target up.
    pub btb: (u64, u64),
    /// Stores into executable memory (each cost `smc_penalty`).
    pub smc_flushes: u64,
}

impl Report {
    pub fn cpi(&self) -> f64 {
        self.cycles as f64 / self.instructions.max(1) as f64
    }
    pub fn mispredictions(&self) -> u64 {
        self.kinds.iter().map(|(_, k)| k.mispredicted).sum()
    }
    /// Mispredictions per thousand instructions.
    pub fn mpki(&self) -> f64 {
        self.mispredictions() as f64 * 1000.0 / self.instructions.max(1) as f64
    }

    /// L1 I-cache misses per thousand instructions.
    pub fn l1i_mpki(&self) -> f64 {
        self.l1i.1 as f64 * 1000.0 / self.instructions.max(1) as f64
    }
    /// BTB misses per thousand instructions.
    pub fn btb_mpki(&self) -> f64 {
        self.btb.1 as f64 * 1000.0 / self.instructions.max(1) as f64
    }

    /// Human-readable summary, one `key: value` per line.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "predictor: {}\ninstructions: {}\ncycles: {}\nCPI: {:.4}\nmispredictions: {}\nMPKI: {:.3}\n",
            self.predictor,
            self.instructions,
            self.cycles,
            self.cpi(),
            self.mispredictions(),
            self.mpki()
        );
        for (name, k) in &self.kinds {
            s += &format!(
                "{name}: executed {} taken {} mispredicted {} decode-redirects {}\n",
                k.executed, k.taken, k.mispredicted, k.redirects
            );
        }
        for (name, (a, m)) in [("L1I", self.l1i), ("L1D", self.l1d), ("L2", self.l2)] {
            s += &format!("{name}: accesses {a} misses {m}\n");
        }
        s += &format!(
            "BTB: lookups {} misses {}\nL1I MPKI: {:.3}\nBTB MPKI: {:.3}\n",
            self.btb.0,
            self.btb.1,
            self.l1i_mpki(),
            self.btb_mpki()
        );
        s += &format!("self-modifying-code flushes: {}\n", self.smc_flushes);
        s
    }
}

const KIND_NAMES: [&str; 8] = [
    "other",
    "conditional",
    "direct-jump",
    "indirect-jump",
    "direct-call",
    "indirect-call",
    "return",
    "brr",
];

fn kind_index(k: BranchKind) -> usize {
    match k {
        BranchKind::None => 0,
        BranchKind::Conditional => 1,
        BranchKind::DirectJump => 2,
        BranchKind::IndirectJump => 3,
        BranchKind::DirectCall => 4,
        BranchKind::IndirectCall => 5,
        BranchKind::Return => 6,
        BranchKind::Other => 7,
    }
}

/// The cycle model's state.
pub struct Model {
    c: Config,
    info: InstructionInfoFactory,
    statics: HashMap<u64, Static>,
    predictor: Predictor,
    btb: SetAssoc,
    btb_lookups: u64,
    btb_misses: u64,
    ras: Ras,
    l1i: Cache,
    l1d: Cache,
    l2: Cache,
    ready: [u64; 33],
    stores: Vec<(u64, u64)>,
    rob: Vec<u64>,
    count: u64,
    fetch: u64,
    slots: u32,
    last_line: u64,
    retire: u64,
    retired_in_cycle: u32,
    kinds: [KindCounts; 8],
    smc_flushes: u64,
}

impl Model {
    pub fn new(c: &Config) -> Model {
        Model {
            c: c.clone(),
            info: InstructionInfoFactory::new(),
            statics: HashMap::new(),
            predictor: Predictor::new(c.predictor, c),
            btb: SetAssoc::new(c.btb_entries as usize, c.btb_ways as usize),
            btb_lookups: 0,
            btb_misses: 0,
            ras: Ras::new(c.ras_entries),
            l1i: Cache::new(c.l1i_size, c.l1_ways, c.line_size),
            l1d: Cache::new(c.l1d_size, c.l1_ways, c.line_size),
            l2: Cache::new(c.l2_size, c.l2_ways, c.line_size),
            ready: [0; 33],
            stores: vec![(u64::MAX, 0); STORE_TABLE],
            rob: vec![0; c.rob_size as usize],
            count: 0,
            fetch: 0,
            slots: 0,
            last_line: u64::MAX,
            retire: 0,
            retired_in_cycle: 0,
            kinds: [KindCounts::default(); 8],
            smc_flushes: 0,
        }
    }

    /// The instruction just retired wrote executable memory `start..end`:
    /// forgets what the model keeps per instruction address there (decoded
    /// dependences, BTB entries) and charges `smc_penalty`: the pipeline
    /// is cleared behind the store and fetch restarts after it.
    pub fn code_written(&mut self, start: u64, end: u64) {
        self.smc_flushes += 1;
        for ip in start.saturating_sub(15)..end {
            self.statics.remove(&ip);
            self.btb.remove(ip);
        }
        self.fetch = self.fetch.max(self.retire) + u64::from(self.c.smc_penalty);
        self.slots = 0;
        self.last_line = u64::MAX;
    }

    fn analyse(&mut self, ins: &Instruction) -> Static {
        let mut s = Static {
            src: 0,
            dst: 0,
            load: false,
            store: false,
            latency: 1,
        };
        let info = self.info.info(ins);
        for r in info.used_registers() {
            let Some(bit) = resource(r.register()) else {
                continue;
            };
            match r.access() {
                OpAccess::Read | OpAccess::CondRead => s.src |= 1 << bit,
                OpAccess::Write | OpAccess::CondWrite => s.dst |= 1 << bit,
                OpAccess::ReadWrite | OpAccess::ReadCondWrite => {
                    s.src |= 1 << bit;
                    s.dst |= 1 << bit;
                }
                _ => {}
            }
        }
        for m in info.used_memory() {
            match m.access() {
                OpAccess::Read | OpAccess::CondRead => s.load = true,
                OpAccess::Write | OpAccess::CondWrite => s.store = true,
                OpAccess::ReadWrite | OpAccess::ReadCondWrite => {
                    s.load = true;
                    s.store = true;
                }
                _ => {}
            }
        }
        if ins.rflags_read() != 0 {
            s.src |= 1 << FLAGS;
        }
        if ins.rflags_modified() != 0 {
            s.dst |= 1 << FLAGS;
        }
        s.latency = match ins.mnemonic() {
            Mnemonic::Imul | Mnemonic::Mul | Mnemonic::Pmullw | Mnemonic::Pmuludq => {
                self.c.mul_latency
            }
            Mnemonic::Div | Mnemonic::Idiv => self.c.div_latency,
            _ => 1,
        };
        s
    }

    fn memory_latency(&mut self, addr: u64, write: bool) -> u32 {
        if self.l1d.access(addr) {
            return self.c.l1_latency;
        }
        let l2 = self.l2.access(addr);
        if write {
            return 0;
        }
        if l2 {
            self.c.l2_latency
        } else {
            self.c.memory_latency
        }
    }

    /// Accounts one retired instruction (`ins` is its decoding).
    pub fn retire(&mut self, r: &Retired, ins: &Instruction) {
        self.retire_with(r, || Some(*ins));
    }

    /// [`Model::retire`], decoding the instruction (`ins`) only the first
    /// time its address retires; one that does not decode is not counted.
    pub fn retire_with(&mut self, r: &Retired, ins: impl FnOnce() -> Option<Instruction>) {
        let s = match self.statics.get(&r.ip) {
            Some(s) => *s,
            None => {
                let Some(ins) = ins() else { return };
                let s = self.analyse(&ins);
                self.statics.insert(r.ip, s);
                s
            }
        };
        // Front end: I-cache, one line at a time.
        let line = r.ip / u64::from(self.c.line_size);
        if line != self.last_line {
            self.last_line = line;
            if !self.l1i.access(r.ip) {
                let lat = if self.l2.access(r.ip) {
                    self.c.l2_latency
                } else {
                    self.c.memory_latency
                };
                self.fetch += u64::from(lat);
                self.slots = 0;
            }
        }
        // ROB: the slot of the instruction rob_size older must have retired.
        let slot = (self.count % self.rob.len() as u64) as usize;
        let rob_free = if self.count >= self.rob.len() as u64 {
            self.rob[slot]
        } else {
            0
        };
        if rob_free > self.fetch {
            self.fetch = rob_free;
            self.slots = 0;
        }
        let fetched = self.fetch;
        // Back end: dataflow.
        let mut issue = fetched;
        let mut src = s.src;
        while src != 0 {
            let b = src.trailing_zeros() as usize;
            issue = issue.max(self.ready[b]);
            src &= src - 1;
        }
        let mut complete = issue + u64::from(s.latency);
        let word = r.mem_addr >> 3;
        let entry = (word as usize) & (STORE_TABLE - 1);
        if s.load && r.mem_addr != 0 {
            let (tag, data_ready) = self.stores[entry];
            let lat = if tag == word && data_ready + 64 > issue {
                self.l1d.access(r.mem_addr);
                data_ready.max(issue) - issue + u64::from(self.c.forward_latency)
            } else {
                u64::from(self.memory_latency(r.mem_addr, false))
            };
            complete += lat;
        }
        if s.store && r.mem_addr != 0 {
            if !s.load {
                self.memory_latency(r.mem_addr, true);
            }
            self.stores[entry] = (word, complete);
        }
        let mut dst = s.dst;
        while dst != 0 {
            let b = dst.trailing_zeros() as usize;
            self.ready[b] = complete;
            dst &= dst - 1;
        }
        // In-order retirement, retire_width per cycle.
        let mut t = complete.max(self.retire);
        if t == self.retire {
            if self.retired_in_cycle == self.c.retire_width {
                t += 1;
                self.retired_in_cycle = 0;
            }
        } else {
            self.retired_in_cycle = 0;
        }
        self.retired_in_cycle += 1;
        self.retire = t;
        self.rob[slot] = t;
        self.count += 1;
        // Control flow.
        self.slots += 1;
        let k = kind_index(r.kind);
        self.kinds[k].executed += 1;
        self.kinds[k].taken += u64::from(r.taken);
        let next = r.ip + u64::from(r.len);
        let mut end_block = false;
        let mut mispredict = false;
        let mut redirect = false;
        match r.kind {
            BranchKind::None => {}
            BranchKind::Conditional => {
                let pred = self.predictor.predict_and_update(r.ip, r.taken);
                if pred != r.taken {
                    mispredict = true;
                } else if r.taken {
                    // Predicted taken: the BTB supplies the target at fetch,
                    // or decode computes it (direct jcc).
                    if self.btb_hit(r.ip, r.target) {
                        end_block = true;
                    } else {
                        redirect = true;
                    }
                }
                if r.taken {
                    self.btb.insert(r.ip, r.target);
                }
            }
            BranchKind::DirectJump | BranchKind::DirectCall => {
                if self.btb_hit(r.ip, r.target) {
                    end_block = true;
                } else {
                    redirect = true;
                    self.btb.insert(r.ip, r.target);
                }
                if r.kind == BranchKind::DirectCall {
                    self.ras.push(next);
                }
            }
            BranchKind::IndirectJump | BranchKind::IndirectCall => {
                if self.btb_hit(r.ip, r.target) {
                    end_block = true;
                } else {
                    // The perfect predictor knows the target anyway.
                    if self.predictor.is_perfect() {
                        end_block = true;
                    } else {
                        mispredict = true;
                    }
                    self.btb.insert(r.ip, r.target);
                }
                if r.kind == BranchKind::IndirectCall {
                    self.ras.push(next);
                }
            }
            BranchKind::Return => {
                if self.ras.pop() == Some(r.target) || self.predictor.is_perfect() {
                    end_block = true;
                } else {
                    mispredict = true;
                }
            }
            BranchKind::Other => redirect = r.taken,
        }
        if mispredict {
            self.kinds[k].mispredicted += 1;
            self.fetch = self.fetch.max(complete) + u64::from(self.c.mispredict_penalty);
            self.slots = 0;
        } else if redirect {
            self.kinds[k].redirects += 1;
            self.fetch = fetched + u64::from(self.c.decode_redirect_penalty);
            self.slots = 0;
        } else if end_block || self.slots >= self.c.fetch_width {
            self.fetch += 1;
            self.slots = 0;
        }
        if r.kind != BranchKind::None && r.taken {
            self.last_line = u64::MAX;
        }
    }

    /// Looks the transfer at `ip` up in the BTB: a hit has the right target.
    fn btb_hit(&mut self, ip: u64, target: u64) -> bool {
        self.btb_lookups += 1;
        let hit = self.btb.lookup(ip) == Some(target);
        self.btb_misses += u64::from(!hit);
        hit
    }

    pub fn report(&self) -> Report {
        Report {
            predictor: self.c.predictor.name(),
            instructions: self.count,
            cycles: self.retire + 1,
            kinds: KIND_NAMES.iter().copied().zip(self.kinds).skip(1).collect(),
            l1i: (self.l1i.accesses, self.l1i.misses),
            l1d: (self.l1d.accesses, self.l1d.misses),
            l2: (self.l2.accesses, self.l2.misses),
            btb: (self.btb_lookups, self.btb_misses),
            smc_flushes: self.smc_flushes,
        }
    }
}

/// Dependence-tracking slot of a register, if tracked.
fn resource(r: Register) -> Option<usize> {
    if r.is_gpr() {
        Some(r.full_register().number())
    } else if r.is_xmm() {
        Some(16 + r.number())
    } else {
        None
    }
}

/// Runs a loaded process to exit under the timing model.
pub fn run(
    process: &mut crate::emu::syscall::Process,
    config: &Config,
    limit: u64,
) -> Result<(i32, Report), crate::emu::syscall::RunError> {
    let mut model = Model::new(config);
    let mut code_writes = process.machine.code_writes;
    let status = process.run_with(limit, |m| {
        model.retire_with(&m.retired, || m.decoded(m.retired.ip));
        if m.code_writes != code_writes {
            code_writes = m.code_writes;
            model.code_written(m.last_code_write.0, m.last_code_write.1);
        }
    })?;
    Ok((status, model.report()))
}

#[cfg(test)]
mod tests;
