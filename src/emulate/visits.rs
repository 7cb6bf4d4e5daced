//! Where the emulated path has been in the current segment: the checkpoint's
//! breakpoint fires at every execution of its address, so the hit that
//! means "here is the predicted state" is the visit count plus one.
//!
//! Kept cache-friendly, because the handler runs after the application has
//! evicted its tables from the CPU's caches:
//!
//! - The visits go to a sequential log of **windows**: a start address and
//!   a 64-bit map of the instructions visited in the 64 bytes from it. A
//!   visit sets its bit in the open window when it falls inside it and the
//!   bit is clear, and opens a new window at itself otherwise. Each visit
//!   is one bit in one window, so a count (a scan of the windows, needed
//!   only a few times a segment) is exact. Straight-line code fills a
//!   window with 10–16 instructions, a small loop's iteration with its
//!   whole body: SQLite's traces took 9 KiB of 8-byte addresses at N =
//!   128, one per step.
//! - "Has the path been here before?", asked at every step, is answered
//!   by a 4096-bit filter that fits in L1. The filter may say "maybe" for
//!   an address never visited (two addresses sharing a bit), never "no"
//!   for one visited: a fresh point it reports is fresh.
//!
//! Async-signal-safe: fixed arrays, no allocation.

/// Windows the log holds: one a step at worst, so a segment's instruction
/// budget never fills it.
pub const VISIT_LOG: usize = super::MAX_SEGMENT_INSTRUCTIONS as usize;
const FILTER_BITS: usize = 4096;
/// Saturating visit counters, one per hash of the address (see
/// [`Visits::at_least`]).
const COUNTERS: usize = 1024;
/// Bytes of code one window covers: one bit each.
const WINDOW: u64 = 64;

/// Instructions visited once each in the 64 bytes from `start`: bit `i`
/// of `map` is the instruction at `start + i`.
#[derive(Clone, Copy, bytemuck::Zeroable)]
#[repr(C)]
struct Window {
    start: u64,
    map: u64,
}

impl Window {
    /// Whether `addr`'s visit is in this window.
    #[inline]
    fn holds(self, addr: u64) -> bool {
        let off = addr.wrapping_sub(self.start);
        off < WINDOW && self.map >> off & 1 != 0
    }
}

#[derive(bytemuck::Zeroable)]
pub struct Visits {
    /// Closed windows.
    log: [Window; VISIT_LOG],
    len: usize,
    /// The open window (empty map: none yet).
    open: Window,
    filter: [u64; FILTER_BITS / 64],
    /// Each counter is at least the arrivals by a taken branch
    /// ([`Visits::arrive`]) at every address that hashes to it: a bound,
    /// read after every taken branch, that tells when an exact count (a
    /// scan of the log) is worth making.
    counters: [u8; COUNTERS],
}

