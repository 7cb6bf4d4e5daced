//! ELF modules: load addresses, code bytes, real instruction boundaries, and
//! the mapping from runtime addresses (as in perf.script) to each module's
//! link-time addresses and AutoFDO offsets.
//!
//! Address spaces and the load-bias rule: `breakdance_protocol::elf_layout`,
//! the one place that owns them.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use breakdance_protocol::elf_layout::{ElfLayout, FileMapping, LoadSegment};
use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SectionKind, SymbolKind};

use crate::perfscript::Mmap;

/// A module that could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfError {
    pub path: PathBuf,
    pub message: String,
}

impl std::fmt::Display for ElfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ELF {}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for ElfError {}

/// A function symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    pub address: u64,
    pub size: u64,
}

/// An executable section's bytes.
#[derive(Debug, Clone)]
struct CodeSection {
    vaddr: u64,
    bytes: Vec<u8>,
}

/// Every instruction start of a module's code, found by decoding linearly
/// from each section start and each function symbol start (compilers put only
/// code and padding between them, so a sweep from those anchors stays on the
/// real instruction stream).
#[derive(Debug, Clone, Default)]
pub struct InstructionIndex {
    /// Sorted instruction start addresses (link-time).
    pub starts: Vec<u64>,
    /// Length of each instruction, parallel to `starts`.
    pub lengths: Vec<u8>,
    /// How each instruction transfers control, parallel to `starts`.
    pub flows: Vec<FlowControl>,
}

impl InstructionIndex {
    /// Index of the instruction starting exactly at `vaddr`.
    pub fn position(&self, vaddr: u64) -> Option<usize> {
        self.starts.binary_search(&vaddr).ok()
    }
}

/// One loaded ELF file.
#[derive(Debug)]
pub struct ElfModule {
    pub path: PathBuf,
    /// The PT_LOADs: the rule for the module's addresses.
    pub layout: ElfLayout,
    /// Function symbols sorted by address (from .symtab, else .dynsym).
    pub symbols: Vec<Symbol>,
    code: Vec<CodeSection>,
    index: OnceLock<InstructionIndex>,
}

