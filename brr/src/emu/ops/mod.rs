//! Instruction semantics and the dispatch table indexed by iced `Code`.
//!
//! `handler_for` is called once per `Code` when a machine is built; the step
//! function then dispatches with one table load. Every form not listed stops
//! the run with `Stop::Unsupported`, which names the instruction.

mod flags;
mod flow;
mod int;
mod sse;

use crate::emu::machine::{BranchKind, Handler, Machine, Stop};
use crate::emu::mem::Memory;
use crate::emu::regs::Registers;
use iced_x86::{Code, Instruction, Mnemonic};

pub use flags::{add as add_flags, sub as sub_flags, szp};

/// Handler for forms the emulator does not implement.
pub fn invalid<R: Registers, M: Memory>(
    m: &mut Machine<R, M>,
    ins: &Instruction,
) -> Result<(), Stop> {
    Err(Stop::Unsupported {
        ip: m.retired.ip,
        code: ins.code(),
    })
}

/// Branch-on-random (see `crate::encoding`): taken when the LFSR says so.
pub fn brr<R: Registers, M: Memory>(m: &mut Machine<R, M>, ins: &Instruction) -> Result<(), Stop> {
    // The frequency is the ModRM reg field extended by REX.R, which iced
    // reports as the register operand (eax..edi, r8d..r15d).
    let freq = ins.op0_register().number() as u8 & 15;
    let target = ins.ip_rel_memory_address();
    let taken = m.lfsr.brr(freq);
    m.brr_executed += 1;
    m.brr_taken += u64::from(taken);
    m.retired.kind = BranchKind::Brr;
    m.retired.taken = taken;
    m.retired.target = target;
    if taken {
        m.next_ip = target;
    }
    Ok(())
}

