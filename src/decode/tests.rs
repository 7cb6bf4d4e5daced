use super::*;

/// Code at a fixed base address, as the handler sees one mapping.
struct Code(u64, Vec<u8>);

impl CodeSource for Code {
    fn code_at(&mut self, addr: u64) -> Option<&[u8]> {
        let off = addr.checked_sub(self.0)? as usize;
        (off < self.1.len()).then(|| &self.1[off..])
    }
}

fn block(bytes: &[u8]) -> Block {
    let mut code = Code(0x1000, bytes.to_vec());
    decode_block(&mut code, 0x1000, &mut Instruction::default())
}

fn form(block: Block) -> BranchForm {
    match block.end {
        BlockEnd::Dynamic(f) => f,
        other => panic!("expected a branch form, got {other:?}"),
    }
}

#[test]
fn direct_jmp_and_call_resolve_statically() {
    // push rbp; mov rbp, rsp; call +0x10
    let s = block(&[0x55, 0x48, 0x89, 0xe5, 0xe8, 0x10, 0, 0, 0]);
    assert_eq!(
        s.end,
        BlockEnd::Direct {
            from: 0x1004,
            to: 0x1019,
            ret_addr: Some(0x1009)
        }
    );
    assert_eq!(s.sp_delta, Some(-8));
    assert_eq!(s.instructions, 3);
    // jmp short -2 (to itself)
    let s = block(&[0xeb, 0xfe]);
    assert_eq!(
        s.end,
        BlockEnd::Direct {
            from: 0x1000,
            to: 0x1000,
            ret_addr: None
        }
    );
}

#[test]
fn jcc_becomes_a_condition_form() {
    // sub rsp, 0x18; cmp eax, 1; jle +5
    let s = block(&[0x48, 0x83, 0xec, 0x18, 0x83, 0xf8, 0x01, 0x7e, 0x05]);
    let f = form(s);
    assert_eq!(f.at, 0x1007);
    assert_eq!(f.fall_through, 0x1009);
    assert_eq!(f.kind, BranchKind::Jcc(Condition::Le));
    assert_eq!(f.target, Target::Const(0x100e));
    assert_eq!(s.sp_delta, Some(-0x18));
}

#[test]
fn indirect_jmp_through_a_table() {
    // jmp qword ptr [rax + rcx*8 + 0x20]
    let f = form(block(&[0xff, 0x64, 0xc8, 0x20]));
    assert_eq!(f.kind, BranchKind::Jmp);
    assert_eq!(
        f.target,
        Target::Load {
            operand: x86_sem::MemOperand {
                base: Some(0),
                index: Some(1),
                scale_log2: 3,
                disp: 0x20,
                addr32: false,
                segment: x86_sem::SegmentBase::None,
            },
            size: 8,
        }
    );
    // jmp qword ptr [rip + 0x100]: folded to an absolute load
    let f = form(block(&[0xff, 0x25, 0x00, 0x01, 0, 0]));
    assert_eq!(
        f.target,
        Target::Load {
            operand: x86_sem::MemOperand {
                base: None,
                index: None,
                scale_log2: 0,
                disp: 0x1106,
                addr32: false,
                segment: x86_sem::SegmentBase::None,
            },
            size: 8,
        }
    );
}

/// Registers for `load_address`: rax and rcx as given, the rest 0.
struct Two(u64, u64);

impl crate::decode::RegisterFile for Two {
    fn gpr(&self, reg: crate::decode::Gpr) -> u64 {
        match reg {
            0 => self.0,
            1 => self.1,
            _ => 0,
        }
    }
    fn rip(&self) -> u64 {
        0
    }
    fn rflags(&self) -> u64 {
        0
    }
}

#[test]
fn a_32_bit_address_wraps_at_4_gib_as_the_cpu_computes_it() {
    // jmp qword ptr [eax + ecx*8 + 0x10] (0x67): the upper halves of rax
    // and rcx play no part, and the sum wraps at 4 GiB.
    let f = form(block(&[0x67, 0xff, 0x64, 0xc8, 0x10]));
    let regs = Two(0xdead_beef_ffff_fff0, 0x1234_5678_0000_0001);
    assert_eq!(f.target.load_address(&regs), Some((0x0000_0008, 8)));
    // Without 0x67, the full 64-bit sum.
    let f = form(block(&[0xff, 0x64, 0xc8, 0x10]));
    let full = 0xdead_beef_ffff_fff0u64
        .wrapping_add(0x1234_5678_0000_0001u64.wrapping_mul(8))
        .wrapping_add(0x10);
    assert_eq!(f.target.load_address(&regs), Some((full, 8)));
}

