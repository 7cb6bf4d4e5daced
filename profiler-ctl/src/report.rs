//! `profiler-ctl report DIR`: where the instructions and the taken branches
//! of a recording went, like `perf report` for branch stacks.
//!
//! Reads perf.script (every trace with its repeat count, and the mappings)
//! and summary.json. A trace's taken branches are the edges; between two
//! consecutive branches the program ran straight from the target of the
//! older to the source of the newer, and those instructions, found by
//! decoding the module's code, are the ones it covered (the rule
//! llvm-profgen applies). Addresses are named from each module's symbol
//! table and, for source lines, its DWARF; a module is read only if it is
//! the build that was recorded (same build id).

mod flame;
mod text;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use breakdance_protocol::elf_layout::FileMapping;
use breakdance_protocol::{Summary, PERF_SCRIPT_FILE};
use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction};
use serde::Serialize;

use crate::cli::{Format, ReportArgs};
use crate::elf::{file_name, Binary, Function};
use breakdance_protocol::perfscript::{Mmap, PerfScript};

/// The longest straight-line run walked between two branches; a longer
/// one is taken as a sign that the two do not belong together.
const MAX_RANGE_BYTES: u64 = 1 << 16;

/// One module as the report sees it.
struct Module {
    path: PathBuf,
    /// Runtime address minus ELF virtual address.
    bias: u64,
    /// Readable and the recorded build: symbols and code can be used.
    binary: Option<Binary>,
    functions: Vec<Function>,
    /// Why the file is not used, when it is not.
    unusable: Option<String>,
}

impl Module {
    fn function_index(&self, link_address: u64) -> Option<usize> {
        crate::elf::function_index(&self.functions, link_address)
    }
}

/// An address resolved to a module and a function.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Place {
    module: usize,
    function: Option<usize>,
}

struct Modules {
    modules: Vec<Module>,
    mappings: Vec<(Mmap, usize)>,
}

impl Modules {
    fn load(script: &PerfScript, summary: &Summary) -> Modules {
        let mut modules: Vec<Module> = Vec::new();
        let mut mappings = Vec::new();
        for mapping in &script.mmaps {
            let path = Path::new(&mapping.path);
            let index = match modules.iter().position(|m| m.path == path) {
                Some(i) => i,
                None => {
                    modules.push(open_module(path, mapping, summary));
                    modules.len() - 1
                }
            };
            mappings.push((mapping.clone(), index));
        }
        Modules { modules, mappings }
    }

    fn module_of(&self, address: u64) -> Option<usize> {
        self.mappings
            .iter()
            .find(|(m, _)| m.start <= address && address < m.start + m.len)
            .map(|(_, i)| *i)
    }

    fn place(&self, address: u64) -> Option<Place> {
        let module = self.module_of(address)?;
        let m = &self.modules[module];
        Some(Place {
            module,
            function: m.function_index(address.wrapping_sub(m.bias)),
        })
    }

    /// `symbol+0xoff`, else `module+0xoff` (link-time offset).
    fn name(&self, address: u64) -> String {
        let Some(place) = self.place(address) else {
            return format!("{address:#x}");
        };
        let m = &self.modules[place.module];
        let link = address.wrapping_sub(m.bias);
        match place.function {
            Some(f) => {
                let f = &m.functions[f];
                format!("{}+{:#x}", f.name, link - f.address)
            }
            None => format!("{}+{link:#x}", file_name(&m.path)),
        }
    }
}

fn open_module(path: &Path, mapping: &Mmap, summary: &Summary) -> Module {
    let mut module = Module {
        path: path.to_path_buf(),
        bias: 0,
        binary: None,
        functions: Vec::new(),
        unusable: None,
    };
    let binary = match Binary::open(path) {
        Ok(b) => b,
        Err(e) => {
            module.unusable = Some(format!("{e:#}"));
            return module;
        }
    };
    let recorded = summary.modules.iter().find(|m| m.path == path);
    if let Some(recorded_id) = recorded.and_then(|m| m.build_id.as_deref()) {
        if binary.build_id().as_deref() != Some(recorded_id) {
            module.unusable = Some(format!(
                "rebuilt since the recording (build id {recorded_id} was recorded)"
            ));
            return module;
        }
    }
    let file_mapping = FileMapping {
        start: mapping.start,
        pgoff: mapping.pgoff,
        executable: mapping.executable(),
    };
    match binary.layout().and_then(|l| l.load_bias(&file_mapping)) {
        Some(bias) => module.bias = bias,
        None => {
            module.unusable = Some("no loadable segment matches its mapping".into());
            return module;
        }
    }
    module.functions = binary.functions().unwrap_or_default();
    module.binary = Some(binary);
    module
}

