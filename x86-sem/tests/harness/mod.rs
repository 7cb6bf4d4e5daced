//! The native-comparison harness: random and edge-case states for one
//! instruction, run on the CPU and under the core, compared.

#![allow(dead_code)]

pub mod float;
pub mod manual;
pub mod native;
pub mod vectors;

use iced_x86::{FlowControl, Instruction, Mnemonic, OpKind, Register};
use native::{NativeState, CODE, CODE_LEN, DATA, DATA_LEN, ENTRY};
use x86_sem::flag::{DF, STATUS};
use x86_sem::{Cpu, CpuState, DecodeCache, Insn, MemError, Memory, Retired, Stop, Table};

/// The core's view of the harness regions: data and code are real memory
/// at their fixed addresses; anything else faults.
#[derive(Debug, Default)]
pub struct RegionMemory;

fn inside(addr: u64, size: usize) -> bool {
    let end = addr.wrapping_add(size as u64);
    let within = |start: u64, len: usize| addr >= start && end <= start + len as u64 && addr <= end;
    within(DATA, DATA_LEN) || within(CODE, CODE_LEN)
}

impl Memory for RegionMemory {
    fn load(&mut self, addr: u64, size: usize) -> Result<u64, MemError> {
        if !inside(addr, size) {
            return Err(MemError::Fault { addr, write: false });
        }
        let mut b = [0u8; 8];
        // SAFETY: inside a harness region, mapped and held under the lock.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, b.as_mut_ptr(), size) };
        Ok(u64::from_le_bytes(b))
    }

    fn store(&mut self, addr: u64, size: usize, value: u64) -> Result<(), MemError> {
        if !inside(addr, size) {
            return Err(MemError::Fault { addr, write: true });
        }
        // SAFETY: as for load.
        unsafe {
            std::ptr::copy_nonoverlapping(value.to_le_bytes().as_ptr(), addr as *mut u8, size)
        };
        Ok(())
    }

    fn fetch(&mut self, addr: u64, buf: &mut [u8; 15]) -> usize {
        if !(CODE..CODE + CODE_LEN as u64).contains(&addr) {
            return 0;
        }
        let n = ((CODE + CODE_LEN as u64 - addr) as usize).min(15);
        // SAFETY: inside the code region.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), n) };
        n
    }
}

/// The machine the tests run the core on.
pub type TestCpu = Cpu<CpuState, RegionMemory>;

/// xorshift64, seeded per vector line.
pub struct Rng(pub u64);

/// Values where arithmetic, flags and sign handling change behaviour.
const EDGES: [u64; 20] = [
    0,
    1,
    2,
    3,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0x8000,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    0x7fff_ffff_ffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
    u64::MAX - 1,
    0x0123_4567_89ab_cdef,
    0xfedc_ba98_7654_3210,
];

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A mix of edge values, their small neighbours and random values.
    pub fn value(&mut self) -> u64 {
        let r = self.next();
        match r % 8 {
            0..=2 => EDGES[(r >> 8) as usize % EDGES.len()],
            3 => EDGES[(r >> 8) as usize % EDGES.len()]
                .wrapping_add((r >> 32) % 5)
                .wrapping_sub(2),
            4 => r >> (r % 64),
            5 => (r >> 20) & 0xff,
            _ => self.next(),
        }
    }

    pub fn vector(&mut self) -> [u64; 2] {
        match self.below(6) {
            0 => [0, 0],
            1 => [u64::MAX, u64::MAX],
            2 => {
                // Bytes and words at their edges.
                let pick = [0u8, 1, 0x7f, 0x80, 0xff, 0xfe];
                let mut b = [0u8; 16];
                for x in &mut b {
                    *x = pick[self.below(pick.len() as u64) as usize];
                }
                [
                    u64::from_le_bytes(b[..8].try_into().unwrap()),
                    u64::from_le_bytes(b[8..].try_into().unwrap()),
                ]
            }
            _ => [self.next(), self.next()],
        }
    }
}

