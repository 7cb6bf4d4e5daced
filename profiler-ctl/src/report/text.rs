//! `report`'s text form: tables for a person.

use std::fmt::Write as _;

use super::{FunctionRow, Report};

fn percent(x: f64) -> String {
    format!("{:5.1}%", 100.0 * x)
}

/// The report as tables for a person.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "breakdance report: {} (`{}`): {} traces ({} distinct), {} taken branches, {} instructions covered",
        r.dir.display(),
        r.command,
        r.traces,
        r.distinct_traces,
        r.taken_branches,
        r.instructions
    );
    let table = |out: &mut String, title: &str, rows: &[FunctionRow]| {
        let _ = writeln!(out, "\n{title}");
        let _ = writeln!(
            out,
            "  {:>6}  {:>12}  {:>6}  {:>10}  function (module)",
            "instr", "instructions", "taken", "branches"
        );
        for row in rows {
            let _ = writeln!(
                out,
                "  {}  {:>12}  {}  {:>10}  {} ({})",
                percent(row.instructions_share),
                row.instructions,
                percent(row.taken_branches_share),
                row.taken_branches,
                row.function,
                row.module
            );
        }
    };
    table(
        &mut out,
        "Hottest functions by instructions covered",
        &r.by_instructions,
    );
    table(
        &mut out,
        "Hottest functions by taken branches",
        &r.by_taken_branches,
    );
    let _ = writeln!(out, "\nHottest taken edges");
    let _ = writeln!(out, "  {:>6}  {:>10}  edge", "share", "count");
    for e in &r.edges {
        let line = e
            .source_line
            .as_ref()
            .map_or(String::new(), |l| format!("  [{l}]"));
        let _ = writeln!(
            out,
            "  {}  {:>10}  {} → {}{line}",
            percent(e.share),
            e.count,
            e.from,
            e.to
        );
    }
    if !r.call_paths.is_empty() {
        let _ = writeln!(
            out,
            "\nHottest call paths (stacks at each trace's newest branch)"
        );
        let _ = writeln!(out, "  {:>6}  {:>8}  path (root first)", "share", "samples");
        for p in &r.call_paths {
            let _ = writeln!(out, "  {}  {:>8}  {}", percent(p.share), p.samples, p.path);
        }
    }
    let _ = writeln!(out, "\nModules: what was recorded and what was lost");
    let _ = writeln!(
        out,
        "  {:>10}  {:>8}  {:>12}  {:>11}  module",
        "branches", "ranges", "instructions", "ranges lost"
    );
    for m in &r.modules {
        let why = m
            .unusable
            .as_ref()
            .map_or(String::new(), |w| format!(" (not read: {w})"));
        let _ = writeln!(
            out,
            "  {:>10}  {:>8}  {:>12}  {:>11}  {}{why}",
            m.counts.branches,
            m.counts.ranges,
            m.counts.instructions,
            m.counts.ranges_lost,
            m.path.display()
        );
    }
    let list = |pairs: &[(&str, u64)]| {
        if pairs.is_empty() {
            "none".to_string()
        } else {
            pairs
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let _ = writeln!(
        out,
        "  traces ended early (kept, shorter): {}",
        list(&r.lost.aborted_traces)
    );
    let _ = writeln!(out, "  dropped before writing: {}", list(&r.lost.drops));
    let _ = writeln!(
        out,
        "  taken branches with an end outside every file mapping: {}",
        r.lost.branches_outside_mappings
    );
    out
}
