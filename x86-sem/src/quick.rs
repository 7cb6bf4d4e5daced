//! A decoder for the integer forms compiled code runs most, in front of
//! iced.
//!
//! Why: a handler decodes after the application has had the caches to
//! itself, and iced's decoder then reaches several cold lines of its own
//! per instruction (its opcode handlers, its tables, its code): about
//! 200 ns an instruction in a handler on SQLite, 70% of what a new
//! instruction costs the tracer and 25–42% of its emulation time there
//! (results/speed, twelfth round). This one reads a 2 KiB table of forms
//! and one 4-byte entry per instruction.
//!
//! What it decodes: the legacy and 0F opcode maps' integer forms (ALU,
//! mov, lea, movzx/movsx/movsxd, test, shifts, inc/dec/not/neg/mul/div,
//! imul, push/pop, jcc/jmp/call/ret, cmovcc, setcc, leave, cdqe/cqo,
//! nop) with no prefix but 66 and REX. Anything else, and anything it is
//! not sure of, is `None`, and the caller asks iced.
//!
//! The rule it keeps: **what it returns is exactly what iced and
//! [`Insn::resolve`] make of the same bytes** (`tests/quick.rs` checks it
//! on every instruction of real binaries and on random bytes). It never
//! names an iced `Code` itself: [`warm`] decodes one canonical encoding of
//! each form with iced (a register form and a memory form, with
//! immediates whose top bit is set) and keeps the `Code`, the traits and
//! how the immediate was extended; a form whose canonical decoding does
//! not have the operands this module expects is left empty, and so
//! decoded by iced. Before [`warm`] every entry is empty.

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use iced_x86::Code;

use crate::insn::{Insn, HIGH8, IMM, MEM, NONE, RIP_RELATIVE};

/// Where a form's operands come from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Shape {
    /// No form here.
    Absent,
    /// op0 the ModRM r/m, op1 its reg.
    RmReg,
    /// op0 the reg, op1 the r/m.
    RegRm,
    /// op0 the accumulator, op1 the immediate.
    AccImm,
    /// op0 the r/m, op1 the immediate.
    RmImm,
    /// op0 the r/m alone.
    Rm,
    /// op0 the r/m, op1 the immediate 1 (shift by one).
    RmOne,
    /// op0 the r/m, op1 cl.
    RmCl,
    /// op0 the reg, op1 the r/m, op2 the immediate (imul).
    RegRmImm,
    /// op0 the register in the opcode's low three bits.
    OpReg,
    /// op0 the register in the opcode's low bits, op1 the immediate.
    OpRegImm,
    /// op0 the immediate.
    Imm,
    /// op0 the branch target.
    Rel,
    /// No explicit operand.
    Bare,
    /// A ModRM group: the shape depends on the reg field (see `group_shape`).
    Group,
}

/// The immediate's bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum ImmSize {
    None,
    /// One byte.
    B,
    /// Two bytes at 16-bit operand size, else four.
    Z,
    /// Two, four or eight bytes by operand size (mov r, imm).
    V,
    /// Four bytes (rel32).
    D,
}

/// One opcode's form.
#[derive(Clone, Copy, Debug)]
struct Form {
    shape: Shape,
    imm: ImmSize,
    /// Byte operands (the 8-bit form of the opcode).
    byte: bool,
    /// 64-bit operand size by default (push, pop, branches): REX.W changes
    /// nothing and 66 is refused.
    default64: bool,
    /// The r/m operand is a byte register whatever the operand size
    /// (movzx and movsx from r/m8).
    rm8: bool,
    /// Its first entry in [`TEMPLATES`] (see [`slot`]).
    base: u16,
}

const fn f(shape: Shape, imm: ImmSize, byte: bool, default64: bool) -> Form {
    Form {
        shape,
        imm,
        byte,
        default64,
        rm8: false,
        base: 0,
    }
}

const fn from_rm8(mut form: Form) -> Form {
    form.rm8 = true;
    form
}

const ABSENT: Form = f(Shape::Absent, ImmSize::None, false, false);

/// The legacy map.
const ONE: [Form; 256] = with_bases(legacy_map(), 0);
/// The 0F map.
const TWO: [Form; 256] = with_bases(map_0f(), entries(&ONE));
/// Template entries of both maps.
const ENTRIES: usize = entries(&TWO);
// 4 bytes an entry: the table stays a few KiB, the forms compiled code
// runs most (ALU, mov, lea, jcc, push, pop) in its first lines.
const _: () = assert!(ENTRIES * 4 <= 8 << 10);