/// A test case: the initial registers and data region.
#[derive(Clone)]
pub struct Case {
    pub state: CpuState,
    pub data: Vec<u8>,
}

fn gpr_index(r: Register) -> Option<usize> {
    if r.is_gpr() && !matches!(r, Register::AH | Register::CH | Register::DH | Register::BH) {
        Some(r.full_register().number())
    } else {
        None
    }
}

/// Whether the memory operand of `i` is an access the case should aim at
/// the data region (lea and the hints compute an address but touch
/// nothing).
fn accesses_memory(i: &Instruction) -> bool {
    (0..i.op_count()).any(|n| i.op_kind(n) == OpKind::Memory)
        && !matches!(
            i.mnemonic(),
            Mnemonic::Lea
                | Mnemonic::Nop
                | Mnemonic::Prefetchnta
                | Mnemonic::Prefetcht0
                | Mnemonic::Prefetcht1
                | Mnemonic::Prefetcht2
                | Mnemonic::Prefetchw
        )
}

fn is_string(m: Mnemonic) -> bool {
    use Mnemonic::*;
    matches!(
        m,
        Movsb
            | Movsw
            | Movsd
            | Movsq
            | Stosb
            | Stosw
            | Stosd
            | Stosq
            | Lodsb
            | Lodsw
            | Lodsd
            | Lodsq
            | Cmpsb
            | Cmpsw
            | Cmpsd
            | Cmpsq
            | Scasb
            | Scasw
            | Scasd
            | Scasq
    )
}

/// Points the memory operand at `target`: solves the base (or index)
/// register for it. Returns false when the form fixes the address.
fn aim(i: &Instruction, s: &mut CpuState, rng: &mut Rng, target: u64, fs: u64) -> bool {
    let base = i.memory_base();
    let index = i.memory_index();
    if base == Register::RIP
        || base == Register::EIP
        || (base == Register::None && index == Register::None)
    {
        return false;
    }
    let seg = match i.memory_segment() {
        Register::FS => fs,
        Register::GS => DATA,
        _ => 0,
    };
    let a32 = base.is_gpr32() || index.is_gpr32();
    let want = target
        .wrapping_sub(seg)
        .wrapping_sub(i.memory_displacement64());
    let scale = u64::from(i.memory_index_scale());
    // Garbage above bit 31 of 32-bit address registers: the CPU ignores it.
    let garbage = |rng: &mut Rng| if a32 { rng.next() << 32 } else { 0 };
    match (gpr_index(base), gpr_index(index)) {
        (Some(b), Some(x)) if b == x => {
            s.gpr[b] = (want / (1 + scale)) | garbage(rng);
        }
        (Some(b), Some(x)) => {
            let iv = rng.below(16);
            s.gpr[x] = iv | garbage(rng);
            s.gpr[b] = want.wrapping_sub(iv * scale) | garbage(rng);
        }
        (Some(b), None) => s.gpr[b] = want | garbage(rng),
        (None, Some(x)) => s.gpr[x] = (want / scale) | garbage(rng),
        (None, None) => return false,
    }
    true
}

