//! Profile-guided trace layout of compiler assembly (`gcc -S`): the code
//! placement half of superblock formation (Hwu et al.; the scheduler the
//! ephemeral-instrumentation paper fed its profiles to).
//!
//! Within each procedure the basic blocks are grouped into traces by
//! mutual-most-likely selection (Chang and Hwu): block b's trace continues
//! with s when s is b's most likely successor and b is s's most likely
//! predecessor. Each trace is laid out contiguously, so that its likely
//! successors fall through: a conditional branch whose likely edge was the
//! taken one is inverted, a broken fall-through becomes an explicit `jmp`,
//! and a `jmp` to the block placed next is dropped. The trace holding the
//! entry block comes first (it must: the function's symbol labels it), then
//! the other traces, hottest seed first.
//!
//! What this is not: side entrances into traces are not removed by tail
//! duplication and no instruction is moved across a branch, so it is trace
//! layout, not a full superblock scheduler.
//!
//! Block weights come from each procedure's Markov chain (block-to-block
//! transition probabilities from the profiled branch biases, expected
//! visits per invocation by a dense solve), so every profile, exact counts
//! or the biases an ephemeral run records, is used the same way.
//!
//! Safety: only labels, instructions, alignment and `.cfi_*` directives may
//! lie in a procedure's body, plus `.section`…`.text` runs of data (jump
//! tables), which are moved after the body; anything else leaves the
//! procedure as it was. `.cfi_*` directives inside the body (other than
//! `.cfi_startproc`) are dropped from every procedure the pass accepts,
//! the identity layout included: they emit no code, and the unwind tables
//! would not describe reordered code (C programs here never unwind).

use super::asm::{is_jcc, parse_line, Line};
use std::collections::HashMap;
use std::fmt::Write as _;

/// Profiled weight of each site (numbered as `rewrite` numbers them: every
/// jcc of the unit in order): (taken, fall-through).
pub type SiteWeights = HashMap<usize, (f64, f64)>;

/// Reads an edge-profile file: one `UNIT SITE TAKEN FALLTHROUGH` per line
/// (the edge runtime's format; the weights may be fractional), `#`
/// comments and blank lines ignored. Returns the weights per unit as
/// written in the file.
pub fn parse_profile(text: &str) -> Result<HashMap<String, SiteWeights>, String> {
    let mut out: HashMap<String, SiteWeights> = HashMap::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 4 {
            return Err(format!(
                "profile line {}: expected UNIT SITE TAKEN FALLTHROUGH, got '{raw}'",
                n + 1
            ));
        }
        let site: usize = f[1]
            .parse()
            .map_err(|_| format!("profile line {}: bad site '{}'", n + 1, f[1]))?;
        let weight = |s: &str| -> Result<f64, String> {
            match s.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
                _ => Err(format!(
                    "profile line {}: bad weight '{s}' (a number ≥ 0)",
                    n + 1
                )),
            }
        };
        let w = (weight(f[2])?, weight(f[3])?);
        out.entry(f[0].to_string()).or_default().insert(site, w);
    }
    Ok(out)
}

/// The weights of `unit` in a parsed profile, found under its sanitised
/// name (as the edge runtime and the marker symbols write it) or as given.
/// Empty when the profile does not name the unit.
pub fn weights_for_unit(profile: &HashMap<String, SiteWeights>, unit: &str) -> SiteWeights {
    profile
        .get(&super::sanitize(unit))
        .or_else(|| profile.get(unit))
        .cloned()
        .unwrap_or_default()
}

/// The condition that is true exactly when `cc` is false.
pub fn invert_condition(cc: &str) -> Option<&'static str> {
    Some(match cc {
        "o" => "no",
        "no" => "o",
        "b" | "c" | "nae" => "nb",
        "nb" | "nc" | "ae" => "b",
        "e" | "z" => "ne",
        "ne" | "nz" => "e",
        "be" | "na" => "nbe",
        "nbe" | "a" => "be",
        "s" => "ns",
        "ns" => "s",
        "p" | "pe" => "np",
        "np" | "po" => "p",
        "l" | "nge" => "nl",
        "nl" | "ge" => "l",
        "le" | "ng" => "nle",
        "nle" | "g" => "le",
        _ => return None,
    })
}

