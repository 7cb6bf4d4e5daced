//! Which instruction forms of a binary's code the semantics core lacks: a
//! static count over the executable sections (a linear sweep with iced,
//! which compiler output decodes cleanly), against a table built for a
//! model with every feature, so the answer is the core's and not this
//! CPU's. Emulation stops at each such form, and the CPU runs it after a
//! breakpoint (a step-over).

use anyhow::{Context, Result};
use iced_x86::{Code, Decoder, DecoderOptions, Instruction};
use object::{Object, ObjectSection, SectionFlags};
use std::collections::BTreeMap;
use std::path::Path;
use x86_sem::{Cpu, CpuModel, CpuState, NoMemory, Table};

/// The forms of `binary`'s code the core lacks: instructions per form.
pub fn missing_forms(binary: &Path) -> Result<BTreeMap<Code, u64>> {
    let data =
        std::fs::read(binary).with_context(|| format!("cannot read {}", binary.display()))?;
    let file = object::File::parse(&*data)
        .with_context(|| format!("{} is not an object file", binary.display()))?;
    let table = Table::<Cpu<CpuState, NoMemory>>::boxed(&CpuModel::every_feature());
    let mut missing = BTreeMap::new();
    let mut insn = Instruction::default();
    for section in file.sections() {
        let executable = matches!(section.flags(), SectionFlags::Elf { sh_flags }
            if sh_flags & u64::from(object::elf::SHF_EXECINSTR) != 0);
        if !executable {
            continue;
        }
        let bytes = section.data()?;
        let mut decoder = Decoder::with_ip(64, bytes, section.address(), DecoderOptions::NONE);
        while decoder.can_decode() {
            decoder.decode_out(&mut insn);
            let code = insn.code();
            if code != Code::INVALID && !table.implements(code) {
                *missing.entry(code).or_default() += 1;
            }
        }
    }
    Ok(missing)
}

/// "N forms (M instructions): the most frequent few", for a report cell.
pub fn describe(missing: &BTreeMap<Code, u64>, most: usize) -> String {
    let total: u64 = missing.values().sum();
    let mut by_count: Vec<_> = missing.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let names: Vec<String> = by_count
        .iter()
        .take(most)
        .map(|(c, n)| format!("{c:?} ({n})"))
        .collect();
    if missing.is_empty() {
        "none".to_string()
    } else {
        format!(
            "{} forms, {total} instructions: {}",
            missing.len(),
            names.join(", ")
        )
    }
}