#[test]
fn calls_returns_and_registers() {
    // call r11
    let f = form(block(&[0x41, 0xff, 0xd3]));
    assert_eq!((f.kind, f.target), (BranchKind::Call, Target::Reg(11)));
    // ret 0x10
    let f = form(block(&[0xc2, 0x10, 0x00]));
    assert_eq!(f.kind, BranchKind::Ret { pop: 16 });
    // jrcxz +0; loop -2 with 0x67 (ecx)
    assert_eq!(
        form(block(&[0xe3, 0x00])).kind,
        BranchKind::Jrcxz { ecx: false }
    );
    assert_eq!(
        form(block(&[0x67, 0xe2, 0xfd])).kind,
        BranchKind::Loop {
            zf: None,
            ecx: true
        }
    );
    // syscall
    assert_eq!(form(block(&[0x0f, 0x05])).kind, BranchKind::Syscall);
}

#[test]
fn untrackable_stack_changes_are_unknown() {
    // leave; ret
    let s = block(&[0xc9, 0xc3]);
    assert_eq!(form(s).kind, BranchKind::Ret { pop: 0 });
    assert_eq!(s.sp_delta, None);
    // pop rbx; add rsp, 8; ret
    let s = block(&[0x5b, 0x48, 0x83, 0xc4, 0x08, 0xc3]);
    assert_eq!(s.sp_delta, Some(16));
}

#[test]
fn failures_name_the_reason() {
    // int3
    assert!(matches!(
        block(&[0xcc]).end,
        BlockEnd::Fail {
            why: DecodeFailure::Unsupported,
            ..
        }
    ));
    // ud2
    assert!(matches!(
        block(&[0x0f, 0x0b]).end,
        BlockEnd::Fail {
            why: DecodeFailure::Unsupported,
            ..
        }
    ));
    // nop then the end of the mapping
    assert_eq!(
        block(&[0x90]).end,
        BlockEnd::Fail {
            at: 0x1001,
            why: DecodeFailure::OutsideMappings
        }
    );
    // jmp through fs: cannot be evaluated from the ucontext
    assert!(matches!(
        block(&[0x64, 0xff, 0x24, 0x25, 0x10, 0, 0, 0]).end,
        BlockEnd::Fail {
            why: DecodeFailure::Unsupported,
            ..
        }
    ));
    // a long run of nops hits the limit
    let nops = vec![0x90; MAX_SEGMENT_INSTRUCTIONS as usize + 10];
    assert!(matches!(
        block(&nops).end,
        BlockEnd::Fail {
            why: DecodeFailure::LookaheadLimit,
            ..
        }
    ));
}

#[test]
fn cache_decodes_once_per_generation() {
    let mut code = Code(0x1000, vec![0x90, 0x74, 0x02]);
    let mut cache = BlockCache::new();
    let mut insn = Instruction::default();
    let mut decoded = false;
    let a = cache.lookup(&mut code, 0x1000, 1, &mut insn, &mut decoded);
    assert!(decoded);
    let b = cache.lookup(&mut code, 0x1000, 1, &mut insn, &mut decoded);
    assert!(!decoded);
    assert_eq!(a, b);
    cache.lookup(&mut code, 0x1000, 2, &mut insn, &mut decoded);
    assert!(decoded);
    assert_eq!((cache.hits(), cache.misses()), (1, 2));
}

/// Code handed out a few bytes at a time, as the handler's fault-safe
/// copy hands out windows of a mapping.
struct Windowed(u64, Vec<u8>, usize);

impl CodeSource for Windowed {
    fn code_at(&mut self, addr: u64) -> Option<&[u8]> {
        let off = addr.checked_sub(self.0)? as usize;
        (off < self.1.len()).then(|| &self.1[off..(off + self.2).min(self.1.len())])
    }
}

#[test]
fn an_instruction_cut_by_a_window_is_read_from_the_next() {
    // mov rax, imm64 (10 bytes); add rax, imm32 (6); sub rsp, 0x18 (4);
    // cmp eax, 1 (3); jle +5 (2): every window size cuts some instruction.
    let bytes = [
        0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8, 0x48, 0x05, 1, 0, 0, 0, 0x48, 0x83, 0xec, 0x18, 0x83,
        0xf8, 0x01, 0x7e, 0x05,
    ];
    let whole = block(&bytes);
    assert_eq!(form(whole).at, 0x1017);
    for window in 15..bytes.len() {
        let mut code = Windowed(0x1000, bytes.to_vec(), window);
        let s = decode_block(&mut code, 0x1000, &mut Instruction::default());
        assert_eq!(s, whole, "window of {window} bytes");
    }
    // At the end of the mapping a cut instruction stays cut.
    let mut code = Windowed(0x1000, bytes[..22].to_vec(), 16);
    let s = decode_block(&mut code, 0x1000, &mut Instruction::default());
    assert!(
        matches!(
            s.end,
            BlockEnd::Fail {
                at: 0x1014,
                why: DecodeFailure::Unsupported
            }
        ),
        "{s:?}"
    );
}
