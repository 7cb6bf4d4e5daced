//! The trace validator: checks that every recorded branch entry is a real
//! taken transfer of the program and that consecutive entries are joined by a
//! straight fall-through path.
//!
//! For each entry `{from, to}` (runtime addresses, mapped to their modules
//! through the MMAP2 lines):
//! - `from` starts an instruction on the module's real instruction stream
//!   ([`ElfModule::instructions`]) and that instruction is a control transfer;
//! - for a direct jump, call or conditional jump, `to` is its encoded target
//!   (a taken jcc goes to the target, never the fall-through, unless both are
//!   the same address);
//! - `to` starts an instruction of some module; after a `ret`, it directly
//!   follows a call instruction.
//!
//! For each pair of consecutive entries in execution order, the fall-through
//! range from entry i's `to` to entry i+1's `from` lies in one module, runs
//! forward along the instruction stream to exactly `from`, and holds no
//! transfer that always leaves the straight path (jmp, call, ret, indirect)
//! before its end; conditional jumps inside it are allowed, they were not taken.

use std::collections::BTreeMap;
use std::fmt;

use iced_x86::FlowControl;

use crate::elf::{direct_target, is_transfer, ElfError, ModuleMap};
use crate::perfscript::PerfScript;
use crate::Branch;

/// A fall-through longer than this many instructions is reported: straight
/// code that long does not occur in compiled programs, so it means the two
/// entries do not belong together.
pub const MAX_RANGE_INSTRUCTIONS: usize = 1 << 16;

/// What was wrong with an entry or a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ViolationKind {
    /// `from` lies in no mapped module.
    FromOutsideModules,
    /// `from` is not the start of an instruction.
    FromNotInstructionStart,
    /// The instruction at `from` cannot transfer control.
    FromNotTransfer,
    /// A direct transfer whose `to` is not its encoded target.
    WrongDirectTarget,
    /// A return whose `to` does not follow a call instruction.
    ReturnNotAfterCall,
    /// `to` lies in no mapped module.
    ToOutsideModules,
    /// `to` is not the start of an instruction.
    ToNotInstructionStart,
    /// A fall-through range starts in one module and ends in another.
    RangeCrossesModules,
    /// A fall-through range ends before it starts.
    RangeBackwards,
    /// Walking the instruction stream from the range start misses its end.
    RangeOffStream,
    /// An unconditional transfer lies inside a fall-through range.
    RangeContainsTransfer,
    /// A fall-through range longer than [`MAX_RANGE_INSTRUCTIONS`].
    RangeTooLong,
}

impl ViolationKind {
    /// snake_case name for messages.
    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::FromOutsideModules => "from_outside_modules",
            ViolationKind::FromNotInstructionStart => "from_not_instruction_start",
            ViolationKind::FromNotTransfer => "from_not_transfer",
            ViolationKind::WrongDirectTarget => "wrong_direct_target",
            ViolationKind::ReturnNotAfterCall => "return_not_after_call",
            ViolationKind::ToOutsideModules => "to_outside_modules",
            ViolationKind::ToNotInstructionStart => "to_not_instruction_start",
            ViolationKind::RangeCrossesModules => "range_crosses_modules",
            ViolationKind::RangeBackwards => "range_backwards",
            ViolationKind::RangeOffStream => "range_off_stream",
            ViolationKind::RangeContainsTransfer => "range_contains_transfer",
            ViolationKind::RangeTooLong => "range_too_long",
        }
    }
}

/// How many examples of each kind a report keeps.
pub const EXAMPLES_PER_KIND: usize = 5;

/// The outcome of a validation. Counts include trace repeat counts.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub traces: u64,
    pub entries: u64,
    pub ranges: u64,
    pub violations: BTreeMap<ViolationKind, u64>,
    pub examples: BTreeMap<ViolationKind, Vec<String>>,
    /// Modules named by MMAP2 lines that could not be loaded.
    pub load_errors: Vec<ElfError>,
}

impl Report {
    /// Total number of violations of every kind.
    pub fn total_violations(&self) -> u64 {
        self.violations.values().sum()
    }

