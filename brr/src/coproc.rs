//! A profiling co-processor for value profiles, after Zilles and Sohi ("A
//! Programmable Co-processor for Profiling", HPCA 2001), and the
//! interrupt-sampling baseline it is compared with. Both are host-side
//! models fed by the emulator's load stream (`crate::loadvalues`); neither
//! changes what the guest computes. What they cost the main CPU is the
//! interrupts they raise, counted here and priced by the caller.
//!
//! The co-processor, as modelled:
//! - A filter at decode tags the loads the co-processor watches: a load is
//!   tagged when its pc is not masked as already measured and falls in the
//!   current pc class (see "splitting" below).
//! - Slots of (load, active value, hit count, total count). A tagged load
//!   whose pc holds a slot updates it. One that holds none takes a free
//!   slot, or else one random slot, and only if a random draw in
//!   0..=that slot's total count comes out 0: a slot that has seen many
//!   executions is rarely displaced (the paper's replacement rule).
//! - A slot's first [`WARMUP`] samples choose its active value: a sample
//!   with another value takes over with probability 1/(hits + 1), the same
//!   draw against a count, which settles on a frequent value. Then the
//!   counts restart and the slot counts [`Config::maturity`] samples against
//!   that fixed value; hits / total is its estimate of the load's top-1
//!   invariance, unbiased for the value it chose.
//! - It interrupts the main CPU when half its slots are mature (a harvest),
//!   when [`Config::thrash_evictions`] evictions per slot have happened since
//!   the last interrupt (its slots thrash: too many loads compete), and
//!   when [`Config::timeout_loads`] loads have executed since the last one
//!   or [`Config::idle_loads`] since a slot last counted (the class in the
//!   filter yields nothing more).
//! - The handler copies every slot out, records the mature ones, and masks
//!   their pcs in the filter. On thrashing it splits the program: the pc
//!   filter passes half of the current class (one more bit of a hash of
//!   the pc must match). On a timeout it moves on to the next class
//!   depth-first through the tree of splits (`next_class`), so every load
//!   is eventually offered again.
//!
//! What the paper leaves to the implementation and is chosen here: the pc
//! classes are hash classes rather than address ranges (so one hot
//! function's loads spread over the halves), the warm-up length and the
//! maturity, and the limits above. The co-processor is assumed to keep up
//! with every tagged load (no dropped samples for bandwidth).

use crate::loadvalues::{Load, U64Map};

/// Samples in which a slot chooses its active value.
pub const WARMUP: u32 = 16;
/// Deepest split: 2^MAX_LEVEL pc classes.
pub const MAX_LEVEL: u32 = 10;
/// At the end of the run the handler also records slots that counted at
/// least this many samples (not yet mature).
pub const MIN_FINAL: u32 = 32;

/// The co-processor's parameters.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub slots: usize,
    /// Counted samples that complete a slot's measurement.
    pub maturity: u32,
    /// Evictions per slot since the last interrupt that count as thrashing.
    pub thrash_evictions: u32,
    /// Executed loads without an interrupt after which the class moves on.
    pub timeout_loads: u64,
    /// Executed loads without a tagged one after which the class moves on
    /// (everything in it is measured or cold).
    pub idle_loads: u64,
    pub seed: u64,
}

impl Config {
    /// The parameters the experiment uses for `slots` slots.
    pub fn new(slots: usize, seed: u64) -> Config {
        Config {
            slots,
            maturity: 256,
            thrash_evictions: 4,
            timeout_loads: 1 << 22,
            idle_loads: 1 << 13,
            seed,
        }
    }
}

/// What the handler read out of a mature slot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measurement {
    pub value: u64,
    pub hits: u32,
    pub total: u32,
    /// Executed loads the co-processor had seen when the handler copied it
    /// out (when in the run the measurement became available).
    pub at: u64,
}

impl Measurement {
    pub fn invariance(&self) -> f64 {
        f64::from(self.hits) / f64::from(self.total.max(1))
    }
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    /// Load id; `EMPTY` when free.
    id: u32,
    pc: u64,
    value: u64,
    hits: u32,
    total: u32,
    counting: bool,
}