/// A random case for `i`, aimed so that its memory accesses and branch
/// targets mostly land in the harness regions.
pub fn make_case(i: &Instruction, rng: &mut Rng, fs: u64) -> Case {
    let mut s = CpuState::new();
    s.mxcsr = x86_sem::MXCSR_DEFAULT;
    s.x87 = x86_sem::X87::INIT;
    for g in &mut s.gpr {
        *g = rng.value();
    }
    // Vector state only as far as XCR0 enables it: the rest stays zero on
    // both sides.
    let vectors = native::vectors();
    for v in &mut s.vec[..vectors.registers()] {
        for half in v[..vectors.lanes()].chunks_mut(2) {
            half.copy_from_slice(&rng.vector());
        }
    }
    if vectors == native::Vectors::Avx512 {
        for k in &mut s.k {
            *k = match rng.below(4) {
                0 => u64::MAX,
                1 => 0,
                _ => rng.next(),
            };
        }
    }
    s.rflags = 0x202 | (rng.next() & STATUS) | if rng.below(4) == 0 { DF } else { 0 };
    s.fs_base = fs;
    s.gs_base = DATA;
    s.rip = ENTRY;
    let mut data = vec![0u8; DATA_LEN];
    for chunk in data.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next().to_le_bytes()[..chunk.len()]);
    }
    let m = i.mnemonic();
    // The stack is always in the data region.
    s.gpr[4] = DATA + 0x2000 + rng.below(64) * 8;
    if m == Mnemonic::Leave {
        s.gpr[5] = DATA + 0x1000 + rng.below(64) * 8;
    }
    // Shift counts: small ones half the time.
    if rng.below(2) == 0 {
        s.gpr[1] = (s.gpr[1] & !0xff) | rng.below(70);
    }
    if is_string(m) {
        let a32 = matches!(i.op0_kind(), OpKind::MemoryESEDI | OpKind::MemorySegESI)
            || matches!(i.op1_kind(), OpKind::MemoryESEDI | OpKind::MemorySegESI);
        let garbage = |rng: &mut Rng| if a32 { rng.next() << 32 } else { 0 };
        let seg = match i.memory_segment() {
            Register::FS => fs,
            Register::GS => DATA,
            _ => 0,
        };
        s.gpr[6] = (DATA + 0x800 + rng.below(256)).wrapping_sub(seg) | garbage(rng);
        s.gpr[7] = (DATA + 0x1800 + rng.below(256)) | garbage(rng);
        s.gpr[1] = rng.below(24) | garbage(rng);
        if m == Mnemonic::Cmpsb || m == Mnemonic::Scasb {
            // Runs of equal bytes, so that repe/repne stop at varied places.
            let fill = rng.next() as u8;
            for b in &mut data[0x700..0x1a00] {
                if rng.below(4) != 0 {
                    *b = fill;
                }
            }
            s.gpr[0] = (s.gpr[0] & !0xff) | u64::from(fill);
        }
    }
    if accesses_memory(i) {
        let align = if rng.below(4) == 0 { 1 } else { 64 };
        let target = (DATA + 0x100 + rng.below(0x2c00)) & !(align - 1);
        aim(i, &mut s, rng, target, fs);
        straddle_under_mask(i, &mut s, rng, fs);
        // Bit offsets from a register reach outside the operand: keep them
        // near it.
        if matches!(
            m,
            Mnemonic::Bt | Mnemonic::Bts | Mnemonic::Btr | Mnemonic::Btc
        ) && i.op1_kind() == OpKind::Register
        {
            let r = gpr_index(i.op1_register()).unwrap();
            s.gpr[r] = (rng.below(512) as i64 - 256) as u64;
        }
    }
    if m == Mnemonic::Popfq {
        // What popf loads: status flags, DF and ID, never TF or AC.
        let f = 0x202 | (rng.next() & (STATUS | DF | 1 << 21));
        let off = (s.gpr[4] - DATA) as usize;
        data[off..off + 8].copy_from_slice(&f.to_le_bytes());
    }
    if float::is_x87(i) || float::is_sse_fp(i) {
        let mem = accesses_memory(i)
            .then(|| effective_address(i, &s, fs).wrapping_sub(DATA))
            .filter(|&o| o < DATA_LEN as u64)
            .map(|o| o as usize);
        float::fill(i, &mut s, &mut data, rng, mem);
    }
    constrain_division(i, &mut s, &mut data, rng, fs);
    aim_branch(i, &mut s, &mut data, rng, fs);
    Case { state: s, data }
}

/// Sometimes puts a masked vector access across the end of the data
/// region, with only elements inside it enabled: the CPU does not touch
/// (nor fault on) disabled elements, and neither may the core.
fn straddle_under_mask(i: &Instruction, s: &mut CpuState, rng: &mut Rng, fs: u64) {
    if i.op_mask() == Register::None || i.is_broadcast() || rng.below(4) != 0 {
        return;
    }
    let n = i.memory_size().size() as u64;
    let e = i.memory_size().element_size() as u64;
    if e == 0 || n <= e {
        return;
    }
    let inside = 1 + rng.below(n / e - 1);
    if aim(i, s, rng, DATA + DATA_LEN as u64 - inside * e, fs) {
        s.k[i.op_mask().number()] = rng.next() & ((1 << inside) - 1);
    }
}

