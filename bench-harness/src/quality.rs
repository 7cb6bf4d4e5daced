//! `quality`: how close breakdance's profile is to the exact one (the
//! paper's Table 4, against callgrind instead of hardware LBR).
//!
//! Per workload, the training input runs once under
//! `valgrind --tool=callgrind --dump-instr=yes --collect-jumps=yes` (exact
//! instruction and taken-transfer counts) and, at each sampling period, under
//! the tracer. In the module where the work is done the report compares:
//! instruction weights implied by the recorded fall-through ranges against
//! exact execution counts; recorded taken edges against exact taken counts;
//! the count of recorded entries that are not real taken transfers (the
//! validator) and on edges callgrind never saw taken (both must be 0); and the
//! function-level similarity of the AutoFDO profiles create_llvm_prof builds
//! from each (`llvm-profdata overlap --sample`).

use crate::autofdo::{create_llvm_prof, exact_afdo, merge_afdo, profile_similarity, tracer_afdo};
use crate::profiler::Tracer;
use crate::report::{fmt, Report, Table};
use crate::runner::{self, Cmd};
use crate::workloads::{self, Input, Workload, Workspace};
use crate::Options;
use anyhow::{Context, Result};
use bench_harness::callgrind::{self, ObjectProfile};
use bench_harness::elf::{ElfModule, ModuleMap};
use bench_harness::overlap::{add_module_traces, instruction_weights, overlap, Range};
use bench_harness::{perfscript, validate, Branch};
use breakdance_charts::{LineChart, Series};
use iced_x86::FlowControl;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const PERIODS: [u64; 4] = [1_000_000, 3_000_000, 10_000_000, 30_000_000];
const QUICK_PERIODS: [u64; 2] = [1_000_000, 4_000_000];
/// Profiled runs merged into one profile per period.
const RUNS: usize = 3;
const QUICK_RUNS: usize = 1;

/// The exact reference for one workload: callgrind's counts in the hot module.
pub struct Reference {
    pub module: ElfModule,
    pub counts: ObjectProfile,
}

/// Runs (or reuses) callgrind on `w`'s input; the output is cached next to
/// the builds and redone when the binary is newer.
pub fn reference(ws: &Workspace, w: &Workload, input: Input) -> Result<Reference> {
    let valgrind = runner::require_tool("valgrind", "valgrind")?;
    let dir = ws.cache.join("callgrind");
    std::fs::create_dir_all(&dir)?;
    let tag = if ws.quick { "quick" } else { "full" };
    let out = dir.join(format!("{}-{input:?}-{tag}.out", w.name()));
    let cmd = w.command(input);
    let key_file = out.with_extension("key");
    let key = fingerprint(&cmd);
    let fresh = out.is_file() && std::fs::read_to_string(&key_file).ok().as_deref() == Some(&key);
    if !fresh {
        eprintln!("[quality] {}: running callgrind (slow: ~50x)", w.name());
        runner::run(&cmd.wrapped(&valgrind, &callgrind::valgrind_args(&out)))?;
        std::fs::write(&key_file, &key)?;
    }
    let profile = callgrind::parse_file(&out).map_err(|e| anyhow::anyhow!("{e}"))?;
    let module = ElfModule::load(&w.hot_module).map_err(|e| anyhow::anyhow!("{e}"))?;
    let base = module.basename().to_string();
    let counts = profile
        .object_by_basename(&base)
        .map(|(_, o)| o.clone())
        .with_context(|| format!("callgrind output {} has no object {base}", out.display()))?;
    Ok(Reference { module, counts })
}

/// What a cached reference depends on: the command line, and the size and
/// modification time of the program and of every file argument.
fn fingerprint(cmd: &Cmd) -> String {
    let mut key = cmd.display();
    let files =
        std::iter::once(cmd.program.as_os_str()).chain(cmd.args.iter().map(|a| a.as_os_str()));
    for f in files {
        if let Ok(m) = std::fs::metadata(f) {
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            key += &format!("\n{} {} {mtime}", Path::new(f).display(), m.len());
        }
    }
    key
}