const EMPTY: u32 = u32::MAX;
const FREE: Slot = Slot {
    id: EMPTY,
    pc: 0,
    value: 0,
    hits: 0,
    total: 0,
    counting: false,
};

/// Why the co-processor interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Harvest,
    Thrash,
    Timeout,
    End,
}

/// Interrupts by reason and what they copied.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub harvest: u64,
    pub thrash: u64,
    pub timeout: u64,
    /// Slots copied out by all interrupts (the final one included).
    pub slots_copied: u64,
    pub evictions: u64,
    /// Tagged loads that found no slot (the draw lost).
    pub refused: u64,
    pub tagged: u64,
}

impl Counters {
    /// Interrupts in all, the one at the end of the run included.
    pub fn interrupts(&self) -> u64 {
        self.harvest + self.thrash + self.timeout + 1
    }
}

/// The co-processor model.
pub struct Coprocessor {
    cfg: Config,
    slots: Vec<Slot>,
    mature: usize,
    /// Masked load ids (measured).
    known: Vec<bool>,
    level: u32,
    class: u64,
    rng: u64,
    evictions_since: u64,
    loads_since: u64,
    idle_since: u64,
    /// Executed loads seen.
    pub loads: u64,
    pub counters: Counters,
    /// The measurement of each load id, when one was made.
    pub measured: U64Map<Measurement>,
}

impl Coprocessor {
    pub fn new(cfg: Config) -> Coprocessor {
        assert!(cfg.slots > 0 && cfg.maturity > 0);
        Coprocessor {
            cfg,
            slots: vec![FREE; cfg.slots],
            mature: 0,
            known: Vec::new(),
            level: 0,
            class: 0,
            rng: cfg.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            evictions_since: 0,
            loads_since: 0,
            idle_since: 0,
            loads: 0,
            counters: Counters::default(),
            measured: U64Map::default(),
        }
    }

