//! Loader for static x86-64 ELF executables (musl-gcc -static, -nostdlib,
//! static-pie) and the initial process stack the Linux ABI prescribes.

use super::mem::{GuestMemory, Prot, PAGE};
use std::path::Path;

/// Where a static-pie (ET_DYN without PT_INTERP) is placed.
pub const PIE_BASE: u64 = 0x5555_5555_4000;
/// Top of the guest stack and its size.
pub const STACK_TOP: u64 = 0x7fff_ff00_0000;
pub const STACK_SIZE: u64 = 8 << 20;

/// A loaded image: where it starts and where the heap begins.
#[derive(Debug, Clone)]
pub struct Image {
    pub entry: u64,
    pub phdr_addr: u64,
    pub phnum: u64,
    pub brk_start: u64,
}

/// Errors of loading, each naming the file and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {what}")]
    Format { path: String, what: String },
}

fn u16_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from(u16::from_le_bytes(
        b.get(off..off + 2)?.try_into().ok()?,
    )))
}
fn u32_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from(u32::from_le_bytes(
        b.get(off..off + 4)?.try_into().ok()?,
    )))
}
fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

const PT_LOAD: u64 = 1;
const PT_INTERP: u64 = 3;
const PF_X: u64 = 1;
const PF_W: u64 = 2;
const PF_R: u64 = 4;

struct Segment {
    vaddr: u64,
    memsz: u64,
    offset: u64,
    filesz: u64,
    flags: u64,
}

/// Maps the PT_LOAD segments of the ELF file at `path` into `mem`.
pub fn load(path: &Path, mem: &mut GuestMemory) -> Result<Image, LoadError> {
    let p = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
        path: p.clone(),
        source,
    })?;
    let bad = |what: &str| LoadError::Format {
        path: p.clone(),
        what: what.to_string(),
    };
    if bytes.get(..4) != Some(b"\x7fELF") {
        return Err(bad("not an ELF file"));
    }
    if bytes[4] != 2 || bytes[5] != 1 || u16_at(&bytes, 18) != Some(62) {
        return Err(bad("not a little-endian x86-64 ELF64 file"));
    }
    let etype = u16_at(&bytes, 16).ok_or_else(|| bad("truncated header"))?;
    let base = match etype {
        2 => 0,
        3 => PIE_BASE,
        _ => return Err(bad("not an executable (ET_EXEC or static-pie ET_DYN)")),
    };
    let entry = u64_at(&bytes, 24).ok_or_else(|| bad("truncated header"))? + base;
    let phoff = u64_at(&bytes, 32).ok_or_else(|| bad("truncated header"))?;
    let phentsize = u16_at(&bytes, 54).ok_or_else(|| bad("truncated header"))?;
    let phnum = u16_at(&bytes, 56).ok_or_else(|| bad("truncated header"))?;
    let mut segments = Vec::new();
    let mut phdr_addr = 0;
    for i in 0..phnum {
        let o = (phoff + i * phentsize) as usize;
        let field =
            |off: usize| u64_at(&bytes, o + off).ok_or_else(|| bad("truncated program header"));
        let ptype = u32_at(&bytes, o).ok_or_else(|| bad("truncated program header"))?;
        let flags = u32_at(&bytes, o + 4).ok_or_else(|| bad("truncated program header"))?;
        if ptype == PT_INTERP {
            return Err(bad(
                "dynamically linked (has PT_INTERP); build it with -static",
            ));
        }
        if ptype != PT_LOAD {
            continue;
        }
        let seg = Segment {
            offset: field(8)?,
            vaddr: field(16)? + base,
            filesz: field(32)?,
            memsz: field(40)?,
            flags,
        };
        if seg.offset <= phoff && phoff < seg.offset + seg.filesz {
            phdr_addr = seg.vaddr + (phoff - seg.offset);
        }
        if seg.offset + seg.filesz > bytes.len() as u64 || seg.filesz > seg.memsz {
            return Err(bad("PT_LOAD segment outside the file"));
        }
        segments.push(seg);
    }
    if segments.is_empty() {
        return Err(bad("no PT_LOAD segment"));
    }
    segments.sort_by_key(|s| s.vaddr);
    // Segments whose pages overlap share one region with the union of rights.
    let mut ranges: Vec<(u64, u64, Prot)> = Vec::new();
    for s in &segments {
        let start = s.vaddr & !(PAGE - 1);
        let end = (s.vaddr + s.memsz).div_ceil(PAGE) * PAGE;
        let prot = Prot {
            read: s.flags & PF_R != 0,
            write: s.flags & PF_W != 0,
            exec: s.flags & PF_X != 0,
        };
        match ranges.last_mut() {
            Some(last) if start < last.1 => {
                last.1 = last.1.max(end);
                last.2 = Prot {
                    read: last.2.read || prot.read,
                    write: last.2.write || prot.write,
                    exec: last.2.exec || prot.exec,
                };
            }
            _ => ranges.push((start, end, prot)),
        }
    }
    for &(start, end, prot) in &ranges {
        let name = if prot.exec { "text" } else { "data" };
        mem.map(start, end - start, prot, name)
            .map_err(|e| bad(&e))?;
    }
    for s in &segments {
        let data = &bytes[s.offset as usize..(s.offset + s.filesz) as usize];
        mem.poke(s.vaddr, data)
            .map_err(|_| bad("segment does not fit its mapping"))?;
    }
    let brk_start = ranges.last().map(|r| r.1).unwrap_or(0);
    Ok(Image {
        entry,
        phdr_addr,
        phnum,
        brk_start,
    })
}

