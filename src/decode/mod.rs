//! Look-ahead decoding (the paper's FindNextUnresolvedBranch) and the cache
//! of decoded blocks.
//!
//! From a start address the decoder walks straight-line code to the first
//! control transfer and describes the walk as a [`Block`]: a direct jmp or
//! call (resolved statically: its target is in the encoding), or a
//! [`BranchForm`] the breakpoint handler will evaluate, or the reason the
//! walk cannot go on. The tracer chains blocks; the [`BlockCache`] keeps
//! them so that a hot block is decoded once per thread, not once per trace
//! (one of the optimisations the paper proposes in §3.1 and did not build).
//!
//! Everything here is reachable from the signal handlers: no allocation,
//! decoding into one reused `Instruction`.

pub mod form;

use iced_x86::{Code, ConditionCode, Decoder, DecoderOptions, FlowControl, Instruction};
use iced_x86::{Mnemonic, OpKind, Register};

use crate::exec_map::ExecMap;

pub use form::{BranchForm, BranchKind, Condition, Gpr, Memory, RegisterFile, Resolution, Target};

/// Straight-line instructions decoded before the look-ahead gives up
/// (counted as `lookahead_limit`).
pub const MAX_SEGMENT_INSTRUCTIONS: u32 = 16_384;

/// The longest x86 instruction, in bytes.
const MAX_INSTRUCTION_LEN: u64 = 15;

/// Where the decoder reads code from. The handler's implementation checks
/// the address against the executable mappings known to the session and
/// copies a window of them through fault-safe loads, so a module unmapped
/// since the table was refreshed reads as missing, never as a crash.
pub trait CodeSource {
    /// Bytes from `addr` on (up to the end of the executable mapping holding
    /// it, or a window of them), or `None` when `addr` is in no known
    /// executable mapping or cannot be read.
    fn code_at(&mut self, addr: u64) -> Option<&[u8]>;
}

/// Bytes of code copied per window (blocks longer than that read the
/// next window).
const CODE_WINDOW: usize = 256;

/// Code of this process, bounded by the table and copied a window at a time
/// through fault-safe loads: a module unmapped since the table was last
/// refreshed (a dlclose the worker has not seen yet) reads as missing, and
/// the trace ends `outside_mappings`, where a plain read would crash the
/// program. Only for the handlers of a session (the fault handler that
/// makes the loads safe is installed then).
pub struct LiveCode<'a> {
    map: &'a ExecMap,
    window: [u8; CODE_WINDOW],
}

impl<'a> LiveCode<'a> {
    pub fn new(map: &'a ExecMap) -> LiveCode<'a> {
        LiveCode {
            map,
            window: [0; CODE_WINDOW],
        }
    }
}

impl CodeSource for LiveCode<'_> {
    fn code_at(&mut self, addr: u64) -> Option<&[u8]> {
        let (_, end) = self.map.range_of(addr)?;
        let want = ((end - addr) as usize).min(CODE_WINDOW);
        let got = self.map.read_code(addr, &mut self.window[..want]);
        (got > 0).then_some(&self.window[..got])
    }
}

/// Why a look-ahead stopped without reaching a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeFailure {
    /// The address is outside every known executable mapping (the vDSO
    /// included: it is not a file the profile could name).
    OutsideMappings,
    /// An instruction the tracer does not follow (int3, ud2, far transfers,
    /// xbegin, or an undecodable byte sequence).
    Unsupported,
    /// More than `MAX_SEGMENT_INSTRUCTIONS` without a transfer.
    LookaheadLimit,
}

/// How a block ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockEnd {
    /// A direct jmp or call at `from` going to `to`: a taken branch known
    /// without the CPU state. A call pushes `ret_addr`.
    Direct {
        from: u64,
        to: u64,
        ret_addr: Option<u64>,
    },
    /// A transfer the breakpoint handler must resolve.
    Dynamic(BranchForm),
    /// The walk failed at `at`.
    Fail { at: u64, why: DecodeFailure },
}

/// A decoded walk of straight-line code from `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub start: u64,
    pub end: BlockEnd,
    /// Change of rsp from `start` to the end instruction (exclusive), or
    /// `None` when an instruction sets rsp in a way decoding cannot follow
    /// (mov rsp, leave, and rsp, …).
    pub sp_delta: Option<i32>,
    /// Instructions decoded, the end included.
    pub instructions: u32,
}

