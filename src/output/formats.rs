//! The text formats the downstream tools read (DESIGN.md, "Output formats").
//! Pure functions from the aggregate and the module list to text.

use std::collections::BTreeMap;

use breakdance_protocol::elf_layout::ElfLayout;
use breakdance_protocol::perfscript::{self, Branch, Mmap};

use crate::aggregate::{Aggregate, StackedTrace};
use crate::modules::Module;

/// values.csv (see `breakdance_protocol::values`): one row per load
/// instruction in a module, most executed first (ties by address, so equal
/// runs give equal files). Loads outside every module are not written.
pub fn values_csv(agg: &Aggregate, modules: &[Module]) -> String {
    use breakdance_protocol::values::{LoadRow, VALUES_HEADER};
    let mut rows: Vec<(u64, u64, LoadRow)> = Vec::new();
    for (&pc, h) in &agg.loads {
        let Some(m) = modules.iter().find(|m| m.contains(pc)) else {
            continue;
        };
        let row = LoadRow {
            module: m.path.clone(),
            vaddr: m.vaddr_of(pc),
            executions: h.total,
            other: h.other,
            values: h.sorted(),
        };
        rows.push((h.total, pc, row));
    }
    rows.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut out = format!("{VALUES_HEADER}\n");
    for (_, _, row) in rows {
        out.push_str(&row.to_line());
        out.push('\n');
    }
    out
}

/// `perf script -F ip,brstack --show-mmap-events` text, as llvm-profgen
/// `--perfscript` reads it: a PERF_RECORD_MMAP2 line per executable file
/// mapping, then one line per distinct trace (newest branch first),
/// preceded by its repeat count when above one. Traces are written in a
/// stable order (most frequent first) so that equal runs give equal files.
pub fn perf_script(agg: &Aggregate, modules: &[Module], pid: i32) -> String {
    let mut out = String::new();
    for m in modules {
        for map in &m.exec {
            Mmap {
                pid: pid as u32,
                tid: pid as u32,
                start: map.start,
                len: map.end - map.start,
                pgoff: map.offset,
                major: map.dev_major,
                minor: map.dev_minor,
                inode: map.inode,
                generation: 0,
                prot: map.perms.clone(),
                path: map.path.clone(),
            }
            .write(&mut out);
        }
    }
    let branch = |e: &crate::buffer::BranchEntry| Branch {
        from: e.from,
        to: e.to,
    };
    // With call stacks the file is hybrid (see `perfscript`): stacked
    // traces first, so llvm-profgen's look at the first samples finds a
    // stack; then the traces without one, as branch lines alone.
    let mut stacked: Vec<_> = agg.stacked.iter().collect();
    stacked.sort_unstable_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    for (key, &count) in &stacked {
        let t = StackedTrace::of(key);
        perfscript::write_hybrid_trace(
            &mut out,
            count,
            t.stack,
            t.entries.iter().rev().map(branch),
        );
    }
    let mut traces: Vec<_> = agg.traces.iter().collect();
    traces.sort_unstable_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    for (entries, &count) in traces {
        let newest_first = entries.iter().rev().map(branch);
        if stacked.is_empty() {
            perfscript::write_trace(&mut out, count, newest_first);
        } else {
            perfscript::write_hybrid_trace(&mut out, count, &[], newest_first);
        }
    }
    out
}

/// Per-module counts at the module's ELF virtual addresses (runtime
/// address minus load bias): each format turns them into its own
/// addresses.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct ModuleProfile {
    pub ranges: BTreeMap<(u64, u64), u64>,
    pub addresses: BTreeMap<u64, u64>,
    pub branches: BTreeMap<(u64, u64), u64>,
}

impl ModuleProfile {
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty() && self.branches.is_empty()
    }

    pub fn branch_count(&self) -> u64 {
        self.branches.values().sum()
    }
}

/// The counts of `agg` that lie in `module`: ranges with both ends in it,
/// branches whose source and target are in it (a call into another module
/// belongs to neither's AutoFDO profile), and sample addresses.
pub fn module_profile(agg: &Aggregate, module: &Module) -> ModuleProfile {
    // A module's addresses map to its own one to one (one bias), so each
    // pair is a key of its own: the maps are built at once from the pairs
    // (sorted, then filled leaf by leaf) instead of by an insert each.
    let ranges = agg
        .ranges
        .iter()
        .filter(|(&(begin, end), _)| begin <= end && module.contains(begin) && module.contains(end))
        .map(|(&(begin, end), &n)| ((module.vaddr_of(begin), module.vaddr_of(end)), n))
        .collect();
    let branches = agg
        .branches
        .iter()
        .filter(|(&(from, to), _)| module.contains(from) && module.contains(to))
        .map(|(&(from, to), &n)| ((module.vaddr_of(from), module.vaddr_of(to)), n))
        .collect();
    // Traces that end at one address add up.
    let mut addresses = BTreeMap::new();
    let newest_targets = agg
        .traces
        .iter()
        .map(|(entries, &n)| (entries.last().map(|e| e.to), n))
        .chain(
            agg.stacked_traces()
                .map(|(t, n)| (t.entries.last().map(|e| e.to), n)),
        );
    for (to, n) in newest_targets {
        if let Some(to) = to.filter(|&to| module.contains(to)) {
            *addresses.entry(module.vaddr_of(to)).or_default() += n;
        }
    }
    ModuleProfile {
        ranges,
        addresses,
        branches,
    }
}