const AT_NULL: u64 = 0;
const AT_PHDR: u64 = 3;
const AT_PHENT: u64 = 4;
const AT_PHNUM: u64 = 5;
const AT_PAGESZ: u64 = 6;
const AT_BASE: u64 = 7;
const AT_ENTRY: u64 = 9;
const AT_UID: u64 = 11;
const AT_EUID: u64 = 12;
const AT_GID: u64 = 13;
const AT_EGID: u64 = 14;
const AT_CLKTCK: u64 = 17;
const AT_SECURE: u64 = 23;
const AT_RANDOM: u64 = 25;
const AT_EXECFN: u64 = 31;

/// Maps the stack and writes argc, argv, envp and the auxiliary vector;
/// returns the initial stack pointer. `random` fills AT_RANDOM's 16 bytes.
pub fn setup_stack(
    mem: &mut GuestMemory,
    image: &Image,
    args: &[String],
    env: &[String],
    random: [u8; 16],
) -> Result<u64, String> {
    mem.map(STACK_TOP - STACK_SIZE, STACK_SIZE, Prot::RW, "stack")?;
    let mut sp = STACK_TOP;
    let mut push_bytes = |mem: &mut GuestMemory, b: &[u8]| -> Result<u64, String> {
        sp -= b.len() as u64;
        mem.poke(sp, b)
            .map_err(|_| "stack overflow writing arguments".to_string())?;
        Ok(sp)
    };
    let mut cstr = |mem: &mut GuestMemory, s: &str| {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        push_bytes(mem, &v)
    };
    let arg_ptrs: Vec<u64> = args
        .iter()
        .map(|a| cstr(mem, a))
        .collect::<Result<_, _>>()?;
    let env_ptrs: Vec<u64> = env.iter().map(|e| cstr(mem, e)).collect::<Result<_, _>>()?;
    let execfn = arg_ptrs.first().copied().unwrap_or(0);
    let rand_ptr = push_bytes(mem, &random)?;
    let auxv = [
        (AT_PHDR, image.phdr_addr),
        (AT_PHENT, 56),
        (AT_PHNUM, image.phnum),
        (AT_PAGESZ, PAGE),
        (AT_BASE, 0),
        (AT_ENTRY, image.entry),
        (AT_UID, 0),
        (AT_EUID, 0),
        (AT_GID, 0),
        (AT_EGID, 0),
        (AT_CLKTCK, 100),
        (AT_SECURE, 0),
        (AT_RANDOM, rand_ptr),
        (AT_EXECFN, execfn),
        (AT_NULL, 0),
    ];
    let mut words: Vec<u64> = vec![args.len() as u64];
    words.extend(&arg_ptrs);
    words.push(0);
    words.extend(&env_ptrs);
    words.push(0);
    for (k, v) in auxv {
        words.push(k);
        words.push(v);
    }
    let mut sp = (sp - words.len() as u64 * 8) & !15;
    let start = sp;
    for w in words {
        mem.poke(sp, &w.to_le_bytes())
            .map_err(|_| "stack overflow writing the auxiliary vector".to_string())?;
        sp += 8;
    }
    Ok(start)
}

/// The symbols of an ELF file's `.symtab`: (name, value) pairs.
pub fn symbols(path: &Path) -> Result<Vec<(String, u64)>, LoadError> {
    let p = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
        path: p.clone(),
        source,
    })?;
    let bad = |what: &str| LoadError::Format {
        path: p.clone(),
        what: what.to_string(),
    };
    if bytes.get(..4) != Some(b"\x7fELF") {
        return Err(bad("not an ELF file"));
    }
    let shoff = u64_at(&bytes, 40).ok_or_else(|| bad("truncated header"))? as usize;
    let shentsize = u16_at(&bytes, 58).ok_or_else(|| bad("truncated header"))? as usize;
    let shnum = u16_at(&bytes, 60).ok_or_else(|| bad("truncated header"))? as usize;
    let section = |i: usize| -> Option<(u64, usize, usize, usize, usize)> {
        let o = shoff + i * shentsize;
        Some((
            u32_at(&bytes, o + 4)?,
            u64_at(&bytes, o + 24)? as usize,
            u64_at(&bytes, o + 32)? as usize,
            u32_at(&bytes, o + 40)? as usize,
            u64_at(&bytes, o + 56)? as usize,
        ))
    };
    const SHT_SYMTAB: u64 = 2;
    let mut out = Vec::new();
    for i in 0..shnum {
        let Some((kind, off, size, link, entsize)) = section(i) else {
            return Err(bad("truncated section header"));
        };
        if kind != SHT_SYMTAB || entsize == 0 {
            continue;
        }
        let (_, str_off, str_size, _, _) = section(link).ok_or_else(|| bad("bad string table"))?;
        let strtab = bytes
            .get(str_off..str_off + str_size)
            .ok_or_else(|| bad("bad string table"))?;
        for k in 0..size / entsize {
            let e = off + k * entsize;
            let name_off = u32_at(&bytes, e).ok_or_else(|| bad("truncated symbol table"))? as usize;
            let value = u64_at(&bytes, e + 8).ok_or_else(|| bad("truncated symbol table"))?;
            let name = strtab.get(name_off..).unwrap_or_default();
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            out.push((String::from_utf8_lossy(&name[..end]).into_owned(), value));
        }
    }
    Ok(out)
}