    /// xorshift64*: the model's random draws (deterministic per seed).
    fn draw(&mut self, bound: u64) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        ((u128::from(x >> 32) * u128::from(bound)) >> 32) as u64
    }

    fn in_class(&self, pc: u64) -> bool {
        let h = pc.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
        h & ((1u64 << self.level) - 1) == self.class
    }

    /// One executed load.
    #[inline]
    pub fn observe(&mut self, l: &Load) {
        self.loads += 1;
        self.loads_since += 1;
        self.idle_since += 1;
        let id = l.id as usize;
        if self.known.get(id).copied().unwrap_or(false) || !self.in_class(l.pc) {
            self.check_timeout();
            return;
        }
        self.counters.tagged += 1;
        if let Some(i) = self.slots.iter().position(|s| s.id == l.id) {
            self.update(i, l.value);
        } else {
            self.admit(l);
        }
        if self.mature * 2 >= self.slots.len() {
            self.interrupt(Reason::Harvest);
        } else if self.evictions_since
            >= u64::from(self.cfg.thrash_evictions) * self.slots.len() as u64
        {
            self.interrupt(Reason::Thrash);
        } else {
            self.check_timeout();
        }
    }

    /// A timeout interrupts only when the handler has something to do:
    /// mature slots to copy out, or a split class to move on from. At the
    /// root class with nothing mature a new load is tagged without help,
    /// so the counters restart silently.
    fn check_timeout(&mut self) {
        if self.loads_since >= self.cfg.timeout_loads || self.idle_since >= self.cfg.idle_loads {
            if self.level > 0 || self.mature > 0 {
                self.interrupt(Reason::Timeout);
            } else {
                self.loads_since = 0;
                self.idle_since = 0;
            }
        }
    }

    fn update(&mut self, i: usize, value: u64) {
        let maturity = self.cfg.maturity;
        let s = self.slots[i];
        if s.counting && s.total >= maturity {
            return; // mature: frozen until the handler copies it out
        }
        // Idle means no slot counting: a frozen slot does not count.
        self.idle_since = 0;
        let mut s = s;
        s.total += 1;
        if value == s.value {
            s.hits += 1;
        } else if !s.counting && self.draw(u64::from(s.hits) + 1) == 0 {
            s.value = value;
            s.hits = 1;
        }
        if !s.counting && s.total >= WARMUP {
            s.counting = true;
            s.hits = 0;
            s.total = 0;
        } else if s.counting && s.total >= maturity {
            self.mature += 1;
        }
        self.slots[i] = s;
    }

    fn admit(&mut self, l: &Load) {
        let fresh = Slot {
            id: l.id,
            pc: l.pc,
            value: l.value,
            hits: 1,
            total: 1,
            counting: false,
        };
        if let Some(i) = self.slots.iter().position(|s| s.id == EMPTY) {
            self.idle_since = 0;
            self.slots[i] = fresh;
            return;
        }
        let j = self.draw(self.slots.len() as u64) as usize;
        let victim = self.slots[j];
        let mature = victim.counting && victim.total >= self.cfg.maturity;
        let weight = u64::from(victim.total)
            + if victim.counting {
                u64::from(WARMUP)
            } else {
                0
            };
        if !mature && self.draw(weight + 1) == 0 {
            self.slots[j] = fresh;
            self.evictions_since += 1;
            self.counters.evictions += 1;
        } else {
            self.counters.refused += 1;
        }
    }

    /// The handler: copies the slots out, records and masks the mature
    /// ones, and adjusts the pc filter for `why`.
    fn interrupt(&mut self, why: Reason) {
        match why {
            Reason::Harvest => self.counters.harvest += 1,
            Reason::Thrash => self.counters.thrash += 1,
            Reason::Timeout => self.counters.timeout += 1,
            Reason::End => {}
        }
        self.counters.slots_copied += self.slots.len() as u64;
        let need = if why == Reason::End {
            MIN_FINAL
        } else {
            self.cfg.maturity
        };
        for i in 0..self.slots.len() {
            let s = self.slots[i];
            if s.id != EMPTY && s.counting && s.total >= need {
                self.measured.insert(
                    u64::from(s.id),
                    Measurement {
                        value: s.value,
                        hits: s.hits,
                        total: s.total,
                        at: self.loads,
                    },
                );
                let id = s.id as usize;
                if id >= self.known.len() {
                    self.known.resize(id + 1, false);
                }
                self.known[id] = true;
                self.slots[i] = FREE;
            }
        }
        self.mature = 0;
        match why {
            Reason::Thrash if self.level < MAX_LEVEL => {
                // Keep the lower half of the class: the same low bits,
                // one more bit that must be 0.
                self.level += 1;
            }
            Reason::Timeout => self.next_class(),
            _ => {}
        }
        // Slots of loads the filter no longer passes are freed.
        for i in 0..self.slots.len() {
            if self.slots[i].id != EMPTY && !self.in_class(self.slots[i].pc) {
                self.slots[i] = FREE;
            }
        }
        self.evictions_since = 0;
        self.loads_since = 0;
        self.idle_since = 0;
    }

    /// The class is exhausted: moves on depth-first through the tree of
    /// splits. Class `r` at level `k` (the pc hash's low k bits equal r)
    /// has the children (k+1, r) and (k+1, r + 2^k); a split descends to
    /// the first. An exhausted first child is followed by its sibling; an
    /// exhausted second child means the parent is exhausted too, so the
    /// walk climbs and continues with the parent's sibling. After the
    /// whole tree it starts again from the root, where only loads not yet
    /// measured remain tagged.
    fn next_class(&mut self) {
        while self.level > 0 && self.class & (1 << (self.level - 1)) != 0 {
            self.level -= 1;
            self.class &= !(1 << self.level);
        }
        if self.level > 0 {
            self.class |= 1 << (self.level - 1);
        }
    }

    /// Ends the run: one last interrupt records what the slots hold.
    pub fn finish(&mut self) {
        self.interrupt(Reason::End);
    }

    /// pc class depth the filter ended at.
    pub fn level(&self) -> u32 {
        self.level
    }
}