    fn add(&mut self, kind: ViolationKind, count: u64, example: impl FnOnce() -> String) {
        *self.violations.entry(kind).or_insert(0) += count;
        let examples = self.examples.entry(kind).or_default();
        if examples.len() < EXAMPLES_PER_KIND {
            examples.push(example());
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} traces, {} entries, {} ranges checked, {} violations",
            self.traces,
            self.entries,
            self.ranges,
            self.total_violations()
        )?;
        for (kind, count) in &self.violations {
            write!(f, "\n  {}: {count}", kind.name())?;
            for example in &self.examples[kind] {
                write!(f, "\n    {example}")?;
            }
        }
        for e in &self.load_errors {
            write!(f, "\n  not loaded: {e}")?;
        }
        Ok(())
    }
}

/// Validates every trace of `script` against the modules it names (loaded
/// from the paths in its MMAP2 lines).
pub fn validate_script(script: &PerfScript) -> Report {
    let (modules, load_errors) = ModuleMap::from_mmaps(&script.mmaps);
    let mut report = validate(script, &modules);
    report.load_errors = load_errors;
    report
}

/// Validates every trace of `script` against `modules`.
pub fn validate(script: &PerfScript, modules: &ModuleMap) -> Report {
    let mut report = Report::default();
    for (t, trace) in script.traces.iter().enumerate() {
        report.traces += trace.count;
        let entries: Vec<&Branch> = trace.execution_order().collect();
        for (i, entry) in entries.iter().enumerate() {
            report.entries += trace.count;
            let place = |what: &str| {
                format!(
                    "trace {t} entry {i} (oldest first) {:#x}->{:#x}: {what}",
                    entry.from, entry.to
                )
            };
            check_entry(modules, entry, trace.count, &mut report, &place);
            if let Some(next) = entries.get(i + 1) {
                report.ranges += trace.count;
                let place = |what: &str| {
                    format!(
                        "trace {t} range {:#x}..{:#x} (entries {i}->{}): {what}",
                        entry.to,
                        next.from,
                        i + 1
                    )
                };
                check_range(
                    modules,
                    entry.to,
                    next.from,
                    trace.count,
                    &mut report,
                    &place,
                );
            }
        }
    }
    report
}

fn describe(modules: &ModuleMap, module: usize, vaddr: u64) -> String {
    let m = &modules.modules[module];
    match m.symbol_at(vaddr) {
        Some(s) => format!(
            "{}:{vaddr:#x} <{}+{:#x}>",
            m.basename(),
            s.name,
            vaddr - s.address
        ),
        None => format!("{}:{vaddr:#x}", m.basename()),
    }
}

fn check_entry(
    modules: &ModuleMap,
    entry: &Branch,
    count: u64,
    report: &mut Report,
    place: &dyn Fn(&str) -> String,
) {
    let to = modules.resolve(entry.to);
    match to {
        None => report.add(ViolationKind::ToOutsideModules, count, || {
            place("to is unmapped")
        }),
        Some((m, vaddr)) if modules.modules[m].instructions().position(vaddr).is_none() => report
            .add(ViolationKind::ToNotInstructionStart, count, || {
                place(&format!(
                    "to {} is inside an instruction",
                    describe(modules, m, vaddr)
                ))
            }),
        Some(_) => {}
    }
    let Some((m, from)) = modules.resolve(entry.from) else {
        report.add(ViolationKind::FromOutsideModules, count, || {
            place("from is unmapped")
        });
        return;
    };
    let module = &modules.modules[m];
    let Some(k) = module.instructions().position(from) else {
        report.add(ViolationKind::FromNotInstructionStart, count, || {
            place(&format!(
                "from {} is inside an instruction",
                describe(modules, m, from)
            ))
        });
        return;
    };
    if !is_transfer(module.instructions().flows[k]) {
        report.add(ViolationKind::FromNotTransfer, count, || {
            let text = module
                .decode_at(from)
                .map(|i| i.to_string())
                .unwrap_or_default();
            place(&format!("from {} is '{text}'", describe(modules, m, from)))
        });
        return;
    }
    if module.instructions().flows[k] == FlowControl::Return {
        check_return_target(modules, entry, count, report, place);
    }
    let Some(instruction) = module.decode_at(from) else {
        return;
    };
    if let Some(target) = direct_target(&instruction) {
        let expected = entry.from.wrapping_add(target.wrapping_sub(from));
        if entry.to != expected {
            report.add(ViolationKind::WrongDirectTarget, count, || {
                place(&format!(
                    "'{instruction}' at {} goes to {expected:#x}",
                    describe(modules, m, from)
                ))
            });
        }
    }
}

