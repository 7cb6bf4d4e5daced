//! The structures of the modelled front end and memory: branch direction
//! predictors (tournament, gshare, bimodal, perfect), BTB, return-address
//! stack and set-associative LRU caches.

/// Saturating 2-bit counters; >= 2 means "taken" (or "use gshare").
pub struct Counters(Vec<u8>);

impl Counters {
    fn new(n: usize) -> Counters {
        Counters(vec![1; n])
    }
    fn get(&self, i: usize) -> bool {
        self.0[i & (self.0.len() - 1)] >= 2
    }
    fn train(&mut self, i: usize, up: bool) {
        let n = self.0.len();
        let c = &mut self.0[i & (n - 1)];
        *c = if up {
            (*c + 1).min(3)
        } else {
            c.saturating_sub(1)
        };
    }
}

/// gshare + bimodal with a per-branch chooser (McFarling's combining
/// predictor, as in the paper's simulated core).
pub struct Tournament {
    gshare: Counters,
    bimodal: Counters,
    chooser: Counters,
    history: usize,
    history_mask: usize,
}

impl Tournament {
    pub fn new(history_bits: u32, bimodal: u32, chooser: u32) -> Tournament {
        Tournament {
            gshare: Counters::new(1 << history_bits),
            bimodal: Counters::new(bimodal as usize),
            chooser: Counters::new(chooser as usize),
            history: 0,
            history_mask: (1 << history_bits) - 1,
        }
    }

    fn indices(&self, pc: u64) -> (usize, usize) {
        let p = (pc >> 2) as usize;
        (p ^ self.history, p)
    }

    pub fn predict(&self, pc: u64) -> bool {
        let (g, b) = self.indices(pc);
        if self.chooser.get(b) {
            self.gshare.get(g)
        } else {
            self.bimodal.get(b)
        }
    }

    /// Trains with the outcome and shifts it into the global history.
    pub fn update(&mut self, pc: u64, taken: bool) {
        let (g, b) = self.indices(pc);
        let (pg, pb) = (self.gshare.get(g), self.bimodal.get(b));
        if pg != pb {
            self.chooser.train(b, pg == taken);
        }
        self.gshare.train(g, taken);
        self.bimodal.train(b, taken);
        self.history = ((self.history << 1) | usize::from(taken)) & self.history_mask;
    }
}

/// gshare alone: 2-bit counters indexed by the branch address XOR the
/// global history of outcomes.
pub struct Gshare {
    counters: Counters,
    history: usize,
    history_mask: usize,
}

impl Gshare {
    pub fn new(history_bits: u32) -> Gshare {
        Gshare {
            counters: Counters::new(1 << history_bits),
            history: 0,
            history_mask: (1 << history_bits) - 1,
        }
    }
    fn index(&self, pc: u64) -> usize {
        ((pc >> 2) as usize) ^ self.history
    }
    pub fn predict(&self, pc: u64) -> bool {
        self.counters.get(self.index(pc))
    }
    pub fn update(&mut self, pc: u64, taken: bool) {
        self.counters.train(self.index(pc), taken);
        self.history = ((self.history << 1) | usize::from(taken)) & self.history_mask;
    }
}

/// The direction predictor the model uses (`predictor` in timing.conf).
pub enum Predictor {
    Tournament(Tournament),
    Gshare(Gshare),
    /// One 2-bit counter per branch address (no history).
    Bimodal(Counters),
    /// Knows every outcome: never mispredicts a direction, and (in the
    /// model) never a target of an indirect branch or a return.
    Perfect,
}

impl Predictor {
    pub fn new(kind: super::PredictorKind, c: &super::Config) -> Predictor {
        use super::PredictorKind as K;
        match kind {
            K::Tournament => Predictor::Tournament(Tournament::new(
                c.gshare_history_bits,
                c.bimodal_entries,
                c.chooser_entries,
            )),
            K::Gshare => Predictor::Gshare(Gshare::new(c.gshare_history_bits)),
            K::Bimodal => Predictor::Bimodal(Counters::new(c.bimodal_entries as usize)),
            K::Perfect => Predictor::Perfect,
        }
    }

    pub fn is_perfect(&self) -> bool {
        matches!(self, Predictor::Perfect)
    }

    /// The prediction for the branch at `pc`, then training with its
    /// outcome `taken`.
    pub fn predict_and_update(&mut self, pc: u64, taken: bool) -> bool {
        match self {
            Predictor::Tournament(t) => {
                let p = t.predict(pc);
                t.update(pc, taken);
                p
            }
            Predictor::Gshare(g) => {
                let p = g.predict(pc);
                g.update(pc, taken);
                p
            }
            Predictor::Bimodal(b) => {
                let i = (pc >> 2) as usize;
                let p = b.get(i);
                b.train(i, taken);
                p
            }
            Predictor::Perfect => taken,
        }
    }
}

/// Set-associative LRU store of tags (caches and the BTB share it).
pub struct SetAssoc {
    sets: usize,
    ways: usize,
    tags: Vec<u64>,
    values: Vec<u64>,
    stamps: Vec<u64>,
    clock: u64,
}

impl SetAssoc {
    pub fn new(entries: usize, ways: usize) -> SetAssoc {
        let sets = entries / ways;
        SetAssoc {
            sets,
            ways,
            tags: vec![u64::MAX; entries],
            values: vec![0; entries],
            stamps: vec![0; entries],
            clock: 0,
        }
    }

