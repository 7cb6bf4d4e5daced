//! Worker side: traces → distinct traces with repeat counts (for
//! perf.script), fall-through ranges and taken-branch counts (for AutoFDO
//! and BOLT).
//!
//! A trace is a run of consecutive taken branches e₀ … eₖ in execution
//! order. Between two of them the program ran straight-line code, so each
//! pair gives the fall-through range [eᵢ.to, eᵢ₊₁.from], inclusive of the
//! branch at its end — the range rule llvm-profgen and create_llvm_prof use.

use std::collections::HashMap as StdHashMap;

/// The worker's tables: keys are addresses from this process, so a fast
/// hasher is enough (see Cargo.toml).
pub type HashMap<K, V> = StdHashMap<K, V, ahash::RandomState>;

use crate::buffer::{BranchEntry, BufferPool, LoadValue, TraceBuffer};
use crate::unwind::DwarfUnwinder;

/// Distinct traces kept for perf.script; past it, traces still count in
/// ranges and branches, and `trace_table_full` says how many were left out
/// of perf.script.
pub const MAX_DISTINCT_TRACES: usize = 1 << 20;

/// Load instructions a session keeps value histograms for (`values`); the
/// loads of others are counted (`load_table_full`).
pub const MAX_LOAD_PCS: usize = 1 << 16;
/// Distinct values counted exactly per load instruction; later new values
/// are counted together in [`ValueHistogram::other`].
pub const VALUES_PER_LOAD: usize = 32;

/// The values one load instruction read, as recorded (`values`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValueHistogram {
    /// Executions recorded.
    pub total: u64,
    /// Executions whose value was new once `counts` was full.
    pub other: u64,
    /// The first [`VALUES_PER_LOAD`] distinct values and how often each
    /// was read.
    pub counts: Vec<(u64, u64)>,
}

impl ValueHistogram {
    pub fn record(&mut self, value: u64) {
        self.total += 1;
        if let Some(c) = self.counts.iter_mut().find(|(v, _)| *v == value) {
            c.1 += 1;
        } else if self.counts.len() < VALUES_PER_LOAD {
            self.counts.push((value, 1));
        } else {
            self.other += 1;
        }
    }

    /// The values, most frequent first (ties by value).
    pub fn sorted(&self) -> Vec<(u64, u64)> {
        let mut v = self.counts.clone();
        v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}

/// Everything a session has gathered.
#[derive(Default)]
pub struct Aggregate {
    /// Distinct traces (oldest branch first) and how often each was seen.
    pub traces: HashMap<Box<[BranchEntry]>, u64>,
    /// Distinct traces with a call stack (`callstack`), each as one key
    /// (see [`StackedTrace`]), and how often each was seen.
    pub stacked: HashMap<Box<[u64]>, u64>,
    /// The key being looked up (reused: a repeat allocates nothing).
    scratch: Vec<u64>,
    /// (begin, end) → count.
    pub ranges: HashMap<(u64, u64), u64>,
    /// (from, to) → count.
    pub branches: HashMap<(u64, u64), u64>,
    pub traces_seen: u64,
    pub entries_seen: u64,
    /// Traces not kept for perf.script because the table was full.
    pub traces_not_kept: u64,
    pub entries_not_kept: u64,
    /// Load instruction → the values it read (`values`).
    pub loads: HashMap<u64, ValueHistogram>,
    /// Loads not kept because `loads` had [`MAX_LOAD_PCS`] instructions.
    pub loads_not_kept: u64,
}

/// A trace with its call stack, as the key of [`Aggregate::stacked`]:
/// the number of frames, the frames (leaf first), then each branch's from
/// and to (oldest first).
pub struct StackedTrace<'a> {
    pub stack: &'a [u64],
    /// Oldest branch first.
    pub entries: Vec<BranchEntry>,
}