/// A `ret` goes back to just after a call: the instruction that ends at `to`
/// is a call.
fn check_return_target(
    modules: &ModuleMap,
    entry: &Branch,
    count: u64,
    report: &mut Report,
    place: &dyn Fn(&str) -> String,
) {
    // An unmapped or misaligned `to` was already reported.
    let Some((m, to)) = modules.resolve(entry.to) else {
        return;
    };
    let index = modules.modules[m].instructions();
    let Some(k) = index.position(to) else { return };
    let after_call = k > 0
        && index.starts[k - 1] + u64::from(index.lengths[k - 1]) == to
        && matches!(
            index.flows[k - 1],
            FlowControl::Call | FlowControl::IndirectCall
        );
    if !after_call {
        report.add(ViolationKind::ReturnNotAfterCall, count, || {
            place(&format!("return to {}", describe(modules, m, to)))
        });
    }
}

fn check_range(
    modules: &ModuleMap,
    begin: u64,
    end: u64,
    count: u64,
    report: &mut Report,
    place: &dyn Fn(&str) -> String,
) {
    let (Some((mb, b)), Some((me, e))) = (modules.resolve(begin), modules.resolve(end)) else {
        // An unmapped end was already reported with its entry.
        return;
    };
    if mb != me {
        report.add(ViolationKind::RangeCrossesModules, count, || {
            place(&format!(
                "{} .. {}",
                describe(modules, mb, b),
                describe(modules, me, e)
            ))
        });
        return;
    }
    if b > e {
        report.add(ViolationKind::RangeBackwards, count, || {
            place(&format!(
                "{} .. {}",
                describe(modules, mb, b),
                describe(modules, me, e)
            ))
        });
        return;
    }
    let index = modules.modules[mb].instructions();
    // A begin inside an instruction was already reported with its entry.
    let Some(mut k) = index.position(b) else {
        return;
    };
    let mut walked = 0;
    while index.starts[k] < e {
        let flow = index.flows[k];
        if is_transfer(flow) && flow != FlowControl::ConditionalBranch {
            let at = index.starts[k];
            report.add(ViolationKind::RangeContainsTransfer, count, || {
                let text = modules.modules[mb]
                    .decode_at(at)
                    .map(|i| i.to_string())
                    .unwrap_or_default();
                place(&format!("'{text}' at {}", describe(modules, mb, at)))
            });
            return;
        }
        let next = index.starts[k] + u64::from(index.lengths[k]);
        walked += 1;
        if walked > MAX_RANGE_INSTRUCTIONS {
            report.add(ViolationKind::RangeTooLong, count, || {
                place("more instructions than the limit")
            });
            return;
        }
        if k + 1 >= index.starts.len() || index.starts[k + 1] != next {
            break;
        }
        k += 1;
    }
    if index.starts[k] != e {
        report.add(ViolationKind::RangeOffStream, count, || {
            place(&format!(
                "the stream from {} passes {}",
                describe(modules, mb, b),
                describe(modules, me, e)
            ))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perfscript::{Mmap, Trace};
    use crate::{callgrind, elf::ElfModule, tools};
    use std::path::Path;

    const LOOP: &str = "#include <stdio.h>\n\
        __attribute__((noinline)) unsigned step(unsigned x) { return x * 1103515245u + 12345u; }\n\
        int main(void) {\n\
          unsigned s = 1, acc = 0;\n\
          for (int i = 0; i < 1000; i++) { s = step(s); acc ^= s; }\n\
          printf(\"%u\\n\", acc);\n\
          return 0;\n\
        }\n";

    /// Where the fake process maps the PIE.
    const BASE: u64 = 0x5555_5555_0000;

    fn mmaps_for(binary: &Path, module: &ElfModule) -> Vec<Mmap> {
        module
            .layout
            .loads()
            .iter()
            .map(|s| Mmap {
                pid: 1,
                tid: 1,
                start: BASE + (s.vaddr & !0xfff),
                len: s.memsz + (s.vaddr & 0xfff),
                pgoff: s.offset & !0xfff,
                major: 0,
                minor: 0,
                inode: 0,
                generation: 0,
                prot: if s.executable { "r-xp" } else { "r--p" }.into(),
                path: binary.display().to_string(),
            })
            .collect()
    }

    fn trace(oldest_first: &[Branch]) -> Trace {
        let runtime = |e: &Branch| Branch {
            from: e.from + BASE,
            to: e.to + BASE,
        };
        Trace {
            ip: 0,
            entries_newest_first: oldest_first.iter().rev().map(runtime).collect(),
            count: 1,
            stack: Vec::new(),
        }
    }

    /// Synthetic traces made of real callgrind edges of a clang-built PIE pass;
    /// the same traces with one address or one entry wrong fail with the
    /// right kind.
    #[test]
    fn callgrind_edges_pass_and_corruptions_are_caught() {
        let (Some(clang), Some(valgrind)) =
            (tools::require("clang-19"), tools::require("valgrind"))
        else {
            return;
        };
        let dir = tools::scratch_dir("validate").unwrap();
        let source = dir.join("loop.c");
        std::fs::write(&source, LOOP).unwrap();
        let binary = dir.join("loop");
        tools::compile_c(&clang, &[&source], &binary, &["-fPIE", "-pie"]).unwrap();
        let out = dir.join("callgrind.out");
        let status = std::process::Command::new(valgrind)
            .args(callgrind::valgrind_args(&out))
            .arg(&binary)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let profile = callgrind::parse_file(&out).unwrap();
        let (_, counts) = profile.object_by_basename("loop").unwrap();
        let module = ElfModule::load(&binary).unwrap();
        let mut script = PerfScript {
            mmaps: mmaps_for(&binary, &module),
            traces: Vec::new(),
        };

        // Every taken edge callgrind saw in the binary, one trace each.
        let edges = counts.taken_edges();
        assert!(edges.len() >= 3, "{edges:?}");
        script.traces = edges.keys().map(|e| trace(&[*e])).collect();
        let report = validate_script(&script);
        assert_eq!(report.total_violations(), 0, "{report}");
        assert!(report.load_errors.is_empty(), "{report}");

        // A real path: call step, return, loop back, call step again.
        let step = module.symbol("step").unwrap().clone();
        let main = module.symbol("main").unwrap().clone();
        let (&call, _) = counts
            .calls
            .iter()
            .find(|(e, _)| e.to == step.address)
            .unwrap();
        let index = module.instructions();
        let ret = (index.position(step.address).unwrap()..)
            .find(|&k| index.flows[k] == FlowControl::Return)
            .map(|k| index.starts[k])
            .unwrap();
        let return_to = call.from + u64::from(module.decode_at(call.from).unwrap().len() as u8);
        let (&back, _) = counts
            .conditional
            .iter()
            .find(|(e, c)| {
                c.taken == 999 && (main.address..main.address + main.size).contains(&e.from)
            })
            .unwrap();
        let path = [
            call,
            Branch {
                from: ret,
                to: return_to,
            },
            back,
            call,
        ];
        script.traces = vec![trace(&path)];
        let report = validate_script(&script);
        assert_eq!(report.total_violations(), 0, "{report}");
        assert_eq!((report.entries, report.ranges), (4, 3));

        let cases: Vec<(Vec<Branch>, ViolationKind)> = vec![
            (
                vec![Branch {
                    from: call.from + 1,
                    ..call
                }],
                ViolationKind::FromNotInstructionStart,
            ),
            (
                vec![Branch {
                    to: call.to + 1,
                    ..call
                }],
                ViolationKind::WrongDirectTarget,
            ),
            (
                vec![Branch {
                    to: back.from + 2,
                    ..back
                }],
                ViolationKind::WrongDirectTarget,
            ),
            (
                vec![Branch {
                    from: step.address,
                    to: call.to,
                }],
                ViolationKind::FromNotTransfer,
            ),
            (
                vec![Branch {
                    from: 1 << 40,
                    to: call.to,
                }],
                ViolationKind::FromOutsideModules,
            ),
            (
                vec![Branch {
                    from: ret,
                    to: return_to + 1,
                }],
                ViolationKind::ToNotInstructionStart,
            ),
            (
                vec![Branch {
                    from: ret,
                    to: main.address,
                }],
                ViolationKind::ReturnNotAfterCall,
            ),
            // Missing the ret: the range from step's entry to the back edge
            // runs backwards or through step's ret, by where clang put step.
            (
                vec![call, back],
                if step.address < back.from {
                    ViolationKind::RangeContainsTransfer
                } else {
                    ViolationKind::RangeBackwards
                },
            ),
            // Missing the call: the loop body holds the call to step.
            (vec![back, back], ViolationKind::RangeContainsTransfer),
        ];
        for (entries, kind) in cases {
            script.traces = vec![trace(&entries)];
            let report = validate_script(&script);
            assert_eq!(
                report.violations.get(&kind),
                Some(&1),
                "{entries:x?}: {report}"
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