/// Counts per function.
#[derive(Default, Clone, Copy)]
struct FunctionCounts {
    instructions: u64,
    branches: u64,
}

/// Counts per module.
#[derive(Default, Clone, Copy, Serialize)]
struct ModuleCounts {
    /// Taken branches whose source lies in the module.
    branches: u64,
    /// Straight-line runs that start in the module, walked.
    ranges: u64,
    instructions: u64,
    /// Runs that could not be walked (the two ends in different modules or
    /// functions that do not connect, code that is not there).
    ranges_lost: u64,
}

/// The whole analysis.
struct Analysis {
    modules: Modules,
    functions: HashMap<Place, FunctionCounts>,
    module_counts: Vec<ModuleCounts>,
    edges: Vec<((u64, u64), u64)>,
    total_branches: u64,
    total_instructions: u64,
    outside_mappings: u64,
    flame: flame::Stacks,
}

fn analyse(script: &PerfScript, summary: &Summary) -> Analysis {
    let modules = Modules::load(script, summary);
    let mut edges: HashMap<(u64, u64), u64> = HashMap::new();
    let mut ranges: HashMap<(u64, u64), u64> = HashMap::new();
    let mut outside_mappings = 0;
    for trace in &script.traces {
        let entries: Vec<_> = trace.execution_order().copied().collect();
        for e in &entries {
            *edges.entry((e.from, e.to)).or_default() += trace.count;
            if modules.module_of(e.from).is_none() || modules.module_of(e.to).is_none() {
                outside_mappings += trace.count;
            }
        }
        for pair in entries.windows(2) {
            *ranges.entry((pair[0].to, pair[1].from)).or_default() += trace.count;
        }
    }
    let mut functions: HashMap<Place, FunctionCounts> = HashMap::new();
    let mut module_counts = vec![ModuleCounts::default(); modules.modules.len()];
    let mut total_branches = 0;
    for (&(from, _), &n) in &edges {
        total_branches += n;
        if let Some(place) = modules.place(from) {
            functions.entry(place).or_default().branches += n;
            module_counts[place.module].branches += n;
        }
    }
    let mut walked: HashMap<(u64, u64), Vec<(Place, u64)>> = HashMap::new();
    let mut total_instructions = 0;
    for (&(begin, end), &n) in &ranges {
        let Some(start) = modules.module_of(begin) else {
            continue;
        };
        module_counts[start].ranges += n;
        match walk(&modules, begin, end) {
            Some(parts) => {
                for &(place, count) in &parts {
                    functions.entry(place).or_default().instructions += count * n;
                    module_counts[place.module].instructions += count * n;
                    total_instructions += count * n;
                }
                walked.insert((begin, end), parts);
            }
            None => module_counts[start].ranges_lost += n,
        }
    }
    let flame = flame::Stacks::build(
        script,
        &walked,
        |a| modules.place(a),
        |a| transfer_kind(&modules, a),
    );
    let mut edges: Vec<_> = edges.into_iter().collect();
    edges.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Analysis {
        modules,
        functions,
        module_counts,
        edges,
        total_branches,
        total_instructions,
        outside_mappings,
        flame,
    }
}

/// The instructions from `begin` to `end` inclusive, by function, if the
/// code runs straight from one to the other.
fn walk(modules: &Modules, begin: u64, end: u64) -> Option<Vec<(Place, u64)>> {
    if end < begin || end - begin > MAX_RANGE_BYTES {
        return None;
    }
    let module = modules.module_of(begin)?;
    if modules.module_of(end) != Some(module) {
        return None;
    }
    let m = &modules.modules[module];
    let code = m.binary.as_ref()?.code_at(begin.wrapping_sub(m.bias))?;
    let mut decoder = Decoder::with_ip(64, code, begin, DecoderOptions::NONE);
    let mut instruction = Instruction::default();
    let mut parts: Vec<(Place, u64)> = Vec::new();
    while decoder.can_decode() {
        decoder.decode_out(&mut instruction);
        if instruction.is_invalid() {
            return None;
        }
        let ip = instruction.ip();
        let place = Place {
            module,
            function: m.function_index(ip.wrapping_sub(m.bias)),
        };
        match parts.last_mut() {
            Some((p, n)) if *p == place => *n += 1,
            _ => parts.push((place, 1)),
        }
        if ip == end {
            return Some(parts);
        }
        if ip > end {
            return None;
        }
    }
    None
}

