//! Loaded modules: the executable file mappings of /proc/self/maps and what
//! their ELF files say (PT_LOADs and load bias, build id, rseq critical
//! sections). Used at session start (the handler's table of executable
//! ranges, rseq ranges) and by the writer (ELF virtual addresses and
//! profile offsets by `protocol::elf_layout`, MMAP2 lines). Not for handlers: it reads files and allocates.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use breakdance_protocol::elf_layout::{ElfLayout, FileMapping, LoadSegment};
use object::elf;
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::{Endianness, Object, ObjectSection};

/// One line of /proc/self/maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub offset: u64,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
    /// File path, or a bracketed name like `[vdso]`, or empty.
    pub path: String,
}

impl Mapping {
    /// Executable and anonymous, or executable and writable: a JIT's code.
    pub fn is_generated_code(&self) -> bool {
        let p = self.perms.as_bytes();
        let anonymous = self.path.is_empty() || self.path.starts_with("[anon:");
        p.get(2) == Some(&b'x') && (anonymous || p.get(1) == Some(&b'w'))
    }

    /// Writable and private (`rw-p`), and not one of the kernel's special
    /// mappings: memory only the process's own threads write (anonymous
    /// memory, the heap, stacks, a file's private copy). A bracketed name
    /// other than the heap, a stack or a named anonymous mapping is the
    /// kernel's (`[vvar]`, `[uprobes]`, ...).
    pub fn is_private_writable(&self) -> bool {
        let p = self.perms.as_bytes();
        let special = self.path.starts_with('[')
            && !(self.path == "[heap]"
                || self.path.starts_with("[stack")
                || self.path.starts_with("[anon:"));
        p.get(1) == Some(&b'w') && p.get(3) == Some(&b'p') && !special
    }

    pub fn is_exec(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    /// A mapping of a file (not anonymous, not `[vdso]`, not deleted).
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/') && self.inode != 0 && !self.path.ends_with(" (deleted)")
    }
}

/// Parses the text of a /proc/PID/maps file.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_maps_line).collect()
}

fn parse_maps_line(line: &str) -> Option<Mapping> {
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    let perms = fields.next()?.to_string();
    let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
    let (maj, min) = fields.next()?.split_once(':')?;
    let inode = fields.next()?.parse().ok()?;
    let path = fields.next().unwrap_or("").trim_start().to_string();
    let (start, end) = range.split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms,
        offset,
        dev_major: u32::from_str_radix(maj, 16).ok()?,
        dev_minor: u32::from_str_radix(min, 16).ok()?,
        inode,
        path,
    })
}

pub fn read_self_maps() -> std::io::Result<Vec<Mapping>> {
    Ok(parse_maps(&std::fs::read_to_string("/proc/self/maps")?))
}

/// A loaded ELF module and where it sits in memory.
#[derive(Clone, Debug)]
pub struct Module {
    pub path: PathBuf,
    /// Executable mappings of the file.
    pub exec: Vec<Mapping>,
    /// All mappings of the file (for the load address).
    pub load_address: u64,
    /// Runtime address minus ELF virtual address, from `layout`.
    pub bias: u64,
    /// The file's PT_LOADs: the rule for its addresses.
    pub layout: ElfLayout,
    pub build_id: Option<String>,
    /// rseq critical sections, runtime [start, end).
    pub rseq: Vec<(u64, u64)>,
    /// Private mappings of the file without write permission (code,
    /// read-only data, RELRO): memory nothing can change.
    pub immutable: Vec<(u64, u64)>,
}

