//! Exact per-load value profiles: for every static load instruction, how
//! often it executed and how often it produced each value.
//!
//! Off by default: nothing here is on the emulator's path unless a caller
//! runs a process through [`run`] (or feeds [`LoadStream::observe`] from its
//! own `run_with` observer). `Process::run`, the timing model and
//! `brr-run` do not know this module exists.
//!
//! What is a load: an instruction whose only memory operand is read and not
//! written (`mov`, `movzx`, `cmp reg, [m]`, `add reg, [m]`, SSE loads …),
//! excluding the stack's implicit accesses (`pop`, `ret`, `leave`) and the
//! string instructions. Read-modify-write instructions (`add [m], reg`) are
//! stores as well and are left out. The value is the bytes read: loads of
//! up to 8 bytes give their zero-extended value; wider ones (vector loads)
//! an FNV-1a hash of their bytes, so two values are "equal" when their bytes
//! are. Classification happens once per pc, on its first execution; code
//! written by the guest after that is not reclassified (the workloads here
//! do not modify their code).
//!
//! What is exact: each load's execution count, and the count of every value
//! among the first [`VALUE_CAPACITY`] distinct values it produced. Values
//! seen once the table is full are counted together in `other`. The top-1
//! count is therefore exact whenever it is at least `other` (no value left
//! out of the table can have occurred more often); [`Histogram::exact_top`]
//! says whether it is, and [`Histogram::invariance_bounds`] gives the range
//! the true top-1 invariance lies in either way.

use crate::emu::syscall::{Process, RunError};
use crate::emu::Machine;
use iced_x86::{InstructionInfoFactory, Mnemonic, OpAccess};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Distinct values counted exactly per load; later new values go to
/// `Histogram::other` (the stated overflow policy: counted, not lost).
pub const VALUE_CAPACITY: usize = 1024;

/// A multiplicative hasher for u64 keys (pcs and values): SipHash would
/// dominate the cost of profiling every load.
#[derive(Default, Clone, Copy)]
pub struct U64Hasher(u64);

impl Hasher for U64Hasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        // The high bits of a product mix every input bit; hashbrown uses
        // the top 7 bits as tags and the low bits as the bucket.
        let x = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = x ^ (x >> 29);
    }
}

/// A `HashMap` keyed by u64 with [`U64Hasher`].
pub type U64Map<V> = HashMap<u64, V, BuildHasherDefault<U64Hasher>>;

/// One executed load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    /// Dense index of the static load, in order of first execution.
    pub id: u32,
    pub pc: u64,
    /// The value read (see the module doc for loads wider than 8 bytes).
    pub value: u64,
}

/// What the pc of a memory-reading instruction is.
#[derive(Clone, Copy)]
enum Class {
    NotALoad,
    /// Load `id` reading `size` bytes.
    Load {
        id: u32,
        size: u16,
    },
}

/// Turns the retired-instruction stream into the stream of executed loads.
pub struct LoadStream {
    classes: U64Map<Class>,
    /// pc of each load id.
    pub pcs: Vec<u64>,
    /// Bytes read by each load id.
    pub sizes: Vec<u16>,
    /// Executed loads whose bytes could not be read back (none expected:
    /// the step just read them); counted, not profiled.
    pub unreadable: u64,
    info: InstructionInfoFactory,
}

impl Default for LoadStream {
    fn default() -> Self {
        LoadStream::new()
    }
}

impl LoadStream {
    pub fn new() -> LoadStream {
        LoadStream {
            classes: U64Map::default(),
            pcs: Vec::new(),
            sizes: Vec::new(),
            unreadable: 0,
            info: InstructionInfoFactory::new(),
        }
    }

    /// The load the machine just retired, if it retired one.
    #[inline]
    pub fn observe(&mut self, m: &Machine) -> Option<Load> {
        let r = &m.retired;
        if r.mem_addr == 0 || r.mem_write {
            return None;
        }
        let class = match self.classes.get(&r.ip) {
            Some(c) => *c,
            None => self.classify(m),
        };
        let Class::Load { id, size } = class else {
            return None;
        };
        let mut buf = [0u8; 64];
        let n = usize::from(size).min(buf.len());
        if !m.guest.mem.peek_data(r.mem_addr, &mut buf[..n]) {
            self.unreadable += 1;
            return None;
        }
        let value = if n <= 8 {
            let mut w = [0u8; 8];
            w[..n].copy_from_slice(&buf[..n]);
            u64::from_le_bytes(w)
        } else {
            buf[..n].iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            })
        };
        Some(Load {
            id,
            pc: r.ip,
            value,
        })
    }

    #[cold]
    fn classify(&mut self, m: &Machine) -> Class {
        let ip = m.retired.ip;
        let class = match m.decoded(ip) {
            Some(ins) => self.load_size(&ins).map_or(Class::NotALoad, |size| {
                let id = self.pcs.len() as u32;
                self.pcs.push(ip);
                self.sizes.push(size);
                Class::Load { id, size }
            }),
            None => Class::NotALoad,
        };
        self.classes.insert(ip, class);
        class
    }

    /// Bytes read, when `ins` is a load in the module's sense.
    fn load_size(&mut self, ins: &iced_x86::Instruction) -> Option<u16> {
        if ins.stack_pointer_increment() != 0
            || ins.is_string_instruction()
            || ins.mnemonic() == Mnemonic::Lea
        {
            return None;
        }
        let info = self.info.info(ins);
        let mut mems = info.used_memory().iter();
        let m = mems.next()?;
        if mems.next().is_some() || !matches!(m.access(), OpAccess::Read | OpAccess::CondRead) {
            return None;
        }
        let size = m.memory_size().size();
        (size > 0).then_some(size as u16)
    }
}