/// Decodes the block starting at `start`. `insn` is scratch space reused
/// across calls.
pub fn decode_block(code: &mut impl CodeSource, start: u64, insn: &mut Instruction) -> Block {
    let mut pc = start;
    let mut sp_delta = Some(0i32);
    let mut count = 0u32;
    let fail = |at, why, sp_delta, count| Block {
        start,
        end: BlockEnd::Fail { at, why },
        sp_delta,
        instructions: count,
    };
    'windows: loop {
        let window_start = pc;
        let Some(bytes) = code.code_at(pc) else {
            return fail(pc, DecodeFailure::OutsideMappings, sp_delta, count);
        };
        let window_end = pc + bytes.len() as u64;
        let Ok(mut decoder) = Decoder::try_with_ip(64, bytes, pc, DecoderOptions::NONE) else {
            return fail(pc, DecodeFailure::Unsupported, sp_delta, count);
        };
        while decoder.can_decode() {
            decoder.decode_out(insn);
            count += 1;
            if insn.is_invalid() {
                if pc != window_start && pc + MAX_INSTRUCTION_LEN > window_end {
                    // Maybe cut by the end of the window: read one that
                    // starts here (at the end of the mapping the cut stays,
                    // and the next pass fails at its first instruction).
                    count -= 1;
                    continue 'windows;
                }
                // A truncated instruction at the end of the mapping reads as
                // invalid too; either way there is nothing to follow.
                return fail(pc, DecodeFailure::Unsupported, sp_delta, count);
            }
            if let Some(end) = classify(insn) {
                return Block {
                    start,
                    end,
                    sp_delta,
                    instructions: count,
                };
            }
            sp_delta = sp_delta.and_then(|d| sp_effect(insn).map(|e| d + e));
            pc = insn.next_ip();
            if count >= MAX_SEGMENT_INSTRUCTIONS {
                return fail(pc, DecodeFailure::LookaheadLimit, sp_delta, count);
            }
        }
        // The window ended exactly at an instruction boundary: the next
        // mapping may continue the code.
        continue 'windows;
    }
}

/// The change of rsp an instruction that is not a transfer makes, or `None`
/// when it is not a constant.
fn sp_effect(insn: &Instruction) -> Option<i32> {
    let writes_rsp = insn.op_count() > 0
        && insn.op0_kind() == OpKind::Register
        && insn.op0_register().full_register() == Register::RSP
        && !matches!(
            insn.mnemonic(),
            Mnemonic::Cmp | Mnemonic::Test | Mnemonic::Push | Mnemonic::Bt
        );
    let xchg_rsp = insn.mnemonic() == Mnemonic::Xchg
        && insn.op_count() > 1
        && insn.op1_kind() == OpKind::Register
        && insn.op1_register().full_register() == Register::RSP;
    if xchg_rsp || matches!(insn.mnemonic(), Mnemonic::Leave | Mnemonic::Enter) {
        return None;
    }
    if !writes_rsp {
        return Some(insn.stack_pointer_increment());
    }
    let imm = || -> Option<i32> {
        matches!(
            insn.op1_kind(),
            OpKind::Immediate8to64
                | OpKind::Immediate32to64
                | OpKind::Immediate8
                | OpKind::Immediate32
        )
        .then(|| insn.immediate(1) as i64 as i32)
    };
    match insn.mnemonic() {
        Mnemonic::Sub if insn.op0_register() == Register::RSP => imm().map(|v| -v),
        Mnemonic::Add if insn.op0_register() == Register::RSP => imm(),
        Mnemonic::Lea
            if insn.memory_base() == Register::RSP && insn.memory_index() == Register::None =>
        {
            Some(insn.memory_displacement64() as i64 as i32)
        }
        _ => None,
    }
}

/// The x86-64 encoding number of a 64- or 32-bit general-purpose register.
fn gpr_number(reg: Register) -> Option<u8> {
    let full = reg.full_register();
    let n = full as u32;
    let rax = Register::RAX as u32;
    (full.is_gpr64() && n >= rax && n < rax + 16).then(|| (n - rax) as u8)
}

/// The target of an indirect transfer through its first operand.
fn indirect_target(insn: &Instruction) -> Option<Target> {
    match insn.op0_kind() {
        OpKind::Register => gpr_number(insn.op0_register()).map(Target::Reg),
        OpKind::Memory => {
            if matches!(insn.memory_segment(), Register::FS | Register::GS) {
                return None; // the ucontext does not hold the fs/gs bases
            }
            let size = insn.memory_size().size();
            if size != 8 {
                return None;
            }
            // x86-sem's reading of the operand (base, index, scale,
            // RIP-relative folding, 0x67 address size): the emulator's.
            let operand = x86_sem::MemOperand::of(insn)?;
            Some(Target::Load { operand, size: 8 })
        }
        _ => None,
    }
}

fn condition(cc: ConditionCode) -> Option<Condition> {
    Some(match cc {
        ConditionCode::o => Condition::O,
        ConditionCode::no => Condition::No,
        ConditionCode::b => Condition::B,
        ConditionCode::ae => Condition::Ae,
        ConditionCode::e => Condition::E,
        ConditionCode::ne => Condition::Ne,
        ConditionCode::be => Condition::Be,
        ConditionCode::a => Condition::A,
        ConditionCode::s => Condition::S,
        ConditionCode::ns => Condition::Ns,
        ConditionCode::p => Condition::P,
        ConditionCode::np => Condition::Np,
        ConditionCode::l => Condition::L,
        ConditionCode::ge => Condition::Ge,
        ConditionCode::le => Condition::Le,
        ConditionCode::g => Condition::G,
        ConditionCode::None => return None,
    })
}

