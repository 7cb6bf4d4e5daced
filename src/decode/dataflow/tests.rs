//! The model checked against the CPU: each instruction runs natively on
//! random and edge-case register values, and the model must produce the
//! same registers and the same (defined) status flags.

use super::*;
use iced_x86::{Decoder, DecoderOptions};

/// Memory with nothing immutable in it, and a stack whose every slot holds
/// 0x5a5a…: what the model may read is exactly what the tests expect.
struct Stack;

impl Memory for Stack {
    fn read(&self, _addr: u64, _size: u8) -> u64 {
        0x5a5a_5a5a_5a5a_5a5a
    }
}

/// Memory that is all immutable and holds `addr ^ 0x1111` at each address.
struct Rodata;

impl Memory for Rodata {
    fn read(&self, _addr: u64, _size: u8) -> u64 {
        panic!("the model read mutable memory")
    }
    fn read_immutable(&self, addr: u64, size: u8) -> Option<u64> {
        Some((addr ^ 0x1111) & mask(size as u32 * 8))
    }
}

/// Registers as the native stub loads and stores them: rax, rcx, rdx, rbx,
/// rsp (unused), rbp, rsi, rdi, r8 … r15, then rflags.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Native {
    gpr: [u64; 16],
    flags: u64,
}

extern "C" {
    fn dataflow_native_exec(state: *mut Native, code: *const u8);
}

// Loads every register but rsp from `state`, sets the status flags, calls
// `code` (one instruction, then ret), and stores everything back.
std::arch::global_asm!(
    ".globl dataflow_native_exec",
    "dataflow_native_exec:",
    "push rbx",
    "push rbp",
    "push r12",
    "push r13",
    "push r14",
    "push r15",
    "push rdi",
    "push rsi",
    "push qword ptr [rdi + 128]",
    "popfq",
    "mov rax, [rdi]",
    "mov rcx, [rdi + 8]",
    "mov rdx, [rdi + 16]",
    "mov rbx, [rdi + 24]",
    "mov rbp, [rdi + 40]",
    "mov rsi, [rdi + 48]",
    "mov r8, [rdi + 64]",
    "mov r9, [rdi + 72]",
    "mov r10, [rdi + 80]",
    "mov r11, [rdi + 88]",
    "mov r12, [rdi + 96]",
    "mov r13, [rdi + 104]",
    "mov r14, [rdi + 112]",
    "mov r15, [rdi + 120]",
    "mov rdi, [rdi + 56]",
    "call qword ptr [rsp]",
    "push rdi",
    "mov rdi, [rsp + 16]",
    "mov [rdi], rax",
    "mov [rdi + 8], rcx",
    "mov [rdi + 16], rdx",
    "mov [rdi + 24], rbx",
    "mov [rdi + 40], rbp",
    "mov [rdi + 48], rsi",
    "mov [rdi + 64], r8",
    "mov [rdi + 72], r9",
    "mov [rdi + 80], r10",
    "mov [rdi + 88], r11",
    "mov [rdi + 96], r12",
    "mov [rdi + 104], r13",
    "mov [rdi + 112], r14",
    "mov [rdi + 120], r15",
    "pushfq",
    "pop qword ptr [rdi + 128]",
    "pop rax",
    "mov [rdi + 56], rax",
    "add rsp, 16",
    "pop r15",
    "pop r14",
    "pop r13",
    "pop r12",
    "pop rbp",
    "pop rbx",
    "ret",
);

struct CodePage(*mut u8);

impl CodePage {
    fn new() -> CodePage {
        // SAFETY: a fresh anonymous mapping owned by this value.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        CodePage(p.cast())
    }

    fn run(&self, bytes: &[u8], state: &mut Native) {
        // SAFETY: the page is ours and large enough; the stub preserves the
        // callee-saved registers and the stack.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.0, bytes.len());
            *self.0.add(bytes.len()) = 0xc3;
            dataflow_native_exec(state, self.0);
        }
    }
}

impl Drop for CodePage {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.0.cast(), 4096) };
    }
}

