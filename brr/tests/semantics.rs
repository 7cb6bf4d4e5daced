//! Instruction-level differential test: each instruction form runs over a
//! table of operand values and input flags, natively and under the emulator;
//! results and the architecturally defined flags must be equal.
//!
//! The program is generated here: for every form, a loop loads rax, rbx,
//! rcx, rdx and RFLAGS from a table entry, executes the instruction, and
//! stores rax, rbx, rdx and the flags. Flags an instruction leaves undefined
//! (Intel SDM / AMD APM) are masked per form before comparing.

mod common;

use std::fmt::Write as _;
use std::process::Command;

const CF: u64 = 1;
const PF: u64 = 4;
const AF: u64 = 0x10;
const ZF: u64 = 0x40;
const SF: u64 = 0x80;
const OF: u64 = 0x800;
const ALL: u64 = CF | PF | AF | ZF | SF | OF;

/// How to mask the flags of one form, given the entry's count (rcx).
#[derive(Clone, Copy)]
enum Flags {
    All,
    /// Logic ops: AF undefined.
    NoAf,
    /// Only these are defined.
    Only(u64),
    /// Shifts of `bits`-bit operands by cl.
    Shift(u32),
    /// Rotates of `bits`-bit operands by cl.
    Rotate(u32),
    /// shld/shrd of `bits`-bit operands by cl.
    DoubleShift(u32),
}

impl Flags {
    fn mask(self, count: u64) -> u64 {
        match self {
            Flags::All => ALL,
            Flags::NoAf => ALL & !AF,
            Flags::Only(m) => m,
            Flags::Shift(bits) => {
                let c = count & if bits == 64 { 63 } else { 31 };
                match c {
                    0 => ALL,
                    1 => ALL & !AF,
                    c if c < u64::from(bits) => ALL & !AF & !OF,
                    _ => ZF | SF | PF,
                }
            }
            Flags::Rotate(bits) => {
                let c = count & if bits == 64 { 63 } else { 31 };
                match c {
                    0 => ALL,
                    1 => ALL,
                    c if c < u64::from(bits) || bits >= 32 => ALL & !OF,
                    _ => ALL & !OF & !CF,
                }
            }
            Flags::DoubleShift(bits) => {
                let c = count & if bits == 64 { 63 } else { 31 };
                match c {
                    0 => ALL,
                    1 => ALL & !AF,
                    _ => ALL & !AF & !OF,
                }
            }
        }
    }

    /// False where the manuals leave the result itself undefined (shld/shrd
    /// of 16-bit operands by more than 16).
    fn defined(self, count: u64) -> bool {
        match self {
            Flags::DoubleShift(bits) => count & 31 <= u64::from(bits) || bits == 64,
            _ => true,
        }
    }
}

struct Form {
    /// Instructions to execute (AT&T), using rax/rbx/rcx/rdx as inputs.
    asm: String,
    flags: Flags,
    /// Which table of inputs to use.
    table: usize,
}

fn form(asm: &str, flags: Flags) -> Form {
    Form {
        asm: asm.to_string(),
        flags,
        table: 0,
    }
}

const VALUES: [u64; 14] = [
    0,
    1,
    2,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0x8000,
    0xffff_ffff,
    0x8000_0000,
    0x7fff_ffff_ffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
    0x0123_4567_89ab_cdef,
];
const COUNTS: [u64; 12] = [0, 1, 2, 3, 7, 8, 9, 15, 16, 31, 32, 63];

/// (rax, rbx, rcx, rdx, rflags) entries.
fn tables() -> Vec<Vec<[u64; 5]>> {
    let mut lcg = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        lcg = lcg
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        lcg >> 11
    };
    let mut main = Vec::new();
    for (i, &a) in VALUES.iter().enumerate() {
        for (j, &b) in VALUES.iter().enumerate() {
            let count = COUNTS[(i * 5 + j) % COUNTS.len()];
            main.push([a, b, count, next(), next() & ALL]);
        }
    }
    for _ in 0..100 {
        main.push([next() * 3, next() * 5, next() % 70, next(), next() & ALL]);
    }
    // Division: rdx set by the form itself, divisor never 0 or -1.
    let divisors: Vec<[u64; 5]> = main
        .iter()
        .copied()
        .filter(|e| e[1] & 0xff != 0 && e[1] & 0xff != 0xff)
        .collect();
    vec![main, divisors]
}

