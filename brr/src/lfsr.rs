//! Software model of the brr outcome generator (Lee and Zilles, CGO 2008, §4).
//!
//! The hardware is a linear-feedback shift register clocked once per executed
//! brr; the outcome for frequency k is the AND of k+1 register bits, and a mux
//! on the frequency field picks the AND gate. The paper suggests a 20-bit
//! register and asks for non-contiguous, variably spaced bits so that
//! consecutive outcomes are nearly independent. A 20-bit register cannot give
//! frequency 15 sixteen bits none of which is adjacent to another, so this
//! model uses 64 bits (still a few dozen flip-flops) and bit positions spaced
//! 3 to 5 apart. With that spacing the bits one brr reads and the bits the
//! next one (and the one after) reads are linearly independent functions of
//! the state, so over the period the outcomes at lags 1 and 2 are exactly
//! independent (to within the excluded all-zero state); the tests check that
//! by rank over GF(2) and by counting.
//!
//! The register is a Galois LFSR for x^64 + x^4 + x^3 + x + 1, a primitive
//! polynomial (tested), so its period is 2^64 - 1: stepping multiplies the
//! state, read as a polynomial over GF(2), by x modulo that polynomial.

/// Low 64 coefficients of the feedback polynomial x^64 + x^4 + x^3 + x + 1.
pub const FEEDBACK: u64 = 0b1_1011;

/// Register bits ANDed for each frequency: frequency k reads the first k+1.
/// All in 6..=60, pairwise at least 3 apart, gaps of 3, 4 and 5.
pub const TAP_BITS: [u8; 16] = [6, 31, 49, 16, 60, 24, 39, 9, 53, 28, 43, 13, 56, 21, 36, 46];

/// Masks of the bits ANDed for each frequency, built from [`TAP_BITS`].
pub const FREQ_MASKS: [u64; 16] = freq_masks();

const fn freq_masks() -> [u64; 16] {
    let mut masks = [0u64; 16];
    let mut acc = 0u64;
    let mut k = 0;
    while k < 16 {
        acc |= 1u64 << TAP_BITS[k];
        masks[k] = acc;
        k += 1;
    }
    masks
}

/// Seed used when a caller asks for the (invalid) all-zero state.
pub const DEFAULT_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// The brr outcome generator. Deterministic for a given seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lfsr {
    state: u64,
}

impl Lfsr {
    /// A register seeded with `seed`; zero (the LFSR's fixed point) is
    /// replaced by [`DEFAULT_SEED`].
    pub const fn new(seed: u64) -> Lfsr {
        Lfsr {
            state: if seed == 0 { DEFAULT_SEED } else { seed },
        }
    }

    /// Current register contents.
    pub const fn state(&self) -> u64 {
        self.state
    }

    /// One clock: multiply the state by x modulo the feedback polynomial.
    #[inline]
    pub fn clock(&mut self) {
        let carry = self.state >> 63;
        self.state = (self.state << 1) ^ (FEEDBACK & carry.wrapping_neg());
    }

    /// Outcome of one executed `brr freq`: reads the current state, then
    /// clocks. Safe to call from a signal handler (no allocation, no locks).
    #[inline]
    pub fn brr(&mut self, freq: u8) -> bool {
        let mask = FREQ_MASKS[usize::from(freq & 15)];
        let taken = self.state & mask == mask;
        self.clock();
        taken
    }
}

impl Default for Lfsr {
    fn default() -> Lfsr {
        Lfsr::new(DEFAULT_SEED)
    }
}

#[cfg(test)]
mod tests;