/// Instructions the model claims, as encoded by compilers.
const CASES: &[(&str, &[u8])] = &[
    ("add rax, rcx", &[0x48, 0x01, 0xc8]),
    ("add eax, ecx", &[0x01, 0xc8]),
    ("add rdx, 0x7f", &[0x48, 0x83, 0xc2, 0x7f]),
    ("add esi, -1", &[0x83, 0xc6, 0xff]),
    (
        "add r9, 0x12345678",
        &[0x49, 0x81, 0xc1, 0x78, 0x56, 0x34, 0x12],
    ),
    ("sub rax, rcx", &[0x48, 0x29, 0xc8]),
    ("sub edx, 1", &[0x83, 0xea, 0x01]),
    ("cmp rax, rcx", &[0x48, 0x39, 0xc8]),
    ("cmp ecx, 0x10", &[0x83, 0xf9, 0x10]),
    ("cmp r8d, -5", &[0x41, 0x83, 0xf8, 0xfb]),
    ("cmp al, 0x41", &[0x3c, 0x41]),
    ("cmp dl, cl", &[0x38, 0xca]),
    ("cmp cx, dx", &[0x66, 0x39, 0xd1]),
    ("test rax, rax", &[0x48, 0x85, 0xc0]),
    ("test esi, esi", &[0x85, 0xf6]),
    ("test al, 1", &[0xa8, 0x01]),
    ("test dil, 4", &[0x40, 0xf6, 0xc7, 0x04]),
    ("and rax, rdx", &[0x48, 0x21, 0xd0]),
    ("and ecx, 0xff", &[0x81, 0xe1, 0xff, 0, 0, 0]),
    ("or rbx, rsi", &[0x48, 0x09, 0xf3]),
    ("xor eax, eax", &[0x31, 0xc0]),
    ("xor r10, r11", &[0x4d, 0x31, 0xda]),
    ("inc rax", &[0x48, 0xff, 0xc0]),
    ("inc ecx", &[0xff, 0xc1]),
    ("dec rdx", &[0x48, 0xff, 0xca]),
    ("dec r12d", &[0x41, 0xff, 0xcc]),
    ("neg rax", &[0x48, 0xf7, 0xd8]),
    ("neg esi", &[0xf7, 0xde]),
    ("not rcx", &[0x48, 0xf7, 0xd1]),
    ("mov rax, rcx", &[0x48, 0x89, 0xc8]),
    ("mov eax, ecx", &[0x89, 0xc8]),
    ("mov edx, 0x12345678", &[0xba, 0x78, 0x56, 0x34, 0x12]),
    ("mov rsi, -2", &[0x48, 0xc7, 0xc6, 0xfe, 0xff, 0xff, 0xff]),
    ("movabs r8, imm64", &[0x49, 0xb8, 1, 2, 3, 4, 5, 6, 7, 0x88]),
    ("movzx eax, cl", &[0x0f, 0xb6, 0xc1]),
    ("movzx ecx, dx", &[0x0f, 0xb7, 0xca]),
    ("movsx rax, cl", &[0x48, 0x0f, 0xbe, 0xc1]),
    ("movsx eax, dx", &[0x0f, 0xbf, 0xc2]),
    ("movsxd rax, ecx", &[0x48, 0x63, 0xc1]),
    (
        "lea rax, [rcx + rdx*4 + 8]",
        &[0x48, 0x8d, 0x44, 0x91, 0x08],
    ),
    ("lea eax, [rcx + rdx - 1]", &[0x8d, 0x44, 0x11, 0xff]),
    ("lea r9, [r10 + r11*8]", &[0x4f, 0x8d, 0x0c, 0xda]),
    ("shl rax, 3", &[0x48, 0xc1, 0xe0, 0x03]),
    ("shl eax, 1", &[0xd1, 0xe0]),
    ("shr rdx, 1", &[0x48, 0xd1, 0xea]),
    ("shr ecx, 7", &[0xc1, 0xe9, 0x07]),
    ("sar rax, 63", &[0x48, 0xc1, 0xf8, 0x3f]),
    ("sar esi, 1", &[0xd1, 0xfe]),
    ("shl rdx, cl", &[0x48, 0xd3, 0xe2]),
    ("shr eax, cl", &[0xd3, 0xe8]),
    ("sar rbx, cl", &[0x48, 0xd3, 0xfb]),
    ("cmove rax, rcx", &[0x48, 0x0f, 0x44, 0xc1]),
    ("cmovne eax, ecx", &[0x0f, 0x45, 0xc1]),
    ("cmovl rdx, rsi", &[0x48, 0x0f, 0x4c, 0xd6]),
    ("cmovbe r8d, r9d", &[0x45, 0x0f, 0x46, 0xc1]),
    ("cmovg rax, rbx", &[0x48, 0x0f, 0x4f, 0xc3]),
    ("cmovs ecx, edx", &[0x0f, 0x48, 0xca]),
    ("cmovae rdi, rax", &[0x48, 0x0f, 0x43, 0xf8]),
    ("nop dword ptr [rax + rax]", &[0x0f, 0x1f, 0x44, 0x00, 0x00]),
    ("endbr64", &[0xf3, 0x0f, 0x1e, 0xfa]),
];