/// Entries a form takes: one per (ModRM reg of a group, operand size,
/// register or memory r/m).
const fn width(form: &Form) -> usize {
    let sizes = if form.byte || form.default64 { 1 } else { 3 };
    let regs = if matches!(form.shape, Shape::Group) {
        8
    } else {
        1
    };
    sizes * regs * 2
}

/// The forms' entries laid out one after another from `start`, in
/// opcode order: the forms code uses most share a few lines of the table.
const fn with_bases(mut t: [Form; 256], start: usize) -> [Form; 256] {
    let mut next = start;
    let mut i = 0;
    while i < 256 {
        if !matches!(t[i].shape, Shape::Absent) {
            t[i].base = next as u16;
            next += width(&t[i]);
        }
        i += 1;
    }
    t
}

/// The end of the last form's entries.
const fn entries(t: &[Form; 256]) -> usize {
    let mut end = 0;
    let mut i = 0;
    while i < 256 {
        if !matches!(t[i].shape, Shape::Absent) {
            end = t[i].base as usize + width(&t[i]);
        }
        i += 1;
    }
    end
}

const fn legacy_map() -> [Form; 256] {
    use ImmSize as I;
    use Shape as S;
    let mut t = [ABSENT; 256];
    // add, or, adc, sbb, and, sub, xor, cmp: six forms each.
    let mut op = 0;
    while op < 8 {
        let b = op * 8;
        t[b] = f(S::RmReg, I::None, true, false);
        t[b + 1] = f(S::RmReg, I::None, false, false);
        t[b + 2] = f(S::RegRm, I::None, true, false);
        t[b + 3] = f(S::RegRm, I::None, false, false);
        t[b + 4] = f(S::AccImm, I::B, true, false);
        t[b + 5] = f(S::AccImm, I::Z, false, false);
        op += 1;
    }
    let mut r = 0;
    while r < 8 {
        t[0x50 + r] = f(S::OpReg, I::None, false, true);
        t[0x58 + r] = f(S::OpReg, I::None, false, true);
        t[0xb0 + r] = f(S::OpRegImm, I::B, true, false);
        t[0xb8 + r] = f(S::OpRegImm, I::V, false, false);
        r += 1;
    }
    t[0x63] = f(S::RegRm, I::None, false, false);
    t[0x68] = f(S::Imm, I::Z, false, true);
    t[0x69] = f(S::RegRmImm, I::Z, false, false);
    t[0x6a] = f(S::Imm, I::B, false, true);
    t[0x6b] = f(S::RegRmImm, I::B, false, false);
    let mut cc = 0;
    while cc < 16 {
        t[0x70 + cc] = f(S::Rel, I::B, false, true);
        cc += 1;
    }
    t[0x80] = f(S::Group, I::B, true, false);
    t[0x81] = f(S::Group, I::Z, false, false);
    t[0x83] = f(S::Group, I::B, false, false);
    t[0x84] = f(S::RmReg, I::None, true, false);
    t[0x85] = f(S::RmReg, I::None, false, false);
    t[0x88] = f(S::RmReg, I::None, true, false);
    t[0x89] = f(S::RmReg, I::None, false, false);
    t[0x8a] = f(S::RegRm, I::None, true, false);
    t[0x8b] = f(S::RegRm, I::None, false, false);
    t[0x8d] = f(S::RegRm, I::None, false, false);
    t[0x90] = f(S::Bare, I::None, false, false);
    t[0x98] = f(S::Bare, I::None, false, false);
    t[0x99] = f(S::Bare, I::None, false, false);
    t[0xa8] = f(S::AccImm, I::B, true, false);
    t[0xa9] = f(S::AccImm, I::Z, false, false);
    t[0xc0] = f(S::Group, I::B, true, false);
    t[0xc1] = f(S::Group, I::B, false, false);
    t[0xc3] = f(S::Bare, I::None, false, true);
    t[0xc6] = f(S::Group, I::B, true, false);
    t[0xc7] = f(S::Group, I::Z, false, false);
    t[0xc9] = f(S::Bare, I::None, false, true);
    t[0xd0] = f(S::Group, I::None, true, false);
    t[0xd1] = f(S::Group, I::None, false, false);
    t[0xd2] = f(S::Group, I::None, true, false);
    t[0xd3] = f(S::Group, I::None, false, false);
    t[0xe8] = f(S::Rel, I::D, false, true);
    t[0xe9] = f(S::Rel, I::D, false, true);
    t[0xeb] = f(S::Rel, I::B, false, true);
    t[0xf6] = f(S::Group, I::B, true, false);
    t[0xf7] = f(S::Group, I::Z, false, false);
    t[0xfe] = f(S::Group, I::None, true, false);
    t[0xff] = f(S::Group, I::None, false, false);
    t
}