/// What the pass did to one unit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Procedures whose body the pass accepted (laid out, possibly in the
    /// original order).
    pub procedures: usize,
    /// Procedures left exactly as they were (something in the body the
    /// pass does not understand), with the reason.
    pub skipped: Vec<(String, String)>,
    /// Procedures whose block order changed.
    pub reordered: usize,
    pub inverted: usize,
    pub jumps_added: usize,
    pub jumps_removed: usize,
}

/// The laid-out assembly.
#[derive(Clone, Debug)]
pub struct Layout {
    pub text: String,
    pub stats: Stats,
}

#[derive(Clone, Debug, PartialEq)]
enum Exit {
    /// jcc at `line` (index into the block's lines) with site number.
    Cond {
        cc: String,
        target: String,
        site: usize,
    },
    Jump(String),
    Indirect,
    Return,
    Fall,
}

#[derive(Clone, Debug)]
struct Block {
    labels: Vec<String>,
    /// Raw lines, in order, labels and alignment included; the transfer
    /// that ends the block (if any) is the last instruction line.
    lines: Vec<String>,
    /// Index in `lines` of the ending transfer.
    transfer: Option<usize>,
    exit: Exit,
    has_instr: bool,
}

impl Block {
    fn new() -> Block {
        Block {
            labels: Vec::new(),
            lines: Vec::new(),
            transfer: None,
            exit: Exit::Fall,
            has_instr: false,
        }
    }
}

fn is_text_section(d: &str) -> bool {
    d.strip_prefix(".section")
        .is_some_and(|r| r.trim_start().starts_with(".text"))
}

fn is_alignment(d: &str) -> bool {
    d.starts_with(".p2align") || d.starts_with(".align") || d.starts_with(".balign")
}

/// Lays out every procedure of `input` by `weights` (None: keep the
/// original block order: the baseline, which differs from the input only
/// by the dropped `.cfi_*` directives).
pub fn layout(input: &str, weights: Option<&SiteWeights>) -> Layout {
    let raw: Vec<&str> = input.lines().collect();
    let lines: Vec<Line> = raw.iter().map(|l| parse_line(l)).collect();
    // Site number of every jcc line.
    let mut site_of = HashMap::new();
    for (i, l) in lines.iter().enumerate() {
        if is_jcc(l).is_some() {
            let n = site_of.len();
            site_of.insert(i, n);
        }
    }
    // Labels named by data directives: jump-table entries.
    let mut table_labels = std::collections::HashSet::new();
    for l in &lines {
        if let Line::Directive(d) = l {
            if let Some(rest) = d.strip_prefix(".quad").or_else(|| d.strip_prefix(".long")) {
                for part in rest.split([',', '-', ' ', '\t']) {
                    if part.trim().starts_with(".L") {
                        table_labels.insert(part.trim().to_string());
                    }
                }
            }
        }
    }
    let mut out = String::with_capacity(input.len() + input.len() / 8);
    let mut stats = Stats::default();
    let mut fresh = 0usize;
    let mut i = 0;
    while i < raw.len() {
        let _ = writeln!(out, "{}", raw[i]);
        let name = match &lines[i] {
            Line::Label(n) if !n.starts_with(".L") => n.clone(),
            _ => {
                i += 1;
                continue;
            }
        };
        i += 1;
        match procedure(&raw, &lines, i, &site_of) {
            Ok((blocks, blobs, end)) => {
                stats.procedures += 1;
                let text = emit(
                    blocks,
                    blobs,
                    weights,
                    &table_labels,
                    &mut stats,
                    &mut fresh,
                );
                out.push_str(&text);
                i = end;
            }
            Err(why) if why.is_empty() => {}
            Err(why) => stats.skipped.push((name, why)),
        }
    }
    Layout { text: out, stats }
}