impl StackedTrace<'_> {
    pub fn of(key: &[u64]) -> StackedTrace<'_> {
        let depth = key[0] as usize;
        let stack = &key[1..1 + depth];
        let entries = key[1 + depth..]
            .chunks_exact(2)
            .map(|p| BranchEntry {
                from: p[0],
                to: p[1],
            })
            .collect();
        StackedTrace { stack, entries }
    }
}

impl Aggregate {
    /// Adds one trace, oldest branch first.
    pub fn add_trace(&mut self, entries: &[BranchEntry]) {
        self.add_trace_with_stack(entries, &[]);
    }

    /// Adds one trace, oldest branch first, with the call stack at its
    /// newest branch (leaf first; empty: none).
    pub fn add_trace_with_stack(&mut self, entries: &[BranchEntry], stack: &[u64]) {
        if entries.is_empty() {
            return;
        }
        self.traces_seen += 1;
        self.entries_seen += entries.len() as u64;
        for pair in entries.windows(2) {
            *self.ranges.entry((pair[0].to, pair[1].from)).or_default() += 1;
        }
        for e in entries {
            *self.branches.entry((e.from, e.to)).or_default() += 1;
        }
        if !stack.is_empty() {
            self.scratch.clear();
            self.scratch.push(stack.len() as u64);
            self.scratch.extend_from_slice(stack);
            self.scratch
                .extend(entries.iter().flat_map(|e| [e.from, e.to]));
            if let Some(count) = self.stacked.get_mut(&self.scratch[..]) {
                *count += 1;
            } else if self.distinct() < MAX_DISTINCT_TRACES {
                self.stacked.insert(self.scratch[..].into(), 1);
            } else {
                self.traces_not_kept += 1;
                self.entries_not_kept += entries.len() as u64;
            }
            return;
        }
        if let Some(count) = self.traces.get_mut(entries) {
            *count += 1;
        } else if self.distinct() < MAX_DISTINCT_TRACES {
            self.traces.insert(entries.into(), 1);
        } else {
            self.traces_not_kept += 1;
            self.entries_not_kept += entries.len() as u64;
        }
    }

    /// Adds recorded loads to their instructions' histograms.
    pub fn add_loads(&mut self, loads: &[LoadValue]) {
        for l in loads {
            if let Some(h) = self.loads.get_mut(&l.pc) {
                h.record(l.value);
            } else if self.loads.len() < MAX_LOAD_PCS {
                self.loads.entry(l.pc).or_default().record(l.value);
            } else {
                self.loads_not_kept += 1;
            }
        }
    }

    /// Adds a buffer's traces and loads; stack snapshots (`unwind=dwarf`)
    /// become call stacks of at most `depth` frames through `unwinder`.
    pub fn add_buffer(&mut self, buffer: &TraceBuffer, unwinder: &mut DwarfUnwinder, depth: usize) {
        self.add_loads(buffer.values());
        for (entries, _end, stack) in buffer.traces() {
            if stack.first() == Some(&crate::emulate::stack::SNAPSHOT) {
                let frames = unwinder.frames(stack, depth);
                self.add_trace_with_stack(entries, &frames);
            } else {
                self.add_trace_with_stack(entries, stack);
            }
        }
    }

    /// Distinct traces kept, with a stack or without.
    pub fn distinct(&self) -> usize {
        self.traces.len() + self.stacked.len()
    }

    /// Entries in the distinct-trace tables, with repeats: what perf.script
    /// will hold.
    pub fn entries_kept(&self) -> u64 {
        let plain: u64 = self.traces.iter().map(|(t, n)| t.len() as u64 * n).sum();
        let stacked: u64 = self
            .stacked
            .iter()
            .map(|(k, n)| (k.len() as u64 - 1 - k[0]) / 2 * n)
            .sum();
        plain + stacked
    }

    /// The traces with a stack and their counts.
    pub fn stacked_traces(&self) -> impl Iterator<Item = (StackedTrace<'_>, u64)> {
        self.stacked.iter().map(|(k, &n)| (StackedTrace::of(k), n))
    }
}