fn forms() -> Vec<Form> {
    let mut v = Vec::new();
    let sizes = [
        ("b", "%al", "%bl", 8),
        ("w", "%ax", "%bx", 16),
        ("l", "%eax", "%ebx", 32),
        ("q", "%rax", "%rbx", 64),
    ];
    for (s, a, b, bits) in sizes {
        for op in ["add", "adc", "sub", "sbb", "cmp"] {
            v.push(form(&format!("{op}{s} {b}, {a}"), Flags::All));
        }
        for op in ["and", "or", "xor", "test"] {
            v.push(form(&format!("{op}{s} {b}, {a}"), Flags::NoAf));
        }
        for op in ["inc", "dec", "neg"] {
            v.push(form(&format!("{op}{s} {a}"), Flags::All));
        }
        v.push(form(&format!("not{s} {a}"), Flags::All));
        for op in ["shl", "shr", "sar"] {
            v.push(form(&format!("{op}{s} %cl, {a}"), Flags::Shift(bits)));
        }
        for op in ["rol", "ror"] {
            v.push(form(&format!("{op}{s} %cl, {a}"), Flags::Rotate(bits)));
        }
        v.push(form(
            &format!(
                "mov{s} {b}, scratch(%rip)\n add{s} {a}, scratch(%rip)\n mov{s} scratch(%rip), {a}"
            ),
            Flags::All,
        ));
        v.push(form(&format!("xadd{s} {b}, {a}"), Flags::All));
        v.push(form(&format!("mov{s} {b}, scratch(%rip)\n cmpxchg{s} {b}, scratch(%rip)\n mov{s} scratch(%rip), {b}"), Flags::All));
        let acc = if bits == 8 { "%bl" } else { b };
        v.push(form(&format!("mul{s} {acc}"), Flags::Only(CF | OF)));
        v.push(form(&format!("imul{s} {acc}"), Flags::Only(CF | OF)));
        let ext = match bits {
            8 => "movzbw %al, %ax",
            16 => "xorl %edx, %edx",
            32 => "xorl %edx, %edx",
            _ => "xorl %edx, %edx",
        };
        let sext = match bits {
            8 => "cbtw",
            16 => "cwtd",
            32 => "cltd",
            _ => "cqto",
        };
        v.push(Form {
            asm: format!("{ext}\n div{s} {acc}"),
            flags: Flags::Only(0),
            table: 1,
        });
        v.push(Form {
            asm: format!("{sext}\n idiv{s} {acc}"),
            flags: Flags::Only(0),
            table: 1,
        });
        if bits > 8 {
            v.push(form(&format!("imul{s} {b}, {a}"), Flags::Only(CF | OF)));
            v.push(form(
                &format!("imul{s} $-3, {b}, {a}"),
                Flags::Only(CF | OF),
            ));
            v.push(form(&format!("bsf{s} {b}, {a}"), Flags::Only(ZF)));
            v.push(form(&format!("bsr{s} {b}, {a}"), Flags::Only(ZF)));
            v.push(form(&format!("tzcnt{s} {b}, {a}"), Flags::Only(CF | ZF)));
            v.push(form(&format!("lzcnt{s} {b}, {a}"), Flags::Only(CF | ZF)));
            v.push(form(&format!("popcnt{s} {b}, {a}"), Flags::All));
            for op in ["bt", "bts", "btr", "btc"] {
                v.push(form(&format!("{op}{s} {b}, {a}"), Flags::Only(CF)));
            }
            v.push(form(
                &format!("shld{s} %cl, {b}, {a}"),
                Flags::DoubleShift(bits),
            ));
            v.push(form(
                &format!("shrd{s} %cl, {b}, {a}"),
                Flags::DoubleShift(bits),
            ));
        }
    }
    for cc in [
        "o", "no", "b", "ae", "e", "ne", "be", "a", "s", "ns", "p", "np", "l", "ge", "le", "g",
    ] {
        v.push(form(&format!("set{cc} %al"), Flags::All));
        v.push(form(&format!("cmov{cc}l %ebx, %eax"), Flags::All));
        v.push(form(&format!("cmov{cc}q %rbx, %rax"), Flags::All));
    }
    for asm in [
        "addb %bh, %ah",
        "movb %ah, %bl",
        "xorb %ch, %al",
        "movsbl %bl, %eax",
        "movswq %bx, %rax",
        "movslq %ebx, %rax",
        "movzbl %bh, %eax",
        "movzwl %bx, %eax",
        "cbtw",
        "cwtl",
        "cltq",
        "cwtd",
        "cltd",
        "cqto",
        "bswap %eax",
        "bswap %rax",
        "leal 7(%rax,%rbx,4), %eax",
        "leaq -9(%rax,%rbx,8), %rax",
        "xchgl %ebx, %eax",
        "addl $-5, %eax",
        "addq $0x7fffffff, %rax",
        "andb $0x80, %al",
        "stc",
        "clc",
        "cmc",
    ] {
        v.push(form(asm, Flags::All));
    }
    v.push(form("shll $1, %eax", Flags::Only(ALL & !AF)));
    v.push(form("shrq $63, %rax", Flags::Only(ALL & !AF & !OF)));
    v.push(form("sarw $5, %ax", Flags::Only(ALL & !AF & !OF)));
    v.push(form("roll $13, %eax", Flags::Only(ALL & !OF)));
    v
}

