//! Where an ELF file's code sits at run time, and the addresses profiles
//! name it by: the one rule the tracer, profiler-ctl and bench-harness
//! share (DESIGN.md, "Output formats").
//!
//! Three address spaces:
//! - runtime address: where the code ran (perf.script holds these);
//! - ELF virtual address (`vaddr`): the address the file's headers,
//!   symbols and DWARF use; runtime address minus the load bias;
//! - profile offset: `vaddr` minus the `p_vaddr` of the first PT_LOAD, what
//!   the AutoFDO text and the BOLT pre-aggregated profile hold (0x1130 for
//!   0x401130 in a non-PIE binary; the `vaddr` itself for PIE and shared
//!   objects, whose first PT_LOAD is at 0).
//!
//! The load bias of a mapping `[start, …) @ pgoff` comes from the PT_LOAD
//! that holds file offset `pgoff`: that byte's link-time address is
//! `p_vaddr + (pgoff - p_offset)` and its runtime address is `start`. A
//! file offset is not an address: bfd and gold (as used here) happen to lay
//! text out at an address equal to its offset, lld does not (text at vaddr
//! 0x16a0, file offset 0x6a0), and a rule that confuses the two is right
//! for one linker only.
//!
//! Pure arithmetic over the program headers: each caller reads them with
//! its own ELF reader and hands over the PT_LOADs.

