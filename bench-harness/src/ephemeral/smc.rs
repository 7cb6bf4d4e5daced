//! How `bench-harness ephemeral`'s results depend on `smc_penalty`, the
//! cycles the timing model charges per store into code (an assumption:
//! see `brr/timing.conf`). The uninstrumented and the re-hooked ephemeral
//! runs are repeated under each penalty of `Plan::smc_penalties`
//! (`measure_one`); the samplers are measured once, because they store
//! nothing into code and the model charges the penalty only on such a
//! store (`brr::timing`'s `code_written`). `write` checks that claim on
//! the runs and writes `sweep.csv` and `summary.md`.

use super::{interpolate, opt, Measured, Plan, Run, Scheme};
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::Path;

/// The re-hooked ephemeral runs of one workload under one `smc_penalty`.
#[derive(Clone, Debug)]
pub struct Point {
    pub penalty: u32,
    /// The uninstrumented run's cycles under this penalty.
    pub cycles_none: u64,
    /// Its stores into code (expected 0: then `cycles_none` cannot
    /// depend on the penalty).
    pub code_stores_none: u64,
    /// One run per `Plan::persistences`, in that order.
    pub runs: Vec<Run>,
}

/// The paper's overheads at P ≤ 1000, percent of run time.
const PAPER_LOW: f64 = 0.7;
const PAPER_HIGH: f64 = 4.0;

fn overhead_pct(r: &Run, cycles_none: u64) -> Option<f64> {
    r.cycles
        .map(|c| (c as f64 / cycles_none.max(1) as f64 - 1.0) * 100.0)
}

/// A sampler's measured (cycles per site, overlap) points.
fn curve(m: &Measured, name: &str) -> Vec<(f64, f64)> {
    m.runs
        .iter()
        .filter(|r| r.scheme.name() == name)
        .filter_map(|r| r.cycles_per_site.map(|c| (c, r.overlap_raw)))
        .collect()
}

/// One ephemeral run against the samplers: interpolated at equal overhead
/// and equal accuracy (as in the main summary), and whether a measured
/// sampler point is at most as costly and at least as accurate
/// (dominance needs no interpolation, so it is defined at every P: it is
/// the ranking the findings compare across penalties).
struct Against {
    same_cost: [Option<f64>; 2],
    same_overlap: [Option<f64>; 2],
    dominated: [bool; 2],
}

const SAMPLERS: [&str; 2] = ["counter", "brr"];

fn against(m: &Measured, r: &Run) -> Option<Against> {
    let (ec, ea) = (r.cycles_per_site?, r.overlap_markov?);
    let mut a = Against {
        same_cost: [None; 2],
        same_overlap: [None; 2],
        dominated: [false; 2],
    };
    for (i, name) in SAMPLERS.iter().enumerate() {
        let pts = curve(m, name);
        a.same_cost[i] = interpolate(&pts, ec);
        let swapped: Vec<(f64, f64)> = pts.iter().map(|&(c, o)| (o, c)).collect();
        a.same_overlap[i] = interpolate(&swapped, ea);
        a.dominated[i] = pts.iter().any(|&(c, o)| c <= ec && o >= ea);
    }
    Some(a)
}

fn dominated_label(a: &Against) -> String {
    let by: Vec<&str> = SAMPLERS
        .iter()
        .zip(a.dominated)
        .filter(|(_, d)| *d)
        .map(|(n, _)| *n)
        .collect();
    if by.is_empty() {
        "neither".into()
    } else {
        by.join(" and ")
    }
}

