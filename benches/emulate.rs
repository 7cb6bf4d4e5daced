//! `cargo bench --bench emulate`: the emulate-ahead core's cost per
//! emulated instruction, in process and without signals, on three pieces
//! of code: a small branchy loop, `mixed` (B-tree searches, decimal
//! formatting, a hash: a few hundred distinct instructions a segment,
//! loads that chase pointers), and `sorting` (glibc's qsort and memcmp
//! over a small table: loads, stores and calls). Each with its caches warm
//! (the same segment again and again), and cold (a 32 MiB sweep between
//! segments, as the application leaves them between two samples). The
//! handler's figure on a real program is summary.json's `emulation_ns /
//! emulated_steps`; this one says how much of it is the work and how much
//! the cold caches. `cargo bench --bench emulate -- mixed` runs one
//! workload.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

use breakdance::buffer::BranchEntry;
use breakdance::emulate::{code, Emulator, EntrySink, Outcome};
use breakdance::exec_map::{ExecMap, MemoryLayout};
use breakdance::modules::parse_maps;

/// The emulated code: a loop with data-dependent branches and calls.
#[inline(never)]
extern "C" fn branchy(table: *const u64, n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        // SAFETY: the caller passes a table of 1024 entries.
        let v = unsafe { *table.add((i & 1023) as usize) };
        acc = if v & 1 == 0 {
            acc.wrapping_add(v)
        } else {
            acc ^ v.rotate_left(7)
        };
        if v % 3 == 0 {
            acc = black_box(acc).wrapping_mul(3);
        }
    }
    acc
}

