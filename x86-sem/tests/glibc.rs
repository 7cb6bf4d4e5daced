//! The string and memory functions glibc selects on this machine (AVX-512:
//! `__strlen_evex`, `__memmove_avx512_unaligned_erms`, `__memcmp_evex_movbe`,
//! `__strcspn_sse42`, …; AVX2 or SSE variants elsewhere) run entirely on
//! the core: every instruction that can be reached from their entry points
//! is a form the table built for this CPU's model implements, so emulating
//! ahead need not stop inside them. glibc picks its variants by CPUID and
//! the model is read from CPUID, so the check holds on any x86-64 CPU.

use iced_x86::{Code, Decoder, DecoderOptions, FlowControl};
use std::collections::{BTreeMap, BTreeSet};
use x86_sem::{Cpu, CpuModel, CpuState, MemError, Memory, Table};

const FUNCTIONS: &[&str] = &[
    "memcpy",
    "memmove",
    "mempcpy",
    "memset",
    "memcmp",
    "bcmp",
    "memchr",
    "memrchr",
    "rawmemchr",
    "strlen",
    "strnlen",
    "strchr",
    "strchrnul",
    "strrchr",
    "strcmp",
    "strncmp",
    "strcpy",
    "stpcpy",
    "strncpy",
    "stpncpy",
    "strcat",
    "strncat",
    "strcspn",
    "strspn",
    "strpbrk",
    "strcasecmp",
    "strncasecmp",
    "wcslen",
    "wmemset",
    "wcscmp",
    "wmemchr",
    "strstr",
];

/// Memory that is never touched: only the table is needed here.
#[derive(Debug)]
struct Nothing;

impl Memory for Nothing {
    fn load(&mut self, addr: u64, _: usize) -> Result<u64, MemError> {
        Err(MemError::Fault { addr, write: false })
    }
    fn store(&mut self, addr: u64, _: usize, _: u64) -> Result<(), MemError> {
        Err(MemError::Fault { addr, write: true })
    }
    fn fetch(&mut self, _: u64, _: &mut [u8; 15]) -> usize {
        0
    }
}

/// The executable mapping of libc holding `addr`, from /proc/self/maps.
fn libc_text(addr: u64) -> (u64, u64) {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter(|l| l.contains("r-xp") && l.contains("libc.so"))
        .filter_map(|l| {
            let (range, _) = l.split_once(' ')?;
            let (a, b) = range.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .find(|&(a, b)| (a..b).contains(&addr))
        .expect("the function lies in libc's text")
}

/// Every instruction reachable from `entry` by falling through and by
/// direct jumps and branches (calls are not followed), as (address, code).
fn reachable(entry: u64, text: (u64, u64)) -> Vec<(u64, Code)> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![entry];
    let mut out = Vec::new();
    while let Some(start) = todo.pop() {
        let mut ip = start;
        while (text.0..text.1).contains(&ip) && seen.insert(ip) {
            let len = ((text.1 - ip) as usize).min(15);
            // SAFETY: inside libc's mapped, readable text.
            let bytes = unsafe { std::slice::from_raw_parts(ip as *const u8, len) };
            let i = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE).decode();
            assert!(!i.is_invalid(), "undecodable bytes at {ip:#x}");
            out.push((ip, i.code()));
            match i.flow_control() {
                FlowControl::UnconditionalBranch => {
                    todo.push(i.near_branch_target());
                    break;
                }
                FlowControl::ConditionalBranch => todo.push(i.near_branch_target()),
                FlowControl::Return | FlowControl::IndirectBranch | FlowControl::Interrupt => break,
                _ => {}
            }
            ip = i.next_ip();
        }
    }
    out
}

#[test]
fn glibc_string_functions_run_on_the_core() {
    let table = Table::<Cpu<CpuState, Nothing>>::boxed(&CpuModel::host());
    let mut missing: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut instructions = 0;
    for name in FUNCTIONS {
        let cname = std::ffi::CString::new(*name).unwrap();
        // SAFETY: dlsym with the default handle and a NUL-terminated name;
        // for an ifunc it returns the implementation selected for this CPU.
        let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, cname.as_ptr()) } as u64;
        assert_ne!(f, 0, "{name} not found");
        for (_, code) in reachable(f, libc_text(f)) {
            instructions += 1;
            if !table.implements(code) {
                missing.entry(format!("{code:?}")).or_default().push(name);
            }
        }
    }
    assert!(
        instructions > 3000,
        "only {instructions} instructions reached"
    );
    let report: Vec<String> = missing
        .iter()
        .map(|(code, fs)| {
            let mut fs = fs.clone();
            fs.dedup();
            format!("{code} in {}", fs.join(", "))
        })
        .collect();
    assert!(
        report.is_empty(),
        "forms glibc runs here that the core lacks:\n{}",
        report.join("\n")
    );
}
