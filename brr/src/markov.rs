//! Edge weights from branch biases (ephemeral instrumentation records the
//! bias of each conditional branch, not how often it runs): each procedure's
//! control-flow graph, recovered from the compiler's assembly, becomes a
//! Markov chain with an edge from its exit back to its entry; the chain's
//! stationary flow, scaled to one pass from entry to exit, gives every
//! edge's expected executions per invocation.
//!
//! The flow is solved directly: with Q the block-to-block transition matrix
//! (exits removed), the expected visits per invocation v satisfy
//! v = e_entry + v·Q, a dense linear system solved by Gaussian elimination
//! with partial pivoting. (Power iteration on the chain converges too slowly
//! for loops that run a million times per invocation.)

use crate::instrument::asm::{is_jcc, parse_line, Line};
use std::collections::{HashMap, HashSet};

/// How a basic block ends.
#[derive(Clone, Debug, PartialEq)]
pub enum Exit {
    /// Conditional branch at site `site`: taken to block `taken` (None:
    /// outside the procedure, counted as its exit), else the next block.
    Cond { site: usize, taken: Option<usize> },
    /// Unconditional transfer to a block, or None: out of the procedure.
    Jump(Option<usize>),
    /// Indirect jump: one of these blocks, equally likely (jump-table
    /// entries that name the procedure's labels); empty: the exit.
    Indirect(Vec<usize>),
    /// Falls into the next block (the exit after the last one).
    Fall,
    /// `ret`.
    Return,
}

/// One procedure: its blocks in source order (block 0 is the entry).
#[derive(Clone, Debug)]
pub struct Procedure {
    pub name: String,
    pub exits: Vec<Exit>,
}

/// The procedures of one unit of gcc/clang `-S` output, with sites numbered
/// as `instrument::rewrite` numbers them (every jcc, in order).
pub fn procedures(asm: &str) -> Vec<Procedure> {
    let lines: Vec<Line> = asm.lines().map(parse_line).collect();
    // Labels named by data directives: jump-table entries.
    let mut table_labels: HashSet<String> = HashSet::new();
    for l in &lines {
        if let Line::Directive(d) = l {
            if let Some(rest) = d.strip_prefix(".quad").or_else(|| d.strip_prefix(".long")) {
                for part in rest.split([',', '-', ' ', '\t']) {
                    let p = part.trim();
                    if p.starts_with(".L") {
                        table_labels.insert(p.to_string());
                    }
                }
            }
        }
    }
    struct Raw {
        name: String,
        exits: Vec<RawExit>,
        labels: HashMap<String, usize>,
        tables: Vec<String>,
    }
    enum RawExit {
        Cond(usize, String),
        Jump(String),
        Indirect,
        Fall,
        Return,
    }
    let mut procs: Vec<Raw> = Vec::new();
    let mut open = false;
    let mut pending: Vec<String> = Vec::new();
    let mut site = 0usize;
    for l in &lines {
        match l {
            Line::Label(n) => {
                if !n.starts_with(".L") {
                    procs.push(Raw {
                        name: n.clone(),
                        exits: Vec::new(),
                        labels: HashMap::new(),
                        tables: Vec::new(),
                    });
                    pending.clear();
                } else if let Some(p) = procs.last_mut() {
                    if open {
                        // The open block falls into the one this label starts.
                        p.exits.push(RawExit::Fall);
                    }
                    if table_labels.contains(n) {
                        p.tables.push(n.clone());
                    }
                }
                open = false;
                pending.push(n.clone());
            }
            Line::Instr { mnemonic, operands } => {
                let Some(p) = procs.last_mut() else {
                    if is_jcc(l).is_some() {
                        site += 1;
                    }
                    continue;
                };
                if !open {
                    let b = p.exits.len();
                    for name in pending.drain(..) {
                        p.labels.insert(name, b);
                    }
                    open = true;
                }
                let exit = if let Some((_, target)) = is_jcc(l) {
                    site += 1;
                    Some(RawExit::Cond(site - 1, target.to_string()))
                } else if mnemonic.starts_with("jmp") {
                    Some(if operands.starts_with('*') {
                        RawExit::Indirect
                    } else {
                        RawExit::Jump(operands.clone())
                    })
                } else if mnemonic.starts_with("ret") {
                    Some(RawExit::Return)
                } else {
                    None
                };
                if let Some(e) = exit {
                    p.exits.push(e);
                    open = false;
                }
            }
            _ => {}
        }
    }
    if open {
        if let Some(p) = procs.last_mut() {
            p.exits.push(RawExit::Fall);
        }
    }
    procs
        .into_iter()
        .filter(|p| !p.exits.is_empty())
        .map(|p| {
            let block = |name: &str| p.labels.get(name).copied();
            let mut tables: Vec<usize> = p.tables.iter().filter_map(|n| block(n)).collect();
            tables.sort_unstable();
            tables.dedup();
            let exits = p
                .exits
                .iter()
                .map(|e| match e {
                    RawExit::Cond(s, t) => Exit::Cond {
                        site: *s,
                        taken: block(t),
                    },
                    RawExit::Jump(t) => Exit::Jump(block(t)),
                    RawExit::Indirect => Exit::Indirect(tables.clone()),
                    RawExit::Fall => Exit::Fall,
                    RawExit::Return => Exit::Return,
                })
                .collect();
            Procedure {
                name: p.name,
                exits,
            }
        })
        .collect()
}

