//! `cargo bench -p x86-sem --bench decode`: what a new instruction costs
//! to decode, by the common forms' decoder with iced behind it
//! (`Insn::decode_run`) and by iced alone, on this machine's libc.
//!
//! A handler decodes after the application ran: the decoders' tables and
//! code are cold. So each round sweeps 32 MiB, then decodes what one
//! trace meets on SQLite (about 22 runs of new code from random places of
//! libc's text, 8 instructions at most each, as the tracer's decoded-code
//! table decodes a miss), and times it; then the same runs again, warm.
//! Rounds alternate the two decoders; the figures are medians of the
//! rounds, in ns per instruction decoded, and the medians of the paired
//! rounds' ratios.

use std::hint::black_box;
use std::time::Instant;

use x86_sem::Insn;

const ROUNDS: usize = 400;
const RUNS: usize = 22;
const SWEEP: usize = 32 << 20;

#[path = "../tests/support/mod.rs"]
mod support;

/// The executable segment of this process's libc.
fn libc_text() -> (u64, Vec<u8>) {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    let path = maps
        .lines()
        .find(|l| {
            l.contains("libc.so") && l.split_whitespace().nth(1).is_some_and(|p| p.contains('x'))
        })
        .and_then(|l| l.split_whitespace().nth(5))
        .expect("libc is mapped")
        .to_string();
    support::text_of(&path)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{path} has no executable segment"))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // The templates, as Table::init builds them before any handler runs.
    x86_sem::warm_decoder();
    let _ = Insn::decode_with_iced(0, &[0x90]);
    let (vaddr, text) = libc_text();
    // Instruction starts, by a linear sweep.
    let mut starts = Vec::new();
    let mut at = 0;
    while at + 64 < text.len() {
        starts.push(at);
        at += Insn::decode_with_iced(vaddr + at as u64, &text[at..at + 15]).map_or(1, |i| i.len());
    }
    let mut sweep = vec![0u8; SWEEP];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    type Run = fn(u64, &[u8], &mut [Insn]) -> usize;
    let decoders: [(&str, Run); 2] = [
        ("quick, then iced", Insn::decode_run),
        ("iced alone", Insn::decode_run_with_iced),
    ];
    // [decoder][cold, warm] ns per instruction, per round.
    let mut ns = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    let mut out = [Insn::empty(); 8];
    for round in 0..ROUNDS {
        let picks: Vec<usize> = (0..RUNS)
            .map(|_| starts[next() as usize % starts.len()])
            .collect();
        for turn in 0..2 {
            let d = (round + turn) % 2;
            for (pass, times) in ns[d].iter_mut().enumerate() {
                if pass == 0 {
                    for (k, b) in sweep.iter_mut().enumerate().step_by(64) {
                        *b = b.wrapping_add(k as u8);
                    }
                    black_box(&sweep);
                }
                let t = Instant::now();
                let mut n = 0;
                for &p in &picks {
                    n += (decoders[d].1)(vaddr + p as u64, black_box(&text[p..p + 64]), &mut out);
                    black_box(&out);
                }
                times.push(t.elapsed().as_nanos() as f64 / n.max(1) as f64);
            }
        }
    }
    println!("decoding runs of new code from libc, {RUNS} runs a round, {ROUNDS} rounds");
    for (d, (name, _)) in decoders.iter().enumerate() {
        let [cold, warm] = &mut ns[d];
        println!(
            "  {name:16}  cold {:6.1} ns/instruction   warm {:6.1}",
            median(cold),
            median(warm)
        );
    }
    for (pass, what) in ["cold", "warm"].iter().enumerate() {
        let mut ratios: Vec<f64> = (0..ROUNDS)
            .map(|r| ns[0][pass][r] / ns[1][pass][r])
            .collect();
        println!(
            "  {what}: quick/iced, median of the rounds' ratios {:.3}",
            median(&mut ratios)
        );
    }
}