/// What breakdance recorded in the hot module, in its link-time addresses.
#[derive(Default)]
pub struct Recorded {
    pub ranges: Vec<Range>,
    pub edges: BTreeMap<Branch, u64>,
    pub entries: u64,
    pub violations: u64,
}

/// Reads the perf.script files of profiled runs and keeps what lies in the
/// module `module` (matched by path).
pub fn recorded(scripts: &[PathBuf], module: &ElfModule) -> Result<Recorded> {
    let mut rec = Recorded::default();
    for path in scripts {
        let script = perfscript::parse_file(path).map_err(|e| anyhow::anyhow!("{e}"))?;
        let (map, _errors) = ModuleMap::from_mmaps(&script.mmaps);
        let report = validate::validate(&script, &map);
        rec.violations += report.total_violations();
        rec.entries += script.entry_count();
        let hot = map
            .modules
            .iter()
            .position(|m| m.path == module.path || m.basename() == module.basename());
        let Some(hot) = hot else {
            continue;
        };
        add_module_traces(&script, &map, hot, &mut rec.edges, &mut rec.ranges);
    }
    Ok(rec)
}

/// Similarity scores of one profile against the reference.
pub struct Scores {
    pub instruction_overlap: f64,
    /// Overlap of instruction weights summed per function (ELF symbols).
    pub function_overlap: f64,
    pub edge_overlap: f64,
    /// Recorded entries (of the non-return, non-PLT ones compared) on
    /// edges callgrind never saw taken.
    pub unseen: u64,
    /// Recorded entries compared with callgrind's taken edges.
    pub compared: u64,
    /// Of `unseen`, the entries on branches that test where a pointer
    /// lies (`pointer_range_test`): which way they go depends on the
    /// address layout, which differs under valgrind and between runs.
    pub unseen_layout_dependent: u64,
    /// The heaviest of those edges, described for the report.
    pub unseen_examples: Vec<String>,
    /// Validator violations.
    pub invalid: u64,
}

pub fn score(r: &Reference, rec: &Recorded) -> Scores {
    let weights = instruction_weights(&rec.ranges, &r.module.instructions().starts);
    let instruction_overlap = overlap(&weights, &r.counts.instructions);
    let function_overlap = overlap(
        &per_function(&r.module, &weights),
        &per_function(&r.module, &r.counts.instructions),
    );
    // Callgrind does not report returns as jumps; compare the kinds it sees.
    let is_return = |a: u64| {
        r.module
            .decode_at(a)
            .is_some_and(|i| i.flow_control() == FlowControl::Return)
    };
    let exact = r.counts.taken_edges();
    // Edges into or out of code callgrind books elsewhere have no
    // counterpart in the reference.
    let unbooked = bench_harness::callgrind::unbooked_ranges(&r.module.path);
    let unbooked_at = |a: u64| unbooked.iter().any(|&(lo, hi)| (lo..hi).contains(&a));
    let ours: BTreeMap<Branch, u64> = rec
        .edges
        .iter()
        .filter(|(e, _)| !is_return(e.from))
        .filter(|(e, _)| !unbooked_at(e.from) && !unbooked_at(e.to))
        .map(|(e, c)| (*e, *c))
        .collect();
    let edge_overlap = overlap(&ours, &exact);
    let total: u64 = ours.values().sum();
    // Each edge callgrind never saw taken, with whether it is a
    // pointer-range test.
    let mut unseen_edges: Vec<(Branch, u64, bool)> = ours
        .iter()
        .filter(|(e, _)| !exact.contains_key(e))
        .map(|(e, c)| (*e, *c, pointer_range_test(&r.module, e.from)))
        .collect();
    let unseen: u64 = unseen_edges.iter().map(|(_, c, _)| c).sum();
    let unseen_layout_dependent: u64 = unseen_edges
        .iter()
        .filter(|(_, _, layout)| *layout)
        .map(|(_, c, _)| c)
        .sum();
    unseen_edges.sort_by_key(|(_, c, _)| std::cmp::Reverse(*c));
    let unseen_examples = unseen_edges
        .iter()
        .take(5)
        .map(|(e, c, layout)| {
            let kind = r
                .module
                .decode_at(e.from)
                .map(|i| format!("{:?}", i.flow_control()))
                .unwrap_or_else(|| "undecodable".into());
            let layout = if *layout { ", pointer-range test" } else { "" };
            format!(
                "{} -> {} ({kind}{layout}, x{c})",
                describe(&r.module, e.from),
                describe(&r.module, e.to)
            )
        })
        .collect();
    Scores {
        instruction_overlap,
        function_overlap,
        edge_overlap,
        unseen_examples,
        unseen,
        unseen_layout_dependent,
        compared: total,
        invalid: rec.violations,
    }
}