/// Expected executions per invocation of each site's (taken, fall-through)
/// edge, given each site's probability of being taken (`p_taken`; a site
/// without one counts as 1/2). Probabilities are clamped to
/// [1e-9, 1 − 1e-9] and every block leaks 1e-12 to the exit, so a loop
/// seen always taken still ends and the system stays regular.
pub fn edge_flows(proc: &Procedure, p_taken: &HashMap<usize, f64>) -> Vec<(usize, f64, f64)> {
    let n = proc.exits.len();
    // a[i][j]: (I − Q)^T, solved for v with a·v = e_0.
    let mut a = vec![vec![0.0f64; n]; n];
    for (i, row) in a.iter_mut().enumerate() {
        row[i] = 1.0;
    }
    let keep = 1.0 - 1e-12;
    let mut add = |from: usize, to: Option<usize>, p: f64| {
        if let Some(t) = to.filter(|&t| t < n) {
            a[t][from] -= p * keep;
        }
    };
    for (b, e) in proc.exits.iter().enumerate() {
        let next = (b + 1 < n).then_some(b + 1);
        match e {
            Exit::Cond { site, taken } => {
                let p = p_taken
                    .get(site)
                    .copied()
                    .unwrap_or(0.5)
                    .clamp(1e-9, 1.0 - 1e-9);
                add(b, *taken, p);
                add(b, next, 1.0 - p);
            }
            Exit::Jump(t) => add(b, *t, 1.0),
            Exit::Indirect(ts) => {
                for &t in ts {
                    add(b, Some(t), 1.0 / ts.len() as f64);
                }
            }
            Exit::Fall => add(b, next, 1.0),
            Exit::Return => {}
        }
    }
    let mut rhs = vec![0.0f64; n];
    rhs[0] = 1.0;
    let v = solve(a, rhs);
    proc.exits
        .iter()
        .enumerate()
        .filter_map(|(b, e)| match e {
            Exit::Cond { site, .. } => {
                let p = p_taken
                    .get(site)
                    .copied()
                    .unwrap_or(0.5)
                    .clamp(1e-9, 1.0 - 1e-9);
                let visits = v[b].max(0.0);
                Some((*site, visits * p, visits * (1.0 - p)))
            }
            _ => None,
        })
        .collect()
}

/// Solves a·x = b by Gaussian elimination with partial pivoting (a is
/// regular by construction in `edge_flows`).
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Vec<f64> {
    let n = b.len();
    for col in 0..n {
        let piv = (col..n)
            .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
            .unwrap();
        a.swap(col, piv);
        b.swap(col, piv);
        let d = a[col][col];
        if d.abs() < 1e-300 {
            continue;
        }
        let pivot_row = a[col].clone();
        for i in col + 1..n {
            let f = a[i][col] / d;
            if f != 0.0 {
                for (x, y) in a[i][col..].iter_mut().zip(&pivot_row[col..]) {
                    *x -= f * y;
                }
                b[i] -= f * b[col];
            }
        }
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let s: f64 = (i + 1..n).map(|j| a[i][j] * x[j]).sum();
        x[i] = if a[i][i].abs() < 1e-300 {
            0.0
        } else {
            (b[i] - s) / a[i][i]
        };
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    // f: a loop of 10 (site 0 the back edge, taken 0.9), inside it a branch
    // (site 1) taken 0.25.
    const LOOP: &str = "\t.text\nf:\n\tmovl\t$0, %eax\n.L2:\n\ttestl\t%edi, %edi\n\tje\t.L3\n\taddl\t$1, %eax\n.L3:\n\tsubl\t$1, %esi\n\tjne\t.L2\n\tret\n\t.section\t.rodata\n.L9:\n\t.quad\t.L2\n";

    #[test]
    fn a_loop_of_ten_gives_ten_visits_per_invocation() {
        let procs = procedures(LOOP);
        assert_eq!(procs.len(), 1);
        let p = &procs[0];
        assert_eq!(p.name, "f");
        assert_eq!(
            p.exits,
            vec![
                Exit::Fall,
                Exit::Cond {
                    site: 0,
                    taken: Some(3)
                },
                Exit::Fall,
                Exit::Cond {
                    site: 1,
                    taken: Some(1)
                },
                Exit::Return
            ]
        );
        let probs = HashMap::from([(0, 0.25), (1, 0.9)]);
        let flows = edge_flows(p, &probs);
        let get = |s: usize| flows.iter().find(|f| f.0 == s).unwrap();
        // The back edge: 10 visits, 9 taken, 1 out.
        assert!((get(1).1 - 9.0).abs() < 1e-6, "{flows:?}");
        assert!((get(1).2 - 1.0).abs() < 1e-6, "{flows:?}");
        assert!((get(0).1 - 2.5).abs() < 1e-6, "{flows:?}");
        assert!((get(0).2 - 7.5).abs() < 1e-6, "{flows:?}");
    }
}