/// Writes `sweep.csv` and `summary.md` into `out`. Fails if a sampler
/// or an uninstrumented run stored into code, which would make measuring
/// them once wrong.
pub fn write(plan: &Plan, results: &[Measured], out: &Path, quick: bool) -> Result<()> {
    for m in results {
        let sampler_stores: u64 = m
            .runs
            .iter()
            .filter(|r| !matches!(r.scheme, Scheme::Ephemeral { .. }))
            .map(|r| r.code_stores)
            .sum();
        let none_stores =
            m.code_stores_none + m.smc.iter().map(|p| p.code_stores_none).sum::<u64>();
        anyhow::ensure!(
            sampler_stores == 0 && none_stores == 0,
            "{}: the samplers stored {sampler_stores} times into code and the uninstrumented \
             runs {none_stores} times: they depend on smc_penalty and must be rerun per penalty",
            m.name
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let penalties: Vec<u32> = plan.smc_penalties.clone();
    let mut csv = String::from(
        "workload,smc_penalty,persistence,cycles,cycles_none,code_stores,cycles_per_site,\
         overhead_pct,samples,overlap_markov,counter_overlap_at_equal_overhead,\
         brr_overlap_at_equal_overhead,counter_cycles_per_site_at_equal_accuracy,\
         brr_cycles_per_site_at_equal_accuracy,dominated_by_counter,dominated_by_brr\n",
    );
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Ephemeral instrumentation: sensitivity to `smc_penalty`{}\n",
        if quick { " (quick run)" } else { "" }
    );
    let _ = writeln!(
        md,
        "`smc_penalty` is the cycles brr's timing model charges per store into executable \
         memory; its default, {}, is an assumption (`brr/timing.conf`). Here the \
         uninstrumented run and the re-hooked ephemeral runs at P = {} are repeated under \
         smc_penalty = {}, on the same workloads, builds and epoch ({} instructions) as \
         `../summary.md`. The counter and brr samplers are taken from that run and not \
         repeated: the model charges the penalty only on a store into code, and every sampler \
         run and every uninstrumented run here made none (checked when this file is written). \
         The recorded profiles do not depend on the penalty either (the epoch counts \
         instructions, not cycles), so the overlaps are the same in every column. Overhead % \
         = cycles / uninstrumented cycles − 1; cycles/site = (cycles − uninstrumented cycles) \
         / conditional-branch executions.\n",
        plan.timing.smc_penalty,
        plan.persistences
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        penalties
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        plan.epoch
    );
    let mut findings = String::from("## Findings (generated from the runs above)\n\n");
    for m in results {
        let _ = writeln!(md, "## {}\n", m.name);
        let _ = writeln!(
            md,
            "Overhead % (cycles/site) of the re-hooked ephemeral runs, per smc_penalty:\n"
        );
        let _ = writeln!(
            md,
            "| P | {} | stores into code | overlap markov |\n|---:|{}---:|---:|",
            penalties
                .iter()
                .map(|p| format!("penalty {p}"))
                .collect::<Vec<_>>()
                .join(" | "),
            "---:|".repeat(penalties.len())
        );
        for (i, &p) in plan.persistences.iter().enumerate() {
            let cells: Vec<String> = m
                .smc
                .iter()
                .map(|pt| {
                    let r = &pt.runs[i];
                    format!(
                        "{} ({})",
                        opt(overhead_pct(r, pt.cycles_none), 1),
                        opt(r.cycles_per_site, 3)
                    )
                })
                .collect();
            let first = &m.smc[0].runs[i];
            let _ = writeln!(
                md,
                "| {p} | {} | {} | {} |",
                cells.join(" | "),
                first.code_stores,
                opt(first.overlap_markov, 3)
            );
        }
        md.push('\n');
        let _ = writeln!(
            md,
            "Against the samplers at each penalty: their overlap interpolated at ephemeral's \
             cycles per site (same cost), their cycles per site interpolated at ephemeral's \
             markov overlap (same overlap), \"-\" outside their measured range; \"dominated \
             by\": a measured sampler interval that costs no more and is at least as \
             accurate.\n"
        );
        let _ = writeln!(
            md,
            "| penalty | P | ephemeral cycles/site | ephemeral overlap | counter overlap, same \
             cost | brr overlap, same cost | counter cycles/site, same overlap | brr \
             cycles/site, same overlap | dominated by |\n|---:|---:|---:|---:|---:|---:|---:|---:|---|"
        );
        // The ranking per penalty: which samplers dominate ephemeral at
        // each P.
        let mut rankings: Vec<(u32, Vec<[bool; 2]>)> = Vec::new();
        for pt in &m.smc {
            let mut ranking = Vec::new();
            for (i, &p) in plan.persistences.iter().enumerate() {
                let r = &pt.runs[i];
                let Some(a) = against(m, r) else { continue };
                ranking.push(a.dominated);
                let _ = writeln!(
                    csv,
                    "{},{},{p},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    m.name,
                    pt.penalty,
                    r.cycles.map_or_else(String::new, |c| c.to_string()),
                    pt.cycles_none,
                    r.code_stores,
                    opt(r.cycles_per_site, 4),
                    opt(overhead_pct(r, pt.cycles_none), 2),
                    r.samples,
                    opt(r.overlap_markov, 4),
                    opt(a.same_cost[0], 4),
                    opt(a.same_cost[1], 4),
                    opt(a.same_overlap[0], 4),
                    opt(a.same_overlap[1], 4),
                    a.dominated[0],
                    a.dominated[1]
                );
                let _ = writeln!(
                    md,
                    "| {} | {p} | {} | {} | {} | {} | {} | {} | {} |",
                    pt.penalty,
                    opt(r.cycles_per_site, 3),
                    opt(r.overlap_markov, 3),
                    opt(a.same_cost[0], 3),
                    opt(a.same_cost[1], 3),
                    opt(a.same_overlap[0], 3),
                    opt(a.same_overlap[1], 3),
                    dominated_label(&a)
                );
            }
            rankings.push((pt.penalty, ranking));
        }
        md.push('\n');
        findings.push_str(&workload_findings(plan, m, &rankings));
    }
    md.push_str(&findings);
    let write_file = |name: &str, text: &str| {
        let p = out.join(name);
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))
    };
    write_file("sweep.csv", &csv)?;
    write_file("summary.md", &md)?;
    Ok(())
}

