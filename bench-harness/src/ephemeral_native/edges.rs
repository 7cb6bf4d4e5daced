//! Conditional-branch edge profiles of one executable, from each source
//! the `ephemeral-native` experiment compares, all keyed the same way:
//! `{site → target}` weighs the executions that took the branch,
//! `{site → fall-through}` those that did not, at link-time addresses.
//!
//! - libephemeral.so's `edges.csv` (its counts, directly);
//! - callgrind (`jcnd=` lines: taken and executed per conditional jump);
//! - the tracer's LBR-like traces: a taken edge is an entry `from → to`
//!   whose `from` is a site; a not-taken one is a site passed inside a
//!   fall-through range (from one entry's `to` up to, not including, the
//!   next entry's `from`, which left the range taken).
//!
//! Pure logic on the harness library's readers: the end-to-end test
//! (`tests/ephemeral_native.rs`) uses it too.

use anyhow::{bail, Context, Result};
use bench_harness::callgrind::ObjectProfile;
use bench_harness::overlap::Range;
use bench_harness::Branch;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// An edge profile: `{from, to}` → executions.
pub type Edges = BTreeMap<Branch, u64>;

/// The header libephemeral.so writes (ephemeral-native/src/output.rs).
pub const CSV_HEADER: &str =
    "site,target,fallthrough,taken,not_taken,hooked_executions,hooks,unhooks";

/// One line of an `edges.csv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteRow {
    pub site: u64,
    pub target: u64,
    pub fallthrough: u64,
    pub taken: u64,
    pub not_taken: u64,
    pub hooks: u64,
    pub unhooks: u64,
}

/// Parses an `edges.csv`.
pub fn parse_csv(text: &str) -> Result<Vec<SiteRow>> {
    let mut lines = text.lines();
    if lines.next() != Some(CSV_HEADER) {
        bail!("not an ephemeral edges.csv (its header is not `{CSV_HEADER}`)");
    }
    lines
        .enumerate()
        .map(|(i, line)| {
            let f: Vec<&str> = line.split(',').collect();
            if f.len() != 8 {
                bail!("line {}: {} fields, not 8", i + 2, f.len());
            }
            let hex = |s: &str| {
                u64::from_str_radix(s.trim_start_matches("0x"), 16)
                    .with_context(|| format!("line {}: bad address '{s}'", i + 2))
            };
            let dec = |s: &str| {
                s.parse::<u64>()
                    .with_context(|| format!("line {}: bad count '{s}'", i + 2))
            };
            Ok(SiteRow {
                site: hex(f[0])?,
                target: hex(f[1])?,
                fallthrough: hex(f[2])?,
                taken: dec(f[3])?,
                not_taken: dec(f[4])?,
                hooks: dec(f[6])?,
                unhooks: dec(f[7])?,
            })
        })
        .collect()
}

/// The profile one run wrote into `dir`: its `edges.csv` rows and its
/// `summary.json`. Exactly one process must have written there.
pub fn read_run(dir: &Path) -> Result<(Vec<SiteRow>, serde_json::Value)> {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("no profile directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    let one = |suffix: &str| -> Result<&PathBuf> {
        let found: Vec<&PathBuf> = files
            .iter()
            .filter(|p| p.to_string_lossy().ends_with(suffix))
            .collect();
        match found.as_slice() {
            [p] => Ok(p),
            _ => bail!(
                "{} holds {} *{suffix} files, not 1",
                dir.display(),
                found.len()
            ),
        }
    };
    let csv = one(".edges.csv")?;
    let rows = parse_csv(&std::fs::read_to_string(csv)?)
        .with_context(|| format!("reading {}", csv.display()))?;
    let json = one(".summary.json")?;
    let summary = serde_json::from_str(&std::fs::read_to_string(json)?)
        .with_context(|| format!("reading {}", json.display()))?;
    Ok((rows, summary))
}