impl ElfModule {
    /// Loads `path`.
    pub fn load(path: &Path) -> Result<ElfModule, ElfError> {
        let fail = |message: String| ElfError {
            path: path.to_path_buf(),
            message,
        };
        let data = std::fs::read(path).map_err(|e| fail(format!("cannot read: {e}")))?;
        let file =
            object::File::parse(&*data).map_err(|e| fail(format!("not an ELF file: {e}")))?;
        // `segments()` lists the PT_LOADs, in the file's order.
        let loads: Vec<LoadSegment> = file
            .segments()
            .map(|s| {
                let (offset, filesz) = s.file_range();
                let executable = matches!(
                    s.flags(),
                    object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0
                );
                LoadSegment {
                    vaddr: s.address(),
                    offset,
                    filesz,
                    memsz: s.size(),
                    executable,
                }
            })
            .collect();
        if loads.is_empty() {
            return Err(fail("no PT_LOAD segment".into()));
        }
        let code = file
            .sections()
            .filter(|s| s.kind() == SectionKind::Text && s.size() > 0)
            .map(|s| {
                let bytes = s.data().map_err(|e| fail(format!("section data: {e}")))?;
                Ok(CodeSection {
                    vaddr: s.address(),
                    bytes: bytes.to_vec(),
                })
            })
            .collect::<Result<Vec<_>, ElfError>>()?;
        let mut symbols: Vec<Symbol> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| {
                let name = s.name().ok()?.to_string();
                Some(Symbol {
                    name,
                    address: s.address(),
                    size: s.size(),
                })
            })
            .collect();
        symbols.sort_by(|a, b| (a.address, &a.name).cmp(&(b.address, &b.name)));
        symbols.dedup_by(|a, b| a.address == b.address && a.name == b.name);
        Ok(ElfModule {
            path: path.to_path_buf(),
            layout: ElfLayout::new(loads),
            symbols,
            code,
            index: OnceLock::new(),
        })
    }

    /// The file name of the module.
    pub fn basename(&self) -> &str {
        self.path.file_name().and_then(|n| n.to_str()).unwrap_or("")
    }

    /// The AutoFDO offset of a link-time address.
    pub fn afdo_offset(&self, vaddr: u64) -> u64 {
        self.layout.profile_offset(vaddr)
    }

    /// The link-time address of an AutoFDO offset.
    pub fn vaddr_of_offset(&self, offset: u64) -> u64 {
        self.layout.vaddr_of_profile_offset(offset)
    }

    /// Up to `len` code bytes at `vaddr` (fewer at the end of a section),
    /// or `None` outside executable sections.
    pub fn code_bytes(&self, vaddr: u64, len: usize) -> Option<&[u8]> {
        let section = self
            .code
            .iter()
            .find(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.bytes.len() as u64)?;
        let at = (vaddr - section.vaddr) as usize;
        Some(&section.bytes[at..section.bytes.len().min(at + len)])
    }

    /// Decodes the instruction at `vaddr` (whether or not it is a real start).
    pub fn decode_at(&self, vaddr: u64) -> Option<Instruction> {
        let bytes = self.code_bytes(vaddr, 15)?;
        let mut decoder = Decoder::with_ip(64, bytes, vaddr, DecoderOptions::NONE);
        let instruction = decoder.decode();
        (!instruction.is_invalid()).then_some(instruction)
    }

    /// The function symbol containing `vaddr`.
    pub fn symbol_at(&self, vaddr: u64) -> Option<&Symbol> {
        let i = self.symbols.partition_point(|s| s.address <= vaddr);
        // Aliases share addresses and sizes nest rarely: a short look back
        // over the symbols starting at or below `vaddr` is enough.
        self.symbols[..i]
            .iter()
            .rev()
            .take(16)
            .find(|s| vaddr < s.address + s.size.max(1))
    }

    /// The function symbol named `name`.
    pub fn symbol(&self, name: &str) -> Option<&Symbol> {
        self.symbols.iter().find(|s| s.name == name)
    }

    /// The instruction boundaries of all executable sections (computed once).
    pub fn instructions(&self) -> &InstructionIndex {
        self.index.get_or_init(|| self.sweep())
    }

    fn sweep(&self) -> InstructionIndex {
        let mut index = InstructionIndex::default();
        let mut instruction = Instruction::default();
        for section in &self.code {
            let end = section.vaddr + section.bytes.len() as u64;
            let mut anchors: Vec<u64> = self
                .symbols
                .iter()
                .map(|s| s.address)
                .filter(|&a| a > section.vaddr && a < end)
                .collect();
            anchors.push(end);
            anchors.dedup();
            let mut from = section.vaddr;
            for &to in &anchors {
                let bytes =
                    &section.bytes[(from - section.vaddr) as usize..(to - section.vaddr) as usize];
                let mut decoder = Decoder::with_ip(64, bytes, from, DecoderOptions::NONE);
                while decoder.can_decode() {
                    decoder.decode_out(&mut instruction);
                    index.starts.push(instruction.ip());
                    index.lengths.push(instruction.len() as u8);
                    index.flows.push(user_flow(&instruction));
                }
                from = to;
            }
        }
        // Sections are not necessarily in address order.
        let mut order: Vec<usize> = (0..index.starts.len()).collect();
        order.sort_by_key(|&i| index.starts[i]);
        InstructionIndex {
            starts: order.iter().map(|&i| index.starts[i]).collect(),
            lengths: order.iter().map(|&i| index.lengths[i]).collect(),
            flows: order.iter().map(|&i| index.flows[i]).collect(),
        }
    }
}

/// Link-time address ranges of the module's sections whose name satisfies
/// `wanted`; empty when the file cannot be read.
pub fn section_ranges(path: &Path, wanted: impl Fn(&str) -> bool) -> Vec<(u64, u64)> {
    let Ok(data) = std::fs::read(path) else {
        return Vec::new();
    };
    let Ok(file) = object::File::parse(&*data) else {
        return Vec::new();
    };
    file.sections()
        .filter(|s| s.name().is_ok_and(&wanted))
        .map(|s| (s.address(), s.address() + s.size()))
        .collect()
}

