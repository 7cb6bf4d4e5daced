//! The worker's DWARF unwinder (`unwind=dwarf`): turns the stack snapshots
//! the handlers copied at each trace's newest branch (`emulate::stack`)
//! into call stacks, with the modules' call-frame information (.eh_frame,
//! .eh_frame_hdr) read by framehop.
//!
//! Unwinding in the handler would need framehop's allocation-free mode,
//! which evaluates CFI with fixed arrays on the stack: more than the 4 KiB
//! the handlers may take from an application thread's stack (see
//! ARCHITECTURE.md, "Stack budget"). So the handler only copies the top of
//! the stack (as perf's `--call-graph dwarf` does) and the worker, with a
//! stack and a heap of its own, unwinds.
//!
//! Modules come from /proc/self/maps, read again whenever a snapshot's pc
//! or a frame's return address lies in no module known.

use std::ops::Range;
use std::path::Path;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use object::{Object, ObjectSection};

use crate::emulate::stack::{MAX_FRAMES, SNAPSHOT};
use crate::modules;

/// The unwinder and the address ranges of the modules it knows.
pub struct DwarfUnwinder {
    unwinder: UnwinderX86_64<Vec<u8>>,
    cache: CacheX86_64,
    known: Vec<Range<u64>>,
    /// /proc/self/maps as last read: read again only when it changed.
    last_maps: String,
}

impl Default for DwarfUnwinder {
    fn default() -> Self {
        DwarfUnwinder {
            unwinder: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            known: Vec::new(),
            last_maps: String::new(),
        }
    }
}

/// A module's sections as framehop takes them, from its file.
fn section_info(path: &Path) -> Option<ExplicitModuleSectionInfo<Vec<u8>>> {
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let section = |name: &str| {
        let s = file.section_by_name(name)?;
        Some((s.address()..s.address() + s.size(), s.data().ok()?.to_vec()))
    };
    let text = section(".text");
    let eh_frame = section(".eh_frame");
    let eh_frame_hdr = section(".eh_frame_hdr");
    eh_frame.as_ref()?;
    let (text_svma, text) = text.map_or((None, None), |(r, d)| (Some(r), Some(d)));
    let (eh_frame_svma, eh_frame) = eh_frame.map_or((None, None), |(r, d)| (Some(r), Some(d)));
    let (eh_frame_hdr_svma, eh_frame_hdr) =
        eh_frame_hdr.map_or((None, None), |(r, d)| (Some(r), Some(d)));
    Some(ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma,
        text,
        eh_frame_svma,
        eh_frame,
        eh_frame_hdr_svma,
        eh_frame_hdr,
        ..Default::default()
    })
}

impl DwarfUnwinder {
    fn knows(&self, address: u64) -> bool {
        self.known.iter().any(|r| r.contains(&address))
    }

    /// Adds the modules of /proc/self/maps not known yet.
    fn refresh(&mut self) {
        let Ok(text) = std::fs::read_to_string("/proc/self/maps") else {
            return;
        };
        if text == self.last_maps {
            return;
        }
        // Only the files with an executable mapping not known yet are
        // read (each module's ELF is parsed to make it).
        let maps = modules::parse_maps(&text);
        let unknown: Vec<&str> = maps
            .iter()
            .filter(|m| m.is_exec() && !self.knows(m.start))
            .map(|m| m.path.as_str())
            .collect();
        let wanted: Vec<modules::Mapping> = maps
            .iter()
            .filter(|m| unknown.contains(&m.path.as_str()))
            .cloned()
            .collect();
        for m in modules::modules_from_maps(&wanted) {
            let (Some(start), Some(end)) = (
                m.exec.iter().map(|e| e.start).min(),
                m.exec.iter().map(|e| e.end).max(),
            ) else {
                continue;
            };
            if self.known.iter().any(|r| r.start == start) {
                continue;
            }
            let Some(info) = section_info(&m.path) else {
                continue;
            };
            let name = m.path.display().to_string();
            self.unwinder
                .add_module(Module::new(name, start..end, m.bias, info));
            self.known.push(start..end);
        }
        self.last_maps = text;
    }

    /// The call stack of a snapshot (see `emulate::stack::SNAPSHOT_LEN`):
    /// the leaf pc, then return addresses, as far as the copied stack and
    /// the CFI reach, at most `depth` frames. Not a snapshot: as it is.
    pub fn frames(&mut self, snapshot: &[u64], depth: usize) -> Vec<u64> {
        let [SNAPSHOT, pc, rsp, rbp, n, ref words @ ..] = *snapshot else {
            return snapshot.to_vec();
        };
        let words = &words[..(n as usize).min(words.len())];
        if !self.knows(pc) {
            self.refresh();
        }
        let mut read_stack = |addr: u64| {
            let offset = addr.checked_sub(rsp).ok_or(())?;
            if offset % 8 != 0 {
                return Err(());
            }
            words.get((offset / 8) as usize).copied().ok_or(())
        };
        let mut frames = Vec::new();
        let regs = UnwindRegsX86_64::new(pc, rsp, rbp);
        let mut it = self
            .unwinder
            .iter_frames(pc, regs, &mut self.cache, &mut read_stack);
        while frames.len() < depth.min(MAX_FRAMES) {
            match it.next() {
                Ok(Some(FrameAddress::InstructionPointer(a))) => frames.push(a),
                Ok(Some(FrameAddress::ReturnAddress(a))) => frames.push(a.get()),
                _ => break,
            }
        }
        if frames.is_empty() {
            frames.push(pc);
        }
        frames
    }
}
