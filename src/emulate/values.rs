//! The loads a pass executed, with their values (`values`): what value
//! profiles are made of.
//!
//! A load is a step that made exactly one memory read, no store, and has
//! an explicit memory operand (`mov`, `movzx`, `cmp reg, [m]`, `add reg,
//! [m]`, `jmp [m]` …). Left out, as brr's exact profiles leave them out
//! (`brr::loadvalues`): the stack's implicit reads (pop, ret, leave),
//! string instructions, and read-modify-write instructions (they store).
//! Loads wider than 8 bytes read in several parts and are left out too:
//! the value is that of a load of 1 to 8 bytes, zero-extended.
//!
//! Each load is logged with the step it ran at. A pass starts the log
//! afresh (every pass starts from the segment's state), and a segment
//! keeps the loads of its first `steps` steps ([`ValueLog::upto`]): a
//! pass that went on past the segment's checkpoint (the search for a
//! fresh address, a pass redone to end earlier) logged loads that are not
//! the segment's. The trace layer copies them to the trace buffer only
//! once the segment is validated.

use crate::buffer::LoadValue;

/// Loads one pass can log: a pass runs at most this many steps, and a
/// step logs at most one load.
pub const CAPACITY: usize = super::MAX_TAIL_STEPS as usize;

pub struct ValueLog {
    loads: Box<[LoadValue]>,
    /// The step each load ran at, ascending.
    steps: Box<[u32]>,
    len: usize,
    /// Loads are logged (the session's `values`).
    pub on: bool,
}

impl Default for ValueLog {
    fn default() -> ValueLog {
        ValueLog::new()
    }
}

impl ValueLog {
    /// An empty log, off. Its pages come zeroed from the allocator and are
    /// not touched until loads are logged, so without `values` it costs
    /// no resident memory.
    pub fn new() -> ValueLog {
        ValueLog {
            loads: bytemuck::zeroed_slice_box(CAPACITY),
            steps: bytemuck::zeroed_slice_box(CAPACITY),
            len: 0,
            on: false,
        }
    }

    /// A pass begins.
    #[inline]
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Logs the load at `pc` that read `value`, at step `step`.
    #[inline]
    pub fn push(&mut self, step: u32, pc: u64, value: u64) {
        // Cannot be full: a pass runs at most CAPACITY steps.
        if let (Some(l), Some(s)) = (self.loads.get_mut(self.len), self.steps.get_mut(self.len)) {
            *l = LoadValue { pc, value };
            *s = step;
            self.len += 1;
        }
    }

    /// The loads of the pass's first `steps` steps.
    pub fn upto(&self, steps: u32) -> &[LoadValue] {
        let n = self.steps[..self.len].partition_point(|&s| s < steps);
        &self.loads[..n]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_keeps_the_loads_of_its_steps_only() {
        let mut log = ValueLog::new();
        for (step, pc) in [(0, 0x10), (3, 0x20), (3, 0x21), (9, 0x30)] {
            log.push(step, pc, pc * 2);
        }
        let pcs = |s: &[LoadValue]| s.iter().map(|l| l.pc).collect::<Vec<_>>();
        assert_eq!(pcs(log.upto(3)), [0x10]);
        assert_eq!(pcs(log.upto(4)), [0x10, 0x20, 0x21]);
        assert_eq!(pcs(log.upto(100)), [0x10, 0x20, 0x21, 0x30]);
        assert_eq!(log.upto(100)[3].value, 0x60);
        log.clear();
        assert!(log.upto(100).is_empty());
    }
}