/// How an instruction moves control as user-space code sees it. iced counts
/// `syscall` and `sysenter` as calls, but they come back to the next
/// instruction (the kernel part is invisible to a user-space trace, as with
/// hardware LBR filtered to user mode): they are classed as interrupts.
pub fn user_flow(instruction: &Instruction) -> FlowControl {
    if instruction.is_invalid() {
        return FlowControl::Exception;
    }
    match instruction.mnemonic() {
        Mnemonic::Syscall | Mnemonic::Sysenter => FlowControl::Interrupt,
        _ => instruction.flow_control(),
    }
}

/// The direct target of a branch or call instruction, if it has one.
pub fn direct_target(instruction: &Instruction) -> Option<u64> {
    matches!(
        instruction.op0_kind(),
        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
    )
    .then(|| instruction.near_branch_target())
}

/// True for instructions that move control somewhere other than the next
/// instruction on some path (branches, calls, returns).
pub fn is_transfer(flow: FlowControl) -> bool {
    matches!(
        flow,
        FlowControl::UnconditionalBranch
            | FlowControl::IndirectBranch
            | FlowControl::ConditionalBranch
            | FlowControl::Return
            | FlowControl::Call
            | FlowControl::IndirectCall
    )
}

/// One executable mapping resolved to its module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Index into [`ModuleMap::modules`].
    pub module: usize,
    pub bias: u64,
}

/// The modules of a recorded process and where they were mapped.
#[derive(Debug, Default)]
pub struct ModuleMap {
    pub modules: Vec<ElfModule>,
    pub mappings: Vec<Mapping>,
}

impl ModuleMap {
    /// Loads every file named by the MMAP2 lines. Files that cannot be loaded
    /// (or whose mapping matches no PT_LOAD) are returned as errors and left
    /// out; addresses in them then resolve to nothing.
    pub fn from_mmaps(mmaps: &[Mmap]) -> (ModuleMap, Vec<ElfError>) {
        let mut map = ModuleMap::default();
        let mut errors = Vec::new();
        for m in mmaps {
            let module = match map
                .modules
                .iter()
                .position(|x| x.path == Path::new(&m.path))
            {
                Some(i) => i,
                None => match ElfModule::load(Path::new(&m.path)) {
                    Ok(module) => {
                        map.modules.push(module);
                        map.modules.len() - 1
                    }
                    Err(e) => {
                        if !errors.contains(&e) {
                            errors.push(e);
                        }
                        continue;
                    }
                },
            };
            let mapping = FileMapping {
                start: m.start,
                pgoff: m.pgoff,
                executable: m.prot.as_bytes().get(2) == Some(&b'x'),
            };
            match map.modules[module].layout.load_bias(&mapping) {
                Some(bias) => map.mappings.push(Mapping {
                    start: m.start,
                    end: m.start + m.len,
                    module,
                    bias,
                }),
                None => errors.push(ElfError {
                    path: PathBuf::from(&m.path),
                    message: format!("no PT_LOAD holds file offset {:#x}", m.pgoff),
                }),
            }
        }
        map.mappings.sort_by_key(|m| m.start);
        (map, errors)
    }

    /// The module holding runtime address `address` and its link-time address.
    pub fn resolve(&self, address: u64) -> Option<(usize, u64)> {
        let i = self.mappings.partition_point(|m| m.start <= address);
        let m = self.mappings[..i].last().filter(|m| address < m.end)?;
        Some((m.module, address.wrapping_sub(m.bias)))
    }