/// Most divisions get a quotient that fits; some divide by zero or
/// overflow, to check #DE.
fn constrain_division(i: &Instruction, s: &mut CpuState, data: &mut [u8], rng: &mut Rng, fs: u64) {
    let m = i.mnemonic();
    if !matches!(m, Mnemonic::Div | Mnemonic::Idiv) || rng.below(8) == 0 {
        return;
    }
    let bits = if i.op0_kind() == OpKind::Register {
        i.op0_register().size() * 8
    } else {
        i.memory_size().size() * 8
    };
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let mut divisor = rng.value() & mask;
    if divisor == 0 {
        divisor = 3;
    }
    // Write the divisor where the instruction reads it.
    if i.op0_kind() == OpKind::Register {
        let r = i.op0_register();
        if matches!(r, Register::AH | Register::CH | Register::DH | Register::BH) {
            return;
        }
        let n = r.full_register().number();
        s.gpr[n] = (s.gpr[n] & !mask) | divisor;
        if n == 0 || n == 2 {
            return; // dividing by a part of the dividend: leave it random
        }
    } else {
        let a = effective_address(i, s, fs);
        if let Some(off) = a.checked_sub(DATA).filter(|&o| o + 8 <= DATA_LEN as u64) {
            let o = off as usize;
            let n = bits / 8;
            data[o..o + n].copy_from_slice(&divisor.to_le_bytes()[..n]);
        }
    }
    if bits == 8 {
        let ah = if m == Mnemonic::Div {
            rng.below(divisor.max(1))
        } else {
            0
        };
        let al = if m == Mnemonic::Idiv {
            (s.gpr[0] as i8 as i16 as u16 >> 8) as u64
        } else {
            ah
        };
        s.gpr[0] = (s.gpr[0] & !0xff00) | (al << 8);
        return;
    }
    let high = if m == Mnemonic::Div {
        rng.below(divisor)
    } else if (s.gpr[0] >> (bits - 1)) & 1 != 0 {
        mask
    } else {
        0
    };
    s.gpr[2] = (s.gpr[2] & !mask) | high;
}

/// The linear address of the memory operand from `s`.
fn effective_address(i: &Instruction, s: &CpuState, fs: u64) -> u64 {
    let Some(n) = (0..i.op_count()).find(|&n| i.op_kind(n) == OpKind::Memory) else {
        return 0;
    };
    i.virtual_address(n, 0, |r, _, _| {
        Some(match r {
            Register::FS => fs,
            Register::GS => DATA,
            Register::ES | Register::CS | Register::SS | Register::DS => 0,
            _ if r.is_gpr64() => s.gpr[r.number()],
            _ if r.is_gpr32() => s.gpr[r.number()] & 0xffff_ffff,
            _ => return None,
        })
    })
    .unwrap_or(0)
}

/// Indirect jumps, calls and returns go to an int3 in the code region.
fn aim_branch(i: &Instruction, s: &mut CpuState, data: &mut [u8], rng: &mut Rng, fs: u64) {
    let target = CODE + 0x400 + rng.below(0x800);
    let put = |data: &mut [u8], a: u64| {
        if let Some(off) = a.checked_sub(DATA).filter(|&o| o + 8 <= DATA_LEN as u64) {
            data[off as usize..off as usize + 8].copy_from_slice(&target.to_le_bytes());
        }
    };
    match i.flow_control() {
        FlowControl::IndirectBranch | FlowControl::IndirectCall => {
            if i.op0_kind() == OpKind::Register {
                s.gpr[i.op0_register().number()] = target;
            } else {
                put(data, effective_address(i, s, fs));
            }
        }
        FlowControl::Return => put(data, s.gpr[4]),
        _ => {}
    }
}