const SSE_OPS: &[&str] = &[
    "pxor %xmm1, %xmm0",
    "por %xmm1, %xmm0",
    "pand %xmm1, %xmm0",
    "pandn %xmm1, %xmm0",
    "xorps %xmm1, %xmm0",
    "andnpd %xmm1, %xmm0",
    "paddb %xmm1, %xmm0",
    "paddw %xmm1, %xmm0",
    "paddd %xmm1, %xmm0",
    "paddq %xmm1, %xmm0",
    "psubb %xmm1, %xmm0",
    "psubw %xmm1, %xmm0",
    "psubd %xmm1, %xmm0",
    "psubq %xmm1, %xmm0",
    "pcmpeqb %xmm1, %xmm0",
    "pcmpeqw %xmm1, %xmm0",
    "pcmpeqd %xmm1, %xmm0",
    "pcmpgtb %xmm1, %xmm0",
    "pcmpgtw %xmm1, %xmm0",
    "pcmpgtd %xmm1, %xmm0",
    "pminub %xmm1, %xmm0",
    "pmaxub %xmm1, %xmm0",
    "pminsw %xmm1, %xmm0",
    "pmaxsw %xmm1, %xmm0",
    "pavgb %xmm1, %xmm0",
    "pmullw %xmm1, %xmm0",
    "pmuludq %xmm1, %xmm0",
    "punpcklbw %xmm1, %xmm0",
    "punpcklwd %xmm1, %xmm0",
    "punpckldq %xmm1, %xmm0",
    "punpcklqdq %xmm1, %xmm0",
    "punpckhbw %xmm1, %xmm0",
    "punpckhwd %xmm1, %xmm0",
    "punpckhdq %xmm1, %xmm0",
    "punpckhqdq %xmm1, %xmm0",
    "packuswb %xmm1, %xmm0",
    "packsswb %xmm1, %xmm0",
    "packssdw %xmm1, %xmm0",
    "pshufd $0x1b, %xmm1, %xmm0",
    "pshuflw $0xb1, %xmm1, %xmm0",
    "pshufhw $0x4e, %xmm1, %xmm0",
    "shufps $0x4e, %xmm1, %xmm0",
    "psllw $3, %xmm0",
    "pslld $17, %xmm0",
    "psllq $40, %xmm0",
    "psrlw $15, %xmm0",
    "psrld $1, %xmm0",
    "psrlq $63, %xmm0",
    "psraw $4, %xmm0",
    "psrad $31, %xmm0",
    "pslldq $5, %xmm0",
    "psrldq $9, %xmm0",
    "psrlq %xmm1, %xmm0",
    "movss %xmm1, %xmm0",
    "movsd %xmm1, %xmm0",
    "movhlps %xmm1, %xmm0",
    "movlhps %xmm1, %xmm0",
    "movq %xmm1, %xmm0",
    "movq %rbx, %xmm0",
    "movd %ebx, %xmm0",
    "pinsrw $5, %ebx, %xmm0",
    "pmovmskb %xmm1, %eax\n movd %eax, %xmm0",
    "movmskps %xmm1, %eax\n movd %eax, %xmm0",
    "pextrw $3, %xmm1, %eax\n movd %eax, %xmm0",
    "movd %xmm1, %eax\n movq %rax, %xmm0",
    "movq %xmm1, %rax\n movq %rax, %xmm0",
];