    /// The module whose file name is `name`.
    pub fn module_by_basename(&self, name: &str) -> Option<(usize, &ElfModule)> {
        self.modules
            .iter()
            .enumerate()
            .find(|(_, m)| m.basename() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools;

    #[test]
    fn syscall_is_not_a_user_transfer() {
        let decode =
            |bytes: &[u8]| Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE).decode();
        assert_eq!(user_flow(&decode(&[0x0f, 0x05])), FlowControl::Interrupt);
        assert!(!is_transfer(user_flow(&decode(&[0x0f, 0x34]))));
        assert_eq!(user_flow(&decode(&[0xc3])), FlowControl::Return);
        assert_eq!(user_flow(&decode(&[0xe8, 0, 0, 0, 0])), FlowControl::Call);
    }

    fn build(dir: &Path, pie: bool) -> Option<PathBuf> {
        let clang = tools::require("clang-19")?;
        let source = dir.join("f.c");
        std::fs::write(
            &source,
            "int g(int x) { return x > 3 ? x * 7 : x + 1; }\n\
             int main(int argc, char **argv) { (void)argv; return g(argc); }\n",
        )
        .unwrap();
        let binary = dir.join(if pie { "pie" } else { "nopie" });
        let extra: &[&str] = if pie {
            &["-fPIE", "-pie"]
        } else {
            &["-fno-pie", "-no-pie"]
        };
        tools::compile_c(&clang, &[&source], &binary, extra).unwrap();
        Some(binary)
    }

    #[test]
    fn non_pie_offsets_and_instruction_index() {
        let dir = tools::scratch_dir("elf").unwrap();
        let Some(binary) = build(&dir, false) else {
            return;
        };
        let m = ElfModule::load(&binary).unwrap();
        assert_eq!(m.layout.first_load_vaddr(), 0x400000);
        let main = m.symbol("main").unwrap().clone();
        assert!(main.address > 0x400000);
        assert_eq!(m.afdo_offset(main.address), main.address - 0x400000);
        assert_eq!(
            m.symbol_at(main.address + 1).map(|s| s.name.as_str()),
            Some("main")
        );
        let index = m.instructions();
        let first = index
            .position(main.address)
            .expect("main starts an instruction");
        let body = &index.flows[first
            ..index
                .starts
                .partition_point(|&a| a < main.address + main.size)];
        assert!(body.iter().any(|&f| is_transfer(f)), "{body:?}");
        // Non-PIE: the bias of the executable mapping is 0.
        let text = m
            .layout
            .loads()
            .iter()
            .find(|s| s.vaddr_range().contains(&main.address))
            .unwrap();
        let mapping = FileMapping {
            start: text.vaddr & !0xfff,
            pgoff: text.offset & !0xfff,
            executable: true,
        };
        assert_eq!(m.layout.load_bias(&mapping), Some(0));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn pie_mapping_resolves_runtime_addresses() {
        let dir = tools::scratch_dir("elf").unwrap();
        let Some(binary) = build(&dir, true) else {
            return;
        };
        let m = ElfModule::load(&binary).unwrap();
        assert_eq!(m.layout.first_load_vaddr(), 0);
        let g = m.symbol("g").unwrap().clone();
        let text = *m
            .layout
            .loads()
            .iter()
            .find(|s| s.vaddr_range().contains(&g.address))
            .unwrap();
        let base = 0x5555_5555_4000u64;
        let mmap = Mmap {
            pid: 1,
            tid: 1,
            start: base + text.vaddr,
            len: text.memsz,
            pgoff: text.offset,
            major: 0,
            minor: 0,
            inode: 0,
            generation: 0,
            prot: "r-xp".into(),
            path: binary.display().to_string(),
        };
        let (map, errors) = ModuleMap::from_mmaps(&[mmap]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(map.resolve(base + g.address), Some((0, g.address)));
        assert_eq!(map.resolve(base), None);
        let instruction = m.decode_at(g.address).unwrap();
        assert_eq!(instruction.ip(), g.address);
        assert!(m.code_bytes(g.address, 4).is_some());
        let (missing_map, errors) = ModuleMap::from_mmaps(&[Mmap {
            path: "/nonexistent/x".into(),
            ..map_mmap(&binary)
        }]);
        assert!(missing_map.modules.is_empty());
        assert!(errors[0].to_string().contains("/nonexistent/x"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn map_mmap(binary: &Path) -> Mmap {
        Mmap {
            pid: 1,
            tid: 1,
            start: 0x1000,
            len: 0x1000,
            pgoff: 0,
            major: 0,
            minor: 0,
            inode: 0,
            generation: 0,
            prot: "r-xp".into(),
            path: binary.display().to_string(),
        }
    }
}
