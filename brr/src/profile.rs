//! Edge profiles: reading the instrumented programs' output, measuring exact
//! profiles under the emulator, and comparing profiles.

use crate::emu::syscall::{Process, RunError};
use crate::emu::BranchKind;
use anyhow::{Context, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Edge counts keyed by (unit, site): (taken, fall-through).
pub type EdgeProfile = BTreeMap<(String, usize), (u64, u64)>;

/// Parses the `UNIT SITE TAKEN FALLTHROUGH` lines the edge runtime writes.
pub fn read_edges(path: &Path) -> Result<EdgeProfile> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read edge counts {}", path.display()))?;
    let mut p = EdgeProfile::new();
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let parse = |s: &str| {
            s.parse::<u64>()
                .with_context(|| format!("{}:{}: bad number '{s}'", path.display(), n + 1))
        };
        anyhow::ensure!(
            f.len() == 4,
            "{}:{}: expected UNIT SITE TAKEN FALLTHROUGH",
            path.display(),
            n + 1
        );
        p.insert(
            (f[0].to_string(), parse(f[1])? as usize),
            (parse(f[2])?, parse(f[3])?),
        );
    }
    Ok(p)
}

/// Marker symbols `__brr_site_<unit>_<i>` of an executable: jcc address →
/// (sanitised unit, site).
pub fn site_addresses(exe: &Path) -> Result<HashMap<u64, (String, usize)>> {
    let mut map = HashMap::new();
    for (name, addr) in crate::emu::elf::symbols(exe)? {
        if let Some(rest) = name.strip_prefix("__brr_site_") {
            if let Some((unit, idx)) = rest.rsplit_once('_') {
                if let Ok(i) = idx.parse() {
                    map.insert(addr, (unit.to_string(), i));
                }
            }
        }
    }
    Ok(map)
}

/// The exact edge profile of a `none`-variant build, measured by running it
/// under the emulator and watching the jcc at each marker. Units are keyed
/// by their sanitised names (as in the marker symbols).
pub fn exact_edges(exe: &Path, args: &[String], env: &[String]) -> Result<(EdgeProfile, i32)> {
    exact_edges_with(exe, args, env, false)
}

fn exact_edges_with(
    exe: &Path,
    args: &[String],
    env: &[String],
    quiet: bool,
) -> Result<(EdgeProfile, i32)> {
    let sites = site_addresses(exe)?;
    anyhow::ensure!(
        !sites.is_empty(),
        "{} has no __brr_site_ markers (build it with variant none)",
        exe.display()
    );
    let mut counts: HashMap<u64, (u64, u64)> = HashMap::new();
    // The build's edge runtime writes its (empty) counts at exit.
    let mut env = env.to_vec();
    if !env.iter().any(|e| e.starts_with("BRR_EDGES=")) {
        env.push("BRR_EDGES=/dev/null".into());
    }
    let mut process = Process::load(exe, args, &env, 1)?;
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .context("cannot open /dev/null")?;
    if quiet {
        use std::os::fd::AsRawFd;
        process.stdio[1] = null.as_raw_fd();
    }
    let status = process
        .run_with(u64::MAX, |m| {
            let r = &m.retired;
            if r.kind == BranchKind::Conditional && sites.contains_key(&r.ip) {
                let e = counts.entry(r.ip).or_default();
                if r.taken {
                    e.0 += 1;
                } else {
                    e.1 += 1;
                }
            }
        })
        .map_err(|e: RunError| anyhow::anyhow!(e))?;
    let mut p = EdgeProfile::new();
    for (addr, key) in sites {
        p.insert(key, counts.get(&addr).copied().unwrap_or_default());
    }
    Ok((p, status))
}

/// `exact_edges` with the guest's stdout sent to /dev/null.
pub fn exact_edges_quiet(
    exe: &Path,
    args: &[String],
    env: &[String],
) -> Result<(EdgeProfile, i32)> {
    exact_edges_with(exe, args, env, true)
}

/// Replaces unit names by their sanitised form (as marker symbols spell them).
pub fn sanitise_units(p: &EdgeProfile) -> EdgeProfile {
    p.iter()
        .map(|((u, i), v)| {
            (
                (
                    u.chars()
                        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                        .collect(),
                    *i,
                ),
                *v,
            )
        })
        .collect()
}

/// Total edge executions (or samples) in a profile.
pub fn total(p: &EdgeProfile) -> u64 {
    p.values().map(|(t, f)| t + f).sum()
}

/// Overlap of two edge profiles (the paper's accuracy metric): the sum over
/// edges of the smaller of the two normalised counts; 1.0 = identical shape.
pub fn overlap(a: &EdgeProfile, b: &EdgeProfile) -> f64 {
    let (ta, tb) = (total(a) as f64, total(b) as f64);
    if ta == 0.0 || tb == 0.0 {
        return 0.0;
    }
    let zero = (0, 0);
    let mut sum = 0.0;
    for (k, &(at, af)) in a {
        let &(bt, bf) = b.get(k).unwrap_or(&zero);
        sum += (at as f64 / ta).min(bt as f64 / tb) + (af as f64 / ta).min(bf as f64 / tb);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_of_identical_shapes_is_one_and_of_disjoint_is_zero() {
        let mut a = EdgeProfile::new();
        a.insert(("u".into(), 0), (10, 30));
        a.insert(("u".into(), 1), (60, 0));
        let scaled: EdgeProfile = a
            .iter()
            .map(|(k, &(t, f))| (k.clone(), (t * 7, f * 7)))
            .collect();
        assert!((overlap(&a, &scaled) - 1.0).abs() < 1e-12);
        let mut b = EdgeProfile::new();
        b.insert(("u".into(), 1), (0, 5));
        assert_eq!(overlap(&a, &b), 0.0);
        let mut c = a.clone();
        c.insert(("u".into(), 1), (0, 0));
        // c keeps only the first site's 40 counts: min(0.1,0.25)+min(0.3,0.75).
        assert!((overlap(&a, &c) - 0.4).abs() < 1e-12);
    }
}
