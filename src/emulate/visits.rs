//! How many times the emulated path has been at each address in the
//! current segment: the checkpoint's breakpoint fires at every execution
//! of its address, so the hit that means "here is the predicted state" is
//! the visit count plus one.
//!
//! A fixed open-addressing table with generation tags (reset is O(1)).
//! Async-signal-safe.

/// Slots of the table: a power of two, at least twice the instruction
/// budget of a segment, so a probe always ends at a free slot.
pub const VISIT_SLOTS: usize = 8192;

#[derive(Clone, Copy, Default)]
struct Slot {
    addr: u64,
    generation: u32,
    count: u32,
}

pub struct Visits {
    slots: [Slot; VISIT_SLOTS],
    generation: u32,
    distinct: usize,
}

impl Visits {
    /// An empty table on the heap (128 KiB).
    pub fn new() -> Box<Visits> {
        Box::new(Visits {
            slots: [Slot::default(); VISIT_SLOTS],
            generation: 1,
            distinct: 0,
        })
    }

    pub fn reset(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.slots = [Slot::default(); VISIT_SLOTS];
            self.generation = 1;
        }
        self.distinct = 0;
    }

    fn position(&self, addr: u64) -> usize {
        let mut i = (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48) as usize & (VISIT_SLOTS - 1);
        loop {
            let s = &self.slots[i];
            if s.generation != self.generation || s.addr == addr {
                return i;
            }
            i = (i + 1) & (VISIT_SLOTS - 1);
        }
    }

    /// Counts a visit to `addr`; returns the visits before this one, or
    /// `None` when the table is half full (the caller ends the segment).
    pub fn visit(&mut self, addr: u64) -> Option<u32> {
        let i = self.position(addr);
        let generation = self.generation;
        let s = &mut self.slots[i];
        if s.generation != generation {
            if self.distinct >= VISIT_SLOTS / 2 {
                return None;
            }
            self.distinct += 1;
            *s = Slot {
                addr,
                generation,
                count: 0,
            };
        }
        s.count += 1;
        Some(s.count - 1)
    }

    /// Visits to `addr` so far.
    pub fn count(&self, addr: u64) -> u32 {
        let s = &self.slots[self.position(addr)];
        if s.generation == self.generation {
            s.count
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_visits_per_address_and_resets() {
        let mut v = Visits::new();
        assert_eq!(v.visit(0x1000), Some(0));
        assert_eq!(v.visit(0x1004), Some(0));
        assert_eq!(v.visit(0x1000), Some(1));
        assert_eq!(v.count(0x1000), 2);
        assert_eq!(v.count(0x2000), 0);
        v.reset();
        assert_eq!(v.count(0x1000), 0);
        assert_eq!(v.visit(0x1000), Some(0));
    }

    #[test]
    fn a_half_full_table_refuses_new_addresses() {
        let mut v = Visits::new();
        for i in 0..(VISIT_SLOTS / 2) as u64 {
            assert!(v.visit(0x40_0000 + i).is_some());
        }
        assert_eq!(v.visit(0x90_0000), None);
        // Known addresses still count.
        assert_eq!(v.visit(0x40_0000), Some(1));
    }
}