/// Parses the body of the procedure starting at line `start` into blocks
/// and data blobs; returns the index of the line that ends the body.
fn procedure(
    raw: &[&str],
    lines: &[Line],
    start: usize,
    site_of: &HashMap<usize, usize>,
) -> Result<(Vec<Block>, Vec<String>, usize), String> {
    let mut blocks = Vec::new();
    let mut blobs = Vec::new();
    let mut cur = Block::new();
    let mut i = start;
    let mut closed = false;
    let finish = |cur: &mut Block, blocks: &mut Vec<Block>| {
        blocks.push(std::mem::replace(cur, Block::new()));
    };
    while i < raw.len() {
        match &lines[i] {
            Line::Label(n) if n.starts_with(".L") => {
                if cur.has_instr || closed {
                    finish(&mut cur, &mut blocks);
                    closed = false;
                }
                cur.labels.push(n.clone());
                cur.lines.push(raw[i].to_string());
            }
            Line::Label(_) => break,
            Line::Directive(d) => {
                if d.starts_with(".cfi_startproc") {
                    cur.lines.push(raw[i].to_string());
                } else if d.starts_with(".cfi_endproc") {
                    break;
                } else if d.starts_with(".cfi_") {
                    // Dropped (see the module's comment).
                } else if is_alignment(d) {
                    if closed {
                        finish(&mut cur, &mut blocks);
                        closed = false;
                    }
                    cur.lines.push(raw[i].to_string());
                } else if d.starts_with(".section") && !is_text_section(d) {
                    // Data inside the function (a jump table) up to the
                    // return to .text.
                    let mut blob = String::new();
                    loop {
                        let _ = writeln!(blob, "{}", raw[i]);
                        i += 1;
                        match lines.get(i) {
                            // Back to the function's section (.text, or
                            // .text.startup for main).
                            Some(Line::Directive(d)) if d == ".text" || is_text_section(d) => {
                                let _ = writeln!(blob, "{}", raw[i]);
                                break;
                            }
                            Some(Line::Directive(d))
                                if d.starts_with(".section") || d.starts_with(".previous") =>
                            {
                                return Err(format!("line {}: data blob ends with '{d}'", i + 1));
                            }
                            Some(Line::Instr { .. }) => {
                                return Err(format!(
                                    "line {}: instruction in a data section",
                                    i + 1
                                ))
                            }
                            None => return Err("data blob runs to the end of the file".into()),
                            _ => {}
                        }
                    }
                    blobs.push(blob);
                } else if cur.has_instr || closed || !blocks.is_empty() {
                    // The end of the body: .size, .section .text.*, …
                    break;
                } else {
                    // A data object, not a procedure.
                    return Err(String::new());
                }
            }
            Line::Instr { mnemonic, operands } => {
                if closed {
                    finish(&mut cur, &mut blocks);
                    closed = false;
                }
                cur.has_instr = true;
                cur.lines.push(raw[i].to_string());
                let exit = if let Some((cc, target)) = is_jcc(&lines[i]) {
                    Some(Exit::Cond {
                        cc: cc.to_string(),
                        target: target.to_string(),
                        site: site_of[&i],
                    })
                } else if mnemonic.starts_with("jmp") {
                    Some(if operands.starts_with('*') {
                        Exit::Indirect
                    } else {
                        Exit::Jump(operands.clone())
                    })
                } else if mnemonic.starts_with("ret")
                    || mnemonic.starts_with("rep") && operands.starts_with("ret")
                {
                    Some(Exit::Return)
                } else if mnemonic.starts_with('j') || mnemonic.starts_with("loop") {
                    return Err(format!("line {}: transfer '{mnemonic}' not handled", i + 1));
                } else {
                    None
                };
                if let Some(e) = exit {
                    cur.exit = e;
                    cur.transfer = Some(cur.lines.len() - 1);
                    closed = true;
                }
            }
            Line::Other => cur.lines.push(raw[i].to_string()),
        }
        i += 1;
    }
    let mut trailer = String::new();
    if cur.has_instr || !cur.labels.is_empty() {
        blocks.push(cur);
    } else {
        // Trailing alignment or comments: emitted after every block.
        for l in &cur.lines {
            let _ = writeln!(trailer, "{l}");
        }
    }
    blobs.insert(0, trailer);
    if blocks.is_empty() || !blocks[0].has_instr {
        return Err("no instructions".into());
    }
    Ok((blocks, blobs, i))
}