fn program(forms: &[Form], tables: &[Vec<[u64; 5]>], vectors: &[u128]) -> String {
    let mut s = String::from("\t.text\n\t.globl _start\n_start:\n\tlea out(%rip), %rdi\n");
    for (k, f) in forms.iter().enumerate() {
        let _ = write!(
            s,
            "\tlea table{}(%rip), %rsi\n\tmov ${}, %r8d\n.Lf{k}:\n\tmov (%rsi), %rax\n\tmov 8(%rsi), %rbx\n\tmov 16(%rsi), %rcx\n\tmov 24(%rsi), %rdx\n\
             \tpushq 32(%rsi)\n\tpopfq\n\t{}\n\tpushfq\n\tpop %r9\n\tmov %rax, (%rdi)\n\tmov %rbx, 8(%rdi)\n\tmov %rdx, 16(%rdi)\n\tmov %r9, 24(%rdi)\n\
             \tadd $32, %rdi\n\tadd $40, %rsi\n\tdec %r8d\n\tjnz .Lf{k}\n",
            f.table,
            tables[f.table].len(),
            f.asm
        );
    }
    let n = vectors.len();
    for (k, op) in SSE_OPS.iter().enumerate() {
        let _ = write!(
            s,
            "\tlea vectors(%rip), %rsi\n\tmov ${}, %r8d\n.Lv{k}:\n\tmov %r8d, %eax\n\tdec %eax\n\txor %edx, %edx\n\tmov ${n}, %ecx\n\tdiv %ecx\n\
             \tshl $4, %eax\n\tshl $4, %edx\n\tlea vectors(%rip), %r10\n\tmovdqu (%r10,%rax), %xmm0\n\tmovdqu (%r10,%rdx), %xmm1\n\tmovq (%r10,%rdx), %rbx\n\
             \t{op}\n\tmovdqu %xmm0, (%rdi)\n\tadd $16, %rdi\n\tdec %r8d\n\tjnz .Lv{k}\n",
            n * n
        );
    }
    s.push_str("\tmov %rdi, %rdx\n\tlea out(%rip), %rsi\n\tsub %rsi, %rdx\n\tmov $1, %edi\n\tmov $1, %eax\n\tsyscall\n\tmov $60, %eax\n\txor %edi, %edi\n\tsyscall\n");
    s.push_str("\t.data\n\t.p2align 4\n");
    for (t, table) in tables.iter().enumerate() {
        let _ = writeln!(s, "table{t}:");
        for e in table {
            let _ = writeln!(
                s,
                "\t.quad {}, {}, {}, {}, {}",
                e[0], e[1], e[2], e[3], e[4]
            );
        }
    }
    s.push_str("vectors:\n");
    for v in vectors {
        let _ = writeln!(s, "\t.quad {}, {}", *v as u64, (*v >> 64) as u64);
    }
    let out_size: usize = forms
        .iter()
        .map(|f| tables[f.table].len() * 32)
        .sum::<usize>()
        + SSE_OPS.len() * n * n * 16;
    let _ = write!(
        s,
        "\t.bss\n\t.p2align 4\nscratch: .quad 0\nout: .skip {out_size}\n"
    );
    s
}

#[test]
fn instructions_match_the_cpu() {
    if !common::have_tool("as") || !common::have_tool("ld") {
        return;
    }
    let dir = common::scratch_dir("semantics");
    let forms = forms();
    let tables = tables();
    let mut vectors: Vec<u128> = vec![
        0,
        u128::MAX,
        0x7f80_ff00_0180_7fff_8000_ffff_0000_7fff,
        0x8000_0000_7fff_ffff_ffff_0001_0000_8000,
    ];
    let mut x = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834u128;
    for _ in 0..6 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        vectors.push(x);
    }
    let src = dir.join("semantics.s");
    std::fs::write(&src, program(&forms, &tables, &vectors)).unwrap();
    let obj = dir.join("semantics.o");
    let exe = dir.join("semantics");
    common::run(Command::new("as").arg(&src).arg("-o").arg(&obj));
    common::run(
        Command::new("ld")
            .args(["-static", "-o"])
            .arg(&exe)
            .arg(&obj),
    );
    let native = common::run(&mut Command::new(&exe)).stdout;
    let emulated = common::run(Command::new(env!("CARGO_BIN_EXE_brr-run")).arg(&exe)).stdout;
    assert_eq!(native.len(), emulated.len(), "output sizes");
    let word = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    let mut failures = Vec::new();
    let mut off = 0;
    for f in &forms {
        for e in &tables[f.table] {
            let mask = f.flags.mask(e[2]);
            let (n, m) = (&native[off..off + 32], &emulated[off..off + 32]);
            let defined = f.flags.defined(e[2]);
            let regs_equal = n[..24] == m[..24] || !defined;
            let flags_equal = word(n, 24) & mask == word(m, 24) & mask || !defined;
            if !(regs_equal && flags_equal) && failures.len() < 20 {
                failures.push(format!(
                    "`{}` rax={:#x} rbx={:#x} rcx={} flags={:#x}: native rax={:#x} rbx={:#x} rdx={:#x} fl={:#x}, emulated rax={:#x} rbx={:#x} rdx={:#x} fl={:#x} (mask {mask:#x})",
                    f.asm.replace('\n', ";"),
                    e[0], e[1], e[2], e[4],
                    word(n, 0), word(n, 8), word(n, 16), word(n, 24) & mask,
                    word(m, 0), word(m, 8), word(m, 16), word(m, 24) & mask
                ));
            }
            off += 32;
        }
    }
    let n = vectors.len();
    for op in SSE_OPS {
        for k in 0..n * n {
            if native[off..off + 16] != emulated[off..off + 16] && failures.len() < 40 {
                failures.push(format!(
                    "`{}` case {k}: native {:02x?} emulated {:02x?}",
                    op.replace('\n', ";"),
                    &native[off..off + 16],
                    &emulated[off..off + 16]
                ));
            }
            off += 16;
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
