//! Exact value profiles (`brr::loadvalues`) of a hand-written program whose
//! loads and values are known: a table walk, a load under a branch, and the
//! instructions that read memory without being loads (pop, ret, a
//! read-modify-write, lea, a string instruction).

mod common;

use brr::emu::syscall::Process;
use brr::loadvalues;
use std::path::PathBuf;
use std::process::Command;

const PROGRAM: &str = r#"
    .data
tbl: .quad 7, 7, 7, 9
k:   .quad 42
cnt: .quad 0
src: .quad 1
dst: .quad 0
    .text
    .globl _start
_start:
    xor %ecx, %ecx
    xor %ebx, %ebx
1:  mov %ecx, %eax
    and $3, %eax
    .globl load_tbl
load_tbl:
    mov tbl(,%rax,8), %rdx      # 100 times: 7 (75) and 9 (25)
    add %rdx, %rbx
    cmp $10, %ecx
    jae 2f
    .globl load_k
load_k:
    add k(%rip), %rbx           # 10 times: 42
2:  addq $1, cnt(%rip)          # read-modify-write: not a load
    push %rbx
    pop %rdx                    # stack: not a load
    lea tbl(%rip), %rsi         # no access
    lea dst(%rip), %rdi
    lea src(%rip), %rsi
    movsq                       # string instruction: not a load
    call 3f
    inc %ecx
    cmp $100, %ecx
    jb 1b
    mov $60, %eax
    xor %edi, %edi
    syscall
3:  ret                         # stack: not a load
"#;

#[test]
fn exact_counts_of_a_known_program() {
    if !common::have_tool("as") || !common::have_tool("ld") {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("loadvalues");
    std::fs::create_dir_all(&dir).unwrap();
    let (src, obj, exe) = (dir.join("p.s"), dir.join("p.o"), dir.join("p"));
    std::fs::write(&src, PROGRAM).unwrap();
    common::run(Command::new("as").arg(&src).arg("-o").arg(&obj));
    common::run(
        Command::new("ld")
            .args(["-static", "-o"])
            .arg(&exe)
            .arg(&obj),
    );
    let syms = common::run(Command::new("nm").arg(&exe));
    let sym = |name: &str| {
        String::from_utf8_lossy(&syms.stdout)
            .lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .and_then(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok())
            .unwrap_or_else(|| panic!("no symbol {name}"))
    };
    let mut p = Process::load(&exe, &["p".to_string()], &[], 1).unwrap();
    let (status, profile) = loadvalues::run(&mut p, 1_000_000).unwrap();
    assert_eq!(status, 0);
    assert_eq!(profile.loads.len(), 2, "pcs {:x?}", profile.pcs);
    let tbl = profile.at(sym("load_tbl")).expect("the table load");
    assert_eq!((tbl.total, tbl.other), (100, 0));
    assert_eq!(tbl.top(3), vec![(7, 75), (9, 25)]);
    assert!(tbl.exact_top());
    assert_eq!(tbl.invariance(1), 0.75);
    assert_eq!(tbl.invariance(2), 1.0);
    let k = profile
        .at(sym("load_k"))
        .expect("the load under the branch");
    assert_eq!((k.total, k.top(2)), (10, vec![(42, 10)]));
    assert_eq!(profile.executions(), 110);
}