/// The values one load produced.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    /// Executions.
    pub total: u64,
    /// Exact counts of the first [`VALUE_CAPACITY`] distinct values.
    pub counts: U64Map<u64>,
    /// Executions whose value arrived after the table was full.
    pub other: u64,
}

impl Histogram {
    #[inline]
    pub fn record(&mut self, value: u64) {
        self.total += 1;
        if let Some(c) = self.counts.get_mut(&value) {
            *c += 1;
        } else if self.counts.len() < VALUE_CAPACITY {
            self.counts.insert(value, 1);
        } else {
            self.other += 1;
        }
    }

    /// The `n` most frequent values in the table, most frequent first (ties
    /// by value, so the order is deterministic).
    pub fn top(&self, n: usize) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self.counts.iter().map(|(&k, &c)| (k, c)).collect();
        v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v.truncate(n);
        v
    }

    /// Whether the top-1 count is the true top-1 count (see the module doc).
    pub fn exact_top(&self) -> bool {
        self.top(1).first().map_or(0, |t| t.1) >= self.other
    }

    /// Top-N invariance from the table: the fraction of executions that
    /// produced one of the N most frequent values.
    pub fn invariance(&self, n: usize) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        self.top(n).iter().map(|t| t.1).sum::<u64>() as f64 / self.total as f64
    }

    /// The interval the true top-1 invariance lies in: one point when the
    /// table is exact, else [top, max(top, other)] / total.
    pub fn invariance_bounds(&self) -> (f64, f64) {
        let top = self.top(1).first().map_or(0, |t| t.1);
        let t = self.total.max(1) as f64;
        (top as f64 / t, top.max(self.other) as f64 / t)
    }
}

/// Exact value profile of every load of a run, indexed by load id.
#[derive(Clone, Debug, Default)]
pub struct ValueProfile {
    pub pcs: Vec<u64>,
    pub loads: Vec<Histogram>,
}

impl ValueProfile {
    #[inline]
    pub fn record(&mut self, l: &Load) {
        let i = l.id as usize;
        if i >= self.loads.len() {
            self.loads.resize_with(i + 1, Histogram::default);
            self.pcs.resize(i + 1, 0);
        }
        self.pcs[i] = l.pc;
        self.loads[i].record(l.value);
    }

    /// Executed loads in all.
    pub fn executions(&self) -> u64 {
        self.loads.iter().map(|h| h.total).sum()
    }

    /// The histogram of the load at `pc`.
    pub fn at(&self, pc: u64) -> Option<&Histogram> {
        self.pcs
            .iter()
            .position(|&p| p == pc)
            .map(|i| &self.loads[i])
    }
}

/// Runs `process` to exit (or `limit` instructions), calling `each` with
/// the machine after every retired instruction and the load it retired, if
/// any. The caller's observer sees the same stream `Process::run_with`
/// gives, so a timing model can be fed in the same pass.
pub fn run_with(
    process: &mut Process,
    limit: u64,
    mut each: impl FnMut(&Machine, Option<Load>),
) -> Result<(i32, LoadStream), RunError> {
    let mut stream = LoadStream::new();
    let status = process.run_with(limit, |m| {
        let load = stream.observe(m);
        each(m, load);
    })?;
    Ok((status, stream))
}

/// Runs `process` to exit and returns its exit status and exact value
/// profile.
pub fn run(process: &mut Process, limit: u64) -> Result<(i32, ValueProfile), RunError> {
    let mut profile = ValueProfile::default();
    let (status, _) = run_with(process, limit, |_, load| {
        if let Some(l) = load {
            profile.record(&l);
        }
    })?;
    Ok((status, profile))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_counts_exactly_then_overflows_into_other() {
        let mut h = Histogram::default();
        for v in 0..VALUE_CAPACITY as u64 {
            h.record(v);
        }
        for _ in 0..5 {
            h.record(7);
        }
        h.record(1_000_000);
        h.record(1_000_001);
        assert_eq!(h.total, VALUE_CAPACITY as u64 + 7);
        assert_eq!(h.other, 2);
        assert_eq!(h.top(1), vec![(7, 6)]);
        assert!(h.exact_top());
        let (lo, hi) = h.invariance_bounds();
        assert_eq!(lo, hi);
        assert!((h.invariance(1) - 6.0 / h.total as f64).abs() < 1e-12);
        assert!(h.invariance(2) > h.invariance(1));
    }

    #[test]
    fn a_large_other_makes_the_top_inexact() {
        let mut h = Histogram::default();
        for v in 0..(VALUE_CAPACITY as u64 + 10) {
            h.record(v);
        }
        assert!(!h.exact_top(), "10 values in other vs a top count of 1");
        let (lo, hi) = h.invariance_bounds();
        assert!(lo < hi);
    }
}
