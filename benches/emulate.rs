//! `cargo bench --bench emulate`: the emulate-ahead core's cost per
//! emulated instruction, in process and without signals, on a branchy loop
//! of this binary: with its caches warm (the same segment again and
//! again), and cold (a 32 MiB sweep between segments, as the application
//! leaves them between two samples). The handler's figure on a real
//! program is summary.json's `emulation_ns / emulated_steps`; this one
//! says how much of it is the work and how much the cold caches.

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
    let exec: &'static ExecMap = Box::leak(ExecMap::boxed());
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
    code::maintain(exec.generation());
    let table: Vec<u64> = (0..1024u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7)
        .collect();
    let mut stack = vec![0u64; 8192];
    let top = stack.as_mut_ptr() as u64 + 8 * 4096;
    let mut emu = Emulator::new(exec);
    let mut sweep = vec![0u8; 32 << 20];
    let mut sink = Sink(Vec::with_capacity(4096));
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
                    s.rip = branchy as *const () as u64;
                    s.gpr[4] = top; // rsp: a return address of 0 ends it
                    s.gpr[7] = table.as_ptr() as u64; // rdi
                    s.gpr[6] = 1 << 20; // rsi: n
                    sink.0.clear();
                    let t = Instant::now();
                    let outcome = emu.run(&mut sink, wanted, false);
                    ns += t.elapsed().as_nanos();
                    match outcome {
                        Outcome::Segment(seg) => steps += u64::from(seg.steps),
                        other => panic!("the loop did not emulate: {other:?}"),
                    }
                }
                let (run, _) = emu.take_steps_run();
                per_step.push(ns as f64 / steps as f64);
                per_run.push(ns as f64 / run as f64);
                steps_per = (steps / 200, run / 200);
            }
            println!(
                "N = {wanted:<4} {:<5} caches: {:7.1} ns per kept step ({} per segment), {:6.1} ns per step run ({} per segment)",
                if cold { "cold" } else { "warm" },
                median(per_step),
                steps_per.0,
                median(per_run),
                steps_per.1,
            );
        }
    }
    black_box(&mut stack);
}