/// Turns a transfer into a block end; `None` for an instruction that
/// continues to the next one.
fn classify(insn: &Instruction) -> Option<BlockEnd> {
    let at = insn.ip();
    let fall_through = insn.next_ip();
    let unsupported = Some(BlockEnd::Fail {
        at,
        why: DecodeFailure::Unsupported,
    });
    let dynamic = |kind, target| {
        Some(BlockEnd::Dynamic(BranchForm {
            at,
            fall_through,
            kind,
            target,
        }))
    };
    let near = matches!(insn.op0_kind(), OpKind::NearBranch64);
    match insn.flow_control() {
        FlowControl::Next => None,
        FlowControl::UnconditionalBranch if near => Some(BlockEnd::Direct {
            from: at,
            to: insn.near_branch_target(),
            ret_addr: None,
        }),
        FlowControl::Call if insn.code() == Code::Syscall => {
            dynamic(BranchKind::Syscall, Target::Const(fall_through))
        }
        FlowControl::Call if near => Some(BlockEnd::Direct {
            from: at,
            to: insn.near_branch_target(),
            ret_addr: Some(fall_through),
        }),
        FlowControl::ConditionalBranch if near => {
            let target = Target::Const(insn.near_branch_target());
            // The 0x67 prefix makes jrcxz / loop test ecx instead of rcx.
            let ecx = matches!(
                insn.code(),
                Code::Jecxz_rel8_64
                    | Code::Loop_rel8_64_ECX
                    | Code::Loope_rel8_64_ECX
                    | Code::Loopne_rel8_64_ECX
            );
            match insn.mnemonic() {
                Mnemonic::Jrcxz | Mnemonic::Jecxz => dynamic(BranchKind::Jrcxz { ecx }, target),
                Mnemonic::Loop => dynamic(BranchKind::Loop { zf: None, ecx }, target),
                Mnemonic::Loope => dynamic(
                    BranchKind::Loop {
                        zf: Some(true),
                        ecx,
                    },
                    target,
                ),
                Mnemonic::Loopne => dynamic(
                    BranchKind::Loop {
                        zf: Some(false),
                        ecx,
                    },
                    target,
                ),
                _ => match condition(insn.condition_code()) {
                    Some(c) => dynamic(BranchKind::Jcc(c), target),
                    None => unsupported,
                },
            }
        }
        FlowControl::IndirectBranch => match indirect_target(insn) {
            Some(t) => dynamic(BranchKind::Jmp, t),
            None => unsupported,
        },
        FlowControl::IndirectCall => match indirect_target(insn) {
            Some(t) => dynamic(BranchKind::Call, t),
            None => unsupported,
        },
        FlowControl::Return => match insn.code() {
            Code::Retnq => dynamic(BranchKind::Ret { pop: 0 }, Target::Const(0)),
            Code::Retnq_imm16 => dynamic(
                BranchKind::Ret {
                    pop: insn.immediate16(),
                },
                Target::Const(0),
            ),
            _ => unsupported,
        },
        _ => unsupported,
    }
}

/// Cached blocks per thread: direct-mapped, keyed by start address,
/// invalidated wholesale when the executable mappings change (generation).
pub struct BlockCache {
    slots: Box<[CacheSlot]>,
    hits: u64,
    misses: u64,
}

#[derive(Clone, Copy)]
struct CacheSlot {
    generation: u32,
    block: Block,
}

/// Entries per thread; a power of two. At ~90 bytes an entry this is
/// 180 KiB a traced thread, allocated when the thread is registered.
pub const BLOCK_CACHE_ENTRIES: usize = 2048;

const EMPTY_BLOCK: Block = Block {
    start: u64::MAX,
    end: BlockEnd::Fail {
        at: 0,
        why: DecodeFailure::Unsupported,
    },
    sp_delta: None,
    instructions: 0,
};

impl BlockCache {
    pub fn new() -> BlockCache {
        let empty = CacheSlot {
            generation: 0,
            block: EMPTY_BLOCK,
        };
        BlockCache {
            slots: vec![empty; BLOCK_CACHE_ENTRIES].into_boxed_slice(),
            hits: 0,
            misses: 0,
        }
    }

    fn index(addr: u64) -> usize {
        // Fibonacci hashing spreads nearby addresses across the table.
        (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize & (BLOCK_CACHE_ENTRIES - 1)
    }

    /// The block at `start`, decoded on a miss. `decoded` is set when the
    /// decoder ran (the caller times decoding separately).
    pub fn lookup(
        &mut self,
        code: &mut impl CodeSource,
        start: u64,
        generation: u32,
        insn: &mut Instruction,
        decoded: &mut bool,
    ) -> Block {
        let slot = &mut self.slots[Self::index(start)];
        if slot.block.start == start && slot.generation == generation {
            self.hits += 1;
            *decoded = false;
            return slot.block;
        }
        self.misses += 1;
        *decoded = true;
        let block = decode_block(code, start, insn);
        *slot = CacheSlot { generation, block };
        block
    }

    pub fn hits(&self) -> u64 {
        self.hits
    }

    pub fn misses(&self) -> u64 {
        self.misses
    }
}

impl Default for BlockCache {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests;