/// Drains full buffers into `agg` (stack snapshots unwound by `unwinder`,
/// at most `depth` frames) and hands them back to the free queue. Returns
/// how many buffers it took (the worker sleeps when none).
pub fn drain(
    pool: &BufferPool,
    agg: &mut Aggregate,
    unwinder: &mut DwarfUnwinder,
    depth: usize,
) -> usize {
    let mut n = 0;
    while let Some(mut buffer) = pool.full.pop() {
        agg.add_buffer(&buffer, unwinder, depth);
        buffer.clear();
        // The pool made this buffer, so there is room for it.
        let _ = pool.free.push(buffer);
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::TraceEnd;

    fn e(from: u64, to: u64) -> BranchEntry {
        BranchEntry { from, to }
    }

    #[test]
    fn value_histograms_count_exactly_then_overflow_into_other() {
        let mut agg = Aggregate::default();
        let load = |pc, value| LoadValue { pc, value };
        let mut loads = vec![load(0x10, 7); 5];
        loads.extend((0..VALUES_PER_LOAD as u64 + 3).map(|v| load(0x20, 100 + v)));
        loads.push(load(0x20, 100));
        agg.add_loads(&loads);
        let a = &agg.loads[&0x10];
        assert_eq!((a.total, a.other, a.sorted()), (5, 0, vec![(7, 5)]));
        let b = &agg.loads[&0x20];
        assert_eq!((b.total, b.other), (VALUES_PER_LOAD as u64 + 4, 3));
        assert_eq!(b.sorted()[0], (100, 2));
        assert_eq!(agg.loads_not_kept, 0);
    }

    #[test]
    fn ranges_join_each_target_to_the_next_source() {
        let mut agg = Aggregate::default();
        agg.add_trace(&[e(0x10, 0x40), e(0x48, 0x10), e(0x10, 0x40)]);
        agg.add_trace(&[e(0x10, 0x40), e(0x48, 0x10), e(0x10, 0x40)]);
        assert_eq!(agg.ranges[&(0x40, 0x48)], 2);
        assert_eq!(agg.ranges[&(0x10, 0x10)], 2);
        assert_eq!(agg.branches[&(0x10, 0x40)], 4);
        assert_eq!(agg.traces.len(), 1);
        assert_eq!(agg.entries_kept(), 6);
        assert_eq!((agg.traces_seen, agg.entries_seen), (2, 6));
    }

    #[test]
    fn traces_with_stacks_are_kept_apart() {
        let mut agg = Aggregate::default();
        let t = [e(0x10, 0x40), e(0x48, 0x10)];
        agg.add_trace_with_stack(&t, &[0x10, 0x99]);
        agg.add_trace_with_stack(&t, &[0x10, 0x99]);
        agg.add_trace_with_stack(&t, &[0x10, 0x98]);
        agg.add_trace(&t);
        assert_eq!(
            (agg.traces.len(), agg.stacked.len(), agg.distinct()),
            (1, 2, 3)
        );
        assert_eq!(agg.entries_kept(), 8);
        assert_eq!(agg.ranges[&(0x40, 0x48)], 4);
        let mut got: Vec<_> = agg
            .stacked_traces()
            .map(|(s, n)| (s.stack.to_vec(), s.entries, n))
            .collect();
        got.sort();
        assert_eq!(got[0], (vec![0x10, 0x98], t.to_vec(), 1));
        assert_eq!(got[1], (vec![0x10, 0x99], t.to_vec(), 2));
    }

    #[test]
    fn workers_return_buffers_to_the_pool() {
        let pool = BufferPool::new();
        pool.grow(1);
        let mut b = pool.free.pop().unwrap();
        b.open_trace();
        b.push(e(1, 2));
        b.close_trace(TraceEnd::Complete);
        pool.full.push(b).ok().unwrap();
        let mut agg = Aggregate::default();
        assert_eq!(drain(&pool, &mut agg, &mut DwarfUnwinder::default(), 0), 1);
        assert_eq!(agg.traces_seen, 1);
        assert_eq!(pool.free.len(), 1);
        assert!(pool.free.pop().unwrap().is_empty());
    }
}
