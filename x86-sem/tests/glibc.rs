//! Every implementation of glibc's string and memory functions runs on the
//! core: not only the variant glibc selects on this machine, but each one
//! its ifunc resolvers may pick on another (sse2, ssse3, sse4_1, sse4_2,
//! avx, avx2, avx2_rtm, evex, evex512, avx512). Every instruction that can
//! be reached from their entry points is a form the table implements, so
//! emulating ahead need not stop inside them, whatever the CPU.
//!
//! The variants are local symbols (Debian's libc.so.6 has no .symtab);
//! glibc lists them, with their addresses, through `__libc_ifunc_impl_list`
//! (exported as GLIBC_PRIVATE, the interface glibc's own string tests use).
//! It lists every variant built into this libc, whether or not this CPU
//! can run it.

use iced_x86::{Code, Decoder, DecoderOptions, FlowControl};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_char, CStr, CString};
use x86_sem::{Cpu, CpuModel, CpuState, NoMemory, Table};

/// The string and memory functions whose variants glibc lists. `bcmp`
/// is an alias of memcmp (glibc lists it under memcmp); a name glibc does
/// not list is checked through the implementation `dlsym` resolves.
const FUNCTIONS: &[&str] = &[
    "memcpy",
    "memmove",
    "mempcpy",
    "__memcpy_chk",
    "__memmove_chk",
    "__mempcpy_chk",
    "memset",
    "__memset_chk",
    "memcmp",
    "__memcmpeq",
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
    "strcasecmp_l",
    "strncasecmp",
    "strncasecmp_l",
    "strstr",
    "wcslen",
    "wcsnlen",
    "wcschr",
    "wcsrchr",
    "wcscmp",
    "wcsncmp",
    "wcscpy",
    "wmemset",
    "__wmemset_chk",
    "wmemchr",
    "wmemcmp",
];

/// glibc's `struct libc_ifunc_impl` (include/ifunc-impl-list.h).
#[repr(C)]
#[derive(Clone, Copy)]
struct IfuncImpl {
    name: *const c_char,
    function: *const (),
    usable: bool,
}

type ImplList = unsafe extern "C" fn(*const c_char, *mut IfuncImpl, usize) -> usize;

/// Room for one function's variants (memmove has 13 in glibc 2.36).
const MAX_VARIANTS: usize = 64;

/// One implementation to check: its symbol name and address.
struct Variant {
    name: String,
    address: u64,
}

/// Every implementation glibc lists for `function`, or, when it lists
/// none, the one `dlsym` resolves.
fn variants(list: ImplList, function: &str) -> Vec<Variant> {
    let cname = CString::new(function).unwrap();
    let mut out = [IfuncImpl {
        name: std::ptr::null(),
        function: std::ptr::null(),
        usable: false,
    }; MAX_VARIANTS];
    // SAFETY: glibc writes at most MAX_VARIANTS entries into `out` and
    // returns how many variants it knows (possibly more than it wrote).
    let n = unsafe { list(cname.as_ptr(), out.as_mut_ptr(), MAX_VARIANTS) };
    assert!(
        n <= MAX_VARIANTS,
        "{function}: {n} variants, room for {MAX_VARIANTS}"
    );
    let mut found: Vec<Variant> = out[..n]
        .iter()
        .map(|v| Variant {
            // SAFETY: glibc's names are static NUL-terminated strings.
            name: unsafe { CStr::from_ptr(v.name) }
                .to_string_lossy()
                .into_owned(),
            address: v.function as u64,
        })
        .collect();
    if found.is_empty() {
        // SAFETY: dlsym with the default handle and a NUL-terminated name;
        // for an ifunc it returns the implementation selected for this CPU.
        let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, cname.as_ptr()) } as u64;
        assert_ne!(f, 0, "{function} not found");
        found.push(Variant {
            name: format!("{function} (selected)"),
            address: f,
        });
    }
    found
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
/// direct jumps and branches (calls are not followed: what they call is
/// another listed variant, or glibc's error paths), as (address, code).
/// `seen` is shared across entry points, so code two variants share is
/// decoded once.
///
/// Indirect jumps are not followed either: glibc 2.36's variants hold 88
/// of them, 82 through `BRANCH_TO_JMPTBL_ENTRY` tables of 32-bit offsets
/// in .rodata (memmove_ssse3, the sse2 strcpy family, …), whose length
/// nothing in the code states; code reachable only through them is not
/// checked.
fn reachable(entry: u64, text: (u64, u64), seen: &mut BTreeSet<u64>) -> Vec<(u64, Code)> {
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

/// glibc's list of variants, or `None` where this libc has none (not
/// glibc, or a glibc built without multiarch).
fn impl_list() -> Option<ImplList> {
    // SAFETY: dlsym with the default handle and a NUL-terminated name.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__libc_ifunc_impl_list".as_ptr()) };
    // SAFETY: glibc's __libc_ifunc_impl_list has this signature
    // (include/ifunc-impl-list.h) since glibc 2.12.
    (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, ImplList>(f) })
}

#[test]
fn every_glibc_string_variant_runs_on_the_core() {
    let Some(list) = impl_list() else {
        breakdance_testkit::present_or_skip(
            false,
            "this libc does not export __libc_ifunc_impl_list: its string variants cannot be enumerated",
        );
        return;
    };
    // Every variant, whatever this CPU runs: the table of a model with
    // every feature (the core's coverage, not this CPU's).
    let table = Table::<Cpu<CpuState, NoMemory>>::boxed(&CpuModel::every_feature());
    let mut missing: BTreeMap<Code, BTreeSet<String>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let (mut instructions, mut count) = (0, 0);
    for function in FUNCTIONS {
        for v in variants(list, function) {
            count += 1;
            for (_, code) in reachable(v.address, libc_text(v.address), &mut seen) {
                instructions += 1;
                if !table.implements(code) {
                    missing.entry(code).or_default().insert(v.name.clone());
                }
            }
        }
    }
    // glibc 2.36 lists 190 variants of these functions; fewer means the
    // enumeration failed, not that the core is complete.
    assert!(count >= 150, "only {count} variants listed");
    assert!(
        instructions > 20_000,
        "only {instructions} instructions reached in {count} variants"
    );
    let report: Vec<String> = missing
        .iter()
        .map(|(code, vs)| {
            let vs: Vec<&str> = vs.iter().map(String::as_str).collect();
            format!("{code:?} in {}", vs.join(", "))
        })
        .collect();
    assert!(
        report.is_empty(),
        "{} forms glibc's string variants run that the core lacks ({count} variants, {instructions} instructions):\n{}",
        report.len(),
        report.join("\n")
    );
}