/// Values where arithmetic flags change behaviour.
const EDGES: [u64; 12] = [
    0,
    1,
    2,
    u64::MAX,
    0x7fff_ffff_ffff_ffff,
    0x8000_0000_0000_0000,
    0xffff_ffff,
    0x7fff_ffff,
    0x8000_0000,
    0x7f,
    0x80,
    0xff,
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn value(&mut self) -> u64 {
        let r = self.next();
        match r % 4 {
            0 => EDGES[(r >> 8) as usize % EDGES.len()],
            1 => r >> (r % 64),
            _ => self.next(),
        }
    }
}

fn decode(bytes: &[u8]) -> Instruction {
    let mut d = Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE);
    let insn = d.decode();
    assert_eq!(insn.len(), bytes.len(), "encoding of one instruction");
    insn
}

#[test]
fn model_matches_the_cpu() {
    let page = CodePage::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for (name, bytes) in CASES {
        let insn = decode(bytes);
        for round in 0..2000 {
            let mut native = Native::default();
            for (i, g) in native.gpr.iter_mut().enumerate() {
                *g = if i == 4 { 0 } else { rng.value() };
            }
            native.gpr[1] = if round % 3 == 0 {
                rng.next() % 70
            } else {
                native.gpr[1]
            }; // shift counts
            native.flags = (rng.next() & STATUS) | 0x202;
            let mut model = RegState::zeroed();
            model.gpr = native.gpr;
            model.flags = native.flags;
            let before = native;
            page.run(bytes, &mut native);
            assert!(
                step(&insn, &mut model, &Stack),
                "{name}: the model refused it"
            );
            for i in (0..16).filter(|&i| i != 4) {
                assert_eq!(
                    model.gpr[i], native.gpr[i],
                    "{name}: register {i} differs, inputs {before:x?}"
                );
            }
            let defined = STATUS & !model.undefined;
            assert_eq!(
                model.flags & defined,
                native.flags & defined,
                "{name}: flags differ (defined mask {defined:#x}), inputs {before:x?}"
            );
        }
    }
}

#[test]
fn outside_the_model_is_refused() {
    let refused: &[(&str, &[u8])] = &[
        ("mov rax, [rcx]", &[0x48, 0x8b, 0x01]),
        ("add rax, [rsp + 8]", &[0x48, 0x03, 0x44, 0x24, 0x08]),
        ("cmp dword ptr [rdi], 0", &[0x83, 0x3f, 0x00]),
        ("pop rsp", &[0x5c]),
        ("mov rax, [rcx] (mutable)", &[0x48, 0x8b, 0x01]),
        (
            "mov eax, fs:[0x28]",
            &[0x64, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0],
        ),
        ("add dword ptr [rsp], 1", &[0x83, 0x04, 0x24, 0x01]),
        ("cmovne rax, [rcx]", &[0x48, 0x0f, 0x45, 0x01]),
        ("movups [rsp], xmm0", &[0x0f, 0x11, 0x04, 0x24]),
        ("imul rax, rcx", &[0x48, 0x0f, 0xaf, 0xc1]),
        ("sete al", &[0x0f, 0x94, 0xc0]),
        ("mov al, cl", &[0x88, 0xc8]),
        ("add al, 1", &[0x04, 0x01]),
        ("cmp ah, 1", &[0x80, 0xfc, 0x01]),
        ("adc rax, rcx", &[0x48, 0x11, 0xc8]),
        ("syscall", &[0x0f, 0x05]),
        ("cpuid", &[0x0f, 0xa2]),
        ("rdtsc", &[0x0f, 0x31]),
        ("bt rax, 3", &[0x48, 0x0f, 0xba, 0xe0, 0x03]),
    ];
    for (name, bytes) in refused {
        let mut st = RegState::zeroed();
        assert!(
            !step(&decode(bytes), &mut st, &Stack),
            "{name} must be outside the model"
        );
    }
}