/// The baseline: every `interval`-th executed load interrupts the CPU,
/// whose handler records the load's pc and value.
pub struct Sampler {
    pub interval: u64,
    countdown: u64,
    pub interrupts: u64,
    /// Sampled values per load id.
    pub samples: U64Map<U64Map<u32>>,
}

impl Sampler {
    pub fn new(interval: u64) -> Sampler {
        assert!(interval > 0);
        Sampler {
            interval,
            countdown: interval,
            interrupts: 0,
            samples: U64Map::default(),
        }
    }

    #[inline]
    pub fn observe(&mut self, l: &Load) {
        self.countdown -= 1;
        if self.countdown == 0 {
            self.countdown = self.interval;
            self.interrupts += 1;
            *self
                .samples
                .entry(u64::from(l.id))
                .or_default()
                .entry(l.value)
                .or_insert(0) += 1;
        }
    }

    /// (top-1 sampled count / samples, samples) of load `id`, if sampled.
    pub fn estimate(&self, id: u32) -> Option<(f64, u64)> {
        let h = self.samples.get(&u64::from(id))?;
        let n: u64 = h.values().map(|&c| u64::from(c)).sum();
        let top = h.values().copied().max().unwrap_or(0);
        Some((f64::from(top) / n.max(1) as f64, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(id: u32, value: u64) -> Load {
        Load {
            id,
            pc: 0x401000 + 16 * u64::from(id),
            value,
        }
    }

    #[test]
    fn an_invariant_load_is_measured_and_masked() {
        let mut c = Coprocessor::new(Config::new(2, 1));
        for i in 0..2000u64 {
            c.observe(&load(0, 5));
            c.observe(&load(1, i % 4)); // invariance 0.25
        }
        c.finish();
        let m0 = c.measured[&0];
        assert_eq!((m0.value, m0.invariance()), (5, 1.0));
        let m1 = c.measured[&1];
        assert!((m1.invariance() - 0.25).abs() < 0.02, "{m1:?}");
        assert!(c.counters.harvest >= 1);
        // Both masked once measured: later executions are not tagged.
        let tagged = c.counters.tagged;
        c.observe(&load(0, 5));
        assert_eq!(c.counters.tagged, tagged);
    }

    #[test]
    fn many_competing_loads_thrash_and_split_the_filter() {
        let mut c = Coprocessor::new(Config::new(4, 7));
        for i in 0..3_000_000u32 {
            c.observe(&load(i % 256, 3));
        }
        c.finish();
        assert!(c.counters.thrash > 0, "{:?}", c.counters);
        assert!(c.measured.len() > 100, "{} measured", c.measured.len());
        assert!(c.measured.values().all(|m| m.invariance() == 1.0));
    }

    #[test]
    fn exhausted_classes_are_left_depth_first() {
        let mut c = Coprocessor::new(Config::new(4, 1));
        let mut walk = Vec::new();
        // Split twice: (2, 0). Then exhaust classes in turn.
        c.level = 2;
        for _ in 0..4 {
            c.next_class();
            walk.push((c.level, c.class));
        }
        // (2,0) → sibling (2,2) → parent (1,0) done → its sibling (1,1)
        // → the root's children are done → root (0,0).
        assert_eq!(walk, vec![(2, 2), (1, 1), (0, 0), (0, 0)]);
    }

    #[test]
    fn the_sampler_takes_every_nth_load() {
        let mut s = Sampler::new(10);
        for i in 0..1000u64 {
            s.observe(&load((i % 2) as u32, i % 20));
        }
        assert_eq!(s.interrupts, 100);
        // Every 10th load is load 1 (i = 9, 19, …) with value 9 or 19.
        assert!(s.estimate(0).is_none());
        let (inv, n) = s.estimate(1).unwrap();
        assert_eq!((inv, n), (0.5, 100));
    }
}