/// One PT_LOAD program header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSegment {
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_offset`.
    pub offset: u64,
    /// `p_filesz`.
    pub filesz: u64,
    /// `p_memsz`.
    pub memsz: u64,
    /// `PF_X` is set.
    pub executable: bool,
}

impl LoadSegment {
    /// The segment's ELF virtual addresses, `[p_vaddr, p_vaddr + p_memsz)`.
    pub fn vaddr_range(&self) -> std::ops::Range<u64> {
        self.vaddr..self.vaddr.saturating_add(self.memsz)
    }

    /// A mapping starting at file offset `pgoff` can map this segment: the
    /// kernel maps a segment from the page holding `p_offset`, and a
    /// mapping split later (mprotect, RELRO) starts further in.
    fn holds_page(&self, pgoff: u64) -> bool {
        self.offset & !(PAGE_SIZE - 1) <= pgoff && pgoff < self.offset + self.filesz.max(1)
    }
}

/// The page size the kernel maps segments with on x86-64.
pub const PAGE_SIZE: u64 = 4096;

/// The load bias of the mapping `[start, …) @ pgoff` of `segment`:
/// runtime address minus ELF virtual address. The byte at file offset
/// `pgoff` was linked at `p_vaddr + (pgoff - p_offset)` and runs at
/// `start`. `pgoff` may lie below `p_offset` (the page holding the
/// segment's first byte): the arithmetic wraps and comes out the same.
pub fn load_bias(segment: &LoadSegment, start: u64, pgoff: u64) -> u64 {
    let linked = segment
        .vaddr
        .wrapping_add(pgoff)
        .wrapping_sub(segment.offset);
    start.wrapping_sub(linked)
}

/// A file mapping as /proc/PID/maps or a PERF_RECORD_MMAP2 line gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileMapping {
    /// Runtime address of the mapping's first byte.
    pub start: u64,
    /// File offset of that byte (page-aligned).
    pub pgoff: u64,
    /// The mapping is executable (`x` in its permissions).
    pub executable: bool,
}

/// The PT_LOAD segments of one ELF file, in program-header order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElfLayout {
    loads: Vec<LoadSegment>,
}

impl ElfLayout {
    /// `loads`: the PT_LOAD headers in the file's order (the first one
    /// fixes the profile offsets).
    pub fn new(loads: Vec<LoadSegment>) -> ElfLayout {
        ElfLayout { loads }
    }

    pub fn loads(&self) -> &[LoadSegment] {
        &self.loads
    }

    /// `p_vaddr` of the first PT_LOAD, the origin of profile offsets; 0
    /// for a file without one.
    pub fn first_load_vaddr(&self) -> u64 {
        self.loads.first().map_or(0, |s| s.vaddr)
    }

    /// The PT_LOAD that `mapping` maps. Several segments can share a file
    /// page (lld without `-z separate-code` puts its read-only, executable
    /// and writable segments on page 0 of a small file), so the mapping's
    /// own permission decides: an executable mapping is the executable
    /// segment, exactly (every profile works from executable mappings).
    /// Among segments alike in that, the later one is taken (a mapping that
    /// starts a segment is more common than one split off inside it); for
    /// non-executable mappings that guess can be wrong when two such
    /// segments share a page.
    pub fn segment_of(&self, mapping: &FileMapping) -> Option<&LoadSegment> {
        self.loads
            .iter()
            .filter(|s| s.holds_page(mapping.pgoff))
            .max_by_key(|s| (s.executable == mapping.executable, s.offset))
    }

    /// Runtime address minus ELF virtual address for `mapping`, or `None`
    /// when no PT_LOAD holds its file offset (not this file, or not a
    /// loaded part of it).
    pub fn load_bias(&self, mapping: &FileMapping) -> Option<u64> {
        self.segment_of(mapping)
            .map(|s| load_bias(s, mapping.start, mapping.pgoff))
    }

    /// The profile offset (AutoFDO text, BOLT) of ELF virtual address `vaddr`.
    pub fn profile_offset(&self, vaddr: u64) -> u64 {
        vaddr.wrapping_sub(self.first_load_vaddr())
    }

    /// The ELF virtual address of profile offset `offset`.
    pub fn vaddr_of_profile_offset(&self, offset: u64) -> u64 {
        offset.wrapping_add(self.first_load_vaddr())
    }

    /// `vaddr` lies in an executable segment: where every address of a
    /// profile must fall.
    pub fn is_code(&self, vaddr: u64) -> bool {
        self.loads
            .iter()
            .any(|s| s.executable && s.vaddr_range().contains(&vaddr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(vaddr: u64, offset: u64, size: u64, executable: bool) -> LoadSegment {
        LoadSegment {
            vaddr,
            offset,
            filesz: size,
            memsz: size,
            executable,
        }
    }

    fn exec_at(start: u64, pgoff: u64) -> FileMapping {
        FileMapping {
            start,
            pgoff,
            executable: true,
        }
    }

    /// clang-19 -fuse-ld=lld, PIE, no separate-code (a real binary's
    /// headers): R at offset 0, R E at offset 0x6a0 / vaddr 0x16a0, RW
    /// after it. The r-xp mapping is file page 0 at base + 0x1000.
    fn lld_pie() -> ElfLayout {
        ElfLayout::new(vec![
            seg(0, 0, 0x6a0, false),
            seg(0x16a0, 0x6a0, 0x1f2, true),
            seg(0x2898, 0x898, 0x1f0, false),
        ])
    }

    #[test]
    fn lld_text_maps_by_its_address_not_its_offset() {
        let layout = lld_pie();
        let base = 0x5555_5555_4000;
        // pgoff 0 is page-aligned below p_offset 0x6a0, and the read-only
        // segment holds it too: the executable mapping is the text.
        let text = exec_at(base + 0x1000, 0);
        assert_eq!(layout.segment_of(&text), Some(&layout.loads()[1]));
        let bias = layout.load_bias(&text).unwrap();
        assert_eq!(bias, base);
        // Code at runtime base + 0x17c0 is vaddr 0x17c0, not offset 0x7c0.
        let vaddr = base + 0x17c0 - bias;
        assert_eq!(layout.profile_offset(vaddr), 0x17c0);
        assert!(layout.is_code(vaddr));
        assert!(!layout.is_code(0x7c0));
    }

    #[test]
    fn non_pie_offsets_start_at_the_first_load() {
        // bfd, non-PIE, separate-code: offset equals vaddr - 0x400000.
        let layout = ElfLayout::new(vec![
            seg(0x400000, 0, 0x628, false),
            seg(0x401000, 0x1000, 0x1e5, true),
            seg(0x402000, 0x2000, 0x104, false),
        ]);
        let text = exec_at(0x401000, 0x1000);
        assert_eq!(layout.load_bias(&text), Some(0));
        assert_eq!(layout.profile_offset(0x401130), 0x1130);
        assert_eq!(layout.vaddr_of_profile_offset(0x1130), 0x401130);
        // lld, non-PIE: text at 0x2016a0 from file offset 0x6a0.
        let layout = ElfLayout::new(vec![
            seg(0x200000, 0, 0x6a0, false),
            seg(0x2016a0, 0x6a0, 0x1f2, true),
        ]);
        let bias = layout.load_bias(&exec_at(0x201000, 0)).unwrap();
        assert_eq!(bias, 0);
        assert_eq!(layout.profile_offset(0x2017c0), 0x17c0);
    }

    #[test]
    fn pie_bias_is_the_base() {
        // bfd PIE: the layout keeps offset equal to vaddr.
        let layout = ElfLayout::new(vec![
            seg(0, 0, 0x628, false),
            seg(0x1000, 0x1000, 0x1e5, true),
        ]);
        let base = 0x7f00_1234_0000;
        assert_eq!(
            layout.load_bias(&exec_at(base + 0x1000, 0x1000)),
            Some(base)
        );
        assert_eq!(layout.profile_offset(0x1130), 0x1130);
    }

    #[test]
    fn shared_library_page_shared_by_two_segments() {
        // lld's libbreakdance.so: R at offset 0, R E at file offset
        // 0x3f7a0 / vaddr 0x407a0; the r-xp mapping starts at file page
        // 0x3f000, which both segments touch.
        let layout = ElfLayout::new(vec![
            seg(0, 0, 0x3f7a0, false),
            seg(0x407a0, 0x3f7a0, 0x85180, true),
        ]);
        let start = 0x7f18_f905_5000;
        assert_eq!(
            layout.load_bias(&exec_at(start, 0x3f000)),
            Some(start - 0x40000)
        );
    }

    #[test]
    fn a_mapping_split_inside_a_segment_keeps_its_bias() {
        // A RELRO-style split: the RW segment's second page mapped alone.
        let layout = ElfLayout::new(vec![
            seg(0, 0, 0x800, false),
            seg(0x1800, 0x800, 0x400, true),
            seg(0x2c00, 0xc00, 0x2000, false),
        ]);
        let base = 0x4000_0000;
        let split = FileMapping {
            start: base + 0x3000,
            pgoff: 0x1000,
            executable: false,
        };
        assert_eq!(layout.segment_of(&split), Some(&layout.loads()[2]));
        assert_eq!(layout.load_bias(&split), Some(base));
    }

    #[test]
    fn an_offset_no_segment_holds_has_no_bias() {
        let layout = lld_pie();
        assert_eq!(layout.load_bias(&exec_at(0x1000, 0x10_0000)), None);
        assert_eq!(ElfLayout::default().load_bias(&exec_at(0x1000, 0)), None);
        assert_eq!(ElfLayout::default().first_load_vaddr(), 0);
    }
}