/// Whether the conditional branch at `from` decides on the high bits of a
/// pointer, as the first level of CPython's obmalloc radix tree does
/// (`address_in_range`, inlined into its frees; MAP_TOP_SHIFT is 34 and the
/// top index 15 bits wide with 48-bit addresses): in the block before the
/// branch, a register is shifted right by 34, masked to 0x7fff, indexes a
/// table of 8-byte entries, and the entry loaded is tested for null. The
/// test asks whether any arena lies in the pointer's 16 GiB region, and the
/// answer depends on where mmap and brk put memory: on ASLR in a native run,
/// on valgrind's own layout under callgrind. So such an edge can be taken
/// natively and never under the reference; it is counted apart rather than
/// as a branch the tracer invented.
fn pointer_range_test(module: &ElfModule, from: u64) -> bool {
    use iced_x86::{Mnemonic, OpKind, Register};
    let index = module.instructions();
    let at = index.starts.partition_point(|&s| s < from);
    if index.starts.get(at) != Some(&from) || index.flows[at] != FlowControl::ConditionalBranch {
        return false;
    }
    // The block's instructions before the branch, in order (at most 8).
    let mut first = at;
    while first > 0 && at - first < 8 && index.flows[first - 1] == FlowControl::Next {
        first -= 1;
    }
    let block: Vec<_> = (first..at)
        .filter_map(|k| module.decode_at(index.starts[k]))
        .collect();
    let imm = |i: &iced_x86::Instruction, m: Mnemonic, v: u64| {
        i.mnemonic() == m
            && i.op0_kind() == OpKind::Register
            && matches!(
                i.op1_kind(),
                OpKind::Immediate8 | OpKind::Immediate32 | OpKind::Immediate8to32
            )
            && i.immediate(1) == v
    };
    let full = |r: Register| r.full_register();
    let Some(shift) = block.iter().position(|i| imm(i, Mnemonic::Shr, 34)) else {
        return false;
    };
    let top = full(block[shift].op0_register());
    let Some(mask) = block[shift + 1..]
        .iter()
        .position(|i| imm(i, Mnemonic::And, 0x7fff) && full(i.op0_register()) == top)
    else {
        return false;
    };
    let Some(load) = block[shift + 1 + mask + 1..].iter().position(|i| {
        i.mnemonic() == Mnemonic::Mov
            && i.op1_kind() == OpKind::Memory
            && i.memory_index_scale() == 8
            && full(i.memory_index()) == top
    }) else {
        return false;
    };
    let entry = full(block[shift + 1 + mask + 1 + load].op0_register());
    block.last().is_some_and(|t| {
        t.mnemonic() == Mnemonic::Test
            && t.op0_kind() == OpKind::Register
            && full(t.op0_register()) == entry
            && t.op1_kind() == OpKind::Register
            && full(t.op1_register()) == entry
    })
}

/// The AutoFDO profile of the exact counts, as `dir/exact.prof` (its text
/// beside it), built by create_llvm_prof for `binary`.
pub fn exact_profile(r: &Reference, binary: &Path, dir: &Path) -> Result<PathBuf> {
    let txt = dir.join("exact.afdo.txt");
    std::fs::write(&txt, exact_afdo(r).to_text())?;
    let prof = dir.join("exact.prof");
    create_llvm_prof(&txt, binary, &prof, true)?;
    Ok(prof)
}

