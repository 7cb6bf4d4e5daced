use super::*;

/// Executions per frequency in the statistical tests (the brief asks ≥ 2^20).
const N: u64 = 1 << 22;

/// Accept counts within this many standard deviations of the expectation: the
/// tests are deterministic (fixed seed), the bound says how unusual a failure
/// would be for a good generator.
const SIGMAS: f64 = 5.0;

fn within_bound(count: u64, trials: u64, p: f64) -> Result<(), String> {
    let mean = trials as f64 * p;
    let sigma = (trials as f64 * p * (1.0 - p)).sqrt();
    let dev = (count as f64 - mean).abs();
    if dev <= SIGMAS * sigma {
        Ok(())
    } else {
        Err(format!("count {count}, expected {mean:.1} ± {sigma:.1}"))
    }
}

/// Product of two polynomials over GF(2) modulo the feedback polynomial,
/// computed with the register's own clock as "multiply by x".
fn mulmod(a: u64, b: u64) -> u64 {
    let mut r = 0u64;
    for bit in (0..64).rev() {
        let mut l = Lfsr { state: r };
        l.clock();
        r = l.state;
        if b >> bit & 1 == 1 {
            r ^= a;
        }
    }
    r
}

/// x^e modulo the feedback polynomial.
fn x_pow(mut e: u64) -> u64 {
    let (mut result, mut base) = (1u64, 2u64);
    while e > 0 {
        if e & 1 == 1 {
            result = mulmod(result, base);
        }
        base = mulmod(base, base);
        e >>= 1;
    }
    result
}

fn is_prime(n: u64) -> bool {
    n >= 2 && (2..).take_while(|d| d * d <= n).all(|d| n % d != 0)
}

#[test]
fn tap_bits_are_distinct_non_contiguous_and_variably_spaced() {
    let mut sorted = TAP_BITS;
    sorted.sort_unstable();
    let gaps: Vec<u8> = sorted.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().all(|&g| g >= 3), "gaps {gaps:?}");
    let mut kinds = gaps.clone();
    kinds.sort_unstable();
    kinds.dedup();
    assert!(kinds.len() >= 3, "spacing not varied: {gaps:?}");
    // Clear of the feedback taps at bits 0, 1, 3, 4 so a read bit is a plain
    // shifted copy of its neighbour.
    assert!(sorted[0] > 4 && sorted[15] <= 63);
    for (k, mask) in FREQ_MASKS.iter().enumerate() {
        assert_eq!(mask.count_ones() as usize, k + 1);
    }
}

#[test]
fn feedback_polynomial_is_primitive_so_the_period_is_maximal() {
    let period = u64::MAX; // 2^64 - 1
    let factors = [3u64, 5, 17, 257, 641, 65537, 6_700_417];
    assert_eq!(factors.iter().product::<u64>(), period);
    assert!(factors.iter().all(|&q| is_prime(q)));
    // The order of x is the period of the register from any nonzero state.
    assert_eq!(x_pow(period), 1);
    for q in factors {
        assert_ne!(x_pow(period / q), 1, "order divides (2^64-1)/{q}");
    }
}

#[test]
fn clocking_is_multiplication_by_x_and_does_not_recur_early() {
    let seed = 0x0123_4567_89ab_cdef;
    let mut l = Lfsr::new(seed);
    let steps = 1u64 << 20;
    for _ in 0..steps {
        l.clock();
        assert_ne!(l.state(), seed, "state recurred before 2^20 clocks");
        assert_ne!(l.state(), 0);
    }
    assert_eq!(l.state(), mulmod(seed, x_pow(steps)));
    assert_eq!(mulmod(seed, x_pow(u64::MAX)), seed);
}