/// The `create_llvm_prof --profiler=text` format: ranges, addresses and
/// branches sections, each a decimal count and then its records, hex
/// without `0x`, as offsets from the first PT_LOAD of `layout` (the
/// module's file).
pub fn afdo_text(p: &ModuleProfile, layout: &ElfLayout) -> String {
    let at = |vaddr: u64| layout.profile_offset(vaddr);
    let mut out =
        String::with_capacity(24 * (p.ranges.len() + p.addresses.len() + p.branches.len()) + 64);
    push_line(&mut out, "", &[], p.ranges.len() as u64, "");
    for (&(b, e), &n) in &p.ranges {
        push_line(&mut out, "", &[(at(b), "-"), (at(e), ":")], n, "");
    }
    push_line(&mut out, "", &[], p.addresses.len() as u64, "");
    for (&a, &n) in &p.addresses {
        push_line(&mut out, "", &[(at(a), ":")], n, "");
    }
    push_line(&mut out, "", &[], p.branches.len() as u64, "");
    for (&(f, t), &n) in &p.branches {
        push_line(&mut out, "", &[(at(f), "->"), (at(t), ":")], n, "");
    }
    out
}

/// BOLT's pre-aggregated profile (`llvm-bolt -pa`): `B FROM TO COUNT
/// MISPRED` for taken branches and `F START END COUNT` for fall-through
/// ranges, at ELF virtual addresses: llvm-bolt-19 reads 0x401130 for a
/// non-PIE binary where create_llvm_prof reads 0x1130 (the two agree for
/// PIE and shared objects, whose first PT_LOAD is at 0). Mispredictions
/// are unknown (0).
pub fn bolt_preaggregated(p: &ModuleProfile) -> String {
    let mut out = String::with_capacity(32 * (p.branches.len() + p.ranges.len()));
    for (&(f, t), &n) in &p.branches {
        push_line(&mut out, "B ", &[(f, " "), (t, " ")], n, " 0");
    }
    for (&(b, e), &n) in &p.ranges {
        push_line(&mut out, "F ", &[(b, " "), (e, " ")], n, "");
    }
    out
}

/// Appends `head`, each hex field (as `{:x}`) followed by its separator,
/// the decimal `count`, `tail` and a newline: the text profiles' records,
/// without core::fmt (a SQLite stop writes some 7000 such lines).
fn push_line(out: &mut String, head: &str, fields: &[(u64, &str)], count: u64, tail: &str) {
    out.push_str(head);
    for &(value, sep) in fields {
        perfscript::push_hex(out, value);
        out.push_str(sep);
    }
    out.push_str(itoa::Buffer::new().format(count));
    out.push_str(tail);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::BranchEntry;
    use crate::modules::Mapping;
    use std::path::PathBuf;

    fn module() -> Module {
        Module {
            path: PathBuf::from("/bin/prog"),
            exec: vec![Mapping {
                start: 0x55_0000_1000,
                end: 0x55_0000_3000,
                perms: "r-xp".into(),
                offset: 0x1000,
                dev_major: 0xfd,
                dev_minor: 1,
                inode: 42,
                path: "/bin/prog".into(),
            }],
            load_address: 0x55_0000_0000,
            bias: 0x55_0000_0000,
            layout: ElfLayout::default(),
            build_id: None,
            rseq: vec![],
            immutable: vec![],
        }
    }

    fn agg() -> Aggregate {
        let mut agg = Aggregate::default();
        let e = |f: u64, t: u64| BranchEntry {
            from: 0x55_0000_0000 + f,
            to: 0x55_0000_0000 + t,
        };
        for _ in 0..3 {
            agg.add_trace(&[e(0x1150, 0x1130), e(0x1150, 0x1130)]);
        }
        agg.add_trace(&[
            e(0x1150, 0x1160),
            BranchEntry {
                from: 0x55_0000_1170,
                to: 0x7f00_0000_0000,
            },
        ]);
        agg
    }

    #[test]
    fn perf_script_lists_mmaps_then_traces_newest_first() {
        let text = perf_script(&agg(), &[module()], 77);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "PERF_RECORD_MMAP2 77/77: [0x5500001000(0x2000) @ 0x1000 fd:01 42 0]: r-xp /bin/prog"
        );
        assert_eq!(lines[1], "3");
        assert_eq!(
            lines[2],
            "5500001130 0x5500001150/0x5500001130/P/-/-/0 0x5500001150/0x5500001130/P/-/-/0"
        );
        assert_eq!(
            lines[3],
            "7f0000000000 0x5500001170/0x7f0000000000/P/-/-/0 0x5500001150/0x5500001160/P/-/-/0"
        );
        assert!(!text.contains('\t'));
    }

    #[test]
    fn afdo_text_uses_module_offsets_and_keeps_in_module_edges() {
        let p = module_profile(&agg(), &module());
        let text = afdo_text(&p, &ElfLayout::default());
        assert_eq!(
            text,
            "2\n1130-1150:3\n1160-1170:1\n1\n1130:3\n2\n1150->1130:6\n1150->1160:1\n"
        );
        assert_eq!(
            bolt_preaggregated(&p),
            "B 1150 1130 6 0\nB 1150 1160 1 0\nF 1130 1150 3\nF 1160 1170 1\n"
        );
    }

    #[test]
    fn non_pie_afdo_counts_from_the_first_load_and_bolt_takes_addresses() {
        use breakdance_protocol::elf_layout::LoadSegment;
        let mut m = module();
        // The same code linked at 0x400000: ELF virtual address 0x401150.
        m.bias = 0x55_0000_0000 - 0x40_0000;
        m.layout = ElfLayout::new(vec![LoadSegment {
            vaddr: 0x40_0000,
            offset: 0,
            filesz: 0x3000,
            memsz: 0x3000,
            executable: true,
        }]);
        let p = module_profile(&agg(), &m);
        assert!(afdo_text(&p, &m.layout).starts_with("2\n1130-1150:3\n"));
        assert_eq!(
            bolt_preaggregated(&p).lines().next(),
            Some("B 401150 401130 6 0")
        );
    }
}
