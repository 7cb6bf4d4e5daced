//! What profile tools need to know about a binary, read from its ELF file
//! with `object` and its DWARF with `gimli` (through `addr2line`): build
//! id, symbols, debug info and its version, discriminators, code size; and
//! symbolisation of addresses for `report`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use addr2line::gimli;
use anyhow::{Context, Result};
use breakdance_protocol::elf_layout::{ElfLayout, LoadSegment};
use memmap2::Mmap;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SectionKind, SymbolKind};

/// A binary file, mapped.
pub struct Binary {
    pub path: PathBuf,
    data: Mmap,
}

/// A function symbol.
#[derive(Clone, Debug)]
pub struct Function {
    pub name: String,
    pub address: u64,
    pub size: u64,
}

/// The index of the function in `functions` (sorted by address, as
/// [`Binary::functions`] gives them) that holds link-time address
/// `address`: the last one starting at or before it, if the address lies
/// within its size (a symbol of size 0 reaches to the next one).
pub fn function_index(functions: &[Function], address: u64) -> Option<usize> {
    let i = functions
        .partition_point(|f| f.address <= address)
        .checked_sub(1)?;
    let f = &functions[i];
    (f.size == 0 || address < f.address + f.size).then_some(i)
}

/// A path's file name, for a column (the whole path when it has none).
pub fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// The facts `check` judges.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    pub build_id: Option<String>,
    /// A `.symtab` (gone after `strip`).
    pub has_symtab: bool,
    /// A `.debug_info` section with at least one unit.
    pub has_debug_info: bool,
    /// The file named by `.gnu_debuglink`, where the debug info went.
    pub debuglink: Option<String>,
    /// The DWARF versions of its compilation units, lowest and highest.
    pub dwarf_versions: Option<(u16, u16)>,
    /// A line-table row with a non-zero discriminator exists.
    pub has_discriminators: bool,
    /// Source lines whose code is split over several places: what
    /// discriminators tell apart.
    pub split_lines: usize,
    /// Bytes of executable code.
    pub code_size: u64,
}

type Reader<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;

impl Binary {
    pub fn open(path: &Path) -> Result<Binary> {
        let file =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        // SAFETY: the map is read-only; a file truncated under us makes
        // reads fault, as for any reader of a mapped binary.
        let data = unsafe { Mmap::map(&file) }
            .with_context(|| format!("cannot map {}", path.display()))?;
        let binary = Binary {
            path: path.to_path_buf(),
            data,
        };
        binary.object()?;
        Ok(binary)
    }