/// Expected visits per invocation of each block, by solving
/// v = e_0 + v·Q (Q: block-to-block transition probabilities, each
/// block leaking 1e-12 to the exit so the system is regular).
fn visits(succ: &[Vec<(usize, f64)>]) -> Vec<f64> {
    let n = succ.len();
    let keep = 1.0 - 1e-12;
    // a = (I − Q)^T, row-major.
    let mut a = vec![0.0f64; n * n];
    for i in 0..n {
        a[i * n + i] = 1.0;
    }
    for (b, edges) in succ.iter().enumerate() {
        for &(t, p) in edges {
            a[t * n + b] -= p * keep;
        }
    }
    let mut x = vec![0.0f64; n];
    if n == 0 {
        return x;
    }
    x[0] = 1.0;
    for col in 0..n {
        let piv = (col..n)
            .max_by(|&i, &j| a[i * n + col].abs().total_cmp(&a[j * n + col].abs()))
            .unwrap_or(col);
        if piv != col {
            for k in 0..n {
                a.swap(col * n + k, piv * n + k);
            }
            x.swap(col, piv);
        }
        let d = a[col * n + col];
        if d.abs() < 1e-300 {
            continue;
        }
        for r in col + 1..n {
            let f = a[r * n + col] / d;
            if f != 0.0 {
                for k in col..n {
                    a[r * n + k] -= f * a[col * n + k];
                }
                x[r] -= f * x[col];
            }
        }
    }
    for r in (0..n).rev() {
        let s: f64 = (r + 1..n).map(|k| a[r * n + k] * x[k]).sum();
        let d = a[r * n + r];
        x[r] = if d.abs() < 1e-300 {
            0.0
        } else {
            (x[r] - s) / d
        };
    }
    x.iter().map(|v| v.max(0.0)).collect()
}