const fn map_0f() -> [Form; 256] {
    use ImmSize as I;
    use Shape as S;
    let mut t = [ABSENT; 256];
    // nop r/m is /0; the other reg values are other forms.
    t[0x1f] = f(S::Group, I::None, false, false);
    let mut cc = 0;
    while cc < 16 {
        t[0x40 + cc] = f(S::RegRm, I::None, false, false);
        t[0x80 + cc] = f(S::Rel, I::D, false, true);
        // setcc: a group, so that each reg value is checked against iced.
        t[0x90 + cc] = f(S::Group, I::None, true, false);
        cc += 1;
    }
    t[0xaf] = f(S::RegRm, I::None, false, false);
    t[0xb6] = from_rm8(f(S::RegRm, I::None, false, false));
    t[0xb7] = f(S::RegRm, I::None, false, false);
    t[0xbe] = from_rm8(f(S::RegRm, I::None, false, false));
    t[0xbf] = f(S::RegRm, I::None, false, false);
    t
}

impl Shape {
    /// Whether the form has a ModRM byte (a group's always has).
    fn has_modrm(self) -> bool {
        matches!(
            self,
            Shape::RmReg
                | Shape::RegRm
                | Shape::RmImm
                | Shape::Rm
                | Shape::RmOne
                | Shape::RmCl
                | Shape::RegRmImm
                | Shape::Group
        )
    }
}

/// A form's shape and immediate, for ModRM reg field `reg` where the
/// form is a group.
fn shape_of(map: usize, op: u8, reg: u8, form: Form) -> (Shape, ImmSize) {
    match form.shape {
        Shape::Group => group_shape(map, op, reg, form),
        s => (s, form.imm),
    }
}

/// A group opcode's shape for ModRM reg field `reg`, and its immediate.
fn group_shape(map: usize, op: u8, reg: u8, form: Form) -> (Shape, ImmSize) {
    if map == 1 {
        return match op {
            0x1f if reg == 0 => (Shape::Rm, ImmSize::None),
            0x90..=0x9f => (Shape::Rm, ImmSize::None),
            _ => (Shape::Absent, ImmSize::None),
        };
    }
    match op {
        0x80 | 0x81 | 0x83 | 0xc0 | 0xc1 => (Shape::RmImm, form.imm),
        0xc6 | 0xc7 if reg == 0 => (Shape::RmImm, form.imm),
        0xd0 | 0xd1 => (Shape::RmOne, ImmSize::None),
        0xd2 | 0xd3 => (Shape::RmCl, ImmSize::None),
        0xf6 | 0xf7 if reg < 2 => (Shape::RmImm, form.imm),
        0xf6 | 0xf7 => (Shape::Rm, ImmSize::None),
        0xfe if reg < 2 => (Shape::Rm, ImmSize::None),
        // inc, dec, call, jmp, push (the far forms' templates fail).
        0xff if reg != 7 => (Shape::Rm, ImmSize::None),
        _ => (Shape::Absent, ImmSize::None),
    }
}

/// Operand sizes: the index of a template by size.
const SIZE_8: usize = 0;
const SIZE_16: usize = 1;
const SIZE_32: usize = 2;
const SIZE_64: usize = 3;

/// Templates, [`width`] entries per form from its `base`. An entry is
/// `code | 1 << 16` (the template is valid) `| traits << 17 | signed <<
/// 25` (the immediate is sign-extended to 64 bits), 0 for none.
static TEMPLATES: [AtomicU32; ENTRIES] = [const { AtomicU32::new(0) }; ENTRIES];
static WARM: AtomicBool = AtomicBool::new(false);

const VALID: u32 = 1 << 16;
const SIGNED: u32 = 1 << 25;