    fn object(&self) -> Result<object::File<'_>> {
        object::File::parse(&*self.data)
            .with_context(|| format!("{} is not an ELF file", self.path.display()))
    }

    pub fn build_id(&self) -> Option<String> {
        let id = self.object().ok()?.build_id().ok()??;
        Some(id.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The PT_LOADs, in the file's order: what the load bias and the
    /// profile offsets of its addresses come from.
    pub fn layout(&self) -> Option<ElfLayout> {
        let object = self.object().ok()?;
        let loads = object
            .segments()
            .map(|segment| {
                let (offset, filesz) = segment.file_range();
                LoadSegment {
                    vaddr: segment.address(),
                    offset,
                    filesz,
                    memsz: segment.size(),
                    executable: matches!(
                        segment.flags(),
                        object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0
                    ),
                }
            })
            .collect();
        Some(ElfLayout::new(loads))
    }

    /// Loads the DWARF sections (decompressed where needed) and hands them
    /// to `f`.
    fn with_dwarf<T>(&self, f: impl FnOnce(gimli::Dwarf<Reader<'_>>) -> T) -> Result<T> {
        let object = self.object()?;
        let endian = if object.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let mut sections: HashMap<gimli::SectionId, Cow<'_, [u8]>> = HashMap::new();
        for id in [
            gimli::SectionId::DebugAbbrev,
            gimli::SectionId::DebugAddr,
            gimli::SectionId::DebugInfo,
            gimli::SectionId::DebugLine,
            gimli::SectionId::DebugLineStr,
            gimli::SectionId::DebugStr,
            gimli::SectionId::DebugStrOffsets,
            gimli::SectionId::DebugRanges,
            gimli::SectionId::DebugRngLists,
            gimli::SectionId::DebugAranges,
        ] {
            if let Some(section) = object.section_by_name(id.name()) {
                let data = section.uncompressed_data().with_context(|| {
                    format!("{}: cannot read {}", self.path.display(), id.name())
                })?;
                sections.insert(id, data);
            }
        }
        let dwarf = gimli::Dwarf::load(|id| -> Result<Reader<'_>, gimli::Error> {
            let bytes = sections.get(&id).map_or(&[][..], |c| &c[..]);
            Ok(gimli::EndianSlice::new(bytes, endian))
        })
        .expect("loading from memory cannot fail");
        Ok(f(dwarf))
    }

    pub fn facts(&self) -> Result<Facts> {
        let object = self.object()?;
        let mut facts = Facts {
            build_id: self.build_id(),
            has_symtab: object.section_by_name(".symtab").is_some(),
            code_size: object
                .sections()
                .filter(|s| s.kind() == SectionKind::Text)
                .map(|s| s.size())
                .sum(),
            ..Facts::default()
        };
        if let Some(link) = object.section_by_name(".gnu_debuglink") {
            let data = link.data().unwrap_or_default();
            let name = data.split(|&b| b == 0).next().unwrap_or_default();
            facts.debuglink = Some(String::from_utf8_lossy(name).into_owned());
        }
        self.with_dwarf(|dwarf| read_dwarf_facts(&dwarf, &mut facts))??;
        Ok(facts)
    }

    /// Function symbols (the symbol table, else the dynamic one), sorted by
    /// address, names demangled.
    pub fn functions(&self) -> Result<Vec<Function>> {
        let object = self.object()?;
        let mut functions: Vec<Function> = object
            .symbols()
            .chain(object.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| {
                let name = s.name().ok()?;
                Some(Function {
                    name: addr2line::demangle_auto(Cow::Borrowed(name), None).into_owned(),
                    address: s.address(),
                    size: s.size(),
                })
            })
            .collect();
        functions.sort_by(|a, b| a.address.cmp(&b.address).then(b.size.cmp(&a.size)));
        functions.dedup_by_key(|f| f.address);
        Ok(functions)
    }

    /// Of the functions of 16 bytes or more, how many set up a frame
    /// pointer (`push rbp; mov rbp, rsp` within their first 48 bytes:
    /// after an `endbr64`, or after an early exit the compiler moved
    /// before it), and how many there are.
    pub fn frame_pointer_functions(&self) -> Result<(usize, usize)> {
        const SETUP: [u8; 4] = [0x55, 0x48, 0x89, 0xe5];
        let (mut kept, mut total) = (0, 0);
        for f in self.functions()?.iter().filter(|f| f.size >= 16) {
            let Some(code) = self.code_at(f.address) else {
                continue;
            };
            let head = &code[..code.len().min(f.size.min(48) as usize)];
            total += 1;
            if head.windows(SETUP.len()).any(|w| w == SETUP) {
                kept += 1;
            }
        }
        Ok((kept, total))
    }

    /// The bytes of executable code at link-time address `address`, to the
    /// end of its section.
    pub fn code_at(&self, address: u64) -> Option<&[u8]> {
        let object = self.object().ok()?;
        let section = object.sections().find(|s| {
            s.kind() == SectionKind::Text
                && (s.address()..s.address() + s.size()).contains(&address)
        })?;
        let data = section.data().ok()?;
        data.get((address - section.address()) as usize..)
    }

    /// `file:line` of each link-time address that has one, from DWARF.
    pub fn source_lines(&self, addresses: &[u64]) -> HashMap<u64, String> {
        let mut found = HashMap::new();
        let _ = self.with_dwarf(|dwarf| {
            let Ok(context) = addr2line::Context::from_dwarf(dwarf) else {
                return;
            };
            for &address in addresses {
                if let Ok(Some(location)) = context.find_location(address) {
                    if let (Some(file), Some(line)) = (location.file, location.line) {
                        let file = Path::new(file)
                            .file_name()
                            .map_or(file.into(), |n| n.to_string_lossy().into_owned());
                        found.insert(address, format!("{file}:{line}"));
                    }
                }
            }
        });
        found
    }
}

fn read_dwarf_facts(dwarf: &gimli::Dwarf<Reader<'_>>, facts: &mut Facts) -> Result<()> {
    let mut units = dwarf.units();
    // (file, line) -> the number of separate runs of rows it has.
    let mut runs: HashMap<(u64, u64), usize> = HashMap::new();
    while let Some(header) = units.next().context("malformed .debug_info")? {
        facts.has_debug_info = true;
        let version = header.version();
        facts.dwarf_versions = Some(match facts.dwarf_versions {
            None => (version, version),
            Some((lo, hi)) => (lo.min(version), hi.max(version)),
        });
        let unit = dwarf.unit(header).context("malformed DWARF unit")?;
        let Some(program) = unit.line_program.clone() else {
            continue;
        };
        let mut rows = program.rows();
        let mut previous: Option<(u64, u64)> = None;
        while let Some((_, row)) = rows.next_row().context("malformed .debug_line")? {
            if row.discriminator() != 0 {
                facts.has_discriminators = true;
            }
            if row.end_sequence() {
                previous = None;
                continue;
            }
            let key = (row.file_index(), row.line().map_or(0, |l| l.get()));
            if key.1 != 0 && previous != Some(key) {
                *runs.entry(key).or_default() += 1;
            }
            previous = Some(key);
        }
    }
    facts.split_lines = runs.values().filter(|&&n| n > 1).count();
    Ok(())
}