/// The function-level similarity to `exact_prof` of the tracer's AutoFDO
/// texts `afdo_files` merged (as `STEM.afdo.txt`, then `STEM.prof` by
/// create_llvm_prof for `binary`); 0 when they hold no range.
pub fn similarity_to_exact(
    afdo_files: &[PathBuf],
    binary: &Path,
    exact_prof: &Path,
    stem: &Path,
) -> Result<f64> {
    let merged = merge_afdo(afdo_files)?;
    if merged.ranges.is_empty() {
        return Ok(0.0);
    }
    let txt = stem.with_extension("afdo.txt");
    std::fs::write(&txt, merged.to_text())?;
    let prof = stem.with_extension("prof");
    create_llvm_prof(&txt, binary, &prof, true)?;
    profile_similarity(exact_prof, &prof)
}

/// `symbol+0xoff (0xaddr)` for a link-time address.
fn describe(module: &ElfModule, a: u64) -> String {
    match module.symbol_at(a) {
        Some(s) => format!("{}+{:#x} ({a:#x})", s.name, a - s.address),
        None => format!("{a:#x}"),
    }
}

/// Instruction weights summed per enclosing symbol (unnamed code is keyed
/// by its address, so it still counts).
fn per_function(module: &ElfModule, weights: &BTreeMap<u64, u64>) -> BTreeMap<String, u64> {
    let mut f = BTreeMap::new();
    for (&a, &w) in weights {
        let key = module
            .symbol_at(a)
            .map(|s| s.name.clone())
            .unwrap_or_else(|| format!("{a:#x}"));
        *f.entry(key).or_insert(0) += w;
    }
    f
}

struct Row {
    workload: String,
    period: u64,
    entries: u64,
    scores: Scores,
    function_similarity: f64,
}

pub fn run(opts: &Options) -> Result<usize> {
    let mut rep = Report::new(
        &opts.results,
        "quality",
        "Profile quality against callgrind",
    )?;
    let ws = Workspace {
        cache: opts.cache.clone(),
        quick: opts.quick,
    };
    let periods: &[u64] = if opts.quick { &QUICK_PERIODS } else { &PERIODS };
    let runs = if opts.quick { QUICK_RUNS } else { RUNS };
    let tracer = Tracer::locate();
    let mut rows = Vec::new();
    // Intermediate files stay in the cache for inspection.
    let work = ws.cache.join("runs").join("quality");
    for kind in workloads::kinds(opts.quick) {
        let name = kind.name();
        let w = match workloads::prepare(&ws, kind) {
            Ok(w) => w,
            Err(e) => {
                rep.fail(name, "prepare", &e);
                continue;
            }
        };
        let r = match reference(&ws, &w, Input::Train) {
            Ok(r) => r,
            Err(e) => {
                rep.fail(name, "callgrind reference", &e);
                continue;
            }
        };
        let wdir = work.join(name);
        std::fs::create_dir_all(&wdir)?;
        // Debian's binaries carry no debug info: AutoFDO profiles (and so
        // their similarity) exist only for the source-built workloads.
        let exact_prof = if kind.source_built() {
            match exact_profile(&r, &w.hot_module, &wdir) {
                Ok(p) => Some(p),
                Err(e) => {
                    rep.fail(name, "exact AutoFDO profile", &e);
                    None
                }
            }
        } else {
            None
        };
        let tracer = match &tracer {
            Ok(t) => t,
            Err(e) => {
                rep.fail(name, "locate tracer", e);
                continue;
            }
        };
        for &period in periods {
            eprintln!("[quality] {name}: period {} ms", period / 1_000_000);
            let result = (|| -> Result<Row> {
                let mut scripts = Vec::new();
                let mut afdo_files = Vec::new();
                for i in 0..runs {
                    let out = wdir.join(format!("p{period}-{i}"));
                    tracer.record_run(&w.command(Input::Train), period, &out)?;
                    scripts.push(out.join("perf.script"));
                    // At low rates a short run may hold no sample in the
                    // module: that is an empty profile, not an error.
                    if let Ok(f) = tracer_afdo(&out, &r.module) {
                        afdo_files.push(f);
                    }
                }
                let rec = recorded(&scripts, &r.module)?;
                let scores = score(&r, &rec);
                let function_similarity = match &exact_prof {
                    Some(exact) => similarity_to_exact(
                        &afdo_files,
                        &w.hot_module,
                        exact,
                        &wdir.join(format!("p{period}")),
                    )?,
                    None => f64::NAN,
                };
                Ok(Row {
                    workload: name.to_string(),
                    period,
                    entries: rec.entries,
                    scores,
                    function_similarity,
                })
            })();
            match result {
                Ok(row) => rows.push(row),
                Err(e) => rep.fail(name, &format!("profiled run, period {period} ns"), &e),
            }
        }
    }
    write(&mut rep, &rows, runs)?;
    rep.finish()
}