/// One workload's bullet of the findings.
fn workload_findings(plan: &Plan, m: &Measured, rankings: &[(u32, Vec<[bool; 2]>)]) -> String {
    let mut s = String::new();
    let low: Vec<usize> = plan
        .persistences
        .iter()
        .enumerate()
        .filter(|(_, &p)| p <= 1000)
        .map(|(i, _)| i)
        .collect();
    let pcts = |pt: &Point| -> Vec<f64> {
        low.iter()
            .filter_map(|&i| overhead_pct(&pt.runs[i], pt.cycles_none))
            .collect()
    };
    let fmt = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let per_penalty: Vec<String> = m
        .smc
        .iter()
        .map(|pt| format!("{}: {} %", pt.penalty, fmt(&pcts(pt))))
        .collect();
    let inside: Vec<String> = m
        .smc
        .iter()
        .filter(|pt| {
            let v = pcts(pt);
            !v.is_empty() && v.iter().all(|x| (PAPER_LOW..=PAPER_HIGH).contains(x))
        })
        .map(|pt| pt.penalty.to_string())
        .collect();
    let ps: Vec<String> = low
        .iter()
        .map(|&i| plan.persistences[i].to_string())
        .collect();
    let _ = write!(
        s,
        "- **{}**: overhead at P = {} by smc_penalty (cycles per store into code) — {}. ",
        m.name,
        ps.join(", "),
        per_penalty.join("; ")
    );
    let each: Vec<String> = low
        .iter()
        .filter_map(|&i| {
            let at: Vec<String> = m
                .smc
                .iter()
                .filter(|pt| {
                    overhead_pct(&pt.runs[i], pt.cycles_none)
                        .is_some_and(|x| (PAPER_LOW..=PAPER_HIGH).contains(&x))
                })
                .map(|pt| pt.penalty.to_string())
                .collect();
            (!at.is_empty()).then(|| format!("P = {} at {}", plan.persistences[i], at.join(", ")))
        })
        .collect();
    let _ = write!(
        s,
        "In the paper's range, run by run: {}. ",
        if each.is_empty() {
            "none".to_string()
        } else {
            each.join("; ")
        }
    );
    // Where the lowest-penalty overhead already exceeds the range, no
    // penalty brings it in: the remainder is the stubs' and hooks' own
    // cost.
    let (Some(lo), Some(hi)) = (m.smc.first(), m.smc.last()) else {
        return s;
    };
    let floor = pcts(lo).into_iter().fold(f64::NEG_INFINITY, f64::max);
    if inside.is_empty() {
        let _ = write!(
            s,
            "At no swept penalty do all of them fall in the paper's {PAPER_LOW:.1}–{PAPER_HIGH:.1} % \
             range"
        );
        if floor > PAPER_HIGH {
            let _ = write!(
                s,
                "; even at smc_penalty = {} the largest is {floor:.1} %, so the excess over the \
                 paper is the stubs' and re-hooking's own cost, not the assumed penalty",
                lo.penalty
            );
        } else {
            // Overhead is close to linear in the penalty (one charge per
            // store): the penalty at which the largest reaches the top of
            // the range, between the lowest and highest swept.
            let top = pcts(hi).into_iter().fold(f64::NEG_INFINITY, f64::max);
            if top > floor && hi.penalty > lo.penalty {
                let at = f64::from(lo.penalty)
                    + (PAPER_HIGH - floor) * f64::from(hi.penalty - lo.penalty) / (top - floor);
                let _ = write!(
                    s,
                    "; by linear interpolation the largest reaches {PAPER_HIGH:.1} % at \
                     smc_penalty ≈ {at:.0}"
                );
            }
        }
        s.push_str(". ");
    } else {
        let _ = write!(
            s,
            "All of them lie in the paper's {PAPER_LOW:.1}–{PAPER_HIGH:.1} % range at smc_penalty = \
             {}. ",
            inside.join(", ")
        );
    }
    // The ranking: which samplers dominate ephemeral at each P.
    let describe = |r: &[bool; 2]| match r {
        [false, false] => "none",
        [true, false] => "counter",
        [false, true] => "brr",
        [true, true] => "both",
    };
    let show = |ranking: &[[bool; 2]]| ranking.iter().map(describe).collect::<Vec<_>>().join(" / ");
    if rankings.is_empty() {
        return s;
    }
    // Compared with the default penalty's ranking when it was swept.
    let (reference, first) = rankings
        .iter()
        .find(|(p, _)| *p == plan.timing.smc_penalty)
        .unwrap_or(&rankings[0]);
    let changed: Vec<String> = rankings
        .iter()
        .filter(|(_, r)| r != first)
        .map(|(p, r)| format!("at {p}: {}", show(r)))
        .collect();
    let all_p: Vec<String> = plan.persistences.iter().map(|p| p.to_string()).collect();
    if changed.is_empty() {
        let _ = writeln!(
            s,
            "The ranking against the samplers does not change with the penalty: the samplers \
             that dominate ephemeral (a measured interval as cheap and as accurate) at P = {} \
             are {} at every swept penalty.",
            all_p.join(", "),
            show(first)
        );
    } else {
        let _ = writeln!(
            s,
            "The ranking against the samplers changes with the penalty: the samplers that \
             dominate ephemeral at P = {} are {} at smc_penalty = {}, {}.",
            all_p.join(", "),
            show(first),
            reference,
            changed.join("; ")
        );
    }
    // How overhead moves with P under each penalty: the stores into code
    // are most numerous at small P, so a large enough penalty can turn the
    // main summary's "rises with P" around.
    let shape = |pt: &Point| {
        let c: Vec<u64> = pt.runs.iter().filter_map(|r| r.cycles).collect();
        if c.windows(2).all(|w| w[0] < w[1]) {
            "rises"
        } else if c.windows(2).all(|w| w[0] > w[1]) {
            "falls"
        } else {
            "is not monotonic"
        }
    };
    let shapes: Vec<String> = m
        .smc
        .iter()
        .map(|pt| format!("{} at {}", shape(pt), pt.penalty))
        .collect();
    let _ = writeln!(
        s,
        "  Overhead against P (= {}): {}.",
        all_p.join(", "),
        shapes.join(", ")
    );
    // The default penalty's rerun reproduces the main experiment's cycles
    // (the model is deterministic) when it is among the swept.
    if let Some(pt) = m
        .smc
        .iter()
        .find(|pt| pt.penalty == plan.timing.smc_penalty)
    {
        let same = plan.persistences.iter().enumerate().all(|(i, &p)| {
            m.runs
                .iter()
                .find(|r| {
                    r.scheme
                        == Scheme::Ephemeral {
                            persist: p,
                            rehook: true,
                        }
                })
                .is_some_and(|r| r.cycles == pt.runs[i].cycles)
        }) && pt.cycles_none == m.cycles_none;
        let _ = writeln!(
            s,
            "  The rerun at the default smc_penalty = {} {} the main experiment's cycles.",
            pt.penalty,
            if same {
                "reproduces exactly"
            } else {
                "DIFFERS from"
            }
        );
    }
    s
}

