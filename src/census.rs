//! The handler's working set, counted (`--features census`: measurement
//! builds only, never shipped; see results/speed, "Working set").
//!
//! Each trace's handlers note the memory they touch, at the places where
//! the emulate path reads or writes its own structures: decoded-code
//! records and the index probed for them, the load log and store overlay
//! with their indexes, the visit log and filter, the register files, the
//! tables of mappings, the trace buffer's entries, and the stack below the
//! signal handler's entry. Distinct 64-byte lines are counted per trace,
//! by part; the application's own memory that the emulation reads is
//! counted apart (it is the application's working set, not the
//! handler's). Not counted: the handler's instructions (its code lines),
//! the decoder's tables on a decode (see `emulation_decodes`), and the
//! kernel's signal frame.
//!
//! One census for the process: meant for single-threaded programs
//! (SQLite's speedtest1, bzip2); with several sampled threads at once the
//! counts mix. The set and totals are static (zero pages until used), so
//! the handler allocates nothing.

use std::cell::UnsafeCell;
use std::fmt::Write as _;

/// What a line belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Part {
    /// Decoded-code records and the private cache.
    Code = 1,
    /// The shared table's index of records.
    Index,
    /// The core's dispatch table: the handler of each instruction form.
    Dispatch,
    /// The load log, the store overlay, the undo log and their indexes.
    Memory,
    /// The visit log, filter and counters.
    Visits,
    /// The register files and the emulator's own fields.
    State,
    /// The tables of mappings (code, immutable, private).
    Tables,
    /// The trace buffer's entries.
    Buffer,
    /// The handler's stack.
    Stack,
    /// The application's memory the emulation read.
    App,
}

const PARTS: usize = 11;
const NAMES: [&str; PARTS] = [
    "", "code", "index", "dispatch", "memory", "visits", "state", "tables", "buffer", "stack",
    "app",
];
/// Lines one trace may touch before the census stops counting it.
const SLOTS: usize = 1 << 15;
/// Histogram buckets of the handler's KiB per trace (the last: more).
const BUCKETS: usize = 1024;

struct Census {
    lines: [u64; SLOTS],
    parts: [u8; SLOTS],
    used: usize,
    open: bool,
    /// The running handler's entry and lowest stack pointer, and the
    /// deepest any handler of the trace went.
    stack_top: u64,
    stack_low: u64,
    stack_max: u64,
    traces: u64,
    overflowed: u64,
    sums: [u64; PARTS],
    kib: [u32; BUCKETS],
}

struct Cell(UnsafeCell<Census>);
// SAFETY: one census for a single-threaded measurement (module doc).
unsafe impl Sync for Cell {}

static CENSUS: Cell = Cell(UnsafeCell::new(Census {
    lines: [0; SLOTS],
    parts: [0; SLOTS],
    used: 0,
    open: false,
    stack_top: 0,
    stack_low: 0,
    stack_max: 0,
    traces: 0,
    overflowed: 0,
    sums: [0; PARTS],
    kib: [0; BUCKETS],
}));

#[allow(clippy::mut_from_ref)]
fn census() -> &'static mut Census {
    // SAFETY: single-threaded measurement (module doc); never re-entered
    // (every asynchronous signal is blocked while a handler runs).
    unsafe { &mut *CENSUS.0.get() }
}

#[inline(always)]
fn rsp() -> u64 {
    let sp: u64;
    // SAFETY: reads the stack pointer.
    unsafe { std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack)) };
    sp
}

/// A trace begins (at its sample's handler): an empty set, the stack
/// measured from here down.
pub fn begin() {
    let c = census();
    c.lines[..].fill(0);
    c.used = 0;
    c.open = true;
    c.stack_max = 0;
    c.stack_top = rsp();
    c.stack_low = c.stack_top;
}

/// Another handler of the open trace begins: its stack from here down.
pub fn resume() {
    let c = census();
    if c.open {
        c.stack_max = c.stack_max.max(c.stack_top - c.stack_low);
        c.stack_top = rsp();
        c.stack_low = c.stack_top;
    }
}

/// Notes the stack's depth here.
#[inline(always)]
pub fn stack() {
    let c = census();
    let sp = rsp();
    if c.open && sp < c.stack_low {
        c.stack_low = sp;
    }
}

