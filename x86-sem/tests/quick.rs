//! The common forms' decoder (`src/quick.rs`) against iced: whatever it
//! decodes, it must decode exactly as iced and `Insn::resolve` do, field
//! for field, and it must take most of real compiled code.
//!
//! Three sources of bytes: every instruction of the executable segments
//! of real binaries (this test, its shared libraries, python3 and bash
//! where present), every opcode of both maps with every ModRM byte under
//! each prefix it reads, and random bytes shaped like its forms.

use std::collections::BTreeMap;
use x86_sem::Insn;

mod support;
use support::text_of;

/// The two decodings of `bytes` at `ip`, compared: true when the quick
/// decoder took it.
fn check(ip: u64, bytes: &[u8]) -> bool {
    let Some(quick) = Insn::decode_quick(ip, bytes) else {
        return false;
    };
    let iced = Insn::decode_with_iced(ip, bytes);
    if !iced.is_some_and(|i| i.identical(&quick)) {
        panic!(
            "bytes {bytes:02x?} at {ip:#x}: the quick decoder made\n{quick:?}\nand iced\n{iced:?}"
        );
    }
    true
}

/// Files of the executable mappings of this process, and a few large
/// programs of the system.
fn binaries() -> Vec<String> {
    let mut paths: Vec<String> = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.split_whitespace().nth(1).is_some_and(|p| p.contains('x')))
        .filter_map(|l| l.split_whitespace().nth(5).map(str::to_string))
        .filter(|p| p.starts_with('/'))
        .collect();
    for p in ["/usr/bin/python3", "/bin/bash"] {
        if std::path::Path::new(p).exists() {
            paths.push(std::fs::canonicalize(p).unwrap().display().to_string());
        }
    }
    paths.sort();
    paths.dedup();
    paths
}

#[test]
fn real_code_decodes_as_iced_decodes_it_and_mostly_quickly() {
    x86_sem::warm_decoder();
    let mut totals = BTreeMap::new();
    for path in binaries() {
        let (mut all, mut quick) = (0u64, 0u64);
        for (vaddr, text) in text_of(&path) {
            // A linear sweep by iced's lengths; where it meets bytes iced
            // rejects (data in code, padding), it steps one byte.
            let mut at = 0;
            while at < text.len() {
                let ip = vaddr + at as u64;
                let end = (at + 15).min(text.len());
                let len = Insn::decode_with_iced(ip, &text[at..end]).map_or(1, |i| i.len());
                all += 1;
                quick += u64::from(check(ip, &text[at..end]));
                at += len;
            }
        }
        totals.insert(path, (all, quick));
    }
    let libc = totals
        .iter()
        .find(|(p, _)| p.contains("libc.so"))
        .map(|(_, &v)| v)
        .expect("this test links libc");
    for (path, (all, quick)) in &totals {
        eprintln!(
            "{path}: {quick} of {all} instructions decoded quickly ({:.1}%)",
            100.0 * *quick as f64 / *all as f64
        );
    }
    // glibc is compiled code of every kind (and hand-written vector code):
    // most of it is still the integer forms.
    assert!(
        libc.1 * 2 > libc.0,
        "the quick decoder took {} of libc's {} instructions: its templates are missing",
        libc.1,
        libc.0
    );
}

/// Each prefix the quick decoder reads, alone and together, and a few it
/// does not (it must leave them to iced, or agree with it).
const PREFIXES: &[&[u8]] = &[
    &[],
    &[0x66],
    &[0x40],
    &[0x41],
    &[0x44],
    &[0x45],
    &[0x48],
    &[0x49],
    &[0x4a],
    &[0x4c],
    &[0x4d],
    &[0x4f],
    &[0x66, 0x41],
    &[0x66, 0x48],
    &[0x48, 0x66],
    &[0x66, 0x66],
    &[0xf3],
    &[0xf2, 0x48],
    &[0x67],
    &[0x64, 0x48],
];

#[test]
fn every_opcode_and_modrm_under_each_prefix_decodes_as_iced() {
    x86_sem::warm_decoder();
    // What follows the ModRM byte: SIB bytes with and without a base and
    // an index, then displacement and immediate bytes with their top bits
    // set.
    let tails: [&[u8]; 5] = [
        &[0x24, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88],
        &[0x25, 0xff, 0xff, 0xff, 0xff, 0x11, 0x22, 0x33, 0x44, 0x55],
        &[0xe5, 0x01, 0x80, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08],
        &[0x4c, 0xf0, 0x7f, 0x00, 0x80, 0xfe, 0xff, 0xff, 0x7f, 0x00],
        &[0x64, 0x00, 0x00, 0x00, 0x80, 0x01, 0x00, 0x00, 0x00, 0x00],
    ];
    let mut quick = 0u64;
    for prefix in PREFIXES {
        for map in [&[][..], &[0x0f][..]] {
            for op in 0..=255u8 {
                for modrm in 0..=255u8 {
                    for tail in tails {
                        let mut b = prefix.to_vec();
                        b.extend_from_slice(map);
                        b.push(op);
                        b.push(modrm);
                        b.extend_from_slice(tail);
                        if check(0x7fff_ffff_f000, &b) {
                            quick += 1;
                            // The same instruction cut short: never read
                            // past the bytes given.
                            for cut in 1..b.len().min(15) {
                                check(0x40_0000, &b[..cut]);
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(
        quick > 100_000,
        "only {quick} encodings took the quick path"
    );
}

#[test]
fn random_bytes_decode_as_iced() {
    x86_sem::warm_decoder();
    // xorshift: the same bytes every run.
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut quick = 0u64;
    for _ in 0..1_000_000 {
        let mut b = [0u8; 16];
        for chunk in b.chunks_mut(8) {
            chunk.copy_from_slice(&next().to_le_bytes()[..chunk.len()]);
        }
        // Half of them start with the prefixes the quick decoder reads.
        match b[15] & 3 {
            0 => b[0] = 0x40 | (b[0] & 0xf),
            1 => {
                b[0] = 0x66;
                b[1] = 0x40 | (b[1] & 0xf);
            }
            _ => {}
        }
        let ip = next();
        quick += u64::from(check(ip, &b[..15]));
    }
    assert!(
        quick > 10_000,
        "only {quick} random encodings took the quick path"
    );
}
