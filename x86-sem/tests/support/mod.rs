//! What the decoder's test and its bench both read: the code of ELF
//! files. (`tests/quick.rs` has it as a module; `benches/decode.rs` by
//! path.)

/// The executable PT_LOAD segments of the ELF file at `path`: (virtual
/// address, bytes).
pub fn text_of(path: &str) -> Vec<(u64, Vec<u8>)> {
    let Ok(file) = std::fs::read(path) else {
        return Vec::new();
    };
    let u16_at = |o: usize| u16::from_le_bytes(file[o..o + 2].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(file[o..o + 8].try_into().unwrap());
    assert_eq!(&file[..4], b"\x7fELF", "{path} is not an ELF file");
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36), u16_at(0x38));
    let mut out = Vec::new();
    for k in 0..phnum {
        let ph = phoff + k * phentsize;
        let (kind, flags) = (
            u32::from_le_bytes(file[ph..ph + 4].try_into().unwrap()),
            u32::from_le_bytes(file[ph + 4..ph + 8].try_into().unwrap()),
        );
        if kind == 1 && flags & 1 != 0 {
            let (off, vaddr, filesz) = (
                u64_at(ph + 8) as usize,
                u64_at(ph + 16),
                u64_at(ph + 32) as usize,
            );
            out.push((vaddr, file[off..off + filesz].to_vec()));
        }
    }
    out
}