/// The edges libephemeral.so counted (zero weights left out).
pub fn ephemeral_edges(rows: &[SiteRow]) -> Edges {
    let mut e = Edges::new();
    for r in rows {
        add(&mut e, r.site, r.target, r.taken);
        add(&mut e, r.site, r.fallthrough, r.not_taken);
    }
    e
}

/// The exact edges of the sites in `rows`, from callgrind's counts of the
/// same executable: a site's executions are its instruction count (`Ir`),
/// its taken executions the `jcnd=` lines from it. The instruction count
/// matters: callgrind writes no `jcnd=` line for a conditional jump that
/// was never taken, so those lines alone lose such a site's executions.
pub fn exact_edges(rows: &[SiteRow], counts: &ObjectProfile) -> Edges {
    let mut taken: BTreeMap<u64, u64> = BTreeMap::new();
    for (b, c) in &counts.conditional {
        *taken.entry(b.from).or_insert(0) += c.taken;
    }
    let mut e = Edges::new();
    for r in rows {
        let executed = counts.instructions.get(&r.site).copied().unwrap_or(0);
        let t = taken.get(&r.site).copied().unwrap_or(0);
        add(&mut e, r.site, r.target, t);
        add(&mut e, r.site, r.fallthrough, executed.saturating_sub(t));
    }
    e
}

/// The edges of the sites in `rows` that traces show: `taken` holds the
/// recorded entries (link-time `{from, to}` with counts) and `ranges` the
/// fall-through ranges between consecutive entries, `end` being the
/// branch that left the range (taken, so not counted as passed).
pub fn traced_edges(rows: &[SiteRow], taken: &Edges, ranges: &[Range]) -> Edges {
    let sites = by_site(rows);
    let mut e = Edges::new();
    for (b, &n) in taken {
        if sites.contains_key(&b.from) {
            add(&mut e, b.from, b.to, n);
        }
    }
    // A difference array over the sorted sites: +count at the first site
    // in [begin, end), -count past the last.
    let order: Vec<&SiteRow> = sites.values().copied().collect();
    let mut delta = vec![0i128; order.len() + 1];
    for r in ranges.iter().filter(|r| r.begin <= r.end && r.count > 0) {
        let first = order.partition_point(|s| s.site < r.begin);
        let past = order.partition_point(|s| s.site < r.end);
        if first < past {
            delta[first] += i128::from(r.count);
            delta[past] -= i128::from(r.count);
        }
    }
    let mut running = 0i128;
    for (i, s) in order.iter().enumerate() {
        running += delta[i];
        add(&mut e, s.site, s.fallthrough, running.max(0) as u64);
    }
    e
}

/// `observed` with each site's weight set to its exact executions and
/// split in the direction ratio `observed` shows: what the profile says
/// about branch biases, apart from how often it saw each site (a
/// sampler that caps hot sites at P executions per epoch distorts that
/// part). Sites `observed` never saw weigh nothing.
pub fn rescaled(rows: &[SiteRow], observed: &Edges, exact: &Edges) -> Edges {
    let weight =
        |e: &Edges, r: &SiteRow, to: u64| e.get(&Branch { from: r.site, to }).copied().unwrap_or(0);
    let mut out = Edges::new();
    for r in rows {
        let (t, n) = (
            weight(observed, r, r.target),
            weight(observed, r, r.fallthrough),
        );
        let executions = weight(exact, r, r.target) + weight(exact, r, r.fallthrough);
        if t + n == 0 || r.target == r.fallthrough {
            continue;
        }
        let taken = (executions as f64 * t as f64 / (t + n) as f64).round() as u64;
        add(&mut out, r.site, r.target, taken);
        add(
            &mut out,
            r.site,
            r.fallthrough,
            executions - taken.min(executions),
        );
    }
    out
}

/// Adds every edge of `b` into `a`.
pub fn merge(a: &mut Edges, b: &Edges) {
    for (k, v) in b {
        *a.entry(*k).or_insert(0) += v;
    }
}

fn by_site(rows: &[SiteRow]) -> BTreeMap<u64, &SiteRow> {
    rows.iter().map(|r| (r.site, r)).collect()
}