fn write(rep: &mut Report, rows: &[Row], runs: usize) -> Result<()> {
    let mut t = Table::new(&[
        "workload",
        "period (ms)",
        "entries",
        "instruction overlap",
        "function overlap",
        "taken-edge overlap",
        "entries compared with reference edges",
        "edges not taken in reference",
        "of which pointer-range tests",
        "invalid entries",
        "function similarity (AutoFDO)",
    ]);
    for r in rows {
        t.push(vec![
            r.workload.clone(),
            fmt(r.period as f64 / 1e6, 0),
            r.entries.to_string(),
            fmt(r.scores.instruction_overlap, 3),
            fmt(r.scores.function_overlap, 3),
            fmt(r.scores.edge_overlap, 3),
            r.scores.compared.to_string(),
            r.scores.unseen.to_string(),
            r.scores.unseen_layout_dependent.to_string(),
            r.scores.invalid.to_string(),
            fmt(r.function_similarity, 3),
        ]);
    }
    rep.note(&format!(
        "Training input; {runs} profiled run(s) merged per period; reference: callgrind on the same input. \
         Overlap = Σ min of normalised weights (1 = identical). \"Edges not taken in reference\" counts \
         the recorded entries (of those compared: returns and PLT stubs aside) on edges callgrind \
         never saw taken; \"of which pointer-range tests\" the part of them on branches that decide \
         on a pointer's high bits (CPython's obmalloc radix tree: shifted right by 34, masked to \
         15 bits, an 8-byte table entry tested for null), whose way depends on the address layout and so differs under valgrind. \
         \"Invalid entries\" counts the entries the validator rejects. All are exact counts; \
         the unseen entries outside pointer-range tests and the invalid ones must be 0. AutoFDO similarity is `llvm-profdata overlap --sample` of the \
         create_llvm_prof profiles (ours vs exact); Debian's binaries have no debug info, so it is n/a there."
    ));
    rep.table("quality", "Similarity to the exact profile (Table 4)", &t)?;
    let mut ex = Table::new(&[
        "workload",
        "period (ms)",
        "recorded edge not taken under callgrind",
    ]);
    for r in rows {
        for e in &r.scores.unseen_examples {
            ex.push(vec![
                r.workload.clone(),
                fmt(r.period as f64 / 1e6, 0),
                e.clone(),
            ]);
        }
    }
    if !ex.rows.is_empty() {
        rep.table(
            "unseen_edges",
            "Heaviest recorded edges absent from the reference",
            &ex,
        )?;
    }
    let mut names: Vec<&str> = rows.iter().map(|r| r.workload.as_str()).collect();
    names.dedup();
    type Metric = (&'static str, &'static str, fn(&Row) -> f64);
    let metrics: [Metric; 4] = [
        ("instruction_overlap", "instruction-weight overlap", |r| {
            r.scores.instruction_overlap
        }),
        ("function_overlap", "function-weight overlap", |r| {
            r.scores.function_overlap
        }),
        ("edge_overlap", "taken-edge overlap", |r| {
            r.scores.edge_overlap
        }),
        (
            "function_similarity",
            "AutoFDO function-level similarity",
            |r| r.function_similarity,
        ),
    ];
    for (file, label, f) in metrics {
        let series = names
            .iter()
            .map(|n| Series {
                name: n.to_string(),
                points: rows
                    .iter()
                    .filter(|r| r.workload == *n)
                    .map(|r| (1e9 / r.period as f64, f(r)))
                    .collect(),
            })
            .collect();
        let chart = LineChart {
            title: format!("{label} vs sampling rate"),
            x_label: "samples per second of CPU time".into(),
            y_label: label.into(),
            x_log: true,
            y_log: false,
            y_from_zero: true,
            y_reference: Some(1.0),
            series,
        };
        rep.plot(file, &chart.render())?;
    }
    Ok(())
}