/// Block order by mutual-most-likely traces.
fn trace_order(
    blocks: &[Block],
    weights: &SiteWeights,
    table_labels: &std::collections::HashSet<String>,
) -> Vec<usize> {
    let n = blocks.len();
    let mut block_of: HashMap<&str, usize> = HashMap::new();
    for (b, blk) in blocks.iter().enumerate() {
        for l in &blk.labels {
            block_of.insert(l.as_str(), b);
        }
    }
    let tables: Vec<usize> = (0..n)
        .filter(|&b| blocks[b].labels.iter().any(|l| table_labels.contains(l)))
        .collect();
    // Successors with probabilities; the fall-through edge first.
    let mut succ: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n];
    for (b, blk) in blocks.iter().enumerate() {
        let next = (b + 1 < n).then_some(b + 1);
        match &blk.exit {
            Exit::Cond { target, site, .. } => {
                let p = match weights.get(site) {
                    Some(&(t, f)) if t + f > 0.0 => (t / (t + f)).clamp(1e-9, 1.0 - 1e-9),
                    _ => 0.5,
                };
                if let Some(f) = next {
                    succ[b].push((f, 1.0 - p));
                }
                if let Some(&t) = block_of.get(target.as_str()) {
                    succ[b].push((t, p));
                }
            }
            Exit::Jump(t) => {
                if let Some(&t) = block_of.get(t.as_str()) {
                    succ[b].push((t, 1.0));
                }
            }
            Exit::Indirect => {
                for &t in &tables {
                    succ[b].push((t, 1.0 / tables.len() as f64));
                }
            }
            Exit::Fall => {
                if let Some(f) = next {
                    succ[b].push((f, 1.0));
                }
            }
            Exit::Return => {}
        }
    }
    let v = visits(&succ);
    // Most likely successor (ties: the first listed, the fall-through) and
    // most likely predecessor by edge weight v[b]·p.
    let mut best_succ: Vec<Option<(usize, f64)>> = vec![None; n];
    let mut best_pred: Vec<Option<(usize, f64)>> = vec![None; n];
    for b in 0..n {
        for &(s, p) in &succ[b] {
            if s == b {
                continue;
            }
            let w = v[b] * p;
            if best_succ[b].is_none_or(|(_, bw)| w > bw) {
                best_succ[b] = Some((s, w));
            }
            if best_pred[s].is_none_or(|(_, bw)| w > bw) {
                best_pred[s] = Some((b, w));
            }
        }
    }
    let mut seeds: Vec<usize> = (0..n).collect();
    // Hottest first; the entry block before any other of equal weight.
    seeds.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
    let mut placed = vec![false; n];
    let mut traces: Vec<Vec<usize>> = Vec::new();
    for &seed in &seeds {
        if placed[seed] {
            continue;
        }
        placed[seed] = true;
        let mut trace = std::collections::VecDeque::from([seed]);
        let mut cur = seed;
        while let Some((s, w)) = best_succ[cur] {
            if placed[s] || s == 0 || w <= 0.0 || best_pred[s].map(|p| p.0) != Some(cur) {
                break;
            }
            placed[s] = true;
            trace.push_back(s);
            cur = s;
        }
        cur = seed;
        while cur != 0 {
            let Some((p, w)) = best_pred[cur] else { break };
            if placed[p] || w <= 0.0 || best_succ[p].map(|s| s.0) != Some(cur) {
                break;
            }
            placed[p] = true;
            trace.push_front(p);
            cur = p;
        }
        let mut trace: Vec<usize> = trace.into_iter().collect();
        rotate_loop(&mut trace, &best_succ, blocks);
        traces.push(trace);
    }
    // The entry's trace first (the entry heads it: no trace grows
    // backwards past block 0), the others in the order they were formed.
    let first = traces.iter().position(|t| t[0] == 0).unwrap_or(0);
    let mut order: Vec<usize> = traces.remove(first);
    for t in traces {
        order.extend(t);
    }
    // A last block that falls off the end (after a call that does not
    // return) stays last.
    let last = n - 1;
    if matches!(blocks[last].exit, Exit::Fall | Exit::Cond { .. }) && order.last() != Some(&last) {
        order.retain(|&b| b != last);
        order.push(last);
    }
    order
}

/// A trace that is a loop (its last block's likely successor is its head)
/// is rotated so that the loop is closed by a conditional branch, as the
/// compiler's bottom-tested loops are: the wrap-around edge is taken
/// whatever the layout, but from a block ending in a jcc it costs no
/// added `jmp`. The last block ending in a jcc becomes the trace's end
/// (no rotation when the last block already ends in one, or none does, or
/// the trace holds the entry block, which must stay first).
fn rotate_loop(trace: &mut [usize], best_succ: &[Option<(usize, f64)>], blocks: &[Block]) {
    let m = trace.len();
    if m < 2 || trace.contains(&0) {
        return;
    }
    if best_succ[trace[m - 1]].map(|s| s.0) != Some(trace[0]) {
        return;
    }
    let is_cond = |b: usize| matches!(blocks[b].exit, Exit::Cond { .. });
    if is_cond(trace[m - 1]) {
        return;
    }
    if let Some(i) = (0..m - 1).rev().find(|&i| is_cond(trace[i])) {
        trace.rotate_left(i + 1);
    }
}