#[test]
fn zero_seed_is_replaced_and_runs_are_deterministic() {
    assert_eq!(Lfsr::new(0).state(), DEFAULT_SEED);
    let (mut a, mut b) = (Lfsr::new(42), Lfsr::new(42));
    assert!((0..10_000).all(|i| a.brr(i as u8 % 16) == b.brr(i as u8 % 16)));
    let mut c = Lfsr::new(43);
    let (mut a, mut same) = (Lfsr::new(42), 0);
    for _ in 0..10_000 {
        same += u32::from(a.brr(0) == c.brr(0));
    }
    assert!(
        same < 9_000,
        "seeds 42 and 43 give nearly the same sequence"
    );
}

#[test]
fn every_frequency_is_taken_at_its_rate() {
    let mut failures = Vec::new();
    for freq in 0..16u8 {
        let mut l = Lfsr::new(0x5eed + u64::from(freq));
        let taken = (0..N).filter(|_| l.brr(freq)).count() as u64;
        let p = 0.5f64.powi(i32::from(freq) + 1);
        if let Err(e) = within_bound(taken, N, p) {
            failures.push(format!("freq {freq}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Rows of the linear map "state after `lag` clocks": row i is the mask of
/// current state bits whose parity is bit i after the clocks.
fn rows_after(lag: u32) -> [u64; 64] {
    let mut rows = [0u64; 64];
    for j in 0..64 {
        let mut l = Lfsr { state: 1u64 << j };
        for _ in 0..lag {
            l.clock();
        }
        for (i, row) in rows.iter_mut().enumerate() {
            *row |= (l.state >> i & 1) << j;
        }
    }
    rows
}

fn rank(mut vectors: Vec<u64>) -> usize {
    let mut rank = 0;
    for bit in (0..64).rev() {
        let Some(p) = (rank..vectors.len()).find(|&i| vectors[i] >> bit & 1 == 1) else {
            continue;
        };
        vectors.swap(rank, p);
        let pivot = vectors[rank];
        for (i, v) in vectors.iter_mut().enumerate() {
            if i != rank && *v >> bit & 1 == 1 {
                *v ^= pivot;
            }
        }
        rank += 1;
    }
    rank
}

#[test]
fn outcomes_one_and_two_apart_read_independent_bits() {
    for lag in [1, 2] {
        let rows = rows_after(lag);
        for k in 0..16 {
            let now: Vec<u64> = TAP_BITS[..=k].iter().map(|&b| 1u64 << b).collect();
            let later: Vec<u64> = TAP_BITS[..=k].iter().map(|&b| rows[b as usize]).collect();
            let all: Vec<u64> = now.into_iter().chain(later).collect();
            assert_eq!(rank(all), 2 * (k + 1), "freq {k}, lag {lag}");
        }
    }
}

/// Count of consecutive executions both taken, for outcomes drawn by `draw`.
fn both_taken(mut draw: impl FnMut() -> bool) -> u64 {
    let mut prev = draw();
    let mut pairs = 0;
    for _ in 1..N {
        let cur = draw();
        pairs += u64::from(prev && cur);
        prev = cur;
    }
    pairs
}

#[test]
fn consecutive_outcomes_are_independent_by_count() {
    for freq in 0..8u8 {
        let mut l = Lfsr::new(7);
        let p = 0.5f64.powi(i32::from(freq) + 1);
        let pairs = both_taken(|| l.brr(freq));
        within_bound(pairs, N - 1, p * p).unwrap_or_else(|e| panic!("freq {freq}: {e}"));
    }
}

#[test]
fn contiguous_bits_would_fail_the_independence_count() {
    // Control: the same statistic rejects the design the paper warns about
    // (adjacent bits, so consecutive outcomes share k of their k+1 bits).
    for freq in 1..8u8 {
        let mask = (1u64 << (freq + 1)) - 1;
        let mut l = Lfsr::new(7);
        let pairs = both_taken(|| {
            let taken = l.state() & mask << 8 == mask << 8;
            l.clock();
            taken
        });
        let p = 0.5f64.powi(i32::from(freq) + 1);
        assert!(within_bound(pairs, N - 1, p * p).is_err(), "freq {freq}");
    }
}