/// The semantics of one instruction form.
pub fn handler_for<R: Registers, M: Memory>(code: Code) -> Handler<R, M> {
    use Mnemonic::*;
    // Forms whose mnemonic is shared between unrelated instructions.
    match code {
        Code::Movsd_xmm_xmmm64 | Code::Movsd_xmmm64_xmm => return sse::movs_scalar,
        Code::Cmpsd_xmm_xmmm64_imm8 => return invalid,
        Code::Pushfq => return flow::pushf,
        Code::Popfq => return flow::popf,
        _ => {}
    }
    if code.mnemonic() == Jmp
        && matches!(
            code,
            Code::Jmp_m1616
                | Code::Jmp_m1632
                | Code::Jmp_m1664
                | Code::Jmp_ptr1616
                | Code::Jmp_ptr1632
        )
    {
        return invalid;
    }
    if code.mnemonic() == Call
        && matches!(
            code,
            Code::Call_m1616
                | Code::Call_m1632
                | Code::Call_m1664
                | Code::Call_ptr1616
                | Code::Call_ptr1632
        )
    {
        return invalid;
    }
    // MMX forms (mm registers) of the SSE2 integer instructions and all VEX
    // and EVEX encodings are not implemented.
    let name = code_is_legacy_sse_or_gpr(code);
    if !name {
        return invalid;
    }
    match code.mnemonic() {
        Mov => int::mov,
        Movzx => int::movzx,
        Movsx | Movsxd => int::movsx,
        Lea => int::lea,
        Xchg => int::xchg,
        Cmove | Cmovne | Cmovb | Cmovae | Cmovbe | Cmova | Cmovl | Cmovge | Cmovle | Cmovg
        | Cmovs | Cmovns | Cmovo | Cmovno | Cmovp | Cmovnp => int::cmov,
        Sete | Setne | Setb | Setae | Setbe | Seta | Setl | Setge | Setle | Setg | Sets | Setns
        | Seto | Setno | Setp | Setnp => int::setcc,
        Add | Adc | Sub | Sbb | And | Or | Xor | Cmp | Test => int::alu,
        Inc | Dec | Neg | Not => int::unary,
        Shl | Sal | Shr | Sar | Rol | Ror => int::shift,
        Shld | Shrd => int::shift_double,
        Imul if matches!(
            code,
            Code::Imul_rm8 | Code::Imul_rm16 | Code::Imul_rm32 | Code::Imul_rm64
        ) =>
        {
            int::mul1
        }
        Imul => int::imul_n,
        Mul => int::mul1,
        Div | Idiv => int::div,
        Cbw | Cwde | Cdqe => int::extend_acc,
        Cwd | Cdq | Cqo => int::sign_to_rdx,
        Push => flow::push,
        Pop => flow::pop,
        Leave => flow::leave,
        Jmp => flow::jmp,
        Je | Jne | Jb | Jae | Jbe | Ja | Jl | Jge | Jle | Jg | Js | Jns | Jo | Jno | Jp | Jnp => {
            flow::jcc
        }
        Jrcxz | Jecxz | Loop | Loope | Loopne => flow::jcx,
        Call => flow::call,
        Ret => flow::ret,
        Bt | Bts | Btr | Btc => int::bit_test,
        Bsf | Bsr | Tzcnt | Lzcnt | Popcnt => int::bit_scan,
        Bswap => int::bswap,
        Cmpxchg => int::cmpxchg,
        Xadd => int::xadd,
        Movsb | Movsw | Movsd | Movsq | Stosb | Stosw | Stosd | Stosq | Lodsb | Lodsw | Lodsd
        | Lodsq | Cmpsb | Cmpsw | Cmpsd | Cmpsq | Scasb | Scasw | Scasd | Scasq => flow::string,
        Nop | Endbr64 | Pause | Prefetchnta | Prefetcht0 | Prefetcht1 | Prefetcht2 | Prefetchw
        | Lfence | Mfence | Sfence => flow::nop,
        Cld | Std => flow::cld_std,
        Clc | Stc | Cmc => flow::carry_flag,
        Syscall => flow::syscall,
        Hlt | Ud2 | Int3 => flow::trap,
        Movdqa | Movdqu | Movaps | Movups | Movapd | Movupd | Lddqu => sse::mov128,
        Movd | Movq => sse::movd_movq,
        Movss => sse::movs_scalar,
        Movlps | Movlpd | Movhps | Movhpd | Movhlps | Movlhps => sse::mov_half,
        Pxor | Por | Pand | Pandn | Xorps | Xorpd | Orps | Orpd | Andps | Andpd | Andnps
        | Andnpd | Paddb | Paddw | Paddd | Paddq | Psubb | Psubw | Psubd | Psubq | Pcmpeqb
        | Pcmpeqw | Pcmpeqd | Pcmpgtb | Pcmpgtw | Pcmpgtd | Pminub | Pmaxub | Pminsw | Pmaxsw
        | Pavgb | Pmullw | Pmuludq | Punpcklbw | Punpcklwd | Punpckldq | Punpcklqdq | Punpckhbw
        | Punpckhwd | Punpckhdq | Punpckhqdq | Packuswb | Packsswb | Packssdw => sse::packed,
        Pmovmskb => sse::pmovmskb,
        Movmskps | Movmskpd => sse::movmskps,
        Pshufd | Pshuflw | Pshufhw | Shufps => sse::shuffle,
        Psllw | Pslld | Psllq | Psrlw | Psrld | Psrlq | Psraw | Psrad | Pslldq | Psrldq => {
            sse::packed_shift
        }
        Pextrw | Pinsrw => sse::word_insert_extract,
        _ => invalid,
    }
}

/// True for legacy-encoded forms that use no MMX register (the subset the
/// handlers implement); VEX/EVEX/XOP/3DNow! and `mm` forms are refused.
fn code_is_legacy_sse_or_gpr(code: Code) -> bool {
    use iced_x86::EncodingKind;
    let mut instr = Instruction::default();
    instr.set_code(code);
    if instr.encoding() != EncodingKind::Legacy {
        return false;
    }
    !code_uses_mmx(code)
}

fn code_uses_mmx(code: Code) -> bool {
    // iced names MMX forms with `mm` operands, e.g. `Paddb_mm_mmm64`,
    // `Movd_mm_rm32`, `Pmovmskb_r32_mm`.
    let name = format!("{code:?}");
    name.split('_')
        .any(|part| part == "mm" || part == "mmm64" || part == "mmm32")
}
