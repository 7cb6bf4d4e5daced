//! The sites: every conditional branch of the main executable's `.text`,
//! found at start-up, in a table sorted by run-time address that the trap
//! handler searches without allocating.

use crate::cond::Condition;
use iced_x86::{Decoder, DecoderOptions, Instruction};
use object::{Object, ObjectSection, ObjectSegment};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// A site's hook state. Transitions are compare-and-swaps through
/// `Writing`, so a trap handler unhooking and the epoch thread re-hooking
/// the same site never interleave their byte writes.
pub const HOOKED: u8 = 0;
pub const UNHOOKED: u8 = 1;
pub const WRITING: u8 = 2;

/// The int3 opcode written over a site's first byte.
pub const INT3: u8 = 0xcc;

/// One conditional branch and its counters (shared by all threads).
pub struct Site {
    /// Link-time address (ELF vaddr; the file offset's address space
    /// callgrind reports for PIE).
    pub vaddr: u64,
    /// Link-time address of the taken target.
    pub target: u64,
    /// Instruction length: the fall-through is `vaddr + len`.
    pub len: u8,
    pub condition: Condition,
    /// The byte the int3 covers.
    pub original: u8,
    pub state: AtomicU8,
    /// Executions seen since the last hook (reset when re-hooked).
    pub epoch_executions: AtomicU64,
    pub taken: AtomicU64,
    pub not_taken: AtomicU64,
    pub hooks: AtomicU32,
    pub unhooks: AtomicU32,
}

impl Site {
    fn new(i: &Instruction, condition: Condition, original: u8) -> Site {
        Site {
            vaddr: i.ip(),
            target: i.near_branch_target(),
            len: i.len() as u8,
            condition,
            original,
            state: AtomicU8::new(UNHOOKED),
            epoch_executions: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            not_taken: AtomicU64::new(0),
            hooks: AtomicU32::new(0),
            unhooks: AtomicU32::new(0),
        }
    }

    pub fn fallthrough(&self) -> u64 {
        self.vaddr + u64::from(self.len)
    }

    pub fn executions(&self) -> u64 {
        self.taken.load(Ordering::Relaxed) + self.not_taken.load(Ordering::Relaxed)
    }
}

/// Decodes `.text` of the ELF image `elf` linearly and returns its sites,
/// sorted by address. Compilers put no data in `.text` on x86-64 (jump
/// tables live in `.rodata`), so a linear sweep finds the real
/// instructions; a byte that does not decode is skipped.
pub fn find(elf: &[u8]) -> Result<Vec<Site>, String> {
    let file = object::File::parse(elf).map_err(|e| format!("not an ELF file: {e}"))?;
    let text = file
        .section_by_name(".text")
        .ok_or("the executable has no .text section")?;
    let bytes = text.data().map_err(|e| format!("cannot read .text: {e}"))?;
    let mut sites = Vec::new();
    let mut decoder = Decoder::with_ip(64, bytes, text.address(), DecoderOptions::NONE);
    let mut i = Instruction::default();
    while decoder.can_decode() {
        let at = decoder.position();
        decoder.decode_out(&mut i);
        if i.is_invalid() {
            continue;
        }
        if let Some(c) = Condition::of(&i) {
            sites.push(Site::new(&i, c, bytes[at]));
        }
    }
    Ok(sites)
}

/// The difference run-time minus link-time address of the executable
/// mapped at `start` from file offset `offset`: the load bias (0 for a
/// non-PIE executable). The PT_LOAD segment holding that offset maps file
/// offset `o` to vaddr `o + p_vaddr - p_offset`.
pub fn load_bias(elf: &[u8], start: u64, offset: u64) -> Result<u64, String> {
    let file = object::File::parse(elf).map_err(|e| format!("not an ELF file: {e}"))?;
    // Two segments can share the page at their boundary: the one that
    // begins last at or before the mapping's page is the mapping's.
    let segment = file
        .segments()
        .map(|seg| seg_range(&seg))
        .filter(|&(off, size, _)| off & !0xfff <= offset && offset < off + size.max(1))
        .max_by_key(|&(off, _, _)| off);
    if let Some((off, _, vaddr)) = segment {
        let delta = vaddr.wrapping_sub(off);
        return Ok(start.wrapping_sub(offset).wrapping_sub(delta));
    }
    Err(format!(
        "no loadable segment of the executable holds file offset {offset:#x}"
    ))
}

/// A segment's file offset, file size and vaddr.
fn seg_range<'a>(seg: &impl ObjectSegment<'a>) -> (u64, u64, u64) {
    let (off, size) = seg.file_range();
    (off, size, seg.address())
}

/// One line of /proc/self/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub executable: bool,
    pub offset: u64,
    pub path: String,
}

/// Parses /proc/self/maps text (lines that do not parse are skipped).
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_ascii_whitespace();
            let (range, perms, offset) = (f.next()?, f.next()?, f.next()?);
            let (_dev, _inode) = (f.next()?, f.next()?);
            let path = f.collect::<Vec<_>>().join(" ");
            let (s, e) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(s, 16).ok()?,
                end: u64::from_str_radix(e, 16).ok()?,
                executable: perms.as_bytes().get(2) == Some(&b'x'),
                offset: u64::from_str_radix(offset, 16).ok()?,
                path,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse() {
        let text = "55d0c0a00000-55d0c0a02000 r--p 00000000 fe:01 123 /usr/bin/my prog\n\
                    55d0c0a02000-55d0c0a07000 r-xp 00002000 fe:01 123 /usr/bin/my prog\n\
                    7ffd1000-7ffd3000 rw-p 00000000 00:00 0\n";
        let m = parse_maps(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].start, 0x55d0c0a02000);
        assert!(m[1].executable && !m[0].executable);
        assert_eq!(m[1].offset, 0x2000);
        assert_eq!(m[1].path, "/usr/bin/my prog");
        assert_eq!(m[2].path, "");
    }

    /// Against this very test binary: the bias from its maps puts a
    /// function's link-time address at the function's run-time address.
    #[test]
    fn load_bias_maps_link_time_to_run_time() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let path = std::fs::read_link("/proc/self/exe").unwrap();
        let maps = parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let m = maps
            .iter()
            .find(|m| m.executable && m.path == path.to_str().unwrap())
            .unwrap();
        let bias = load_bias(&exe, m.start, m.offset).unwrap();
        let file = object::File::parse(&*exe).unwrap();
        let sym = object::ObjectSymbol::address(
            &object::Object::symbols(&file)
                .find(|s| {
                    object::ObjectSymbol::name(s)
                        .is_ok_and(|n| n.contains("load_bias_maps_link_time_to_run_time"))
                })
                .unwrap(),
        );
        let here = load_bias_maps_link_time_to_run_time as fn() as usize as u64;
        assert_eq!(sym.wrapping_add(bias), here);
    }

    #[test]
    fn a_file_that_is_not_elf_is_refused() {
        assert!(find(b"nope").is_err_and(|e| e.contains("not an ELF")));
        assert!(load_bias(b"nope", 0, 0).is_err());
    }
}