fn emit(
    mut blocks: Vec<Block>,
    blobs: Vec<String>,
    weights: Option<&SiteWeights>,
    table_labels: &std::collections::HashSet<String>,
    stats: &mut Stats,
    fresh: &mut usize,
) -> String {
    let n = blocks.len();
    let order: Vec<usize> = match weights {
        Some(w) => trace_order(&blocks, w, table_labels),
        None => (0..n).collect(),
    };
    debug_assert_eq!(order.len(), n);
    if order.iter().enumerate().any(|(k, &b)| k != b) {
        stats.reordered += 1;
    }
    // A label for every block that may become a jump target.
    let label_of = |blocks: &mut Vec<Block>, b: usize, fresh: &mut usize| -> String {
        if let Some(l) = blocks[b].labels.first() {
            return l.clone();
        }
        *fresh += 1;
        let l = format!(".Lbrr_tl_{fresh}");
        blocks[b].labels.push(l.clone());
        // Before the block's first instruction, after its alignment.
        let at = blocks[b]
            .lines
            .iter()
            .position(|s| matches!(parse_line(s), Line::Instr { .. }))
            .unwrap_or(0);
        blocks[b].lines.insert(at, format!("{l}:"));
        if let Some(t) = blocks[b].transfer.as_mut() {
            if *t >= at {
                *t += 1;
            }
        }
        l
    };
    // Rewritten ends of blocks: (block, replacement of the transfer line or
    // None to keep it, lines appended).
    let mut tails: Vec<(Option<Option<String>>, Vec<String>)> = vec![(None, Vec::new()); n];
    for (k, &b) in order.iter().enumerate() {
        let next = order.get(k + 1).copied();
        let fall = (b + 1 < n).then_some(b + 1);
        let exit = blocks[b].exit.clone();
        match exit {
            Exit::Cond { cc, target, site } => {
                let Some(f) = fall else { continue };
                if next == Some(f) {
                    continue;
                }
                let taken_block = blocks.iter().position(|blk| blk.labels.contains(&target));
                let inv = invert_condition(&cc);
                if let (true, Some(inv)) = (taken_block.is_some() && taken_block == next, inv) {
                    let fl = label_of(&mut blocks, f, fresh);
                    tails[b].0 = Some(Some(format!("\tj{inv}\t{fl}")));
                    stats.inverted += 1;
                } else {
                    // Neither successor is placed next: the jcc goes to
                    // the likelier one, the added jmp to the other (a loop
                    // closed by its fall-through edge becomes a
                    // bottom-tested loop).
                    let p_taken = weights
                        .and_then(|w| w.get(&site))
                        .filter(|(t, f)| t + f > 0.0)
                        .map_or(1.0, |(t, f)| t / (t + f));
                    let fl = label_of(&mut blocks, f, fresh);
                    match inv {
                        Some(inv) if p_taken < 0.5 && taken_block.is_some() => {
                            tails[b].0 = Some(Some(format!("\tj{inv}\t{fl}")));
                            tails[b].1.push(format!("\tjmp\t{target}"));
                            stats.inverted += 1;
                        }
                        _ => tails[b].1.push(format!("\tjmp\t{fl}")),
                    }
                    stats.jumps_added += 1;
                }
            }
            Exit::Jump(t) => {
                if let Some(nb) = next {
                    if blocks[nb].labels.contains(&t) {
                        tails[b].0 = Some(None);
                        stats.jumps_removed += 1;
                    }
                }
            }
            Exit::Fall => {
                if let Some(f) = fall {
                    if next != Some(f) {
                        let fl = label_of(&mut blocks, f, fresh);
                        tails[b].1.push(format!("\tjmp\t{fl}"));
                        stats.jumps_added += 1;
                    }
                }
            }
            Exit::Indirect | Exit::Return => {}
        }
    }
    // Does the block placed before `b` now fall into it where it did not?
    let falls = |p: usize| {
        tails[p].1.is_empty()
            && match tails[p].0 {
                Some(_) => true,
                None => matches!(blocks[p].exit, Exit::Cond { .. } | Exit::Fall),
            }
    };
    let mut out = String::new();
    for (k, &b) in order.iter().enumerate() {
        let prev = k.checked_sub(1).map(|j| order[j]);
        let new_fall = prev.is_some_and(|p| p + 1 != b && falls(p));
        let blk = &blocks[b];
        for (j, line) in blk.lines.iter().enumerate() {
            if new_fall {
                if let Line::Directive(d) = parse_line(line) {
                    if is_alignment(&d) {
                        // No padding to execute on the new fall-through.
                        continue;
                    }
                }
            }
            if Some(j) == blk.transfer {
                match &tails[b].0 {
                    Some(Some(s)) => {
                        let _ = writeln!(out, "{s}");
                        continue;
                    }
                    Some(None) => continue,
                    None => {}
                }
            }
            let _ = writeln!(out, "{line}");
        }
        for l in &tails[b].1 {
            let _ = writeln!(out, "{l}");
        }
    }
    for b in blobs {
        out.push_str(&b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // f: a loop (site 1 the back edge) around a branch (site 0) whose usual
    // edge is the taken one; the jump table is inline, as gcc emits it.
    const F: &str = "\t.text\n\t.globl\tf\n\t.type\tf, @function\nf:\n.LFB0:\n\t.cfi_startproc\n\tmovl\t$0, %eax\n\t.p2align 4,,10\n.L2:\n\ttestl\t%edi, %edi\n\tje\t.L3\n\taddl\t$1, %eax\n\tjmp\t.L4\n.L3:\n\tsubl\t$1, %eax\n\t.cfi_def_cfa_offset 8\n.L4:\n\tsubl\t$1, %esi\n\tjne\t.L2\n\tret\n\t.cfi_endproc\n.LFE0:\n\t.size\tf, .-f\n";

    #[test]
    fn the_identity_layout_only_drops_cfi() {
        let l = layout(F, None);
        assert_eq!(l.text, F.replace("\t.cfi_def_cfa_offset 8\n", ""));
        assert_eq!(l.stats.procedures, 1);
        assert_eq!(l.stats.reordered, 0);
    }

    #[test]
    fn the_likely_taken_edge_becomes_the_fall_through() {
        // Site 0 (je .L3) taken 90 times in 100.
        let w = SiteWeights::from([(0, (90.0, 10.0)), (1, (99.0, 1.0))]);
        let l = layout(F, Some(&w));
        assert_eq!(l.stats.inverted, 1, "{}", l.text);
        // .L2 then .L3 (now the fall-through of jne), .L4; the rare block
        // goes after, jumping back to .L4.
        let t = &l.text;
        let at = |s: &str| t.find(s).unwrap_or_else(|| panic!("{s} in\n{t}"));
        assert!(at("\tjne\t.Lbrr_tl_") < at(".L3:"));
        assert!(at(".L3:") < at(".L4:"));
        assert!(at(".L4:") < at("addl\t$1, %eax"));
        assert!(t.contains("\taddl\t$1, %eax\n\tjmp\t.L4\n"));
        // With the opposite bias nothing is inverted: the usual block
        // (addl) keeps falling in from the branch, and its jmp to .L4
        // goes, .L4 now placed right after it; the rare block moves out.
        let w2 = SiteWeights::from([(0, (10.0, 90.0)), (1, (99.0, 1.0))]);
        let l2 = layout(F, Some(&w2));
        assert_eq!(l2.stats.inverted, 0);
        assert_eq!(l2.stats.jumps_removed, 1);
        assert!(l2.text.contains("\taddl\t$1, %eax\n.L4:\n"), "{}", l2.text);
        assert!(
            l2.text.contains("\tsubl\t$1, %eax\n\tjmp\t.L4\n"),
            "{}",
            l2.text
        );
    }

    #[test]
    fn conditions_invert_in_pairs() {
        for cc in [
            "o", "b", "e", "be", "s", "p", "l", "le", "a", "g", "ge", "nz",
        ] {
            let i = invert_condition(cc).unwrap();
            let back = invert_condition(i).unwrap();
            assert_eq!(invert_condition(back), Some(i), "{cc}");
        }
        assert_eq!(invert_condition("mp"), None);
    }

    #[test]
    fn a_bad_profile_line_is_named() {
        let e = parse_profile("a.c 0 1 2\na.c 1 x 2\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("'x'"), "{e}");
        let e = parse_profile("a.c 0 1\n").unwrap_err();
        assert!(e.contains("line 1"), "{e}");
        let p = parse_profile("# comment\na_c 3 1.5 2\n\n").unwrap();
        assert_eq!(p["a_c"][&3], (1.5, 2.0));
    }
}