fn to_native(s: &CpuState) -> NativeState {
    let mut fx = [0u8; 512];
    let x = &s.x87;
    fx[0..2].copy_from_slice(&x.fcw.to_le_bytes());
    fx[2..4].copy_from_slice(&x.fsw.to_le_bytes());
    fx[4] = x.ftw;
    fx[24..28].copy_from_slice(&s.mxcsr.to_le_bytes());
    for (i, r) in x.st.iter().enumerate() {
        fx[32 + 16 * i..40 + 16 * i].copy_from_slice(&r.mantissa.to_le_bytes());
        fx[40 + 16 * i..42 + 16 * i].copy_from_slice(&r.sign_exponent.to_le_bytes());
    }
    NativeState {
        gpr: s.gpr,
        flags: s.rflags,
        pad: [0; 7],
        zmm: s.vec,
        k: s.k,
        fx,
    }
}

/// The x87 unit and MXCSR of an FXSAVE image (`undefined` left 0).
fn from_fxsave(fx: &[u8; 512], regs: &mut CpuState) {
    let u16_at = |o: usize| u16::from_le_bytes([fx[o], fx[o + 1]]);
    regs.mxcsr = u32::from_le_bytes(fx[24..28].try_into().unwrap());
    regs.x87.fcw = u16_at(0);
    regs.x87.fsw = u16_at(2);
    regs.x87.ftw = fx[4];
    regs.x87.undefined = 0;
    for (i, r) in regs.x87.st.iter_mut().enumerate() {
        r.mantissa = u64::from_le_bytes(fx[32 + 16 * i..40 + 16 * i].try_into().unwrap());
        r.sign_exponent = u16_at(40 + 16 * i);
    }
}

/// What one side did.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub regs: CpuState,
    pub data: Vec<u8>,
    pub code: Vec<u8>,
}

/// Runs the case natively. The caller holds the lock.
pub fn run_native(bytes: &[u8], case: &Case) -> (Outcome, native::Ending) {
    native::load_code(bytes);
    native::data().copy_from_slice(&case.data);
    let (n, ending) = native::run(&to_native(&case.state), bytes.len());
    let mut regs = case.state;
    regs.gpr = n.gpr;
    regs.rflags = n.flags;
    from_fxsave(&n.fx, &mut regs);
    let vectors = native::vectors();
    for (k, z) in n.zmm[..vectors.registers()].iter().enumerate() {
        regs.vec[k][..vectors.lanes()].copy_from_slice(&z[..vectors.lanes()]);
    }
    if vectors == native::Vectors::Avx512 {
        regs.k = n.k;
    }
    regs.rip = match ending {
        native::Ending::Landed(a) => a,
        native::Ending::Signal { .. } => ENTRY,
    };
    let out = Outcome {
        regs,
        data: native::data().to_vec(),
        code: native::code().to_vec(),
    };
    (out, ending)
}

/// Runs the case under the core, from `undefined` flags and x87 condition
/// codes. The caller holds the lock.
pub fn run_core(
    table: &Table<TestCpu>,
    cache: &mut DecodeCache<Vec<Insn>>,
    bytes: &[u8],
    case: &Case,
    undefined: u64,
    cc_undefined: u16,
) -> (Outcome, Result<Retired, Stop>) {
    native::load_code(bytes);
    native::data().copy_from_slice(&case.data);
    cache.flush();
    let mut cpu = TestCpu {
        regs: case.state,
        mem: RegionMemory,
    };
    cpu.regs.undefined = undefined;
    cpu.regs.x87.undefined = cc_undefined;
    let r = x86_sem::step(&mut cpu, table, cache);
    let out = Outcome {
        regs: cpu.regs,
        data: native::data().to_vec(),
        code: native::code().to_vec(),
    };
    (out, r)
}

/// A short description of where two byte regions first differ.
pub fn first_byte_difference(region: u64, a: &[u8], b: &[u8]) -> Option<String> {
    let k = a.iter().zip(b).position(|(x, y)| x != y)?;
    Some(format!(
        "memory at {:#x}: {:#04x} vs {:#04x}",
        region + k as u64,
        a[k],
        b[k]
    ))
}