/// The entry of `form` for ModRM reg `reg` (0 unless a group), operand
/// size `size` (one [`size_allowed`]) and a memory r/m or not.
fn slot(form: Form, reg: u8, size: usize, mem: bool) -> usize {
    let (sizes, at) = if form.byte || form.default64 {
        (1, 0)
    } else {
        (3, size - SIZE_16)
    };
    usize::from(form.base) + (usize::from(reg) * sizes + at) * 2 + usize::from(mem)
}

/// Builds the templates from iced (see the module doc): once, before any
/// signal handler decodes. Idempotent; [`crate::Table::init`] calls it.
pub fn warm() {
    if WARM.load(Ordering::Acquire) {
        return;
    }
    for map in 0..2 {
        for op in 0..=255u8 {
            let form = if map == 0 {
                ONE[op as usize]
            } else {
                TWO[op as usize]
            };
            if form.shape == Shape::Absent {
                continue;
            }
            let regs = if form.shape == Shape::Group { 8 } else { 1 };
            for reg in 0..regs {
                for size in SIZE_8..=SIZE_64 {
                    if !size_allowed(form, size) {
                        continue;
                    }
                    for mem in [false, true] {
                        let entry = template(map, op, reg, size, mem, form).unwrap_or(0);
                        TEMPLATES[slot(form, reg, size, mem)].store(entry, Ordering::Relaxed);
                    }
                }
            }
        }
    }
    WARM.store(true, Ordering::Release);
}

/// The sizes a form is decoded at.
fn size_allowed(form: Form, size: usize) -> bool {
    if form.byte {
        size == SIZE_8
    } else if form.default64 {
        size == SIZE_64
    } else {
        size != SIZE_8
    }
}

/// Decodes the canonical encoding of one form with iced and checks that
/// [`decode`] would build the same instruction from it: its entry, or
/// `None` for a form left to iced.
fn template(map: usize, op: u8, reg: u8, size: usize, mem: bool, form: Form) -> Option<u32> {
    let (shape, imm) = shape_of(map, op, reg, form);
    if !shape.has_modrm() && (mem || reg != 0) {
        return None;
    }
    if shape == Shape::Absent {
        return None;
    }
    // The encoding: [66] [REX.W] [0F] op [ModRM] [disp8] [imm, top bit set].
    let mut bytes = [0u8; 16];
    let mut n = 0;
    let mut push = |b: u8, n: &mut usize| {
        bytes[*n] = b;
        *n += 1;
    };
    match size {
        SIZE_16 => push(0x66, &mut n),
        SIZE_64 if !form.default64 => push(0x48, &mut n),
        _ => {}
    }
    if map == 1 {
        push(0x0f, &mut n);
    }
    push(op, &mut n);
    if shape.has_modrm() {
        // reg field `reg` for a group, else 2 (dl/dx/edx/rdx); r/m 3 (bl/bx/ebx/rbx)
        // or [rbx + 0x10].
        let r = if form.shape == Shape::Group { reg } else { 2 };
        let modrm = if mem { 0x40 } else { 0xc0 } | r << 3 | 3;
        push(modrm, &mut n);
        if mem {
            push(0x10, &mut n);
        }
    }
    let imm_len = imm_len(imm, size);
    for k in 0..imm_len {
        push(if k + 1 == imm_len { 0x80 } else { 0x01 }, &mut n);
    }
    let ip = 0x1000;
    let decoded = Insn::decode_with_iced(ip, &bytes[..n])?;
    // The same bytes through this module's own reading, with the template
    // as iced made it: both must agree field for field.
    let entry = u32::from(decoded.code as u16)
        | VALID
        | u32::from(decoded.traits) << 17
        | if sign_extended(&decoded, imm, imm_len) {
            SIGNED
        } else {
            0
        };
    let bytes = &bytes[..n];
    let head = head(bytes)?;
    debug_assert_eq!(operand_size(form, &head), Some(size));
    let mine = build(ip, bytes, &head, form, size, entry)?;
    same(&mine, &decoded).then_some(entry)
}

/// Whether iced extended the canonical immediate (top bit set) with ones.
fn sign_extended(insn: &Insn, imm: ImmSize, len: usize) -> bool {
    imm != ImmSize::None && len < 8 && insn.imm >> 63 == 1
}

fn imm_len(imm: ImmSize, size: usize) -> usize {
    match (imm, size) {
        (ImmSize::None, _) => 0,
        (ImmSize::B, _) => 1,
        (ImmSize::Z | ImmSize::V, SIZE_16) => 2,
        (ImmSize::V, SIZE_64) => 8,
        (ImmSize::Z | ImmSize::V | ImmSize::D, _) => 4,
    }
}