/// Notes `len` bytes at `addr` as touched by `part`.
#[inline(never)]
pub fn touch_addr(addr: u64, len: usize, part: Part) {
    let c = census();
    if !c.open || len == 0 {
        return;
    }
    let sp = rsp();
    if sp < c.stack_low {
        c.stack_low = sp;
    }
    let first = addr >> 6;
    let last = (addr + len as u64 - 1) >> 6;
    for line in first..=last {
        let key = line | 1 << 63;
        let mut i = (line.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 49) as usize & (SLOTS - 1);
        loop {
            if c.lines[i] == key {
                break;
            }
            if c.lines[i] == 0 {
                if c.used + 1 >= SLOTS / 2 {
                    // Counted as overflowed at the end; lines past here
                    // are not.
                    c.used = SLOTS;
                    return;
                }
                c.lines[i] = key;
                c.parts[i] = part as u8;
                c.used += 1;
                break;
            }
            i = (i + 1) & (SLOTS - 1);
        }
    }
}

/// Notes the object at `p` as touched by `part`.
#[inline(always)]
pub fn touch<T: ?Sized>(p: &T, part: Part) {
    touch_addr(
        p as *const T as *const u8 as u64,
        std::mem::size_of_val(p),
        part,
    );
}

/// The open trace ends: its lines are counted.
pub fn end() {
    let c = census();
    if !c.open {
        return;
    }
    c.open = false;
    if c.used >= SLOTS {
        c.overflowed += 1;
        return;
    }
    let mut bytes = [0u64; PARTS];
    for i in 0..SLOTS {
        if c.lines[i] != 0 {
            bytes[c.parts[i] as usize] += 64;
        }
    }
    bytes[Part::Stack as usize] = c.stack_max.max(c.stack_top - c.stack_low);
    let handler: u64 = bytes[..Part::App as usize].iter().sum();
    for (s, b) in c.sums.iter_mut().zip(bytes) {
        *s += b;
    }
    c.kib[((handler / 1024) as usize).min(BUCKETS - 1)] += 1;
    c.traces += 1;
}

/// The census so far, as text (at session stop).
pub fn report() -> String {
    let c = census();
    let mut out = String::new();
    let n = c.traces.max(1);
    let _ = writeln!(out, "traces {}", c.traces);
    let _ = writeln!(out, "traces_overflowed {}", c.overflowed);
    let pct = |q: u64| {
        let want = (c.traces * q).div_ceil(100).max(1);
        let mut seen = 0u64;
        for (k, &count) in c.kib.iter().enumerate() {
            seen += u64::from(count);
            if seen >= want {
                return k + 1;
            }
        }
        BUCKETS
    };
    let handler: u64 = c.sums[..Part::App as usize].iter().sum();
    let _ = writeln!(out, "handler_bytes_per_trace_mean {}", handler / n);
    let _ = writeln!(out, "handler_kib_per_trace_median_at_most {}", pct(50));
    let _ = writeln!(out, "handler_kib_per_trace_p90_at_most {}", pct(90));
    let _ = writeln!(out, "handler_kib_per_trace_max_at_most {}", pct(100));
    for (name, sum) in NAMES.iter().zip(c.sums).skip(1) {
        let _ = writeln!(out, "{name}_bytes_per_trace_mean {}", sum / n);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame of 4 KiB below the test's, which notes its depth.
    #[inline(never)]
    fn deeper(words: &[u64; 64]) {
        let big = std::hint::black_box([0u8; 4096]);
        stack();
        std::hint::black_box((&big, words));
    }

    /// The one test of the process-wide census (tests run in parallel).
    #[test]
    fn counts_distinct_lines_by_part_and_the_stack() {
        let c = census();
        (c.traces, c.overflowed, c.sums, c.kib) = (0, 0, [0; PARTS], [0; BUCKETS]);
        // Nothing is counted outside a trace.
        touch_addr(0x1000, 64, Part::Code);
        end();
        assert_eq!(c.traces, 0);
        begin();
        // 128 bytes from a line's middle: three lines; again: no more.
        touch_addr(0x10020, 128, Part::Code);
        touch_addr(0x10020, 128, Part::Code);
        // The first part to touch a line owns it.
        touch_addr(0x10040, 8, Part::Memory);
        touch_addr(0x20000, 8, Part::Memory);
        let words = [0u64; 64];
        touch(&words, Part::Visits);
        touch_addr(0x30000, 4, Part::App);
        deeper(&words);
        end();
        assert_eq!(c.traces, 1);
        assert_eq!(c.sums[Part::Code as usize], 3 * 64);
        assert_eq!(c.sums[Part::Memory as usize], 64);
        let visit_lines = (words.as_ptr() as u64 + 511) / 64 - words.as_ptr() as u64 / 64 + 1;
        assert_eq!(c.sums[Part::Visits as usize], 64 * visit_lines);
        assert_eq!(c.sums[Part::App as usize], 64);
        assert!(c.sums[Part::Stack as usize] >= 4096);
        let text = report();
        assert!(text.contains("traces 1\n"), "{text}");
        assert!(text.contains("code_bytes_per_trace_mean 192\n"), "{text}");
    }
}