#[test]
fn undefined_flags_block_conditions_that_read_them() {
    let mut st = RegState::zeroed();
    st.gpr[0] = 0x40;
    assert!(step(&decode(&[0x48, 0xc1, 0xe0, 0x03]), &mut st, &Stack)); // shl rax, 3
    assert!(!st.can_test(Condition::O));
    assert!(!st.can_test(Condition::L));
    assert!(st.can_test(Condition::E));
    assert!(st.can_test(Condition::B));
    assert!(step(&decode(&[0x48, 0x85, 0xc0]), &mut st, &Stack)); // test rax, rax
    assert!(st.can_test(Condition::L));
}

#[test]
fn stores_are_logged_and_stack_loads_see_them() {
    let mut st = RegState::zeroed();
    st.gpr = [7; 16];
    st.gpr[4] = 0x7000; // rsp
    st.gpr[0] = 0xaaaa; // rax
    st.gpr[5] = 0x7100; // rbp
                        // mov [rsp+8], rax: no register changes, the slot is logged.
    assert!(step(
        &decode(&[0x48, 0x89, 0x44, 0x24, 0x08]),
        &mut st,
        &Stack
    ));
    assert_eq!(st.load_stack(0x7008, 8, &Stack), Some(0xaaaa));
    // push rbx; pop rcx: rcx gets rbx, rsp is back.
    assert!(step(&decode(&[0x53]), &mut st, &Stack));
    assert_eq!(st.gpr[4], 0x7000 - 8);
    assert!(step(&decode(&[0x59]), &mut st, &Stack));
    assert_eq!((st.gpr[1], st.gpr[4]), (7, 0x7000));
    // pop rdx from a slot the model never wrote: memory.
    assert!(step(&decode(&[0x5a]), &mut st, &Stack));
    assert_eq!(st.gpr[2], 0x5a5a_5a5a_5a5a_5a5a);
    // A partial overlap is refused: mov dword [rsp+12], eax stores at
    // 0x7014; an 8-byte load at 0x7010 cannot be answered, one at 0x7018 can.
    assert_eq!(st.gpr[4], 0x7008);
    assert!(step(&decode(&[0x89, 0x44, 0x24, 0x0c]), &mut st, &Stack));
    assert_eq!(st.load_stack(0x7010, 8, &Stack), None);
    assert_eq!(
        st.load_stack(0x7018, 8, &Stack),
        Some(0x5a5a_5a5a_5a5a_5a5a)
    );
    assert_eq!(st.load_stack(0x7014, 4, &Stack), Some(0xaaaa));
    // leave: rsp = rbp + 8, rbp = [rbp].
    assert!(step(&decode(&[0xc9]), &mut st, &Stack));
    assert_eq!((st.gpr[4], st.gpr[5]), (0x7108, 0x5a5a_5a5a_5a5a_5a5a));
}

#[test]
fn loads_read_only_immutable_memory() {
    let mut st = RegState::zeroed();
    st.gpr[1] = 0x4000; // rcx
    st.gpr[2] = 3; // rdx
                   // movsxd rax, dword [rcx + rdx*4]: a relative jump table.
    assert!(step(&decode(&[0x48, 0x63, 0x04, 0x91]), &mut st, &Rodata));
    assert_eq!(st.gpr[0], (0x400c ^ 0x1111) as u32 as i32 as i64 as u64);
    // cmp eax, [rip + 0x10]
    assert!(step(
        &decode(&[0x3b, 0x05, 0x10, 0, 0, 0]),
        &mut st,
        &Rodata
    ));
    // The same load from mutable memory is refused.
    assert!(!step(&decode(&[0x48, 0x63, 0x04, 0x91]), &mut st, &Stack));
}

#[test]
fn stores_and_pushes_change_only_rsp() {
    let mut st = RegState::zeroed();
    st.gpr = [7; 16];
    st.flags = 0x46;
    let (gpr, flags) = (st.gpr, st.flags);
    assert!(step(
        &decode(&[0x48, 0x89, 0x44, 0x24, 0x08]),
        &mut st,
        &Stack
    )); // mov [rsp+8], rax
    assert_eq!((st.gpr, st.flags), (gpr, flags));
    assert!(step(&decode(&[0x53]), &mut st, &Stack)); // push rbx
    assert_eq!(st.gpr[4], 7u64.wrapping_sub(8));
}