    /// Looks `key` up; returns its value on a hit and refreshes its age.
    pub fn lookup(&mut self, key: u64) -> Option<u64> {
        self.clock += 1;
        let base = (key as usize & (self.sets - 1)) * self.ways;
        for w in base..base + self.ways {
            if self.tags[w] == key {
                self.stamps[w] = self.clock;
                return Some(self.values[w]);
            }
        }
        None
    }

    /// Forgets `key` if present.
    pub fn remove(&mut self, key: u64) {
        let base = (key as usize & (self.sets - 1)) * self.ways;
        for w in base..base + self.ways {
            if self.tags[w] == key {
                self.tags[w] = u64::MAX;
            }
        }
    }

    /// Inserts or updates `key`, evicting the least recently used way.
    pub fn insert(&mut self, key: u64, value: u64) {
        self.clock += 1;
        let base = (key as usize & (self.sets - 1)) * self.ways;
        let slot = (base..base + self.ways)
            .find(|&w| self.tags[w] == key)
            .unwrap_or_else(|| {
                (base..base + self.ways)
                    .min_by_key(|&w| self.stamps[w])
                    .unwrap()
            });
        self.tags[slot] = key;
        self.values[slot] = value;
        self.stamps[slot] = self.clock;
    }
}

/// A cache of lines: hit or miss, filling on miss.
pub struct Cache {
    store: SetAssoc,
    line_shift: u32,
    pub accesses: u64,
    pub misses: u64,
}

impl Cache {
    pub fn new(size: u32, ways: u32, line: u32) -> Cache {
        Cache {
            store: SetAssoc::new((size / line) as usize, ways as usize),
            line_shift: line.trailing_zeros(),
            accesses: 0,
            misses: 0,
        }
    }

    /// True on a hit; a miss allocates the line.
    pub fn access(&mut self, addr: u64) -> bool {
        self.accesses += 1;
        let line = addr >> self.line_shift;
        if self.store.lookup(line).is_some() {
            true
        } else {
            self.misses += 1;
            self.store.insert(line, 0);
            false
        }
    }
}

/// Return-address stack; overflow overwrites the oldest entry.
pub struct Ras {
    stack: Vec<u64>,
    top: usize,
    depth: usize,
}

impl Ras {
    pub fn new(n: u32) -> Ras {
        Ras {
            stack: vec![0; n as usize],
            top: 0,
            depth: 0,
        }
    }
    pub fn push(&mut self, addr: u64) {
        self.top = (self.top + 1) % self.stack.len();
        self.stack[self.top] = addr;
        self.depth = (self.depth + 1).min(self.stack.len());
    }
    pub fn pop(&mut self) -> Option<u64> {
        if self.depth == 0 {
            return None;
        }
        let a = self.stack[self.top];
        self.top = (self.top + self.stack.len() - 1) % self.stack.len();
        self.depth -= 1;
        Some(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predictor_learns_a_bias_and_a_pattern() {
        let mut t = Tournament::new(12, 1024, 1024);
        let mut wrong = 0;
        for i in 0..4000 {
            let taken = i % 2 == 0; // alternating: gshare learns it
            if i >= 2000 && t.predict(0x400100) != taken {
                wrong += 1;
            }
            t.update(0x400100, taken);
        }
        assert!(
            wrong < 20,
            "{wrong} mispredictions of an alternating branch"
        );
    }

    /// Mispredictions of `kind` over the second half of 4000 outcomes of
    /// one branch.
    fn late_misses(
        kind: crate::timing::PredictorKind,
        mut outcome: impl FnMut(u64) -> bool,
    ) -> u32 {
        let c = crate::timing::Config {
            gshare_history_bits: 12,
            bimodal_entries: 1024,
            chooser_entries: 1024,
            ..Default::default()
        };
        let mut p = Predictor::new(kind, &c);
        let mut wrong = 0;
        for i in 0..4000 {
            let taken = outcome(i);
            if p.predict_and_update(0x400100, taken) != taken && i >= 2000 {
                wrong += 1;
            }
        }
        wrong
    }

    #[test]
    fn gshare_learns_what_bimodal_cannot_and_perfect_never_misses() {
        use crate::timing::PredictorKind as K;
        let alternating = |i: u64| i % 2 == 0;
        let biased = |i: u64| i % 10 != 0;
        assert!(late_misses(K::Gshare, alternating) < 20);
        assert!(late_misses(K::Tournament, alternating) < 20);
        // A 2-bit counter on T, N, T, N … is wrong every time.
        assert!(late_misses(K::Bimodal, alternating) > 1900);
        // A biased branch: bimodal misses the 10% exceptions only.
        let b = late_misses(K::Bimodal, biased);
        assert!((150..=250).contains(&b), "{b}");
        let mut x = 0x9E37_79B9u64;
        let random = move |_: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 63 == 1
        };
        assert!(late_misses(K::Gshare, random) > 600);
        assert_eq!(late_misses(K::Perfect, random), 0);
        assert_eq!(late_misses(K::Perfect, alternating), 0);
    }

    #[test]
    fn lru_cache_and_ras() {
        let mut c = Cache::new(2 * 64, 2, 64); // one set, two ways
        assert!(!c.access(0));
        assert!(!c.access(64));
        assert!(c.access(0));
        assert!(!c.access(128)); // evicts 64, the least recently used
        assert!(c.access(0));
        assert!(!c.access(64));
        let mut r = Ras::new(2);
        r.push(1);
        r.push(2);
        r.push(3);
        assert_eq!((r.pop(), r.pop(), r.pop()), (Some(3), Some(2), None));
    }
}