/// Code more like a real program's: B-tree searches (pointer chasing,
/// key comparisons in a loop), decimal formatting into a buffer, and a
/// hash, so that a segment runs a few hundred distinct instructions, as
/// SQLite's traces do, rather than one small loop.
#[inline(never)]
extern "C" fn mixed(map: *const BTreeMap<u64, u64>, keys: *const u64, n: u64) -> u64 {
    // SAFETY: the caller passes a live map and a table of 1024 keys.
    let (map, keys) = unsafe { (&*map, std::slice::from_raw_parts(keys, 1024)) };
    let mut acc = 0u64;
    let mut text = [0u8; 24];
    for i in 0..n as usize {
        let k = keys[i & 1023];
        let v = map.get(&k).copied().unwrap_or(k);
        let mut x = v;
        let mut at = text.len();
        loop {
            at -= 1;
            text[at] = b'0' + (x % 10) as u8;
            x /= 10;
            if x == 0 {
                break;
            }
        }
        for &b in black_box(&text[at..]) {
            acc = (acc ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
        if let Some((_, &w)) = map.range(k..).next() {
            acc = acc.wrapping_add(w);
        }
    }
    acc
}

/// Records for `sorting`: 16-byte keys, compared whole.
const RECORDS: usize = 40;

extern "C" fn compare_keys(a: *const libc::c_void, b: *const libc::c_void) -> libc::c_int {
    // SAFETY: qsort passes two of the caller's 16-byte records.
    unsafe { libc::memcmp(a, b, 16) }
}

/// Code like a database's inner loops, in the C library: loads and
/// stores over a small table, a comparison through a function pointer,
/// and glibc's vectorised memcmp (its AVX2 or EVEX form, by this CPU).
/// The records are re-scrambled first from `seed`, so that each run sorts
/// the same input.
#[inline(never)]
extern "C" fn sorting(records: *mut [u8; 16], seed: u64, n: u64) -> u64 {
    let mut x = seed;
    let mut sum = 0u64;
    for _ in 0..n {
        // SAFETY: the caller passes a table of RECORDS records.
        let table = unsafe { std::slice::from_raw_parts_mut(records, RECORDS) };
        for r in table.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Keys share their first bytes, as index keys do: memcmp reads
            // past them.
            r[..8].copy_from_slice(&[7u8; 8]);
            r[8..].copy_from_slice(&(x % 64).to_be_bytes());
        }
        // SAFETY: RECORDS records of 16 bytes, and a comparator for them.
        unsafe {
            libc::qsort(records.cast(), RECORDS, 16, Some(compare_keys));
        }
        sum = sum.wrapping_add(u64::from(table[0][15]));
    }
    sum
}

struct Sink(Vec<BranchEntry>);

impl EntrySink for Sink {
    fn push(&mut self, entry: BranchEntry) -> bool {
        self.0.push(entry);
        true
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("reading /proc/self/maps");
    let exec: &'static ExecMap = ExecMap::mapped();
    let ranges: Vec<(u64, u64)> = parse_maps(&maps)
        .iter()
        .filter(|m| m.perms.contains('x'))
        .map(|m| (m.start, m.end))
        .collect();
    exec.update(&MemoryLayout {
        exec: ranges,
        code: 1,
        ..MemoryLayout::default()
    });
    breakdance::emulate::warm();
    code::maintain(exec.generation(), 0);
    let table: Vec<u64> = (0..1024u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7)
        .collect();
    let mut stack = vec![0u64; 8192];
    // As at a function's entry: rsp 8 past a 16-byte boundary, at a return
    // address of 0.
    let top = ((stack.as_mut_ptr() as u64 + 8 * 4096) & !15) - 8;
    let mut emu = Emulator::new(exec);
    let mut sweep = vec![0u8; 32 << 20];
    let mut sink = Sink(Vec::with_capacity(4096));
    let map: BTreeMap<u64, u64> = table
        .iter()
        .step_by(2)
        .map(|&k| (k, k.rotate_left(17)))
        .collect();
    let mut records = vec![[0u8; 16]; RECORDS];
    let fs_base = breakdance::sys::fs_base();
    // Where each workload starts: (name, function, rdi, rsi, rdx).
    let workloads: [(&str, u64, [u64; 3]); 3] = [
        (
            "branchy",
            branchy as *const () as u64,
            [table.as_ptr() as u64, 1 << 20, 0],
        ),
        (
            "mixed",
            mixed as *const () as u64,
            [
                std::ptr::from_ref(&map) as u64,
                table.as_ptr() as u64,
                1 << 20,
            ],
        ),
        (
            "sorting",
            sorting as *const () as u64,
            [records.as_mut_ptr() as u64, 0x9E37_79B9, 1 << 20],
        ),
    ];
    // `cargo bench --bench emulate -- mixed` runs only that workload.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for (name, entry, args) in workloads {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        for wanted in [128usize, 512] {
            for cold in [false, true] {
                let mut per_step = Vec::new();
                let mut per_run = Vec::new();
                let mut steps_per = (0, 0);
                for _round in 0..5 {
                    let (mut ns, mut steps) = (0u128, 0u64);
                    emu.take_steps_run();
                    for _ in 0..200 {
                        if cold {
                            for b in sweep.iter_mut().step_by(64) {
                                *b = b.wrapping_add(1);
                            }
                        }
                        let s = emu.state_mut();
                        *s = x86_sem::CpuState::new();
                        s.rip = entry;
                        s.gpr[4] = top; // rsp: a return address of 0 ends it
                                        // The thread's own: glibc's code reads its stack
                                        // canary at fs:0x28.
                        s.fs_base = fs_base;
                        (s.gpr[7], s.gpr[6], s.gpr[2]) = (args[0], args[1], args[2]);
                        sink.0.clear();
                        let t = Instant::now();
                        let outcome = emu.run(&mut sink, wanted, false);
                        ns += t.elapsed().as_nanos();
                        match outcome {
                            Outcome::Segment(seg) => steps += u64::from(seg.steps),
                            other => panic!("{name} did not emulate: {other:?}"),
                        }
                    }
                    let (run, _) = emu.take_steps_run();
                    per_step.push(ns as f64 / steps as f64);
                    per_run.push(ns as f64 / run as f64);
                    steps_per = (steps / 200, run / 200);
                }
                println!(
                    "{name:<8} N = {wanted:<4} {:<5} caches: {:7.1} ns per kept step ({} per segment), {:6.1} ns per step run ({} per segment)",
                    if cold { "cold" } else { "warm" },
                    median(per_step),
                    steps_per.0,
                    median(per_run),
                    steps_per.1,
                );
            }
        }
    }
    black_box(&mut stack);
    black_box(&mut records);
}