fn add(e: &mut Edges, from: u64, to: u64, n: u64) {
    if n > 0 {
        *e.entry(Branch { from, to }).or_insert(0) += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bench_harness::callgrind::ConditionalCount;

    fn row(site: u64, target: u64, len: u64, taken: u64, not_taken: u64) -> SiteRow {
        SiteRow {
            site,
            target,
            fallthrough: site + len,
            taken,
            not_taken,
            hooks: 1,
            unhooks: 0,
        }
    }

    fn b(from: u64, to: u64) -> Branch {
        Branch { from, to }
    }

    #[test]
    fn csv_round_trip_and_bad_header() {
        let text = format!("{CSV_HEADER}\n0x10,0x40,0x12,3,1,4,2,1\n");
        let rows = parse_csv(&text).unwrap();
        assert_eq!(
            rows,
            vec![row(0x10, 0x40, 2, 3, 1)]
                .into_iter()
                .map(|mut r| {
                    r.hooks = 2;
                    r.unhooks = 1;
                    r
                })
                .collect::<Vec<_>>()
        );
        assert!(parse_csv("a,b\n").is_err());
        assert!(parse_csv(&format!("{CSV_HEADER}\n0x10,1\n")).is_err());
        let e = ephemeral_edges(&rows);
        assert_eq!(e, [(b(0x10, 0x40), 3), (b(0x10, 0x12), 1)].into());
    }

    #[test]
    fn exact_edges_take_executions_from_instruction_counts() {
        let rows = [row(0x10, 0x40, 2, 0, 0), row(0x20, 0x50, 2, 0, 0)];
        let mut counts = ObjectProfile::default();
        counts.instructions.insert(0x10, 100);
        // Never taken: callgrind has its instruction count, no jcnd line.
        counts.instructions.insert(0x20, 7);
        counts.conditional.insert(
            b(0x10, 0x40),
            ConditionalCount {
                taken: 30,
                executed: 100,
            },
        );
        // A jump that is not a site of ours is left out.
        counts.conditional.insert(
            b(0x99, 0x40),
            ConditionalCount {
                taken: 1,
                executed: 1,
            },
        );
        let e = exact_edges(&rows, &counts);
        assert_eq!(
            e,
            [(b(0x10, 0x40), 30), (b(0x10, 0x12), 70), (b(0x20, 0x22), 7)].into()
        );
    }

    #[test]
    fn rescaled_keeps_the_bias_and_takes_the_exact_weight() {
        let rows = [row(0x10, 0x40, 2, 0, 0), row(0x20, 0x50, 2, 0, 0)];
        let observed: Edges = [(b(0x10, 0x40), 1), (b(0x10, 0x12), 3)].into();
        let exact: Edges = [
            (b(0x10, 0x40), 250),
            (b(0x10, 0x12), 750),
            (b(0x20, 0x50), 5),
        ]
        .into();
        let r = rescaled(&rows, &observed, &exact);
        assert_eq!(r, [(b(0x10, 0x40), 250), (b(0x10, 0x12), 750)].into());
    }

    #[test]
    fn traced_edges_count_sites_passed_in_ranges_but_not_the_range_end() {
        // Sites at 0x10, 0x20 and 0x30; a range 0x08..=0x20 passes 0x10
        // and leaves by 0x20 (taken: it is the next entry's from).
        let rows = [
            row(0x10, 0x80, 2, 0, 0),
            row(0x20, 0x90, 2, 0, 0),
            row(0x30, 0xa0, 6, 0, 0),
        ];
        let taken: Edges = [(b(0x20, 0x90), 5), (b(0x50, 0x60), 9)].into();
        let ranges = [
            Range {
                begin: 0x08,
                end: 0x20,
                count: 5,
            },
            Range {
                begin: 0x90,
                end: 0x10,
                count: 7,
            },
        ];
        let e = traced_edges(&rows, &taken, &ranges);
        assert_eq!(e, [(b(0x20, 0x90), 5), (b(0x10, 0x12), 5)].into());
    }
}