/// The main summary's note on how much its findings depend on
/// `smc_penalty` (None without a sweep): each workload's largest overhead
/// at P <= 1000 under the lowest swept penalty, and the cycles one store
/// into code added per cycle of penalty between the lowest and the highest
/// (1 when nothing hides the charge).
pub fn closing_note(plan: &Plan, results: &[Measured]) -> Option<String> {
    let (lo_p, hi_p) = (*plan.smc_penalties.first()?, *plan.smc_penalties.last()?);
    let mut floors = Vec::new();
    let mut above = true;
    let mut per_store: Vec<f64> = Vec::new();
    for m in results {
        let (lo, hi) = (m.smc.first()?, m.smc.last()?);
        let floor = plan
            .persistences
            .iter()
            .zip(&lo.runs)
            .filter(|(&p, _)| p <= 1000)
            .filter_map(|(_, r)| overhead_pct(r, lo.cycles_none))
            .fold(f64::NEG_INFINITY, f64::max);
        above &= floor > PAPER_HIGH;
        floors.push(format!("{floor:.1} % ({})", m.name));
        if hi_p > lo_p {
            for (a, b) in lo.runs.iter().zip(&hi.runs) {
                if let (Some(ca), Some(cb)) = (a.cycles, b.cycles) {
                    if a.code_stores > 0 {
                        per_store.push(
                            (cb as f64 - ca as f64)
                                / (a.code_stores as f64 * f64::from(hi_p - lo_p)),
                        );
                    }
                }
            }
        }
    }
    let range = if per_store.is_empty() {
        String::new()
    } else {
        let min = per_store.iter().copied().fold(f64::INFINITY, f64::min);
        let max = per_store.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!(
            " Between smc_penalty = {lo_p} and {hi_p} each store into code added {min:.3}–{max:.3} \
             cycles per cycle of penalty: the charge is paid in full, so overhead is linear in \
             the assumption."
        )
    };
    Some(format!(
        "How much this depends on `smc_penalty`: [smc/summary.md](smc/summary.md) repeats the \
         ephemeral runs at smc_penalty = {}. With smc_penalty = {lo_p} the largest overhead at \
         P ≤ 1000 is {}{}.{range}\n",
        plan.smc_penalties
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        floors.join(", "),
        if above {
            format!(", above the paper's {PAPER_LOW:.1}–{PAPER_HIGH:.1} % on every workload")
        } else {
            format!(" (the paper: {PAPER_LOW:.1}–{PAPER_HIGH:.1} %)")
        }
    ))
}