impl Module {
    /// The ELF virtual address of runtime address `addr`: what BOLT reads.
    pub fn vaddr_of(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.bias)
    }

    /// The offset create_llvm_prof reads for runtime address `addr`.
    pub fn profile_offset(&self, addr: u64) -> u64 {
        self.layout.profile_offset(self.vaddr_of(addr))
    }

    pub fn contains(&self, addr: u64) -> bool {
        self.exec.iter().any(|m| m.start <= addr && addr < m.end)
    }

    pub fn basename(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

#[derive(Clone)]
struct ElfFacts {
    layout: ElfLayout,
    build_id: Option<String>,
    /// (link-time address, size) of the __rseq_cs section.
    rseq_section: Option<(u64, u64)>,
}

/// Files already read, by (device, inode, path): the worker looks at the
/// maps every 200 ms, and they change whenever the process maps anything,
/// while its modules stay the same. Bounded; a file replaced on disk has
/// a new inode.
static FACTS: std::sync::Mutex<Vec<(FileKey, Option<ElfFacts>)>> =
    std::sync::Mutex::new(Vec::new());
/// (device major, minor, inode, path) of a mapped file.
type FileKey = (u32, u32, u64, String);
const FACTS_KEPT: usize = 256;

/// `elf_facts` of the file `m` maps, read once. (`try_lock`: a fork child
/// that inherited the lock held reads the file again rather than wait.)
fn elf_facts_of(m: &Mapping) -> Option<ElfFacts> {
    let key = (m.dev_major, m.dev_minor, m.inode, m.path.clone());
    let Ok(mut cache) = FACTS.try_lock() else {
        return elf_facts(Path::new(&m.path));
    };
    if let Some((_, facts)) = cache.iter().find(|(k, _)| *k == key) {
        return facts.clone();
    }
    let facts = elf_facts(Path::new(&m.path));
    if cache.len() == FACTS_KEPT {
        cache.clear();
    }
    cache.push((key, facts.clone()));
    facts
}

fn elf_facts(path: &Path) -> Option<ElfFacts> {
    // Mapped, not read: only the headers, notes and section table are
    // touched, where reading a binary with debug info costs milliseconds
    // at every start and stop.
    let file = std::fs::File::open(path).ok()?;
    // SAFETY: the file is a loaded module of this process, mapped read-only
    // and private; a module rewritten in place while it runs would break the
    // program before it broke this read.
    let data = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let file = ElfFile64::<Endianness>::parse(&*data).ok()?;
    let endian = file.endian();
    let mut loads = Vec::new();
    for ph in file.elf_header().program_headers(endian, &*data).ok()? {
        if ph.p_type(endian) == elf::PT_LOAD {
            loads.push(LoadSegment {
                vaddr: ph.p_vaddr(endian),
                offset: ph.p_offset(endian),
                filesz: ph.p_filesz(endian),
                memsz: ph.p_memsz(endian),
                executable: ph.p_flags(endian) & elf::PF_X != 0,
            });
        }
    }
    let build_id = file
        .build_id()
        .ok()
        .flatten()
        .map(|id| id.iter().map(|b| format!("{b:02x}")).collect());
    let rseq_section = file
        .section_by_name("__rseq_cs")
        .map(|s| (s.address(), s.size()));
    Some(ElfFacts {
        layout: ElfLayout::new(loads),
        build_id,
        rseq_section,
    })
}

/// Groups the executable file mappings by file and reads each ELF once.
/// Files that are not ELF (or unreadable) are kept with a zero bias so that
/// their addresses still show in perf.script.
pub fn modules_from_maps(maps: &[Mapping]) -> Vec<Module> {
    let mut by_path: BTreeMap<&str, Vec<&Mapping>> = BTreeMap::new();
    for m in maps.iter().filter(|m| m.is_file()) {
        by_path.entry(&m.path).or_default().push(m);
    }
    let mut modules = Vec::new();
    for (path, maps) in by_path {
        let mut exec: Vec<Mapping> = maps
            .iter()
            .filter(|m| m.is_exec())
            .map(|m| (*m).clone())
            .collect();
        if exec.is_empty() {
            continue;
        }
        let load_address = maps.iter().map(|m| m.start - m.offset).min().unwrap_or(0);
        let facts = elf_facts_of(&exec[0]);
        let file_mapping = |m: &Mapping| FileMapping {
            start: m.start,
            pgoff: m.offset,
            executable: m.is_exec(),
        };
        let (bias, layout, build_id, rseq_section) = match facts {
            Some(f) => {
                // The load the loader made maps the file's start (its ELF
                // header, in the first PT_LOAD) at the first PT_LOAD's
                // page. Without such a mapping, the first executable one
                // says.
                let bias = match maps.iter().find(|m| m.offset == 0) {
                    Some(start) => start.start.wrapping_sub(
                        f.layout.first_load_vaddr()
                            & !(breakdance_protocol::elf_layout::PAGE_SIZE - 1),
                    ),
                    None => f
                        .layout
                        .load_bias(&file_mapping(&exec[0]))
                        .unwrap_or(load_address),
                };
                // A second copy of the file's code at another bias (node
                // remaps V8's embedded builtins next to its JIT code) is not
                // this module's: one module has one bias in every output,
                // and llvm-profgen takes one base per binary. A trace that
                // reaches such a copy ends there (outside_mappings).
                exec.retain(|m| f.layout.load_bias(&file_mapping(m)) == Some(bias));
                if exec.is_empty() {
                    continue;
                }
                (bias, f.layout, f.build_id, f.rseq_section)
            }
            None => (load_address, ElfLayout::default(), None, None),
        };
        let rseq = rseq_section
            .map(|(addr, size)| read_rseq_ranges(addr.wrapping_add(bias), size, maps.as_slice()))
            .unwrap_or_default();
        let immutable = maps
            .iter()
            .filter(|m| {
                m.perms.as_bytes().get(1) != Some(&b'w') && m.perms.as_bytes().get(3) == Some(&b'p')
            })
            .map(|m| (m.start, m.end))
            .collect();
        modules.push(Module {
            path: PathBuf::from(path),
            exec,
            load_address,
            bias,
            layout,
            build_id,
            rseq,
            immutable,
        });
    }
    modules
}

/// Reads `struct rseq_cs { u32 version, flags; u64 start_ip,
/// post_commit_offset, abort_ip; }` records from the relocated section in
/// memory (the file holds unrelocated values for PIE).
fn read_rseq_ranges(addr: u64, size: u64, maps: &[&Mapping]) -> Vec<(u64, u64)> {
    let readable = maps
        .iter()
        .any(|m| m.start <= addr && addr + size <= m.end && m.perms.starts_with('r'));
    if !readable || size % 32 != 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for i in 0..size / 32 {
        let rec = (addr + i * 32) as *const u64;
        // SAFETY: the record lies inside a readable mapping of this process
        // (checked above); the section is 32-byte aligned by the ABI.
        let (start, len) = unsafe { (rec.add(1).read_unaligned(), rec.add(2).read_unaligned()) };
        if len > 0 && len < 1 << 20 {
            out.push((start, start + len));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_memory_and_generated_code_are_told_from_maps() {
        let maps = parse_maps(
            "55d0c1e00000-55d0c1e01000 r-xp 00001000 08:01 131090 /tmp/prog\n\
             55d0c1e02000-55d0c1e03000 rw-p 00002000 08:01 131090 /tmp/prog\n\
             55d0c2000000-55d0c2100000 rw-p 00000000 00:00 0 [heap]\n\
             7f0000000000-7f0000100000 rw-p 00000000 00:00 0\n\
             7f0000100000-7f0000200000 rw-s 00000000 00:05 42 /dev/shm/x\n\
             7f0000200000-7f0000201000 rwxp 00000000 00:00 0\n\
             7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n\
             7ffd00100000-7ffd00104000 r--p 00000000 00:00 0 [vvar]\n\
             7ffd00104000-7ffd00106000 r-xp 00000000 00:00 0 [vdso]\n",
        );
        let private: Vec<bool> = maps.iter().map(Mapping::is_private_writable).collect();
        assert_eq!(
            private,
            [false, true, true, true, false, true, true, false, false]
        );
        let generated: Vec<bool> = maps.iter().map(Mapping::is_generated_code).collect();
        assert_eq!(
            generated,
            [false, false, false, false, false, true, false, false, false]
        );
    }

    #[test]
    fn maps_lines_parse() {
        let text = "55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 1234 /usr/bin/prog\n\
                    55d0c0a01000-55d0c0a02000 r-xp 00001000 fd:01 1234 /usr/bin/prog\n\
                    7ffd1000-7ffd3000 r-xp 00000000 00:00 0                          [vdso]\n\
                    7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 4);
        assert_eq!(maps[1].start, 0x55d0c0a01000);
        assert_eq!(maps[1].offset, 0x1000);
        assert_eq!(
            (maps[1].dev_major, maps[1].dev_minor, maps[1].inode),
            (0xfd, 1, 1234)
        );
        assert!(maps[1].is_exec() && maps[1].is_file());
        assert!(maps[2].is_exec() && !maps[2].is_file());
        assert_eq!(maps[3].path, "");
    }

    #[test]
    fn own_test_binary_is_a_module_with_a_bias() {
        let maps = read_self_maps().unwrap();
        let modules = modules_from_maps(&maps);
        let me = std::env::current_exe().unwrap();
        let m = modules
            .iter()
            .find(|m| m.path == me)
            .expect("the test binary is mapped");
        let here = own_test_binary_is_a_module_with_a_bias as *const () as usize as u64;
        assert!(m.contains(here));
        // The function's offset lands inside the file's text.
        assert!(m.profile_offset(here) < std::fs::metadata(&me).unwrap().len());
        assert!(m.layout.is_code(m.vaddr_of(here)));
        assert!(m.build_id.is_some());
    }

    /// A second mapping of the module's code at another bias (as node
    /// maps V8's embedded builtins a second time, next to its JIT code) is
    /// left out: the module keeps its loader's mappings and its bias.
    #[test]
    fn a_second_copy_of_the_code_at_another_bias_is_not_the_module() {
        let mut maps = read_self_maps().unwrap();
        let me = std::env::current_exe().unwrap();
        let text = maps
            .iter()
            .find(|m| m.is_exec() && Path::new(&m.path) == me)
            .cloned()
            .expect("the test binary's text is mapped");
        let alone = modules_from_maps(&maps);
        let before = alone.iter().find(|m| m.path == me).unwrap();
        let mut copy = text.clone();
        copy.start = 0x7e00_0000_0000;
        copy.end = copy.start + (text.end - text.start);
        maps.push(copy.clone());
        let modules = modules_from_maps(&maps);
        let m = modules.iter().find(|m| m.path == me).unwrap();
        assert_eq!(m.bias, before.bias);
        assert_eq!(m.exec.len(), before.exec.len());
        assert!(!m.contains(copy.start));
        assert!(m.contains(text.start));
    }
}
