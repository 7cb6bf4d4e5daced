//! Where the emulated path has been in the current segment: the checkpoint's
//! breakpoint fires at every execution of its address, so the hit that
//! means "here is the predicted state" is the visit count plus one.
//!
//! Kept cache-friendly, because the handler runs after the application has
//! evicted its tables from the CPU's caches: the addresses go to a
//! sequential log (counts come from scanning it, which is only needed a
//! few times a segment), and "has the path been here before?", asked at
//! every step, is answered by a 4096-bit filter that fits in L1. The filter
//! may say "maybe" for an address never visited (two addresses sharing a
//! bit), never "no" for one visited: a fresh point it reports is fresh.
//!
//! The log takes 4 bytes a step, not 8: an address is kept as its offset
//! in one of [`REGIONS`] 1 GiB regions, numbered as the segment first
//! meets them (a program's code and its libraries' usually lie in two).
//! An address in a further region goes to an overflow log of full
//! addresses, as long as the log itself, so that counts stay exact.
//!
//! Async-signal-safe: fixed arrays, no allocation.

/// Addresses the log holds: the instruction budget of a segment.
pub const VISIT_LOG: usize = super::MAX_SEGMENT_INSTRUCTIONS as usize;
/// Regions a segment's log entries name (the entry's top two bits; the
/// fourth value marks an address kept in the overflow log).
const REGIONS: usize = 3;
/// log2 of a region's size.
const REGION_BITS: u32 = 30;
/// The entry of an address in no region: never an address's entry.
const FAR: u32 = (REGIONS as u32) << REGION_BITS;
const FILTER_BITS: usize = 4096;
/// Saturating visit counters, one per hash of the address (see
/// [`Visits::at_least`]).
const COUNTERS: usize = 1024;

#[derive(bytemuck::Zeroable)]
pub struct Visits {
    /// The visits in order, each as [`Visits::entry`] made it.
    log: [u32; VISIT_LOG],
    len: usize,
    /// The regions (address >> [`REGION_BITS`]) the entries name.
    regions: [u64; REGIONS],
    regions_used: usize,
    /// Visits to addresses in no region, in order.
    far: [u64; VISIT_LOG],
    far_len: usize,
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
    /// An empty log, zeroed on the heap directly (24 KiB: too much for a
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
            &self.regions,
            crate::census::Part::Visits
        ));
        self.len = 0;
        self.regions_used = 0;
        self.far_len = 0;
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
        if self.len < VISIT_LOG {
            let entry = match self.entry(addr) {
                Some(e) => e,
                None if self.regions_used < REGIONS => {
                    self.regions[self.regions_used] = addr >> REGION_BITS;
                    self.regions_used += 1;
                    self.entry(addr).unwrap_or(FAR)
                }
                None => {
                    census!(crate::census::touch(
                        &self.far[self.far_len],
                        crate::census::Part::Visits
                    ));
                    // One far entry at most per log entry: room is left.
                    self.far[self.far_len] = addr;
                    self.far_len += 1;
                    FAR
                }
            };
            census!(crate::census::touch(
                &self.log[self.len],
                crate::census::Part::Visits
            ));
            self.log[self.len] = entry;
            self.len += 1;
        }
        fresh
    }

    /// The log entry of `addr`, if its region has a number.
    #[inline(always)]
    fn entry(&self, addr: u64) -> Option<u32> {
        let region = addr >> REGION_BITS;
        let offset = (addr & ((1 << REGION_BITS) - 1)) as u32;
        self.regions[..self.regions_used]
            .iter()
            .position(|&r| r == region)
            .map(|n| ((n as u32) << REGION_BITS) | offset)
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
        match self.entry(addr) {
            Some(entry) => {
                census!(crate::census::touch(
                    &self.log[..self.len],
                    crate::census::Part::Visits
                ));
                self.log[..self.len].iter().filter(|&&e| e == entry).count() as u32
            }
            None => {
                census!(crate::census::touch(
                    &self.far[..self.far_len],
                    crate::census::Part::Visits
                ));
                self.far[..self.far_len]
                    .iter()
                    .filter(|&&a| a == addr)
                    .count() as u32
            }
        }
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
    fn counts_stay_exact_across_regions_and_past_them() {
        let mut v = Visits::new();
        // Five regions, each 1 GiB apart, and in each the same offset: only
        // the first three get a number, the rest go to the overflow log.
        let at = |region: u64, i: u64| (0x5555_0000_0000 + (region << 30)) + 0x1234 + 4 * i;
        for round in 0..3u64 {
            for region in 0..5u64 {
                for i in 0..=region {
                    v.visit(at(region, i));
                }
            }
            for region in 0..5u64 {
                assert_eq!(v.count(at(region, 0)), round as u32 + 1, "region {region}");
                assert_eq!(v.count(at(region, region)), round as u32 + 1);
                assert_eq!(v.count(at(region, region + 1)), 0);
            }
        }
        // An address one region past a numbered one, at the same offset.
        assert_eq!(v.count(at(7, 0)), 0);
        assert!(v.complete());
        v.reset();
        for region in 0..5u64 {
            assert_eq!(v.count(at(region, 0)), 0);
        }
        // The regions are numbered anew after a reset.
        v.visit(at(4, 0));
        assert_eq!((v.count(at(4, 0)), v.count(at(0, 0))), (1, 0));
    }

    #[test]
    fn a_full_log_of_far_addresses_fits() {
        let mut v = Visits::new();
        for i in 0..VISIT_LOG as u64 + 10 {
            v.visit((i % 8) << 40 | 0x1000);
        }
        assert!(!v.complete());
        assert_eq!(v.count(5 << 40 | 0x1000), VISIT_LOG as u32 / 8);
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
}