/// Whether the instruction at runtime address `address` is a call or a
/// return (for the flame view's stacks).
fn transfer_kind(modules: &Modules, address: u64) -> Option<FlowControl> {
    let m = &modules.modules[modules.module_of(address)?];
    let code = m.binary.as_ref()?.code_at(address.wrapping_sub(m.bias))?;
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    Some(decoder.decode().flow_control())
}

#[derive(Serialize)]
struct FunctionRow {
    function: String,
    module: String,
    instructions: u64,
    instructions_share: f64,
    taken_branches: u64,
    taken_branches_share: f64,
}

#[derive(Serialize)]
struct EdgeRow {
    from: String,
    to: String,
    count: u64,
    share: f64,
    source_line: Option<String>,
}

/// One call path of the `-g` stacks, root first, by the samples whose
/// stack it was.
#[derive(Serialize)]
struct CallPathRow {
    /// Function names, root first, joined by " → ".
    path: String,
    samples: u64,
    share: f64,
}

#[derive(Serialize)]
struct ModuleRow {
    path: PathBuf,
    /// Why the file could not be used to name and walk its addresses.
    unusable: Option<String>,
    #[serde(flatten)]
    counts: ModuleCounts,
}

#[derive(Serialize)]
struct Lost {
    /// Traces ended early, by reason (they are still in the profile, shorter).
    aborted_traces: Vec<(&'static str, u64)>,
    /// Data dropped before the profile was written, by reason.
    drops: Vec<(&'static str, u64)>,
    /// Taken branches with an end in no file mapping (the vDSO, JIT code).
    branches_outside_mappings: u64,
}

#[derive(Serialize)]
struct Report {
    dir: PathBuf,
    command: String,
    traces: u64,
    distinct_traces: u64,
    taken_branches: u64,
    instructions: u64,
    by_instructions: Vec<FunctionRow>,
    by_taken_branches: Vec<FunctionRow>,
    edges: Vec<EdgeRow>,
    /// Hottest call paths (recordings made with `-g`; empty otherwise).
    call_paths: Vec<CallPathRow>,
    modules: Vec<ModuleRow>,
    lost: Lost,
}

fn share(n: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        n as f64 / total as f64
    }
}

fn build(dir: &Path, summary: &Summary, script: &PerfScript, a: &Analysis, top: usize) -> Report {
    let function_row = |place: &Place, c: &FunctionCounts| {
        let m = &a.modules.modules[place.module];
        FunctionRow {
            function: place.function.map_or_else(
                || format!("[unknown in {}]", file_name(&m.path)),
                |f| m.functions[f].name.clone(),
            ),
            module: file_name(&m.path),
            instructions: c.instructions,
            instructions_share: share(c.instructions, a.total_instructions),
            taken_branches: c.branches,
            taken_branches_share: share(c.branches, a.total_branches),
        }
    };
    let mut ranked: Vec<(&Place, &FunctionCounts)> = a.functions.iter().collect();
    let mut ranking = |key: fn(&FunctionCounts) -> u64| -> Vec<FunctionRow> {
        ranked.sort_by(|x, y| {
            key(y.1).cmp(&key(x.1)).then_with(|| {
                function_row(x.0, x.1)
                    .function
                    .cmp(&function_row(y.0, y.1).function)
            })
        });
        ranked
            .iter()
            .filter(|(_, c)| key(c) > 0)
            .take(top)
            .map(|(p, c)| function_row(p, c))
            .collect()
    };
    let by_instructions = ranking(|c| c.instructions);
    let by_taken_branches = ranking(|c| c.branches);
    let top_edges = &a.edges[..a.edges.len().min(top)];
    let lines = source_lines(&a.modules, top_edges.iter().map(|((from, _), _)| *from));
    let edges = top_edges
        .iter()
        .map(|&((from, to), count)| EdgeRow {
            from: a.modules.name(from),
            to: a.modules.name(to),
            count,
            share: share(count, a.total_branches),
            source_line: lines.get(&from).cloned(),
        })
        .collect();
    let call_paths = call_paths(script, a, top);
    let modules = a
        .modules
        .modules
        .iter()
        .zip(&a.module_counts)
        .filter(|(_, c)| c.branches + c.ranges > 0)
        .map(|(m, c)| ModuleRow {
            path: m.path.clone(),
            unusable: m.unusable.clone(),
            counts: *c,
        })
        .collect();
    Report {
        dir: dir.to_path_buf(),
        command: summary.command.clone(),
        traces: script.traces.iter().map(|t| t.count).sum(),
        distinct_traces: script.traces.len() as u64,
        taken_branches: a.total_branches,
        instructions: a.total_instructions,
        by_instructions,
        by_taken_branches,
        edges,
        call_paths,
        modules,
        lost: Lost {
            aborted_traces: summary
                .counters
                .aborts
                .iter()
                .map(|(r, n)| (r.name(), n))
                .filter(|(_, n)| *n > 0)
                .collect(),
            drops: summary
                .drops()
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .collect(),
            branches_outside_mappings: a.outside_mappings,
        },
    }
}

/// The `top` hottest call paths of the traces' stacks (leaf first in the
/// file), each frame named by its function, root first; a repeated frame
/// of a recursion is written once with its count (`rec ×5`).
fn call_paths(script: &PerfScript, a: &Analysis, top: usize) -> Vec<CallPathRow> {
    let function = |address: u64| {
        let Some(place) = a.modules.place(address) else {
            return format!("{address:#x}");
        };
        let m = &a.modules.modules[place.module];
        place.function.map_or_else(
            || format!("[{}]", file_name(&m.path)),
            |f| m.functions[f].name.clone(),
        )
    };
    let mut paths: HashMap<String, u64> = HashMap::new();
    let mut total = 0;
    for trace in script.traces.iter().filter(|t| !t.stack.is_empty()) {
        // Return addresses name the caller; one byte back is inside the
        // call, so a call that ends its function is named right.
        let names = trace
            .stack
            .iter()
            .enumerate()
            .map(|(i, &address)| function(if i == 0 { address } else { address - 1 }));
        let mut runs: Vec<(String, u64)> = Vec::new();
        for name in names {
            match runs.last_mut() {
                Some((last, n)) if *last == name => *n += 1,
                _ => runs.push((name, 1)),
            }
        }
        let path = runs
            .iter()
            .rev()
            .map(|(name, n)| {
                if *n > 1 {
                    format!("{name} ×{n}")
                } else {
                    name.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(" → ");
        *paths.entry(path).or_default() += trace.count;
        total += trace.count;
    }
    let mut rows: Vec<_> = paths.into_iter().collect();
    rows.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    rows.into_iter()
        .take(top)
        .map(|(path, samples)| CallPathRow {
            path,
            samples,
            share: share(samples, total),
        })
        .collect()
}

/// Source lines of runtime addresses, from their modules' DWARF.
fn source_lines(modules: &Modules, addresses: impl Iterator<Item = u64>) -> HashMap<u64, String> {
    let mut by_module: HashMap<usize, Vec<u64>> = HashMap::new();
    for address in addresses {
        if let Some(m) = modules.module_of(address) {
            by_module.entry(m).or_default().push(address);
        }
    }
    let mut found = HashMap::new();
    for (index, addresses) in by_module {
        let m = &modules.modules[index];
        let Some(binary) = &m.binary else { continue };
        let link: Vec<u64> = addresses.iter().map(|a| a.wrapping_sub(m.bias)).collect();
        let lines = binary.source_lines(&link);
        for (runtime, link) in addresses.iter().zip(&link) {
            if let Some(line) = lines.get(link) {
                found.insert(*runtime, line.clone());
            }
        }
    }
    found
}

pub fn run(args: &ReportArgs) -> Result<()> {
    let dir = &args.dir;
    let summary = Summary::load(dir)?.with_context(|| {
        format!(
            "{} has no summary.json: not a finished recording",
            dir.display()
        )
    })?;
    let script_path = dir.join(PERF_SCRIPT_FILE);
    let text = std::fs::read_to_string(&script_path)
        .with_context(|| format!("cannot read {}", script_path.display()))?;
    let script = PerfScript::parse(&text).with_context(|| script_path.display().to_string())?;
    let analysis = analyse(&script, &summary);
    let report = build(dir, &summary, &script, &analysis, args.top as usize);
    match args.format {
        Format::Text => print!("{}", text::render(&report)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    if let Some(svg) = &args.svg {
        let name = |p: Place| {
            let m = &analysis.modules.modules[p.module];
            p.function.map_or_else(
                || format!("[{}]", file_name(&m.path)),
                |f| m.functions[f].name.clone(),
            )
        };
        analysis
            .flame
            .write_svg(svg, &format!("hot paths of `{}`", summary.command), name)?;
    }
    Ok(())
}