/// Field-for-field equality (an `Insn` has no `PartialEq`: the core never
/// compares two).
pub(crate) fn same(a: &Insn, b: &Insn) -> bool {
    a.ip == b.ip
        && a.disp == b.disp
        && a.imm == b.imm
        && a.op == b.op
        && a.code == b.code
        && a.len == b.len
        && a.base == b.base
        && a.index == b.index
        && a.scale == b.scale
        && a.seg == b.seg
        && a.addr32 == b.addr32
        && a.kmask == b.kmask
        && a.vflags == b.vflags
        && a.prefixes == b.prefixes
        && a.traits == b.traits
}

/// What comes before a form's ModRM byte: the prefixes this module reads
/// (66, then REX) and the opcode, in the legacy map or after 0F.
struct Head {
    opsize: bool,
    rex: u8,
    map: usize,
    op: u8,
    /// Where the byte after the opcode (the ModRM, if any) is.
    next: usize,
}

/// The [`Head`] of `bytes`; `None` when they end first.
#[inline]
fn head(bytes: &[u8]) -> Option<Head> {
    let mut at = 0;
    let mut b = *bytes.first()?;
    let opsize = b == 0x66;
    if opsize {
        at += 1;
        b = *bytes.get(at)?;
    }
    let mut rex = 0;
    if b & 0xf0 == 0x40 {
        rex = b;
        at += 1;
        b = *bytes.get(at)?;
    }
    let map = usize::from(b == 0x0f);
    if map == 1 {
        at += 1;
        b = *bytes.get(at)?;
    }
    Some(Head {
        opsize,
        rex,
        map,
        op: b,
        next: at + 1,
    })
}

/// The operand size of `form` under `head`'s prefixes; `None` where 66
/// would change what the form is (a byte form, a default-64-bit one).
#[inline]
fn operand_size(form: Form, head: &Head) -> Option<usize> {
    if form.byte || form.default64 {
        return (!head.opsize).then_some(if form.byte { SIZE_8 } else { SIZE_64 });
    }
    Some(if head.rex & 8 != 0 {
        SIZE_64
    } else if head.opsize {
        SIZE_16
    } else {
        SIZE_32
    })
}

/// The instruction at `ip` if `bytes` starts with one of this module's
/// forms, whole; `None` otherwise (iced decodes it). Reachable from
/// signal handlers: no allocation, reads the template table only.
#[inline]
pub(crate) fn decode(ip: u64, bytes: &[u8]) -> Option<Insn> {
    let head = head(bytes)?;
    let form = if head.map == 0 {
        ONE[head.op as usize]
    } else {
        TWO[head.op as usize]
    };
    // 90 with REX.B is xchg r8, rax, not nop.
    if form.shape == Shape::Absent || (head.map == 0 && head.op == 0x90 && head.rex & 1 != 0) {
        return None;
    }
    let size = operand_size(form, &head)?;
    let (reg, mem) = if form.shape.has_modrm() {
        let modrm = *bytes.get(head.next)?;
        let reg = if form.shape == Shape::Group {
            modrm >> 3 & 7
        } else {
            0
        };
        (reg, modrm >> 6 != 3)
    } else {
        (0, false)
    };
    let entry = TEMPLATES[slot(form, reg, size, mem)].load(Ordering::Relaxed);
    if entry & VALID == 0 {
        return None;
    }
    build(ip, bytes, &head, form, size, entry)
}