/// The filter position of `addr` (one of FILTER_BITS).
#[inline]
fn hash(addr: u64) -> usize {
    (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize & (FILTER_BITS - 1)
}

/// Where `addr` lives in the filter: (word, bit).
#[inline]
fn bit(addr: u64) -> (usize, u64) {
    let h = hash(addr);
    (h / 64, 1u64 << (h % 64))
}

/// The counter of `addr`: its filter position's top bits.
#[inline]
fn counter(addr: u64) -> usize {
    hash(addr) / (FILTER_BITS / COUNTERS)
}

impl Visits {
    /// An empty log, zeroed on the heap directly (33 KiB: too much for a
    /// small thread stack, where registration runs).
    pub fn new() -> Box<Visits> {
        bytemuck::zeroed_box::<Visits>()
    }

    /// Runs in the handler: cleared in place.
    pub fn reset(&mut self) {
        census!(crate::census::touch(
            &self.filter,
            crate::census::Part::Visits
        ));
        census!(crate::census::touch(
            &self.counters,
            crate::census::Part::Visits
        ));
        census!(crate::census::touch(&self.len, crate::census::Part::Visits));
        census!(crate::census::touch(
            &self.open,
            crate::census::Part::Visits
        ));
        self.len = 0;
        self.open = Window { start: 0, map: 0 };
        self.filter.fill(0);
        self.counters.fill(0);
    }

    /// Records a visit to `addr`; returns true when the path has surely
    /// not been there before in this segment. A full log records nothing
    /// more (the segment's budget ends it first).
    #[inline]
    pub fn visit(&mut self, addr: u64) -> bool {
        let (word, mask) = bit(addr);
        let fresh = self.filter[word] & mask == 0;
        self.filter[word] |= mask;
        let off = addr.wrapping_sub(self.open.start);
        if off < WINDOW && self.open.map >> off & 1 == 0 {
            self.open.map |= 1 << off;
        } else if self.len < VISIT_LOG {
            census!(crate::census::touch(
                &self.log[self.len],
                crate::census::Part::Visits
            ));
            // The first window of a segment is empty: stored, it holds
            // nothing, and the log has room for one a step all the same.
            self.log[self.len] = self.open;
            self.len += 1;
            self.open = Window {
                start: addr,
                map: 1,
            };
        }
        fresh
    }

    /// Whether the path has surely not been at `addr` in this segment.
    #[inline]
    pub fn surely_new(&self, addr: u64) -> bool {
        let (word, mask) = bit(addr);
        self.filter[word] & mask == 0
    }

    /// A taken branch went to `addr` (counted apart from [`Visits::visit`],
    /// which every step makes: only branch targets are loop heads).
    #[inline]
    pub fn arrive(&mut self, addr: u64) {
        let c = &mut self.counters[counter(addr)];
        *c = c.saturating_add(1);
    }

    /// Whether `addr` may have been reached by a taken branch `n` times or
    /// more: false means surely fewer (exact counts of all visits come
    /// from [`Visits::count`]).
    #[inline]
    pub fn at_least(&self, addr: u64, n: u32) -> bool {
        u32::from(self.counters[counter(addr)]) >= n
    }

    /// Whether every visit so far is in the log (counts are exact).
    #[inline]
    pub fn complete(&self) -> bool {
        self.len < VISIT_LOG
    }

    /// Visits to `addr` so far (exact).
    pub fn count(&self, addr: u64) -> u32 {
        if self.surely_new(addr) {
            return 0;
        }
        census!(crate::census::touch(
            &self.log[..self.len],
            crate::census::Part::Visits
        ));
        let logged = self.log[..self.len]
            .iter()
            .filter(|w| w.holds(addr))
            .count() as u32;
        logged + u32::from(self.open.holds(addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_visits_per_address_and_resets() {
        let mut v = Visits::new();
        assert!(v.visit(0x1000));
        assert!(v.visit(0x1004));
        assert!(!v.visit(0x1000));
        assert_eq!(v.count(0x1000), 2);
        assert_eq!(v.count(0x2000), 0);
        assert!(!v.surely_new(0x1004));
        v.reset();
        assert_eq!(v.count(0x1000), 0);
        assert!(v.visit(0x1000));
    }

    #[test]
    fn the_counters_bound_the_visits_from_above() {
        let mut v = Visits::new();
        for i in 0..40u64 {
            for a in 0..50u64 {
                v.visit(0x40_0000 + 7 * a + i / 20);
                v.arrive(0x40_0000 + 7 * a + i / 20);
            }
        }
        for a in 0..60u64 {
            let addr = 0x40_0000 + 7 * a;
            assert!(v.at_least(addr, v.count(addr)));
        }
        assert!(!v.at_least(0x90_0000, 1));
        v.reset();
        assert!(!v.at_least(0x40_0000, 1));
    }

    #[test]
    fn the_filter_never_calls_a_visited_address_new() {
        let mut v = Visits::new();
        for i in 0..1500u64 {
            v.visit(0x40_0000 + 3 * i);
        }
        for i in 0..1500u64 {
            assert!(!v.surely_new(0x40_0000 + 3 * i));
            assert_eq!(v.count(0x40_0000 + 3 * i), 1);
        }
    }

    #[test]
    fn window_counts_match_a_plain_count() {
        // Paths of jumps, short loops, straight runs and addresses a few
        // bytes apart (one instruction's bytes entered in its middle): the
        // windows' counts equal a count of every visit, at every point.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for _ in 0..200 {
            let mut v = Visits::new();
            let mut seen: Vec<u64> = Vec::new();
            let mut pc = 0x40_0000 + next(4096);
            for _ in 0..next(VISIT_LOG as u64) {
                v.visit(pc);
                seen.push(pc);
                pc = match next(8) {
                    0 => 0x40_0000 + next(4096),
                    1 => pc.wrapping_sub(next(80)),
                    2 => pc + 1,
                    _ => pc + 1 + next(7),
                };
                if next(16) == 0 {
                    let probe = seen[next(seen.len() as u64) as usize] + next(3);
                    let want = seen.iter().filter(|&&a| a == probe).count() as u32;
                    assert_eq!(v.count(probe), want, "{probe:#x}");
                }
            }
            assert!(v.complete());
            for &a in &seen {
                let want = seen.iter().filter(|&&b| b == a).count() as u32;
                assert_eq!(v.count(a), want, "{a:#x}");
            }
        }
    }

    #[test]
    fn a_loop_in_one_window_takes_a_window_an_iteration() {
        let mut v = Visits::new();
        for _ in 0..100 {
            for off in [0u64, 3, 7, 12, 16] {
                v.visit(0x40_1000 + off);
            }
        }
        // The first (empty) window is stored at the first visit, then one
        // per iteration after the first.
        assert_eq!(v.len, 100);
        assert_eq!(v.count(0x40_1007), 100);
        assert_eq!(v.count(0x40_1008), 0);
    }

    #[test]
    fn a_full_log_says_so() {
        let mut v = Visits::new();
        // Every visit 64 bytes from the last: a window each.
        for i in 0..=VISIT_LOG as u64 {
            v.visit(0x40_0000 + 64 * i);
        }
        assert!(!v.complete());
        assert_eq!(v.count(0x40_0000 + 64), 1);
    }
}
