//! The overlap metric: how much two weight distributions agree.
//!
//! overlap(a, b) = Σ_k min(a_k / Σa, b_k / Σb), as in Lee and Zilles (CGO 2008)
//! for sampled against full profiles: 1 when the normalised distributions are
//! equal, 0 when they share no key.

use std::collections::BTreeMap;

/// Sum-of-min overlap of the normalised weights of `a` and `b`, in [0, 1].
/// It is 0 when either side has no weight: an empty profile agrees with
/// nothing, so a test comparing against one cannot pass by accident.
pub fn overlap<K: Ord>(a: &BTreeMap<K, u64>, b: &BTreeMap<K, u64>) -> f64 {
    let total_a: u64 = a.values().sum();
    let total_b: u64 = b.values().sum();
    if total_a == 0 || total_b == 0 {
        return 0.0;
    }
    let (small, large, total_small, total_large) = if a.len() <= b.len() {
        (a, b, total_a, total_b)
    } else {
        (b, a, total_b, total_a)
    };
    let sum: f64 = small
        .iter()
        .filter_map(|(k, &w)| large.get(k).map(|&v| (w, v)))
        .map(|(w, v)| (w as f64 / total_small as f64).min(v as f64 / total_large as f64))
        .sum();
    sum.min(1.0)
}

/// Keeps the entries of `weights` whose key satisfies `keep`.
pub fn restrict<K: Ord + Clone>(
    weights: &BTreeMap<K, u64>,
    mut keep: impl FnMut(&K) -> bool,
) -> BTreeMap<K, u64> {
    weights
        .iter()
        .filter(|(k, _)| keep(k))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// A fall-through range `[begin, end]`, both ends instruction starts, `end`
/// included (the branch that leaves the range), executed `count` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Range {
    pub begin: u64,
    pub end: u64,
    pub count: u64,
}

/// Adds the taken branches and fall-through ranges of `script`'s traces
/// that lie in module `module` of `map` to `edges` and `ranges`, at the
/// module's link-time addresses, each weighted by its trace's count: a
/// branch counts when both its ends are in the module, a range (from one
/// entry's target to the next entry's source) when both its ends are.
pub fn add_module_traces(
    script: &crate::perfscript::PerfScript,
    map: &crate::elf::ModuleMap,
    module: usize,
    edges: &mut BTreeMap<crate::Branch, u64>,
    ranges: &mut Vec<Range>,
) {
    let local = |a: u64| map.resolve(a).filter(|(m, _)| *m == module).map(|(_, v)| v);
    for t in &script.traces {
        let entries: Vec<&crate::Branch> = t.execution_order().collect();
        for e in &entries {
            if let (Some(from), Some(to)) = (local(e.from), local(e.to)) {
                *edges.entry(crate::Branch { from, to }).or_insert(0) += t.count;
            }
        }
        for pair in entries.windows(2) {
            if let (Some(begin), Some(end)) = (local(pair[0].to), local(pair[1].from)) {
                ranges.push(Range {
                    begin,
                    end,
                    count: t.count,
                });
            }
        }
    }
}

/// Instruction weights implied by ranges: each range adds its count to every
/// instruction whose start lies in `[begin, end]`. `instruction_starts` must be
/// sorted (the module's real instruction boundaries, see `elf`); a range whose
/// ends are reversed adds nothing.
pub fn instruction_weights(ranges: &[Range], instruction_starts: &[u64]) -> BTreeMap<u64, u64> {
    // Difference array over instruction indices: +count at the first
    // instruction of a range, -count after its last; a prefix sum gives weights.
    let mut delta = vec![0i128; instruction_starts.len() + 1];
    for r in ranges.iter().filter(|r| r.begin <= r.end && r.count > 0) {
        let first = instruction_starts.partition_point(|&a| a < r.begin);
        let past = instruction_starts.partition_point(|&a| a <= r.end);
        if first < past {
            delta[first] += i128::from(r.count);
            delta[past] -= i128::from(r.count);
        }
    }
    let mut weights = BTreeMap::new();
    let mut running = 0i128;
    for (i, &address) in instruction_starts.iter().enumerate() {
        running += delta[i];
        if running > 0 {
            weights.insert(address, running as u64);
        }
    }
    weights
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(u64, u64)]) -> BTreeMap<u64, u64> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn identical_distributions_overlap_fully() {
        let a = map(&[(1, 10), (2, 30)]);
        let b = map(&[(1, 1), (2, 3)]);
        assert!((overlap(&a, &b) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn partial_and_disjoint_overlap() {
        let a = map(&[(1, 50), (2, 50)]);
        let b = map(&[(1, 100)]);
        assert!((overlap(&a, &b) - 0.5).abs() < 1e-12);
        assert!((overlap(&b, &a) - 0.5).abs() < 1e-12);
        assert_eq!(overlap(&a, &map(&[(3, 1)])), 0.0);
        assert_eq!(overlap(&a, &BTreeMap::new()), 0.0);
        assert_eq!(overlap::<u64>(&BTreeMap::new(), &BTreeMap::new()), 0.0);
    }

    #[test]
    fn restrict_keeps_matching_keys() {
        let a = map(&[(1, 5), (20, 7)]);
        assert_eq!(restrict(&a, |k| *k < 10), map(&[(1, 5)]));
    }

    #[test]
    fn ranges_weight_every_instruction_inside() {
        let starts = [0x10, 0x12, 0x15, 0x19, 0x20];
        let ranges = [
            Range {
                begin: 0x12,
                end: 0x19,
                count: 3,
            },
            Range {
                begin: 0x15,
                end: 0x20,
                count: 2,
            },
            Range {
                begin: 0x20,
                end: 0x10,
                count: 9,
            },
        ];
        let w = instruction_weights(&ranges, &starts);
        assert_eq!(w, map(&[(0x12, 3), (0x15, 5), (0x19, 5), (0x20, 2)]));
    }
}