/// Reads the instruction whose template is `entry` (see [`decode`]).
#[inline]
fn build(ip: u64, bytes: &[u8], head: &Head, form: Form, size: usize, entry: u32) -> Option<Insn> {
    let (rex, map, op) = (head.rex, head.map, head.op);
    let mut at = head.next;
    // Without a REX prefix, byte registers 4-7 are ah, ch, dh, bh.
    let byte_reg = |n: u8| -> u8 {
        if rex == 0 && (4..8).contains(&n) {
            HIGH8 + n - 4
        } else {
            n
        }
    };
    let gpr = |n: u8| -> u8 {
        if size == SIZE_8 {
            byte_reg(n)
        } else {
            n
        }
    };
    let mut insn = Insn::empty();
    insn.code = Code::try_from(entry as u16 as usize).ok()?;
    insn.traits = (entry >> 17) as u8;
    let mut reg = 0u8;
    let mut rm = NONE;
    let group_reg = if form.shape == Shape::Group {
        bytes.get(at)? >> 3 & 7
    } else {
        0
    };
    let (shape, imm) = shape_of(map, op, group_reg, form);
    if shape.has_modrm() {
        let modrm = *bytes.get(at)?;
        at += 1;
        let md = modrm >> 6;
        reg = (modrm >> 3 & 7) | (rex & 4) << 1;
        let low = modrm & 7;
        if md == 3 {
            let n = low | (rex & 1) << 3;
            rm = if form.rm8 { byte_reg(n) } else { gpr(n) };
        } else {
            rm = MEM;
            let mut disp_len = match md {
                1 => 1,
                2 => 4,
                _ => 0,
            };
            if low == 4 {
                let sib = *bytes.get(at)?;
                at += 1;
                let base = sib & 7;
                let index = (sib >> 3 & 7) | (rex & 2) << 2;
                let scale = sib >> 6;
                if base == 5 && md == 0 {
                    // [index*s + disp32] with no base: left to iced.
                    return None;
                }
                insn.base = base | (rex & 1) << 3;
                if index == 4 {
                    if scale != 0 {
                        return None;
                    }
                } else {
                    insn.index = index;
                    insn.scale = scale;
                }
            } else if low == 5 && md == 0 {
                insn.prefixes |= RIP_RELATIVE;
                disp_len = 4;
            } else {
                insn.base = low | (rex & 1) << 3;
            }
            let disp = read_signed(bytes, at, disp_len)?;
            at += disp_len;
            insn.disp = disp;
        }
    }
    let imm_len = imm_len(imm, size);
    let imm_at = at;
    at += imm_len;
    if at > bytes.len() || at > 15 {
        return None;
    }
    let len = at as u8;
    let next = ip.wrapping_add(u64::from(len));
    if insn.prefixes & RIP_RELATIVE != 0 {
        insn.disp = next.wrapping_add(insn.disp);
    }
    let value = if imm_len == 0 {
        0
    } else if entry & SIGNED != 0 || shape == Shape::Rel {
        read_signed(bytes, imm_at, imm_len)?
    } else {
        read_unsigned(bytes, imm_at, imm_len)?
    };
    let opreg = (op & 7) | (rex & 1) << 3;
    insn.op = match shape {
        Shape::RmReg => [rm, gpr(reg), NONE, NONE],
        Shape::RegRm => [gpr(reg), rm, NONE, NONE],
        Shape::AccImm => [0, IMM, NONE, NONE],
        Shape::RmImm => [rm, IMM, NONE, NONE],
        Shape::Rm => [rm, NONE, NONE, NONE],
        Shape::RmOne => [rm, IMM, NONE, NONE],
        Shape::RmCl => [rm, 1, NONE, NONE],
        Shape::RegRmImm => [gpr(reg), rm, IMM, NONE],
        Shape::OpReg => [opreg, NONE, NONE, NONE],
        Shape::OpRegImm => [gpr(opreg), IMM, NONE, NONE],
        Shape::Imm | Shape::Rel => [IMM, NONE, NONE, NONE],
        Shape::Bare => [NONE; 4],
        Shape::Absent | Shape::Group => return None,
    };
    insn.imm = match shape {
        Shape::Rel => next.wrapping_add(value),
        Shape::RmOne => 1,
        _ => value,
    };
    insn.ip = ip;
    insn.len = len;
    Some(insn)
}

/// `len` (0, 1, 2, 4 or 8) bytes at `at`, little-endian, sign-extended.
#[inline]
fn read_signed(bytes: &[u8], at: usize, len: usize) -> Option<u64> {
    let v = read_unsigned(bytes, at, len)?;
    Some(match len {
        1 => v as u8 as i8 as i64 as u64,
        2 => v as u16 as i16 as i64 as u64,
        4 => v as u32 as i32 as i64 as u64,
        _ => v,
    })
}

/// `len` (0 to 8) bytes at `at`, little-endian, zero-extended.
#[inline]
fn read_unsigned(bytes: &[u8], at: usize, len: usize) -> Option<u64> {
    let b = bytes.get(at..at + len)?;
    let mut v = 0u64;
    for (k, &x) in b.iter().enumerate() {
        v |= u64::from(x) << (8 * k);
    }
    Some(v)
}
